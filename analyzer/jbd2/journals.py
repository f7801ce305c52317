"""Per-journal figures: transactions and their commit phases, checkpoints, fill, log rate,
and the comparison with the kernel's own /proc/fs/jbd2/<dev>/info.

Times from jbd2_run_stats / jbd2_checkpoint_stats are jiffies at ``session.hz``; they are
converted here as ``jiffies * 1000 / hz`` milliseconds.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jstall import enough, kinds
from jstall.jbd2 import RESERVED_BLOCKS, forced_fill_pct
from jstall.schema import PHASES

from jstall.analyzer.jbd2.fill import journal_limits
from jstall.analyzer.session.devices import device_rows
from jstall.analyzer.session.recording import session_span_s

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from jstall.analyzer.session.load import Session

COMMIT_EVENTS = ("start_commit", "commit_locking", "commit_flushing", "commit_logging", "end_commit")


def _commit_event_times(session, keys_dev, keys_txn):
    """First time of each commit event per (dev, transaction) of the keys: a dict event ->
    array aligned with the keys, int64 when every key has it and no transaction with commit
    events lacks any recorded event, else float64 with NaN where it was not recorded; None when the
    session has no commit event with a transaction id."""
    ev = session.jbd2_events
    names = ev["event"].to_numpy(dtype=object)
    code = pd.Index(COMMIT_EVENTS).get_indexer(names)
    sel = (code >= 0) & ev["transaction"].notna().to_numpy()
    if not sel.any():
        return None
    groups = pd.MultiIndex.from_arrays([ev["dev"].astype("str").to_numpy(dtype=object)[sel],
                                        ev["transaction"].to_numpy(dtype="int64", na_value=0)[sel]])
    g, uniq = groups.factorize()
    big = np.iinfo("int64").max
    first = np.full((len(uniq), len(COMMIT_EVENTS)), big, dtype="int64")
    np.minimum.at(first, (g, code[sel]), ev["ts_ns"].to_numpy(dtype="int64")[sel])
    seen = first != big
    # each key's group (keys may repeat; groups are unique)
    row = uniq.get_indexer(pd.MultiIndex.from_arrays([keys_dev, keys_txn])) if len(keys_dev) \
        else np.zeros(0, dtype="int64")
    # integers when no transaction lacks any recorded event (a pivot with no hole)
    whole = bool(seen[:, seen.any(axis=0)].all())
    out = {}
    for j, e in enumerate(COMMIT_EVENTS):
        ok = row >= 0
        ok[ok] = seen[row[ok], j]
        if whole and seen[:, j].any() and ok.all():
            out[e] = first[np.maximum(row, 0), j]
        else:
            v = np.full(len(row), np.nan)
            v[ok] = first[row[ok], j]
            out[e] = v
    return out


def transactions(session: Session) -> pd.DataFrame:
    """One row per committed transaction (jbd2_run_stats), with its commit-phase event times.

    Columns: ``dev``, ``transaction``, ``ts_ns`` (run_stats fired), ``<phase>_ms`` for each of
    PHASES (from jiffies at hz), ``handle_count``, ``blocks``, ``blocks_logged``, and
    ``<event>_ns`` for each of COMMIT_EVENTS (NaN when that event was not recorded)."""
    rs = session.run_stats
    cols = {"dev": rs["dev"].astype("str"), "transaction": rs["transaction"], "ts_ns": rs["ts_ns"], "tid": rs["tid"],
            "comm": rs["comm"]}
    for p in PHASES:
        cols[f"{p}_ms"] = rs[f"{p}_jiffies"].to_numpy(dtype="float64") * 1000.0 / session.hz
    for c in ("handle_count", "blocks", "blocks_logged"):
        cols[c] = rs[c].to_numpy(dtype="int64")
    out = pd.DataFrame(cols).reset_index(drop=True)
    times = _commit_event_times(session, out["dev"].to_numpy(dtype=object),
                                out["transaction"].to_numpy(dtype="int64"))
    if times is None:
        for c in COMMIT_EVENTS:
            out[f"{c}_ns"] = float("nan")
    else:
        out["transaction"] = out["transaction"].astype("int64")
        out = pd.concat([out, pd.DataFrame({f"{c}_ns": times[c] for c in COMMIT_EVENTS})], axis=1)
    return out.sort_values(["dev", "ts_ns"], kind="stable").reset_index(drop=True)


def commit_phases(session: Session) -> pd.DataFrame:
    """Commit phases as time bands for plotting: one row per (dev, transaction, phase) with
    ``start_ns``/``end_ns`` taken from consecutive commit events (locking -> flushing ->
    logging -> end_commit).  Phases whose bounding events are missing are left out."""
    ev = session.jbd2_events
    ev = ev[ev["event"].isin(COMMIT_EVENTS) & ev["transaction"].notna()]
    if not len(ev):
        return pd.DataFrame({"dev": pd.Series([], dtype="str"), "transaction": pd.Series([], dtype="int64"),
                             "phase": pd.Series([], dtype="str"), "start_ns": pd.Series([], dtype="int64"),
                             "end_ns": pd.Series([], dtype="int64")})
    wide = ev.pivot_table(index=["dev", "transaction"], columns="event", values="ts_ns", aggfunc="min")
    wide = wide.reindex(columns=list(COMMIT_EVENTS))
    parts = []
    for a, b, name in (("commit_locking", "commit_flushing", "locked"),
                       ("commit_flushing", "commit_logging", "flushing"),
                       ("commit_logging", "end_commit", "logging")):
        p = wide[[a, b]].dropna().rename(columns={a: "start_ns", b: "end_ns"}).reset_index()
        p["phase"] = name
        parts.append(p)
    out = pd.concat(parts, ignore_index=True)
    out = out.astype({"dev": "str", "transaction": "int64", "start_ns": "int64", "end_ns": "int64"})
    return out[["dev", "transaction", "phase", "start_ns", "end_ns"]].sort_values(["dev", "start_ns"]).reset_index(
        drop=True)


def jbd2_thread_tids(session: Session) -> set[int]:
    """Thread ids seen running as a journal's own jbd2 thread (jbd2_thread, or comm jbd2/...)."""
    ev = session.jbd2_events
    tids = set(ev.loc[ev["jbd2_thread"], "tid"].astype("int64").tolist())
    tids |= set(ev.loc[ev["comm"].astype("str").str.startswith("jbd2/"), "tid"].astype("int64").tolist())
    return tids


def recorder_pids(session: Session) -> set[int]:
    """The recorder's own process ids (metadata ``recorder_pid``: jstall's process, its
    threads included, whose own writes, e.g. of the session onto a traced filesystem, are not
    the workload's); empty for sessions recorded before it was kept."""
    pid = session.meta.get("recorder_pid")
    return {int(pid)} if isinstance(pid, int) and not isinstance(pid, bool) else set()


def recorder_checkpoints(session: Session) -> pd.DataFrame:
    """Forced checkpoints that ran in the recorder's own process (recorder_pids): one row per
    (``dev``, ``pid``, ``comm``) with ``checkpoints``. Never the workload's: they are left out
    of checkpoint_costs, checkpoint_waits and untraced_checkpoints, and reported apart."""
    ev, own = session.jbd2_events, recorder_pids(session)
    cols = ["dev", "pid", "comm", "checkpoints"]
    if not own or not len(ev):
        return pd.DataFrame(columns=cols)
    cp = ev[(ev["event"] == "checkpoint") & ~ev["jbd2_thread"].astype(bool) & ev["pid"].isin(own)]
    if not len(cp):
        return pd.DataFrame(columns=cols)
    cp = cp.assign(dev=cp["dev"].astype("str"), comm=cp["comm"].astype("str"))
    return cp.groupby(["dev", "pid", "comm"], sort=True).size().rename("checkpoints").reset_index()[cols]


def recorder_text(own: pd.DataFrame) -> str | None:
    """'2 forced checkpoints ran in jstall's own process (jstall 4121 on 7:1)...' or None."""
    if not len(own):
        return None
    n = int(own["checkpoints"].sum())
    where = ", ".join(f"{r['comm']} {int(r['pid'])} on {r['dev']}" for r in own.to_dict("records"))
    return (f"{n} forced checkpoint{'s' * (n != 1)} ran in jstall's own process ({where}: its own writes, such as "
            "the session's onto a traced filesystem; record to another -o): not the workload's, left out of "
            "the verdicts")


def checkpoints(session: Session, timeline: pd.DataFrame | None = None) -> pd.DataFrame:
    """Checkpoint events: ``ts_ns``, ``dev``, ``tid``, ``pid``, ``comm``, ``forced`` (ran in a
    user task, i.e. not the jbd2 thread: ``__jbd2_log_wait_for_space``), ``result``,
    ``free_blocks`` and ``fill_pct`` at the event (NaN when not read)."""
    ev = session.jbd2_events
    cp = ev[ev["event"] == "checkpoint"]
    out = cp[["ts_ns", "dev", "tid", "pid", "comm", "result", "free_blocks", "first_block", "last_block"]].copy()
    out["dev"] = out["dev"].astype("str")
    out["forced"] = ~cp["jbd2_thread"].astype(bool)
    log_blocks = (out["last_block"] - out["first_block"]).astype("float64")
    out["fill_pct"] = 100.0 * (1.0 - out["free_blocks"].astype("float64") / log_blocks.where(log_blocks > 0))
    return out.drop(columns=["first_block", "last_block"]).reset_index(drop=True)


def _by_tid(t):
    """``t`` ordered by task (its own order kept within each), and ``rows(tid)``: the (start,
    end) of that task's rows in it."""
    tid = t["tid"].to_numpy(dtype="int64")
    order = np.argsort(tid, kind="stable")
    keys = tid[order]

    def rows(k):
        return int(np.searchsorted(keys, k, side="left")), int(np.searchsorted(keys, k, side="right"))

    return t.iloc[order], rows


def checkpoint_costs(session: Session, min_ms: float) -> pd.DataFrame:
    """Each forced checkpoint (jbd2_checkpoint in a task, not a jbd2 thread) with what it
    cost: ``written_blocks`` home by it (the jbd2_checkpoint_stats rows of its task until its
    next checkpoint event or the end of the call it ran in), ``chp_ms`` (their checkpoint
    time, in jiffies' resolution), and ``wait_ms``: the recorded call or journal handle wait
    it ran inside (NaN when none took the recording's threshold: a wait shorter than that).
    ``expensive``: the wait is a stall (``wait_ms`` >= ``min_ms``); ``traced_task``: the task
    was in the recording's scope (else its wait is unknown). Columns: ts_ns, dev, tid, pid,
    comm, written_blocks, chp_ms, wait_ms, call_ts_ns (the call's start; -1: none), syscall,
    expensive, traced_task."""
    ev = session.jbd2_events
    cols = ["ts_ns", "dev", "tid", "pid", "comm", "written_blocks", "chp_ms", "wait_ms", "call_ts_ns", "syscall",
            "expensive", "traced_task"]
    cp = ev[(ev["event"] == "checkpoint") & ~ev["jbd2_thread"].astype(bool)] if len(ev) else ev
    own = recorder_pids(session)
    if own and len(cp):   # the recorder's own: recorder_checkpoints
        cp = cp[~cp["pid"].isin(own)]
    if not len(cp):
        return pd.DataFrame(columns=cols)
    cp = cp.sort_values("ts_ns", kind="stable")
    calls, by_call = _by_tid(session.calls)
    cs, by_stat = _by_tid(session.checkpoint_stats)
    c_all = calls["ts_ns"].to_numpy(dtype="int64")
    lat_all = calls["latency_ns"].to_numpy(dtype="int64")
    sys_all = calls["syscall"].to_numpy(dtype=object)
    s_all = cs["ts_ns"].to_numpy(dtype="int64")
    written_all = cs["written"].to_numpy(dtype="int64")
    chp_all = cs["chp_time_ns"].to_numpy(dtype="float64") if "chp_time_ns" in cs else np.zeros(len(cs))
    traced = cp["traced_task"].to_numpy(dtype=object) if "traced_task" in cp else np.full(len(cp), None)
    cp_ts = cp["ts_ns"].to_numpy(dtype="int64")
    cp_dev, cp_pid, cp_comm = (cp[c].to_numpy(dtype=object) for c in ("dev", "pid", "comm"))
    rows = []
    for tid, at in pd.Series(np.arange(len(cp))).groupby(cp["tid"].to_numpy(), sort=False):
        at = at.to_numpy()
        lo, hi = by_call(tid)
        c_start, lat, syscall = c_all[lo:hi], lat_all[lo:hi], sys_all[lo:hi]
        c_end = c_start + lat
        lo, hi = by_stat(tid)
        s_ts, written, chp = s_all[lo:hi], written_all[lo:hi], chp_all[lo:hi]
        ts, dev, pid, comm = cp_ts[at], cp_dev[at], cp_pid[at], cp_comm[at]
        for i in range(len(at)):
            inside = np.flatnonzero((c_start <= ts[i]) & (c_end >= ts[i]))
            call_end = int(c_end[inside[0]]) if len(inside) else None
            until = ts[i + 1] if i + 1 < len(ts) else np.iinfo("int64").max
            if call_end is not None:
                until = min(until, call_end)
            sel = (s_ts >= ts[i]) & (s_ts <= until)
            wait = float(lat[inside[0]]) / 1e6 if len(inside) else np.nan
            t = traced[at[i]]
            rows.append({"ts_ns": int(ts[i]), "dev": str(dev[i]), "tid": int(tid), "pid": int(pid[i]),
                         "comm": str(comm[i]), "written_blocks": int(written[sel].sum()),
                         "chp_ms": float(chp[sel].sum()) / 1e6, "wait_ms": wait,
                         "call_ts_ns": int(c_start[inside[0]]) if len(inside) else -1,
                         "syscall": str(syscall[inside[0]]) if len(inside) else None,
                         "expensive": bool(wait >= min_ms),
                         "traced_task": bool(t) if pd.notna(t) else True})
    return pd.DataFrame(rows, columns=cols).sort_values("ts_ns", kind="stable").reset_index(drop=True)


def checkpoint_spans(costs: pd.DataFrame, dev: str) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) ns arrays of a journal's forced checkpoints with a time (each from its
    jbd2_checkpoint event for its ``chp_ms``, checkpoint_costs)."""
    cp = costs[(costs["dev"].astype("str") == dev) & (costs["chp_ms"] > 0)] if len(costs) else costs
    c0 = cp["ts_ns"].to_numpy(dtype="int64")
    return c0, c0 + (cp["chp_ms"].to_numpy(dtype="float64") * 1e6).astype("int64")


def tail_moves(session: Session, dev: str) -> pd.DataFrame:
    """Each move of a journal's tail in a forced checkpoint (a task's, not the jbd2 thread's),
    timed by the kernel's own events. jbd2_log_do_checkpoint first moves the tail over what
    is already home (jbd2_cleanup_journal_tail: a cache flush of the filesystem's device, the
    journal superblock's write, jbd2_write_superblock, the move, jbd2_update_log_tail), then
    fires jbd2_checkpoint (``result`` 0: the tail moved, nothing to write home), writes home
    and moves the tail again. Columns: ``superblock_ns`` (the superblock write's start),
    ``tail_ns``, ``superblock_ms`` (its write: its queue, its request and, on a device without
    FUA, its flush), ``span_ms`` (from the checkpoint's event to the move; a move before its
    event, the first cleanup's, its superblock write alone: the flush before it is not
    timed) and ``home`` (the move ended writes home). Empty without the events (a recording
    without ``log_tail``)."""
    cols = ["superblock_ns", "tail_ns", "superblock_ms", "span_ms", "home"]
    ev, lt = session.jbd2_events, session.log_tail
    if not len(ev) or lt is None or not len(lt):
        return pd.DataFrame(columns=cols)
    ev = ev[(ev["dev"].astype("str") == dev) & ~ev["jbd2_thread"].astype(bool)
            & ev["event"].isin(("checkpoint", "write_superblock"))]
    ev, by_task = _by_tid(ev.sort_values("ts_ns", kind="stable"))   # each task's in time order
    lt = lt[lt["dev"].astype("str") == dev]
    rows = []
    for tid, moves in lt.groupby(lt["tid"].astype("int64"), sort=False):
        mine = ev.iloc[slice(*by_task(tid))]
        cps = mine[mine["event"] == "checkpoint"]
        cp = cps["ts_ns"].to_numpy(dtype="int64")
        moved = (pd.to_numeric(cps["result"], errors="coerce") == 0).to_numpy()
        sb = mine.loc[mine["event"] == "write_superblock", "ts_ns"].to_numpy(dtype="int64")
        ts = np.sort(moves["ts_ns"].to_numpy(dtype="int64"))
        for n, t in enumerate(ts):
            k = np.searchsorted(sb, t, side="right") - 1
            if k < 0:
                continue
            i = np.searchsorted(cp, t, side="right") - 1   # the checkpoint before it
            nxt = i + 1                                       # and the one after
            first = nxt < len(cp) and moved[nxt] and (n + 1 == len(ts) or cp[nxt] < ts[n + 1])
            if first:
                rows.append((int(sb[k]), int(t), (t - sb[k]) / 1e6, (t - sb[k]) / 1e6, False))
            elif i >= 0 and sb[k] >= cp[i] and (n == 0 or cp[i] > ts[n - 1]):
                rows.append((int(sb[k]), int(t), (t - sb[k]) / 1e6, (t - cp[i]) / 1e6, True))
    return pd.DataFrame(rows, columns=cols)


def superblock_share(moves: pd.DataFrame) -> float:
    """The share of the forced checkpoints' time (tail_moves' spans) their journal superblock
    writes took; NaN without a move."""
    span = float(moves["span_ms"].sum()) if len(moves) else 0.0
    return min(float(moves["superblock_ms"].sum()) / span, 1.0) if span > 0 else float("nan")


def _overlap_ns(c0, c1, t0, t1):
    """Per interval [t0, t1), the ns of it the spans [c0, c1) cover (summed over the spans)."""
    out = np.zeros(len(t0), dtype="int64")
    for a, b in zip(c0, c1):
        out += np.clip(np.minimum(t1, b) - np.maximum(t0, a), 0, None)
    return out


def device_saturation(session: Session, costs: pd.DataFrame, dev: str) -> float:
    """How busy a journal's data device was during its forced checkpoints, against the
    busiest it was in the session (device_load over their spans). At 1 the device was serving
    requests as fast as it did at all: a checkpoint's writes then queued behind every request
    it served, the log's included, whenever these came. NaN without the device's counters or
    a forced checkpoint with a time."""
    return device_load(session, dev, *checkpoint_spans(costs, dev))


def device_load(session: Session, dev: str, c0: np.ndarray, c1: np.ndarray) -> float:
    """How busy a journal's data device was during the spans [c0, c1) (ns arrays): its write
    and flush requests a second over the ``device_stats`` intervals the spans ran in
    (weighted by their time in each), over the highest rate of any interval. NaN without the
    device's counters or a span."""
    d = device_rows(session, dev)
    if not len(c0) or not len(d):
        return float("nan")
    t1 = d["ts_ns"].to_numpy(dtype="int64")
    span = d["interval_ns"].to_numpy(dtype="int64")
    rate = (d["write_ios"].to_numpy(dtype="float64") + d["flush_ios"].to_numpy(dtype="float64")) / \
        np.maximum(span, 1) * 1e9
    whole = span >= 100_000_000   # a short last interval says little of a rate
    peak = rate[whole].max() if whole.any() else rate.max()
    weight = _overlap_ns(c0, c1, t1 - span, t1)
    if not peak > 0 or not weight.sum() > 0:
        return float("nan")
    return min(float((rate * weight).sum() / weight.sum() / peak), 1.0)


def _per_interval(t0, t1, ts_ns, counts=None):
    """Per interval [t0, t1) (disjoint, as a device's ``device_stats`` rows are), the sum of
    ``counts`` (1 each when None) of the events at ``ts_ns`` in it: one pass over the events,
    not one per interval."""
    ts = np.asarray(ts_ns, dtype="float64")
    w = np.ones(len(ts)) if counts is None else np.asarray(counts, dtype="float64")
    order = np.argsort(t1, kind="stable")
    i = np.searchsorted(t1[order], ts, side="right")   # the first interval ending after each event
    hit = i < len(order)
    i, ts, w = order[i[hit]], ts[hit], w[hit]
    inside = ts >= t0[i]
    return np.bincount(i[inside], weights=w[inside], minlength=len(t1)).astype("float64")


def log_share_during(session: Session, dev: str, c0: np.ndarray, c1: np.ndarray, log_ts_ns: ArrayLike,
                     log_requests: ArrayLike, tail_ts_ns: ArrayLike = (), flushes: bool = True) -> float:
    """The log's share of a journal's data device's requests during the spans [c0, c1) (ns
    arrays): its write requests (``log_requests``, each count issued at ``log_ts_ns``) and the
    device's cache flushes but the one before each move of the log's tail (at ``tail_ts_ns``:
    jbd2_cleanup_journal_tail flushes the filesystem's device, wherever the journal is),
    against the device's write and flush requests, over the ``device_stats`` intervals the
    spans ran in (weighted by their time in each). A forced checkpoint's writes queue behind
    the requests the device serves while it waits, not behind the whole run's: a copy's data
    writes crowd the log out in one phase and its metadata alone fills another. ``flushes``
    false: of the write requests alone (a cache flush that costs the device nothing). NaN
    without the device's counters, a span, or a request in them."""
    d = device_rows(session, dev)
    if not len(c0) or not len(d):
        return float("nan")
    t1 = d["ts_ns"].to_numpy(dtype="int64")
    t0 = t1 - d["interval_ns"].to_numpy(dtype="int64")
    weight = _overlap_ns(c0, c1, t0, t1).astype("float64")
    log = _per_interval(t0, t1, log_ts_ns, log_requests)
    staying = _per_interval(t0, t1, tail_ts_ns)
    flushes = d["flush_ios"].to_numpy(dtype="float64") * (1.0 if flushes else 0.0)
    requests = d["write_ios"].to_numpy(dtype="float64") + flushes
    served = float((requests * weight).sum())
    if not served > 0:
        return float("nan")
    return min(float(((log + np.maximum(flushes - staying, 0.0)) * weight).sum()) / served, 1.0)


def checkpoint_waits(session: Session, stalls: pd.DataFrame, costs: pd.DataFrame) -> pd.DataFrame:
    """Per journal (``dev``), the forced-checkpoint waits jstall's bound judges
    (jstall.enough): ``wait_ms`` every task's, the stalls' checkpoint time (their own
    checkpoints and the time queued behind another task's) plus the checkpoint time of forced
    checkpoints in no stall (in calls under the threshold, outside the traced calls or in
    tasks outside the recording: jbd2_checkpoint_stats' chp_time); ``longest_ms`` one call's
    longest; ``run_ms`` the session's time; ``share`` and ``big_enough``. One row per journal
    with a forced checkpoint or a stall on one.

    An XFS log's row (``kind`` "xfs") judges its waits for log space the same way: the
    stalls' ``log_space_ms`` (queued time and time waiting for a kernel worker included) plus
    each wait of ``xfs_waits`` in no stall.

    The measured waits decide, the stacks only add: a stall counts the larger of its stacks'
    time (``checkpoint_ms``, ``log_space_ms``: queued and worker time included) and what was
    measured inside it (its forced checkpoints' ``chp_ms``, its ``xfs_waits``), so a wait whose
    stack was not captured (classed ``other``) is still judged."""
    cols = ["dev", "wait_ms", "longest_ms", "run_ms", "share", "big_enough", "kind"]
    run_ms = session_span_s(session) * 1e3
    waits = {}
    # per stall (tid, call start): the stacks' time and the time measured directly inside it
    # (forced checkpoints' chp_time, log-space sleeps); a stall counts the larger, so waits
    # whose stacks were not captured still count
    measured = {}
    if len(costs):
        mine = costs[costs["expensive"].astype(bool)]
        for t, c, d, ms in zip(mine["tid"].astype("int64"), mine["call_ts_ns"].astype("int64"),
                               mine["dev"].astype("str"), mine["chp_ms"].to_numpy(dtype="float64")):
            measured.setdefault(("jbd2", int(t), int(c)), {}).setdefault(d, []).append(float(ms))
        rest = costs[~costs["expensive"].astype(bool)]
        for dev, ms in rest.groupby(rest["dev"].astype("str"), sort=True)["chp_ms"]:
            waits.setdefault(dev, []).extend(ms.to_numpy(dtype="float64").tolist())
    xfs_devs = {j["dev"] for j in session.journals if kinds.is_xfs(j)}
    xw = session.xfs_waits
    if len(xw):
        keys = set()
        if len(stalls):
            keys = set(zip(stalls["tid"].astype("int64").tolist(), stalls["ts_ns"].astype("int64").tolist()))
        call_ts = xw["call_ts_ns"].astype("Int64").fillna(-1).astype("int64").tolist()
        inside = [(t, c) in keys for t, c in zip(xw["tid"].astype("int64").tolist(), call_ts)]
        for t, c, d, ns, i in zip(xw["tid"].astype("int64").tolist(), call_ts, xw["dev"].astype("str"),
                                  xw["wait_ns"].to_numpy(dtype="float64"), inside):
            if i:
                measured.setdefault(("xfs", t, c), {}).setdefault(d, []).append(ns / 1e6)
            else:
                waits.setdefault(d, []).append(ns / 1e6)
            xfs_devs.add(d)
    if len(stalls):
        for t, c, d, cp, ls in zip(stalls["tid"].astype("int64").tolist(), stalls["ts_ns"].astype("int64").tolist(),
                                   stalls["dev"].astype("string").fillna(""),   # no device: ""
                                   stalls["checkpoint_ms"].to_numpy(dtype="float64"),
                                   stalls["log_space_ms"].to_numpy(dtype="float64")):
            for kind, stacked in (("jbd2", cp), ("xfs", ls)):
                got = measured.pop((kind, t, c), {})
                total = sum(sum(v) for v in got.values())
                if total > (stacked if stacked > 0 else 0.0):
                    for dev, ms in got.items():   # measured: one wait per stall and device
                        waits.setdefault(dev, []).append(sum(ms))
                elif stacked > 0 and d:   # a stall on no known journal judges none
                    waits.setdefault(d, []).append(float(stacked))
    for got in measured.values():   # measured inside a call the stall table does not hold
        for dev, ms in got.items():
            waits.setdefault(dev, []).append(sum(ms))
    rows = []
    for dev in sorted(waits):
        kind = (kinds.XFS if dev in xfs_devs else kinds.JBD2).name
        e = enough.judge(sum(waits[dev]), max(waits[dev]), run_ms, kind)
        rows.append({"dev": dev, "wait_ms": e.wait_ms, "longest_ms": e.longest_ms, "run_ms": e.run_ms,
                     "share": e.share, "big_enough": e.big_enough, "kind": kind})
    return pd.DataFrame(rows, columns=cols)


def untraced_checkpoints(session: Session) -> pd.DataFrame:
    """Forced checkpoints (run in a task, not a jbd2 thread) that fired outside every traced
    call: one row per (``dev``, ``pid``, ``comm``) with ``checkpoints``, ``traced_task`` (the
    task was in the session's scope: it was in a call jstall did not trace; else a task
    outside the scope) and ``first_ns``. Empty for sessions recorded before jbd2 events said
    where they ran."""
    ev = session.jbd2_events
    cols = ["dev", "pid", "comm", "traced_task", "checkpoints", "first_ns"]
    if "in_traced_call" not in ev.columns or not len(ev):
        return pd.DataFrame(columns=cols)
    cp = ev[(ev["event"] == "checkpoint") & ~ev["jbd2_thread"].astype(bool)]
    cp = cp[cp["in_traced_call"].notna() & ~cp["in_traced_call"].fillna(True).astype(bool)]
    own = recorder_pids(session)
    if own:   # the recorder's own: recorder_checkpoints
        cp = cp[~cp["pid"].isin(own)]
    if not len(cp):
        return pd.DataFrame(columns=cols)
    cp = cp.assign(dev=cp["dev"].astype("str"), comm=cp["comm"].astype("str"),
                   traced_task=cp["traced_task"].fillna(False).astype(bool))
    out = (cp.groupby(["dev", "pid", "comm", "traced_task"], observed=True, sort=False)
           .agg(checkpoints=("ts_ns", "size"), first_ns=("ts_ns", "min")).reset_index())
    out = out.sort_values(["checkpoints", "first_ns"], ascending=[False, True], kind="stable")
    return out[cols].reset_index(drop=True)


def untraced_text(untraced: pd.DataFrame, most: int = 3) -> str:
    """'72 in tar 4121 on 7:1, in a call not traced; ...': where forced checkpoints ran outside
    the traced calls, the largest first."""
    parts = [f"{int(r['checkpoints'])} in {r['comm']} {int(r['pid'])} on {r['dev']}, "
             f"{'in a call not traced' if r['traced_task'] else 'a task outside the recording'}"
             for r in untraced.head(most).to_dict("records")]
    if len(untraced) > most:
        parts.append(f"{len(untraced) - most} more tasks")
    return "; ".join(parts)


def checkpoint_writes(session: Session) -> pd.DataFrame:
    """jbd2_checkpoint_stats rows with ``forced`` (fired in a task other than a jbd2 thread)
    and ``chp_time_ms`` (from jiffies at hz); ``written`` counts blocks written home."""
    cs = session.checkpoint_stats.copy()
    cs["dev"] = cs["dev"].astype("str")
    tids = jbd2_thread_tids(session)
    cs["forced"] = ~(cs["tid"].astype("int64").isin(tids) | cs["comm"].astype("str").str.startswith("jbd2/"))
    cs["chp_time_ms"] = cs["chp_time_jiffies"].astype("float64") * 1000.0 / session.hz
    return cs


def time_at_forced_level(timeline: pd.DataFrame, limits: pd.DataFrame) -> pd.Series:
    """Per device, seconds the fill step function spent at or above the forced-checkpoint
    level (each sample holds until the next one on its device)."""
    if not len(timeline):
        return pd.Series(dtype="float64")
    t = timeline
    dev = t["dev"].to_numpy(dtype=object)
    ts = t["ts_ns"].to_numpy(dtype="int64")
    # the next sample on the same device (rows are sorted by dev, ts_ns; the last holds 0 s)
    same = np.r_[dev[1:] == dev[:-1], False]
    dur = np.where(same, np.r_[ts[1:], 0] - ts, 0).astype("float64")
    mtb = t["max_transaction_blocks"].to_numpy(dtype="float64")
    mtb = np.where(np.isnan(mtb), t["dev"].map(limits["max_transaction_blocks"]).to_numpy(dtype="float64"), mtb)
    at = ((t["free_blocks"].to_numpy(dtype="float64") - RESERVED_BLOCKS < mtb)
          | (t["space_left_blocks"].to_numpy(dtype="float64") < mtb))
    return pd.Series(np.where(at, dur, 0.0), index=t.index).groupby(t["dev"]).sum() / 1e9


def _mean(x):
    """Series.mean() of a non-empty numpy array (sum in float64, then divide)."""
    return float(x.sum(dtype="float64") / len(x))


def _transaction_figures(t, n, span):
    """A journal's per-transaction averages, logged blocks and log rates (mean over the
    session ``span`` seconds, peak over one second) from its ``n`` transactions' columns ``t``."""
    row = {}
    for p in PHASES:
        row[f"avg_{p}_ms"] = _mean(t[f"{p}_ms"]) if n else np.nan
    row["avg_handles_per_transaction"] = _mean(t["handle_count"]) if n else np.nan
    row["avg_blocks_per_transaction"] = _mean(t["blocks"]) if n else np.nan
    row["avg_logged_blocks_per_transaction"] = _mean(t["blocks_logged"]) if n else np.nan
    row["logged_blocks"] = int(t["blocks_logged"].sum())
    row["log_rate_blocks_per_s"] = row["logged_blocks"] / span if span > 0 else np.nan
    if n > 1:
        sec = t["ts_ns"] // 1_000_000_000
        _, inv = np.unique(sec, return_inverse=True)
        row["peak_log_rate_blocks_per_s"] = float(_group_sums(inv.ravel(), t["blocks_logged"]).max())
    else:
        row["peak_log_rate_blocks_per_s"] = float(row["logged_blocks"])
    return row


def _fill_figures(tl, ntl):
    """A journal's fullest fill and its lows of free space and headroom, from its ``ntl`` fill
    time line samples' columns ``tl``."""
    row = {}
    row["max_fill_pct"] = float(np.nanmax(tl["fill_pct"])) if ntl and not np.isnan(tl["fill_pct"]).all() \
        else np.nan
    for key, col in (("min_free_blocks", "free_blocks"), ("headroom_low_blocks", "headroom_blocks"),
                     ("headroom_low_pct", "headroom_pct")):
        # the kernel's condition (fill.headroom): below 0 a handle waits for log space
        v = tl[col]
        row[key] = float(np.nanmin(v)) if ntl and not np.isnan(v).all() else np.nan
    return row


def summary(session: Session, timeline: pd.DataFrame, txns: pd.DataFrame,
            stalls: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per journal (dev): size, transactions and per-transaction averages, checkpoints,
    fill and log rate.  Units in column names; ``*_pct`` are percent of the log.  Columns
    are taken out of the tables once and split per journal with numpy masks."""
    limits = journal_limits(session, timeline)
    meta = {j["dev"]: j for j in session.journals if j.get("kind", "jbd2") == "jbd2"}   # XFS: xfs_logs
    ev = session.jbd2_events
    ev_dev = ev["dev"].astype("str").to_numpy(dtype=object)
    t_dev = txns["dev"].to_numpy(dtype=object)
    tl_dev = timeline["dev"].to_numpy(dtype=object)
    devs = list(dict.fromkeys(list(meta) + sorted(set(t_dev.tolist()) | set(tl_dev.tolist()) | set(ev_dev.tolist()))))
    # checkpoints (checkpoints(): forced when not in the jbd2 thread) and their writes
    is_cp = ev["event"].to_numpy(dtype=object) == "checkpoint"
    cp_dev, cp_forced = ev_dev[is_cp], ~ev["jbd2_thread"].to_numpy(dtype=bool)[is_cp]
    cw = checkpoint_writes(session)
    cw_dev, cw_forced = cw["dev"].to_numpy(dtype=object), cw["forced"].to_numpy(dtype=bool)
    cw_written = cw["written"].to_numpy(dtype="int64")
    above = time_at_forced_level(timeline, limits)
    span = session_span_s(session)
    tcol = {c: txns[c].to_numpy() for c in [f"{p}_ms" for p in PHASES] + ["handle_count", "blocks", "blocks_logged",
                                                                          "ts_ns"]}
    tlcol = {c: timeline[c].to_numpy(dtype="float64") for c in ("fill_pct", "free_blocks", "headroom_blocks",
                                                                "headroom_pct", "journal_blocks")}
    if stalls is not None:
        st_dev = stalls["dev"].astype("str").to_numpy(dtype=object)
        st_lat = stalls["latency_ms"].to_numpy(dtype="float64")
    rows = []
    for dev in devs:  # one iteration per journal
        m = meta.get(dev, {})
        tm, lm = t_dev == dev, tl_dev == dev
        t = {c: v[tm] for c, v in tcol.items()}
        tl = {c: v[lm] for c, v in tlcol.items()}
        ntl = int(lm.sum())
        lb = limits["log_blocks"].get(dev, np.nan)
        mtb = limits["max_transaction_blocks"].get(dev, np.nan)
        jb = m.get("journal_blocks") or (tl["journal_blocks"][-1] if ntl else np.nan)
        bs = m.get("block_size")
        n = int(tm.sum())
        row = {
            "dev": dev, "device": m.get("device"), "mountpoint": m.get("mountpoint"),
            "block_size": bs, "journal_blocks": jb, "log_blocks": lb,
            "journal_mib": (jb * bs / 2**20) if (bs and pd.notna(jb)) else np.nan,
            "max_transaction_blocks": m.get("max_transaction_blocks", mtb) if pd.isna(mtb) else mtb,
            "inode_size": m.get("inode_size"), "fast_commit": m.get("fast_commit"),
            "journal_device": m.get("journal_device"),
            "transactions": n,
        }
        row.update(_transaction_figures(t, n, span))
        cf = cp_forced[cp_dev == dev]
        row["forced_checkpoints"] = int(cf.sum())
        row["background_checkpoints"] = int((~cf).sum())
        wm = cw_dev == dev
        row["forced_checkpoint_written_blocks"] = int(cw_written[wm & cw_forced].sum())
        row["background_checkpoint_written_blocks"] = int(cw_written[wm & ~cw_forced].sum())
        row["checkpointed_transactions"] = int(wm.sum())
        row.update(_fill_figures(tl, ntl))
        row["forced_fill_pct"] = float(forced_fill_pct(mtb, lb)) if pd.notna(lb) and lb > 0 else np.nan
        row["time_at_forced_level_s"] = float(above.get(dev, 0.0))
        if stalls is not None:
            sm = st_dev == dev
            row["stalls"] = int(sm.sum())
            row["stall_ms"] = float(st_lat[sm].sum())
        rows.append(row)
    return pd.DataFrame(rows)


def _group_sums(groups, values):
    """Integer sums of ``values`` per group code 0..k-1."""
    out = np.zeros(int(groups.max()) + 1, dtype="int64")
    np.add.at(out, groups, values.astype("int64"))
    return out


# --- /proc/fs/jbd2/<dev>/info -------------------------------------------------------------

_PROC_LINES = {
    "wait_ms": r"(\d+)ms waiting for transaction",
    "request_delay_ms": r"(\d+)ms request delay",
    "running_ms": r"(\d+)ms running transaction",
    "locked_ms": r"(\d+)ms transaction was being locked",
    "flushing_ms": r"(\d+)ms flushing data",
    "logging_ms": r"(\d+)ms logging transaction",
    "commit_time_us": r"(\d+)us average transaction commit time",
    "handles": r"(\d+) handles per transaction",
    "blocks": r"(\d+) blocks per transaction",
    "blocks_logged": r"(\d+) logged blocks per transaction",
}


def parse_proc_info(text: str | None) -> dict[str, int] | None:
    """Parse /proc/fs/jbd2/<dev>/info (``jbd2_seq_info_show``) into a dict: ``transactions``,
    ``requested``, ``max_transaction_blocks`` and the integer averages (keys of _PROC_LINES);
    None when ``text`` is empty or unrecognised.  Averages are absent while transactions is 0."""
    if not text:
        return None
    m = re.search(r"(\d+) transactions? \((\d+) requested\), each up to (\d+) blocks", text)
    if not m:
        return None
    out = {"transactions": int(m.group(1)), "requested": int(m.group(2)), "max_transaction_blocks": int(m.group(3))}
    for key, pat in _PROC_LINES.items():
        mm = re.search(pat, text)
        if mm:
            out[key] = int(mm.group(1))
    return out


#: metric -> (analyzer column of ``transactions()``, unit the kernel prints, is a time)
_COMPARED = {
    "wait_ms": ("wait_ms", True),
    "running_ms": ("running_ms", True),
    "locked_ms": ("locked_ms", True),
    "flushing_ms": ("flushing_ms", True),
    "logging_ms": ("logging_ms", True),
    "handles": ("handle_count", False),
    "blocks": ("blocks", False),
    "blocks_logged": ("blocks_logged", False),
}


#: A figure is "undetermined" when the kernel's rounding alone allows more than this share.
UNDETERMINED_SHARE = 0.10


def proc_agreement(session: Session, txns: pd.DataFrame, tolerance: float = 0.01) -> pd.DataFrame:
    """Compare the analyzer's figures with the kernel's /proc/fs/jbd2/<dev>/info deltas.

    The kernel prints ``sum // n`` over all ``n`` transactions since mount (times: jiffies
    summed, divided, then converted to ms).  Over the session, the kernel's transaction count
    is ``n_end - n_start`` and its sum of a figure lies in
    ``[avg_end*n_end - avg_start*n_start - (n_start - 1), avg_end*n_end + (n_end - 1) - avg_start*n_start]``
    (each printed average hides up to ``n - 1`` of its sum); ``kernel`` is
    ``(avg_end*n_end - avg_start*n_start) / (n_end - n_start)`` and ``kernel_low``/``kernel_high``
    the interval per transaction.

    ``tolerance_abs`` is stated per figure: one unit of the kernel's resolution per
    transaction (one jiffy, ``1000 / hz`` ms, for times; 1 for counts) or the interval's
    half-width if wider, plus ``tolerance`` (1%) of the kernel's value.  ``status``:
    ``undetermined`` when the tolerance exceeds one unit and UNDETERMINED_SHARE (10%) of the
    kernel's value (the since-mount averages are too coarse to check this session); else
    ``agree`` when the analyzer's average lies within ``tolerance_abs`` of the interval's
    midpoint, ``disagree`` when not.  ``agree`` is ``status == "agree"``.  The transaction count must be
    equal.

    Returns a DataFrame: ``dev, metric, analyzer, kernel, kernel_low, kernel_high, rel_diff,
    tolerance_abs, unit, status, agree`` (metric ``transactions`` first); empty when no journal
    has both texts."""
    rows = []
    hz = session.hz
    for j in session.journals:
        a, b = parse_proc_info(j.get("proc_info_start")), parse_proc_info(j.get("proc_info_end"))
        if not a or not b:
            continue
        dev = j["dev"]
        t = txns[txns["dev"] == dev]
        n0, n1 = a["transactions"], b["transactions"]
        dn = n1 - n0
        ok = len(t) == dn
        rows.append({"dev": dev, "metric": "transactions", "analyzer": float(len(t)), "kernel": float(dn),
                     "kernel_low": float(dn), "kernel_high": float(dn), "tolerance_abs": 0.0, "unit": "transactions",
                     "status": "agree" if ok else "disagree", "agree": ok})
        if dn <= 0 or len(t) == 0:
            continue
        for metric, (col, is_time) in _COMPARED.items():
            if metric not in b:
                continue
            # back to the kernel's integer unit: jiffies for times (ms = jiffies * 1000 / hz)
            scale = (1000.0 / hz) if is_time else 1.0
            avg1 = round(b[metric] / scale)
            avg0 = round(a.get(metric, 0) / scale) if n0 else 0
            # the kernel's totals are sums of non-negative values: never below 0
            s = max(avg1 * n1 - avg0 * n0, 0)
            low = max(s - max(n0 - 1, 0), 0)
            high = s + max(n1 - 1, 0)
            ana = float(t[col].mean())
            kern = s / dn * scale
            klo, khi = low / dn * scale, high / dn * scale
            tol = max(scale, (khi - klo) / 2) + tolerance * abs(kern)
            if tol > scale + tolerance * abs(kern) and tol > UNDETERMINED_SHARE * abs(kern):
                status = "undetermined"
            elif abs(ana - (klo + khi) / 2) <= tol:
                status = "agree"
            else:
                status = "disagree"
            rows.append({"dev": dev, "metric": metric, "analyzer": ana, "kernel": kern, "kernel_low": klo,
                         "kernel_high": khi, "tolerance_abs": tol, "unit": "ms" if is_time else metric,
                         "status": status, "agree": status == "agree"})
    df = pd.DataFrame(rows, columns=["dev", "metric", "analyzer", "kernel", "kernel_low", "kernel_high",
                                     "tolerance_abs", "unit", "status", "agree"])
    df.insert(6, "rel_diff", (df["analyzer"] - df["kernel"]).abs() / df["kernel"].abs().where(df["kernel"] != 0))
    return df
