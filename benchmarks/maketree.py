"""A source tree for the copy clients of benchmarks/advice_accuracy.py (tar, rsync, cp, rm,
git): N small files, 100 to a directory, each with two 32-byte user.* attributes.

usage: python3 benchmarks/maketree.py DIR N [--no-xattrs]
"""

import os
import sys


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 2 or not args[1].isdigit():
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    top, n = args[0], int(args[1])
    xattrs = "--no-xattrs" not in sys.argv
    for i in range(n):
        d = os.path.join(top, f"d{i // 100:04d}")
        if i % 100 == 0:
            os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"f{i:06d}")
        with open(path, "wb") as f:
            f.write(b"x" * (256 + (i * 37) % 1024))
        if xattrs:
            os.setxattr(path, "user.a", f"{i:032d}".encode())
            os.setxattr(path, "user.b", f"{n - i:032d}".encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
