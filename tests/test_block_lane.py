"""The per-axis transforms of the block's steps (simulator/parallel/block_lane.py): Megatron's
column / row split and its collectives (Shoeybi et al. 2019, Sec. 3; Korthikanti et al. 2022
for sequence parallelism), context-parallel attention as one external item."""

from simulator.models.block_plan import Step, attention_half, dense_block, param_shapes
from simulator.parallel.block_lane import Comm, External, _segments, lane_items, sp_partial_grads

H, A, TP = 8, 4, 2


def _comms(items):
    return [(i.name, i.forward, i.backward) for i in items if isinstance(i, Comm)]


def test_tensor_parallel_is_megatrons_f_and_g_around_each_linear_pair():
    items = lane_items(dense_block(H, A), TP, False, False)
    assert _comms(items) == [("qkv_in", None, "all_reduce"), ("o_out", "all_reduce", None),
                             ("fc_in", None, "all_reduce"), ("proj_out", "all_reduce", None)]
    shapes = param_shapes([i for i in items if isinstance(i, Step)])
    assert shapes == {"ln1_g": (H,), "ln1_b": (H,), "w_qkv": (H, 3 * H // TP), "b_qkv": (3 * H // TP,),
                      "w_o": (H // TP, H), "b_o": (H,), "ln2_g": (H,), "ln2_b": (H,),
                      "w_fc": (H, 4 * H // TP), "b_fc": (4 * H // TP,), "w_proj": (4 * H // TP, H), "b_proj": (H,)}
    attn = next(i for i in items if getattr(i, "kind", "") == "attention")
    assert (attn.heads, attn.width) == (A // TP, H // TP)
    # forward: 3 computes split by the two AllReduces; backward likewise (f's AllReduces)
    assert [type(s).__name__ for s in _segments(items, True)] == ["tuple", "Comm", "tuple", "Comm", "tuple"]
    assert [type(s).__name__ for s in _segments(items, False)] == ["tuple", "Comm", "tuple", "Comm", "tuple"]


def test_sequence_parallel_gathers_and_scatters_and_names_its_partial_gradients():
    items = lane_items(dense_block(H, A), TP, True, False)
    assert _comms(items) == [("qkv_in", "all_gather", "reduce_scatter"), ("o_out", "reduce_scatter", "all_gather"),
                             ("fc_in", "all_gather", "reduce_scatter"), ("proj_out", "reduce_scatter", "all_gather")]
    assert [i.regather for i in items if isinstance(i, Comm)] == [True, False, True, False]
    assert sp_partial_grads(items) == ("ln1_g", "ln1_b", "b_o", "ln2_g", "ln2_b", "b_proj")


def test_context_parallel_replaces_the_projections_and_attention_by_one_external_item():
    items = lane_items(attention_half(H, A), TP, False, True)
    ext = [i for i in items if isinstance(i, External)]
    assert len(ext) == 1 and [s.name for s in ext[0].steps] == ["qkv", "attn", "o"]
    assert (ext[0].reads, ext[0].writes) == ("a_full", "o")
    assert [i.name for i in items][-3:] == ["o_bias", "res1", "ln2"]


def test_context_parallel_alone_moves_w_o_s_bias_after_the_attention():
    items = lane_items(dense_block(H, A), 1, False, True)
    ext = next(i for i in items if isinstance(i, External))
    assert ext.steps[-1].param_names == ("w_o",) and (ext.reads, ext.writes) == ("a", "o")
    bias = items[items.index(ext) + 1]
    assert (bias.kind, bias.param_names, bias.reads) == ("bias", ("b_o",), ("o",))
    assert next(i for i in items if i.name == "res1").reads == ("x", "o_b")


def test_layer_emission_is_written_once_per_kind_of_lane():
    """Issue 24 item 4: the parallelisms are transforms, not a tower of lane classes. The layer
    emitter is defined by the whole-layer lane (emit.Replica), the one sharded lane for every
    tp x sp x cp (lane.ShardedLane: each layer is its steps through block_lane.lane_items) and the
    two wrappers that transform a lane (expert_parallel.ExpertLane, zero.ZeroStage23)."""
    import importlib
    import pkgutil

    import simulator.parallel as pkg

    owners = set()
    for mod in pkgutil.iter_modules(pkg.__path__):
        m = importlib.import_module(f"simulator.parallel.{mod.name}")
        for obj in vars(m).values():
            if isinstance(obj, type) and obj.__module__ == m.__name__ and "emit_layer_forward" in vars(obj):
                owners.add(f"{mod.name}.{obj.__name__}")
    assert owners == {"emit.Replica", "lane.ShardedLane", "expert_parallel.ExpertLane", "zero.ZeroStage23"}
