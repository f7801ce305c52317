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
"""

import numpy as np
import pandas as pd

#: links followed from a wait to the task whose cause it takes
MAX_DEPTH = 4
#: causes an interval never passes on: they say nothing about what the lock holder did
NOT_INHERITED = frozenset(("other", "cpu"))


def queued_causes(offcpu, cause, label, checkpoint_events=None):
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
    cand = np.flatnonzero((cause == "other") & ~np.isnan(waker) & (waker != tid))
    if not len(cand):
        return cause, label, behind
    cp = checkpoint_events if checkpoint_events is not None and len(checkpoint_events) else None
    # One time line per thread, threads end to end: a thread's intervals (which do not
    # overlap) and its checkpoints are found with one searchsorted for every wait at once.
    times = [start, end, wake[~np.isnan(wake)].astype("int64"), wcall[~np.isnan(wcall)].astype("int64")]
    if cp is not None:
        times.append(cp["ts_ns"].to_numpy(dtype="int64"))
    threads = np.unique(np.concatenate([tid, waker[cand].astype("int64")]
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
        # the waker's intervals overlapping [lo, hi]: ending after lo, starting before hi
        j0 = np.searchsorted(s_end, line(w, lo), side="right")
        j1 = np.searchsorted(s_start, line(w, hi), side="left")
        n = np.maximum(j1 - j0, 0)
        got = np.full(len(pending), None, dtype=object)
        if n.sum():
            which = np.repeat(np.arange(len(pending)), n)
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
