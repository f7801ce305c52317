"""Scratch ext4 on real loop devices: the options take effect, everything is undone on exit,
on an exception and on SIGTERM, refusals change nothing, and cleanup() finds what a killed
process left."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from jstall.errors import JstallError
from jstall.workloads import scratch
from jstall.workloads.scratch import FsConfig, ScratchFs, format_size, parse_size

from conftest import leftovers, throttle_rules
from child_output import read_line

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]


def test_parse_size():
    assert parse_size("4M") == 4 << 20
    assert parse_size("1G") == 1 << 30
    assert parse_size("512k") == 512 << 10
    assert parse_size("16MiB") == 16 << 20
    assert parse_size("1.5G") == 3 << 29
    assert parse_size(4096) == 4096
    assert format_size(256 << 20) == "256M" and format_size(1536 << 10) == "1536K"
    for bad in ("", "4X", "-1M", "0", "M"):
        with pytest.raises(JstallError, match="16M|4M, 1G"):
            parse_size(bad)


def test_internal_journal_options_take_effect(scratch_dir):
    cfg = FsConfig(fs_size="64M", journal_size="4M", inode_size=128, commit_interval=9,
                   mount_options="noatime", write_iops=700, read_iops=900)
    with ScratchFs(cfg, scratch_dir=scratch_dir) as fs:
        assert fs.device.startswith("/dev/loop") and os.path.ismount(fs.mountpoint)
        st = os.stat(fs.device)
        assert fs.dev == f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}" and fs.journal_dev is None
        sb = fs.dumpe2fs()
        assert sb["journal_blocks"] == 1024 and sb["block_size"] == 4096 and sb["inode_size"] == 128
        assert sb["journal_bytes"] == 4 << 20 and not sb["external_journal"]
        assert "has_journal" in sb["features"] and not sb["fast_commit"]
        opts = fs.mount_options().split(",")
        assert {"noatime", "commit=9", "data=ordered"} <= set(opts)
        rules = throttle_rules()
        # the rules sit on the lower loop device under the filesystem's direct-I/O loop device
        assert fs.lower_dev != fs.dev and scratch.loop_backing_files()[fs.device] == fs.lower_device
        assert rules[("write_iops", fs.lower_dev)] == 700 and rules[("read_iops", fs.lower_dev)] == 900
        assert ("write_iops", fs.dev) not in rules
        with open(os.path.join(fs.mountpoint, "f"), "w") as f:
            f.write("x")
        run_dir, dev = fs.run_dir, fs.lower_dev
    assert not os.path.exists(run_dir)
    assert ("write_iops", dev) not in throttle_rules()
    assert leftovers(scratch_dir) == ([], [])


def test_external_journal_fast_commit_and_mount_modes(scratch_dir):
    cfg = FsConfig(fs_size="32M", journal_size="8M", inode_size=512, journal_device=True, fast_commit=True,
                   data_mode="writeback", barrier=False, journal_write_iops=300)
    with ScratchFs(cfg, scratch_dir=scratch_dir) as fs:
        sb = fs.dumpe2fs()
        # the journal device: 8 MiB, 4 KiB for its ext4 superblock, 256 blocks of fast-commit area
        assert sb["external_journal"] and sb["journal_blocks"] == 2048 + 1 + 256 and sb["inode_size"] == 512
        assert sb["fast_commit"] and "fast_commit" in sb["features"]
        jst = os.stat(fs.journal_device)
        assert fs.journal_dev == f"{os.major(jst.st_rdev)}:{os.minor(jst.st_rdev)}" != fs.dev
        # dumpe2fs names the journal device by its number, 0xMMmm
        assert int(sb["journal_device_number"], 16) == (os.major(jst.st_rdev) << 8 | os.minor(jst.st_rdev))
        opts = fs.mount_options().split(",")
        assert "data=writeback" in opts and "nobarrier" in opts
        assert throttle_rules()[("write_iops", fs.journal_lower_dev)] == 300
        assert ("write_iops", fs.lower_dev) not in throttle_rules()


@pytest.mark.parametrize("block_size, journal_size", [(1024, "1M"), (2048, "2M"), (4096, "4M")])
@pytest.mark.parametrize("fast_commit", [False, True])
def test_smallest_external_journal_mounts(scratch_dir, block_size, journal_size, fast_commit):
    """An external journal of the smallest size ext4 takes (1,024 blocks) mounts, with and
    without fast_commit: the device has room for its superblock and the fast-commit area."""
    cfg = FsConfig(fs_size="16M", journal_size=journal_size, block_size=block_size, journal_device=True,
                   fast_commit=fast_commit)
    with ScratchFs(cfg, scratch_dir=scratch_dir) as fs:
        sb = fs.dumpe2fs()
        assert os.path.ismount(fs.mountpoint) and sb["external_journal"] and sb["fast_commit"] == fast_commit
        first = int(sb["journal_raw"]["Journal first block"])
        usable = sb["journal_blocks"] - first - (scratch.FAST_COMMIT_BLOCKS if fast_commit else 0)
        assert usable >= 1024 - 1                            # as many as an internal journal of that size
        assert os.path.getsize(os.path.join(fs.run_dir, "journal.img")) == cfg.journal_image_bytes


def test_exception_inside_undoes_everything(scratch_dir):
    with pytest.raises(RuntimeError):
        with ScratchFs(FsConfig(write_iops=100), scratch_dir=scratch_dir) as fs:
            dev = fs.lower_dev
            # a process keeping its working directory in the mount: unmount must still succeed
            proc = subprocess.Popen(["sleep", "0.5"], cwd=fs.mountpoint)
            raise RuntimeError("boom")
    proc.wait()
    assert ("write_iops", dev) not in throttle_rules()
    assert os.listdir(scratch_dir) == [scratch.SCRATCH_MARKER]


@pytest.mark.parametrize("cfg, message", [
    (dict(inode_size=384), "power of two"),
    (dict(inode_size=8192), "power of two"),
    (dict(fs_size="64M", journal_size="64M"), "at most 40%"),
    (dict(journal_size="2M"), "1024 to"),
    (dict(journal_size="4500K"), "whole MiB"),
    (dict(fs_size="4M"), "at least 16M"),
    (dict(fs_size="lots"), "not a size"),
    (dict(data_mode="fast"), "ordered, writeback, journal"),
    (dict(block_size=3000), "--block-size"),
    (dict(device_profile="floppy"), "none, hdd, ssd"),
    (dict(write_iops=-5), "≥ 0"),
    (dict(throttle_mode="cgroup"), "stacked, direct"),
    (dict(journal_write_iops=100), "--journal-device"),
    (dict(fast_commit=True, data_mode="journal"), "--fast-commit"),
    (dict(mkfs_options="-J size=8"), "--journal-size"),
    (dict(mkfs_options="-O ^has_journal"), "journals"),
    (dict(mkfs_options="-E"), "needs a value"),
    (dict(mkfs_options="-X 1"), "not accepted"),
    (dict(mount_options="data=journal"), "--data-mode"),
    (dict(mount_options="commit=3"), "--commit-interval"),
    (dict(mount_options="a b;c"), "not a mount option"),
])
def test_refusals_change_nothing(scratch_dir, cfg, message):
    with pytest.raises(JstallError, match=message) as e:
        with ScratchFs(FsConfig(**cfg), scratch_dir=scratch_dir):
            pass
    assert "\n" not in str(e.value)
    assert not os.path.exists(scratch_dir)  # nothing made: no directory, so no image and no loop device


def test_refuses_foreign_scratch_and_missing_space(scratch_dir, tmp_path):
    (tmp_path / "precious").write_text("mine")
    with pytest.raises(JstallError, match="did not create"):
        ScratchFs(FsConfig(), scratch_dir=str(tmp_path)).__enter__()
    assert os.listdir(tmp_path) == ["precious"]
    free = os.statvfs("/var/tmp")
    huge = format_size(((free.f_bavail * free.f_frsize) >> 30 << 30) + (8 << 30))
    with pytest.raises(JstallError, match="free"):
        ScratchFs(FsConfig(fs_size=huge, journal_size="1G"), scratch_dir=scratch_dir).__enter__()
    assert not os.path.exists(scratch_dir)  # checked before the scratch directory is made
    scratch.prepare_scratch(scratch_dir)
    with pytest.raises(JstallError, match="free"):
        ScratchFs(FsConfig(fs_size=huge, journal_size="1G"), scratch_dir=scratch_dir).__enter__()
    assert os.listdir(scratch_dir) == [scratch.SCRATCH_MARKER]


def test_mount_error_is_one_line_and_undone(scratch_dir):
    with pytest.raises(JstallError, match="mount") as e:
        with ScratchFs(FsConfig(mount_options="no_such_option"), scratch_dir=scratch_dir):
            pass
    assert "\n" not in str(e.value)
    assert os.listdir(scratch_dir) == [scratch.SCRATCH_MARKER]


HOLDER = textwrap.dedent("""
    import sys, time
    from jstall.workloads.scratch import FsConfig, ScratchFs
    with ScratchFs(FsConfig(write_iops=123), scratch_dir=sys.argv[1]) as fs:
        print(fs.lower_dev, fs.run_dir, flush=True)
        time.sleep(60)
""")


def _holder(scratch_dir):
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, scratch_dir], stdout=subprocess.PIPE, text=True)
    dev, run_dir = read_line(proc.stdout).split()
    assert throttle_rules()[("write_iops", dev)] == 123
    return proc, dev, run_dir


def test_sigterm_undoes_everything(scratch_dir):
    proc, dev, run_dir = _holder(scratch_dir)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert not os.path.exists(run_dir) and ("write_iops", dev) not in throttle_rules()


def test_cleanup_removes_what_a_killed_process_left(scratch_dir):
    proc, dev, run_dir = _holder(scratch_dir)
    # cleanup leaves a run whose process still runs
    assert scratch.cleanup(scratch_dir) == []
    proc.kill()
    proc.wait()
    assert leftovers(scratch_dir)[0] and ("write_iops", dev) in throttle_rules()
    (run,) = scratch.scratch_runs(scratch_dir)
    assert not run["alive"] and run["state"]["mounts"] and run["state"]["throttles"] == {dev: ["write_iops"]}
    ((rd, lines),) = scratch.cleanup(scratch_dir, dry_run=True)
    assert rd == run_dir and any(line.startswith("would unmount") for line in lines)
    assert leftovers(scratch_dir)[0] and os.path.exists(run_dir)  # the dry run changed nothing
    ((rd, lines),) = scratch.cleanup(scratch_dir)
    assert any(line.startswith("detached /dev/loop") for line in lines)
    assert leftovers(scratch_dir) == ([], []) and not os.path.exists(run_dir)
    assert ("write_iops", dev) not in throttle_rules()
    assert scratch.cleanup(scratch_dir) == []
