"""Two checkouts of jstall side by side, in one run: what a change of the code's shape costs.

For each checkout (its own `make setup`: DIR/.venv/bin/jstall), in rounds whose order
alternates (untraced, A, B; then reversed):
- the project's metadata loop (benchmarks/metadata_loop.py: per file create, 2 x setxattr,
  unlink) on an unthrottled 512 MiB ext4 (256-byte inodes, 64 MiB journal), untraced and
  while `jstall record -q -d MOUNT` of each checkout records it; each ratio divides the
  loop's own rate by the same round's untraced rate;
- the recorder's start (from its exec to its session's metadata.json: Python, the BTF,
  clang's compile, the attach) and stop (from SIGINT to its exit: the flush and the detach);
- the BPF programs' own run time per loop call (the kernel's BPF statistics on, as the
  monitor turns them on: monitor/bpfstats.py; bpftool's counters of the programs loaded since
  the recorder started), in runs of their own (the statistics cost a clock read per event);
- then `jstall analyze --json` of one session (the first checkout's first recording, which
  both read) by each in turn, wall seconds of the whole process.
Needs root. Prints medians (min-max) and B against A.

usage: sudo .venv/bin/python benchmarks/trees_ab.py A_DIR B_DIR [--rounds N] [--files N]
           [--loops N] [--analyze-rounds N] [--stats-rounds N]
"""

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import loadavg, parser, run_main

from jstall.monitor import bpfstats
from jstall.workloads.scratch import FsConfig, ScratchFs

LOOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "metadata_loop.py")


def loop(mount, files, loops):
    """The metadata loop's calls per second."""
    out = subprocess.run([sys.executable, LOOP, os.path.join(mount, "bench"), str(files), str(loops)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["calls_per_s"]


def programs():
    """{id: bpftool's description} of every BPF program loaded."""
    out = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True, check=True).stdout
    return {p["id"]: p for p in json.loads(out)}


def bpf_run_ns(ids):
    """(run time ns, runs) summed over the BPF programs ``ids`` (the kernel counts while BPF
    statistics are on)."""
    now = programs()
    mine = [now[i] for i in ids if i in now]
    return sum(p.get("run_time_ns", 0) for p in mine), sum(p.get("run_cnt", 0) for p in mine)


def recorded(jstall, mount, out, files, loops, stats=False):
    """(loop rate, start s, stop s, BPF ns per loop call or None) with `jstall record -q -d
    mount -o out` running; ``stats``: its programs' run time over the loop (statistics on)."""
    before = set(programs()) if stats else set()
    t0 = time.monotonic()
    rec = subprocess.Popen([jstall, "record", "-q", "-d", mount, "-o", out], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    meta = os.path.join(out, "metadata.json")
    while not os.path.exists(meta):
        if rec.poll() is not None:
            raise RuntimeError(f"{jstall} record ended at start: {rec.stderr.read().strip()}")
        time.sleep(0.01)
    start = time.monotonic() - t0
    per_call = None
    try:
        if stats:   # the programs loaded since it started: its own (one recorder at a time)
            ids = set(programs()) - before
            stats_fd = bpfstats.enable()   # the kernel counts run time while it is open
            try:
                ns0, _ = bpf_run_ns(ids)
                rate = loop(mount, files, loops)
                ns1, _ = bpf_run_ns(ids)
            finally:
                bpfstats.disable(stats_fd)
            per_call = (ns1 - ns0) / (4 * files * loops)
        else:
            rate = loop(mount, files, loops)
    finally:
        t1 = time.monotonic()
        rec.send_signal(signal.SIGINT)
        err = rec.communicate(timeout=300)[1]
    stop = time.monotonic() - t1
    if rec.returncode != 0:
        raise RuntimeError(f"{jstall} record: exit {rec.returncode}: {err.strip()}")
    return rate, start, stop, per_call


def analyze_s(jstall, session):
    t0 = time.monotonic()
    subprocess.run([jstall, "analyze", "--json", session], check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - t0


def med(xs):
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})"


def main():
    ap = parser(__doc__)
    ap.add_argument("a", help="checkout A (the old tree)")
    ap.add_argument("b", help="checkout B (the new tree)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--loops", type=int, default=10)
    ap.add_argument("--analyze-rounds", type=int, default=6)
    ap.add_argument("--stats-rounds", type=int, default=4,
                    help="loop runs per checkout with BPF statistics on: the programs' run time per call")
    args = ap.parse_args()
    trees = {"A": os.path.join(args.a, ".venv", "bin", "jstall"), "B": os.path.join(args.b, ".venv", "bin", "jstall")}
    for k, j in trees.items():
        if not os.access(j, os.X_OK):
            print(f"trees_ab: {j} not found: run make setup in checkout {k}", file=sys.stderr)
            return 2
    ratio = {"A": [], "B": []}
    ba_loop, starts, stops = [], {"A": [], "B": []}, {"A": [], "B": []}
    load0 = loadavg()
    with tempfile.TemporaryDirectory(prefix="jstall-trees-") as tmp, \
            ScratchFs(FsConfig(fs_type="ext4", fs_size="512M", journal_size="64M", inode_size=256)) as fs:
        loop(fs.mountpoint, args.files, 1)   # warm the directory and the page cache
        for r in range(args.rounds):
            order = [None, "A", "B"] if r % 2 == 0 else ["B", "A", None]
            got = {}
            for k in order:
                if k is None:
                    got[None] = loop(fs.mountpoint, args.files, args.loops)
                    continue
                rate, start, stop, _ = recorded(trees[k], fs.mountpoint, os.path.join(tmp, f"{k}{r}"), args.files,
                                                args.loops)
                got[k] = rate
                starts[k].append(start)
                stops[k].append(stop)
            for k in ("A", "B"):
                ratio[k].append(got[k] / got[None])
            ba_loop.append(got["B"] / got["A"])
        bpf = {"A": [], "B": []}
        for r in range(args.stats_rounds):
            for k in (("A", "B") if r % 2 == 0 else ("B", "A")):
                bpf[k].append(recorded(trees[k], fs.mountpoint, os.path.join(tmp, f"stats-{k}{r}"), args.files,
                                       args.loops, stats=True)[3])
        session = os.path.join(tmp, "A0")
        ana = {"A": [], "B": []}
        for r in range(args.analyze_rounds):
            for k in (("A", "B") if r % 2 == 0 else ("B", "A")):
                ana[k].append(analyze_s(trees[k], session))
    print(f"A {args.a}, B {args.b}; {args.rounds} rounds, load average {load0} -> {loadavg()}")
    for k in ("A", "B"):
        print(f"{k}: loop under record {med(ratio[k])} of untraced; start {med(starts[k])} s, stop "
              f"{med(stops[k])} s; analyze --json {med(ana[k])} s; BPF ns per loop call {med(bpf[k])}")
    def b_over_a(d):
        return f"{statistics.median(d['B']) / statistics.median(d['A']):.3f}"

    print(f"B against A: loop {med(ba_loop)}; start {b_over_a(starts)}, stop {b_over_a(stops)}, "
          f"analyze {b_over_a(ana)}, BPF ns per call {b_over_a(bpf)}")
    return 0


if __name__ == "__main__":
    run_main(main)
