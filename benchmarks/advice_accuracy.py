"""The journal-size advice against the lab: for each workload and scale, the threshold that
`jstall lab tune` finds by bisection (the smallest journal with no forced-checkpoint stall,
on its grid of whole MiB) and the size jstall recommends from each of the search's runs that
stalled, with its range and the ratio recommended / threshold (the target is 1x to 2x).

usage: sudo .venv/bin/python benchmarks/advice_accuracy.py [--quick] [--write-iops N] [--scratch DIR]

Runs on the lab's paced device (every request waits its turn; default 2,000 write IOPS, as
`make demo`); --write-iops 0: no throttle. --quick: the two small workloads only. Each tune
run is recorded; every session is analyzed with --min-ms 1.
"""

import os
import shutil
import sys
import tempfile

from benchlib import parser

from jstall.analyzer import analyze

#: (name, scale, pattern, params, fs options, starting journal MiB)
CASES = (
    ("xattr", "3,000 files, 12,000 updates, 128-byte inodes", "xattr", {"files": 3000, "updates": 12000},
     {"fs_size": "256M", "inode_size": 128}, 4),
    ("fdtree", "deep (5 levels × 4, 5 files)", "fdtree", {"shape": "deep"}, {"fs_size": "256M"}, 4),
    ("xattr", "seed: 5,000 files, 54,247 updates, 128-byte inodes", "xattr", {}, {"fs_size": "512M", "inode_size": 128},
     8),
)


def main():
    ap = parser(__doc__)
    ap.add_argument("--quick", action="store_true", help="the two small workloads only")
    ap.add_argument("--write-iops", type=int, default=2000, help="the paced device's write IOPS (0: none)")
    ap.add_argument("--scratch", help="lab scratch directory (default: the lab's)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (the lab makes loop devices)")
    from jstall.workloads.scratch import FsConfig
    from jstall.workloads.tune import tune

    rows = []
    tmp = tempfile.mkdtemp(prefix="jstall-accuracy-")
    try:
        for i, (name, scale, pattern, params, fsopt, start) in enumerate(CASES[:2] if args.quick else CASES):
            fs = FsConfig(journal_size=f"{start}M", write_iops=args.write_iops or None, **fsopt)
            with open(os.devnull, "w") as quiet:
                r = tune(pattern, params, fs, compare=False, output_dir=os.path.join(tmp, f"t{i}"),
                         scratch_dir=args.scratch, console=quiet)
            thr = r.threshold_mib
            print(f"# {name} ({scale}): threshold {thr} MiB, {r.stalled_below_mib} MiB stalls; "
                  f"tried {r.tried_mib}", file=sys.stderr, flush=True)
            for run in sorted(r.runs, key=lambda x: x.journal_mib):
                if run.big_enough:
                    continue
                a = analyze(run.session_dir, min_ms=1)
                recs = [x for x in a.recommendations if x.kind == "journal_size"]
                rec = recs[0] if recs else None
                rows.append((name, scale, thr, run.journal_mib, rec))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    device = f"paced device, {args.write_iops} write IOPS" if args.write_iops else "no throttle"
    print(f"journal-size advice against lab tune ({device})\n")
    print("| workload | scale | threshold MiB | run on MiB | recommended MiB | range MiB | ratio |")
    print("|---|---|---:|---:|---:|---:|---:|")
    inside = counted = 0
    for name, scale, thr, mib, rec in rows:
        if rec is None:
            print(f"| {name} | {scale} | {thr} | {mib} | (none: no checkpoint stall time) | | |")
            continue
        ratio = rec.journal_size_mib / thr if thr else float("nan")
        ok = 1.0 <= ratio <= 2.0
        counted += 1
        inside += ok
        print(f"| {name} | {scale} | {thr} | {mib} | {rec.journal_size_mib:g} | {rec.low_mib:.0f}-{rec.high_mib:.0f} "
              f"| {ratio:.2f}{'' if ok else ' (outside)'} |")
    print(f"\n{inside} of {counted} recommendations within [1x, 2x] of the bisected threshold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
