"""The session tables' columns (docs/session-format.md, schema version 1): the recorder
writes them, the analyzer checks them on load. Every column's unit is in its name.

Each table is an ordered list of ``(column, arrow type, nullable)``; ``SCHEMAS`` holds the
arrow schema each table is written with. Needs pyarrow only.
"""

from __future__ import annotations

import pyarrow as pa

#: The journal fill columns read from journal_t (see the format document), in jbd2_events,
#: log_tail and fill.
FILL_COLUMNS = (
    "free_blocks",
    "head_block",
    "tail_block",
    "first_block",
    "last_block",
    "journal_blocks",
    "max_transaction_blocks",
    "running_transaction",
    "committing_transaction",
    "committing_credits",
)
#: The commit phases jbd2_run_stats reports, in order (run_stats has <phase>_jiffies and _ns).
PHASES = ("wait", "request_delay", "running", "locked", "flushing", "logging")

_i32, _i64, _str, _bool = pa.int32(), pa.int64(), pa.string(), pa.bool_()

_FILL = [(name, _i64, True) for name in FILL_COLUMNS]
_TASK = [("tid", _i32, False), ("pid", _i32, False), ("comm", _str, False)]
#: who woke an off-CPU interval (sched_waking): when, the waking thread, its kernel stack and
#: its own traced call in flight (null: no wakeup seen, or the waker was in no traced call)
_WAKER = [("wake_ts_ns", _i64, True), ("waker_tid", _i32, True), ("waker_pid", _i32, True),
          ("waker_comm", _str, True), ("waker_stack_id", _i32, True), ("waker_call_ts_ns", _i64, True),
          ("waker_syscall", _str, True)]
#: who a jbd2 event fired in: inside a traced call; in a task the session traces
_WHO = [("in_traced_call", _bool, True), ("traced_task", _bool, True)]

COLUMNS = {
    "calls": [("ts_ns", _i64, False), ("latency_ns", _i64, False)] + _TASK + [
        ("syscall", _str, False), ("ret", _i64, False), ("dev", _str, True), ("handles", _i32, False),
        ("journal_free_blocks", _i64, True), ("journal_min_free_blocks", _i64, True),
        ("journal_log_blocks", _i64, True), ("journal_committing_credits", _i64, True),
        ("file", _str, True), ("cgroup_id", _i64, True),
        # a handle wait outside traced calls (syscall "journal_start"): what its task was doing
        ("context", _str, True),
    ],
    "call_histograms": [
        ("syscall", _str, False), ("dev", _str, True), ("bucket", _i32, False),
        ("low_ns", _i64, False), ("high_ns", _i64, False), ("count", _i64, False),
    ],
    "call_totals": [
        ("syscall", _str, False), ("dev", _str, True), ("count", _i64, False), ("errors", _i64, False),
        ("total_latency_ns", _i64, False), ("max_latency_ns", _i64, False),
    ],
    "offcpu": [("ts_ns", _i64, False), ("offcpu_ns", _i64, False)] + _TASK + [
        ("state", _i64, False), ("runnable", _bool, False), ("stack_id", _i32, False),
        ("call_ts_ns", _i64, False), ("syscall", _str, False), ("dev", _str, True),
    ] + _WAKER,
    # a kernel worker's off-CPU interval inside a work item of the filesystems' (or writeback's)
    # code: what a traced call waiting for the worker waited on in turn
    "worker_offcpu": [("ts_ns", _i64, False), ("offcpu_ns", _i64, False)] + _TASK + [
        ("state", _i64, False), ("runnable", _bool, False), ("stack_id", _i32, False),
        ("work_ts_ns", _i64, False), ("work_function", _str, True),
    ] + _WAKER,
    "stacks": [("stack_id", _i32, False), ("frames", pa.list_(_str), False)],
    "jbd2_events": [("ts_ns", _i64, False), ("event", _str, False), ("dev", _str, False),
                    ("transaction", _i64, True)] + _TASK + [
        ("jbd2_thread", _bool, False), ("result", _i64, True), ("write_flags", _i64, True),
        ("stall_ms", _i64, True),
    ] + _WHO + _FILL,
    "run_stats": [("ts_ns", _i64, False), ("dev", _str, False), ("transaction", _i64, False)] + _TASK
    + [(f"{p}_{u}", _i64, False) for p in PHASES for u in ("jiffies", "ns")]
    + [("handle_count", _i64, False), ("blocks", _i64, False), ("blocks_logged", _i64, False)],
    "checkpoint_stats": [("ts_ns", _i64, False), ("dev", _str, False), ("transaction", _i64, False)] + _TASK + [
        ("chp_time_jiffies", _i64, False), ("chp_time_ns", _i64, False),
        ("forced_to_close", _i64, False), ("written", _i64, False), ("dropped", _i64, False),
    ] + _WHO,
    "log_tail": [("ts_ns", _i64, False), ("dev", _str, False)] + _TASK + [
        ("tail_sequence", _i64, False), ("first_tid", _i64, False), ("block_nr", _i64, False),
        ("freed_blocks", _i64, False),
    ] + _WHO + _FILL,
    "fill": [("ts_ns", _i64, False), ("dev", _str, False)] + _FILL + [("source", _str, False)],
    # XFS: each log reservation of a traced task that slept for log space (xlog_grant_head_wait),
    # from its first sleep to the reservation's exit; the grant heads and the tail when it asked
    # and when it got its space; queued: tickets already waited on its head when it asked
    # (bytes since 6.11; before, each head a cycle and bytes, tail_space null)
    "xfs_waits": [("ts_ns", _i64, False), ("end_ns", _i64, False), ("wait_ns", _i64, False), ("dev", _str, False)]
    + _TASK + [
        ("head", _str, False), ("ticket", _i64, False), ("unit_res_bytes", _i64, False), ("cnt", _i32, False),
        ("permanent", _bool, False), ("sleeps", _i32, False), ("in_traced_call", _bool, False),
        ("call_ts_ns", _i64, True), ("context", _str, True),
        ("start_reserve_bytes", _i64, False), ("start_write_bytes", _i64, False),
        ("start_tail_space_bytes", _i64, True), ("start_tail_cycle", _i64, False), ("start_tail_block", _i64, False),
        ("end_reserve_bytes", _i64, False), ("end_write_bytes", _i64, False),
        ("end_tail_space_bytes", _i64, True), ("end_tail_cycle", _i64, False), ("end_tail_block", _i64, False),
        ("start_reserve_cycle", _i64, True), ("start_write_cycle", _i64, True),
        ("end_reserve_cycle", _i64, True), ("end_write_cycle", _i64, True),
        ("curr_cycle", _i64, False), ("curr_block", _i64, False),
        ("ail_pushes", _i64, False), ("ail_pinned", _i64, False), ("ail_locked", _i64, False),
        ("ail_flushing", _i64, False), ("log_forces", _i64, False), ("log_writes", _i64, True),
        ("queued", _bool, True),
    ],
    # each block forced checkpoints wrote home (a write bio a task queued between jbd2_checkpoint
    # and its handle's start), once: how often, the first and last time; sector in 512-byte units
    # of the device the bio was queued to
    "home_writes": [("dev", _str, False), ("sector", _i64, False), ("writes", _i64, False),
                    ("first_ns", _i64, False), ("last_ns", _i64, False)],
    # the files whose extended attributes the traced calls set (setxattr, lsetxattr, fsetxattr),
    # by what their attributes take in an inode's attribute space (ext4's entries, names and
    # values rounded to 4 bytes, and the 4-byte end marker): how many files take that many bytes
    "xattr_files": [("dev", _str, False), ("in_inode_bytes", _i64, False), ("files", _i64, False)],
    # what one process (pid, in cgroup cgroup_id) put into one journal's transaction between two
    # reads of the probes' writers map (ts_ns: the read; first_ns: its first count there):
    # jbd2 handles, the credits they requested and used (dirtied_blocks: buffers first dirtied in
    # the transaction); XFS transactions (transaction null) and the log bytes their tickets used
    "writers": [("ts_ns", _i64, False), ("first_ns", _i64, False), ("dev", _str, False),
                ("transaction", _i64, True), ("pid", _i32, False), ("comm", _str, False),
                ("cgroup_id", _i64, False), ("handles", _i64, False), ("requested_blocks", _i64, False),
                ("dirtied_blocks", _i64, False), ("logged_bytes", _i64, False)],
}

#: Tables a lab run adds to its session (docs/session-format.md); a session without them
#: (``jstall record``) loads them empty.
LAB_COLUMNS = {
    # what each emulated device (the lower loop device the lab throttles) served in one
    # sampling interval ending at ts_ns: /sys/block/<lower>/stat differences
    "device_stats": [("ts_ns", _i64, False), ("interval_ns", _i64, False), ("dev", _str, False),
                     ("role", _str, False), ("lower_dev", _str, False)]
    + [(n, _i64, False) for n in ("read_ios", "read_merges", "read_sectors", "write_ios", "write_merges",
                                  "write_sectors", "flush_ios", "busy_ms", "queue_ms", "in_flight_requests")],
}
COLUMNS.update(LAB_COLUMNS)
LAB_TABLES = tuple(LAB_COLUMNS)


from .session import LATER_TABLES  # noqa: E402,F401 -- tables a session may lack: loaded empty

#: Columns added to the format after sessions were first written: a session without them
#: loads with nulls (still schema version 1).
OPTIONAL = frozenset(("committing_credits", "journal_committing_credits", "file", "cgroup_id",
                      "in_traced_call", "traced_task", "context", "log_writes", "queued")) | {n for n, _, _ in _WAKER}


def arrow_schema(table: str) -> pa.Schema:
    """The arrow schema a session's ``table`` is written with."""
    return pa.schema([pa.field(n, t, nullable=nullable) for n, t, nullable in COLUMNS[table]])


def nullable_int_columns(table: str) -> list[str]:
    """Integer columns of ``table`` that may hold nulls (loaded as pandas ``Int64``)."""
    return [n for n, t, nullable in COLUMNS[table] if nullable and pa.types.is_integer(t)]


#: table name -> the arrow schema it is written with
SCHEMAS = {table: arrow_schema(table) for table in COLUMNS}
