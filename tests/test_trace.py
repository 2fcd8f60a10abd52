"""Trace export: flow arrows in the Chrome/Perfetto JSON bind to the right send and recv slices."""

import json

import numpy as np

from simulator.cost.clock import SimpleDeviceModel, simulate
from simulator.program import ProgramBuilder
from simulator.runtime import LocalRuntime


def _chain_program():
    # device 0 sends three tensors back to back to device 1, which passes each on to device 2:
    # device 1's comm lane holds adjacent recv and send slices (their edges touch)
    b = ProgramBuilder(3, "chain")
    for k in range(3):
        b.send(0, 1, f"act/x{k}", nbytes=8000)
    for k in range(3):
        b.send(1, 2, f"act/x{k}", nbytes=8000)
    return b.build()


def test_every_flow_arrow_binds_inside_its_own_send_and_recv():
    prog = _chain_program()
    rt = LocalRuntime(3)
    rt.load({0: {f"act/x{k}": np.ones(1000) for k in range(3)}})
    res = rt.run(prog)
    trace = simulate(prog, SimpleDeviceModel(), memory=res.memory_by_instruction())
    events = json.loads(trace.to_chrome_json())["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    flows = [e for e in events if e["ph"] in ("s", "f")]
    ids = sorted({f["id"] for f in flows})
    assert len(ids) == 6 and len(flows) == 12  # one arrow per send -> recv
    for fid in ids:
        start, = [f for f in flows if f["id"] == fid and f["ph"] == "s"]
        end, = [f for f in flows if f["id"] == fid and f["ph"] == "f"]
        assert end["bp"] == "e"
        bound = {}
        for f, kind in ((start, "send"), (end, "recv")):
            # exactly one slice on the flow's thread encloses its timestamp strictly: the one it belongs to
            around = [x for x in slices if x["pid"] == f["pid"] and x["tid"] == f["tid"]
                      and x["ts"] < f["ts"] < x["ts"] + x["dur"]]
            assert len(around) == 1 and around[0]["args"]["kind"] == kind
            bound[kind] = around[0]
        assert bound["send"]["pid"] != bound["recv"]["pid"]
        assert bound["send"]["name"].split()[1] == bound["recv"]["name"].split()[1]  # same tensor
