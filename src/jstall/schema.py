"""Arrow schemas of the session tables (docs/session-format.md), used to write them
and to check them on load. Every column's unit is in its name."""

import pyarrow as pa

from .session import FILL_COLUMNS

_i32, _i64, _str, _bool = pa.int32(), pa.int64(), pa.string(), pa.bool_()

_FILL = [(name, _i64) for name in FILL_COLUMNS]
_TASK = [("tid", _i32), ("pid", _i32), ("comm", _str)]

SCHEMAS = {
    "calls": pa.schema(
        [("ts_ns", _i64), ("latency_ns", _i64)] + _TASK + [
            ("syscall", _str), ("ret", _i64), ("dev", _str), ("handles", _i32),
            ("journal_free_blocks", _i64), ("journal_min_free_blocks", _i64), ("journal_log_blocks", _i64),
            ("journal_committing_credits", _i64),
        ]
    ),
    "call_histograms": pa.schema(
        [("syscall", _str), ("dev", _str), ("bucket", _i32), ("low_ns", _i64), ("high_ns", _i64), ("count", _i64)]
    ),
    "call_totals": pa.schema(
        [("syscall", _str), ("dev", _str), ("count", _i64), ("errors", _i64),
         ("total_latency_ns", _i64), ("max_latency_ns", _i64)]
    ),
    "offcpu": pa.schema(
        [("ts_ns", _i64), ("offcpu_ns", _i64)] + _TASK + [
            ("state", _i64), ("runnable", _bool), ("stack_id", _i32),
            ("call_ts_ns", _i64), ("syscall", _str), ("dev", _str),
        ]
    ),
    "stacks": pa.schema([("stack_id", _i32), ("frames", pa.list_(_str))]),
    "jbd2_events": pa.schema(
        [("ts_ns", _i64), ("event", _str), ("dev", _str), ("transaction", _i64)] + _TASK + [
            ("jbd2_thread", _bool), ("result", _i64), ("write_flags", _i64), ("stall_ms", _i64),
        ] + _FILL
    ),
    "run_stats": pa.schema(
        [("ts_ns", _i64), ("dev", _str), ("transaction", _i64)] + _TASK
        + [(f"{p}_{u}", _i64) for p in ("wait", "request_delay", "running", "locked", "flushing", "logging")
           for u in ("jiffies", "ns")]
        + [("handle_count", _i64), ("blocks", _i64), ("blocks_logged", _i64)]
    ),
    "checkpoint_stats": pa.schema(
        [("ts_ns", _i64), ("dev", _str), ("transaction", _i64)] + _TASK + [
            ("chp_time_jiffies", _i64), ("chp_time_ns", _i64),
            ("forced_to_close", _i64), ("written", _i64), ("dropped", _i64),
        ]
    ),
    "log_tail": pa.schema(
        [("ts_ns", _i64), ("dev", _str)] + _TASK + [
            ("tail_sequence", _i64), ("first_tid", _i64), ("block_nr", _i64), ("freed_blocks", _i64),
        ] + _FILL
    ),
    "fill": pa.schema([("ts_ns", _i64), ("dev", _str)] + _FILL + [("source", _str)]),
}
