"""Loop devices, block-device statistics and unmounting: the loop devices attached and their
backing files, /sys/block readings, detaching and unmounting (retried while busy), and running
the system tools that do it. The mount table itself is jstall.system's."""

import os
import subprocess
import time

from jstall import system
from jstall.devstats import BLOCK_STAT_FIELDS, read_block_stat  # noqa: F401 (scratch re-exports them)
from jstall.errors import JstallError

#: the refusal every lab entry point gives without root
LAB_NEEDS_ROOT = "the lab makes loop devices and mounts: run it as root (sudo)"


def run_tool(cmd, what=None):
    """Run a system tool; return its stdout, or raise JstallError with its last message line."""
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        msg = (res.stderr.strip() or res.stdout.strip()).splitlines()
        raise JstallError(f"{what or cmd[0]} failed: {msg[-1] if msg else 'exit status %d' % res.returncode}")
    return res.stdout


def syncfs(path):
    """syncfs(2) on the filesystem holding path (Python's os has no syncfs)."""
    import ctypes

    fd = os.open(path, os.O_RDONLY)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


def read_inflight(name):
    """(reads, writes) in flight on /sys/block/<name> (0, 0 when the device is gone)."""
    try:
        with open(f"/sys/block/{name}/inflight") as f:
            r, w = f.read().split()[:2]
        return int(r), int(w)
    except (OSError, ValueError):
        return 0, 0


def dev_of(path):
    """'MAJ:MIN' of a block device node."""
    st = os.stat(path)
    return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"


def loop_backing_files():
    """{'/dev/loopN': backing file path} of attached loop devices (' (deleted)' stripped)."""
    out = {}
    for name in sorted(os.listdir("/sys/block")):
        if not name.startswith("loop"):
            continue
        try:
            with open(f"/sys/block/{name}/loop/backing_file") as f:
                path = f.read().strip()
        except OSError:
            continue
        if path.endswith(" (deleted)"):
            path = path[: -len(" (deleted)")]
        out[f"/dev/{name}"] = path
    return out


def umount(mountpoint):
    """Unmount, retrying while busy; detach lazily (umount -l) when it stays busy."""
    for attempt in range(20):
        res = subprocess.run(["umount", mountpoint], capture_output=True, text=True)
        if res.returncode == 0 or not any(m == mountpoint for m in (e["mountpoint"] for e in system.mounts())):
            return
        time.sleep(0.1 * (attempt + 1) if attempt < 5 else 0.5)
    # Still busy (a process keeps a file or its working directory there): detach it from the
    # tree now; the kernel drops it, and with autoclear the loop, when the last user lets go.
    subprocess.run(["umount", "-l", mountpoint], capture_output=True)


def detach(loop):
    """Detach a loop device (losetup -d), retrying while busy."""
    for attempt in range(20):
        res = subprocess.run(["losetup", "-d", loop], capture_output=True, text=True)
        if res.returncode == 0 or loop not in loop_backing_files():
            return
        time.sleep(0.1 * (attempt + 1) if attempt < 5 else 0.5)

