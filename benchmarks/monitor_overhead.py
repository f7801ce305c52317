"""Monitor overhead: the cost of `jstall monitor`'s default probes against no tracing, and
against `jstall record`, in ABBA pairs on a scratch ext4 (unthrottled; --fs-type xfs: an XFS,
where the monitor's operations are log-space waits and its XFS programs run on every log
reservation). Per pair:

- paced: the metadata workload (create, 2 x setxattr, unlink per file) paced at --rate
  calls/s; throughput ratio and calls per CPU second of the workload, traced/untraced;
- full: the same workload unpaced (the recorder benchmark's rate, --full-rounds x 20,000
  calls), monitor and record, their turns alternating between pairs, and monitor against
  record directly;
- bystander: `dd if=/dev/zero of=/dev/null bs=1` (cheap untraced syscalls), bytes/s; and the
  monitor's own BPF run time while dd runs (BPF_ENABLE_STATS), as a share of one CPU: an
  upper bound of the bystander's cost that other load on the machine does not blur;
- own cost at full rate, monitor beside record: the tracer's own CPU seconds (its process,
  i.e. its reading threads) per million calls, and its BPF programs' run time per call
  (statistics on for the whole run, in a run of its own, since they slow every program);
- interleaved at full rate: the monitor's and record's probes both loaded, attached in turn
  (--interleave rounds of untraced, monitor, record, the order reversed every other round;
  runs of 100,000 calls a second or so apart). The spaced runs above are tens of seconds
  apart, and this shared VM's speed drifts over such times by up to ±15% for the whole
  kernel (a profile of a slow run has the same shape as a fast one's); runs a second apart
  see the same machine. The monitor runs without BPF statistics here (they are global and
  would slow record's programs too).

The monitor runs as shipped (BPF statistics on 10% of the time, --bpf-stats 0.1) and `record`
as `jstall record -q -d` (no statistics) in the throughput runs.

Prints each pair and the medians. Needs root.

usage: monitor_overhead.py [--pairs N] [--rate CALLS_PER_S] [--seconds S] [--dd-bytes N] [--full-rounds N]
                           [--interleave N] [--fs-type ext4|xfs]
"""

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import cpu_seconds, loadavg, options  # cpu_seconds: the tracer's threads

HERE = os.path.dirname(os.path.abspath(__file__))
LOOP = os.path.join(HERE, "metadata_loop.py")

PACED = r"""
import json, os, sys, time
d, rate, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
os.makedirs(d, exist_ok=True)
v = b"v" * 16
calls, i = 0, 0
t0, c0 = time.perf_counter(), time.process_time()
while True:
    now = time.perf_counter() - t0
    if now >= seconds:
        break
    if calls > now * rate:          # ahead of the pace: wait
        time.sleep(0.001)
        continue
    p = os.path.join(d, f"f{i % 1000}")
    os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
    os.setxattr(p, "user.a", v); os.setxattr(p, "user.b", v); os.unlink(p)
    calls += 4; i += 1
el, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({"calls": calls, "calls_per_s": calls / el, "calls_per_cpu_s": calls / cpu}))
"""


def paced(mount, rate, seconds):
    out = subprocess.run([sys.executable, "-c", PACED, os.path.join(mount, "paced"), str(rate), str(seconds)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def full(mount, files=5000, rounds=4):
    """The metadata loop unpaced: files x rounds x 4 calls."""
    out = subprocess.run([sys.executable, LOOP, os.path.join(mount, "bench"), str(files), str(rounds)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def dd(nbytes):
    """(bytes per wall second, bytes per CPU second) of dd bs=1."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(["dd", "if=/dev/zero", "of=/dev/null", "bs=1", f"count={nbytes}"],
                       capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    m = re.search(r"copied, ([\d.,]+) s", r.stderr)
    return nbytes / float(m.group(1).replace(",", ".")), nbytes / cpu


def measure(mount, args):
    out = {"paced": paced(mount, args.rate, args.seconds)}
    c0 = cpu_seconds()
    out["full"] = full(mount, rounds=args.full_rounds)
    out["full_own_cpu"] = cpu_seconds() - c0
    out["dd"] = dd(args.dd_bytes)
    return out


def bpf_seconds(totals):
    return sum(v[0] for v in totals.values())


def own_cost_runs(mount, tmp, i, rounds):
    """(monitor, record) BPF run ns per call at full rate, statistics on for the whole run."""
    from jstall.monitor import bpfstats
    from jstall.monitor.tracer import MonitorOptions, Tracer
    from jstall.probes.recorder import RecordOptions, Recorder

    t = Tracer(MonitorOptions(devices=[mount], before_s=10, after_s=5, bpf_stats_duty=1)).start()
    time.sleep(0.3)
    b0 = bpfstats.run_totals(t.bpf)
    r = full(mount, rounds=rounds)
    mon = (bpf_seconds(bpfstats.run_totals(t.bpf)) - bpf_seconds(b0)) / r["calls"] * 1e9
    t.stop()
    fd = bpfstats.enable()
    try:
        rec = Recorder(RecordOptions(output_dir=os.path.join(tmp, f"s{i}"), devices=[mount], quiet=True))
        rec.start()
        b0 = bpfstats.run_totals(rec.bpf)
        r = full(mount, rounds=rounds)
        recd = (bpf_seconds(bpfstats.run_totals(rec.bpf)) - bpf_seconds(b0)) / r["calls"] * 1e9
        rec.stop()
    finally:
        bpfstats.disable(fd)
    return mon, recd


def detach(bpf):
    """Detach every program of a bcc BPF object, keeping it loaded."""
    for tp in list(bpf.raw_tracepoint_fds):
        bpf.detach_raw_tracepoint(tp=tp)
    for tp in list(bpf.tracepoint_fds):
        bpf.detach_tracepoint(tp=tp)


def attach(tracer):
    """Attach a started (then detached) Tracer's or Recorder's programs again."""
    p = tracer.probes
    p.attached, p.missing = [], []
    p._attach(p.bpf)


def interleaved(mount, tmp, i, rounds, files=5000):
    """{mode: [runs]} of the unpaced loop (files x 5 rounds x 4 calls) untraced, under the
    monitor and under record, both loaded and attached in turn, ABBA by round."""
    from jstall.monitor.tracer import MonitorOptions, Tracer
    from jstall.probes.recorder import RecordOptions, Recorder

    mon = Tracer(MonitorOptions(devices=[mount], before_s=10, after_s=5, bpf_stats_duty=0)).start()
    detach(mon.bpf)
    rec = Recorder(RecordOptions(output_dir=os.path.join(tmp, f"i{i}"), devices=[mount], quiet=True)).start()
    detach(rec.bpf)
    runs = {"none": [], "mon": [], "rec": []}
    try:
        for j in range(rounds):
            for mode in (("none", "mon", "rec") if j % 2 == 0 else ("rec", "mon", "none")):
                t = {"mon": mon, "rec": rec}.get(mode)
                if t:
                    attach(t)
                    time.sleep(0.1)
                runs[mode].append(full(mount, files, 5))
                if t:
                    detach(t.bpf)
        runs["lost"] = sum(mon.events_lost().values())
    finally:
        mon.stop()
        rec.stop()
    return runs


def main():
    args = options(__doc__, pairs=6, rate=10000.0, seconds=5.0, dd_bytes=3_000_000,
                   full_rounds=(20, "rounds of 5,000 files in each unpaced run (default 20: 400,000 calls)"),
                   interleave=(6, "rounds of the interleaved full-rate part per pair (0: none)"),
                   fs_type=("ext4", "the scratch filesystem: ext4 (default) or xfs"))
    if args.fs_type not in ("ext4", "xfs"):
        print(f"monitor_overhead.py: --fs-type {args.fs_type}: use ext4 or xfs", file=sys.stderr)
        sys.exit(2)

    from jstall.monitor import bpfstats
    from jstall.monitor.tracer import MonitorOptions, Tracer
    from jstall.probes.recorder import RecordOptions, Recorder
    from jstall.workloads.scratch import FsConfig, ScratchFs

    rows = []
    inode = 256 if args.fs_type == "ext4" else 512
    with ScratchFs(FsConfig(fs_type=args.fs_type, fs_size="512M", journal_size="64M", inode_size=inode)) as fs, \
            tempfile.TemporaryDirectory() as tmp:
        mount = fs.mountpoint
        full(mount, 1000, 1)
        print(f"conditions: {os.cpu_count()} CPUs shared with other work (load average {loadavg()}), "
              f"kernel {os.uname().release}; {args.fs_type}; "
              f"{args.pairs} ABBA pairs; paced {args.rate:,.0f} calls/s for {args.seconds:g} s; "
              f"dd bs=1 of {args.dd_bytes:,} bytes")
        print("ratios traced/untraced; 'cpu': per CPU second of the workload (less disturbed by other load)")
        print(f"{'pair':>4} {'paced thr':>9} {'paced cpu':>9} {'full mon':>8} {'cpu':>5} {'full rec':>8} {'cpu':>5} "
              f"{'dd mon':>7} {'cpu':>5} {'dd rec':>7} {'cpu':>5} {'lost':>5} {'bpf % cpu':>8} | "
              f"{'own cpu s/Mcall':>15} {'bpf ns/call':>11} (monitor/record at full rate)")
        for i in range(args.pairs):
            def monitor_part():
                t = Tracer(MonitorOptions(devices=[mount], before_s=10, after_s=5)).start()
                time.sleep(0.5)
                m = measure(mount, args)
                m["lost"] = sum(t.events_lost().values())
                t.stop()
                return m

            def record_part():
                rec = Recorder(RecordOptions(output_dir=os.path.join(tmp, f"r{i}"), devices=[mount], quiet=True))
                rec.start()
                time.sleep(0.5)
                c0 = cpu_seconds()
                r = {"full": full(mount, rounds=args.full_rounds)}
                r["full_own_cpu"] = cpu_seconds() - c0
                r["dd"] = dd(args.dd_bytes)
                rec.stop()
                return r

            def traced():
                # monitor and record in turn, the first one alternating between pairs
                if i % 2 == 0:
                    m = monitor_part()
                    r = record_part()
                else:
                    r = record_part()
                    m = monitor_part()
                # the monitor's BPF time while a bystander runs (every task's context switches
                # included): an upper bound of what the bystander pays, independent of other load
                t = Tracer(MonitorOptions(devices=[mount], before_s=10, after_s=5, bpf_stats_duty=1)).start()
                time.sleep(0.3)
                b0, w0 = bpf_seconds(bpfstats.run_totals(t.bpf)), time.perf_counter()
                dd(args.dd_bytes)
                m["bpf_share"] = (bpf_seconds(bpfstats.run_totals(t.bpf)) - b0) / (time.perf_counter() - w0)
                t.stop()
                m["bpf_ns"], r["bpf_ns"] = own_cost_runs(mount, tmp, i, args.full_rounds)
                return m, r, m["lost"]
            if i % 2 == 0:
                base = measure(mount, args)
                m, r, lost = traced()
            else:
                m, r, lost = traced()
                base = measure(mount, args)
            row = {
                "paced": m["paced"]["calls_per_s"] / base["paced"]["calls_per_s"],
                "paced_cpu": m["paced"]["calls_per_cpu_s"] / base["paced"]["calls_per_cpu_s"],
                "full_mon": m["full"]["calls_per_s"] / base["full"]["calls_per_s"],
                "full_mon_cpu": m["full"]["calls_per_cpu_s"] / base["full"]["calls_per_cpu_s"],
                "full_rec": r["full"]["calls_per_s"] / base["full"]["calls_per_s"],
                "full_rec_cpu": r["full"]["calls_per_cpu_s"] / base["full"]["calls_per_cpu_s"],
                "dd_mon": m["dd"][0] / base["dd"][0], "dd_rec": r["dd"][0] / base["dd"][0],
                "dd_mon_cpu": m["dd"][1] / base["dd"][1], "dd_rec_cpu": r["dd"][1] / base["dd"][1], "lost": lost,
                "bpf_share": m["bpf_share"],
                "rate": m["paced"]["calls_per_s"], "full_rate": base["full"]["calls_per_s"],
                # own cost at full rate: CPU seconds per million calls, BPF ns per call
                "mon_cpu": m["full_own_cpu"] / m["full"]["calls"] * 1e6,
                "rec_cpu": r["full_own_cpu"] / r["full"]["calls"] * 1e6,
                "mon_bpf": m["bpf_ns"], "rec_bpf": r["bpf_ns"],
                # monitor against record directly (the same pair, turns alternating)
                "mon_rec": m["full"]["calls_per_s"] / r["full"]["calls_per_s"],
                "mon_rec_cpu": m["full"]["calls_per_cpu_s"] / r["full"]["calls_per_cpu_s"],
            }
            if args.interleave:
                runs = interleaved(mount, tmp, i, args.interleave)
                lost += runs["lost"]
                row["lost"] = lost
                for mode in ("mon", "rec"):
                    row[f"il_{mode}"] = [a["calls_per_s"] / b["calls_per_s"] for a, b in zip(runs[mode], runs["none"])]
                row["il_mon_rec"] = [a["calls_per_s"] / b["calls_per_s"] for a, b in zip(runs["mon"], runs["rec"])]
                row["il_mon_rec_cpu"] = [a["calls_per_cpu_s"] / b["calls_per_cpu_s"]
                                         for a, b in zip(runs["mon"], runs["rec"])]
                row["il_rate"] = statistics.median(r["calls_per_s"] for r in runs["none"])
            rows.append(row)
            print(f"{i + 1:>4} {row['paced']:>9.3f} {row['paced_cpu']:>9.3f} {row['full_mon']:>8.3f} "
                  f"{row['full_mon_cpu']:>5.3f} {row['full_rec']:>8.3f} {row['full_rec_cpu']:>5.3f} "
                  f"{row['dd_mon']:>7.3f} {row['dd_mon_cpu']:>5.3f} {row['dd_rec']:>7.3f} {row['dd_rec_cpu']:>5.3f} "
                  f"{lost:>5} {row['bpf_share'] * 100:>8.3f} | {row['mon_cpu']:>7.2f}/{row['rec_cpu']:<7.2f} "
                  f"{row['mon_bpf']:>5.0f}/{row['rec_bpf']:<5.0f}", flush=True)
            if args.interleave:
                print(f"     interleaved, {args.interleave} rounds: monitor {statistics.median(row['il_mon']):.3f}, "
                      f"record {statistics.median(row['il_rec']):.3f} of untraced; monitor/record "
                      f"{statistics.median(row['il_mon_rec']):.3f} (per CPU s "
                      f"{statistics.median(row['il_mon_rec_cpu']):.3f})", flush=True)

    def med(k):
        return statistics.median(r[k] for r in rows)

    print(f"\nmedians (traced/untraced): paced at {med('rate'):,.0f} calls/s: throughput {med('paced'):.3f}, "
          f"calls per CPU second {med('paced_cpu'):.3f}; full rate ({med('full_rate'):,.0f} calls/s untraced): "
          f"monitor {med('full_mon'):.3f} (per CPU s {med('full_mon_cpu'):.3f}), record {med('full_rec'):.3f} "
          f"(per CPU s {med('full_rec_cpu'):.3f}); bystander dd bs=1: monitor {med('dd_mon'):.3f} "
          f"(per CPU s {med('dd_mon_cpu'):.3f}), record {med('dd_rec'):.3f} (per CPU s {med('dd_rec_cpu'):.3f}); "
          f"events lost {sum(r['lost'] for r in rows)}; the monitor's BPF programs ran {med('bpf_share') * 100:.3f}% "
          f"of one CPU while dd ran (every task's context switches included)")
    print(f"full rate, monitor/record in the same pair (medians): throughput {med('mon_rec'):.3f}, calls per CPU "
          f"second {med('mon_rec_cpu'):.3f} (above 1: the monitor costs the workload less)")
    if args.interleave:
        def allmed(k):
            return statistics.median(x for r in rows for x in r[k])

        mr = sorted(x for r in rows for x in r["il_mon_rec"])
        per_load = " ".join(f"{statistics.median(r['il_mon_rec']):.3f}" for r in rows)
        print(f"interleaved at full rate ({len(mr)} rounds of 100,000 calls in {len(rows)} loads of both; untraced "
              f"{statistics.median(r['il_rate'] for r in rows):,.0f} calls/s; medians of the rounds): monitor "
              f"{allmed('il_mon'):.3f}, record {allmed('il_rec'):.3f} of untraced; monitor/record throughput "
              f"{allmed('il_mon_rec'):.3f} (rounds {mr[0]:.3f}-{mr[-1]:.3f}; {sum(x >= 1 for x in mr)} of {len(mr)} "
              f"at or above 1), per CPU second {allmed('il_mon_rec_cpu'):.3f}; monitor/record per load: {per_load}")
    print(f"own cost at full rate (medians): monitor {med('mon_cpu'):.2f} CPU s per million calls in its own "
          f"process, its BPF programs {med('mon_bpf'):.0f} ns per call; record {med('rec_cpu'):.2f} CPU s per "
          f"million calls, BPF {med('rec_bpf'):.0f} ns per call; load average {loadavg()}")


if __name__ == "__main__":
    main()
