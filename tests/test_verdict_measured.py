"""Verdicts come from the directly measured waits, never from stacks: hand-built sessions
whose waits were measured (xfs_waits, jbd2_checkpoint_stats) but whose stacks were not
captured (stack_id -1, as a PREEMPT_RT kernel loses them under load) or name something else."""

import pandas as pd

from jstall.analyzer import analyze
from jstall.analyzer.stalls.causes import LOG_SPACE_NO_STACK, NO_STACK, measured_log_space
from jstall.analyzer.session.load import load_session
from synthetic import journal_meta, metadata, rows, write_session
from jstall.analyzer.render.text import session_summary

MS = 1_000_000
S = 1_000 * MS
XFS_DEV = "7:1"
#: six waits of 1,325 ms: 7,950 ms, as a PREEMPT_RT guest measured them
WAIT_MS = 1_325
STATS = "push_ail {} 0 0 0 0 0 0 0 0 0\nlog {} {} 0 0 0\n"


def _xfs_meta(logged_blocks, **room):
    j = journal_meta(XFS_DEV, journal_blocks=16384, kind="xfs", log_bytes=64 << 20, log_block_size=4096, **room,
                     max_transaction_blocks=None, xfs_name="loop1",
                     xfs_stats_start={"push_ail": {"try_logspace": 0, "sleep_logspace": 0},
                                      "log": {"writes": 0, "blocks": 0}},
                     xfs_stats_end={"push_ail": {"try_logspace": 6, "sleep_logspace": 6},
                                    "log": {"writes": 100, "blocks": logged_blocks}})
    return metadata(end_ns=20 * S, journals=[j])


def _xfs_session(tmp_path, logged_blocks=300_000, stack_id=-1, **room):
    """Six mknodat calls on an XFS, each 1,400 ms with one 1,325 ms log-space wait inside it
    (one sleep each) and one off-CPU interval over the wait whose stack is ``stack_id``."""
    calls, offs, waits = [], [], []
    for i in range(6):
        ts, tid = S + i * 3 * S, 100 + i
        c = {"ts_ns": ts, "latency_ns": 1_400 * MS, "tid": tid, "pid": tid, "comm": f"w{tid}",
             "syscall": "mknodat", "ret": 0, "dev": XFS_DEV, "handles": 0}
        calls.append(c)
        offs.append({"ts_ns": ts + 50 * MS, "offcpu_ns": WAIT_MS * MS, "tid": tid, "pid": tid, "comm": c["comm"],
                     "state": 2, "runnable": False, "stack_id": stack_id, "call_ts_ns": ts,
                     "syscall": "mknodat", "dev": XFS_DEV})
        waits.append({"ts_ns": ts + 50 * MS, "end_ns": ts + (50 + WAIT_MS) * MS, "wait_ns": WAIT_MS * MS,
                      "dev": XFS_DEV, "tid": tid, "pid": tid, "comm": c["comm"], "head": "reserve", "ticket": i,
                      "unit_res_bytes": 200_000, "cnt": 2, "permanent": True, "sleeps": 1,
                      "in_traced_call": True, "call_ts_ns": ts, "context": "mknodat",
                      "start_reserve_bytes": 67_000_000, "start_write_bytes": 67_000_000,
                      "start_tail_space_bytes": 0, "start_tail_cycle": 1, "start_tail_block": 0,
                      "end_reserve_bytes": 60_000_000, "end_write_bytes": 60_000_000,
                      "end_tail_space_bytes": 0, "end_tail_cycle": 1, "end_tail_block": 0,
                      "curr_cycle": 1, "curr_block": 0, "ail_pushes": 3, "ail_pinned": 0, "ail_locked": 0,
                      "ail_flushing": 0, "log_forces": 0, "log_writes": 2})
    stacks = pd.DataFrame({"stack_id": [7], "frames": [["__schedule", "schedule", "msleep", "some_driver_wait"]]})
    tables = {"calls": rows(calls), "offcpu": rows(offs), "xfs_waits": rows(waits), "stacks": stacks}
    return load_session(write_session(str(tmp_path / f"xfs{stack_id}"), tables, _xfs_meta(logged_blocks, **room)))


def test_xfs_log_waits_without_stacks_decide_the_verdict_and_the_advice(tmp_path):
    """All six waits' stacks lost: the log is not big enough (7,950 ms of a 20 s run), the
    text says so beside its XFS logs table, the log-size advice is given, and the stalls'
    cause is log_space, measured."""
    a = analyze(_xfs_session(tmp_path))
    (w,) = a.checkpoint_waits.to_dict("records")
    assert (w["dev"], w["kind"], w["wait_ms"], w["longest_ms"], w["big_enough"]) == (
        XFS_DEV, "xfs", 6 * WAIT_MS, WAIT_MS, False)
    (x,) = a.xfs_logs.to_dict("records")
    assert x["waits"] == 6 and x["wait_ms"] == 6 * WAIT_MS and x["enough"]["big_enough"] is False
    text = session_summary(a)
    assert "log not big enough: 7,950 ms" in text, text
    assert "log big enough" not in text, text
    (ls,) = [r for r in a.recommendations if r.kind == "log_size"]
    assert ls.stall_ms_addressed == 6 * WAIT_MS and ls.journal_size_mib > 64, ls
    assert set(a.stalls["cause"]) == {"log_space"}
    assert set(a.stalls["cause_label"]) == {LOG_SPACE_NO_STACK[1]}
    assert a.stalls["log_space_ms"].sum() == 6 * WAIT_MS


def test_xfs_log_waits_whose_stacks_name_another_wait_still_count(tmp_path):
    """Stacks captured but naming no log-space wait (classed other): the measured waits still
    decide; the cause stays what the stacks say (stacks refine, never remove)."""
    a = analyze(_xfs_session(tmp_path, stack_id=7))
    assert set(a.stalls["cause"]) == {"other"} and a.stalls["log_space_ms"].sum() == 0
    (w,) = a.checkpoint_waits.to_dict("records")
    assert w["wait_ms"] == 6 * WAIT_MS and not w["big_enough"]
    assert [r.kind for r in a.recommendations if r.kind == "log_size"] == ["log_size"]


def test_jbd2_forced_checkpoint_inside_a_stall_whose_stack_says_otherwise(tmp_path):
    """A 500 ms setxattr whose one off-CPU interval has a captured stack classed other, and a
    forced checkpoint in its thread that took 300 ms (jbd2_checkpoint_stats' chp_time): the
    journal is not big enough (300 ms, one wait over 10 ms), and the journal-size advice
    weighs those 300 ms."""
    ts, tid = S, 42
    c = {"ts_ns": ts, "latency_ns": 500 * MS, "tid": tid, "pid": tid, "comm": "w42", "syscall": "setxattr",
         "ret": 0, "dev": "7:0", "handles": 1}
    off = {"ts_ns": ts + MS, "offcpu_ns": 450 * MS, "tid": tid, "pid": tid, "comm": "w42", "state": 2,
           "runnable": False, "stack_id": 7, "call_ts_ns": ts, "syscall": "setxattr", "dev": "7:0"}
    ev = {"ts_ns": ts + 2 * MS, "event": "checkpoint", "dev": "7:0", "transaction": None, "tid": tid, "pid": tid,
          "comm": "w42", "jbd2_thread": False, "result": 0}
    cs = {"ts_ns": ts + 302 * MS, "dev": "7:0", "transaction": 1, "tid": tid, "pid": tid, "comm": "w42",
          "chp_time_jiffies": 75, "chp_time_ns": 300 * MS, "forced_to_close": 0, "written": 40, "dropped": 0}
    stacks = pd.DataFrame({"stack_id": [7], "frames": [["__schedule", "schedule", "msleep", "some_driver_wait"]]})
    run = [{"ts_ns": S // 4 + i * MS, "dev": "7:0", "transaction": i, "tid": 9, "pid": 9, "comm": "jbd2/loop0-8",
            "handle_count": 1, "blocks": 200, "blocks_logged": 205} for i in range(40)]
    s = load_session(write_session(str(tmp_path / "jbd2"), {
        "calls": rows([c]), "offcpu": rows([off]), "jbd2_events": rows([ev]), "checkpoint_stats": rows([cs]),
        "stacks": stacks, "run_stats": rows(run)}))
    a = analyze(s)
    assert a.stalls["checkpoint_ms"].sum() == 0 and a.stalls["cause"].tolist() == ["other"]
    (w,) = a.checkpoint_waits.to_dict("records")
    assert (w["wait_ms"], w["longest_ms"], w["big_enough"]) == (300.0, 300.0, False)
    assert "7:0: journal not big enough: 300 ms" in session_summary(a)
    assert any(r.kind == "journal_size" and r.stall_ms_addressed == 300.0 for r in a.recommendations), \
        [r.to_dict() for r in a.recommendations]


def test_measured_log_space_refines_only_lost_stacks_overlapping_a_wait_of_their_thread():
    import numpy as np

    cause = np.array(["other", "other", "other", "checkpoint", "other"], dtype=object)
    label = np.array([NO_STACK[1], NO_STACK[1], NO_STACK[1], "x", "msleep"], dtype=object)
    tid = np.array([1, 1, 2, 1, 1])
    ts = np.array([0, 500, 100, 100, 100])
    dur = np.array([100, 100, 100, 100, 100])
    waits = pd.DataFrame({"tid": [1], "ts_ns": [50], "end_ns": [400]})
    measured_log_space(cause, label, tid, ts, dur, waits)
    # thread 1's first interval overlaps the wait; its second ends after; thread 2's is not its
    # thread's; a captured stack keeps its cause
    assert cause.tolist() == ["log_space", "other", "other", "checkpoint", "other"]
    assert label[0] == LOG_SPACE_NO_STACK[1] and label[4] == "msleep"


def _forced_in_task(tmp_path, name, recorder_pid):
    """A 10 s session: five forced checkpoints of 40 ms in task 999 (comm jstall), outside every
    traced call, and one 100 ms stall of task 10 that waited on something else."""
    evs = [{"ts_ns": S + i * S, "event": "checkpoint", "dev": "7:0", "transaction": None, "tid": 999, "pid": 999,
            "comm": "jstall", "jbd2_thread": False, "result": 0, "in_traced_call": False, "traced_task": False}
           for i in range(5)]
    cs = [{"ts_ns": S + i * S + MS, "dev": "7:0", "transaction": i, "tid": 999, "pid": 999, "comm": "jstall",
           "chp_time_jiffies": 10, "chp_time_ns": 40 * MS, "forced_to_close": 0, "written": 20, "dropped": 0}
          for i in range(5)]
    c = {"ts_ns": S // 2, "latency_ns": 100 * MS, "tid": 10, "pid": 10, "comm": "w10", "syscall": "setxattr",
         "ret": 0, "dev": "7:0", "handles": 1}
    meta = metadata(**({"recorder_pid": recorder_pid} if recorder_pid else {}))
    return analyze(load_session(write_session(str(tmp_path / name), {
        "calls": rows([c]), "jbd2_events": rows(evs), "checkpoint_stats": rows(cs)}, meta)))


def test_the_recorders_own_checkpoints_are_never_the_workloads(tmp_path):
    """The same five forced checkpoints (200 ms, 2% of the run): in a task outside the
    recording they are judged (not big enough) and warned of; in the recorder's own process
    (metadata recorder_pid) they are a note of their own, in no verdict or advice."""
    other = _forced_in_task(tmp_path, "other", None)
    assert int(other.untraced_checkpoints["checkpoints"].sum()) == 5
    assert any("a task outside the recording" in w for w in other.warnings), other.warnings
    (w,) = other.checkpoint_waits.to_dict("records")
    assert w["wait_ms"] == 200.0 and not w["big_enough"]

    own = _forced_in_task(tmp_path, "own", 999)
    assert not len(own.untraced_checkpoints) and not len(own.checkpoint_costs)
    assert not len(own.checkpoint_waits)
    assert not any("jstall" in w for w in own.warnings), own.warnings
    (note,) = [n for n in own.notes if "jstall's own process" in n]
    assert note.startswith("5 forced checkpoints ran in jstall's own process (jstall 999 on 7:0")
    assert "journal_size" not in [r.kind for r in own.recommendations]
    assert "journal not big enough" not in session_summary(own)


GIB, MIB = 1 << 30, 1 << 20


def test_the_log_size_advice_says_what_a_larger_internal_log_takes(tmp_path):
    """The run logged 146.5 MiB (300,000 basic blocks) into a 64 MiB log: a 147 MiB internal
    log takes 83 MiB more of a 1 GiB data section (8.1 %), with 900 MiB free at the start;
    the figures are the JSON's inputs."""
    a = analyze(_xfs_session(tmp_path, data_bytes=GIB, ag_bytes=256 * MIB, free_bytes=900 * MIB))
    (ls,) = [r for r in a.recommendations if r.kind == "log_size"]
    assert ls.journal_size_mib == 147
    i = ls.inputs
    assert (i["more_mib"], i["data_mib"], i["ag_mib"], i["free_mib"]) == (83, 1024, 256, 900)
    assert i["fits_ag"] is True and i["fits_free"] is True and round(100 * i["data_share"], 1) == 8.1
    assert "mkfs.xfs -l size=147m" in ls.text
    assert "it takes 83 MiB more of the data section's 1 GiB (8.1%) (900 MiB were free" in ls.text, ls.text
    assert "logdev=DEV,size=147m" in ls.text


def test_a_log_larger_than_an_allocation_group_is_advised_as_an_external_log(tmp_path):
    """With 100 MiB allocation groups a 147 MiB internal log cannot be made (mkfs.xfs refuses
    a log larger than one): the advice says so and gives the external log, not the refused
    command."""
    a = analyze(_xfs_session(tmp_path, data_bytes=400 * MIB, ag_bytes=100 * MIB, free_bytes=300 * MIB))
    (ls,) = [r for r in a.recommendations if r.kind == "log_size"]
    assert ls.inputs["fits_ag"] is False
    assert "does not fit in one of this filesystem's 100 MiB allocation groups" in ls.text, ls.text
    assert "mkfs.xfs -l size=" not in ls.text and "logdev=DEV,size=147m" in ls.text


def test_a_larger_internal_log_that_leaves_no_room_for_the_data_says_so(tmp_path):
    """50 MiB free: the 83 MiB more the log takes would leave the filesystem's contents no
    room when they are copied back."""
    a = analyze(_xfs_session(tmp_path, data_bytes=GIB, ag_bytes=256 * MIB, free_bytes=50 * MIB))
    (ls,) = [r for r in a.recommendations if r.kind == "log_size"]
    assert ls.inputs["fits_free"] is False
    assert "more than the 50 MiB free when the recording began" in ls.text, ls.text
    assert "mkfs.xfs -l size=" not in ls.text and "logdev=DEV,size=147m" in ls.text


def test_the_log_size_advice_of_a_session_without_the_data_section(tmp_path):
    """Sessions recorded before the data section was kept: the size and command, no room."""
    (ls,) = [r for r in analyze(_xfs_session(tmp_path)).recommendations if r.kind == "log_size"]
    assert ls.inputs["data_mib"] is None and ls.inputs["fits_ag"] is None
    assert "mkfs.xfs -l size=147m" in ls.text and "data section" not in ls.text
