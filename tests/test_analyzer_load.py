"""The loader reads the real session format and refuses damaged or foreign sessions."""

import json
import os

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jstall import schema
from jstall.analyzer.session.load import load_session
from synthetic import fill_columns, metadata, rows, write_session
from jstall.errors import JstallError
from jstall.session import TABLES


def _good(tmp_path):
    return write_session(str(tmp_path / "s"), {
        "calls": rows([{"ts_ns": 1, "latency_ns": 2, "tid": 3, "pid": 3, "comm": "x", "syscall": "setxattr",
                        "ret": 0, "dev": "7:0", "handles": 1}]),
        "jbd2_events": rows([{"ts_ns": 5, "event": "checkpoint", "dev": "7:0", "tid": 3, "pid": 3, "comm": "x",
                              "jbd2_thread": False, "result": 0, **fill_columns(10)},
                             {"ts_ns": 6, "event": "write_superblock", "dev": "7:0", "tid": 3, "pid": 3,
                              "comm": "x", "jbd2_thread": False, "write_flags": 2048}]),
        "stacks": pd.DataFrame({"stack_id": [1], "frames": [["__schedule", "schedule"]]}),
    })


def test_loads_every_table_with_its_types(tmp_path):
    s = load_session(_good(tmp_path))
    assert set(s.tables) == set(TABLES)
    assert s.calls["ts_ns"].dtype == "int64" and s.calls["tid"].dtype == "int32"
    assert s.calls["journal_free_blocks"].dtype == "Int64" and s.calls["journal_free_blocks"].isna().all()
    assert s.jbd2_events["transaction"].dtype == "Int64"
    assert s.jbd2_events["free_blocks"].tolist()[0] == 10 and s.jbd2_events["free_blocks"].isna().tolist()[1]
    assert s.jbd2_events["jbd2_thread"].dtype == bool
    assert list(s.stacks["frames"].iloc[0]) == ["__schedule", "schedule"]
    assert len(s.run_stats) == 0 and list(s.run_stats.columns) == [c for c, _, _ in schema.COLUMNS["run_stats"]]
    assert s.hz == 250 and s.start_ns == 0


def test_written_schema_is_the_documented_one(tmp_path):
    path = _good(tmp_path)
    for t in TABLES:
        assert pq.read_schema(os.path.join(path, t + ".parquet")).remove_metadata().equals(
            schema.arrow_schema(t)), t


@pytest.mark.parametrize("damage, message", [
    ("nodir", "no such session directory"),
    ("nometa", "did not finish"),
    ("badjson", "unreadable metadata"),
    ("format", "not a jstall session"),
    ("newer", "newer than this jstall reads"),
    ("missing_table", "missing tables offcpu"),
    ("corrupt_table", "unreadable table"),
    ("truncated_table", "unreadable table"),
    ("missing_column", "missing columns latency_ns"),
    ("bad_type", "column ts_ns has type"),
    ("no_hz", "no valid 'hz'"),
])
def test_refuses_damaged_sessions(tmp_path, damage, message):
    path = _good(tmp_path)
    meta_path = os.path.join(path, "metadata.json")
    calls = os.path.join(path, "calls.parquet")
    if damage == "nodir":
        path = str(tmp_path / "absent")
    elif damage == "nometa":
        os.remove(meta_path)
    elif damage == "badjson":
        open(meta_path, "w").write("{not json")
    elif damage in ("format", "newer", "no_hz"):
        m = json.load(open(meta_path))
        m.update({"format": {"format": "other"}.get(damage, m["format"]),
                  "schema_version": m["schema_version"] + (damage == "newer")})
        if damage == "no_hz":
            del m["hz"]
        json.dump(m, open(meta_path, "w"))
    elif damage == "missing_table":
        os.remove(os.path.join(path, "offcpu.parquet"))
    elif damage == "corrupt_table":
        open(calls, "wb").write(b"PAR1 this is not parquet")
    elif damage == "truncated_table":
        data = open(calls, "rb").read()
        open(calls, "wb").write(data[: len(data) // 2])
    elif damage == "missing_column":
        pq.write_table(pq.read_table(calls).drop_columns(["latency_ns"]), calls)
    elif damage == "bad_type":
        t = pq.read_table(calls)
        pq.write_table(t.set_column(0, "ts_ns", pa.array(["a"])), calls)
    with pytest.raises(JstallError, match=message) as e:
        load_session(path)
    assert "\n" not in str(e.value)


def test_metadata_defaults_are_a_valid_session(tmp_path):
    m = metadata(journals=[])
    path = write_session(str(tmp_path / "e"), None, m)
    s = load_session(path)
    assert all(len(df) == 0 for df in s.tables.values())


def test_optional_column_absent_loads_as_null(tmp_path):
    path = _good(tmp_path)
    f = os.path.join(path, "jbd2_events.parquet")
    pq.write_table(pq.read_table(f).drop_columns(["committing_credits"]), f)
    s = load_session(path)
    assert s.jbd2_events["committing_credits"].isna().all()
