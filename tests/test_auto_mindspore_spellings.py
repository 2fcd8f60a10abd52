"""MindSpore's spellings: `Layout` (parasim's MsLayout) and `Gather()(params, indices, axis)`; the
earlier spellings are kept."""

import numpy as np
import pytest

import simulator
from simulator.auto import Layout, MsLayout, ops
from simulator.auto.graph import Network
from simulator.errors import ParasimError


def test_layout_is_mindspore_layout():
    assert Layout is MsLayout
    assert repr(Layout((2, 4), ("dp", "mp"))("dp", "None")) == repr(MsLayout((2, 4), ("dp", "mp"))("dp", "None"))
    assert simulator.Layout is not Layout  # the top level keeps parasim's own layout class


def _lookup(call):
    net = Network("emb")
    table = net.parameter("table", np.arange(32.0).reshape(8, 4))
    idx = net.input("idx", (5,))
    return call(table, idx)


def test_gather_takes_the_axis_as_third_input():
    new = _lookup(lambda t, i: ops.Gather()(t, i, 0))
    old = _lookup(lambda t, i: ops.Gather(0)(t, i))
    assert new.shape == old.shape == (5, 4)


@pytest.mark.parametrize("axis", [1, "0"])
def test_gather_other_axes_refused_in_one_line(axis):
    with pytest.raises(ParasimError, match=rf"Gather: only axis=0 \(rows of the table\) is modelled, got {axis!r}"):
        _lookup(lambda t, i: ops.Gather()(t, i, axis))
