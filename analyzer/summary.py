"""The view model of one session's analysis: small typed objects the text summary, the HTML
report, compare and sweep read, and that ``Analysis.to_dict()`` serializes.

:func:`summarize` builds a :class:`Summary` from the analysis' DataFrames (stall totals per
cause, one :class:`JournalSummary` per journal, one :class:`CallSummary` per traced call, what
was recorded); :func:`top_stalls` the slowest stalls as :class:`TopStall`.  Their figures are
the JSON document's (docs/analysis.md): numbers rounded to 3 decimals, NaN as None, so a
reader of the summary and a reader of ``jstall analyze --json`` never disagree.  Every
``to_dict()`` here gives the document's keys in the document's order; :func:`document` puts
the whole document together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jstall.probes.syscalls import GROUPS
from jstall.enough import verdict
from jstall.flavour import flavour
from jstall.schema import PHASES

from jstall.analyzer.stalls import causes, writers
from jstall.analyzer.session import recording, window
from jstall.analyzer.session.recording import session_span_s

if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from jstall.analyzer.advice.recommend import Recommendation
    from jstall.analyzer.analysis import Analysis
    from jstall.analyzer.session.load import Session

#: Version of the JSON document ``jstall analyze --json`` prints (not the session's).
JSON_SCHEMA_VERSION = 1

#: The journal figures of the document, in its order (journals.summary's columns).
JOURNAL_FIELDS = (
    "dev", "device", "mountpoint", "journal_blocks", "block_size", "log_blocks", "journal_mib",
    "max_transaction_blocks", "inode_size", "fast_commit", "journal_device", "transactions",
    "avg_blocks_per_transaction", "avg_logged_blocks_per_transaction", "avg_handles_per_transaction",
    "forced_checkpoints", "background_checkpoints", "forced_checkpoint_written_blocks",
    "background_checkpoint_written_blocks", "logged_blocks", "log_rate_blocks_per_s",
    "peak_log_rate_blocks_per_s", "max_fill_pct", "min_free_blocks", "headroom_low_blocks",
    "headroom_low_pct", "forced_fill_pct",
    "time_at_forced_level_s", "stalls", "stall_ms")
#: Journal figures that are whole blocks.
_BLOCK_FIELDS = ("journal_blocks", "max_transaction_blocks", "log_blocks", "min_free_blocks")
#: Commit phases averaged per journal (``avg_<phase>_ms`` columns).
PHASE_FIELDS = PHASES
#: Columns of an agreement row with /proc/fs/jbd2 (journals.proc_agreement).
PROC_FIELDS = ("metric", "analyzer", "kernel", "kernel_low", "kernel_high", "rel_diff", "tolerance_abs", "unit",
               "status", "agree")


def _num(v, nd=3):
    """JSON-safe number: NaN/None/pd.NA -> None, numpy scalars -> Python, floats rounded."""
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


def json_safe(obj: Any) -> Any:
    """``obj`` (dicts, lists, tuples, numbers) with every number made JSON-safe by :func:`_num`."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return _num(obj)


class _Doc:
    """``to_dict()``: the fields in order, nested summaries serialized."""

    def to_dict(self) -> dict:
        return {f.name: _serial(getattr(self, f.name)) for f in fields(self)}


def _serial(v):
    if isinstance(v, _Doc):
        return v.to_dict()
    if isinstance(v, dict):
        return {k: _serial(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_serial(x) for x in v]
    return v


@dataclass(frozen=True)
class Tally(_Doc):
    """A count of stalls and their time (ms)."""

    count: int
    total_ms: float


@dataclass(frozen=True)
class StallSummary(_Doc):
    """Stall totals: ``count``; ``total_ms``/``max_ms`` of latency; ``offcpu_ms``/``oncpu_ms``
    inside stalls; ``own_checkpoint`` (stalls that checkpointed in their own task);
    ``at_forced_level`` and ``forced`` (Tally); ``by_cause`` {cause: Tally of the stalls with
    that primary cause and the off-CPU ms spent in it}, every registered cause in order;
    ``queued`` (Tally: stalls with off-CPU time queued behind another task, and that time,
    also counted in ``by_cause``); ``queued_behind`` {"comm tid": ms}, the three tasks most
    of it queued behind; ``through_worker`` (Tally: stalls with off-CPU time waiting for a
    kernel worker that took the worker's cause, and that time, also in ``by_cause``);
    ``workers`` {"comm tid": ms}, the three workers most of it waited for;
    ``during_checkpoint`` (Tally: stalls with waits on the device's queue while another task's
    checkpoint wrote home on the same device, and that time, whatever its cause);
    ``checkpointers`` {"comm tid": ms}, the three checkpointing tasks most of it ran beside."""

    count: int
    total_ms: float
    max_ms: float
    offcpu_ms: float
    oncpu_ms: float
    own_checkpoint: int
    at_forced_level: Tally
    forced: Tally
    by_cause: dict
    queued: Tally
    queued_behind: dict
    through_worker: Tally
    workers: dict
    during_checkpoint: Tally
    checkpointers: dict

    def dominant(self) -> str | None:
        """The cause with the most stall time off CPU, or None without stalls."""
        if not self.count:
            return None
        return max(self.by_cause, key=lambda c: self.by_cause[c].total_ms)


@dataclass(frozen=True)
class JournalSummary(_Doc):
    """One journal's figures (journals.summary; units in the names): geometry, transactions,
    checkpoints, log rate, fill, headroom low (blocks and % of the log; below 0 a handle had to
    wait for log space, fill.headroom), stalls; ``avg_phase_ms`` {phase: ms} (commit phases);
    ``proc_agreement`` the agreement with /proc/fs/jbd2 (a dict as in the document) or None;
    ``enough``: whether the journal was big enough for the run (jstall.enough: wait_ms,
    longest_ms, run_ms, share, big_enough, bound)."""

    dev: str
    device: str
    mountpoint: str
    journal_blocks: int
    block_size: int
    log_blocks: int
    journal_mib: float
    max_transaction_blocks: int
    inode_size: int
    fast_commit: bool
    journal_device: str
    transactions: int
    avg_blocks_per_transaction: float
    avg_logged_blocks_per_transaction: float
    avg_handles_per_transaction: float
    forced_checkpoints: int
    background_checkpoints: int
    forced_checkpoint_written_blocks: int
    background_checkpoint_written_blocks: int
    logged_blocks: int
    log_rate_blocks_per_s: float
    peak_log_rate_blocks_per_s: float
    max_fill_pct: float
    min_free_blocks: int
    headroom_low_blocks: float
    headroom_low_pct: float
    forced_fill_pct: float
    time_at_forced_level_s: float
    stalls: int
    stall_ms: float
    avg_phase_ms: dict
    proc_agreement: dict
    enough: dict = None


@dataclass(frozen=True)
class CallSummary(_Doc):
    """Latency statistics of one traced call (calls.call_stats)."""

    syscall: str
    count: int
    errors: int
    total_ms: float
    p50_ms: float
    p99_ms: float
    max_ms: float

    def to_dict(self) -> dict:
        """The document's entry (keyed by the call's name outside)."""
        d = super().to_dict()
        del d["syscall"]
        return d


@dataclass(frozen=True)
class TopStall(_Doc):
    """One stalled call (a row of stalls.find_stalls; ``syscall`` journal_start: a journal handle
    wait outside the traced calls, ``context`` what its task was doing): when (``t_s`` since the session start,
    ``ts_ns``, ``wall`` ISO 8601), how long, who, its cause and ``by_cause_ms`` (off-CPU ms per
    cause, non-zero only; ``queued_ms`` of it queued behind the task ``queued_behind``,
    ``worker_ms`` waiting for the kernel worker ``worker``; ``during_checkpoint_ms`` of its
    device-queue waits beside the checkpoint of ``checkpoint_by``), the journal's fill and
    headroom around it."""

    t_s: float
    ts_ns: int
    wall: str
    latency_ms: float
    syscall: str
    context: str
    comm: str
    pid: int
    tid: int
    dev: str
    cause: str
    cause_label: str
    by_cause_ms: dict
    queued_ms: float
    queued_behind: str
    worker_ms: float
    worker: str
    during_checkpoint_ms: float
    checkpoint_by: str
    oncpu_ms: float
    fill_start_pct: float
    fill_max_pct: float
    min_free_blocks: float
    forced_fill_pct: float
    at_forced_level: bool
    own_checkpoint: bool
    headroom_start_blocks: float
    headroom_start_pct: float
    min_headroom_blocks: float
    min_headroom_pct: float
    forced: bool
    max_transaction_blocks: float
    running_transaction: float
    committing_transaction: float


@dataclass(frozen=True)
class SessionHeader(_Doc):
    """What was recorded: the session (path, format version, status, tool, kernel, host, HZ,
    ``kernel_flavour``: generic, cloud or rt, from metadata or else the release's suffix;
    ``attach``: how the probes attached the traced calls, fentry or syscalls),
    when (``start``/``end`` ISO 8601, ``duration_s``), the traced ``command`` and its exit
    status, ``filters``, ``traced_calls`` (names), how whole it is (``complete``,
    ``through``, ``through_s``) and, from the lab, ``lab`` {"config", "phases"} or None."""

    path: str
    schema_version: int
    status: str
    tool_version: str
    kernel_release: str
    host: str
    hz: int
    start: str
    duration_s: float
    command: list
    lab: dict
    exit_status: int
    exit_status_text: str
    filters: dict
    traced_calls: list
    complete: bool
    through: str
    through_s: float
    end: str
    kernel_flavour: str = None
    attach: str = None


@dataclass(frozen=True)
class Summary:
    """One session's analysis in figures (see the module's docstring): ``session``
    (SessionHeader), ``stalls`` (StallSummary), ``journals`` (JournalSummary, one per
    journal), ``calls`` (CallSummary, one per traced call), the thresholds (``min_ms``, the
    stall threshold used; ``requested_min_ms``; ``recorded_min_ms``, the recorder's),
    ``traced_groups`` ({"groups", "calls"} or None), ``events_lost``/``stacks_lost``,
    ``losses`` (recording.losses), ``warnings``/``notes`` (lines), ``window`` (window.describe,
    None for the whole session), ``per_process`` (processes.per_process as records) and
    ``untraced_checkpoints`` (journals.untraced_checkpoints as records: forced checkpoints that
    ran outside the traced calls), ``devices`` (devices.device_summary as records) and
    ``checkpoint_costs`` (checkpoint_cost_summary: forced checkpoints that cost a stall and
    those that were negligible), ``xfs_logs`` (xfs_logs.summary as records: each XFS log's
    waits for log space, the tail's reasons and the kernel's counters), ``writers``
    (writers.summary: who filled each journal, the victims, a sentence tying them)."""

    session: SessionHeader
    min_ms: float
    requested_min_ms: float
    recorded_min_ms: float
    traced_groups: dict
    events_lost: dict
    stacks_lost: int
    warnings: tuple
    notes: tuple
    window: dict
    losses: tuple
    stalls: StallSummary
    journals: tuple
    calls: tuple
    per_process: tuple
    untraced_checkpoints: tuple
    devices: tuple
    checkpoint_costs: dict
    xfs_logs: tuple = ()
    writers: dict = None


def checkpoint_cost_summary(costs: pd.DataFrame) -> dict:
    """{forced, expensive, negligible, outside, expensive_wait_ms, expensive_written_blocks,
    negligible_written_blocks_mean} of journals.checkpoint_costs: the forced checkpoints that
    cost a stall (each stall's wait counted once however many checkpoints it ran), those in
    the recording's scope that cost less, and those in tasks outside it (wait unknown)."""
    exp = costs[costs["expensive"].astype(bool)]
    inside = costs["traced_task"].astype(bool)
    cheap = costs[~costs["expensive"].astype(bool) & inside]
    return json_safe({
        "forced": len(costs), "expensive": len(exp), "negligible": len(cheap), "outside": int((~inside).sum()),
        "expensive_wait_ms": float(exp.drop_duplicates(["tid", "call_ts_ns"])["wait_ms"].sum()),
        "expensive_written_blocks": int(exp["written_blocks"].sum()),
        "negligible_written_blocks_mean": float(cheap["written_blocks"].mean()) if len(cheap) else None,
    })


def traced_groups(meta: dict) -> dict[str, list[str]] | None:
    """Which calls the recording traced: ``{"groups": [...], "calls": [...]}`` (groups of
    probes.syscalls.GROUPS fully traced; ``calls`` every traced call), or None when the
    metadata does not say."""
    calls = (meta.get("probes") or {}).get("syscalls")
    if not calls:
        return None
    have = set(calls)
    return {"groups": [g for g, cs in GROUPS.items() if set(cs) <= have], "calls": sorted(have)}


def _tally(count, total_ms):
    return Tally(int(count), _num(float(total_ms)))


def stall_summary(stalls: pd.DataFrame, by_cause: pd.DataFrame) -> StallSummary:
    """StallSummary of a stall table (stalls.find_stalls) and its per-cause totals
    (stalls.by_cause)."""
    st = stalls
    at = st[st["at_forced_level"]]
    return StallSummary(
        count=len(st), total_ms=_num(float(st["latency_ms"].sum())),
        max_ms=_num(float(st["latency_ms"].max()) if len(st) else 0.0),
        offcpu_ms=_num(float(st["offcpu_ms"].sum())), oncpu_ms=_num(float(st["oncpu_ms"].sum())),
        own_checkpoint=int(st["own_checkpoint"].sum()),
        at_forced_level=_tally(len(at), at["latency_ms"].sum()),
        forced=_tally(st["forced"].sum(), st.loc[st["forced"].astype(bool), "latency_ms"].sum()),
        by_cause={c: _tally(by_cause.loc[c, "count"], by_cause.loc[c, "total_ms"]) for c in causes.CAUSES},
        queued=_tally((st["queued_ms"] > 0).sum(), st["queued_ms"].sum()),
        queued_behind=queued_behind(st),
        through_worker=_tally((st["worker_ms"] > 0).sum(), st["worker_ms"].sum()),
        workers=queued_behind(st, column="worker"),
        during_checkpoint=_tally((st["during_checkpoint_ms"] > 0).sum(),
                                 st["during_checkpoint_ms"].sum()),
        checkpointers=queued_behind(st, column="checkpoint_by"))


def queued_behind(stalls: pd.DataFrame, top: int = 3, column: str = "queued_behind") -> dict[str, float]:
    """{"comm tid": ms}: the ``top`` tasks the stalls' queued time waited behind, most first
    (``column`` "worker": the kernel workers their time through a worker waited for;
    "checkpoint_by": the tasks whose checkpoints their device-queue waits ran beside)."""
    ms_col = {"queued_behind": "queued_ms", "worker": "worker_ms",
              "checkpoint_by": "during_checkpoint_ms"}[column]
    q = stalls[stalls[ms_col] > 0]
    if not len(q):
        return {}
    ms = q.groupby(q[column].astype("str"))[ms_col].sum()
    ms = ms.sort_values(ascending=False, kind="stable")
    return {k: _num(float(v)) for k, v in ms.head(top).items()}


def proc_summary(proc: pd.DataFrame, hz: float) -> dict | None:
    """The agreement of one journal's figures with /proc/fs/jbd2 (rows of
    journals.proc_agreement for that journal) as the document gives it, or None."""
    if not len(proc):
        return None
    return json_safe({"agree": bool(proc["agree"].all()), "hz": hz, "jiffy_ms": 1000.0 / hz,
                   "metrics": [{k: r[k] for k in PROC_FIELDS} for r in proc.to_dict("records")]})


def journal_summaries(journals: pd.DataFrame, proc: pd.DataFrame, hz: float, waits: pd.DataFrame | None = None,
                      run_ms: float = 0.0) -> tuple[JournalSummary, ...]:
    """One JournalSummary per row of journals.summary; ``waits``: journals.checkpoint_waits
    (a journal without a row there had no forced-checkpoint wait in ``run_ms``)."""
    out = []
    by_dev = {} if waits is None else {r["dev"]: r for r in waits.to_dict("records")}  # one row per journal
    for j in journals.to_dict("records"):  # one row per journal
        d = {k: _num(j[k]) for k in JOURNAL_FIELDS}
        for k in _BLOCK_FIELDS:
            if d[k] is not None:
                d[k] = int(d[k])
        d["avg_phase_ms"] = {p: _num(j[f"avg_{p}_ms"]) for p in PHASE_FIELDS}
        d["proc_agreement"] = proc_summary(proc[proc["dev"] == j["dev"]], hz)
        w = by_dev.get(str(j["dev"]))
        d["enough"] = json_safe(verdict(w, run_ms).as_dict())
        out.append(JournalSummary(**d))
    return tuple(out)


def call_summaries(calls: pd.DataFrame) -> tuple[CallSummary, ...]:
    """One CallSummary per traced call (calls.call_stats), in the table's order."""
    out = {}
    for r in calls.to_dict("records"):  # one row per call type
        out[r["syscall"]] = CallSummary(r["syscall"], int(r["count"]), int(r["errors"]),
                                        *(_num(r[k]) for k in ("total_ms", "p50_ms", "p99_ms", "max_ms")))
    return tuple(out.values())


def session_header(session: Session) -> SessionHeader:
    """SessionHeader of a loaded session."""
    m = session.meta
    lab = m.get("lab")
    h = recording.header(session)
    return SessionHeader(
        path=session.path, schema_version=m.get("schema_version"), status=h["status"],
        tool_version=m.get("tool_version"), kernel_release=m.get("kernel_release"), host=m.get("host"),
        hz=session.hz, start=h["start"], duration_s=_num(session_span_s(session)), command=h["command"],
        lab=None if not lab else json_safe({"config": lab.get("config"), "phases": lab.get("phases")}),
        exit_status=h["exit_status"], exit_status_text=h["exit_status_text"], filters=json_safe(h["filters"]),
        traced_calls=h["traced_calls"], complete=h["complete"], through=h["through"],
        through_s=_num(h["through_s"]), end=h["end"],
        kernel_flavour=m.get("kernel_flavour") or flavour(m.get("kernel_release")),
        attach=(m.get("probes") or {}).get("attach"))


def summarize(analysis: Analysis) -> Summary:
    """The :class:`Summary` of an :class:`~jstall.analyzer.analysis.Analysis` (computes the
    tables it reads: stalls, journals, calls, processes)."""
    a = analysis
    s = a.session
    m = s.meta
    return Summary(
        session=session_header(s), min_ms=_num(a.min_ms), requested_min_ms=_num(a.requested_min_ms),
        recorded_min_ms=_num(recording.recorded_min_ms(m)), traced_groups=traced_groups(m),
        events_lost={k: int(v or 0) for k, v in (m.get("events_lost") or {}).items()},
        stacks_lost=int(m.get("stacks_lost") or 0), warnings=tuple(a.warnings), notes=tuple(a.notes),
        window=json_safe(window.describe(s)), losses=tuple(json_safe(recording.losses(s))),
        stalls=stall_summary(a.stalls, a.causes),
        journals=journal_summaries(a.journals, a.proc, s.hz, a.checkpoint_waits, session_span_s(s) * 1e3),
        calls=call_summaries(a.calls), per_process=tuple(json_safe(writers.named(s, a.processes).to_dict("records"))),
        untraced_checkpoints=tuple(json_safe(a.untraced_checkpoints.to_dict("records"))),
        devices=tuple(json_safe(a.devices.to_dict("records"))),
        checkpoint_costs=checkpoint_cost_summary(a.checkpoint_costs),
        xfs_logs=tuple(json_safe(a.xfs_logs.to_dict("records"))), writers=json_safe(a.writers))


def top_stalls(analysis: Analysis, n: int) -> tuple[TopStall, ...]:
    """The ``n`` slowest stalls, slowest first (ties in table order), as TopStall."""
    s = analysis.session
    t0 = s.start_ns or 0
    rows = analysis.stalls.sort_values("latency_ms", ascending=False, kind="stable").head(n)
    out = []
    for r in rows.to_dict("records"):  # n rows
        out.append(TopStall(**json_safe({
            "t_s": (r["ts_ns"] - t0) / 1e9, "ts_ns": int(r["ts_ns"]), "wall": window.wall_iso(s.meta, r["ts_ns"]),
            "latency_ms": r["latency_ms"], "syscall": r["syscall"], "context": r.get("context"),
            "comm": r["comm"], "pid": int(r["pid"]),
            "tid": int(r["tid"]), "dev": r["dev"], "cause": str(r["cause"]), "cause_label": r["cause_label"],
            "by_cause_ms": {c: r[f"{c}_ms"] for c in causes.CAUSES if r[f"{c}_ms"] > 0},
            "queued_ms": r["queued_ms"], "queued_behind": r["queued_behind"],
            "worker_ms": r["worker_ms"], "worker": r["worker"],
            "during_checkpoint_ms": r["during_checkpoint_ms"], "checkpoint_by": r["checkpoint_by"],
            **{k: r[k] for k in ("oncpu_ms", "fill_start_pct", "fill_max_pct", "min_free_blocks",
                                 "forced_fill_pct")},
            "at_forced_level": bool(r["at_forced_level"]), "own_checkpoint": bool(r["own_checkpoint"]),
            **{k: r[k] for k in ("headroom_start_blocks", "headroom_start_pct", "min_headroom_blocks",
                                 "min_headroom_pct")},
            "forced": bool(r["forced"]),
            **{k: r[k] for k in ("max_transaction_blocks", "running_transaction", "committing_transaction")},
        })))
    return tuple(out)


def document(summary: Summary, top: Iterable[TopStall], recommendations: Iterable[Recommendation],
             verdict: dict | None = None) -> dict:
    """The ``jstall analyze --json`` document (docs/analysis.md) of a Summary, its slowest
    stalls (TopStall) and its recommendations (recommend.Recommendation)."""
    su = summary
    stalls = su.stalls.to_dict()
    stalls["top"] = [t.to_dict() for t in top]
    return json_safe({
        "schema_version": JSON_SCHEMA_VERSION, "kind": "session", "session": su.session.to_dict(),
        "traced_calls": su.traced_groups, "min_ms": su.min_ms, "events_lost": dict(su.events_lost),
        "stacks_lost": su.stacks_lost, "warnings": list(su.warnings),
        "journals": [j.to_dict() for j in su.journals], "stalls": stalls,
        "calls": {c.syscall: c.to_dict() for c in su.calls},
        "verdict": verdict, "recommendations": [r.to_dict() for r in recommendations],
        "window": su.window, "notes": list(su.notes), "losses": list(su.losses),
        "recorded_min_ms": su.recorded_min_ms, "requested_min_ms": su.requested_min_ms,
        "per_process": list(su.per_process), "untraced_checkpoints": list(su.untraced_checkpoints),
        "devices": list(su.devices), "checkpoint_costs": su.checkpoint_costs, "xfs_logs": list(su.xfs_logs),
        "writers": su.writers,
    })
