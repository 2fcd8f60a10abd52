"""Where the kernel cannot confine a submission, grading refuses to start (one line, naming what
is missing and what would not be isolated) unless the instructor allows it explicitly; the
allow-list filter itself is checked instruction by instruction."""

import pytest

from simulator import ParasimError
from simulator.grading import confine, get_lesson, landlock, seccomp
from simulator.grading.gradebook import grade_class
from simulator.grading.sandbox import Limits


def test_no_landlock_refuses_the_class_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setattr(landlock, "abi_version", lambda: 0)
    (tmp_path / "subs").mkdir()
    (tmp_path / "subs" / "alice.py").write_text("x = 1\n", encoding="utf-8")
    with pytest.raises(ParasimError, match=r"no Landlock \(Linux >= 5.13\).*read and overwrite every file.*"
                                           r"--allow-unconfined"):
        grade_class(get_lesson(1), tmp_path / "subs", tmp_path / "scores.csv")
    assert not (tmp_path / "scores.csv").exists()
    assert confine.require_confinement(unconfined_ok=True)["missing"] == ["Landlock (Linux >= 5.13)"]


def test_the_cli_says_what_is_not_isolated(tmp_path, monkeypatch, capsys):
    from simulator.cli import main as cli_main

    monkeypatch.setattr(landlock, "abi_version", lambda: 0)
    (tmp_path / "subs").mkdir()
    assert cli_main(["lesson", "grade", "01", str(tmp_path / "subs"), "--csv", str(tmp_path / "s.csv")]) == 2
    assert "cannot isolate submissions here" in capsys.readouterr().err


def test_the_filter_allows_only_its_list_and_checks_targets():
    code = seccomp.program("x86_64", 4242)
    allowed = seccomp.syscalls("x86_64")
    for name in ("tkill", "pidfd_send_signal", "ptrace", "process_vm_readv", "socket", "execve", "fork", "mknodat",
                 "setpriority", "sched_setaffinity", "io_uring_setup", "prctl"):
        assert name not in allowed
    assert _run(code, 200, ()) == "eperm"                              # tkill: never
    assert _run(code, 62, (4242, 9)) == "allow" and _run(code, 62, (4243, 9)) == "eperm"   # kill: itself only
    assert _run(code, 62, (0, 9)) == "eperm"                           # not its process group
    assert _run(code, 302, (0, 1)) == _run(code, 302, (4242, 1)) == "allow" and _run(code, 302, (1, 1)) == "eperm"
    assert _run(code, 56, (0x00010000 | 0x100,)) == "allow" and _run(code, 56, (0x11,)) == "eperm"  # threads only
    assert _run(code, 16, (1, 0x5401)) == "allow" and _run(code, 16, (1, 0x5412)) == "eperm"  # no TIOCSTI
    assert _run(code, 0, ()) == "allow" and _run(code, 41, ()) == "eperm" and _run(code, 0x40000000, ()) == "eperm"
    assert _run(code, 0, (), arch=0x40000003) == "eperm"              # another architecture's numbers


def _run(code, nr, args, arch=0xC000003E) -> str:
    """A small interpreter of the classic-BPF subset the filter uses, over one seccomp_data."""
    words = {0: nr, 4: arch}
    for i, a in enumerate(args):
        words[16 + 8 * i] = a & 0xFFFFFFFF
    pc, acc = 0, 0
    while True:
        op, jt, jf, k = code[pc]
        if op == 0x20:
            acc = words.get(k, 0)
            pc += 1
        elif op == 0x15:
            pc += 1 + (jt if acc == k else jf)
        elif op == 0x45:
            pc += 1 + (jt if acc & k else jf)
        elif op == 0x06:
            return {0x7FFF0000: "allow", 0x00050001: "eperm", 0x00050026: "enosys"}[k]
        else:
            raise AssertionError(f"unexpected opcode {op:#x}")


def test_limits_carry_the_explicit_permission():
    assert Limits().unconfined_ok is False and Limits(unconfined_ok=True).to_dict()["unconfined_ok"] is True
