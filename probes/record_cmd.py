"""`jstall record`: trace jbd2, slow metadata calls and their blocking stacks."""

DESCRIPTION = """\
Record what ext4's journal (jbd2) does, every metadata call (setxattr, unlink, mkdir,
rmdir, create, rename, fsync, ...) and the kernel stack each stalled call blocked in.
Prints "Tracing ... Hit Ctrl-C to end." once the probes are attached, then one line per
call at or above --min-ms on stdout, and writes a session directory for 'jstall analyze'
and 'jstall report' (flushed every 2 s: a killed recorder leaves a loadable session).

With a COMMAND, the probes attach first, then COMMAND runs (traced with its
descendants) and recording stops when it exits; its exit status is returned. With -p,
the process, its threads and the children it forks are traced until it exits.
Otherwise it traces system-wide until Ctrl-C, SIGTERM, --duration or --max-size."""

EXAMPLES = """\
examples:
    jstall record -- setfattr -n user.a -v 1 /mnt/x/f   # trace one command and its children
    jstall record -d /mnt/scratch                       # system-wide, one filesystem, until Ctrl-C
    jstall record -d 7:0 -d /srv --duration 60          # two filesystems, for 60 seconds
    jstall record -p 1234 --min-ms 10                   # one process and its children, until it exits
    jstall record --cgroup /sys/fs/cgroup/unified/app.slice -o app-session
    jstall record --calls metadata,fsync,write -d /srv -- tar xf big.tar  # buffered writes too
    jstall record --calls all -p 1234                   # every call group jstall knows
    jstall record -q -d /srv --min-ms 10 --max-size 2000 -o day   # unattended, at most 2 GB
    jstall analyze jstall-session-20261123-070000       # then explain what was recorded

output columns: TIME COMM PID TID CALL LAT(ms) DEV FILL% FILE
    DEV is the filesystem the call is on ('-': it resolved to none, e.g. a failed
    lookup); FILL% the journal's fill when the call requested its first journal handle,
    counting the committing transaction's credits as used, as jbd2 does when it decides
    whether a handle must checkpoint; FILE the path as the call passed it, or for a
    descriptor (fsync, fsetxattr, ...) the file's name."""

import argparse
import os
import shutil
import subprocess
import sys
import threading
import time

from jstall import system
from jstall.errors import JstallError
from jstall.session import collect_here

from .syscalls import parse_calls


def add_arguments(p):
    p.usage = ("jstall record [-h] [-o DIR] [-d DEV]... [-p PID] [--cgroup PATH] [--min-ms MS] "
               "[--duration S] [--max-size MB] [--calls GROUP,...] [-q] [--collect-dir ROOT] "
               "[-- COMMAND [ARG ...]]")
    p.add_argument("-o", "--output", metavar="DIR", help="session directory (default: jstall-session-<time>)")
    p.add_argument("-d", "--device", action="append", default=[], metavar="DEV",
                   help="trace only this ext4 (MAJ:MIN, block device or mount point); repeatable")
    p.add_argument("-p", "--pid", type=int,
                   help="trace only this process, its threads and children; stop when it exits")
    p.add_argument("--cgroup", metavar="PATH", help="trace only tasks in this cgroup v2 directory")
    p.add_argument("--min-ms", type=float, default=1.0, metavar="MS",
                   help="print and store calls at or above MS milliseconds (default 1); every call is counted")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    p.add_argument("--max-size", type=float, metavar="MB",
                   help="stop when the session's tables reach MB megabytes (for long unattended runs)")
    p.add_argument("-q", "--quiet", action="store_true", help="no per-call lines")
    p.add_argument("--calls", metavar="GROUP,...",
                   help="calls to trace: comma-separated groups (metadata, fsync, sync, write, truncate, time, "
                        "attr, link, copy, ioctl, close), single calls, or all (default: metadata,fsync)")
    p.add_argument("--collect-dir", metavar="ROOT",
                   help="write the session to ROOT/host=HOST/date=YYYY-MM-DD/NAME (docs/fleet.md), not -o")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARG ...]",
                   help="run COMMAND, trace it and its descendants, stop when it exits")


def _check_args(args, command):
    """Every bad value is a one-line error before anything is made."""
    if args.min_ms < 0 or args.min_ms != args.min_ms:
        raise JstallError(f"--min-ms {args.min_ms:g}: must be zero or positive")
    if args.duration is not None and not args.duration > 0:
        raise JstallError(f"--duration {args.duration:g}: must be a positive number of seconds")
    if args.max_size is not None and not args.max_size > 0:
        raise JstallError(f"--max-size {args.max_size:g}: must be a positive number of megabytes")
    if args.pid is not None and args.pid <= 0:
        raise JstallError(f"-p {args.pid}: must be a positive process id")
    if command and args.pid:
        raise JstallError("give either -p PID or a COMMAND, not both")
    if command:
        exe = command[0]
        if "/" in exe:
            if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
                raise JstallError(f"cannot run {exe}: no such executable file; give a command that exists")
        elif shutil.which(exe) is None:
            raise JstallError(f"cannot run {exe}: command not found in PATH; give a command that exists")


def run(args):
    from .recorder import RecordOptions, Recorder  # deferred on purpose: bcc, numpy and pyarrow

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    _check_args(args, command)
    calls = parse_calls(args.calls)
    if args.collect_dir:
        args.output = _collected_output(args.output, args.collect_dir)
    # Per-call lines go to stdout in every mode, as bcc's tools print them; the summary
    # and messages go to stderr.
    rec = Recorder(RecordOptions(calls=calls,
        output_dir=args.output, devices=args.device, pid=args.pid, cgroup=args.cgroup,
        command_tree=bool(command), min_ms=args.min_ms, quiet=args.quiet, console=sys.stdout,
        max_size_bytes=int(args.max_size * 1e6) if args.max_size else None,
    ))
    # Signals are caught from before the probes attach: a Ctrl-C at any moment still ends
    # with a session.
    with _Signals() as sig:
        rec.start()
        if command:
            return _run_command(rec, command, args.duration, sig)
        return _run_system_wide(rec, args.duration, sig)


def _collected_output(output, root):
    """The session directory under a collection root (jstall.session.collect_here)."""
    from .recorder import default_output_dir  # deferred on purpose, as in run

    if output:
        raise JstallError("give either -o DIR or --collect-dir ROOT, not both")
    return collect_here(root, default_output_dir())


class _Signals:
    """SIGINT and SIGTERM while recording: remembered (``interrupted``, ``event``) and, once
    the traced command runs, forwarded to it (SIGKILL if it is still running
    ``KILL_AFTER_S`` seconds later)."""

    KILL_AFTER_S = 5.0

    def __init__(self):
        self.event = threading.Event()
        self.interrupted = False
        self.signum = None
        self.proc = None

    def _handle(self, signum, frame):
        self.interrupted = True
        self.signum = signum
        self.event.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signum)
            timer = threading.Timer(self.KILL_AFTER_S, self._kill)
            timer.daemon = True
            timer.start()

    def _kill(self):
        if self.proc.poll() is None:
            self.proc.kill()

    def __enter__(self):
        self._old = system.install_handlers(self._handle)
        return self

    def __exit__(self, *exc):
        system.restore_handlers(self._old)


#: a loss at or above this share of its kind prints a warning
LOSS_WARNING_SHARE = 0.01


def _share(part, whole):
    return f"{100.0 * part / whole:.2g}%" if whole else "all"


def _summary(rec, path):
    m = rec.metadata
    totals = rec.tables["call_totals"].to_pydict()
    waits = sum(n for c, n in zip(totals["syscall"], totals["count"]) if c == "journal_start")
    calls = sum(totals["count"]) - waits
    secs = (m["end"]["monotonic_ns"] - m["start"]["monotonic_ns"]) / 1e9
    lost = m["events_lost"]
    print(f"\njstall: {secs:.1f} s, {calls} traced calls and {waits} journal handle waits outside them, "
          f"{rec.rows['calls']} at or above {m['min_ms']:g} ms; "
          f"{rec.rows['run_stats']} transactions committed; checkpoints: {rec.checkpoints['forced']} forced in a "
          f"user task, {rec.checkpoints['background']} by jbd2", file=sys.stderr)
    devless = m.get("calls_without_device") or {}
    n_devless = sum(v["count"] for v in devless.values())
    if n_devless:
        where = ("not in the tables (the -d filter cannot place them)" if m["filters"]["devices"]
                 else "stored with no device")
        print(f"jstall: {n_devless} calls resolved to no filesystem (a path that failed before any journal handle, "
              f"or a filesystem that journals nothing): "
              + ", ".join(f"{k} {v['count']}" for k, v in devless.items()) + f"; {where}", file=sys.stderr)
    print(f"jstall: events lost: calls {lost['calls']}, offcpu {lost['offcpu']}, jbd2 {lost['jbd2']}, "
          + (f"home_writes {lost['home_writes']}, " if "home_writes" in lost else "")
          + f"stacks {m['stacks_lost']}"
          + (f", skipped by the kernel {lost['skipped']}" if lost.get("skipped") else ""), file=sys.stderr)
    if lost.get("skipped"):
        print(f"jstall: WARNING: the kernel skipped {lost['skipped']} runs of the probes (a BPF program already "
              "active on that CPU): counts may fall short by as many", file=sys.stderr)
    # sized to what was lost: each kind's share, and a warning only when the share matters
    jbd2_rows = sum(rec.rows[t] for t in ("jbd2_events", "run_stats", "checkpoint_stats", "log_tail", "fill"))
    for what, n, total in (("slow calls", lost["calls"], rec.rows["calls"] + lost["calls"]),
                           ("off-CPU intervals", lost["offcpu"],
                            rec.rows["offcpu"] + rec.rows["worker_offcpu"] + lost["offcpu"]),
                           ("jbd2 events", lost["jbd2"], jbd2_rows + lost["jbd2"]),
                           ("off-CPU intervals without a stack", rec.offcpu_without_stack, rec.rows["offcpu"])):
        if not n:
            continue
        line = f"jstall: {what}: {n} of {total} lost ({_share(n, total)})"
        if not total or n / total >= LOSS_WARNING_SHARE:
            line += "; WARNING: figures built on them are partial; record fewer devices or a higher --min-ms"
        print(line, file=sys.stderr)
    print(f"jstall: session written to {path}", file=sys.stderr)


def _run_command(rec, command, duration, sig):
    if sig.interrupted:  # interrupted while the probes attached: do not start the command
        path = rec.stop(command=command, status="interrupted", stop_reason="signal")
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
        rec.stop(command=command, status="interrupted", stop_reason="command failed to start")
        raise JstallError(f"cannot run {command[0]}: {e.strerror}") from None
    finally:
        rec.untrace_tgid(me)
    rec.trace_tgid(proc.pid)
    sig.proc = proc
    reason = ["command exited"]

    def _limit(why):
        reason[0] = why
        if proc.poll() is None:
            proc.terminate()

    timer = threading.Timer(duration, _limit, ("duration",)) if duration else None
    if timer:
        timer.start()
    watcher = threading.Thread(target=lambda: rec.done.wait() and _limit(rec.stop_reason), daemon=True)
    watcher.start()
    try:
        code = proc.wait()
    finally:
        if timer:
            timer.cancel()
    if sig.interrupted:
        reason[0] = "signal"
    path = rec.stop(command=command, exit_status=code, status="interrupted" if sig.interrupted else "complete",
                    stop_reason=reason[0])
    _summary(rec, path)
    return code if code >= 0 else 128 - code


def _run_system_wide(rec, duration, sig):
    deadline = time.monotonic() + duration if duration else None
    reason = None
    while reason is None:
        if sig.event.wait(0.2):
            reason = "signal"
        elif rec.done.is_set():
            reason = rec.stop_reason
        elif deadline and time.monotonic() >= deadline:
            reason = "duration"
    # Ending a system-wide or -p recording with Ctrl-C or SIGTERM is its normal end: complete.
    path = rec.stop(stop_reason=reason)
    _summary(rec, path)
    return 0
