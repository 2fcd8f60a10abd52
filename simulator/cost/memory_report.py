"""Peak memory per device of a training configuration, per component, as Megatron-LM counts it.

`memory_report(model, config, hardware, recipe=..., flash_attention=...)` follows Megatron-LM's
`megatron/training/theoretical_memory_usage.py` (the estimator its users run) term by term:

Parameters on a pipeline stage (Megatron: `compute_weight_and_optimizer_memory`): its L_k layers
(attention 2h^2 (1 + kv/a) + MLP (2 or 3) h f, split t ways; two norms replicated), the word
embedding V_pad h / t on the first stage, the output matrix V_pad h / t on the last one (tied or
not: with p > 1 Megatron keeps a copy there; with p = 1 an untied model holds both matrices) and
the final norm on the last stage; MoE experts split over ep x etp, their optimizer states sharded
over the expert-data-parallel group t c d / (etp ep). V_pad is the vocabulary padded to
a multiple of 128 t (`ModelSpec.padded_vocab`). Bytes: the precision recipe and ZeRO stage of
`simulator.model_states` (Megatron: 18, or 6 + 12/d with --use-distributed-optimizer = stage 1);
the optimizer shards over d x cp ranks.

Activations of the first stage (Megatron: `compute_activation_memory`, Korthikanti et al. 2022):
  layers:    per-layer bytes (`cost.memory.activation_bytes_per_layer`, with the model's dropout)
             x L_1 x in-flight micro-batches (`cost.memory.in_flight_microbatches`: min(p, m) for
             1F1B, p (1 + (p-1)/(p v)) interleaved; with uneven interleaved chunks each in-flight
             chunk counts its own layers, `_layers_in_flight`);
  embedding: (8 s b + s b h) x in-flight (token ids in int64, the embedding dropout mask; 8 s b
             without dropout);
             / t with sequence parallelism;
  pp = 1:    the output layer: 4 s b h (1 + V_pad / h) / t with SP (fp32 final-norm output and
             logits); without SP Megatron counts 2 (s b V_pad / t + s b h);
  without SP Megatron adds 5 % of the activations for temporaries (`allowance_bytes`).
With p > 1 the last stage holds one micro-batch (m for GPipe) and the logits 4 s b V_pad / t; the
report gives the stage whose total is larger. Context parallelism divides s by cp. Full
recomputation adds one layer's un-recomputed activations (the layer being recomputed).
Activations are Korthikanti's 16-bit counts; with `dtype` fp32 they are taken as twice those bytes
(an upper bound: the 1-byte dropout masks, at most 2 s b h + a s^2 b of a layer, do not double).
ZeRO-3 adds the gathered largest layer, 4 bytes per parameter (DeepSpeed's
`estimate_zero3_model_states_mem_needs` `largest_layer_memory`); as FSDP (`fsdp` fsdp2 or
megatron_fsdp) the unsharded layers and gradients in flight instead (`simulator.cost.fsdp`).
"""

from __future__ import annotations

from simulator.cost.fsdp import fsdp_buffer_bytes, is_fsdp
from simulator.cost.hardware import DTYPE_NBYTES, Hardware, get_hardware
from simulator.cost.layer_kinds import device_dense_layers, mixed
from simulator.cost.memory import MemoryBreakdown, activation_bytes_per_layer, in_flight_microbatches
from simulator.cost.model_presets import ModelSpec, get_model
from simulator.errors import ParasimError
from simulator.model_states import model_state_parts
from simulator.vocabulary import DEFAULTS


def _stage_layers(model: ModelSpec, cfg) -> tuple[int, ...]:
    """Layers per pipeline stage: the configuration's split (uneven first/last stages,
    `ParallelConfig.stage_layers`) where it has one, else L / p each."""
    if hasattr(cfg, "stage_layers"):
        return tuple(cfg.stage_layers(model.layers))
    if model.layers % (cfg.pp * cfg.virtual_stages):
        raise ParasimError(f"{model.layers} layers cannot be split evenly into pp x v = "
                           f"{cfg.pp * cfg.virtual_stages} chunks")
    return (model.layers // cfg.pp,) * cfg.pp


def layer_params_split(model: ModelSpec) -> tuple[float, float, float]:
    """(t-sharded, replicated, expert) parameters of one layer (Megatron's split: weights and
    biases of attention, dense MLP and shared experts are t-sharded; norms replicated; routed experts
    ep x etp)."""
    h = model.hidden
    norms = 2 * (2 * h if model.biases else h)
    if model.num_experts:
        experts = model.num_experts * model.mlp_params(model.moe_ffn_hidden)
        shared = model.mlp_params(model.moe_shared_expert_hidden) if model.moe_shared_expert_hidden else 0
        return model.attention_params() + shared, norms + h * model.num_experts, experts
    return model.attention_params() + model.mlp_params(), norms, 0.0


def stage_params(model: ModelSpec, tp: int, layers: int, first: bool, last: bool, ep: int = 1,
                 etp: int | None = None) -> float:
    """Parameters one device of a stage holds (module docstring); experts split over ep x etp
    (etp None: tp)."""
    return sum(stage_param_split(model, tp, layers, first, last, ep, etp))


def stage_param_split(model: ModelSpec, tp: int, layers: int, first: bool, last: bool, ep: int = 1,
                      etp: int | None = None, dense_layers: int = 0) -> tuple[float, float]:
    """(dense, expert) parameters one device of a stage holds (`dense_layers` of its `layers` a mixed
    model's dense ones, `layer_kinds`): the experts' optimizer states are sharded over their own
    expert-data-parallel group (Megatron-Core's distributed optimizer)."""
    h, V = model.hidden, model.padded_vocab(tp)
    sharded, replicated, experts = layer_params_split(model)
    expert = (layers - dense_layers) * experts / (ep * (tp if etp is None else etp))
    n = (layers - dense_layers) * (sharded / tp + replicated)
    if dense_layers:
        sharded, replicated, _ = layer_params_split(model.dense_layer())
        n += dense_layers * (sharded / tp + replicated)
    if first:
        n += V * h / tp + (model.seq * h if model.position_embedding else 0)
    if last and (not first or not model.tied_embeddings):
        n += V * h / tp
    if last:
        n += 2 * h if model.biases else h
    if last and model.mtp_num_layers:    # the MTP modules and, untied, a copy of the embedding (`cost.mtp`)
        sharded, replicated, experts = layer_params_split(model.mtp_layer())
        norm = 2 * h if model.biases else h
        n += model.mtp_num_layers * (sharded / tp + replicated + 2 * h * h / tp + 3 * norm)
        expert += model.mtp_num_layers * experts / (ep * (tp if etp is None else etp))
        n += V * h / tp if not first and not model.tied_embeddings else 0
    return n, expert


def largest_layer_params(model: ModelSpec) -> float:
    """Largest single module (one weight matrix and its bias) as DeepSpeed's `model_to_params` finds
    it in a Hugging Face implementation: the embedding V h, the fused QKV h (h + 2 kv), or one MLP
    projection h f (gate and up are separate modules in Llama)."""
    h, f = model.hidden, model.moe_ffn_hidden if model.num_experts else model.ffn_hidden
    bias = model.biases
    return float(max(model.vocab * h, h * (h + 2 * model.kv_dim) + (h + 2 * model.kv_dim) * bias,
                     h * f + f * bias))


def _layers_in_flight(cfg, chunks: tuple[int, ...], in_flight: float) -> float:
    """Layers whose activations the first device holds at its peak. Interleaved (Megatron's
    schedule, Narayanan et al. 2021 Sec. 2.2): its warm-up runs forwards in groups of p
    micro-batches, chunk 0, 1, ..., v-1, 0, ...; at the peak it holds in_flight x v = p v + p - 1
    chunk forwards, the k-th of chunk (k // p) mod v, each with that chunk's layers. Equal chunks
    give Megatron's L_1 x in_flight; uneven ones (the embedding and head balanced, first/last
    stage layers) count each chunk's own layers (at most the m v forwards of a step). Other
    schedules: L_1 x in_flight."""
    p, v = cfg.pp, cfg.virtual_stages
    mine = [chunks[c * p] for c in range(v)]
    if v == 1 or len(set(mine)) == 1:
        return sum(mine) * in_flight
    held = min(round(in_flight * v), cfg.microbatches * v)
    return float(sum(mine[(k // p) % v] for k in range(held)))


def _activations(model: ModelSpec, cfg, L_k: int, in_flight: float, first: bool, last: bool,
                 flash_attention: bool, p_chunks: tuple[int, ...] = ()) -> tuple[float, float, float]:
    """(layer + embedding activations, output-layer activations, 5 % allowance) of one stage."""
    cp = getattr(cfg, "cp", 1)
    s, b, h, t, sp = model.seq // cp, cfg.micro_batch_size, model.hidden, cfg.tp, cfg.sequence_parallel
    V = model.padded_vocab(t)
    per_layer = activation_bytes_per_layer(s, b, h, model.heads, t, sp, cfg.recompute, model.ffn_hidden,
                                           flash_attention, model.dropout)
    acts = per_layer * (_layers_in_flight(cfg, p_chunks, in_flight) if first and p_chunks else L_k * in_flight)
    if cfg.recompute == "full":
        acts += activation_bytes_per_layer(s, b, h, model.heads, t, sp, "none", model.ffn_hidden, flash_attention,
                                           model.dropout)
    if first:
        acts += (8 * s * b + s * b * h * model.dropout) * in_flight / (t if sp else 1)
    out = 0.0
    if last:
        out = 4 * s * b * h * (1 + V / h) / t if sp else 2 * (s * b * V / t + s * b * h)
        # each MTP module (`cost.mtp`): its layer's activations in flight and its logits again
        out *= 1 + model.mtp_num_layers
        acts += model.mtp_num_layers * per_layer * in_flight
    allowance = 0.0 if sp else 0.05 * (acts + out)
    return acts, out, allowance


def activation_widening(dtype: str) -> float:
    """Activation bytes relative to Korthikanti's 16-bit counts: 1, or 2 for fp32 (docstring)."""
    if dtype not in DTYPE_NBYTES or DTYPE_NBYTES[dtype] < 2:
        raise ParasimError(f"activation dtype must be one of bf16, fp16, fp32, fp64, got {dtype!r}")
    return DTYPE_NBYTES[dtype] / 2


def memory_report(model: ModelSpec | str, config, hardware: Hardware | str | None = None, *,
                  recipe: str = DEFAULTS["recipe"], flash_attention: bool | None = None,
                  dtype: str = DEFAULTS["dtype"],
                  grad_reduce_bytes: float = DEFAULTS["grad_reduce_bytes"]) -> MemoryBreakdown:
    """Peak bytes per component on the most loaded device (module docstring); `flash_attention`
    None: the model preset's (`ModelSpec.flash_attention`)."""
    model, cfg = get_model(model), config
    if flash_attention is None:
        flash_attention = model.flash_attention
    capacity = get_hardware(hardware).memory_bytes if hardware is not None else float("inf")
    p, t, m, v = cfg.pp, cfg.tp, cfg.microbatches, cfg.virtual_stages
    ep, cp = getattr(cfg, "ep", 1), getattr(cfg, "cp", 1)
    if model.heads % t:
        raise ParasimError(f"tp={t} must divide the {model.heads} attention heads")
    if model.seq % cp:
        raise ParasimError(f"cp={cp} must divide the sequence length {model.seq}")
    layers = _stage_layers(model, cfg)
    chunks = tuple(cfg.chunk_layers(model.layers)) if hasattr(cfg, "chunk_layers") else ()
    dense_k = device_dense_layers(model, cfg) if mixed(model) else (0,) * p
    shard_over = cfg.dp * cp // getattr(cfg, "dp_replicate", 1)   # HSDP shards inside a replica (`cost.fsdp`)
    fsdp = is_fsdp(cfg)
    buffers = 4 * largest_layer_params(model) / t if cfg.zero_stage == 3 and not fsdp else 0.0
    widen = activation_widening(dtype)
    candidates = []
    for k in sorted({0, p - 1}):
        first, last = k == 0, k == p - 1
        if p == 1:
            in_flight = 1.0                  # one micro-batch at a time (gradient accumulation)
        elif first:
            in_flight = in_flight_microbatches(cfg.schedule, p, m, v)
        else:
            in_flight = float(m) if cfg.schedule == "gpipe" else 1.0
        etp = getattr(cfg, "expert_tp", t)
        dense, expert = stage_param_split(model, t, layers[k], first, last, ep, etp, dense_k[k])
        par, grad, opt = model_state_parts(dense, shard_over, cfg.zero_stage, recipe)
        if expert:    # over the expert-data-parallel group, t c d / (etp ep) ranks
            parts = model_state_parts(expert, max(1, t * shard_over // (etp * ep)), cfg.zero_stage, recipe)
            par, grad, opt = par + parts[0], grad + parts[1], opt + parts[2]
        if fsdp:   # the unsharded units and gradients in flight (`simulator.cost.fsdp`)
            unit = stage_params(model, t, 1, False, False, ep)    # a mixed model's larger kind (`layer_kinds`)
            unit = max(unit, stage_params(model.dense_layer(), t, 1, False, False)) if mixed(model) else unit
            buffers = fsdp_buffer_bytes(cfg, unit, layers[k], dense + expert, grad_reduce_bytes)
        acts, out, allowance = _activations(model, cfg, layers[k], in_flight, first, last, flash_attention,
                                            chunks if p > 1 else ())
        acts, allowance = acts * widen, allowance * widen
        candidates.append(MemoryBreakdown(par + grad + opt, acts, out, capacity, par, grad, opt, buffers,
                                          allowance, k))
    return max(candidates, key=lambda r: r.total_bytes)
