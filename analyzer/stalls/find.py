"""Stalled calls: which calls were slow, what they waited on, how full the journal was.

A stall is a traced call (``calls`` table) with ``latency_ns >= min_ms * 1e6``.  Off-CPU
intervals join to their call by (``tid``, ``call_ts_ns`` == calls.``ts_ns``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jstall.jbd2 import RESERVED_BLOCKS, forced_fill_pct, headroom

from jstall.analyzer.stalls.causes import CAUSES, interval_causes, measured_log_space
from jstall.analyzer.stalls.chains import checkpoint_overlap, queued_causes, worker_causes, worker_waits
from jstall.analyzer.jbd2.fill import asof_positions, dev_codes, fill_pct, journal_limits, range_min
from jstall.analyzer.xfs.logs import waits

if TYPE_CHECKING:
    from jstall.analyzer.session.load import Session

DEFAULT_MIN_MS = 10.0


def stall_columns() -> list[str]:
    """Columns of the stall table, in order (``<cause>_ms`` for every registered cause follows
    ``oncpu_ms``)."""
    return (["ts_ns", "end_ns", "latency_ms", "tid", "pid", "comm", "syscall", "ret", "dev", "handles", "context",
             "cause", "cause_label", "offcpu_ms", "oncpu_ms"]
            + [f"{c}_ms" for c in CAUSES]
            + ["queued_ms", "queued_behind", "worker_ms", "worker", "during_checkpoint_ms",
               "checkpoint_by"]
            + ["free_start_blocks", "fill_start_pct", "min_free_blocks", "fill_max_pct", "log_blocks",
               "max_transaction_blocks", "forced_fill_pct", "min_space_left_blocks", "at_forced_level",
               "headroom_start_blocks", "headroom_start_pct", "min_headroom_blocks", "min_headroom_pct", "forced",
               "running_transaction", "committing_transaction", "own_checkpoint", "own_checkpoints",
               "background_checkpoints"])


def select_stalls(calls: pd.DataFrame, min_ms: float = DEFAULT_MIN_MS) -> pd.DataFrame:
    """Calls with latency >= min_ms, sorted by start, with ``end_ns`` (= ts + latency) added."""
    sel = np.flatnonzero(calls["latency_ns"].to_numpy() >= int(round(min_ms * 1e6)))
    # by (ts_ns, tid), ties in table order (np.lexsort is stable)
    sel = sel[np.lexsort((calls["tid"].to_numpy()[sel], calls["ts_ns"].to_numpy()[sel]))]
    s = calls.take(sel).reset_index(drop=True)
    return s.assign(end_ns=s["ts_ns"] + s["latency_ns"])


def _checkpoint_events(jbd2_events):
    """``checkpoint`` events: ts_ns, dev, tid and jbd2_thread."""
    ev = jbd2_events[["ts_ns", "dev", "tid", "jbd2_thread", "event"]]
    return ev[ev["event"].to_numpy(dtype=object) == "checkpoint"]


def own_checkpoints(stalls: pd.DataFrame, jbd2_events: pd.DataFrame,
                    checkpoint_events: pd.DataFrame | None = None) -> np.ndarray:
    """Checkpoints that ran in each stall's own task during it.

    A ``checkpoint`` jbd2 event belongs to a stall when its ``tid`` is the stall's and
    ``ts_ns`` lies in [ts_ns, end_ns] (both inclusive).  Calls of one thread do not overlap, so
    an as-of join of each event to the latest call start in its thread finds it
    (fill.asof_positions).  ``checkpoint_events``: those events when already selected.
    Returns an int64 numpy array of counts aligned with ``stalls``."""
    counts = np.zeros(len(stalls), dtype="int64")
    ev = _checkpoint_events(jbd2_events) if checkpoint_events is None else checkpoint_events
    if not len(ev) or not len(stalls):
        return counts
    ev_ts = ev["ts_ns"].to_numpy(dtype="int64")
    pos = asof_positions(ev["tid"].to_numpy(dtype="int64"), ev_ts, stalls["tid"].to_numpy(dtype="int64"),
                         stalls["ts_ns"].to_numpy(dtype="int64"))
    hit = pos >= 0
    hit[hit] = ev_ts[hit] <= stalls["end_ns"].to_numpy(dtype="int64")[pos[hit]]
    np.add.at(counts, pos[hit], 1)
    return counts


def count_between(times: pd.DataFrame, keys: pd.DataFrame, start_col: str = "ts_ns",
                  end_col: str = "end_ns") -> np.ndarray:
    """For each key row, how many of ``times`` (DataFrame ts_ns, dev) fall in [start, end] on
    the key's device.  Returns an int64 numpy array aligned with ``keys``."""
    out = np.zeros(len(keys), dtype="int64")
    if not len(times) or not len(keys):
        return out
    devs = keys["dev"].astype("str").to_numpy(dtype=object)
    tdev = times["dev"].to_numpy(dtype=object)
    tts = times["ts_ns"].to_numpy(dtype="int64")
    starts = keys[start_col].to_numpy(dtype="int64")
    ends = keys[end_col].to_numpy(dtype="int64")
    for dev in dict.fromkeys(tdev.tolist()):  # one iteration per journal
        sel = np.flatnonzero(devs == dev)
        if not len(sel):
            continue
        ts = np.sort(tts[tdev == dev])
        out[sel] = np.searchsorted(ts, ends[sel], side="right") - np.searchsorted(ts, starts[sel], side="left")
    return out


def _most_time(n, rows, who, ns):
    """Per stall (``n`` of them): the off-CPU ns of its intervals (``rows``: their stall,
    ``ns``: their time) that name someone in ``who`` (not None), and the one named with the
    most of that time (ties: the first in sort order), else None."""
    named = who != None  # noqa: E711 (element-wise)
    total = np.zeros(n, dtype="int64")
    np.add.at(total, rows[named], ns[named])
    top = np.full(n, None, dtype=object)
    if named.any():
        q = pd.DataFrame({"row": rows[named], "who": who[named], "ns": ns[named]})
        t = q.groupby(["row", "who"], sort=True)["ns"].sum().reset_index()
        t = t.sort_values(["row", "ns"], ascending=[True, False], kind="stable")
        t = t.drop_duplicates("row")
        top[t["row"].to_numpy()] = t["who"].to_numpy(dtype=object)
    return total, top


def _nan_min(*arrays):
    """Element-wise minimum ignoring NaN (NaN where all are NaN), as DataFrame.min(axis=1)."""
    out = arrays[0]
    for a in arrays[1:]:
        out = np.fmin(out, a)
    return out


def find_stalls(session: Session, timeline: pd.DataFrame, min_ms: float = DEFAULT_MIN_MS,
                xfs_waits: pd.DataFrame | None = None) -> pd.DataFrame:
    """The stall table: one row per stalled call (columns stall_columns()). ``xfs_waits``: the
    session's XFS log-space waits as xfs_logs.waits gives them (computed when not given).

    Units and meaning:
    - ``latency_ms``: entry to exit.  ``offcpu_ms``: off-CPU intervals (> 100 µs) inside the
      call; ``<cause>_ms``: that time split by cause; ``oncpu_ms`` = latency - off-CPU
      (running, or off CPU in intervals too short to be recorded).
    - ``cause``: the cause with the largest share of off-CPU time; ``other`` when the call
      has none.  ``cause_label``: the frame (or stack summary) behind the largest share.
    - ``queued_ms``: off-CPU time queued behind another task (a lock it held), which takes
      the cause of what that task was doing meanwhile (chains.queued_causes), included in
      ``<cause>_ms``; ``queued_behind``: the task most of it queued behind (``"comm tid"``),
      else null.
    - ``worker_ms``: off-CPU time waiting for a kernel worker (``__flush_work``, a completion)
      whose own waits give it its cause (chains.worker_causes: an XFS inodegc worker's wait
      for log space), included in ``<cause>_ms``; ``worker``: the worker most of it waited
      for (``"comm tid"``), else null.
    - ``during_checkpoint_ms``: off-CPU time on the device's queue (data_writeback,
      commit_wait, device_flush) while another task's checkpoint wrote home on the same
      device (chains.checkpoint_overlap): its cause stays its own; ``checkpoint_by``: that
      task (``"comm tid"``, the one with the most of it), else null.
    - ``free_start_blocks``/``fill_start_pct``: the last fill sample at or before the call's
      start on its device (else the call's own ``journal_free_blocks``);
      ``min_free_blocks``/``fill_max_pct``: the lowest free space from the start sample, every
      sample inside [ts_ns, end_ns] and the call's ``journal_min_free_blocks``.
    - ``min_space_left_blocks``: lowest ``jbd2_log_space_left()`` (free - 32 - committing
      transaction's credits) at the start sample, the samples inside the call and the call's
      first handle (``journal_free_blocks``, ``journal_committing_credits``).
    - ``at_forced_level``: ``min_free_blocks - 32 < max_transaction_blocks`` or
      ``min_space_left_blocks < max_transaction_blocks``: the journal reached the level at
      which handles must checkpoint.
    - ``headroom_start_blocks``/``headroom_start_pct``: ``jbd2_log_space_left() -
      j_max_transaction_buffers`` at the start sample (or the call's first handle), in blocks
      and % of the log; ``min_headroom_blocks``/``min_headroom_pct``: its low during the call.
      Below 0 a handle must wait for log space.
    - ``forced``: the kernel's condition held (headroom below 0 at the start or during the
      call) and the call itself waited for space (checkpoint time in its stacks, or a
      checkpoint in its own task): ``add_transaction_credits -> __jbd2_log_wait_for_space``.
      ``fill_max_pct`` (the fullest the log got during the call) is a consequence of the
      stall, not its cause.
    - ``running_transaction``/``committing_transaction``: at the start sample (-1: none).
    - ``own_checkpoint``: a checkpoint ran in this call's own task during it;
      ``background_checkpoints``: checkpoints by the jbd2 thread on its device during it.

    Column arithmetic is done on numpy arrays and the table built once: a session's stall
    table costs a fixed handful of pandas operations whatever its size.
    """
    st = select_stalls(session.calls, min_ms)
    cp_events = _checkpoint_events(session.jbd2_events)
    own = own_checkpoints(st, session.jbd2_events, cp_events)
    off = _offcpu_columns(session, st, own, cp_events)
    fill = _fill_columns(session, timeline, st, off, own, cp_events)
    return _xfs_headroom(session, _stall_table(st, off, fill), xfs_waits)


def stall_keys(st: pd.DataFrame) -> pd.DataFrame:
    """Each stall's (tid, call start) and row, the key its off-CPU intervals join on."""
    return pd.DataFrame({"tid": st["tid"].to_numpy(), "call_ts_ns": st["ts_ns"].to_numpy(),
                         "_row": np.arange(len(st))})


def _all_interval_causes(session, own_keys, cp_events):
    """Every off-CPU interval's cause, label, the worker it waited for, the task it queued
    behind, and its time on a device queue while another task's checkpoint wrote home on the
    same device (with that task); a stall's waits may be queued behind intervals of calls
    that are no stall. ``own_keys``: the keys (stall_keys) of stalls that ran a checkpoint
    in their own task."""
    offcpu = session.offcpu
    all_cause, all_labels = interval_causes(offcpu["stack_id"].to_numpy(), offcpu["tid"].to_numpy(),
                                            offcpu["call_ts_ns"].to_numpy(), offcpu["runnable"].to_numpy(dtype=bool),
                                            session.stacks, own_keys)
    # an interval with no stack inside its own thread's measured XFS wait is log space
    measured_log_space(all_cause, all_labels, offcpu["tid"].to_numpy(), offcpu["ts_ns"].to_numpy(),
                       offcpu["offcpu_ns"].to_numpy(), session.xfs_waits)
    # waits for a kernel worker take the worker's cause, then waits queued behind a task
    workers = worker_waits(getattr(session, "xfs_waits", None), session.jbd2_events,
                           getattr(session, "worker_offcpu", None), session.stacks)
    all_cause, all_labels, all_worker = worker_causes(offcpu, all_cause, all_labels, workers)
    all_cause, all_labels, all_behind = queued_causes(offcpu, all_cause, all_labels, cp_events)
    # device-queue waits while another task's checkpoint wrote home on the same device
    inherited = (all_behind != None) | (all_worker != None)  # noqa: E711 (element-wise)
    all_cp_ns, all_cp_by = checkpoint_overlap(offcpu, all_cause, all_labels, inherited)
    return all_cause, all_labels, all_worker, all_behind, all_cp_ns, all_cp_by


def stall_intervals(offcpu: pd.DataFrame, keys: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(rows, keep): for each off-CPU interval inside a stall (``keys``: :func:`stall_keys`), the
    stall's row and the interval's position in ``offcpu``."""
    key_index = pd.MultiIndex.from_arrays([keys["tid"].to_numpy(dtype="int64"), keys["call_ts_ns"].to_numpy()])
    if key_index.is_unique:  # each interval joins at most one stall (calls of a thread do not overlap)
        at = key_index.get_indexer(pd.MultiIndex.from_arrays([offcpu["tid"].to_numpy(dtype="int64"),
                                                              offcpu["call_ts_ns"].to_numpy(dtype="int64")]))
        keep = np.flatnonzero(at >= 0)
        return at[keep], keep
    off = offcpu.assign(_at=np.arange(len(offcpu))).merge(keys, on=["tid", "call_ts_ns"], how="inner")
    return off["_row"].to_numpy(dtype="int64"), off["_at"].to_numpy(dtype="int64")


def _primary_labels(n, rows, codes, pcode, labels, ns):
    """Per stall: the label with the most time inside its primary cause ``pcode`` (ties: the
    first label in order); a stall without such time ran on CPU."""
    label = np.full(n, "no off-CPU interval > 100 us (ran on CPU)", dtype=object)
    mine = codes == pcode[rows] if len(rows) else np.zeros(0, dtype=bool)
    if mine.any():
        lcode, luniq = pd.factorize(labels[mine], sort=True)
        key, inv = np.unique(rows[mine] * len(luniq) + lcode, return_inverse=True)
        tot = np.zeros(len(key), dtype="int64")
        np.add.at(tot, inv, ns[mine])
        krow, klab = key // len(luniq), key % len(luniq)
        order = np.lexsort((klab, -tot, krow))
        first = order[np.r_[True, krow[order][1:] != krow[order][:-1]]]
        label[krow[first]] = np.asarray(luniq, dtype=object)[klab[first]]
    return label


def _offcpu_columns(session, st, own, cp_events):
    """Per stall, its off-CPU time: ``by`` (ns per cause, one column per CAUSES), ``off_ns``,
    the time queued behind another task (``queued_ns``, ``queued_checkpoint_ns``,
    ``queued_behind``), waiting for a worker (``worker_ns``, ``worker``), on a device queue
    during another task's checkpoint (``during_cp_ns``, ``cp_task``), and its primary cause
    with its label (``primary``, ``label``): a dict of arrays aligned with ``st``."""
    n = len(st)
    keys = stall_keys(st)
    all_cause, all_labels, all_worker, all_behind, all_cp_ns, all_cp_by = _all_interval_causes(
        session, keys[own > 0], cp_events)
    rows, keep = stall_intervals(session.offcpu, keys)
    cause, labels, behind = all_cause[keep], all_labels[keep], all_behind[keep]
    through = all_worker[keep]
    cp_ns, cp_by = all_cp_ns[keep], all_cp_by[keep]
    codes = pd.Index(CAUSES).get_indexer(cause) if len(cause) else np.zeros(0, dtype="int64")
    ns = session.offcpu["offcpu_ns"].to_numpy()[keep].astype("int64")
    by = np.zeros((n, len(CAUSES)), dtype="int64")
    np.add.at(by, (rows, codes), ns)
    off_ns = by.sum(axis=1).astype("float64")
    # time queued behind another task, and the task most of it queued behind
    queued = behind != None  # noqa: E711 (element-wise)
    queued_ns, queued_behind = _most_time(n, rows, behind, ns)
    queued_checkpoint_ns = np.zeros(n, dtype="int64")
    # (a checkpoint of jbd2's thread a call waited for is not the call's own either)
    qc = (queued | (through != None)) & (codes == CAUSES.index("checkpoint"))  # noqa: E711
    np.add.at(queued_checkpoint_ns, rows[qc], ns[qc])
    worker_ns, worker = _most_time(n, rows, through, ns)
    during_cp_ns, cp_task = _most_time(n, rows, cp_by, cp_ns)
    other = CAUSES.index("other")
    pcode = np.where(off_ns > 0, by.argmax(axis=1), other) if n else np.zeros(0, dtype="int64")
    return {"by": by, "off_ns": off_ns, "queued_ns": queued_ns, "queued_checkpoint_ns": queued_checkpoint_ns,
            "queued_behind": queued_behind, "worker_ns": worker_ns, "worker": worker,
            "during_cp_ns": during_cp_ns, "cp_task": cp_task,
            "primary": np.asarray(CAUSES, dtype=object)[pcode],
            "label": _primary_labels(n, rows, codes, pcode, labels, ns)}


def _fill_nan(a, b):
    return np.where(np.isnan(a), b, a)


def _fill_columns(session, timeline, st, off, own, cp_events):
    """Per stall, the journal's fill at the start sample and its low point during the call,
    the headroom, whether the call was forced to wait for log space, and the checkpoints
    during it (the columns ``free_start_blocks`` .. ``background_checkpoints`` of
    stall_columns(); ``off``: _offcpu_columns): a dict of arrays aligned with ``st``."""
    n = len(st)
    tl_codes, st_codes = dev_codes(timeline["dev"], st["dev"])
    pos = asof_positions(st_codes, st["ts_ns"].to_numpy(dtype="int64"), tl_codes,
                         timeline["ts_ns"].to_numpy(dtype="int64"))
    hit = pos >= 0

    def at_start(col):
        v = np.full(n, np.nan)
        v[hit] = timeline[col].to_numpy(dtype="float64")[pos[hit]]
        return v

    def own_col(col):
        return st[col].to_numpy(dtype="float64", na_value=np.nan)

    limits = journal_limits(session, timeline)
    li = limits.index.get_indexer(st["dev"].astype("str")) if n else np.zeros(0, dtype="int64")

    def limit(col):
        if not len(limits):
            return np.full(n, np.nan)
        return np.where(li >= 0, limits[col].to_numpy()[np.maximum(li, 0)], np.nan)

    free_start = _fill_nan(at_start("free_blocks"), own_col("journal_free_blocks"))
    log_blocks = _fill_nan(_fill_nan(at_start("log_blocks"), own_col("journal_log_blocks")), limit("log_blocks"))
    span = st.assign(dev=st["dev"].fillna(""))
    inside = range_min(timeline, span, value=("free_blocks", "space_left_blocks"))
    min_free = _nan_min(free_start, inside["free_blocks"], own_col("journal_min_free_blocks"))
    mtb = _fill_nan(at_start("max_transaction_blocks"), limit("max_transaction_blocks"))
    own_space = own_col("journal_free_blocks") - RESERVED_BLOCKS - np.nan_to_num(
        own_col("journal_committing_credits"), nan=0.0)
    space_at_start = at_start("space_left_blocks")
    space = _nan_min(space_at_start, own_space, inside["space_left_blocks"])
    space_start = _fill_nan(space_at_start, own_space)
    h_start, h_start_pct = headroom(space_start, mtb, log_blocks)
    h_min, h_min_pct = headroom(space, mtb, log_blocks)
    # the call itself waited for log space (not queued behind a task that did)
    checkpoint_ms = (off["by"][:, CAUSES.index("checkpoint")] - off["queued_checkpoint_ns"]).astype("float64") / 1e6
    waited = (checkpoint_ms > 0) | (own > 0)
    if n:
        bg = cp_events[cp_events["jbd2_thread"].to_numpy(dtype=bool)]
        background = count_between(bg, span)
    else:
        background = own
    return {
        "free_start_blocks": free_start, "fill_start_pct": fill_pct(free_start, log_blocks),
        "min_free_blocks": min_free, "fill_max_pct": fill_pct(min_free, log_blocks),
        "log_blocks": log_blocks, "max_transaction_blocks": mtb, "forced_fill_pct": forced_fill_pct(mtb, log_blocks),
        "min_space_left_blocks": space,
        "at_forced_level": ((min_free - RESERVED_BLOCKS) < mtb) | (space < mtb),
        "headroom_start_blocks": h_start, "headroom_start_pct": h_start_pct,
        "min_headroom_blocks": h_min, "min_headroom_pct": h_min_pct,
        "forced": (space < mtb) & waited,
        "running_transaction": pd.Series(at_start("running_transaction")).astype("Int64").to_numpy(),
        "committing_transaction": pd.Series(at_start("committing_transaction")).astype("Int64").to_numpy(),
        "own_checkpoint": own > 0, "own_checkpoints": own, "background_checkpoints": background,
    }


def _stall_table(st, off, fill):
    """The stall table (columns stall_columns()) from the selected calls ``st``, their
    off-CPU columns (_offcpu_columns) and fill columns (_fill_columns)."""
    n = len(st)
    lat_ns = st["latency_ns"].to_numpy()
    cols = {c: st[c] for c in ["ts_ns", "end_ns"]}
    cols["latency_ms"] = lat_ns / 1e6
    cols.update({c: st[c] for c in ["tid", "pid", "comm", "syscall", "ret", "dev", "handles"]})
    # a handle wait outside traced calls (syscall journal_start): what its task was doing
    cols["context"] = st["context"] if "context" in st else pd.Series([None] * n, index=st.index, dtype="object")
    cols["cause"] = pd.Categorical(off["primary"], categories=CAUSES)
    cols["cause_label"] = pd.array(off["label"], dtype="str") if n else off["label"]  # an empty table: object
    cols["offcpu_ms"] = off["off_ns"] / 1e6
    cols["oncpu_ms"] = np.maximum(lat_ns - off["off_ns"], 0) / 1e6
    for i, c in enumerate(CAUSES):
        cols[f"{c}_ms"] = off["by"][:, i].astype("float64") / 1e6
    cols["queued_ms"] = off["queued_ns"].astype("float64") / 1e6
    cols["queued_behind"] = pd.array(off["queued_behind"], dtype="str") if n else off["queued_behind"]
    cols["worker_ms"] = off["worker_ns"].astype("float64") / 1e6
    cols["worker"] = pd.array(off["worker"], dtype="str") if n else off["worker"]
    cols["during_checkpoint_ms"] = off["during_cp_ns"].astype("float64") / 1e6
    cols["checkpoint_by"] = pd.array(off["cp_task"], dtype="str") if n else off["cp_task"]
    cols.update(fill)
    return pd.DataFrame(cols, index=pd.RangeIndex(n))[stall_columns()]


def _xfs_headroom(session, st, w=None):
    """A stall on an XFS: the headroom of its log-space waits ``w`` (xfs_logs.waits: the grant
    head's space left less the ticket's need, in % of the log) at its first wait and the
    lowest any wait started from, and ``forced`` when it waited for log space itself."""
    if not len(st) or not len(session.xfs_waits):
        return st
    if w is None:
        w = waits(session)
    w = w[w["in_traced_call"].astype(bool)]
    if not len(w):
        return st
    by_call = [w["tid"].astype("int64"), w["call_ts_ns"].astype("int64")]
    g = w.sort_values("ts_ns").groupby(by_call)["headroom_start_pct"]
    key = pd.MultiIndex.from_arrays([st["tid"].astype("int64"), st["ts_ns"].astype("int64")])
    first, low = g.first().reindex(key).to_numpy(), g.min().reindex(key).to_numpy()
    has = ~np.isnan(first)
    st.loc[has, "headroom_start_pct"] = first[has]
    st.loc[has, "min_headroom_pct"] = low[has]
    st.loc[has, "forced"] = True
    return st


def by_cause(stalls: pd.DataFrame) -> pd.DataFrame:
    """Per cause: ``count`` (stalls whose primary cause it is) and ``total_ms`` (off-CPU time
    inside stalls attributed to it).  Every cause has a row, zeros included."""
    count = stalls["cause"].value_counts().reindex(list(CAUSES), fill_value=0)
    total = pd.Series({c: float(stalls[f"{c}_ms"].sum()) for c in CAUSES})
    return pd.DataFrame({"count": count.astype("int64"), "total_ms": total}).rename_axis("cause")
