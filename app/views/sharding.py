"""Sharding & auto-parallel: how one tensor is spread over a device mesh, in three notations."""

import streamlit as st
from ui import coming_soon, figure, friendly_errors, intro, show_code

from simulator.errors import ParasimError
from simulator.layout import Layout
from simulator.mesh import DeviceMesh
from simulator.viz import layout_grid

SPLITS = {"not split": (), "dp": ("dp",), "tp": ("tp",), "dp then tp": ("dp", "tp"), "tp then dp": ("tp", "dp")}

intro("Sharding & auto-parallel",
      "A **layout** says which mesh axes cut each tensor dimension; every other axis holds replicas, and "
      "'partial' axes hold addends still to be summed. Read it as the textbook `X[I_dp, J_tp]`, as a MindSpore "
      "strategy `(2, 4)`, or as a JAX PartitionSpec.")

with st.sidebar:
    st.subheader("Mesh and tensor")
    mode = st.radio("Describe the layout by", ["mesh axes", "MindSpore strategy"], key="mode")
    rows = st.number_input("Tensor rows (dim 0)", 1, 4096, 8, key="rows")
    cols = st.number_input("Tensor columns (dim 1)", 1, 4096, 16, key="cols")
    if mode == "mesh axes":
        dp = st.slider("Mesh axis dp", 1, 4, 2, key="dp")
        tp = st.slider("Mesh axis tp", 1, 4, 4, key="tp")
        dim0 = st.selectbox("Dim 0 split along", list(SPLITS), index=1, key="dim0")
        dim1 = st.selectbox("Dim 1 split along", list(SPLITS), index=2, key="dim1")
        partial = st.multiselect("Partial sums along", ["dp", "tp"], key="partial")
        args = ("axes", dp, tp, SPLITS[dim0], SPLITS[dim1], tuple(partial), "")
    else:
        device_num = st.slider("Devices", 1, 16, 8, key="device_num")
        text = st.text_input("Strategy (one integer per dim)", "2, 4", key="strategy")
        args = ("strategy", device_num, 0, (), (), (), text)


def parse_strategy(text: str) -> tuple[int, ...]:
    """'2, 4' or '(2, 4)' -> (2, 4); refuses anything but integers (no eval)."""
    parts = [p.strip() for p in text.strip().strip("()[]").split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts):
        raise ParasimError(f"strategy {text!r}: write integers separated by commas, e.g. 2, 4")
    return tuple(int(p) for p in parts)


@st.cache_data(show_spinner=False)
def describe(mode, a, b, d0, d1, partial, text, shape) -> dict:
    """Build the Layout and its notations; the block every rank holds."""
    if mode == "axes":
        layout = Layout(DeviceMesh({"dp": a, "tp": b}), [d0, d1], partial)
    else:
        layout = Layout.from_strategy(parse_strategy(text), a, shape)
    local = layout.local_shape(shape)
    table = [{"rank": r, "coords": str(layout.mesh.coords(r)), "block": str(layout.block_index(r)),
              "rows": f"{s0.start}:{s0.stop}", "cols": f"{s1.start}:{s1.stop}"}
             for r in layout.mesh.ranks for s0, s1 in [layout.block_slices(r, shape)]]
    return {"layout": layout, "local": local, "table": table, "spec": repr(layout.to_partition_spec()),
            "strategy": layout.to_strategy(), "placements": repr(layout.to_placements())}


with friendly_errors():
    info = describe(*args, (int(rows), int(cols)))
    fig = layout_grid(info["layout"], (int(rows), int(cols)))
layout = info["layout"]

c = st.columns(4)
c[0].metric("textbook", layout.notation())
c[1].metric("MindSpore strategy", str(info["strategy"]))
c[2].metric("block per device", f"{info['local'][0]} × {info['local'][1]}")
c[3].metric("copies of each block", len(layout.devices_holding((0,) * layout.ndim)))
st.caption(f"JAX-like spec `{info['spec']}` · DTensor-like placements `{info['placements']}` · mesh {layout.mesh!r}")

left, right = st.columns([3, 2])
with left:
    figure(fig, "Each block is striped with the colours of the devices holding it; the labels list their ranks.")
with right:
    st.dataframe(info["table"], hide_index=True, width="stretch")

st.divider()
st.subheader("Auto-parallel")
coming_soon("Give each operator a shard() strategy (or none) and watch MindSpore-style strategy propagation "
            "and search fill in the rest, with the redistributions it inserts.", "simulator.auto search")
show_code(Layout.block_index, Layout.devices_holding, Layout.from_strategy, key="code")
