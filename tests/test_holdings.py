"""simulator/runtime/holdings.py: the bytes a device holds per category, kept up to date as tensors
come and go, equal the recount (`Device.bytes_by_category`, the definition) after every instruction
of every strategy, and after every way a dict can change."""

import copy
import pickle

import numpy as np
import pytest

from simulator.models import GPTConfig
from simulator.parallel.config import STRATEGIES, TrainConfig
from simulator.parallel.experts import MoEGPTConfig
from simulator.runtime.device import Device
from simulator.runtime.holdings import CATEGORIES, Holdings, category_of
from simulator.training import train
from simulator.units import nbytes_of

GPT = GPTConfig(layers=2, hidden=8, heads=2, seq_len=4, vocab=8)
MOE = MoEGPTConfig(layers=2, hidden=8, heads=2, seq_len=4, vocab=8, experts=4, top_k=1)
RUNS = {"single": dict(devices=1), "dp": dict(devices=2), "layer": dict(devices=2), "pp": dict(devices=2, microbatches=2),
        "tp": dict(devices=2, tp=2), "sp": dict(devices=2, tp=2), "cp": dict(devices=2, cp=2),
        "ep": dict(devices=2, ep=2), "zero1": dict(devices=2), "zero2": dict(devices=2), "zero3": dict(devices=2),
        "hybrid": dict(devices=8, dp=2, tp=2, pp=2, microbatches=2)}


def recount(h: dict) -> dict:
    out = dict.fromkeys(CATEGORIES, 0)
    for name, t in h.items():
        out[category_of(name)] += nbytes_of(t)
    return out


def test_every_way_a_dict_changes_keeps_the_totals_equal_to_the_recount():
    h = Holdings({"param/w": np.zeros(3)}, **{"act/x": np.zeros((2, 2))})
    steps = [lambda: h.__setitem__("grad/w", np.zeros(5, np.float32)), lambda: h.__setitem__("param/w", np.zeros(7)),
             lambda: h.__delitem__("act/x"), lambda: h.pop("grad/w"), lambda: h.pop("missing", None),
             lambda: h.setdefault("opt/m", (np.zeros(2), np.zeros(3))), lambda: h.setdefault("opt/m", np.zeros(9)),
             lambda: h.update({"x": np.zeros(4)}, y=np.zeros(1)), lambda: h.__ior__({"act/z": np.zeros(6)}),
             lambda: h.popitem(), lambda: h.clear(), lambda: h.__setitem__("opt/v", np.zeros(2))]
    for step in steps:
        step()
        assert h.totals == recount(h), step
    assert h.totals == {"param": 0, "grad": 0, "opt": 16, "act": 0, "other": 0}
    with pytest.raises(KeyError):
        h.pop("absent")
    for copied in (pickle.loads(pickle.dumps(h)), copy.deepcopy(h), copy.copy(h)):  # a Ray actor's state, a checkpoint
        assert type(copied) is Holdings and copied.totals == h.totals and list(copied) == list(h) == ["opt/v"]


def test_the_runs_list_every_strategy():
    assert set(RUNS) == set(STRATEGIES)


@pytest.mark.parametrize("strategy", list(RUNS))
def test_every_sample_of_every_strategy_equals_the_recount(strategy, monkeypatch):
    samples = []
    sample = Device._sample

    def checked(self, index):
        sample(self, index)
        assert self.memory[index] == self.bytes_by_category(), (self.rank, index)
        samples.append(index)

    monkeypatch.setattr(Device, "_sample", checked)
    r = train(TrainConfig(MOE if strategy == "ep" else GPT, strategy=strategy, global_batch=4, steps=2, **RUNS[strategy]))
    assert samples and r.verdict()[0]
    assert max(r.trace.peak_memory_bytes()) > 0
