"""The one-device check at any number of steps (simulator/one_device.py): a correct run whose final
weights drift past 1e-9 from one device (rounding amplified by 400 Adam steps) is still a match,
because each step is compared with one step of one device from the run's own previous weights;
a real difference (one wrong gradient element, one lost micro-batch) is caught at the step it
happens, at step 1 as at step 399."""

import numpy as np
import pytest

from simulator.models import GPTConfig
from simulator.one_device import TOLERANCE
from simulator.parallel.config import TrainConfig
from simulator.runtime.device import Device
from simulator.runtime.local import LocalRuntime
from simulator.training import train

GPT = GPTConfig(layers=1, hidden=4, heads=2, seq_len=2, vocab=4)  # small: 400 steps in CI time
LONG = {"dp": dict(devices=4), "tp": dict(devices=2, tp=2), "pp": dict(devices=2, microbatches=2),
        "hybrid": dict(devices=8, dp=2, tp=2, pp=2, microbatches=2)}


@pytest.mark.parametrize("strategy", list(LONG))
def test_a_correct_run_of_400_steps_matches(strategy):
    r = train(TrainConfig(GPT, strategy=strategy, global_batch=4, steps=400, **LONG[strategy]))
    assert r.verdict() == (True, "ok")
    assert r.max_step_rel_diff_vs_single <= TOLERANCE / 20  # one step's rounding, well below the bound
    assert r.max_rel_weight_diff_vs_single > r.max_step_rel_diff_vs_single  # the drift the old check tripped on


class Corrupt(Device):
    """Device 1 spoils its gradient going into the data-parallel AllReduce at one step: `how` =
    'element' adds 1e-3 to one element, 'lost' zeroes it (its micro-batch is lost)."""

    at, how = 0, "element"

    def __init__(self, rank):
        super().__init__(rank)
        self.runs = 0

    def report(self):
        self.runs += 1
        return super().report()

    def collective_step(self, call, *chunks):
        ins = call.ins
        if (self.rank == 1 and call.first and self.runs == self.at and ins.kind == "all_reduce"
                and ins.tensor in self.tensors and ins.tensor.startswith("grad/")):
            g = np.array(self.tensors[ins.tensor], copy=True)
            if self.how == "lost":
                g[...] = 0.0
            else:  # one element's sign flipped (Adam's first step moves by lr * sign(g): a small
                g.flat[0] = 1e-3 - g.flat[0]   # nudge of a large element would change almost nothing)
            self.tensors[ins.tensor] = g
        return super().collective_step(call, *chunks)


@pytest.mark.parametrize("how", ["element", "lost"])
@pytest.mark.parametrize("at,steps", [(0, 1), (1, 2), (398, 400)])
def test_a_real_difference_is_caught_at_its_step(how, at, steps, monkeypatch):
    monkeypatch.setattr(Corrupt, "at", at)
    monkeypatch.setattr(Corrupt, "how", how)
    cfg = TrainConfig(GPT, strategy="dp", devices=4, global_batch=4, steps=steps)
    r = train(cfg, runtime=LocalRuntime(4, device_class=Corrupt))
    ok, line = r.verdict()
    assert ok is False and r.worst_step == at and f"at step {at}" in line and "the parallel run is wrong" in line
    assert r.max_step_rel_diff_vs_single > 1e3 * TOLERANCE
