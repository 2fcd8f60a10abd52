"""Run one submission in its own process, with limits, and call its functions as data.

What this isolation gives (on Linux):
- the submission runs in a separate Python process, in its own session and process group
  (`start_new_session`), started in a fresh scratch folder holding only that submission (copied
  from the text the grader read before grading began: overwriting a file on disk changes no grade);
- limits set before it starts: address space (`RLIMIT_AS`, default 2 GiB: a 50 GB allocation is a
  MemoryError), file size (`RLIMIT_FSIZE`), no core files;
- a seccomp filter (`seccomp.py`, Linux x86_64/aarch64) installed before the submission's first
  line: no new processes (`os.system`, `subprocess`, a detached child all fail), no exec, no
  signal to another process (it cannot kill the grader), no ptrace;
- a wall-clock time limit per item: at the limit the whole process group is killed (`os.killpg`)
  and the next item runs in a fresh process, so an endless loop costs one item;
- it dies with the grader (`PR_SET_PDEATHSIG`); every row is written as it is graded;
- the checker and the reference answers stay in the grader: the sandbox only returns what the
  submission's functions return, as data (`codec`), never a verdict or a report; requests go the
  other way as JSON data too (`codec`; no pickle in either direction).

What it does not give: the submission runs as the grader's own user, so it can read and write any
file that user can (another submission's file if it knows the path -- grades use the copies read
before grading began, but the file on disk can be damaged -- the lessons' solutions, the output
folder while it runs); it has the network; without the seccomp filter (another OS or
architecture) it could also start processes and signal the grader. For a course, run the grader in a container
that mounts only the submissions (read-only) and an output folder, with no network:

    docker run --rm --network none --memory 4g --pids-limit 256 -v $PWD/subs:/subs:ro \
        -v $PWD/out:/out parasim parasim lesson grade 05 /subs --csv /out/scores.csv --jobs 4
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import ParasimError
from .codec import DataError, from_data, to_data, trusted
from .runner import write_frame

MAX_SECONDS = 86400          # a day per item: anything longer is a mistake, not a limit
MIN_MEMORY_MB = 64           # below this Python and numpy cannot start (MemoryError at import)
MAX_MB = 2**20               # 1 TiB
_FLAG = {"timeout_s": "--timeout", "memory_mb": "--memory-mb"}   # the CLI's names in the message


@dataclass(frozen=True)
class Limits:
    """Per submission: seconds per item, seconds to start and import it (Python, numpy, parasim and
    the file's top level: generous, as a loaded machine starts processes slowly), address space in
    MiB, file size in MiB."""

    timeout_s: float = 60.0
    memory_mb: int = 2048
    file_mb: int = 256
    import_timeout_s: float = 60.0

    def __post_init__(self):
        """Refuse limits that would grade nothing or never stop (one line, before any sandbox)."""
        for name in ("timeout_s", "import_timeout_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= MAX_SECONDS:
                raise ParasimError(f"{_FLAG.get(name, name)} must be a number of seconds in (0, {MAX_SECONDS}], "
                                   f"got {v!r}")
        for name, low in (("memory_mb", MIN_MEMORY_MB), ("file_mb", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= MAX_MB:
                raise ParasimError(f"{_FLAG.get(name, name)} must be a whole number of MiB in [{low}, {MAX_MB}], "
                                   f"got {v!r}")

    def to_dict(self) -> dict:
        """Plain data: every field (dataclasses.asdict gives the same)."""
        return {"timeout_s": self.timeout_s, "memory_mb": self.memory_mb, "file_mb": self.file_mb,
                "import_timeout_s": self.import_timeout_s}


class StudentError(Exception):
    """The submission's function raised: `text` is the one-line error (with the student's line)."""

    def __init__(self, text: str, not_implemented: bool = False):
        super().__init__(text)
        self.text, self.not_implemented = text, not_implemented


class SandboxTimeout(Exception):
    """The submission did not answer within the time limit (its process group was killed)."""


class SandboxCrash(Exception):
    """The submission's process ended (os._exit, a signal, the memory limit) or broke the protocol."""


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[2])


class Sandbox:
    """One submission's process: `call(name, args, kwargs)` returns what its function returned.

    Start with `Sandbox(text)`; `loaded` is True when the file imported, else `load_error` says why.
    Always `close()` (or use `with`): it kills the process group and removes the scratch folder."""

    def __init__(self, source: str, limits: Limits | None = None, filename: str = "submission.py"):
        self.limits = limits = limits or Limits()
        self.scratch = Path(tempfile.mkdtemp(prefix="parasim-grade-"))
        self.file = self.scratch / filename
        self.file.write_text(source, encoding="utf-8")
        self.log = self.scratch / ".output"
        req_r, self._req = os.pipe()
        self._resp, resp_w = os.pipe()
        env = {"PATH": os.defpath, "PYTHONPATH": _package_root(), "HOME": str(self.scratch),
               "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg", "LANG": "C.UTF-8"}
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-s", "-m", "simulator.grading.runner", str(req_r), str(resp_w), filename,
                 str(limits.memory_mb), str(limits.file_mb), str(os.getpid())],
                cwd=self.scratch, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                pass_fds=(req_r, resp_w), start_new_session=True)
        os.close(req_r)
        os.close(resp_w)
        self.loaded, self.load_error = False, ""
        self._callbacks: list = []
        try:
            hello = self._receive(time.monotonic() + limits.import_timeout_s)
            self.loaded, self.load_error = bool(hello.get("ok")), str(hello.get("error", ""))
        except SandboxTimeout:
            self.load_error = f"importing your file took longer than {limits.import_timeout_s:g} s (an endless loop?)"
        except SandboxCrash as e:
            self.load_error = f"your file ended the process while importing ({e})"

    # ---- talking to the submission --------------------------------------------------------------
    def _receive(self, deadline: float) -> dict:
        if self.proc is None:
            raise SandboxCrash("the process was already stopped")
        try:
            header = self._read(4, deadline)
            (n,) = struct.unpack(">I", header)
            if n > 64 * 2**20:
                raise SandboxCrash(f"a {n}-byte answer (more than 64 MiB)")
            message = json.loads(self._read(n, deadline))
        except (EOFError, OSError, ValueError) as e:
            self.kill()
            raise SandboxCrash(self._exit_reason(e)) from None
        if not isinstance(message, dict):
            self.kill()
            raise SandboxCrash("an answer that is not a message")
        return message

    def _read(self, n: int, deadline: float) -> bytes:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([self._resp], [], [], max(left, 0))
        if not ready:
            self.kill()
            raise SandboxTimeout(f"no answer within {self.limits.timeout_s:g} s (an endless loop?)")
        data = os.read(self._resp, n)
        if not data:
            raise EOFError("closed")
        return data + self._read(n - len(data), deadline) if len(data) < n else data

    def _exit_reason(self, error) -> str:
        try:
            code = self.proc.wait(timeout=2) if self.proc else None
        except subprocess.TimeoutExpired:
            code = None
        if code is not None and code < 0:
            reason = f"killed by signal {signal.Signals(-code).name}"
        elif code is not None:
            reason = f"the process exited with code {code} (os._exit or sys.exit in your code?)"
        else:
            reason = f"the process stopped answering ({error})"
        tail = self.output_tail()
        return reason + (f"; its last output: {tail}" if tail else "")

    def output_tail(self, n: int = 300) -> str:
        """The last `n` characters the submission printed (for the feedback)."""
        try:
            text = self.log.read_bytes()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""
        return " ".join(text.split())

    def call(self, name: str, args=(), kwargs=None, deadline: float | None = None):
        """What `submission.name(*args, **kwargs)` returns, rebuilt from data. Raises StudentError
        (it raised), SandboxTimeout (killed at the deadline) or SandboxCrash (the process ended)."""
        deadline = deadline if deadline is not None else time.monotonic() + self.limits.timeout_s
        with trusted():
            self._send({"op": "call", "name": name, "args": [self._argument(a) for a in args],
                        "kwargs": to_data(dict(kwargs or {}))})
        while True:
            message = self._receive(deadline)
            if message.get("op") == "callback":  # the submission calls a function the check gave it
                try:
                    fn = self._callbacks[int(message["index"])]
                    value = fn(*from_data(message["args"]), **from_data(message["kwargs"]))
                    with trusted():
                        reply = {"value": to_data(value)}
                except Exception as e:  # noqa: BLE001 -- reported to the submission as its error
                    reply = {"error": f"{type(e).__name__}: {e}"}
                self._send(reply)
                continue
            if message.get("ok"):
                if message.get("callable"):
                    return _Remote(self, name)
                try:
                    return from_data(message.get("value"))
                except Exception as e:  # noqa: BLE001 -- a value the grader cannot rebuild
                    raise StudentError(f"your function returned something that is not plain data ({e})") from None
            raise StudentError(str(message.get("error", "an error")), bool(message.get("not_implemented")))

    def get(self, name: str, deadline: float | None = None):
        """The submission's attribute `name` (a function comes back as a remote callable)."""
        deadline = deadline if deadline is not None else time.monotonic() + self.limits.timeout_s
        self._send({"op": "get", "name": name})
        message = self._receive(deadline)
        if not message.get("ok"):
            raise StudentError(str(message.get("error", "an error")))
        return _Remote(self, name) if message.get("callable") else from_data(message.get("value"))

    def _argument(self, a) -> dict:
        """One argument of a call as data ({"v": data}); a callable that is not data (a check's
        lambda) stays here and travels as {"cb": index}: the sandbox calls back to run it."""
        try:
            return {"v": to_data(a)}
        except DataError:
            if not callable(a):
                raise
            self._callbacks.append(a)
            return {"cb": len(self._callbacks) - 1}

    def _send(self, message: dict) -> None:
        """JSON, as the answers: the sandbox never unpickles (runner.py)."""
        try:
            write_frame(self._req, json.dumps(message).encode())
        except OSError as e:
            self.kill()
            raise SandboxCrash(self._exit_reason(e)) from None

    # ---- ending ---------------------------------------------------------------------------------
    def kill(self) -> None:
        """Kill the submission's whole process group."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        self.kill()
        self.proc = None
        for fd in (self._req, self._resp):
            try:
                os.close(fd)
            except OSError:
                pass
        self._req = self._resp = -1
        shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@contextlib.contextmanager
def shared_folder():
    """A temporary folder a check shares with the submission: the sandbox may read and write it
    (a place for files a check hands over or expects back). Removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="parasim-shared-") as tmp:
        yield tmp


class _Remote:
    """A function of the submission, called in its sandbox."""

    def __init__(self, box: Sandbox, name: str):
        self.box, self.name = box, name

    def __call__(self, *args, **kwargs):
        return self.box.call(self.name, args, kwargs, deadline=getattr(self.box, "deadline", None))
