"""Figures build from real objects, show what they claim (inspected on the Axes), and save to PNG."""

from math import prod

import pytest
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure

from simulator.collectives.algorithms import make_plan
from simulator.cost.clock import simulate
from simulator.errors import ParasimError
from simulator.layout import Layout
from simulator.mesh import DeviceMesh
from simulator.parallel.schedule_registry import make_schedule
from simulator.parallel.schedule_sim import simulate_schedule
from simulator.program import ProgramBuilder
from simulator.trace import Trace, TraceEvent
from simulator.viz import (
    PHASE_COLORS,
    collective_steps,
    layout_grid,
    memory_breakdown,
    memory_over_time,
    png_bytes,
    schedule_chart,
    schedule_compare,
    sweep_chart,
    timeline,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def toy_pipeline(m=3):
    """Two stages: device 0 forwards and sends, device 1 forwards and backwards; then an AllReduce."""
    b = ProgramBuilder(2, "toy")
    for j in range(m):
        b.compute(0, "fwd", [f"x{j}"], [f"h{j}"], flops=1e9, phase="forward", microbatch=j)
        b.send(0, 1, f"h{j}", nbytes=1_000_000, microbatch=j)
        b.compute(1, "fwd", [f"h{j}"], [f"y{j}"], flops=1e9, phase="forward", microbatch=j)
        b.compute(1, "bwd", [f"y{j}"], [f"g{j}"], flops=2e9, phase="backward", microbatch=j)
    b.collective("all_reduce", [0, 1], "g", nbytes=4_000_000)
    return b.build()


def texts(ax):
    return [t.get_text() for t in ax.texts]


def test_timeline_rows_labels_and_title():
    trace = simulate(toy_pipeline(3))
    fig = timeline(trace)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    names = [t.get_text() for t in ax.get_yticklabels()]
    assert names == ["device 0", "comm", "device 1", "comm"]
    labels = texts(ax)
    for j in range(3):
        assert f"F{j}" in labels and f"B{j}" in labels
    assert f"{trace.bubble_fraction():.1%}" in fig._suptitle.get_text()
    # one background collection per lane plus one per (device, lane, colour) present
    colours = {(e.device, e.lane, PHASE_COLORS["comm"] if e.lane == "comm" else PHASE_COLORS[e.phase])
               for e in trace.events}
    assert len([c for c in ax.collections if isinstance(c, PolyCollection)]) == 4 + len(colours)
    assert png_bytes(fig).startswith(PNG_MAGIC)


def test_timeline_thousands_of_events_is_grouped_and_unlabelled():
    ev = [TraceEvent(d, "compute" if i % 3 else "comm", "op", i * 1e-3, 0.8e-3,
                     "forward" if i % 2 else "backward", microbatch=i % 7) for d in range(16) for i in range(500)]
    fig = timeline(Trace(16, ev))
    png_bytes(fig, dpi=60)
    ax = fig.axes[0]
    assert len(ax.get_yticklabels()) == 32
    assert len(ax.collections) <= 16 * 2 + 16 * 3  # grouped, not one artist per event
    assert texts(ax) == []  # 8000 bars are too narrow to carry labels


def test_timeline_of_empty_trace_says_so():
    fig = timeline(Trace(2))
    assert "empty" in fig.axes[0].texts[0].get_text()


def test_memory_over_time_one_panel_per_device_with_peaks():
    mem = {(0, 0): {"param": 100, "act": 50}, (0, 2): {"param": 100, "act": 80, "grad": 40},
           (1, 2): {"param": 100, "opt": 200}}
    trace = simulate(toy_pipeline(2), memory=mem)
    fig = memory_over_time(trace, capacity_bytes=400)
    assert len(fig.axes) == 2
    assert trace.peak_memory_bytes() == [220, 300]
    assert "peak 220 B" in texts(fig.axes[0]) and "peak 300 B" in texts(fig.axes[1])
    assert png_bytes(fig).startswith(PNG_MAGIC)
    assert "no memory samples" in memory_over_time(simulate(toy_pipeline(1))).axes[0].texts[0].get_text()


@pytest.mark.parametrize("kind,algo,n", [("all_reduce", "ring", 4), ("all_gather", "direct", 3),
                                         ("broadcast", "tree", 5), ("all_to_all", "direct", 4)])
def test_collective_steps_one_cell_per_transfer(kind, algo, n):
    plan = make_plan(kind, algo, n, 4096 * n)
    fig = collective_steps(plan)
    ax = fig.axes[0]
    cells = [p for p in ax.patches if p.get_gid() == "transfer"]
    assert len(cells) == plan.messages
    assert len(ax.get_yticklabels()) == len(plan.steps)
    assert [t.get_text() for t in ax.get_xticklabels()] == [f"rank {r}" for r in range(n)]
    reduced = sum(t.reduce for s in plan.steps for t in s.transfers)
    assert sum(1 for c in cells if c.get_hatch()) == reduced
    assert png_bytes(fig).startswith(PNG_MAGIC)


def test_collective_steps_ring_labels_name_chunk_and_source():
    plan = make_plan("all_reduce", "ring", 4, 4096)
    labels = texts(collective_steps(plan).axes[0])
    first = plan.steps[0].transfers[0]
    assert f"+c{first.dst_chunk}←{first.src}" in labels
    assert "6 steps" in collective_steps(plan)._suptitle.get_text()


def test_collective_steps_label_every_cell_readably_up_to_16_ranks():
    """At 16 ranks, for every collective and algorithm: every cell that receives something has a
    label, inside its cell, at least 10 px tall when the figure is shown 850 px wide (the app at 1280 px)."""
    from simulator import COLLECTIVE_KINDS, algorithms
    from simulator.viz.plans import LABEL_PX, SHOWN_PX

    for kind in (k for k in COLLECTIVE_KINDS if k != "barrier"):
        for algo in algorithms(kind):
            plan = make_plan(kind, algo, 16, 16 * 8 * 16)
            fig = collective_steps(plan, max_steps=12)
            ax = fig.axes[0]
            fig.canvas.draw()
            shown = SHOWN_PX / fig.bbox.width  # display px per figure px
            labels = [t for t in ax.texts if t.get_gid() == "label"]
            receiving = {(s, t.dst) for s, step in enumerate(plan.steps[:12]) for t in step.transfers}
            assert len(labels) >= len(receiving), (kind, algo)
            assert min(t.get_fontsize() for t in labels) * fig.dpi / 72 * shown >= LABEL_PX - 1e-9
            cell_px = ax.transData.transform((0.92, 0))[0] - ax.transData.transform((0, 0))[0]
            widest = max(t.get_window_extent().width for t in labels)
            assert widest <= cell_px, (kind, algo, widest, cell_px)  # every label inside one rank's cell
    assert [t.get_text() for t in collective_steps(make_plan("all_to_all", "direct", 16, 2048)).axes[0].texts
            if t.get_gid() == "label"][:2] == ["←15", "←0"]  # an all-to-all names the source only


@pytest.mark.parametrize("dims,partial,shape", [(["dp", "tp"], (), (8, 16)), (["dp", None], (), (4, 6)),
                                                ([None, "tp"], "dp", (8, 16)), ([("dp", "tp")], (), (16,))])
def test_layout_grid_blocks_and_holders(dims, partial, shape):
    layout = Layout(DeviceMesh({"dp": 2, "tp": 4}), dims, partial)
    fig = layout_grid(layout, shape)
    ax = fig.axes[0]
    blocks = [p for p in ax.patches if p.get_gid() == "block"]
    copies = [p for p in ax.patches if p.get_gid() == "copy"]
    assert len(blocks) == prod(layout.splits)  # one block per distinct shard, never one per copy
    from itertools import product
    held = [layout.devices_holding(b) for b in product(*(range(c) for c in layout.splits))]
    assert len(copies) == sum(len(h) for h in held if len(h) > 1)  # a chip per copy of a replicated shard
    holders = sorted(t.get_text() for t in ax.texts if t.get_gid() == "holders")
    expected = sorted(f"rank {h[0]}" if len(h) == 1 else f"ranks {', '.join(map(str, h))}\n{len(h)} copies"
                      for h in held)
    assert holders == expected
    assert sorted(t.get_text() for t in ax.get_legend().get_texts()) == sorted(f"rank {r}" for r in range(8))
    assert layout.notation() in fig._suptitle.get_text()
    assert png_bytes(fig).startswith(PNG_MAGIC)


def test_layout_grid_axis_labels_say_how_each_dimension_is_cut():
    ax = layout_grid(Layout(DeviceMesh({"dp": 2, "tp": 4}), [None, "tp"]), (8, 16)).axes[0]
    assert ax.get_xlabel() == "dim 1 (16) · cut in 4" and ax.get_ylabel() == "dim 0 (8) · not cut"
    assert "each grey block is one shard, its copies listed" in ax.get_title()  # replicated over dp


def test_layout_grid_names_only_the_axes_that_cut():
    fig = layout_grid(Layout.from_strategy((2, 1), 8), (8, 8))
    assert fig._suptitle.get_text().startswith("X[I_d0, J]")  # d1 has size 1: J is not cut


def test_layout_grid_refuses_uneven_cut():
    layout = Layout(DeviceMesh({"dp": 2, "tp": 4}), [None, "tp"])
    with pytest.raises(ParasimError, match="cannot be split 4 ways"):
        layout_grid(layout, (4, 6))


def test_schedule_chart_rows_labels_and_bubble():
    res = simulate_schedule(make_schedule("1f1b", 4, 8))
    fig = schedule_chart(res)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"stage {d}" for d in range(4)]
    n_actions = sum(len(r) for r in res.schedule.actions)
    assert len(ax.texts) == n_actions
    assert "F7" in texts(ax) and "BW0" in texts(ax)
    assert f"bubble {res.bubble_fraction:.1%}" in ax.get_title(loc="left")
    assert f"peak in flight {max(res.peak_in_flight)}" in ax.get_title(loc="left")
    assert png_bytes(fig).startswith(PNG_MAGIC)


def test_schedule_compare_shares_the_time_axis():
    names = ["gpipe", "1f1b", "zb-h1", "zb-h2"]
    results = [simulate_schedule(make_schedule(n, 4, 8)) for n in names]
    fig = schedule_compare(results)
    assert len(fig.axes) == 4
    assert len({ax.get_xlim() for ax in fig.axes}) == 1
    for ax, name in zip(fig.axes, names):
        assert ax.get_title(loc="left").startswith(name)
    zb = fig.axes[2]
    assert any(t.startswith("W") for t in texts(zb))


def test_memory_breakdown_marks_oom_bars():
    bars = {"ZeRO-0": {"param": 30e9, "grad": 30e9, "opt": 40e9}, "ZeRO-3": {"param": 5e9, "act": 10e9}}
    fig = memory_breakdown(bars, capacity_bytes=80e9)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["ZeRO-0", "ZeRO-3"]
    assert len([p for p in ax.patches if p.get_gid() == "oom"]) == 1
    assert any(t.startswith("OOM") for t in texts(ax))
    assert "1 over capacity" in fig._suptitle.get_text()
    assert len(ax.lines) == 1  # the capacity line
    assert png_bytes(fig).startswith(PNG_MAGIC)


def test_sweep_chart_one_line_per_series():
    fig = sweep_chart([2, 4, 8], {"ring": [1e-3, 2e-3, 3e-3], "tree": [1e-3, 1.5e-3, 2e-3]},
                      xlabel="ranks", ylabel="time", y_is_time=True, logx=True)
    ax = fig.axes[0]
    assert len(ax.lines) == 2
    assert ax.get_ylabel() == "time (ms)"


def test_schedule_trace_matches_the_timed_schedule():
    from simulator.viz import schedule_trace
    res = simulate_schedule(make_schedule("gpipe", 3, 4))
    trace = schedule_trace(res, time_unit_s=1.0)
    assert trace.n_devices == 3
    assert len(trace.events) == sum(len(r) for r in res.timeline)
    assert trace.makespan_s == pytest.approx(res.makespan, rel=1e-9)
    assert trace.bubble_fraction() == pytest.approx(res.bubble_fraction, rel=1e-9)
    assert "F0" in trace.to_csv()


def test_device_breakdown_shares_sum_to_one_per_device():
    from simulator.viz import device_breakdown
    trace = simulate(toy_pipeline(3))
    fig = device_breakdown(trace)
    ax = fig.axes[0]
    bars = ax.patches
    assert len(bars) == 5 * trace.n_devices  # compute, exposed comm, bubble, other idle, optimizer
    for d in range(trace.n_devices):
        total = sum(b.get_width() for b in bars[d::trace.n_devices])
        assert total == pytest.approx(1.0, rel=1e-9)
    assert f"bubble {trace.bubble_fraction():.1%}" in fig._suptitle.get_text()


def test_memory_breakdown_accepts_cost_model_keys():
    fig = memory_breakdown({"ZeRO-1": {"model_state": 40e9, "activations": 20e9, "logits": 5e9}}, 80e9)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "model states (params + grads + optimizer)" in labels and "activations" in labels


def test_timeline_marks_lost_work_failure_recovery_and_replays():
    from simulator import MLPConfig, TrainConfig
    from simulator.faults import Fault, train_resilient

    cfg = TrainConfig(MLPConfig(8, 16, 4, 4), strategy="pp", devices=2, microbatches=2, global_batch=8, steps=3)
    res = train_resilient(cfg, faults=(Fault(1, 1),), checkpoint_every=1)
    trace = res.train.trace
    ax = timeline(trace).axes[0]
    faces = {tuple(round(c, 3) for c in col.get_facecolor()[0]) for col in ax.collections}
    from matplotlib.colors import to_rgba
    for phase in ("lost", "failure", "recovery"):
        assert any(e.phase == phase for e in trace.events)
        assert tuple(round(c, 3) for c in to_rgba(PHASE_COLORS[phase])) in faces
    hatched = [c for c in ax.collections if c.get_gid() == "replayed"]
    assert hatched and all(c.get_hatch() for c in hatched)  # the replayed step's bars
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"lost", "failure", "recovery", "replayed"} <= set(labels)


def test_goodput_chart_marks_the_optimum():
    from simulator.cost.goodput import FailureModel, daly_interval_s, goodput_curve, young_interval_s
    from simulator.viz import goodput_chart

    fm = FailureModel(1024, 50_000, 2.4e12, 50e9, restart_s=600)
    curve = goodput_curve(fm)
    fig = goodput_chart(curve, young_s=young_interval_s(fm), daly_s=daly_interval_s(fm))
    ax = fig.axes[0]
    line = next(l for l in ax.lines if l.get_gid() == "goodput")
    ys = list(line.get_ydata())
    best = max(curve, key=lambda g: g.goodput)
    assert max(ys) == pytest.approx(best.goodput * 100, rel=1e-12)
    assert ys[0] < max(ys) > ys[-1]  # too often and too rarely both lose
    assert f"{best.goodput:.1%}" in fig._suptitle.get_text()
    assert any(t.get_text().startswith("Young") for t in ax.get_legend().get_texts())
    assert png_bytes(fig).startswith(PNG_MAGIC)
