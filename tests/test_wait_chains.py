"""Wait chains on hand-built tables: a wait queued behind a task takes the cause of what that
task was doing (chains.queued_causes), the stall table says how much was queued and behind
whom, and the summary separates direct from queued stall time."""

import numpy as np
import pandas as pd

from jstall.analyzer import analyze
from jstall.analyzer.stalls.chains import queued_causes
from synthetic import metadata, rows, write_session
from jstall.analyzer.render.text import session_summary

MS = 1_000_000


def interval(ts_ms, ms, tid, comm="fs_mark", waker=None, wake_ms=None, waker_comm="fs_mark", waker_call_ms=None,
             stack_id=1, call_ms=0, runnable=False):
    return {"ts_ns": ts_ms * MS, "offcpu_ns": int(ms * MS), "tid": tid, "pid": 1, "comm": comm,
            "state": 0 if runnable else 2, "runnable": runnable, "stack_id": stack_id, "call_ts_ns": call_ms * MS,
            "syscall": "unlink", "dev": "7:0",
            "wake_ts_ns": None if waker is None else (wake_ms if wake_ms is not None else ts_ms + ms) * MS,
            "waker_tid": waker, "waker_pid": None if waker is None else 1,
            "waker_comm": None if waker is None else waker_comm, "waker_stack_id": None if waker is None else 9,
            "waker_call_ts_ns": None if waker_call_ms is None else waker_call_ms * MS,
            "waker_syscall": None if waker_call_ms is None else "unlink"}


def table(*rows_):
    return pd.DataFrame(list(rows_))


def test_a_lock_wait_behind_a_checkpointing_task_takes_its_cause():
    off = table(interval(100, 200, 11, waker=22),           # thread 11 waits for the directory lock
                interval(90, 150, 22),                       # thread 22 checkpoints meanwhile ...
                interval(250, 40, 22))                       # ... then waits on metadata I/O
    cause, label, behind = queued_causes(off, np.array(["other", "checkpoint", "metadata_io"], dtype=object),
                                         np.array(["do_unlinkat <- __x64_sys_unlink", "jbd2_log_do_checkpoint",
                                                   "__wait_on_buffer"], dtype=object))
    # overlap with [100, 300]: checkpoint 140 ms, metadata_io 40 ms
    assert cause.tolist() == ["checkpoint", "checkpoint", "metadata_io"]
    assert behind.tolist() == ["fs_mark 22", None, None]
    assert label[0] == "queued behind fs_mark 22 in do_unlinkat <- __x64_sys_unlink"


def test_chains_pass_a_cause_on_and_leave_explained_or_unwoken_waits_alone():
    off = table(interval(100, 300, 11, waker=22),            # 11 behind 22 ...
                interval(100, 290, 22, waker=33),            # ... which is behind 33 ...
                interval(95, 280, 33),                       # ... which checkpoints
                interval(500, 50, 11, waker=33),             # behind 33, but 33 did nothing recorded then
                interval(600, 20, 11),                       # no wakeup seen (preempted)
                interval(700, 30, 11, waker=33, runnable=True),  # waiting for a CPU stays cpu
                interval(800, 30, 44, waker=44))             # woken by itself: not a chain
    cause = np.array(["other", "other", "checkpoint", "other", "other", "cpu", "other"], dtype=object)
    got, _, behind = queued_causes(off, cause, np.array(["x"] * 7, dtype=object))
    assert got.tolist() == ["checkpoint", "checkpoint", "checkpoint", "other", "other", "cpu", "other"]
    assert behind.tolist() == ["fs_mark 22", "fs_mark 33", None, None, None, None, None]


def test_a_span_too_long_for_nanoseconds_on_one_line_gives_the_same_answer():
    """Threads end to end on one int64 line: with a time span that would overflow it the
    lookups go by rank, with the same result."""
    far = 2 * 10**18 // MS   # ms: intervals 2e18 ns apart, three threads
    off = table(interval(100, 200, 11, waker=22), interval(90, 150, 22), interval(far, 10, 33, waker=11))
    got, _, behind = queued_causes(off, np.array(["other", "checkpoint", "other"], dtype=object),
                                   np.array(["a", "b", "c"], dtype=object))
    assert got.tolist() == ["checkpoint", "checkpoint", "other"] and behind.tolist() == ["fs_mark 22", None, None]


def test_a_waker_seen_only_in_jbd2_events_still_names_its_checkpoint():
    """The waker is outside the recording (no intervals of its own), but a forced checkpoint
    ran in its thread after its call began: the wait is checkpoint."""
    off = table(interval(100, 200, 11, waker=77, waker_comm="kworker/1:2", waker_call_ms=80),
                interval(400, 100, 11, waker=77, waker_comm="kworker/1:2"))
    cps = pd.DataFrame({"ts_ns": [90 * MS, 700 * MS], "tid": [77, 77]})
    got, _, behind = queued_causes(off, np.array(["other", "other"], dtype=object),
                                   np.array(["a", "b"], dtype=object), cps)
    assert got.tolist() == ["checkpoint", "other"]
    assert behind.tolist() == ["kworker/1:2 77", None]


def test_sessions_without_waker_columns_are_unchanged():
    off = table(interval(100, 200, 11, waker=22)).drop(columns=[c for c in interval(0, 1, 1) if c.startswith("wake")])
    got, label, behind = queued_causes(off, np.array(["other"], dtype=object), np.array(["x"], dtype=object))
    assert got.tolist() == ["other"] and label.tolist() == ["x"] and behind.tolist() == [None]


def _call(ts_ms, ms, tid):
    return {"ts_ns": ts_ms * MS, "latency_ns": int(ms * MS), "tid": tid, "pid": 1, "comm": "fs_mark",
            "syscall": "unlink", "ret": 0, "dev": "7:0", "handles": 1}


def test_the_stall_table_and_summary_separate_direct_from_queued_time(tmp_path):
    path = str(tmp_path / "s")
    stacks = [{"stack_id": 1, "frames": ["__schedule", "schedule", "rwsem_down_write_slowpath", "down_write",
                                         "do_unlinkat", "__x64_sys_unlink"]},
              {"stack_id": 2, "frames": ["__schedule", "io_schedule", "__wait_on_buffer", "jbd2_log_do_checkpoint",
                                         "__jbd2_log_wait_for_space", "add_transaction_credits", "start_this_handle"]}]
    off = [interval(100, 200, 11, waker=22, call_ms=100), interval(95, 190, 22, stack_id=2, call_ms=90)]
    write_session(path, {"calls": rows([_call(100, 210, 11), _call(90, 200, 22)]), "offcpu": rows(off),
                         "stacks": rows(stacks)}, metadata())
    a = analyze(path)
    st = a.stalls.set_index("tid")
    assert st.loc[11, "cause"] == "checkpoint" and st.loc[11, "queued_ms"] == 200.0
    assert st.loc[11, "queued_behind"] == "fs_mark 22" and st.loc[11, "other_ms"] == 0.0
    assert st.loc[22, "queued_ms"] == 0.0 and pd.isna(st.loc[22, "queued_behind"])
    d = a.to_dict()
    assert d["stalls"]["queued"] == {"count": 1, "total_ms": 200.0}
    assert d["stalls"]["queued_behind"] == {"fs_mark 22": 200.0}
    assert "200 ms of the stall time (51% of it off CPU) queued behind other tasks" in session_summary(a)
    assert "direct 190 ms. Behind: fs_mark 22 200 ms." in session_summary(a)
    from jstall.analyzer.multi.compare import compare

    empty = str(tmp_path / "empty")
    write_session(empty, {}, metadata())
    rows_ = compare(path, empty).stalls().set_index("figure")
    assert rows_.loc["stall ms queued behind other tasks", "a"] == 200.0
    assert rows_.loc["stall ms queued behind other tasks", "b"] == 0.0

