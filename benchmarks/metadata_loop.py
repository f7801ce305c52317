"""A fixed metadata workload for the recorder benchmark: per file, create, two
setxattr, unlink. Prints one JSON line: calls made and calls per second.

usage: metadata_loop.py DIR FILES ROUNDS
"""

import json
import os
import sys
import time


def main():
    directory, files, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    os.makedirs(directory, exist_ok=True)
    value = b"v" * 16
    paths = [os.path.join(directory, f"f{i}") for i in range(files)]
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(rounds):
        for p in paths:
            os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
            os.setxattr(p, "user.a", value)
            os.setxattr(p, "user.b", value)
            os.unlink(p)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    calls = 4 * files * rounds
    print(json.dumps({"calls": calls, "seconds": seconds, "calls_per_s": calls / seconds,
                      "cpu_seconds": cpu, "calls_per_cpu_s": calls / cpu}))


if __name__ == "__main__":
    main()
