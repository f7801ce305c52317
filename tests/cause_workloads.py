"""Workloads for the cause tests, one per cause: ``python cause_workloads.py CASE DIR SECONDS``.
Each runs for about SECONDS and prints the calls it made as JSON."""

import json
import mmap
import os
import sys
import time


def _repeat(seconds, fd, step):
    """Call ``step(i)`` for i = 0, 1, ... until ``seconds`` have passed, then close ``fd``;
    returns the count."""
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        step(n)
        n += 1
    os.close(fd)
    return n


def commit_wait(d, seconds):
    """Metadata-only changes, each made durable by fsync: the task waits for the commit."""
    fd = os.open(d, os.O_RDONLY)

    def step(i):
        p = os.path.join(d, f"c{i % 50}")
        os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
        os.chmod(p, 0o600 if i % 2 else 0o644)
        os.fsync(fd)

    return {"fsync": _repeat(seconds, fd, step)}


def data_writeback(d, seconds):
    """Buffered writes of 2 MiB then fsync: fsync waits for the file's own data pages."""
    buf = os.urandom(2 << 20)
    fd = os.open(os.path.join(d, "data"), os.O_CREAT | os.O_WRONLY, 0o644)
    return {"fsync": _repeat(seconds, fd, lambda i: (os.pwrite(fd, buf, 0), os.fsync(fd)))}


def device_flush(d, seconds):
    """Overwrite one allocated block with O_DIRECT (the write itself is not traced), then
    fdatasync: nothing is dirty in the page cache and no commit is needed, so ext4_sync_file
    only flushes the device's volatile cache (blkdev_issue_flush)."""
    p = os.path.join(d, "flush")
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    os.pwrite(fd, b"x" * 4096, 0)
    os.close(fd)
    os.sync()  # the block allocated and its commit done, in a call not traced
    fd = os.open(p, os.O_RDWR | os.O_DIRECT)
    buf = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT needs

    def step(i):
        buf[:8] = i.to_bytes(8, "little")
        os.pwrite(fd, buf, 0)
        os.fdatasync(fd)

    return {"fdatasync": _repeat(seconds, fd, step)}


def writeback_throttle(d, seconds):
    """Buffered writes with no fsync: the writer is throttled in balance_dirty_pages."""
    buf = os.urandom(1 << 20)
    fd = os.open(os.path.join(d, "big"), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)

    def step(i):
        os.write(fd, buf)
        if (i + 1) % 64 == 0:  # back to the start every 64 MiB
            os.lseek(fd, 0, 0)

    return {"write": _repeat(seconds, fd, step)}


def cpu(d, seconds):
    """Large buffered overwrites of the same 16 MiB (page-cache copies, no I/O wait) on a CPU
    shared with busy loops: the writer is preempted inside write()."""
    buf = os.urandom(16 << 20)
    fd = os.open(os.path.join(d, "f"), os.O_CREAT | os.O_WRONLY, 0o644)
    return {"pwrite64": _repeat(seconds, fd, lambda i: os.pwrite(fd, buf, 0))}


def main():
    case, d, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    os.makedirs(d, exist_ok=True)
    print(json.dumps(globals()[case](d, seconds)))


if __name__ == "__main__":
    main()
