"""Stall causes: the registry (one :class:`Cause` per cause) and the stack classifier.

Everything that names, colours, explains or advises on a cause reads :data:`REGISTRY`
(the classifier, the stall table's ``<cause>_ms`` columns, figures, the text summary and the
JSON, ``jstall analyze --help``, the recommendations and docs/analysis.md): adding a cause is
one entry here.  :func:`register` adds one at run time (a plug-in, a notebook, a test); the
derived tables below (``CAUSES``, ``BY_NAME``, ``FRAME_CAUSES``, ``COLOURS``) are updated in
place, so every module that imported them sees the new cause.

Rules, applied to a stack's frames (innermost first):

1. every frame is looked up in the frames of the registry; a matched frame carries its
   cause's ``precedence``;
2. the match with the lowest precedence wins wherever it sits in the stack (``checkpoint``
   0: the task itself is making room in the journal, so whatever it waits on below, buffer
   I/O, a commit or a cache flush, is part of that; ``lock_buffer`` 1: the buffer I/O under
   ``__lock_buffer`` is the lock wait); among matches of equal precedence the innermost wins;
3. no match: ``other``, labelled with the two innermost frames that are neither scheduler
   nor tracing plumbing (:func:`is_plumbing`).

An off-CPU interval with ``runnable`` set is ``cpu`` whatever its stack.  An interval whose
stack is missing (``stack_id`` -1 or unknown) is ``checkpoint`` when a checkpoint fired in the
same thread during the call (see ``stalls.own_checkpoints``), ``log_space`` when it overlaps a
log-space wait of its thread measured in xfs_waits (:func:`measured_log_space`), else
``other`` (label "stack not captured"). The verdicts (big enough, a remedy's need) never
rest on stacks: journals.checkpoint_waits judges the measured waits.

Generic wait frames (``folio_wait_bit_common``, ``wait_for_completion_io_timeout``,
``submit_bio_wait``) name no cause by themselves: the frame above them says what was awaited
(``folio_wait_writeback`` data, ``blkdev_issue_flush`` a cache flush, ``__wait_on_buffer`` a
metadata block).

The registry is read by ``jstall analyze --help`` and the monitor, which do not load pandas:
the classifier's functions import it when they run.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    import numpy as np
    import pandas as pd


@dataclass(frozen=True)
class Cause:
    """One stall cause.  ``frames``: kernel functions whose presence in a blocking stack names
    it; ``precedence``: lower wins anywhere in the stack, equal precedence: innermost wins;
    ``colour``: for figures; ``explanation``: what the time was spent on (completes "the
    stall time was ..."); ``advice``: what removes it, in one sentence."""

    name: str
    frames: tuple
    precedence: int
    colour: str
    explanation: str
    advice: str


#: the precedence of generic waits (a kernel worker's): any other cause in the stack wins, and
#: the label is the two innermost frames that are not plumbing (whose wait it was), as for other
GENERIC = 3

#: Every cause, in report order.
REGISTRY = [
    Cause("checkpoint",
          ("__jbd2_log_wait_for_space", "jbd2_log_do_checkpoint", "jbd2_cleanup_journal_tail",
           "__jbd2_journal_clean_checkpoint_list", "jbd2_journal_shrink_checkpoint_list", "jbd2_journal_flush"),
          0, "#d62728",
          "checkpointing: the log was out of space and the task wrote checkpointed blocks home "
          "(__jbd2_log_wait_for_space)",
          "a journal large enough for the metadata the workload keeps in the log, fewer logged blocks "
          "(256-byte inodes for extended attributes), or checkpoint writes that do not compete with "
          "log writes (an external journal)"),
    Cause("log_space",
          ("xlog_grant_head_wait",),
          0, "#e6550d",
          "waiting for XFS log space: the transaction's reservation slept until xfsaild had written "
          "enough metadata home to move the log's tail (xlog_grant_head_wait)",
          "a larger log (mkfs.xfs -l size=; an internal log cannot grow later), or a log apart from the "
          "metadata it waits on (an external log, mkfs.xfs -l logdev=)"),
    Cause("iclog_space",
          ("xlog_state_get_iclog_space",),
          1, "#fd8d3c",
          "waiting for an XFS in-core log buffer: every one was being written (xlog_state_get_iclog_space)",
          "more and larger log buffers (mount -o logbufs=8,logbsize=256k) or a faster log device"),
    Cause("cil_throttle",
          ("xlog_cil_push_background", "xlog_cil_commit"),
          1, "#fdae6b",
          "waiting on XFS's committed item list: throttled while too much metadata waited to be logged, "
          "or while a push switched it to a new checkpoint (xlog_cil_commit, xlog_cil_push_background)",
          "a faster log device (an external log) or larger log buffers; the CIL's limit grows with the log"),
    Cause("log_force",
          ("xlog_wait_on_iclog", "xfs_log_force_seq", "__xfs_log_force_lsn"),
          2, "#756bb1",
          "waiting for the XFS log to reach the disk (fsync's log force: xfs_log_force_seq -> xlog_wait_on_iclog)",
          "fewer fsync calls or batching them, or a faster log device (an external log)"),
    Cause("transaction_wait",
          ("wait_transaction_locked", "wait_transaction_switching", "add_transaction_credits",
           "jbd2_journal_wait_updates", "jbd2_journal_lock_updates"),
          2, "#ff7f0e",
          "waiting for the running transaction to be locked or committed (start_this_handle)",
          "shorter commits: a faster journal device (an external journal), or fewer handles held open "
          "across slow operations"),
    Cause("commit_wait",
          ("jbd2_log_wait_commit", "jbd2_complete_transaction", "jbd2_journal_force_commit",
           "jbd2_fc_begin_commit"),
          2, "#9467bd",
          "waiting for a commit to reach the disk (fsync, sync: jbd2_log_wait_commit; with fast_commit, "
          "jbd2_fc_begin_commit waits for the full or fast commit under way)",
          "fast_commit (mkfs.ext4 -O fast_commit) when fsync drives the commits, or a faster journal device"),
    Cause("metadata_io",
          ("__wait_on_buffer", "bit_wait_io", "__bread_slow", "__bread_gfp", "sync_dirty_buffer",
           "__sync_dirty_buffer", "xfs_buf_iowait"),
          2, "#1f77b4",
          "waiting on a metadata block read or write (buffer I/O: __wait_on_buffer, XFS's xfs_buf_iowait)",
          "a device with more random-read/write IOPS for metadata, a warmer cache (more memory), or "
          "fewer metadata blocks touched per call"),
    Cause("data_writeback",
          ("folio_wait_writeback", "folio_wait_stable", "filemap_fdatawait", "filemap_fdatawait_range",
           "__filemap_fdatawait_range", "filemap_fdatawait_keep_errors", "filemap_fdatawait_range_keep_errors",
           "file_write_and_wait_range", "filemap_write_and_wait_range", "truncate_inode_pages_range",
           "truncate_inode_pages_final", "truncate_pagecache", "wait_on_page_writeback"),
          2, "#17becf",
          "waiting for the file's own data pages to be written (fsync's or truncate's writeback: "
          "file_write_and_wait_range -> folio_wait_writeback)",
          "less data per fsync (fsync less often or in the background: sync_file_range, io_uring), or "
          "bandwidth for the data device; these are the file's own pages, so no data= mount option shortens "
          "the wait (data=writeback only stops commits waiting for other files' data, and weakens crash "
          "consistency)"),
    Cause("device_flush",
          ("blkdev_issue_flush",),
          2, "#2ca02c",
          "waiting for the device's volatile write cache to be flushed (blkdev_issue_flush, "
          "submit_bio_wait for a PREFLUSH bio)",
          "a device whose write cache is non-volatile or flushes fast (power-loss protected SSD), fewer "
          "fsync calls, or batching them; never nobarrier on a cache that can lose writes"),
    Cause("enospc_flush",
          ("xfs_flush_inodes_worker", "xfs_flush_inodes"),
          1, "#393b79",
          "waiting for XFS to write back every file's delayed allocations: a reservation found no free "
          "blocks (ENOSPC) and XFS flushed the dirty data to give back what the delayed allocations held "
          "(xfs_flush_inodes, reached through its worker)",
          "dirty data written back sooner (a lower vm.dirty_expire_centisecs or vm.dirty_bytes) or more free "
          "space: each dirty delayed allocation holds back its blocks and worst-case metadata blocks until it "
          "is written, so many small dirty files can use up the free blocks before df shows the filesystem "
          "full"),
    Cause("lock_buffer",
          ("__lock_buffer",),
          1, "#8c564b",
          "waiting for jbd2 to release a buffer it was writing (__lock_buffer)",
          "faster commits (a faster journal device): the buffer is locked while jbd2 logs it"),
    Cause("writeback_throttle",
          ("balance_dirty_pages", "balance_dirty_pages_ratelimited_flags", "balance_dirty_pages_ratelimited"),
          2, "#e377c2",
          "dirty page throttling (balance_dirty_pages): the device could not keep up with the written data",
          "more write bandwidth, or a dirty limit the device can drain (vm.dirty_bytes, the bdi's max_ratio)"),
    Cause("workqueue",
          ("__flush_work", "__flush_workqueue", "drain_workqueue", "xfs_inodegc_flush", "xfs_inodegc_wait_all"),
          GENERIC, "#aec7e8",
          "waiting for a kernel worker's queued work (__flush_work: XFS's inodegc worker inactivates unlinked "
          "inodes, and an unlink that finds too many queued waits for it), where none of the worker's own "
          "recorded waits (log space, checkpoints, stacks naming a cause) explains the wait: the work waiting "
          "to start, or the worker's CPU time",
          "CPU time for the kernel's workers (fewer runnable tasks beside them); where the worker waits for log "
          "space, a larger log"),
    Cause("cpu", (), 3, "#7f7f7f",
          "waiting for a CPU (runnable but not running)",
          "fewer runnable tasks on these CPUs, or more CPUs for the workload"),
    Cause("other", (), 3, "#bcbd22",
          "blocked in other kernel paths (see the blocking frames)",
          "look at the blocking frames of the top stalls"),
]

#: name -> Cause
BY_NAME = {}
#: Every cause name, in report order.
CAUSES = []
#: frame -> cause name (every frame of the registry).
FRAME_CAUSES = {}
_PRECEDENCE = {}
#: cause -> colour, for figures.
COLOURS = {}


def _derive():
    """Fill the tables derived from REGISTRY (in place: importers hold the same objects)."""
    for table in (BY_NAME, FRAME_CAUSES, _PRECEDENCE, COLOURS):
        table.clear()
    CAUSES[:] = [c.name for c in REGISTRY]
    BY_NAME.update((c.name, c) for c in REGISTRY)
    FRAME_CAUSES.update((f, c.name) for c in REGISTRY for f in c.frames)
    _PRECEDENCE.update((c.name, c.precedence) for c in REGISTRY)
    COLOURS.update((c.name, c.colour) for c in REGISTRY)


_derive()


def register(cause: Cause, before: str | None = "cpu") -> Cause:
    """Add a :class:`Cause` to the registry, in report order before the cause named ``before``
    (``cpu`` and ``other`` stay last; None: at the end).  Returns the cause.  Raises
    ValueError for a name or a frame already registered."""
    if cause.name in BY_NAME:
        raise ValueError(f"cause {cause.name!r} is already registered")
    taken = [f for f in cause.frames if f in FRAME_CAUSES]
    if taken:
        raise ValueError(f"frames already name a cause: {', '.join(taken)}")
    at = CAUSES.index(before) if before in BY_NAME else len(REGISTRY)
    REGISTRY.insert(at, cause)
    _derive()
    return cause


def unregister(name: str) -> None:
    """Remove the cause ``name`` (one :func:`register` added) from the registry."""
    REGISTRY[:] = [c for c in REGISTRY if c.name != name]
    _derive()

#: Scheduler and wait plumbing, never a label (besides the prefixes of :func:`is_plumbing`).
SCHED_FRAMES = frozenset((
    "__schedule", "schedule", "preempt_schedule", "preempt_schedule_common", "preempt_schedule_irq",
    "__cond_resched", "_cond_resched", "out_of_line_wait_on_bit", "__wait_on_bit", "__wait_on_bit_lock",
    "out_of_line_wait_on_bit_lock", "wait_for_completion", "__wait_for_common", "wait_for_common",
    "wait_for_completion_io", "wait_for_completion_io_timeout", "wait_for_completion_timeout",
    "wait_for_completion_killable", "rwsem_down_read_slowpath", "rwsem_down_write_slowpath", "__mutex_lock",
    "mutex_lock", "__mutex_lock_slowpath", "down_read", "down_write", "finish_task_switch", "folio_wait_bit",
    "folio_wait_bit_common", "submit_bio_wait", "__submit_bio_wait", "do_nanosleep", "hrtimer_nanosleep",
    "perf_trace_run_bpf_submit", "ftrace_syscall_enter", "ftrace_syscall_exit",
))
#: Prefixes of tracing and scheduler plumbing frames.
PLUMBING_PREFIXES = ("__traceiter_", "trace_", "__trace_", "perf_trace_", "bpf_", "__bpf_", "__schedule",
                     "schedule", "io_schedule", "preempt_schedule", "__cond_resched", "finish_task_switch",
                     "rcu_note_context_switch", "__perf_event", "perf_event_")


def is_plumbing(frame: str) -> bool:
    """True for scheduler and tracing frames (``__schedule``, ``schedule*``, ``io_schedule*``,
    ``__traceiter_*``, ``trace_*``, ``bpf_*``, ...): never a stack's label."""
    return frame in SCHED_FRAMES or frame.startswith(PLUMBING_PREFIXES) or frame.startswith("bpf_prog_")


def describe() -> str:
    """One line per cause, ``name: explanation`` (for --help texts and docs)."""
    return "\n".join(textwrap.fill(c.explanation, 92, initial_indent=f"  {c.name:<19}", subsequent_indent=" " * 21)
                     for c in REGISTRY)


@lru_cache(maxsize=1 << 16)
def _frame(raw):
    """``(function, cause or None, precedence, is plumbing)`` of one stack frame as stored
    (``func+0x1a/0x40 [module]`` or plain ``func``); kept per distinct frame text, so each
    kernel function is looked up once per process whatever the number of stacks."""
    name = raw.split("+", 1)[0].split(" ", 1)[0]
    cause = FRAME_CAUSES.get(name)
    return name, cause, _PRECEDENCE[cause] if cause else 99, is_plumbing(name)


def _classify(frames):
    """``(cause, label)`` of one stack's frames (innermost first; the rules of the module
    docstring).  One pass over the frames; each distinct frame text is looked up once."""
    best = None  # (precedence, function, cause): the lowest precedence, innermost first
    other = []
    for raw in frames:
        if raw is None or (isinstance(raw, float) and math.isnan(raw)):  # a null frame is not a frame
            continue
        name, cause, prec, plumbing = _frame(str(raw))
        if cause is not None and (best is None or prec < best[0]):
            best = (prec, name, cause)
            if prec == 0:  # nothing takes precedence over it
                break
        if not plumbing and len(other) < 2:
            other.append(name)
    if best is not None:
        if best[0] == GENERIC and other:   # a generic wait: whose it is, as for other
            return best[2], " <- ".join(other)
        return best[2], best[1]
    return "other", " <- ".join(other) if other else "only scheduler/tracing frames"


def innermost_function(frames: Iterable[str]) -> str | None:
    """The function of a stack's innermost frame that is neither scheduler nor tracing
    plumbing (where the task went to sleep), as stored frames name it; None when there is
    none."""
    for raw in frames:
        if raw is None or (isinstance(raw, float) and math.isnan(raw)):
            continue
        name, _, _, plumbing = _frame(str(raw))
        if not plumbing:
            return name
    return None


def stack_causes(stacks: pd.DataFrame) -> pd.DataFrame:
    """Classify every stack.

    ``stacks``: DataFrame(stack_id int32, frames list of str, innermost first).
    Returns DataFrame(stack_id, cause, label), one row per distinct stack_id in first-seen
    order: ``label`` is the deciding frame, or for ``other`` the two innermost frames that are
    not plumbing joined by " <- ".  The stacks table holds each distinct stack once (a few
    hundred in a long session); frames are classified per distinct frame text
    (:func:`_frame`, cached), so the cost is one dictionary look-up per frame."""
    import pandas as pd

    if len(stacks) == 0:
        return pd.DataFrame({"stack_id": pd.Series([], dtype="int32"),
                             "cause": pd.Series([], dtype="str"), "label": pd.Series([], dtype="str")})
    ids = stacks["stack_id"].to_numpy()
    frames = {}
    for sid, f in zip(ids.tolist(), stacks["frames"].tolist()):  # one row per distinct stack
        have = frames.setdefault(sid, [])
        if f is not None and not (isinstance(f, float) and math.isnan(f)):
            have.extend(f)  # a stack id listed twice: its frames follow one another
    causes, labels = [], []
    for f in frames.values():
        c, lab = _classify(f)
        causes.append(c)
        labels.append(lab)
    return pd.DataFrame({"stack_id": pd.Series(list(frames), dtype="int32"), "cause": pd.Series(causes, dtype="str"),
                         "label": pd.Series(labels, dtype="object")})


def classify_stack(frames: Iterable[str]) -> str:
    """The cause of one stack given as a list of frames (innermost first): a convenience
    wrapper over :func:`stack_causes` for notebooks and tests."""
    import pandas as pd

    r = stack_causes(pd.DataFrame({"stack_id": [0], "frames": [list(frames)]}))
    return r["cause"].iloc[0]


#: an off-CPU interval's (cause, label) when the task was runnable (preempted), when its
#: stack was not captured, and when it was not but a checkpoint ran in the task's own thread
RUNNABLE = ("cpu", "runnable")
NO_STACK = ("other", "stack not captured")
OWN_CHECKPOINT_NO_STACK = ("checkpoint", "checkpoint in own thread (stack not captured)")
#: an interval without a stack during one of its thread's measured XFS log-space waits
LOG_SPACE_NO_STACK = ("log_space", "log-space wait, measured (stack not captured)")


def measured_log_space(cause: np.ndarray, label: np.ndarray, tid: np.ndarray, ts_ns: np.ndarray,
                       offcpu_ns: np.ndarray, waits: pd.DataFrame) -> None:
    """Refine, in place, the intervals :func:`interval_causes` left without a stack (``other``,
    "stack not captured") that overlap a log-space wait of their own thread measured directly
    (``waits``: the xfs_waits table, from the first sleep to the reservation's exit): their
    cause is ``log_space``. A kernel that loses stacks (PREEMPT_RT under load) loses no wait.
    ``cause``, ``label``: object arrays; the others: arrays of the offcpu table's columns."""
    import numpy as np

    if waits is None or not len(waits):
        return
    idx = np.flatnonzero(label == NO_STACK[1])
    if not len(idx):
        return
    tid = np.asarray(tid, dtype="int64")[idx]
    start = np.asarray(ts_ns, dtype="int64")[idx]
    order = np.lexsort((start, tid))
    idx, tid, start = idx[order], tid[order], start[order]
    end = start + np.asarray(offcpu_ns, dtype="int64")[idx]
    for wt, w0, w1 in zip(waits["tid"].to_numpy(dtype="int64"), waits["ts_ns"].to_numpy(dtype="int64"),
                          waits["end_ns"].to_numpy(dtype="int64")):
        lo, hi = np.searchsorted(tid, wt, "left"), np.searchsorted(tid, wt, "right")
        hit = idx[lo:hi][(start[lo:hi] < w1) & (end[lo:hi] > w0)]
        cause[hit], label[hit] = LOG_SPACE_NO_STACK


def interval_causes(stack_id: np.ndarray, tid: np.ndarray, call_ts_ns: np.ndarray, runnable: np.ndarray,
                    stacks: pd.DataFrame,
                    own_checkpoint_keys: pd.DataFrame | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Cause and label of off-CPU intervals given as numpy arrays (the columns of the
    offcpu table): ``(cause, label)``, two object arrays.  See :func:`offcpu_causes`."""
    import numpy as np
    import pandas as pd

    sc = stack_causes(stacks)
    at = pd.Index(sc["stack_id"].to_numpy()).get_indexer(stack_id)
    nostack = at < 0
    take = np.maximum(at, 0)
    cause = np.where(nostack, NO_STACK[0], sc["cause"].to_numpy(dtype=object)[take] if len(sc) else NO_STACK[0])
    label = np.where(nostack, NO_STACK[1], sc["label"].to_numpy(dtype=object)[take] if len(sc) else "")
    cause, label = cause.astype(object), label.astype(object)
    if nostack.any() and own_checkpoint_keys is not None and len(own_checkpoint_keys):
        k = pd.MultiIndex.from_arrays([own_checkpoint_keys["tid"].to_numpy(dtype="int64"),
                                       own_checkpoint_keys["call_ts_ns"].to_numpy(dtype="int64")])
        mine = pd.MultiIndex.from_arrays([np.asarray(tid, dtype="int64"),
                                          np.asarray(call_ts_ns, dtype="int64")]).isin(k)
        own = nostack & mine
        cause[own], label[own] = OWN_CHECKPOINT_NO_STACK
    run = np.asarray(runnable, dtype=bool)
    cause[run], label[run] = RUNNABLE
    return cause, label


def primary_cause(rows: list, own_checkpoint: bool = False) -> tuple[str, str, dict[str, float]]:
    """(cause, label, {cause: off-CPU seconds}) of one operation from its off-CPU intervals
    ``rows``: [(off-CPU ns, runnable, (stack cause, label) or None without a stack)], by the
    rules of :func:`interval_causes` (runnable: cpu; no stack: a checkpoint in the task's own
    thread, else other) and its primary cause (the largest share; a tie goes to the cause
    listed first in the taxonomy; the label of the cause's first interval).

    The monitor classifies each stall as it ends with this: plain Python, where the pandas
    version costs about 10 ms a call whatever the size. tests/test_monitor.py checks it
    against offcpu_causes."""
    if not rows:
        return "other", "on CPU (no off-CPU interval)", {}
    total, label = {}, {}
    for off, runnable, sc in rows:
        if runnable:
            cause, lab = RUNNABLE
        elif sc is not None:
            cause, lab = sc
        else:
            cause, lab = OWN_CHECKPOINT_NO_STACK if own_checkpoint else NO_STACK
        total[cause] = total.get(cause, 0) + off
        label.setdefault(cause, lab)
    best = max(total, key=lambda k: (total[k], -CAUSES.index(k)))
    return best, label[best], {k: v / 1e9 for k, v in total.items() if v}


def offcpu_causes(offcpu: pd.DataFrame, stacks: pd.DataFrame,
                  own_checkpoint_keys: pd.DataFrame | None = None) -> pd.DataFrame:
    """Give every off-CPU interval its cause.

    ``offcpu``: the session's offcpu table.  ``own_checkpoint_keys``: DataFrame(tid,
    call_ts_ns) of calls in whose own thread a checkpoint ran (used for intervals without a
    stack).  Returns a copy of ``offcpu`` (index reset) with ``cause`` (categorical over
    CAUSES) and ``label`` columns added."""
    import pandas as pd

    cause, label = interval_causes(offcpu["stack_id"].to_numpy(), offcpu["tid"].to_numpy(),
                                   offcpu["call_ts_ns"].to_numpy(), offcpu["runnable"].to_numpy(dtype=bool), stacks,
                                   own_checkpoint_keys)
    out = offcpu.reset_index(drop=True)
    return out.assign(cause=pd.Categorical(cause, categories=CAUSES), label=pd.Series(label, dtype=object))
