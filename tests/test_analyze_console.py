"""`jstall analyze` for SREs: wall-clock times, what was recorded (command, exit status,
filters, traced calls, status), stall time per process, --from/--to windows, the recorded
threshold, losses sized by share, incomplete sessions; hand-built sessions."""

import datetime
import json
import time

import pytest

from jstall.analyzer import analyze
from jstall.analyzer.commands import analyze_cmd
from jstall.analyzer.session.load import Session
from jstall.analyzer.stalls.processes import per_process
from synthetic import journal_meta, metadata
from jstall.analyzer.render.text import session_summary
from jstall.analyzer.session.window import parse_time, resolve, restrict
from jstall.errors import JstallError

from test_analyzer import MS, S, _session, call, fsample, jev, off, run_stat, stacks_df

#: 2026-01-01T00:00:00Z, the synthetic metadata's wall clock at monotonic 0
WALL0 = 1_767_225_600_000_000_000


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    """Wall-clock times print in the local zone: make it UTC for these tests."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def traced(tmp_path, meta=None, name="s"):
    """Two processes stall on one journal: pid 100 (comm 'db', two threads) 3 stalls in
    checkpoints at t = 1, 2, 3 s; pid 200 ('backup') one 20 ms commit wait at t = 6.5 s.
    Transactions commit at 1.5, 4.5 and 7.5 s."""
    calls, offs = [], []
    for i, (t, lat, tid, pid, comm, sid) in enumerate([
            (1 * S, 100 * MS, 101, 100, "db", 1), (2 * S, 50 * MS, 102, 100, "db", 1),
            (3 * S, 30 * MS, 101, 100, "db", 1), (6500 * MS, 20 * MS, 201, 200, "backup", 3)]):
        c = call(t, lat, tid, pid=pid, comm=comm)
        calls.append(c)
        offs.append(off(c, t + MS, lat - 2 * MS, sid))
    calls.append(call(8 * S, 2 * MS, 101, pid=100, comm="db"))  # below 10 ms: not a stall
    evs = [jev(t + 2 * MS, "checkpoint", tid, result=0, free=200) for t, tid in ((1 * S, 101), (2 * S, 102))]
    txns = [run_stat(t, i, handles=10, blocks=20, logged=22) for i, t in enumerate((1500 * MS, 4500 * MS, 7500 * MS))]
    fills = [fsample(t * S, 500) for t in range(10)]
    return _session(tmp_path, name=name, meta=meta, calls=calls, offcpu=offs, jbd2_events=evs, run_stats=txns,
                    fill=fills, stacks=stacks_df())


def cli(args, capsys):
    import argparse

    p = argparse.ArgumentParser()
    analyze_cmd.add_arguments(p)
    rc = analyze_cmd.run(p.parse_args(args))
    return rc, capsys.readouterr().out


# --- wall clock -------------------------------------------------------------------------------

def test_stall_start_times_are_wall_clock_in_text_and_iso_in_json(tmp_path, capsys):
    s = traced(tmp_path)
    d = analyze(s).to_dict()
    top = {r["ts_ns"]: r for r in d["stalls"]["top"]}
    assert top[1 * S]["wall"] == "2026-01-01T00:00:01.000000+00:00"
    assert top[6500 * MS]["wall"] == "2026-01-01T00:00:06.500000+00:00"
    assert d["session"]["start"] == "2026-01-01T00:00:00.000000+00:00"
    rc, text = cli([s.path], capsys)
    assert rc == 0
    assert "recorded 2026-01-01 00:00:00.000 to 00:00:10.000 (UTC); status complete" in text
    assert "00:00:06.500 +6.500" in text and "00:00:01.000 +1.000" in text


def test_wall_clock_follows_the_local_zone(tmp_path, monkeypatch):
    monkeypatch.setenv("TZ", "Asia/Kolkata")  # +05:30, no daylight saving
    time.tzset()
    d = analyze(traced(tmp_path)).to_dict()
    assert {r["wall"] for r in d["stalls"]["top"]} >= {"2026-01-01T05:30:01.000000+05:30"}


def test_without_a_wall_clock_times_are_seconds_since_the_start(tmp_path):
    m = metadata()
    del m["start"]["wall_ns"]
    a = analyze(traced(tmp_path, meta=m))
    d = a.to_dict()
    assert all(r["wall"] is None for r in d["stalls"]["top"])
    text = session_summary(a)
    assert "\nt s " in text and "recorded " not in text
    with pytest.raises(JstallError, match="no wall-clock start; give \\+SECONDS"):
        resolve(a.session, "00:00:02")
    assert resolve(a.session, "+2") == (2 * S, 10 * S)


# --- what was recorded --------------------------------------------------------------------------

def test_header_names_command_exit_status_filters_calls_and_status(tmp_path, capsys):
    m = metadata(command=["git", "-C", "/srv/repo", "commit", "-m", "two words"], command_exit_status=128,
                 filters={"devices": ["7:0"], "pid": None, "cgroup": None, "command_tree": True},
                 probes={"attached": [], "missing": [], "syscalls": ["fsync", "openat", "setxattr"]}, min_ms=1.0)
    s = traced(tmp_path, meta=m)
    rc, text = cli([s.path], capsys)
    assert "command: git -C /srv/repo commit -m 'two words'  -> exit status 128" in text
    assert "filters: devices 7:0; the command and its descendants" in text
    assert "traced calls (3): fsync, openat, setxattr" in text
    assert "calls >= 1 ms stored one by one" in text
    rc, out = cli([s.path, "--json"], capsys)
    d = json.loads(out)["session"]
    assert d["command"][0] == "git" and d["exit_status"] == 128 and d["exit_status_text"] == "exit status 128"
    assert d["filters"]["devices"] == ["7:0"] and d["traced_calls"] == ["fsync", "openat", "setxattr"]
    assert d["status"] == "complete" and d["complete"] is True
    assert d["end"] == "2026-01-01T00:00:10.000000+00:00"


def test_a_command_killed_by_a_signal_and_a_system_wide_session(tmp_path):
    m = metadata(command=["dbench", "4"], command_exit_status=-9)
    text = session_summary(analyze(traced(tmp_path, meta=m, name="a")))
    assert "command: dbench 4  -> killed by signal 9 (SIGKILL)" in text
    m = metadata()  # system-wide: no command, no filter
    text = session_summary(analyze(traced(tmp_path, meta=m, name="b")))
    assert "command:" not in text and "filters: none (every process, every ext4)" in text
    # metadata without the newer keys: the lines are left out, nothing is guessed
    m = metadata()
    for k in ("filters", "probes", "command", "command_exit_status", "min_ms"):
        del m[k]
    a = analyze(traced(tmp_path, meta=m, name="c"))
    text = session_summary(a)
    assert "\nfilters:" not in text and "traced calls (" not in text and "stored one by one" not in text
    d = a.to_dict()
    assert d["session"]["filters"] is None and d["session"]["traced_calls"] is None
    assert d["recorded_min_ms"] is None and d["min_ms"] == 10


# --- per process --------------------------------------------------------------------------------

def test_stall_time_per_process(tmp_path, capsys):
    a = analyze(traced(tmp_path))
    p = a.processes
    assert p["pid"].tolist() == [100, 200]
    db = p.iloc[0]
    assert db["comm"] == "db" and db["threads"] == 2 and db["stalls"] == 3
    assert db["stall_ms"] == pytest.approx(180.0) and db["max_ms"] == pytest.approx(100.0)
    assert db["share_pct"] == pytest.approx(90.0) and db["cause"] == "checkpoint"
    assert db["cause_ms"] == pytest.approx(98 + 48 + 28)
    bk = p.iloc[1]
    assert bk["comm"] == "backup" and bk["cause"] == "commit_wait" and bk["share_pct"] == pytest.approx(10.0)
    d = a.to_dict()
    assert [r["pid"] for r in d["per_process"]] == [100, 200]
    rc, text = cli([a.session.path, "--top", "1"], capsys)
    assert "stall time by process (top 1 of 2)" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("db "))
    assert line.split() == ["db", "100", "2", "3", "180.0", "90.0", "100.0", "checkpoint"]


def test_per_process_splits_by_cgroup_when_calls_carry_one(tmp_path):
    s = traced(tmp_path)
    calls = s.calls.copy()
    calls["cgroup_id"] = [7, 8, 7, 9, 7]  # pid 100 ran its stalls in two cgroups
    s2 = Session(s.path, s.meta, {**s.tables, "calls": calls})
    a = analyze(s2)
    p = per_process(s2, a.stalls)
    assert list(p.columns[:3]) == ["pid", "comm", "cgroup_id"]
    got = {(r.pid, r.cgroup_id): (r.stalls, round(r.stall_ms, 3)) for r in p.itertuples()}
    assert got == {(100, 7): (2, 130.0), (100, 8): (1, 50.0), (200, 9): (1, 20.0)}
    assert "cgroup" in session_summary(a)


# --- windows -------------------------------------------------------------------------------------

def test_time_forms_map_to_the_sessions_clock():
    m = metadata(start_ns=5 * S, end_ns=15 * S)
    assert parse_time("+2.5", m) == 7500 * MS
    assert parse_time("00:00:02.5", m) == 7500 * MS
    assert parse_time("00:00:02", m) == 7 * S
    assert parse_time("00:01", m) == 65 * S
    assert parse_time("2026-01-01T00:00:03", m) == 8 * S
    assert parse_time("2026-01-01T01:00:03+01:00", m) == 8 * S
    assert parse_time("2026-01-01 00:00:03Z", m) == 8 * S
    # a session that starts before midnight: 00:00:30 is the next day
    m2 = metadata(start={"wall": "", "wall_ns": WALL0 - 60 * S, "monotonic_ns": 0})
    assert parse_time("00:00:30", m2) == 90 * S
    assert parse_time("23:59:30", m2) == 30 * S
    for bad in ("abc", "25:00", "12:61", "+", "+-3", "2026-01-01", "1.5"):
        with pytest.raises(JstallError, match="give HH:MM"):
            parse_time(bad, m)


def test_a_window_restricts_every_table_before_analysis(tmp_path, capsys):
    s = traced(tmp_path)
    lo, hi = resolve(s, "00:00:01.5", "+7")
    assert (lo, hi) == (1500 * MS, 7 * S)
    w = restrict(s, lo, hi)
    assert w.calls["ts_ns"].tolist() == [2 * S, 3 * S, 6500 * MS]
    assert sorted(w.offcpu["call_ts_ns"].tolist()) == [2 * S, 3 * S, 6500 * MS]
    assert w.run_stats["ts_ns"].tolist() == [1500 * MS, 4500 * MS]
    assert w.jbd2_events["ts_ns"].tolist() == [2 * S + 2 * MS]
    assert w.fill["ts_ns"].tolist() == [2 * S, 3 * S, 4 * S, 5 * S, 6 * S]
    assert len(w.call_totals) == len(s.call_totals) and len(w.stacks) == len(s.stacks)
    assert len(s.calls) == 5  # the original is untouched
    a = analyze(w)
    d = a.to_dict()
    assert d["stalls"]["count"] == 3 and d["journals"][0]["transactions"] == 2
    assert d["session"]["duration_s"] == 5.5
    assert d["window"] == {"from": "2026-01-01T00:00:01.500000+00:00", "to": "2026-01-01T00:00:07.000000+00:00",
                           "from_s": 1.5, "to_s": 7.0, "duration_s": 5.5, "call_counts": "whole session"}
    assert d["stalls"]["top"][0]["t_s"] == 2.0  # still seconds since the session start
    assert any("whole session" in n for n in d["notes"])
    rc, text = cli([s.path, "--from", "00:00:01.5", "--to", "+7"], capsys)
    assert "window: 00:00:01.500 to 00:00:07.000 (+1.500 s to +7.000 s, 5.5 s)" in text
    assert "3 stalls (calls >= 10 ms)" in text
    rc, out = cli([s.path, "--from", "+6", "--json"], capsys)
    d = json.loads(out)
    assert d["stalls"]["count"] == 1 and d["per_process"][0]["comm"] == "backup" and d["window"]["to_s"] == 10.0


def test_a_window_drops_proc_agreement(tmp_path):
    info0 = "0 transactions (0 requested), each up to 256 blocks\n"
    m = metadata(journals=[journal_meta(proc_info_start=info0, proc_info_end=info0)])
    s = traced(tmp_path, meta=m)
    w = restrict(s, *resolve(s, "+2", None))
    assert "proc_info_start" not in w.meta["journals"][0] and "proc_info_start" in s.meta["journals"][0]
    assert len(analyze(w).proc) == 0


def test_bad_windows_are_refused(tmp_path):
    s = traced(tmp_path)
    with pytest.raises(JstallError, match="is not before --to"):
        resolve(s, "+5", "+2")
    with pytest.raises(JstallError, match="at or after the session's end .*00:00:10.000"):
        resolve(s, "00:01:00", None)
    with pytest.raises(JstallError, match="at or before the session's start"):
        resolve(s, None, "2025-12-31T23:00:00")
    with pytest.raises(JstallError, match="--to xyz: not a time"):
        resolve(s, None, "xyz")


# --- threshold, losses, completeness ----------------------------------------------------------------

def test_min_ms_below_the_recorded_threshold_uses_it_and_says_so(tmp_path, capsys):
    s = traced(tmp_path, meta=metadata(min_ms=25.0))
    rc, text = cli([s.path, "--min-ms", "0"], capsys)
    assert "note: calls faster than 25 ms were never stored (recorded with --min-ms 25)" in text
    assert "3 stalls (calls >= 25 ms)" in text
    rc, out = cli([s.path, "--min-ms", "5", "--json"], capsys)
    d = json.loads(out)
    assert (d["min_ms"], d["requested_min_ms"], d["recorded_min_ms"]) == (25, 5, 25)
    rc, out = cli([s.path, "--min-ms", "40", "--json"], capsys)
    d = json.loads(out)
    assert d["min_ms"] == 40 and not any("never stored" in n for n in d["notes"]) and d["stalls"]["count"] == 2


def _lossy(tmp_path, name, n_off, lost):
    c = call(S, 900 * MS, 5)
    offs = [off(c, S + i * 100_000, 50_000, 1 if i else -1) for i in range(n_off)]  # one without a stack
    return _session(tmp_path, name=name, meta=metadata(**lost), calls=[c], offcpu=offs, stacks=stacks_df())


def test_one_lost_stack_in_thousands_is_a_note(tmp_path):
    a = analyze(_lossy(tmp_path, "a", 4000, {"stacks_lost": 1}))
    d = a.to_dict()
    assert not any("stack" in w for w in d["warnings"])
    (n,) = [n for n in d["notes"] if "stack" in n]
    assert "1 kernel stack captures failed; 1 of 4,000 off-CPU intervals have no stack (0.025%): negligible" == n
    assert d["losses"] == [{"buffer": "stacks", "lost": 1, "kept": 3999, "missing": 1, "share": 0.0}]
    text = session_summary(a)
    assert "note: 1 kernel stack" in text and "WARNING: 1 kernel stack" not in text
    assert "Record again" not in text and not any(r["kind"] == "lost_events" for r in d["recommendations"])


def test_large_losses_are_warnings_with_counts_and_shares(tmp_path):
    s = _lossy(tmp_path, "b", 10, {"events_lost": {"calls": 3, "offcpu": 30, "jbd2": 0}})
    for session in (s, restrict(s, 2 * S, 10 * S)):  # a window holds none of the rows; the shares stay
        w = analyze(session).to_dict()["warnings"]
        assert any(x.startswith("3 calls events lost, 1 kept (75% lost): stall counts and times are lower bounds")
                   for x in w), w
        assert any(x.startswith("30 offcpu events lost, 10 kept (75% lost)") for x in w), w
        assert not any("jbd2 events lost" in x for x in w)


def test_runs_the_kernel_skipped_are_a_warning_and_the_lost_events_advice(tmp_path):
    """Runs of the probes the kernel skipped (bpf_prog_info.recursion_misses) belong to no
    table: a warning with the count however few, and the lost-events advice names their fix."""
    s = _lossy(tmp_path, "k", 10, {"events_lost": {"calls": 0, "offcpu": 0, "jbd2": 0, "skipped": 2}})
    d = analyze(s).to_dict()
    assert {"buffer": "skipped", "lost": 2, "kept": None, "share": None} in d["losses"]
    assert any(x.startswith("the kernel skipped 2 runs of the probes") for x in d["warnings"]), d["warnings"]
    (r,) = [r for r in d["recommendations"] if r["kind"] == "lost_events"]
    assert "skipped 2" in r["text"] and "fewer BPF tools" in r["text"] and r["inputs"]["skipped"] == 2


def test_incomplete_sessions_say_so_and_up_to_when(tmp_path, capsys):
    m = metadata(status="recording", last_flush={"wall": "", "wall_ns": WALL0 + 6 * S, "monotonic_ns": 6 * S})
    del m["end"]
    s = traced(tmp_path, meta=m, name="killed")
    rc, text = cli([s.path], capsys)
    assert ("WARNING: the session is incomplete (status 'recording': the recorder stopped without finishing): "
            "data up to 00:00:06.000 (+6.0 s) was kept") in text
    d = analyze(s).to_dict()["session"]
    assert d["complete"] is False and d["through"] == "2026-01-01T00:00:06.000000+00:00" and d["through_s"] == 6.0
    # no last_flush and no end clock: up to the last event
    m = metadata(status="killed")
    del m["end"]
    d = analyze(traced(tmp_path, meta=m, name="k2")).to_dict()
    assert "data up to 00:00:09.000 (+9.0 s)" in d["warnings"][0]
    # interrupted with a command: a warning; system-wide: a note (the usual way to end it)
    d = analyze(traced(tmp_path, meta=metadata(status="interrupted", command=["x"]), name="i1")).to_dict()
    assert d["warnings"][0].startswith("the recording was interrupted (Ctrl-C or SIGTERM) at 00:00:10.000")
    d = analyze(traced(tmp_path, meta=metadata(status="interrupted"), name="i2")).to_dict()
    assert d["warnings"] == [] and d["notes"][0].startswith("the recording was ended by Ctrl-C or SIGTERM")
    assert d["session"]["complete"] is True


def test_json_document_is_strict_json_with_the_new_fields(tmp_path, capsys):
    rc, out = cli([traced(tmp_path).path, "--json"], capsys)
    d = json.loads(out)
    for k in ("window", "notes", "losses", "per_process", "recorded_min_ms", "requested_min_ms"):
        assert k in d
    for k in ("exit_status", "filters", "traced_calls", "complete", "through", "end"):
        assert k in d["session"]
    assert datetime.datetime.fromisoformat(d["stalls"]["top"][0]["wall"]).utcoffset() == datetime.timedelta(0)
    assert d["per_process"][0] == {"pid": 100, "comm": "db", "threads": 2, "stalls": 3, "stall_ms": 180.0,
                                   "share_pct": 90.0, "max_ms": 100.0, "cause": "checkpoint", "cause_ms": 174.0}


@pytest.mark.parametrize("key,value,what", [
    ("start", "x", "a clock object with integer .*"), ("end", {"monotonic_ns": "a"}, "a clock object.*"),
    ("command", "git", "a list of strings"), ("command_exit_status", "128", "an integer"),
    ("filters", "x", "an object"), ("probes", [], "an object whose 'syscalls' is a list"),
    ("min_ms", "a", "a number"), ("events_lost", {"calls": "x"}, "an object of counts"),
    ("stacks_lost", -1, "a count"), ("status", 5, "a string"),
])
def test_metadata_of_the_wrong_shape_is_refused_with_one_line(tmp_path, key, value, what):
    from jstall.analyzer.session.load import load_session
    from synthetic import write_session

    path = write_session(str(tmp_path / "s"), {}, metadata(**{key: value}))
    with pytest.raises(JstallError, match=f"metadata '{key}' is not {what}; the session is corrupt"):
        load_session(path)


def test_windows_partition_a_real_session():
    """notebooks/data/xattr-i128 (recorded on this project's lab): two adjacent windows hold
    every stall, transaction and checkpoint of the session exactly once."""
    import os

    from jstall.analyzer.session.load import load_session

    path = os.path.join(os.path.dirname(__file__), "..", "notebooks", "data", "xattr-i128")
    s = load_session(path)
    whole = analyze(s).to_dict()
    mid = resolve(s, "+0.8", None)[0]  # between its second and third stall
    parts = [analyze(restrict(s, *resolve(s, *w))).to_dict() for w in ((None, "+0.8"), ("+0.8", None))]
    ts = [r["ts_ns"] for r in whole["stalls"]["top"]]
    assert whole["stalls"]["count"] == len(ts) >= 2
    assert 0 < sum(t < mid for t in ts) < len(ts)  # each window holds some of them
    assert [p["stalls"]["count"] for p in parts] == [sum(t < mid for t in ts), sum(t >= mid for t in ts)]
    assert sum(p["stalls"]["count"] for p in parts) == whole["stalls"]["count"]
    assert sum(p["stalls"]["total_ms"] for p in parts) == pytest.approx(whole["stalls"]["total_ms"], abs=0.01)
    j = [p["journals"][0] for p in parts]
    assert sum(x["transactions"] for x in j) == whole["journals"][0]["transactions"]
    assert sum(x["forced_checkpoints"] for x in j) == whole["journals"][0]["forced_checkpoints"]
    assert sum(p["per_process"][0]["stall_ms"] for p in parts if p["per_process"]) == pytest.approx(
        whole["per_process"][0]["stall_ms"], abs=0.01)
    assert parts[0]["session"]["duration_s"] + parts[1]["session"]["duration_s"] == pytest.approx(
        whole["session"]["duration_s"], abs=0.001)
