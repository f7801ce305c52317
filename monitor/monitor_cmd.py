"""`jstall monitor`: always-on tracing with Prometheus metrics and stall-triggered captures."""

DESCRIPTION = """\
Trace ext4 journals continuously at low cost and serve Prometheus metrics: per device
and operation latency histograms, stalls and stall seconds by cause, per journal fill,
headroom to the forced-checkpoint condition, commits and checkpoints. When an operation
of --trigger-ms or more completes, the seconds before and after it are written as a
session directory under --capture-dir, ready for 'jstall analyze' and 'jstall report'.

By default only fs-level tracepoints run: the handle wait (ext4_journal_start* to
jbd2_handle_start, where checkpoint and transaction waits happen) and fsync
(ext4_sync_file_enter/exit); tasks that do not journal run no probe. --syscalls traces
every metadata syscall instead, as 'jstall record' does (costlier for every task)."""

EXAMPLES = """\
examples:
    jstall monitor                                   # every ext4 and XFS, metrics on 127.0.0.1:9853
    jstall monitor -d /srv --listen :9853            # one filesystem, all interfaces
    jstall monitor --capture-dir /var/lib/jstall --trigger-ms 200 --max-disk 2G
    jstall monitor --syscalls -d 7:0                 # per-syscall latency (every syscall traced)
    curl -s localhost:9853/metrics | grep jstall_journal_headroom_ratio
    jstall top --url http://localhost:9853           # a live view of a running monitor

output: one line per stall: TIME OP LAT(ms) DEV CAUSE COMM PID"""

import signal
import sys
import threading

from jstall import kinds
from jstall.errors import JstallError
from jstall.units import parse_size

DEFAULT_LISTEN = "127.0.0.1:9853"
FLIGHT_BYTES = 128 << 20   # the flight buffer's bound (records dropped over it are counted)


def add_arguments(p):
    p.usage = ("jstall monitor [-h] [-d DEV|MOUNTPOINT]... [--listen ADDR:PORT] [--capture-dir DIR] "
               "[--trigger-ms MS] [--before S] [--after S] [--max-captures N] [--max-disk SIZE]")
    p.add_argument("-d", "--device", action="append", default=[], metavar="DEV",
                   help="monitor only this ext4 (MAJ:MIN, block device or mount point); repeatable")
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="ADDR:PORT",
                   help=f"serve /metrics and /status.json here (default {DEFAULT_LISTEN})")
    p.add_argument("--capture-dir", metavar="DIR", help="write stall-triggered sessions here (default: no captures)")
    p.add_argument("--trigger-ms", type=float, default=100.0, metavar="MS",
                   help="an operation this slow triggers a capture (default 100)")
    p.add_argument("--stall-ms", type=float, default=10.0, metavar="MS",
                   help="an operation this slow counts as a stall (default 10, as 'jstall analyze')")
    p.add_argument("--before", type=float, default=10.0, metavar="S", help="seconds kept before a trigger (default 10)")
    p.add_argument("--after", type=float, default=5.0, metavar="S", help="seconds captured after it (default 5)")
    p.add_argument("--min-interval", type=float, default=60.0, metavar="S",
                   help="at least S seconds between capture triggers (default 60)")
    p.add_argument("--max-captures", type=int, default=20, metavar="N", help="keep at most N captures (default 20)")
    p.add_argument("--max-disk", default="1G", metavar="SIZE", help="captures take at most SIZE (default 1G)")
    p.add_argument("--syscalls", action="store_true", help="trace every metadata syscall (costlier)")
    p.add_argument("--top-writers", type=int, default=5, metavar="N",
                   help="per journal, name the N cgroups that logged most in each interval, and the N that "
                        "stalled most, the rest 'other' (default 5)")
    p.add_argument("--bpf-stats", type=float, default=0.1, metavar="SHARE",
                   help="share of time BPF run-time statistics are on, for jstall_bpf_run_seconds (they add two "
                        "clock reads to every BPF program run on the host; default 0.1: 1 s in 10; "
                        "1: always; 0: never)")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    p.add_argument("-q", "--quiet", action="store_true", help="no per-stall lines")


def _check(args):
    # deferred on purpose, as in run: the server loads prometheus_client
    from .server import parse_listen

    for name in ("trigger_ms", "stall_ms", "before", "after", "min_interval"):
        if getattr(args, name) < 0:
            raise JstallError(f"--{name.replace('_', '-')} must be zero or positive")
    if not 0 <= args.bpf_stats <= 1:
        raise JstallError(f"--bpf-stats {args.bpf_stats:g}: must be a share from 0 to 1")
    if args.top_writers < 0:
        raise JstallError("--top-writers must be zero or positive")
    if args.max_captures < 1:
        raise JstallError("--max-captures must be at least 1")
    args.max_disk_bytes = parse_size(args.max_disk, "--max-disk")
    args.listen_addr = parse_listen(args.listen)


def run(args):
    # deferred on purpose: prometheus_client, and bcc, numpy and pyarrow (the tracer, the captures)
    from prometheus_client import CollectorRegistry

    from .collector import MonitorCollector
    from .server import Server
    from .tracer import MonitorOptions, Tracer

    _check(args)
    tracer = Tracer(MonitorOptions(devices=args.device, syscalls=args.syscalls, stall_ms=args.stall_ms,
                                   min_ms=min(1.0, args.stall_ms), before_s=args.before, after_s=args.after,
                                   flight_bytes=FLIGHT_BYTES if args.capture_dir else 0,
                                   bpf_stats_duty=args.bpf_stats, top_writers=args.top_writers))
    captures = None
    registry = CollectorRegistry(auto_describe=False)
    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    server = Server(args.listen_addr, registry, tracer.snapshot)
    try:
        tracer.start()
        if args.capture_dir:
            from .capture import Captures

            captures = Captures(tracer, args.capture_dir, trigger_ms=args.trigger_ms, max_captures=args.max_captures,
                                max_disk=args.max_disk_bytes, min_interval_s=args.min_interval, console=sys.stderr)
        registry.register(MonitorCollector(tracer, captures))
        if not args.quiet:
            tracer.listeners.append(_print_stall)
        server.start()
        what = ", ".join(tracer.journals) or "every ext4 and XFS"
        host, port = server.address[:2]
        traced = "ext4 journals" + (" and XFS logs" if any(kinds.is_xfs(j) for j in tracer.journals.values()) else "")
        print(f"Tracing {traced} on {what}; metrics on http://{host}:{port}/metrics"
              f"{'; captures in ' + args.capture_dir if args.capture_dir else ''}... Hit Ctrl-C to end.",
              file=sys.stderr, flush=True)
        if not args.quiet:
            print(f"{'TIME':<8} {'OP':<14} {'LAT(ms)':>9} {'DEV':>7} {'CAUSE':<17} {'COMM':<16} {'PID':>7}", flush=True)
        stop.wait(args.duration)
    finally:
        if captures is not None:
            captures.finish()     # a capture in progress is finished before detaching
        tracer.stop()
        server.stop()
        for s, h in old.items():
            signal.signal(s, h)
    lost = tracer.last_lost
    print(f"jstall monitor: detached; {sum(tracer.stalls.values())} stalls"
          + (f", {captures.counts['written']} captures written" if captures else "")
          + "; events lost: " + ", ".join(f"{k} {v}" for k, v in lost.items()), file=sys.stderr)
    return 0


def _print_stall(call):
    import time

    t = time.strftime("%H:%M:%S", time.localtime(call["wall"]))
    print(f"{t:<8} {call['op']:<14} {call['latency_s'] * 1e3:>9.1f} {call['dev']:>7} {call['cause']:<17} "
          f"{call['comm']:<16} {call['pid']:>7}", flush=True)
