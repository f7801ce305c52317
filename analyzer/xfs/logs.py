"""XFS logs: each log-space wait with the space the kernel saw, what the log's tail was
waiting for meanwhile, and one row per log with the kernel's own counters beside it.

A wait (the ``xfs_waits`` table) is a transaction reservation that slept in
``xlog_grant_head_wait()`` until xfsaild had moved the log's tail. Its space left and need
follow the kernel's rules in :mod:`jstall.xfs` (since 6.11 the grant heads are bytes; before,
(cycle, bytes) positions against the tail LSN). The tail's reason comes from what the AIL
did on the filesystem during the wait (the probes count ``xfs_ail_push``, ``_pinned``,
``_locked`` and ``_flushing``): items pinned in memory wait for a log force; items pushed or
already being flushed wait for their metadata writeback; locked items for their lock holder.
A wait the AIL reported nothing in, while the log's own writes completed
(``xlog_iclog_sync_done``), waited for those writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jstall import kinds, xfs
from jstall.enough import verdict

from jstall.analyzer.session.recording import session_span_s

if TYPE_CHECKING:
    from jstall.analyzer.session.load import Session

#: what the log's tail was waiting for (one definition: jstall.xfs)
TAIL_REASONS = xfs.TAIL_REASONS


def xfs_journals(session: Session) -> dict[str, dict]:
    """{dev: journal description} of the session's XFS logs."""
    return {j["dev"]: j for j in session.journals if kinds.is_xfs(j)}


def xfs_only(session: Session) -> bool:
    """Every journal the session traced is an XFS log (so it has no jbd2 events to expect)."""
    return bool(session.journals) and all(kinds.is_xfs(j) for j in session.journals)


def waits(session: Session) -> pd.DataFrame:
    """The ``xfs_waits`` table with ``wait_ms``, what the ticket needed on its head
    (``need_bytes``), the head's space left and headroom (space left less need) when it
    asked (what ``xlog_grant_head_check()`` compared) and when it got its space
    (``space_left_{start,end}_bytes``, ``headroom_{start,end}_bytes`` and ``_pct`` of the log),
    the log's size (``log_bytes``), and ``tail`` (a key of :data:`TAIL_REASONS`). A ticket that
    asked with headroom to spare slept behind tickets already waiting (``queued``)."""
    w = session.xfs_waits.copy()
    logs = xfs_journals(session)
    w["dev"] = w["dev"].astype("str")
    w["wait_ms"] = w["wait_ns"].astype("float64") / 1e6
    log_bytes = w["dev"].map(lambda d: (logs.get(d) or {}).get("log_bytes")).astype("float64")
    w["log_bytes"] = log_bytes
    write = (w["head"] == xfs.WRITE_HEAD).to_numpy()
    unit = w["unit_res_bytes"].to_numpy(dtype="float64")
    cnt = w["cnt"].to_numpy(dtype="float64")
    perm = w["permanent"].to_numpy(dtype=bool)
    w["need_bytes"] = np.where(write, unit, unit * np.where(perm, cnt, 1.0))
    lb = log_bytes.to_numpy(dtype="float64")
    for end in ("start", "end"):
        grant = np.where(write, w[f"{end}_write_bytes"].to_numpy(dtype="float64"),
                         w[f"{end}_reserve_bytes"].to_numpy(dtype="float64"))
        left = xfs.space_left_traced(lb, grant)
        cyc = w[f"{end}_tail_space_bytes"].isna().to_numpy()
        if cyc.any():   # before 6.11: (cycle, bytes) heads against the tail LSN
            head_cycle = np.where(write, w[f"{end}_write_cycle"].astype("float64"),
                                  w[f"{end}_reserve_cycle"].astype("float64"))
            old = xfs.space_left_cycles(lb, head_cycle, grant, w[f"{end}_tail_cycle"].to_numpy(dtype="float64"),
                                        w[f"{end}_tail_block"].to_numpy(dtype="float64"))
            left = np.where(cyc, old, left)
        w[f"space_left_{end}_bytes"] = left
        room, pct = xfs.headroom(left, w["need_bytes"].to_numpy(dtype="float64"), lb)
        w[f"headroom_{end}_bytes"], w[f"headroom_{end}_pct"] = room, pct
    w["tail"] = tail_reasons(w)
    return w


def tail_reasons(w: pd.DataFrame) -> np.ndarray:
    """What the tail waited for in each wait (:func:`jstall.xfs.tail_reason`)."""
    # (a session from before the log's writes were counted loads them null: 0)
    log_writes = w["log_writes"].fillna(0).to_numpy(dtype="int64")
    return np.asarray(xfs.tail_reason((w["ail_pushes"] + w["ail_flushing"]).to_numpy(dtype="int64"),
                                      w["ail_pinned"].to_numpy(dtype="int64"), w["ail_locked"].to_numpy(dtype="int64"),
                                      log_writes), dtype=object)


#: summary columns of a log with no waits
_EMPTY = {"waits": 0, "sleeps": 0, "wait_ms": 0.0, "longest_wait_ms": 0.0, "waits_in_traced_calls": 0,
          "wait_ms_in_traced_calls": 0.0, "min_headroom_start_pct": np.nan, "need_bytes_max": np.nan,
          "waits_queued": None}


def summary(session: Session, waits_: pd.DataFrame, stalls: pd.DataFrame | None = None,
            log_waits: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per XFS log: its size and device, the waits (count, sleeps, time, the longest,
    those inside traced calls), the lowest headroom a wait started from, the waits that asked
    behind tickets already waiting (``waits_queued``; None in a session from before it was
    recorded), the wait time by
    what the tail waited for (``tail_<reason>_ms``), and the kernel's own counters over the
    session (``kernel_sleep_logspace``, ``kernel_try_logspace``, ``kernel_push_ail``,
    ``kernel_log_forces``: /sys/fs/xfs/<name>/stats/stats at the end less the start; None when
    the session has not both) with ``sleeps_agree``: every sleep the kernel counted is a
    recorded one (equal when the session traced every task, at most the kernel's with a task
    filter); ``enough``: whether the log was big enough for the run (jstall.enough, from
    ``log_waits``, journals.checkpoint_waits' rows)."""
    logs = xfs_journals(session)
    judged = {} if log_waits is None else {r["dev"]: r for r in log_waits.to_dict("records")}
    run_ms = session_span_s(session) * 1e3
    task_filter = any((session.meta.get("filters") or {}).get(k) for k in ("pid", "cgroup", "command"))
    rows = []
    for dev, j in logs.items():
        w = waits_[waits_["dev"] == dev]
        row = {"dev": dev, "device": j.get("device"), "mountpoint": j.get("mountpoint"),
               "log_bytes": j.get("log_bytes"), "log_mib": (j.get("log_bytes") or 0) / 2**20,
               "log_device": j.get("journal_device"), "inode_size": j.get("inode_size"), **_EMPTY}
        if len(w):
            inside = w["in_traced_call"].astype(bool)
            row.update(waits=len(w), sleeps=int(w["sleeps"].sum()), wait_ms=float(w["wait_ms"].sum()),
                       longest_wait_ms=float(w["wait_ms"].max()), waits_in_traced_calls=int(inside.sum()),
                       wait_ms_in_traced_calls=float(w.loc[inside, "wait_ms"].sum()),
                       min_headroom_start_pct=float(w["headroom_start_pct"].min()),
                       need_bytes_max=float(w["need_bytes"].max()),
                       waits_queued=None if w["queued"].isna().all() else int(w["queued"].fillna(False).sum()))
        for reason in TAIL_REASONS:
            row[f"tail_{reason}_ms"] = float(w.loc[w["tail"] == reason, "wait_ms"].sum()) if len(w) else 0.0
        delta = kernel_delta(j)
        for key, member in (("kernel_sleep_logspace", "xs_sleep_logspace"), ("kernel_try_logspace", "xs_try_logspace"),
                            ("kernel_push_ail", "xs_push_ail"), ("kernel_log_forces", "xs_log_force")):
            row[key] = xfs.counter(delta, member) if delta else None
        k = row["kernel_sleep_logspace"]
        row["sleeps_agree"] = (None if k is None else
                               bool(row["sleeps"] <= k) if task_filter else bool(row["sleeps"] == k))
        if stalls is not None and len(stalls):
            sm = stalls["dev"].astype("str") == dev
            row["stalls"] = int(sm.sum())
            row["stall_ms"] = float(stalls.loc[sm, "latency_ms"].sum())
        jw = judged.get(dev)
        row["enough"] = verdict(jw, run_ms, kinds.XFS.name).as_dict()
        rows.append(row)
    return pd.DataFrame(rows)


def kernel_delta(journal: dict) -> dict[str, dict] | None:
    """The kernel's counters of an XFS log over the session (its description's
    ``xfs_stats_start`` and ``_end``: /sys/fs/xfs/<name>/stats/stats), or None without both."""
    start, end = journal.get("xfs_stats_start"), journal.get("xfs_stats_end")
    return xfs.stats_delta(_stats(start), _stats(end)) if start and end else None


def _stats(doc):
    """A stats dict as stored in metadata.json (JSON made the positional keys strings)."""
    return {line: {(int(k) if isinstance(k, str) and k.isdigit() else k): v for k, v in values.items()}
            for line, values in (doc or {}).items() if isinstance(values, dict)}


def untraced_waits(waits_: pd.DataFrame) -> pd.DataFrame:
    """Log-space waits outside every traced call, by task and what it was doing: (comm,
    context) -> waits and their time."""
    out = waits_[~waits_["in_traced_call"].astype(bool)]
    if not len(out):
        return pd.DataFrame(columns=["comm", "context", "waits", "wait_ms"])
    g = out.assign(context=out["context"].fillna("unknown")).groupby(["comm", "context"], sort=False)
    return g["wait_ms"].agg(waits="count", wait_ms="sum").reset_index().sort_values("wait_ms", ascending=False)
