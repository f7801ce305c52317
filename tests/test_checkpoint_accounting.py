"""Forced checkpoints accounted for, on hand-built sessions: those outside every traced call
(untraced_checkpoints, never 'no stalls'), each one's cost (checkpoint_costs), and what the
devices under the filesystem did (devices)."""

import pytest

from jstall.analyzer import analyze
from synthetic import fill_columns, metadata, rows, write_session
from jstall.analyzer.render.text import session_summary

MS = 1_000_000


def jbd2(ts_ms, tid, comm, in_call, traced, event="checkpoint"):
    return {"ts_ns": ts_ms * MS, "dev": "7:0", "event": event, "transaction": 1, "tid": tid, "pid": tid,
            "comm": comm, "jbd2_thread": comm.startswith("jbd2/"), "in_traced_call": in_call, "traced_task": traced,
            **fill_columns(100)}


def call(ts_ms, ms, tid, syscall="setxattr", context=None):
    return {"ts_ns": ts_ms * MS, "latency_ns": int(ms * MS), "tid": tid, "pid": tid, "comm": "w", "syscall": syscall,
            "ret": 0, "dev": "7:0", "handles": 1, "context": context, **{
                f"journal_{k}": v for k, v in (("free_blocks", 100), ("min_free_blocks", 50), ("log_blocks", 1024),
                                               ("committing_credits", 0))}}


def cp_stats(ts_ms, tid, written):
    return {"ts_ns": ts_ms * MS, "dev": "7:0", "transaction": 1, "tid": tid, "pid": tid, "comm": "w",
            "chp_time_jiffies": 1, "chp_time_ns": 4 * MS, "forced_to_close": 0, "written": written, "dropped": 0,
            "in_traced_call": True, "traced_task": True}


def test_checkpoints_outside_the_traced_calls_are_named_and_never_no_stalls(tmp_path):
    """No call took 10 ms, but 3 forced checkpoints ran in a traced task's untraced call and
    1 in a kworker outside the recording; jbd2's own checkpoint is not counted."""
    path = str(tmp_path / "s")
    ev = [jbd2(100 + i, 11, "tar", False, True) for i in range(3)]
    ev += [jbd2(200, 99, "kworker/u8:1", False, False), jbd2(300, 5, "jbd2/loop0-8", False, False)]
    write_session(path, {"jbd2_events": rows(ev), "calls": rows([call(50, 2.0, 11)])}, metadata())
    a = analyze(path)
    u = a.untraced_checkpoints
    assert u[["comm", "checkpoints", "traced_task"]].values.tolist() == [["tar", 3, True], ["kworker/u8:1", 1, False]]
    d = a.to_dict()
    kinds = [r["kind"] for r in d["recommendations"]]
    assert "untraced_checkpoints" in kinds and "no_stalls" not in kinds
    assert any("4 forced checkpoints ran outside the traced calls: 3 in tar 11 on 7:0, in a call not traced; "
               "1 in kworker/u8:1 99 on 7:0, a task outside the recording" in w for w in d["warnings"])
    text = session_summary(a)
    assert "No stalls:" not in text and "No stalls in the traced calls" in text


def test_without_any_forced_checkpoint_no_stalls_is_said(tmp_path):
    path = str(tmp_path / "s")
    write_session(path, {"jbd2_events": rows([jbd2(300, 5, "jbd2/loop0-8", False, False)]),
                         "calls": rows([call(50, 2.0, 11)])}, metadata())
    a = analyze(path)
    assert [r["kind"] for r in a.to_dict()["recommendations"]] == ["no_stalls"]
    assert "No stalls: no call took 10 ms or more." in session_summary(a)


def test_each_forced_checkpoint_costs_its_call_once(tmp_path):
    """Two checkpoints inside one 50 ms call (its wait counted once), one inside a 3 ms handle
    wait (negligible), one in a task outside the recording; blocks written home are the
    task's checkpoint_stats until its next checkpoint or the call's end."""
    path = str(tmp_path / "s")
    ev = [jbd2(110, 11, "w", True, True), jbd2(130, 11, "w", True, True), jbd2(310, 12, "w", True, True),
          jbd2(500, 99, "kworker/u8:1", False, False)]
    calls = [call(100, 50.0, 11), call(308, 3.0, 12, "journal_start", "mknodat")]
    cs = [cp_stats(115, 11, 200), cp_stats(140, 11, 100), cp_stats(200, 11, 7), cp_stats(311, 12, 20)]
    write_session(path, {"jbd2_events": rows(ev), "calls": rows(calls), "checkpoint_stats": rows(cs)}, metadata())
    a = analyze(path)
    c = a.checkpoint_costs
    assert c["written_blocks"].tolist() == [200, 100, 20, 0]
    assert c["expensive"].tolist() == [True, True, False, False]
    assert c["syscall"].tolist()[:3] == ["setxattr", "setxattr", "journal_start"]
    cc = a.to_dict()["checkpoint_costs"]
    assert cc == {"forced": 4, "expensive": 2, "negligible": 1, "outside": 1, "expensive_wait_ms": 50.0,
                  "expensive_written_blocks": 300, "negligible_written_blocks_mean": 20.0}
    assert ("4 forced checkpoints: 2 ran in stalls (>= 10 ms; 50 ms of waits, 300 blocks written home), 1 negligible "
            "(< 10 ms; 20 blocks written home each on average), 1 in tasks outside the recording."
            ) in session_summary(a)


def test_the_devices_during_stalls(tmp_path):
    """Four 1-s device samples; a stall overlaps the second and third."""
    path = str(tmp_path / "s")
    ds = [{"ts_ns": (i + 1) * 1000 * MS, "interval_ns": 1000 * MS, "dev": "7:1", "role": "data", "lower_dev": "7:0",
           "read_ios": 1, "write_ios": w, "busy_ms": b} for i, (w, b) in enumerate([(100, 100), (1500, 900),
                                                                                   (1500, 1000), (100, 50)])]
    write_session(path, {"device_stats": rows(ds), "calls": rows([call(1500, 800.0, 11)])}, metadata())
    a = analyze(path)
    (d,) = a.to_dict()["devices"]
    assert d["write_ios"] == 3200 and d["seconds"] == 4.0 and d["write_iops"] == 800.0
    assert d["busy_pct"] == pytest.approx(51.25) and d["stall_seconds"] == 2.0
    assert d["write_iops_in_stalls"] == 1500.0 and d["busy_pct_in_stalls"] == 95.0
    assert ("7:1 data (served by 7:0): 3,200 writes and 4 reads in 4.0 s, 800 writes/s, busy 51%; during stalls "
            "(2.0 s of samples) 1,500 writes/s, busy 95%") in session_summary(a)
    from jstall.analyzer.render.figures import device_served

    fig = device_served(a)
    busy = [t for t in fig.data if t.name == "data busy %"]
    assert len(busy) == 1 and list(busy[0].y) == [10.0, 90.0, 100.0, 5.0]
