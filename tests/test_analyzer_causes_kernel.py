"""Causes recognised in real runs, and the journal-size model checked against the lab.

Each cause test records a small workload made to stall one way on a loop-device ext4 and
asserts that the analyzer names that cause for at least 80% of the run's stall time (the
checkpoint case is in test_analyzer_kernel.py).  The model test runs a workload on a journal
too small for it (on the lab's paced device, 2,000 write IOPS, as lab tune and make demo),
takes the recommended size and checks in the lab that it is within [1x, 2x] of the smallest
journal with no forced checkpoint: the recommended size is clean, and the largest whole-MiB
size below half of it is not (in one of two runs)."""

import json
import math
import os
import subprocess
import sys

import pytest

from conftest import SLOWDOWN
from jstall.analyzer import analyze

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]

HERE = os.path.dirname(os.path.abspath(__file__))
JSTALL = os.path.join(os.path.dirname(sys.executable), "jstall")
SECONDS = 2.0


def record(out, cfg, case, scratch_dir, calls=None, prefix=(), setup=None, min_ms=1, seconds=SECONDS):
    """Record cause_workloads.py CASE on a scratch filesystem; ``setup(fs)`` may return an
    undo function run before the filesystem goes away."""
    from jstall.workloads.scratch import ScratchFs

    with ScratchFs(cfg, scratch_dir=scratch_dir) as fs:
        undo = setup(fs) if setup else None
        try:
            cmd = [JSTALL, "record", "-q", "-o", out, "--min-ms", str(min_ms)] + (["--calls", calls] if calls else [])
            proc = subprocess.run(cmd + ["--", *prefix, sys.executable, os.path.join(HERE, "cause_workloads.py"), case,
                                         os.path.join(fs.mountpoint, "d"), str(seconds)],
                                  capture_output=True, text=True, timeout=120)
        finally:
            if undo:
                undo()
    assert proc.returncode == 0, proc.stderr
    return analyze(out, min_ms=min_ms)


def shares(a):
    st = a.to_dict()["stalls"]
    assert st["count"] >= 3, st
    return {c: v["total_ms"] / st["total_ms"] for c, v in st["by_cause"].items()}


def native_timing():
    """The share of each wait in stall time is a timing: in an emulated guest (tests/conftest.py
    SLOWDOWN) the CPU runs ~20x slower than the emulated devices' pacing, so those shares are
    the emulator's, not the kernel's. (Measured in Debian 6.1's guest: commit_wait 0.59,
    data_writeback 0.74, device_flush 0.72 of stall time.)"""
    if SLOWDOWN != 1:
        pytest.skip("emulated guest: CPU time runs ~20x slow, so each wait's share of stall time is not the kernel's")


def cfg(**kw):
    from jstall.workloads.scratch import FsConfig

    return FsConfig(fs_size="256M", journal_size="64M", **kw)


def test_commit_wait_fsync_loop_on_a_big_journal(tmp_path, scratch_dir):
    native_timing()
    a = record(str(tmp_path / "s"), cfg(), "commit_wait", scratch_dir)
    sh = shares(a)
    assert sh["commit_wait"] >= 0.8, str(sh)
    assert sh["checkpoint"] == 0
    assert {r.kind for r in a.recommendations} >= {"fast_commit"}


def test_data_writeback_write_then_fsync(tmp_path, ram_scratch_dir):
    native_timing()
    # the image on a tmpfs: each fsync also commits (the file's mtime), and a commit's cache
    # flush on an image under /var/tmp waits for the host disk (conftest.ram_scratch_dir)
    a = record(str(tmp_path / "s"), cfg(write_bps=20 << 20), "data_writeback", ram_scratch_dir)
    sh = shares(a)
    assert sh["data_writeback"] >= 0.8, str(sh)
    labels = set(a.stalls.loc[a.stalls["cause"] == "data_writeback", "cause_label"])
    assert labels == {"folio_wait_writeback"}, labels
    assert a.recommendations[0].kind == "data_writeback"


def test_device_flush_fdatasync_without_a_commit(tmp_path, scratch_dir):
    native_timing()
    # a device at 500 write IOPS, whose cache flushes take milliseconds: on the bare loop
    # device most flushes finish under the 1 ms threshold, and the few stalls left were
    # as often a thread's time on the CPU
    # (stalls from 0.5 ms: flushes of 1 ms or more came 2 in 6 s in some runs, and shares()
    # wants 3 stalls)
    a = record(str(tmp_path / "s"), cfg(write_iops=500), "device_flush", scratch_dir, min_ms=0.5)
    sh = shares(a)
    assert sh["device_flush"] >= 0.8, str(sh)
    labels = set(a.stalls.loc[a.stalls["cause"] == "device_flush", "cause_label"])
    assert labels == {"blkdev_issue_flush"}, labels
    assert a.recommendations[0].kind == "device_flush"


def _strict_bdi_limit(fs, max_bytes=4 << 20):
    """A strict 4 MiB dirty limit on the scratch device's bdi only; returns the undo."""
    base = f"/sys/class/bdi/{fs.dev}"
    if not os.path.exists(f"{base}/strict_limit"):
        pytest.skip(f"kernel {os.uname().release} has no {base}/strict_limit (a bdi's strict_limit and max_bytes "
                    "came with 6.2): no per-device strict dirty limit to throttle against")
    old = {k: open(f"{base}/{k}").read().strip() for k in ("strict_limit", "max_ratio")}

    def write(k, v):
        with open(f"{base}/{k}", "w") as f:
            f.write(str(v))

    write("max_bytes", max_bytes)
    write("strict_limit", 1)

    def undo():
        write("strict_limit", old["strict_limit"])
        write("max_ratio", old["max_ratio"])

    return undo


def test_writeback_throttle_buffered_writes_under_a_strict_bdi_limit(tmp_path, scratch_dir):
    a = record(str(tmp_path / "s"), cfg(write_bps=8 << 20), "writeback_throttle", scratch_dir,
               calls="metadata,fsync,write", setup=_strict_bdi_limit)
    native_timing()
    sh = shares(a)
    assert sh["writeback_throttle"] >= 0.8, str(sh)
    w = a.stalls[a.stalls["syscall"] == "write"]
    assert w["writeback_throttle_ms"].sum() >= 0.8 * a.stalls["latency_ms"].sum()
    assert a.to_dict()["traced_calls"]["groups"] == ["metadata", "fsync", "write"]


def test_cpu_pinned_contention(tmp_path, scratch_dir):
    # with N busy loops on its CPU the writer runs about 1/(N+1) of the time: 7 make the
    # runnable (cpu) share of a write about 7/8, whatever else the machine is doing
    busy = [subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c", "while True: pass"]) for _ in range(7)]
    # this process, the recorder it starts (its compile, its reader) and the analysis on the
    # other CPUs: only the writer shares CPU 0 with the loops
    mine = os.sched_getaffinity(0)
    if len(mine - {0}):
        os.sched_setaffinity(0, mine - {0})
    try:
        a = record(str(tmp_path / "s"), cfg(), "cpu", scratch_dir, calls="write", prefix=("taskset", "-c", "0"))
    finally:
        os.sched_setaffinity(0, mine)
        for b in busy:
            b.kill()
            b.wait()
    sh = shares(a)
    assert sh["cpu"] >= 0.8, str(sh)
    assert a.recommendations[0].kind == "cpu"


# --- the journal-size model against the lab ---------------------------------------------------

XATTR = ["xattr", "--inode-size", "128", "--fs-size", "256M", "--files", "3000", "--updates", "12000"]


def lab_run(args, journal_mib, out, scratch_dir):
    proc = subprocess.run([JSTALL, "lab", "run", *args, "--journal-size", f"{journal_mib}M", "-o", out,
                           "--write-iops", "2000",
                           "--scratch", scratch_dir, "--no-progress"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return analyze(out)


def forced(a):
    return int(a.journals["forced_checkpoints"].sum())


def big_enough(a):
    """The journal was big enough (jstall.enough), as analyze, lab tune and compare judge it."""
    return bool(a.checkpoint_waits["big_enough"].all())


# fdtree is left to benchmarks/advice_accuracy.py: its waits at a stalled size (tens of ms to
# about a hundred in all) are of the order of one late forced checkpoint's (11-30 ms, present
# or not from run to run under load), so one run cannot tell its sizes apart by this bound
@pytest.mark.parametrize("args,start_mib", [(XATTR, 8)], ids=["xattr"])
def test_recommended_journal_is_within_1x_2x_of_the_measured_threshold(args, start_mib, tmp_path, scratch_dir):
    """From a run that is not big enough, the recommended journal removes 90 % or more of its
    forced-checkpoint waits, and half of it is not big enough: the threshold lies in
    [size / 2, size] (up to a single wait near 10 ms, which comes and goes between runs)."""
    a = lab_run(args, start_mib, str(tmp_path / "start"), scratch_dir)
    assert forced(a) > 0 and not big_enough(a)
    (rec,) = [r for r in a.recommendations if r.kind == "journal_size"]
    size = int(rec.journal_size_mib)
    assert rec.low_mib <= rec.high_mib <= size and rec.stall_ms_addressed > 0
    assert json.dumps(rec.to_dict())  # the numbers are JSON fields
    # one late forced checkpoint of ~12 ms comes and goes between runs of the same size:
    # the recommended size holds when one of two runs is big enough or removed 90 %
    before = float(a.checkpoint_waits["wait_ms"].sum())
    seen = []
    for i in range(2):
        at = lab_run(args, size, str(tmp_path / f"rec{i}"), scratch_dir)
        seen.append(at.checkpoint_waits.to_dict("records"))
        if big_enough(at) or float(at.checkpoint_waits["wait_ms"].sum()) <= 0.1 * before:
            break
    else:
        raise AssertionError((size, before, seen))
    # whether a size near the threshold is big enough varies from run to run (commit
    # timing): half the recommendation counts as too small when any of four runs is
    below_half = math.ceil(size / 2) - 1
    assert any(not big_enough(lab_run(args, below_half, str(tmp_path / f"half{i}"), scratch_dir)) for i in range(4)), \
        below_half
