"""A Hardware preset as the device model the event clock (`simulator.cost.clock`) asks.

The clock needs two answers: how long one Compute instruction takes, and which link joins two
ranks. Compute time is the roofline (Williams et al. 2009) on the preset:

    time = max( flops / (peak[dtype] x utilisation),  nbytes / (HBM bandwidth x MEMORY_EFFICIENCY) )

An instruction carries only its flops and bytes, not its matmul shape, so the utilisation is
one number (default `MATMUL_PEAK_FRACTION`, the large-GEMM plateau of `simulator.cost.compute`).
Links come from the preset's Topology (nodes of `devices_per_node` consecutive ranks), derated by
the preset's measured `link_efficiency` unless one is given -- the same efficiency the closed form
uses, so `parasim collective --hardware` and `simulate` price a collective alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.cost.compute import MATMUL_PEAK_FRACTION, MEMORY_EFFICIENCY
from simulator.cost.hardware import RUN_HARDWARE, Hardware, get_hardware
from simulator.errors import ParasimError
from simulator.topology import Topology


@dataclass(frozen=True)
class HardwareDeviceModel:
    hardware: Hardware
    n_devices: int
    dtype: str = "bf16"
    utilisation: float = MATMUL_PEAK_FRACTION
    link_efficiency: float | None = None      # None: the preset's (`Hardware.link_efficiency`)

    def __post_init__(self):
        object.__setattr__(self, "hardware", get_hardware(self.hardware))
        if not 0 < self.utilisation <= 1:
            raise ParasimError(f"utilisation must be in (0, 1], got {self.utilisation}")
        self.hardware.peak(self.dtype)   # refuses a dtype the preset lacks

    @property
    def topology(self) -> Topology:
        return self.hardware.topology(self.n_devices, self.link_efficiency)

    def compute_time_s(self, ins) -> float:
        hw = self.hardware
        return max(float(ins.flops) / (hw.sustained(self.dtype) * self.utilisation),
                   float(ins.nbytes) / (hw.memory_bandwidth_Bps * MEMORY_EFFICIENCY))

    def link(self, src: int, dst: int) -> tuple[float, float]:
        """(latency_s, bandwidth_Bps) from global rank src to dst."""
        return self.topology.link_of(src, dst)


# presets whose numbers describe numpy's float64 math; datasheet accelerators are priced in bf16
FP64_PRESETS = ("cpu", "local", "teaching")


def run_device_model(n_devices: int, hardware: str | Hardware | None = None) -> HardwareDeviceModel:
    """The clock a real run is priced on: `hardware` (default RUN_HARDWARE, the fixed `cpu` preset,
    the same on every machine; "local" for this machine as `parasim calibrate` measured it), in fp64
    on the CPU presets and `teaching`, in bf16 on the datasheet accelerators."""
    name = RUN_HARDWARE if hardware is None else hardware
    key = name.name if isinstance(name, Hardware) else str(name).strip().lower()
    return HardwareDeviceModel(name, n_devices, dtype="fp64" if key in FP64_PRESETS else "bf16")
