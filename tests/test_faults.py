"""Faults while recording, each with real parts: a real `jstall record` process started here,
real signals sent to it by pid, real tmpfs and loop-device filesystems that fill up, fail or
go away. Each fault ends in one line naming what happened (never a traceback), a documented
exit status (docs/recording.md, "Faults"), and nothing that was written lost: what was
flushed loads, flagged incomplete when the recording could not finish.

One traced ext4 serves the module (the recorder's start dominates each case)."""

import contextlib
import fcntl
import os
import re
import signal
import struct
import subprocess
import sys
import time
import uuid

import pytest

from jstall.analyzer.session.load import load_session
from jstall.probes.tables import CHUNKED
from jstall.schema import SCHEMAS
from jstall.session import read_arrow, table_path
from jstall.workloads.scratch import FsConfig, ScratchFs
from child_output import read_line

ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")


def kernel(test):
    """Real probes, loop devices and mounts: root and the kernel marker."""
    return pytest.mark.kernel(ROOT(test))

HERE = os.path.dirname(os.path.abspath(__file__))
JSTALL = os.path.join(os.path.dirname(sys.executable), "jstall")
WORKLOAD = os.path.join(HERE, "fs_workload.py")
SMALL = FsConfig(fs_size="32M", journal_size="4M")
#: the tables whose rows the recorder counts as kept: the probes' events and the writers the
#: recorder reads from the kernel's map at each flush (probes.tables.CHUNKED but stacks). From
#: the recorder's own list: a copy once missed worker_offcpu, and a run whose kernel workers
#: waited counted 2 rows more kept than this read back (8,994 against 8,992)
STREAMED = tuple(t for t in CHUNKED if t != "stacks")


@pytest.fixture(scope="module")
def traced():
    """One scratch ext4 for the module, left clean (conftest's check, by hand: module scope)."""
    from conftest import leftovers

    scratch = f"/var/tmp/jstall-test-{uuid.uuid4().hex[:10]}"
    with ScratchFs(SMALL, scratch_dir=scratch) as fs:
        yield fs
    assert leftovers(scratch) == ([], []), leftovers(scratch)
    subprocess.run(["rm", "-rf", scratch], check=False)


@contextlib.contextmanager
def tmpfs(path, size):
    """A real tmpfs of ``size`` at ``path`` (a directory made here), unmounted on the way out."""
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", path], check=False)


def fill_up(path):
    """Fill the filesystem at ``path`` to the last byte (dd until ENOSPC)."""
    subprocess.run(["dd", "if=/dev/zero", f"of={os.path.join(path, 'fill')}", "bs=4k"],
                   capture_output=True, check=False)


@contextlib.contextmanager
def background(*args):
    """A workload process, killed on the way out."""
    p = subprocess.Popen([sys.executable, WORKLOAD, *args], stdout=subprocess.DEVNULL)
    try:
        yield p
    finally:
        p.kill()
        p.wait()


def record(out, *args, console=None):
    """A `jstall record -o out ARGS` process; its console to the file ``console``, else -q."""
    quiet = [] if console else ["-q"]
    return subprocess.Popen([JSTALL, "record", *quiet, "-o", out, *args],
                            stdout=open(console, "w") if console else subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)


def one_line(err):
    """The recorder's error output is one line (no traceback); return it."""
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def written_rows(out):
    """Rows of the streamed tables as stored (chunks or compacted), read without the analyzer."""
    return sum(read_arrow(out, t, SCHEMAS[t]).num_rows for t in STREAMED)


def phase(pid, out):
    """Where a starting recorder is, seen from outside: 'recording' (metadata.json written),
    'attach' (bcc loaded and a BPF program's fd open), 'compile' (bcc loaded, no BPF program
    yet: clang compiling), else 'starting'."""
    if os.path.exists(os.path.join(out, "metadata.json")):
        return "recording"
    try:
        with open(f"/proc/{pid}/maps") as f:
            bcc = "libbcc" in f.read()
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return "gone"
    if not bcc:
        return "starting"
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:bpf-prog":
                return "attach"
        except OSError:
            pass
    return "compile"


PHASES = ("starting", "compile", "attach", "recording")


def wait_phase(rec, out, want, timeout=300):
    """Poll until the recorder is in phase ``want``; the phases seen on the way."""
    deadline = time.monotonic() + timeout
    seen = []
    while True:
        p = phase(rec.pid, out)
        if not seen or seen[-1] != p:
            seen.append(p)
        if p == want:
            return seen
        assert p != "gone" and PHASES.index(p) < PHASES.index(want), (want, seen)
        assert rec.poll() is None and time.monotonic() < deadline, (want, seen, rec.communicate())
        time.sleep(0.002)


# --- the session directory's filesystem fills up ------------------------------------------

@kernel
def test_enospc_at_start_is_one_line_exit_2_and_nothing_made(tmp_path, traced):
    tiny = str(tmp_path / "tiny")
    with tmpfs(tiny, "64k"):
        fill_up(tiny)
        out = os.path.join(tiny, "s")
        rec = record(out, "-d", traced.mountpoint, "--duration", "5")
        _, err = rec.communicate(timeout=300)
        exists = os.path.exists(out)
    line = one_line(err)
    assert rec.returncode == 2, err
    assert line.startswith(f"jstall record: cannot write the session in {out}: No space left on device; "
                           "free space there or record to another -o"), line
    assert not exists


def _kept(line):
    m = re.search(r"\): ([\d,]+) rows written before it are kept, ([\d,]+) gathered after could not be written",
                  line)
    assert m, line
    return int(m[1].replace(",", "")), int(m[2].replace(",", ""))


@kernel
def test_enospc_mid_run_ends_the_recording_with_what_was_flushed(tmp_path, traced):
    """A busy filesystem's calls recorded to a tmpfs that is filled to the last byte once the
    first of them are written (a chunk of calls): the recording ends by itself at the next
    write, which fails, says so in one line (exit 2), and every row it says it kept loads."""
    tiny = str(tmp_path / "tiny")
    with tmpfs(tiny, "16m"), background("busy", os.path.join(traced.mountpoint, "busy")):
        out = os.path.join(tiny, "s")
        rec = record(out, "-d", traced.mountpoint, "--min-ms", "0")
        chunks = table_path(out, "calls")   # a directory of chunks while it records
        deadline = time.monotonic() + 120
        while rec.poll() is None and time.monotonic() < deadline and not (
                os.path.isdir(chunks) and any(f.startswith("part-") for f in os.listdir(chunks))):
            time.sleep(0.05)
        fill_up(tiny)
        _, err = rec.communicate(timeout=300)   # no signal: it ends itself
        line = one_line(err)
        kept, unwritten = _kept(line)
        assert rec.returncode == 2, err
        assert f"writing the session in {out} failed (" in line and "No space left on device" in line, line
        assert line.endswith("; free space there or record to another -o"), line
        assert kept > 0 and unwritten > 0, line
        assert written_rows(out) == kept
        assert not [f for _, _, fs in os.walk(out) for f in fs if f.endswith(".tmp")]   # no half file left
        s = load_session(out)
        assert s.meta["status"] in ("recording", "write_failed") and len(s.calls) > 0
        text = subprocess.run([JSTALL, "analyze", out], capture_output=True, text=True, timeout=300, check=False)
    assert text.returncode == 0, text.stderr
    assert "is incomplete" in text.stdout or "when writing the session failed" in text.stdout, text.stdout


@kernel
def test_enospc_at_the_final_write(tmp_path, traced):
    """The traced command fills the session's filesystem as its last act: the final flush
    fails; one line, exit 2, what was written before loads."""
    tiny = str(tmp_path / "tiny")
    with tmpfs(tiny, "1m"):
        out = os.path.join(tiny, "s")
        work = (f"{sys.executable} {WORKLOAD} fsync {os.path.join(traced.mountpoint, 'final')} 300 >/dev/null; "
                f"dd if=/dev/zero of={os.path.join(tiny, 'fill')} bs=4k 2>/dev/null; exit 0")
        rec = record(out, "-d", traced.mountpoint, "--min-ms", "0", "--", "sh", "-c", work)
        _, err = rec.communicate(timeout=300)
        line = one_line(err)
        kept, _ = _kept(line)
        assert rec.returncode == 2, err
        assert "No space left on device" in line, line
        assert written_rows(out) == kept
        load_session(out)


#: ioctl(2) of include/uapi/linux/ext4.h: _IOR('X', 125, __u32), and its flag that freezes
#: (syncs) the filesystem before it shuts it down
EXT4_IOC_SHUTDOWN = 0x8004587D
EXT4_GOING_FLAGS_DEFAULT = 0


@kernel
def test_eio_mid_run(tmp_path, traced):
    """The session's own ext4 shut down under it (EXT4_IOC_SHUTDOWN: every write then fails with
    EIO, as on a failing disk; this kernel has no device-mapper for dm-error): one line, exit 2;
    remounted, what was flushed before loads."""
    with ScratchFs(SMALL, scratch_dir=str(tmp_path / "scratch")) as dest:
        out = os.path.join(dest.mountpoint, "s")
        with background("busy", os.path.join(traced.mountpoint, "eio")):
            rec = record(out, "-d", traced.mountpoint, "--min-ms", "0")
            wait_phase(rec, out, "recording")
            time.sleep(2.5)   # a flush or so
            # EXT4_GOING_FLAGS_DEFAULT freezes the filesystem (what is written so far made
            # durable, a write in flight held) and shuts it down: every write after fails. (A
            # sync, then a shutdown without it, loses a flush of the recorder's that falls
            # between the two: 638 rows once on a loaded machine.)
            fd = os.open(dest.mountpoint, os.O_RDONLY)
            try:
                fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_DEFAULT))
            finally:
                os.close(fd)
            _, err = rec.communicate(timeout=300)
        line = one_line(err)
        kept, _ = _kept(line)
        assert rec.returncode == 2, err
        assert "Input/output error" in line and "the disk under it failed: record to another -o" in line, line
        subprocess.run(["umount", dest.mountpoint], check=True)
        subprocess.run(["mount", dest.device, dest.mountpoint], check=True)
        assert written_rows(out) == kept and kept > 0
        assert load_session(out).meta["status"] == "recording"


# --- signals by phase -----------------------------------------------------------------------

SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}


@kernel
@pytest.mark.parametrize("when", ["compile", "attach", "recording", "flush"])
@pytest.mark.parametrize("name", list(SIGNALS))
def test_signal(tmp_path, traced, name, when):
    """SIGINT or SIGTERM at any phase: the recording ends as it would by Ctrl-C, complete,
    exit 0. SIGKILL during compile or attach: nothing made (the kernel frees the probes);
    later: what was flushed loads, flagged incomplete. 'flush': the signal comes while the
    recorder stops after a SIGINT (its final flush and compaction)."""
    sig = SIGNALS[name]
    out = str(tmp_path / "s")
    with background("busy", os.path.join(traced.mountpoint, f"{name}-{when}")):
        rec = record(out, "-d", traced.mountpoint, "--min-ms", "0")
        seen = wait_phase(rec, out, "attach" if when == "attach" else "compile" if when == "compile" else "recording")
        if when in ("recording", "flush"):   # past a flush (every 2 s) when it is killed
            time.sleep(2.5 if sig == signal.SIGKILL else 0.5)
        if when == "flush":
            rec.send_signal(signal.SIGINT)
            time.sleep(0.02)
        rec.send_signal(sig)
        _, err = rec.communicate(timeout=300)
    assert "Traceback" not in err, err
    if sig == signal.SIGKILL:
        assert rec.returncode == -signal.SIGKILL
        if when in ("compile", "attach"):
            assert not os.path.exists(os.path.join(out, "metadata.json")), seen
            return
        s = load_session(out)   # whatever the moment, the session loads
        assert s.meta["status"] in (("recording",) if when == "recording" else ("recording", "complete"))
        assert len(s.calls) > 0
        return
    assert rec.returncode == 0, (seen, err)
    assert "session written to" in err
    s = load_session(out)
    assert s.meta["status"] == "complete" and s.meta["stop_reason"] == "signal", s.meta["stop_reason"]
    assert written_rows(out) == sum(s.meta["rows"][t] for t in STREAMED if t in s.meta["rows"])


# --- the traced filesystem changes under the recorder ----------------------------------------

def fsyncs(out, dev):
    t = load_session(out).call_totals
    return int(t[(t.syscall == "fsync") & (t.dev == dev)]["count"].sum())


def run_fsyncs(d, n):
    subprocess.run([sys.executable, WORKLOAD, "fsync", d, str(n)], check=True, capture_output=True, timeout=300)


def end(rec):
    rec.send_signal(signal.SIGINT)
    _, err = rec.communicate(timeout=300)
    assert rec.returncode == 0 and "Traceback" not in err, err
    return err


@kernel
def test_traced_filesystem_remounted_read_only_and_back(tmp_path, traced):
    """Remounted read-only and back to read-write while recorded: the recorder goes on and
    counts the calls before and after."""
    out, console = str(tmp_path / "s"), str(tmp_path / "console")
    rec = record(out, "-d", traced.mountpoint, console=console)
    wait_phase(rec, out, "recording")
    d = os.path.join(traced.mountpoint, "ro")
    run_fsyncs(d, 200)
    try:
        subprocess.run(["mount", "-o", "remount,ro", traced.mountpoint], check=True)
        refused = subprocess.run([sys.executable, WORKLOAD, "fsync", d, "1"], capture_output=True, text=True,
                                 check=False)
        assert refused.returncode != 0 and "Read-only file system" in refused.stderr
    finally:
        subprocess.run(["mount", "-o", "remount,rw", traced.mountpoint], check=True)
    run_fsyncs(d, 100)
    end(rec)
    assert fsyncs(out, traced.dev) == 300
    s = load_session(out)
    assert s.meta["status"] == "complete"
    # the start line says how the probes attached and the kernel's flavour, as metadata keeps them
    with open(console) as f:
        start = f.readline()
    how = {"fentry": "fentry", "syscalls": "syscall tracepoints"}[s.meta["probes"]["attach"]]
    assert start.startswith("Tracing ext4 metadata calls and jbd2 on ") and start.endswith(
        f" ({how}, kernel {os.uname().release} ({s.meta['kernel_flavour']}))... Hit Ctrl-C to end.\n"), start
    assert s.meta["kernel_flavour"] in ("generic", "cloud", "rt")


@kernel
def test_traced_filesystem_lazily_unmounted_and_its_loop_device_removed(tmp_path):
    """umount -l, then the loop device detached, while record -d traces it: the recorder
    goes on, ends normally and keeps the calls made before."""
    out = str(tmp_path / "s")
    with ScratchFs(SMALL, scratch_dir=str(tmp_path / "scratch")) as fs:
        rec = record(out, "-d", fs.mountpoint)
        wait_phase(rec, out, "recording")
        run_fsyncs(os.path.join(fs.mountpoint, "gone"), 150)
        subprocess.run(["umount", "-l", fs.mountpoint], check=True)
        for dev in {fs.device, fs.lower_device} - {None}:
            subprocess.run(["losetup", "-d", dev], check=True)
        time.sleep(2.5)   # a flush after the device went
        end(rec)
        dev = fs.dev
    assert fsyncs(out, dev) == 150
    s = load_session(out)
    assert s.meta["status"] == "complete" and [j["dev"] for j in s.journals] == [dev]


@kernel
def test_two_recorders_on_one_filesystem(tmp_path, traced):
    """Two recorders of the same filesystem at once: each counts every call."""
    outs = [str(tmp_path / "a"), str(tmp_path / "b")]
    recs = [record(o, "-d", traced.mountpoint) for o in outs]
    for r, o in zip(recs, outs):
        wait_phase(r, o, "recording")
    run_fsyncs(os.path.join(traced.mountpoint, "two"), 250)
    for r in recs:
        end(r)
    assert [fsyncs(o, traced.dev) for o in outs] == [250, 250]


@kernel
def test_monitor_capture_directory_full(tmp_path, traced):
    """The monitor's capture directory full: each capture fails with one line naming it, no
    partial capture stays, the failures are counted in the metrics, the monitor goes on and
    ends normally on SIGTERM."""
    import urllib.request

    tiny = str(tmp_path / "tiny")
    with tmpfs(tiny, "64k"):
        fill_up(tiny)
        mon = subprocess.Popen([JSTALL, "monitor", "-q", "-d", traced.mountpoint, "--listen", "127.0.0.1:0",
                                "--capture-dir", tiny, "--trigger-ms", "0.5", "--before", "0.3", "--after", "0.2",
                                "--min-interval", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            start = read_line(mon.stderr, 300)   # attached
            url = re.search(r"metrics on (http://\S+/metrics)", start)[1]
            with background("busy", os.path.join(traced.mountpoint, "mon")):
                line = read_line(mon.stderr, 120)
            assert line.startswith(f"jstall monitor: capture failed: {tiny}/"), line
            assert line.rstrip().endswith(": No space left on device; free space there or give another "
                                          "--capture-dir; the monitor goes on"), line
            metrics = urllib.request.urlopen(url, timeout=60).read().decode()
            failed = re.search(r'^jstall_captures_total\{result="failed"\} (\S+)$', metrics, re.MULTILINE)
            assert failed and float(failed[1]) >= 1, metrics[-2000:]
        finally:
            mon.send_signal(signal.SIGTERM)
            _, err = mon.communicate(timeout=300)
        left = [os.path.join(d, n) for d, dirs, files in os.walk(tiny) for n in dirs + files if n != "fill"]
    assert mon.returncode == 0 and "Traceback" not in err, err
    assert not [p for p in left if p.endswith(".partial") or os.path.isfile(p)], left   # no partial capture


# --- the monitor's metrics endpoint under slow clients --------------------------------------

def test_metrics_answer_beside_200_slow_clients():
    """200 clients connect and send half a request, then nothing: a scrape beside them still
    answers in full, and each slow client is dropped after the server's client timeout (its
    thread ends; here 1 s instead of the default 30 s)."""
    import socket
    import threading
    import urllib.request

    from jstall.monitor.server import Server
    from prometheus_client import CollectorRegistry, Gauge

    reg = CollectorRegistry()
    Gauge("jstall_test_value", "A value.", registry=reg).set(7)
    before = threading.active_count()
    srv = Server(("127.0.0.1", 0), reg, dict, client_timeout=1.0).start()
    slow = []
    try:
        for _ in range(200):
            s = socket.create_connection(("127.0.0.1", srv.address[1]), timeout=60)
            s.sendall(b"GET /metrics HTTP/1.1\r\n")   # and never the rest
            slow.append(s)
        body = urllib.request.urlopen(f"http://127.0.0.1:{srv.address[1]}/metrics", timeout=60).read().decode()
        assert "jstall_test_value 7.0" in body
        for s in slow:   # each dropped by the server: end of stream, no answer
            assert s.recv(1024) == b""
        deadline = time.monotonic() + 60
        while threading.active_count() > before + 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert threading.active_count() <= before + 1   # the server's own thread only
    finally:
        for s in slow:
            s.close()
        srv.stop()
