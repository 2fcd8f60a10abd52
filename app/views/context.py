"""Context parallelism: the sequence split over devices, the ring steps, and a real run."""

import pandas as pd
import streamlit as st
from charts import timeline_chart
from cp_charts import ring_spec
from ui import BIND, friendly_errors, interactive, intro, png_download, remember, restore, show_code

from simulator import GPTConfig, TrainConfig, train, viz
from simulator.parallel.cp_split import attention_bytes_per_step, chunk_positions, ring_steps
from simulator.units import fmt_bytes
from simulator.vocabulary import canonical_value

intro("Context parallelism",
      "Long sequences do not fit one device: **context parallelism** splits every sequence over c devices. "
      "Everything but attention is token-wise; attention either passes the **K/V blocks round a ring** "
      "(each device folds every block into an online softmax) or swaps heads for tokens with two "
      "**all-to-alls** (Ulysses). Causal masking makes late tokens costlier, so the ring splits the "
      "sequence into 2c chunks and gives device i chunks i and 2c-1-i.")

restore("context")
with st.sidebar:
    st.subheader("Context parallelism")
    cp = st.select_slider("Devices c", [1, 2, 4, 8], value=4, key="ctx_c", **BIND,
                          help="the context-parallel degree: each sequence is split c ways")
    seq = st.select_slider("Sequence length s (tokens)", [16, 32, 64], value=32, key="ctx_seq", **BIND)
    kind = st.radio("Attention", ("ring", "all-to-all"), key="attention", horizontal=True, **BIND,
                    help="ring: K/V blocks travel round the devices (Send/Recv); all-to-all (Ulysses): heads <-> "
                         "sequence, two AllToAlls per attention")
remember("context", "ctx_c", "ctx_seq", "attention")


@st.cache_data(show_spinner="Training on emulated devices ...", max_entries=16)
def run(cp: int, seq: int, kind: str) -> dict:
    """Two steps of a tiny GPT with its sequence split cp ways, and the same on one device (cp = 1)."""
    gpt = GPTConfig(layers=2, hidden=16, heads=8, seq_len=seq, vocab=32)
    out = {}
    for c in sorted({1, cp}):
        r = train(TrainConfig(gpt, strategy="cp", devices=c, cp=c, cp_comm_type=canonical_value("cp_comm_type", kind), global_batch=2, steps=2))
        act = max(s.bytes_by_category.get("act", 0) for s in r.trace.memory)
        out[c] = {"trace": r.trace, "diff": r.max_rel_weight_diff_vs_single, "act": act,
                  "bytes": {k: v for k, v in r.trace.bytes_by_collective().items() if k != "all_reduce"},
                  "formula": 2 * c * attention_bytes_per_step(gpt, gpt.layers, 2, 1, c, kind)}
    return out


if kind == "ring":
    interactive(ring_spec(seq, cp), key="ring")
    st.caption("Colour = the device whose K/V block is scored; paler = fewer unmasked (query, key) pairs (hover a "
               "cell for the step in words). Every device does the same total work.")
    png_download(lambda: viz.ring_chart(seq, cp), f"ring-{seq}tokens-{cp}devices.png", "ring-png",
                 "simulator.viz.ring_chart")
    table = pd.DataFrame(ring_steps(seq, cp))
    st.dataframe(table.pivot(index="device", columns="step", values="pairs").add_prefix("step "),
                 key="pairs")
else:
    pos = chunk_positions(seq, cp, "all-to-all")
    st.markdown(f"Each device holds tokens {pos[0][0]}..{pos[0][-1]} (device 0) to {pos[-1][0]}..{pos[-1][-1]} "
                f"(device {cp - 1}) for all 8 heads; after the first all-to-all it holds **all {seq} tokens of "
                f"{8 // cp} heads**, attends, and the second all-to-all returns its tokens.")

with friendly_errors():
    res = run(cp, seq, kind)
mine, one = res[cp], res[1]
c = st.columns(4)
c[0].metric("vs one device", f"{mine['diff']:.1e}", help="max relative weight difference after 2 steps (float64)")
c[1].metric("activations per device", fmt_bytes(mine["act"]), f"{one['act'] / mine['act']:.2f}x less than c=1"
            if cp > 1 else None, help="peak of the act/ memory category, measured from the run")
c[2].metric("attention bytes sent", fmt_bytes(sum(mine["bytes"].values())),
            help="by all devices in 2 steps, measured; " + ", ".join(mine["bytes"]))
c[3].metric("formula", fmt_bytes(mine["formula"]),
            help="ring: (3c-2) K/V blocks per attention per device (forward c-1, backward c-1 + c dK/dV); "
                 "all-to-all: 8 (c-1)/c tensors of B s/c h per attention")
interactive(timeline_chart(mine["trace"], title=f"{kind} attention on {cp} device(s): 2 steps"), key="timeline")
st.caption("Compute and communication lanes on the simulated clock; the ring's Send/Recv sit between the "
           "attention steps. Hover a bar for its details; drag to pan, scroll to zoom (double-click resets).")
show_code(ring_steps, run, key="code")
