"""Waits through kernel workers and device waits beside a checkpoint, on hand-built tables: a
call that waits for a kernel worker (``__flush_work`` for XFS's inodegc worker) takes the cause
of what the worker's own records show it waited on (chains.worker_causes), the stall table
names the worker, and the summary separates that time; a device-queue wait while another
task's checkpoint wrote home on the same device is tied to that task (chains.checkpoint_overlap)
with its cause unchanged."""

import numpy as np
import pandas as pd
import pytest

from jstall.analyzer import analyze
from jstall.analyzer.stalls.chains import queued_causes, worker_causes, worker_waits
from synthetic import journal_meta, metadata, rows, write_session
from jstall.analyzer.render.text import session_summary

from test_wait_chains import MS, interval, table

FLUSH = ["__schedule", "schedule", "schedule_timeout", "__wait_for_common", "wait_for_completion",
         "__flush_work", "xfs_inodegc_queue", "destroy_inode", "do_unlinkat", "__x64_sys_unlinkat"]


def objects(*values):
    return np.array(values, dtype=object)


def xfs_wait(ts_ms, ms, tid, comm="kworker/0:1", context="kernel thread", in_call=False, dev="7:0"):
    return {"ts_ns": ts_ms * MS, "end_ns": (ts_ms + ms) * MS, "wait_ns": ms * MS, "dev": dev,
            "tid": tid, "pid": tid, "comm": comm, "head": "reserve", "ticket": 1,
            "unit_res_bytes": 1024, "cnt": 2, "permanent": True, "sleeps": 1,
            "in_traced_call": in_call, "call_ts_ns": ts_ms * MS if in_call else None,
            "context": context}


def waits_of(*w, jbd2_events=None):
    return worker_waits(pd.DataFrame(list(w)), jbd2_events)


def kworker(ts, ms, tid, waker, comm="kworker/0:1"):
    return interval(ts, ms, tid, waker=waker, waker_comm=comm)


def test_a_flush_wait_takes_its_workers_log_space_wait_and_names_it():
    off = table(kworker(100, 200, 11, 87),               # the worker waited for log space
                kworker(400, 50, 11, 87),                # the worker's records explain nothing
                kworker(500, 50, 11, 99, comm="rm"),     # woken by a user task: not a worker
                kworker(600, 30, 11, 87))                # explained by its own stack
    w = waits_of(xfs_wait(90, 150, 87), xfs_wait(260, 20, 87),
                 xfs_wait(480, 40, 99, comm="rm", context="unlinkat"))
    assert w["cause"].tolist() == ["log_space", "log_space"] and w["tid"].tolist() == [87, 87]
    flush = "__flush_work <- destroy_inode"
    got, label, worker = worker_causes(off, objects("other", "other", "other", "metadata_io"),
                                       objects(flush, flush, flush, "x"), w)
    # the worker's records explain the second flush no more: a wait for its work (workqueue),
    # the worker named all the same
    assert got.tolist() == ["log_space", "workqueue", "other", "metadata_io"]
    assert worker.tolist() == ["kworker/0:1 87", "kworker/0:1 87", None, None]
    assert label[0] == "through worker kworker/0:1 87 in __flush_work <- destroy_inode"
    assert label[1] == "through worker kworker/0:1 87 in __flush_work <- destroy_inode"
    assert label[2] == flush


def test_the_cause_with_most_overlap_wins_and_a_jbd2_thread_checkpoint_counts_as_a_moment():
    jbd2 = pd.DataFrame({"ts_ns": [150 * MS, 900 * MS, 950 * MS], "event": ["checkpoint"] * 3,
                         "tid": [66, 66, 12], "comm": ["jbd2/loop0-8", "jbd2/loop0-8", "fs_mark"],
                         "jbd2_thread": [True, True, False]})
    w = waits_of(xfs_wait(100, 30, 66, comm="jbd2/loop0-8"), jbd2_events=jbd2)
    # fs_mark's checkpoint is no worker's
    assert sorted(w["cause"].tolist()) == ["checkpoint", "checkpoint", "log_space"]
    off = table(kworker(100, 100, 11, 66, comm="jbd2/loop0-8"),   # 30 ms log space, a checkpoint
                kworker(880, 50, 11, 66, comm="jbd2/loop0-8"),    # only the checkpoint at 900
                kworker(940, 20, 11, 12, comm="fs_mark"))         # a user task's checkpoint
    got, _, worker = worker_causes(off, objects("other", "other", "other"), objects("x", "x", "x"),
                                   w)
    assert got.tolist() == ["log_space", "checkpoint", "other"]
    assert worker.tolist() == ["jbd2/loop0-8 66", "jbd2/loop0-8 66", None]


def test_a_task_queued_behind_a_flushing_one_takes_the_workers_cause_in_turn():
    off = table(kworker(100, 300, 11, 87, comm="kworker/1:2"),      # rm flushes inodegc
                interval(120, 280, 12, waker=11, waker_comm="rm"))  # a task waits for rm's lock
    label = objects("__flush_work <- destroy_inode", "rwsem_down_write_slowpath <- do_unlinkat")
    c, label, worker = worker_causes(off, objects("other", "other"), label,
                                     waits_of(xfs_wait(100, 290, 87, comm="kworker/1:2")))
    c, label, behind = queued_causes(off, c, label)
    assert c.tolist() == ["log_space", "log_space"]
    assert worker.tolist() == ["kworker/1:2 87", None] and behind.tolist() == [None, "rm 11"]


def test_nothing_to_go_by_changes_nothing():
    off = table(kworker(100, 200, 11, 87))
    for w in (None, waits_of(), worker_waits(None, None)):
        got, label, worker = worker_causes(off, objects("other"), objects("x"), w)
        assert got.tolist() == ["other"] and label.tolist() == ["x"] and worker.tolist() == [None]
    wakers = [c for c in interval(0, 1, 1) if c.startswith("wake")]
    old = table(interval(100, 200, 11)).drop(columns=wakers)
    got, _, worker = worker_causes(old, objects("other"), objects("x"),
                                   waits_of(xfs_wait(100, 200, 87)))
    assert got.tolist() == ["other"] and worker.tolist() == [None]


def _call(ts_ms, ms, tid, comm="rm", syscall="unlinkat", dev="7:0"):
    return {"ts_ns": ts_ms * MS, "latency_ns": int(ms * MS), "tid": tid, "pid": tid,
            "comm": comm, "syscall": syscall, "ret": 0, "dev": dev, "handles": 0}


def test_the_stall_table_summary_and_json_name_the_worker(tmp_path):
    path = str(tmp_path / "s")
    grant = ["__schedule", "schedule", "xlog_grant_head_wait", "xfs_log_reserve",
             "xfs_trans_reserve", "xfs_trans_alloc", "xfs_remove"]
    stacks = [{"stack_id": 1, "frames": FLUSH}, {"stack_id": 2, "frames": grant}]
    off = [interval(100, 300, 11, comm="rm", waker=87, waker_comm="kworker/0:1", call_ms=100),
           interval(700, 100, 11, comm="rm", stack_id=2, call_ms=700)]
    waits = [xfs_wait(90, 290, 87),
             xfs_wait(700, 100, 11, comm="rm", context="unlinkat", in_call=True)]
    xlog = journal_meta(kind="xfs", log_bytes=64 << 20)
    write_session(path, {"calls": rows([_call(100, 310, 11), _call(700, 105, 11)]),
                         "offcpu": rows(off), "stacks": rows(stacks), "xfs_waits": rows(waits)},
                  metadata(journals=[xlog]))
    a = analyze(path)
    st = a.stalls.sort_values("ts_ns").reset_index(drop=True)
    assert st["cause"].tolist() == ["log_space", "log_space"]
    assert st.loc[0, "worker_ms"] == 300.0 and st.loc[0, "worker"] == "kworker/0:1 87"
    assert st.loc[0, "log_space_ms"] == 300.0 and st.loc[0, "other_ms"] == 0.0
    assert st.loc[0, "queued_ms"] == 0.0
    assert st.loc[0, "cause_label"] == \
        "through worker kworker/0:1 87 in __flush_work <- xfs_inodegc_queue"
    assert st.loc[1, "worker_ms"] == 0.0 and pd.isna(st.loc[1, "worker"])
    d = a.to_dict()
    assert d["stalls"]["through_worker"] == {"count": 1, "total_ms": 300.0}
    assert d["stalls"]["workers"] == {"kworker/0:1 87": 300.0}
    assert d["stalls"]["by_cause"]["other"]["total_ms"] == 0.0
    top = {s["ts_ns"]: s for s in d["stalls"]["top"]}
    assert top[100 * MS]["worker"] == "kworker/0:1 87" and top[100 * MS]["worker_ms"] == 300.0
    text = session_summary(a)
    assert ("300 ms of the stall time (75% of it off CPU) waited for kernel workers "
            "(__flush_work, a completion, a lock the worker held), in 1 stall; each took the cause of what its "
            "worker waited on meanwhile, or workqueue where the worker's records name none. Workers: "
            "kworker/0:1 87 300 ms." in text), text


#: a worker's stacks (innermost first): XFS's flush of delayed allocations when a reservation
#: found no free blocks, waiting for writeback; its data pages; a log-space wait; a sleep that
#: names nothing
FLUSH_INODES = ["__schedule", "schedule", "wb_wait_for_completion", "sync_inodes_sb",
                "xfs_flush_inodes_worker", "process_one_work", "worker_thread", "kthread"]
PAGES = ["__schedule", "io_schedule", "folio_wait_bit", "folio_wait_writeback", "__filemap_fdatawait_range",
         "filemap_fdatawait_keep_errors", "sync_inodes_sb", "xfs_flush_inodes_worker", "process_one_work"]
GRANT = ["__schedule", "schedule", "xlog_grant_head_wait", "xlog_grant_head_check", "xfs_log_reserve",
         "xfs_trans_alloc", "xfs_inactive_ifree", "xfs_inodegc_worker", "process_one_work"]
IDLE = ["__schedule", "schedule", "rescuer_thread", "kthread"]
WORKER_STACKS = pd.DataFrame({"stack_id": [21, 22, 23, 24], "frames": [FLUSH_INODES, PAGES, GRANT, IDLE]})


def worker_interval(ts_ms, ms, tid, stack_id, function, comm="kworker/1:2", runnable=False):
    """A worker's off-CPU interval inside a work item (the worker_offcpu table's row)."""
    return {**{k: v for k, v in interval(ts_ms, ms, tid, comm=comm, stack_id=stack_id, runnable=runnable).items()
               if k not in ("call_ts_ns", "syscall", "dev")},
            "work_ts_ns": (ts_ms - 1) * MS, "work_function": function}


def test_a_workers_own_intervals_give_their_causes_by_stack_and_name_the_work_function():
    """The recorder's worker intervals (worker_offcpu): each takes the cause of its stack
    (the flush of delayed allocations: enospc_flush, even where its innermost wait is a data
    page's); one that names nothing and a preempted one pass nothing on; a log-space one is
    kept only where xfs_waits did not measure the worker's log-space waits itself."""
    wo = table(worker_interval(100, 300, 87, 21, "xfs_flush_inodes_worker"),
               worker_interval(400, 90, 87, 22, "xfs_flush_inodes_worker"),
               worker_interval(500, 40, 88, 23, "xfs_inodegc_worker"),
               worker_interval(600, 40, 88, 24, "xfs_inodegc_worker"),
               worker_interval(700, 40, 88, 23, "xfs_inodegc_worker", runnable=True))
    w = worker_waits(None, None, wo, WORKER_STACKS)
    assert w["cause"].tolist() == ["enospc_flush", "enospc_flush", "log_space"]
    assert w["work"].tolist() == ["xfs_flush_inodes_worker"] * 2 + ["xfs_inodegc_worker"]
    assert w["end_ns"].tolist() == [400 * MS, 490 * MS, 540 * MS]
    measured = worker_waits(pd.DataFrame([xfs_wait(500, 40, 88)]), None, wo, WORKER_STACKS)
    assert sorted(zip(measured["cause"], measured["work"].fillna("-"))) == \
        [("enospc_flush", "xfs_flush_inodes_worker")] * 2 + [("log_space", "-")]


def test_a_create_waiting_for_the_flush_worker_takes_its_cause_and_names_its_work():
    """A create asleep in __flush_work <- xfs_create, woken by the flush worker: the worker's
    intervals overlapping the sleep give it their cause (the one with the most time among
    several), and the label names the worker and its work function."""
    wo = table(worker_interval(100, 300, 87, 21, "xfs_flush_inodes_worker"),
               worker_interval(400, 90, 87, 22, "xfs_flush_inodes_worker"),
               worker_interval(1000, 30, 88, 23, "xfs_inodegc_worker", comm="kworker/0:3"),
               worker_interval(1040, 10, 88, 22, "xfs_flush_inodes_worker", comm="kworker/0:3"))
    off = table(interval(95, 400, 11, comm="touch", waker=87, waker_comm="kworker/1:2"),
                interval(1000, 55, 12, comm="rm", waker=88, waker_comm="kworker/0:3"))
    got, label, worker = worker_causes(off, objects("other", "other"),
                                       objects("__flush_work <- xfs_create", "__flush_work <- destroy_inode"),
                                       worker_waits(None, None, wo, WORKER_STACKS))
    assert got.tolist() == ["enospc_flush", "log_space"]
    assert worker.tolist() == ["kworker/1:2 87", "kworker/0:3 88"]
    assert label.tolist() == [
        "through worker kworker/1:2 87 (xfs_flush_inodes_worker) in __flush_work <- xfs_create",
        "through worker kworker/0:3 88 (xfs_inodegc_worker) in __flush_work <- destroy_inode"]


def test_a_workers_nested_waits_are_all_found():
    """A measured log-space wait spans the reservation, from its first sleep to its exit, and
    so holds the worker's later, shorter records: a wait that began before them and still
    overlaps the call's sleep is found (it holds the most of it)."""
    wo = table(worker_interval(150, 20, 87, 21, "xfs_flush_inodes_worker"),
               worker_interval(300, 80, 87, 21, "xfs_flush_inodes_worker"))
    w = worker_waits(pd.DataFrame([xfs_wait(100, 400, 87)]), None, wo, WORKER_STACKS)
    off = table(interval(290, 100, 11, comm="touch", waker=87, waker_comm="kworker/1:2"))
    got, label, _ = worker_causes(off, objects("other"), objects("x"), w)
    assert got.tolist() == ["log_space"] and label.tolist() == ["through worker kworker/1:2 87 in x"]


CHECKPOINTING = ["__schedule", "io_schedule", "bit_wait_io", "__wait_on_buffer",
                 "jbd2_log_do_checkpoint", "__jbd2_log_wait_for_space", "add_transaction_credits",
                 "start_this_handle"]
WRITEBACK = ["__schedule", "io_schedule", "folio_wait_bit_common", "folio_wait_writeback",
             "__filemap_fdatawait_range", "file_write_and_wait_range", "ext4_sync_file"]
COMMIT = ["__schedule", "schedule", "jbd2_log_wait_commit", "ext4_sync_file"]
MUTEX = ["__schedule", "schedule", "__mutex_lock", "mutex_lock_io", "__jbd2_log_wait_for_space",
         "add_transaction_credits", "start_this_handle"]


def test_device_queue_waits_beside_another_tasks_checkpoint_are_tied_to_it(tmp_path):
    """A victim's fsync waits (data_writeback, commit_wait) on the device a culprit's forced
    checkpoint writes home to: the overlap is tied to the culprit, the victim's cause stays its
    own; a wait on another device, the culprit's own waits and a task waiting for the
    checkpoint mutex (not writing) tie nothing."""
    path = str(tmp_path / "s")
    stacks = [{"stack_id": 1, "frames": CHECKPOINTING}, {"stack_id": 2, "frames": WRITEBACK},
              {"stack_id": 3, "frames": COMMIT}, {"stack_id": 4, "frames": MUTEX}]

    def iv(ts, ms, tid, comm, stack, call, dev="7:0"):
        return {**interval(ts, ms, tid, comm=comm, stack_id=stack, call_ms=call), "dev": dev}

    off = [iv(100, 50, 22, "culprit", 1, 100), iv(160, 40, 22, "culprit", 1, 100),  # writes home
           iv(120, 60, 11, "victim", 2, 120), iv(180, 30, 11, "victim", 3, 120),    # 30 + 20, 20
           iv(300, 40, 11, "victim", 2, 300),                      # no checkpoint running then
           iv(100, 80, 33, "other", 2, 100, dev="7:1"),            # another device
           iv(130, 60, 44, "waiter", 4, 130),                      # waits for the mutex
           iv(400, 30, 55, "nodev", 1, 400, dev=None)]             # a checkpoint on no known device
    calls = [_call(100, 110, 22, "culprit", "setxattr"), _call(120, 95, 11, "victim", "fsync"),
             _call(300, 45, 11, "victim", "fsync"), _call(100, 85, 33, "other", "fsync", "7:1"),
             _call(130, 65, 44, "waiter", "setxattr"), _call(400, 35, 55, "nodev", "setxattr", None)]
    meta = metadata(journals=[journal_meta("7:0"), journal_meta("7:1")])
    write_session(path, {"calls": rows(calls), "offcpu": rows(off), "stacks": rows(stacks)}, meta)
    a = analyze(path)
    st = a.stalls.set_index(["tid", "ts_ns"])
    v = st.loc[(11, 120 * MS)]
    assert v["during_checkpoint_ms"] == 70.0 and v["checkpoint_by"] == "culprit 22"
    assert v["cause"] == "data_writeback" and v["data_writeback_ms"] == 60.0
    assert v["commit_wait_ms"] == 30.0
    late = st.loc[(11, 300 * MS)]
    assert late["during_checkpoint_ms"] == 0.0 and pd.isna(late["checkpoint_by"])
    for key in [(33, 100 * MS), (22, 100 * MS), (44, 130 * MS)]:
        assert st.loc[key, "during_checkpoint_ms"] == 0.0, key
    d = a.to_dict()["stalls"]
    assert d["during_checkpoint"] == {"count": 1, "total_ms": 70.0}
    assert d["checkpointers"] == {"culprit 22": 70.0}
    assert ("70 ms of waits on the device's queue (data_writeback, commit_wait, device_flush) "
            "ran while another task's checkpoint wrote home on the same device, in 1 stall "
            "(their cause unchanged). Checkpointing: culprit 22 70 ms.") in session_summary(a)


def test_the_log_remedies_may_shorten_a_flush_by_what_the_logs_waits_covered(tmp_path):
    """A create waits 400 ms for XFS's flush of delayed allocations (enospc_flush through the
    flush worker); kernel workers waited for log space through half of it (their writeback's
    transactions), and an unlink waited 100 ms for log space itself. The XFS log remedies'
    high end takes that half of the flush (their low end none of it): covered_share, and the
    fraction in each remedy's interval."""
    from jstall.analyzer.advice import remedies

    path = str(tmp_path / "s")
    grant = ["__schedule", "schedule", "xlog_grant_head_wait", "xlog_grant_head_check", "xfs_log_reserve",
             "xfs_trans_alloc", "xfs_remove"]
    flush = ["__schedule", "schedule", "wait_for_completion", "__flush_work", "xfs_create"]
    stacks = [{"stack_id": 1, "frames": flush}, {"stack_id": 2, "frames": grant},
              {"stack_id": 21, "frames": FLUSH_INODES}]
    off = [interval(1000, 400, 11, comm="touch", waker=87, waker_comm="kworker/1:2", call_ms=1000),
           interval(3000, 100, 12, comm="rm", stack_id=2, call_ms=3000)]
    wo = [worker_interval(1000, 400, 87, 21, "xfs_flush_inodes_worker")]
    waits = [xfs_wait(1000, 150, 90, comm="kworker/u8:1"), xfs_wait(1100, 100, 91, comm="kworker/u8:2"),
             xfs_wait(3000, 100, 12, comm="rm", context="unlinkat", in_call=True)]
    calls = [_call(1000, 405, 11, comm="touch", syscall="openat"), _call(3000, 105, 12)]
    write_session(path, {"calls": rows(calls), "offcpu": rows(off), "stacks": rows(stacks),
                         "xfs_waits": rows(waits), "worker_offcpu": rows(wo)},
                  metadata(journals=[journal_meta(kind="xfs", log_bytes=8 << 20)]))
    a = analyze(path)
    st = a.stalls.set_index("tid")
    assert st.loc[11, "cause"] == "enospc_flush" and st.loc[11, "enospc_flush_ms"] == 400.0
    # the union of the workers' waits (1,000-1,200 ms) covers half of the create's 405 ms call
    w = a.session.xfs_waits
    t0 = w["ts_ns"].to_numpy()
    share = remedies.covered_share(a.stalls, t0, t0 + w["wait_ns"].to_numpy(), "7:0", "enospc_flush")
    assert share == pytest.approx(200 / 405)
    assert remedies.covered_share(a.stalls, t0, t0 + w["wait_ns"].to_numpy(), "7:0", "checkpoint") == 0.0
    logs = [r for r in a.recommendations if r.kind in ("log_size", "log_buffers", "external_log")]
    assert logs, [r.kind for r in a.recommendations]
    for r in logs:
        assert r.inputs["fractions_high"]["enospc_flush"] == pytest.approx(200 / 405), r.kind
        assert "enospc_flush" not in r.inputs["fractions_low"]
        assert r.stall_ms_removed_high >= 400.0 * 200 / 405, r.kind
