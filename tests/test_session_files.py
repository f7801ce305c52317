"""The session writer (raw BPF records -> Arrow tables -> Parquet) and the metadata checks."""


import numpy as np
import pyarrow.parquet as pq
import pytest

from jstall import session
from jstall.errors import JstallError
from jstall.probes import events, tables
from jstall.schema import SCHEMAS

NAMES = {188: "setxattr", 87: "unlink"}


def records(struct, rows):
    a = np.zeros(len(rows), dtype=events.DTYPES[struct])
    for i, row in enumerate(rows):
        for k, v in row.items():
            a[i][k] = v
    return events.decode(struct, [a.tobytes()])


def test_header_layouts_are_aligned_and_complete():
    assert set(events.KIND_STRUCTS.values()) <= set(events.DTYPES)
    for name, dt in events.DTYPES.items():
        assert dt.itemsize % 8 == 0, name
        for field in dt.names:
            assert dt.fields[field][1] % min(dt.fields[field][0].itemsize, 8) == 0, (name, field)
    assert events.JBD2_EVENT_NAMES[events.ENUMS["jstall_jbd2_event"]["JBD2_CHECKPOINT"]] == "checkpoint"
    assert tuple(events.JBD2_EVENT_NAMES[i] for i in sorted(events.JBD2_EVENT_NAMES)) == session.JBD2_EVENTS


def test_calls_table_names_devices_and_nulls_journal_fields_without_handles():
    a = records("call_event", [
        dict(kind=1, syscall_nr=188, ts_ns=10, latency_ns=5_000_000, tid=7, pid=7, ret=0,
             dev=(7 << 20) | 3, handles=2, journal_free_blocks=100, journal_min_free_blocks=40,
             journal_log_blocks=1000, comm=b"setfattr"),
        dict(kind=1, syscall_nr=87, ts_ns=20, latency_ns=2_000_000, tid=8, pid=7, ret=-2, comm=b"rm"),
    ])
    t = tables.calls_table(a, NAMES).to_pydict()
    assert t["syscall"] == ["setxattr", "unlink"]
    assert t["dev"] == ["7:3", None]
    assert t["ret"] == [0, -2]
    assert t["journal_free_blocks"] == [100, None]
    assert t["journal_min_free_blocks"] == [40, None]
    assert t["comm"] == ["setfattr", "rm"]


def test_jbd2_table_keeps_only_the_argument_each_event_has_and_unknown_fill_is_null():
    ev = events.ENUMS["jstall_jbd2_event"]
    fill = dict(free_blocks=500, head_block=3, tail_block=1, first_block=1, last_block=1024,
                journal_blocks=1024, max_transaction_blocks=256, running_transaction=9,
                committing_transaction=-1, committing_credits=0, has_journal=1)
    a = records("jbd2_event", [
        dict(kind=3, event=ev["JBD2_CHECKPOINT"], ts_ns=1, dev=7 << 20, transaction=-1, tid=50, pid=50,
             arg=0, comm=b"python3", **fill),
        dict(kind=3, event=ev["JBD2_START_COMMIT"], ts_ns=2, dev=7 << 20, transaction=9, tid=40, pid=40,
             arg=0, comm=b"jbd2/loop0-8", **fill),
        dict(kind=3, event=ev["JBD2_LOCK_BUFFER_STALL"], ts_ns=3, dev=7 << 20, transaction=-1, tid=40,
             pid=40, arg=12, comm=b"jbd2/loop0-8"),
    ])
    t = tables.jbd2_table(a).to_pydict()
    assert t["event"] == ["checkpoint", "start_commit", "lock_buffer_stall"]
    assert t["jbd2_thread"] == [False, True, True]
    assert t["transaction"] == [None, 9, None]
    assert t["result"] == [0, None, None]
    assert t["stall_ms"] == [None, None, 12]
    assert t["free_blocks"] == [500, 500, None]
    assert t["committing_transaction"] == [-1, -1, None]


def test_run_stats_jiffies_convert_with_hz_and_keep_raw():
    a = records("run_stats_event", [dict(kind=4, dev=(7 << 20) | 1, transaction=5, running_jiffies=3,
                                         logging_jiffies=1, blocks=10, blocks_logged=12, comm=b"jbd2/x")])
    t = tables.run_stats_table(a, 250).to_pydict()
    assert t["running_jiffies"] == [3] and t["running_ns"] == [12_000_000]
    t = tables.run_stats_table(a, 300).to_pydict()
    assert t["logging_ns"] == [3_333_333]


def test_offcpu_runnable_means_preempted():
    a = records("offcpu_event", [dict(kind=2, state=s, stack_id=1) for s in (0, 1, 2, 0x402)])
    assert tables.offcpu_table(a, NAMES).to_pydict()["runnable"] == [True, False, False, False]


def test_empty_tables_have_the_full_schema(tmp_path):
    for name, fn in (("calls", tables.calls_table), ("offcpu", tables.offcpu_table)):
        struct = "call_event" if name == "calls" else "offcpu_event"
        t = fn(events.decode(struct, []), NAMES)
        assert t.num_rows == 0 and t.schema == SCHEMAS[name]
        pq.write_table(t, tmp_path / f"{name}.parquet")
        assert pq.read_table(tmp_path / f"{name}.parquet").schema == SCHEMAS[name]


def _write_session(path, meta=None):
    path.mkdir()
    for name in session.TABLES:
        pq.write_table(SCHEMAS[name].empty_table(), session.table_path(str(path), name))
    session.write_metadata(str(path), meta or {"format": session.FORMAT, "schema_version": session.SCHEMA_VERSION})


def test_metadata_round_trip_and_refusals(tmp_path):
    good = tmp_path / "good"
    _write_session(good, {"format": session.FORMAT, "schema_version": 1, "hz": 250})
    assert session.read_metadata(str(good))["hz"] == 250

    with pytest.raises(JstallError, match="no such session"):
        session.read_metadata(str(tmp_path / "absent"))
    newer = tmp_path / "newer"
    _write_session(newer, {"format": session.FORMAT, "schema_version": session.SCHEMA_VERSION + 1})
    with pytest.raises(JstallError, match="upgrade jstall"):
        session.read_metadata(str(newer))
    foreign = tmp_path / "foreign"
    _write_session(foreign, {"format": "something-else", "schema_version": 1})
    with pytest.raises(JstallError, match="not a jstall session"):
        session.read_metadata(str(foreign))
    corrupt = tmp_path / "corrupt"
    _write_session(corrupt)
    (corrupt / "metadata.json").write_text("{not json")
    with pytest.raises(JstallError, match="corrupt"):
        session.read_metadata(str(corrupt))
    truncated = tmp_path / "truncated"
    _write_session(truncated)
    (truncated / "offcpu.parquet").unlink()
    with pytest.raises(JstallError, match="truncated"):
        session.read_metadata(str(truncated))
    unfinished = tmp_path / "unfinished"
    _write_session(unfinished)
    (unfinished / "metadata.json").unlink()
    with pytest.raises(JstallError, match="did not finish"):
        session.read_metadata(str(unfinished))
