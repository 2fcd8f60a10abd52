"""The bounds on work live in simulator/limits.py alone; the commands consume them (issue 30)."""

import pathlib
import re
import subprocess
import sys

from simulator import limits

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_no_command_or_module_defines_its_own_device_bound():
    own = []
    for path in (ROOT / "simulator").rglob("*.py"):
        if path.name == "limits.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.match(r"MAX_\w*DEVICES\w*\s*=", line):
                own.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert own == []


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "simulator", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=60)


def test_derived_devices_are_bounded_by_the_real_run_bound():
    n = 2 * limits.MAX_RUN_DEVICES
    r = _cli("train", "--dp", str(n // 16), "--tp", "16")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        f"error: a real run's devices (the product of the degrees given) of {n:,} is more than the "
        f"{limits.MAX_RUN_DEVICES:,} parasim accepts"]


def test_explain_devices_are_bounded_by_limits():
    n = limits.MAX_EXPLAIN_DEVICES + 1
    r = _cli("explain", "--op", "matmul", "--shapes", "(8,8),(8,8)", "--strategy", "((2,1),(1,1))", "--devices", str(n))
    assert r.returncode == 2
    assert f"of {n:,} is more than the {limits.MAX_EXPLAIN_DEVICES:,} parasim accepts" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
