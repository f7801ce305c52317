"""Writers and victims (analyzer/stalls/writers.py) on hand-built sessions."""

import pandas as pd
import pytest

from jstall.analyzer.stalls import writers
from jstall.analyzer.session.load import load_session
from synthetic import journal_meta, metadata, write_session

S = 1_000_000_000
POD = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b_3c4d.slice"


def w(pid, comm, cgroup_id, transaction, dirtied=0, handles=1, logged_bytes=0, dev="7:0"):
    return {"ts_ns": 9 * S, "first_ns": 1, "dev": dev, "transaction": transaction, "pid": pid, "comm": comm,
            "cgroup_id": cgroup_id, "handles": handles, "requested_blocks": 2 * dirtied,
            "dirtied_blocks": dirtied, "logged_bytes": logged_bytes}


def session(tmp_path, rows, run_stats=(), log_tail=(), journals=None):
    meta = metadata(journals=journals or [journal_meta()],
                    cgroups={"10": "/system.slice/victim.service", "20": POD, "30": None})
    rs = pd.DataFrame([{"ts_ns": t, "dev": "7:0", "transaction": tx, "blocks": b, "blocks_logged": bl}
                       for t, tx, b, bl in run_stats])
    lt = pd.DataFrame([{"ts_ns": t, "dev": "7:0", "first_tid": tid} for t, tid in log_tail])
    tables = {"writers": pd.DataFrame(rows)}
    if len(rs):
        tables["run_stats"] = rs
    if len(lt):
        tables["log_tail"] = lt
    return load_session(write_session(str(tmp_path / "s"), tables, meta))


def test_each_transaction_logged_blocks_are_shared_by_the_blocks_dirtied(tmp_path):
    s = session(tmp_path, [w(1, "culprit", 20, 1, dirtied=90), w(2, "victim", 10, 1, dirtied=10),
                           w(1, "culprit", 20, 2, dirtied=5)],    # transaction 2: no commit seen
                run_stats=[(2 * S, 1, 100, 110)])
    per = writers.logged_per_transaction(s).set_index(["pid", "transaction"])["logged_blocks"]
    assert per[(1, 1)] == pytest.approx(99) and per[(2, 1)] == pytest.approx(11) and per[(1, 2)] == 5
    shares = writers.writer_shares(s)
    assert list(shares["comm"]) == ["culprit", "victim"]
    assert shares["logged_blocks"].tolist() == pytest.approx([104, 11])
    assert shares["share_pct"].tolist() == pytest.approx([100 * 104 / 115, 100 * 11 / 115])
    assert shares["cgroup"].tolist() == ["pod 1a2b-3c4d (burstable)", "victim.service"]


def test_at_fill_counts_the_transactions_between_the_tail_and_the_head(tmp_path):
    # commits of 1..4 at 1, 3, 5.5, 7 s; the tail moved to transaction 2 at 5 s; a forced
    # checkpoint at 6 s: the log held 2 and 3 (1 checkpointed, 4 not yet committed)
    s = session(tmp_path, [w(1, "a", 20, 1, dirtied=100), w(2, "b", 10, 2, dirtied=30), w(1, "a", 20, 3, dirtied=10),
                           w(1, "a", 20, 4, dirtied=500)],
                run_stats=[(1 * S, 1, 100, 100), (3 * S, 2, 30, 30), (int(5.5 * S), 3, 10, 10), (7 * S, 4, 500, 500)],
                log_tail=[(5 * S, 2)])
    cps = pd.DataFrame({"ts_ns": [6 * S, 6 * S], "dev": ["7:0", "7:0"], "forced": [True, False]})
    contents = writers.log_contents(s, cps)
    assert contents["transaction"].tolist() == [2, 3]
    f = writers.at_fill(s, cps)
    assert dict(zip(f["comm"], f["logged_blocks"])) == {"b": 30, "a": 10}
    assert f["share_pct"].tolist() == pytest.approx([75, 25])
    # without a tail move before it, from the session's first commit
    early = writers.log_contents(s, pd.DataFrame({"ts_ns": [4 * S], "dev": ["7:0"], "forced": [True]}))
    assert early["transaction"].tolist() == [1, 2]


def test_the_sentence_names_a_victim_other_than_the_writer(tmp_path):
    ws = pd.DataFrame([{"dev": "7:0", "pid": 1, "comm": "a", "cgroup_id": 20, "cgroup": "pod x", "handles": 9,
                        "dirtied_blocks": 9, "logged_blocks": 94.0, "ticket_bytes": None, "logged_bytes": None,
                        "share_pct": 94.0}])
    victims = pd.DataFrame([{"dev": "7:0", "pid": 1, "comm": "a", "cgroup": "pod x", "stall_ms": 20_000.0},
                            {"dev": "7:0", "pid": 2, "comm": "db", "cgroup": "db.service", "stall_ms": 18_200.0}])
    (v,) = writers.verdicts(ws, ws, victims)
    assert v["text"] == ("7:0: db (pid 2, cgroup db.service) waited 18.2 s; when the journal filled, "
                         "a (pid 1, cgroup pod x) had written 94.0 % of the logged blocks")
    (alone,) = writers.verdicts(ws, ws.iloc[:0], victims.iloc[:1])
    assert "over the run, it had itself written 94.0 %" in alone["text"] and alone["same_process"]


def test_xfs_writers_share_out_the_kernels_log_bytes(tmp_path):
    j = journal_meta(dev="7:1", kind="xfs", xfs_stats_start={"log": {"writes": 1, "blocks": 100}},
                     xfs_stats_end={"log": {"writes": 9, "blocks": 1100}})
    s = session(tmp_path, [w(5, "rm", 20, None, logged_bytes=600_000, dev="7:1"),
                           w(6, "kworker/0:1", 1, None, logged_bytes=200_000, dev="7:1")], journals=[j])
    x = writers.writer_shares(s)
    assert x["ticket_bytes"].tolist() == [600_000, 200_000]
    assert x["logged_bytes"].tolist() == pytest.approx([384_000, 128_000])   # 1,000 blocks of 512 bytes
    assert x["share_pct"].tolist() == pytest.approx([75, 25])
    assert x["dirtied_blocks"].isna().all()


def test_the_monitor_names_the_top_writers_and_sums_the_rest_as_other():
    from jstall.monitor.tracer import top_writers

    amounts = {("7:0", "blocks", "a.service"): 50, ("7:0", "blocks", "b.service"): 30,
               ("7:0", "blocks", "c.service"): 15, ("7:0", "blocks", "d.service"): 5,
               ("7:0", "blocks", "idle.service"): 0, ("7:1", "bytes", "rm"): 4096}
    assert top_writers(amounts, 2) == {("7:0", "blocks", "a.service"): 50, ("7:0", "blocks", "b.service"): 30,
                                       ("7:0", "blocks", "other"): 20, ("7:1", "bytes", "rm"): 4096}
    assert top_writers(amounts, 0) == {("7:0", "blocks", "other"): 100, ("7:1", "bytes", "other"): 4096}


def test_compare_lists_the_top_writers_of_both_sides_by_cgroup(tmp_path):
    from jstall.analyzer.multi.compare import compare

    a = session(tmp_path / "a", [w(1, "culprit", 20, 1, dirtied=90), w(2, "victim", 10, 1, dirtied=10)],
                run_stats=[(2 * S, 1, 100, 100)])
    b = session(tmp_path / "b", [w(7, "victim", 10, 1, dirtied=10)], run_stats=[(2 * S, 1, 10, 10)])
    c = compare(a.path, b.path)
    rows = {r["cgroup"]: (r["share_a"], r["share_b"]) for r in c.to_dict()["writers"]}
    assert rows == {"pod 1a2b-3c4d (burstable)": (90.0, None), "victim.service": (10.0, 100.0)}
    assert "top writers" in c.text()


def test_the_top_pane_shares_each_journal_among_its_writers_with_their_stall_time():
    from jstall.monitor import top_cmd
    from jstall.monitor.tracer import journal_writers

    logged = {("7:0", "blocks", "pod x"): 900, ("7:0", "blocks", "db.service"): 60, ("7:0", "blocks", "a"): 30,
              ("7:0", "blocks", "other"): 10, ("7:1", "bytes", "rm"): 4096}
    stall = {("7:0", "db.service"): 2.5, ("7:0", "pod x"): 0.5, ("7:0", "idle.service"): 0.25}
    ws = journal_writers(logged, stall)
    assert [(w["cgroup"], w["logged"], w["share"], w["stall_s"]) for w in ws["7:0"]] == [
        ("pod x", 900, 0.9, 0.5), ("db.service", 60, 0.06, 2.5), ("a", 30, 0.03, 0.0),
        ("idle.service", 0, 0.0, 0.25), ("other", 10, 0.01, 0.0)]
    assert ws["7:1"] == [{"cgroup": "rm", "logged": 4096, "unit": "bytes", "share": 1.0, "stall_s": 0.0}]
    # at most n rows: the smallest with "other"
    short = journal_writers(logged, stall, 3)["7:0"]
    assert [(w["cgroup"], w["logged"], w["stall_s"]) for w in short] == [
        ("pod x", 900, 0.5), ("db.service", 60, 2.5), ("other", 40, 0.25)]
    lines = top_cmd.render({"time": 1.0, "journals": {}, "recent": [], "writers": {"7:0": short}}, None, "test")
    assert lines[lines.index("WHO FILLS THE JOURNAL (since the monitor started)") + 2].split() == [
        "7:0", "pod", "x", "900", "blk", "90.0", "0.50"]


def writer_session(path, host, culprit, victim, stall_ms=None):
    """A session of ``host``: one transaction of the culprit's (pod) and the victim's
    (victim.service) dirtied blocks, and with ``stall_ms`` one stalled fsync of the victim."""
    meta = metadata(journals=[journal_meta()], host=host, cgroups={"10": "/system.slice/victim.service", "20": POD})
    tables = {"writers": pd.DataFrame([w(1, "culprit", 20, 1, dirtied=culprit), w(2, "victim", 10, 1, dirtied=victim)]),
              "run_stats": pd.DataFrame([{"ts_ns": 2 * S, "dev": "7:0", "transaction": 1,
                                          "blocks": culprit + victim, "blocks_logged": culprit + victim}])}
    if stall_ms:
        tables["calls"] = pd.DataFrame([{"ts_ns": 3 * S, "latency_ns": int(stall_ms * 1e6), "pid": 2, "tid": 2,
                                         "comm": "victim", "syscall": "fsync", "ret": 0, "dev": "7:0",
                                         "cgroup_id": 10}])
    return write_session(str(path), tables, meta)


def test_fleet_ranks_writers_by_cgroup_over_sessions_with_their_hosts(tmp_path, capsys):
    from jstall.analyzer.multi.fleet import Fleet, summarize

    a = writer_session(tmp_path / "a", "db-1", 90, 10, stall_ms=300)
    b = writer_session(tmp_path / "b", "db-2", 45, 5)
    c = writer_session(tmp_path / "c", "db-2", 30, 0)
    fleet = Fleet([summarize(p) for p in (a, b, c)])
    ws = fleet.writers()
    assert ws[["cgroup", "journal_kind", "logged", "sessions", "journals"]].values.tolist() == [
        ["pod 1a2b-3c4d (burstable)", "jbd2", 165.0, 3, 3], ["victim.service", "jbd2", 15.0, 2, 2]]
    assert ws["share_pct"].tolist() == pytest.approx([100 * 165 / 180, 100 * 15 / 180])
    assert ws["hosts"].tolist() == [["db-1", "db-2"], ["db-1", "db-2"]]
    # the victim's stall time as analyze gives it (its process' stalls), the culprit none
    assert ws["stall_ms"].tolist() == pytest.approx([0.0, 300.0])
    # the JSON and the text, from the same values
    doc = fleet.to_dict()
    assert [(r["cgroup"], r["hosts"], round(r["share_pct"], 1)) for r in doc["writers"]] == [
        ("pod 1a2b-3c4d (burstable)", ["db-1", "db-2"], 91.7), ("victim.service", ["db-1", "db-2"], 8.3)]
    text = fleet.text()
    assert "who fills the journals" in text
    row = next(ln for ln in text.splitlines() if ln.startswith("pod 1a2b-3c4d"))
    assert "165 blocks" in row and "91.7" in row and "db-1, db-2" in row


def test_writers_table_keeps_a_counter_read_back_past_int64():
    """A map counter below zero reads back as a u64 past int64's range: the writers chunk
    keeps it as the signed value, and the flush does not fail."""
    from jstall.probes.tables import writers_table

    t = writers_table({(7, "7:0", 20, 3): (1, 8, (1 << 64) - 1, 0, 5, "a"),
                       (8, "7:0", 21, None): (2, 0, 0, 4096, 6, "b")}, 100)
    # the XFS key (no transaction) sorts first on its device
    assert t.column("pid").to_pylist() == [8, 7]
    assert t.column("dirtied_blocks").to_pylist() == [0, -1]
    assert t.column("logged_bytes").to_pylist() == [4096, 0]


def stall(pid, comm, ms, dev="7:0", tid=None, ts=3, **causes):
    """A stall table row: ``causes`` its per-cause ms (the rest of its latency on the CPU)."""
    from jstall.analyzer.stalls.causes import CAUSES

    row = {"ts_ns": ts * S, "end_ns": ts * S + int(ms * 1e6), "latency_ms": ms, "tid": tid or pid, "pid": pid,
           "comm": comm, "syscall": "fdatasync", "dev": dev, "cause": max(causes, key=causes.get) if causes else "cpu"}
    row.update({f"{c}_ms": float(causes.get(c, 0.0)) for c in CAUSES})
    return row


def tenant_session(tmp_path, cgroup_of_victim=10, cgroup_of_culprit=20):
    """The culprit (pid 1, the pod) wrote 90 of 100 logged blocks; the victim (pid 2) 10; a
    helper of the culprit's (pid 3, cat) stalled in its cgroup."""
    meta = metadata(journals=[journal_meta()],
                    cgroups={"10": "/system.slice/victim.service", "20": POD, "1": "/"})
    calls = pd.DataFrame([{"ts_ns": t * S, "latency_ns": 10**8, "pid": p, "tid": p, "comm": c, "syscall": "fdatasync",
                           "ret": 0, "dev": "7:0", "cgroup_id": g}
                          for t, p, c, g in ((3, 2, "victim", cgroup_of_victim), (4, 2, "victim", cgroup_of_victim),
                                             (3, 1, "culprit", cgroup_of_culprit), (5, 3, "cat", cgroup_of_culprit))])
    tables = {"writers": pd.DataFrame([w(1, "culprit", cgroup_of_culprit, 1, dirtied=90),
                                       w(2, "victim", cgroup_of_victim, 1, dirtied=10)]),
              "run_stats": pd.DataFrame([{"ts_ns": 2 * S, "dev": "7:0", "transaction": 1, "blocks": 100,
                                          "blocks_logged": 100}]),
              "calls": calls}
    return load_session(write_session(str(tmp_path / "s"), tables, meta))


def test_the_tenant_is_the_writer_that_filled_the_journal_and_moves_as_its_cgroup(tmp_path):
    s = tenant_session(tmp_path)
    run = writers.writer_shares(s)
    st = pd.DataFrame([stall(2, "victim", 100.0, checkpoint=60.0, commit_wait=30.0),
                       stall(2, "victim", 40.0, ts=4, data_writeback=38.0),
                       stall(1, "culprit", 80.0, checkpoint=80.0)])
    t = writers.tenant(s, run.iloc[:0], run, st, "7:0")
    assert t["unit"] == "cgroup" and t["who"] == "cgroup pod 1a2b-3c4d (burstable)" and t["pids"] == [1]
    assert t["fill_share"] is None and t["run_share"] == pytest.approx(0.9)
    assert t["others_ms"] == 140.0 and t["culprit_ms"] == 80.0 and t["victim"] == "cgroup victim.service"
    assert t["others"]["pid"].tolist() == [2, 2]
    # a writer of less than half: no culprit
    assert writers.tenant(s, run.iloc[:0], run.iloc[::-1], st, "7:0") is None
    # no other task stalled: nothing to move for
    assert writers.tenant(s, run.iloc[:0], run, st[st["pid"] == 1], "7:0") is None


def test_the_culprits_helpers_move_with_its_cgroup_and_a_root_cgroup_moves_no_one(tmp_path):
    # a helper of the culprit's (its shell's cat) stalled in the culprit's cgroup: the cgroup
    # moves, the helper with it, and its stall is none of the others'
    st = pd.DataFrame([stall(2, "victim", 100.0, checkpoint=100.0), stall(1, "culprit", 80.0, checkpoint=80.0),
                       stall(3, "cat", 12.0, ts=5, metadata_io=12.0)])
    s = tenant_session(tmp_path / "pod")
    t = writers.tenant(s, writers.writer_shares(s).iloc[:0], writers.writer_shares(s), st, "7:0")
    assert t["unit"] == "cgroup" and t["pids"] == [1, 3] and t["others_ms"] == 100.0 and t["culprit_ms"] == 92.0
    # both tasks in the root cgroup: the process alone
    s = tenant_session(tmp_path / "root", cgroup_of_victim=1, cgroup_of_culprit=1)
    t = writers.tenant(s, writers.writer_shares(s).iloc[:0], writers.writer_shares(s), st, "7:0")
    assert t["unit"] == "process" and t["who"] == "culprit (pid 1)" and t["pids"] == [1]
    assert t["others_ms"] == 112.0 and t["victim"] == "victim (pid 2)"


def test_a_writer_that_shares_its_cgroup_with_a_victim_moves_alone(tmp_path):
    s = tenant_session(tmp_path, cgroup_of_victim=20)
    run = writers.writer_shares(s)
    st = pd.DataFrame([stall(2, "victim", 100.0, checkpoint=100.0), stall(1, "culprit", 80.0, checkpoint=80.0)])
    t = writers.tenant(s, run.iloc[:0], run, st, "7:0")
    assert t["unit"] == "process" and t["who"] == "culprit (pid 1)" and t["pids"] == [1]
    assert t["victim"] == "victim (pid 2)"


@pytest.mark.parametrize("util, low", [(None, 54.0), (0.95, 54.0), (0.5, 72.0)])
def test_the_tenant_remedy_removes_part_of_the_others_stall_time_only(tmp_path, monkeypatch, util, low):
    from jstall.analyzer.advice import recommend

    s = tenant_session(tmp_path)
    st = pd.DataFrame([stall(2, "victim", 100.0, checkpoint=60.0, commit_wait=20.0, cpu=20.0),
                       stall(2, "victim", 40.0, ts=4, data_writeback=38.0),
                       stall(1, "culprit", 80.0, checkpoint=80.0)])
    ctx = recommend.Context(s, pd.DataFrame(), st, pd.DataFrame(), pd.DataFrame(columns=["syscall", "count"]),
                            pd.DataFrame(columns=["dev"]), pd.DataFrame(), 10.0)
    (r,) = recommend.own_filesystem(ctx)
    assert r.kind == "own_filesystem" and r.inputs["moved_pids"] == [1]
    assert r.stall_ms_addressed == 60.0 and r.inputs["device_wait_ms"] == 58.0
    fig = {"device_util": util, "device_util_basis": "writes against the device's pace"}
    monkeypatch.setattr(recommend, "regime", lambda ctx, dev: ("hot_set", dict(fig)))
    recommend.annotate(ctx, [r])
    # low: 90 % of the log-space waits (54 ms of the first stall), and of its commit waits
    # too (72 ms) on a device known to run under its limit: 28-46 ms left, a stall still;
    # high: every log-space and device wait (the first keeps its 20 ms on the CPU; the
    # second falls under 10 ms and goes whole); the culprit's 80 ms are not counted
    assert r.stall_ms_removed_low == pytest.approx(low)
    assert r.stall_ms_removed_high == pytest.approx(80.0 + 40.0)
    assert r.cost == "new_filesystem" and "cgroup pod 1a2b-3c4d (burstable)" in r.command
    assert "wrote 90% of what was logged over the run;" in r.text


def test_a_programs_workers_move_together_and_the_kernels_threads_are_no_victims(tmp_path):
    # a file server's two workers (one program, the root cgroup) wrote half each: together
    # they filled the journal, and only writeback's worker stalled beside them: no tenant
    meta = metadata(journals=[journal_meta()], cgroups={"1": "/"})
    tables = {"writers": pd.DataFrame([w(1, "smbd", 1, 1, dirtied=51), w(2, "smbd", 1, 1, dirtied=49)]),
              "run_stats": pd.DataFrame([{"ts_ns": 2 * S, "dev": "7:0", "transaction": 1, "blocks": 100,
                                          "blocks_logged": 100}])}
    s = load_session(write_session(str(tmp_path / "s"), tables, meta))
    run = writers.writer_shares(s)
    st = pd.DataFrame([stall(1, "smbd", 100.0, checkpoint=100.0), stall(2, "smbd", 90.0, checkpoint=90.0),
                       stall(7, "kworker/u8:2", 60.0, transaction_wait=60.0)])
    assert writers.tenant(s, run.iloc[:0], run, st, "7:0") is None
    # another program stalled too: both workers move, and it is the victim, not the worker
    st = pd.concat([st, pd.DataFrame([stall(3, "postgres", 30.0, ts=4, checkpoint=30.0)])], ignore_index=True)
    t = writers.tenant(s, run.iloc[:0], run, st, "7:0")
    assert t["unit"] == "process" and t["pids"] == [1, 2] and t["who"] == "smbd (pids 1, 2)"
    assert t["run_share"] == pytest.approx(1.0) and t["culprit_ms"] == 190.0
    assert t["victim"] == "postgres (pid 3)" and t["others_ms"] == 90.0
    assert writers.kernel_thread("jbd2/loop0-8") and not writers.kernel_thread("kworkerd")


def test_a_stall_over_before_the_culprit_began_writing_is_not_its_doing(tmp_path):
    # a tree builder (python) wrote half the log and stalled, then tar copied the tree and
    # wrote the other half: tar did not make python wait, however much of the log it wrote
    meta = metadata(journals=[journal_meta()], cgroups={"1": "/"})
    rows = [{**w(1, "python", 1, 1, dirtied=49), "first_ns": 1 * S},
            {**w(2, "tar", 1, 1, dirtied=51), "first_ns": 5 * S}]
    tables = {"writers": pd.DataFrame(rows),
              "run_stats": pd.DataFrame([{"ts_ns": 9 * S, "dev": "7:0", "transaction": 1, "blocks": 100,
                                          "blocks_logged": 100}])}
    s = load_session(write_session(str(tmp_path / "s"), tables, meta))
    run = writers.writer_shares(s)
    st = pd.DataFrame([stall(1, "python", 300.0, ts=2, checkpoint=300.0),
                       stall(2, "tar", 900.0, ts=6, checkpoint=900.0)])
    assert writers.tenant(s, run.iloc[:0], run, st, "7:0") is None
    # a stall of python's after tar began: tar's doing, and python its victim
    st = pd.concat([st, pd.DataFrame([stall(1, "python", 200.0, ts=7, checkpoint=200.0)])], ignore_index=True)
    t = writers.tenant(s, run.iloc[:0], run, st, "7:0")
    assert t["who"] == "tar (pid 2)" and t["others_ms"] == 200.0 and t["victim"] == "python (pid 1)"
