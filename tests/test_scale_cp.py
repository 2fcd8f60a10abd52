"""Context parallelism in the scale program (`cost.scale_cp`): the one ring order both compilers
walk (`parallel.cp_attention.ring_order`), and how a ring transfer of a program that holds one
context rank is priced (a Send to the device itself, `ScaleDeviceModel.link`)."""

import pytest

from simulator.cost.device_model import HardwareDeviceModel
from simulator.cost.hardware import get_hardware
from simulator.cost.parallel_config import ParallelConfig
from simulator.cost.scale_device import ScaleDeviceModel
from simulator.errors import ProgramError
from simulator.parallel.cp_attention import ring_order
from simulator.program import Compute, Program, Recv, Send


@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_the_ring_passes_c_minus_1_blocks_forward_and_twice_that_backward(n):
    """Transformer Engine's AttnFuncWithCPAndKVP2P: forward c-1 K/V hops; backward c-1 K/V hops and
    c-1 dK/dV hops (it starts from the forward's last block, so the sums end at their owner)."""
    fwd, bwd = ring_order(n, backward=False), ring_order(n, backward=True)
    for order in (fwd, bwd):
        assert [s for a, _, s in order if a == "step"] == list(range(n))
        for what in ("kv", "dkv"):
            sends = [s for a, w, s in order if a == "send" and w == what]
            assert sends == [s for a, w, s in order if a == "recv" and w == what]   # each send has its receive
    assert [w for a, w, _ in fwd if a == "send"] == ["kv"] * (n - 1)
    assert sorted(w for a, w, _ in bwd if a == "send") == ["dkv"] * (n - 1) + ["kv"] * (n - 1)
    # backward: a step's exchanges are posted before its kernel (they overlap it)
    for s in range(n):
        at = [i for i, x in enumerate(bwd) if x[2] == s]
        assert bwd[at[-1]][0] == "step"


def _model(cfg):
    hw = get_hardware("a100-80gb")
    return ScaleDeviceModel(HardwareDeviceModel(hw, cfg.gpus, "bf16"), cfg, fold_tp=True), hw


def test_a_send_to_itself_is_priced_on_the_rings_slowest_hop():
    inside, hw = _model(ParallelConfig(cp=2, dp=4))          # the cp pair shares a node of 8
    across, _ = _model(ParallelConfig(tp=8, cp=2))           # tp 8 fills a node: the cp pair spans two
    topo = hw.topology(16)
    assert inside.link(0, 0) == topo.link_of(0, 1) == (topo.intra.latency_s, topo.intra.bandwidth_Bps)
    assert across.link(0, 0) == (topo.inter.latency_s, topo.inter.bandwidth_Bps)


def test_the_walk_accepts_a_send_to_itself_and_refuses_a_device_that_does_not_exist():
    ok = Program(1, [[Compute("x", (), ("a",)), Send("a", 0, "t", 8), Recv("b", 0, "t", 8)]])
    assert [kind for kind, _ in ok.walk()] == ["local", "send", "recv"]
    with pytest.raises(ProgramError, match="sends to invalid device 1"):
        Program(1, [[Send("a", 1, "t", 8)]]).walk()
