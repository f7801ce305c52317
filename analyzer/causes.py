"""Stall causes (the taxonomy of design.md) from blocking stacks and same-thread jbd2 events.

Rules, applied to a stack's frames (innermost first) in this order of precedence:

1. ``checkpoint`` if any frame is a checkpoint function (the task itself is making room in
   the journal; whatever it waits on below, buffer I/O or a commit, is part of that).
2. ``lock_buffer`` if any frame is ``__lock_buffer`` (the buffer I/O frames under it are the
   lock wait).
3. otherwise the innermost frame that belongs to ``transaction_wait``, ``commit_wait``,
   ``buffer_io`` or ``writeback_throttle`` names the cause;
4. else ``other``, labelled with the two innermost frames that are not scheduler functions
   (nor the tracing program's own ``bpf_*`` frames).

An off-CPU interval with ``runnable`` set is ``cpu`` whatever its stack.  An interval whose
stack is missing (``stack_id`` -1 or unknown) is ``checkpoint`` when a checkpoint fired in the
same thread during the call (see ``stalls.own_checkpoints``), else ``other`` (label
"stack not captured").
"""

#: Every cause name, in report order.
CAUSES = (
    "checkpoint",
    "transaction_wait",
    "commit_wait",
    "buffer_io",
    "lock_buffer",
    "writeback_throttle",
    "cpu",
    "other",
)

CHECKPOINT_FRAMES = (
    "__jbd2_log_wait_for_space",
    "jbd2_log_do_checkpoint",
    "jbd2_cleanup_journal_tail",
    "__jbd2_journal_clean_checkpoint_list",
    "jbd2_journal_shrink_checkpoint_list",
    "jbd2_journal_flush",
)

#: frame -> cause, for rule 3 (innermost match wins).
FRAME_CAUSES = {
    "wait_transaction_locked": "transaction_wait",
    "wait_transaction_switching": "transaction_wait",
    "add_transaction_credits": "transaction_wait",
    "jbd2_journal_wait_updates": "transaction_wait",
    "jbd2_journal_lock_updates": "transaction_wait",
    "jbd2_log_wait_commit": "commit_wait",
    "jbd2_complete_transaction": "commit_wait",
    "jbd2_journal_force_commit": "commit_wait",
    "__wait_on_buffer": "buffer_io",
    "bit_wait_io": "buffer_io",
    "folio_wait_bit": "buffer_io",
    "folio_wait_bit_common": "buffer_io",
    "folio_wait_writeback": "buffer_io",
    "__bread_slow": "buffer_io",
    "wait_on_page_bit_common": "buffer_io",
    "balance_dirty_pages": "writeback_throttle",
    "balance_dirty_pages_ratelimited_flags": "writeback_throttle",
}

LOCK_BUFFER_FRAMES = ("__lock_buffer",)

#: Scheduler and wait plumbing, skipped when naming an ``other`` stack.
SCHED_FRAMES = frozenset((
    "__schedule", "schedule", "schedule_preempt_disabled", "schedule_timeout", "io_schedule",
    "io_schedule_timeout", "preempt_schedule", "preempt_schedule_common", "preempt_schedule_irq",
    "__cond_resched", "_cond_resched", "schedule_hrtimeout_range", "schedule_hrtimeout_range_clock",
    "out_of_line_wait_on_bit", "__wait_on_bit", "__wait_on_bit_lock", "out_of_line_wait_on_bit_lock",
    "wait_for_completion", "__wait_for_common", "wait_for_common", "wait_for_completion_io",
    "rwsem_down_read_slowpath", "rwsem_down_write_slowpath", "__mutex_lock", "mutex_lock",
    "__mutex_lock_slowpath", "down_read", "down_write", "finish_task_switch",
))

_RANK = {c: i for i, c in enumerate(CAUSES)}


def _base(frame):
    """``func+0x1a/0x40 [mod]`` -> ``func`` (the recorder stores bare names; be tolerant)."""
    return frame.split("+", 1)[0].split(" ", 1)[0]


def stack_causes(stacks):
    """Classify every stack.

    ``stacks``: DataFrame(stack_id int32, frames list of str, innermost first).
    Returns DataFrame(stack_id, cause, label): ``label`` is the deciding frame, or for
    ``other`` the two innermost non-scheduler frames joined by " <- ".  Vectorized over the
    exploded frames: one row per (stack, depth)."""
    import numpy as np
    import pandas as pd

    if len(stacks) == 0:
        return pd.DataFrame({"stack_id": pd.Series([], dtype="int32"),
                             "cause": pd.Series([], dtype="str"), "label": pd.Series([], dtype="str")})
    ex = stacks[["stack_id", "frames"]].explode("frames", ignore_index=True)
    ex = ex[ex["frames"].notna()].copy()
    ex["depth"] = ex.groupby("stack_id").cumcount()
    ex["frame"] = ex["frames"].astype("str").str.split("+", n=1).str[0].str.split(" ", n=1).str[0]
    cause = ex["frame"].map(FRAME_CAUSES)
    cause = cause.where(~ex["frame"].isin(LOCK_BUFFER_FRAMES), "lock_buffer")
    cause = cause.where(~ex["frame"].isin(CHECKPOINT_FRAMES), "checkpoint")
    ex["cause"] = cause
    # precedence: checkpoint anywhere, then lock_buffer anywhere, then innermost match
    prio = np.select([ex["cause"].eq("checkpoint"), ex["cause"].eq("lock_buffer"), ex["cause"].notna()],
                     [0, 1, 2], default=3)
    ex["key"] = prio * 1_000_000 + ex["depth"].to_numpy()
    matched = ex[prio < 3]
    best = matched.loc[matched.groupby("stack_id")["key"].idxmin(), ["stack_id", "cause", "frame"]]
    best = best.rename(columns={"frame": "label"})

    # labels for the rest: the two innermost non-scheduler frames
    rest = ex[~ex["frame"].isin(SCHED_FRAMES) & ~ex["frame"].str.startswith("bpf_")]
    rest = rest[rest.groupby("stack_id").cumcount() < 2]
    other_label = rest.groupby("stack_id")["frame"].agg(" <- ".join)

    out = pd.DataFrame({"stack_id": stacks["stack_id"].to_numpy()})
    out = out.merge(best, on="stack_id", how="left")
    out["label"] = out["label"].fillna(out["stack_id"].map(other_label)).fillna("empty stack")
    out["cause"] = out["cause"].fillna("other")
    out["stack_id"] = out["stack_id"].astype("int32")
    return out.drop_duplicates("stack_id").reset_index(drop=True)


def classify_stack(frames):
    """The cause of one stack given as a list of frames (innermost first): a convenience
    wrapper over :func:`stack_causes` for notebooks and tests."""
    import pandas as pd

    r = stack_causes(pd.DataFrame({"stack_id": [0], "frames": [list(frames)]}))
    return r["cause"].iloc[0]


def offcpu_causes(offcpu, stacks, own_checkpoint_keys=None):
    """Give every off-CPU interval its cause.

    ``offcpu``: the session's offcpu table.  ``own_checkpoint_keys``: DataFrame(tid,
    call_ts_ns) of calls in whose own thread a checkpoint ran (used for intervals without a
    stack).  Returns a copy of ``offcpu`` with ``cause`` and ``label`` columns added."""
    import pandas as pd

    sc = stack_causes(stacks)
    out = offcpu.merge(sc, on="stack_id", how="left")
    nostack = out["cause"].isna()
    if nostack.any():
        out.loc[nostack, "cause"] = "other"
        out.loc[nostack, "label"] = "stack not captured"
        if own_checkpoint_keys is not None and len(own_checkpoint_keys):
            k = own_checkpoint_keys[["tid", "call_ts_ns"]].drop_duplicates().assign(_own=True)
            m = out[["tid", "call_ts_ns"]].merge(k, on=["tid", "call_ts_ns"], how="left")["_own"]
            own = nostack & m.fillna(False).astype(bool).to_numpy()
            out.loc[own, "cause"] = "checkpoint"
            out.loc[own, "label"] = "checkpoint in own thread (stack not captured)"
    run = out["runnable"].astype(bool)
    out.loc[run, "cause"] = "cpu"
    out.loc[run, "label"] = "runnable"
    out["cause"] = pd.Categorical(out["cause"], categories=CAUSES)
    return out
