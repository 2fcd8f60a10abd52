"""The embedded Ray listens on 127.0.0.1 only (GCS, raylet, workers): nothing off this machine
needs its ports. Started in a child process (the suite's shared session stays alone), which lists
every listening TCP socket of the Ray processes of its own session from /proc/net/tcp{,6}."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="Linux /proc only")]

CHILD = r"""
import json, os
from simulator.runtime.ray_start import ensure_ray
import ray
ensure_ray(num_cpus=1)

@ray.remote(num_cpus=0)
class Probe:
    def pid(self):
        return os.getpid()

probe = Probe.remote()
ray.get(probe.pid.remote(), timeout=120)
session = ray._private.worker._global_node.session_name.encode()
pids = {os.getpid()}
for p in filter(str.isdigit, os.listdir("/proc")):
    try:
        if session in open(f"/proc/{p}/cmdline", "rb").read():
            pids.add(int(p))
    except OSError:
        pass
inodes = {}
for p in pids:
    try:
        for fd in os.listdir(f"/proc/{p}/fd"):
            try:
                link = os.readlink(f"/proc/{p}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes[link[8:-1]] = p
    except OSError:
        pass
listening = []
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    if os.path.exists(table):
        for line in open(table).read().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # state LISTEN, a socket of this session
                listening.append([table, f[1], inodes[f[9]]])
print("LISTENING " + json.dumps({"pids": len(pids), "sockets": listening}), flush=True)
ray.shutdown()
"""


def test_the_embedded_ray_listens_on_loopback_only():
    import simulator

    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(simulator.__file__)))}
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300, env=env)
    line = next((x for x in done.stdout.splitlines() if x.startswith("LISTENING ")), None)
    assert line, done.stderr[-2000:]
    got = json.loads(line[len("LISTENING "):])
    assert got["pids"] >= 3 and got["sockets"]  # the driver, the GCS, the raylet, a worker ...
    loopback = ("0100007F:", "00000000000000000000000001000000:")  # 127.0.0.1 and ::1, little-endian words
    outside = [s for s in got["sockets"] if not s[1].startswith(loopback)]
    assert not outside, outside
