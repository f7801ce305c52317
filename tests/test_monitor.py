"""The monitor's pieces on hand-built data: histogram buckets, journal headroom, capture
rotation by count and by disk, the shipped alert rules (promtool), the top screen, and
refusals of bad options (exit 2, nothing created)."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from jstall.monitor import capture, collector, top_cmd
from jstall.monitor.tracer import JournalState

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
JSTALL = os.path.join(os.path.dirname(sys.executable), "jstall")


def test_log2_buckets_are_cumulative_upper_bounds_in_seconds():
    b = np.zeros(40, dtype=np.int64)
    b[3] = 5        # [8, 16) ns: below the first bucket, counted in it
    b[20] = 2       # [1.05 ms, 2.1 ms)
    b[39] = 1       # beyond the last finite bucket
    out = collector.log2_buckets(b)
    les = [float(le) for le, _ in out[:-1]]
    assert les == sorted(les) and les[0] == 2 ** 10 / 1e9 and les[-1] == 2 ** 35 / 1e9
    d = dict(out)
    assert d[repr(2 ** 20 / 1e9)] == 5 and d[repr(2 ** 21 / 1e9)] == 7
    assert out[-1] == ("+Inf", 8)
    assert [n for _, n in out] == sorted(n for _, n in out)


def test_headroom_is_log_space_left_above_one_transaction():
    s = JournalState("7:0")
    assert s.space() is None
    # 4096-block journal: log of 4095 blocks, max transaction 1365
    s.fill = {"free_blocks": 2000, "first_block": 1, "last_block": 4096, "journal_blocks": 4096,
              "max_transaction_blocks": 1365, "committing_credits": 100}
    sp = s.space()
    assert sp["log_space_left_blocks"] == 2000 - 32 - 100
    assert sp["headroom_blocks"] == 2000 - 32 - 100 - 1365
    assert sp["headroom_ratio"] == pytest.approx((2000 - 32 - 100 - 1365) / (4095 - 32 - 1365))
    s.fill["free_blocks"] = 4095
    s.fill["committing_credits"] = 0
    assert s.space()["headroom_ratio"] == 1.0
    s.fill["free_blocks"] = 1000      # past the forced-checkpoint condition
    assert s.space()["headroom_blocks"] < 0 and s.space()["headroom_ratio"] == 0.0


def fill_rows(*samples):
    """Fill samples (seconds, free blocks) of a 4096-block journal as the probes hand them over."""
    dt = [("ts_ns", "u8"), ("free_blocks", "u4"), ("first_block", "u4"), ("last_block", "u4"),
          ("journal_blocks", "u4"), ("max_transaction_blocks", "u4"), ("committing_credits", "u4")]
    return np.array([(int(t * 1e9), free, 1, 4096, 4096, 1365, 0) for t, free in samples], dtype=dt)


def test_headroom_low_is_the_lowest_sample_of_the_last_minute():
    s = JournalState("7:0")
    # a dip to the forced-checkpoint condition at 100.5 s between two roomy samples: the
    # latest sample's ratio is high, its low holds the dip for 60 s
    s.add_fill(fill_rows((100.0, 4000), (100.5, 1300), (100.9, 3500)))
    sp = s.space(now_ns=101 * 10 ** 9)
    assert sp["free_blocks"] == 3500 and sp["headroom_ratio"] > 0.7 and sp["headroom_low_ratio"] == 0.0
    # a batch read later may hold an earlier sample: the fill stays the newest, the low takes it
    s.add_fill(fill_rows((100.7, 2500)))
    assert s.space(now_ns=101 * 10 ** 9)["free_blocks"] == 3500
    assert s.space(now_ns=160 * 10 ** 9)["headroom_low_ratio"] == 0.0
    # past the window the dip is gone, and so is what is older than a window before the newest
    assert s.space(now_ns=161 * 10 ** 9)["headroom_low_ratio"] == pytest.approx(sp["headroom_ratio"])
    s.add_fill(fill_rows((200.0, 3000)))
    assert set(s.lows) == {200}
    assert s.space(now_ns=200 * 10 ** 9)["headroom_low_ratio"] == s.space(now_ns=200 * 10 ** 9)["headroom_ratio"]


def _fake_capture(root, dev, stamp, nbytes):
    sub, name = capture.capture_name("h", dev, stamp)
    path = os.path.join(root, sub, name)
    os.makedirs(path)
    with open(os.path.join(path, "metadata.json"), "w") as f:
        f.write("{}")
    with open(os.path.join(path, "calls.parquet"), "wb") as f:
        f.write(os.urandom(nbytes))
    return path


class _Tracer:
    def __init__(self):
        self.listeners, self.tick_listeners = [], []


def test_rotation_keeps_the_newest_within_count_and_disk(tmp_path):
    import datetime

    t0 = datetime.datetime(2026, 1, 1, 23, 59, 58, tzinfo=datetime.timezone.utc)
    paths = [_fake_capture(str(tmp_path), "7:0", t0 + datetime.timedelta(seconds=i), 64 << 10) for i in range(5)]
    partial = os.path.join(str(tmp_path), "host=h", "date=2026-01-02", "capture-7-0-x" + capture.PARTIAL)
    os.makedirs(partial)
    assert capture.list_captures(str(tmp_path)) == paths  # across a date directory, oldest first; no partial
    c = capture.Captures(_Tracer(), str(tmp_path), max_captures=3, max_disk=1 << 30)
    c._rotate()
    assert capture.list_captures(str(tmp_path)) == paths[2:] and c.counts["rotated"] == 2
    one = capture.dir_bytes(paths[4])
    c.max_disk = 2 * one + one // 2
    c._rotate()
    assert capture.list_captures(str(tmp_path)) == paths[3:] and c.counts["rotated"] == 3
    assert c.disk_bytes <= c.max_disk


def test_shipped_alert_rules_pass_promtool():
    if not shutil.which("promtool"):
        pytest.skip("promtool is installed by 'make setup-test'")
    r = subprocess.run(["promtool", "check", "rules", os.path.join(ROOT, "deploy", "prometheus", "jstall-alerts.yml")],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "SUCCESS: 6 rules found" in r.stdout, r.stdout + r.stderr


def test_grafana_dashboard_queries_only_exported_metrics():
    import json
    import re

    with open(os.path.join(ROOT, "deploy", "grafana", "jstall-dashboard.json")) as f:
        dash = json.load(f)
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 6
    src = "".join(open(os.path.join(ROOT, "monitor", f)).read() for f in ("collector.py", "xfslogs.py"))
    for e in exprs:
        for name in re.findall(r"jstall_\w+", e):
            base = re.sub(r"_(total|bucket|sum|count)$", "", name)
            assert f'"{base}"' in src, name


def test_top_screen_shows_journals_and_the_slowest_calls_first():
    j = {"transactions": 10, "blocks_logged": 5000, "checkpoints": {"forced": 3, "background": 1},
         "checkpoint_written": {"forced": 900, "background": 10}, "size_blocks": 4096, "free_blocks": 1000,
         "log_blocks": 4095, "headroom_ratio": 0.05, "headroom_low_ratio": 0.0, "mountpoint": "/mnt/x"}
    prev = {"time": 100.0, "journals": {"7:0": dict(j, transactions=8, blocks_logged=3000)}, "recent": []}
    call = {"wall": 0, "op": "journal_start", "dev": "7:0", "cause": "checkpoint", "label": "jbd2_log_do_checkpoint",
            "comm": "python", "pid": 42}
    snap = {"time": 102.0, "journals": {"7:0": j}, "events_lost": {},
            "recent": [dict(call, latency_s=0.02), dict(call, latency_s=0.9, cause="transaction_wait")]}
    lines = top_cmd.render(snap, prev, "test")
    row = next(ln for ln in lines if ln.startswith("7:0"))
    assert row.split()[1:6] == ["/mnt/x", "4096", "75.6", "5.0", "0.0"]
    assert row.split()[6:9] == ["1000", "1.0", "3"]
    # a monitor from before the low: its column is a dash
    del j["headroom_low_ratio"]
    row = next(ln for ln in top_cmd.render(snap, prev, "test") if ln.startswith("7:0"))
    assert row.split()[4:7] == ["5.0", "-", "1000"]
    slow = [ln for ln in lines if "journal_start" in ln]
    assert "900.0" in slow[0] and "transaction_wait" in slow[0] and "20.0" in slow[1]


def test_top_screen_shows_xfs_logs_and_their_waits():
    snap = {"time": 1.0, "journals": {}, "events_lost": {},
            "xfs_logs": {"7:3": {"mountpoint": "/mnt/xfs", "log_bytes": 8 << 20, "headroom_ratio": 0.031,
                                 "waits": 12, "wait_s": 1.5, "sleeps": 14}},
            "recent": [{"wall": 0, "op": "xfs_log_reserve", "dev": "7:3", "cause": "log_space", "comm": "tar",
                        "label": "tail waited for metadata writeback", "pid": 7, "latency_s": 0.25}]}
    lines = top_cmd.render(snap, None, "test")
    row = next(ln for ln in lines if ln.startswith("7:3 "))
    assert row.split() == ["7:3", "/mnt/xfs", "8.0", "3.1", "12", "1.50", "14"], row
    slow = next(ln for ln in lines if "xfs_log_reserve" in ln)
    assert "250.0" in slow and "log_space" in slow


@pytest.mark.parametrize("argv, message", [
    (["--listen", "nonsense"], "--listen nonsense: not ADDR:PORT"),
    (["--max-disk", "lots"], "--max-disk 'lots': not a size"),
    (["--max-captures", "0"], "--max-captures must be at least 1"),
    (["--trigger-ms", "-1"], "--trigger-ms must be zero or positive"),
    (["--bpf-stats", "2"], "--bpf-stats 2: must be a share from 0 to 1"),
])
def test_bad_options_exit_2_and_create_nothing(tmp_path, argv, message):
    cap = tmp_path / "caps"
    r = subprocess.run([JSTALL, "monitor", "--capture-dir", str(cap)] + argv, capture_output=True, text=True)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not cap.exists()


def test_top_refuses_an_unreachable_monitor():
    r = subprocess.run([JSTALL, "top", "--url", "http://127.0.0.1:1"], capture_output=True, text=True)
    assert r.returncode == 2 and "is 'jstall monitor' running there?" in r.stderr and "Traceback" not in r.stderr


def test_primary_cause_agrees_with_the_analyzer():
    """The monitor's per-stall classification (plain Python, per poll) gives the cause, label
    and per-cause seconds that the analyzer's offcpu_causes and its largest-share rule give
    for the same hand-built intervals: stacks, no stack (own checkpoint or not), runnable, ties."""
    import pandas as pd

    from jstall.analyzer.stalls.causes import offcpu_causes, stack_causes
    from jstall.analyzer.stalls.causes import primary_cause

    stacks = pd.DataFrame({"stack_id": pd.Series([1, 2, 3], dtype="int32"), "frames": [
        ["__schedule", "schedule", "io_schedule", "bit_wait_io", "__wait_on_bit", "jbd2_log_do_checkpoint",
         "__jbd2_log_wait_for_space", "add_transaction_credits", "start_this_handle"],
        ["__schedule", "schedule", "wait_transaction_locked", "add_transaction_credits", "start_this_handle"],
        ["__schedule", "schedule", "some_driver_wait", "some_caller"]]})
    sc = {int(r.stack_id): (r.cause, r.label) for r in stack_causes(stacks).itertuples()}
    # call -> (own checkpoint in its thread, [(offcpu_ns, stack_id, runnable)])
    calls = {
        0: (False, [(5_000_000, 1, False), (2_000_000, 2, False), (1_000_000, 2, False)]),
        1: (False, [(3_000_000, 2, False), (4_000_000, -1, True)]),              # runnable wins
        2: (True, [(6_000_000, -1, False), (1_000_000, 3, False)]),              # own checkpoint, no stack
        3: (False, [(6_000_000, -1, False), (1_000_000, 3, False)]),             # no stack: other
        4: (False, [(2_000_000, 1, False), (2_000_000, 2, False)]),              # a tie
        5: (False, [(1_000_000, 3, False), (500_000, 7, False)]),                # stack 7: frames lost
        6: (False, [(5_000_000, 2, False), (1_000_000, -1, True)]),
    }
    rows = [(i, 100 + i, 1000 * i, 1000 * i + j, off, sid, run)
            for i, (_own, rs) in calls.items() for j, (off, sid, run) in enumerate(rs)]
    off = pd.DataFrame(rows, columns=["call", "tid", "call_ts_ns", "ts_ns", "offcpu_ns", "stack_id", "runnable"])
    keys = pd.DataFrame([(100 + i, 1000 * i) for i, (own, _) in calls.items() if own], columns=["tid", "call_ts_ns"])
    classified = offcpu_causes(off, stacks, keys)
    causes = set()
    for i, g in classified.groupby("call"):
        by = g.groupby("cause", observed=True)["offcpu_ns"].sum()
        labels = g.groupby("cause", observed=True)["label"].first()
        want = (by.idxmax(), labels[by.idxmax()], {k: v / 1e9 for k, v in by.items() if v})
        own, rs = calls[i]
        got = primary_cause([(o, r, sc.get(s) if s >= 0 else None) for o, s, r in rs], own)
        assert got == want, (i, got, want)
        causes.add(got[0])
    assert {"checkpoint", "transaction_wait", "cpu", "other"} <= causes
    assert primary_cause([], False) == ("other", "on CPU (no off-CPU interval)", {})


def _same_second_captures(tmp_path, monkeypatch, max_captures):
    """Captures writing a stub session (its metadata.json only), and a capture's gathered
    state that names it for the same second each time it is written."""
    import datetime

    c = capture.Captures(_Tracer(), str(tmp_path), max_captures=max_captures)

    def fake_session(path, p):
        with open(os.path.join(path, "metadata.json"), "w") as f:
            f.write("{}")

    monkeypatch.setattr(c, "_write_session", fake_session)
    trig = {"dev": "7:0", "op": "journal_start", "latency_s": 0.2, "cause": "checkpoint"}
    return c, {"trigger": trig, "wall": datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)}


def test_two_captures_in_the_same_second_are_both_written(tmp_path, monkeypatch):
    """A capture whose name (to the second) is taken gets the next free suffix instead of
    failing, and listing orders it after the first."""
    c, pending = _same_second_captures(tmp_path, monkeypatch, max_captures=10)
    for _ in range(3):
        c._write(pending)
    assert c.counts["written"] == 3 and c.counts["failed"] == 0
    names = [os.path.basename(p) for p in capture.list_captures(str(tmp_path))]
    assert names == ["capture-7-0-20260102T030405Z", "capture-7-0-20260102T030405Z.1", "capture-7-0-20260102T030405Z.2"]


def test_rotation_keeps_the_newest_of_captures_in_the_same_second(tmp_path, monkeypatch):
    """With max_captures=1, a third capture in one second, after the first was rotated away,
    does not take the first's free name (which sorts oldest, so rotation would remove the
    newest): the one kept is always the last written; past .9 the order stays numeric."""
    c, pending = _same_second_captures(tmp_path, monkeypatch, max_captures=1)
    for i in range(12):
        c._write(pending)
        assert capture.list_captures(str(tmp_path)) == [c.written[-1]], i
    assert os.path.basename(c.written[-1]) == "capture-7-0-20260102T030405Z.11"
    assert c.counts["written"] == 12 and c.counts["rotated"] == 11


@pytest.mark.parametrize("duty", [0.1, 0.25, 1.0, 0.0])
def test_bpf_statistics_windows_scale_to_the_whole_time(monkeypatch, duty):
    """BPF run time sampled with statistics on for a share of each 10 s is scaled to the
    whole time: programs that run 10 ms per second under statistics give about 10 ms per
    second of estimate, whatever the share; with statistics never on, nothing."""
    from jstall.monitor import bpfstats

    state = {"on": 0, "secs": 0.0, "runs": 0}
    monkeypatch.setattr(bpfstats, "enable", lambda: state.update(on=state["on"] + 1) or 7)
    monkeypatch.setattr(bpfstats, "disable", lambda fd: fd is not None and state.update(on=state["on"] - 1))
    monkeypatch.setattr(bpfstats, "run_totals", lambda bpf: {"rtp_x": (state["secs"], state["runs"])})
    clock = {"ns": 10**12}
    monkeypatch.setattr(bpfstats.time, "monotonic_ns", lambda: clock["ns"])
    s = bpfstats.Sampler(object(), duty=duty)
    for _ in range(1000):               # 100 s in 100 ms polls
        clock["ns"] += 100_000_000
        if state["on"]:
            state["secs"] += 0.001
            state["runs"] += 50
        s.tick()
    s.close()
    assert state["on"] == 0
    secs, runs = s.totals().get("rtp_x", (0.0, 0))
    if duty == 0:
        assert (secs, runs) == (0.0, 0) and s.sampled_s == 0
    else:
        assert secs == pytest.approx(1.0, rel=0.1) and runs == pytest.approx(50_000, rel=0.1)
        assert s.sampled_s == pytest.approx(100 * duty, rel=0.1)


def test_flight_buffer_keeps_each_poll_within_its_bound_and_window():
    """The flight buffer holds one entry per poll ({kind: joined records}); entries over the
    byte bound are dropped oldest first and their records counted, entries older than a
    capture can need are dropped without counting; a window returns its polls' records."""
    from jstall.monitor.tracer import MonitorOptions, Tracer

    t = Tracer(MonitorOptions(flight_bytes=1000, before_s=1, after_s=1))   # keeps 1 + 1 + 2 s
    s = 1_000_000_000
    t._keep_flight(10 * s, {1: b"a" * 300, 2: b"b" * 100}, 4, 400)
    t._keep_flight(11 * s, {1: b"c" * 400}, 2, 400)
    assert t.flight_bytes == 800 and t.flight_dropped == 0
    w = t.flight_window(10 * s, 11 * s)
    assert w[1] == [b"a" * 300, b"c" * 400] and w[2] == [b"b" * 100]
    t._keep_flight(12 * s, {2: b"d" * 300}, 3, 300)          # over 1000 bytes: the oldest poll goes
    assert t.flight_bytes == 700 and t.flight_dropped == 4
    assert t.flight_window(10 * s, 12 * s) == {1: [b"c" * 400], 2: [b"d" * 300]}
    t._keep_flight(15 * s + 1, {}, 0, 0)                        # 4 s later: the 11 s poll is too old
    assert t.flight_dropped == 4 and t.flight_bytes == 300 and len(t.flight) == 1
