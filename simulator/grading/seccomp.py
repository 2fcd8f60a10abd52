"""An allow-list seccomp filter for the sandboxed submission (Linux x86_64 and aarch64).

Installed by the runner in its own process before it imports the submission, after which the
submission cannot undo it (filters are inherited and permanent; `no_new_privs` is set first; TSYNC
puts every thread of the process under it). A system call runs only if it is on `ALLOWED` below:
files, memory, time, threads and this process's own signals. Every other call fails with EPERM,
among them everything that reaches another process or the outside:
- no new processes or programs: fork, vfork, execve, execveat; clone only with CLONE_THREAD (a
  thread); clone3 fails with ENOSYS (libc then falls back to clone);
- signals only to itself: kill, tgkill, rt_sigqueueinfo and rt_tgsigqueueinfo only with its own
  pid as the target (so not kill(0, ...) or kill(-pgid, ...)); tkill, pidfd_open and
  pidfd_send_signal never;
- limits and affinity only of itself: prlimit64 and sched_getaffinity only for pid 0 or its own;
  setpriority, sched_setaffinity, sched_setscheduler, ioprio_set never;
- no other process's memory: ptrace, process_vm_readv, process_vm_writev, kcmp;
- no network and no sockets at all: socket, socketpair, connect, bind (whatever the kernel's
  Landlock can express);
- no device control beyond reading a terminal's mode: ioctl only with TCGETS, TIOCGWINSZ,
  FIONREAD, FIONBIO, FIOCLEX, FIONCLEX (never TIOCSTI, which types into a terminal);
- no mknod (FIFOs), mount, namespaces, io_uring, bpf, perf, keyrings, prctl, seccomp, setuid...
Files are confined by Landlock (`landlock.py`), memory and time by rlimits and the grader's timer.
On another architecture `install` returns False (the grader then refuses unconfined grading unless
told otherwise: `sandbox.confinement`).
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

_PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC = 1, 1
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_EPERM, _ENOSYS = 1, 38
_CLONE_THREAD = 0x00010000
# the ioctl requests a Python program needs (isatty, terminal size, non-blocking, close-on-exec)
IOCTLS = (0x5401, 0x5413, 0x541B, 0x5421, 0x5451, 0x5450)
_SELF = ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")          # arg0 == own pid
_SELF_OR_ZERO = ("prlimit64", "sched_getaffinity")                          # arg0 in (0, own pid)
_SPECIAL = ("clone", "clone3", "ioctl") + _SELF + _SELF_OR_ZERO

# Audit architecture, seccomp(2)'s number, then every allowed call by name (numbers from the kernel's
# uapi headers: asm/unistd_64.h for x86_64, asm-generic/unistd.h for aarch64).
_ARCH = {
    "x86_64": (0xC000003E, 317, """
    read=0 write=1 readv=19 writev=20 pread64=17 pwrite64=18 preadv=295 pwritev=296 preadv2=327 pwritev2=328
    lseek=8 close=3 close_range=436 open=2 openat=257 openat2=437 creat=85 stat=4 fstat=5 lstat=6
    newfstatat=262 statx=332 fstatfs=138 statfs=137 access=21 faccessat=269 faccessat2=439 readlink=89
    readlinkat=267 getdents=78 getdents64=217 getcwd=79 chdir=80 fchdir=81 mkdir=83 mkdirat=258 rmdir=84
    unlink=87 unlinkat=263 rename=82 renameat=264 renameat2=316 link=86 linkat=265 symlink=88 symlinkat=266
    chmod=90 fchmod=91 fchmodat=268 umask=95 truncate=76 ftruncate=77 fsync=74 fdatasync=75 fallocate=285
    fadvise64=221 utimensat=280 flock=73 fcntl=72 dup=32 dup2=33 dup3=292 pipe=22 pipe2=293 sendfile=40
    copy_file_range=326 getxattr=191 lgetxattr=192 fgetxattr=193 listxattr=194 llistxattr=195 flistxattr=196
    mmap=9 munmap=11 mprotect=10 mremap=25 brk=12 madvise=28 msync=26 mincore=27 membarrier=324
    rt_sigaction=13 rt_sigprocmask=14 rt_sigreturn=15 sigaltstack=131 rt_sigpending=127 rt_sigtimedwait=128
    rt_sigsuspend=130 pause=34 clock_gettime=228 clock_getres=229 clock_nanosleep=230 nanosleep=35
    gettimeofday=96 time=201 getitimer=36 setitimer=38 alarm=37 times=100 getpid=39 gettid=186 getppid=110
    getuid=102 geteuid=107 getgid=104 getegid=108 getgroups=115 getresuid=118 getresgid=120 getpgrp=111
    getpgid=121 getsid=124 getrusage=98 getrlimit=97 uname=63 sysinfo=99 getcpu=309 getrandom=318
    sched_yield=24 futex=202 set_robust_list=273 get_robust_list=274 set_tid_address=218 rseq=334 exit=60
    exit_group=231 arch_prctl=158 restart_syscall=219 poll=7 ppoll=271 select=23 pselect6=270 epoll_create=213
    epoll_create1=291 epoll_ctl=233 epoll_wait=232 epoll_pwait=281 epoll_pwait2=441 eventfd=284 eventfd2=290
    timerfd_create=283 timerfd_settime=286 timerfd_gettime=287 memfd_create=319 clone=56 clone3=435 ioctl=16
    kill=62 tgkill=234 rt_sigqueueinfo=129 rt_tgsigqueueinfo=297 prlimit64=302 sched_getaffinity=204
    fchmodat2=452"""),
    "aarch64": (0xC00000B7, 277, """
    read=63 write=64 readv=65 writev=66 pread64=67 pwrite64=68 preadv=69 pwritev=70 preadv2=286 pwritev2=287
    lseek=62 close=57 close_range=436 openat=56 openat2=437 fstat=80 newfstatat=79 statx=291 fstatfs=44
    statfs=43 faccessat=48 faccessat2=439 readlinkat=78 getdents64=61 getcwd=17 chdir=49 fchdir=50 mkdirat=34
    unlinkat=35 renameat=38 renameat2=276 linkat=37 symlinkat=36 fchmod=52 fchmodat=53 umask=166 truncate=45
    ftruncate=46 fsync=82 fdatasync=83 fallocate=47 fadvise64=223 utimensat=88 flock=32 fcntl=25 dup=23
    dup3=24 pipe2=59 sendfile=71 copy_file_range=285 getxattr=8 lgetxattr=9 fgetxattr=10 listxattr=11
    llistxattr=12 flistxattr=13 mmap=222 munmap=215 mprotect=226 mremap=216 brk=214 madvise=233 msync=227
    mincore=232 membarrier=283 rt_sigaction=134 rt_sigprocmask=135 rt_sigreturn=139 sigaltstack=132
    rt_sigpending=136 rt_sigtimedwait=137 rt_sigsuspend=133 clock_gettime=113 clock_getres=114
    clock_nanosleep=115 nanosleep=101 gettimeofday=169 getitimer=102 setitimer=103 times=153 getpid=172
    gettid=178 getppid=173 getuid=174 geteuid=175 getgid=176 getegid=177 getgroups=158 getresuid=148
    getresgid=150 getpgid=155 getsid=156 getrusage=165 getrlimit=163 uname=160 sysinfo=179 getcpu=168
    getrandom=278 sched_yield=124 futex=98 set_robust_list=99 get_robust_list=100 set_tid_address=96 rseq=293
    exit=93 exit_group=94 restart_syscall=128 ppoll=73 pselect6=72 epoll_create1=20 epoll_ctl=21
    epoll_pwait=22 epoll_pwait2=441 eventfd2=19 timerfd_create=85 timerfd_settime=86 timerfd_gettime=87
    memfd_create=279 clone=220 clone3=435 ioctl=29 kill=129 tgkill=131 rt_sigqueueinfo=138
    rt_tgsigqueueinfo=240 prlimit64=261 sched_getaffinity=123 fchmodat2=452"""),
}
# BPF opcodes (linux/filter.h): load word at an absolute offset of seccomp_data, jumps, return
_LD_W_ABS, _JEQ_K, _JSET_K, _RET_K = 0x20, 0x15, 0x45, 0x06
_NR, _ARCH_OFF, _ARG0, _ARG1 = 0, 4, 16, 24     # offsets in struct seccomp_data (low word of each arg)


def syscalls(machine: str | None = None) -> dict[str, int]:
    """The allow-list of `machine` (default: this one): name -> number."""
    _, _, table = _ARCH[machine or platform.machine()]
    return {name: int(nr) for name, nr in (kv.split("=") for kv in table.split())}


def _ret(action: int) -> tuple:
    return (_RET_K, 0, 0, action)


def _one_of(offset: int, values, allow=_ALLOW, deny=_ERRNO | _EPERM) -> list[tuple]:
    """Allow when the word at `offset` is one of `values`, else deny (jumps stay within the block)."""
    n = len(values)
    code = [(_LD_W_ABS, 0, 0, offset)]
    code += [(_JEQ_K, n - j, 0, v) for j, v in enumerate(values)]   # jt lands on the allow at the end
    return code + [_ret(deny), _ret(allow)]


def _rule(name: str, pid: int) -> list[tuple]:
    """The instructions after `jeq nr` for one allowed call (each block ends in a return)."""
    if name == "clone":
        return [(_LD_W_ABS, 0, 0, _ARG0), (_JSET_K, 0, 1, _CLONE_THREAD), _ret(_ALLOW), _ret(_ERRNO | _EPERM)]
    if name == "clone3":
        return [_ret(_ERRNO | _ENOSYS)]
    if name == "ioctl":
        return _one_of(_ARG1, IOCTLS)
    if name in _SELF:
        return _one_of(_ARG0, (pid,))
    if name in _SELF_OR_ZERO:
        return _one_of(_ARG0, (pid, 0))
    return [_ret(_ALLOW)]


def program(machine: str, pid: int) -> list[tuple[int, int, int, int]]:
    """The BPF program: check the architecture, refuse x32 numbers, then for each allowed call
    `jeq nr` followed by its block (jumps are local, so the program can be as long as it needs);
    anything that falls through is refused."""
    arch = _ARCH[machine][0]
    out = [(_LD_W_ABS, 0, 0, _ARCH_OFF), (_JEQ_K, 1, 0, arch), _ret(_ERRNO | _EPERM), (_LD_W_ABS, 0, 0, _NR)]
    if machine == "x86_64":  # x32-ABI numbers (bit 30) would name other calls: refuse them all
        out += [(_JSET_K, 0, 1, 0x40000000), _ret(_ERRNO | _EPERM)]
    for name, nr in syscalls(machine).items():
        block = _rule(name, pid)
        out.append((_JEQ_K, 0, len(block), nr))
        out += block          # the jump past it leaves the number in the accumulator for the next jeq
    out.append(_ret(_ERRNO | _EPERM))
    return out



def install() -> bool:
    """Install the filter on every thread of this process. True when installed."""
    machine = platform.machine()
    if machine not in _ARCH or not hasattr(os, "getpid"):
        return False
    code = program(machine, os.getpid())
    raw = b"".join(struct.pack("HBBI", op, jt, jf, k) for op, jt, jf, k in code)
    buf = ctypes.create_string_buffer(raw)

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(code), ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    nr = _ARCH[machine][1]
    return libc.syscall(nr, _SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC, ctypes.byref(fprog)) == 0
