"""Small workloads for the recorder tests, each a real client of the filesystem:

    fsync DIR N          write one byte and fsync, N times, on one file; prints {"pid", "fsync"}
    busy DIR             mkdir, write+fsync, rmdir in a loop until killed
    progress DIR LOG     mkdir numbered directories until killed; every 100 appends
                         "<CLOCK_MONOTONIC ns> <mkdirs so far>" to LOG
    fork DIR K M         wait for a line on stdin, then fork K children that each make M
                         directories, wait for them and exit
"""

import json
import os
import sys
import time


def fsync(d, n):
    os.makedirs(d, exist_ok=True)
    fd = os.open(os.path.join(d, "f"), os.O_CREAT | os.O_WRONLY, 0o644)
    for _ in range(n):
        os.write(fd, b"x")
        os.fsync(fd)
    os.close(fd)
    print(json.dumps({"pid": os.getpid(), "fsync": n}), flush=True)


def busy(d):
    os.makedirs(d, exist_ok=True)
    fd = os.open(os.path.join(d, "f"), os.O_CREAT | os.O_WRONLY, 0o644)
    i = 0
    while True:
        p = os.path.join(d, f"b{i % 50}")
        os.mkdir(p)
        os.write(fd, b"y")
        os.fsync(fd)
        os.rmdir(p)
        i += 1


def progress(d, log):
    os.makedirs(d, exist_ok=True)
    i = 0
    with open(log, "a") as f:
        while True:
            os.mkdir(os.path.join(d, f"p{i}"))
            i += 1
            if i % 100 == 0:
                f.write(f"{time.monotonic_ns()} {i}\n")
                f.flush()


def fork(d, k, m):
    os.makedirs(d, exist_ok=True)
    sys.stdin.readline()
    kids = []
    for c in range(k):
        pid = os.fork()
        if pid == 0:
            for i in range(m):
                os.mkdir(os.path.join(d, f"c{c}-{i}"))
            os._exit(0)
        kids.append(pid)
    for pid in kids:
        os.waitpid(pid, 0)


if __name__ == "__main__":
    what, args = sys.argv[1], sys.argv[2:]
    {"fsync": lambda: fsync(args[0], int(args[1])), "busy": lambda: busy(args[0]),
     "progress": lambda: progress(args[0], args[1]),
     "fork": lambda: fork(args[0], int(args[1]), int(args[2]))}[what]()
