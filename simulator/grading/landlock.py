"""Landlock (Linux >= 5.13, unprivileged): confine the sandboxed submission's files and network.

The runner calls `restrict(read, write)` in its own process, single-threaded, before the
submission's first line. From then on the process (and anything it could start) may
- read files and list folders only beneath the paths of `read` (the grader passes the Python
  installation, the system libraries and parasim's `simulator/` package: never the lessons'
  solutions, checkers or reference answers),
- read, write, create and remove only beneath `write` (its scratch folder),
- on ABI >= 4 (Linux 6.7), neither bind nor connect a TCP socket (the seccomp filter refuses
  every socket as well, so there is no network whatever the ABI),
- on ABI >= 6 (Linux 6.12), signal no process outside its own domain and connect to no abstract
  unix socket outside it.
Everything else on the file system is EACCES, including /proc/<grader>/mem and the class's files.
Rights are requested by ABI version: a kernel that does not know a right is not asked to handle
it (https://docs.kernel.org/userspace-api/landlock.html, "Backward and forward compatibility").
"""

from __future__ import annotations

import ctypes
import os
import struct

# syscall numbers: the same on x86_64 and aarch64 (and every architecture since 5.13)
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# access rights (include/uapi/linux/landlock.h), by the ABI that introduced them
_FS_V1 = {"execute": 1 << 0, "write_file": 1 << 1, "read_file": 1 << 2, "read_dir": 1 << 3,
          "remove_dir": 1 << 4, "remove_file": 1 << 5, "make_char": 1 << 6, "make_dir": 1 << 7,
          "make_reg": 1 << 8, "make_sock": 1 << 9, "make_fifo": 1 << 10, "make_block": 1 << 11,
          "make_sym": 1 << 12}
_FS_LATER = {2: 1 << 13, 3: 1 << 14, 5: 1 << 15}     # refer, truncate, ioctl_dev
_NET_TCP = 1 | 2                                     # bind_tcp, connect_tcp (ABI 4)
_SCOPE = 1 | 2                                       # abstract unix sockets, signals (ABI 6)
_READ = _FS_V1["read_file"] | _FS_V1["read_dir"]
_FILE_RIGHTS = _FS_V1["execute"] | _FS_V1["write_file"] | _FS_V1["read_file"] | (1 << 14) | (1 << 15)


class LandlockError(OSError):
    """The kernel refused a step of the confinement (the message names it)."""


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def abi_version() -> int:
    """The kernel's Landlock ABI version (0: no Landlock, or disabled at boot)."""
    if not hasattr(os, "uname") or os.uname().sysname != "Linux":
        return 0
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    v = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(v), 0)


def handled(abi: int) -> tuple[int, int, int]:
    """(file-system rights, network rights, scopes) this ABI can refuse."""
    fs = sum(_FS_V1.values()) + sum(bit for v, bit in _FS_LATER.items() if abi >= v)
    return fs, (_NET_TCP if abi >= 4 else 0), (_SCOPE if abi >= 6 else 0)


def restrict(read: list[str], write: list[str]) -> int:
    """Confine this thread (and what it starts) to reading `read` and writing `write`; returns the
    ABI used. Raises LandlockError when the kernel has no Landlock or refuses a step."""
    abi = abi_version()
    if abi < 1:
        raise LandlockError("this kernel has no Landlock (Linux >= 5.13 with landlock in its LSM list)")
    fs, net, scope = handled(abi)
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    attr = ctypes.create_string_buffer(struct.pack("QQQ", fs, net, scope)[:size], size)
    ruleset = libc.syscall(_CREATE_RULESET, attr, ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise LandlockError(f"landlock_create_ruleset failed: {os.strerror(ctypes.get_errno())}")
    try:
        for paths, rights in ((read, _READ), (write, fs)):
            for path in paths:
                _allow(libc, ruleset, path, rights)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise LandlockError(f"prctl(NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}")
        if libc.syscall(_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) != 0:
            raise LandlockError(f"landlock_restrict_self failed: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(ruleset)
    return abi


def _allow(libc, ruleset: int, path: str, rights: int) -> None:
    """One path-beneath rule; a missing path is skipped (a system without /lib64, say)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        if not os.path.isdir(path):
            rights &= _FILE_RIGHTS      # a file takes only the rights that apply to files
        beneath = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)   # packed struct
        if libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, beneath, ctypes.c_uint32(0)) != 0:
            raise LandlockError(f"landlock_add_rule({path}) failed: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)
