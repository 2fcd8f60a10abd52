"""Hardware as data: a preset is a TOML (or JSON) file of named figures, validated on reading.

The presets ship as `simulator/cost/hardware_presets/<name>.toml`; a user describes other hardware
by writing such a file and passing its path wherever a preset name goes (`--hardware my.toml`,
`get_hardware("my.toml")`, sweep, the app). Any preset or file takes overrides after a colon,
`h100-sxm:power_cap_W=500,memory_GB=96,peak_tflops.bf16=800` (every door parses them here).

Fields (units in the names, `simulator.units`: 1 GB = 1e9 bytes):
  name, source            the preset's name and where every figure comes from
  datasheet_only, assumed names of the fields taken from a datasheet only (not measured) and of
                          those that are assumptions (no datasheet gives them)
  peak_tflops             {dtype: dense TFLOP/s} for fp8, bf16, fp16, fp32, fp64 (at the boost clock)
  memory_MiB | memory_GiB | memory_GB   the capacity (nvidia-smi's MiB where known)
  hbm_TBps                memory bandwidth
  devices_per_node        devices on one fast domain (NVLink/NVSwitch, Infinity Fabric, ICI host)
  intra_GBps, intra_latency_us   per device, per direction, inside a node
  inter_GBps, inter_latency_us   per device across nodes (its NIC)
  link_efficiency, inter_link_efficiency   NCCL bus bandwidth / line rate (default 0.8; across
                          nodes: link_efficiency unless given; `simulator.cost.hardware`)
  nvls_ring_busbw_GBps, nvls_busbw_GBps   NVLink SHARP all-reduce busbw by group size and the
                          ring's: the gain is their ratio
  sms, tdp_W, boost_clock_MHz   streaming multiprocessors, board power, boost clock
  sustained_clock_ratio   the fraction of the boost clock the device sustains (default 1); kernels
                          run at peak x this ratio, while MFU keeps the datasheet peak as its
                          denominator (PaLM's definition, Chowdhery et al. 2022, App. B)
Overrides only, which set sustained_clock_ratio: clock_MHz (clock / boost_clock_MHz: the tensor
cores' throughput is cores x FLOP per clock x clock) and power_cap_W (the clock a cap sustains:
(cap / tdp_W)^(1/3), at most 1, from dynamic power P = C V^2 f with the voltage scaling with the
frequency, P ~ f^3 (e.g. Weste & Harris, CMOS VLSI Design, Sec. 5.2); an assumption, stated in
the result's name and source). HBM bandwidth is left as it is (its clock is not the cores').
"""

from __future__ import annotations

import json
import math
import os
import stat
from importlib import resources
from numbers import Real

from ..errors import ParasimError

try:
    import tomllib
except ModuleNotFoundError:     # Python 3.10
    import tomli as tomllib

DTYPES = ("fp8", "bf16", "fp16", "fp32", "fp64")
MiB = 2**20
MAX_FILE_BYTES = 1 << 20
NUMBERS = ("hbm_TBps", "intra_GBps", "intra_latency_us", "inter_GBps", "inter_latency_us", "link_efficiency",
           "inter_link_efficiency", "nvls_ring_busbw_GBps", "tdp_W", "boost_clock_MHz", "memory_MiB", "memory_GiB",
           "memory_GB", "sustained_clock_ratio")
MEMORY_KEYS = ("memory_MiB", "memory_GiB", "memory_GB")
FIELDS = {"name", "source", "datasheet_only", "assumed", "peak_tflops", "devices_per_node", "sms", "nvls_busbw_GBps",
          *NUMBERS}
OVERRIDES_ONLY = ("clock_MHz", "power_cap_W")


def preset_names() -> tuple[str, ...]:
    """The shipped presets, by file name."""
    folder = resources.files("simulator.cost") / "hardware_presets"
    return tuple(sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml")))


def preset_data(name: str) -> dict:
    """The shipped preset `name`'s fields, validated."""
    text = (resources.files("simulator.cost") / "hardware_presets" / f"{name}.toml").read_text()
    return check_data(tomllib.loads(text), f"preset {name}")


def read_file(path: str | os.PathLike) -> dict:
    """A user's hardware file (.toml or .json): a regular file of at most 1 MiB, validated."""
    return check_data(read_table(path, "hardware"), f"hardware file {path}")


def read_table(path: str | os.PathLike, kind: str) -> dict:
    """The fields of a user's `kind` file (.toml or .json; hardware, stack): a regular file of at most
    1 MiB holding one table, its name and source defaulted from the path; not yet validated."""
    where = f"{kind} file {path}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise ParasimError(f"cannot open {where}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ParasimError(f"{where} is not a regular file")
        if st.st_size > MAX_FILE_BYTES:
            raise ParasimError(f"{where} has {st.st_size:,} bytes; a {kind} file holds at most {MAX_FILE_BYTES:,}")
        raw = f.read(MAX_FILE_BYTES + 1)
    try:
        data = json.loads(raw) if str(path).endswith(".json") else tomllib.loads(raw.decode())
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ParasimError(f"{where} is not valid {'JSON' if str(path).endswith('.json') else 'TOML'}: "
                           f"{str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ParasimError(f"{where} must hold a table of fields")
    data.setdefault("name", os.path.basename(str(path)).rsplit(".", 1)[0])
    data.setdefault("source", f"user file {path}")
    return data


def _positive(where: str, key: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value <= 0:
        raise ParasimError(f"{where}: {key} must be a finite number > 0, got {value!r}")
    return value


def check_data(data: dict, where: str) -> dict:
    """Every field known, of its type and range; one memory capacity; the links and node given."""
    unknown = sorted(set(data) - FIELDS)
    if unknown:
        raise ParasimError(f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(FIELDS))}")
    _check_texts(data, where)
    _check_numbers(data, where)
    _check_counts(data, where)
    _check_nvls(data, where)
    return data


def _check_texts(data: dict, where: str) -> None:
    for key in ("name", "source"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise ParasimError(f"{where}: {key} must be a non-empty string")
    for key in ("datasheet_only", "assumed"):
        got = data.get(key, [])
        if not isinstance(got, list) or not all(isinstance(x, str) for x in got):
            raise ParasimError(f"{where}: {key} must be a list of field names")
        bad = [x for x in got if x not in FIELDS]
        if bad:
            raise ParasimError(f"{where}: {key} names unknown field(s) {', '.join(bad)}")


def _check_numbers(data: dict, where: str) -> None:
    peaks = data.get("peak_tflops")
    if not isinstance(peaks, dict) or not peaks:
        raise ParasimError(f"{where}: peak_tflops must be a table of dtype = TFLOP/s, e.g. {{ bf16 = 989 }}")
    for dtype, value in peaks.items():
        if dtype not in DTYPES:
            raise ParasimError(f"{where}: unknown dtype {dtype!r} in peak_tflops; known: {', '.join(DTYPES)}")
        _positive(where, f"peak_tflops.{dtype}", value)
    mem = [k for k in MEMORY_KEYS if k in data]
    if len(mem) != 1:
        raise ParasimError(f"{where}: give the memory capacity once, as one of {', '.join(MEMORY_KEYS)} "
                           f"(got {', '.join(mem) or 'none'})")
    for key in ("hbm_TBps", "intra_GBps", "intra_latency_us", "inter_GBps", "inter_latency_us"):
        if key not in data:
            raise ParasimError(f"{where}: {key} is missing")
    for key in NUMBERS:
        if key in data:
            _positive(where, key, data[key])
    for key in ("link_efficiency", "inter_link_efficiency", "sustained_clock_ratio"):
        if key in data and data[key] > 1:
            raise ParasimError(f"{where}: {key} must be in (0, 1], got {data[key]}")


def _check_counts(data: dict, where: str) -> None:
    if "devices_per_node" not in data:
        raise ParasimError(f"{where}: devices_per_node is missing")
    for key, least in (("devices_per_node", 1), ("sms", 0)):
        v = data.get(key, least)
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise ParasimError(f"{where}: {key} must be a whole number >= {least}, got {v!r}")


def _check_nvls(data: dict, where: str) -> None:
    gains = data.get("nvls_busbw_GBps")
    if gains is None:
        return
    if "nvls_ring_busbw_GBps" not in data or not isinstance(gains, dict):
        raise ParasimError(f"{where}: nvls_busbw_GBps is a table of group size = GB/s, with nvls_ring_busbw_GBps")
    for n, v in gains.items():
        if not str(n).isdigit() or int(n) < 2:
            raise ParasimError(f"{where}: nvls_busbw_GBps keys are group sizes >= 2, got {n!r}")
        _positive(where, f"nvls_busbw_GBps.{n}", v)


def parse_overrides(text: str, where: str) -> dict:
    """`key=value,key=value` (peak_tflops.<dtype>=... for one peak) as typed fields; refuses unknown keys."""
    out: dict = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq:
            raise ParasimError(f"{where}: override {item!r} must be key=value, e.g. power_cap_W=500")
        settable = set(NUMBERS) | set(OVERRIDES_ONLY) | {"devices_per_node", "sms"}
        if key not in settable and not key.startswith("peak_tflops."):
            raise ParasimError(f"{where}: cannot override {key!r}; overridable: peak_tflops.<dtype>, "
                               f"{', '.join(sorted(settable))}")
        try:
            number = float(value) if key not in ("devices_per_node", "sms") else int(value)
        except ValueError:
            raise ParasimError(f"{where}: {key} must be a number, got {value.strip()!r}") from None
        out[key] = number
    return out


def apply_overrides(data: dict, overrides: dict, where: str) -> dict:
    """The preset's fields with `overrides` (from `parse_overrides`) applied, checked again; the
    name and source say what changed. clock_MHz and power_cap_W scale every peak (module docstring)."""
    if not overrides:
        return data
    new = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    said = []
    for key, value in overrides.items():
        if key.startswith("peak_tflops."):
            new["peak_tflops"][key.split(".", 1)[1]] = value
        elif key in MEMORY_KEYS:
            for k in MEMORY_KEYS:
                new.pop(k, None)
            new[key] = value
        elif key not in OVERRIDES_ONLY:
            new[key] = value
        said.append(f"{key}={value:g}")
    ratio, why = _clock_ratio(data, overrides, where)
    if ratio != 1.0:
        new["sustained_clock_ratio"] = data.get("sustained_clock_ratio", 1.0) * ratio
    new["name"] = f"{data['name']}:{','.join(said)}"
    new["source"] = f"{data['source']} Overridden: {', '.join(said)}.{why}"
    return check_data(new, where)


def _clock_ratio(data: dict, overrides: dict, where: str) -> tuple[float, str]:
    if "clock_MHz" in overrides and "power_cap_W" in overrides:
        raise ParasimError(f"{where}: give clock_MHz or power_cap_W, not both (a cap sets the clock)")
    if "clock_MHz" in overrides:
        boost = data.get("boost_clock_MHz")
        if boost is None:
            raise ParasimError(f"{where}: clock_MHz needs the preset's boost_clock_MHz, which {data['name']} lacks")
        if overrides["clock_MHz"] > boost:
            raise ParasimError(f"{where}: clock_MHz={overrides['clock_MHz']:g} is above the boost clock {boost:g} MHz")
        r = overrides["clock_MHz"] / boost
        return r, f" Kernels at {r:.3f} of peak (clock {overrides['clock_MHz']:g} of {boost:g} MHz)."
    if "power_cap_W" in overrides:
        tdp = data.get("tdp_W")
        if tdp is None:
            raise ParasimError(f"{where}: power_cap_W needs the preset's tdp_W, which {data['name']} lacks")
        r = min(1.0, (overrides["power_cap_W"] / tdp) ** (1 / 3))
        return r, (f" Kernels at {r:.3f} of peak: the clock a {overrides['power_cap_W']:g} W cap of {tdp:g} W sustains, "
                   "(cap/TDP)^(1/3) by dynamic power P ~ f^3 (an assumption).")
    return 1.0, ""
