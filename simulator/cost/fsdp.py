"""FSDP as PyTorch FSDP2 (`fully_shard`) and Megatron-FSDP run it: the rules both cost models read.

ZeRO-3 (`zero_stage=3`) with `fsdp` = "fsdp2" or "megatron_fsdp" (`simulator.vocabulary`):

Units. Every transformer layer is one FSDP unit (torchtitan `apply_fsdp` wraps each block; the
embedding and the final norm + output layer are units of their own). A unit's parameters are
all-gathered as ONE collective of 2 P_u / (d c) bytes per rank (FSDP2 `FSDPParamGroup`: one
all-gather per group; DeepSpeed instead gathers each sub-module, `zero3_fetch`), and its
gradients reduce-scattered as one collective of `grad_reduce_bytes` x P_u (FSDP2's
`reduce_dtype`, torchtitan `mixed_precision_reduce` = float32).

Parameters (`gather_flags`, per layer chunk, in the order of the device's schedule actions):
  before a forward the unit is gathered unless it is still unsharded; after the forward it is
  resharded when `reshard_after_forward` (torchtitan `fsdp_reshard_after_forward`: "default" is on
  without a pipeline and off with one, torchtitan `get_fsdp_reshard_after_forward_policy`,
  "always", "never"; Megatron `--torch-fsdp2-no-reshard-after-forward`); a backward gathers it
  unless still unsharded, and reshards it after, except under a pipeline: torch.distributed.
  pipelining runs every backward but the last with `set_reshard_after_backward(False)` and
  `set_requires_gradient_sync(False)` (torch/distributed/pipelining/stage.py,
  `backward_maybe_with_nosync`), so the parameters stay unsharded to the end of the step.
  The output layer is gathered with the forward and not resharded before its backward (they are
  adjacent; torchtitan does not reshard the last unit). Full recomputation re-runs the forward
  inside the unit's backward, after its gather: no third gather (unlike DeepSpeed).
Gradients (`reduce_every_microbatch`): FSDP2 reduce-scatters every unit after every backward
  (its default `requires_gradient_sync=True`; `set_requires_gradient_sync(False)` on all but the
  last micro-batch changes it, which torch's pipelining does: with a pipeline every unit is
  reduce-scattered once per step, after the stage's last backward, and the unsharded gradients
  accumulate in `reduce_dtype` until then). Megatron-FSDP reduce-scatters after every backward
  with optim_grads / optim_grads_params whatever `no_sync` says (megatron_fsdp.py: "For grads
  shard mode there will actually always be gradient sync happening").
Hybrid sharding (HSDP, `dp_replicate` R > 1; torchtitan data_parallel_replicate_degree x
  data_parallel_shard_degree, Megatron --num-distributed-optimizer-instances): the d c data x
  context ranks split into R replicas of d c / R (`ParallelConfig.shard_group`; the replicate mesh
  dimension outside the shard one, torchtitan's ["dp_replicate", "dp_shard"]); a unit is gathered
  and reduce-scattered inside its shard group, and each reduce-scattered shard is then all-reduced
  across the R replicas holding it (`ParallelConfig.replicate_group`; FSDP2 `foreach_reduce`), on the
  same stream after the reduce-scatter; parameters, gradients and optimizer states are sharded
  d c / R ways (`ParallelConfig.shard_size`). Not with expert parallelism (refused).
Experts (MoE with ep > 1): a layer unit's expert parameters are sharded, gathered and
  reduce-scattered over the expert-data-parallel group (`ParallelConfig.edp_group`, t c d / (etp ep)
  ranks: torchtitan shards its experts over the data-parallel ranks left by expert parallelism,
  Megatron-FSDP over its expert-data-parallel group), its dense ones over the data x context group;
  one collective each, one after the other.
Copy-out (`copy_out_bytes`): FSDP2 copies each gathered unit into its parameters' tensors on the
  compute stream before the unit computes (4 bytes per element); priced as compute in both models.
Overlap (`overlaps`): FSDP2 runs its all-gathers and reduce-scatters on their own streams and
  prefetches the next unit (implicit forward prefetch, backward prefetch): always on.
  Megatron-FSDP does so with `--overlap-param-gather` / `--overlap-grad-reduce` (the vocabulary's
  `overlap_param_gather` / `overlap_grad_reduce`). The prefetch is one unit deep: unit i + 1's
  gather starts once unit i - 1's compute is done, so it overlaps unit i's compute (FSDP2 frees
  a gathered unit before the one after next is gathered; Zhao et al. 2023, PyTorch FSDP, Sec. 4.3,
  rate limiter). The embedding and output units' gradients are reduce-scattered once per step with
  the optimizer (priced so in both models; FSDP2 reduces them per micro-batch like the layers).

Memory (`fsdp_buffer_bytes`, per rank, beyond the sharded parameters, gradients and optimizer
states of `simulator.model_states`): 2 bytes x the unsharded units held at once (with
`reshard_after_forward` the current and the prefetched one; without it every layer of the stage
between its forward and backward) + the unsharded gradients in flight, `grad_reduce_bytes` x two
units (the one computed and the one being reduce-scattered) or, with a pipeline (no gradient sync
until the last micro-batch), `grad_reduce_bytes` x every parameter of the stage.
"""

from __future__ import annotations

from simulator.cost.comm import collective_time_s
from simulator.errors import ParasimError
from simulator.parallel.schedule_registry import make_schedule

FSDP_IMPLS = ("fsdp2", "megatron_fsdp")
# FSDP2's copy-out: after a unit's all-gather, `foreach_all_gather_copy_out` splits the gathered flat
# buffer into each parameter's unsharded tensor (torch.ops.fsdp.split_with_sizes_copy, called from
# FSDPParamGroup.wait_for_unshard on the compute stream: torch/distributed/fsdp/_fully_shard/
# _fsdp_collectives.py, _fsdp_param_group.py): read 2 + write 2 bytes per unsharded 16-bit element.
# Megatron-FSDP's parameters are views into its gathered buffer: no copy.
COPY_OUT_BYTES = 4


def copy_out_bytes(cfg, elements: float) -> float:
    """HBM bytes the compute stream moves after gathering a unit of `elements` (COPY_OUT_BYTES)."""
    return COPY_OUT_BYTES * elements if getattr(cfg, "fsdp", "none") == "fsdp2" else 0.0


def is_fsdp(cfg) -> bool:
    """ZeRO-3 as FSDP (per-layer units) rather than DeepSpeed's per-sub-module fetches."""
    return getattr(cfg, "fsdp", "none") in FSDP_IMPLS and cfg.zero_stage == 3


def reshard_after_forward(cfg) -> bool:
    """torchtitan's policy: "always", "never", or "default" = no pipeline (module docstring)."""
    policy = getattr(cfg, "reshard_after_forward", "default")
    if policy == "default":
        return cfg.pp == 1 or cfg.fsdp == "megatron_fsdp"
    return policy == "always"


def keeps_unsharded(cfg) -> bool:
    """FSDP2 under torch's pipelining: parameters unsharded from their first gather to the end of the step."""
    return cfg.fsdp == "fsdp2" and cfg.pp > 1


def reduce_every_microbatch(cfg) -> bool:
    """Are gradients reduce-scattered after every micro-batch's backward (module docstring)?
    DeepSpeed ZeRO-2/3 and Megatron-FSDP optim_grads(_params): yes; FSDP2: yes unless pipelined."""
    if getattr(cfg, "fsdp", "none") == "fsdp2":
        return cfg.pp == 1
    return cfg.zero_stage >= 2


def overlaps(cfg, A) -> tuple[bool, bool]:
    """(parameter gathers prefetched, gradient reductions overlapped) of an FSDP configuration."""
    if cfg.fsdp == "fsdp2":
        return True, True
    return A.overlap_param_gather, A.overlap_grad_reduce


def check_fsdp(cfg) -> None:
    """The rules of the FSDP knobs, with the numbers (called by `ParallelConfig`)."""
    fsdp = getattr(cfg, "fsdp", "none")
    if fsdp not in ("none",) + FSDP_IMPLS:
        raise ParasimError(f"unknown fsdp {fsdp!r}; known none, {', '.join(FSDP_IMPLS)}")
    policy = getattr(cfg, "reshard_after_forward", "default")
    if policy not in ("default", "always", "never"):
        raise ParasimError(f"reshard_after_forward must be default, always or never, got {policy!r}")
    if fsdp == "fsdp2" and cfg.zero_stage != 3:
        raise ParasimError(f"fsdp2 (PyTorch fully_shard) shards parameters, gradients and optimizer states: it is "
                           f"zero_stage 3, got zero_stage {cfg.zero_stage}")
    if policy != "default" and fsdp == "none":
        raise ParasimError(f"reshard_after_forward={policy} is an FSDP setting: give fsdp=fsdp2 or megatron_fsdp")
    replicas = getattr(cfg, "dp_replicate", 1)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ParasimError(f"dp_replicate must be a positive integer, got {replicas!r}")
    if replicas > 1 and not (fsdp in FSDP_IMPLS and cfg.zero_stage == 3):
        raise ParasimError(f"dp_replicate={replicas} (hybrid sharding) is priced for FSDP only: give zero_stage=3 "
                           f"with fsdp=fsdp2 or megatron_fsdp (got zero_stage={cfg.zero_stage}, fsdp={fsdp})")
    if replicas > 1 and cfg.ep > 1:
        raise ParasimError(f"dp_replicate={replicas} with expert parallelism ep={cfg.ep} is not priced: the experts' "
                           f"replicas would span the expert-data-parallel group")
    if cfg.dp % replicas:
        raise ParasimError(f"dp_replicate={replicas} must divide dp={cfg.dp} (each replica shards over "
                           f"dp / dp_replicate x cp ranks)")


def gather_flags(cfg, kinds_chunks) -> list[bool]:
    """For each (kind, chunk) schedule action of one device ("F", "BW", "B", "W"): does it
    all-gather its chunk's units (module docstring)? W (weight gradients only) never does."""
    raf, keep = reshard_after_forward(cfg), keeps_unsharded(cfg)
    unsharded: dict[int, bool] = {}
    out = []
    for kind, chunk in kinds_chunks:
        if kind == "W":
            out.append(False)
            continue
        held = unsharded.get(chunk, False)
        out.append(not held)
        if kind == "F":
            unsharded[chunk] = not raf
        else:
            unsharded[chunk] = keep
    return out


def pass_exposed_s(units, prefetch: bool, overlap_rs: bool) -> float:
    """Seconds one pass over `units` [(gather_s, compute_s, reduce_s), ...] (in execution order)
    adds to its compute: the gathers and reduce-scatters share one stream in program order
    (gather of unit i + 1, then unit i's reduce-scatter), a gather starts once the compute two
    units back is done (one-unit prefetch); blocking ones hold the compute (module docstring)."""
    stream = comp_end = 0.0     # the stream is free; the last compute's end
    ready: list[float] = [0.0] * len(units)
    compute = 0.0
    if prefetch and units:
        stream = ready[0] = units[0][0]
    for i, (_a, c, r) in enumerate(units):
        if prefetch and i + 1 < len(units):       # issued before unit i computes, after unit i - 1 did
            stream = ready[i + 1] = max(stream, comp_end) + units[i + 1][0]
        begin = max(comp_end, ready[i]) if prefetch else comp_end + units[i][0]
        comp_end = begin + c
        compute += c
        if r:
            if overlap_rs:
                stream = max(stream, comp_end) + r
            else:
                comp_end += r
    return max(comp_end, stream if overlap_rs else 0.0) - compute


def fsdp_buffer_bytes(cfg, layer_params: float, stage_layers: int, stage_params: float,
                      grad_reduce_bytes: float) -> float:
    """Bytes of unsharded units and gradients in flight on one rank (module docstring)."""
    if not is_fsdp(cfg) or cfg.dp * cfg.cp == 1:
        return 0.0
    if keeps_unsharded(cfg):
        return (2 + grad_reduce_bytes) * stage_params
    held = 2 if reshard_after_forward(cfg) else stage_layers
    return 2 * layer_params * min(held, stage_layers) + grad_reduce_bytes * layer_params * min(2, stage_layers)


def gather_counts(cfg, k: int) -> dict[int, tuple[int, int]]:
    """{chunk: (forward passes that gather, backward passes that gather)} of pipeline device k
    over one step (`gather_flags`; closed for every case but a pipeline with resharding)."""
    m, v = cfg.microbatches, cfg.virtual_stages
    raf = reshard_after_forward(cfg)
    if not keeps_unsharded(cfg):
        return {c: (m, m if raf else 0) for c in range(v)}
    if not raf:
        return {c: (1, 0) for c in range(v)}
    actions = make_schedule(cfg.schedule, cfg.pp, m, v).actions[k]
    flags = gather_flags(cfg, [(a.kind, a.chunk) for a in actions])
    out = {c: [0, 0] for c in range(v)}
    for a, f in zip(actions, flags):
        if f:
            out[a.chunk][a.kind != "F"] += 1
    return {c: (x[0], x[1]) for c, x in out.items()}


def fsdp_sync(cfg, A, topo, k: int, chunk_layers, layer_params: tuple[float, float], emb_params: float, per_layer,
              logits_fwd_s: float, logits: bool, heads: int, copy_s=(0.0, 0.0), plain=None):
    """(seconds by collective kind, exposed seconds, copy-out seconds, the seconds the first
    micro-batch's forward and the last one's backward wait for their gathers and blocking reductions,
    which stretch a pipeline's fill and drain) of one step's FSDP collectives
    on pipeline device k (module docstring): `per_layer` = (forward, backward) compute seconds of one
    layer and micro-batch, `chunk_layers` the model chunks' layers (model order), `heads` the
    vocabulary matrices on k (embedding, output layer), `layer_params` (dense, expert) and
    `emb_params` per tensor-parallel rank (the experts' part over the expert-data-parallel group), `copy_s` the copy-out seconds after gathering a layer / a vocabulary unit
    (`copy_out_bytes`), which run before the unit's compute. `plain`: a mixed model's dense layers
    (`layer_kinds`), (per model chunk the dense flag of each layer, their (dense, expert) parameters,
    (forward, backward) seconds and copy-out seconds), each such layer a unit of its own size."""
    p, v, m = cfg.pp, cfg.virtual_stages, cfg.microbatches
    grp, algo = cfg.shard_group(), A.collective_algo
    prefetch, overlap_rs = overlaps(cfg, A)
    per_mb = reduce_every_microbatch(cfg)

    def unit(params, times, copy):    # a layer unit's gather, reductions by kind, compute and copy-out
        dense, expert = params
        egrp = cfg.edp_group() if expert else ()

        def both(kind, per_element):   # the dense part over the shard group, the experts' over theirs
            x = collective_time_s(kind, per_element * dense, grp, topo, algo)
            return x + (collective_time_s(kind, per_element * expert, egrp, topo, algo) if expert else 0.0)
        rs = {"reduce_scatter": both("reduce_scatter", A.grad_reduce_bytes),
              "all_reduce": replica_all_reduce_s(cfg, A, topo, dense)}
        return both("all_gather", 2), rs, sum(rs.values()), times[0], times[1], copy

    units = {False: unit(layer_params, per_layer, copy_s[0])}
    if plain:
        flags, params, times, copy = plain
        units[True] = unit(params, times, copy)
    else:
        flags = [(False,) * n for n in chunk_layers]
    a_emb = collective_time_s("all_gather", 2 * emb_params, grp, topo, algo)
    # a unit's reduction: reduce-scatter in the shard group, then (HSDP) all-reduce of the shard
    # across the replicas, one after the other on the reduction stream (module docstring)
    rs_emb = {"reduce_scatter": collective_time_s("reduce_scatter", A.grad_reduce_bytes * emb_params * heads, grp,
                                                  topo, algo),
              "all_reduce": replica_all_reduce_s(cfg, A, topo, emb_params * heads)}
    r_emb = sum(rs_emb.values())
    c_emb = copy_s[1]
    counts = gather_counts(cfg, k)
    gathers = exposed = copies = held = tail = 0.0
    reduced = dict.fromkeys(rs_emb, 0.0)
    for c in range(v):
        s = c * p + k
        mine = [units[x] for x in flags[s]]            # model order; the backward runs them reversed
        fwd = [(a, f + cp, 0.0) for a, _rs, _r, f, _b, cp in mine]
        if s == 0:
            fwd = [(a_emb, c_emb, 0.0)] + fwd
        if s == p * v - 1 and logits and heads - (k == 0) > 0:     # a separate output matrix
            fwd = fwd + [(a_emb, logits_fwd_s + c_emb, 0.0)]
        n_f, n_b = counts[c]
        back = mine[::-1]
        bwd_g = [(a, bw + cp, r if per_mb else 0.0) for a, _rs, r, _f, bw, cp in back]
        bwd_0 = [(0.0, bw, r if per_mb else 0.0) for _a, _rs, r, _f, bw, _c in back]
        exposed += n_f * pass_exposed_s(fwd, prefetch, overlap_rs) + n_b * pass_exposed_s(bwd_g, prefetch, overlap_rs)
        exposed += (m - n_b) * pass_exposed_s(bwd_0, prefetch, overlap_rs)
        # what holds the compute in the pipeline's fill and drain: the first micro-batch's forward
        # and the last one's backward (without the reductions the stream overlaps)
        last_b = [(u[0], u[1], 0.0 if overlap_rs else u[2]) for u in (bwd_g if n_b == m else bwd_0)]
        held += (pass_exposed_s(fwd, prefetch, overlap_rs) if n_f else 0.0) + pass_exposed_s(last_b, prefetch,
                                                                                          overlap_rs)
        gathers += n_f * sum(u[0] for u in fwd) + n_b * sum(u[0] for u in mine)
        copies += n_f * (sum(u[5] for u in mine) + (len(fwd) - len(mine)) * c_emb) + n_b * sum(u[5] for u in mine)
        for u in mine:
            for kind, x in u[1].items():
                reduced[kind] += (m if per_mb else 1) * x
        if not per_mb:
            # reduced once per step (pipelined FSDP2): each unit's reduce-scatter follows its backward in the
            # last micro-batch, overlapping the rest of that backward when overlapped
            tail += (pass_exposed_s([(0.0, bw, r) for _a, _rs, r, _f, bw, _c in back], False, overlap_rs)
                     - pass_exposed_s([(0.0, bw, 0.0) for _a, _rs, _r, _f, bw, _c in back], False, overlap_rs))
    # the embedding's after the last backward, before the optimizer
    exposed += tail + r_emb
    by_kind = {"all_gather": gathers}
    for kind in rs_emb:
        if reduced[kind] or rs_emb[kind]:
            by_kind[kind] = reduced[kind] + rs_emb[kind]
    return by_kind, exposed, copies, held


def replica_all_reduce_s(cfg, A, topo, params: float) -> float:
    """HSDP: the all-reduce of a unit's reduce-scattered gradient shard (grad_reduce_bytes x params /
    shard size) across the dp_replicate replicas (FSDP2 `foreach_reduce`: reduce-scatter over the
    shard mesh dimension, then all-reduce over the replicate one); 0 without replicas."""
    if cfg.dp_replicate == 1:
        return 0.0
    return collective_time_s("all_reduce", A.grad_reduce_bytes * params / cfg.shard_size, cfg.replicate_group(),
                             topo, A.collective_algo)
