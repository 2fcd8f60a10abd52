"""Hardware presets as data: peak FLOP/s per dtype, memory, HBM bandwidth, links.

Every number is a vendor datasheet figure (dense, no sparsity), cited in `source`. What the
hardware *achieves* (fractions of these peaks) is not stored here: see `simulator.cost.compute`
(matmul and memory efficiency) -- except two measured network figures that belong to the
cluster and are shared by every pricing path (`parasim collective --hardware`, the closed form,
the event clock):

- `link_efficiency` (LINK_EFFICIENCY = 0.8 for the datasheet presets): NCCL's bus bandwidth in
  nccl-tests reaches ~80 % of the line rate: ~370 of 450 GB/s NVLink 4 per direction on H100
  ("450GB/s is the line rate. With the protocol overhead (~20%) NCCL can get an effective NVLink
  bandwidth of 370GB/s", NVIDIA/nccl-tests issue #212), ~230-240 of 300 GB/s on DGX A100, ~22 of
  25 GB/s HDR InfiniBand. `local` is measured by `parasim calibrate`, so its efficiency is 1.
- `inter_link_efficiency` (None: `link_efficiency`): the same ratio across nodes, where NCCL runs
  over the InfiniBand NICs rather than NVLink. IB_LINK_EFFICIENCY = 0.94 on H100/H200 (8 x 400 Gb/s
  NDR ConnectX-7 per DGX/HGX node): "For NDR @ 400Gbps you should see 46-48GB/s per NIC" (NCCL
  maintainer, NVIDIA/nccl-tests issue #290, 2025), 47 of 50 GB/s; NVIDIA's own measurement on
  DGX-1 gives the same ratio ("DGX-1 can get 48 GB/s because we have 4 IB adapters", 48 of 50,
  NVIDIA/nccl-tests issue #29). It brings Megatron-Core's 32B at t8 p1 (48 data-parallel ranks on
  48 nodes) from 0.85 to 0.92 of its published throughput (tests/test_cost_h100_bf16_megatron.py).
  The A100 presets keep 0.8 across nodes: Megatron-LM 2021 Table 1 was calibrated with it
  (`simulator.cost.compute`), and 0.94 prices its 76.1B row (t8 p4, 1024 GPUs) 7.6 % above the
  paper, outside the 7 % the reproduction promises -- so on A100 the 0.8 stands for what the
  2021 runs lost besides the NIC's line rate, which we do not separate.
- `nvls_allreduce_gain`: NVLink SHARP (NVLS, NVSwitch 3 in-network reduction, H100/H200): an
  all-reduce inside one node reaches a bus bandwidth this many times the ring's, by group size.
  Measured with nccl-tests on 8 x H100 SXM (NVIDIA/nccl issue #1455): ring 365-370 GB/s for 2-8
  GPUs; NVLS 370 (2-4 GPUs), 420 (5), 440 (6), 460 (7), 480 GB/s (8); "a 30% improvement using
  NVLink SHARP" (NCCL maintainer, NVIDIA/nccl issue #1442). Gains = NVLS / ring busbw.

Bandwidth conventions (units.py: 1 GB = 1e9 bytes):
- `intra.bandwidth_Bps` is per device, per direction: NVLink 3 is "600 GB/s" bidirectional per
  A100, i.e. 300e9 B/s each way.
- `inter.bandwidth_Bps` is per device: one 200 Gb/s HDR InfiniBand NIC per A100 on Selene-class
  systems is 25e9 B/s.
- `memory_bytes` is the capacity the device reports (NVML / nvidia-smi "Total", in MiB), not the
  datasheet's round "80 GB": A100 80GB 81,920 MiB (80 GiB = 85.9e9 B), A100 40GB 40,960 MiB,
  H100 SXM 80GB 81,559 MiB (85.5e9 B), H200 143,771 MiB (150.8e9 B) (nvidia-smi tables in
  "Why does an NVIDIA H100 80GB card offer 85.52 GB?", Modal blog 2024, and user reports such as
  github.com/dexmal/dexbotic issue 41 for 81920MiB). TPU v4: 32 GiB.

Real runs (`train`, `parasim train`, the app) are priced by default on `cpu` (RUN_HARDWARE), a
fixed preset: the same numbers on every machine, so a printed bubble or step time does not depend
on who runs it. `local` describes *this* machine: `parasim calibrate` writes ~/.parasim/local.json,
whose fields override the `cpu` numbers; a run uses it only when asked (`hardware="local"`,
`parasim train --hardware local`, the app's "Price the timeline on" choice).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType

from simulator.errors import ParasimError
from simulator.topology import Link, Topology

DTYPES = ("fp8", "bf16", "fp16", "fp32", "fp64")
DTYPE_NBYTES = {"fp8": 1, "bf16": 2, "fp16": 2, "fp32": 4, "fp64": 8}
LINK_EFFICIENCY = 0.8
IB_LINK_EFFICIENCY = 0.94   # NCCL busbw / line rate over InfiniBand NICs (module docstring)
# NVLS all-reduce busbw / ring busbw by group size inside one node (nccl issue #1455, module docstring)
NVLS_GAIN_H100 = {2: 1.0, 3: 1.0, 4: 1.0, 5: 420 / 370, 6: 440 / 370, 7: 460 / 370, 8: 480 / 370}
LOCAL_PATH = Path("~/.parasim/local.json")
RUN_HARDWARE = "cpu"   # the fixed preset real runs are priced on unless the user picks another


@dataclass(frozen=True)
class Hardware:
    """One accelerator type and the cluster it sits in."""

    name: str
    peak_flops: MappingProxyType          # dtype -> FLOP/s (dense)
    memory_bytes: float                   # device memory (HBM)
    memory_bandwidth_Bps: float           # HBM bandwidth
    devices_per_node: int
    intra: Link                           # per device per direction
    inter: Link                           # per device
    source: str = ""
    link_efficiency: float = LINK_EFFICIENCY   # NCCL busbw / line rate (module docstring)
    nvls_allreduce_gain: MappingProxyType = field(default_factory=dict)   # group size -> NVLS/ring busbw
    sms: int = 0                          # streaming multiprocessors (0: not a GPU / unknown)
    inter_link_efficiency: float | None = None   # NCCL busbw / line rate across nodes (None: link_efficiency)

    def __post_init__(self):
        flops = dict(self.peak_flops)
        for dtype, value in flops.items():
            if dtype not in DTYPES:
                raise ParasimError(f"hardware {self.name}: unknown dtype {dtype!r}; known {DTYPES}")
            if not value > 0:
                raise ParasimError(f"hardware {self.name}: peak_flops[{dtype}] must be > 0, got {value}")
        object.__setattr__(self, "peak_flops", MappingProxyType(flops))
        object.__setattr__(self, "nvls_allreduce_gain", MappingProxyType(dict(self.nvls_allreduce_gain)))
        for attr in ("link_efficiency", "inter_link_efficiency"):
            x = getattr(self, attr)
            if x is not None and not 0 < x <= 1:
                raise ParasimError(f"hardware {self.name}: {attr} must be in (0, 1], got {x}")
        for attr in ("memory_bytes", "memory_bandwidth_Bps"):
            if not getattr(self, attr) > 0:
                raise ParasimError(f"hardware {self.name}: {attr} must be > 0, got {getattr(self, attr)}")
        if self.devices_per_node < 1:
            raise ParasimError(f"hardware {self.name}: devices_per_node must be >= 1")

    def peak(self, dtype: str = "bf16") -> float:
        if dtype not in self.peak_flops:
            raise ParasimError(f"hardware {self.name} has no {dtype} peak; it has {sorted(self.peak_flops)}")
        return self.peak_flops[dtype]

    def topology(self, n_devices: int, bandwidth_efficiency: float | None = None) -> Topology:
        """Nodes of `devices_per_node` consecutive ranks; links derated by `bandwidth_efficiency`
        (default: the preset's measured `link_efficiency` inside a node and `inter_link_efficiency`
        across nodes; a given efficiency applies to both), with the node's NVLS gains if any."""
        eff = self.link_efficiency if bandwidth_efficiency is None else bandwidth_efficiency
        eff_inter = eff if bandwidth_efficiency is not None or self.inter_link_efficiency is None \
            else self.inter_link_efficiency
        return Topology(n_devices, self.devices_per_node, self.intra.scaled(eff), self.inter.scaled(eff_inter),
                        nvls_allreduce_gain=self.nvls_allreduce_gain)

    def nvls_gain(self, n: int) -> float:
        """NVLS all-reduce busbw over ring busbw for a group of n ranks inside one node (1: none)."""
        return float(self.nvls_allreduce_gain.get(n, 1.0))

    def __repr__(self) -> str:
        return (f"Hardware({self.name}: {self.peak('bf16') / 1e12 if 'bf16' in self.peak_flops else 0:.4g} "
                f"TFLOP/s bf16, {self.memory_bytes / 1e9:.4g} GB at {self.memory_bandwidth_Bps / 1e12:.3g} TB/s, "
                f"{self.devices_per_node}/node, intra {self.intra!r}, inter {self.inter!r})")


MiB = 2**20


def _hw(name, bf16, fp16, fp32, fp64, memory_bytes, hbm_TBps, per_node, intra_GBps, intra_us,
        inter_GBps, inter_us, source, fp8=None, nvls=None, link_efficiency=LINK_EFFICIENCY, sms=0,
        inter_link_efficiency=None) -> Hardware:
    flops = {k: v * 1e12 for k, v in (("fp8", fp8), ("bf16", bf16), ("fp16", fp16), ("fp32", fp32),
                                      ("fp64", fp64)) if v is not None}
    return Hardware(name, flops, memory_bytes, hbm_TBps * 1e12, per_node,
                    Link(intra_us * 1e-6, intra_GBps * 1e9), Link(inter_us * 1e-6, inter_GBps * 1e9), source,
                    link_efficiency, nvls or {}, sms, inter_link_efficiency)


_A100 = ("NVIDIA A100 Tensor Core GPU datasheet (2021): 312 TFLOP/s bf16/fp16 dense, 19.5 fp32 "
         "(108 SMs, NVIDIA A100 architecture whitepaper) "
         "(non-tensor; TF32 156), 19.5 fp64 tensor; NVLink 3 600 GB/s bidirectional per GPU; "
         "DGX A100 / Selene: 8 GPUs per node, one 200 Gb/s HDR InfiniBand NIC per GPU. "
         "Latencies (alpha) are typical NCCL per-step figures, an assumption.")
_H100 = ("NVIDIA H100 Tensor Core GPU datasheet (SXM5): 989 TFLOP/s bf16/fp16 dense, 1979 fp8 dense "
         "(132 SMs, NVIDIA H100 architecture whitepaper), "
         "67 fp32, 67 fp64 tensor; 3.35 TB/s HBM3; NVLink 4 900 GB/s bidirectional; DGX H100: 8 GPUs per "
         "node, one 400 Gb/s ConnectX-7 NIC per GPU; NVLink SHARP in the NVSwitch (NVLS gains measured, "
         "module docstring).")

_CPU = ("A fixed 2-core x86 CPU running numpy, the default clock of real runs (the same on every machine; "
        "rounded assumptions, not a datasheet): 20 GFLOP/s fp64, 40 fp32 (bf16/fp16 computed in fp32), "
        "10 GB/s memory, 4 GB per emulated device, 8 devices per node; devices exchange data by "
        "shared-memory copies (5 GB/s, 50 us), priced at full link efficiency. `local` starts from these "
        "numbers and `parasim calibrate` replaces them with this machine's (~/.parasim/local.json).")

# name -> factory (pure functions; `local` reads the calibration file when asked for)
_PRESETS = {
    "a100-40gb": lambda: _hw("a100-40gb", 312, 312, 19.5, 19.5, 40960 * MiB, 1.555, 8, 300, 2, 25, 5,
                             _A100 + " 40 GB HBM2 at 1,555 GB/s.", sms=108),
    "a100-80gb": lambda: _hw("a100-80gb", 312, 312, 19.5, 19.5, 81920 * MiB, 2.039, 8, 300, 2, 25, 5,
                             _A100 + " 80 GB HBM2e at 2,039 GB/s.", sms=108),
    "h100-sxm": lambda: _hw("h100-sxm", 989, 989, 67, 67, 81559 * MiB, 3.35, 8, 450, 2, 50, 5, _H100 + " 80 GB.",
                            fp8=1979, nvls=NVLS_GAIN_H100, sms=132, inter_link_efficiency=IB_LINK_EFFICIENCY),
    "h200": lambda: _hw("h200", 989, 989, 67, 67, 143771 * MiB, 4.8, 8, 450, 2, 50, 5,
                        "NVIDIA H200 datasheet: H100 SXM compute, 141 GB HBM3e at 4.8 TB/s; " + _H100,
                        fp8=1979, nvls=NVLS_GAIN_H100, sms=132, inter_link_efficiency=IB_LINK_EFFICIENCY),
    "tpu-v4-like": lambda: _hw(
        "tpu-v4-like", 275, 275, 275 / 3, None, 32 * 1024 * MiB, 1.2, 4, 90, 5, 90, 5,
        "Google TPU v4 (Jouppi et al. 2023; How To Scale Your Model, TPU chapter): 275 TFLOP/s bf16, "
        "32 GiB HBM at 1.2 TB/s, ICI 45 GB/s per link per direction, 4 chips per host. '-like': the 3D "
        "torus is flattened to 2 ICI links (90 GB/s) per chip both within and across hosts; fp32 "
        "matmul as 3-pass bf16 (275/3); no fp64."),
    "teaching": lambda: _hw(
        "teaching", 0.2, 0.2, 0.2, 0.2, 16, 1, 8, 200, 2, 200, 2,
        "An invented device for teaching, not a product: 0.2 TFLOP/s in every precision, 16 GB at 1 TB/s, links of "
        "200 GB/s and 2 us. Sized so that the app's tiny models (an 8-layer MLP of width 256, a 2-block "
        "GPT) spend comparable times computing and all-reducing their gradients, which makes overlap "
        "and bucketing visible; on datasheet GPUs their kernels last nanoseconds."),
    "cpu": lambda: _cpu("cpu", _CPU),
    "local": lambda: _local_defaults(),
}


def _cpu(name: str, source: str) -> Hardware:
    return _hw(name, 40e-3, 40e-3, 40e-3, 20e-3, 4e9, 0.01, 8, 5, 50, 5, 50, source, link_efficiency=1.0)


def _local_defaults() -> Hardware:
    return _cpu("local", "This machine before `parasim calibrate` has measured it: the numbers of the fixed "
                "`cpu` preset. " + _CPU)


def load_local(path: str | os.PathLike | None = None) -> Hardware:
    """`local` preset: defaults overridden by the JSON file written by `parasim calibrate`.

    Recognised keys: name, peak_flops {dtype: FLOP/s}, memory_bytes, memory_bandwidth_Bps,
    devices_per_node, intra {latency_s, bandwidth_Bps}, inter {...}, source.
    """
    base = _local_defaults()
    p = Path(path) if path is not None else LOCAL_PATH.expanduser()
    if not p.is_file():
        return base
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise ParasimError(f"cannot read local hardware file {p}: {exc}") from None
    if not isinstance(data, dict):
        raise ParasimError(f"local hardware file {p} must hold a JSON object")
    known = {"name", "peak_flops", "memory_bytes", "memory_bandwidth_Bps", "devices_per_node",
             "intra", "inter", "source"}
    unknown = set(data) - known
    if unknown:
        raise ParasimError(f"local hardware file {p}: unknown keys {sorted(unknown)}; known {sorted(known)}")
    kw = {}
    if "peak_flops" in data:
        kw["peak_flops"] = {**base.peak_flops, **{k: float(v) for k, v in data["peak_flops"].items()}}
    for key in ("memory_bytes", "memory_bandwidth_Bps"):
        if key in data:
            kw[key] = float(data[key])
    if "devices_per_node" in data:
        kw["devices_per_node"] = int(data["devices_per_node"])
    for key in ("intra", "inter"):
        if key in data:
            old = getattr(base, key)
            kw[key] = Link(float(data[key].get("latency_s", old.latency_s)),
                           float(data[key].get("bandwidth_Bps", old.bandwidth_Bps)))
    kw["source"] = str(data.get("source", f"measured by parasim calibrate ({p})"))
    kw["name"] = str(data.get("name", "local"))
    return replace(base, **kw)


def hardware_names() -> tuple[str, ...]:
    return tuple(_PRESETS)


def get_hardware(name: str, local_path: str | os.PathLike | None = None) -> Hardware:
    """The preset called `name`; refuses unknown names, listing the known ones."""
    if isinstance(name, Hardware):
        return name
    key = str(name).strip().lower()
    if key not in _PRESETS:
        raise ParasimError(f"unknown hardware preset {name!r}; known: {', '.join(_PRESETS)}")
    if key == "local":
        return load_local(local_path)
    return _PRESETS[key]()
