"""The parameters one tensor-parallel rank of a pipeline stage holds: the one home of the count the
closed form (`analytic`) and the scale program (`scale_program`) price gradients, parameter gathers
and the optimizer by, and the count the runnable programs hold (tests/test_one_compiler.py).

Megatron-LM's placement (megatron/core/transformer, tensor_parallel/layers.py): the column-parallel
linears (QKV, MLP in) shard weight and bias over the t ranks, the row-parallel ones (attention
output, MLP out) shard the weight and keep the bias whole on every rank; layer norms are whole on
every rank; the word embedding and the output layer are vocabulary-parallel (V_padded h / t); the
learned position table (s h, GPT) is whole on every rank of the first stage, the final norm on the
last. Experts split over ep x expert_tp ranks. Multi-token prediction's modules (and, untied on p > 1,
a copy of the word embedding) sit on the last stage's device (`simulator.cost.mtp`).
"""

from __future__ import annotations

from simulator.cost.model_presets import ModelSpec
from simulator.cost.scale_kernels import padded_vocab


def replicated_layer_params(model: ModelSpec) -> int:
    """Per layer, the parameters every tensor rank holds whole: two norms (scale and shift, or the
    RMSNorm scale), with biases the row-parallel linears' biases (attention output, dense MLP out),
    and an MoE layer's router."""
    h = model.hidden
    norms = 2 * (2 * h if model.biases else h)
    row_biases = (h + (0 if model.num_experts else h)) if model.biases else 0
    router = h * model.num_experts            # the MoE router's h x E weight
    return norms + row_biases + router


def layer_params_on_rank(model: ModelSpec, tp: int, ep: int = 1, expert_tp: int | None = None) -> tuple[float, float]:
    """(dense, expert) parameters of one layer on one tensor rank of an expert-parallel rank; the
    experts split over ep x expert_tp ranks (Megatron-Core's expert tensor parallelism, `cost.moe`;
    None: expert_tp = tp)."""
    experts = model.num_experts
    expert = experts * model.mlp_params(model.moe_ffn_hidden) if experts else 0
    whole = replicated_layer_params(model)
    dense = (model.layer_params() - expert - whole) / tp + whole
    return dense, expert / (ep * (tp if expert_tp is None else expert_tp))


def heads_on(model: ModelSpec, k: int, pp: int, last: int | None = None) -> int:
    """Vocabulary matrices on pipeline device k: the embedding on the first, the output layer on
    `last`, the device of the last model stage (default pp - 1; a V-shaped schedule's is 0); one
    device holds both when it holds both ends and they are untied."""
    last = pp - 1 if last is None else last
    return (k == 0) + (k == last and (last != 0 or not model.tied_embeddings))


def output_layer_own_unit(model: ModelSpec, pp: int) -> bool:
    """ZeRO-3 / FSDP: is the output layer gathered as a unit of its own (on the last device)? Yes
    unless it is the tied embedding on the one device of p = 1."""
    return pp > 1 or not model.tied_embeddings


def embedding_params_on_rank(model: ModelSpec, tp: int) -> float:
    """The input embedding on one tensor rank: its V_padded h / t rows and the whole position table."""
    return padded_vocab(model, tp) * model.hidden / tp + (model.seq * model.hidden if model.position_embedding else 0)


def head_params_on_rank(model: ModelSpec, tp: int) -> float:
    """The output end on one tensor rank: the final norm (whole) and, untied, the V_padded h / t
    output layer (tied: the first stage's embedding, its gradient summed with it)."""
    h = model.hidden
    return (2 * h if model.biases else h) + padded_vocab(model, tp) * h / tp


def ends_params_on_rank(model: ModelSpec, tp: int, k: int, pp: int, last: int | None = None) -> float:
    """Embedding, position table, final norm and output layer held by pipeline device k on one
    tensor rank (`last`: the device of the last model stage, `heads_on`)."""
    last = pp - 1 if last is None else last
    out = embedding_params_on_rank(model, tp) if k == 0 else 0.0
    if k == last:
        out += head_params_on_rank(model, tp)
        if embedding_copy(model, last):       # MTP's copy of the word embedding on the last stage
            out += padded_vocab(model, tp) * model.hidden / tp
        if heads_on(model, k, pp, last) == (k == 0):    # both ends on one device, tied: one matrix
            out -= padded_vocab(model, tp) * model.hidden / tp
    return out


def mtp_params_on_rank(model, tp: int, ep: int = 1, expert_tp: int | None = None) -> tuple[float, float]:
    """(dense, expert) parameters of all the MTP modules on one tensor rank: each its layer's
    (`rank_params.layer_params_on_rank`), eh_proj's 2h h / t and three whole norms."""
    n = model.mtp_num_layers
    if not n:
        return 0.0, 0.0
    h = model.hidden
    dense, expert = layer_params_on_rank(model.mtp_layer(), tp, ep, expert_tp)
    return n * (dense + 2 * h * h / tp + 3 * (2 if model.biases else 1) * h), n * expert


def mtp_replicated_params(model) -> float:
    """Parameters of the MTP modules whose gradients are partial sums under SP: the layers' and the norms'."""
    h = model.hidden
    return model.mtp_num_layers * (replicated_layer_params(model.mtp_layer()) + 3 * (2 if model.biases else 1) * h)


def embedding_copy(model, last: int) -> bool:
    """Does the last model stage's device `last` hold its own copy of the word embedding for MTP
    (untied embeddings, not on the first device; module docstring)?"""
    return bool(model.mtp_num_layers) and last != 0 and not model.tied_embeddings


def stage_params_on_rank(model: ModelSpec, tp: int, ep: int, layers: int, k: int, pp: int,
                         expert_tp: int | None = None, last: int | None = None,
                         dense_layers: int = 0) -> tuple[float, float]:
    """(dense, expert) parameters of pipeline device k (holding `layers` layers, `dense_layers` of
    them a mixed model's dense ones, `layer_kinds`) on one tensor rank."""
    dense, expert = layer_params_on_rank(model, tp, ep, expert_tp)
    n = layers - dense_layers
    plain = layer_params_on_rank(model.dense_layer(), tp)[0] if dense_layers else 0.0
    mtp = mtp_params_on_rank(model, tp, ep, expert_tp) if k == (pp - 1 if last is None else last) else (0.0, 0.0)
    return n * dense + dense_layers * plain + ends_params_on_rank(model, tp, k, pp, last) + mtp[0], n * expert + mtp[1]
