"""The bpftrace scripts (probes/*.bt) on a real loop-device ext4 where an xattr workload
stalls in forced checkpoints (128-byte inodes, 4 MiB journal, throttled device)."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from jstall.workloads.scratch import FsConfig, ScratchFs

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root"),
    pytest.mark.skipif(shutil.which("bpftrace") is None, reason="needs bpftrace"),
]

HERE = os.path.dirname(os.path.abspath(__file__))
PROBES = os.path.join(os.path.dirname(HERE), "probes")
MIN_MS = 50
CALL = re.compile(r"^\d\d:\d\d:\d\d (\S+)\s+(\d+)\s+(\d+)\s+(\w+)\s+(\d+\.\d+)\s+(-?\d+) +(\d+),(\d+)\s+(\d+)$")
COMMIT = re.compile(r"^\d\d:\d\d:\d\d\s+(\d+),(\d+)\s+(\d+)\s+" + r"\s+".join([r"(\d+\.\d+)"] * 4) + r"\s+(\d+)\s+(\d+)\s+(\d+)$")


def transactions(name):
    with open(f"/proc/fs/jbd2/{name}/info") as f:
        return int(re.match(r"(\d+) transactions", f.read()).group(1))


class Bpftrace:
    """One script running under bpftrace, its stdout in a file; stop() ends it with SIGINT
    (its END block and map printing run) and returns what it printed."""

    def __init__(self, tmp, script, *args):
        self.out = open(os.path.join(tmp, os.path.basename(script) + ".out"), "w+")
        self.proc = subprocess.Popen(["bpftrace", os.path.join(PROBES, script), *map(str, args)],
                                     stdout=self.out, stderr=subprocess.PIPE, text=True)

    def wait_attached(self, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.out.seek(0)
            if "Ctrl-C to end" in self.out.read():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"bpftrace exited: {self.proc.stderr.read()}")
            time.sleep(0.2)
        raise AssertionError("bpftrace did not attach in time")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        self.out.seek(0)
        text = self.out.read()
        self.out.close()
        return text, err


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("bt"))
    cfg = FsConfig(fs_size="64M", journal_size="4M", inode_size=128, block_size=1024, write_iops=2000)
    with ScratchFs(cfg) as fs:
        mnt, name = fs.mountpoint, os.path.basename(fs.device) + "-8"
        major, minor = map(int, fs.dev.split(":"))
        subprocess.run(["sync", "-f", mnt], check=True)
        scripts = [Bpftrace(tmp, "jstall-slowcalls.bt", MIN_MS), Bpftrace(tmp, "jstall-commits.bt")]
        try:
            for s in scripts:
                s.wait_attached()
            before = transactions(name)
            work = subprocess.run([sys.executable, os.path.join(HERE, "xattr_workload.py"),
                                   os.path.join(mnt, "d"), "3000", "4000"],
                                  capture_output=True, text=True, timeout=600, check=True)
            subprocess.run(["sync", "-f", mnt], check=True)  # commit what is left
            after = transactions(name)
        finally:
            (slow, slow_err), (commits, commits_err) = [s.stop() for s in scripts]
        settled = transactions(name)
        journal_blocks = int(fs.dumpe2fs()["journal_blocks"])
    return {"slow": slow, "commits": commits, "stderr": slow_err + commits_err, "dev": (major, minor),
            "proc_delta": after - before, "settled": settled == after, "journal_blocks": journal_blocks,
            "workload": json.loads(work.stdout)}


def _calls(text):
    """[(header fields, [indented event lines])] of jstall-slowcalls' output."""
    calls = []
    for line in text.splitlines():
        m = CALL.match(line)
        if m:
            calls.append((m.groups(), []))
        elif line.startswith("    ") and calls:
            calls[-1][1].append(line.strip())
    return calls


def test_slowcalls_prints_the_workloads_stalled_setxattr_with_its_own_checkpoint(traced):
    calls = _calls(traced["slow"])
    assert calls, traced["slow"] + traced["stderr"]
    pid = traced["workload"]["pid"]
    mine = [(f, ev) for f, ev in calls if int(f[1]) == pid]
    assert mine and all(f[3] == "setxattr" for f, _ in mine)
    assert all(float(f[4]) >= MIN_MS for f, _ in calls)
    assert all((int(f[6]), int(f[7])) == traced["dev"] and int(f[8]) >= 1 for f, _ in mine)
    # a checkpoint ran in the stalled task's own thread, and the journal thread committed
    assert any(any(e.split("ms", 1)[1].split()[0] == "jbd2_checkpoint" for e in ev) for _, ev in mine)
    assert any(any("(journal thread)" in e for e in ev) for _, ev in mine)
    # event offsets lie inside the call
    for f, ev in mine:
        for e in ev:
            if e.startswith("+"):
                assert 0 <= float(e[1:].split("ms")[0]) <= float(f[4]) + 1, e


def test_commits_prints_every_transaction_the_kernel_counts(traced):
    rows = [m.groups() for m in map(COMMIT.match, traced["commits"].splitlines()) if m]
    mine = [r for r in rows if (int(r[0]), int(r[1])) == traced["dev"]]
    if not traced["settled"]:
        pytest.skip("a commit happened while bpftrace was stopping")
    assert traced["proc_delta"] > 3
    assert len(mine) == traced["proc_delta"], traced["commits"]
    tids = [int(r[2]) for r in mine]
    assert tids == sorted(tids) and len(set(tids)) == len(tids)
    for r in mine:
        handles, blocks, logged = map(int, r[7:10])
        assert 0 <= blocks <= logged <= traced["journal_blocks"], r
        assert all(float(x) >= 0 for x in r[3:7])
    # a commit of 1,000 and more attribute blocks, and one transaction held open by a forced checkpoint
    assert max(int(r[8]) for r in mine) > 1000
    assert max(float(r[3]) for r in mine) >= MIN_MS
    m = re.search(r"@transactions\[%d, %d\]: (\d+)" % traced["dev"], traced["commits"])
    assert m and int(m.group(1)) == len(mine)


def test_slowcalls_threshold_argument():
    """The header states the threshold it was given, and 10 ms without one."""
    for args, ms in (((), 10), ((250,), 250)):
        p = subprocess.Popen(["bpftrace", os.path.join(PROBES, "jstall-slowcalls.bt"), *map(str, args)],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            first = [p.stdout.readline() for _ in range(2)]
        finally:
            p.send_signal(signal.SIGINT)
            p.communicate(timeout=60)
        assert f"Tracing metadata calls >= {ms} ms" in "".join(first), first
