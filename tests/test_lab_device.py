"""The emulated device on real loop devices: every request is paced under its profile (read
back from the lower device's own counters, /sys/block/*/stat), phases are timed until their
work is durable, and the lab records what the device served."""

import json
import os
import random

import pytest

from jstall.analyzer.session.load import load_session
from jstall.devstats import DeviceSampler
from jstall.workloads.lab import LabConfig, run_lab
from jstall.workloads.scratch import FsConfig, ScratchFs

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]

LIMIT = 500  # write IOPS
SLICE_S = 0.1  # blk-throttle's slice (DFL_THROTL_SLICE_HD)


def _burst(scratch_dir, mode, files=1500, updates=2500):
    """128-byte inodes (each file's attribute in its own block), a 4 MiB journal: random
    setxattr updates log and checkpoint scattered metadata blocks and nothing else. Returns
    the lower device's writes per 0.5 s interval [(seconds, writes)] from the burst's start
    until its work is durable."""
    cfg = FsConfig(fs_size="64M", journal_size="4M", inode_size=128, write_iops=LIMIT, throttle_mode=mode)
    with ScratchFs(cfg, scratch_dir=scratch_dir) as fs:
        d = os.path.join(fs.mountpoint, "d")
        os.mkdir(d)
        for i in range(files):
            p = os.path.join(d, f"f{i}")
            open(p, "w").close()
            os.setxattr(p, "user.a", b"%016d" % i)
        fs.sync()
        fs.wait_idle()
        sampler = DeviceSampler(fs.emulated_devices(), 0.5).start()
        rng = random.Random(1)
        for u in range(updates):
            os.setxattr(os.path.join(d, f"f{rng.randrange(files)}"), "user.a", b"u%015d" % u)
        fs.sync()
        fs.wait_idle()
        rows = sampler.stop()
    assert set(rows["role"]) == {"data"}
    return [(ns / 1e9, w + m) for ns, w, m in zip(rows["interval_ns"], rows["write_ios"], rows["write_merges"])]


def _windows(intervals, n=2):
    """Rates (per second) over every n consecutive full intervals."""
    full = intervals[:-1]  # the last one is cut short by stop()
    return [sum(w for _, w in full[i:i + n]) / sum(s for s, _ in full[i:i + n]) for i in range(len(full) - n + 1)]


@pytest.mark.timed   # "never silent" needs the CPUs to feed the device: beside the guests a 0.5 s went unfed
def test_a_metadata_burst_is_paced_by_the_stacked_device(scratch_dir):
    """No 1-s window more than 5% over the limit (the first two a throttle slice's worth more),
    and no silence in the middle: every 0.5 s of the burst the device serves a good part of
    its share (at least half: a busy machine may feed it late, but never leaves it silent).
    The single throttled loop device (--throttle-mode direct) fails the same check: metadata
    passes in bursts, then nothing."""
    stacked = _burst(scratch_dir, "stacked")
    writes = sum(w for _, w in stacked)
    assert writes >= 1500, stacked                       # scattered checkpoint writes, one request each
    rates = _windows(stacked)
    # blk-throttle rounds the time since its slice began up to a whole slice (100 ms:
    # tg_within_iops_limit), so as the burst starts a slice's worth goes through at once: in
    # the first 0.5 s interval or, when the burst began late in it, the second, which the
    # first two 1-s windows share
    assert len(rates) >= 4 and max(rates[:2]) <= 1.05 * LIMIT + SLICE_S * LIMIT, stacked
    assert max(rates[2:]) <= 1.05 * LIMIT, stacked
    middle = stacked[1:-2]
    assert middle and all(w >= 0.5 * LIMIT * s for s, w in middle), stacked  # paced: never silent

    direct = _burst(scratch_dir, "direct")
    assert max(_windows(direct)) > 1.05 * LIMIT or any(w == 0 for _, w in direct[1:-2]), direct


def test_durable_phase_timing_holds_the_phases_commits(scratch_dir, tmp_path):
    """256-byte inodes: the attributes fit in the inode, so the update phase returns before
    jbd2 commits anything; its durable window (syncfs and the device idle) holds its commits.
    The session's device_stats table says what the device served."""
    cfg = LabConfig(fs=FsConfig(fs_size="64M", journal_size="4M", inode_size=256, write_iops=2000),
                    pattern="xattr", params={"files": 500, "updates": 2000}, output_dir=str(tmp_path / "s"),
                    scratch_dir=scratch_dir)
    res = run_lab(cfg)
    s = load_session(res.session_dir)
    commits = s.jbd2_events[s.jbd2_events["event"] == "end_commit"]["ts_ns"]
    for p in s.meta["lab"]["phases"]:
        assert p["start_ns"] < p["returned_ns"] <= p["end_ns"] and p["seconds"] == p["durable_s"] >= p["returned_s"]
        inside = ((commits >= p["start_ns"]) & (commits <= p["end_ns"])).sum()
        assert inside >= 1, (p["name"], p)
        assert p["rate_per_s"] == pytest.approx(p["ops"] / p["durable_s"])
        assert p["device"]["data"]["write_ios"] >= 1
    ds = s.device_stats
    assert len(ds) >= 1 and set(ds["dev"]) == {s.meta["lab"]["filesystem"]["dev"]}
    assert set(ds["lower_dev"]) == {s.meta["lab"]["filesystem"]["lower_dev"]}
    served = s.meta["lab"]["device_served"]["data"]
    assert int(ds["write_ios"].sum()) == served["write_ios"] >= sum(p["device"]["data"]["write_ios"]
                                                                   for p in s.meta["lab"]["phases"])
    # the report shows it: one trace per kind of request, the limit drawn
    from jstall.analyzer.render import figures
    from jstall.analyzer.analysis import analyze
    from jstall.analyzer.render.report import session_report

    a = analyze(s)
    fig = figures.device_served(a)
    assert [t.name for t in fig.data] == ["data writes/s", "data reads/s", "data flushes/s", "data busy %"]
    assert sum(fig.data[0].y * (ds["interval_ns"] / 1e9)) == pytest.approx(
        int((ds["write_ios"] + ds["write_merges"]).sum()))
    assert "Emulated device: requests served and utilisation" in session_report(a)


def test_an_unrecorded_run_keeps_the_device_table_in_its_lab_metadata(scratch_dir, tmp_path):
    cfg = LabConfig(fs=FsConfig(fs_size="64M", journal_size="4M", journal_device=True, journal_write_iops=1000),
                    pattern="xattr", params={"files": 200, "updates": 200}, record=False,
                    output_dir=str(tmp_path / "r"), scratch_dir=scratch_dir)
    run_lab(cfg)
    lab = json.load(open(tmp_path / "r" / "lab.json"))
    rows = lab["device_stats"]
    assert set(rows["role"]) == {"data", "journal"} and len(rows["ts_ns"]) == len(rows["write_ios"]) >= 2
    # the external journal's device served the journal's writes, the data device the rest
    assert lab["device_served"]["journal"]["write_ios"] >= 1 and lab["device_served"]["data"]["write_ios"] >= 1
    assert lab["filesystem"]["journal_lower_dev"] in rows["lower_dev"]
