"""Shared by the fault tests: run, check exactness against a fault-free run, and count survivals.

A fault counts as survived only when the run that suffered it ended with weights bit-identical to
the same training without faults (zero lost updates) and within 1e-9 of one device."""

import numpy as np
import pytest

from simulator.training import train


def identical(a, b) -> bool:
    return len(a) == len(b) and all(a[li].keys() == b[li].keys() and all(
        np.array_equal(a[li][n], b[li][n]) for n in b[li]) for li in range(len(b)))


class Tally:
    def __init__(self):
        self.injected = self.recovered = self.runs = 0
        self._baselines = {}

    def baseline(self, cfg):
        if cfg not in self._baselines:
            self._baselines[cfg] = train(cfg).params
        return self._baselines[cfg]

    def check(self, result, cfg=None, baseline=None):
        """Assert zero lost updates, then count the run's faults."""
        cfg = cfg or result.train.config
        want = baseline if baseline is not None else self.baseline(cfg)
        assert identical(result.train.params, want), result.reports
        assert result.train.max_rel_weight_diff_vs_single < 1e-9
        assert len(result.train.losses) == len(result.train.reference_losses)
        self.injected += result.faults_injected
        self.recovered += result.faults_recovered
        self.runs += 1
        return result


def tally_fixture(label):
    @pytest.fixture(scope="module")
    def tally(request):
        t = Tally()
        yield t
        line = (f"[{label}] faults survived: {t.injected} injected, {t.recovered} recovered by restart + "
                f"restore, in {t.runs} runs, 0 lost updates (final weights bit-identical to fault-free runs)")
        capman = request.config.pluginmanager.getplugin("capturemanager")
        with capman.global_and_fixture_disabled():
            print("\n" + line)
    return tally
