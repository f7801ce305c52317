"""The metadata system calls jstall traces, and their numbers per architecture.

The probes read `__syscall_nr` from the syscalls:sys_enter_* tracepoint and the
recorder names it with these tables (the kernel's syscall ABI, stable per arch).
"""

import os

from jstall.errors import JstallError

#: Traced calls, grouped as the analyzer reports them.
TRACED = (
    "setxattr", "lsetxattr", "fsetxattr", "setxattrat",
    "removexattr", "lremovexattr", "fremovexattr", "removexattrat",
    "unlink", "unlinkat", "rmdir", "mkdir", "mkdirat",
    "creat", "open", "openat", "openat2",
    "rename", "renameat", "renameat2",
    "fsync", "fdatasync",
)

_NUMBERS = {
    "x86_64": {
        "open": 2, "fsync": 74, "fdatasync": 75, "rename": 82, "mkdir": 83, "rmdir": 84,
        "creat": 85, "unlink": 87, "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190,
        "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199, "openat": 257,
        "mkdirat": 258, "unlinkat": 263, "renameat": 264, "renameat2": 316, "openat2": 437,
        "setxattrat": 463, "removexattrat": 466,
    },
    "aarch64": {
        "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "removexattr": 14, "lremovexattr": 15,
        "fremovexattr": 16, "mkdirat": 34, "unlinkat": 35, "openat": 56, "fsync": 82,
        "fdatasync": 83, "renameat2": 276, "openat2": 437, "setxattrat": 463, "removexattrat": 466,
    },
}


def numbers(machine=None):
    """{name: number} of the traced calls that exist on this architecture."""
    machine = machine or os.uname().machine
    table = _NUMBERS.get(machine)
    if table is None:
        raise JstallError(f"architecture {machine} is not supported (x86_64, aarch64)")
    return {name: table[name] for name in TRACED if name in table}


# ---- how the probes find a call's filesystem and file name --------------------------

#: Calls whose first argument is a file descriptor: their filesystem is the open file's
#: superblock (task->files->fdt->fd[fd]->f_inode->i_sb), whether or not they journal.
FD_ARG0 = ("fsync", "fdatasync", "fsetxattr", "fremovexattr")
#: Calls that return a new descriptor: their filesystem is the returned file's.
RETURNS_FD = ("creat", "open", "openat", "openat2")
#: Path-based calls with the path in their second argument (after a directory fd);
#: the other path-based calls have it in their first.
PATH_ARG1 = ("unlinkat", "mkdirat", "openat", "openat2", "renameat", "renameat2", "setxattrat", "removexattrat")

#: Bits of the probes' per-number flags (recorder.bpf.c NR_*).
NR_TRACED, NR_FD_ARG0, NR_RETURNS_FD, NR_PATH_ARG0, NR_PATH_ARG1 = 1, 2, 4, 8, 16


def probe_flags(name):
    """The NR_* bits the probes use for a traced call: how to find its filesystem and file."""
    flags = NR_TRACED
    if name in FD_ARG0:
        flags |= NR_FD_ARG0
    elif name in PATH_ARG1:
        flags |= NR_PATH_ARG1
    else:
        flags |= NR_PATH_ARG0
    if name in RETURNS_FD:
        flags |= NR_RETURNS_FD
    return flags
