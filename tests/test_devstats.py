"""The device sampler's table while its thread samples: a recording writes the table at each
flush while the sampling thread may be appending a row, column by column; a read waits for
the row to be whole."""

import threading

from jstall import devstats

DEVICES = [("data", "7:0", "loop0", "7:0")]


def _stat(n):
    return {**{f: n for f in devstats.STAT_COLUMNS.values()}, "in_flight": 0}


def test_a_table_read_waits_for_a_row_being_appended():
    s = devstats.DeviceSampler(DEVICES, 1.0)
    devstats.add_rows(s.rows, DEVICES, {"7:0": (0, _stat(0))}, {"7:0": (10, _stat(5))})
    row = {c: v[0] for c, v in s.rows.items()}
    got = {}
    with s._lock:   # as the sampling thread holds it while it appends a row
        s.rows["ts_ns"].append(20)   # the row's first column only, so far
        reader = threading.Thread(target=lambda: got.setdefault("table", s.table()))
        reader.start()
        reader.join(0.3)
        assert reader.is_alive() and not got   # the read waits (it does not see a ragged table)
        for c in devstats.COLUMNS[1:]:
            s.rows[c].append(row[c])
    reader.join(10)
    t = got["table"]
    assert t.num_rows == 2 and t.column("ts_ns").to_pylist() == [10, 20]
    assert t.schema.names == list(devstats.COLUMNS)
