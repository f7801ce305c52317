"""The lab's XFS scratch filesystems. Without root: FsConfig's XFS validation, its mkfs.xfs and
mount arguments (checked by mkfs.xfs itself in a dry run on a sparse file), xfsprogs'
test-harness variables, the command line, sweeps and tune. With root (kernel): an XFS on the
emulated device is paced like ext4's, an external log is a device of its own, a mkfs.xfs
refusal is one line and undone, and `lab run`/`lab sweep` make XFS."""

import io
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest

from conftest import leftovers, throttle_rules
from jstall.cli import build_parser
from jstall.errors import JstallError
from jstall.workloads import lab_cmd, scratch
from jstall.workloads.fsconfig import XFS_TEST_HARNESS, FsConfig, xfs_agcount
from jstall.workloads.options import default_fs_size
from jstall.workloads.scratch import ScratchFs
from jstall.workloads.scratchfs import mkfs_xfs, parse_xfs_db, xfs_reason

JSTALL = os.path.join(os.path.dirname(sys.executable), "jstall")
needs_mkfs_xfs = pytest.mark.skipif(shutil.which("mkfs.xfs") is None, reason="needs xfsprogs (mkfs.xfs)")


# ---- configuration (no root) -------------------------------------------------------------


def test_each_type_has_its_defaults_and_ext4_keeps_its_own():
    x = FsConfig(fs_type="xfs")
    assert (x.fs_size, x.journal_size, x.inode_size, x.block_size) == ("320M", "8M", 512, 4096)
    e = FsConfig()
    assert (e.fs_type, e.fs_size, e.journal_size, e.inode_size) == ("ext4", "64M", "4M", 256)
    x.validate()
    e.validate()
    # what a caller gives is kept
    assert FsConfig(fs_type="xfs", fs_size="1G", inode_size=1024).inode_size == 1024


def test_ext4_arguments_are_unchanged():
    c = FsConfig(fs_size="64M", journal_size="8M", inode_size=128, fast_commit=True, commit_interval=9,
                 mkfs_options="-E stride=4 -L lab", mount_options="noatime")
    c.validate()
    assert c.mkfs_args() == ["-q", "-F", "-t", "ext4", "-b", "4096", "-I", "128", "-J", "size=8", "-O", "fast_commit",
                             "-E", "lazy_itable_init=0,lazy_journal_init=1,nodiscard,stride=4", "-L", "lab"]
    assert c.mount_opts() == "data=ordered,barrier,commit=9,noatime"
    ext = FsConfig(journal_device=True)
    assert ext.mkfs_args("/dev/loop7")[-2:] == ["-J", "device=/dev/loop7"] and "-J" not in ext.mkfs_args()
    assert ext.mount_opts("/dev/loop7") == "data=ordered,barrier,journal_path=/dev/loop7"


def test_xfs_mkfs_and_mount_arguments():
    c = FsConfig(fs_type="xfs", fs_size="1G", journal_size="16M", block_size=2048, inode_size=1024,
                 log_buffer_size="64K", log_buffers=4, mkfs_options="-d agcount=8 -m reflink=0 -n size=8192",
                 mount_options="noatime,inode64")
    c.validate()
    assert c.mkfs_args() == ["-q", "-f", "-K", "-b", "size=2048", "-i", "size=1024", "-l", f"size={16 << 20}",
                             "-d", "agcount=8", "-m", "reflink=0", "-n", "size=8192"]
    assert c.mount_opts() == "logbsize=64k,logbufs=4,noatime,inode64"   # logbsize as /proc/mounts shows it
    ext = FsConfig(fs_type="xfs", journal_device=True, journal_size="12M", journal_write_iops=300)
    ext.validate()
    assert ext.mkfs_args("/dev/loop9")[-2:] == ["-l", f"logdev=/dev/loop9,size={12 << 20}"]
    assert ext.mount_opts("/dev/loop9") == "logdev=/dev/loop9"
    assert FsConfig(fs_type="xfs").mount_opts() == ""                     # XFS's own defaults
    # the log device is the log: it starts at the device's first block (ext4's has a superblock)
    assert ext.journal_image_bytes == 12 << 20 and ext.image_bytes() == (320 << 20) + (12 << 20)
    assert FsConfig(journal_device=True, journal_size="12M").journal_image_bytes == (12 << 20) + 4096


def test_as_dict_names_the_type_and_drops_ext4s_options_on_xfs():
    d = FsConfig(fs_type="xfs", log_buffer_size="256K", log_buffers=8).as_dict()
    assert d["fs_type"] == "xfs" and d["log_buffer_size"] == "256K" and d["log_buffer_size_bytes"] == 256 << 10
    assert d["log_buffers"] == 8 and d["data_mode"] is None and d["fast_commit"] is None
    assert d["commit_interval"] is None and d["inode_size"] == 512 and d["journal_size_bytes"] == 8 << 20
    e = FsConfig().as_dict()
    assert e["fs_type"] == "ext4" and e["data_mode"] == "ordered" and e["log_buffer_size_bytes"] is None
    json.dumps(d)
    json.dumps(e)


@pytest.mark.parametrize("fs, expect", [("16M", 1), ("31M", 1), ("32M", 2), ("63M", 2), ("64M", 4), ("2G", 4),
                                        ("1T", 4), ("5T", 5)])
def test_allocation_groups_as_mkfs_xfs_makes_them(fs, expect):
    assert xfs_agcount(scratch.parse_size(fs)) == expect


def test_allocation_groups_given_through_mkfs_options():
    assert xfs_agcount(1 << 30, ["-d", "agcount=8"]) == 8
    assert xfs_agcount(1 << 30, ["-d", "agsize=100m"]) == 11
    assert FsConfig(fs_type="xfs", fs_size="1G", mkfs_options="-d agcount=16").agcount == 16


def test_test_harness_variables_only_when_mkfs_xfs_would_refuse():
    small = FsConfig(fs_type="xfs", fs_size="320M", journal_size="8M")
    assert small.xfs_unsupported() == ["the log is under 64 MiB (8M)"]
    env = small.mkfs_env("/dev/loop5", "/var/tmp/x/run")
    assert sorted(env) == sorted(XFS_TEST_HARNESS) and env["TEST_DEV"] == "/dev/loop5"
    assert FsConfig(fs_type="xfs", fs_size="320M", journal_size="64M").mkfs_env("/dev/loop5") == {}
    assert FsConfig(fs_type="xfs", fs_size="299M", journal_size="64M").xfs_unsupported() == [
        "the filesystem is under 300 MB (299M)"]
    assert "it has one allocation group" in FsConfig(fs_type="xfs", fs_size="1G", journal_size="64M",
                                                     mkfs_options="-d agcount=1").xfs_unsupported()
    assert FsConfig(fs_size="64M").xfs_unsupported() == [] and FsConfig().mkfs_env("/dev/loop5") == {}


XFS_REFUSALS = [
    (dict(fs_type="btrfs"), "--fs-type btrfs: choose one of ext4, xfs"),
    (dict(inode_size=256), "--inode-size 256: XFS (v5, with metadata checksums) takes 512 to 2048 bytes"),
    (dict(inode_size=384), "give 512"),
    (dict(inode_size=4096), "512 to 2048"),
    (dict(inode_size=1024, block_size=1024), "(512 with 1024-byte blocks)"),
    (dict(block_size=8192), "--block-size 8192"),
    (dict(fs_size="8M"), "at least 16M"),
    (dict(journal_size="1M"), "an XFS log (mkfs.xfs -l size=) takes at least 2M"),
    (dict(journal_size="8190K"), "not a whole number of 4096-byte blocks"),
    (dict(journal_size="3G", fs_size="16G"), "an XFS log takes at most 2038M"),
    (dict(journal_size="80M", fs_size="320M"), "one of its 4 allocation groups (80M each); give --fs-size 324M"),
    (dict(journal_size="100M", fs_size="1G", mkfs_options="-d agcount=16"), "one of its 16 allocation groups"),
    (dict(data_mode="writeback"), "--data-mode writeback is ext4's (mount -o data=)"),
    (dict(data_mode="journal"), "XFS logs metadata only"),
    (dict(fast_commit=True), "--fast-commit is ext4's"),
    (dict(commit_interval=5), "--commit-interval is ext4's"),
    (dict(barrier=False), "--no-barrier is ext4's"),
    (dict(log_buffer_size="48K"), "--log-buffer-size 48K: XFS takes 16K, 32K, 64K, 128K or 256K"),
    (dict(log_buffer_size="512K"), "mount -o logbsize="),
    (dict(log_buffers=1), "--log-buffers 1: XFS takes 2 to 8"),
    (dict(log_buffers=9), "mount -o logbufs="),
    (dict(journal_write_iops=100), "need an external log"),
    (dict(mkfs_options="-O ^has_journal"), "-O: a mke2fs option; with --fs-type xfs the pass-through takes"),
    (dict(mkfs_options="-E stride=4"), "a mke2fs option"),
    (dict(mkfs_options="-b size=1024"), "use --block-size"),
    (dict(mkfs_options="-i size=1024"), "-i size=1024: not passed through; use --inode-size"),
    (dict(mkfs_options="-l size=16m"), "use --journal-size"),
    (dict(mkfs_options="-l logdev=/dev/sdb"), "use --journal-device"),
    (dict(mkfs_options="-d size=1g"), "the data section is --fs-size"),
    (dict(mkfs_options="-m crc=0"), "v5 XFS"),
    (dict(mkfs_options="-N"), "the lab formats for real"),
    (dict(mkfs_options="-K"), "the lab always gives it"),
    (dict(mkfs_options="-f"), "the lab always gives it"),
    (dict(mkfs_options="-r rtdev=/dev/sdb"), "no realtime device"),
    (dict(mkfs_options="-d"), "needs a value"),
    (dict(mkfs_options="-Z 1"), "-Z: not accepted; with --fs-type xfs the pass-through takes -d -i -l -m -n -s -L"),
    (dict(mkfs_options="-d 'agcount=4"), "quote"),
    (dict(mount_options="data=journal"), "data=journal: ext4's; XFS does not take it"),
    (dict(mount_options="nobarrier"), "ext4's"),
    (dict(mount_options="logbsize=64k"), "use --log-buffer-size"),
    (dict(mount_options="logbufs=4"), "use --log-buffers"),
    (dict(mount_options="logdev=/dev/sdb"), "use --journal-device"),
    (dict(mount_options="norecovery"), "the lab studies journals"),
    (dict(mount_options="a b;c"), "not a mount option"),
]


@pytest.mark.parametrize("cfg, message", XFS_REFUSALS, ids=[str(c) for c, _ in XFS_REFUSALS])
def test_xfs_refusals_are_one_line(cfg, message):
    with pytest.raises(JstallError) as e:
        FsConfig(**{"fs_type": "xfs", **cfg}).validate()
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


EXT4_REFUSALS = [
    (dict(log_buffer_size="32K"), "--log-buffer-size is XFS's (mount -o logbsize=); ext4 has no log buffers"),
    (dict(log_buffers=4), "--log-buffers is XFS's (mount -o logbufs=)"),
    (dict(mount_options="logbsize=64k"), "logbsize=64k: XFS's; ext4 does not take it (with --fs-type xfs: "
                                         "--log-buffer-size)"),
    (dict(mkfs_options="-d agcount=4"), "-d, -l and -s are mkfs.xfs's: give --fs-type xfs"),
]


@pytest.mark.parametrize("cfg, message", EXT4_REFUSALS, ids=[str(c) for c, _ in EXT4_REFUSALS])
def test_xfs_options_are_refused_on_ext4(cfg, message):
    with pytest.raises(JstallError) as e:
        FsConfig(**cfg).validate()
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_xfs_takes_its_own_pass_through_options():
    FsConfig(fs_type="xfs", mkfs_options="-d agcount=8,su=64k,sw=2 -m reflink=0,rmapbt=1,crc=1 -n size=16384 "
             "-i maxpct=10,sparse=1 -l su=32k,lazy-count=1 -s size=4096 -L lab",
             mount_options="noatime,inode64,allocsize=64k,wsync").validate()
    for bs, inode in ((1024, 512), (2048, 512), (2048, 1024), (4096, 2048)):
        FsConfig(fs_type="xfs", block_size=bs, inode_size=inode).validate()


# ---- mkfs.xfs itself, in a dry run (no root) --------------------------------------------


def _dry_run(cfg, tmp_path, env=True):
    """mkfs.xfs -N with the lab's arguments on sparse files: (return code, its reason)."""
    img = tmp_path / "fs.img"
    img.write_bytes(b"")
    os.truncate(img, cfg.fs_bytes)
    logdev = None
    if cfg.journal_device:
        logdev = tmp_path / "log.img"
        logdev.write_bytes(b"")
        os.truncate(logdev, cfg.journal_image_bytes)
    extra = cfg.mkfs_env(str(img), str(tmp_path)) if env else {}
    clean = {k: v for k, v in os.environ.items() if k not in XFS_TEST_HARNESS}
    res = subprocess.run(["mkfs.xfs", "-N", *cfg.mkfs_args(str(logdev) if logdev else None), str(img)],
                         capture_output=True, text=True, env={**clean, **extra})
    return res.returncode, xfs_reason(res.stderr), res.stdout


@needs_mkfs_xfs
@pytest.mark.parametrize("cfg", [
    dict(),
    dict(fs_size="320M", journal_size="64M"),
    dict(fs_size="2G", journal_size="32M", block_size=1024, inode_size=512),
    dict(fs_size="64M", journal_size="8M", inode_size=1024, mkfs_options="-d agcount=2 -m reflink=0 -n size=8192"),
    dict(fs_size="16M", journal_size="4M", block_size=1024),
    dict(fs_size="320M", journal_size="8M", journal_device=True),
    dict(fs_size="1G", journal_size="100M", journal_device=True, mkfs_options="-l lazy-count=1"),
], ids=str)
def test_mkfs_xfs_takes_the_labs_arguments(cfg, tmp_path):
    """mkfs.xfs (dry run) takes what FsConfig builds; the geometry is the one asked."""
    c = FsConfig(fs_type="xfs", **cfg)
    c.validate()
    rc, reason, out = _dry_run(c, tmp_path)
    assert rc == 0, reason
    assert f"isize={c.inode_size}" in out and f"bsize={c.block_size}" in out
    assert f"blocks={c.journal_bytes // c.block_size}, version=2" in out


@needs_mkfs_xfs
def test_mkfs_xfs_refuses_what_the_variables_lift(tmp_path):
    """Without xfsprogs' test-harness variables mkfs.xfs refuses a log under 64 MiB and a
    filesystem under 300 MB; with them (as the lab runs it) it formats both."""
    c = FsConfig(fs_type="xfs", fs_size="320M", journal_size="8M")
    assert _dry_run(c, tmp_path, env=False)[:2] == (1, "Log size must be at least 64MB.")
    assert _dry_run(c, tmp_path)[0] == 0
    small = FsConfig(fs_type="xfs", fs_size="288M", journal_size="64M")
    small.validate()
    assert _dry_run(small, tmp_path, env=False)[:2] == (1, "Filesystem must be larger than 300MB.")
    assert _dry_run(small, tmp_path)[0] == 0
    big = FsConfig(fs_type="xfs", fs_size="320M", journal_size="64M")
    assert big.mkfs_env("x") == {} and _dry_run(big, tmp_path, env=False)[0] == 0


@needs_mkfs_xfs
def test_a_log_too_small_for_the_geometry_is_mkfs_xfs_s_reason_in_one_line(tmp_path):
    """What only mkfs.xfs knows -- the smallest log of a geometry -- comes back as its reason,
    with the --journal-size to give."""
    c = FsConfig(fs_type="xfs", fs_size="2G", journal_size="4M")
    c.validate()  # above every bound the lab can check
    img = tmp_path / "fs.img"
    img.write_bytes(b"")
    os.truncate(img, c.fs_bytes)
    with pytest.raises(JstallError) as e:
        mkfs_xfs(["-N", *c.mkfs_args()], str(img), c.mkfs_env(str(img)))
    msg = str(e.value)
    assert "\n" not in msg and "failed: log size 1024 blocks too small, minimum size is 1986 blocks" in msg, msg
    assert msg.endswith("(give --journal-size 8M or more)"), msg


def test_xfs_reason_and_superblock_parsing():
    text = ("log size 512 blocks too small, minimum size is 1368 blocks\nUsage: mkfs.xfs\n"
            "/* blocksize */\t\t[-b size=num]\n")
    assert xfs_reason(text) == "log size 512 blocks too small, minimum size is 1368 blocks"
    assert xfs_reason("mkfs.xfs: cannot open /dev/x: Device busy\n") == "mkfs.xfs: cannot open /dev/x: Device busy"
    sb = parse_xfs_db("magicnum = 0x58465342\nblocksize = 4096\nlogblocks = 2048\nlogstart = 0\n"
                      "versionnum [0xb4a5+0x18a] = V5,NLINK,CRC,REFLINK\n")
    assert sb == {"magicnum": "0x58465342", "blocksize": "4096", "logblocks": "2048", "logstart": "0",
                  "features": ["v5", "nlink", "crc", "reflink"]}


# ---- command line, sweeps, tune (no root) -------------------------------------------------


def _cli_config(*argv, action="run"):
    args = build_parser("lab").parse_args(["lab", action, "xattr", *argv])
    return lab_cmd.config_from(lab_cmd._values(args, sweep=False), args.pattern)


def test_the_command_line_takes_fs_type_and_the_log_options():
    c = _cli_config("--fs-type", "xfs", "--log-buffer-size", "64K", "--log-buffers", "4").fs
    assert (c.fs_type, c.fs_size, c.journal_size, c.inode_size) == ("xfs", "2G", "32M", 512)
    assert (c.log_buffer_bytes, c.log_buffers) == (64 << 10, 4)
    c.validate()
    e = _cli_config().fs
    assert (e.fs_type, e.fs_size, e.inode_size, e.log_buffer_size) == ("ext4", "2G", 256, None)
    t = _cli_config("--fs-type", "xfs", "--journal-size", "64M", action="tune").fs
    assert t.fs_type == "xfs" and t.journal_bytes == 64 << 20
    with pytest.raises(SystemExit):
        _cli_config("--fs-type", "zfs")


CLI_REFUSALS = [
    (["--fs-type", "xfs", "--data-mode", "journal"], "--data-mode journal is ext4's"),
    (["--fs-type", "xfs", "--inode-size", "256"], "--inode-size 256: XFS"),
    (["--fs-type", "xfs", "--log-buffers", "12"], "--log-buffers 12: XFS takes 2 to 8"),
    (["--fs-type", "xfs", "--mkfs-options=-O ^has_journal"], "a mke2fs option"),
    (["--log-buffer-size", "64K"], "--log-buffer-size is XFS's"),
]


@pytest.mark.parametrize("args, message", CLI_REFUSALS, ids=[" ".join(a) for a, _ in CLI_REFUSALS])
def test_cli_refusals_are_one_line_and_make_nothing(tmp_path, args, message):
    """Refused before anything is made (and before the root check): exit 2, one line."""
    p = subprocess.run([JSTALL, "lab", "run", "xattr", "--scratch", str(tmp_path / "scratch"), "-o",
                        str(tmp_path / "o"), *args], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert p.stderr.startswith("jstall lab: ") and message in p.stderr, p.stderr
    assert os.listdir(tmp_path) == []


def test_default_fs_size_leaves_room_for_an_internal_xfs_log():
    assert default_fs_size("32M", False, "xfs") == "2G" and default_fs_size("496M", False, "xfs") == "2G"
    assert default_fs_size("1G", False, "xfs") == "4160M" and default_fs_size("1G", True, "xfs") == "2G"
    assert default_fs_size("1G", False) == "4G"  # ext4's, unchanged
    c = _cli_config("--fs-type", "xfs", "--journal-size", "1G").fs
    assert c.fs_size == "4160M"
    c.validate()


def test_a_sweep_takes_fs_types_and_checks_every_combination(tmp_path):
    from jstall.workloads.sweep_run import plan, run_sweep

    args = build_parser("lab").parse_args(["lab", "sweep", "xattr", "--fs-type", "ext4,xfs", "--journal-size",
                                           "8M,64M", "--fs-size", "320M", "-o", str(tmp_path / "sw")])
    values = lab_cmd._values(args, sweep=True)
    assert values["fs_type"] == [("ext4", "ext4"), ("xfs", "xfs")]
    axes, _, runs = plan("xattr", values, 1)
    assert axes == {"fs_type": ["ext4", "xfs"], "journal_size": ["8M", "64M"]} and len(runs) == 4
    for r in runs:  # each type takes its own inode size
        vals = {d: dict(values[d])[t] for d, t in {"fs_size": "320M", **r["options"]}.items()}
        fs = lab_cmd.config_from(vals, "xattr").fs
        fs.validate()
        assert fs.inode_size == (512 if fs.fs_type == "xfs" else 256)
    # a combination XFS refuses is named before anything is made
    bad = build_parser("lab").parse_args(["lab", "sweep", "xattr", "--fs-type", "ext4,xfs", "--inode-size", "256",
                                          "-o", str(tmp_path / "sw2")])
    with pytest.raises(JstallError, match=r"^--fs-type xfs: --inode-size 256: XFS") as e:
        run_sweep("xattr", lab_cmd._values(bad, sweep=True), 1, str(tmp_path / "sw2"), record=False)
    assert "\n" not in str(e.value) and not (tmp_path / "sw2").exists()


def test_the_summary_names_xfs_and_its_log():
    from jstall.workloads.lab import LabResult, print_summary

    lab = {"pattern": "xattr", "params": {"files": 10}, "jobs": 1, "seed": 1, "status": "complete", "phases": [],
           "config": FsConfig(fs_type="xfs", log_buffer_size="64K", write_iops=500).as_dict(),
           "dumpe2fs": {"fs_type": "xfs", "block_size": 4096, "inode_size": 512, "journal_blocks": 2048,
                        "journal_bytes": 8 << 20, "external_journal": False, "ag_count": 4},
           "filesystem": {"device": "/dev/loop3", "throttle_mode": "stacked",
                          "throttles": {"7:2": {"write_iops": 500}}}}
    out = io.StringIO()
    print_summary(LabResult(lab=lab), out)
    assert ("xfs 320M on /dev/loop3: 4096-byte blocks, 512-byte inodes, log 2048 blocks (8 MiB), 4 allocation "
            "groups, logbsize=64K; throttle (stacked, on the lower device): 7:2 write_iops=500") in out.getvalue()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the root check comes first)")
def test_missing_xfsprogs_is_refused_before_anything(tmp_path, monkeypatch):
    from jstall.workloads import scratchfs

    monkeypatch.setattr(scratchfs.shutil, "which", lambda name: None)
    with pytest.raises(JstallError, match=r"--fs-type xfs needs xfsprogs \(mkfs.xfs, xfs_db not found\)"):
        ScratchFs(FsConfig(fs_type="xfs"), scratch_dir=str(tmp_path / "scratch")).__enter__()
    assert os.listdir(tmp_path) == []


# ---- on the kernel (root) -------------------------------------------------------------------

LIMIT = 500  # write IOPS of the data device


def findmnt(mountpoint):
    """(FSTYPE, [options]) of a mount point, as findmnt reads them."""
    out = subprocess.run(["findmnt", "-n", "-o", "FSTYPE,OPTIONS", mountpoint], capture_output=True, text=True,
                         check=True).stdout.split()
    return out[0], out[1].split(",")


def _never_ahead(intervals, limit):
    """Whether the writes served never ran ahead of what blk-throttle lets through: the limit
    times the time since the first interval began, with 5% for the sampler's clock, plus half
    a second's worth (the first slice's burst as the idle device wakes). It paces by its slice,
    so an interval after a slow one may catch up (150, 250, then 300 writes in three 0.5 s at
    500/s: 466/s over them): a per-window bound fails on that, this one does not."""
    served, elapsed = np.cumsum([w for _, w in intervals]), np.cumsum([s for s, _ in intervals])
    return bool((served <= 1.05 * limit * elapsed + 0.5 * limit).all())


def _writes(rows, role):
    return [(ns / 1e9, w + m) for r, ns, w, m in zip(rows["role"], rows["interval_ns"], rows["write_ios"],
                                                     rows["write_merges"]) if r == role]


@pytest.mark.kernel
@pytest.mark.timed   # "never silent" needs the CPUs to feed the device: beside the guests a 0.5 s went unfed
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_xfs_on_the_emulated_device_is_paced_and_undone(scratch_dir):
    """320M XFS with an 8M log (mkfs.xfs run with the test-harness variables), 64K log buffers,
    500 write IOPS: findmnt shows xfs with them; 3,000 files of 4 KiB in 8 directories, then
    syncfs, reach the lower device as about one request per file, served at the limit (no
    1-s window after the first 0.5 s more than 5% over it, no silent 0.5 s in the middle);
    everything is removed afterwards."""
    from jstall.devstats import DeviceSampler

    cfg = FsConfig(fs_type="xfs", fs_size="320M", journal_size="8M", write_iops=LIMIT, log_buffer_size="64K",
                   log_buffers=4)
    with ScratchFs(cfg, scratch_dir=scratch_dir) as fs:
        fstype, opts = findmnt(fs.mountpoint)
        assert fstype == "xfs" and {"logbsize=64k", "logbufs=4"} <= set(opts), opts
        geo = fs.geometry()
        assert (geo["fs_type"], geo["block_size"], geo["inode_size"], geo["journal_blocks"]) == ("xfs", 4096, 512, 2048)
        assert not geo["external_journal"] and geo["ag_count"] == 4 and "crc" in geo["features"]
        assert fs.describe()["mkfs_test_harness"] == ["the log is under 64 MiB (8M)"]
        assert not set(XFS_TEST_HARNESS) & set(os.environ)          # mkfs.xfs alone saw them
        rules = throttle_rules()
        assert rules[("write_iops", fs.lower_dev)] == LIMIT and ("write_iops", fs.dev) not in rules
        lower = os.path.basename(fs.lower_device)
        dirs = [os.path.join(fs.mountpoint, f"d{k}") for k in range(8)]
        for d in dirs:
            os.mkdir(d)
        fs.sync()
        fs.wait_idle()
        before = scratch.read_block_stat(lower)
        sampler = DeviceSampler(fs.emulated_devices(), 0.5).start()
        t0 = time.monotonic()
        for i in range(3000):
            with open(os.path.join(dirs[i % 8], f"f{i}"), "wb") as f:
                f.write(b"x" * 4096)
        fs.sync()
        fs.wait_idle()
        durable = time.monotonic() - t0
        rows = sampler.stop()
        after = scratch.read_block_stat(lower)
        run_dir, dev = fs.run_dir, fs.lower_dev
    writes = after["write_ios"] + after["write_merges"] - before["write_ios"] - before["write_merges"]
    assert writes >= 1500, writes                                    # scattered: about one request per file
    assert writes / durable <= 1.05 * LIMIT and durable >= 0.9 * writes / LIMIT, (writes, durable)
    iv = _writes(rows, "data")
    while iv and not iv[0][1]:   # before writeback began
        iv = iv[1:]
    # as the idle device wakes a short burst goes through (its first slice), never a second's worth
    assert iv[0][1] <= LIMIT, iv
    assert len(iv) >= 5 and _never_ahead(iv, LIMIT), iv
    middle = iv[1:-2]
    assert middle and all(w >= 0.5 * LIMIT * s for s, w in middle), iv  # paced: never silent
    assert not os.path.exists(run_dir) and ("write_iops", dev) not in throttle_rules()
    assert leftovers(scratch_dir) == ([], []) and os.listdir(scratch_dir) == [scratch.SCRATCH_MARKER]


@pytest.mark.kernel
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_an_external_xfs_log_is_a_paced_device_of_its_own(scratch_dir):
    """An 8M external log on its own emulated device (200 write IOPS), the filesystem's device
    unthrottled: mounted with logdev=, the log starts at the log device's first block, and 200
    create+fsync pairs wait for log writes served at the log device's limit (after the first
    0.5 s, which holds the burst of the idle device waking)."""
    from jstall.devstats import DeviceSampler

    limit = 200
    cfg = FsConfig(fs_type="xfs", fs_size="320M", journal_size="8M", journal_device=True, journal_write_iops=limit)
    with ScratchFs(cfg, scratch_dir=scratch_dir) as fs:
        fstype, opts = findmnt(fs.mountpoint)
        assert fstype == "xfs" and f"logdev={fs.journal_device}" in opts, opts
        geo = fs.geometry()
        assert geo["external_journal"] and geo["log_start"] == 0 and geo["journal_blocks"] == 2048
        assert os.path.getsize(os.path.join(fs.run_dir, "journal.img")) == 8 << 20
        rules = throttle_rules()
        assert rules[("write_iops", fs.journal_lower_dev)] == limit and ("write_iops", fs.lower_dev) not in rules
        assert [r for r, *_ in fs.emulated_devices()] == ["data", "journal"]
        sampler = DeviceSampler(fs.emulated_devices(), 0.5).start()
        t0 = time.monotonic()
        for i in range(200):
            fd = os.open(os.path.join(fs.mountpoint, f"f{i}"), os.O_CREAT | os.O_WRONLY, 0o644)
            os.write(fd, b"x" * 4096)
            os.fsync(fd)
            os.close(fd)
        fs.sync()
        fs.wait_idle()
        durable = time.monotonic() - t0
        rows = sampler.stop()
        jdev = fs.journal_lower_dev
    log_writes = _writes(rows, "journal")
    total = sum(w for _, w in log_writes)
    assert total >= 200, log_writes                                   # a log force per fsync at least
    assert durable >= 0.9 * total / limit, (total, durable)
    # one request at a time (each fsync waits for its log write), never ahead of the limit
    # after the first 0.5 s (the burst of the idle device waking)
    assert _never_ahead(log_writes[1:], limit), log_writes
    assert ("write_iops", jdev) not in throttle_rules() and leftovers(scratch_dir) == ([], [])


@pytest.mark.kernel
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_a_mkfs_xfs_refusal_is_one_line_and_undone(scratch_dir):
    """A 4M log passes every bound the lab checks; mkfs.xfs wants 1,986 blocks on a 2G
    filesystem: its reason in one line, and nothing left but the scratch marker."""
    with pytest.raises(JstallError) as e:
        with ScratchFs(FsConfig(fs_type="xfs", fs_size="2G", journal_size="4M", write_iops=100),
                       scratch_dir=scratch_dir):
            pass
    msg = str(e.value)
    assert "\n" not in msg and "minimum size is 1986 blocks (give --journal-size 8M or more)" in msg, msg
    assert os.listdir(scratch_dir) == [scratch.SCRATCH_MARKER]


@pytest.mark.kernel
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_lab_run_makes_xfs(scratch_dir, tmp_path):
    """`jstall lab run --fs-type xfs --no-record`: the pattern runs on XFS and the lab metadata
    says so (configuration, geometry read back, mount options, the test-harness reason)."""
    p = subprocess.run([JSTALL, "lab", "run", "xattr", "--fs-type", "xfs", "--fs-size", "320M", "--journal-size", "8M",
                        "--log-buffer-size", "32K", "--files", "200", "--updates", "400", "--write-iops", "2000",
                        "--no-record", "--json", "--scratch", scratch_dir, "-o", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    lab = json.loads(p.stdout)
    assert lab["status"] == "complete" and [ph["ops"] for ph in lab["phases"]] == [200, 400]
    assert lab["config"]["fs_type"] == "xfs" and lab["config"]["inode_size"] == 512
    assert lab["config"]["data_mode"] is None and lab["config"]["log_buffer_size_bytes"] == 32 << 10
    geo = lab["dumpe2fs"]
    assert (geo["fs_type"], geo["journal_blocks"], geo["inode_size"]) == ("xfs", 2048, 512) and "raw" not in geo
    assert "logbsize=32k" in lab["filesystem"]["mount_options"].split(",")
    assert lab["filesystem"]["fs_type"] == "xfs" and lab["filesystem"]["mkfs_test_harness"]
    assert json.load(open(tmp_path / "o" / "lab.json"))["config"]["fs_type"] == "xfs"
    assert leftovers(scratch_dir) == ([], [])


@pytest.mark.kernel
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_lab_sweep_over_ext4_and_xfs(scratch_dir, tmp_path):
    """`--fs-type ext4,xfs` sweeps both; the results table has the type and each one's geometry."""
    out = tmp_path / "sw"
    p = subprocess.run([JSTALL, "lab", "sweep", "xattr", "--fs-type", "ext4,xfs", "--fs-size", "320M",
                        "--journal-size", "8M", "--files", "100", "--updates", "200", "--no-record",
                        "--scratch", scratch_dir, "-o", str(out)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    res = pd.read_parquet(out / "results.parquet").sort_values("fs_type")
    assert res["fs_type"].tolist() == ["ext4", "xfs"] and res["inode_size_real"].tolist() == [256, 512]
    assert res["journal_blocks"].tolist() == [2048, 2048] and (res["update_ops"] == 200).all()
    assert leftovers(scratch_dir) == ([], [])


HOLDER = """
import sys, time
from jstall.workloads.scratch import FsConfig, ScratchFs
cfg = FsConfig(fs_type="xfs", journal_device=True, write_iops=123, journal_write_iops=77)
with ScratchFs(cfg, scratch_dir=sys.argv[1]) as fs:
    print(fs.lower_dev, fs.journal_lower_dev, fs.run_dir, flush=True)
    time.sleep(60)
"""


@pytest.mark.kernel
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_cleanup_removes_what_a_killed_xfs_run_left(scratch_dir):
    """A process holding an XFS with an external log, killed: cleanup() unmounts it, detaches
    its four loop devices and removes both throttle rules."""
    from child_output import read_line

    proc = subprocess.Popen([sys.executable, "-c", HOLDER, scratch_dir], stdout=subprocess.PIPE, text=True)
    dev, jdev, run_dir = read_line(proc.stdout).split()
    proc.kill()
    proc.wait()
    loops, mounts = leftovers(scratch_dir)
    assert len(loops) == 4 and mounts and throttle_rules()[("write_iops", jdev)] == 77
    ((rd, lines),) = scratch.cleanup(scratch_dir)
    assert rd == run_dir and sum(line.startswith("detached /dev/loop") for line in lines) == 4, lines
    assert leftovers(scratch_dir) == ([], []) and not os.path.exists(run_dir)
    assert not {("write_iops", dev), ("write_iops", jdev)} & set(throttle_rules())


@pytest.mark.kernel
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
@pytest.mark.parametrize("external", [False, True], ids=["internal-log", "external-log"])
def test_a_recorded_xfs_lab_run_is_a_session_of_its_log(scratch_dir, tmp_path, external):
    """Recorded, an XFS lab run is a session whose journal is the scratch XFS's log (kind
    xfs, the geometry the lab read back; with an external log, the log's device), with the
    lab metadata and the emulated devices' table."""
    from jstall.analyzer.session.load import load_session
    from jstall.workloads.lab import LabConfig, run_lab

    fs = FsConfig(fs_type="xfs", journal_size="8M", journal_device=external, write_iops=2000,
                  **({"journal_write_iops": 2000} if external else {}))
    res = run_lab(LabConfig(fs=fs, pattern="xattr", params={"files": 300, "updates": 600},
                            output_dir=str(tmp_path / "s"), scratch_dir=scratch_dir))
    s = load_session(res.session_dir)
    lab = s.meta["lab"]
    assert lab["status"] == "complete" and lab["config"]["fs_type"] == "xfs"
    (j,) = [j for j in s.meta["journals"] if j["dev"] == lab["filesystem"]["dev"]]
    assert j["kind"] == "xfs" and j["journal_blocks"] == lab["dumpe2fs"]["journal_blocks"] == 2048
    assert j["log_bytes"] == 8 << 20 and j["inode_size"] == 512
    assert j["journal_device"] == (lab["filesystem"]["journal_dev"] if external else None)
    assert set(s.device_stats["role"]) == ({"data", "journal"} if external else {"data"})
    assert leftovers(scratch_dir) == ([], [])
