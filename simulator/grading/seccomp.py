"""A seccomp filter for the sandboxed submission (Linux x86_64 and aarch64).

Installed by the runner in its own process before it imports the submission, after which the
submission cannot undo it (filters are inherited and permanent; `no_new_privs` is set first):
- no new processes: fork, vfork, clone without CLONE_THREAD fail with EPERM (threads still work),
  clone3 fails with ENOSYS (libc then falls back to clone);
- no new programs: execve and execveat fail with EPERM (so `os.system` and `subprocess` fail);
- no signals to another process: kill and tgkill to a pid other than its own fail with EPERM;
- no reading or writing another process's memory: ptrace, process_vm_readv/writev fail with EPERM.
Everything else (files, memory, time) is limited elsewhere (rlimits, the scratch folder, the
grader's timer). On another architecture `install` returns False and grading goes on without it.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_EPERM, _ENOSYS = 1, 38
_CLONE_THREAD = 0x00010000
# audit arch, then syscall numbers: fork, vfork, clone, clone3, execve, execveat, kill, tgkill,
# ptrace, process_vm_readv, process_vm_writev (-1: absent on that architecture)
_ARCH = {
    "x86_64": (0xC000003E, {"fork": 57, "vfork": 58, "clone": 56, "clone3": 435, "execve": 59, "execveat": 322,
                            "kill": 62, "tgkill": 234, "ptrace": 101, "process_vm_readv": 310,
                            "process_vm_writev": 311}),
    "aarch64": (0xC00000B7, {"fork": -1, "vfork": -1, "clone": 220, "clone3": 435, "execve": 221, "execveat": 281,
                             "kill": 129, "tgkill": 131, "ptrace": 117, "process_vm_readv": 270,
                             "process_vm_writev": 271}),
}
# BPF opcodes
_LD_W_ABS, _JEQ_K, _JSET_K, _RET_K = 0x20, 0x15, 0x45, 0x06


def _program(arch: int, nr: dict, pid: int, x32: bool) -> list[tuple[int, int, int, int]]:
    """The BPF program: [arch check, load nr, (x32 check), one jeq per rule, ja allow, tails]."""
    deny = ["fork", "vfork", "execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev"]
    checks = [(_JEQ_K, nr[n], "eperm") for n in deny if nr[n] >= 0]
    checks += [(_JEQ_K, nr["clone3"], "enosys"), (_JEQ_K, nr["clone"], "clone"),
               (_JEQ_K, nr["kill"], "signal"), (_JEQ_K, nr["tgkill"], "signal")]
    if x32:  # x32-ABI numbers (bit 30) would bypass the rules: refuse them all
        checks.insert(0, (_JSET_K, 0x40000000, "eperm"))
    tails = {
        "allow": [(_RET_K, 0, 0, _ALLOW)],
        "eperm": [(_RET_K, 0, 0, _ERRNO | _EPERM)],
        "enosys": [(_RET_K, 0, 0, _ERRNO | _ENOSYS)],
        "clone": [(_LD_W_ABS, 0, 0, 16), (_JSET_K, 0, 1, _CLONE_THREAD), (_RET_K, 0, 0, _ALLOW),
                  (_RET_K, 0, 0, _ERRNO | _EPERM)],
        "signal": [(_LD_W_ABS, 0, 0, 16), (_JEQ_K, 0, 1, pid), (_RET_K, 0, 0, _ALLOW),
                   (_RET_K, 0, 0, _ERRNO | _EPERM)],
    }
    start, pos = {}, 3 + len(checks) + 1  # arch load, arch jeq, nr load, checks, ja
    for name, code in tails.items():
        start[name] = pos
        pos += len(code)
    out = [(_LD_W_ABS, 0, 0, 4), (_JEQ_K, 0, start["eperm"] - 2, arch), (_LD_W_ABS, 0, 0, 0)]
    for op, k, target in checks:
        out.append((op, start[target] - len(out) - 1, 0, k))
    out.append((0x05, 0, 0, start["allow"] - len(out) - 1))  # ja allow
    for code in tails.values():
        out += code
    return out


def install() -> bool:
    """Install the filter in this process. True when installed."""
    machine = platform.machine()
    if machine not in _ARCH or not hasattr(os, "getpid"):
        return False
    arch, nr = _ARCH[machine]
    code = _program(arch, nr, os.getpid(), x32=machine == "x86_64")
    raw = b"".join(struct.pack("HBBI", op, jt, jf, k) for op, jt, jf, k in code)
    buf = ctypes.create_string_buffer(raw)

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(code), ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    return libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) == 0
