"""`jstall record` as on a production host: every call on the traced filesystem, only the
traced journals, -p following a process tree, sessions that survive SIGKILL, one-line
errors. Real probes on real loop-device ext4 filesystems."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from jstall import session
from jstall.analyzer.session.load import load_session
from jstall.workloads.scratch import FsConfig, ScratchFs
from child_output import read_line

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]

HERE = os.path.dirname(os.path.abspath(__file__))
JSTALL = os.path.join(os.path.dirname(sys.executable), "jstall")
WORKLOAD = os.path.join(HERE, "fs_workload.py")
SMALL = FsConfig(fs_size="32M", journal_size="4M")
JBD2_TABLES = ("jbd2_events", "run_stats", "checkpoint_stats", "log_tail", "fill")


@contextlib.contextmanager
def background(*args):
    """A workload process, killed on the way out."""
    p = subprocess.Popen([sys.executable, WORKLOAD, *args], stdout=subprocess.DEVNULL)
    try:
        yield p
    finally:
        p.kill()
        p.wait()


def wait_attached(rec, out, timeout=60):
    """metadata.json appears once the probes are attached."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(os.path.join(out, "metadata.json")):
        assert rec.poll() is None and time.monotonic() < deadline, rec.communicate()
        time.sleep(0.1)


def devs_in(s):
    """Every device a loaded session mentions, in any table or its metadata journals."""
    seen = {j["dev"] for j in s.journals}
    for name in ("calls", "call_totals", "offcpu") + JBD2_TABLES:
        seen |= set(getattr(s, name)["dev"].dropna())
    return seen


def test_device_filter_counts_every_fsync_and_nothing_beside(tmp_path):
    """fsyncs that start no journal handle (they wait for a commit) are on the traced
    filesystem too; a busy filesystem beside it appears nowhere."""
    out = str(tmp_path / "s")
    with ScratchFs(SMALL) as a, ScratchFs(SMALL) as b, background("busy", os.path.join(b.mountpoint, "busy")):
        rec = subprocess.Popen([JSTALL, "record", "-q", "-o", out, "-d", a.mountpoint],
                               stderr=subprocess.PIPE, text=True)
        wait_attached(rec, out)
        made = json.loads(subprocess.run([sys.executable, WORKLOAD, "fsync", os.path.join(a.mountpoint, "d"), "500"],
                                         capture_output=True, text=True, check=True).stdout)
        rec.send_signal(signal.SIGINT)
        _, err = rec.communicate(timeout=60)
        dev_a, dev_b = a.dev, b.dev
    assert rec.returncode == 0, err
    s = load_session(out)
    t = s.call_totals
    assert int(t[(t.syscall == "fsync") & (t.dev == dev_a)]["count"].sum()) == made["fsync"] == 500
    assert devs_in(s) == {dev_a}
    assert dev_b not in json.dumps(s.meta["journals"])


@pytest.mark.parametrize("mode", ["command", "pid"])
def test_a_busy_ext4_beside_appears_nowhere(tmp_path, mode):
    """Without -d, a command or -p session holds only the journals its tasks used."""
    out = str(tmp_path / "s")
    with ScratchFs(SMALL) as a, ScratchFs(SMALL) as b, background("busy", os.path.join(b.mountpoint, "busy")):
        work = [sys.executable, WORKLOAD, "fsync", os.path.join(a.mountpoint, "d"), "200"]
        if mode == "command":
            proc = subprocess.run([JSTALL, "record", "-q", "-o", out, "--", *work], capture_output=True, text=True,
                                  timeout=120)
        else:
            child = subprocess.Popen(["sh", "-c", 'read x; exec "$@"', "sh", *work], stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, text=True)
            proc = subprocess.Popen([JSTALL, "record", "-o", out, "-p", str(child.pid)], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            assert read_line(proc.stdout).startswith("Tracing ")
            child.stdin.write("go\n")
            child.stdin.close()
            child.wait(timeout=60)
            proc.stdout.read()
            proc.wait(timeout=60)  # ends by itself when the process exits
            proc.stderr = proc.stderr.read()
        time.sleep(0)
        dev_a, dev_b = a.dev, b.dev
    assert proc.returncode == 0, proc.stderr
    s = load_session(out)
    t = s.call_totals
    assert int(t[(t.syscall == "fsync") & (t.dev == dev_a)]["count"].sum()) == 200
    assert dev_a in devs_in(s) and dev_b not in devs_in(s)
    assert [j["dev"] for j in s.journals] == [dev_a]
    assert len(s.run_stats) > 0 and (s.run_stats.dev == dev_a).all()


def test_pid_follows_forked_children_and_ends_when_the_process_exits(tmp_path):
    out = str(tmp_path / "s")
    with ScratchFs(SMALL) as fs:
        parent = subprocess.Popen([sys.executable, WORKLOAD, "fork", os.path.join(fs.mountpoint, "d"), "3", "7"],
                                  stdin=subprocess.PIPE, text=True)
        try:
            rec = subprocess.Popen([JSTALL, "record", "-o", out, "-d", fs.dev, "-p", str(parent.pid)],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert read_line(rec.stdout).startswith("Tracing ")
            os.mkdir(os.path.join(fs.mountpoint, "not-traced"))
            parent.stdin.write("go\n")
            parent.stdin.close()
            assert parent.wait(timeout=60) == 0
            _, err = rec.communicate(timeout=30)  # no signal: it ends because the process exited
        finally:
            parent.kill()
            parent.wait()
    assert rec.returncode == 0, err
    s = load_session(out)
    assert s.meta["status"] == "complete" and s.meta["stop_reason"] == "process exited"
    t = s.call_totals
    assert int(t[t.syscall == "mkdir"]["count"].sum()) == 21  # 3 children x 7, none of this test's own


def test_sigkill_leaves_a_loadable_incomplete_session(tmp_path):
    out, log = str(tmp_path / "s"), str(tmp_path / "progress")
    with ScratchFs(SMALL) as fs:
        rec = subprocess.Popen([JSTALL, "record", "-q", "-o", out, "-d", fs.dev, "--min-ms", "0"],
                               stderr=subprocess.PIPE, text=True)
        wait_attached(rec, out)
        with background("progress", os.path.join(fs.mountpoint, "p"), log):
            time.sleep(11)
            killed_ns = time.monotonic_ns()
            rec.kill()
            rec.wait()
            time.sleep(0.5)
        dev = fs.dev
    marks = [tuple(map(int, line.split())) for line in open(log)]
    before = max(n for ts, n in marks if ts <= killed_ns - 5_000_000_000)
    assert before >= 100
    meta = session.read_metadata(out)
    assert session.is_incomplete(meta)
    s = load_session(out)
    assert s.incomplete and s.recorded_until
    t = s.call_totals
    assert int(t[(t.syscall == "mkdir") & (t.dev == dev)]["count"].sum()) >= before
    assert (s.calls.syscall == "mkdir").sum() >= before
    assert s.end_ns >= killed_ns - 5_000_000_000
    proc = subprocess.run([JSTALL, "analyze", out], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("args", [
    ["-o", "/proc/foo", "--", "true"],
    ["-o", "/nonexistent-jstall/x/y", "--", "true"],
    ["--", "/nonexistent-cmd"],
    ["--", "no-such-command-jstall"],
    ["--duration", "-5"],
    ["--duration", "0"],
    ["--min-ms", "-1"],
    ["--max-size", "0"],
    ["-p", "0"],
    ["-p", "999999999"],
    ["-d", "/"],
])
def test_bad_input_is_one_line_exit_2_and_nothing_made(tmp_path, args):
    proc = subprocess.run([JSTALL, "record", *args], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("jstall record: "), proc.stderr
    assert "Traceback" not in proc.stderr and "['" not in proc.stderr
    assert os.listdir(tmp_path) == []
    assert not os.path.exists("/nonexistent-jstall")


def test_max_size_ends_a_long_recording(tmp_path):
    out = str(tmp_path / "s")
    with ScratchFs(SMALL) as fs, background("busy", os.path.join(fs.mountpoint, "busy")):
        proc = subprocess.run([JSTALL, "record", "-q", "-o", out, "-d", fs.dev, "--min-ms", "0", "--max-size", "0.2",
                               "--duration", "60"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    s = load_session(out)
    assert s.meta["status"] == "complete" and s.meta["stop_reason"] == "max size"
    assert len(s.calls) > 0 and session.session_bytes(out) < 2_000_000


def test_sigint_in_command_mode_ends_the_command_promptly(tmp_path):
    """A SIGINT sent to jstall alone (not to the terminal's group) reaches the command."""
    out = str(tmp_path / "s")
    rec = subprocess.Popen([JSTALL, "record", "-q", "-o", out, "--", "sleep", "60"], stderr=subprocess.PIPE, text=True)
    wait_attached(rec, out)
    time.sleep(1)  # the command is running
    t0 = time.monotonic()
    rec.send_signal(signal.SIGINT)
    _, err = rec.communicate(timeout=30)
    assert time.monotonic() - t0 < 10
    assert rec.returncode == 130, err
    meta = session.read_metadata(out)
    assert meta["status"] == "interrupted" and meta["stop_reason"] == "signal"
    assert meta["command"] == ["sleep", "60"] and meta["command_exit_status"] == -signal.SIGINT
