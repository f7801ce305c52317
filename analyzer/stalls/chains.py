"""Wait chains: an off-CPU interval queued behind another task takes that task's cause.

A task that checkpoints holds the locks of its call (a directory's i_rwsem in unlink or
create) while it writes the journal's blocks home; the tasks that need those locks sleep in
``rwsem_down_write_slowpath`` or ``__mutex_lock``, stacks that name no cause (``other``).
The recorder keeps, for each off-CPU interval, who woke it (``sched_waking``: the offcpu
table's ``waker_*`` columns). :func:`queued_causes` gives an interval whose own stack names
no cause the cause of what its waker was doing while it waited:

1. the waker's own off-CPU intervals that overlap the wait (from the wait's start to its
   wakeup), by cause: the cause with the most overlapping time among those that name one
   (not ``other``, not ``cpu``) is inherited;
2. else a forced checkpoint the waker ran (a ``checkpoint`` jbd2 event in its thread) from
   the start of the waker's traced call (or of the wait) to the wakeup: ``checkpoint``.

Inherited intervals pass their cause on in turn (A waits for B, which waits for C, which
checkpoints), up to :data:`MAX_DEPTH` links.  A waker seen only in an interrupt (an I/O
completion) names the task it interrupted: that is why only intervals no stack explains
inherit, and only from what the waker's own records show.

:func:`worker_causes` does the same for a wait on a kernel worker (``__flush_work`` for XFS's
inodegc worker or its flush of delayed allocations, a completion): the worker is in no traced
call, so its cause comes from its own records (:func:`worker_waits`): its log-space waits,
jbd2 thread checkpoints, and the off-CPU intervals the recorder keeps of workers inside the
filesystems' work items, classified by their stacks; it runs before
:func:`queued_causes`. :func:`checkpoint_overlap` ties a wait on the device's queue to another
task's checkpoint writing home on the same device, without changing its cause.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from jstall.analyzer.stalls.causes import interval_causes

#: links followed from a wait to the task whose cause it takes
MAX_DEPTH = 4
#: causes an interval never passes on: they say nothing about what the lock holder did
NOT_INHERITED = frozenset(("other", "cpu"))
#: causes a wait chain refines: no cause named, or a wait for a kernel worker's work
REFINED = ("other", "workqueue")


def queued_causes(offcpu: pd.DataFrame, cause: np.ndarray, label: np.ndarray,
                  checkpoint_events: pd.DataFrame | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Causes of off-CPU intervals after wait chains.

    ``offcpu``: the session's offcpu table (``ts_ns``, ``offcpu_ns``, ``tid``, ``comm`` and the
    ``waker_*`` columns; a table without them, from an older session, changes nothing);
    ``cause``, ``label``: each row's own cause and label (object arrays, from the stack);
    ``checkpoint_events``: DataFrame(ts_ns, tid) of ``checkpoint`` jbd2 events, or None.

    Returns ``(cause, label, behind)``: new object arrays; ``behind`` holds, for each
    interval that inherited its cause, the task it queued behind as ``"comm tid"`` (the
    direct waker), else None.  ``label`` of such an interval reads
    ``"queued behind fs_mark 4121 in do_unlinkat <- __x64_sys_unlink"``."""
    cause = np.array(cause, dtype=object)
    label = np.array(label, dtype=object)
    n = len(offcpu)
    behind = np.full(n, None, dtype=object)
    if not n or "waker_tid" not in offcpu:
        return cause, label, behind
    tid = offcpu["tid"].to_numpy(dtype="int64")
    start = offcpu["ts_ns"].to_numpy(dtype="int64")
    end = start + offcpu["offcpu_ns"].to_numpy(dtype="int64")
    waker = offcpu["waker_tid"].to_numpy(dtype="float64", na_value=np.nan)
    wake = offcpu["wake_ts_ns"].to_numpy(dtype="float64", na_value=np.nan)
    wcall = offcpu["waker_call_ts_ns"].to_numpy(dtype="float64", na_value=np.nan)
    wcomm = offcpu["waker_comm"].to_numpy(dtype=object, na_value=None)
    cand = np.flatnonzero(np.isin(cause, REFINED) & ~np.isnan(waker) & (waker != tid))
    if not len(cand):
        return cause, label, behind
    cp = checkpoint_events if checkpoint_events is not None and len(checkpoint_events) else None
    line = _thread_line(tid, start, end, wake, wcall, waker[cand].astype("int64"), cp)
    order = np.lexsort((start, tid))
    s_start, s_end = line(tid[order], start[order]), line(tid[order], end[order])
    cp_line = np.sort(line(cp["tid"].to_numpy(dtype="int64"), cp["ts_ns"].to_numpy(dtype="int64"))) \
        if cp is not None else None

    own_label = label.copy()
    pending = cand
    for _ in range(MAX_DEPTH):
        w = waker[pending].astype("int64")
        lo = start[pending]
        hi = np.where(np.isnan(wake[pending]), end[pending], np.nan_to_num(wake[pending]).astype("int64"))
        got = _overlapping_cause(cause, start, end, order, (s_start, s_end), line(w, lo), line(w, hi), lo, hi)
        if cp_line is not None:
            # no interval of the waker's says: a forced checkpoint in its thread from the start
            # of its call (or of the wait) to the wakeup
            call = wcall[pending]
            from_ns = np.where(np.isnan(call), lo, np.minimum(lo, np.nan_to_num(call).astype("int64")))
            has = np.searchsorted(cp_line, line(w, hi), side="right") > np.searchsorted(cp_line, line(w, from_ns),
                                                                                          side="left")
            got[(got == None) & has] = "checkpoint"  # noqa: E711 (element-wise)
        done = got != None  # noqa: E711 (element-wise)
        if not done.any():
            break
        for i, c in zip(pending[done].tolist(), got[done].tolist()):  # applied after the pass: one link per pass
            cause[i] = c
            behind[i] = f"{wcomm[i]} {int(waker[i])}"
            label[i] = f"queued behind {behind[i]} in {own_label[i]}"
        pending = pending[~done]
        if not len(pending):
            break
    return cause, label, behind


def _thread_line(tid, start, end, wake, wcall, wakers, cp):
    """``line(thread, t)``: one time line per thread, threads end to end, so that a thread's
    intervals (which do not overlap) and its checkpoints are found with one searchsorted for
    every wait at once; over the threads of ``tid``, ``wakers`` and ``cp`` (checkpoint
    events, or None) and the times of the intervals, wakeups, waker calls and checkpoints."""
    times = [start, end, wake[~np.isnan(wake)].astype("int64"), wcall[~np.isnan(wcall)].astype("int64")]
    if cp is not None:
        times.append(cp["ts_ns"].to_numpy(dtype="int64"))
    threads = np.unique(np.concatenate([tid, wakers]
                                       + ([cp["tid"].to_numpy(dtype="int64")] if cp is not None else [])))
    t0 = min(int(t.min()) for t in times if len(t))
    span = max(int(t.max()) for t in times if len(t)) - t0 + 2
    ranks = None
    if len(threads) * span >= 2**62:  # too long a session for ns on one line: times by rank
        ranks = np.unique(np.concatenate(times))   # (every time a query uses is among them)
        span = len(ranks) + 1

    def line(thread, t):
        at = np.searchsorted(ranks, t) if ranks is not None else np.asarray(t, dtype="int64") - t0 + 1
        return np.searchsorted(threads, thread).astype("int64") * span + at

    return line


def _overlapping_cause(cause, start, end, order, sorted_lines, line_lo, line_hi, lo, hi):
    """For each wait [lo, hi] (``line_lo``, ``line_hi``: its ends on its waker's time line),
    the cause the waker's intervals overlapping it held for the most time, among those passed
    on (not NOT_INHERITED), else None. ``order`` sorts the intervals by thread and start;
    ``sorted_lines``: their (start, end) on the time line in that order."""
    s_start, s_end = sorted_lines
    # the waker's intervals overlapping [lo, hi]: ending after lo, starting before hi
    j0 = np.searchsorted(s_end, line_lo, side="right")
    j1 = np.searchsorted(s_start, line_hi, side="left")
    n = np.maximum(j1 - j0, 0)
    got = np.full(len(lo), None, dtype=object)
    if n.sum():
        which = np.repeat(np.arange(len(lo)), n)
        rows = order[np.repeat(j0, n) + (np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n))]
        rc = cause[rows]
        ok = np.array([c not in NOT_INHERITED for c in rc], dtype=bool)
        if ok.any():
            which, rows, rc = which[ok], rows[ok], rc[ok]
            ov = np.minimum(end[rows], hi[which]) - np.maximum(start[rows], lo[which])
            tot = pd.DataFrame({"w": which, "c": rc, "ov": ov}).groupby(["w", "c"], sort=True)["ov"].sum()
            best = tot.reset_index().sort_values(["w", "ov"], ascending=[True, False], kind="stable") \
                .drop_duplicates("w")
            got[best["w"].to_numpy()] = best["c"].to_numpy(dtype=object)
    return got


#: a kernel thread's log-space wait (xfs_waits.context): a worker's own record of its wait
KERNEL_THREAD = "kernel thread"


def worker_waits(xfs_waits: pd.DataFrame | None = None, jbd2_events: pd.DataFrame | None = None,
                 worker_offcpu: pd.DataFrame | None = None, stacks: pd.DataFrame | None = None) -> pd.DataFrame:
    """What kernel workers waited on, from their own records: DataFrame(tid, comm, ts_ns,
    end_ns, cause, work), one row per wait.

    - ``log_space``: an XFS log-space wait (``xfs_waits``) of a kernel thread (``context``
      "kernel thread": XFS's inodegc workers inactivating unlinked inodes, the log worker);
    - ``checkpoint``: a ``checkpoint`` jbd2 event of jbd2's own thread (``jbd2_thread``), a
      moment (``end_ns`` = ``ts_ns``);
    - the cause of each off-CPU interval of a worker inside a work item of the filesystems'
      code (``worker_offcpu``, classified by its stack in ``stacks``), ``work`` its work
      function; intervals that name no cause (``other``, ``cpu``) are left out, and so are
      its log-space ones where ``xfs_waits`` measured them.

    Any table may be None or lack rows."""
    parts = []
    measured = xfs_waits is not None and len(xfs_waits) and "context" in xfs_waits
    if measured:
        w = xfs_waits[xfs_waits["context"].to_numpy(dtype=object) == KERNEL_THREAD]
        parts.append(pd.DataFrame({"tid": w["tid"].to_numpy(dtype="int64"),
                                   "comm": w["comm"].to_numpy(dtype=object),
                                   "ts_ns": w["ts_ns"].to_numpy(dtype="int64"),
                                   "end_ns": w["end_ns"].to_numpy(dtype="int64"),
                                   "cause": "log_space", "work": None}))
    if jbd2_events is not None and len(jbd2_events):
        ev = jbd2_events[(jbd2_events["event"].to_numpy(dtype=object) == "checkpoint")
                         & jbd2_events["jbd2_thread"].to_numpy(dtype=bool)]
        ts = ev["ts_ns"].to_numpy(dtype="int64")
        parts.append(pd.DataFrame({"tid": ev["tid"].to_numpy(dtype="int64"),
                                   "comm": ev["comm"].to_numpy(dtype=object),
                                   "ts_ns": ts, "end_ns": ts, "cause": "checkpoint", "work": None}))
    if worker_offcpu is not None and len(worker_offcpu) and stacks is not None:
        wo = worker_offcpu
        cause, _ = interval_causes(wo["stack_id"].to_numpy(), wo["tid"].to_numpy(), wo["work_ts_ns"].to_numpy(),
                                   wo["runnable"].to_numpy(dtype=bool), stacks)
        keep = ~np.isin(cause, tuple(NOT_INHERITED) + (("log_space",) if measured else ()))
        wo = wo[keep]
        start = wo["ts_ns"].to_numpy(dtype="int64")
        parts.append(pd.DataFrame({"tid": wo["tid"].to_numpy(dtype="int64"),
                                   "comm": wo["comm"].to_numpy(dtype=object),
                                   "ts_ns": start, "end_ns": start + wo["offcpu_ns"].to_numpy(dtype="int64"),
                                   "cause": cause[keep], "work": wo["work_function"].to_numpy(dtype=object)}))
    cols = {"tid": "int64", "comm": object, "ts_ns": "int64", "end_ns": "int64", "cause": object, "work": object}
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in cols.items()})
    return pd.concat(parts, ignore_index=True).astype(cols)


def worker_causes(offcpu: pd.DataFrame, cause: np.ndarray, label: np.ndarray,
                  waits: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Causes of off-CPU intervals that waited for a kernel worker.

    A call that waits for a kernel worker's work (``__flush_work`` for XFS's inodegc worker
    in ``destroy_inode``, a completion, an ext4 workqueue, jbd2's thread) sleeps in a stack
    that names no cause (``other``) or only the worker's (``workqueue``) and is woken by the
    worker (``sched_waking``: the offcpu table's ``waker_*`` columns). Its worker's own waits
    (``waits``, :func:`worker_waits`) that overlap the interval, from its start to its wakeup,
    give it their cause: the cause with the most overlapping time (a moment, a checkpoint of
    jbd2's thread, counts when it lies in the interval and no wait overlaps it). Where none
    overlaps (the work not yet started, the worker on a CPU, a lock it held while it ran), the
    interval waited for the worker's work: ``workqueue``, the worker named all the same.

    Returns ``(cause, label, worker)``: new object arrays; ``worker`` names the worker
    (``"comm tid"``) of each interval that took its cause, else None; its ``label`` reads
    ``"through worker kworker/0:1 87 (xfs_inodegc_worker) in __flush_work <- destroy_inode"``
    (the work function where the worker's records name one).  Run before
    :func:`queued_causes`, so that a task queued behind one that waited for a worker takes
    the worker's cause in turn."""
    cause = np.array(cause, dtype=object)
    label = np.array(label, dtype=object)
    n = len(offcpu)
    worker = np.full(n, None, dtype=object)
    if not n or "waker_tid" not in offcpu or waits is None or not len(waits):
        return cause, label, worker
    tid = offcpu["tid"].to_numpy(dtype="int64")
    waker = offcpu["waker_tid"].to_numpy(dtype="float64", na_value=np.nan)
    known = np.isin(np.nan_to_num(waker, nan=-1).astype("int64"), waits["tid"].to_numpy())
    cand = np.flatnonzero(np.isin(cause, REFINED) & ~np.isnan(waker) & (waker != tid) & known)
    if not len(cand):
        return cause, label, worker
    lo = offcpu["ts_ns"].to_numpy(dtype="int64")[cand]
    end = lo + offcpu["offcpu_ns"].to_numpy(dtype="int64")[cand]
    wake = offcpu["wake_ts_ns"].to_numpy(dtype="float64", na_value=np.nan)[cand]
    hi = np.where(np.isnan(wake), end, np.nan_to_num(wake).astype("int64"))
    comm = offcpu["waker_comm"].to_numpy(dtype=object, na_value=None)
    own = label.copy()

    def through(k, c, item=""):
        worker[k] = f"{comm[k]} {int(waker[k])}"
        label[k] = f"through worker {worker[k]}{item} in {own[k]}"
        cause[k] = c

    # woken by a worker none of whose records explains the wait (a flush of its work, a lock
    # it held while it ran): a wait for the worker's work, the worker named
    for k in cand:
        through(k, "workqueue")
    over = _overlapping(waits, waker[cand].astype("int64"), lo, hi)
    if not len(over):
        return cause, label, worker
    tot = over.groupby(["w", "c"], sort=True)["ov"].sum().reset_index()
    best = tot.sort_values(["w", "ov"], ascending=[True, False], kind="stable").drop_duplicates("w")
    # the work function behind most of the chosen cause's time ("": the worker's own records
    # name none)
    fn = over.merge(best[["w", "c"]], on=["w", "c"]).groupby(["w", "work"], sort=True)["ov"].sum().reset_index() \
        .sort_values(["w", "ov"], ascending=[True, False], kind="stable").drop_duplicates("w")
    fn = dict(zip(fn["w"].tolist(), fn["work"].tolist()))
    for i, c in zip(best["w"].tolist(), best["c"].tolist()):
        through(cand[i], c, f" ({fn[i]})" if fn.get(i) else "")
    return cause, label, worker


def _overlapping(waits: pd.DataFrame, w: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> pd.DataFrame:
    """DataFrame(w, c, work, ov): for each interval ``i`` (worker thread ``w[i]``, from
    ``lo[i]`` to ``hi[i]``), each of that worker's ``waits`` overlapping it: its cause, work
    function ("" for none) and overlap in ns (0 for a moment inside)."""
    # the worker's waits by (thread, start); the waits overlapping [lo, hi] are within one
    # run, found by two searchsorted on a (thread, time rank) key: from the first whose end
    # so far (a thread's waits may nest: a log-space wait holds its off-CPU intervals) is at
    # or after lo, to the last starting at or before hi; those that end before lo are dropped
    ev = waits.sort_values(["tid", "ts_ns"], kind="stable")
    e_tid, e_start, e_end = (ev[c].to_numpy(dtype="int64") for c in ("tid", "ts_ns", "end_ns"))
    e_reach = ev.groupby("tid", sort=False)["end_ns"].cummax().to_numpy(dtype="int64")
    ranks = np.unique(np.concatenate([e_start, e_end, lo, hi]))
    threads = np.unique(e_tid)

    def key(thread, t):
        at = np.searchsorted(threads, thread).astype("int64")
        return at * (len(ranks) + 1) + np.searchsorted(ranks, t)

    j0 = np.searchsorted(key(e_tid, e_reach), key(w, lo), side="left")   # reaches lo
    j1 = np.searchsorted(key(e_tid, e_start), key(w, hi), side="right")  # starts at or before hi
    cnt = np.maximum(j1 - j0, 0)
    which = np.repeat(np.arange(len(w)), cnt)
    rows = np.repeat(j0, cnt) + (np.arange(cnt.sum()) - np.repeat(np.cumsum(cnt) - cnt, cnt))
    ov = np.minimum(e_end[rows], hi[which]) - np.maximum(e_start[rows], lo[which])
    ok = ov >= 0
    work = pd.Series(ev["work"].to_numpy(dtype=object)[rows[ok]], dtype=object).fillna("")
    return pd.DataFrame({"w": which[ok], "c": ev["cause"].to_numpy(dtype=object)[rows[ok]], "work": work,
                         "ov": ov[ok]})


#: waits on the device's queue: a checkpoint writing home on the same device lengthens them
DEVICE_QUEUE = ("data_writeback", "commit_wait", "device_flush")
#: labels of a checkpoint interval in which the task itself wrote home (not one waiting for
#: another's checkpoint in __jbd2_log_wait_for_space)
WRITING_HOME = ("jbd2_log_do_checkpoint", "jbd2_cleanup_journal_tail", "jbd2_journal_flush")


def checkpoint_overlap(offcpu: pd.DataFrame, cause: np.ndarray, label: np.ndarray,
                       inherited: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """How much of each device-queue wait ran while another task's checkpoint was writing home
    on the same device.

    A task forced to checkpoint writes the journal's blocks home (its own off-CPU intervals of
    cause ``checkpoint`` labelled with a frame of :data:`WRITING_HOME`, not ``inherited`` from
    another task); another task's waits on the device's queue (:data:`DEVICE_QUEUE`) on the
    same ``dev`` meanwhile queue behind those writes. Their cause stays their own (the wait is
    on the device); this ties them to the checkpoint.

    ``cause``, ``label``: each interval's, after the chains; ``inherited``: True where the
    interval took its cause from another task or a worker. Returns ``(overlap_ns, by)``: per
    interval the ns of it another task's checkpoint was writing home (int64), and that task
    as ``"comm tid"`` (the one with the most of it), else None."""
    n = len(offcpu)
    overlap = np.zeros(n, dtype="int64")
    by = np.full(n, None, dtype=object)
    if not n:
        return overlap, by
    cause = np.asarray(cause, dtype=object)
    writing = (cause == "checkpoint") & ~np.asarray(inherited, dtype=bool) \
        & np.isin(np.asarray(label, dtype=object), WRITING_HOME)
    victim = np.isin(cause, DEVICE_QUEUE)
    if not writing.any() or not victim.any():
        return overlap, by
    dev = offcpu["dev"].astype("string").fillna("").to_numpy(dtype=object)   # no device: ""
    tid = offcpu["tid"].to_numpy(dtype="int64")
    start = offcpu["ts_ns"].to_numpy(dtype="int64")
    end = start + offcpu["offcpu_ns"].to_numpy(dtype="int64")
    comm = offcpu["comm"].to_numpy(dtype=object)
    best = np.zeros(n, dtype="int64")
    # the device-queue waits of each device, by start, with the longest one's length: those
    # in a checkpointing task's window
    victims = {}
    vi = np.flatnonzero(victim)
    for d in set(dev[vi].tolist()):
        v = vi[dev[vi] == d]
        v = v[np.argsort(start[v], kind="stable")]
        victims[d] = (v, start[v], int((end[v] - start[v]).max()))
    # one pass per checkpointing task and device
    w = np.flatnonzero(writing)
    tasks = pd.DataFrame({"dev": dev[w], "tid": tid[w], "i": w}).groupby(["dev", "tid"], sort=True)["i"]
    for (d, t), mine in tasks:
        if d not in victims:
            continue
        mine = mine.to_numpy()
        mine = mine[np.argsort(start[mine], kind="stable")]
        s0, s1 = start[mine], end[mine]
        cum = np.concatenate([[0], np.cumsum(s1 - s0)])

        def covered(x):
            """ns of this task's writing intervals (one thread's: disjoint) before time x"""
            i = np.searchsorted(s0, x, side="right") - 1
            inside = np.clip(x - s0[np.maximum(i, 0)], 0, (s1 - s0)[np.maximum(i, 0)])
            return np.where(i >= 0, cum[np.maximum(i, 0)] + inside, 0)

        # the waits that can overlap this task's writing: begun before its last ended and
        # after its first began less the longest wait (one begun earlier ended before it)
        v, vs, longest = victims[d]
        v = v[np.searchsorted(vs, s0[0] - longest, side="left"):np.searchsorted(vs, s1.max(), side="right")]
        v = v[tid[v] != t]
        if not len(v):
            continue
        ov = covered(end[v]) - covered(start[v])
        overlap[v] += ov
        more = ov > best[v]
        best[v[more]] = ov[more]
        by[v[more]] = f"{comm[mine[0]]} {t}"
    return overlap, by
