"""Monitor soak: the monitor (probes, metrics collector, flight buffer, captures) runs while
a mixed metadata load (create, 2 x setxattr, unlink; an fsync every 100 files) is paced at
--rate calls/s on a scratch ext4 with a small throttled journal (so stalls, captures and
forced checkpoints happen too). Every --every seconds: the monitor's RSS, a scrape's
duration (the whole /metrics text) and events lost. Prints the series and a summary: RSS at
the end against RSS after --warmup seconds, the scrape time's median and maximum. Needs root.

usage: monitor_soak.py [--minutes M] [--rate CALLS_PER_S] [--every S] [--warmup S] [--write-iops N]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

PACED = r"""
import os, sys, time
d, rate, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
os.makedirs(d, exist_ok=True)
v = b"v" * 16
calls, i = 0, 0
t0 = time.perf_counter()
while True:
    now = time.perf_counter() - t0
    if now >= seconds:
        break
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
print(calls / (time.perf_counter() - t0))
"""


def rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--rate", type=float, default=20000)
    ap.add_argument("--every", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=120)
    ap.add_argument("--write-iops", type=int, default=3000, help="the device's write limit (0: unthrottled)")
    args = ap.parse_args()

    from prometheus_client import CollectorRegistry, generate_latest

    from jstall.monitor.capture import Captures
    from jstall.monitor.collector import MonitorCollector
    from jstall.monitor.tracer import MonitorOptions, Tracer
    from jstall.workloads.scratch import FsConfig, ScratchFs

    seconds = args.minutes * 60
    cfg = FsConfig(fs_size="256M", journal_size="8M", inode_size=128, write_iops=args.write_iops or None)
    with ScratchFs(cfg) as fs, tempfile.TemporaryDirectory() as caps:
        t = Tracer(MonitorOptions(devices=[fs.mountpoint])).start()
        c = Captures(t, caps, trigger_ms=100, max_captures=5, max_disk=64 << 20, min_interval_s=30)
        reg = CollectorRegistry(auto_describe=False)
        reg.register(MonitorCollector(t, c))
        load = subprocess.Popen([sys.executable, "-c", PACED, os.path.join(fs.mountpoint, "soak"), str(args.rate),
                                 str(seconds)], stdout=subprocess.PIPE, text=True)
        print(f"conditions: {os.cpu_count()} CPUs shared with other work; {args.minutes:g} min at {args.rate:,.0f} "
              f"calls/s paced; ext4 {cfg.fs_size} with a {cfg.journal_size} journal, 128-byte inodes, "
              f"{cfg.write_iops} write IOPS")
        print(f"{'t s':>6} {'RSS MiB':>8} {'scrape ms':>9} {'lost':>5} {'stalls':>6} {'captures':>8} {'forced cp':>9}")
        series, t0 = [], time.monotonic()
        while load.poll() is None:
            time.sleep(args.every)
            s0 = time.perf_counter()
            text = generate_latest(reg)
            scrape = time.perf_counter() - s0
            lost = sum(t.events_lost().values()) + t.flight_dropped
            forced = sum(s.checkpoints["forced"] for s in t.states.values())
            el = time.monotonic() - t0
            series.append((el, rss_bytes(), scrape, lost))
            print(f"{el:>6.0f} {rss_bytes() / 2**20:>8.1f} {scrape * 1e3:>9.1f} {lost:>5} {sum(t.stalls.values()):>6} "
                  f"{c.counts['written']:>8} {forced:>9}  ({len(text)} bytes)", flush=True)
        rate = float(load.communicate()[0])
        c.finish()
        t.stop()
    warm = [r for e, r, _, _ in series if e >= args.warmup] or [series[0][1]]
    scr = [s for _, _, s, _ in series]
    print(f"\nload achieved {rate:,.0f} calls/s; RSS after {args.warmup:g} s {warm[0] / 2**20:.1f} MiB, at the end "
          f"{series[-1][1] / 2**20:.1f} MiB ({(series[-1][1] / warm[0] - 1) * 100:+.1f}%); scrape median "
          f"{statistics.median(scr) * 1e3:.1f} ms, max {max(scr) * 1e3:.1f} ms; events lost {series[-1][3]}")


if __name__ == "__main__":
    main()
