"""Run one submission in its own confined process, with limits, and call its functions as data.

What this isolation gives (Linux; `confine.py` holds the policy):
- the submission runs in a separate Python process (`python -I -S`, a clean environment: no
  PYTHON* variable, sitecustomize or .pth file runs), in its own session and process group,
  started in a fresh scratch folder holding only that submission (copied from the text the grader
  read before grading began: overwriting a file on disk changes no grade);
- Landlock (`landlock.py`): it reads only the Python installation, the system libraries and
  parasim's `simulator/` package, writes only its scratch folder, has no TCP, and (ABI >= 6)
  signals nothing outside itself; the lessons' solutions and checkers, the instructor's folder,
  classmates' files, the gradebook and /proc/<grader> are out of its reach;
- an allow-list seccomp filter (`seccomp.py`): no processes, programs, sockets, ptrace, and no
  signal, rlimit or affinity call aimed at any process but itself;
- limits set before it starts: address space (`RLIMIT_AS`), file size (`RLIMIT_FSIZE`), no core
  files, death with the grader (`PR_SET_PDEATHSIG`); a wall-clock limit per item, the import of the
  file included: at the limit the process group is killed and the next item gets a fresh process;
- the checker and the reference answers stay in the grader: the sandbox only returns what the
  submission's functions return, as plain data (`codec`), never a verdict or a report; requests go
  the other way as JSON data too (no pickle in either direction); an answer is at most
  `MAX_ANSWER` bytes.
Where the kernel lacks Landlock or the filter, grading refuses to start unless `unconfined_ok`
(`--allow-unconfined`) says otherwise (`confine.require_confinement`, which says what is then not
isolated). For a container recipe see docs/grading.md.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import select
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import ParasimError
from . import confine
from .codec import DataError, finite, from_data, to_data, trusted
from .runner import write_frame

# the runner's bootstrap: the import path comes from the grader, nothing from the environment
BOOT = ("import json, sys; c = json.loads(sys.argv[1]); sys.path[:0] = c['path']; "
        "from simulator.grading.runner import main; sys.exit(main(c))")
MAX_ANSWER = 4 * 2**20       # bytes of one answer: more is a crash of that item, not grader memory
MAX_CALLBACKS = 10_000       # calls back into the check per item

MAX_SECONDS = 86400          # a day per item: anything longer is a mistake, not a limit
MIN_MEMORY_MB = 64           # below this Python and numpy cannot start (MemoryError at import)
MAX_MB = 2**20               # 1 TiB
_FLAG = {"timeout_s": "--timeout", "memory_mb": "--memory-mb"}   # the CLI's names in the message


@dataclass(frozen=True)
class Limits:
    """Per submission: seconds per item (and for importing the file: its top level is the
    student's code), seconds to start Python, numpy and parasim before the file (the grader's own
    work: generous, as a loaded machine starts processes slowly), address space in MiB, file size
    in MiB, and whether grading may go on where the machine cannot confine it (`confine.py`)."""

    timeout_s: float = 60.0
    memory_mb: int = 2048
    file_mb: int = 256
    import_timeout_s: float = 60.0
    unconfined_ok: bool = False

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
                "import_timeout_s": self.import_timeout_s, "unconfined_ok": self.unconfined_ok}


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

    def __init__(self, source: str | None, limits: Limits | None = None, filename: str = "submission.py",
                 files: dict | None = None, withhold: dict | None = None, readable: list | None = None):
        """`source` None: a probe sandbox, running parasim's `probes` on data (no submission).
        `files`: other files of the submission ({name: text}, a folder submission's modules),
        written next to it in the scratch folder. `withhold`: {function: [parasim functions]} that
        raise while that function runs (`catalog`, `runner.withheld`). `readable`: more folders it
        may read (never write): a probe sandbox reading what a submission wrote in its own scratch."""
        self.limits = limits = limits or Limits()
        self.confinement = confine.require_confinement(limits.unconfined_ok)
        self.scratch = Path(tempfile.mkdtemp(prefix="parasim-grade-"))
        self.log = self.scratch / ".output"
        self.proc, self._req, self._resp = None, -1, -1
        self.loaded, self.load_error = False, ""
        self._callbacks: list = []
        if source is not None:
            for name, text in (files or {}).items():
                if Path(name).name == name and not name.startswith(".") and name != filename:
                    (self.scratch / name).write_text(text, encoding="utf-8")
            self.file = self.scratch / filename
            self.file.write_text(source, encoding="utf-8")
        req_r, self._req = os.pipe()
        self._resp, resp_w = os.pipe()
        config = {"req": req_r, "resp": resp_w, "file": filename if source is not None else None,
                  "memory_mb": limits.memory_mb, "file_mb": limits.file_mb, "grader_pid": os.getpid(),
                  "path": [confine.link_package(self.scratch)] + confine.import_path(),
                  "write": [str(self.scratch)], "require": not limits.unconfined_ok,
                  "withhold": {str(k): [str(p) for p in v] for k, v in (withhold or {}).items()}}
        config["read"] = confine.readable(config["path"][1:] + [str(r) for r in readable or ()])
        env = {"PATH": os.defpath, "HOME": str(self.scratch), "LANG": "C.UTF-8", "MPLBACKEND": "Agg",
               "MPLCONFIGDIR": str(self.scratch / ".matplotlib"), "OPENBLAS_NUM_THREADS": "1",
               "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-B", "-c", BOOT, json.dumps(config)],
                cwd=self.scratch, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                pass_fds=(req_r, resp_w), start_new_session=True)
        os.close(req_r)
        os.close(resp_w)
        self._start()

    def _start(self) -> None:
        """Wait for "ready" (Python, numpy, parasim, confinement: the grader's allowance), then for
        "loaded" (the file's top level: the student's code, under the per-item time limit)."""
        phase = "starting the sandbox"
        try:
            ready = self._receive(time.monotonic() + self.limits.import_timeout_s)
            if not ready.get("ok"):
                self.load_error = str(ready.get("error", "the sandbox did not start"))
                return
            self.confinement = {**self.confinement, **{k: ready.get(k) for k in ("landlock_abi", "seccomp")}}
            phase = "importing your file"
            hello = self._receive(time.monotonic() + self.limits.timeout_s)
            self.loaded, self.load_error = bool(hello.get("ok")), str(hello.get("error", ""))
        except SandboxTimeout:
            limit = self.limits.import_timeout_s if phase == "starting the sandbox" else self.limits.timeout_s
            self.load_error = f"{phase} took longer than {limit:g} s" + \
                              (" (an endless loop at the top level?)" if phase == "importing your file" else "")
            self.timed_out = True
        except SandboxCrash as e:
            self.load_error = f"your file ended the process while importing ({e})" if phase != "starting the sandbox" \
                else f"the sandbox did not start ({e})"

    timed_out = False

    # ---- talking to the submission --------------------------------------------------------------
    def _receive(self, deadline: float) -> dict:
        if self.proc is None:
            raise SandboxCrash("the process was already stopped")
        try:
            header = self._read(4, deadline)
            (n,) = struct.unpack(">I", header)
            if n > MAX_ANSWER:
                self.kill()
                raise SandboxCrash(f"a {n}-byte answer (more than {MAX_ANSWER // 2**20} MiB): return less")
            message = json.loads(self._read(n, deadline))
        except (EOFError, OSError, ValueError) as e:
            self.kill()
            raise SandboxCrash(self._exit_reason(e)) from None
        if not isinstance(message, dict):
            self.kill()
            raise SandboxCrash("an answer that is not a message")
        return message

    def _read(self, n: int, deadline: float) -> bytes:
        chunks = []
        while n > 0:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._resp], [], [], max(left, 0))
            if not ready:
                self.kill()
                raise SandboxTimeout(f"no answer within {self.limits.timeout_s:g} s (an endless loop?)")
            data = os.read(self._resp, min(n, 1 << 20))
            if not data:
                raise EOFError("closed")
            chunks.append(data)
            n -= len(data)
        return b"".join(chunks)

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
        try:  # the last bytes only: the log may be as large as the file-size limit
            fd = os.open(self.log, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    return ""
                os.lseek(fd, max(os.fstat(fd).st_size - 4 * n, 0), os.SEEK_SET)
                text = os.read(fd, 4 * n).decode("utf-8", "replace")[-n:]
            finally:
                os.close(fd)
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
        callbacks = 0
        while True:
            message = self._receive(deadline)
            if message.get("op") == "callback":  # the submission calls a function the check gave it
                callbacks += 1
                if callbacks > MAX_CALLBACKS:
                    self.kill()
                    raise SandboxCrash(f"more than {MAX_CALLBACKS} calls back into the check")
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
                    value = from_data(message.get("value"))
                except Exception as e:  # noqa: BLE001 -- a value the grader cannot rebuild
                    raise StudentError(f"your function returned something that is not plain data ({e})") from None
                if not finite(value):
                    raise StudentError("your function returned NaN or infinity, which is never a right answer")
                return value
            raise StudentError(str(message.get("error", "an error")), bool(message.get("not_implemented")))

    def get(self, name: str, deadline: float | None = None):
        """The submission's attribute `name` (a function comes back as a remote callable)."""
        deadline = deadline if deadline is not None else time.monotonic() + self.limits.timeout_s
        self._send({"op": "get", "name": name})
        message = self._receive(deadline)
        if not message.get("ok"):
            raise StudentError(str(message.get("error", "an error")))
        if message.get("callable"):
            return _Remote(self, name)
        value = from_data(message.get("value"))
        if not finite(value):
            raise StudentError(f"{name} is NaN or infinity, which is never a right answer")
        return value

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


SHARED_ROOT = contextvars.ContextVar("parasim_shared_root", default=None)


@contextlib.contextmanager
def shared_folder():
    """A temporary folder a check shares with the submission: the sandbox may read and write it
    (a place for files a check hands over or expects back). It sits in the scratch folder of the
    sandbox being graded (the only place Landlock lets it write). Removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="shared-", dir=SHARED_ROOT.get()) as tmp:
        yield tmp


class _Remote:
    """A function of the submission, called in its sandbox."""

    def __init__(self, box: Sandbox, name: str):
        self.box, self.name = box, name

    def __call__(self, *args, **kwargs):
        return self.box.call(self.name, args, kwargs, deadline=getattr(self.box, "deadline", None))
