"""Shared mappings dirtied page by page: ``python mmap_workload.py DIR MIB SECONDS`` maps
sparse files of MIB MiB MAP_SHARED, one after another for SECONDS, and writes one byte to
each page, so each first write is a page fault (ext4_page_mkwrite, which on a nodelalloc
mount allocates the page's block in a journal handle). Prints the pages written as JSON."""

import json
import mmap
import os
import sys
import time


def main():
    directory, mib, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    size, pages, end = mib << 20, 0, time.monotonic() + seconds
    os.makedirs(directory, exist_ok=True)
    n = 0
    while time.monotonic() < end:
        fd = os.open(os.path.join(directory, f"map{n}"), os.O_CREAT | os.O_RDWR, 0o644)
        os.ftruncate(fd, size)
        m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        for off in range(0, size, mmap.PAGESIZE):   # each page's first write faults
            m[off] = 1
            pages += 1
        m.close()
        os.close(fd)
        n += 1
    print(json.dumps({"pid": os.getpid(), "pages": pages, "files": n}))


if __name__ == "__main__":
    main()
