"""The whole analysis of one session: every table the summary, the JSON and the report use.

``analyze(path_or_session, min_ms=10)`` returns an :class:`Analysis` whose attributes are
DataFrames (see each module for units) and ``to_dict()`` the stable JSON document
(docs/analysis.md).
"""

from functools import cached_property

from .causes import CAUSES
from .stalls import DEFAULT_MIN_MS

#: Version of the JSON document ``jstall analyze --json`` prints (not the session's).
JSON_SCHEMA_VERSION = 1


def _num(v, nd=3):
    """JSON-safe number: NaN/None/pd.NA -> None, numpy scalars -> Python, floats rounded."""
    import math

    import numpy as np
    import pandas as pd

    if v is None or v is pd.NA:
        return None
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, (bool, int)):
        return v
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return None
        return round(v, nd)
    return v


def _clean(obj):
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return _num(obj)


class Analysis:
    """Result of :func:`analyze`.  Attributes:

    - ``session``: the loaded :class:`~jstall.analyzer.load.Session`; ``min_ms``.
    - ``timeline``: fill samples (fill.timeline); ``stalls``: the stall table
      (stalls.find_stalls); ``causes``: stall count and off-CPU ms per cause.
    - ``transactions``, ``phases`` (commit phase bands), ``checkpoints``: per journal event.
    - ``journals``: one row per journal (journals.summary); ``proc``: agreement with
      /proc/fs/jbd2 (journals.proc_agreement).
    - ``calls``: latency statistics per syscall; ``processes``: stall time per process;
      ``recommendations``; ``warnings`` and ``notes`` (strings).

    Every result is computed on its first use and cached; ``to_dict()`` only serializes them.
    """

    def __init__(self, session, min_ms=DEFAULT_MIN_MS):
        from . import recording

        self.session = session
        self.requested_min_ms = float(min_ms)
        self.min_ms = recording.effective_min_ms(session.meta, min_ms)

    # Each result is computed on first use and kept (functools.cached_property): a caller
    # that needs the stall table does not pay for commit phases or recommendations.

    @cached_property
    def timeline(self):
        from . import fill

        return fill.timeline(self.session)

    @cached_property
    def stalls(self):
        from . import stalls

        return stalls.find_stalls(self.session, self.timeline, self.min_ms)

    @cached_property
    def causes(self):
        from . import stalls

        return stalls.by_cause(self.stalls)

    @cached_property
    def transactions(self):
        from . import journals

        return journals.transactions(self.session)

    @cached_property
    def phases(self):
        from . import journals

        return journals.commit_phases(self.session)

    @cached_property
    def checkpoints(self):
        from . import journals

        return journals.checkpoints(self.session)

    @cached_property
    def journals(self):
        from . import journals

        return journals.summary(self.session, self.timeline, self.transactions, self.stalls)

    @cached_property
    def proc(self):
        from . import journals

        return journals.proc_agreement(self.session, self.transactions)

    @cached_property
    def calls(self):
        from . import calls

        return calls.call_stats(self.session)

    @cached_property
    def processes(self):
        from . import processes

        return processes.per_process(self.session, self.stalls)

    @cached_property
    def _messages(self):
        """(warnings, notes): see _warnings."""
        notes = []
        return self._warnings(notes), notes

    @property
    def warnings(self):
        return self._messages[0]

    @property
    def notes(self):
        return self._messages[1]

    @cached_property
    def recommendations(self):
        from . import recommend

        return recommend.recommendations(self.session, self.journals, self.stalls, self.causes, self.calls,
                                         self.transactions, self.min_ms, self.timeline)

    def _warnings(self, notes):
        """The warning lines; appends the note lines to ``notes``."""
        from . import recording

        m = self.session.meta
        w, loss_notes = recording.loss_messages(self.session)
        notes.extend(loss_notes)
        done = recording.completeness(self.session)
        if done["reason"]:
            w.insert(0, done["reason"])
        if done.get("note"):
            notes.insert(0, done["note"])
        if self.min_ms > self.requested_min_ms:
            notes.append(f"calls faster than {self.min_ms:g} ms were never stored (recorded with --min-ms "
                              f"{self.min_ms:g}): stalls are calls >= {self.min_ms:g} ms, not "
                              f"{self.requested_min_ms:g} ms")
        if getattr(self.session, "window_ns", None):
            notes.append("the calls table (counts, percentiles) and events lost cover the whole session: "
                              "the kernel counts them with no time")
        missing = (m.get("probes") or {}).get("missing") or []
        if missing:
            w.append("probes missing while recording: " + ", ".join(missing))
        if not len(self.session.jbd2_events) and not len(self.session.run_stats):
            w.append("no jbd2 events in this session: no commit or checkpoint happened while recording, or the journal's device was not traced")
        if len(self.proc):
            bad = self.proc[self.proc["status"] == "disagree"]
            for _, r in bad.iterrows():  # a handful of rows at most
                w.append(f"{r['dev']}: {r['metric']} disagrees with /proc/fs/jbd2 "
                         f"(analyzer {r['analyzer']:.2f}, kernel {r['kernel']:.2f} "
                         f"[{r['kernel_low']:.2f}, {r['kernel_high']:.2f}], tolerance ±{r['tolerance_abs']:.2f})")
        return w

    # --- JSON ------------------------------------------------------------------------------

    def to_dict(self, top=20):
        """The JSON document of docs/analysis.md (stable keys; numbers rounded to 3 decimals,
        NaN as null)."""
        from . import recording, window
        from .journals import session_span_s

        s = self.session
        m = s.meta
        st = self.stalls
        lab = m.get("lab")
        journals = []
        for _, j in self.journals.iterrows():  # one row per journal
            d = {k: j[k] for k in (
                "dev", "device", "mountpoint", "journal_blocks", "block_size", "log_blocks", "journal_mib",
                "max_transaction_blocks", "inode_size", "fast_commit", "journal_device", "transactions",
                "avg_blocks_per_transaction", "avg_logged_blocks_per_transaction", "avg_handles_per_transaction",
                "forced_checkpoints", "background_checkpoints", "forced_checkpoint_written_blocks",
                "background_checkpoint_written_blocks", "logged_blocks", "log_rate_blocks_per_s",
                "peak_log_rate_blocks_per_s", "max_fill_pct", "min_free_blocks", "forced_fill_pct",
                "time_at_forced_level_s", "stalls", "stall_ms")}
            for k in ("journal_blocks", "max_transaction_blocks", "log_blocks", "min_free_blocks"):
                if d[k] == d[k] and d[k] is not None:
                    d[k] = int(d[k])
            d["avg_phase_ms"] = {p: j[f"avg_{p}_ms"] for p in
                                 ("wait", "request_delay", "running", "locked", "flushing", "logging")}
            p = self.proc[self.proc["dev"] == j["dev"]]
            d["proc_agreement"] = None if not len(p) else {
                "agree": bool(p["agree"].all()),
                "hz": self.session.hz, "jiffy_ms": 1000.0 / self.session.hz,
                "metrics": [{k: r[k] for k in ("metric", "analyzer", "kernel", "kernel_low", "kernel_high",
                                               "rel_diff", "tolerance_abs", "unit", "status", "agree")}
                            for _, r in p.iterrows()],
            }
            journals.append(d)
        top_rows = st.sort_values("latency_ms", ascending=False, kind="stable").head(top)
        t0 = s.start_ns or 0
        top_list = [{
            "t_s": (r["ts_ns"] - t0) / 1e9, "ts_ns": int(r["ts_ns"]), "wall": window.wall_iso(m, r["ts_ns"]),
            "latency_ms": r["latency_ms"],
            "syscall": r["syscall"], "comm": r["comm"], "pid": int(r["pid"]), "tid": int(r["tid"]), "dev": r["dev"],
            "cause": str(r["cause"]), "cause_label": r["cause_label"],
            "by_cause_ms": {c: r[f"{c}_ms"] for c in CAUSES if r[f"{c}_ms"] > 0},
            "oncpu_ms": r["oncpu_ms"], "fill_start_pct": r["fill_start_pct"], "fill_max_pct": r["fill_max_pct"],
            "min_free_blocks": r["min_free_blocks"], "forced_fill_pct": r["forced_fill_pct"],
            "at_forced_level": bool(r["at_forced_level"]), "own_checkpoint": bool(r["own_checkpoint"]),
            "headroom_start_blocks": r["headroom_start_blocks"], "headroom_start_pct": r["headroom_start_pct"],
            "min_headroom_blocks": r["min_headroom_blocks"], "min_headroom_pct": r["min_headroom_pct"],
            "forced": bool(r["forced"]), "max_transaction_blocks": r["max_transaction_blocks"],
            "running_transaction": r["running_transaction"], "committing_transaction": r["committing_transaction"],
        } for _, r in top_rows.iterrows()]
        at = st[st["at_forced_level"]]
        doc = {
            "schema_version": JSON_SCHEMA_VERSION,
            "kind": "session",
            "session": {
                "path": s.path, "schema_version": m.get("schema_version"), "status": m.get("status"),
                "tool_version": m.get("tool_version"), "kernel_release": m.get("kernel_release"),
                "host": m.get("host"), "hz": s.hz, "start": (m.get("start") or {}).get("wall"),
                "duration_s": session_span_s(s),
                "command": m.get("command"), "lab": None if not lab else {
                    "config": lab.get("config"), "phases": lab.get("phases")},
            },
            "traced_calls": traced_calls(m),
            "min_ms": self.min_ms,
            "events_lost": {k: int(v or 0) for k, v in (m.get("events_lost") or {}).items()},
            "stacks_lost": int(m.get("stacks_lost") or 0),
            "warnings": list(self.warnings),
            "journals": journals,
            "stalls": {
                "count": len(st),
                "total_ms": float(st["latency_ms"].sum()),
                "max_ms": float(st["latency_ms"].max()) if len(st) else 0.0,
                "offcpu_ms": float(st["offcpu_ms"].sum()),
                "oncpu_ms": float(st["oncpu_ms"].sum()),
                "own_checkpoint": int(st["own_checkpoint"].sum()),
                "at_forced_level": {"count": len(at), "total_ms": float(at["latency_ms"].sum())},
                "forced": {"count": int(st["forced"].sum()),
                           "total_ms": float(st.loc[st["forced"].astype(bool), "latency_ms"].sum())},
                "by_cause": {c: {"count": int(self.causes.loc[c, "count"]),
                                 "total_ms": float(self.causes.loc[c, "total_ms"])} for c in CAUSES},
                "top": top_list,
            },
            "calls": {r["syscall"]: {"count": int(r["count"]), "errors": int(r["errors"]),
                                     "total_ms": r["total_ms"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"],
                                     "max_ms": r["max_ms"]} for _, r in self.calls.iterrows()},
            "recommendations": [r.to_dict() for r in self.recommendations],
        }
        doc["session"].update(recording.header(self))
        doc.update(self._console_fields())
        return _clean(doc)

    def _console_fields(self):
        """What was recorded (command, exit status, filters, traced calls, status, wall-clock
        start and end), the time window, notes, losses and the per-process table."""
        from . import recording, window

        return {"window": window.describe(self.session), "notes": list(self.notes),
                "losses": recording.losses(self.session),
                "recorded_min_ms": recording.recorded_min_ms(self.session.meta),
                "requested_min_ms": self.requested_min_ms,
                "per_process": self.processes.to_dict("records")}


def traced_calls(meta):
    """Which calls the recording traced: ``{"groups": [...], "calls": [...]}`` (groups of
    probes.syscalls.GROUPS fully traced; ``calls`` every traced call), or None when the
    metadata does not say."""
    from jstall.probes.syscalls import GROUPS

    calls = (meta.get("probes") or {}).get("syscalls")
    if not calls:
        return None
    have = set(calls)
    return {"groups": [g for g, cs in GROUPS.items() if set(cs) <= have], "calls": sorted(have)}


def analyze(session, min_ms=DEFAULT_MIN_MS):
    """Analyze a session (a path or a loaded Session) and return an :class:`Analysis`."""
    from .load import Session, load_session

    if not isinstance(session, Session):
        session = load_session(session)
    return Analysis(session, min_ms)
