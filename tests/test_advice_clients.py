"""Advice checked by running it, on real clients nobody here wrote, on a small-journal ext4
over a paced device (2 GiB, 128-byte inodes, 2,000 write IOPS, as the advice benchmark).

- fs_mark writing files and fsyncing each, then the same run with the journal on its own
  device as slow as the filesystem's: the stall time the second run removed lies in the
  range analyze's external_journal advice gave from the first (its low end is a journal
  device as slow).
- GNU tar --xattrs (a tree of 5,000 files with two attributes each, copied through a pipe)
  and git (a new tree of 20,000 files added and committed): the journal size analyze
  recommends from a 4 MiB run removes 90 % or more of its forced-checkpoint waits, and half
  of it is not big enough (jstall.enough): the threshold lies within [size / 2, size]. The
  threshold moves from run to run, so each side holds when one of two runs shows it."""

import os
import shutil
import subprocess
import sys

import pytest

from jstall.analyzer.analysis import analyze

pytestmark = [pytest.mark.kernel, pytest.mark.timed, pytest.mark.skipif(os.geteuid() != 0, reason="needs root"),
              pytest.mark.skipif(not shutil.which("fs_mark"), reason="fs_mark is installed by 'make setup-test'")]

JSTALL = os.path.join(os.path.dirname(sys.executable), "jstall")
MAKETREE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "maketree.py")
#: 4 threads, 2,000 files of 4 KiB each, each fsynced before it is closed: a fixed amount of work
FS_MARK = "fs_mark -d . -t 4 -n 2000 -s 4096 -S 1 -k"
FS = ["--fs-size", "2G", "--inode-size", "128", "--write-iops", "2000"]


def _run(out, scratch_dir, *extra, command=FS_MARK, journal_mib=4):
    p = subprocess.run([JSTALL, "lab", "run", "command", "--command", command, *FS, "--journal-size",
                        f"{journal_mib}M", *extra, "--scratch", scratch_dir, "--no-progress", "-o", out],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return analyze(out, min_ms=10)


#: the files FS_MARK leaves (4 threads x 2,000, and its log)
FS_MARK_FILES = 8001


def _fs_mark_run(out, scratch_dir, *extra):
    """_run of FS_MARK, run again (once) where its threads made the same names: fs_mark names a
    file by the second and 24 characters of random(), which each thread seeds with the
    microseconds of its start, so two threads that start in the same microsecond re-open each
    other's files (O_CREAT|O_TRUNC) and leave fewer (the lab's census): less work than the
    other run's, fs_mark's doing and no jstall's."""
    for attempt in (1, 2):
        a = _run(f"{out}-{attempt}", scratch_dir, *extra)
        files = (a.session.meta.get("lab") or {}).get("census", {}).get("files")
        if files == FS_MARK_FILES:
            break
    assert files == FS_MARK_FILES, files
    return a


def test_fs_mark_external_journal_removes_what_the_range_says(tmp_path, ram_scratch_dir):
    """Measured with the images on /dev/shm, two pairs: 49.3 and 49.5 s of stalls, 28.1 and
    27.6 s with the journal on its own device (21.2 and 22.0 s removed); predicted
    18.5-25.4 and 18.4-25.0 s. Not dbench: it runs for a fixed time and does more work when
    its waits shrink (61 % more fsyncs with the journal on its own device at 2,000 writes/s),
    so its stall time removed is no measure of the waits removed (docs/benchmarks.md). On
    /var/tmp each cache flush of either device waits for the host disk's own
    (conftest.ram_scratch_dir)."""
    scratch_dir = ram_scratch_dir
    a = _fs_mark_run(str(tmp_path / "internal"), scratch_dir)
    (ej,) = [r for r in a.recommendations if r.kind == "external_journal"]
    low, high = ej.stall_ms_removed_low, ej.stall_ms_removed_high
    assert 0 < low <= high <= 2 * low, ej.inputs
    # fs_mark fsyncs: half its stall time waits on commits' I/O (49-50 % in the runs above),
    # which queues behind the data device's other requests
    assert ej.inputs["commit_io_stall_ms"] > 0.3 * a.stalls["latency_ms"].sum(), ej.inputs
    b = _fs_mark_run(str(tmp_path / "external"), scratch_dir, "--journal-device", "--journal-write-iops", "2000")
    assert b.session.journals[0]["journal_device"], b.session.journals
    before, after = float(a.stalls["latency_ms"].sum()), float(b.stalls["latency_ms"].sum())
    removed = before - after
    # each end held by 13 % or more in the runs above, whose stall time differed by 2 %
    assert low <= removed <= high, (removed, low, high, before, after)


def _git(files):
    tree = f"{sys.executable} {MAKETREE} r {files} --no-xattrs"
    return ("bash -c 'set -e; git init -q r; " + tree + "; cd r; git add -A; "
            "git -c user.name=jstall -c user.email=jstall@localhost commit -qm tree'")


def _tar(files):
    return (f"bash -c 'set -e; {sys.executable} {MAKETREE} src {files}; mkdir dst; "
            "tar --xattrs -cf - src | tar --xattrs -xf - -C dst'")


def _waits(a):
    return float(a.checkpoint_waits["wait_ms"].sum())


def _big_enough(a):
    return bool(a.checkpoint_waits["big_enough"].all())


@pytest.mark.skipif(not shutil.which("git"), reason="git is installed by 'make setup-test'")
@pytest.mark.parametrize("command", [_tar(5000), _git(20000)], ids=["tar", "git"])
def test_recommended_journal_size_holds_on_a_real_client(command, tmp_path, scratch_dir):
    """Measured (advice benchmark, 2,000 IOPS): tar 5,000 files, 2.1 s of waits at 4 MiB,
    threshold 48 MiB, 77 MiB recommended; git 20,000 files, 205 ms of waits, threshold 15
    MiB, 22 recommended."""
    a = _run(str(tmp_path / "start"), scratch_dir, command=command)
    assert not _big_enough(a), a.checkpoint_waits.to_dict("records")
    (rec,) = [r for r in a.recommendations if r.kind == "journal_size"]
    size = int(rec.journal_size_mib)
    assert rec.low_mib <= size <= rec.high_mib and size > 4, rec.to_dict()
    before = _waits(a)
    # a late forced checkpoint of ~10 ms comes or not from run to run near the threshold: the
    # size holds when one of two runs is big enough or removed 90 %
    seen = []
    for i in range(2):
        at = _run(str(tmp_path / f"at{i}"), scratch_dir, command=command, journal_mib=size)
        seen.append((_waits(at), _big_enough(at)))
        if seen[-1][1] or seen[-1][0] <= 0.1 * before:
            break
    else:
        raise AssertionError((size, before, seen))
    # half of it is not big enough: the 4 MiB run shows it when half is no more than 4 MiB; the
    # threshold moves between runs both ways (git's: 11 MiB big enough in one run, 15 needed in
    # another), so, as at the size, one of two runs shows it
    half = -(-size // 2) - 1  # the largest whole MiB below half
    if half > 4:
        lows = []
        for i in range(2):
            low = _run(str(tmp_path / f"half{i}"), scratch_dir, command=command, journal_mib=half)
            lows.append(low.checkpoint_waits.to_dict("records"))
            if not _big_enough(low):
                break
        else:
            raise AssertionError((size, half, lows))
