"""`jstall top`: a live terminal view of ext4 journals, XFS logs and their slowest recent
operations."""

DESCRIPTION = """\
A live view, refreshed every second, of each ext4 journal: its fill and headroom to the
forced-checkpoint condition (now and its low over the last minute), blocks logged per
second, commits per second, forced checkpoints; of each XFS log: its headroom and its
log-space waits; who fills each journal (the cgroups that logged most, their share and their
stall time); and the slowest recent operations with their cause. It reads the same
data as 'jstall monitor': from its own probes (root), or from a running monitor (--url)."""

EXAMPLES = """\
examples:
    jstall top                               # every ext4 and XFS, with its own probes
    jstall top -d /srv                       # one filesystem
    jstall top --url http://127.0.0.1:9853   # a running 'jstall monitor'

keys: q quits.
columns: FILL% used log space; HEADROOM% log space left above one maximum transaction
(0: the next handle must checkpoint); LOW% its lowest in the last 60 s; LOG/s blocks logged
per second; CP forced checkpoints (in user tasks) since the monitor started. XFS logs:
HEADROOM% space left on the reserve grant head over the log's size; WAITS, WAIT(s)
reservations that waited for log space and their time, SLEEPS the kernel's sleeps in them,
since the monitor started. Who fills the journal: per journal, the cgroups whose tasks logged
most since the monitor started (blocks for ext4, bytes for XFS; the rest as other), SHARE%
of the journal's logged total, STALL(s) their tasks' off-CPU time inside stalls there."""

import json
import time
import urllib.request

from jstall.errors import JstallError


def add_arguments(p):
    p.usage = "jstall top [-h] [-d DEV]... [--url URL] [--interval S]"
    p.add_argument("-d", "--device", action="append", default=[], metavar="DEV",
                   help="show only this ext4 or XFS (MAJ:MIN, block device or mount point); repeatable (local probes)")
    p.add_argument("--url", help="read a running monitor's /status.json at URL (e.g. http://127.0.0.1:9853)")
    p.add_argument("--interval", type=float, default=1.0, metavar="S", help="refresh every S seconds (default 1)")
    p.add_argument("--stall-ms", type=float, default=10.0, metavar="MS", help="slow-call threshold (default 10; local)")


def remote_source(url):
    url = url.rstrip("/") + "/status.json"

    def fetch():
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return json.load(r)
        except (OSError, ValueError) as e:
            raise JstallError(f"--url: cannot read {url} ({e}); is 'jstall monitor' running there?") from None
    return fetch


def rates(prev, cur):
    """{dev: (log blocks/s, commits/s)} between two snapshots."""
    out = {}
    if not prev:
        return out
    dt = cur["time"] - prev["time"]
    for dev, j in cur["journals"].items():
        p = prev["journals"].get(dev)
        if p and dt > 0:
            out[dev] = ((j["blocks_logged"] - p["blocks_logged"]) / dt, (j["transactions"] - p["transactions"]) / dt)
    return out


def render(snap, prev, source, width=120, height=40):
    """The screen's lines for one snapshot."""
    lines = [f"jstall top - {time.strftime('%H:%M:%S')}  source: {source}  (q to quit)", ""]
    lines.append(f"{'DEV':<7} {'MOUNTPOINT':<28} {'BLOCKS':>7} {'FILL%':>6} {'HEADROOM%':>9} {'LOW%':>5} {'LOG/s':>7} "
                 f"{'COMMITS/s':>9} {'CP':>5} {'CP BLOCKS':>9}")
    r = rates(prev, snap)
    for dev, j in sorted(snap["journals"].items()):
        if "log_blocks" in j and j["log_blocks"]:
            fill = f"{100 * (1 - j['free_blocks'] / j['log_blocks']):6.1f}"
            head = f"{100 * j['headroom_ratio']:9.1f}"
        else:
            fill, head = f"{'-':>6}", f"{'-':>9}"
        low = f"{100 * j['headroom_low_ratio']:5.1f}" if j.get("headroom_low_ratio") is not None else f"{'-':>5}"
        lr, cr = r.get(dev, (0.0, 0.0))
        mnt = (j.get("mountpoint") or "-")[-28:]
        lines.append(f"{dev:<7} {mnt:<28} {j.get('size_blocks', 0):>7} {fill} {head} {low} {lr:>7.0f} {cr:>9.1f} "
                     f"{j['checkpoints']['forced']:>5} {j['checkpoint_written']['forced']:>9}")
    xs = snap.get("xfs_logs") or {}
    if xs:
        lines += ["", f"{'XFS LOG':<7} {'MOUNTPOINT':<28} {'SIZE(MiB)':>9} {'HEADROOM%':>9} {'WAITS':>7} "
                      f"{'WAIT(s)':>8} {'SLEEPS':>7}"]
        for dev, x in sorted(xs.items()):
            size = f"{x['log_bytes'] / (1 << 20):9.1f}" if x.get("log_bytes") else f"{'-':>9}"
            head = f"{100 * x['headroom_ratio']:9.1f}" if x.get("headroom_ratio") is not None else f"{'-':>9}"
            lines.append(f"{dev:<7} {(x.get('mountpoint') or '-')[-28:]:<28} {size} {head} {x['waits']:>7} "
                         f"{x['wait_s']:>8.2f} {x['sleeps']:>7}")
    ws = snap.get("writers") or {}
    if ws:
        lines += ["", "WHO FILLS THE JOURNAL (since the monitor started)",
                  f"{'DEV':<7} {'CGROUP':<40} {'LOGGED':>11} {'SHARE%':>6} {'STALL(s)':>8}"]
        for dev, rows in sorted(ws.items()):
            for w in rows:
                logged = f"{w['logged']:.0f} {'blk' if w['unit'] == 'blocks' else 'B'}"
                cg = w["cgroup"] if len(w["cgroup"]) <= 40 else "…" + w["cgroup"][-39:]
                lines.append(f"{dev:<7} {cg:<40} {logged:>11} {100 * w['share']:>6.1f} "
                             f"{w['stall_s']:>8.2f}")
    lost = sum(snap.get("events_lost", {}).values())
    lines += ["", f"SLOWEST RECENT CALLS{'  (events lost: %d)' % lost if lost else ''}",
              f"{'TIME':<8} {'OP':<14} {'LAT(ms)':>9} {'DEV':>7} {'CAUSE':<17} {'BLOCKED IN':<30} "
              f"{'COMM':<16} {'PID':>7}"]
    recent = sorted(snap["recent"], key=lambda c: -c["latency_s"])
    for c in recent[:max(1, height - len(lines) - 1)]:
        t = time.strftime("%H:%M:%S", time.localtime(c["wall"]))
        lines.append(f"{t:<8} {c['op']:<14} {c['latency_s'] * 1e3:>9.1f} {c['dev']:>7} {c['cause']:<17} "
                     f"{c['label'][:30]:<30} {c['comm']:<16} {c['pid']:>7}")
    if not recent:
        lines.append("(none yet)")
    return [ln[:width - 1] for ln in lines]


def run(args):
    import curses

    if args.interval <= 0:
        raise JstallError("--interval must be positive")
    tracer = None
    if args.url:
        fetch = remote_source(args.url)
        fetch()  # fail early, before the screen is taken
        source = args.url
    else:
        from .tracer import MonitorOptions, Tracer  # deferred on purpose: bcc, numpy and pyarrow

        tracer = Tracer(MonitorOptions(devices=args.device, stall_ms=args.stall_ms, min_ms=min(1.0, args.stall_ms),
                                       before_s=0, after_s=0, flight_bytes=0,
                                       bpf_stats_duty=0))
        tracer.start()
        fetch, source = tracer.snapshot, "local probes"

    def loop(scr):
        curses.curs_set(0)
        scr.timeout(int(args.interval * 1000))
        prev = None
        while True:
            snap = fetch()
            h, w = scr.getmaxyx()
            scr.erase()
            for i, line in enumerate(render(snap, prev, source, w, h)[:h]):
                scr.addstr(i, 0, line)
            scr.refresh()
            prev = snap
            if scr.getch() in (ord("q"), ord("Q")):
                return

    try:
        curses.wrapper(loop)
    except KeyboardInterrupt:
        pass
    finally:
        if tracer is not None:
            tracer.stop()
    return 0
