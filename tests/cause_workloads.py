"""Workloads for the cause tests, one per cause: ``python cause_workloads.py CASE DIR SECONDS``.
Each runs for about SECONDS and prints the calls it made as JSON."""

import json
import os
import sys
import time


def commit_wait(d, seconds):
    """Metadata-only changes, each made durable by fsync: the task waits for the commit."""
    n, end = 0, time.monotonic() + seconds
    fd = os.open(d, os.O_RDONLY)
    while time.monotonic() < end:
        p = os.path.join(d, f"c{n % 50}")
        os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
        os.chmod(p, 0o600 if n % 2 else 0o644)
        os.fsync(fd)
        n += 1
    os.close(fd)
    return {"fsync": n}


def data_writeback(d, seconds):
    """Buffered writes of 2 MiB then fsync: fsync waits for the file's own data pages."""
    n, end = 0, time.monotonic() + seconds
    buf = os.urandom(2 << 20)
    fd = os.open(os.path.join(d, "data"), os.O_CREAT | os.O_WRONLY, 0o644)
    while time.monotonic() < end:
        os.pwrite(fd, buf, 0)
        os.fsync(fd)
        n += 1
    os.close(fd)
    return {"fsync": n}


def device_flush(d, seconds):
    """Overwrite one allocated block with O_DIRECT (the write itself is not traced), then
    fdatasync: nothing is dirty in the page cache and no commit is needed, so ext4_sync_file
    only flushes the device's volatile cache (blkdev_issue_flush)."""
    import mmap

    p = os.path.join(d, "flush")
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    os.pwrite(fd, b"x" * 4096, 0)
    os.fsync(fd)
    os.close(fd)
    fd = os.open(p, os.O_RDWR | os.O_DIRECT)
    buf = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT needs
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        buf[:8] = n.to_bytes(8, "little")
        os.pwrite(fd, buf, 0)
        os.fdatasync(fd)
        n += 1
    os.close(fd)
    return {"fdatasync": n}


def writeback_throttle(d, seconds):
    """Buffered writes with no fsync: the writer is throttled in balance_dirty_pages."""
    n, end = 0, time.monotonic() + seconds
    buf = os.urandom(1 << 20)
    fd = os.open(os.path.join(d, "big"), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    while time.monotonic() < end:
        os.write(fd, buf)
        n += 1
        if n % 64 == 0:
            os.lseek(fd, 0, 0)
    os.close(fd)
    return {"write": n}


def cpu(d, seconds):
    """Large buffered overwrites of the same 16 MiB (page-cache copies, no I/O wait) on a CPU
    shared with busy loops: the writer is preempted inside write()."""
    buf = os.urandom(16 << 20)
    fd = os.open(os.path.join(d, "f"), os.O_CREAT | os.O_WRONLY, 0o644)
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        os.pwrite(fd, buf, 0)
        n += 1
    os.close(fd)
    return {"pwrite64": n}


def main():
    case, d, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    os.makedirs(d, exist_ok=True)
    print(json.dumps(globals()[case](d, seconds)))


if __name__ == "__main__":
    main()
