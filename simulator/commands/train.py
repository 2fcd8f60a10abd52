"""`parasim train`: real training steps of a strategy on emulated devices, checked against one device."""

from __future__ import annotations

import json
import sys
from dataclasses import fields

import numpy as np

from ..cost.device_model import run_device_model
from ..cost.hardware import RUN_HARDWARE, get_hardware, hardware_names
from ..errors import ParasimError
from ..limits import MAX_RUN_DEVICES, MAX_SCHEDULE_FILE_BYTES, check, read_bounded
from ..parallel.config import CP_COMM_TYPES, GRAD_DTYPES, SCHEDULES, STRATEGIES, TrainConfig
from ..progress import Progress
from ..run_models import MEANING, RUN_MODELS, describe, flag_fields, model_from_flags
from ..trace import STEP_PART_LABELS
from ..training import train
from ..units import fmt_time
from ..vocabulary import BY_NAME, TRAIN_DEFAULTS, canonical_value


def cp_comm_type(text: str) -> str:
    """--cp-comm-type p2p | a2a (the older ring | all-to-all mapped by the vocabulary)."""
    return canonical_value("cp_comm_type", text)

def add_parser(sub) -> None:
    p = sub.add_parser("train", help="train a model with a parallel strategy on emulated devices")
    p.add_argument("--model", choices=sorted(RUN_MODELS), default="gpt",
                   help="; ".join(f"{n}: {describe(n)}" for n in RUN_MODELS) + "; default %(default)s")
    p.add_argument("--strategy", choices=STRATEGIES, default="single", help='the parallel strategy (docs/user-guide.md lists them); default %(default)s')
    p.add_argument("--devices", type=int, default=None,
                   help="emulated devices (default: the product of the degrees given, dp x cp x tp x pp)")
    add_degree_flags(p)
    p.add_argument("--zero", "--zero-stage", dest="zero", type=int, default=TRAIN_DEFAULTS["zero_stage"],
                   help="ZeRO stage 0-3 over the data x context ranks (expert parameters over their expert-data "
                        "ranks); stages 2-3 without a pipeline")
    p.add_argument("--microbatches", type=int, default=TRAIN_DEFAULTS["microbatches"], help='micro-batches per step (pipelines); default %(default)s')
    p.add_argument("--schedule", choices=SCHEDULES, default=TRAIN_DEFAULTS["schedule"],
                   help="pipeline schedule; zb-h1, zb-h2 and dualpipe split backward into B and W "
                        "(also with --tp and --cp)")
    p.add_argument("--virtual-stages", type=int, default=TRAIN_DEFAULTS["virtual_stages"], help='model chunks per device (--schedule interleaved); default %(default)s')
    p.add_argument("--schedule-file", default=None,
                   help="a hand-written schedule: one line per stage, e.g. 'F0 F1 BW0 BW1' (validated)")
    p.add_argument("--bucket-mb", type=float, default=TRAIN_DEFAULTS["bucket_mb"], help="gradient bucket size in MB")
    p.add_argument("--accumulate", type=int, default=TRAIN_DEFAULTS["accumulate"],
                   help="gradient-accumulation micro-steps")
    p.add_argument("--grad-dtype", choices=GRAD_DTYPES, default=TRAIN_DEFAULTS["grad_dtype"], help='dtype of the gradients on the wire (dp); default %(default)s')
    p.add_argument("--no-gradients-mean", action="store_true", help="sum instead of average gradients")
    p.add_argument("--batch", "--global-batch", "--global-batch-size", dest="batch", type=int,
                   default=TRAIN_DEFAULTS["global_batch"], help="global batch size (samples)")
    p.add_argument("--steps", "--train-iters", dest="steps", type=int, default=TRAIN_DEFAULTS["steps"],
                   help='training steps; default %(default)s')
    p.add_argument("--lr", type=float, default=TRAIN_DEFAULTS["lr"], help='learning rate; default %(default)s')
    p.add_argument("--optimizer", choices=BY_NAME["optimizer"].choices, default=TRAIN_DEFAULTS["optimizer"],
                   help='default %(default)s')
    p.add_argument("--seed", type=int, default=TRAIN_DEFAULTS["seed"],
                   help='seed of the weights and the data; default %(default)s')
    for dest, field in flag_fields().items():
        owners = [n for n, m in RUN_MODELS.items() if field in {f.name for f in fields(m)}]
        defaults = ", ".join(f"{n} {getattr(RUN_MODELS[n], field)}" for n in owners)
        p.add_argument("--" + dest.replace("_", "-"), dest=dest, type=type(getattr(RUN_MODELS[owners[0]], field)),
                       default=None, help=f"{MEANING[field]} ({', '.join(owners)}); default: {defaults}")
    p.add_argument("--runtime", choices=("local", "ray"), default=None,
                   help="in-process devices or Ray actors (default: local; ray when --address is given)")
    p.add_argument("--address", default=None, help="Ray cluster address (default: embedded local Ray)")
    p.add_argument("--devices-per-node", type=int, default=None, metavar="N",
                   help="Ray placement group, one bundle per simulated node of N consecutive ranks, so "
                        "intra-node groups stay on one Ray node (default: none; with --address the "
                        "--hardware preset's node size)")
    p.add_argument("--hardware", choices=hardware_names(), default=RUN_HARDWARE,
                   help=f"the preset the steps are priced on (default: {RUN_HARDWARE}, fixed, the same on every "
                        "machine; local: this machine as `parasim calibrate` measured it)")
    p.add_argument("--trace", default=None, help="write the Chrome trace JSON (Perfetto) here")
    p.add_argument("--collective-steps", action="store_true",
                   help="--trace: draw every step of every collective as send/recv events with chunk ids and flow "
                        "arrows (default: one bar per collective)")
    p.add_argument("--fail", default=None, metavar="DEVICE@STEP[,...]",
                   help="inject faults: [KIND:]DEVICE@STEP[#INSTRUCTION], kinds kill (default), fail, slow, drop")
    p.add_argument("--fail-random", type=int, default=0, metavar="N", help="inject N kills at random (seeded)")
    p.add_argument("--fail-seed", type=int, default=0, help="seed of --fail-random")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="K", help="save a checkpoint every K steps")
    p.add_argument("--checkpoint-dir", default=None, help="where checkpoints go (default: a temporary directory)")
    p.add_argument("--keep-last", type=int, default=None, metavar="N",
                   help="keep only the N most recent checkpoints in --checkpoint-dir (default: all)")
    p.add_argument("--resume", default=None, metavar="DIR", help="continue from a checkpoint (any strategy)")
    p.add_argument("--timeout-s", type=float, default=None, help="bounded wait of the Ray runtime per call batch")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def add_degree_flags(p, cp_comm_type_default=TRAIN_DEFAULTS["cp_comm_type"]) -> None:
    """The degrees of a real run (`train`, `checkpoint convert`), with Megatron-LM's long names beside
    parasim's short ones and the vocabulary's defaults (`simulator.vocabulary`)."""
    p.add_argument("--dp", type=int, default=TRAIN_DEFAULTS["dp"], help="data-parallel degree (default: derived)")
    p.add_argument("--pp", "--pipeline-model-parallel-size", dest="pp", type=int, default=TRAIN_DEFAULTS["pp"],
                   help="pipeline stages (default: derived)")
    p.add_argument("--tp", "--tensor-model-parallel-size", dest="tp", type=int, default=TRAIN_DEFAULTS["tp"],
                   help="tensor-parallel degree")
    p.add_argument("--ep", "--expert-model-parallel-size", dest="ep", type=int, default=TRAIN_DEFAULTS["ep"],
                   help="expert-parallel degree")
    p.add_argument("--cp", "--context-parallel-size", dest="cp", type=int, default=TRAIN_DEFAULTS["cp"],
                   help="context-parallel degree: each sequence split cp ways")
    p.add_argument("--cp-comm-type", "--cp-kind", dest="cp_comm_type", type=cp_comm_type, choices=CP_COMM_TYPES,
                   default=cp_comm_type_default, help="p2p: ring attention (K/V blocks around the ring); a2a: "
                   "Ulysses all-to-all (the older ring / all-to-all are accepted)")


def devices_of(a) -> int:
    """--devices, or the product of the degrees given (0, derived, counts as 1)."""
    if a.devices is not None:
        return a.devices
    if min(a.dp, a.pp, a.cp, a.tp) < 0:
        return 1  # TrainConfig names the bad degree
    n = max(a.dp, 1) * a.cp * a.tp * max(a.pp, 1)
    check("a real run's devices (the product of the degrees given)", n, MAX_RUN_DEVICES)
    return n


def config_from_args(a) -> TrainConfig:
    return TrainConfig(
        model_from_flags(a.model, {d: getattr(a, d) for d in flag_fields()}), strategy=a.strategy, devices=devices_of(a), dp=a.dp, pp=a.pp, tp=a.tp, ep=a.ep,
        cp=a.cp, cp_comm_type=a.cp_comm_type,
        zero_stage=a.zero, global_batch=a.batch, microbatches=a.microbatches, schedule=a.schedule,
        virtual_stages=a.virtual_stages, bucket_mb=a.bucket_mb, accumulate=a.accumulate, grad_dtype=a.grad_dtype,
        gradients_mean=not a.no_gradients_mean, schedule_text=_read_schedule(a.schedule_file), optimizer=a.optimizer, lr=a.lr, steps=a.steps, seed=a.seed,
    ).resolved()


def _read_schedule(path: str | None) -> str | None:
    if path is None:
        return None
    data = read_bounded(path, "schedule file", MAX_SCHEDULE_FILE_BYTES, "a schedule file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ParasimError(f"schedule file {path} is not UTF-8 text") from None


def run(a) -> int:
    cfg = config_from_args(a)
    resilient = bool(a.fail or a.fail_random or a.checkpoint_every or a.checkpoint_dir is not None or a.resume)
    _check_options(a)
    runtime = _runtime(a, cfg, resilient)
    model = run_device_model(cfg.devices, a.hardware)
    if a.collective_steps:
        from ..cost.collective_steps import DrawSteps

        model = DrawSteps(model)
    quiet = np.errstate(all="ignore")  # a diverging run is reported once by the check, not by numpy warnings
    quiet.__enter__()
    try:
        result = _train(a, cfg, runtime, model, resilient)
    except MemoryError as e:
        raise ParasimError(f"the real run does not fit in this machine's memory ({e}); shrink --hidden, --layers, "
                           f"--seq or --batch, or price the configuration with `parasim simulate`") from None
    finally:
        quiet.__exit__(None, None, None)
        if runtime is not None:
            runtime.close()
    if a.trace:
        result.trace.save_chrome(a.trace) if not resilient else result.train.trace.save_chrome(a.trace)
    out = {**result.to_dict(), "hardware": a.hardware}
    if a.json:
        print(json.dumps(out, allow_nan=False))
    else:
        _print_text(cfg, out, resilient)
    return _verdict(out)


def _check_options(a) -> None:
    """Refuse option combinations that cannot work, one line each; settle the runtime's name."""
    if a.keep_last is not None and a.checkpoint_dir is None:
        raise ParasimError("--keep-last prunes --checkpoint-dir: give --checkpoint-dir too")
    if a.checkpoint_every < 0 or a.fail_random < 0:
        raise ParasimError(f"--checkpoint-every and --fail-random must be >= 0, got {a.checkpoint_every} and {a.fail_random}")
    if a.timeout_s is not None and not a.timeout_s > 0:
        raise ParasimError(f"--timeout-s must be > 0 seconds, got {a.timeout_s}")
    a.runtime = a.runtime or ("ray" if a.address else "local")
    if a.runtime != "ray" and (a.address or a.devices_per_node is not None):
        raise ParasimError("--address and --devices-per-node place Ray actors: they need --runtime ray, "
                           f"not --runtime {a.runtime}")
    if a.devices_per_node is not None and a.devices_per_node < 1:
        raise ParasimError(f"--devices-per-node must be >= 1, got {a.devices_per_node}")


def _runtime(a, cfg: TrainConfig, resilient: bool):
    """The Ray runtime the options ask for, or None (the loops then make an in-process one)."""
    if a.runtime != "ray":
        return None
    from ..runtime import make_runtime

    kw = {"timeout_s": a.timeout_s} if a.timeout_s else {}
    if a.devices_per_node or a.address:
        kw["devices_per_node"] = a.devices_per_node or get_hardware(a.hardware).devices_per_node
    if resilient:
        from ..runtime.faulty import FaultyDevice

        kw["device_class"] = FaultyDevice
    return make_runtime(a.runtime, cfg.devices, address=a.address, **kw)


def _train(a, cfg: TrainConfig, runtime, model, resilient: bool):
    if not resilient:
        return train(cfg, runtime=runtime, progress=Progress(f"training on {cfg.devices} devices", "steps"),
                     device_model=model)
    from ..faults import parse_faults, random_faults, train_resilient
    from ..parallel.strategies import compile_strategy

    faults = parse_faults(a.fail)
    if a.fail_random:
        faults += random_faults(a.fail_seed, a.fail_random, compile_strategy(cfg).program, cfg.steps)
    return train_resilient(cfg, runtime=runtime, faults=faults, device_model=model, checkpoint_every=a.checkpoint_every,
                           checkpoint_dir=a.checkpoint_dir, resume_from=a.resume, keep_last=a.keep_last)


VERDICT_WORDS = {True: "matches", False: "DOES NOT MATCH", None: "measured only: lower-precision gradients on the wire"}


def _print_text(cfg: TrainConfig, out: dict, resilient: bool) -> None:
    extra = "".join(f", {k}={v}" for k, v in (("cp", cfg.cp), ("ep", cfg.ep)) if v > 1)
    print(f"{cfg.strategy} on {cfg.devices} devices (dp={cfg.dp}, pp={cfg.pp}, tp={cfg.tp}{extra}, m={cfg.m})")
    print("losses: " + " ".join("nan/inf" if x is None else f"{x:.4f}" for x in out["losses"]))
    diff = out["max_rel_weight_diff_vs_single"]
    per_step = out.get("max_step_rel_diff_vs_single")
    bound = out.get("tolerance")
    each = "" if per_step is None else f"; in any one step at most {per_step:.3g}" + \
        ("" if bound is None else f" (the bound: {bound:g})")
    verdict = "DIVERGED, as one device does" if out.get("diverged_as_one_device") \
        else VERDICT_WORDS[out["matches_single_device"]]
    print(f"max relative weight difference vs one device: {'nan/inf' if diff is None else f'{diff:.3g}'} after "
          f"{cfg.steps} step(s){each}: {verdict}")
    parts = out.get("step_breakdown") or {}
    print("the step: " + ", ".join(f"{STEP_PART_LABELS[k]} {v:.1%}" for k, v in parts.items())
          + f"; bytes by collective: {out['bytes_by_collective']}")
    print(f"simulated time on the {out['hardware']} preset: {fmt_time(out['simulated_time_s'])} for "
          f"{out.get('steps', 1)} step(s), {fmt_time(out.get('step_time_s', out['simulated_time_s']))} per step; "
          f"wall: {out['wall_time_s']:.4g} s")
    if resilient:
        for line in out["failures"]:
            print(f"failure: {line}")
        print(f"faults injected: {out['faults_injected']}, recovered: {out['faults_recovered']}, "
              f"replayed steps: {out['replayed_steps']}, checkpoints at steps {out['checkpoints']}")


def _verdict(out: dict) -> int:
    """Exit 1 (with one line on stderr) when the run does not match one device (None: measured only)."""
    if out["matches_single_device"] is not False:
        return 0
    print(f"error: {out['check']}", file=sys.stderr)
    return 1
