"""Unit tests of the analyzer on hand-built sessions written with the real session format."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from jstall.analyzer import analyze
from jstall.analyzer.stalls.causes import CAUSES, classify_stack, stack_causes
from jstall.analyzer.jbd2.fill import forced_fill_pct
from jstall.analyzer.session.load import load_session
from synthetic import fill_columns, journal_meta, metadata, rows, write_session
from jstall.analyzer.render.text import session_summary

MS = 1_000_000
S = 1_000_000_000

TAIL = ["ext4_xattr_set", "__vfs_setxattr", "vfs_setxattr", "path_setxattr", "__x64_sys_setxattr",
        "do_syscall_64", "entry_SYSCALL_64_after_hwframe"]
STACKS = {
    1: ("checkpoint", ["__schedule", "schedule", "io_schedule", "bit_wait_io", "__wait_on_bit",
                       "out_of_line_wait_on_bit", "__wait_on_buffer", "jbd2_log_do_checkpoint",
                       "__jbd2_log_wait_for_space", "add_transaction_credits", "start_this_handle",
                       "jbd2__journal_start", "__ext4_journal_start_sb"] + TAIL),
    2: ("transaction_wait", ["__schedule", "schedule", "wait_transaction_locked", "add_transaction_credits",
                             "start_this_handle", "jbd2__journal_start", "__ext4_journal_start_sb"] + TAIL),
    3: ("commit_wait", ["__schedule", "schedule", "jbd2_log_wait_commit", "jbd2_complete_transaction",
                        "ext4_fc_commit", "ext4_sync_file", "__x64_sys_fsync", "do_syscall_64"]),
    4: ("metadata_io", ["__schedule+0x2b1/0x760", "schedule+0x27/0x80", "io_schedule+0x46/0x70",
                      "bit_wait_io+0x11/0x60", "__wait_on_bit+0x42/0x110", "out_of_line_wait_on_bit+0x8c/0xb0",
                      "__wait_on_buffer+0x30/0x40", "ext4_read_bh+0x7a/0x90", "__ext4_get_inode_loc+0x1b0/0x4a0"]
          + TAIL),
    5: ("lock_buffer", ["__schedule", "schedule", "io_schedule", "bit_wait_io", "__wait_on_bit_lock",
                        "out_of_line_wait_on_bit_lock", "__lock_buffer", "do_get_write_access",
                        "jbd2_journal_get_write_access", "__ext4_journal_get_write_access"] + TAIL),
    6: ("writeback_throttle", ["__schedule", "schedule_timeout", "io_schedule_timeout", "balance_dirty_pages",
                               "balance_dirty_pages_ratelimited_flags", "generic_perform_write",
                               "ext4_buffered_write_iter", "vfs_write", "ksys_write"]),
    7: ("other", ["__schedule", "schedule", "rwsem_down_write_slowpath", "down_write", "vfs_setxattr",
                  "path_setxattr", "__x64_sys_setxattr"]),
    # a commit wait under a checkpoint is the checkpoint
    8: ("checkpoint", ["__schedule", "schedule", "jbd2_log_wait_commit", "__jbd2_log_wait_for_space",
                       "add_transaction_credits", "start_this_handle"] + TAIL),
    # fsync's own data pages: the generic folio wait under folio_wait_writeback
    9: ("data_writeback", ["__traceiter_sched_switch", "__schedule", "schedule", "io_schedule",
                           "folio_wait_bit_common", "folio_wait_writeback", "__filemap_fdatawait_range",
                           "file_write_and_wait_range", "ext4_sync_file", "__x64_sys_fsync"]),
    # fsync's cache flush: the completion wait under submit_bio_wait under blkdev_issue_flush
    10: ("device_flush", ["__traceiter_sched_switch", "__schedule", "schedule", "io_schedule_timeout",
                          "__wait_for_common", "wait_for_completion_io_timeout", "submit_bio_wait",
                          "blkdev_issue_flush", "ext4_sync_file", "__x64_sys_fsync"]),
    # truncate in unlink waiting on pages under writeback
    11: ("data_writeback", ["__schedule", "schedule", "io_schedule", "folio_wait_bit_common",
                            "folio_wait_writeback", "truncate_inode_pages_range", "ext4_evict_inode", "evict",
                            "do_unlinkat", "__x64_sys_unlinkat"]),
    # the cache flush of a checkpoint's tail update is the checkpoint
    12: ("checkpoint", ["__schedule", "schedule", "io_schedule_timeout", "wait_for_completion_io_timeout",
                        "submit_bio_wait", "blkdev_issue_flush", "jbd2_cleanup_journal_tail",
                        "__jbd2_log_wait_for_space", "add_transaction_credits"] + TAIL),
    # unknown: labelled by the innermost frames that are neither tracing nor scheduler plumbing
    13: ("other", ["__traceiter_sched_switch", "__schedule", "schedule", "schedule_timeout", "io_schedule_timeout",
                   "bpf_trace_run2", "msleep", "some_driver_wait"]),
    # XFS: a reservation sleeping for log space; a metadata read under it is the log space
    14: ("log_space", ["__schedule", "schedule", "xlog_grant_head_wait", "xlog_grant_head_check", "xfs_log_reserve",
                       "xfs_trans_reserve", "xfs_trans_alloc_icreate", "xfs_create", "xfs_generic_create",
                       "vfs_mknod", "do_mknodat", "__x64_sys_mknodat"]),
    15: ("iclog_space", ["__schedule", "schedule", "xlog_wait", "xlog_state_get_iclog_space", "xlog_write",
                         "xlog_cil_push_work", "process_one_work"]),
    16: ("cil_throttle", ["__schedule", "schedule", "xlog_wait", "xlog_cil_push_background", "xlog_cil_commit",
                          "__xfs_trans_commit", "xfs_create", "xfs_generic_create", "vfs_mkdir"]),
    17: ("log_force", ["__schedule", "schedule", "xlog_wait_on_iclog", "xfs_log_force_seq", "xfs_file_fsync",
                       "__x64_sys_fsync", "do_syscall_64"]),
    18: ("metadata_io", ["__schedule", "schedule", "schedule_timeout", "__wait_for_common", "xfs_buf_iowait",
                         "xfs_buf_read_map", "xfs_trans_read_buf_map", "xfs_imap_to_bp", "xfs_iget"]),
    # XFS's flush of delayed allocations (a reservation found no free blocks): its worker's
    # wait for the writeback, a data page's wait under it included
    19: ("enospc_flush", ["__schedule", "schedule", "io_schedule", "folio_wait_bit", "folio_wait_writeback",
                          "__filemap_fdatawait_range", "filemap_fdatawait_keep_errors", "sync_inodes_sb",
                          "xfs_flush_inodes_worker", "process_one_work", "worker_thread", "kthread"]),
    # an unlink waiting for XFS's inodegc worker (the xfs frames inlined into destroy_inode),
    # where none of the worker's own waits explains it: labelled by whose wait it was
    20: ("workqueue", ["bpf_prog_1b3dc44952e5bd75_btf_sched_switc", "bpf_trace_run4", "__schedule", "schedule",
                       "schedule_timeout", "wait_for_completion", "__flush_work", "destroy_inode", "do_unlinkat",
                       "__x64_sys_unlinkat"]),
}


def stacks_df():
    return pd.DataFrame({"stack_id": list(STACKS), "frames": [f for _, f in STACKS.values()]})


def call(ts, latency, tid, syscall="setxattr", dev="7:0", **kw):
    r = {"ts_ns": ts, "latency_ns": latency, "tid": tid, "pid": tid, "comm": f"w{tid}", "syscall": syscall,
         "ret": 0, "dev": dev, "handles": 1}
    r.update(kw)
    return r


def off(call_row, ts, dur, stack_id, runnable=False):
    return {"ts_ns": ts, "offcpu_ns": dur, "tid": call_row["tid"], "pid": call_row["pid"], "comm": call_row["comm"],
            "state": 0 if runnable else 2, "runnable": runnable, "stack_id": stack_id,
            "call_ts_ns": call_row["ts_ns"], "syscall": call_row["syscall"], "dev": call_row["dev"]}


def jev(ts, event, tid, dev="7:0", jbd2_thread=False, transaction=None, free=None, result=None, **kw):
    r = {"ts_ns": ts, "event": event, "dev": dev, "transaction": transaction, "tid": tid, "pid": tid,
         "comm": f"jbd2/loop{dev[-1]}-8" if jbd2_thread else f"w{tid}", "jbd2_thread": jbd2_thread,
         "result": result}
    if free is not None:
        r.update(fill_columns(free, **kw))
    return r


def fsample(ts, free, dev="7:0", **kw):
    return {"ts_ns": ts, "dev": dev, "source": "handle_start", **fill_columns(free, **kw)}


def _session(tmp_path, name="s", meta=None, **tables):
    return load_session(write_session(str(tmp_path / name), {k: rows(v) if isinstance(v, list) else v
                                                             for k, v in tables.items()}, meta))


# --- causes ---------------------------------------------------------------------------------

def test_each_cause_recognised_from_its_stack(tmp_path):
    s = _session(tmp_path, stacks=stacks_df())
    assert s.stacks["frames"].map(len).tolist() == [len(f) for _, f in STACKS.values()]
    got = stack_causes(s.stacks).set_index("stack_id")
    for sid, (cause, frames) in STACKS.items():
        assert got.loc[sid, "cause"] == cause, (sid, got.loc[sid].to_dict())
        assert classify_stack(frames) == cause
    assert got.loc[7, "label"] == "rwsem_down_write_slowpath <- down_write" or "vfs_setxattr" in got.loc[7, "label"]
    # with fast_commit an fsync waits in jbd2_fc_begin_commit for the full or fast commit under
    # way (JBD2_FULL_COMMIT_ONGOING, JBD2_FAST_COMMIT_ONGOING): a commit wait, not "other"
    assert classify_stack(["__schedule", "schedule", "jbd2_fc_begin_commit", "ext4_fc_commit",
                           "ext4_sync_file", "vfs_fsync_range", "__x64_sys_fsync"]) == "commit_wait"
    assert got.loc[1, "label"] == "jbd2_log_do_checkpoint"
    assert got.loc[10, "label"] == "blkdev_issue_flush" and got.loc[9, "label"] == "folio_wait_writeback"
    assert got.loc[13, "label"] == "msleep <- some_driver_wait"
    assert got.loc[20, "label"] == "__flush_work <- destroy_inode"
    # a cause named anywhere in the stack wins over the wait for a worker
    assert classify_stack(["__schedule", "schedule", "wait_for_completion", "__flush_work", "xfs_flush_inodes",
                           "xfs_create"]) == "enospc_flush"
    assert set(got["cause"]) | {"cpu"} == set(CAUSES)


def test_stall_time_split_by_cause_and_runnable_is_cpu(tmp_path):
    c = call(1 * S, 600 * MS, 100)
    offs = [off(c, c["ts_ns"] + 1 * MS, 300 * MS, 1), off(c, c["ts_ns"] + 310 * MS, 100 * MS, 4),
            off(c, c["ts_ns"] + 420 * MS, 50 * MS, 7, runnable=True),  # stack says other, runnable wins
            off(c, c["ts_ns"] + 480 * MS, 40 * MS, 2), off(c, c["ts_ns"] + 530 * MS, 20 * MS, 5)]
    # a short call (below min_ms) with its own off-CPU time: not a stall
    c2 = call(3 * S, 5 * MS, 100)
    s = _session(tmp_path, calls=[c, c2], offcpu=offs + [off(c2, c2["ts_ns"], 2 * MS, 1)], stacks=stacks_df(),
                 jbd2_events=[jev(c["ts_ns"] + 2 * MS, "checkpoint", 100, result=0)])
    a = analyze(s)
    assert len(a.stalls) == 1
    r = a.stalls.iloc[0]
    assert r["cause"] == "checkpoint" and r["cause_label"] == "jbd2_log_do_checkpoint"
    assert r["checkpoint_ms"] == 300 and r["metadata_io_ms"] == 100 and r["cpu_ms"] == 50
    assert r["transaction_wait_ms"] == 40 and r["lock_buffer_ms"] == 20 and r["other_ms"] == 0
    assert r["offcpu_ms"] == 510 and r["oncpu_ms"] == 90
    assert bool(r["own_checkpoint"]) and r["own_checkpoints"] == 1
    d = a.to_dict()
    assert d["stalls"]["by_cause"]["checkpoint"] == {"count": 1, "total_ms": 300.0}
    assert d["stalls"]["by_cause"]["cpu"] == {"count": 0, "total_ms": 50.0}


def test_each_cause_can_be_primary(tmp_path):
    calls, offs = [], []
    for i, (sid, (cause, _)) in enumerate(STACKS.items()):
        c = call((i + 1) * S, 100 * MS, 1000 + i)
        calls.append(c)
        offs.append(off(c, c["ts_ns"] + MS, 80 * MS, sid))
    c = call(20 * S, 100 * MS, 2000)
    calls.append(c)
    offs.append(off(c, c["ts_ns"] + MS, 80 * MS, 3, runnable=True))
    a = analyze(_session(tmp_path, calls=calls, offcpu=offs, stacks=stacks_df()))
    expected = [cause for cause, _ in STACKS.values()] + ["cpu"]
    assert a.stalls["cause"].astype(str).tolist() == expected
    bc = a.to_dict()["stalls"]["by_cause"]
    assert set(bc) == set(CAUSES)
    assert all(bc[cz]["count"] >= 1 for cz in CAUSES)
    assert bc["checkpoint"] == {"count": 3, "total_ms": 240.0}


def test_own_task_checkpoint_beats_coincident_background_one(tmp_path):
    t = 5 * S
    own = call(t, 400 * MS, 300)
    bg_only = call(t, 400 * MS, 200)
    evs = [
        jev(t + 100 * MS, "checkpoint", 50, jbd2_thread=True, result=0, free=100),
        jev(t + 100 * MS, "checkpoint", 300, result=0, free=100),  # the same instant, in the stalled task
    ]
    offs = [off(own, t + 1 * MS, 350 * MS, -1), off(bg_only, t + 1 * MS, 350 * MS, -1)]
    a = analyze(_session(tmp_path, calls=[own, bg_only], offcpu=offs, jbd2_events=evs, stacks=stacks_df()))
    st = a.stalls.set_index("tid")
    assert bool(st.loc[300, "own_checkpoint"]) and st.loc[300, "cause"] == "checkpoint"
    assert "own thread" in st.loc[300, "cause_label"]
    assert not bool(st.loc[200, "own_checkpoint"]) and st.loc[200, "cause"] == "other"
    assert st.loc[200, "background_checkpoints"] == 1 and st.loc[300, "background_checkpoints"] == 1
    # a checkpoint by the same thread just after its call ended is not the call's
    a2 = analyze(_session(tmp_path, "s2", calls=[own], offcpu=[off(own, t + MS, 350 * MS, -1)],
                          jbd2_events=[jev(t + 400 * MS + 1, "checkpoint", 300, result=0)]))
    assert not bool(a2.stalls["own_checkpoint"].iloc[0])
    a3 = analyze(_session(tmp_path, "s3", calls=[own], offcpu=[off(own, t + MS, 350 * MS, -1)],
                          jbd2_events=[jev(t + 400 * MS, "checkpoint", 300, result=0)]))
    assert bool(a3.stalls["own_checkpoint"].iloc[0])
    ck = a.checkpoints
    assert ck["forced"].tolist() == [False, True]
    assert a.journals.set_index("dev").loc["7:0", "forced_checkpoints"] == 1


# --- fill -----------------------------------------------------------------------------------

def test_fill_asof_join_at_exact_boundaries(tmp_path):
    t, lat = 10 * S, 50 * MS
    c = call(t, lat, 100, journal_free_blocks=999, journal_min_free_blocks=999, journal_log_blocks=1024)
    samples = [fsample(t - 1, 800, running_transaction=7), fsample(t, 600, running_transaction=8,
                                                                   committing_transaction=7),
               fsample(t + lat, 200), fsample(t + lat + 1, 10)]
    a = analyze(_session(tmp_path, calls=[c], fill=samples))
    r = a.stalls.iloc[0]
    assert r["free_start_blocks"] == 600  # the sample exactly at the start is "when it began"
    assert r["running_transaction"] == 8 and r["committing_transaction"] == 7
    assert r["min_free_blocks"] == 200  # the sample exactly at the end is inside; end + 1 is not
    assert r["fill_start_pct"] == pytest.approx(100 * (1 - 600 / 1024))
    assert r["fill_max_pct"] == pytest.approx(100 * (1 - 200 / 1024))
    assert r["forced_fill_pct"] == pytest.approx(100 * (1 - 288 / 1024))
    assert bool(r["at_forced_level"])  # 200 - 32 < 256
    # one ns later the start sample is the 600 one still; one ns earlier it is the 800 one
    a2 = analyze(_session(tmp_path, "s2", calls=[dict(c, ts_ns=t - 1)], fill=samples))
    assert a2.stalls.iloc[0]["free_start_blocks"] == 800
    assert a2.stalls.iloc[0]["min_free_blocks"] == 600  # [t-1, t-1+lat] excludes the 200 at t+lat


def test_fill_from_jbd2_and_log_tail_and_call_fallback(tmp_path):
    t = 2 * S
    c1 = call(t, 30 * MS, 1)
    c2 = call(t + S, 30 * MS, 2, journal_free_blocks=700, journal_min_free_blocks=650, journal_log_blocks=1024,
              dev="8:16")  # no samples on this device: the call's own fields
    lt = {"ts_ns": t + 10 * MS, "dev": "7:0", "tid": 9, "pid": 9, "comm": "jbd2/loop0-8", "tail_sequence": 5,
          "first_tid": 5, "block_nr": 10, "freed_blocks": 300, **fill_columns(90)}
    commit = jev(t - MS, "start_commit", 9, jbd2_thread=True, transaction=4, free=500)
    a = analyze(_session(tmp_path, calls=[c1, c2], jbd2_events=[commit], log_tail=[lt]))
    r1, r2 = a.stalls.iloc[0], a.stalls.iloc[1]
    assert r1["free_start_blocks"] == 500 and r1["min_free_blocks"] == 90
    assert r2["free_start_blocks"] == 700 and r2["min_free_blocks"] == 650
    assert not bool(r2["at_forced_level"])
    assert a.timeline["source"].tolist() == ["jbd2:start_commit", "log_tail"]


def test_forced_fill_level_formula():
    assert forced_fill_pct(256, 1024) == pytest.approx(71.875)
    # a 4 MiB journal: 1024 blocks, j_max_transaction_buffers 256 (kernel value), log 1..1024
    assert forced_fill_pct(256, 1023) == pytest.approx(100 * (1 - 288 / 1023))


# --- journals -------------------------------------------------------------------------------

def run_stat(ts, txn, dev="7:0", hz=250, handles=10, blocks=20, logged=22, **jiffies):
    r = {"ts_ns": ts, "dev": dev, "transaction": txn, "tid": 9, "pid": 9, "comm": f"jbd2/{dev}",
         "handle_count": handles, "blocks": blocks, "blocks_logged": logged}
    for p in ("wait", "request_delay", "running", "locked", "flushing", "logging"):
        j = jiffies.get(p, 0)
        r[f"{p}_jiffies"] = j
        r[f"{p}_ns"] = j * S // hz
    return r


def test_several_journals(tmp_path):
    meta = metadata(journals=[journal_meta("7:0"), journal_meta("7:1", journal_blocks=4096,
                                                               max_transaction_blocks=1024)])
    big = dict(last_block=4097, journal_blocks=4096, max_transaction_blocks=1024)
    c0, c1 = call(1 * S, 40 * MS, 10, dev="7:0"), call(1 * S, 40 * MS, 11, dev="7:1")
    a = analyze(_session(
        tmp_path, meta=meta, calls=[c0, c1],
        fill=[fsample(S - 5, 100, "7:0"), fsample(S - 5, 3000, "7:1", **big), fsample(S + 5, 50, "7:0")],
        run_stats=[run_stat(S, 1, "7:0", running=1250, logging=10), run_stat(S, 1, "7:1", logging=30),
                   run_stat(2 * S, 2, "7:1", logging=50, handles=30, blocks=100, logged=104)],
        jbd2_events=[jev(S + 1, "checkpoint", 10, "7:0", result=0), jev(S + 2, "checkpoint", 77, "7:1", True)]))
    st = a.stalls.set_index("dev")
    assert st.loc["7:0", "free_start_blocks"] == 100 and st.loc["7:0", "min_free_blocks"] == 50
    assert st.loc["7:1", "free_start_blocks"] == 3000 and st.loc["7:1", "min_free_blocks"] == 3000
    assert st.loc["7:1", "forced_fill_pct"] == pytest.approx(100 * (1 - 1056 / 4096))
    assert bool(st.loc["7:0", "own_checkpoint"]) and not bool(st.loc["7:1", "own_checkpoint"])
    j = a.journals.set_index("dev")
    assert j.loc["7:0", "transactions"] == 1 and j.loc["7:1", "transactions"] == 2
    assert j.loc["7:0", "avg_running_ms"] == 5000.0  # 1250 jiffies at HZ 250
    assert j.loc["7:1", "avg_logging_ms"] == pytest.approx((30 + 50) / 2 * 4)
    assert j.loc["7:1", "avg_blocks_per_transaction"] == 60 and j.loc["7:1", "avg_logged_blocks_per_transaction"] == 63
    assert (j.loc["7:0", "forced_checkpoints"], j.loc["7:0", "background_checkpoints"]) == (1, 0)
    assert (j.loc["7:1", "forced_checkpoints"], j.loc["7:1", "background_checkpoints"]) == (0, 1)
    d = a.to_dict()
    assert [x["dev"] for x in d["journals"]] == ["7:0", "7:1"]
    assert d["journals"][1]["journal_blocks"] == 4096


def test_checkpoint_writes_forced_versus_background(tmp_path):
    cs = [{"ts_ns": S, "dev": "7:0", "transaction": 3, "tid": 100, "pid": 100, "comm": "w100",
           "chp_time_jiffies": 25, "chp_time_ns": 100 * MS, "forced_to_close": 0, "written": 120, "dropped": 2},
          {"ts_ns": 2 * S, "dev": "7:0", "transaction": 4, "tid": 9, "pid": 9, "comm": "jbd2/loop0-8",
           "chp_time_jiffies": 1, "chp_time_ns": 4 * MS, "forced_to_close": 0, "written": 7, "dropped": 0}]
    a = analyze(_session(tmp_path, checkpoint_stats=cs))
    j = a.journals.iloc[0]
    assert j["forced_checkpoint_written_blocks"] == 120 and j["background_checkpoint_written_blocks"] == 7
    assert j["checkpointed_transactions"] == 2


def proc_text(n, requested, mtb, avgs):
    t = f"{n} transactions ({requested} requested), each up to {mtb} blocks\n"
    if n:
        t += ("average: \n  {wait}ms waiting for transaction\n  0ms request delay\n  {running}ms running transaction\n"
              "  {locked}ms transaction was being locked\n  {flushing}ms flushing data (in ordered mode)\n"
              "  {logging}ms logging transaction\n  1234us average transaction commit time\n"
              "  {handles} handles per transaction\n  {blocks} blocks per transaction\n"
              "  {logged} logged blocks per transaction\n").format(**avgs)
    return t


def _kernel_view(stats, hz=250):
    """What jbd2_seq_info_show prints for the given run_stats rows (integer divisions)."""
    n = len(stats)
    if not n:
        return {}
    j = lambda p: sum(r[f"{p}_jiffies"] for r in stats) // n * 1000 // hz  # noqa: E731
    return {"wait": j("wait"), "running": j("running"), "locked": j("locked"), "flushing": j("flushing"),
            "logging": j("logging"), "handles": sum(r["handle_count"] for r in stats) // n,
            "blocks": sum(r["blocks"] for r in stats) // n, "logged": sum(r["blocks_logged"] for r in stats) // n}


@pytest.mark.parametrize("before", [0, 37])
def test_proc_info_agreement(tmp_path, before):
    import random

    rnd = random.Random(before)
    mk = lambda i: run_stat(i * MS, i, running=rnd.randint(100, 2000), logging=rnd.randint(0, 40),  # noqa: E731
                            locked=rnd.randint(0, 3), flushing=rnd.randint(0, 2), wait=0,
                            handles=rnd.randint(1, 500), blocks=rnd.randint(3, 250), logged=rnd.randint(5, 260))
    earlier = [mk(i) for i in range(before)]
    session_rows = [mk(before + i) for i in range(60)]
    start = proc_text(before, 0, 256, _kernel_view(earlier))
    end = proc_text(before + 60, 0, 256, _kernel_view(earlier + session_rows))
    meta = metadata(journals=[journal_meta(proc_info_start=start, proc_info_end=end)])
    a = analyze(_session(tmp_path, meta=meta, run_stats=session_rows))
    p = a.proc.set_index("metric")
    assert p.loc["transactions", "analyzer"] == p.loc["transactions", "kernel"] == 60
    assert (p["status"] != "disagree").all(), p
    assert p.loc[["running_ms", "logging_ms", "handles", "blocks", "blocks_logged"], "agree"].all(), p
    if before == 0:  # since mount: every figure is checkable to one jiffy
        assert p["agree"].all(), p
        assert a.to_dict()["journals"][0]["proc_agreement"]["agree"] is True
    else:  # 37 earlier transactions blur sub-jiffy averages beyond a jiffy: not checkable
        assert set(p.loc[~p["agree"], "status"]) <= {"undetermined"}
    # one transaction missing from the recording: the counts disagree and a warning says so
    a2 = analyze(_session(tmp_path, "s2", meta=meta, run_stats=session_rows[1:]))
    assert not a2.proc.set_index("metric").loc["transactions", "agree"]
    assert any("transactions disagrees" in w for w in a2.warnings)
    # the analyzer's averages far off the kernel's: caught
    doubled = [dict(r, blocks=r["blocks"] * 2) for r in session_rows]
    a3 = analyze(_session(tmp_path, "s3", meta=meta, run_stats=doubled))
    assert not a3.proc.set_index("metric").loc["blocks", "agree"]


# --- whole-session cases --------------------------------------------------------------------

def test_no_stalls(tmp_path):
    calls = [call(S + i * MS, 2 * MS, 5) for i in range(5)]
    totals = [{"syscall": "setxattr", "dev": "7:0", "count": 500, "errors": 0, "total_latency_ns": 500 * 100_000,
               "max_latency_ns": 2 * MS}]
    a = analyze(_session(tmp_path, calls=calls, call_totals=totals))
    d = a.to_dict()
    assert d["stalls"]["count"] == 0 and d["stalls"]["total_ms"] == 0 and d["stalls"]["max_ms"] == 0
    assert d["stalls"]["by_cause"] == {c: {"count": 0, "total_ms": 0.0} for c in CAUSES}
    assert [r["kind"] for r in d["recommendations"]] == ["no_stalls"]
    assert d["calls"]["setxattr"]["count"] == 500
    json.dumps(d, allow_nan=False)


def test_no_jbd2_events(tmp_path):
    c = call(S, 50 * MS, 5, dev=None, handles=0)
    a = analyze(_session(tmp_path, calls=[c], offcpu=[off(c, S + MS, 40 * MS, 4)], stacks=stacks_df()))
    d = a.to_dict()
    assert any("no jbd2 events" in w for w in d["warnings"])
    assert d["stalls"]["count"] == 1 and d["stalls"]["by_cause"]["metadata_io"]["count"] == 1
    assert d["stalls"]["top"][0]["fill_start_pct"] is None
    j = d["journals"][0]
    assert j["transactions"] == 0 and j["forced_checkpoints"] == 0 and j["max_fill_pct"] is None
    json.dumps(d, allow_nan=False)


def test_empty_session(tmp_path):
    d = analyze(_session(tmp_path, meta=metadata(journals=[]))).to_dict()
    assert d["journals"] == [] and d["calls"] == {} and d["stalls"]["count"] == 0
    json.dumps(d, allow_nan=False)


def test_lost_events_are_reported(tmp_path):
    meta = metadata(events_lost={"calls": 3, "offcpu": 0, "jbd2": 12}, stacks_lost=2, status="interrupted",
                    command=["sh", "-c", "x"])
    c = call(S, 50 * MS, 5)
    d = analyze(_session(tmp_path, meta=meta, calls=[c])).to_dict()
    assert d["events_lost"] == {"calls": 3, "offcpu": 0, "jbd2": 12} and d["stacks_lost"] == 2
    assert any("3 calls events lost, 1 kept" in w for w in d["warnings"])
    assert any("12 jbd2 events lost, 0 kept" in w for w in d["warnings"])
    assert any("2 kernel stack captures failed" in w for w in d["warnings"])
    assert any("interrupted" in w for w in d["warnings"])
    assert d["recommendations"][0]["kind"] == "lost_events"


def test_call_percentiles_exact_above_threshold_and_from_histogram_below(tmp_path):
    lat = [1 * MS + i * 100_000 for i in range(15)]  # 15 calls recorded one by one (>= 1 ms)
    calls = [call(S + i * S // 100, v, 7) for i, v in enumerate(lat)]
    hist = [{"syscall": "setxattr", "dev": "7:0", "bucket": 13, "low_ns": 8192, "high_ns": 16384, "count": 985},
            {"syscall": "setxattr", "dev": "7:0", "bucket": 19, "low_ns": 2**19, "high_ns": 2**20, "count": 0},
            {"syscall": "setxattr", "dev": "7:0", "bucket": 20, "low_ns": 2**20, "high_ns": 2**21, "count": 15}]
    totals = [{"syscall": "setxattr", "dev": "7:0", "count": 1000, "errors": 4, "total_latency_ns": 10**9,
               "max_latency_ns": max(lat)}]
    a = analyze(_session(tmp_path, calls=calls, call_histograms=hist, call_totals=totals))
    r = a.calls.set_index("syscall").loc["setxattr"]
    assert r["count"] == 1000 and r["errors"] == 4 and r["max_ms"] == max(lat) / MS
    assert r["p99_exact"] and r["p99_ms"] == lat[990 - 985 - 1] / MS  # rank 990 is the 5th recorded
    assert not r["p50_exact"] and 8192 / MS <= r["p50_ms"] < 16384 / MS
    assert r["p50_ms"] == pytest.approx((8192 + 8192 * (500 - 0.5) / 985) / MS)


def _classic_stalls():
    """The xattr case's stalls: 20 calls of 150 ms, one every 200 ms from 1 s, each 140 ms off
    CPU in its own forced checkpoint (tasks 100 and 101 in turn): (calls, offcpu, jbd2 events)."""
    calls, offs, evs = [], [], []
    for i in range(20):
        c = call(S + i * 200 * MS, 150 * MS, 100 + i % 2)
        calls.append(c)
        offs.append(off(c, c["ts_ns"] + MS, 140 * MS, 1))
        evs.append(jev(c["ts_ns"] + MS, "checkpoint", c["tid"], result=0, free=100))
    return calls, offs, evs


def test_classic_case_recommendations(tmp_path):
    """The xattr case: forced checkpoints at a full journal; estimates are labelled."""
    calls, offs, evs = _classic_stalls()
    fills = [fsample(c["ts_ns"], 250) for c in calls]
    rs = [run_stat(S + i * 100 * MS, i, handles=100, blocks=200, logged=205, logging=5) for i in range(40)]
    totals = [{"syscall": "setxattr", "dev": "7:0", "count": 4000, "errors": 0, "total_latency_ns": 3 * S,
               "max_latency_ns": 150 * MS}]
    a = analyze(_session(tmp_path, calls=calls, offcpu=offs, jbd2_events=evs, fill=fills, run_stats=rs,
                         call_totals=totals, stacks=stacks_df()))
    d = a.to_dict()
    assert d["stalls"]["count"] == 20 and d["stalls"]["by_cause"]["checkpoint"]["total_ms"] == 20 * 140
    assert d["stalls"]["at_forced_level"]["count"] == 20
    kinds = {r["kind"]: r for r in d["recommendations"]}
    js = kinds["journal_size"]
    assert js["estimate"] and "Estimate" in js["text"]
    # nothing re-logged (no checkpoint stats): the workload streamed every block of the run,
    # which the log holds once with room for one more transaction, j_max_transaction_buffers
    # = journal / 4 in this session (1024 / 256): 4 / 3 of them
    v = js["values"]
    assert v["relogged_blocks"] == 0 and v["hot_blocks_high"] == 40 * 200 and v["divisor"] == 4
    assert v["regime"] == "streaming" and v["stream_share"] == 1.0
    assert v["home_blocks"] is None   # its probes did not count blocks written home (no events_lost key)
    need = 4 / 3 * (40 * 200 * 205 / 200 + 32)
    assert v["high_mib"] == pytest.approx(need * 4096 / 2**20)
    # with the margin for the threshold's spread between runs
    assert js["journal_size_mib"] == math.ceil(1.1 * need * 4096 / 2**20)
    # the printed range holds the recommendation: its upper end is the recommended size
    assert js["high_mib"] == js["journal_size_mib"] and js["low_mib"] <= v["low_mib"]
    assert js["stall_ms_addressed"] == 20 * 140
    assert js["low_mib"] <= js["high_mib"] <= js["journal_size_mib"]
    ins = kinds["inode_size"]
    assert ins["estimate"] and ins["values"]["xattr_calls"] == 4000 and ins["values"]["handles"] == 4000
    # every handle is an xattr call: no hot set is left with 256-byte inodes
    assert ins["values"]["predicted_hot_blocks"] == 0 and ins["values"]["predicted_margin_blocks"] > 0
    assert "fast_commit" not in kinds  # no fsync: no commit wait to remove
    ranked = [r["stall_ms_addressed"] for r in d["recommendations"]]
    assert ranked == sorted(ranked, reverse=True)
    assert d["journals"][0]["forced_checkpoints"] == 20
    assert d["journals"][0]["max_fill_pct"] == pytest.approx(100 * (1 - 100 / 1024), abs=1e-3)


def test_json_has_the_documented_keys(tmp_path):
    c = call(S, 50 * MS, 5)
    d = analyze(_session(tmp_path, calls=[c], run_stats=[run_stat(S, 1)])).to_dict()
    assert {"schema_version", "journals", "stalls", "calls", "recommendations"} <= set(d)
    for k in ("dev", "journal_blocks", "block_size", "max_transaction_blocks", "transactions",
              "avg_blocks_per_transaction", "avg_logged_blocks_per_transaction", "forced_checkpoints",
              "background_checkpoints", "max_fill_pct"):
        assert k in d["journals"][0]
    assert {"count", "total_ms", "max_ms", "by_cause"} <= set(d["stalls"])
    assert set(d["calls"]["setxattr"]) >= {"count", "p50_ms", "p99_ms", "max_ms"}
    assert all(set(r) >= {"kind", "text"} for r in d["recommendations"])


def test_committing_credits_bring_the_forced_level_early(tmp_path):
    t = S
    c = call(t, 50 * MS, 1)
    # 400 free blocks look ample (400 - 32 >= 256), but the committing transaction claims 150
    a = analyze(_session(tmp_path, calls=[c], fill=[fsample(t, 400, committing_transaction=3,
                                                            committing_credits=150)]))
    r = a.stalls.iloc[0]
    assert r["min_space_left_blocks"] == 400 - 32 - 150 and bool(r["at_forced_level"])
    a2 = analyze(_session(tmp_path, "s2", calls=[c], fill=[fsample(t, 400)]))
    assert not bool(a2.stalls.iloc[0]["at_forced_level"])
    assert a.journals.iloc[0]["time_at_forced_level_s"] == 0  # one sample: no duration


def test_other_label_skips_scheduler_and_tracing_frames():
    st = pd.DataFrame({"stack_id": [1], "frames": [["bpf_prog_4a2f_rtp_sched_switch", "bpf_trace_run4", "__schedule",
                                                     "schedule", "pipe_read", "vfs_read", "ksys_read"]]})
    r = stack_causes(st).iloc[0]
    assert r["cause"] == "other" and r["label"] == "pipe_read <- vfs_read"


def test_range_min_and_asof_match_a_brute_force_reference():
    from jstall.analyzer.jbd2.fill import asof, range_min

    rng = np.random.default_rng(7)
    n = 3000
    samples = pd.DataFrame({"ts_ns": rng.integers(0, 10_000, n), "dev": rng.choice(["7:0", "7:1"], n),
                            "free_blocks": rng.integers(0, 1000, n).astype(float)})
    samples = samples.sort_values(["dev", "ts_ns"], kind="stable").reset_index(drop=True)
    keys = pd.DataFrame({"ts_ns": rng.integers(0, 10_000, 400), "dev": rng.choice(["7:0", "7:1", "8:0"], 400)})
    keys["end_ns"] = keys["ts_ns"] + rng.integers(0, 300, 400)
    got_min = range_min(samples, keys)
    got_asof = asof(samples, keys)["free_blocks"].to_numpy()
    for i, k in keys.iterrows():
        s = samples[samples["dev"] == k["dev"]]
        inside = s[(s["ts_ns"] >= k["ts_ns"]) & (s["ts_ns"] <= k["end_ns"])]["free_blocks"]
        before = s[s["ts_ns"] <= k["ts_ns"]]["free_blocks"]
        assert (np.isnan(got_min[i]) and inside.empty) or got_min[i] == inside.min()
        # the last sample at or before (stable order: the last one written at equal times)
        assert (np.isnan(got_asof[i]) and before.empty) or got_asof[i] == before.iloc[-1]


def test_call_own_committing_credits_count_at_its_first_handle(tmp_path):
    c = call(S, 50 * MS, 1, journal_free_blocks=400, journal_min_free_blocks=400, journal_log_blocks=1024,
             journal_committing_credits=150)
    r = analyze(_session(tmp_path, calls=[c])).stalls.iloc[0]
    assert r["min_space_left_blocks"] == 400 - 32 - 150 and bool(r["at_forced_level"])
    assert r["free_start_blocks"] == 400  # no fill samples: the call's own reading


def _proc_case(tmp_path, name, earlier, session_rows, recorded=None):
    start = proc_text(len(earlier), 0, 256, _kernel_view(earlier))
    end = proc_text(len(earlier) + len(session_rows), 0, 256, _kernel_view(earlier + session_rows))
    meta = metadata(journals=[journal_meta(proc_info_start=start, proc_info_end=end)])
    return analyze(_session(tmp_path, name, meta=meta, run_stats=recorded or session_rows))


def test_proc_tolerance_is_one_jiffy_and_a_26_percent_gap_disagrees(tmp_path):
    rows = [run_stat(i * MS, i, running=150 + i % 7) for i in range(40)]
    ok = _proc_case(tmp_path, "ok", [], rows).proc.set_index("metric")
    assert ok.loc["running_ms", "status"] == "agree"
    assert ok.loc["running_ms", "tolerance_abs"] == pytest.approx(4.0 + 0.01 * ok.loc["running_ms", "kernel"], abs=0.5)
    # the analyzer's running times 26% longer than the kernel's: a disagreement, warned about
    slow = [dict(r, running_jiffies=round(r["running_jiffies"] * 1.26)) for r in rows]
    a = _proc_case(tmp_path, "slow", [], rows, recorded=slow)
    p = a.proc.set_index("metric")
    assert p.loc["running_ms", "status"] == "disagree" and not p.loc["running_ms", "agree"]
    assert any("running_ms disagrees" in w and "tolerance" in w for w in a.warnings)


def test_proc_below_one_jiffy_agrees_only_within_the_stated_tolerance(tmp_path):
    # 3 transactions with 0, 1 and 1 jiffies of logging: 2.67 ms on average, the kernel prints 0 ms
    rows = [run_stat(i * MS, i, logging=j) for i, j in enumerate((0, 1, 1))]
    a = _proc_case(tmp_path, "tick", [], rows)
    p = a.proc.set_index("metric")
    assert p.loc["logging_ms", "kernel"] == 0 and p.loc["logging_ms", "analyzer"] == pytest.approx(8 / 3)
    assert p.loc["logging_ms", "status"] == "agree" and p.loc["logging_ms", "tolerance_abs"] == pytest.approx(4.0)
    # 3 jiffies each (12 ms) against the kernel's 0: beyond one jiffy
    b = _proc_case(tmp_path, "far", [], rows, recorded=[dict(r, logging_jiffies=3) for r in rows])
    assert b.proc.set_index("metric").loc["logging_ms", "status"] == "disagree"


def test_proc_too_coarse_since_mount_averages_are_undetermined_not_agreement(tmp_path):
    earlier = [run_stat(i * MS, i, running=100 + (i * 37) % 900) for i in range(5000)]
    rows = [run_stat((5000 + i) * MS, 5000 + i, running=300) for i in range(4)]
    a = _proc_case(tmp_path, "coarse", earlier, rows, recorded=[dict(r, running_jiffies=900) for r in rows])
    p = a.proc.set_index("metric")
    assert p.loc["running_ms", "status"] == "undetermined" and not p.loc["running_ms", "agree"]
    assert "too coarse to check" in session_summary(a)


# --- recommendation rules and the journal-size model ---------------------------------------

def _stall_session(tmp_path, name, stack_ids, syscall="setxattr", totals=(), run_stats=(), events=()):
    """One 100 ms stall per stack id (80 ms off CPU in that stack)."""
    calls, offs = [], []
    for i, sid in enumerate(stack_ids):
        c = call((i + 1) * S, 100 * MS, 10 + i, syscall=syscall)
        calls.append(c)
        offs.append(off(c, c["ts_ns"] + MS, 80 * MS, sid))
    return analyze(_session(tmp_path, name, calls=calls, offcpu=offs, stacks=stacks_df(), call_totals=list(totals),
                            run_stats=list(run_stats), jbd2_events=list(events)))


def _kinds(a):
    return [r.kind for r in a.recommendations]


def test_no_journal_size_or_inode_advice_without_checkpoint_stall_time(tmp_path):
    # forced checkpoints happened (by others) but no stall spent time checkpointing
    evs = [jev(S // 2 + i * MS, "checkpoint", 999, result=0, free=100) for i in range(5)]
    rs = [run_stat(S // 4 + i * MS, i, blocks=200, logged=205) for i in range(10)]
    a = _stall_session(tmp_path, "s", [2, 2, 7], run_stats=rs, events=evs,
                       totals=[{"syscall": "setxattr", "dev": "7:0", "count": 100, "errors": 0,
                                "total_latency_ns": S, "max_latency_ns": 100 * MS}])
    assert int(a.journals.iloc[0]["forced_checkpoints"]) == 5 and a.stalls["checkpoint_ms"].sum() == 0
    assert "journal_size" not in _kinds(a) and "inode_size" not in _kinds(a)
    assert "fast_commit" not in _kinds(a)  # 0 fsync calls


def test_inode_size_speaks_of_the_journals_journal_size_does(tmp_path, monkeypatch):
    """A journal whose forced-checkpoint waits all fell under the recording's threshold (no
    stall spent time checkpointing) is still not big enough when they took 2.9 % of the run:
    journal_size speaks of it, and so does inode_size, as in the runs where a wait was a
    stall (rsync -aX, identical runs)."""
    from jstall.analyzer.advice import recommend
    from jstall.enough import Enough

    evs = [jev(S // 2 + i * MS, "checkpoint", 999, result=0, free=100) for i in range(5)]
    rs = [run_stat(S // 4 + i * MS, i, blocks=200, logged=205) for i in range(10)]
    totals = [{"syscall": "setxattr", "dev": "7:0", "count": 100, "errors": 0, "total_latency_ns": S,
               "max_latency_ns": 100 * MS}]
    monkeypatch.setattr(recommend.Context, "enough", lambda self, dev: Enough(96.0, 8.0, 3300.0))
    a = _stall_session(tmp_path, "s", [2, 2, 7], run_stats=rs, events=evs, totals=totals)
    assert a.stalls["checkpoint_ms"].sum() == 0
    assert "journal_size" in _kinds(a) and "inode_size" in _kinds(a)
    # big enough: neither
    monkeypatch.setattr(recommend.Context, "enough", lambda self, dev: Enough(3.0, 1.0, 3300.0))
    b = _stall_session(tmp_path, "t", [2, 2, 7], run_stats=rs, events=evs, totals=totals)
    assert "journal_size" not in _kinds(b) and "inode_size" not in _kinds(b)


def test_inode_size_advice_is_the_smallest_size_holding_the_attributes_the_session_saw(tmp_path):
    """The xattr_files table decides the inode size advised: small attributes, 256 bytes;
    two 32-byte ones (108 bytes), 512; none that any inode holds, no size, and the advice
    says why. Without the table (a session recorded before it), 256."""
    calls, offs = [], []
    for i in range(3):
        c = call((i + 1) * S, 100 * MS, 10 + i, syscall="setxattr")
        calls.append(c)
        offs.append(off(c, c["ts_ns"] + MS, 80 * MS, 1))
    totals = [{"syscall": "setxattr", "dev": "7:0", "count": 100, "errors": 0, "total_latency_ns": S,
               "max_latency_ns": 100 * MS}]
    probes = {"attached": [], "missing": [], "xattr_files_max": 16384}

    def advice(name, files, noted=True, kind="inode_size"):
        xf = pd.DataFrame({"dev": ["7:0"] * len(files), "in_inode_bytes": [b for b, _ in files],
                           "files": [n for _, n in files]})
        a = analyze(_session(tmp_path, name, meta=metadata(probes=probes if noted else {"attached": [],
                                                                                         "missing": []}),
                             calls=calls, offcpu=offs, stacks=stacks_df(), call_totals=totals, xattr_files=xf))
        (r,) = [r for r in a.recommendations if r.kind in ("inode_size", "xattr_blocks")]
        assert r.kind == kind
        return r

    small = advice("small", [(76, 50)])
    assert small.inputs["inode_size_advised"] == 256 and "mkfs.ext4 -I 256" in small.command
    assert small.stall_ms_addressed == 240
    two = advice("two", [(108, 95), (76, 5)])
    assert two.inputs["inode_size_advised"] == 512 and "mkfs.ext4 -I 512" in two.command
    assert "the median file's take 108 bytes of the 348 it holds; 5% fit the 92 bytes of 256-byte inodes" in two.text
    # none: a finding, not a remedy (no interval, no command)
    big = advice("big", [(2000, 10)], kind="xattr_blocks")
    assert "inode_size_advised" not in big.inputs and big.stall_ms_addressed == 0 and big.command is None
    assert "No inode size holds them" in big.text and "0% of the 10 files' fit even in 1024-byte" in big.text
    # recorded before the table: an empty table is not "no attributes"
    old = advice("old", [], noted=False)
    assert old.inputs["inode_size_advised"] == 256 and "attribute_files" not in old.inputs


def test_fast_commit_only_when_fsync_commit_waits_dominate(tmp_path):
    fs = [{"syscall": "fsync", "dev": "7:0", "count": 50, "errors": 0, "total_latency_ns": S,
           "max_latency_ns": 100 * MS}]
    a = _stall_session(tmp_path, "cw", [3, 3, 3, 4], syscall="fsync", totals=fs,
                       run_stats=[run_stat(S // 4, 1)])
    fc = [r for r in a.recommendations if r.kind == "fast_commit"]
    assert len(fc) == 1 and fc[0].stall_ms_addressed == 3 * 80 and fc[0].inputs["fsync_calls"] == 50
    # a fast commit writes one block where the full commit wrote 2 requests (1 logged block, the
    # commit block) of the 4 each fsync's commit took (no device counters: and a data write and a
    # flush): a quarter of the commit waits at the device's pace, half that at the low end
    (f,) = fc
    assert f.inputs["commit_request_share_saved"] == 0.25 and f.cost == "offline"
    assert (f.stall_ms_removed_low, f.stall_ms_removed_high, f.stall_ms_total) == (30.0, 60.0, 400.0)
    assert "tune2fs -O fast_commit" in f.command
    # ranked by the interval's middle: the external journal (no device counters: none to all of
    # the 240 ms of commit waits) before fast_commit
    kinds = _kinds(a)
    assert kinds.index("external_journal") < kinds.index("fast_commit")
    # commit waits a minority of the stall time: no fast_commit
    b = _stall_session(tmp_path, "mi", [3, 4, 4, 4], syscall="fsync", totals=fs, run_stats=[run_stat(S // 4, 1)])
    assert "fast_commit" not in _kinds(b)
    # extended-attribute changes: each makes its transaction's fsyncs full commits, the others'
    # may go fast (a maildir run on fast_commit: 175 fast commits and 535 full ones of 2,000
    # fsyncs beside 2,000 setxattrs, and 28% of the stall time removed): from none of the
    # commit waits to all of them, never "would not help"
    xa = fs + [{"syscall": "setxattr", "dev": "7:0", "count": 20, "errors": 0, "total_latency_ns": MS,
                "max_latency_ns": MS}]
    c = _stall_session(tmp_path, "xa", [3, 3, 3, 4], syscall="fsync", totals=xa, run_stats=[run_stat(S // 4, 1)])
    (f,) = [r for r in c.recommendations if r.kind == "fast_commit"]
    assert f.inputs["ineligible_xattr"] and f.inputs["xattr_calls"] == 20 and f.stall_ms_addressed == 3 * 80
    assert (f.stall_ms_removed_low, f.stall_ms_removed_high) == (0.0, 240.0)
    assert "until that transaction commits" in f.text and "would not help" not in f.text


def test_data_writeback_and_device_flush_get_their_own_advice_ranked_by_stall_time(tmp_path):
    a = _stall_session(tmp_path, "s", [9, 9, 9, 10, 10], syscall="fsync")
    recs = a.recommendations
    assert [r.kind for r in recs[:2]] == ["data_writeback", "device_flush"]
    assert recs[0].stall_ms_addressed == 3 * 80 and recs[1].stall_ms_addressed == 2 * 80
    assert "data pages" in recs[0].text and "write cache" in recs[1].text
    assert recs[0].inputs["top_label"] == "folio_wait_writeback"
    d = a.to_dict()["recommendations"][0]
    assert d["stall_ms_addressed"] == 240 and d["journal_size_mib"] is None and "inputs" in d


def test_hot_set_recovers_a_simulated_random_workload():
    """Blocks touched at random from a hot set of D; the log keeps a copy until it is
    touched again or S newer blocks were logged (then it is written home).  The model's
    equation gives D back from the counts alone."""
    import random

    from jstall.analyzer.jbd2.model import hot_set

    rnd = random.Random(5)
    for D, S in ((2000, 600), (3000, 2000), (800, 1500)):
        last = {}  # block -> position of its copy in the log
        blocks = new = 0
        for pos in range(40 * D):
            b = rnd.randrange(D)
            if b not in last or pos - last[b] > S:
                new += 1
            blocks += 1
            last[b] = pos
        got = hot_set(blocks, new, S)
        assert abs(got - D) <= 0.1 * D, (D, S, got)


def test_hot_set_counts_the_touches_a_large_transaction_logged_once():
    """Transactions of 1,400 touches drawn from 3,000 blocks log each block once: the span of
    logged blocks stood for more touches than blocks, and a block's older copy is looked for
    behind its own transaction. Given the transactions' sizes, the equation finds the hot
    set; without them it sees less (a journal half as big as it needs, lab tune's runs)."""
    import random

    from jstall.analyzer.jbd2.model import hot_set

    rnd = random.Random(7)
    for D, S, k in ((3000, 4000, 1400), (1000, 3000, 200), (3000, 3000, 300)):
        last, pos, blocks, new, sizes = {}, 0, 0, 0, []
        for _ in range(40 * D // k):
            txn = {rnd.randrange(D) for _ in range(k)}
            for b in txn:
                new += b not in last or pos - last[b] > S
                last[b] = pos
                pos += 1
            blocks += len(txn)
            sizes.append(len(txn))
        plain, seen = hot_set(blocks, new, S), hot_set(blocks, new, S, sizes)
        assert abs(seen - D) <= 0.05 * D and abs(seen - D) <= abs(plain - D), (D, S, k, plain, seen)
    assert hot_set(9612, 4893, 3249, [1373] * 7) > hot_set(9612, 4893, 3249)


def test_blocks_written_home_in_runs_are_a_stream():
    """Blocks written home once, three or more adjacent ones together, are a stream's (an
    inode table filled in order); the rest are the hot set's: a block written home more than
    once, or alone, or beside another written a second later."""
    from jstall.analyzer.jbd2.model import _home

    rows = [(8 * b, 1, 5_000_000) for b in range(100, 105)]                  # a run of five: a stream
    rows += [(8 * 200, 1, 0), (8 * 201, 1, 1_000_000)]                       # two in a row: too few
    rows += [(8 * 300, 3, 0)]                                                # written home three times
    rows += [(8 * b, 1, b * 10**9) for b in range(400, 404)]                 # adjacent, a second apart
    rows += [(8 * 500, 1, 0), (8 * 501, 2, 0), (8 * 502, 1, 0)]              # one of the three returned
    hw = pd.DataFrame(rows, columns=["sector", "writes", "first_ns"]).assign(
        dev="7:0", last_ns=lambda d: d["first_ns"])
    distinct, hot, reentries = _home(hw)
    assert (distinct, hot, reentries) == (15, 10, 3)
    # 1 KiB blocks: two sectors apart
    assert _home(hw.assign(sector=hw["sector"] // 4), block_size=1024)[1] == 10


def test_journal_model_holds_a_stream_once_beside_the_hot_set():
    """A small log over 600 directory blocks updated at random and an inode table filled in
    order: checkpoints write the directory blocks home again and again, the table's blocks
    once each, in runs. One transaction must hold the 600; the table's 1,200 blocks only the
    log, once each: the journal is sized 3 * 600 + 1.5 * 1,200 blocks (and its overhead),
    not 3 * 1,800."""
    from jstall.analyzer.jbd2.model import model

    journal, t, cs, tl = _model_inputs(280, 60, relogged=12_000, written=4_500, used=900)
    dirs = pd.DataFrame({"sector": [8 * (10_000 + 7 * i) for i in range(600)], "writes": 4,
                         "first_ns": [i * 10**7 for i in range(600)]})
    table = pd.DataFrame({"sector": [8 * (50_000 + i) for i in range(1200)], "writes": 1,
                          "first_ns": [(i // 40) * 10**8 for i in range(1200)]})
    hw = pd.concat([dirs, table]).assign(dev="7:0", last_ns=lambda d: d["first_ns"] + (d["writes"] - 1) * 10**9)
    m = model(journal, t, cs, tl, kernel_release="6.18.0", run_s=5.0, home_writes=hw)
    assert (m.home_blocks, m.home_hot_blocks) == (1800, 600)
    blocks = m.high_mib * 2**20 / 4096
    assert 3 * (600 + 32) + 1.5 * 1200 <= blocks < 3 * (1800 + 32)
    assert abs(blocks - (3 * (600 + 32) + 1.5 * 1200)) <= 0.02 * blocks


def test_journal_model_range_and_divisor(tmp_path):
    from jstall.jbd2 import blocks_needed

    assert blocks_needed(1000, 1.0, 3) == 3 * 1032
    assert blocks_needed(1000, 1.01, 4, 256) == 4 * (1010 + 32) + 256


def _model_inputs(blocks_per_txn, txns, relogged, written, used):
    t = pd.DataFrame({"dev": ["7:0"] * txns, "blocks": [blocks_per_txn] * txns,
                      "blocks_logged": [blocks_per_txn] * txns, "handle_count": [10] * txns})
    cs = pd.DataFrame({"dev": ["7:0"], "dropped": [relogged], "written": [written]})
    tl = pd.DataFrame({"dev": ["7:0"], "used_blocks": [used]})
    journal = {"dev": "7:0", "journal_blocks": 1024, "block_size": 4096, "max_transaction_blocks": 341,
               "fast_commit": False, "forced_checkpoints": 5}
    return journal, t, cs, tl


def test_journal_model_regimes_hot_set_and_streaming():
    """A workload that re-logs most of its blocks is a hot set: its size does not depend on
    how long it ran. One that logs each block once streams: the journal must hold a window
    of writeback (dirty_expire + one writeback period) of newly logged blocks, the whole job
    when it ran shorter than that."""
    from jstall.analyzer.jbd2.model import model, writeback_window_s

    assert writeback_window_s(None) == 35.0
    assert writeback_window_s({"dirty_expire_centisecs": 1000, "dirty_writeback_centisecs": 200}) == 12.0
    # 100 transactions of 200 blocks, 19,000 re-logged: a hot set of a few hundred blocks
    hot = model(*_model_inputs(200, 100, 19_000, 900, 700), kernel_release="6.18.0", run_s=100.0)
    assert hot.regime == "hot set" and hot.hot_blocks_high < 0.5 * hot.new_to_log_blocks
    again = model(*_model_inputs(200, 100, 19_000, 900, 700), kernel_release="6.18.0", run_s=10.0)
    assert again.journal_size_mib == hot.journal_size_mib   # how long it ran does not matter
    # 100 transactions of 200 blocks, nothing re-logged: 20,000 blocks streamed
    short = model(*_model_inputs(200, 100, 0, 15_000, 700), kernel_release="6.18.0", run_s=20.0)
    assert short.regime == "streaming" and short.window_blocks == 20_000 and short.hot_blocks_high == 20_000
    # the same blocks over 70 s: a 35 s window holds half of them
    long = model(*_model_inputs(200, 100, 0, 15_000, 700), kernel_release="6.18.0", run_s=70.0,
                 writeback={"dirty_expire_centisecs": 3000, "dirty_writeback_centisecs": 500})
    assert long.regime == "streaming" and long.window_blocks == 10_000 and long.hot_blocks_high == 10_000
    # a stream is held once, until written home, with one transaction's room left: divisor / (divisor - 1)
    assert long.high_mib == pytest.approx(1.5 * (10_000 + 32) * 4096 / 2**20)
    assert long.journal_size_mib < short.journal_size_mib
    # a hot set is held by one transaction: the divisor
    assert hot.high_mib == pytest.approx(3 * (hot.hot_blocks_high + 32) * 4096 / 2**20)


def test_holding_divisor_between_the_regimes():
    from jstall.analyzer.jbd2.model import STREAMING_SHARE, holding_divisor

    assert holding_divisor(3.0, None) == holding_divisor(3.0, 0.2) == holding_divisor(3.0, STREAMING_SHARE) == 3.0
    assert holding_divisor(3.0, 1.0) == 1.5 and holding_divisor(4.0, 1.0) == pytest.approx(4 / 3)
    assert 1.5 < holding_divisor(3.0, (1 + STREAMING_SHARE) / 2) < 3.0


def _simulated_small_log(hot, core, per_txn, txns, span, seed=7):
    """Transactions that each touch the ``core`` blocks and ``per_txn`` blocks at random from
    ``hot`` others, in a log of ``span`` blocks: a copy is dropped when a later transaction
    logs its block again, written home when it falls ``span`` logged blocks behind. The
    session tables the model reads: transactions, checkpoint statistics, fill, home_writes."""
    import random

    rnd = random.Random(seed)
    pos, where = 0, {}          # block -> log position of its live copy
    relogged = written = new = 0
    home = {}
    rows = []
    for _ in range(txns):
        touched = set(range(core)) | {core + rnd.randrange(hot) for _ in range(per_txn)}
        for b, p in list(where.items()):   # forced checkpoints: copies too far behind go home
            if pos - p > span:
                written += 1
                n, first, _ = home.get(b, (0, pos, pos))
                home[b] = (n + 1, first, pos)
                del where[b]
        for b in touched:
            if b in where:
                relogged += 1
            else:
                new += 1
            where[b] = pos
            pos += 1
        rows.append(len(touched))
    t = pd.DataFrame({"dev": ["7:0"] * txns, "blocks": rows, "blocks_logged": rows, "handle_count": [per_txn] * txns})
    cs = pd.DataFrame({"dev": ["7:0"], "dropped": [relogged], "written": [written]})
    tl = pd.DataFrame({"dev": ["7:0"] * 2, "used_blocks": [span // 2, span]})
    # a block written home at the log position p, at p ms
    hw = pd.DataFrame({"dev": ["7:0"] * len(home), "sector": [8 * b for b in home],
                       "writes": [n for n, _, _ in home.values()],
                       "first_ns": [f * 10**6 for _, f, _ in home.values()],
                       "last_ns": [last * 10**6 for _, _, last in home.values()]})
    journal = {"dev": "7:0", "journal_blocks": 1024, "block_size": 4096, "max_transaction_blocks": 341,
               "fast_commit": False, "forced_checkpoints": 5}
    return journal, t, cs, tl, hw


def test_blocks_written_home_bound_the_hot_set_a_small_log_cannot_see():
    """3,000 blocks updated at random and 90 touched by every transaction, in a log of 900
    blocks: most of what a transaction re-logs is the 90, and the equation alone sees a hot
    set far smaller than 3,090. The distinct blocks forced checkpoints wrote home are all of
    it: the model's hot set is then the workload's."""
    from jstall.analyzer.jbd2.model import model

    journal, t, cs, tl, hw = _simulated_small_log(3000, 90, 250, 48, 900)
    blind = model(journal, t, cs, tl, kernel_release="6.18.0", run_s=5.0)
    seen = model(journal, t, cs, tl, kernel_release="6.18.0", run_s=5.0, home_writes=hw)
    assert blind.hot_blocks_high < 0.8 * 3090 and blind.home_blocks is None
    assert 0.95 * 3000 <= seen.home_blocks <= 3090
    assert seen.hot_blocks_low >= seen.home_blocks and 0.95 * 3000 <= seen.hot_blocks_high <= 1.05 * 3090
    assert seen.journal_size_mib > blind.journal_size_mib
    # another journal's blocks count for nothing here
    other = hw.assign(dev="7:5")
    assert model(journal, t, cs, tl, kernel_release="6.18.0", run_s=5.0, home_writes=other).hot_blocks_high == \
        blind.hot_blocks_high


# --- big enough (jstall.enough): one definition, every task's waits -------------------------

def test_the_bound_of_a_journal_big_enough():
    from jstall import enough

    assert enough.judge(10.0, 9.9, 1000.0).big_enough            # exactly 1% of the run, each < 10 ms
    assert not enough.judge(10.1, 5.0, 1000.0).big_enough        # more than 1%
    assert not enough.judge(10.0, 10.0, 100_000.0).big_enough    # one wait of 10 ms
    assert enough.judge(0, 0, 0).big_enough and enough.judge(0, 0, 0).share == 0
    e = enough.judge(2800, 140, 4000)
    assert e.share == 0.7 and e.describe() == ("not big enough: 2,800 ms of forced-checkpoint waits, 70% of the run, "
                                               "the longest 140 ms")
    assert e.as_dict()["bound"] == enough.BOUND and "1%" in enough.BOUND and "10 ms" in enough.BOUND


def _forced_outside_stalls(tmp_path, name, chp_ms):
    """A 10 s session (synthetic.metadata's) with 40 transactions of 200 blocks, one 100 ms stall in an I/O wait (no
    checkpoint), and five forced checkpoints in task 999, outside every traced call, each
    taking chp_ms (jbd2_checkpoint_stats' chp_time)."""
    evs = [jev(S + i * S, "checkpoint", 999, result=0, free=100) for i in range(5)]
    cs = [{"ts_ns": S + i * S + MS, "dev": "7:0", "transaction": i, "tid": 999, "pid": 999, "comm": "w999",
           "chp_time_jiffies": chp_ms // 4, "chp_time_ns": chp_ms * MS, "forced_to_close": 0, "written": 20,
           "dropped": 0} for i in range(5)]
    rs = [run_stat(S // 4 + i * MS, i, blocks=200, logged=205) for i in range(40)]
    c = call(S // 2, 100 * MS, 10)
    return analyze(_session(tmp_path, name, calls=[c], offcpu=[off(c, c["ts_ns"] + MS, 80 * MS, 2)],
                            stacks=stacks_df(), jbd2_events=evs, checkpoint_stats=cs, run_stats=rs))


def test_journal_advice_counts_forced_checkpoints_outside_the_stalls(tmp_path):
    """Five forced checkpoints of 40 ms outside every stall: 200 ms of a 10 s run (2%), each
    over 10 ms: not big enough, and the journal-size advice says so; of 8 ms each: 40 ms
    (0.4%), each under 10 ms: big enough, and no journal advice."""
    a = _forced_outside_stalls(tmp_path, "slow", 40)
    assert a.stalls["checkpoint_ms"].sum() == 0
    (w,) = a.checkpoint_waits.to_dict("records")
    assert (w["dev"], w["wait_ms"], w["longest_ms"], w["run_ms"]) == ("7:0", 200.0, 40.0, 10_000.0)
    assert w["share"] == 0.02 and not w["big_enough"]
    (js,) = [r for r in a.recommendations if r.kind == "journal_size"]
    assert js.stall_ms_addressed == 200.0
    assert "is not big enough: 200 ms of forced-checkpoint waits, 2.0% of the run" in js.text
    assert js.inputs["enough"]["big_enough"] is False
    (j,) = a.summary.journals
    assert j.enough["big_enough"] is False and j.enough["wait_ms"] == 200.0
    assert "7:0: journal not big enough: 200 ms" in session_summary(a)

    b = _forced_outside_stalls(tmp_path, "fast", 8)
    (w,) = b.checkpoint_waits.to_dict("records")
    assert (w["wait_ms"], w["longest_ms"], w["big_enough"]) == (40.0, 8.0, True)
    assert "journal_size" not in _kinds(b)
    assert ("7:0: journal big enough: 40 ms of forced-checkpoint waits, 0.4% of the run, the longest 8 ms"
            in session_summary(b))


def test_checkpoint_waits_sum_the_stalls_checkpoint_time(tmp_path):
    """The classic case's stalls: 20 calls each 140 ms off CPU in a checkpoint, the longest
    140 ms; their sum is the journal's wait."""
    calls, offs, evs = _classic_stalls()
    a = analyze(_session(tmp_path, calls=calls, offcpu=offs, jbd2_events=evs, stacks=stacks_df()))  # 10 s
    (w,) = a.checkpoint_waits.to_dict("records")
    assert (w["wait_ms"], w["longest_ms"], w["share"], w["big_enough"]) == (2800.0, 140.0, 0.28, False)


def test_external_journal_estimate_is_the_logs_share_of_the_device_requests(tmp_path):
    """The classic case on a device that served 4,000 writes and 40 cache flushes: 40 commits
    of 25 logged blocks each took 80 requests (one merged write and the commit block each; the
    1,000 blocks never wrapped the 1,024-block journal) and the 40 flushes, so 120 of 4,040
    requests were the log's. The checkpoints (1 s to 4.94 s) queued behind what the device
    served while they ran: each second of them 100 writes and 4 flushes, of which the log's
    were 20 writes (all 40 commits ran then) and the flushes, 24 of 104, at 104/704 of the
    device's busiest rate. Each of the 20 forced checkpoints wrote 30 blocks home, then
    flushed the device and wrote the journal superblock (with FUA: 1 of 3 rounds; a device
    without FUA, a loop device, takes the superblock's write and a flush: 2 of 4) on the
    journal's device: of their rounds' time, from the superblock's own requests (1 of 32, 2
    of 33) to an equal share of a long queue. With nothing written home by the forced
    checkpoints, no advice."""
    from jstall.analyzer.advice.recommend import log_requests, tail_moved_shares, tail_rounds

    # a 4 KiB block's buffer is a memory segment of its own: a device of 128 segments (the block
    # layer's default) takes 128 of them a request, 512 KiB, one of 512 takes max_sectors_kb
    assert log_requests([205] * 40, 4096, 1280, 512) == 80 and log_requests([700], 4096, 1280, 512) == 4
    assert log_requests([205] * 40, 4096, 1280) == 120 == log_requests([205] * 40, 4096, 1280, 128)
    # a wrap at the journal's end splits a write; each superblock write is one
    assert log_requests([205] * 40, 4096, 1280, 512, journal_blocks=1024, superblock_writes=5) == 80 + 8 + 5
    assert tail_rounds("write back", 1) == (3, 1) == tail_rounds(None, None)
    assert tail_rounds("write back", 0) == (4, 2) and tail_rounds("write through", 0) == (2, 1)
    assert tail_moved_shares(4, 2, 30) == (pytest.approx(2 / 33), 0.5)
    calls, offs, evs = _classic_stalls()
    rs = [run_stat(S + i * 100 * MS, i, handles=100, blocks=24, logged=25) for i in range(40)]
    # the device served 104 requests a second while the checkpoints ran (1 s to 4.94 s), 704 at its busiest
    writes = [400, 100, 100, 100, 100, 700, 700, 600, 600, 600]
    dstat = [{"ts_ns": (i + 1) * S, "interval_ns": S, "dev": "7:0", "role": "data", "lower_dev": "7:9", "read_ios": 0,
              "read_merges": 0, "read_sectors": 0, "write_ios": w, "write_merges": 0, "write_sectors": 8 * w,
              "flush_ios": 4, "busy_ms": 900, "queue_ms": 900, "in_flight_requests": 1} for i, w in enumerate(writes)]

    def advice(name, written, events=evs, dstat=dstat, **device):
        cs = [{"ts_ns": S + i * 200 * MS + 2 * MS, "dev": "7:0", "transaction": i, "tid": 100 + i % 2,
               "pid": 100 + i % 2, "comm": f"w{100 + i % 2}", "chp_time_jiffies": 35, "chp_time_ns": 140 * MS,
               "forced_to_close": 0, "written": written, "dropped": 0} for i in range(20)]
        a = analyze(_session(tmp_path, name, metadata(journals=[journal_meta(**device)]), calls=calls, offcpu=offs,
                             jbd2_events=events, run_stats=rs, stacks=stacks_df(), device_stats=dstat,
                             checkpoint_stats=cs))
        return next(r for r in a.recommendations if r.kind == "external_journal") if any(
            r.kind == "external_journal" for r in a.recommendations) else None

    def checkpoint(ej, t_lo, t_hi, cps, busy, cpw):
        # the low end counts the log's writes alone (a flush may cost the device nothing)
        assert ej.inputs["log_write_share_checkpoints"] == pytest.approx(cpw)
        lo = t_lo * (1 - cpw * busy) + (1 - t_lo) * cpw * busy
        hi = t_hi + (1 - t_hi) * cps
        assert ej.inputs["fractions_low"]["checkpoint"] == pytest.approx(lo)
        assert ej.inputs["fractions_high"]["checkpoint"] == pytest.approx(hi)
        assert ej.stall_ms_addressed == pytest.approx(2800 * lo)   # every stall a checkpoint's
        return lo, hi

    ej = advice("written", 30)
    assert ej.inputs["log_write_requests"] == 80 and ej.inputs["device_requests"] == 4040
    assert ej.inputs["log_request_share"] == pytest.approx(120 / 4040)
    assert ej.inputs["log_request_share_checkpoints"] == pytest.approx(24 / 104)
    assert ej.inputs["device_saturation"] == pytest.approx(104 / 704)
    lo, hi = checkpoint(ej, 1 / 32, 1 / 3, 24 / 104, 104 / 704, 20 / 100)
    assert "120 of the data device's 4040 requests were the log's" in ej.text
    assert ("of the requests it served while the forced checkpoints waited, 23.1% were the log's, so their writes "
            "would queue behind 23.1% fewer") in ej.text
    assert f"The checkpoints' 2,800 ms: by {100 * lo:.0f}% to {100 * hi:.0f}%." in ej.text
    # the text's interval is the stall-time interval of the same fractions: one definition
    assert (ej.stall_ms_removed_low, ej.stall_ms_removed_high) == (pytest.approx(2800 * lo), pytest.approx(2800 * hi))
    loop = advice("loop", 30, fua=0, write_cache="write back")
    checkpoint(loop, 2 / 33, 2 / 4, 24 / 104, 104 / 704, 20 / 100)
    assert "2 of the 4 rounds a forced checkpoint waits for one after another" in loop.text
    # each move of the log's tail (a journal superblock write) flushes the data device first,
    # wherever the journal is: those flushes stay, and the log's share loses them: 12 tail moves,
    # 3 a second from 1 s to 5 s, so 20 writes and 1 of the 4 flushes a second were the log's
    tails = [jev(S + i * S // 3 + 5 * MS, "write_superblock", 7, jbd2_thread=True) for i in range(12)]
    moved = advice("tails", 30, evs + tails)
    assert moved.inputs["log_write_requests"] == 80 + 12 and moved.inputs["log_flushes"] == 40 - 12
    assert moved.inputs["log_request_share"] == pytest.approx((92 + 28) / 4040)
    assert moved.inputs["log_request_share_checkpoints"] == pytest.approx((20 + 3 + 1) / 104)
    assert "and 28 of its 40 cache flushes: the 12 before the log's tail moved stay" in moved.text
    # a device as busy during the checkpoints as it ever was: they queued behind every request
    # it served, the log's whenever they came
    steady = [dict(d, write_ios=400, write_sectors=3200) for d in dstat]
    busy = advice("busy", 30, dstat=steady)
    assert busy.inputs["device_saturation"] == 1.0
    checkpoint(busy, 1 / 32, 1 / 3, 24 / 404, 1.0, 20 / 400)
    assert advice("nothing-written", 0) is None   # no commit waits either: no advice at all


def test_the_superblock_writes_measured_bound_what_moves_with_them(tmp_path):
    """Each forced checkpoint of the classic case ends with its journal superblock's write
    (jbd2_write_superblock) 123 ms after its event and the tail's move (jbd2_update_log_tail)
    14 ms later: 14 of its 137 ms went to the rounds the journal's device takes; the first
    moved the tail once before its event too (result 0), a 2 ms superblock write. No more
    than that moves (the high end, against an equal share of 4 rounds on a loop device), and
    no more than their own requests' time (the low end stays). A tail moved by the journal's
    thread after a commit is no checkpoint's: not counted."""
    from jstall.analyzer.jbd2.journals import superblock_share, tail_moves

    calls, offs, _ = _classic_stalls()
    # two fsyncs waiting 80 ms on a commit's I/O, one while the first checkpoint wrote home
    # (its span: 140 ms from 2 ms after 1 s), one at 8 s: half the commit waits ran during them
    syncs = [call(S + 10 * MS, 100 * MS, 50, syscall="fsync"), call(8 * S, 100 * MS, 51, syscall="fsync")]
    sync_offs = [off(c, c["ts_ns"] + MS, 80 * MS, 3) for c in syncs]
    # each checkpoint found blocks to write home (result 1), then moved the tail after them;
    # the first also moved it over blocks already home before its event (result 0), its
    # superblock's write 2 ms of it
    evs = [jev(c["ts_ns"] + MS, "checkpoint", c["tid"], result=1, free=100) for c in calls]
    first = [jev(S - 2 * MS, "write_superblock", 100), jev(S + MS // 2, "checkpoint", 100, result=0, free=100)]
    rs = [run_stat(S + i * 100 * MS, i, handles=100, blocks=24, logged=25) for i in range(40)]
    sb = [jev(c["ts_ns"] + 124 * MS, "write_superblock", c["tid"]) for c in calls]
    lt = [{"ts_ns": c["ts_ns"] + 138 * MS, "dev": "7:0", "tid": c["tid"], "pid": c["tid"], "comm": c["comm"],
           "tail_sequence": i, "first_tid": i + 1, "block_nr": 10, "freed_blocks": 30, **fill_columns(300)}
          for i, c in enumerate(calls)]
    lt.append({**lt[0], "ts_ns": S})
    thread = [jev(9 * S, "write_superblock", 7, jbd2_thread=True)]
    lt.append({**lt[0], "ts_ns": 9 * S + 5 * MS, "tid": 7, "pid": 7, "comm": "jbd2/loop0-8"})
    cs = [{"ts_ns": S + i * 200 * MS + 2 * MS, "dev": "7:0", "transaction": i, "tid": 100 + i % 2,
           "pid": 100 + i % 2, "comm": f"w{100 + i % 2}", "chp_time_jiffies": 35, "chp_time_ns": 140 * MS,
           "forced_to_close": 0, "written": 30, "dropped": 0} for i in range(20)]
    dstat = [{"ts_ns": (i + 1) * S, "interval_ns": S, "dev": "7:0", "role": "data", "lower_dev": "7:9",
              "read_ios": 0, "read_merges": 0, "read_sectors": 0, "write_ios": 400, "write_merges": 0,
              "write_sectors": 3200, "flush_ios": 4, "busy_ms": 900, "queue_ms": 900, "in_flight_requests": 1}
             for i in range(10)]
    a = analyze(_session(tmp_path, "measured", metadata(journals=[journal_meta(fua=0, write_cache="write back")]),
                         calls=calls + syncs, offcpu=offs + sync_offs, jbd2_events=evs + first + sb + thread,
                         log_tail=lt, run_stats=rs,
                         stacks=stacks_df(), device_stats=dstat, checkpoint_stats=cs))
    moves = tail_moves(a.session, "7:0")
    assert len(moves) == 21 and moves["home"].tolist() == [False] + [True] * 20
    assert moves["span_ms"].tolist() == [2.0] + [137.0] * 20
    assert moves["superblock_ms"].tolist() == [2.0] + [14.0] * 20
    assert superblock_share(moves) == pytest.approx(282 / 2742)
    assert math.isnan(superblock_share(moves.iloc[:0])) and not len(tail_moves(a.session, "7:5"))
    (ej,) = [r for r in a.recommendations if r.kind == "external_journal"]
    assert ej.inputs["superblock_share"] == pytest.approx(282 / 2742)
    t_lo = 2 / (600 / 21 + 3)   # 600 blocks home in 21 checkpoints, 4 rounds
    assert ej.inputs["tail_moved_share_low"] == pytest.approx(t_lo)
    assert ej.inputs["tail_moved_share_high"] == pytest.approx(282 / 2742)
    cps, busy = ej.inputs["log_request_share_checkpoints"], ej.inputs["device_saturation"]
    t_hi = 282 / 2742
    assert ej.inputs["fractions_high"]["checkpoint"] == pytest.approx(t_hi + (1 - t_hi) * cps)
    cpw = min(ej.inputs["log_write_share_checkpoints"], cps)   # the log's writes alone: flushes may cost nothing
    assert ej.inputs["fractions_low"]["checkpoint"] == pytest.approx(t_lo * (1 - cpw * busy) + (1 - t_lo) * cpw * busy)
    # the commit waits during the checkpoints queued behind their writes home: on a device of
    # their own, behind the log's alone
    share = ej.inputs["log_request_share"]
    assert ej.inputs["commit_wait_during_checkpoints"] == pytest.approx(0.5)
    assert ej.inputs["fractions_high"]["commit_wait"] == pytest.approx(0.5 * max(1 - cps, share) + 0.5 * share)
    assert ej.inputs["fractions_high"]["commit_wait"] > share
    assert "(the superblock's writes took 282 ms, 10.3% of the 2,742 ms from each checkpoint to its tail's move)" \
        in ej.text


def test_the_logs_share_of_the_requests_served_during_the_checkpoints():
    """A copy's two phases, a second each: its data pages (1,000 writes, 10 flushes, 20 of the
    log's requests), then its metadata alone (200 writes, 10 flushes, 40 of the log's).
    Checkpoints in the second phase queued behind its requests: the log's were 50 of 210 there
    (80 of 1,220 over the run); checkpoints spread evenly over both, the run's share; four
    moves of the log's tail there leave their four flushes on the device (46 of 210). NaN with
    no span or no device counters."""
    from types import SimpleNamespace

    from jstall.analyzer.jbd2.journals import log_share_during

    ds = pd.DataFrame([{"ts_ns": (i + 1) * S, "interval_ns": S, "dev": "7:0", "role": "data", "write_ios": w,
                        "flush_ios": 10} for i, w in enumerate([1000, 200])])
    ds = pd.concat([ds, ds.assign(dev="7:5", write_ios=5)])   # another filesystem's device: not counted
    session = SimpleNamespace(device_stats=ds)
    log_ts = [S // 2] * 20 + [S + S // 2] * 40   # one request each
    second = log_share_during(session, "7:0", np.array([S + S // 10]), np.array([S + S // 2]), log_ts, [1] * 60)
    assert second == pytest.approx(50 / 210)
    # of the write requests alone (a flush that costs the device nothing): 40 of 200
    assert log_share_during(session, "7:0", np.array([S + S // 10]), np.array([S + S // 2]), log_ts, [1] * 60,
                            flushes=False) == pytest.approx(40 / 200)
    both = log_share_during(session, "7:0", np.array([S // 2, S + S // 2]),
                            np.array([S // 2 + S // 10, S + 6 * S // 10]), log_ts, [1] * 60)
    assert both == pytest.approx(80 / 1220)
    # the flush before each move of the log's tail stays on the data device: 4 in the second
    tail = log_share_during(session, "7:0", np.array([S + S // 10]), np.array([S + S // 2]), log_ts, [1] * 60,
                            [S + S // 5] * 4)
    assert tail == pytest.approx(46 / 210)
    assert math.isnan(log_share_during(session, "7:0", np.array([], dtype="int64"), np.array([], dtype="int64"),
                                       log_ts, [1] * 60))
    assert math.isnan(log_share_during(SimpleNamespace(device_stats=ds.iloc[:0]), "7:0", np.array([S]),
                                       np.array([S + 1]), log_ts, [1] * 60))


def test_external_journal_shrinks_the_queues_waits_as_the_devices_work(tmp_path):
    """Two stalls waiting on a commit's I/O (fsync, stack 3) and two on their data pages'
    writeback (stack 9), 80 ms each in 100 ms calls, on a device that served 300 writes and
    100 cache flushes, 10 commits of 25 blocks among them (20 writes). Every wait on the
    device's queue shrinks as its work does. A fast journal device takes the log's writes and
    every flush but the tail moves': 120 of 400 requests, 30%. One as slow takes only the
    flushes surely the log's, each commit's before its commit block (and after it on a device
    without FUA), less the flush of the data device each commit with ordered data still sends
    before its commit record: (20 + 10 - 10) / 400, 5%; (20 + 20 - 10) / 400, 7.5%, on a loop
    device; at the load the device ran at during the waits (all of its busiest, or half)."""
    from jstall.analyzer.advice.recommend import external_journal_fractions

    rs = [run_stat(S // 4 + i * MS, i, blocks=24, logged=25) for i in range(10)]

    def dstat(rates):   # one-second intervals of write requests (a quarter of them flushes' worth)
        return [{"ts_ns": (i + 1) * S, "interval_ns": S, "dev": "7:0", "role": "data", "lower_dev": "7:0",
                 "read_ios": 0, "read_merges": 0, "read_sectors": 0, "write_ios": r * 3 // 4, "write_merges": 0,
                 "write_sectors": 6 * r, "flush_ios": r // 4, "busy_ms": 900, "queue_ms": 900,
                 "in_flight_requests": 0} for i, r in enumerate(rates)]

    calls, offs = [], []
    for i, sid in enumerate([3, 3, 9, 9]):   # from 1 s to 5 s, the data-page waits at 3 s and 4 s
        c = call((i + 1) * S + S // 10, 100 * MS, 10 + i, syscall="fsync")
        calls.append(c)
        offs.append(off(c, c["ts_ns"] + MS, 80 * MS, sid))

    def advice(name, rates, **device):
        a = analyze(_session(tmp_path, name, metadata(journals=[journal_meta(**device)]), calls=calls, offcpu=offs,
                             stacks=stacks_df(), run_stats=rs, device_stats=dstat(rates)))
        (ej,) = [r for r in a.recommendations if r.kind == "external_journal"]
        return ej

    busy = advice("busy", [0, 100, 100, 100, 100, 0])
    assert busy.inputs["log_request_share"] == pytest.approx(0.3) and busy.inputs["device_stall_ms"] == 160
    assert busy.inputs["commit_io_stall_ms"] == 160 and busy.inputs["device_load"] == 1.0
    assert (busy.inputs["commit_log_flushes"], busy.inputs["commit_data_flushes"]) == (10, 10)
    assert busy.inputs["log_request_share_low"] == pytest.approx(0.05)
    assert busy.stall_ms_addressed == pytest.approx(320 * 0.05) == busy.stall_ms_removed_low
    assert busy.stall_ms_removed_high == pytest.approx(320 * 0.3)
    assert busy.inputs["fractions_low"]["data_writeback"] == busy.inputs["fractions_low"]["commit_wait"]
    assert ("The 320 ms of waits on the device's queue shrink as its work does: by 5% on a journal device as slow "
            "as this one (the log's writes and the 10 flushes surely its own, less the flush each of the 10 "
            "commits with ordered data still sends the data device, no more than the journal device's own share "
            "of the two devices' work, at the 100% of its busiest rate the device ran at then), by 30% on a fast "
            "one.") in busy.text
    half = advice("half", [80, 40, 40, 40, 40, 80, 80])
    assert half.inputs["log_request_share"] == pytest.approx(0.3) and half.inputs["device_load"] == 0.5
    assert half.stall_ms_removed_low == pytest.approx(320 * 0.05 * 0.5)
    loop = advice("loop", [0, 100, 100, 100, 100, 0], fua=0, write_cache="write back")
    assert loop.inputs["log_request_share_low"] == pytest.approx(0.075)
    # a journal with more than half the device's work: the journal device then bounds them
    assert external_journal_fractions({"log_request_share": 0.8, "log_request_share_low": 0.7,
                                       "device_load": 1.0})[0]["commit_wait"] == pytest.approx(0.3)


def test_xfs_log_device_changes_remove_their_share_of_the_requests_of_the_waits():
    """XFS's log buffers and external log, as the ext4 journal's device advice: the waits for
    the log's tail shrink by the share of the device's requests a change takes off it, and by
    no more than the device time that share is over the wall time the waits covered. 600 of
    800 requests saved of 2,000 ms of device time: 300 of 400 ms of waits (not every wait, as
    the 1,500 ms freed would say); of 200 ms of device time, 150 ms freed over the 400 ms the
    waits covered: 150; more saved than the device's counters saw (merged): all. Ten tasks
    waiting together for 400 ms (4,000 ms of waits): 1,500 ms freed over those 400 ms is more
    than the share, so 3,000 of them, not the 1,500 ms of device time."""
    from jstall.analyzer.advice.recommend import _device_time_removed

    io = {"device_requests": 800, "device_ms": 2000.0}
    assert _device_time_removed(600, io, 400.0, 400.0) == (pytest.approx(300.0), 0.75)
    assert _device_time_removed(600, dict(io, device_ms=200.0), 400.0, 400.0) == (pytest.approx(150.0), 0.75)
    assert _device_time_removed(900, io, 400.0, 400.0) == (pytest.approx(400.0), 1.0)
    assert _device_time_removed(10, dict(io, device_requests=0), 400.0, 400.0) == (0.0, 0.0)
    assert _device_time_removed(600, io, 4000.0, 400.0) == (pytest.approx(3000.0), 0.75)
    assert _device_time_removed(600, dict(io, device_ms=200.0), 4000.0, 400.0) == (pytest.approx(1500.0), 0.75)


def test_a_journal_not_big_enough_whose_hot_set_fits_gets_no_size_but_says_so(tmp_path):
    """Forced-checkpoint waits of 2% of the run, but 7,900 of the 8,000 logged blocks were
    re-logged: a hot set of 100 blocks fits one transaction of the 4 MiB journal. The advice
    says the journal is not big enough, gives no size, and names lab tune."""
    evs = [jev(S + i * S, "checkpoint", 999, result=0, free=100) for i in range(5)]
    cs = [{"ts_ns": S + i * S + MS, "dev": "7:0", "transaction": i, "tid": 999, "pid": 999, "comm": "w999",
           "chp_time_jiffies": 10, "chp_time_ns": 40 * MS, "forced_to_close": 0, "written": 20,
           "dropped": 1580} for i in range(5)]
    rs = [run_stat(S // 4 + i * MS, i, blocks=200, logged=205) for i in range(40)]
    c = call(S // 2, 100 * MS, 10)
    a = analyze(_session(tmp_path, "fits", calls=[c], offcpu=[off(c, c["ts_ns"] + MS, 80 * MS, 2)],
                         stacks=stacks_df(), jbd2_events=evs, checkpoint_stats=cs, run_stats=rs))
    (js,) = [r for r in a.recommendations if r.kind == "journal_size"]
    assert js.journal_size_mib is None and js.stall_ms_addressed == 200.0 and not js.estimate
    assert "is not big enough" in js.text and "yet its hot set fits" in js.text and "jstall lab tune" in js.text
    assert "its 5 forced checkpoints wrote 100 blocks home (20.0 each on average)" in js.text
    assert js.inputs["high_mib"] <= 4


def test_remedies_whose_intervals_mostly_overlap_rank_cheaper_first():
    from jstall.analyzer.advice.recommend import Recommendation, rank

    def rem(kind, lo, hi, cost):
        return Recommendation(kind, "", dev="7:0", stall_ms_removed_low=lo, stall_ms_removed_high=hi, cost=cost)

    # 3.86-5.64 s and 3.84-5.64 s: the same removal, printed 3.9 and 3.8 s: the offline change first
    inode, size = rem("inode_size", 3856.0, 5638.0, "new_filesystem"), rem("journal_size", 3843.0, 5638.0, "offline")
    ext = rem("external_journal", 141.0, 207.0, "offline")
    assert [r.kind for r in rank([inode, ext, size])] == ["journal_size", "inode_size", "external_journal"]
    # apart (ends further apart than a fifth of the width): the larger removal first, whatever it costs
    wide = rem("inode_size", 3000.0, 5000.0, "new_filesystem")
    assert [r.kind for r in rank([rem("journal_size", 1000.0, 3500.0, "offline"), wide])] == ["inode_size",
                                                                                             "journal_size"]
    # a narrow interval inside a wide one is not the same removal: the wide one may remove far more
    assert [r.kind for r in rank([rem("external_journal", 666.0, 1312.0, "offline"),
                                  rem("inode_size", 413.0, 3002.0, "new_filesystem")])] == ["inode_size",
                                                                                           "external_journal"]
    # more at both ends by more than a fifth of the width (the tenants' storm on its own
    # filesystem and their external journal): apart, though they overlap by half the width
    own, ext = rem("own_filesystem", 379.0, 645.0, "new_filesystem"), rem("external_journal", 247.0, 526.0, "offline")
    assert [r.kind for r in rank([ext, own])] == [r.kind for r in rank([own, ext])] == ["own_filesystem",
                                                                                       "external_journal"]
    # ends within a fifth of the width of each other (XFS rm -rf: 95-186 and 85-193 ms): the same
    bufs, log = rem("log_buffers", 85.0, 193.0, "remount"), rem("log_size", 95.0, 186.0, "new_filesystem")
    assert [r.kind for r in rank([log, bufs])] == ["log_buffers", "log_size"]
    # as costly (a new filesystem each): the size before a device of its own, whichever the
    # run's figures put a millisecond ahead
    log, ext_log = rem("log_size", 105.0, 210.0, "new_filesystem"), rem("external_log", 108.0, 210.0, "new_filesystem")
    assert [r.kind for r in rank([ext_log, log])] == [r.kind for r in rank([log, ext_log])] == ["log_size",
                                                                                               "external_log"]
