"""Analyzer integration on the real kernel: the xattr case on a throttled loop-device ext4
with a 4 MiB journal.  128-byte inodes: the stall time is checkpointing, at or beyond the
forced-checkpoint level; 256-byte inodes: no checkpoint stalls.  Both: the analyzer agrees
with /proc/fs/jbd2/<dev>/info."""

import os
import subprocess
import sys

import pytest

from conftest import SLOWDOWN

from jstall.analyzer import analyze

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]

HERE = os.path.dirname(os.path.abspath(__file__))
JSTALL = os.path.join(os.path.dirname(sys.executable), "jstall")
FILES, UPDATES, WRITE_IOPS = 2000, 6000, 500


def record(out, inode_size):
    from jstall.workloads.scratch import FsConfig, ScratchFs

    cfg = FsConfig(fs_size="128M", journal_size="4M", inode_size=inode_size, block_size=1024, write_iops=WRITE_IOPS)
    with ScratchFs(cfg) as fs:
        mnt = fs.mountpoint
        proc = subprocess.run(
            [JSTALL, "record", "-q", "-o", out, "-d", mnt, "--", sys.executable,
             os.path.join(HERE, "xattr_workload.py"), os.path.join(mnt, "d"), str(FILES), str(UPDATES)],
            capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="module")
def small_inodes(tmp_path_factory):
    return analyze(record(str(tmp_path_factory.mktemp("i128") / "s"), 128))


@pytest.fixture(scope="module")
def large_inodes(tmp_path_factory):
    return analyze(record(str(tmp_path_factory.mktemp("i256") / "s"), 256))


def test_128_byte_inodes_stall_in_checkpoints_at_the_forced_level(small_inodes):
    a = small_inodes
    d = a.to_dict()
    st = d["stalls"]
    assert st["count"] >= 1, d
    assert d["events_lost"] == {"calls": 0, "offcpu": 0, "jbd2": 0, "home_writes": 0, "writers": 0, "skipped": 0}
    if SLOWDOWN == 1:
        assert st["by_cause"]["checkpoint"]["total_ms"] >= 0.9 * st["total_ms"], st["by_cause"]
    else:  # emulated: shares of time are the emulator's (CPU ~20x slow); the largest of the kernel's waits
        waits = {c: v["total_ms"] for c, v in st["by_cause"].items() if c != "cpu"}
        assert max(waits, key=waits.get) == "checkpoint", st["by_cause"]
    cp = a.stalls[a.stalls["cause"] == "checkpoint"]
    assert cp["own_checkpoint"].all()
    at = cp["at_forced_level"]
    assert cp.loc[at, "latency_ms"].sum() >= 0.9 * cp["latency_ms"].sum()
    # the fill the calls saw reached the computed forced level
    assert (cp["fill_max_pct"] >= cp["forced_fill_pct"] - 1.0).all(), cp[["fill_max_pct", "forced_fill_pct"]]
    # the kernel's condition: log space left below j_max_transaction_buffers, and the call waited
    f = cp[cp["forced"]]
    assert f["latency_ms"].sum() >= 0.9 * cp["latency_ms"].sum()
    assert (f["min_headroom_blocks"] < 0).all() and st["forced"]["count"] == int(a.stalls["forced"].sum())
    (j,) = d["journals"]
    assert j["forced_checkpoints"] >= 1 and j["inode_size"] == 128
    assert j["max_fill_pct"] >= j["forced_fill_pct"]
    js = [r for r in d["recommendations"] if r["kind"] == "journal_size"]
    assert js and js[0]["estimate"] and js[0]["journal_size_mib"] > 4 and js[0]["stall_ms_addressed"] > 0
    assert d["recommendations"][0]["stall_ms_addressed"] == max(r["stall_ms_addressed"] for r in d["recommendations"])


def test_256_byte_inodes_have_no_checkpoint_stalls(large_inodes):
    d = large_inodes.to_dict()
    assert d["stalls"]["by_cause"]["checkpoint"] == {"count": 0, "total_ms": 0.0}
    assert d["journals"][0]["forced_checkpoints"] == 0
    assert not any(r["kind"] == "journal_size" for r in d["recommendations"])


@pytest.mark.parametrize("case", ["small_inodes", "large_inodes"])
def test_agrees_with_proc_fs_jbd2(case, request):
    a = request.getfixturevalue(case)
    p = a.proc.set_index("metric")
    assert len(p), "the session holds no /proc/fs/jbd2 texts"
    assert p.loc["transactions", "analyzer"] == p.loc["transactions", "kernel"]
    assert p["agree"].all(), p


def test_analyze_shows_the_traced_commands_exit_status_and_wall_clock(tmp_path):
    """A real recording of git failing (exit 128, not a repository): analyze names the command,
    its exit status, the filters and the traced calls, and dates the session in wall-clock time."""
    import json
    import time

    from jstall.workloads.scratch import FsConfig, ScratchFs

    out = str(tmp_path / "s")
    with ScratchFs(FsConfig(fs_size="32M", journal_size="4M")) as fs:
        repo = os.path.join(fs.mountpoint, "repo")
        t0 = time.time()
        proc = subprocess.run(
            [JSTALL, "record", "-q", "-o", out, "-d", fs.mountpoint, "--",
             "sh", "-c", f"mkdir {repo} && git -C {repo} log"],
            capture_output=True, text=True, timeout=300, env={**os.environ, "GIT_CEILING_DIRECTORIES": fs.mountpoint})
        t1 = time.time()
        dev = fs.dev
    assert proc.returncode == 128, proc.stderr
    a = subprocess.run([JSTALL, "analyze", out, "--min-ms", "0"], capture_output=True, text=True, timeout=120)
    assert a.returncode == 0, a.stderr
    assert f"command: sh -c 'mkdir {repo} && git -C {repo} log'  -> exit status 128" in a.stdout
    assert f"filters: devices {dev}; the command and its descendants" in a.stdout
    assert "mkdir" in a.stdout.split("traced calls (", 1)[1].split("\n\n", 1)[0]
    d = json.loads(subprocess.run([JSTALL, "analyze", out, "--json"], capture_output=True, text=True,
                                  timeout=120, check=True).stdout)
    s = d["session"]
    assert s["exit_status"] == 128 and s["status"] == "complete" and s["complete"] is True
    assert s["filters"]["devices"] == [dev]
    from datetime import datetime

    start, end = datetime.fromisoformat(s["start"]).timestamp(), datetime.fromisoformat(s["end"]).timestamp()
    assert t0 - 1 <= start <= end <= t1 + 1
