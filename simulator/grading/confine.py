"""What a sandboxed submission may touch, and whether this machine can enforce it.

One home for the confinement policy (the runner enforces it with `landlock` and `seccomp`):
- read: the Python installation (its prefixes and the grader's import path, minus parasim's
  checkout), the system libraries, parasim's `simulator/` package (reached through a link in the
  scratch folder, so the checkout's lessons/ and instructor/ folders -- solutions, checkers,
  reference answers -- are not readable);
- write: the submission's own scratch folder only;
- no network, no other process (seccomp), no code from the environment (`python -I -S`, a clean
  environment: no PYTHON* variable, sitecustomize, usercustomize or .pth file runs).
`confinement()` says what this kernel offers; grading untrusted code refuses to start without it
unless the instructor allows it explicitly (`Limits(unconfined_ok=True)`, `--allow-unconfined`).
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

from ..errors import ParasimError
from . import landlock, seccomp

SYSTEM_READ = ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/share/fonts", "/etc/fonts",
               "/etc/ld.so.cache", "/dev/null", "/dev/urandom", "/proc/cpuinfo", "/sys/devices/system/cpu")
NOT_ISOLATED = ("without Landlock and seccomp a submission runs as your user: it can read and overwrite every file "
                "you can (classmates' submissions, the solutions, the gradebook), use the network, and signal or "
                "ptrace other processes")


def checkout_root() -> Path:
    """The folder holding parasim's `simulator/` package (the repository, or site-packages)."""
    return Path(__file__).resolve().parents[2]


def protected() -> list[Path]:
    """Folders no submission may read: the lessons (solutions, checkers) and the instructor's."""
    from .catalog import instructor_dir, lessons_dir

    return [p.resolve() for p in (lessons_dir(), instructor_dir())]


def confinement() -> dict:
    """What this machine can enforce: Landlock ABI (0: none) and whether the seccomp filter exists."""
    abi = landlock.abi_version()
    filt = platform.system() == "Linux" and platform.machine() in seccomp._ARCH
    missing = ([] if abi >= 1 else ["Landlock (Linux >= 5.13)"]) + \
              ([] if filt else [f"the seccomp filter (Linux x86_64 or aarch64; this is {platform.machine()})"])
    return {"landlock_abi": abi, "seccomp": filt, "network_rules": abi >= 4, "signal_scope": abi >= 6,
            "complete": not missing, "missing": missing}


def require_confinement(unconfined_ok: bool) -> dict:
    """`confinement()`, or a one-line refusal when it is incomplete and not explicitly allowed."""
    c = confinement()
    if not c["complete"] and not unconfined_ok:
        raise ParasimError(f"cannot isolate submissions here: no {' and no '.join(c['missing'])}; "
                           f"{NOT_ISOLATED}. Grade in the container of docs/grading.md, or pass "
                           "--allow-unconfined (Limits(unconfined_ok=True)) to grade anyway")
    return c


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def import_path() -> list[str]:
    """The grader's import path for the sandbox, without the current folder and without any entry
    that holds a protected folder (parasim's checkout comes through the scratch link instead)."""
    keep, guard = [], protected()
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        p = Path(entry).resolve()
        if p == Path.cwd().resolve() or any(_inside(g, p) for g in guard):
            continue
        keep.append(str(p))
    return keep


def readable(paths: list[str]) -> list[str]:
    """Everything the sandbox may read besides its scratch folder; refuses a set that would expose
    a protected folder (a Python installed above the lessons, say)."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    out = sorted({str(Path(p).resolve()) for p in prefixes | set(paths)}) + list(SYSTEM_READ)
    out.append(str(checkout_root() / "simulator"))
    for p in out:
        for g in protected():
            if _inside(g, Path(p)):
                raise ParasimError(f"the sandbox would read {p}, which holds {g}; move the lessons or the "
                                   "instructor folder out of the Python installation")
    return out


def link_package(scratch: Path) -> str:
    """A folder in `scratch` holding a link to parasim's `simulator/` package: the sandbox imports
    parasim from there, so it never needs to list the checkout (with its lessons) itself."""
    lib = scratch / ".parasim"
    lib.mkdir()
    (lib / "simulator").symlink_to(checkout_root() / "simulator", target_is_directory=True)
    return str(lib)
