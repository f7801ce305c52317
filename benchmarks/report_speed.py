"""Benchmark: `jstall report` of a 30-minute generated session; print the report's size and
the time to write it (targets: <= 5 MB, <= 10 s).

The session (synthetic.generate_session: one 32 MiB journal, 200,000 calls
of 1 ms or more of which 40,000 stall, 100 fill samples a second, a commit every 0.25 s,
20 million calls in the histograms) is written in the real format to a temporary directory
first (not timed); the report -- load, analysis, figures, HTML, as `jstall report SESSION -o
FILE` does -- runs in a fresh child process.  For comparison, the same session drawn the way
reports were drawn before the size budget (every fill sample, stall, band and transaction as
SVG) is measured too, unless --no-baseline.
Usage: python benchmarks/report_speed.py [--minutes M] [--calls N] [--stalls N] [--keep DIR]
"""

import json
import os
import subprocess
import sys
import time

from benchlib import CHILD_ENV, options, run_main, workdir

GENERATE = """
import sys
from synthetic import generate_session, journal_meta
generate_session(sys.argv[1], seed=11, duration_s=float(sys.argv[2]), calls=int(sys.argv[3]), stalls=int(sys.argv[4]),
                 journals=[journal_meta("7:0", journal_blocks=8192, max_transaction_blocks=2730)],
                 fill_per_s=100.0, commit_every_s=0.25)
"""

CHILD = """
import json, os, resource, sys, time
t0 = time.perf_counter()
if sys.argv[3] == "unbudgeted":   # every point drawn, as SVG: the budget's constants lifted
    from jstall.analyzer.render import figures
    figures.MAX_POINTS = figures.MAX_STALLS = figures.HOVER_STALLS = figures.MAX_TRANSACTIONS = 10**12
    figures.MAX_BANDS = 10**12
    figures.WEBGL_POINTS = 10**12
from jstall.cli import main
assert main(["report", sys.argv[1], "-o", sys.argv[2]]) == 0
t = time.perf_counter() - t0
print(json.dumps({"seconds": t, "bytes": os.path.getsize(sys.argv[2]),
                  "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def main():
    args = options(__doc__, minutes=30.0, calls=200_000, stalls=40_000, repeat=3,
                   no_baseline=(False, "skip the unbudgeted drawing"),
                   keep=(None, "write the session here and keep it"))
    with workdir("jstall-bench-report-") as tmp:
        path = args.keep or os.path.join(tmp, "session")
        t = time.perf_counter()
        if not os.path.exists(os.path.join(path, "metadata.json")):  # in a child: its memory is not ours
            subprocess.run([sys.executable, "-c", GENERATE, path, str(args.minutes * 60), str(args.calls),
                            str(args.stalls)], check=True, env=CHILD_ENV)
        size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
        print(f"session: {args.minutes:g} minutes, {args.calls:,} calls >= 1 ms, {args.stalls:,} stalls >= 10 ms "
              f"({size / 2**20:.1f} MiB on disk, built in {time.perf_counter() - t:.1f} s)")
        modes = ["budgeted"] + ([] if args.no_baseline else ["unbudgeted"])
        res = {m: [] for m in modes}
        order = [m for i in range(args.repeat) for m in (modes if i % 2 == 0 else modes[::-1])]  # ABBA
        for m in order:
            out = os.path.join(tmp, f"{m}.html")
            p = subprocess.run([sys.executable, "-c", CHILD, path, out, m], capture_output=True, text=True, check=True)
            res[m].append(json.loads(p.stdout.strip().splitlines()[-1]))
        for m in modes:
            secs = sorted(r["seconds"] for r in res[m])
            mb = res[m][0]["bytes"] / 1e6
            peak = max(r["peak_rss_kib"] for r in res[m]) / 2**20
            what = "report (size budget)" if m == "budgeted" else "every point as SVG (before the budget)"
            print(f"{what}: {mb:.2f} MB; written in best {secs[0]:.1f} s, worst {secs[-1]:.1f} s over "
                  f"{len(secs)} runs; peak {peak:.2f} GiB RSS")
        b = res["budgeted"]
        worst = max(r["seconds"] for r in b)
        ok = b[0]["bytes"] <= 5e6 and worst <= 10
        print(f"targets: <= 5 MB, <= 10 s -> {'PASS' if ok else 'FAIL'}")
        return 0 if ok else 1


if __name__ == "__main__":
    run_main(main)
