"""System helpers the probes and the lab share: the root check, the mount table,
process start times, and signal handling (deferral, handlers, SIGTERM as an exception).

Nothing here imports pandas or bcc; every function reads the running system directly.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterable, Iterator

from jstall.errors import JstallError

#: the signals that end jstall: Ctrl-C and kill's default
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


# ---- privileges -------------------------------------------------------------------------------


def require_root(message: str) -> None:
    """Raise JstallError(message) unless the process runs as root (effective uid 0)."""
    if os.geteuid() != 0:
        raise JstallError(message)


# ---- the mount table ----------------------------------------------------------------------------


def _unescape(text):
    """A /proc/self/mountinfo field with its octal escapes (\\040 space, \\011 tab, \\012
    newline, \\134 backslash) decoded."""
    return (text.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\"))


def mounts() -> list[dict]:
    """Every mount of this process's namespace in mount order, from /proc/self/mountinfo: one
    dict each with ``dev`` ('MAJ:MIN' of the filesystem), ``mountpoint``, ``fstype``,
    ``source`` and ``options`` (the mount's options then the filesystem's, without a second
    rw/ro)."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, rfields = left.split(), right.split()
            if len(fields) < 6 or len(rfields) < 3:
                continue
            opts = fields[5].split(",") + [o for o in rfields[2].split(",") if o not in ("rw", "ro")]
            out.append({"dev": fields[2], "mountpoint": _unescape(fields[4]), "fstype": rfields[0],
                        "source": _unescape(rfields[1]), "options": ",".join(dict.fromkeys(opts))})
    return out


def mount_options(mountpoint: str) -> str | None:
    """The options string /proc/self/mounts shows for a mount point (the last mount there), or
    None. Read from /proc/self/mounts rather than mountinfo: its order is the kernel's own
    (show_vfsmnt: rw/ro, superblock flags, mount flags, the filesystem's options)."""
    opts = None
    with open("/proc/self/mounts") as f:
        for line in f:
            p = line.split()
            if _unescape(p[1]) == mountpoint:
                opts = p[3]
    return opts


# ---- processes ------------------------------------------------------------------------------------


def proc_start(pid: int) -> int | None:
    """The start time of a process (clock ticks since boot, /proc/PID/stat field 22), or None
    when it does not exist: with the pid, it names one process across pid reuse."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError, TypeError):
        return None


# ---- signals --------------------------------------------------------------------------------------


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM (main thread only) until the block is done: a Ctrl-C there is
    delivered when the block ends, so that what it writes or undoes is finished first."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, set(STOP_SIGNALS))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def install_handlers(handler: Callable, signals: Iterable[int] = STOP_SIGNALS) -> dict:
    """Set handler for each signal; return {signal: previous handler} for restore_handlers()."""
    return {s: signal.signal(s, handler) for s in signals}


def restore_handlers(old: dict) -> None:
    """Put back the handlers install_handlers() returned."""
    for s, h in old.items():
        signal.signal(s, h)


def raise_on_sigterm(exc_type: type[BaseException]) -> Callable | int | None:
    """From now on SIGTERM raises exc_type (e.g. a KeyboardInterrupt subclass, so that it is
    handled like Ctrl-C) in the main thread. Returns the previous handler for
    restore_handlers({signal.SIGTERM: it}), or None off the main thread (nothing changed)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def on_term(signum, frame):
        raise exc_type(f"signal {signum}")

    return signal.signal(signal.SIGTERM, on_term)
