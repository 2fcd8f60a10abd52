"""Hardware presets as data: peak FLOP/s per dtype, memory, HBM bandwidth, links.

Each preset is a file, simulator/cost/hardware_presets/<name>.toml (fields, user files and
overrides such as "h100-sxm:power_cap_W=500": `simulator.cost.hardware_files`, docs/hardware.md).
Every number is a vendor datasheet figure (dense, no sparsity), cited in `source`, unless the
file lists it as `assumed`. What the
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

from simulator.cost.hardware_files import (
    DTYPES,
    apply_overrides,
    parse_overrides,
    preset_data,
    preset_names,
    read_file,
)
from simulator.errors import ParasimError
from simulator.topology import Link, Topology

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
    datasheet_only: tuple[str, ...] = ()  # fields taken from a datasheet only, not measured
    assumed: tuple[str, ...] = ()         # fields no datasheet gives: assumptions
    clock_ratio: float = 1.0              # sustained / boost clock (a power cap or a set clock)

    def __post_init__(self):
        flops = dict(self.peak_flops)
        for dtype, value in flops.items():
            if dtype not in DTYPES:
                raise ParasimError(f"hardware {self.name}: unknown dtype {dtype!r}; known {DTYPES}")
            if not value > 0:
                raise ParasimError(f"hardware {self.name}: peak_flops[{dtype}] must be > 0, got {value}")
        object.__setattr__(self, "peak_flops", MappingProxyType(flops))
        object.__setattr__(self, "nvls_allreduce_gain", MappingProxyType(dict(self.nvls_allreduce_gain)))
        for attr in ("link_efficiency", "inter_link_efficiency", "clock_ratio"):
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

    def sustained(self, dtype: str = "bf16") -> float:
        """The FLOP/s kernels are priced against: the datasheet peak at the sustained clock
        (`clock_ratio`); MFU divides by `peak`."""
        return self.peak(dtype) * self.clock_ratio

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


def from_data(data: dict) -> Hardware:
    """The Hardware of a preset's validated fields (`hardware_files`): TFLOP/s x 1e12, GB/s x 1e9,
    us x 1e-6, TB/s x 1e12, MiB x 2^20."""
    mem = (data["memory_MiB"] * MiB if "memory_MiB" in data else data["memory_GiB"] * 1024 * MiB
           if "memory_GiB" in data else data["memory_GB"] * 1e9)
    flops = {k: data["peak_tflops"][k] * 1e12 for k in DTYPES if k in data["peak_tflops"]}
    gains = {}
    if "nvls_busbw_GBps" in data:
        ring = data["nvls_ring_busbw_GBps"]
        gains = {int(n): v / ring for n, v in data["nvls_busbw_GBps"].items()}
    return Hardware(data["name"], flops, mem, data["hbm_TBps"] * 1e12, data["devices_per_node"],
                    Link(data["intra_latency_us"] * 1e-6, data["intra_GBps"] * 1e9),
                    Link(data["inter_latency_us"] * 1e-6, data["inter_GBps"] * 1e9), data["source"],
                    data.get("link_efficiency", LINK_EFFICIENCY), gains, data.get("sms", 0),
                    data.get("inter_link_efficiency"), tuple(data.get("datasheet_only", ())),
                    tuple(data.get("assumed", ())), data.get("sustained_clock_ratio", 1.0))


def _local_defaults() -> Hardware:
    cpu = preset_data("cpu")
    return from_data({**cpu, "name": "local", "source": "This machine before `parasim calibrate` has measured it: "
                      "the numbers of the fixed `cpu` preset. " + cpu["source"]})


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
    """The shipped presets (files in simulator/cost/hardware_presets/) and `local`."""
    return preset_names() + ("local",)


def get_hardware(name: str | Hardware, local_path: str | os.PathLike | None = None) -> Hardware:
    """A preset by name, or a hardware file by path (.toml or .json, `hardware_files`), either with
    overrides after a colon: "h100-sxm:power_cap_W=500,memory_GB=96". Refuses unknown names, listing
    the known ones, and bad files or overrides in one line."""
    if isinstance(name, Hardware):
        return name
    base, _, extra = str(name).strip().partition(":")
    if base.endswith((".toml", ".json")) or os.sep in base:
        data = read_file(base)
    else:
        key = base.lower()
        if key == "local":
            if extra:
                raise ParasimError("local is measured by parasim calibrate: it takes no overrides")
            return load_local(local_path)
        if key not in preset_names():
            raise ParasimError(f"unknown hardware preset {name!r}; known: {', '.join(hardware_names())} "
                               "(or a path to a .toml/.json hardware file)")
        data = preset_data(key)
    return from_data(apply_overrides(data, parse_overrides(extra, f"hardware {name}"), f"hardware {name}"))
