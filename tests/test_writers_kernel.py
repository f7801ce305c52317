"""Who filled the journal, on a real paced ext4 shared by two real cgroup v2 cgroups: a culprit
(an xattr storm, in a kubepods-style pod path with a container scope) and a victim (4 KiB
write + fdatasync every 5 ms, in a systemd-style slice and scope). Checked against an
independent bpftrace counting the same tracepoints by cgroup."""

import os
import re
import subprocess
import sys
import tempfile

import pytest

from jstall.workloads.scratch import FsConfig, ScratchFs

import cgroup_pair
from cgroup_pair import CID, UID, VICTIM, in_cgroup
from child_output import end_bpftrace, read_line

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]

HERE = os.path.dirname(os.path.abspath(__file__))
# 128-byte inodes: every file's attributes need a block of their own; a 4 MiB journal
CONFIG = FsConfig(fs_size="64M", journal_size="4M", inode_size=128, write_iops=2000)
FILES, UPDATES = 3000, 6000

# independent sums by cgroup: the blocks each cgroup's handles dirtied, and what the kernel
# logged per commit. Each script wakes its reader every 200 ms (an empty printf): Debian's
# bpftrace 0.17 once stayed in epoll_wait for more than 60 s after SIGINT when no event came,
# and an event makes its loop see the signal. tid_t: jbd2 a module, bpftrace 0.17 lacks the
# type (as probes/jstall-commits.bt says).
BT = """
#define tid_t unsigned int
tracepoint:jbd2:jbd2_handle_stats /args->dev == $1/ {
  @dirtied[cgroup] = sum(args->dirtied_blocks); }
tracepoint:jbd2:jbd2_run_stats /args->dev == $1/ { @logged = sum(args->blocks_logged); }
BEGIN { printf("ready\\n"); }
interval:ms:200 { printf(""); }
"""


@pytest.fixture
def cgroups_made():
    if not cgroup_pair.available():
        pytest.skip("no cgroup v2 hierarchy at " + cgroup_pair.ROOT)
    with cgroup_pair.cgroup_pair() as made:
        yield made


def start_bpftrace(script, dev):
    """bpftrace running ``script`` with the device ``dev`` ('MAJ:MIN') as the kernel's dev_t in
    $1, once it printed "ready"."""
    major, minor = (int(x) for x in dev.split(":"))
    err = tempfile.TemporaryFile("w+")
    bt = subprocess.Popen(["bpftrace", "-e", script, str(major << 20 | minor)],
                          stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        line = None
        while line not in ("ready\n", ""):
            line = read_line(bt.stdout, 60)
        err.seek(0)
        assert line == "ready\n", f"bpftrace did not start: {err.read()[-2000:]!r}"
    except BaseException:
        bt.kill()
        bt.wait()
        raise
    finally:
        err.close()
    return bt

def test_the_culprit_that_filled_the_journal_is_named_for_the_victims_stalls(tmp_path,
                                                                            cgroups_made):
    from jstall.analyzer.analysis import analyze
    from jstall.analyzer.session.load import load_session
    from jstall.probes.recorder import RecordOptions, Recorder
    from jstall.probes.syscalls import parse_calls

    out = str(tmp_path / "s")
    with ScratchFs(CONFIG) as fs:
        mnt, dev = fs.mountpoint, fs.dev
        bt = start_bpftrace(BT, dev)
        try:
            subprocess.run(["sync", "-f", mnt], check=True)
            calls = tuple(parse_calls("metadata,fsync,write"))
            rec = Recorder(RecordOptions(output_dir=out, devices=[dev], quiet=True, calls=calls))
            rec.start()
            stop = os.path.join(str(tmp_path), "stop")
            victim = subprocess.Popen(in_cgroup(cgroups_made["victim"], [
                sys.executable, "-c", VICTIM, os.path.join(mnt, "victim.dat"), stop]))
            try:
                culprit = subprocess.run(in_cgroup(cgroups_made["culprit"], [
                    sys.executable, os.path.join(HERE, "xattr_workload.py"), os.path.join(mnt, "d"),
                    str(FILES), str(UPDATES)]),
                    capture_output=True, text=True, timeout=600)
            finally:
                open(stop, "w").close()
                assert victim.wait(timeout=60) == 0
            assert culprit.returncode == 0, culprit.stderr
            # every transaction committed, in the recording
            subprocess.run(["sync", "-f", mnt], check=True)
            rec.stop()
        finally:
            text, _ = end_bpftrace(bt)
    bt_dirtied = {int(m.group(1)): int(m.group(2))
                  for m in re.finditer(r"@dirtied\[(\d+)\]: (\d+)", text)}

    session = load_session(out)
    a = analyze(session)
    w = session.writers
    ids = {k: os.stat(p).st_ino if os.path.exists(p) else None for k, p in cgroups_made.items()}
    paths = session.meta["cgroups"]
    # the cgroups' paths were kept, and name what a person knows
    assert paths[str(ids["culprit"])].endswith(f"cri-containerd-{CID}.scope")
    names = {r["cgroup_id"]: r["cgroup"] for r in a.writers["writers"]}
    assert names[ids["culprit"]] == f"pod {UID} (burstable) container {CID[:12]}"
    # every handle of the two cgroups counted, as the independent probe counted them
    for k in ("culprit", "victim"):
        assert int(w.loc[w["cgroup_id"] == ids[k], "dirtied_blocks"].sum()) == bt_dirtied[ids[k]], k
    # per transaction, the writers' dirtied blocks are the kernel's; what it logged adds only
    # descriptor and commit blocks (< 2 %)
    per_tx = w.dropna(subset=["transaction"]).groupby("transaction")["dirtied_blocks"].sum()
    rs = session.run_stats.set_index("transaction")
    both = rs.join(per_tx, how="inner")
    assert len(both) == len(rs), "a committed transaction without writers"
    assert (both["dirtied_blocks"] == both["blocks"]).all()
    logged = int(both["blocks_logged"].sum())
    assert abs(int(both["dirtied_blocks"].sum()) - logged) <= 0.02 * logged
    # the culprit wrote >= 90 % of the logged blocks, over the run and when the journal filled
    run = [r for r in a.writers["writers"] if r["cgroup_id"] == ids["culprit"]]
    assert sum(r["share_pct"] for r in run) >= 90
    assert abs(sum(r["logged_blocks"] for r in a.writers["writers"]) - logged) <= 1
    fill = [r for r in a.writers["at_fill"] if r["cgroup_id"] == ids["culprit"]]
    assert fill and sum(r["share_pct"] for r in fill) >= 90
    # the victim stalled, and the sentence ties its stalls to the culprit
    v = a.writers["verdicts"][0]
    assert v["victim"].startswith("python") and "cgroup victim.scope" in v["victim"], v
    assert v["victim_stall_ms"] > 0 and f"container {CID[:12]}" in v["writer"], v
    assert "when the journal filled" in v["text"]


# an independent count of the tickets released or rolled on the device, and the bytes they
# used, by process
XFS_BT = """
#define xfs_lsn_t long long
tracepoint:xfs:xfs_log_ticket_ungrant, tracepoint:xfs:xfs_log_ticket_regrant /args->dev == $1/ {
  @tickets[pid] = count();
  if (args->unit_res > args->curr_res) { @bytes[pid] = sum(args->unit_res - args->curr_res); }
}
BEGIN { printf("ready\\n"); }
interval:ms:200 { printf(""); }
"""


def test_xfs_writers_share_the_kernels_log_bytes(tmp_path, cgroups_made):
    """An rm -rf in a cgroup on a paced XFS: its tickets' bytes as bpftrace counts them, and
    the kernel's xs_log_blocks shared out among the writers."""
    from jstall.analyzer.analysis import analyze
    from jstall.analyzer.session.load import load_session
    from jstall.analyzer.xfs.logs import kernel_delta
    from jstall.probes.recorder import RecordOptions, Recorder

    out = str(tmp_path / "s")
    create = open(os.path.join(HERE, "create_workload.py")).read()
    cfg = FsConfig(fs_type="xfs", fs_size="400M", journal_size="8M", write_iops=300)
    with ScratchFs(cfg) as fs:
        mnt, dev = fs.mountpoint, fs.dev
        subprocess.run([sys.executable, "-c", create, mnt, "20000"], check=True,
                       timeout=600)
        subprocess.run(["sync", "-f", mnt], check=True)
        bt = start_bpftrace(XFS_BT, dev)
        try:
            rec = Recorder(RecordOptions(output_dir=out, devices=[dev], quiet=True))
            rec.start()
            rm = subprocess.run(in_cgroup(cgroups_made["culprit"],
                                          ["sh", "-c", f"rm -rf {mnt}/* && sync -f {mnt}"]),
                                timeout=600)
            rec.stop()
        finally:
            text, _ = end_bpftrace(bt)
    assert rm.returncode == 0
    session = load_session(out)
    w = session.writers
    culprit = os.stat(cgroups_made["culprit"]).st_ino
    rows = w[w["cgroup_id"] == culprit]
    pids = set(rows["pid"])
    # the culprit's tickets and their bytes, as the independent probe counted them
    tickets = {int(m.group(1)): int(m.group(2))
               for m in re.finditer(r"@tickets\[(\d+)\]: (\d+)", text)}
    used = {int(m.group(1)): int(m.group(2)) for m in re.finditer(r"@bytes\[(\d+)\]: (\d+)", text)}
    assert int(rows["handles"].sum()) == sum(tickets[p] for p in pids)
    assert int(rows["logged_bytes"].sum()) == sum(used.get(p, 0) for p in pids)
    # the writers share out exactly the bytes the kernel wrote to the log (xs_log_blocks)
    a = analyze(session)
    (j,) = session.meta["journals"]
    kernel = kernel_delta(j)["log"]["blocks"] * 512
    xfs_rows = [r for r in a.writers["writers"] if r["dev"] == dev]
    assert sum(r["logged_bytes"] for r in xfs_rows) == pytest.approx(kernel, rel=1e-9)
    # the rm itself wrote most of it (inodegc's kernel workers, inactivating its inodes, the rest)
    share = sum(r["share_pct"] for r in xfs_rows if r["cgroup_id"] == culprit)
    assert share >= 80, xfs_rows[:4]
    assert {r["cgroup"] for r in xfs_rows if r["cgroup_id"] == culprit} == {
        f"pod {UID} (burstable) container {CID[:12]}"}
