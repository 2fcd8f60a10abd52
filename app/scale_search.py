"""The Scale explorer's search panel: `search_training` over t, c, p, d, e, schedules, ZeRO and
recomputation with the page's software stack; the winner, why the alternatives lose, and a button
that opens the winner in the Estimate tab (its memory per component and its step on the clock)."""

import streamlit as st
from ui import BIND, or_error, show_code

from simulator import PRICED_SCHEDULES as SCHEDULES
from simulator import SEARCHED_SCHEDULES, Assumptions, ModelSpec, search_training
from simulator.cost.search_result import counts_text
from simulator.units import fmt_time

OFFERED: dict = {}   # the Estimate tab's widget options by key (set by the page: tp, pp, dp, b, cp, ep, split)


@st.cache_data(show_spinner="Searching every configuration ...")
def search(model: ModelSpec, hw: str, gpus: int, B: int, schedules: tuple, zeros: tuple, cps: tuple, top: int,
           akw: tuple = (), eps: tuple = ()) -> dict:
    """search_training(): the fastest fits and, per other layout, why it loses (plain dicts)."""
    return search_training(model, hw, gpus, B, schedules=schedules, zero_stages=zeros, context_parallel=cps or None,
                           expert_parallel=eps or None, assumptions=Assumptions(**dict(akw)), top=top).as_dict()


def open_in_estimate(d: dict) -> None:
    """Button callback: put a searched configuration into the Estimate tab's widgets (before they
    are drawn), or say which of its values the widgets do not offer."""
    values = {"tp": d["tp"], "pp": d["pp"], "dp": d["dp"], "b": d["micro_batch_size"], "schedule": d["schedule"],
              "v": d["virtual_stages"], "recompute": d["recompute"], "sp": d["sequence_parallel"], "cp": d["cp"],
              "ep": d["ep"], "zero": d["zero_stage"], "split": OFFERED["split"][0]}
    offered = {k: OFFERED[k] for k in ("tp", "pp", "dp", "b", "cp", "ep")}
    missing = [f"{k}={values[k]}" for k, opts in offered.items() if values[k] not in opts]
    if d.get("etp") is not None:     # the Estimate tab has no expert-tensor-parallel choice (etp = tp there)
        missing.append(f"etp={d['etp']}")
    if missing:
        st.session_state["load_error"] = (f"{', '.join(missing)} is not among the Estimate tab's choices; "
                                          "the tables above give its numbers")
        return
    st.session_state.pop("load_error", None)
    st.session_state.update(values)


def search_panel(spec: ModelSpec, hw: str, B: int, akw: dict, moe: bool) -> None:
    """The search tab's widgets (URL-bound) and results."""
    CP, EP = OFFERED["cp"], OFFERED["ep"]
    c = st.columns([1, 2, 2, 2, 2, 1])
    gpus = c[0].number_input("GPUs", 1, 65536, 512, key="s_gpus", **BIND)
    schedules = c[1].multiselect("Schedules", SCHEDULES, default=list(SEARCHED_SCHEDULES), key="s_schedules", **BIND)
    zeros = c[2].multiselect("ZeRO stages", [0, 1, 2, 3], default=[0, 1], key="s_zeros", **BIND)
    cps = c[3].multiselect("Context parallel c", CP, default=[], key="s_cp", **BIND,
                           help="empty: c = 1, and every power of two up to 32 for sequences of 16k tokens and more")
    eps = c[4].multiselect("Expert parallel e", EP, default=[], key="s_ep", disabled=not moe, **BIND,
                           help="empty: every power of two dividing d and the experts (MoE models)")
    top = c[5].number_input("Show top", 1, 50, 10, key="s_top", **BIND)
    st.caption("The search uses the software stack of the Estimate tab (overlap, FlashAttention, precision, FP8).")
    if st.button("Search", type="primary", key="search"):
        st.session_state["search_request"] = (spec, hw, int(gpus), B, tuple(schedules), tuple(zeros),
                                              tuple(sorted(cps)), int(top), tuple(sorted(akw.items())),
                                              tuple(sorted(eps)) if moe else ())
    req = st.session_state.get("search_request")
    if req is None:
        st.info("Every t (powers of two dividing the heads), c, p (dividing the layers), d = GPUs/(t c p), "
                "micro-batch, schedule, ZeRO stage, e (MoE), recomputation and sequence parallelism is priced "
                "with the cost model. Press **Search**.")
    else:
        found = or_error(search, *req)
        if found is not None:
            best = found["top"][0]
            st.success(f"Best of {counts_text(found)}: "
                       f"**{best['config']}**: {fmt_time(best['step_time_s'])} per step, MFU {best['mfu']:.1%}, "
                       f"{best['memory_per_gpu_bytes'] / 1e9:.1f} GB per GPU "
                       f"({best['memory_headroom_bytes'] / 1e9:.1f} GB headroom)")
            st.button("Open the best in the Estimate tab", key="open_best", on_click=open_in_estimate, args=(best,),
                      help="its memory per component and its step on the event clock, with every choice editable")
            if st.session_state.get("load_error"):
                st.error(st.session_state["load_error"])

            def row(d, rank=None):
                out = {} if rank is None else {"rank": rank}
                out.update({"t": d["tp"], "c": d["cp"], "p": d["pp"], "d": d["dp"], "e": d["ep"]})
                if "reason" in d:
                    out["why it loses"] = d["reason"]
                out.update({"b": d["micro_batch_size"],
                            "schedule": d["schedule"] + (f" v={d['virtual_stages']}" if d["virtual_stages"] > 1 else ""),
                            "recompute": d["recompute"], "SP": d["sequence_parallel"], "ZeRO": d["zero_stage"],
                            "step time (s)": round(d["step_time_s"], 3), "MFU": f"{d['mfu']:.1%}",
                            "bubble": f"{d['bubble_fraction']:.1%}",
                            "GB per GPU": round(d["memory_per_gpu_bytes"] / 1e9, 1),
                            "headroom (GB)": round(d["memory_headroom_bytes"] / 1e9, 1)})
                return out

            st.markdown("**Ranked: the fastest configurations that fit**")
            st.dataframe([row(d, i + 1) for i, d in enumerate(found["top"])], hide_index=True, width="stretch")
            st.markdown("**Why the alternatives lose**: the best configuration of every other (t, c, p, d) layout, "
                        "then faster ones that do not fit in memory")
            st.dataframe([row(d) for d in found["alternatives"]], hide_index=True, width="stretch",
                         column_config={"why it loses": st.column_config.TextColumn(width="large")})
    show_code(search_training, key="code_search")

