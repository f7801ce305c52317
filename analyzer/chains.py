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

    # each thread's intervals in time order (a thread's intervals do not overlap)
    order = np.lexsort((start, tid))
    s_tid, s_start, s_end = tid[order], start[order], end[order]
    bounds = {}
    if len(order):
        cut = np.flatnonzero(np.r_[True, s_tid[1:] != s_tid[:-1], True])
        bounds = {int(s_tid[a]): (a, b) for a, b in zip(cut[:-1], cut[1:])}
    cps = {}
    if checkpoint_events is not None and len(checkpoint_events):
        ev = checkpoint_events.sort_values("ts_ns")
        for t, g in ev.groupby(ev["tid"].to_numpy(dtype="int64")):
            cps[int(t)] = g["ts_ns"].to_numpy(dtype="int64")

    own_label = label.copy()
    pending = cand
    for _ in range(MAX_DEPTH):
        done = []
        for i in pending.tolist():
            w = int(waker[i])
            lo, hi = start[i], int(wake[i]) if not np.isnan(wake[i]) else end[i]
            got = None
            span = bounds.get(w)
            if span is not None:
                a, b = span
                # the waker's intervals overlapping [lo, hi]: ends after lo, starts before hi
                j0 = a + np.searchsorted(s_end[a:b], lo, side="right")
                j1 = a + np.searchsorted(s_start[a:b], hi, side="left")
                if j1 > j0:
                    rows = order[j0:j1]
                    ok = np.array([c not in NOT_INHERITED for c in cause[rows]], dtype=bool)
                    if ok.any():
                        rows = rows[ok]
                        ov = np.minimum(end[rows], hi) - np.maximum(start[rows], lo)
                        tot = pd.Series(ov).groupby(cause[rows]).sum()
                        got = str(tot.idxmax())
            if got is None and w in cps:
                from_ns = min(lo, int(wcall[i])) if not np.isnan(wcall[i]) else lo
                ts = cps[w]
                if np.searchsorted(ts, hi, side="right") > np.searchsorted(ts, from_ns, side="left"):
                    got = "checkpoint"
            if got is not None:
                done.append((i, got))
        if not done:
            break
        for i, got in done:  # applied after the pass: one link per pass
            cause[i] = got
            behind[i] = f"{wcomm[i]} {int(waker[i])}"
            label[i] = f"queued behind {behind[i]} in {own_label[i]}"
        pending = np.array(sorted(set(pending.tolist()) - {i for i, _ in done}), dtype="int64")
        if not len(pending):
            break
    return cause, label, behind
