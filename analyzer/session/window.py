"""Wall-clock times of a session and time windows (``--from``/``--to``).

A session's times are ``CLOCK_MONOTONIC`` nanoseconds (``ts_ns``); its metadata gives the
wall clock at the start beside the monotonic clock (``start.wall_ns``, ``start.monotonic_ns``),
so ``wall_ns = start.wall_ns + (ts_ns - start.monotonic_ns)``.  Wall-clock times are shown
in the local time zone of the machine running the analysis (``TZ=UTC jstall analyze ...`` for
UTC), as bcc's tools print theirs, and in JSON as ISO 8601 with the offset.

A window keeps, in every table that carries times, the rows whose ``ts_ns`` lies in
``[from, to)``: a call belongs to the window it starts in, and its off-CPU rows go with it
(``call_ts_ns``).  ``call_totals`` and ``call_histograms`` count calls in the kernel with no
time, so they stay those of the whole session.  Pure functions; pandas loads lazily.
"""

from __future__ import annotations

import datetime
import re

from jstall.errors import JstallError

from jstall.analyzer.session.load import Session

#: tables filtered by ``ts_ns`` (``offcpu`` is filtered by ``call_ts_ns``)
TIMED_TABLES = ("calls", "jbd2_events", "run_stats", "checkpoint_stats", "log_tail", "fill")

_SECONDS = re.compile(r"^\+(\d+(?:\.\d*)?|\.\d+)$")
_HMS = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2})(\.\d+)?)?$")

TIME_FORMS = "HH:MM[:SS[.fff]] (wall clock), an ISO 8601 date and time, or +SECONDS since the start"


def _clock_ns(meta, key, field):
    v = (meta.get(key) or {}).get(field)
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def wall_offset_ns(meta: dict) -> int | None:
    """``wall_ns - monotonic_ns`` from the metadata's start clock, or None without one."""
    wall, mono = _clock_ns(meta, "start", "wall_ns"), _clock_ns(meta, "start", "monotonic_ns")
    if wall is None or mono is None:
        return None
    return wall - mono


def to_datetime(wall_ns: int) -> datetime.datetime:
    """A wall-clock time in ns since the epoch as an aware datetime in the local zone."""
    return datetime.datetime.fromtimestamp(wall_ns // 1000 / 1e6, tz=datetime.timezone.utc).astimezone()


def wall_iso(meta: dict, ts_ns: int | None) -> str | None:
    """ISO 8601 (with the local offset, microseconds) of a monotonic ``ts_ns``, or None."""
    off = wall_offset_ns(meta)
    if off is None or ts_ns is None:
        return None
    return to_datetime(int(ts_ns) + off).isoformat(timespec="microseconds")


def wall_hms(meta: dict, ts_ns: int | None) -> str | None:
    """``HH:MM:SS.mmm`` (local time) of a monotonic ``ts_ns``, or None."""
    off = wall_offset_ns(meta)
    if off is None or ts_ns is None:
        return None
    return to_datetime(int(ts_ns) + off).strftime("%H:%M:%S.%f")[:-3]


def parse_time(text: str, meta: dict, option: str = "--from") -> int:
    """A ``--from``/``--to`` value as monotonic ns of the session.

    Forms: ``+SECONDS`` since the session start; ``HH:MM[:SS[.fff]]`` local wall clock on the
    session's days (the first such time at or after the start minus 12 hours, so a session
    that crosses midnight is handled); an ISO 8601 date and time (no offset: local time).
    Raises JstallError naming the accepted forms."""
    s = str(text).strip()
    start = _clock_ns(meta, "start", "monotonic_ns")
    m = _SECONDS.match(s)
    if m:
        if start is None:
            raise JstallError(f"{option} {s}: the session's metadata has no start time; record it again")
        return start + int(round(float(m.group(1)) * 1e9))
    off = wall_offset_ns(meta)
    m = _HMS.match(s)
    if m:
        h, mi, sec = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
        frac = float(m.group(4) or 0.0)
        if h > 23 or mi > 59 or sec > 59:
            raise JstallError(f"{option} {s}: not a time of day; give {TIME_FORMS}")
        if off is None:
            raise JstallError(f"{option} {s}: the session has no wall-clock start; give +SECONDS since the start")
        t0 = to_datetime(start + off)
        cand = t0.replace(hour=h, minute=mi, second=sec, microsecond=int(round(frac * 1e6)) % 1_000_000)
        # the first such time of day at or after (start - 12 h)
        if cand < t0 - datetime.timedelta(hours=12):
            cand += datetime.timedelta(days=1)
        elif cand >= t0 + datetime.timedelta(hours=12):
            cand -= datetime.timedelta(days=1)
        return _from_datetime(cand) - off
    try:
        dt = datetime.datetime.fromisoformat(s.replace("Z", "+00:00").replace(" ", "T", 1))
    except ValueError:
        raise JstallError(f"{option} {s}: not a time; give {TIME_FORMS}") from None
    if "T" not in s.replace(" ", "T", 1):
        raise JstallError(f"{option} {s}: a date without a time; give {TIME_FORMS}")
    if off is None:
        raise JstallError(f"{option} {s}: the session has no wall-clock start; give +SECONDS since the start")
    if dt.tzinfo is None:
        dt = dt.astimezone()  # local time, as printed
    return _from_datetime(dt) - off


def _from_datetime(dt):
    """Aware datetime -> ns since the epoch (exact to the microsecond)."""
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    d = dt - epoch
    return (d.days * 86400 + d.seconds) * 1_000_000_000 + d.microseconds * 1000


def session_bounds(session: Session) -> tuple[int, int]:
    """(first_ns, last_ns) of the session: metadata start/end clocks, else its events."""
    start, end = session.start_ns, session.end_ns
    if start is None or end is None:
        ts = [df["ts_ns"] for df in (session.calls, session.jbd2_events, session.run_stats, session.fill)
              if len(df)]
        lo = min(int(t.min()) for t in ts) if ts else 0
        hi = max(int(t.max()) for t in ts) if ts else 0
        start = lo if start is None else start
        end = hi if end is None else end
    return start, end


def resolve(session: Session, from_text: str | None = None,
            to_text: str | None = None) -> tuple[int, int] | None:
    """``--from``/``--to`` strings -> (from_ns, to_ns), each clipped to the session; None when
    neither is given.  Raises JstallError for a bad value, an empty window, or one outside
    the session."""
    if from_text is None and to_text is None:
        return None
    meta = session.meta
    start, end = session_bounds(session)
    lo = parse_time(from_text, meta, "--from") if from_text is not None else start
    hi = parse_time(to_text, meta, "--to") if to_text is not None else end

    def show(ns):
        return wall_hms(meta, ns) or f"+{(ns - start) / 1e9:.3f} s"

    span = f"the session runs from {show(start)} to {show(end)}"
    if from_text is not None and to_text is not None and hi <= lo:
        raise JstallError(f"--from {show(lo)} is not before --to {show(hi)}: give an earlier --from or a later --to")
    if lo >= end:
        raise JstallError(f"--from {show(lo)} is at or after the session's end ({span}): give an earlier time")
    if hi <= start:
        raise JstallError(f"--to {show(hi)} is at or before the session's start ({span}): give a later time")
    return max(lo, start), min(hi, end)


def restrict(session: Session, from_ns: int, to_ns: int) -> Session:
    """A new Session holding only the rows of ``[from_ns, to_ns)`` (see the module docstring).

    The copy's metadata keeps the session's clocks; ``Session.window_ns`` holds the window,
    ``Session.whole`` the unrestricted session, and the journals lose ``proc_info_start``/
    ``proc_info_end`` (the kernel's /proc figures span the whole session, not the window)."""
    import copy

    tables = {}
    for name, df in session.tables.items():
        if name in TIMED_TABLES:
            t = df["ts_ns"]
            df = df[(t >= from_ns) & (t < to_ns)].reset_index(drop=True)
        elif name == "offcpu":
            t = df["call_ts_ns"]
            df = df[(t >= from_ns) & (t < to_ns)].reset_index(drop=True)
        tables[name] = df
    meta = copy.deepcopy(session.meta)
    for j in meta.get("journals") or []:
        j.pop("proc_info_start", None)
        j.pop("proc_info_end", None)
    out = Session(session.path, meta, tables)
    out.window_ns = (int(from_ns), int(to_ns))
    out.whole = getattr(session, "whole", None) or session  # for counters that span the session
    return out


def describe(session: Session) -> dict | None:
    """The window of a restricted session as a JSON-ready dict, or None: ``from``/``to`` (ISO
    8601), ``from_s``/``to_s`` (seconds since the session start), ``duration_s``."""
    w = getattr(session, "window_ns", None)
    if not w:
        return None
    start = session.start_ns or 0
    return {"from": wall_iso(session.meta, w[0]), "to": wall_iso(session.meta, w[1]),
            "from_s": (w[0] - start) / 1e9, "to_s": (w[1] - start) / 1e9, "duration_s": (w[1] - w[0]) / 1e9,
            "call_counts": "whole session"}
