"""The bpftrace scripts (probes/*.bt) on a real loop-device ext4 where an xattr workload
stalls in forced checkpoints (128-byte inodes, 4 MiB journal, throttled device): each script
runs under bpftrace while the workload runs, is stopped with SIGINT, and what it printed is
checked against the workload and /proc/fs/jbd2/<dev>/info. Given a duration (SECS, their last
argument), each script ends by itself and prints the same."""

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid

import pytest

from jstall.probes.host import config_hz
from jstall.workloads.scratch import FsConfig, ScratchFs

from child_output import end_bpftrace
from conftest import leftovers

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root"),
    pytest.mark.skipif(shutil.which("bpftrace") is None, reason="needs bpftrace"),
]

HERE = os.path.dirname(os.path.abspath(__file__))
PROBES = os.path.join(os.path.dirname(HERE), "probes")
MIN_MS = 50
FILES, UPDATES = 3000, 4000
HZ = config_hz() or 250
# 09:13:46 python  8453  8453  setxattr  2424.210  0  7,2  1
CALL = re.compile(r"^\d\d:\d\d:\d\d (.{16}) (\d+)\s+(\d+)\s+(\w+)\s+(\d+\.\d+)\s+(-?\d+)\s+(\d+),(\d+)\s+(\d+)$")
#   13923   +  985.833 ms  checkpoint  result 1 (this task writes blocks home)
EVENT = re.compile(r"^  (\d+)\s+\+\s*(\d+\.\d+) ms  (\w+)\s+(.*)$")
# 09:13:46   7,2   5   0   2440   0.005   0.012   3.699   1165   1334   1357
COMMIT = re.compile(r"^\d\d:\d\d:\d\d\s+(\d+),(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+"
                    r"(\d+\.\d+)\s+(\d+\.\d+)\s+(\d+\.\d+)\s+(\d+)\s+(\d+)\s+(\d+)$")
AVERAGE = re.compile(r"^\s+(\d+),(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+\.\d+)\s+(\d+\.\d+)\s+(\d+\.\d+)"
                     r"\s+(\d+)\s+(\d+)\s+(\d+)$")
RLIMIT = "couldn't set RLIMIT_MEMLOCK"


def errors(stderr):
    """stderr lines other than bpftrace's harmless RLIMIT_MEMLOCK warning."""
    return [line for line in stderr.splitlines() if line.strip() and RLIMIT not in line]


def proc_info(name):
    with open(f"/proc/fs/jbd2/{name}/info") as f:
        text = f.read()
    info = {"transactions": int(re.match(r"(\d+) transactions", text).group(1))}
    for key, pattern in (("running_ms", r"(\d+)ms running transaction"),
                         ("handles", r"(\d+) handles per transaction"),
                         ("blocks", r"(\d+) blocks per transaction"),
                         ("logged", r"(\d+) logged blocks per transaction")):
        m = re.search(pattern, text)
        info[key] = int(m.group(1)) if m else None
    return info


class Bpftrace:
    """One script running under bpftrace, its stdout in a file; stop() ends it with SIGINT
    (its END block runs) and returns what it printed on stdout and stderr."""

    def __init__(self, tmp, script, *args):
        self.out = open(os.path.join(tmp, f"{script}-{'-'.join(map(str, args))}.out"), "w+")
        self.proc = subprocess.Popen(["bpftrace", os.path.join(PROBES, script), *map(str, args)],
                                     stdout=self.out, stderr=subprocess.PIPE, text=True)

    def text(self):
        self.out.seek(0)
        return self.out.read()

    def wait_attached(self, timeout=60):
        """Until the script has printed its header: then every probe is attached."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "Ctrl-C to end" in self.text():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"bpftrace exited: {self.proc.stderr.read()}")
            time.sleep(0.1)
        raise AssertionError("bpftrace did not attach in time")

    def stop(self):
        # Ctrl-C, again until it ends (child_output.end_bpftrace): it drains its buffers and
        # prints its END summary first
        _, err = end_bpftrace(self.proc, timeout=300)
        text = self.text()
        self.out.close()
        return text, err


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("bt"))
    scratch = f"/var/tmp/jstall-test-bt-{uuid.uuid4().hex[:10]}"
    # 1 KiB blocks: a 4 MiB journal of 4096 blocks, one 1 KiB attribute block per file
    cfg = FsConfig(fs_size="64M", journal_size="4M", inode_size=128, block_size=1024, write_iops=2000)
    try:
        with ScratchFs(cfg, scratch_dir=scratch) as fs:
            mnt, name = fs.mountpoint, os.path.basename(fs.device) + "-8"
            major, minor = map(int, fs.dev.split(":"))
            journal_blocks = int(fs.dumpe2fs()["journal_blocks"])
            subprocess.run(["sync", "-f", mnt], check=True)
            scripts = {"slow": Bpftrace(tmp, "jstall-slowcalls.bt", MIN_MS),
                       "commits": Bpftrace(tmp, "jstall-commits.bt", HZ, major, minor),
                       "jiffies": Bpftrace(tmp, "jstall-commits.bt")}
            try:
                for s in scripts.values():
                    s.wait_attached()
                before = proc_info(name)
                work = subprocess.run([sys.executable, os.path.join(HERE, "xattr_workload.py"),
                                       os.path.join(mnt, "d"), str(FILES), str(UPDATES)],
                                      capture_output=True, text=True, timeout=600, check=True)
                subprocess.run(["sync", "-f", mnt], check=True)  # commit what is left
                after = proc_info(name)
            finally:
                out = {key: s.stop() for key, s in scripts.items()}
            settled = proc_info(name)["transactions"] == after["transactions"]
    finally:
        left = leftovers(scratch)
        if not any(left):
            shutil.rmtree(scratch, ignore_errors=True)
    assert not any(left), left
    return {"out": {key: text for key, (text, _) in out.items()},
            "stderr": {key: err for key, (_, err) in out.items()},
            "dev": (major, minor), "before": before, "after": after, "settled": settled,
            "journal_blocks": journal_blocks, "workload": json.loads(work.stdout)}


def calls(text):
    """[(call line fields, [(offset ms, event name, rest)])] of jstall-slowcalls' output."""
    out, last = [], {}   # last: thread id -> its latest call (calls on two CPUs interleave)
    for line in text.splitlines():
        m = CALL.match(line)
        if m:
            comm, pid, tid, call, lat, ret, major, minor, handles = m.groups()
            out.append(({"comm": comm.strip(), "pid": int(pid), "call": call, "lat": float(lat),
                         "ret": int(ret), "dev": (int(major), int(minor)), "handles": int(handles)}, []))
            last[int(tid)] = out[-1]
        elif re.match(r"^  \d+\s+\+", line):
            m = EVENT.match(line)
            assert m and int(m.group(1)) in last, line
            tid, offset, name, rest = m.groups()
            last[int(tid)][1].append((float(offset), name, rest))
    return out


def commits(text, dev=None):
    rows = []
    for m in map(COMMIT.match, text.splitlines()):
        if m and (dev is None or (int(m.group(1)), int(m.group(2))) == dev):
            g = m.groups()
            rows.append({"dev": (int(g[0]), int(g[1])), "tid": int(g[2]), "wait": int(g[3]),
                         "run": int(g[4]), "lock": float(g[5]), "flush": float(g[6]),
                         "log": float(g[7]), "handles": int(g[8]), "blocks": int(g[9]),
                         "logged": int(g[10])})
    return rows


def averages(text):
    """{dev: (commits, wait, run, lock, flush, log, handles, blocks, logged)} of the end summary."""
    summary = text.split("Averages per journal", 1)[1]
    return {(int(m.group(1)), int(m.group(2))): tuple(map(float, m.groups()[2:]))
            for m in map(AVERAGE.match, summary.splitlines()) if m}


def test_scripts_ran_cleanly(traced):
    for key, err in traced["stderr"].items():
        assert not errors(err), (key, err)


def handle_waits(ev):
    """(start, end) in ms from the call's start of each wait for a journal handle."""
    out = []
    for offset, name, rest in ev:
        if name == "handle":
            out.append((offset - float(re.search(r"after waiting (\d+\.\d+) ms", rest).group(1)), offset))
    return out


def test_slowcalls_shows_the_stalled_setxattr_and_its_own_forced_checkpoint(traced):
    pid = traced["workload"]["pid"]
    mine = [(c, ev) for c, ev in calls(traced["out"]["slow"]) if c["pid"] == pid]
    # the workload's setxattr stall; so may, now and then, the openat that creates a file
    assert {c["call"] for c, _ in mine} <= {"setxattr", "openat"}, traced["out"]["slow"]
    assert sum(c["call"] == "setxattr" for c, _ in mine) >= 3, traced["out"]["slow"]
    committed = {r["tid"] for r in commits(traced["out"]["commits"])}
    for c, ev in mine:
        assert c["lat"] >= MIN_MS and c["ret"] >= 0 and (c["ret"] == 0 or c["call"] == "openat"), c
        assert c["dev"] == traced["dev"] and c["handles"] >= 1, c
        own = [e for e in ev if e[1] != "commit"]
        phases = [e for e in ev if e[1] == "commit"]
        # each section in time order, inside the call
        for section in (own, phases):
            offsets = [e[0] for e in section]
            assert offsets == sorted(offsets) and all(0 <= o <= c["lat"] for o in offsets), ev
        assert all(start >= 0 for start, _ in handle_waits(ev)), ev
        for offset, name, rest in own:
            if name == "checkpoint_stats":
                assert int(re.search(r"(\d+) blocks written", rest).group(1)) <= traced["journal_blocks"]
            if name == "update_log_tail":
                assert int(re.search(r"(\d+) blocks freed", rest).group(1)) <= traced["journal_blocks"]
        # the commits the journal thread made meanwhile are commits jstall-commits printed
        assert {int(re.search(r"tid (\d+)", e[2]).group(1)) for e in phases} <= committed, (ev, committed)

    # A setxattr waited long for its handle because it checkpointed the journal itself: the
    # checkpoint fired in the caller's own thread, during that wait.
    def forced(ev):
        return any(start <= cp <= end and end - start >= MIN_MS / 2
                   for start, end in handle_waits(ev) for cp, name, _ in ev if name == "checkpoint")
    assert any(forced(ev) for c, ev in mine if c["call"] == "setxattr"), traced["out"]["slow"]
    assert any("this task writes blocks home" in rest for _, ev in mine for _, _, rest in ev)


def test_commits_prints_every_transaction_the_kernel_counts(traced):
    if not traced["settled"]:
        pytest.skip("a commit happened between the last /proc read and the end of tracing")
    rows = commits(traced["out"]["commits"])
    assert rows and all(r["dev"] == traced["dev"] for r in rows), traced["out"]["commits"]
    assert len(rows) == traced["after"]["transactions"] - traced["before"]["transactions"] > 3
    tids = [r["tid"] for r in rows]
    assert tids == list(range(tids[0], tids[0] + len(tids)))
    for r in rows:  # (a transaction may commit empty: no handle, no block)
        assert 0 <= r["blocks"] <= r["logged"] <= traced["journal_blocks"], r
        assert r["log"] > 0 and r["lock"] >= 0 and r["flush"] >= 0, r
    # commits of more than 1,000 attribute blocks, and a transaction held open for a forced checkpoint
    assert max(r["blocks"] for r in rows) > 1000
    assert max(r["run"] for r in rows) >= MIN_MS


def test_commits_summary_averages_its_lines_as_proc_info_does(traced):
    rows = commits(traced["out"]["commits"])
    n = len(rows)
    avg = averages(traced["out"]["commits"])[traced["dev"]]
    assert avg[0] == n
    assert avg[6:] == tuple(sum(r[k] for r in rows) // n for k in ("handles", "blocks", "logged"))
    assert abs(avg[2] - sum(r["run"] for r in rows) / n) <= 1
    assert abs(avg[5] - sum(r["log"] for r in rows) / n) <= 0.002
    if traced["before"]["transactions"] == 0 and traced["settled"]:
        # freshly mounted: /proc's averages cover exactly the traced transactions
        info = traced["after"]
        assert (info["handles"], info["blocks"], info["logged"]) == tuple(map(int, avg[6:]))
        assert abs(info["running_ms"] - avg[2]) <= 1000 / HZ  # /proc averages whole jiffies


def test_commits_without_arguments_reports_jiffies_for_every_journal(traced):
    """No HZ: WAIT and RUN in jiffies; no device: every journal, ours among them."""
    text = traced["out"]["jiffies"]
    assert re.search(r"^TIME .* WAIT\(j\) +RUN\(j\) ", text, re.M) and "of device" not in text
    in_ms = {r["tid"]: r for r in commits(traced["out"]["commits"])}
    in_jiffies = {r["tid"]: r for r in commits(text, traced["dev"])}
    assert in_jiffies.keys() == in_ms.keys()
    for tid, r in in_jiffies.items():
        assert r["run"] * 1000 // HZ == in_ms[tid]["run"]
        assert (r["handles"], r["blocks"], r["logged"]) == (
            in_ms[tid]["handles"], in_ms[tid]["blocks"], in_ms[tid]["logged"])
    text = traced["out"]["commits"]
    assert re.search(r"^TIME .* WAIT\(ms\)  RUN\(ms\) ", text, re.M) and "of device %d,%d" % traced["dev"] in text


def run_briefly(script, *args, wait_for="Ctrl-C to end"):
    """Run a script until it prints wait_for or exits; returns (stdout, stderr, exit status)."""
    p = subprocess.Popen(["bpftrace", os.path.join(PROBES, script), *map(str, args)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    timer = threading.Timer(60, p.kill)
    timer.start()
    try:
        for line in p.stdout:
            lines.append(line)
            if wait_for in line:
                break
    finally:
        out, err = end_bpftrace(p)
        timer.cancel()
    return "".join(lines) + out, err, p.returncode


def test_usage_and_arguments():
    out, err, _ = run_briefly("jstall-slowcalls.bt")
    assert "Tracing metadata calls >= 10 ms and their jbd2 events. Ctrl-C" in out, out
    assert not errors(err), err
    out, err, _ = run_briefly("jstall-commits.bt", 250, 7, 0, 60, 1, wait_for="USAGE")
    assert "USAGE: jstall-commits.bt [HZ [MAJOR MINOR] [SECS]]" in out and "Tracing" not in out
    out, err, _ = run_briefly("jstall-slowcalls.bt", 10, 60, 1, wait_for="USAGE")
    assert "USAGE: jstall-slowcalls.bt [MIN_MS [SECS]]" in out and "Tracing" not in out
    out, err, status = run_briefly("jstall-commits.bt", "7,0", wait_for="USAGE")
    assert status != 0 and "used numerically" in err, (out, err)


#: the duration given to each script; the workload below runs in well under a second of it
SECS = 15
#: jstall-slowcalls' threshold there: most fsyncs on a device paced at 200 write IOPS wait
#: longer (the throttle lets a burst through at once); few other calls of a busy machine do
DURATION_MIN_MS = 2
WORK = """
import json, os, sys, time
top, n = sys.argv[1], int(sys.argv[2])
ms = []
for i in range(n):
    with open(f"{top}/f{i}", "w") as f:
        os.setxattr(f.name, "user.a", b"%064d" % i)
        t = time.monotonic()
        os.fsync(f.fileno())
        ms.append((time.monotonic() - t) * 1000)
print(json.dumps({"pid": os.getpid(), "fsync_ms": ms}))
"""


def test_each_script_ends_by_itself_after_its_duration(tmp_path):
    """SECS, each script's last argument: it ends by itself SECS after it began tracing (its
    clock is checked each second) and prints what Ctrl-C would have it print: the lines of
    what it traced meanwhile and its end summary."""
    subprocess.run(["modprobe", "-q", "xfs"])   # jstall-xfslog's tracepoints, where xfs is a module
    scratch = f"/var/tmp/jstall-test-bt-{uuid.uuid4().hex[:10]}"
    n = 20
    try:
        cfg = FsConfig(fs_size="64M", journal_size="4M", write_iops=200)
        with ScratchFs(cfg, scratch_dir=scratch) as fs:
            major, minor = map(int, fs.dev.split(":"))
            name = os.path.basename(fs.device) + "-8"
            subprocess.run(["sync", "-f", fs.mountpoint], check=True)
            args = {"slow": ("jstall-slowcalls.bt", DURATION_MIN_MS, SECS),
                    "commits": ("jstall-commits.bt", HZ, major, minor, SECS),
                    "xfslog": ("jstall-xfslog.bt", SECS)}
            runs = {key: Bpftrace(str(tmp_path), *a) for key, a in args.items()}
            began, ended = {}, {}
            try:
                deadline = time.monotonic() + 120
                while len(ended) < len(runs) and time.monotonic() < deadline:
                    for key, r in runs.items():
                        if key not in began and "Ctrl-C to end" in r.text():
                            began[key] = time.monotonic()
                        if key not in ended and r.proc.poll() is not None:
                            ended[key] = time.monotonic()
                    if len(began) == len(runs) and "work" not in began:
                        began["work"] = time.monotonic()
                        before = proc_info(name)["transactions"]
                        argv = [sys.executable, "-c", WORK, fs.mountpoint, str(n)]
                        work = json.loads(subprocess.run(argv, capture_output=True, text=True,
                                                         timeout=60, check=True).stdout)
                        worked = time.monotonic() - began["work"]
                    time.sleep(0.1)
                after = proc_info(name)["transactions"]
            finally:
                out = {key: r.stop() for key, r in runs.items()}
    finally:
        left = leftovers(scratch)
        if not any(left):
            shutil.rmtree(scratch, ignore_errors=True)
    assert not any(left), left
    assert ended.keys() == runs.keys(), (ended, out)   # every one ended by itself
    for key, r in runs.items():
        text, err = out[key]
        assert r.proc.returncode == 0 and not errors(err), (key, err)
        assert f" for {SECS} s. " in text, text[:500]
        # SECS from the header it printed once it attached, and a second's check after
        assert SECS - 1 <= ended[key] - began[key] <= SECS + 30, (key, ended[key] - began[key])
    # the workload ran inside every script's time
    assert max(began.values()) + worked < min(began[k] for k in runs) + SECS, (began, worked)

    # the workload's fsyncs that took MIN_MS in the kernel: at most those it timed as long
    # (its own clock adds the way in and out), at least one of the slow ones
    mine = [c for c, _ in calls(out["slow"][0]) if c["pid"] == work["pid"]]
    fsyncs = [c["lat"] for c in mine if c["call"] == "fsync"]
    timed = sorted(work["fsync_ms"])
    assert 1 <= len(fsyncs) <= sum(t >= DURATION_MIN_MS for t in timed), (fsyncs, timed)
    assert all(a <= b for a, b in zip(sorted(fsyncs, reverse=True), sorted(timed, reverse=True))), (fsyncs, timed)
    # each fsync committed: the lines, the summary over them, and the kernel's count
    text = out["commits"][0]
    rows = commits(text, (major, minor))
    assert n <= len(rows) <= after - before, (before, after, text)
    assert averages(text)[(major, minor)][0] == len(rows), text
    # the wait lines (any XFS's, system-wide; none here but the other tests') and their count
    text = out["xfslog"][0]
    rows = re.findall(r"^\d\d:\d\d:\d\d\s+\d+,\d+\s.*\d+\.\d+$", text, re.M)
    assert re.search(rf"^@waits: {len(rows)}$", text, re.M), text[-2000:]
