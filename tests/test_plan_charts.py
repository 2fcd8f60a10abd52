"""app/plan_charts.py: the Collectives page's steps grid holds the plan's transfers, labelled as
simulator.viz.collective_steps labels them."""

import pytest
from app_helpers import APP  # noqa: F401  (puts app/ on the path)
from plan_charts import LABELLED_RANKS, steps_spec

from simulator.collectives import make_plan
from simulator.units import fmt_bytes
from simulator.viz.plans import incoming_label


def layer(spec, mark: str, n: int = 0) -> list[dict]:
    """The data of the `n`-th layer drawing `mark`."""
    found = [x for x in spec["layer"] if x["mark"]["type"] == mark]
    return found[n]["data"]["values"]


@pytest.mark.parametrize("kind,algo,n", [("all_reduce", "ring", 4), ("all_reduce", "halving_doubling", 8),
                                         ("all_to_all", "direct", 4), ("broadcast", "tree", 5),
                                         ("all_gather", "ring", 16)])
def test_every_transfer_is_one_sub_cell_with_its_chunk_direction_and_reduction(kind, algo, n):
    plan = make_plan(kind, algo, n, 1 << 20)
    spec = steps_spec(plan)
    moves = layer(spec, "rect", 1)
    transfers = [(s, t) for s, step in enumerate(plan.steps) for t in step.transfers]
    assert len(moves) == len(transfers) and len(layer(spec, "rect", 0)) == n * len(plan.steps)  # and every empty cell
    for (s, t), m in zip(sorted(transfers, key=lambda x: (x[0], x[1].dst)), moves):
        assert (m["step"], m["reduce"]) == (s + 1, t.reduce)
        assert f"rank {t.dst} {'adds' if t.reduce else 'copies'} chunk {t.src_chunk} of rank {t.src}" in m["what"]
        row = f"{s + 1}" + (f" {plan.steps[s].label}" if plan.steps[s].label else "")  # the step's band
        assert t.dst <= m["x"] < m["x2"] <= t.dst + 1 and m["y"] == row  # inside its cell
    assert [x["text"] for x in layer(spec, "text")] == [fmt_bytes(step.nbytes) for step in plan.steps]
    assert f"{len(plan.steps)} steps" in spec["title"]["text"]
    texts = [x for x in spec["layer"] if x["mark"]["type"] == "text"]
    if n <= LABELLED_RANKS:   # one label per cell that receives, the figure's own text
        want = [incoming_label([t for t in step.transfers if t.dst == r], kind == "all_to_all")
                for step in plan.steps for r in range(n) if any(t.dst == r for t in step.transfers)]
        assert [x["label"] for x in texts[1]["data"]["values"]] == want
    else:                     # 16 ranks: the labels live in the hover
        assert len(texts) == 1


def test_a_reduction_is_framed_dark_and_a_copy_white():
    spec = steps_spec(make_plan("all_reduce", "ring", 4, 1 << 20))
    enc = spec["layer"][1]["encoding"]
    assert enc["stroke"] == {"condition": {"test": "datum.reduce", "value": "#222222"}, "value": "white"}
    moves = layer(spec, "rect", 1)
    assert {m["reduce"] for m in moves[:12]} == {True} and {m["reduce"] for m in moves[12:]} == {False}  # RS, then AG
