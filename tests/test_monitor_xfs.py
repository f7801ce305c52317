"""`jstall monitor` on a real XFS whose small log makes reservations wait for log space
(a paced loop device), scraped by a real Prometheus: the log's size, its headroom and the
kernel's own counters of log-space sleeps are exposed, equal to /sys/fs/xfs's."""

import os
import signal
import subprocess
import sys
import time

import pytest

from jstall import xfs
from jstall.workloads.scratch import FsConfig, ScratchFs
from test_monitor_kernel import free_port, get, one, sample, wait_for
from test_record_xfs import CREATE, XFS

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]

JSTALL = os.path.join(os.path.dirname(sys.executable), "jstall")


def test_monitor_exposes_an_xfs_logs_sleeps_and_headroom(tmp_path, scratch_dir):
    port_m, port_p = free_port(), free_port()
    prom_dir = tmp_path / "prom"
    prom_dir.mkdir()
    (prom_dir / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s}\n"
        f"scrape_configs:\n- job_name: jstall\n  static_configs: [{{targets: ['127.0.0.1:{port_m}']}}]\n")
    procs = {}
    try:
        with ScratchFs(FsConfig(**XFS), scratch_dir=scratch_dir) as fs:
            name, dev = xfs.sysfs_name(fs.device), fs.dev
            procs["prom"] = subprocess.Popen(
                ["prometheus", f"--config.file={prom_dir / 'prometheus.yml'}", f"--storage.tsdb.path={prom_dir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{port_p}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs["mon"] = subprocess.Popen([JSTALL, "monitor", "-q", "-d", fs.mountpoint, "--listen",
                                             f"127.0.0.1:{port_m}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                            text=True)
            url = f"http://127.0.0.1:{port_m}/metrics"
            wait_for(lambda: "jstall_xfs_log_size_bytes" in get(url), 120, "the monitor")
            wait_for(lambda: one(port_p, f'up{{instance="127.0.0.1:{port_m}"}}') == 1, 60, "the first scrape")
            before = xfs.read_stats(name)
            subprocess.run([sys.executable, "-c", CREATE, fs.mountpoint, "30000"], check=True, timeout=900)
            after = xfs.read_stats(name)
            scrape = get(url)
            sleeps = xfs.counter(xfs.stats_delta(before, after), "xs_sleep_logspace")
            total = sample(scrape, "jstall_xfs_log_space_sleeps_total", device=dev)
            q = f'jstall_xfs_log_space_sleeps_total{{device="{dev}"}}'
            wait_for(lambda: one(port_p, q) == total, 30, "Prometheus to scrape")
            prom = {
                "sleeps": one(port_p, f"increase({q}[10m])"),
                "size": one(port_p, f'jstall_xfs_log_size_bytes{{device="{dev}"}}'),
                "headroom_min": one(port_p, f'min_over_time(jstall_xfs_log_headroom_ratio{{device="{dev}"}}[10m])'),
                "pinned": one(port_p, f'jstall_xfs_ail_pushed_items_total{{device="{dev}",result="pinned"}}'),
            }
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
    path = tmp_path / "scrape.txt"
    path.write_text(scrape)
    with open(path) as f:
        r = subprocess.run(["promtool", "check", "metrics"], stdin=f, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
