"""Monitor soak: the monitor (probes, metrics collector, flight buffer, captures) traces two
scratch ext4 filesystems while a mixed metadata load (create, 2 x setxattr, unlink; a 4 KiB
write and an fsync every 100 files) runs on both, paced at --rate calls/s in all:

- fast: an unthrottled 512 MiB ext4 (64 MiB journal) takes --rate minus --stall-rate calls/s
  (the bulk of the rate, which a throttled device could not sustain);
- slow: a 256 MiB ext4 with an 8 MiB journal and 128-byte inodes on a device throttled to
  --write-iops takes --stall-rate calls/s, so stalls, captures and checkpoints happen too.

Every --every seconds: the monitor's RSS, a scrape's duration (the whole /metrics text),
events lost, the load's achieved calls/s in the interval and the operations the monitor saw.
Prints the series and a summary: the achieved rate, RSS at the end against RSS after --warmup
seconds, the scrape time's median and maximum, events lost, the monitor's CPU seconds and its
BPF programs' run time, the load average. Needs root.

usage: monitor_soak.py [--minutes M] [--rate CALLS_PER_S] [--stall-rate CALLS_PER_S]
                       [--every S] [--warmup S] [--write-iops N]
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import cpu_seconds, loadavg, parser, rss_kib

# The load: paced at RATE calls/s for SECONDS; its cumulative calls are written to PROGRESS
# twice a second (the soak reads the achieved rate of each interval from it).
PACED = r"""
import os, sys, time
d, rate, seconds, progress = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
os.makedirs(d, exist_ok=True)
v = b"v" * 16
calls, i, shown = 0, 0, 0.0
t0 = time.perf_counter()
while True:
    now = time.perf_counter() - t0
    if now >= seconds:
        break
    if now - shown >= 0.5:
        with open(progress + ".tmp", "w") as f:
            f.write(str(calls))
        os.replace(progress + ".tmp", progress)
        shown = now
    if calls > now * rate:
        time.sleep(0.001)
        continue
    p = os.path.join(d, f"f{i % 2000}")
    fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
    if i % 100 == 0:
        os.write(fd, b"x" * 4096); os.fsync(fd); calls += 2
    os.close(fd)
    os.setxattr(p, "user.a", v); os.setxattr(p, "user.b", v); os.unlink(p)
    calls += 4; i += 1
print(calls, time.perf_counter() - t0)
"""


def progress(path):
    try:
        with open(path) as f:
            return int(f.read() or 0)
    except (OSError, ValueError):
        return 0


def main():
    ap = parser(__doc__)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--rate", type=float, default=20000, help="calls/s in all (default 20,000)")
    ap.add_argument("--stall-rate", type=float, default=4000,
                    help="of which on the throttled small-journal filesystem (default 4,000)")
    ap.add_argument("--every", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=120)
    ap.add_argument("--write-iops", type=int, default=3000, help="the slow device's write limit (default 3000)")
    args = ap.parse_args()
    if not 0 < args.stall_rate < args.rate:
        ap.error("--stall-rate must be above 0 and below --rate")

    from prometheus_client import CollectorRegistry, generate_latest

    from jstall.monitor.capture import Captures
    from jstall.monitor.collector import MonitorCollector
    from jstall.monitor.tracer import MonitorOptions, Tracer
    from jstall.workloads.scratch import FsConfig, ScratchFs

    seconds = args.minutes * 60
    fast_cfg = FsConfig(fs_size="512M", journal_size="64M", inode_size=128)
    slow_cfg = FsConfig(fs_size="256M", journal_size="8M", inode_size=128, write_iops=args.write_iops)
    load_start = loadavg()
    with ScratchFs(fast_cfg) as fast, ScratchFs(slow_cfg) as slow, tempfile.TemporaryDirectory() as tmp:
        caps = os.path.join(tmp, "captures")
        t = Tracer(MonitorOptions(devices=[fast.mountpoint, slow.mountpoint])).start()
        c = Captures(t, caps, trigger_ms=100, max_captures=5, max_disk=64 << 20, min_interval_s=30)
        reg = CollectorRegistry(auto_describe=False)
        reg.register(MonitorCollector(t, c))
        loads = {}
        for name, fs, rate in (("fast", fast, args.rate - args.stall_rate), ("slow", slow, args.stall_rate)):
            prog = os.path.join(tmp, f"{name}.progress")
            args_ = [sys.executable, "-c", PACED, os.path.join(fs.mountpoint, "soak"), str(rate), str(seconds), prog]
            loads[name] = (subprocess.Popen(args_, stdout=subprocess.PIPE, text=True), prog)
        print(f"conditions: {os.cpu_count()} CPUs shared with other work (load average {load_start} at the start); "
              f"{args.minutes:g} min of create, 2 x setxattr, unlink (a write and an fsync every 100 files) paced at "
              f"{args.rate:,.0f} calls/s: {args.rate - args.stall_rate:,.0f} on an unthrottled ext4 {fast_cfg.fs_size} "
              f"({fast_cfg.journal_size} journal, device {fast.dev}), {args.stall_rate:,.0f} on an ext4 "
              f"{slow_cfg.fs_size} with a {slow_cfg.journal_size} journal, 128-byte inodes, {slow_cfg.write_iops} "
              f"write IOPS (device {slow.dev})")
        print(f"{'t s':>6} {'RSS MiB':>8} {'scrape ms':>9} {'lost':>5} {'calls/s':>8} {'ops/s':>7} {'cpu %':>6} "
              f"{'stalls':>6} {'captures':>8} {'forced cp':>9}")
        series, t0 = [], time.monotonic()
        cpu0 = cpu_seconds()
        prev = (t0, 0, 0, cpu0)
        while any(p.poll() is None for p, _ in loads.values()):
            time.sleep(args.every)
            s0 = time.perf_counter()
            text = generate_latest(reg)
            scrape = time.perf_counter() - s0
            now, cpu = time.monotonic(), cpu_seconds()
            calls = sum(progress(prog) for _, prog in loads.values())
            ops = sum(v[0] for v in t.call_stats().values())
            lost = sum(t.events_lost().values()) + t.flight_dropped
            forced = sum(s.checkpoints["forced"] for s in t.states.values())
            dt = now - prev[0]
            rate, op_rate, cpu_share = (calls - prev[1]) / dt, (ops - prev[2]) / dt, (cpu - prev[3]) / dt
            prev = (now, calls, ops, cpu)
            el = now - t0
            series.append({"t": el, "rss": rss_kib() * 1024, "scrape": scrape, "lost": lost, "rate": rate})
            print(f"{el:>6.0f} {series[-1]['rss'] / 2**20:>8.1f} {scrape * 1e3:>9.1f} {lost:>5} {rate:>8,.0f} "
                  f"{op_rate:>7,.0f} {cpu_share * 100:>6.1f} {sum(t.stalls.values()):>6} {c.counts['written']:>8} "
                  f"{forced:>9}  ({len(text)} bytes)", flush=True)
        done = {}
        for name, (p, _) in loads.items():
            n, secs = p.communicate()[0].split()
            done[name] = (int(n), float(secs))
        cpu_total = cpu_seconds() - cpu0
        bpf = sum(s for s, _ in t.bpf_run().values())
        stalls, forced = sum(t.stalls.values()), sum(s.checkpoints["forced"] for s in t.states.values())
        elapsed = time.monotonic() - t0
        c.finish()
        t.stop()
        lost_total = sum(t.last_lost.values()) + t.flight_dropped
    warm = [r for r in series if r["t"] >= args.warmup] or series[:1]
    scr = [r["scrape"] for r in series]
    rates = [r["rate"] for r in warm[1:]] or [r["rate"] for r in series]
    achieved = sum(n for n, _ in done.values()) / max(s for _, s in done.values())
    print(f"\nload achieved {achieved:,.0f} calls/s in all (fast {done['fast'][0] / done['fast'][1]:,.0f}, slow "
          f"{done['slow'][0] / done['slow'][1]:,.0f}); per {args.every:g} s interval after {args.warmup:g} s: median "
          f"{statistics.median(rates):,.0f}, min {min(rates):,.0f}")
    print(f"RSS after {args.warmup:g} s {warm[0]['rss'] / 2**20:.1f} MiB, "
          f"at the end {series[-1]['rss'] / 2**20:.1f} MiB "
          f"({(series[-1]['rss'] / warm[0]['rss'] - 1) * 100:+.1f}%; max after {args.warmup:g} s "
          f"{max(r['rss'] for r in warm) / 2**20:.1f} MiB); scrape median {statistics.median(scr) * 1e3:.1f} ms, max "
          f"{max(scr) * 1e3:.1f} ms; events lost {lost_total}; {stalls:,} stalls, {c.counts['written']} captures, "
          f"{forced} forced checkpoints")
    print(f"the monitor's CPU {cpu_total:.1f} s ({cpu_total / elapsed * 100:.2f}% of one CPU, scrapes included); its "
          f"BPF programs ran {bpf:.1f} s (estimated from the statistics windows, "
          f"{bpf / elapsed * 100:.2f}% of one CPU); load average {load_start} at the start, {loadavg()} at the end")


if __name__ == "__main__":
    main()
