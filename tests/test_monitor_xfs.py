"""`jstall monitor` on a real XFS whose small log makes reservations wait for log space
(a paced loop device), scraped by a real Prometheus: the log's size, its headroom and the
kernel's own counters of log-space sleeps are exposed, equal to /sys/fs/xfs's; the waits its
probes timed hold exactly the kernel's sleeps, and the long ones are stalls caused by log space."""

import os
import signal
import subprocess
import sys
import time

import pytest

from jstall import xfs
from jstall.analyzer.analysis import analyze
from jstall.monitor.capture import list_captures
from jstall.workloads.scratch import FsConfig, ScratchFs
from conftest import SLOWDOWN
from test_monitor_kernel import (check_alert_rules, free_port, get, one, prometheus_dir, query_range, sample,
                                 stall_rates, start_prometheus, wait_for)
from test_record_xfs import CREATE, XFS

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]

JSTALL = os.path.join(os.path.dirname(sys.executable), "jstall")


def test_monitor_exposes_an_xfs_logs_sleeps_and_headroom(tmp_path, scratch_dir):
    port_m, port_p = free_port(), free_port()
    prom_dir = prometheus_dir(tmp_path, port_m, rules=False)
    procs = {}
    try:
        with ScratchFs(FsConfig(**XFS), scratch_dir=scratch_dir) as fs:
            name, dev = xfs.sysfs_name(fs.device), fs.dev
            procs["prom"] = start_prometheus(prom_dir, port_p)
            procs["mon"] = subprocess.Popen([JSTALL, "monitor", "-q", "-d", fs.mountpoint, "--listen",
                                             f"127.0.0.1:{port_m}", "--capture-dir", str(tmp_path / "caps"),
                                             "--trigger-ms", "20", "--before", "2", "--after", "1"],
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            url = f"http://127.0.0.1:{port_m}/metrics"
            wait_for(lambda: "jstall_xfs_log_size_bytes" in get(url), 120, "the monitor")
            wait_for(lambda: one(port_p, f'up{{instance="127.0.0.1:{port_m}"}}') == 1, 60, "the first scrape")
            before, w0 = xfs.read_stats(name), time.time()
            subprocess.run([sys.executable, "-c", CREATE, fs.mountpoint, "30000"], check=True, timeout=900)
            after = xfs.read_stats(name)
            scrape = get(url)
            sleeps = xfs.counter(xfs.stats_delta(before, after), "xs_sleep_logspace")
            total = sample(scrape, "jstall_xfs_log_space_sleeps_total", device=dev)
            q = f'jstall_xfs_log_space_sleeps_total{{device="{dev}"}}'
            wait_for(lambda: one(port_p, q) == total, 30, "Prometheus to scrape")
            def value(name, **labels):
                try:
                    return sample(scrape, name, **labels)
                except KeyError:   # no such series (yet)
                    return 0

            waits = {
                "sleeps": value("jstall_xfs_log_wait_sleeps_total", device=dev),
                "count": sum(value("jstall_xfs_log_wait_seconds_count", device=dev, head=h)
                             for h in xfs.HEADS),
                "seconds": sum(value("jstall_xfs_log_wait_seconds_sum", device=dev, head=h)
                               for h in xfs.HEADS),
                "tail_seconds": sum(value("jstall_xfs_log_tail_wait_seconds_total", device=dev, tail=r)
                                    for r in xfs.TAIL_REASONS),
                "stall_seconds": value("jstall_stall_seconds_total", device=dev, cause="log_space"),
                "stalls": sum(value("jstall_stalls_total", device=dev, op=op, cause="log_space")
                              for op in ("xfs_log_reserve", "xfs_log_regrant")),
            }
            prom = {
                "sleeps": one(port_p, f"increase({q}[10m])"),
                "size": one(port_p, f'jstall_xfs_log_size_bytes{{device="{dev}"}}'),
                "headroom_min": one(port_p, f'min_over_time(jstall_xfs_log_headroom_ratio{{device="{dev}"}}[10m])'),
                "pinned": one(port_p, f'jstall_xfs_ail_pushed_items_total{{device="{dev}",result="pinned"}}'),
            }
            # the run's series as Prometheus scraped them, for the alert rules' test
            series = {n: query_range(port_p, f'{n}{{device="{dev}"}}', w0 - 2, time.time())
                      for n in ("jstall_xfs_log_space_sleeps_total", "jstall_stall_seconds_total")}
            wait_for(lambda: list_captures(str(tmp_path / "caps")), 60, "a capture of a log-space wait")
            procs["mon"].send_signal(signal.SIGINT)
            err = procs["mon"].communicate(timeout=120)[1]
            assert procs["mon"].returncode == 0, err
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    assert sleeps >= 5
    # the counter is the kernel's: since the monitor started it grew by the workload's sleeps
    assert total == xfs.counter(after, "xs_sleep_logspace")
    assert prom["sleeps"] >= 0.9 * sleeps, (prom, sleeps)
    assert prom["size"] == 8 << 20
    # the log ran short while reservations slept: its headroom fell well below an empty log's
    assert 0 <= prom["headroom_min"] < 0.5, prom
    assert prom["pinned"] >= 0
    # every waiting task was traced: the timed waits hold the kernel's sleeps
    assert waits["sleeps"] == sleeps, (waits, sleeps)
    assert 1 <= waits["count"] <= sleeps
    assert waits["tail_seconds"] == pytest.approx(waits["seconds"], rel=1e-6)
    # the long waits are the monitor's stalls on this log, their time the log-space stall time
    assert waits["stalls"] >= 1 and 0 < waits["stall_seconds"] <= waits["seconds"] + 1e-9, waits
    # a long wait triggered a capture: a session analyze explains as a wait for log space
    cap = analyze(list_captures(str(tmp_path / "caps"))[0])
    trig = cap.session.meta["capture"]["trigger"]
    assert trig["op"] in ("xfs_log_reserve", "xfs_log_regrant") and trig["cause"] == "log_space", trig
    assert len(cap.xfs_waits) >= 1 and set(cap.xfs_waits["dev"].astype(str)) == {dev}
    assert cap.to_dict()["xfs_logs"][0]["waits"] == len(cap.xfs_waits)
    path = tmp_path / "scrape.txt"
    path.write_text(scrape)
    with open(path) as f:
        r = subprocess.run(["promtool", "check", "metrics"], stdin=f, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    if SLOWDOWN == 1:   # an emulated guest's rates are not wall-clock
        _alerts_fire_on_the_run_and_resolve(series, tmp_path)


def _alerts_fire_on_the_run_and_resolve(series, tmp_path):
    """promtool test rules on the shipped rules, fed the run's scraped series replayed for 12
    minutes as if the workload went on, then 12 minutes stopped: JstallXfsLogSpaceWaits fires
    on the run's log, and JstallStallTimeHigh on log_space when its stall seconds per second are
    clear of the rule's 0.05; 12 minutes after the run neither fires."""
    sleeps = series["jstall_xfs_log_space_sleeps_total"]
    assert len(sleeps) == 1, series
    labels, points = sleeps[0]
    start = min(points)
    end = max(t for t in points if points[t] == max(points.values()))
    cycle = max(end - start + 2, 10)
    stall = stall_rates([(lab, pts) for lab, pts in series["jstall_stall_seconds_total"]
                         if lab.get("cause") == "log_space"], start, cycle)
    during = {"JstallXfsLogSpaceWaits": [labels]}
    if stall:
        during["JstallStallTimeHigh"] = [{k: lab[k] for k in ("instance", "device", "cause")}
                                         for lab, _, rate in stall if rate >= 0.1]
    after = {name: [] for name in during}
    check_alert_rules(tmp_path, [(labels, points, None)] + [(lab, pts, None) for lab, pts, _ in stall], start, cycle,
                      during, after)
