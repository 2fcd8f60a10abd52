"""Draw every lesson's figures with parasim and save them as PNGs in lessons/NN_topic/figures/.

    python lessons/make_figures.py          # all lessons (or: parasim lesson figures)
    python lessons/make_figures.py 05 06    # some lessons
    python lessons/make_figures.py --check  # exit 1 if a figure is not what the code draws now

Next to each NAME.png goes NAME.json: the data the figure shows, read back from the drawn figure
(every line's points, every bar's and block's rectangle, every title, label, legend entry and
text). `--check` redraws without saving and compares that data with the JSON (numbers to 1e-6
relative), so a figure that the current code would draw differently fails (tests/test_lessons.py).

Only the public API is used (`simulator` and `simulator.viz`); sizes are tiny so the whole run
takes seconds. Lessons whose API is not in parasim yet are skipped with a note.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import simulator as ps
from simulator import viz
from simulator.viz.figure_data import figure_data, same

HERE = Path(__file__).resolve().parent
MODE = {"check": False, "stale": []}


def save(folder: str, name: str, fig) -> None:
    """Write NAME.png and NAME.json (or, with --check, compare the data with NAME.json)."""
    import matplotlib.pyplot as plt

    out = HERE / folder / "figures"
    data_file = (out / name).with_suffix(".json")
    data = json.loads(json.dumps(figure_data(fig)))
    if MODE["check"]:
        stored = json.loads(data_file.read_text(encoding="utf-8")) if data_file.is_file() else None
        if stored is None or not same(stored, data):
            MODE["stale"].append(str((out / name).relative_to(HERE)))
        plt.close(fig)
        return
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / name, dpi=110, bbox_inches="tight")
    data_file.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    plt.close(fig)
    print("wrote", (out / name).relative_to(HERE), "and its .json")


def tiny_gpt(layers: int = 4) -> ps.GPTConfig:
    return ps.GPTConfig(layers=layers, hidden=32, heads=4, seq_len=16, vocab=32)


def tiny_mlp(layers: int = 4) -> ps.MLPConfig:
    return ps.MLPConfig(in_dim=16, hidden=16, layers=layers, classes=16)


def clock() -> ps.SimpleDeviceModel:
    """A slow teaching device so that compute and communication of tiny models are both visible:
    1 GFLOP/s, 1 GB/s links with 1 us latency."""
    return ps.SimpleDeviceModel(flops_per_s=1e9, memory_bandwidth_Bps=1e12, latency_s=1e-6, bandwidth_Bps=1e9)


def lesson_01() -> None:
    f = "01_mesh_and_sharding"
    mesh = ps.DeviceMesh({"dp": 2, "tp": 4})
    save(f, "x_dp_tp.png", viz.layout_grid(ps.Layout(mesh, ["dp", "tp"]), (8, 8), name="X"))
    save(f, "w_tp.png", viz.layout_grid(ps.Layout(mesh, [None, "tp"]), (8, 8), name="W"))
    save(f, "strategy_2_2_on_8.png", viz.layout_grid(ps.Layout.from_strategy((2, 2), 8), (8, 8), name="X"))


def lesson_02() -> None:
    f = "02_collectives_by_hand"
    save(f, "ring_all_reduce_steps.png", viz.collective_steps(ps.make_plan("all_reduce", "ring", 4, 4096)))
    ns = [2, 4, 8, 16, 32, 64]
    link = lambda a, b: (5e-6, 100e9)
    series = {algo: [ps.plan_time(ps.make_plan("all_reduce", algo, n, 2**20), link) for n in ns]
              for algo in ("ring", "tree", "halving_doubling")}
    save(f, "all_reduce_time_vs_n.png", viz.sweep_chart(ns, series, xlabel="ranks n", ylabel="time",
                                                        title="all-reduce of 1 MiB, alpha-beta model",
                                                        logx=True, y_is_time=True))


def lesson_03() -> None:
    f = "03_data_parallelism"
    r = ps.train(ps.TrainConfig(tiny_mlp(), strategy="dp", devices=4, global_batch=16), device_model=clock())
    save(f, "dp_timeline.png", viz.timeline(r.trace, title="data parallel, 4 replicas: compute, then all-reduce"))
    r = ps.train(ps.TrainConfig(tiny_mlp(), strategy="dp", devices=4, global_batch=16, bucket_mb=0.004),
                 device_model=clock())
    save(f, "dp_buckets_timeline.png", viz.timeline(r.trace, title="gradients in 4 KB buckets: all-reduce overlaps the backward"))


def lesson_04() -> None:
    f = "04_layerwise_model_parallelism"
    r = ps.train(ps.TrainConfig(tiny_mlp(), strategy="layer", devices=4, global_batch=16), device_model=clock())
    save(f, "layerwise_timeline.png", viz.timeline(r.trace, title="layer-wise model parallel, 4 devices"))
    save(f, "layerwise_schedule.png", viz.schedule_chart(ps.simulate_schedule(ps.make_schedule("gpipe", 4, 1))))


def lesson_05() -> None:
    f = "05_pipeline_bubbles"
    runs = [ps.simulate_schedule(ps.make_schedule(n, 4, 8), t_f=1, t_b=2, t_w=0) for n in ("gpipe", "1f1b")]
    save(f, "gpipe_vs_1f1b.png", viz.schedule_compare(runs))
    ms = [1, 2, 4, 8, 16, 32]
    series = {f"p={p}": [ps.simulate_schedule(ps.make_schedule("1f1b", p, m)).bubble_fraction for m in ms]
              for p in (2, 4, 8)}
    save(f, "bubble_vs_m.png", viz.sweep_chart(ms, series, xlabel="micro-batches m", ylabel="bubble fraction",
                                               title="1F1B bubble (p-1)/(m+p-1)", logx=True))


def lesson_06() -> None:
    f = "06_interleaving_zero_bubble"
    runs = [ps.simulate_schedule(ps.make_schedule("1f1b", 4, 8), t_f=1, t_b=2, t_w=0),
            ps.simulate_schedule(ps.make_schedule("interleaved", 4, 8, 2), t_f=0.5, t_b=1, t_w=0)]
    save(f, "interleaved.png", viz.schedule_compare(runs))
    runs = [ps.simulate_schedule(ps.make_schedule(n, 4, 8), t_f=1, t_b=1, t_w=1) for n in ("1f1b", "zb-h1", "zb-h2")]
    save(f, "zero_bubble.png", viz.schedule_compare(runs))


def lesson_07() -> None:
    f = "07_tensor_parallelism"
    mesh = ps.DeviceMesh({"tp": 4})
    save(f, "A_column_parallel.png", viz.layout_grid(ps.Layout(mesh, [None, "tp"]), (8, 16), name="A"))
    save(f, "B_row_parallel.png", viz.layout_grid(ps.Layout(mesh, ["tp", None]), (16, 8), name="B"))
    r = ps.train(ps.TrainConfig(tiny_gpt(2), strategy="tp", devices=2, tp=2, global_batch=4), device_model=clock())
    save(f, "tp_timeline.png", viz.timeline(r.trace, title="tensor parallel GPT, t=2: all-reduces on the critical path"))


def lesson_08() -> None:
    f = "08_zero_and_memory"
    psi, nd = 7.5e9, 64
    bars = {"DP": {"param": 2 * psi, "grad": 2 * psi, "opt": 12 * psi},
            "ZeRO-1": {"param": 2 * psi, "grad": 2 * psi, "opt": 12 * psi / nd},
            "ZeRO-2": {"param": 2 * psi, "grad": 2 * psi / nd, "opt": 12 * psi / nd},
            "ZeRO-3": {"param": 2 * psi / nd, "grad": 2 * psi / nd, "opt": 12 * psi / nd}}
    save(f, "zero_stages_7.5b.png", viz.memory_breakdown(bars, capacity_bytes=ps.get_hardware("a100-80gb").memory_bytes,
                                                         title="7.5B parameters on 64 GPUs, mixed-precision Adam"))
    r = ps.train(ps.TrainConfig(tiny_mlp(), strategy="zero3", devices=4, global_batch=16), device_model=clock())
    save(f, "zero3_memory.png", viz.memory_over_time(r.trace, devices=[0, 1]))
    # Megatron-LM's count for Llama 3 8B (s = 8192, b = 1) on 8 H100s: 18 bytes per parameter
    h100 = ps.get_hardware("h100-sxm")
    setups = {"DP": dict(dp=8), "dist. optimizer": dict(dp=8, zero_stage=1), "ZeRO-2": dict(dp=8, zero_stage=2),
              "ZeRO-3": dict(dp=8, zero_stage=3), "dist. opt.\nt2 + SP": dict(tp=2, dp=4, zero_stage=1,
                                                                             sequence_parallel=True)}
    bars = {}
    for label, kw in setups.items():
        cfg = ps.ParallelConfig(global_batch=kw["dp"], recompute="selective", **kw)
        m = ps.memory_report("llama3-8b", cfg, h100)
        bars[label] = {"param": m.parameter_bytes, "grad": m.gradient_bytes, "opt": m.optimizer_bytes,
                       "act": m.activation_bytes + m.logits_bytes + m.allowance_bytes, "other": m.buffer_bytes}
    save(f, "megatron_llama3_8b.png", viz.memory_breakdown(bars, capacity_bytes=h100.memory_bytes,
                                                           title="Llama 3 8B, s=8192, 8 x H100 80GB (Megatron-LM's count)"))


def lesson_09() -> None:
    f = "09_hybrid_3d_parallelism"
    model = ps.get_model("gpt3-175b")
    configs = {"t8 p8 d16": dict(tp=8, pp=8, dp=16), "t8 p8 d16 +SP sel.": dict(tp=8, pp=8, dp=16, sequence_parallel=True,
                                                                              recompute="selective"),
               "t4 p16 d16": dict(tp=4, pp=16, dp=16), "t8 p16 d8": dict(tp=8, pp=16, dp=8),
               "t2 p32 d16": dict(tp=2, pp=32, dp=16)}
    bars = {}
    for label, kw in configs.items():
        r = ps.estimate(model, ps.ParallelConfig(micro_batch_size=1, global_batch=1536, **kw), "a100-80gb")
        bars[f"{label}\nMFU {r.mfu:.0%}"] = r.memory.by_category()  # the check's total
    save(f, "gpt3_memory.png", viz.memory_breakdown(bars, capacity_bytes=ps.get_hardware("a100-80gb").memory_bytes,
                                                    title="GPT-3 175B on 1024 A100-80GB, batch 1536"))


def lesson_10() -> None:
    f = "10_mindspore_semi_auto"
    x = ps.Layout.from_device_matrix([2, 4, 1], [2, 1])  # MatMul ((2, 4), (4, 1)): X map [2, 1]
    w = ps.Layout.from_device_matrix([2, 4, 1], [1, 0])  # W map [1, 0]
    save(f, "x_2_4.png", viz.layout_grid(x, (8, 8), name="X"))
    save(f, "w_4_1.png", viz.layout_grid(w, (8, 4), name="W"))


def lesson_11() -> None:
    f = "11_auto_parallel_search"
    found = ps.search_configs("megatron-18.4b", "a100-80gb", 64, 256, recomputes=("selective",),
                              micro_batch_sizes=(1, 2), top=6)
    bars = {f"t{c.config.tp} p{c.config.pp} d{c.config.dp} b{c.config.micro_batch_size}\n{c.result.step_time_s:.2f} s":
            {"states": c.result.memory.model_state_bytes,
             "act": c.result.memory.activation_bytes + c.result.memory.logits_bytes}
            for c in found}  # the capacity line is the one the search used (the device's reported memory)
    save(f, "top_configs.png", viz.memory_breakdown(bars, capacity_bytes=found[0].result.memory.capacity_bytes,
                                                    title="18.4B on 64 A100s: the 6 fastest configurations that fit"))
    ns = [2 ** k for k in range(3, 17, 2)]  # batch rows of an MLP with 1024 x 1024 weights
    model, series = ps.OpCostModel(), {"searched (dynamic programming)": [], "data parallel": []}
    for n in ns:
        net, _ = ps.auto.mlp_network(n=n, d=1024, f=1024, c=16, bias=False, x_grad=True)
        ctx = ps.AutoParallelContext("auto_parallel", 8, search_mode="dynamic_programming", cost_model=model)
        series["searched (dynamic programming)"].append(ps.auto_search(net, ctx).objective)
        net, _ = ps.auto.mlp_network(n=n, d=1024, f=1024, c=16, bias=False, x_grad=True)
        plan = ps.explain(net, ps.AutoParallelContext("data_parallel", 8)).plan
        series["data parallel"].append(ps.plan_cost(plan, model).objective)
    save(f, "op_search_vs_batch.png",
         viz.sweep_chart(ns, series, xlabel="batch rows n (weights 1024 x 1024)", ylabel="objective (step time)",
                         title="MLP on 8 A100s: the operator-level search shards weights until the batch dominates",
                         logx=True, y_is_time=True))


def lesson_12() -> None:
    f = "12_faults_and_checkpoints"
    cfg = ps.TrainConfig(tiny_gpt(2), strategy="dp", devices=2, global_batch=4, steps=4)
    r = ps.train_resilient(cfg, faults=ps.parse_faults("kill:1@3#40"), checkpoint_every=2, replicas=False,
                           device_model=clock())
    save(f, "recovered_timeline.png",
         viz.timeline(r.train.trace, labels=False,
                      title="device 1 dies in step 3: lost work (red), restore from the step-2 checkpoint, "
                            "steps 2-3 replayed (hatched)"))
    fm = ps.FailureModel(1536, 50_000.0, 175e9 * 14, 50e9, restart_s=600.0)  # GPT-3 175B on 1536 GPUs
    curve = ps.goodput_curve(fm, n_points=40)
    xs = [g.interval_s / 60 for g in curve]
    save(f, "goodput_vs_interval.png",
         viz.sweep_chart(xs, {"goodput": [g.goodput for g in curve],
                              "checkpoint cost C/tau": [g.checkpoint_overhead for g in curve],
                              "lost work (tau+C)/2M": [g.lost_work for g in curve]},
                         xlabel="checkpoint interval tau (minutes)", ylabel="fraction of wall time",
                         title=f"GPT-3 on 1536 GPUs, C = {fm.checkpoint_time_s:.0f} s, M = "
                               f"{fm.system_mtbf_s / 3600:.1f} h: Young's sqrt(2CM) = "
                               f"{ps.young_interval_s(fm) / 60:.0f} min", logx=True))


def lesson_13() -> None:
    f = "13_context_parallelism"
    save(f, "ring_steps.png", viz.ring_chart(16, 4))
    gpt = ps.GPTConfig(layers=2, hidden=16, heads=8, seq_len=32, vocab=32)
    cps = [1, 2, 4, 8]
    series = {}
    for kind in ("p2p", "a2a"):
        runs = [ps.train(ps.TrainConfig(gpt, strategy="cp", devices=c, cp=c, cp_comm_type=kind, global_batch=4),
                         device_model=clock()) for c in cps]
        label = {"p2p": "ring", "a2a": "all-to-all"}[kind]
        series[f"{label}: measured"] = [max(s.bytes_by_category.get("act", 0) for s in r.trace.memory) / 1e3
                                       for r in runs]
        series[f"{label}: blocks, formula"] = [gpt.layers * ps.block_activation_bytes(gpt, 4, c, kind) / 1e3
                                              for c in cps]
    save(f, "activations_vs_cp.png",
         viz.sweep_chart(cps, series, xlabel="context-parallel degree c", ylabel="activation kB per device (peak)",
                         title="A 32-token GPT: activations per device fall as 1/c", logx=True))


def lesson_14() -> None:
    f = "14_planning_a_5d_run"
    model = ps.get_model("llama3-8b", seq=131072)
    bars = {}
    for c in (1, 2, 4, 8):
        r = ps.estimate(model, ps.ParallelConfig(tp=8, cp=c, dp=16 // c, global_batch=16, recompute="selective",
                                                 sequence_parallel=True), "h100-sxm")
        bars[f"c={c}, d={16 // c}"] = r.memory.by_category()
    save(f, "llama3_8b_128k_memory.png",
         viz.memory_breakdown(bars, capacity_bytes=ps.get_hardware("h100-sxm").memory_bytes,
                              title="Llama-3-8B at 128k tokens on 128 H100s, t=8+SP"))
    moe = ps.get_model("llama3-8b", seq=32768, num_experts=8, moe_router_topk=2)
    eps, runs = [1, 2, 4, 8], []
    for e in (1, 2, 4, 8):
        runs.append(ps.estimate(moe, ps.ParallelConfig(tp=4, cp=2, dp=8, ep=e, global_batch=16, recompute="selective",
                                                       sequence_parallel=True), "h100-sxm"))
    save(f, "moe_ep.png",
         viz.sweep_chart(eps, {"memory per GPU / 100 GB": [r.memory_per_gpu_bytes / 100e9 for r in runs],
                               "expert all-to-all s per step": [r.comm_time_by_kind.get("expert_all_to_all", 0.0)
                                                                for r in runs],
                               "data-parallel sync s per step": [r.comm_time_by_kind.get("data_parallel", 0.0)
                                                                 for r in runs]},
                         xlabel="expert-parallel degree e", ylabel="GB / 100, or seconds",
                         title="8-expert Llama-3-8B, 32k tokens, t=4 c=2 d=8: e buys memory with all-to-all",
                         logx=True))


def main(argv: list[str]) -> int:
    MODE["check"], MODE["stale"] = "--check" in argv, []
    figures = {name[len("lesson_"):]: fn for name, fn in globals().items() if name.startswith("lesson_")}
    wanted = [a.zfill(2) for a in argv if a != "--check"] or sorted(figures)
    if unknown := [k for k in wanted if k not in figures]:
        print(f"error: no figures for lesson {unknown[0]}; known: {', '.join(sorted(figures))}", file=sys.stderr)
        return 2
    for key in wanted:
        figures[key]()
    if MODE["check"]:
        for name in MODE["stale"]:
            print(f"stale: {name} (the code now draws it differently; run python lessons/make_figures.py)")
        print(f"checked the figures of {len(wanted)} lesson(s): {len(MODE['stale'])} stale")
        return 1 if MODE["stale"] else 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
