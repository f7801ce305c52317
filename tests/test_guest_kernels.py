"""jstall on the distributions' stock kernels (tests/guest-kernels.txt), each booted in a QEMU
guest by scripts/guest.sh with this checkout visible: the smoke run (tests/guest/smoke.sh)
records the seed stall with a lab run while a system-wide recorder on the syscall
tracepoints and the monitor trace the same run; here the sessions it wrote are analyzed and
checked like ones recorded on this machine. The guests boot once the timed tests have run
and run beside the other tests at the lowest priority (tests/guest_runs.py); these tests run
last and wait for them. Each guest has a bound on its time (emulated: minutes, and no timing
is asserted)."""

import os
import re

import pyarrow.parquet as pq
import pytest
from guest_runs import RUNS, listed_kernels

from jstall import flavour, session
from jstall.probes import host
from jstall.analyzer.xfs.logs import kernel_delta

pytestmark = [pytest.mark.kernel, pytest.mark.guest,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]

KERNELS = listed_kernels()


@pytest.fixture(scope="module")
def smoke():
    """{kernel: (output directory, guest exit status, console output)}: the guests the
    session started (tests/guest_runs.py), once they ended."""
    return RUNS.results()


def status(out):
    """{step: exit status} the smoke script wrote."""
    try:
        with open(os.path.join(out, "status.txt")) as f:
            return dict(line.strip().split("=", 1) for line in f if "=" in line)
    except OSError:
        return {}


def log_tail(out, name, chars=3000):
    """The end of a step's own log (lab.log, record.log, ...): what it printed before it
    failed (a Python fault prints its threads' stacks there, PYTHONFAULTHANDLER)."""
    try:
        with open(os.path.join(out, name), errors="replace") as f:
            return f.read()[-chars:]
    except OSError as e:
        return f"({name}: {e.strerror})"


def call_count(path, call, dev):
    t = pq.read_table(session.table_path(path, "call_totals")).to_pandas()
    return int(t[(t["syscall"] == call) & (t["dev"] == dev)]["count"].sum())


def metric(text, name, **labels):
    """The sum of a Prometheus metric's samples whose labels include these."""
    total, found = 0.0, False
    for line in text.splitlines():
        m = re.match(r"^(\w+)(?:\{(.*)\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
            found = True
    return total if found else None


@pytest.mark.parametrize("kernel", KERNELS)
def test_stock_kernel_records_the_seed_stall(smoke, kernel):
    from jstall.analyzer import analyze

    out, rc, console = smoke[kernel]
    st = status(out)
    assert rc == 0 and st.get("ready") == "1" and st.get("lab") == "0", (rc, st, log_tail(out, "lab.log"),
                                                                          console[-3000:])
    lab = os.path.join(out, "lab")
    meta = session.read_metadata(lab)
    assert meta["kernel_release"] == kernel
    probes = meta["probes"]
    # stock kernels take fentry: the traced calls' own functions, not syscall tracepoints
    assert probes["attach"] == "fentry", probes
    assert "fentry:__x64_sys_setxattr" in probes["attached"]
    assert probes["missing"] == [], probes["missing"]
    # the jbd2 and ext4 tracepoints live in modules there: every program typed through the
    # module's BTF (a refusal would be stored with the verifier's words)
    assert probes["btf_refused"] == {}, probes["btf_refused"]
    assert {"sched_switch", "sched_waking", "jbd2_checkpoint", "jbd2_run_stats", "jbd2_start_commit"} <= set(
        probes["btf_typed"])
    if kernel.startswith("6.1."):
        assert probes["calls_unavailable"] == ["setxattrat", "removexattrat"]
    a = analyze(lab)
    # wait chains: who woke the intervals (the jbd2 thread after a commit, at least)
    assert a.session.offcpu["waker_tid"].notna().any()
    d = a.to_dict()
    st = d["stalls"]
    # nothing lost; on PREEMPT_RT a program preempted on a CPU holds its guard (prog->active)
    # and the kernel skips the next run of it there, and counts it (6.1 rt: 1 in a lab run)
    lost = dict(d["events_lost"])
    skipped = lost.pop("skipped")
    assert lost == {"calls": 0, "offcpu": 0, "jbd2": 0, "home_writes": 0, "writers": 0}
    assert skipped == 0 or session.read_metadata(lab)["kernel_flavour"] == "rt", d["events_lost"]
    assert st["count"] >= 1, d
    # the same cause and advice as on this machine's kernel (tests/test_analyzer_kernel.py)
    # waiting for a CPU is the emulator's (two guests on two cores): the largest of the
    # kernel's waits is the checkpoint, and most stalls that waited for log space checkpointed
    by_cause = {c: v for c, v in st["by_cause"].items() if c != "cpu"}
    assert max(by_cause, key=lambda c: by_cause[c]["total_ms"]) == "checkpoint", st["by_cause"]
    assert by_cause["checkpoint"]["count"] >= 1
    kinds = [r["kind"] for r in d["recommendations"]]
    assert "journal_size" in kinds and "inode_size" in kinds, kinds
    (j,) = d["journals"]
    assert j["forced_checkpoints"] >= 1 and j["inode_size"] == 128
    # the kernel's own transaction count agrees (/proc/fs/jbd2 read in the guest)
    assert not [p for p in d.get("proc", []) if p.get("status") == "disagree"], d.get("proc")
    # the writers' probe attached there too: per committed transaction the handles' dirtied
    # blocks are the kernel's (jbd2_run_stats), and the writers share out what it logged
    w = a.session.writers
    per_tx = w.dropna(subset=["transaction"]).groupby("transaction")["dirtied_blocks"].sum()
    both = a.session.run_stats.set_index("transaction").join(per_tx, how="inner")
    assert len(both) == len(a.session.run_stats) > 0, "a committed transaction without writers"
    assert (both["dirtied_blocks"] == both["blocks"]).all(), both[["blocks", "dirtied_blocks"]]
    logged = int(both["blocks_logged"].sum())
    assert abs(sum(r["logged_blocks"] for r in d["writers"]["writers"]) - logged) <= 1


@pytest.mark.parametrize("kernel", KERNELS)
def test_fentry_counts_equal_the_syscall_tracepoints(smoke, kernel):
    """The lab's recording (fentry) and a system-wide one on the syscall tracepoints, over
    the same run: the same setxattr count on the lab's filesystem, the workload's own, less
    at most the runs the kernel skipped and counted (events_lost.skipped). Where the kernel
    skips without counting (PREEMPT_RT before 6.7, syscall tracepoints) record says so."""
    out, rc, console = smoke[kernel]
    st = status(out)
    assert st.get("record") == "0" and st.get("lab") == "0", (st, log_tail(out, "record.log"),
                                                              log_tail(out, "lab.log"), console[-3000:])
    lab, other = os.path.join(out, "lab"), os.path.join(out, "syscalls-session")
    meta = session.read_metadata(lab)
    assert session.read_metadata(other)["probes"]["attach"] == "syscalls"
    (dev,) = meta["filters"]["devices"]
    phases = meta["lab"]["phases"]
    # the pattern's own count: an attribute set per attribute created, and each update
    workload = sum(p.get("attrs", 0) for p in phases if p["name"] == "create") + sum(
        p["ops"] for p in phases if p["name"] == "update")
    assert workload > 0
    for path, log in ((lab, "lab.log"), (other, "record.log")):
        m = session.read_metadata(path)
        n, skipped = call_count(path, "setxattr", dev), m["events_lost"]["skipped"]
        version = host.kernel_version(m["kernel_release"])
        if flavour.uncounted_skips(m["kernel_flavour"], version, m["probes"]["attach"]):
            assert n <= workload and "counts none of those skips" in log_tail(out, log, 100000), (path, n, workload)
        else:
            assert workload - skipped <= n <= workload, (path, n, skipped, workload)
    files = sum(p.get("files", 0) for p in phases if p["name"] == "create")
    assert call_count(lab, "openat", dev) == files   # each file is created by one openat


@pytest.mark.parametrize("kernel", KERNELS)
def test_stock_kernel_monitor_serves_the_stalls(smoke, kernel):
    out, rc, console = smoke[kernel]
    st = status(out)
    assert st.get("scrape") == "0" and st.get("monitor") == "0", (st, log_tail(out, "monitor.log"), console[-3000:])
    with open(os.path.join(out, "metrics.txt")) as f:
        text = f.read()
    dev = session.read_metadata(os.path.join(out, "lab"))["filters"]["devices"][0]
    assert metric(text, "jstall_stalls_total", device=dev, cause="checkpoint") >= 1, text[-2000:]
    assert metric(text, "jstall_journal_checkpoints_total", device=dev, mode="forced") >= 1
    assert metric(text, "jstall_journal_size_blocks", device=dev) > 0


@pytest.mark.parametrize("kernel", KERNELS)
def test_stock_kernel_records_xfs_log_waits(smoke, kernel):
    """XFS as a module, its tracepoints as the kernel has them (6.1: (cycle, bytes) grant
    heads and no ticket; 6.12: bytes): every sleep the kernel counted is a recorded one, and
    the waits are log space."""
    from jstall.analyzer import analyze

    out, rc, console = smoke[kernel]
    st = status(out)
    assert st.get("lab_xfs") == "0", (st, log_tail(out, "lab-xfs.log"), console[-3000:])
    a = analyze(os.path.join(out, "lab-xfs"))
    d = a.to_dict()
    probes = session.read_metadata(os.path.join(out, "lab-xfs"))["probes"]
    assert "xfs:xfs_log_grant_sleep" in probes["attached"] and not probes["missing"], probes
    (log,) = d["xfs_logs"]
    assert log["log_bytes"] == 8 << 20 and d["journals"] == []
    assert log["sleeps"] == log["kernel_sleep_logspace"] and log["sleeps_agree"] is True, log
    if log["waits"]:
        w = a.xfs_waits
        # some ticket asked with less than it needed; whether tickets waited ahead, on both
        assert w["space_left_start_bytes"].notna().all() and (w["headroom_start_bytes"] < 0).any(), w
        assert w["queued"].notna().all(), w
        cycles = kernel.startswith("6.1.")
        assert w["start_tail_space_bytes"].isna().all() == cycles and (w["ticket"] == 0).all() == cycles
        assert w["log_writes"].notna().all(), w   # xlog_iclog_sync_done (since 5.14) counted on both
    # the writers share out exactly the bytes the kernel wrote to the log (xs_log_blocks)
    (j,) = session.read_metadata(os.path.join(out, "lab-xfs"))["journals"]
    kernel = kernel_delta(j)["log"]["blocks"] * 512
    assert sum(r["logged_bytes"] for r in d["writers"]["writers"]) == pytest.approx(kernel, rel=1e-9), \
        d["writers"]["writers"][:4]


def read_output(out, name):
    """A file the smoke run wrote, '' when it wrote none."""
    try:
        with open(os.path.join(out, name), errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def complaints(text):
    """bpftrace's errors and warnings but its harmless RLIMIT_MEMLOCK one."""
    return [ln for ln in text.splitlines() if re.search(r"error|warning", ln, re.I) and "RLIMIT_MEMLOCK" not in ln]


@pytest.mark.parametrize("kernel", KERNELS)
def test_stock_kernel_runs_the_jbd2_bpftrace_scripts(smoke, kernel):
    """probes/jstall-commits.bt and probes/jstall-slowcalls.bt with the distribution's bpftrace
    (0.17: vmlinux's BTF only, jbd2 a module, so no tid_t but the scripts' own) over the ext4
    lab run, ended with Ctrl-C: a line per commit of the lab's journal, at least the commits
    and logged blocks the recording saw (the scripts ran longer), and the forced checkpoints
    in the slow calls."""
    from jstall.analyzer import analyze

    out, rc, console = smoke[kernel]
    st = status(out)
    commits, slow = read_output(out, "commits.txt"), read_output(out, "slowcalls.txt")
    assert st.get("lab") == "0" and st.get("commits") == "0" and st.get("slowcalls") == "0", (
        st, commits[:2000], slow[:2000], console[-2000:])
    assert re.search(r"^Tracing jbd2 commits for \d+ s\.", commits, re.M) and not complaints(commits), commits[:3000]
    assert re.search(r"^Tracing metadata calls >= 10 ms and their jbd2 events for \d+ s\.", slow, re.M) \
        and not complaints(slow), slow[:3000]
    (j,) = analyze(os.path.join(out, "lab")).to_dict()["journals"]
    major, minor = j["dev"].split(":")
    rows = re.findall(rf"^\d\d:\d\d:\d\d\s+{major},{minor}\s+\d+\s+\d+\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+"
                      r"\s+\d+\s+\d+\s+(\d+)$", commits, re.M)
    assert len(rows) >= j["transactions"] > 0, (j["transactions"], commits[-3000:])
    assert sum(int(x) for x in rows) >= j["logged_blocks"], (j["logged_blocks"], commits[-3000:])
    assert j["forced_checkpoints"] >= 1
    assert re.search(r"^\s+\d+\s+\+\s*[\d.]+ ms  checkpoint\s+result 1 \(this task writes blocks home\)$",
                     slow, re.M), slow[-3000:]


@pytest.mark.parametrize("kernel", KERNELS)
def test_stock_kernel_runs_the_xfslog_bpftrace_script(smoke, kernel):
    """probes/jstall-xfslog.bt with the distribution's bpftrace (0.17, which reads types from
    vmlinux's BTF only) where xfs is a module, given a duration: it attaches, ends by itself,
    prints a line per wait of the lab's XFS run, and their sleeps are at least the kernel's
    count over the recording (the script ran longer)."""
    from jstall.analyzer import analyze

    out, rc, console = smoke[kernel]
    st = status(out)
    # hang: where a bpftrace that did not exit was
    text, hang = read_output(out, "xfslog.txt"), read_output(out, "xfslog-hang.txt")
    # the output's end too: whether bpftrace printed its maps before it stopped exiting
    assert st.get("lab_xfs") == "0" and st.get("xfslog") == "0", (st, hang[-3000:], text[:1000], text[-1500:],
                                                                  console[-2000:])
    assert re.search(r"^Tracing XFS log-space waits for \d+ s\.", text, re.M), text[:3000]
    assert not complaints(text), text[:3000]
    rows = re.findall(r"^\S+\s+\d+,\d+\s+\S+\s+\d+\s+(?:reserve|write)\s+(\d+)\s+(\d+)\s+(\d+)\s+\d+\.\d+$", text, re.M)
    waits = re.search(r"^@waits: (\d+)$", text, re.M)
    assert len(rows) == (int(waits.group(1)) if waits else 0), text[-3000:]
    (log,) = analyze(os.path.join(out, "lab-xfs")).to_dict()["xfs_logs"]
    assert sum(int(r[2]) for r in rows) >= log["kernel_sleep_logspace"], (log, text[-3000:])
    assert len(rows) >= log["waits"] and all(int(r[0]) > 0 for r in rows), (log, text[-3000:])
