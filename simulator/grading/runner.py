"""The sandboxed side of grading: import one submission and call its functions on request.

Started by `sandbox.Sandbox` as `python -I -S -c BOOT CONFIG` (no site, no environment: nothing
planted runs) inside a scratch folder that holds only that submission. It confines itself
(`confine`: Landlock, then seccomp), says "ready", imports the submission (under the grader's time
limit), says "loaded", then reads call requests from REQ_FD (JSON data
written by the grader, `codec`: the arguments a check passes; a callable of the check travels as
{"cb": index} and calling it asks the grader to run it), calls the submission's function and
writes the result to RESP_FD as JSON data (`codec.to_data`), or the error it raised as one line.
It never sees the checker, the reference answers or a verdict: the grader compares.
The submission's own prints go to stderr (a file the grader reads only to show its tail).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import struct
import sys
import traceback
from pathlib import Path

MAX_FRAME = 64 * 2**20


# ---- framing: 4-byte big-endian length, then the payload ------------------------------------
def write_frame(fd: int, payload: bytes) -> None:
    data = struct.pack(">I", len(payload)) + payload
    while data:
        data = data[os.write(fd, data):]


def read_exact(fd: int, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the pipe")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> bytes:
    (n,) = struct.unpack(">I", read_exact(fd, 4))
    if n > MAX_FRAME:
        raise EOFError(f"a message of {n} bytes (more than {MAX_FRAME})")
    return read_exact(fd, n)


def error_text(e: BaseException, student_file: Path) -> str:
    """One line: the error, and the student's line that raised it."""
    if isinstance(e, NotImplementedError):
        return f"not implemented yet ({e})" if str(e) else "not implemented yet"
    where = ""
    for frame in reversed(traceback.extract_tb(e.__traceback__)):
        try:
            same = Path(frame.filename).resolve() == student_file
        except OSError:
            same = False
        if same:
            where = f" (your line {frame.lineno}: {(frame.line or '').strip()})"
            break
    message = " ".join(str(e).split())[:300]
    return f"{type(e).__name__}: {message}{where}"


def load_module(path: Path, name: str):
    """Import a Python file as module `name` (its `if __name__ == "__main__":` block does not run)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


def limit(memory_mb: int, file_mb: int, grader_pid: int) -> None:
    """This process's limits, set before the submission's first line (here, after exec, rather
    than in a preexec_fn, which is unsafe when the grader runs threads): address space, file size,
    no core files, and death with the grader (PR_SET_PDEATHSIG)."""
    import ctypes
    import resource
    import signal

    for what, mb in ((resource.RLIMIT_AS, memory_mb), (resource.RLIMIT_FSIZE, file_mb)):
        resource.setrlimit(what, (mb * 2**20, mb * 2**20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != grader_pid:  # the grader died before the line above (while Python started)
        os._exit(1)


def confine(config: dict) -> dict:
    """Landlock, then the seccomp filter, on this (single-threaded) process; what was applied.
    Raises RuntimeError when confinement is required and a step fails (the grader reports it)."""
    import simulator.grading.landlock as landlock  # by name: this file runs under BOOT
    import simulator.grading.seccomp as seccomp

    required = bool(config.get("require"))
    tasks = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 1
    if tasks > 1 and required:  # Landlock binds only the calling thread
        raise RuntimeError(f"the sandbox has {tasks} threads before confinement (expected 1)")
    abi = 0
    try:
        abi = landlock.restrict(config["read"], config["write"])
    except OSError as e:
        if required:
            raise RuntimeError(f"Landlock: {e}") from None
    filtered = seccomp.install()  # before the submission's first line: no processes, programs, signals
    if required and not filtered:
        raise RuntimeError("the seccomp filter could not be installed")
    return {"landlock_abi": abi, "seccomp": filtered}


def _withheld_stub(*args, **kwargs):
    raise NotImplementedError("this item asks you to write it yourself: parasim's own function for it is "
                              "withheld while your function runs")


@contextlib.contextmanager
def withheld(paths):
    """While inside, each parasim function of `paths` ("module:qualname") raises: its code object is
    swapped, so every reference to it (an imported name, a registry entry) is covered."""
    swapped = []
    try:
        for path in paths:
            module, _, qualname = str(path).partition(":")
            if not module.startswith("simulator"):
                continue
            obj = importlib.import_module(module)
            for part in qualname.split("."):
                obj = getattr(obj, part)
            fn = getattr(obj, "__func__", obj)
            if getattr(fn, "__code__", None) is not None and not fn.__code__.co_freevars:
                swapped.append((fn, fn.__code__))
                fn.__code__ = _withheld_stub.__code__
        yield
    finally:
        for fn, code in swapped:
            fn.__code__ = code


def plain_figures(value):
    """A matplotlib Figure a submission returned (alone or in a tuple or list) as its data
    (`simulator.viz.figure_data`): what a plot item grades is the plotted numbers, not pixels."""
    if isinstance(value, (tuple, list)):
        return type(value)(plain_figures(v) for v in value)
    if type(value).__module__ == "matplotlib.figure" and type(value).__name__ == "Figure":
        from simulator.viz.figure_data import figure_data

        return figure_data(value, collections=True)
    return value


def main(config: dict) -> int:
    """Started by `sandbox.BOOT` with the grader's JSON configuration (fds, limits, paths)."""
    req, resp = int(config["req"]), int(config["resp"])
    limit(int(config["memory_mb"]), int(config["file_mb"]), int(config["grader_pid"]))

    def send(message: dict) -> None:
        write_frame(resp, json.dumps(message).encode())

    try:
        state = confine(config)
    except RuntimeError as e:
        send({"op": "ready", "ok": False, "error": f"the sandbox could not be confined: {e}"})
        return 1
    from simulator.grading.codec import classes, from_data, to_data  # by name: this file runs under BOOT

    os.dup2(2, 1)  # the submission's prints go to the log, never onto the answer pipe
    send({"op": "ready", "ok": True, **state})

    def decode(data):
        with classes():     # the grader's own values: parasim objects rebuilt here, in the sandbox
            return from_data(data)

    def callback(index):
        def call(*args, **kwargs):
            send({"op": "callback", "index": index, "args": to_data(list(args)), "kwargs": to_data(kwargs)})
            reply = json.loads(read_frame(req))
            if reply.get("error"):
                raise RuntimeError(reply["error"])
            return decode(reply["value"])
        return call

    file = Path(config["file"]).resolve() if config.get("file") else None
    if file is None:  # a probe sandbox: parasim's own functions on data, no submission
        from simulator.grading.probes import PROBES

        student = type("Probes", (), {k: staticmethod(v) for k, v in PROBES.items()})
    else:
        sys.path.append(str(file.parent))  # its own modules (a folder submission), after everything else
        try:
            student = load_module(file, "submission")
        except BaseException as e:  # noqa: BLE001 -- the submission may raise anything at import
            send({"op": "loaded", "ok": False, "error": error_text(e, file)})
            return 0
    send({"op": "loaded", "ok": True})
    while True:
        try:
            request = json.loads(read_frame(req))  # JSON data from the grader: nothing here runs code
        except EOFError:
            return 0
        try:
            value = getattr(student, request["name"])
            if request["op"] == "call":
                args = [callback(a["cb"]) if "cb" in a else decode(a["v"]) for a in request["args"]]
                kwargs = decode(request["kwargs"])
                with withheld(config.get("withhold", {}).get(request["name"], ())):
                    value = value(*args, **kwargs)
            elif callable(value):
                send({"op": "result", "ok": True, "callable": True})
                continue
            send({"op": "result", "ok": True, "value": to_data(plain_figures(value))})
        except BaseException as e:  # noqa: BLE001 -- the submission's error is data for the grader
            send({"op": "result", "ok": False, "error": error_text(e, file or Path("<probe>")),
                  "not_implemented": isinstance(e, NotImplementedError)})
