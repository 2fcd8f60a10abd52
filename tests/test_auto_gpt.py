"""A GPT in the auto-parallel API (simulator/auto/gpt.py): Megatron's strategies set by shard()
train equal to stand-alone, explain() lists the collectives of the hand-written tensor and
sequence parallel compilers (simulator/parallel/tensor_parallel.py) layer by layer, and a
search finds a plan no slower on the cost model."""

from collections import defaultdict

import pytest
from auto_helpers import assert_same

from simulator.auto.context import AutoParallelContext
from simulator.auto.explain import explain
from simulator.auto.gpt import gpt_network
from simulator.auto.planner import build_plan
from simulator.auto.run import standalone, train
from simulator.auto.strategy_search import OpCostModel, plan_cost, search
from simulator.models import GPTConfig
from simulator.parallel.config import TrainConfig
from simulator.parallel.tensor_parallel import compile_tensor_parallel
from simulator.program import Collective
from simulator.runtime import LocalRuntime

L, H, A, S, V, B = 2, 16, 4, 8, 32, 2
ACT, STAT = B * S * H * 8, B * S * 8  # bytes of a (B, S, H) activation and of a (B, S) statistic


@pytest.mark.parametrize("sp", [False, True])
def test_megatron_strategies_train_equal_to_standalone(sp):
    net, feeds = gpt_network(L, H, A, S, V, B, dp=2, tp=4, sp=sp)
    res = train(net, AutoParallelContext("semi_auto_parallel", 8), feeds, runtime=LocalRuntime(8), steps=2)
    assert_same(res, standalone(net, feeds, steps=2))
    assert res.losses[1] < res.losses[0]


def auto_layers(sp):
    """explain() of the Megatron GPT on 4 ranks (tp=4): layer -> phase -> [(kind, group, bytes)]
    (layer 0 the embedding, 1..L the blocks, L+1 the head and loss)."""
    net, _ = gpt_network(L, H, A, S, V, B, dp=1, tp=4, sp=sp)
    layer, seen = {}, 0
    for node in net.nodes:
        seen += node.op.name == "LayerNorm"
        layer[node.label] = 0 if seen == 0 else min(1 + (seen - 1) // 2, L + 1)
    owner = {x: layer[n.label] for n in net.nodes for x in n.inputs}
    out = defaultdict(lambda: defaultdict(list))
    for m in explain(net, AutoParallelContext("semi_auto_parallel", 4)).moves:
        if not m.local:
            li = owner[m.tensor[1:]] if m.op == "mirror" else layer[m.op]
            out[li][m.phase].append((m.kind, m.groups, m.bytes_per_rank))
    return out


def megatron_layers(sp):
    """The same from the hand-written compiler's program (rank 0's collectives, by their tags);
    backward collectives that repeat a forward tag, or are tagged "re" (the block's re-gathers,
    parallel/block_lane.py), are Megatron's re-gathers (Korthikanti et al. 2022 Sec. 4.2.2: the
    sequence-sharded input is kept and gathered again)."""
    cfg = TrainConfig(GPTConfig(layers=L, hidden=H, heads=A, seq_len=S, vocab=V),
                      strategy="sp" if sp else "tp", devices=4, tp=4, global_batch=B)
    out = defaultdict(lambda: defaultdict(list))
    phase, fwd_tags = "forward", set()
    for ins in compile_tensor_parallel(cfg, sp=sp).program.code[0]:
        if not isinstance(ins, Collective):
            continue
        head, *rest = ins.tag.split("/")
        if head == "sp" and rest[0] == "partial":  # one flattened AllReduce of every layer's (finalize_model_grads)
            out["flat"]["parameter_gradient"].append((ins.kind, (ins.group,), ins.nbytes))
            continue
        li = L + 1 if head == "loss" else int(rest[0]) if head == "sp" else int(head)
        ph = "parameter_gradient" if head == "sp" else phase
        if ph == "backward" and (ins.tag in fwd_tags or "re" in rest):
            ph = "regather"
        out[li][ph].append((ins.kind, (ins.group,), ins.nbytes))
        if ph == "forward":
            fwd_tags.add(ins.tag)
        if ins.tag.startswith("loss/sumexp"):  # the last statistic (Megatron-LM: max, target, sum exp)
            phase = "backward"
    return out


def test_explain_lists_megatron_tensor_parallel_collectives():
    ms, mg = auto_layers(sp=False), megatron_layers(sp=False)
    G = ((0, 1, 2, 3),)
    AR = ("all_reduce", G, ACT)
    for li in range(L + 1):  # embedding and blocks: the same forward AllReduces
        assert ms[li]["forward"] == mg[li]["forward"] == ([AR] if li == 0 else [AR, AR])
    # the vocabulary-parallel loss: AllReduce(max) and AllReduce(sum exp) of (B, S) statistics in
    # both; Megatron AllReduces the (B, S) target logits, MindSpore's fused loss the scalar loss
    assert mg[L + 1]["forward"] == [("all_reduce", G, STAT)] * 3
    assert ms[L + 1]["forward"] == [("all_reduce", G, STAT)] * 2 + [("all_reduce", G, 8)]
    # backward: each block's two (B, S, H) AllReduces in both; MindSpore puts them at the adjoint
    # of each forward AllReduce (the backward of AllReduce is AllReduce), Megatron at the
    # column-parallel inputs (f), so the head's one moves to the embedding
    for li in range(1, L + 1):
        assert ms[li]["backward"] == mg[li]["backward"] == [AR, AR]
    assert mg[L + 1]["backward"] == [AR] and mg[0]["backward"] == []
    assert ms[L + 1]["backward"] == [("all_reduce", G, 8)] and ms[0]["backward"] == [AR]
    # parameters replicated over the tensor group: MindSpore's mirror AllReduce; Megatron: none
    assert all(not mg[li]["parameter_gradient"] for li in mg)
    assert [b for _, _, b in ms[1]["parameter_gradient"]] == [H * 8] * 6


def test_explain_lists_megatron_sequence_parallel_collectives():
    ms, mg = auto_layers(sp=True), megatron_layers(sp=True)
    G = ((0, 1, 2, 3),)
    AG, RS = ("all_gather", G, ACT // 4), ("reduce_scatter", G, ACT)
    # the embedding: MindSpore reduce-scatters the lookup; Megatron-Core with learned absolute
    # positions all-reduces it, adds the positions, then keeps its slice (scatter to the sequence-
    # parallel region: no communication; megatron/core/models/common/embeddings/
    # language_model_embedding.py, reduce_scatter_embeddings is False with learned positions)
    assert ms[0]["forward"] == [RS] and mg[0]["forward"] == [("all_reduce", G, ACT)]
    for li in range(1, L + 1):
        assert ms[li]["forward"] == mg[li]["forward"] == [AG, RS, AG, RS]
        # backward: the adjoints (AllGather <-> ReduceScatter) in both; Megatron also gathers
        # the kept sequence shards of the two column-parallel inputs again
        assert ms[li]["backward"] == mg[li]["backward"] == [AG, RS, AG, RS]
        assert mg[li]["regather"] == [AG, AG] and not ms[li]["regather"]
    assert ms[L + 1]["forward"][0] == mg[L + 1]["forward"][0] == AG
    assert ms[L + 1]["backward"] == [("all_reduce", G, 8), RS] and mg[L + 1]["backward"] == [RS]
    assert ms[0]["backward"] == mg[0]["backward"] == [AG]
    # the layer norms' and the row-parallel biases' gradients summed over the group: MindSpore one
    # AllReduce per parameter, Megatron-LM one of them all flattened after the data-parallel sync
    # (finalize_model_grads -> _allreduce_non_tensor_model_parallel_grads): the same bytes
    assert not any(mg[li]["parameter_gradient"] for li in range(L + 2))
    assert mg["flat"]["parameter_gradient"] == [("all_reduce", G, sum(
        b for li in range(L + 2) for _, _, b in ms[li]["parameter_gradient"]))]


@pytest.mark.parametrize("mode", ["dynamic_programming", "recursive_programming", "sharding_propagation"])
def test_auto_parallel_finds_a_plan_no_slower_than_megatron_and_trains_equal(mode):
    # two layers: the mask input read by every layer and the residual adds make the cost graph
    # not series-parallel (dynamic_programming refused it before its star eliminations)
    model = OpCostModel()
    mega_net, feeds = gpt_network(L, H, A, S, V, B, dp=1, tp=4)
    megatron = plan_cost(build_plan(mega_net, AutoParallelContext("semi_auto_parallel", 4)), model)
    # sharding_propagation starts from the key operators' strategies (MindSpore's tutorial)
    net, _ = gpt_network(L, H, A, S, V, B, dp=1, tp=4, key_only=True) if mode == "sharding_propagation" \
        else gpt_network(L, H, A, S, V, B)
    ctx = AutoParallelContext("auto_parallel", 4, search_mode=mode, cost_model=model)
    plan = build_plan(net, ctx)
    found = plan_cost(plan, model)
    assert found.objective <= megatron.objective
    if mode != "sharding_propagation":
        assert search(net, ctx, model).objective == pytest.approx(found.objective, rel=1e-9)
    assert any(p.sharding.strategy != mega.sharding.strategy for p, mega in
               zip(plan.nodes, build_plan(mega_net, AutoParallelContext("semi_auto_parallel", 4)).nodes))
    res = train(net, ctx, feeds, runtime=LocalRuntime(4), steps=2)
    assert_same(res, standalone(net, feeds, steps=2))
