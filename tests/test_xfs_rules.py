"""jstall.xfs: XFS's log-space rules (both grant-head kinds), its stats and sysfs log files, and
xfs_info's geometry; free of pandas and numpy (the probes import it)."""

import os
import subprocess
import sys

import numpy as np
import pytest

from jstall import xfs
from jstall.errors import JstallError

# /sys/fs/xfs/loop0/stats/stats after 300 files were created on a fresh 320 MiB XFS (Linux 6.18)
STATS_TEXT = """\
extent_alloc 0 0 0 0
abt 0 0 0 0
blk_map 0 0 0 0 0 0 0
bmbt 0 0 0 0
dir 300 300 0 0
trans 0 1206 0
ig 301 0 0 301 0 0 0
log 3 190 0 1 2
push_ail 1206 0 1 0 0 0 0 0 0 0
xstrat 0 0
rw 0 0
attr 0 0 0 0
icluster 0 0 0
vnodes 0 0 0 0 0 0 0 0
buf 0 0 0 0 0 0 0 0 0
abtb2 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
abtc2 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
bmbt2 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
ibt2 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
fibt2 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
rmapbt 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
refcntbt 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
rmapbt_mem 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
rcbagbt 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
rtrmapbt 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
rtrmapbt_mem 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
rtrefcntbt 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
qm 0 0 0 0 0 0 0 0
xpc 1228800 1092 0
defer_relog 0
debug 0
"""

# xfs_info (xfsprogs 6.1) of that filesystem, and of one with an external log on /dev/loop2
XFS_INFO_INTERNAL = """\
meta-data=/dev/loop0             isize=512    agcount=4, agsize=20480 blks
         =                       sectsz=512   attr=2, projid32bit=1
         =                       crc=1        finobt=1, sparse=1, rmapbt=0
         =                       reflink=1    bigtime=1 inobtcount=1 nrext64=0
data     =                       bsize=4096   blocks=81920, imaxpct=25
         =                       sunit=0      swidth=0 blks
naming   =version 2              bsize=4096   ascii-ci=0, ftype=1
log      =internal log           bsize=4096   blocks=16384, version=2
         =                       sectsz=512   sunit=0 blks, lazy-count=1
realtime =none                   extsz=4096   blocks=0, rtextents=0
"""
XFS_INFO_EXTERNAL = XFS_INFO_INTERNAL.replace("/dev/loop0 ", "/dev/loop1 ").replace(
    "log      =internal log           bsize=4096   blocks=16384",
    "log      =/dev/loop2             bsize=4096   blocks=20480")

# field names of xfs_loggrant_class: /sys/kernel/tracing/events/xfs/xfs_log_reserve/format on
# Linux 6.18, and xfs_trace.h of Linux 6.1
FIELDS_6_18 = ("dev", "tic", "ocnt", "cnt", "curr_res", "unit_res", "flags", "reserveq", "writeq",
               "grant_reserve_bytes", "grant_write_bytes", "tail_space", "curr_cycle", "curr_block", "tail_lsn")
FIELDS_6_1 = ("dev", "ocnt", "cnt", "curr_res", "unit_res", "flags", "reserveq", "writeq", "grant_reserve_cycle",
              "grant_reserve_bytes", "grant_write_cycle", "grant_write_bytes", "curr_cycle", "curr_block", "tail_lsn")

MIB = 1 << 20
LOG = 64 * MIB   # the 320 MiB filesystem's log: 16384 blocks of 4096 bytes


def test_free_of_pandas_and_numpy():
    code = "import sys, jstall.xfs; print([m for m in ('pandas', 'numpy', 'pyarrow') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_kind_of_grant_heads_from_a_tracepoints_fields():
    assert xfs.grant_heads_kind(FIELDS_6_18) == "bytes"
    assert xfs.grant_heads_kind(FIELDS_6_1) == "cycles"
    assert xfs.grant_heads_kind(("dev", "ino")) is None


def test_lsns():
    lsn = xfs.assign_lsn(3, 194)
    assert lsn == (3 << 32) | 194 and xfs.crack_lsn(lsn) == (3, 194)
    c, b = xfs.crack_lsn(np.array([xfs.assign_lsn(1, 2), xfs.assign_lsn(7, 9)], dtype=np.int64))
    assert list(c) == [1, 7] and list(b) == [2, 9]
    # xlog_lsn_sub: the same cycle, and one cycle on (wrapped)
    assert xfs.lsn_sub(LOG, 1, 196, 1, 194) == 1024
    assert xfs.lsn_sub(LOG, 2, 10, 1, 131000) == LOG - (131000 - 10) * 512


def test_space_left_since_6_11_is_bytes():
    # xlog_grant_space_left: l_logsize - l_tail_space - grant, 0 at least
    assert xfs.grant_space_left(LOG, 51200, 200000) == LOG - 251200
    assert xfs.grant_space_left(1000, 600, 600) == 0
    # a tracepoint's grant_*_bytes already hold tail_space: from xfs_log_reserve on this machine
    assert xfs.space_left_traced(LOG, 602936) == LOG - 602936
    assert xfs.space_left_traced(LOG, LOG + 5) == 0
    # uint64 arrays (the tracepoint's type) clamp at 0 instead of wrapping
    out = xfs.space_left_traced(LOG, np.array([1024, LOG + 5], dtype=np.uint64))
    assert list(out) == [LOG - 1024, 0]
    assert list(xfs.grant_space_left(LOG, np.array([0, 4096]), np.array([1024, 1024]))) == [LOG - 1024, LOG - 5120]


def test_space_left_before_6_11_is_cycles_against_the_tail():
    # xlog_space_left(log, &head->grant), the tail block in 512-byte units (BBTOB)
    tail = 100 * 512
    assert xfs.space_left_cycles(MIB, 1, 200000, 1, 100) == MIB - (200000 - tail)       # same cycle
    assert xfs.space_left_cycles(MIB, 1, tail, 1, 100) == MIB                           # head at the tail
    assert xfs.space_left_cycles(MIB, 2, 10000, 1, 100) == tail - 10000                 # head one cycle on
    assert xfs.space_left_cycles(MIB, 3, 0, 1, 100) == 0                                # overrun
    assert xfs.space_left_cycles(MIB, 1, 0, 1, 100) == MIB                              # head behind the tail
    assert xfs.space_left_cycles(MIB, 1, 500, 2, 100) == MIB
    got = xfs.space_left_cycles(MIB, np.array([1, 2, 3, 1]), np.array([200000, 10000, 0, 0]), np.array([1, 1, 1, 1]),
                                np.array([100, 100, 100, 100]))
    assert list(got) == [MIB - (200000 - tail), tail - 10000, 0, MIB]


def test_what_a_ticket_needs_on_each_head():
    # xlog_ticket_reservation: write head unit_res; reserve head unit_res * cnt when permanent
    assert xfs.ticket_need("reserve", 197600, 3, xfs.XLOG_TIC_PERM_RESERV) == 592800
    assert xfs.ticket_need("reserve", 197600, 3, 0) == 197600
    assert xfs.ticket_need("write", 197600, 0, xfs.XLOG_TIC_PERM_RESERV) == 197600
    got = xfs.ticket_need("reserve", np.array([197600, 197600, 1000]), np.array([3, 3, 2]), np.array([1, 0, 1]))
    assert list(got) == [592800, 197600, 2000]
    assert xfs.EVENT_HEAD["xfs_log_reserve"] == "reserve" and xfs.EVENT_HEAD["xfs_log_regrant"] == "write"
    with pytest.raises(ValueError):
        xfs.ticket_need("tail", 1, 1, 1)


def test_headroom():
    assert xfs.headroom(1000, 1500, 10000) == (-500, -5.0)
    h, pct = xfs.headroom(np.array([LOG, 0]), np.array([LOG // 2, 1]), LOG)
    assert list(h) == [LOG // 2, -1] and pct[0] == 50.0 and pct[1] < 0
    assert xfs.sleep_fill_pct(LOG // 4, LOG) == 75.0


def test_headroom_of_records_of_both_kinds():
    # xfs_log_reserve on Linux 6.18 (this machine): t_cnt 2 of 197600, permanent
    new = {"unit_res": 197600, "cnt": 2, "ocnt": 2, "flags": 1, "tail_space": 0, "grant_reserve_bytes": 602936,
           "grant_write_bytes": 602936, "tail_lsn": xfs.assign_lsn(1, 194)}
    assert xfs.event_space_left(new, LOG, "reserve") == LOG - 602936
    assert xfs.event_headroom(new, LOG, "reserve") == (LOG - 602936 - 395200, pytest.approx(
        100 * (LOG - 602936 - 395200) / LOG))
    # the same ticket on Linux 6.1: the head at cycle 1, byte 602936 + BBTOB(194); tail 1:194
    old = {"unit_res": 197600, "cnt": 2, "flags": 1, "grant_reserve_cycle": 1,
           "grant_reserve_bytes": 602936 + 194 * 512, "grant_write_cycle": 1, "grant_write_bytes": 602936 + 194 * 512,
           "tail_lsn": xfs.assign_lsn(1, 194)}
    assert xfs.event_space_left(old, LOG, "reserve") == LOG - 602936
    assert xfs.event_headroom(old, LOG, "write")[0] == LOG - 602936 - 197600
    # a structured array of records (as the probes' tables hold them)
    dtype = [("unit_res", "i4"), ("cnt", "i1"), ("flags", "u4"), ("grant_reserve_bytes", "u8"),
             ("grant_write_bytes", "u8"), ("tail_space", "u8"), ("tail_lsn", "i8")]
    recs = np.array([(197600, 3, 1, 1024, 1024, 0, 0), (197600, 3, 1, LOG - 100000, LOG - 100000, 8192, 0)],
                    dtype=dtype)
    h, _ = xfs.event_headroom(recs, LOG, "reserve")
    assert list(h) == [LOG - 1024 - 592800, 100000 - 592800]
    # and a DataFrame of pre-6.11 records (as the analyzer holds them): same cycle, one on, two on
    import pandas as pd

    df = pd.DataFrame({"unit_res": [100] * 3, "cnt": [2] * 3, "flags": [1] * 3, "grant_reserve_cycle": [1, 2, 3],
                       "grant_reserve_bytes": [5000, 100, 0], "grant_write_cycle": [1] * 3,
                       "grant_write_bytes": [0] * 3, "tail_lsn": [xfs.assign_lsn(1, 2)] * 3})
    assert xfs.event_space_left(df, MIB, "reserve").tolist() == [MIB - (5000 - 1024), 1024 - 100, 0]
    assert xfs.event_headroom(df, MIB, "reserve")[0].tolist() == [MIB - 3976 - 200, 724, -200]
    with pytest.raises(ValueError):
        xfs.event_space_left({"unit_res": 1}, LOG, "reserve")


def test_stats_parse_under_the_kernels_names():
    s = xfs.parse_stats(STATS_TEXT)
    assert s["log"] == {"writes": 3, "blocks": 190, "noiclogs": 0, "force": 1, "force_sleep": 2}
    assert s["trans"] == {"sync": 0, "async": 1206, "empty": 0}
    assert s["push_ail"] == {"try_logspace": 1206, "sleep_logspace": 0, "push_ail": 1, "push_ail_success": 0,
                             "push_ail_pushbuf": 0, "push_ail_pinned": 0, "push_ail_locked": 0,
                             "push_ail_flushing": 0, "push_ail_restarts": 0, "push_ail_flush": 0}
    assert s["dir"]["create"] == 300 and s["ig"]["attempts"] == 301 and s["xpc"]["xstrat_bytes"] == 1228800
    assert s["abtb2"]["lookup"] == 0 and len(s["rtrefcntbt"]) == 15 and s["debug"] == {"debug": 0}
    assert xfs.counter(s, "xs_try_logspace") == 1206 and xfs.counter(s, "xs_log_force_sleep") == 2
    assert xfs.counter({}, "xs_sleep_logspace") is None
    # every line of this kernel's file is named in full
    assert all(isinstance(k, str) for values in s.values() for k in values)
    # an unknown line, and values past a known line's names, are kept by position
    s = xfs.parse_stats("trans 1 2 3 4\nnewline 5 6\n")
    assert s["trans"] == {"sync": 1, "async": 2, "empty": 3, 3: 4} and s["newline"] == {0: 5, 1: 6}


def test_stats_delta():
    start = xfs.parse_stats(STATS_TEXT)
    end = xfs.parse_stats(STATS_TEXT.replace("push_ail 1206 0 1 ", "push_ail 15305 3 510 ")
                          .replace("vnodes 0 0", "vnodes 0 5").replace("xpc 1228800", "xpc 1228900"))
    d = xfs.stats_delta(start, end)
    assert d["push_ail"]["try_logspace"] == 14099 and d["push_ail"]["sleep_logspace"] == 3
    assert d["trans"] == {"sync": 0, "async": 0, "empty": 0} and d["xpc"]["xstrat_bytes"] == 100
    # a 32-bit counter wraps; the active-vnode gauge and 64-bit lines subtract plainly
    a = xfs.parse_stats("push_ail 4294967290 0\nvnodes 9\nxpc 10\n")
    b = xfs.parse_stats("push_ail 3 0\nvnodes 4\nxpc 4\nlog 1 1 1 1 1\n")
    assert xfs.stats_delta(a, b) == {"push_ail": {"try_logspace": 9, "sleep_logspace": 0},
                                     "vnodes": {"active": -5}, "xpc": {"xstrat_bytes": -6}}
    assert xfs.counter(xfs.stats_delta(a, b), "xs_try_logspace") == 9


def test_absent_files_read_as_none():
    assert xfs.read_stats("jstall-no-such-device") is None
    assert xfs.read_log_state("jstall-no-such-device") is None


def test_log_state_values_and_space_left():
    assert xfs.parse_log_value("1:196\n") == (1, 196)
    assert xfs.parse_log_value("31744\n") == 31744
    assert xfs.parse_log_value("junk") == "junk"
    # Linux 6.11 and later (this machine after 300 files)
    new = {"log_head_lsn": (1, 192), "log_tail_lsn": (1, 2), "reserve_grant_head_bytes": 31744,
           "write_grant_head_bytes": 31744}
    assert xfs.log_state_kind(new) == "bytes"
    assert xfs.log_state_space_left(new, LOG) == LOG - 190 * 512 - 31744
    # before: the heads as cycle:bytes positions
    old = {"log_head_lsn": (1, 192), "log_tail_lsn": (1, 2), "reserve_grant_head": (1, 192 * 512 + 31744),
           "write_grant_head": (1, 192 * 512 + 31744)}
    assert xfs.log_state_kind(old) == "cycles"
    assert xfs.log_state_space_left(old, LOG, "write") == LOG - (192 * 512 + 31744 - 2 * 512)
    assert xfs.log_state_kind({"log_head_lsn": (1, 2)}) is None


def test_xfs_info_geometry():
    g = xfs.parse_xfs_info(XFS_INFO_INTERNAL)
    assert (g.log_bytes, g.log_blocks, g.log_block_size, g.log_device) == (LOG, 16384, 4096, None)
    assert (g.log_sector_size, g.log_sunit_blocks, g.log_version, g.lazy_count) == (512, 0, 2, 1)
    assert (g.inode_size, g.block_size, g.data_blocks, g.ag_count, g.ag_blocks, g.sector_size) == (
        512, 4096, 81920, 4, 20480, 512)
    assert g.sections["naming"] == {"": "version 2", "bsize": 4096, "ascii-ci": 0, "ftype": 1}
    assert g.sections["meta-data"][""] == "/dev/loop0" and g.sections["meta-data"]["reflink"] == 1
    assert g.as_dict()["log_bytes"] == LOG
    e = xfs.parse_xfs_info(XFS_INFO_EXTERNAL)
    assert (e.log_device, e.log_blocks, e.log_bytes) == ("/dev/loop2", 20480, 20480 * 4096)
    with pytest.raises(ValueError):
        xfs.parse_xfs_info("meta-data=/dev/sda1 isize=512\n")


def test_xfs_info_errors_name_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JstallError, match="install xfsprogs"):
        xfs.xfs_info("/")
    monkeypatch.undo()
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "xfs_info").write_text("#!/bin/sh\necho \"xfs_info: $1 is not a mounted XFS filesystem\" >&2\nexit 1\n")
    (fake / "xfs_info").chmod(0o755)
    monkeypatch.setenv("PATH", str(fake))
    with pytest.raises(JstallError, match=r"is not a mounted XFS filesystem.*mount point of an XFS") as err:
        xfs.xfs_info("/srv")
    assert "\n" not in str(err.value)


def test_sysfs_name(tmp_path):
    os.symlink("/dev/loop3", tmp_path / "alias")
    assert xfs.sysfs_name(str(tmp_path / "alias")) == "loop3"


def _run(*cmd, timeout=120):
    return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=timeout).stdout


@pytest.mark.kernel
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_a_real_xfs_against_the_kernel(tmp_path):
    import shutil

    if not shutil.which("mkfs.xfs") or not shutil.which("xfs_info"):
        pytest.skip("xfsprogs is not installed")
    image, mnt = tmp_path / "xfs.img", tmp_path / "mnt"
    with open(image, "wb") as f:
        f.truncate(320 * MIB)   # sparse
    mnt.mkdir()
    loop = mounted = None
    try:
        loop = _run("losetup", "--find", "--show", str(image)).strip()
        made = xfs.parse_xfs_info(_run("mkfs.xfs", "-f", "-K", loop))   # the geometry mkfs printed
        _run("mount", "-t", "xfs", loop, str(mnt))
        mounted = True
        name = xfs.sysfs_name(loop)
        stats0, global0, state0 = xfs.read_stats(name), xfs.read_stats(), xfs.read_log_state(name)
        assert stats0 is not None and global0 is not None and state0 is not None

        g = xfs.xfs_info(str(mnt))
        assert g.log_bytes == made.log_bytes == g.log_blocks * g.log_block_size and g.log_device is None
        assert (g.ag_count, g.inode_size, g.block_size, g.data_blocks) == (
            made.ag_count, made.inode_size, made.block_size, made.data_blocks)

        for i in range(300):
            with open(mnt / f"f{i}", "w") as f:
                f.write("x")
        os.sync()

        d = xfs.stats_delta(stats0, xfs.read_stats(name))
        d_global = xfs.stats_delta(global0, xfs.read_stats())
        assert d["dir"]["create"] >= 300
        assert d["trans"]["sync"] + d["trans"]["async"] >= 300
        assert d["push_ail"]["try_logspace"] >= 300 and d["push_ail"]["sleep_logspace"] >= 0
        assert d["log"]["writes"] >= 1 and d["log"]["blocks"] >= d["log"]["writes"]
        # every counter the mount moved, the global file moved at least as much
        assert d_global["push_ail"]["try_logspace"] >= d["push_ail"]["try_logspace"]
        assert d_global["dir"]["create"] >= d["dir"]["create"]

        state = xfs.read_log_state(name)
        kind = xfs.log_state_kind(state)
        assert kind in ("bytes", "cycles")
        fmt = "/sys/kernel/tracing/events/xfs/xfs_log_reserve/format"
        if os.path.exists(fmt):   # the sysfs files and the tracepoint agree on the kind
            names = [line.split(";")[0].split()[-1] for line in open(fmt) if "field:" in line]
            assert xfs.grant_heads_kind(names) == kind
        for lsn in ("log_head_lsn", "log_tail_lsn"):
            cycle, block = state[lsn]
            assert cycle >= 1 and 0 <= block < g.log_bytes // 512
        assert state["log_head_lsn"] != state0["log_head_lsn"]   # the log was written
        for head in xfs.HEADS:
            assert 0 <= xfs.log_state_space_left(state, g.log_bytes, head) <= g.log_bytes
    finally:
        if mounted:
            subprocess.run(["umount", str(mnt)], capture_output=True, timeout=120)
        if loop:
            subprocess.run(["losetup", "-d", loop], capture_output=True, timeout=60)
    with open("/proc/self/mounts") as f:
        assert not [line for line in f if str(tmp_path) in line]
    assert str(image) not in subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout


def test_what_the_tail_waited_for():
    # the AIL's most frequent event wins, ties to metadata writeback, then the log force
    assert xfs.tail_reason(5, 2, 1) == "metadata_writeback"
    assert xfs.tail_reason(3, 3, 0) == "metadata_writeback"
    assert xfs.tail_reason(2, 7, 7, log_writes=4) == "log_force"
    assert xfs.tail_reason(0, 0, 3, log_writes=9) == "lock_contention"
    # nothing from the AIL: the log's own writes if they completed meanwhile, else nothing known
    assert xfs.tail_reason(0, 0, 0, log_writes=2) == "log_write"
    assert xfs.tail_reason(0, 0, 0) == "unknown"
    assert set(xfs.TAIL_REASONS) == {"metadata_writeback", "log_force", "lock_contention", "log_write", "unknown"}
    # element-wise, the log's writes per wait or one count for all
    assert xfs.tail_reason([1, 0, 0], [0, 0, 0], [0, 0, 0], [0, 1, 0]) == ["metadata_writeback", "log_write", "unknown"]
    assert xfs.tail_reason([0, 0], [0, 1], [0, 0]) == ["unknown", "log_force"]
