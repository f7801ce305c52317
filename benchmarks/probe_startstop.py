"""Benchmark: how long jstall's probes take to start (compile and attach) and to stop
(detach), as they did and as they do, alternating in one run:

- before: the kernel's BTF read at every start (bpftool's JSON: btf.facts with an empty
  cache) and the programs detached one after another (bcc's cleanup);
- now: the BTF's facts from btf.facts' cache (read once per kernel) and the programs
  detached together (probeset.detach_together).

The probes are the recorder's (every journaled filesystem, the default calls, quiet),
opened and closed with no workload: every recorded session, lab run and monitor pays
both. Prints each round and the medians. Needs root.
Usage: python benchmarks/probe_startstop.py [--rounds N]
"""

import statistics
import tempfile
import time

from benchlib import loadavg, options

from jstall.probes import btf
from jstall.probes.probeset import ProbeOptions, ProbeSet


def one(now, cache_dir):
    btf.CACHE_DIR = cache_dir if now else tempfile.mkdtemp(prefix="jstall-btf-", dir=cache_dir)
    p = ProbeSet(ProbeOptions(quiet=True))
    t0 = time.monotonic()
    p.open(lambda ctx, data, size: 0)
    t1 = time.monotonic()
    programs = len(p.bpf.tracepoint_fds) + len(p.bpf.raw_tracepoint_fds)
    if now:
        p.close()
    else:
        p.bpf.cleanup()   # bcc's own: one after another
        p.bpf = None
    return t1 - t0, time.monotonic() - t1, programs, p.attach_mode


def main():
    args = options(__doc__, rounds=(5, "rounds, each a start and stop as before and as now"))
    print(f"load {loadavg()}")
    rows = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="jstall-bench-") as cache:
        one(True, cache)   # fills the cache the "now" rounds read
        for r in range(args.rounds):
            for now in ((False, True) if r % 2 == 0 else (True, False)):
                start_s, stop_s, n, mode = one(now, cache)
                rows[now].append((start_s, stop_s))
                print(f"round {r + 1}  {'now' if now else 'before':6}  start {start_s:5.2f} s  stop {stop_s:5.2f} s  "
                      f"({n} programs, attach {mode})", flush=True)
    med = {k: (statistics.median(a for a, _ in v), statistics.median(b for _, b in v)) for k, v in rows.items()}
    print(f"median start: before {med[False][0]:.2f} s, now {med[True][0]:.2f} s "
          f"(ratio {med[True][0] / med[False][0]:.2f}); "
          f"median stop: before {med[False][1]:.2f} s, now {med[True][1]:.2f} s "
          f"(ratio {med[True][1] / med[False][1]:.2f})")


if __name__ == "__main__":
    main()
