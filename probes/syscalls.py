"""The system calls jstall traces, in named groups, and their numbers per architecture.

The recorder attaches to each traced call's syscalls:sys_enter_<call>/sys_exit_<call>
tracepoints (or, with raw_syscalls, looks each call's number up in a map of traced
numbers filled from :func:`numbers`) and names calls with these tables (the kernel's
syscall ABI, stable per arch: arch/x86/entry/syscalls/syscall_64.tbl and
include/uapi/asm-generic/unistd.h).

``jstall record --calls SPEC`` chooses the groups: a comma-separated list of group names
(:data:`GROUPS`), single call names, or ``all``; the default is :data:`DEFAULT_GROUPS`
(metadata and the fsync family).  The write family matters for dirty-page throttling
(``balance_dirty_pages`` stalls a buffered write(), not a metadata call).
"""

import os
import re

from jstall.errors import JstallError

#: group -> calls, in report order.
GROUPS = {
    "metadata": ("setxattr", "lsetxattr", "fsetxattr", "setxattrat",
                 "removexattr", "lremovexattr", "fremovexattr", "removexattrat",
                 "unlink", "unlinkat", "rmdir", "mkdir", "mkdirat",
                 "creat", "open", "openat", "openat2", "mknod", "mknodat",
                 "rename", "renameat", "renameat2"),
    "fsync": ("fsync", "fdatasync"),
    "sync": ("sync_file_range", "syncfs", "msync"),
    "write": ("write", "pwrite64", "writev", "pwritev", "pwritev2"),
    "truncate": ("truncate", "ftruncate", "fallocate"),
    "time": ("utimensat", "futimesat", "utime", "utimes"),
    "attr": ("chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat"),
    "link": ("link", "linkat", "symlink", "symlinkat"),
    # copies and clones (copy_file_range; FICLONE and FS_IOC_SETFLAGS are ioctls) and the
    # last close of an unlinked file (the inode's eviction frees its blocks in a handle)
    "copy": ("copy_file_range",),
    "ioctl": ("ioctl",),
    "close": ("close",),
}
#: Traced when --calls is not given.
DEFAULT_GROUPS = ("metadata", "fsync")
#: The default set of calls (kept under its earlier name).
TRACED = tuple(c for g in DEFAULT_GROUPS for c in GROUPS[g])

_NUMBERS = {
    "x86_64": {
        "write": 1, "open": 2, "close": 3, "ioctl": 16, "mknod": 133, "mknodat": 259, "copy_file_range": 326,
        "pwrite64": 18, "writev": 20, "msync": 26, "fsync": 74, "fdatasync": 75,
        "truncate": 76, "ftruncate": 77, "rename": 82, "mkdir": 83, "rmdir": 84, "creat": 85, "link": 86,
        "unlink": 87, "symlink": 88, "chmod": 90, "fchmod": 91, "chown": 92, "fchown": 93, "lchown": 94,
        "utime": 132, "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "removexattr": 197,
        "lremovexattr": 198, "fremovexattr": 199, "utimes": 235, "openat": 257, "mkdirat": 258,
        "fchownat": 260, "futimesat": 261, "unlinkat": 263, "renameat": 264, "linkat": 265, "symlinkat": 266,
        "fchmodat": 268, "sync_file_range": 277, "utimensat": 280, "fallocate": 285, "pwritev": 296,
        "syncfs": 306, "renameat2": 316, "pwritev2": 328, "openat2": 437, "fchmodat2": 452, "setxattrat": 463,
        "removexattrat": 466,
    },
    "aarch64": {
        "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "removexattr": 14, "lremovexattr": 15,
        "fremovexattr": 16, "ioctl": 29, "mknodat": 33, "close": 57, "copy_file_range": 285, "mkdirat": 34,
        "unlinkat": 35, "symlinkat": 36, "linkat": 37, "truncate": 45,
        "ftruncate": 46, "fallocate": 47, "fchmod": 52, "fchmodat": 53, "fchownat": 54, "fchown": 55,
        "openat": 56, "write": 64, "writev": 66, "pwrite64": 68, "pwritev": 70, "fsync": 82, "fdatasync": 83,
        "sync_file_range": 84, "utimensat": 88, "msync": 227, "syncfs": 267, "renameat2": 276,
        "pwritev2": 287, "openat2": 437, "fchmodat2": 452, "setxattrat": 463, "removexattrat": 466,
    },
}


#: The kernel's whole syscall table (uapi asm/unistd*.h), to name the syscall a handle wait's
#: task was in even when it is not one jstall traces.
UNISTD = {"x86_64": ("/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h"),
          "aarch64": ("/usr/include/asm-generic/unistd.h",)}
_KERNEL_NAMES = {}


def kernel_name(nr, machine=None):
    """The name of syscall number nr on this architecture: from the kernel's uapi header
    where installed (linux-libc-dev), else jstall's own table, else 'syscall NR'."""
    machine = machine or os.uname().machine
    names = _KERNEL_NAMES.get(machine)
    if names is None:
        names = {v: k for k, v in _NUMBERS.get(machine, {}).items()}
        for path in UNISTD.get(machine, ()):
            try:
                with open(path) as f:
                    for m in re.finditer(r"^#define __NR(?:3264)?_(\w+)\s+(\d+)\s*$", f.read(), re.M):
                        names.setdefault(int(m.group(2)), m.group(1))
                break
            except OSError:
                continue
        _KERNEL_NAMES[machine] = names
    return names.get(nr, f"syscall {nr}")


def parse_calls(spec):
    """The calls a ``--calls`` SPEC names, in group order: ``None`` or "" -> the default
    groups; "all" -> every group; else comma-separated group or call names.  Raises
    JstallError naming the choices for an unknown name."""
    if not spec:
        names = list(DEFAULT_GROUPS)
    else:
        names = [n.strip() for n in spec.split(",") if n.strip()]
    known = {c for calls in GROUPS.values() for c in calls}
    out = []
    for n in names:
        if n == "all":
            out.extend(c for calls in GROUPS.values() for c in calls)
        elif n in GROUPS:
            out.extend(GROUPS[n])
        elif n in known:
            out.append(n)
        else:
            raise JstallError(f"--calls: unknown group or call {n!r}; groups: {', '.join(GROUPS)}, all "
                              "(or single calls such as fsync, write)")
    return tuple(dict.fromkeys(out))


def numbers(machine=None, calls=None):
    """{name: number} of ``calls`` (default: the default groups) that exist on this
    architecture."""
    machine = machine or os.uname().machine
    table = _NUMBERS.get(machine)
    if table is None:
        raise JstallError(f"architecture {machine} is not supported (x86_64, aarch64)")
    return {name: table[name] for name in (calls or TRACED) if name in table}


# ---- how the probes find a call's filesystem and file name --------------------------

#: Calls whose first argument is a file descriptor: their filesystem is the open file's
#: superblock (task->files->fdt->fd[fd]->f_inode->i_sb), whether or not they journal.
FD_ARG0 = ("fsync", "fdatasync", "fsetxattr", "fremovexattr", "sync_file_range", "syncfs",
           "write", "pwrite64", "writev", "pwritev", "pwritev2", "ftruncate", "fallocate",
           "fchmod", "fchown", "copy_file_range", "ioctl", "close")
#: Calls that return a new descriptor: their filesystem is the returned file's.
RETURNS_FD = ("creat", "open", "openat", "openat2")
#: Path-based calls with the path in their second argument (after a directory fd, or a
#: symlink's target); the other path-based calls have it in their first.
PATH_ARG1 = ("unlinkat", "mkdirat", "mknodat", "openat", "openat2", "renameat", "renameat2", "setxattrat",
             "removexattrat", "futimesat", "utimensat", "fchmodat", "fchmodat2", "fchownat",
             "symlink")
#: Calls with no path or descriptor argument to name a file by (msync takes an address;
#: linkat's and symlinkat's new name is a later argument): their filesystem comes from the
#: journal handles they start.
NO_FILE_ARG = ("msync", "linkat", "symlinkat")

#: Calls that set an extended attribute by (file, name, value, size): the probes note each
#: file's attributes (xattrs.bpf.h). setxattrat passes the size in a struct: not noted.
XATTR_SET = ("setxattr", "lsetxattr", "fsetxattr")

#: Bits of the probes' per-number flags (common.bpf.h NR_*).
NR_TRACED, NR_FD_ARG0, NR_RETURNS_FD, NR_PATH_ARG0, NR_PATH_ARG1, NR_XATTR_SET = 1, 2, 4, 8, 16, 32


def probe_flags(name):
    """The NR_* bits the probes use for a traced call: how to find its filesystem and file."""
    flags = NR_TRACED
    if name in FD_ARG0:
        flags |= NR_FD_ARG0
    elif name in PATH_ARG1:
        flags |= NR_PATH_ARG1
    elif name not in NO_FILE_ARG:
        flags |= NR_PATH_ARG0
    if name in RETURNS_FD:
        flags |= NR_RETURNS_FD
    if name in XATTR_SET:
        flags |= NR_XATTR_SET
    return flags
