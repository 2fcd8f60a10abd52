"""Measure this machine and write the `local` hardware preset; compare predicted with measured runs.

What is measured (`measure_local`):
- numpy matmul FLOP/s for square sizes n (2 n^3 FLOPs per product), float64 and float32
  (reported; the best rate over sizes >= 256 is the sustained matmul rate).
- the effective training rate R: a small real training run (GPT, 2 layers, h 256, s 64, batch 8,
  one device, LocalRuntime) gives R = FLOPs its instructions carry / measured wall time. The
  instructions carry matmul FLOPs only, while numpy also spends time on element-wise kernels
  (tanh in GeLU, softmax, layer norm) and on the runtime's bookkeeping, so the matmul rate alone
  would predict runs several times too fast; R folds all of that into one rate. The preset
  stores peak fp64 = R / `MATMUL_PEAK_FRACTION` (so `HardwareDeviceModel`'s default utilisation
  gives back R) and fp32/bf16/fp16 scaled by the measured fp32/fp64 matmul ratio.
- memory bandwidth: a large numpy copy (read + write = 2 x nbytes per copy).
- links: a two-device Program of one Send/Recv of S bytes is run on a runtime
  (`simulator.runtime.make_runtime`: "local", or "ray") for several S; the wall time t(S) of the
  run is fitted by least squares to the alpha-beta line t = alpha + S / B (Hockney 1994).

`fit_alpha_beta(sizes, times)` is the fit on its own (tested on synthetic timings).
`predicted_vs_measured(train_result)` puts the clock's prediction beside the measured wall time.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.cost.compute import MATMUL_PEAK_FRACTION
from simulator.cost.hardware import LOCAL_PATH
from simulator.errors import ParasimError
from simulator.models import GPTConfig
from simulator.parallel.config import TrainConfig
from simulator.program import ProgramBuilder
from simulator.runtime import make_runtime
from simulator.training import train

MATMUL_SIZES = (64, 128, 256, 512, 1024)
LINK_SIZES_BYTES = (8_000, 80_000, 800_000, 8_000_000, 32_000_000)


@dataclass(frozen=True)
class AlphaBeta:
    """t(S) = latency_s + S / bandwidth_Bps, fitted from (size, time) pairs."""

    latency_s: float
    bandwidth_Bps: float
    residual_rel: float = 0.0     # rms of (fit - measured) / measured

    def time_s(self, nbytes: float) -> float:
        return self.latency_s + nbytes / self.bandwidth_Bps

    def __repr__(self) -> str:
        return f"AlphaBeta({self.latency_s * 1e6:.3g} us, {self.bandwidth_Bps / 1e9:.4g} GB/s, rms {self.residual_rel:.1%})"


def fit_alpha_beta(sizes_bytes, times_s) -> AlphaBeta:
    """Least squares of t = alpha + beta S, weighted by 1/t (relative errors, so small messages
    count as much as large ones); alpha clipped at 0. Needs >= 2 distinct sizes and beta > 0."""
    S, t = np.asarray(sizes_bytes, dtype=float), np.asarray(times_s, dtype=float)
    if S.shape != t.shape or S.ndim != 1 or len(S) < 2 or len(np.unique(S)) < 2:
        raise ParasimError(f"an alpha-beta fit needs >= 2 distinct sizes with one time each, got {len(S)} sizes "
                           f"and {len(t)} times")
    if np.any(S < 0) or np.any(t <= 0) or not np.all(np.isfinite(t)):
        raise ParasimError("sizes must be >= 0 and times > 0 for an alpha-beta fit")
    w = 1 / t
    A = np.stack([np.ones_like(S), S], axis=1) * w[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(A, t * w, rcond=None)
    if not beta > 0:
        raise ParasimError(f"the times do not grow with the size (slope {beta:.3g} s/B): no bandwidth to fit")
    alpha = max(float(alpha), 0.0)
    fit = alpha + beta * S
    return AlphaBeta(alpha, 1 / float(beta), float(np.sqrt(np.mean(((fit - t) / t) ** 2))))


def matmul_flops_per_s(n: int, dtype: str, repeats: int = 3, seed: int = 0) -> float:
    """Best-of-`repeats` numpy rate of an (n, n) @ (n, n) product."""
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((n, n)).astype(dtype), rng.standard_normal((n, n)).astype(dtype)
    a @ b   # warm up
    best = float("inf")
    reps = max(1, int(2e8 // (2 * n ** 3)))   # ~0.1 s of work per sample
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(reps):
            a @ b
        best = min(best, (time.perf_counter() - t0) / reps)
    return 2.0 * n ** 3 / best


def copy_bandwidth_Bps(nbytes: int = 64_000_000, repeats: int = 3) -> float:
    """Memory bandwidth of a numpy copy: 2 x nbytes moved (read + write) per copy."""
    src = np.ones(nbytes // 8)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * src.nbytes / best


def transfer_program(nbytes: int):
    """Two devices: device 0 sends a float64 vector of `nbytes` to device 1."""
    b = ProgramBuilder(2, f"send {nbytes} B")
    b.send(0, 1, "x", nbytes=nbytes)
    return b.build()


def measure_link(kind: str = "local", sizes_bytes=LINK_SIZES_BYTES, repeats: int = 5, address=None) -> tuple:
    """Run `transfer_program` of each size on a runtime; returns (AlphaBeta, sizes, median times)."""
    rt = make_runtime(kind, 2, address=address) if address else make_runtime(kind, 2)
    times = []
    try:
        for S in sizes_bytes:
            prog = transfer_program(int(S))
            samples = []
            for _ in range(repeats + 1):
                rt.clear()
                rt.load({0: {"x": np.ones(max(int(S) // 8, 1))}})
                samples.append(rt.run(prog).wall_time_s)
            times.append(float(np.median(samples[1:])))   # the first run warms up
    finally:
        rt.close()
    return fit_alpha_beta(sizes_bytes, times), list(sizes_bytes), times


CALIBRATION_GPT = dict(layers=2, hidden=256, heads=4, seq_len=64, vocab=256)


def training_rate_flops_per_s(steps: int = 2, batch_size: int = 8, repeats: int = 3) -> tuple[float, float, float]:
    """(R, FLOPs, wall seconds) of a small single-device training run on the LocalRuntime:
    R = FLOPs its instructions carry / measured wall time (all steps), best of `repeats` runs
    (on a shared machine the fastest run is the least disturbed one)."""
    cfg = TrainConfig(GPTConfig(**CALIBRATION_GPT), strategy="single", devices=1, global_batch=batch_size, steps=steps)
    res = min((train(cfg, check=False) for _ in range(max(1, repeats))), key=lambda r: r.wall_time_s)
    flops = sum(e.flops for e in res.trace.events)
    return flops / res.wall_time_s, flops, res.wall_time_s


def local_memory_bytes() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 4e9


def link_of(fit: AlphaBeta, copy_bandwidth_Bps: float) -> tuple[dict, str]:
    """The preset's link from a fitted transfer line, and a note when it was bounded: no transfer
    between devices on this machine moves bytes faster than a memory copy, so a faster fit (the
    in-process runtime hands a message over by reference, copying nothing: its "bandwidth" is noise
    on a per-message cost, 998 GB/s in one run) stores the copy bandwidth."""
    if fit.bandwidth_Bps <= copy_bandwidth_Bps:
        return {"latency_s": fit.latency_s, "bandwidth_Bps": fit.bandwidth_Bps}, ""
    note = (f"faster than a memory copy (messages are handed over without a copy): the preset stores the copy "
            f"bandwidth, {copy_bandwidth_Bps / 1e9:.3g} GB/s")
    return {"latency_s": fit.latency_s, "bandwidth_Bps": copy_bandwidth_Bps}, note


def measure_local(matmul_sizes=MATMUL_SIZES, link_sizes=LINK_SIZES_BYTES, ray: bool = False,
                  links: str = "local", repeats: int = 3, progress=None) -> dict:
    """Measure everything; returns {"preset": the JSON `hardware.load_local` reads, "measurements": ...}.
    `progress(stage)` is told each stage as it starts."""
    if links not in ("local", "ray") or (links == "ray" and not ray):
        raise ParasimError(f"links must come from 'local' or (with ray=True) 'ray', got {links!r} (ray={ray})")
    say = progress or (lambda stage: None)
    say(f"matmul FLOP/s, n = {', '.join(map(str, matmul_sizes))}, float64 and float32")
    rates = {dt: {int(n): matmul_flops_per_s(int(n), dt, repeats) for n in matmul_sizes} for dt in ("float64", "float32")}
    sustained = {dt: max(v for n, v in r.items() if n >= 256) if any(n >= 256 for n in r) else max(r.values())
                 for dt, r in rates.items()}
    say("memory copy bandwidth")
    bw = copy_bandwidth_Bps()
    say("training rate of a small real run")
    rate, _, _ = training_rate_flops_per_s()
    ratio32 = sustained["float32"] / sustained["float64"]
    say("transfers of the local runtime")
    fits = {"local": measure_link("local", link_sizes)}
    if ray:
        say("transfers of the Ray runtime (starts Ray)")
        fits["ray"] = measure_link("ray", link_sizes)
    ab = fits[links][0]
    link, _ = link_of(ab, bw)
    peak64 = rate / MATMUL_PEAK_FRACTION
    peak32 = peak64 * ratio32
    preset = {
        "name": "local",
        "peak_flops": {"fp64": peak64, "fp32": peak32, "bf16": peak32, "fp16": peak32},
        "memory_bytes": local_memory_bytes(), "memory_bandwidth_Bps": bw, "devices_per_node": 8,
        "intra": link, "inter": link,
        "source": (f"parasim calibrate {time.strftime('%Y-%m-%d %H:%M')}: training rate {rate / 1e9:.3g} GFLOP/s "
                   f"fp64 (peak = rate / {MATMUL_PEAK_FRACTION}); numpy matmul sustained "
                   f"{sustained['float64'] / 1e9:.3g} GFLOP/s fp64, {sustained['float32'] / 1e9:.3g} fp32; copy "
                   f"{bw / 1e9:.3g} GB/s; {links} runtime link {ab!r}, stored as {link['bandwidth_Bps'] / 1e9:.3g} GB/s"),
    }
    meas = {"training_rate_flops_per_s": rate, "matmul_flops_per_s": {dt: {str(n): v for n, v in r.items()} for dt, r in rates.items()},
            "copy_bandwidth_Bps": bw,
            "links": {k: {"latency_s": f.latency_s, "bandwidth_Bps": f.bandwidth_Bps, "residual_rel": f.residual_rel,
                          "sizes_bytes": s, "times_s": t, "note": link_of(f, bw)[1]} for k, (f, s, t) in fits.items()}}
    return {"preset": preset, "measurements": meas}


def save_local(preset: dict, path: str | os.PathLike | None = None) -> Path:
    """Write the preset JSON (default ~/.parasim/local.json) and check that `load_local` reads it."""
    from simulator.cost.hardware import load_local
    p = Path(path) if path is not None else LOCAL_PATH.expanduser()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(preset, indent=2))
    load_local(p)
    return p


def predicted_vs_measured(result, runtime: str = "local") -> dict:
    """Side by side for a `TrainResult` (or its Trace): the clock's prediction and the measured wall
    time (`Trace.wall_time_s`), and predicted / measured.

    The prediction depends on how the runtime uses this machine. "ray": devices are processes
    running at once, so the run takes the simulated makespan (summed over steps). "local": the
    in-process runtime executes every device's instructions one at a time in one Python process,
    so the run takes the devices' work end to end: the sum of all compute events plus the
    communication of the busiest device. Both figures are returned."""
    if runtime not in ("local", "ray"):
        raise ParasimError(f"runtime must be 'local' or 'ray', got {runtime!r}")
    trace = getattr(result, "trace", result)
    measured = trace.wall_time_s
    if measured is None or not measured > 0:
        raise ParasimError("the trace carries no measured wall time (was it produced by a real run?)")
    makespan = trace.makespan_s
    comm = [0.0] * trace.n_devices
    compute = 0.0
    for e in trace.events:
        if e.lane == "compute":
            compute += e.duration_s
        else:
            comm[e.device] += e.duration_s
    serial = compute + max(comm, default=0.0)
    predicted = serial if runtime == "local" else makespan
    return {"predicted_s": predicted, "measured_s": measured, "ratio": predicted / measured,
            "makespan_s": makespan, "serial_s": serial, "runtime": runtime}
