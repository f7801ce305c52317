"""Real clients nobody here wrote, recorded on a small-journal ext4 over a paced device, each
checked against an independent bpftrace measurement of the same run."""

import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from jstall.workloads.scratch import FsConfig, ScratchFs
from child_output import end_bpftrace, read_line

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]

JSTALL = os.path.join(os.path.dirname(sys.executable), "jstall")
FILES = 10000

# GNU tar creates regular files with mknodat: the time of the mknodat calls of 10 ms or more,
# and how many, as bpftrace sees them (syscall tracepoints, nothing of jstall's)
MKNODAT_BT = """
BEGIN { printf("attached\\n"); }
tracepoint:syscalls:sys_enter_mknodat /comm == "tar"/ { @m[tid] = nsecs; }
tracepoint:syscalls:sys_exit_mknodat /@m[tid]/ {
  $d = nsecs - @m[tid];
  if ($d >= 10000000) { @slow_ns = sum($d); @slow = count(); }
  @all = count();
  delete(@m[tid]);
}
"""


def bpftrace_values(text):
    return {k: int(v) for k, v in re.findall(r"^@(\w+): (\d+)$", text, re.M)}


@pytest.fixture(scope="module")
def xattr_archive(tmp_path_factory):
    """A tar archive (--xattrs) of FILES one-byte files in directories of 1,000, each with
    two 16-byte user.* attributes of its own (equal attribute blocks would be shared)."""
    path = str(tmp_path_factory.mktemp("tar") / "files.tar")
    with ScratchFs(FsConfig(fs_size="512M", journal_size="64M", inode_size=256)) as src:
        top = os.path.join(src.mountpoint, "src")
        os.mkdir(top)
        for i in range(FILES):
            if i % 1000 == 0:
                sub = os.path.join(top, f"d{i // 1000}")
                os.mkdir(sub)
            p = os.path.join(sub, f"f{i}")
            with open(p, "w") as f:
                f.write("x")
            os.setxattr(p, "user.a", b"%016d" % i)
            os.setxattr(p, "user.b", b"%016x" % (i * 7919))
        subprocess.run(["tar", "--xattrs", "-cf", path, "-C", src.mountpoint, "src"], check=True)
    return path


def test_tar_xattrs_extraction_stalls_in_mknodat(xattr_archive, tmp_path):
    """GNU tar --xattrs extracting into 128-byte inodes on a 4 MiB journal, on a device paced at
    400 writes/s (a forced checkpoint then costs tens of ms, well clear of the 10 ms threshold; at
    2,000 most cost 4-9 ms): every forced checkpoint runs inside tar's mknodat. analyze finds the
    stalls there, with checkpoint the cause, and their time and count agree with bpftrace's within
    10 %."""
    from jstall.analyzer import analyze

    out = str(tmp_path / "s")
    cfg = FsConfig(fs_size="256M", journal_size="4M", inode_size=128, write_iops=400)
    with ScratchFs(cfg) as fs:
        bt = subprocess.Popen(["bpftrace", "-e", MKNODAT_BT], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not bpftrace_attached(bt):
                time.sleep(0.2)
            rec = subprocess.run([JSTALL, "record", "-q", "-o", out, "-d", fs.dev, "--", "sh", "-c",
                                  f"tar --xattrs -xf {xattr_archive} -C {fs.mountpoint} && sync -f {fs.mountpoint}"],
                                 capture_output=True, text=True, timeout=600)
        finally:
            text = end_bpftrace(bt)[0]
    assert rec.returncode == 0, rec.stderr
    seen = bpftrace_values(text)
    assert seen["all"] == FILES and seen.get("slow", 0) >= 5, text
    a = analyze(out)
    d = a.to_dict()
    st = d["stalls"]
    assert max(st["by_cause"], key=lambda c: st["by_cause"][c]["total_ms"]) == "checkpoint", st["by_cause"]
    assert d["calls"]["mknodat"]["count"] == FILES
    mk = a.stalls[a.stalls["syscall"] == "mknodat"]
    assert len(mk) == pytest.approx(seen["slow"], rel=0.1)
    assert mk["latency_ms"].sum() == pytest.approx(seen["slow_ns"] / 1e6, rel=0.1)
    assert (mk["cause"] == "checkpoint").sum() >= 0.5 * len(mk)
    assert any(r["kind"] == "journal_size" for r in d["recommendations"]), d["recommendations"]
    # checkpoints by cost: the expensive ones are the stalls' (each wait once), the rest cost
    # less than the threshold; every forced checkpoint of the run is one or the other
    cc = d["checkpoint_costs"]
    (j,) = d["journals"]
    assert cc["forced"] == j["forced_checkpoints"] == cc["expensive"] + cc["negligible"] + cc["outside"]
    assert cc["expensive_wait_ms"] == pytest.approx(seen["slow_ns"] / 1e6, rel=0.1)
    assert cc["expensive_written_blocks"] > 0


def test_checkpoints_in_calls_not_traced_are_seen_as_journal_waits(xattr_archive, tmp_path):
    """The same extraction with only setxattr traced: tar's forced checkpoints run in its
    mknodat, which is not traced; they are seen in its journal handle waits (journal_start,
    context mknodat). Checkpoints in tasks outside the recording (a writeback kworker) are
    named, and then 'no stalls' is never said."""
    from jstall.analyzer import analyze
    from jstall.analyzer.render.text import session_summary

    out = str(tmp_path / "s")
    cfg = FsConfig(fs_size="256M", journal_size="4M", inode_size=128, write_iops=400)
    with ScratchFs(cfg) as fs:
        rec = subprocess.run([JSTALL, "record", "-q", "--calls", "setxattr", "-o", out, "-d", fs.dev, "--", "sh",
                              "-c", f"tar --xattrs -xf {xattr_archive} -C {fs.mountpoint} && sync -f {fs.mountpoint}"],
                             capture_output=True, text=True, timeout=600)
    assert rec.returncode == 0, rec.stderr
    a = analyze(out)
    d = a.to_dict()
    ev = a.session.jbd2_events
    tar_cp = ev[(ev["event"] == "checkpoint") & (ev["comm"] == "tar")]
    assert len(tar_cp) >= 5 and tar_cp["in_traced_call"].all()
    waits = a.session.calls[(a.session.calls["syscall"] == "journal_start") & (a.session.calls["comm"] == "tar")]
    # the calls GNU tar makes that start a journal handle: it creates with mknodat, and sets
    # owner, mode and times by path or on the open file (fchmod, fchown; chmod in one run: a
    # wait lands in whichever of them starts a handle as the journal fills)
    assert len(waits) and set(waits["context"]) <= {"mknodat", "mkdirat", "openat", "utimensat", "fchownat",
                                                   "fchmodat", "fchmod", "fchown", "chmod", "chown", "lchown",
                                                   "close"} \
        and (waits["context"] == "mknodat").any()
    cc = d["checkpoint_costs"]
    assert cc["forced"] == d["journals"][0]["forced_checkpoints"] == cc["expensive"] + cc["negligible"] + cc["outside"]
    untraced = d["untraced_checkpoints"]
    assert all(not u["traced_task"] for u in untraced), untraced
    assert sum(u["checkpoints"] for u in untraced) == cc["outside"]
    text = session_summary(a)
    if untraced:
        assert any("ran outside the traced calls" in w for w in d["warnings"]) and "No stalls:" not in text
    assert "no_stalls" not in [r["kind"] for r in d["recommendations"]] or not cc["forced"]


def bpftrace_attached(proc, timeout=60):
    """Has bpftrace printed its 'Attaching N probes...' line? Reads its lines (each with a
    bound on the wait) up to that one; False once it ended without. (A pipe gets the line when
    bpftrace flushes: a program's BEGIN printf, which runs once every probe is attached.)"""
    while True:
        line = read_line(proc.stdout, timeout)
        if not line:
            return False
        if line.startswith("Attaching"):
            return True


def _fs_mark_session(tmp_path, journal_size):
    """fs_mark (Debian's fsmark), 2 threads creating and unlinking 20,000 empty files each in
    one directory, recorded on 128-byte inodes over a device paced at 2,000 writes/s."""
    from jstall.analyzer import analyze

    out = str(tmp_path / f"fsmark-{journal_size}")
    with ScratchFs(FsConfig(fs_size="1G", journal_size=journal_size, inode_size=128, write_iops=2000)) as fs:
        top = os.path.join(fs.mountpoint, "d")
        os.mkdir(top)
        # fs_mark takes directory names under 40 bytes: it runs in the directory
        for attempt in (1, 2):
            rec = subprocess.run([JSTALL, "record", "-q", "-o", f"{out}-{attempt}", "-d", fs.dev, "--", "fs_mark", "-d",
                                  ".", "-t", "2", "-n", "20000", "-s", "0", "-S", "0"], capture_output=True, text=True,
                                 timeout=600, cwd=top)
            # fs_mark's two threads in one directory: at times one thread's unlink of its own file
            # fails ("Error in unlink of ...: No such file or directory"), fs_mark's own failure
            # and no jstall's: each thread seeds the random part of its names with the
            # microseconds of its start, so two that start in the same microsecond make the same
            # names, and one removes the other's file; run it again in a clean directory
            if rec.returncode == 0 or "Error in unlink" not in rec.stderr:
                break
            shutil.rmtree(top)
            os.mkdir(top)
    assert rec.returncode == 0, rec.stderr
    out = f"{out}-{attempt}"
    return analyze(out)


def _lock_wait_ms(a):
    """Off-CPU ms of the fs_mark threads' calls in a rwsem's slow path (the directory lock),
    from the stacks alone."""
    s = a.session
    lock = {int(i) for i, f in zip(s.stacks["stack_id"], s.stacks["frames"])
            if any(str(x).startswith(("rwsem_down_write_slowpath", "rwsem_down_read_slowpath")) for x in f)}
    off = s.offcpu
    return float(off.loc[off["stack_id"].isin(lock), "offcpu_ns"].sum()) / 1e6


def test_fs_mark_threads_queued_behind_the_checkpointing_thread(tmp_path):
    """Two fs_mark threads in one directory on a 4 MiB journal: while one checkpoints with the
    directory's lock held, the other sleeps in rwsem_down_write_slowpath, a stack that names no
    cause. Its waker is the checkpointing thread, so that wait is checkpoint too, queued behind
    it by name, and 'other' is at most 5 % of the stall time. The lock waits are the journal's
    doing: on a 64 MiB journal the same run waits on the lock less than a fifth as long."""
    a = _fs_mark_session(tmp_path, "4M")
    d = a.to_dict()
    st = d["stalls"]
    # fs_mark's two workers stall; its parent at times too (a call at the start or end of the
    # run that took the threshold under load), never for long
    assert set(a.stalls["comm"].astype(str)) == {"fs_mark"}, a.stalls["comm"].unique()
    per_task = a.stalls.groupby("tid")["latency_ms"].sum().sort_values(ascending=False)
    tids = {int(t) for t in per_task.index[:2]}
    assert len(tids) == 2 and per_task.iloc[:2].sum() >= 0.95 * per_task.sum(), per_task
    assert max(st["by_cause"], key=lambda c: st["by_cause"][c]["total_ms"]) == "checkpoint"
    assert st["by_cause"]["other"]["total_ms"] <= 0.05 * st["offcpu_ms"], st["by_cause"]
    lock_ms = _lock_wait_ms(a)
    assert lock_ms >= 0.05 * st["offcpu_ms"], (lock_ms, st["offcpu_ms"])  # the queueing happened
    assert st["queued"]["total_ms"] >= 0.5 * lock_ms, (st["queued"], lock_ms)
    behind = st["queued_behind"]
    assert behind and all(k.split()[0] == "fs_mark" and int(k.split()[1]) in tids for k in behind), behind
    q = a.stalls[a.stalls["queued_ms"] > 0]
    assert (q["cause"] == "checkpoint").mean() >= 0.8
    assert all(b.split()[1] != str(t) for b, t in zip(q["queued_behind"], q["tid"]))  # behind the other thread
    big = _fs_mark_session(tmp_path, "64M")
    assert _lock_wait_ms(big) < 0.2 * lock_ms, (_lock_wait_ms(big), lock_ms)


# strace -c's table: "% time seconds usecs/call calls [errors] syscall"
STRACE_ROW = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$", re.M)


@pytest.mark.parametrize("client", ["tar", "cp", "rsync"])
def test_every_traced_call_counted_as_strace_counts_it(client, tmp_path):
    """GNU tar --xattrs extraction, cp -a and rsync -aX of 500 files with a user.* attribute
    each, recorded with --calls all and every call stored one by one (--min-ms 0) while strace
    -f -c counts the same processes' syscalls: for every call jstall traces, its count for the
    client's processes equals strace's exactly (strace's own calls are its, not the client's)."""
    from jstall.analyzer.session.load import load_session
    from jstall.probes.syscalls import GROUPS

    out, counts = str(tmp_path / "s"), str(tmp_path / "strace.txt")
    with ScratchFs(FsConfig(fs_size="256M", journal_size="16M", inode_size=256)) as fs:
        src = os.path.join(fs.mountpoint, "src")
        os.mkdir(src)
        for i in range(500):
            p = os.path.join(src, f"f{i}")
            with open(p, "w") as f:
                f.write("x" * (i % 7))
            os.setxattr(p, "user.a", b"%08d" % i)
        dst = os.path.join(fs.mountpoint, "dst")
        if client == "tar":
            archive = str(tmp_path / "src.tar")
            subprocess.run(["tar", "--xattrs", "-cf", archive, "-C", fs.mountpoint, "src"], check=True)
            os.mkdir(dst)
            cmd = ["tar", "--xattrs", "-xf", archive, "-C", dst]
        elif client == "cp":
            cmd = ["cp", "-a", src, dst]
        else:
            cmd = ["rsync", "-aX", src + "/", dst + "/"]
        # no -d: the client's calls on other filesystems (the archive, its libraries) count too
        rec = subprocess.run([JSTALL, "record", "-q", "--calls", "all", "--min-ms", "0", "-o", out, "--",
                              "strace", "-f", "-qq", "-c", "-o", counts, "--", *cmd],
                             capture_output=True, text=True, timeout=600)
        assert rec.returncode == 0, rec.stderr
        assert len(os.listdir(dst if client != "tar" else os.path.join(dst, "src"))) == 500
    traced = {c for calls in GROUPS.values() for c in calls}
    seen = {name: int(n) for n, name in STRACE_ROW.findall(open(counts).read()) if name in traced}
    s = load_session(out)
    assert not any((s.meta.get("events_lost") or {}).values()), s.meta.get("events_lost")
    mine = s.calls[(s.calls["comm"] == client) & (s.calls["syscall"] != "journal_start")]
    got = {k: int(v) for k, v in mine.groupby("syscall").size().items()}
    assert seen and got == seen, (got, seen)
