"""Benchmark: how long jstall's probes take to start (compile and attach) and to stop
(detach), with the programs detached one after another (bcc's cleanup) and together
(probeset.detach_together), alternating, in one run. Prints each round and the medians.

The probes are the recorder's (every journaled filesystem, the default calls, quiet), opened
and closed without a workload: a stop is what every recorded session, lab run and monitor
pays when it ends. Needs root.  Usage: python benchmarks/probe_startstop.py [--rounds N]
"""

import statistics
import time

from benchlib import loadavg, options

from jstall.probes.probeset import ProbeOptions, ProbeSet


def one(together):
    p = ProbeSet(ProbeOptions(quiet=True))
    t0 = time.monotonic()
    p.open(lambda ctx, data, size: 0)
    t1 = time.monotonic()
    programs = len(p.bpf.tracepoint_fds) + len(p.bpf.raw_tracepoint_fds)
    if together:
        p.close()
    else:
        p.bpf.cleanup()   # bcc's own: one after another
        p.bpf = None
    return t1 - t0, time.monotonic() - t1, programs, p.attach_mode


def main():
    args = options(__doc__, rounds=(5, "rounds, each a stop one after another and one together"))
    print(f"load {loadavg()}")
    rows = {False: [], True: []}
    for r in range(args.rounds):
        for together in ((False, True) if r % 2 == 0 else (True, False)):
            start_s, stop_s, n, mode = one(together)
            rows[together].append((start_s, stop_s))
            print(f"round {r + 1}  {'together' if together else 'one by one':10}  start {start_s:6.2f} s  "
                  f"stop {stop_s:6.2f} s  ({n} programs, attach {mode})", flush=True)
    med = {k: statistics.median(s for _, s in v) for k, v in rows.items()}
    start = statistics.median(s for v in rows.values() for s, _ in v)
    print(f"median start {start:.2f} s; median stop: one by one {med[False]:.2f} s, together {med[True]:.2f} s "
          f"(ratio {med[True] / med[False]:.2f})")


if __name__ == "__main__":
    main()
