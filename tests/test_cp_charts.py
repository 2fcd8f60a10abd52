"""app/cp_charts.py: the Context page's chunks and ring steps hold the load-balanced split and
every ring step of simulator.parallel.cp_split, as simulator.viz.ring_chart draws them."""

import pytest
from app_helpers import APP  # noqa: F401  (puts app/ on the path)
from cp_charts import COMPACT_ABOVE, ring_spec

from simulator.parallel.cp_split import ring_steps
from simulator.viz.style import device_color


@pytest.mark.parametrize("seq,cp", [(16, 1), (32, 2), (32, 4), (64, 8)])
def test_the_chunks_and_every_ring_step_with_its_block_and_pairs(seq, cp):
    spec = ring_spec(seq, cp)
    values = spec["layer"][0]["data"]["values"]
    chunks, cells = values[:2 * cp], values[2 * cp:]
    # device i holds chunks i and 2cp-1-i, each half a step wide, in the device's colour
    owner = {round((c["x"] - 0.02) * 2): c["color"] for c in chunks}
    assert owner == {c: device_color(min(c, 2 * cp - 1 - c)) for c in range(2 * cp)}
    steps = ring_steps(seq, cp)
    assert len(cells) == cp * cp == len(steps)
    full = max(r["pairs"] for r in steps)
    for r, cell in zip(steps, cells):
        assert r["step"] <= cell["x"] < cell["x2"] <= r["step"] + 1 and cell["y"].startswith(f"device {r['device']} (")
        assert cell["color"] == device_color(r["kv_of"]) and cell["opacity"] == pytest.approx(0.25 + 0.75 * r["pairs"] / full)
        assert f"{r['pairs']} unmasked (query, key) pairs" in cell["what"]
        assert cell["label"] == (f"d{r['kv_of']}" if cp > COMPACT_ABOVE else f"K/V of d{r['kv_of']} ({r['keys']})")
    assert sum(r["pairs"] for r in steps if r["device"] == 0) * cp == sum(r["pairs"] for r in steps)  # equal work
