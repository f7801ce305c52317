"""The recorder tests' workload: FILES files with two 16-byte attributes each, then
UPDATES setxattr on random files. Prints its pid and the calls it made as JSON."""

import json
import os
import random
import sys


def main():
    directory, files, updates = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(1)
    os.makedirs(directory, exist_ok=True)
    paths = [os.path.join(directory, f"f{i}") for i in range(files)]
    setxattr = 0
    for p in paths:
        os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
        for name in ("user.a", "user.b"):
            os.setxattr(p, name, rng.randbytes(16))
            setxattr += 1
    for _ in range(updates):
        os.setxattr(rng.choice(paths), "user.a", rng.randbytes(16))
        setxattr += 1
    print(json.dumps({"pid": os.getpid(), "setxattr": setxattr, "creates": files}))


if __name__ == "__main__":
    main()
