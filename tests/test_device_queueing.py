"""A device's utilisation where its write limit is not known (a production host's disk): how
much of its requests' time they waited behind others, from its own counters (time_in_queue
over the requests, against the device's latency serving one at a time), not its busy time
(io_ticks), which reads near 100 % for a device serving one request at a time. Hand-built
tables, then fio on a real loop device, judged by fio's own latencies."""

import json
import math
import os
import subprocess
import time
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from jstall.analyzer.advice.remedies import utilisation
from jstall.analyzer.session.devices import device_lines, device_summary, queueing
from jstall.devstats import DeviceSampler

S = 1_000_000_000


def rows(*intervals):
    """device_stats rows of 7:0, one per (writes, queue_ms, busy_ms), 1 s each."""
    return pd.DataFrame([{"ts_ns": (i + 1) * S, "interval_ns": S, "dev": "7:0", "role": "data", "lower_dev": "8:0",
                          "read_ios": 0, "read_merges": 0, "read_sectors": 0, "write_ios": w, "write_merges": 0,
                          "write_sectors": 8 * w, "flush_ios": 0, "busy_ms": b, "queue_ms": q,
                          "in_flight_requests": 0} for i, (w, q, b) in enumerate(intervals)])


def stalls(*seconds):
    return pd.DataFrame({"dev": ["7:0"] * len(seconds), "ts_ns": [int(s * S) for s in seconds],
                         "end_ns": [int(s * S) + S // 10 for s in seconds]})


def test_requests_time_behind_others_against_the_device_serving_one_at_a_time():
    # two quiet seconds: 1,000 requests of 0.1 ms, 0.1 in flight, yet busy 900 ms (io_ticks)
    # then 1 s where 5,000 requests took 0.5 ms each, 2.5 in flight
    d = rows((1000, 100, 900), (1000, 100, 900), (5000, 2500, 990))
    q = queueing(d, np.array([False, False, True]))
    assert q["alone_ms"] == pytest.approx(0.1) and q["latency_ms"] == pytest.approx(0.5)
    assert q["util"] == pytest.approx(0.8) and q["in_flight"] == pytest.approx(2.5)
    # the quiet seconds themselves: no request waited for another, though busy 90 %
    assert queueing(d, np.array([True, True, False]))["util"] == pytest.approx(0.0)
    # a request faster than alone is no negative wait
    assert queueing(rows((1000, 100, 900), (1000, 50, 900)), np.array([False, True]))["util"] == 0.0
    # no interval served one at a time (every one had requests in flight side by side), or
    # too few requests to time: unknown
    assert queueing(rows((5000, 2500, 990)), np.array([True])) is None
    assert queueing(rows((10, 1, 10), (5000, 2500, 990)), np.array([False, True])) is None
    assert queueing(rows((1000, 100, 900)), np.array([False])) is None


def test_utilisation_without_a_limit_is_the_queue_and_busy_time_only_without_a_quiet_interval():
    session = SimpleNamespace(device_stats=rows((1000, 100, 900), (1000, 100, 900), (5000, 2500, 990)), meta={})
    u = utilisation(session, stalls(2.2), "7:0")
    assert u["util"] == pytest.approx(0.8) and u["busy"] == pytest.approx(0.99)
    assert "0.50 ms a request during the stalls against 0.10 ms served one at a time" in u["basis"]
    # a stall in a quiet second: busy 90 %, nothing queued
    u = utilisation(session, stalls(0.2), "7:0")
    assert u["util"] == pytest.approx(0.0) and u["busy"] == pytest.approx(0.9)
    busy = utilisation(SimpleNamespace(device_stats=rows((5000, 2500, 990)), meta={}), stalls(0.2), "7:0")
    assert busy["util"] == pytest.approx(0.99) and "io_ticks" in busy["basis"]
    # the lab's pace, where the session knows it, decides as before
    lab = {"lab": {"filesystem": {"throttles": {"8:0": {"write_iops": 10000}}}}}
    paced = utilisation(SimpleNamespace(device_stats=session.device_stats, meta=lab), stalls(2.2), "7:0")
    assert paced["util"] == pytest.approx(0.5) and paced["limit_writes_per_s"] == 10000


def test_the_device_line_says_how_much_of_the_requests_time_was_queued_where_no_limit_is_known():
    d = rows((1000, 100, 900), (1000, 100, 900), (5000, 2500, 990))
    (r,) = device_summary(SimpleNamespace(device_stats=d, meta={}), stalls(2.2)).to_dict("records")
    assert r["queued_pct_in_stalls"] == pytest.approx(80.0)
    assert ("requests 80% of their time behind others (0.50 ms each against 0.10 ms served one at a time)"
            in device_lines([r])[0])
    lab = {"lab": {"filesystem": {"throttles": {"8:0": {"write_iops": 10000}}}}}
    (p,) = device_summary(SimpleNamespace(device_stats=d, meta=lab), stalls(2.2)).to_dict("records")
    assert "behind others" not in device_lines([p])[0] and "of its limit" in device_lines([p])[0]
    (n,) = device_summary(SimpleNamespace(device_stats=rows((5000, 2500, 990)), meta={}),
                          stalls(0.2)).to_dict("records")
    assert math.isnan(n["queued_pct_in_stalls"]) and "behind others" not in device_lines([n])[0]


def _fio(dev, depth, rate=None):
    cmd = ["fio", "--name", "q", "--filename", dev, "--rw=randwrite", "--bs=4k", "--direct=1",
           "--ioengine=libaio", "--time_based", "--runtime=4", f"--iodepth={depth}", "--output-format=json"]
    if rate:
        cmd.append(f"--rate_iops={rate}")
    t0 = time.monotonic_ns()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    w = json.loads(out)["jobs"][0]["write"]
    return t0, time.monotonic_ns(), w["iops"], w["lat_ns"]["mean"] / 1e6


@pytest.mark.kernel
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_a_real_devices_queueing_agrees_with_fios_own_latencies(scratch_dir):
    """fio writes 4 KiB at random to a loop device over a file (direct I/O): one request at a
    time, then 32 at once, then 32 at once held to a third of that rate. In each, the share of
    a request's time spent behind others by fio's own latencies (1 - latency alone / latency)
    against jstall's from the device's counters; io_ticks said the device was busy in all."""
    os.makedirs(scratch_dir)
    image = os.path.join(scratch_dir, "q.img")
    with open(image, "wb") as f:
        f.truncate(512 << 20)
    loop = subprocess.run(["losetup", "--direct-io=on", "--show", "-f", image], check=True, capture_output=True,
                          text=True).stdout.strip()
    try:
        with open(f"/sys/block/{os.path.basename(loop)}/dev") as f:
            dev = f.read().strip()
        sampler = DeviceSampler([("data", dev, os.path.basename(loop), dev)], 0.5).start()
        try:
            alone = _fio(loop, 1)
            full = _fio(loop, 32)
            third = _fio(loop, 32, rate=max(int(full[2] / 3), 1))
        finally:
            d = pd.DataFrame(sampler.stop())
    finally:
        subprocess.run(["losetup", "-d", loop], check=True)
    end = d["ts_ns"].to_numpy()
    start = end - d["interval_ns"].to_numpy()
    got = {}
    for name, (t0, t1, iops, lat) in (("alone", alone), ("full", full), ("third", third)):
        hit = (start >= t0 + S // 2) & (end <= t1)   # past fio's start-up
        q = queueing(d, hit)
        busy = d["busy_ms"][hit].sum() / (d["interval_ns"][hit].sum() / 1e6)
        got[name] = (q["util"], max(1.0 - alone[3] / lat, 0.0), busy)
    assert got["alone"][0] < 0.25, got
    for name in ("full", "third"):
        assert abs(got[name][0] - got[name][1]) <= 0.15, got
    assert got["full"][0] >= got["alone"][0] + 0.4, got
    assert got["alone"][2] > 0.6, got   # busy time: most of the time, one request at a time
