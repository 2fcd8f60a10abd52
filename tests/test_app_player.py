"""App page tests (collective player): step through a collective, play it, compare with numpy."""

import numpy as np
from app_helpers import APP, metrics, page
from streamlit.testing.v1 import AppTest

from simulator import make_plan


def test_player_steps_through_a_ring_all_reduce_and_ends_equal_to_numpy():
    at = page("player")  # ring all_reduce, 4 ranks, 16 numbers each
    assert {"kind", "algo", "n", "per_rank"} <= {w.key for kind in ("selectbox", "slider", "select_slider")
                                                  for w in at.sidebar.get(kind)}
    m = metrics(at)
    assert m["step"] == "0 of 6" and m["messages in this step"] == "0"  # 2(n-1) steps; 0 = the inputs
    at.slider(key="step").set_value(1).run()
    m = metrics(at)  # step 1 of the ring: each rank sends one of 4 chunks (4 numbers x 8 B) to its neighbour
    assert m["messages in this step"] == "4" and m["most on one link"] == "32 B" and m["bytes on all links"] == "128 B"
    assert len(at.get("arrow_vega_lite_chart") or at.get("vega_lite_chart")) == 2  # buffers and links
    assert not at.table  # the comparison appears at the last step
    at.slider(key="step").set_value(6).run()
    assert "equals numpy's all_reduce" in at.success[0].value
    table = at.table[0].value
    want = sum(100.0 * r + np.arange(16) for r in range(4))
    assert list(table["buffer after the last step"]) == [" ".join(f"{v:g}" for v in want[:8]) + " … (16 numbers)"] * 4
    assert list(table["equal"]) == ["yes"] * 4


def test_player_play_advances_one_step_per_run_and_stops_at_the_last():
    at = page("player")
    at.selectbox(key="algo").set_value("halving_doubling").run()
    last = len(make_plan("all_reduce", "halving_doubling", 4, 16 * 8).steps)
    at.button(key="play").click().run()
    seen = [metrics(at)["step"]]
    while at.session_state["playing"] and len(seen) < 20:  # in the browser the fragment reruns on a timer
        at.run()
        seen.append(metrics(at)["step"])
    assert seen == [f"{k} of {last}" for k in range(1, last + 1)]
    assert not at.session_state["playing"] and "equals numpy's" in at.success[0].value


def test_player_reads_its_configuration_from_the_url_at_16_ranks():
    at = AppTest.from_file(str(APP / "views" / "player.py"), default_timeout=60)
    at.query_params.update({"kind": "reduce_scatter", "algo": "ring", "n": "16", "step": "15"})
    at.run()
    assert not at.exception
    assert at.slider(key="n").value == 16 and at.selectbox(key="kind").value == "reduce_scatter"
    assert metrics(at)["step"] == "15 of 15"  # ring reduce-scatter: n-1 steps
    assert list(at.table[0].value["equal"]) == ["yes"] * 16
    at.selectbox(key="kind").set_value("all_gather").run()
    assert not at.exception and metrics(at)["step"] == "15 of 15"
    at.selectbox(key="kind").set_value("broadcast").run()  # the tree broadcast has fewer steps: the slider follows
    at.selectbox(key="algo").set_value("tree").run()
    last = len(make_plan("broadcast", "tree", 16, 16 * 8).steps)
    assert not at.exception and metrics(at)["step"] == f"{last} of {last}"


def buffer_labels(at) -> tuple[int, list[str], int]:
    """The buffers chart of the page: (label font px, the cells' labels, the number of columns)."""
    import json

    spec = next(json.loads(c.proto.spec) for c in at.get("arrow_vega_lite_chart") or at.get("vega_lite_chart")
                if "buffers after step" in c.proto.spec)
    text = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "text")
    import pyarrow as pa

    chart = next(c for c in at.get("arrow_vega_lite_chart") or at.get("vega_lite_chart")
                 if "buffers after step" in c.proto.spec)
    df = pa.ipc.open_stream(chart.proto.datasets[0].data.data).read_pandas()  # the chart's data, as sent
    return text["mark"]["fontSize"], list(df["label"]), df["slot"].nunique()


def test_player_at_16_ranks_all_to_all_labels_every_cell_at_10_px_or_more():
    at = AppTest.from_file(str(APP / "views" / "player.py"), default_timeout=60)
    at.query_params.update({"kind": "all_to_all", "algo": "direct", "n": "16", "step": "15"})
    at.run()
    assert not at.exception and metrics(at)["step"] == "15 of 15"
    font, labels, columns = buffer_labels(at)
    assert font >= 10 and columns == 16 and len(labels) == 16 * 16  # one block per (rank, source rank)
    grid = [labels[r * 16:(r + 1) * 16] for r in range(16)]
    assert all(grid[r][i] == ("all" if i == r else f"p{r}") for r in range(16) for i in range(16))  # piece r of everyone
    assert list(at.table[0].value["equal"]) == ["yes"] * 16


def test_every_collective_and_algorithm_is_labelled_readably_up_to_16_ranks():
    """Every cell has a label of at most two lines that fits its cell in a 480 px plot at >= 10 px."""
    import player_charts as pc

    from simulator import COLLECTIVE_KINDS, algorithms
    from simulator.collectives.player import replay

    for kind in (k for k in COLLECTIVE_KINDS if k != "barrier"):
        for algo in algorithms(kind):
            for n in (5, 16):
                rep = replay(kind, [100.0 * r + np.arange(16) for r in range(n)], algo)
                for k in range(len(rep.plan.steps) + 1):
                    chart = pc.buffers_chart(rep, k).to_dict()
                    font = next(la for la in chart["layer"] if la["mark"]["type"] == "text")["mark"]["fontSize"]
                    df = pc.buffers_frame(rep, k)
                    columns = df["slot"].nunique()
                    assert font >= pc.MIN_FONT and len(df) == n * columns and df["label"].str.len().min() > 0
                    widest = max(len(line) for lab in df["label"] for line in lab.split("\n"))
                    assert df["label"].str.count("\n").max() <= 1, (kind, algo, n, k)
                    assert widest * pc.CHAR_EM * font <= pc.PLOT_PX / columns, (kind, algo, n, k, widest)


def test_player_steps_once_and_follows_one_chunk_round_the_ring():
    import json

    at = page("player")  # ring all_reduce on 4 ranks: 3 reduce-scatter steps, then 3 all-gather steps
    at.selectbox(key="follow").set_value(2).run()
    assert any(c.value.startswith("Chunk 2 in step 0: the inputs") for c in at.caption)
    at.button(key="step_once").click().run()
    assert at.slider(key="step").value == 1 and not at.session_state["playing"]
    moves = next(c.value for c in at.caption if c.value.startswith("Chunk 2 in step 1:"))
    assert moves.count("→") == 1 and "(added)" in moves  # a ring step moves each chunk once, summed on arrival
    at.slider(key="step").set_value(4).run()  # the all-gather: copies, nothing added
    moves = next(c.value for c in at.caption if c.value.startswith("Chunk 2 in step 4:"))
    assert moves.count("→") == 1 and "(added)" not in moves
    spec = next(json.loads(c.proto.spec) for c in at.get("vega_lite_chart") if "buffers after step" in c.proto.spec)
    framed = [lay for lay in spec["layer"] if lay.get("transform") == [{"filter": "datum.slot == 2"}]]
    assert len(framed) == 1  # the followed chunk framed on every rank
    at.selectbox(key="kind").set_value("broadcast").run()
    assert not at.exception
