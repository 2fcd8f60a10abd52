"""The Scale explorer's cached computations (`views/scale.py`): one configuration priced under each
ZeRO stage the library prices for the model, and the same step run on the event clock."""

from __future__ import annotations

import streamlit as st
from charts import aggregate_trace

from simulator import Assumptions, ModelSpec, ParallelConfig, ParasimError, assumptions_of, estimate, get_hardware
from simulator.cost.scale_sim import simulate_at_scale


@st.cache_data(show_spinner=False)
def explore(model: ModelSpec, hw: str, B: int, kw: tuple, akw: tuple = ()) -> dict:
    """estimate() of one configuration under ZeRO stages 0..3 (plain dicts, cheap to cache); with a
    pipeline only 0 and 1 (ZeRO-2/3 with pp > 1 are refused, as DeepSpeed refuses them)."""
    out, refused, A = {}, {}, Assumptions(**dict(akw))
    for z in range(4 if dict(kw)["pp"] == 1 else 2):
        cfg = ParallelConfig(global_batch=B, zero_stage=z, **dict(kw))
        try:
            out[z] = estimate(model, cfg, hw, A).as_dict()
        except ParasimError as err:     # a stage the library does not price for this model, said why
            if not z:
                raise
            refused[z] = str(err)
            continue
        out[z]["config"] = repr(cfg)
        out[z]["assumptions"] = assumptions_of(model, A, cfg, door="setting")
    return {"by_zero": out, "refused": refused, "capacity": get_hardware(hw).memory_bytes}


@st.cache_resource(show_spinner="Running the step on the event clock ...", max_entries=4)
def clock_run(model: ModelSpec, hw: str, B: int, kw: tuple, akw: tuple, zero: int):
    """The step as a program on the event clock (`simulate_at_scale`, one TP rank per stage: the
    others are identical) and its trace aggregated for drawing (`charts.aggregate_trace`)."""
    cfg = ParallelConfig(global_batch=B, zero_stage=zero, **dict(kw))
    res = simulate_at_scale(model, cfg, hw, Assumptions(**dict(akw)), fold_tp=True)
    trace, note = aggregate_trace(res.trace)
    return res, trace, note
