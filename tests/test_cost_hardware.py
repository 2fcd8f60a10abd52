"""Hardware presets, the local calibration file, the matmul roofline and the topology."""

import json

import pytest

from simulator.cost import compute
from simulator.cost.hardware import get_hardware, hardware_names, load_local
from simulator.errors import ParasimError
from simulator.topology import Link, Topology


def test_presets_carry_datasheet_numbers():
    a100 = get_hardware("a100-80gb")
    assert a100.peak("bf16") == 312e12 and a100.memory_bytes == 80 * 2**30
    assert a100.intra.bandwidth_Bps == 300e9          # 600 GB/s bidirectional NVLink
    assert a100.inter.bandwidth_Bps == 25e9           # 200 Gb/s HDR per GPU
    h100 = get_hardware("H100-SXM")
    assert h100.peak("bf16") == 989e12 and h100.memory_bandwidth_Bps == 3.35e12
    assert get_hardware("h200").memory_bytes == 143771 * 2**20 and get_hardware("h200").memory_bandwidth_Bps == 4.8e12
    assert get_hardware("a100-40gb").memory_bytes == 40 * 2**30
    for name in hardware_names():
        hw = get_hardware(name)
        assert hw.source and hw.devices_per_node >= 1 and "bf16" in hw.peak_flops


def test_unknown_preset_lists_known_names():
    with pytest.raises(ParasimError, match="a100-80gb.*h100-sxm"):
        get_hardware("v100")


def test_missing_dtype_is_refused():
    with pytest.raises(ParasimError, match="fp64"):
        get_hardware("tpu-v4-like").peak("fp64")


def test_hardware_is_frozen():
    hw = get_hardware("a100-80gb")
    with pytest.raises(Exception):
        hw.memory_bytes = 1
    with pytest.raises(TypeError):
        hw.peak_flops["bf16"] = 1


def test_local_defaults_and_calibration_file(tmp_path):
    base = load_local(tmp_path / "absent.json")
    assert base.name == "local" and base.peak("fp64") > 0
    path = tmp_path / "local.json"
    path.write_text(json.dumps({"peak_flops": {"fp64": 5e10}, "memory_bandwidth_Bps": 2e10,
                                "intra": {"bandwidth_Bps": 7e9}}))
    hw = get_hardware("local", local_path=path)
    assert hw.peak("fp64") == 5e10 and hw.peak("fp32") == base.peak("fp32")
    assert hw.memory_bandwidth_Bps == 2e10
    assert hw.intra == Link(base.intra.latency_s, 7e9)
    path.write_text(json.dumps({"warp_drive": 1}))
    with pytest.raises(ParasimError, match="unknown keys"):
        load_local(path)


def test_matmul_efficiency_saturates_and_is_bounded():
    hw = get_hardware("a100-80gb")
    sizes = [64, 256, 1024, 4096, 16384]
    effs = [compute.matmul_efficiency(d, d, d, hw) for d in sizes]
    assert all(a < b for a, b in zip(effs, effs[1:]))
    assert effs[-1] <= compute.MATMUL_PEAK_FRACTION and effs[-1] > 0.95 * compute.MATMUL_PEAK_FRACTION


def test_skinny_matmul_is_memory_bound():
    hw = get_hardware("a100-80gb")
    m, n, k = 1, 8192, 8192                        # a matrix-vector product
    t = compute.matmul_time_s(m, n, k, hw)
    nbytes = 2 * (m * k + k * n + m * n)
    assert t == pytest.approx(nbytes / (hw.memory_bandwidth_Bps * compute.MEMORY_EFFICIENCY), rel=1e-12)
    assert compute.matmul_efficiency(m, n, k, hw) < 0.01


def test_matmul_time_scales_with_batch_and_rejects_bad_dims():
    hw = get_hardware("h100-sxm")
    assert compute.matmul_time_s(512, 512, 64, hw, batch=8) == pytest.approx(
        8 * compute.matmul_time_s(512, 512, 64, hw), rel=1e-12)
    with pytest.raises(ParasimError):
        compute.matmul_time_s(0, 4, 4, hw)


def test_topology_nodes_and_links():
    topo = Topology(20, 8, Link(1e-6, 300e9), Link(5e-6, 25e9))
    assert topo.n_nodes == 3 and topo.node_of(7) == 0 and topo.node_of(8) == 1
    assert topo.link(0, 7) == topo.intra and topo.link(7, 8) == topo.inter
    assert topo.link_of(16, 19) == (1e-6, 300e9)
    assert topo.nodes_of([0, 9, 1, 17]) == {0: [0, 1], 1: [9], 2: [17]}
    assert not topo.spans_nodes(range(8)) and topo.spans_nodes([7, 8])
    with pytest.raises(ParasimError):
        topo.node_of(20)
    with pytest.raises(ParasimError):
        Link(1e-6, 0)


def test_hardware_device_model_for_the_clock():
    from simulator.cost.device_model import HardwareDeviceModel
    from simulator.program import Compute

    dm = HardwareDeviceModel("a100-80gb", n_devices=16)
    mm = Compute("matmul", ("x", "w"), ("y",), flops=2 * 4096**3, nbytes=3 * 2 * 4096**2)
    assert dm.compute_time_s(mm) == pytest.approx(2 * 4096**3 / (312e12 * compute.MATMUL_PEAK_FRACTION))
    add = Compute("add", ("x", "y"), ("z",), flops=1e6, nbytes=3e9)
    assert dm.compute_time_s(add) == pytest.approx(3e9 / (2.039e12 * compute.MEMORY_EFFICIENCY))
    # links at the preset's measured NCCL efficiency (0.8), the one the closed form uses too
    assert dm.link(0, 7) == pytest.approx((2e-6, 0.8 * 300e9)) and dm.link(7, 8) == pytest.approx((5e-6, 0.8 * 25e9))
    assert HardwareDeviceModel("a100-80gb", 16, link_efficiency=1.0).link(0, 7) == pytest.approx((2e-6, 300e9))
    with pytest.raises(ParasimError):
        HardwareDeviceModel("tpu-v4-like", 4, dtype="fp64")


def test_infiniband_gets_its_own_nccl_efficiency():
    """H100/H200 price the inter-node NIC at NCCL's measured 47 of 50 GB/s per NDR NIC, NVLink at
    0.8; A100 keeps 0.8 on both (`simulator.cost.hardware` docstring); a given efficiency applies to both."""
    from dataclasses import replace
    h100, a100 = get_hardware("h100-sxm"), get_hardware("a100-80gb")
    topo = h100.topology(16)
    assert topo.inter.bandwidth_Bps == pytest.approx(0.94 * 50e9, rel=1e-12)
    assert topo.intra.bandwidth_Bps == pytest.approx(0.8 * 450e9, rel=1e-12)
    assert get_hardware("h200").topology(16).inter.bandwidth_Bps == pytest.approx(0.94 * 50e9, rel=1e-12)
    assert a100.topology(16).inter.bandwidth_Bps == pytest.approx(0.8 * 25e9, rel=1e-12)
    forced = h100.topology(16, 0.5)
    assert (forced.inter.bandwidth_Bps, forced.intra.bandwidth_Bps) == (0.5 * 50e9, 0.5 * 450e9)
    with pytest.raises(ParasimError, match="inter_link_efficiency must be in"):
        replace(h100, inter_link_efficiency=1.5)
