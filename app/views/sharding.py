"""Sharding & auto-parallel: MindSpore shard() strategies, the layouts they give, and the collectives
they insert; and how one tensor is spread over a device mesh, in three notations."""

import numpy as np
import streamlit as st
from ui import BIND, figure, intro, or_error, parse_strategy, remember, restore, show_code

from simulator import AutoParallelContext, DeviceMesh, Layout, ParasimError, auto, explain, viz
from simulator.auto.gpt import gpt_network
from simulator.units import fmt_bytes

PHASES = {"forward": "forward", "backward": "backward", "parameter_gradient": "parameter gradient"}
NETWORKS = ("MatMul", "2-layer MLP", "GPT")  # short: the URL holds the option (?net=GPT)
NETWORK_CAPTIONS = ("x @ w", "MatMul → ReLU → MatMul", "embedding, attention, MLP, loss (Megatron strategies)")
MODES = {"semi_auto_parallel": "semi-auto: unset operators are data parallel",
         "auto_parallel": "auto: unset operators get a strategy by sharding propagation"}
SPLITS = {"not split": (), "dp": ("dp",), "tp": ("tp",), "dp then tp": ("dp", "tp"), "tp then dp": ("tp", "dp")}

intro("Sharding & auto-parallel",
      "In MindSpore's semi-auto parallel mode you write single-device code and give operators a "
      "`shard()` **strategy**: how many slices each input dimension is cut into. From it follow the "
      "**device matrix**, every tensor's **layout**, and the **collectives** the compiler must insert "
      "(forward, backward, and the gradient 'mirror' of each replicated weight). Read a layout as the "
      "textbook `X[I_dp, J_tp]`, a MindSpore tuple, a JAX PartitionSpec or a PyTorch DTensor placement.")

tab_auto, tab_tensor = st.tabs(["MindSpore shard(): operators and collectives", "One tensor on a mesh"])


def build_network(kind: str, m: int, k: int, n: int, h: int, s1, s_act, s2, out1):
    """The single-device network with the user's strategies (None = not set)."""
    rng = np.random.default_rng(0)
    net = auto.Network("matmul" if kind == NETWORKS[0] else "mlp")
    x = net.input("x", (m, k), requires_grad=True)
    if kind == NETWORKS[0]:
        w = net.parameter("w", rng.standard_normal((k, n)))
        op = auto.ops.MatMul()
        if s1 is not None:
            op.shard(s1, out1)
        op(x, w)
        return net
    w1 = net.parameter("w1", rng.standard_normal((k, h)))
    w2 = net.parameter("w2", rng.standard_normal((h, n)))
    ops = [auto.ops.MatMul(), auto.ops.ReLU(), auto.ops.MatMul()]
    for op, s in zip(ops, (s1, s_act, s2)):
        if s is not None:
            op.shard(s)
    ops[2](ops[1](ops[0](x, w1)), w2)
    return net


def build_gpt(device_num: int, tp: int, sp: bool):
    """simulator/auto/gpt.py's GPT (1 block, small) with Megatron strategies on dp x tp."""
    if device_num % tp:
        raise ParasimError(f"tp {tp} does not divide device_num {device_num}")
    dp = device_num // tp
    return gpt_network(layers=1, hidden=16, heads=4, seq=8, vocab=32, batch=2 * dp, dp=dp, tp=tp, sp=sp)[0]


@st.cache_data(show_spinner=False)
def explain_network(kind, m, k, n, h, texts, mode, device_num, gradients_mean, enable_alltoall=False,
                    gpt=(4, False), parallel_optimizer=False) -> dict:
    """explain() of the network: operators, stored layouts in four notations, inserted moves."""
    names = ("MatMul-0 strategy", "ReLU strategy", "MatMul-1 strategy", "MatMul out_strategy")
    s1, s_act, s2, out1 = (parse_strategy(t, nm) for t, nm in zip(texts, names))
    if mode == "semi_auto_parallel" and s1 is None and kind != NETWORKS[2]:
        raise ParasimError("semi_auto_parallel: give MatMul-0 a strategy, e.g. ((2, 4), (4, 1))")
    ctx = AutoParallelContext(mode, device_num, gradients_mean=gradients_mean, enable_alltoall=enable_alltoall,
                              enable_parallel_optimizer=parallel_optimizer,
                              parallel_optimizer_config={"parallel_optimizer_threshold": 0})
    net = (build_gpt(device_num, *gpt) if kind == NETWORKS[2]
           else build_network(kind, m, k, n, h, s1, s_act, s2, out1))
    e = explain(net, ctx)
    layouts = {}
    for name, layout in e.plan.stored.items():
        t = net.tensors[name]
        layouts[name] = (layout, t.shape, t.kind)
    moves = [{"phase": PHASES[mv.phase], "collective": d["op"], "operator": mv.op, "tensor": mv.tensor,
              "groups": " ".join("{" + ",".join(map(str, g)) + "}" for g in mv.groups),
              "bytes per rank": fmt_bytes(mv.bytes_per_rank), "reason": mv.reason}
             for mv in e.moves if not mv.local for d in [mv.to_dict()]]
    local = [{"phase": PHASES[mv.phase], "move": d["op"], "operator": mv.op, "tensor": mv.tensor,
              "reason": mv.reason} for mv in e.moves if mv.local for d in [mv.to_dict()]]
    ops = [{"operator": o["op"], "strategy": str(tuple(tuple(s) for s in o["strategy"])),
            "device matrix": str(o["device_matrix"]), "tensor maps": str(o["tensor_maps"]),
            "output": o["output"], "repeated calculation": o["repeated_calculation"],
            "set by": "you" if o["user_set"] else ("propagation" if mode == "auto_parallel" else "default (dp)")}
           for o in e.to_dict()["operators"]]
    return {"ops": ops, "layouts": layouts, "moves": moves, "local": local, "text": e.to_text(),
            "bytes": sum(mv.bytes_per_rank for mv in e.moves if not mv.local)}


def notation(write) -> str:
    """A layout in one notation, or why it has none there (a dim cut by mesh axes out of their order
    has no DTensor placements): a table cell, never a traceback."""
    try:
        return write()
    except ParasimError as err:
        return f"none: {err}"


def show_explanation(info: dict, draw: str) -> None:
    """Metrics, the operators, every inserted collective, the layouts and one tensor's blocks."""
    moves = info["moves"]
    c = st.columns(4)
    c[0].metric("device matrix", info["ops"][0]["device matrix"], help="of the first operator")
    c[1].metric("collectives inserted", len(moves), help="forward, backward and gradient-mirror collectives "
                "the compiler adds (local moves need no communication and are not counted)")
    c[2].metric("bytes per rank (all)", fmt_bytes(info["bytes"]), help="the bytes each rank sends, summed over "
                "every inserted collective of one step")
    c[3].metric("repeated calculation", info["ops"][0]["repeated calculation"],
                help="device_num / product of the device matrix: neighbouring ranks compute the same block")

    st.markdown("**Operators**: strategy → device matrix (ranks row-major, last dimension fastest) "
                "→ tensor maps (-1 not split; m names device-matrix dimension len-1-m)")
    st.dataframe(info["ops"], hide_index=True, width="stretch")

    st.markdown("**Every inserted collective**, in the order the compiler inserts it")
    if moves:
        st.table(moves)
    else:
        st.success("No communication at all: every operator finds its inputs where it needs them.")
    if info["local"]:
        st.caption("Local moves (no communication): " + "; ".join(
            f"{r['move']} of {r['tensor']} for {r['operator']}" for r in info["local"]))

    st.markdown("**Layouts** of every tensor as stored, in four notations")
    rows = []
    for name, (layout, shape, tkind) in info["layouts"].items():
        rows.append({"tensor": name, "kind": tkind, "shape": str(shape), "textbook": layout.notation(name),
                     "MindSpore": str(layout.to_strategy()), "PartitionSpec": repr(layout.to_partition_spec()),
                     "DTensor": notation(lambda lo=layout: repr(lo.to_placements())), "mesh": repr(layout.mesh)})
    st.dataframe(rows, hide_index=True, width="stretch")
    names = list(info["layouts"])
    if st.session_state.get("draw") not in (None, *names):  # a tensor of another network
        del st.session_state["draw"]
    pick = st.selectbox("Draw the blocks of", names, index=names.index(draw), key="draw", **BIND)
    layout, shape, _ = info["layouts"][pick]
    left, right = st.columns([3, 2])
    with left:
        figure(viz.layout_grid(layout, shape, name=pick), "One block per distinct shard: coloured by the rank "
               "holding it, or grey with its copies listed when several ranks hold it (legend: colour → rank).")
    with right:
        st.caption("explain(net, ctx).to_text()")
        st.code(info["text"], language="text", wrap_lines=True)


restore("sharding")
AUTO_KEYS = ("net", "device_num", "parallel_mode", "gradients_mean", "enable_alltoall", "enable_parallel_optimizer",
             "gpt_tp", "gpt_sp", "M", "K", "H", "N", "mlp_N", "s1", "out1", "mlp_s1", "s_act", "s2", "draw")
with tab_auto:
    c = st.columns([3, 2, 3])  # room for the MindSpore option names at 1024 px
    kind = c[0].radio("Network", NETWORKS, key="net", horizontal=True, captions=NETWORK_CAPTIONS, **BIND)
    device_num = c[1].number_input("device_num", 1, 64, 8, key="device_num", **BIND)
    mode = c[2].selectbox("parallel_mode", list(MODES), key="parallel_mode", **BIND,
                          help="\n\n".join(f"**{k}**: {v}" for k, v in MODES.items()))
    # MindSpore's option names have no place to break: in presentation mode (larger text) one per row
    c = [st.container()] * 3 if st.session_state.get("present") else st.columns([2, 2, 3])
    gradients_mean = c[0].checkbox("gradients_mean", value=False, key="gradients_mean", **BIND,
                                   help="divide each mirrored gradient by its group size")
    alltoall = c[1].checkbox("enable_alltoall", value=False, key="enable_alltoall", **BIND,
                             help="MindSpore's default (off) moves a cut between tensor dimensions with "
                                  "AllGather + Split; on, with one AllToAll (as XLA does)")
    popt = c[2].checkbox("enable_parallel_optimizer", value=False, key="enable_parallel_optimizer", **BIND,
                         help="split each replicated weight over its data-parallel copies: AllGather "
                              "before use, ReduceScatter of its gradient (ZeRO-style, threshold 0)")
    mlp = kind == NETWORKS[1]
    gpt = kind == NETWORKS[2]
    c = st.columns(4)
    tp = c[0].selectbox("tp (GPT)", [1, 2, 4, 8], index=2, key="gpt_tp", disabled=not gpt, **BIND)
    sp = c[1].checkbox("sequence parallel (GPT)", value=False, key="gpt_sp", disabled=not gpt, **BIND,
                       help="layer norms cut along the sequence: AllGather before the column-parallel "
                            "linears, ReduceScatter after the row-parallel ones")
    if gpt:
        st.caption("simulator/auto/gpt.py: Gather (vocabulary-parallel table), LayerNorm, q/k/v and the "
                   "MLP's first linear column-parallel, Wo and the MLP's second row-parallel, attention "
                   "cut by heads, fused vocabulary-parallel cross-entropy; batch 2·dp, hidden 16, 4 heads, "
                   "sequence 8, vocabulary 32, one block")
    c = st.columns(4)
    m = c[0].number_input("x rows (batch) M", 1, 4096, 32, key="M", **BIND)
    k = c[1].number_input("x cols K", 1, 4096, 16, key="K", **BIND)
    h = c[2].number_input("hidden H", 1, 4096, 64, key="H", disabled=not mlp, **BIND)
    n = c[3].number_input("output N", 1, 4096, 8 if mlp else 16, key="mlp_N" if mlp else "N", **BIND,
                          help="its own URL parameter per network (N, mlp_N): a link never depends on a default "
                               "that changes with the network")
    c = st.columns(3)
    if mlp:
        s1 = c[0].text_input("MatMul-0 (x @ w1) strategy", "((2, 1), (1, 4))", key="mlp_s1", **BIND,
                             help="column parallel: w1's columns cut 4 ways")
        s_act = c[1].text_input("ReLU strategy (empty: not set)", "((2, 4),)", key="s_act", **BIND)
        s2 = c[2].text_input("MatMul-1 (h @ w2) strategy (empty: not set)", "((2, 4), (4, 1))", key="s2", **BIND,
                             help="row parallel: the contracted H is cut 4 ways -> partial sums -> AllReduce")
        out1 = ""
    elif not gpt:
        s1 = c[0].text_input("MatMul strategy ((a, k), (k, c))", "((2, 4), (4, 1))", key="s1", **BIND)
        out1 = c[1].text_input("out_strategy (empty: none)", "", key="out1", **BIND,
                               help="((a*k, c),) turns the forward AllReduce into a ReduceScatter")
        s_act = s2 = ""
    else:
        s1 = s_act = s2 = out1 = ""
    info = or_error(explain_network, kind, int(m), int(k), int(n), int(h), (s1, s_act, s2, out1), mode,
                    int(device_num), gradients_mean, alltoall, (int(tp), bool(sp)), popt)
    if info is not None:
        show_explanation(info, "wte" if gpt else "w1" if mlp else "w")
    show_code(explain, auto.ops.MatMul.shard, key="code_auto")


# ---- one tensor on a mesh ------------------------------------------------------------------------
def parse_ints(text: str) -> tuple[int, ...]:
    """'2, 4' or '(2, 4)' -> (2, 4); refuses anything but integers (no eval)."""
    parts = [p.strip() for p in text.strip().strip("()[]").split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts):
        raise ParasimError(f"strategy {text!r}: write integers separated by commas, e.g. 2, 4")
    return tuple(int(p) for p in parts)


def tensor_results(t_info: dict, shape: tuple[int, int]) -> None:
    t_layout = t_info["layout"]
    c = st.columns(4)
    c[0].metric("textbook", t_layout.notation(), help="X[I_a, J_b]: dim 0 (I) cut along mesh axis a, dim 1 (J) "
                "along b; no subscript: not cut")
    c[1].metric("MindSpore strategy", str(t_info["strategy"]), help="how many slices each dimension is cut "
                "into (shard() strategy of this tensor)")
    c[2].metric("block per device", f"{t_info['local'][0]} × {t_info['local'][1]}",
                help="rows × columns each device stores")
    c[3].metric("copies of each block", len(t_layout.devices_holding((0,) * t_layout.ndim)),
                help="devices holding the same block: its replicas (mesh axes that cut no dimension) and "
                     "partial-sum addends alike")
    st.caption(f"JAX-like spec `{t_info['spec']}` · DTensor-like placements `{t_info['placements']}` · "
               f"mesh {t_layout.mesh!r}")
    left, right = st.columns([3, 2])
    with left:
        figure(viz.layout_grid(t_layout, shape), "One block per distinct shard: coloured by the rank holding "
                                                 "it, or grey with its copies listed (legend: colour → rank).")
    with right:
        st.dataframe(t_info["table"], hide_index=True, width="stretch")


@st.cache_data(show_spinner=False)
def describe(mode, a, b, d0, d1, partial, text, shape) -> dict:
    """Build the Layout and its notations; the block every rank holds."""
    if mode == "axes":
        layout = Layout(DeviceMesh({"dp": a, "tp": b}), [d0, d1], partial)
    else:
        layout = Layout.from_strategy(parse_ints(text), a, shape)
    local = layout.local_shape(shape)
    table = [{"rank": r, "coords": str(layout.mesh.coords(r)), "block": str(layout.block_index(r)),
              "rows": f"{s0.start}:{s0.stop}", "cols": f"{s1.start}:{s1.stop}"}
             for r in layout.mesh.ranks for s0, s1 in [layout.block_slices(r, shape)]]
    return {"layout": layout, "local": local, "table": table, "spec": repr(layout.to_partition_spec()),
            "strategy": layout.to_strategy(), "placements": repr(layout.to_placements())}


TENSOR_KEYS = ("layout_by", "rows", "cols", "mesh_dp", "mesh_tp", "dim0", "dim1", "partial", "t_devices", "t_strategy")
with tab_tensor:
    c = st.columns([1, 1, 1, 2])
    mode_t = c[0].radio("Describe the layout by", ["mesh axes", "MindSpore strategy"], key="layout_by", **BIND)
    rows_n = c[1].number_input("Tensor rows (dim 0)", 1, 4096, 8, key="rows", **BIND)
    cols_n = c[2].number_input("Tensor columns (dim 1)", 1, 4096, 16, key="cols", **BIND)
    with c[3]:
        if mode_t == "mesh axes":
            cc = st.columns(2)
            dp = cc[0].slider("Mesh axis dp", 1, 4, 2, key="mesh_dp", **BIND)
            tp = cc[1].slider("Mesh axis tp", 1, 4, 4, key="mesh_tp", **BIND)
            dim0 = cc[0].selectbox("Dim 0 split along", list(SPLITS), index=1, key="dim0", **BIND)
            dim1 = cc[1].selectbox("Dim 1 split along", list(SPLITS), index=2, key="dim1", **BIND)
            partial = st.multiselect("Partial sums along", ["dp", "tp"], key="partial", **BIND)
            args = ("axes", dp, tp, SPLITS[dim0], SPLITS[dim1], tuple(partial), "")
        else:
            cc = st.columns(2)
            dn = cc[0].slider("Devices", 1, 16, 8, key="t_devices", **BIND)
            text = cc[1].text_input("Strategy (one integer per dim)", "2, 4", key="t_strategy", **BIND)
            args = ("strategy", dn, 0, (), (), (), text)
    t_info = or_error(describe, *args, (int(rows_n), int(cols_n)))
    if t_info is not None:
        tensor_results(t_info, (int(rows_n), int(cols_n)))
    show_code(Layout.block_index, Layout.devices_holding, Layout.from_strategy, key="code")
remember("sharding", *AUTO_KEYS, *TENSOR_KEYS)
