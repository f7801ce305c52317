"""The journal-size advice against the lab: for each workload and scale, the threshold found by
bisection (the smallest whole-MiB journal whose run has no forced checkpoint) and the size
jstall recommends from runs on smaller journals, with its range and the ratio
recommended / threshold (the target is 1x to 2x).

usage: sudo .venv/bin/python benchmarks/advice_accuracy.py [--quick] [--scratch DIR]

Each lab run is recorded (jstall lab run, no device throttle) and analyzed with --min-ms 1.
--quick: the two small workloads only, one starting size each.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

from jstall.analyzer import analyze

JSTALL = os.path.join(os.path.dirname(sys.executable), "jstall")

#: (name, scale, lab arguments, starting journal sizes in MiB)
CASES = (
    ("xattr", "3,000 files, 12,000 updates, 128-byte inodes",
     ["xattr", "--inode-size", "128", "--fs-size", "256M", "--files", "3000", "--updates", "12000"], (4, 8, 16, 24)),
    ("fdtree", "deep (5 levels x 4, 5 files)", ["fdtree", "--shape", "deep"], (4, 8, 16)),
    ("xattr", "seed: 5,000 files, 54,247 updates, 128-byte inodes",
     ["xattr", "--inode-size", "128", "--fs-size", "512M"], (8, 16, 32)),
)


class Lab:
    def __init__(self, scratch):
        self.scratch = scratch
        self.tmp = tempfile.mkdtemp(prefix="jstall-accuracy-")
        self.cache = {}

    def run(self, args, mib):
        """Analysis of one recorded run at ``mib`` MiB (cached per arguments and size)."""
        key = (tuple(args), mib)
        if key not in self.cache:
            out = os.path.join(self.tmp, f"run{len(self.cache)}")
            cmd = [JSTALL, "lab", "run", *args, "--journal-size", f"{mib}M", "-o", out, "--no-progress"]
            if self.scratch:
                cmd += ["--scratch", self.scratch]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                raise SystemExit(f"lab run failed: {' '.join(cmd)}\n{p.stderr}")
            self.cache[key] = analyze(out, min_ms=1)
            shutil.rmtree(out, ignore_errors=True)
        return self.cache[key]

    def forced(self, args, mib):
        return int(self.run(args, mib).journals["forced_checkpoints"].sum())

    def threshold(self, args, lo):
        """Smallest whole-MiB size with no forced checkpoint, above ``lo`` (which stalls)."""
        hi = lo * 2
        while self.forced(args, hi):
            lo, hi = hi, hi * 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.forced(args, mid):
                lo = mid
            else:
                hi = mid
        return hi


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--scratch", help="lab scratch directory (default: the lab's)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (the lab makes loop devices)")
    lab = Lab(args.scratch)
    cases = CASES[:2] if args.quick else CASES
    rows = []
    try:
        for name, scale, largs, starts in cases:
            starts = starts[-1:] if args.quick else starts
            thr = lab.threshold(largs, min(starts))
            for s in starts:
                a = lab.run(largs, s)
                recs = [r for r in a.recommendations if r.kind == "journal_size"]
                if not recs:
                    rows.append((name, scale, thr, s, None, None, None, None))
                    continue
                r = recs[0]
                rows.append((name, scale, thr, s, r.journal_size_mib, r.low_mib, r.high_mib,
                             r.journal_size_mib / thr))
            print(f"# {name} ({scale}): threshold {thr} MiB after {len(lab.cache)} runs", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(lab.tmp, ignore_errors=True)
    print(f"| workload | scale | bisected threshold MiB | run on MiB | recommended MiB | range MiB | ratio |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, scale, thr, s, rec, lo, hi, ratio in rows:
        if rec is None:
            print(f"| {name} | {scale} | {thr} | {s} | (none) | | |")
        else:
            ok = "" if 1.0 <= ratio <= 2.0 else " (outside 1x-2x)"
            print(f"| {name} | {scale} | {thr} | {s} | {rec:g} | {lo:.0f}-{hi:.0f} | {ratio:.2f}{ok} |")
    inside = [r for r in rows if r[7] is not None and 1.0 <= r[7] <= 2.0]
    print(f"\n{len(inside)} of {len(rows)} recommendations within [1x, 2x] of the bisected threshold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
