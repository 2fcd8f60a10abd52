"""Hardware as data (simulator/cost/hardware_files.py): shipped preset files, user files, overrides,
and one-line refusals; every door takes a file path or overrides where it takes a preset name."""

from __future__ import annotations

import json
import os

import pytest

from simulator.cost.hardware import MiB, get_hardware, hardware_names
from simulator.cost.hardware_files import FIELDS, preset_data, preset_names
from simulator.cost.parallel_config import ParallelConfig
from simulator.cost.scale_sim import simulate_at_scale
from simulator.errors import ParasimError

NEW = ("h800", "h100-pcie", "h100-nvl", "b200", "gb200-nvl72", "mi300x", "tpu-v5p-like")


def test_every_shipped_preset_is_a_file_with_sources_and_labelled_figures():
    assert set(NEW) <= set(preset_names()) and hardware_names()[-1] == "local"
    for name in preset_names():
        data = preset_data(name)
        hw = get_hardware(name)
        assert hw.name == name == data["name"] and len(hw.source) > 80
        labelled = set(data.get("datasheet_only", [])) | set(data.get("assumed", []))
        assert labelled and labelled <= FIELDS and labelled <= set(data)   # labels name given figures
        assert hw.datasheet_only == tuple(data.get("datasheet_only", ()))


@pytest.mark.parametrize("name,bf16,memory,hbm_TBps,intra,inter,per_node", [
    ("a100-80gb", 312e12, 81920 * MiB, 2.039, 300e9, 25e9, 8),       # NVIDIA A100 datasheet
    ("h100-sxm", 989e12, 81559 * MiB, 3.35, 450e9, 50e9, 8),         # NVIDIA H100 SXM5 datasheet
    ("h800", 989e12, 81559 * MiB, 3.35, 200e9, 50e9, 8),             # H800 datasheet, DeepSeek-V3 Sec. 3.2.2
    ("h100-pcie", 756e12, 81559 * MiB, 2.0, 64e9, 50e9, 8),          # H100 PCIe datasheet
    ("b200", 2250e12, 180e9, 8, 900e9, 50e9, 8),                     # HGX B200 datasheet / 8
    ("gb200-nvl72", 2500e12, 186e9, 8, 900e9, 50e9, 72),             # GB200 NVL72 datasheet / 72
    ("mi300x", 1307.4e12, 192e9, 5.3, 448e9, 50e9, 8),               # AMD MI300X datasheet
    ("teaching", 0.2e12, 16e9, 1, 200e9, 200e9, 8),                  # 16 GB (it was 16 bytes)
])
def test_presets_carry_their_recorded_figures(name, bf16, memory, hbm_TBps, intra, inter, per_node):
    hw = get_hardware(name)
    assert (hw.peak("bf16"), hw.memory_bytes, hw.memory_bandwidth_Bps) == (bf16, memory, hbm_TBps * 1e12)
    assert (hw.intra.bandwidth_Bps, hw.inter.bandwidth_Bps, hw.devices_per_node) == (intra, inter, per_node)


def test_h800_differs_from_h100_only_where_the_export_part_is_cut():
    h100, h800 = get_hardware("h100-sxm"), get_hardware("h800")
    assert h800.peak("fp64") == 1e12 < h100.peak("fp64") and h800.peak("fp8") == h100.peak("fp8")
    assert h800.intra.bandwidth_Bps * h800.link_efficiency == 160e9         # DeepSeek-V3: "160 GB/s"


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


MINE = """name = "my-gpu"
source = "a made-up part for the test"
peak_tflops = { bf16 = 500, fp32 = 50 }
memory_GB = 96
hbm_TBps = 2.4
devices_per_node = 4
intra_GBps = 100
intra_latency_us = 3
inter_GBps = 25
inter_latency_us = 6
"""


def test_a_user_file_describes_new_hardware_in_toml_or_json(tmp_path):
    hw = get_hardware(write(tmp_path, "mine.toml", MINE))
    assert (hw.name, hw.peak("bf16"), hw.memory_bytes, hw.devices_per_node) == ("my-gpu", 500e12, 96e9, 4)
    import tomllib
    again = get_hardware(write(tmp_path, "mine.json", json.dumps(tomllib.loads(MINE))))
    assert again == hw


@pytest.mark.parametrize("edit,says", [
    (lambda t: t + "colour = 'red'\n", "unknown field(s) colour"),
    (lambda t: t.replace("hbm_TBps = 2.4", "hbm_TBps = -1"), "hbm_TBps must be a finite number > 0, got -1"),
    (lambda t: t.replace("memory_GB = 96", ""), "give the memory capacity once"),
    (lambda t: t.replace("memory_GB = 96", "memory_GB = 96\nmemory_MiB = 1"), "give the memory capacity once"),
    (lambda t: t.replace("bf16 = 500", "bf12 = 500"), "unknown dtype 'bf12'"),
    (lambda t: t.replace("devices_per_node = 4", "devices_per_node = 2.5"), "devices_per_node must be a whole"),
    (lambda t: t.replace("intra_GBps = 100", ""), "intra_GBps is missing"),
    (lambda t: t + "link_efficiency = 1.5\n", "link_efficiency must be in (0, 1]"),
    (lambda t: t.replace('name = "my-gpu"', "name = ["), "is not valid TOML"),
])
def test_a_bad_file_is_refused_in_one_line_naming_the_field(tmp_path, edit, says):
    with pytest.raises(ParasimError) as err:
        get_hardware(write(tmp_path, "bad.toml", edit(MINE)))
    assert says in str(err.value) and "\n" not in str(err.value)


def test_only_regular_files_of_bounded_size_are_read(tmp_path):
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    with pytest.raises(ParasimError, match="not a regular file"):
        get_hardware(str(fifo))                       # returns at once: no reader waits on a writer
    big = write(tmp_path, "big.toml", MINE + "#" * (1 << 20))
    with pytest.raises(ParasimError, match="a hardware file holds at most"):
        get_hardware(big)
    with pytest.raises(ParasimError, match="cannot open hardware file"):
        get_hardware(str(tmp_path / "missing.toml"))


def test_overrides_change_the_named_figures_and_say_so():
    hw = get_hardware("h100-sxm:memory_GB=96,hbm_TBps=2.4,peak_tflops.bf16=800,devices_per_node=4")
    assert (hw.memory_bytes, hw.memory_bandwidth_Bps, hw.peak("bf16"), hw.devices_per_node) == (96e9, 2.4e12, 800e12, 4)
    assert hw.name == "h100-sxm:memory_GB=96,hbm_TBps=2.4,peak_tflops.bf16=800,devices_per_node=4"
    assert "Overridden: memory_GB=96" in hw.source
    for bad, says in (("h100-sxm:colour=3", "cannot override 'colour'"), ("h100-sxm:tdp_W=x", "must be a number"),
                      ("h100-sxm:clock_MHz=1500,power_cap_W=500", "not both"),
                      ("h100-sxm:clock_MHz=2500", "above the boost clock 1980 MHz"),
                      ("tpu-v4-like:power_cap_W=100", "needs the preset's tdp_W"), ("local:sms=1", "no overrides")):
        with pytest.raises(ParasimError, match=says):
            get_hardware(bad)


def test_a_power_cap_slows_kernels_by_the_cube_root_law_and_mfu_keeps_the_datasheet_peak():
    full, capped = get_hardware("h100-sxm"), get_hardware("h100-sxm:power_cap_W=500")
    assert capped.clock_ratio == (500 / 700) ** (1 / 3) and capped.peak("bf16") == full.peak("bf16")
    assert capped.sustained("bf16") == full.peak("bf16") * (500 / 700) ** (1 / 3)
    assert get_hardware("h100-sxm:clock_MHz=1485").clock_ratio == 1485 / 1980
    assert get_hardware("h100-sxm:power_cap_W=800").clock_ratio == 1.0           # a cap above TDP changes nothing
    cfg = ParallelConfig(tp=8, pp=2, dp=1, global_batch=8)
    slow, fast = (simulate_at_scale("gpt3-175b", cfg, h, fold_tp=True) for h in (capped, full))
    assert slow.step_time_s > fast.step_time_s and slow.mfu < fast.mfu


def test_the_cli_takes_a_file_and_overrides_and_prints_what_it_priced(tmp_path, capsys):
    from simulator.cli import main
    path = write(tmp_path, "mine.toml", MINE)
    for hw in (path, "h100-sxm:power_cap_W=500"):
        assert main(["simulate", "--model", "gpt3-175b", "--gpus", "64", "--tp", "8", "--pp", "8",
                     "--hardware", hw, "--json"]) in (0, None)
        out = json.loads(capsys.readouterr().out)
        assert (hw.startswith("h100") and "h100-sxm:power_cap_W=500" in json.dumps(out)) or "my-gpu" in json.dumps(out)
    assert main(["simulate", "--model", "gpt3-175b", "--gpus", "64", "--tp", "8", "--pp", "8",
                 "--hardware", "h100-sxm:colour=1"]) not in (0, None)
    assert "cannot override 'colour'" in capsys.readouterr().err
