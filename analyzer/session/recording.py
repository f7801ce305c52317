"""What a recording was and how whole it is: its command and exit status, filters, traced
calls, threshold, status, and the events it lost, sized against what it kept.

Metadata keys are read as written (docs/session-format.md); a key that is absent is left out
of the output, never guessed.  Pure functions of the session (metadata and table sizes).
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

from jstall.analyzer.session.window import session_bounds, wall_hms, wall_iso

if TYPE_CHECKING:
    import pandas as pd

    from jstall.analyzer.session.load import Session

#: A buffer that lost less than this share of its events gets a note, not a warning.
NOTE_SHARE = 0.01

#: Which tables each of the recorder's ring buffers fills (probes/recorder.bpf.c).
BUFFER_TABLES = {
    "calls": ("calls",),
    "offcpu": ("offcpu", "worker_offcpu"),
    "jbd2": ("jbd2_events", "run_stats", "checkpoint_stats", "log_tail", "fill"),
    "home_writes": ("home_writes",),
    "writers": ("writers",),
}


def recorded_min_ms(meta: dict) -> float | None:
    """The threshold the recorder stored calls at (metadata ``min_ms``), or None."""
    v = meta.get("min_ms")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def effective_min_ms(meta: dict, requested: float) -> float:
    """The stall threshold an analysis can honour: calls faster than the recorded ``min_ms``
    were never stored, so a lower request is raised to it."""
    rec = recorded_min_ms(meta)
    requested = float(requested)
    return max(requested, rec) if rec is not None else requested


def exit_status_text(status: int | None) -> str | None:
    """``command_exit_status`` in words: ``exit status 3``, ``killed by signal 9 (SIGKILL)``."""
    if status is None:
        return None
    status = int(status)
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = "?"
        return f"killed by signal {-status} ({name})"
    return f"exit status {status}"


def filters_text(filters: object) -> str | None:
    """The metadata ``filters`` in words, or None when absent."""
    if not isinstance(filters, dict):
        return None
    parts = []
    if filters.get("devices"):
        parts.append("devices " + ", ".join(map(str, filters["devices"])))
    if filters.get("pid") is not None:
        parts.append(f"pid {filters['pid']}")
    if filters.get("cgroup"):
        parts.append(f"cgroup {filters['cgroup']}")
    if filters.get("command_tree"):
        parts.append("the command and its descendants")
    return "; ".join(parts) if parts else "none (every process, every ext4)"


def traced_calls(meta: dict) -> list[str] | None:
    """The names of the traced system calls (metadata ``probes.syscalls``), or None."""
    v = (meta.get("probes") or {}).get("syscalls")
    if not isinstance(v, list):
        return None
    return [str(x) for x in v]


def completeness(session: Session) -> dict:
    """How whole the recording is: a dict ``status``, ``complete`` (bool), ``through``
    (ISO 8601 of the last data kept, or None), ``through_s`` (seconds since the start) and
    ``reason`` (words, or None when complete); ``note`` (words) for a system-wide recording
    ended by a signal, the usual way.

    ``complete`` is the normal end: the recorder wrote every table and the metadata.
    ``interrupted`` (Ctrl-C or SIGTERM) also wrote everything up to the stop: system-wide that
    is how a recording ends; with a command it ended before the command did.  Any other status
    (the recorder was killed, or is still recording) keeps data up to the metadata's
    ``last_flush`` clock when present, else up to its ``end`` clock, else the last event."""
    meta = session.meta
    status = meta.get("status")
    start, end = session_bounds(session)
    through = None
    for key in ("last_flush", "end"):
        v = (meta.get(key) or {}).get("monotonic_ns")
        if isinstance(v, int) and not isinstance(v, bool):
            through = v
            break
    if through is None:
        through = _last_event_ns(session)
    out = {"status": status, "complete": True, "through": wall_iso(meta, through),
           "through_s": None if through is None or start is None else (through - start) / 1e9, "reason": None}
    when = _when(meta, through, start)
    if status == "complete":
        return out
    if status == "interrupted":
        if meta.get("command"):
            out["complete"] = False
            out["reason"] = (f"the recording was interrupted (Ctrl-C or SIGTERM) at {when}, before the command "
                             "exited: the session covers only part of it")
        else:
            out["note"] = f"the recording was ended by Ctrl-C or SIGTERM at {when}; every table was written"
        return out
    out["complete"] = False
    if status == "write_failed":   # probes/recorder.py WRITE_FAILED
        out["reason"] = (f"the recording ended at {when} when writing the session failed "
                         f"({(meta.get('stop_reason') or 'error').removeprefix('error: ')}); "
                         "what was written before is kept")
        return out
    out["reason"] = (f"the session is incomplete (status {status!r}: the recorder stopped without finishing): "
                     f"data up to {when} was kept")
    return out


def _when(meta, ns, start):
    if ns is None:
        return "an unknown time"
    hms = wall_hms(meta, ns)
    rel = f"+{(ns - start) / 1e9:.1f} s" if start is not None else None
    return " ".join(p for p in (hms, f"({rel})" if hms and rel else rel) if p)


def _last_event_ns(session):
    last = None
    for name in ("calls", "jbd2_events", "run_stats", "checkpoint_stats", "log_tail", "fill", "offcpu"):
        df = getattr(session, name, None)
        if df is not None and len(df):
            v = int(df["ts_ns"].max())
            last = v if last is None else max(last, v)
    return last


def home_writes(session: Session) -> pd.DataFrame | None:
    """The session's home_writes table where its probes counted the blocks forced checkpoints
    wrote home (its events_lost has the key), else None: an empty table then means not
    counted, not none written."""
    return session.home_writes if "home_writes" in (session.meta.get("events_lost") or {}) else None


def xattr_files(session: Session) -> pd.DataFrame | None:
    """The session's xattr_files table where its probes noted each file's attributes (its
    metadata's ``probes.xattr_files_max``), else None: an empty table then means not noted."""
    return session.xattr_files if (session.meta.get("probes") or {}).get("xattr_files_max") else None


def losses(session: Session) -> list[dict]:
    """Events lost per ring buffer against the rows kept: one dict per buffer with losses,
    ``{"buffer", "lost", "kept", "share"}`` where ``share = lost / (lost + kept)``.  For
    ``stacks`` (``stacks_lost``, kernel stack captures that failed) ``kept`` counts the
    off-CPU rows that have a stack and ``missing`` those that have none.  The counters span
    the whole session, so a session restricted to a window is compared by its whole tables."""
    session = getattr(session, "whole", None) or session
    meta = session.meta
    out = []
    lost = meta.get("events_lost") or {}
    for buf, v in lost.items():
        n = int(v or 0)
        if not n:
            continue
        if buf == "skipped":   # runs of the programs, of no one table
            out.append({"buffer": buf, "lost": n, "kept": None, "share": None})
            continue
        kept = sum(len(getattr(session, t)) for t in BUFFER_TABLES.get(buf, ()) if hasattr(session, t))
        if buf == "writers" and hasattr(session, "writers"):   # handles and tickets, not rows
            kept = int(session.writers["handles"].sum()) if len(session.writers) else 0
        out.append({"buffer": buf, "lost": n, "kept": kept, "share": n / (n + kept)})
    n = int(meta.get("stacks_lost") or 0)
    if n:
        off = session.offcpu
        missing = int((off["stack_id"] < 0).sum()) if len(off) else 0
        kept = len(off) - missing
        share = missing / len(off) if len(off) else 1.0
        out.append({"buffer": "stacks", "lost": n, "kept": kept, "missing": missing, "share": share})
    return out


def loss_messages(session: Session) -> tuple[list[str], list[str]]:
    """(warnings, notes): one message per buffer that lost events, sized by its share.  A
    share under NOTE_SHARE is a note (figures barely change); above it a warning (counts and
    times are lower bounds)."""
    warnings, notes = [], []
    for r in losses(session):
        if r["buffer"] == "skipped":
            warnings.append(f"the kernel skipped {r['lost']:,} runs of the probes (a BPF program already active on "
                            "that CPU): counts may fall short by as many; on PREEMPT_RT, fewer concurrent BPF "
                            "tools (or fentry, where the kernel has it) leave fewer")
            continue
        pct = 100 * r["share"]
        if r["buffer"] == "stacks":
            what = (f"{r['lost']:,} kernel stack captures failed; {r.get('missing', 0):,} of "
                    f"{r['kept'] + r.get('missing', 0):,} off-CPU intervals have no stack ({pct:.2g}%)")
            effect = ("their time is 'other' (stack not captured) unless a checkpoint ran in the thread "
                      "or an XFS log-space wait was measured in it; verdicts judge the measured waits")
        else:
            what = f"{r['lost']:,} {r['buffer']} events lost, {r['kept']:,} kept ({pct:.2g}% lost)"
            effect = {"calls": "stall counts and times are lower bounds",
                      "offcpu": "stall time by cause is a lower bound",
                      "jbd2": "journal figures (transactions, checkpoints, fill) are lower bounds",
                      "home_writes": "the journal model's blocks written home are a lower bound",
                      "writers": "the writers' shares leave out handles the full map could not count"}.get(
                          r["buffer"], "figures are lower bounds")
        if r["share"] < NOTE_SHARE:
            notes.append(f"{what}: negligible")
        else:
            warnings.append(f"{what}: {effect}; record again with a higher --min-ms or fewer devices")
    return warnings, notes


def header(session: Session) -> dict:
    """What was recorded: ``command``, ``exit_status``, ``exit_status_text``, ``filters``,
    ``traced_calls``, ``status``, ``complete``, ``through``, ``through_s``, ``start``, ``end``
    (ISO 8601); keys whose metadata is absent are None."""
    s = session
    m = s.meta
    c = completeness(s)
    status = m.get("command_exit_status") if m.get("command") else None
    return {
        "command": m.get("command"),
        "exit_status": status,
        "exit_status_text": exit_status_text(status),
        "filters": m.get("filters"),
        "traced_calls": traced_calls(m),
        "status": m.get("status"),
        "complete": c["complete"],
        "through": c["through"],
        "through_s": c["through_s"],
        "start": wall_iso(m, s.start_ns),
        "end": wall_iso(m, s.end_ns),
    }


def session_span_s(session: Session) -> float:
    """The session's duration in seconds (metadata clocks; else the span of its events); a
    session restricted to a time window lasts as long as the window."""
    if getattr(session, "window_ns", None):
        return (session.window_ns[1] - session.window_ns[0]) / 1e9
    if session.start_ns is not None and session.end_ns is not None and session.end_ns > session.start_ns:
        return (session.end_ns - session.start_ns) / 1e9
    ts = [df["ts_ns"] for df in (session.calls, session.jbd2_events, session.run_stats) if len(df)]
    if not ts:
        return 0.0
    return max((max(int(t.max()) for t in ts) - min(int(t.min()) for t in ts)) / 1e9, 0.0)
