"""The stall time a remedy removes, checked by running it: two tenants on one small-journal
ext4 over a paced device (2 GiB, 128-byte inodes, a 4 MiB journal, 1,000 writes/s): one
rewrites an extended attribute on each of 2,000 files four times over, the other writes
4 KiB and calls fdatasync every 100 ms (tests/clients/tenant_pair.py, through `lab run
command`). analyze's headline remedy, applied, removes stall time (all causes, all tasks)
inside the interval it printed.

Measured (this machine, loaded): 2.8 s of stalls, half of them checkpoint waits and a third
fdatasync's commit waits; the headline a 37 MiB journal, 1.3-2.0 s; with it 1.1 s of stalls
(commit waits), 1.7 s removed."""

import os
import sys
import subprocess

import pytest

from jstall.analyzer.analysis import analyze

pytestmark = [pytest.mark.kernel, pytest.mark.timed, pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]

JSTALL = os.path.join(os.path.dirname(sys.executable), "jstall")
CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "clients", "tenant_pair.py")
FS = ["--fs-size", "2G", "--inode-size", "128", "--write-iops", "1000"]


def _run(out, scratch_dir, *extra):
    p = subprocess.run([JSTALL, "lab", "run", "command", "--command", f"{sys.executable} {CLIENT} 2000 4 100", *FS,
                        *extra, "--scratch", scratch_dir, "--no-progress", "-o", out],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return analyze(out, min_ms=10)


def test_the_headline_remedy_removes_stall_time_inside_its_interval(tmp_path, scratch_dir):
    base = _run(str(tmp_path / "base"), scratch_dir, "--journal-size", "4M")
    v = base.verdict
    h = v["headline"]
    assert h is not None and h["kind"] in ("journal_size", "inode_size"), v
    (rec,) = [r for r in base.recommendations if r.kind == h["kind"]]
    assert (rec.stall_ms_removed_low, rec.stall_ms_removed_high) == (h["low_ms"], h["high_ms"])
    assert rec.stall_ms_total == v["stall_ms_total"] == base.summary.stalls.total_ms
    # the interval no wider than the rule allows
    assert h["high_ms"] <= 2000 or h["high_ms"] <= 2 * h["low_ms"] + 1e-6
    if h["kind"] == "journal_size":
        after = _run(str(tmp_path / "after"), scratch_dir, "--journal-size", f"{int(rec.journal_size_mib)}M")
    else:
        after = _run(str(tmp_path / "after"), scratch_dir, "--journal-size", "4M", "--inode-size", "256")
    removed = base.summary.stalls.total_ms - after.summary.stalls.total_ms
    assert h["low_ms"] <= removed <= h["high_ms"], (removed, h)
