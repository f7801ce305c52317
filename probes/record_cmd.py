"""`jstall record`: trace jbd2, slow metadata calls and their blocking stacks."""

DESCRIPTION = """\
Record what ext4's journal (jbd2) does, every metadata call (setxattr, unlink, mkdir,
rmdir, create, rename, fsync, ...) and the kernel stack each stalled call blocked in.
Prints one line per call at or above --min-ms and writes a session directory for
'jstall analyze' and 'jstall report'.

With a COMMAND, the probes attach first, then COMMAND runs (traced with its
descendants) and recording stops when it exits; its exit status is returned.
Without one, it traces system-wide until Ctrl-C, SIGTERM or --duration."""

EXAMPLES = """\
examples:
    jstall record -- setfattr -n user.a -v 1 /mnt/x/f   # trace one command and its children
    jstall record -d /mnt/scratch                       # system-wide, one filesystem, until Ctrl-C
    jstall record -d 7:0 -d /srv --duration 60          # two filesystems, for 60 seconds
    jstall record -p 1234 --min-ms 10                   # one process, print calls >= 10 ms
    jstall record --cgroup /sys/fs/cgroup/unified/app.slice -o app-session
    jstall analyze jstall-session-20261123-070000       # then explain what was recorded

output columns: TIME COMM PID TID CALL LAT(ms) DEV FILL%
    DEV is the filesystem the call journaled on; FILL% the journal's fill when the
    call requested its first journal handle, counting the committing transaction's
    credits as used, as jbd2 does when it decides whether a handle must checkpoint."""

import argparse
import os
import signal
import subprocess
import sys
import threading

from jstall.errors import JstallError


def add_arguments(p):
    p.usage = ("jstall record [-h] [-o DIR] [-d DEV]... [-p PID] [--cgroup PATH] [--min-ms MS] "
               "[--duration S] [-q] [--collect-dir ROOT] [-- COMMAND [ARG ...]]")
    p.add_argument("-o", "--output", metavar="DIR", help="session directory (default: jstall-session-<time>)")
    p.add_argument("-d", "--device", action="append", default=[], metavar="DEV",
                   help="trace only this ext4 (MAJ:MIN, block device or mount point); repeatable")
    p.add_argument("-p", "--pid", type=int, help="trace only this process")
    p.add_argument("--cgroup", metavar="PATH", help="trace only tasks in this cgroup v2 directory")
    p.add_argument("--min-ms", type=float, default=1.0, metavar="MS",
                   help="print and store calls at or above MS milliseconds (default 1); every call is counted")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    p.add_argument("-q", "--quiet", action="store_true", help="no per-call lines")
    p.add_argument("--collect-dir", metavar="ROOT",
                   help="write the session to ROOT/host=HOST/date=YYYY-MM-DD/NAME (docs/fleet.md), not -o")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARG ...]",
                   help="run COMMAND, trace it and its descendants, stop when it exits")


def run(args):
    from .recorder import RecordOptions, Recorder

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.min_ms < 0:
        raise JstallError("--min-ms must be zero or positive")
    if command and args.pid:
        raise JstallError("give either -p PID or a COMMAND, not both")
    if args.collect_dir:
        args.output = _collected_output(args.output, args.collect_dir)
    # Per-call lines go to stdout like bcc's tools, except when stdout is the command's.
    rec = Recorder(RecordOptions(
        output_dir=args.output, devices=args.device, pid=args.pid, cgroup=args.cgroup,
        command_tree=bool(command), min_ms=args.min_ms, quiet=args.quiet,
        console=sys.stderr if command else sys.stdout,
    ))
    # Signals are caught from before the probes attach: a Ctrl-C at any moment still ends
    # with a complete session.
    with _Signals() as sig:
        rec.start()
        if command:
            return _run_command(rec, command, args.duration, sig)
        return _run_system_wide(rec, args.duration, sig)


def _collected_output(output, root):
    """The session directory under a collection root (jstall.session.collected_path)."""
    import datetime
    import socket

    from jstall.session import collected_path

    from .recorder import default_output_dir

    if output:
        raise JstallError("give either -o DIR or --collect-dir ROOT, not both")
    return collected_path(root, socket.gethostname(), datetime.datetime.now(datetime.timezone.utc),
                          default_output_dir())


class _Signals:
    """SIGINT and SIGTERM while recording: remembered (``interrupted``, ``event``) and, once
    the traced command runs, SIGTERM forwarded to it (the terminal sends SIGINT to the whole
    foreground group, the command included)."""

    def __init__(self):
        self.event = threading.Event()
        self.interrupted = False
        self.proc = None

    def _handle(self, signum, frame):
        self.interrupted = True
        self.event.set()
        if self.proc is not None and signum != signal.SIGINT:
            self.proc.send_signal(signum)

    def __enter__(self):
        self._old = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc):
        for s, h in self._old.items():
            signal.signal(s, h)


def _summary(rec, path):
    m = rec.metadata
    calls = sum(rec.tables["call_totals"]["count"].to_pylist())
    secs = (m["end"]["monotonic_ns"] - m["start"]["monotonic_ns"]) / 1e9
    lost = m["events_lost"]
    print(f"\njstall: {secs:.1f} s, {calls} traced calls, {rec.rows['calls']} at or above {m['min_ms']:g} ms; "
          f"{rec.rows['run_stats']} transactions committed; checkpoints: {rec.checkpoints['forced']} forced in a "
          f"user task, {rec.checkpoints['background']} by jbd2", file=sys.stderr)
    lost_total = sum(lost.values()) + m["stacks_lost"]
    print(f"jstall: events lost: calls {lost['calls']}, offcpu {lost['offcpu']}, jbd2 {lost['jbd2']}, "
          f"stacks {m['stacks_lost']}" + ("  (WARNING: the session is incomplete)" if lost_total else ""),
          file=sys.stderr)
    print(f"jstall: session written to {path}", file=sys.stderr)


def _run_command(rec, command, duration, sig):
    if sig.interrupted:  # interrupted while the probes attached: do not start the command
        path = rec.stop(command=command, status="interrupted")
        _summary(rec, path)
        return 130
    # Children of a traced tgid join the tree (sched_process_fork): trace jstall itself
    # only while it forks the command, so the command is traced from its first call.
    me = os.getpid()
    rec.trace_tgid(me)
    try:
        proc = subprocess.Popen(command)
    except OSError as e:
        rec.untrace_tgid(me)
        rec.stop(command=command, status="interrupted")
        raise JstallError(f"cannot run {command[0]}: {e.strerror}") from None
    finally:
        rec.untrace_tgid(me)
    rec.trace_tgid(proc.pid)
    sig.proc = proc
    timer = None
    if duration:
        timer = threading.Timer(duration, proc.terminate)
        timer.start()
    try:
        code = proc.wait()
    finally:
        if timer:
            timer.cancel()
    path = rec.stop(command=command, exit_status=code, status="interrupted" if sig.interrupted else "complete")
    _summary(rec, path)
    return code if code >= 0 else 128 - code


def _run_system_wide(rec, duration, sig):
    sig.event.wait(duration)
    path = rec.stop()
    _summary(rec, path)
    return 0
