"""What a remedy removes of the stall time (analyzer.advice.remedies): the per-stall rule, the interval's
width, the regimes, the ranking and headline rules, and the verdict's text rendered from the
JSON's values, on hand-built tables."""

import json

import pandas as pd
import pytest
from jstall.analyzer import summary
from jstall.analyzer.advice import remedies
from jstall.analyzer.advice import recommend
from jstall.analyzer.advice.recommend import Recommendation
from jstall.analyzer.stalls.find import stall_columns


def stalls(rows):
    """A stall table: one row per dict (latency_ms, dev and <cause>_ms given; the rest 0)."""
    cols = [c for c in stall_columns() if c.endswith("_ms")]
    out = []
    for r in rows:
        d = {c: 0.0 for c in cols}
        d.update(ts_ns=0, end_ns=int(r["latency_ms"] * 1e6), dev="7:0")
        d.update(r)
        out.append(d)
    return pd.DataFrame(out)


def test_a_stall_loses_its_part_of_the_causes_touched_and_all_of_it_under_the_threshold():
    t = stalls(
        [
            {
                "latency_ms": 100.0,
                "checkpoint_ms": 60.0,
                "commit_wait_ms": 30.0,
            },  # 40 left: a stall still
            {"latency_ms": 50.0, "checkpoint_ms": 45.0},  # 5 left: no longer one
            {"latency_ms": 80.0, "commit_wait_ms": 70.0},  # untouched
            {"latency_ms": 30.0, "checkpoint_ms": 25.0, "dev": "7:1"},  # another filesystem
        ]
    )
    assert remedies.removed_ms(t, {"checkpoint": 1.0}, 10.0, dev="7:0") == 60.0 + 50.0
    assert remedies.removed_ms(t, {"checkpoint": 1.0}, 10.0) == 60.0 + 50.0 + 30.0
    # half of it: 30 of the first (70 left), 22.5 of the second (27.5 left: still a stall)
    assert remedies.removed_ms(t, {"checkpoint": 0.5}, 10.0, dev="7:0") == 30.0 + 22.5
    # a cause nobody waited on removes nothing; commit waits removed with the checkpoint's
    assert remedies.removed_ms(t, {"log_space": 1.0}, 10.0) == 0.0
    # 10 ms left is still a stall (calls >= min_ms): only its parts go
    assert (
        remedies.removed_ms(t, {"checkpoint": 1.0, "commit_wait": 1.0}, 10.0, dev="7:0")
        == 90.0 + 50.0 + 70.0
    )


def test_regimes_and_the_figures_that_decide_them():
    at_limit = {"util": 0.9, "basis": "writes against the device's pace (1,000 writes/s)"}
    spare = {"util": 0.3, "basis": "io_ticks"}
    # the device at its limit and its own waits at least the checkpoint's: device-bound
    name, fig = remedies.regime_of("hot set", at_limit, log_ms=1000.0, device_ms=2000.0)
    assert name == "device_bound" and fig["device_util"] == 0.9 and fig["device_stall_ms"] == 2000.0
    # at its limit but the checkpoint dominates: the journal model's regime
    assert remedies.regime_of("hot set", at_limit, 3000.0, 2000.0)[0] == "hot_set"
    assert remedies.regime_of("streaming", at_limit, 3000.0, 2000.0)[0] == "streaming"
    # room to spare: never device-bound, whatever waited
    assert remedies.regime_of("streaming", spare, 100.0, 9000.0)[0] == "streaming"
    assert remedies.regime_of(None, None, 100.0, 9000.0)[0] == "hot_set"


def test_at_the_device_limit_a_journal_removes_only_the_waits_whose_writes_it_saves():
    # a hot set written home 10 times over saves 90 % of those writes; a stream none
    assert remedies.log_fractions("device_bound", 0.9) == pytest.approx((0.72, 0.9))
    assert remedies.log_fractions("device_bound", 0.0) == (0.0, 0.0)
    assert remedies.log_fractions("hot_set", 0.0) == (0.8, 1.0)
    assert remedies.log_fractions("streaming", 0.0, 0.5) == (0.25, 0.5)
    lo, hi = remedies.device_fractions(0.2, 0.5)
    assert (
        set(hi) == set(remedies.DEVICE_SIDE) and hi["commit_wait"] == 0.1 and lo["commit_wait"] == 0.0
    )
    # at its limit still none for sure; taken below it, the device may stop queueing
    lo, hi = remedies.device_fractions(0.2, 0.5, util=0.9)
    assert lo["commit_wait"] == 0.0 and hi["commit_wait"] == pytest.approx(0.1)
    lo, hi = remedies.device_fractions(0.3, 1.0, util=0.9)
    assert lo["commit_wait"] == 0.0 and hi["commit_wait"] == 1.0


def test_a_run_shorter_than_writebacks_window_writes_none_of_a_held_hot_set_home():
    from types import SimpleNamespace

    def model(run_s, window_s=35.0):
        # 1,000 distinct blocks written home 4,000 times by forced checkpoints
        return SimpleNamespace(home_blocks=1000, written_home_blocks=4000, relogged_blocks=300, blocks=1000,
                               run_s=run_s, window_s=window_s)

    # held, each is written home once per window it has been dirty for: none in a 6 s run
    assert remedies.saved_home_share(model(6.0)) == 1.0
    # a 100 s run spans two windows: each block twice, 2,000 of the 4,000 writes stay
    assert remedies.saved_home_share(model(100.0)) == pytest.approx(0.5)
    # one spanning more windows than checkpoints wrote each block: writeback writes them all
    assert remedies.saved_home_share(model(1000.0)) == 0.0
    # no window known: the writes a block's repeats cost
    assert remedies.saved_home_share(model(None)) == pytest.approx(0.75)
    # without the home writes counted: the share of logged blocks re-logged, all in a short run
    m = model(6.0)
    m.home_blocks = None
    assert remedies.saved_home_share(m) == 1.0
    m.run_s = 100.0
    assert remedies.saved_home_share(m) == pytest.approx(0.3)


def test_union_counts_overlapping_spans_once():
    assert remedies.union_ms([0, 5_000_000, 20_000_000], [10_000_000, 12_000_000, 21_000_000]) == 13.0
    assert remedies.union_ms([], []) == 0.0


def _rec(kind, low, high, total=10_000.0, regime="hot_set", cost="offline"):
    return Recommendation(
        kind,
        "",
        dev="7:0",
        stall_ms_removed_low=low,
        stall_ms_removed_high=high,
        stall_ms_total=total,
        mechanism_ms_removed=high,
        regime=regime,
        cost=cost,
        command=f"apply {kind}",
        stall_ms_addressed=high,
    )


def test_ranked_by_the_interval_and_the_headline_is_the_first_ranked_reaching_half():
    t = stalls([{"latency_ms": 10_000.0, "checkpoint_ms": 4000.0, "commit_wait_ms": 6000.0}])
    recs = recommend.rank(
        [
            _rec("inode_size", 3000.0, 4500.0),
            _rec("journal_size", 3500.0, 4000.0),
            _rec("external_journal", 500.0, 900.0),
        ]
    )
    assert [r.kind for r in recs] == ["inode_size", "journal_size", "external_journal"]
    v = remedies.verdict(recs, t, 10.0, 10_000.0, {"util": 0.95, "basis": "pace"})
    assert v["headline"] is None and not v["filesystem_removes_most"]
    assert v["best"]["kind"] == "inode_size"
    assert v["beyond"]["causes"] == {"commit_wait": 6000.0} and v["beyond"]["share"] == 0.6
    # one whose high end reaches half, ranked below one that removes more at the middle of
    # its interval: not promoted to the headline; the first-ranked is the best
    recs = recommend.rank(
        [_rec("journal_size", 4200.0, 4400.0), _rec("inode_size", 2600.0, 5000.0)]
    )
    v = remedies.verdict(recs, t, 10.0, 10_000.0)
    assert v["headline"] is None and v["best"]["kind"] == "journal_size"
    # the first-ranked whose high end reaches half: the headline, though not for sure (its low
    # end is a quarter of the stall time)
    recs = recommend.rank([_rec("journal_size", 3000.0, 3400.0), _rec("inode_size", 2600.0, 5000.0)])
    v = remedies.verdict(recs, t, 10.0, 10_000.0)
    assert v["headline"]["kind"] == "inode_size" and not v["filesystem_removes_most"]
    assert remedies.verdict_lines(v)[1].startswith(
        "verdict: inode_size on 7:0 removes 2.6 s to 5.0 s (26%-50%; regime hot_set; cost offline); at its low end "
        "most of the stall time stays: apply inode_size")
    # one whose low end is half too: it removes most for sure
    v = remedies.verdict(recommend.rank([_rec("journal_size", 5000.0, 6000.0)]), t, 10.0, 10_000.0)
    assert v["headline"]["kind"] == "journal_size" and v["filesystem_removes_most"]
    assert remedies.verdict_lines(v)[1] == ("verdict: journal_size on 7:0 removes 5.0 s to 6.0 s (50%-60%; regime "
                                            "hot_set; cost offline): apply journal_size")


def test_the_verdict_text_is_rendered_from_the_json_values():
    t = stalls([{"latency_ms": 10_000.0, "checkpoint_ms": 3800.0, "commit_wait_ms": 6200.0}])
    recs = [_rec("journal_size", 3333.3333, 3999.9999)]
    v = remedies.verdict(recs, t, 10.0, 10_000.0, {"util": 0.97, "basis": "pace"})
    doc = json.loads(json.dumps(summary.json_safe(v)))
    lines = remedies.verdict_lines(doc)
    assert lines == remedies.verdict_lines(summary.json_safe(v))
    assert lines[0] == (
        "verdict: 10.0 s of stall time (every stalled call, every cause); most of it "
        "commit_wait 62%, checkpoint 38%."
    )
    assert lines[1] == (
        "verdict: no filesystem option removes most of it; the most: journal_size on 7:0 removes "
        "3.3 s to 4.0 s (33%-40%; regime hot_set; cost offline). The rest: commit_wait 62% on a "
        "device at 97% of its limit: fewer fsyncs per second (batched commits), or a device that "
        "serves more writes and flushes its cache faster."
    )
    head = remedies.verdict([_rec("inode_size", 6000.0, 9000.0)], t, 10.0, 10_000.0)
    assert remedies.verdict_lines(summary.json_safe(head))[1] == (
        "verdict: inode_size on 7:0 removes 6.0 s to 9.0 s (60%-90%; regime hot_set; "
        "cost offline): "
        "apply inode_size"
    )
    assert remedies.verdict_lines(remedies.verdict([], stalls([]), 10.0, 0.0)) == []


def test_the_to_dict_carries_every_field_the_benchmark_reads():
    d = _rec("journal_size", 1.0, 2.0).to_dict()
    for k in (
        "stall_ms_removed_low",
        "stall_ms_removed_high",
        "stall_ms_total",
        "mechanism_ms_removed",
        "regime",
        "cost",
        "command",
    ):
        assert k in d
    assert set(remedies.COSTS) == {"online", "remount", "offline", "new_filesystem"}
    assert set(remedies.REGIMES) == {"hot_set", "streaming", "device_bound"}


def test_analyze_leads_with_the_verdict_of_its_json(tmp_path):
    from jstall.analyzer import analyze
    import synthetic
    from jstall.analyzer.render.text import session_summary

    path = tmp_path / "s"
    synthetic.generate_session(str(path), seed=3, calls=400, stalls=30)
    a = analyze(str(path))
    d = json.loads(json.dumps(a.to_dict()))
    lines = remedies.verdict_lines(d["verdict"])
    assert lines and d["verdict"]["stall_ms_total"] == d["stalls"]["total_ms"]
    text = session_summary(a).splitlines()
    assert text[1 : 1 + len(lines)] == lines  # right after the session line
    for r in d["recommendations"]:
        if r["kind"] in remedies.REMEDIES and r["stall_ms_removed_high"] is not None:
            assert r["stall_ms_total"] == d["stalls"]["total_ms"] and r["cost"] in remedies.COSTS
            assert r["regime"] in remedies.REGIMES and r["command"]
            lo, hi = r["stall_ms_removed_low"], r["stall_ms_removed_high"]
            assert 0 <= lo <= hi <= r["stall_ms_total"]


def test_shares_over_the_whole_are_said_with_their_unit():
    from jstall import enough

    # several tasks' waits overlap: 28,396 ms of them in a 20.3 s run
    e = enough.judge(28_396.0, 400.0, 20_283.0)
    assert (
        "1.4 task-seconds of overlapping waits a second of the run" in e.describe()
        and "140%" not in e.describe()
    )
    assert "14% of the run" in enough.judge(2_839.6, 400.0, 20_283.0).describe()
    # the log's requests outnumber what the device's counters saw: never "100% of 333"
    assert recommend._share_of_requests(361, 333).startswith("361 requests, more than the 333")
    assert recommend._share_of_requests(100, 400) == "25% of the device's 400 requests"


def test_device_lines_say_the_writes_against_the_devices_limit():
    from jstall.analyzer.session.devices import device_lines

    r = {
        "role": "data",
        "dev": "7:1",
        "lower_dev": "7:0",
        "seconds": 10.0,
        "read_ios": 0,
        "write_ios": 9_900,
        "write_iops": 990.0,
        "busy_pct": 8.0,
        "stall_seconds": 0.0,
        "limit_write_iops": 1000.0,
        "limit_pct": 99.0,
        "limit_pct_in_stalls": float("nan"),
    }
    assert "990 writes/s (99% of its limit, 1,000 writes/s), busy 8%" in device_lines([r])[0]
    assert (
        "of its limit"
        not in device_lines([{**r, "limit_write_iops": float("nan"), "limit_pct": float("nan")}])[0]
    )


def _commit_ctx(mount_options, running_ms):
    """A context of one journal whose transactions ran ``running_ms`` each, closed at 1 s
    steps, with handle waits over three of them and a commit wait over the first."""
    from types import SimpleNamespace

    n = len(running_ms)
    t0 = [int(1e9 * (k + 1)) for k in range(n)]
    txns = pd.DataFrame({
        "dev": ["7:0"] * n, "transaction": list(range(n)), "running_ms": running_ms,
        "blocks": [10] * n, "commit_locking_ns": t0, "end_commit_ns": [a + int(2e8) for a in t0],
    })
    st = stalls([
        {"latency_ms": 300.0, "transaction_wait_ms": 300.0, "ts_ns": t0[0],
         "end_ns": t0[0] + int(3e8)},
        {"latency_ms": 300.0, "transaction_wait_ms": 300.0, "ts_ns": t0[1],
         "end_ns": t0[1] + int(3e8)},
        {"latency_ms": 200.0, "transaction_wait_ms": 200.0, "ts_ns": t0[3],
         "end_ns": t0[3] + int(2e8)},
        {"latency_ms": 100.0, "commit_wait_ms": 100.0, "ts_ns": t0[0], "end_ns": t0[0] + int(1e8)},
    ])
    session = SimpleNamespace(journals=[{"dev": "7:0", "device": "/dev/loop0", "mountpoint": "/mnt",
                                         "mount_options": mount_options}], meta={})
    journals = pd.DataFrame([{"dev": "7:0", "kind": "ext4"}])
    ctx = recommend.Context(session, journals, st, None, None, txns, None, 1.0)
    ctx._memo("models", dict)
    ctx._memo(("regime", "7:0"), lambda: ("hot_set", {}))
    return ctx


def test_commit_interval_removes_the_waits_beside_the_commits_its_timer_closed():
    # transactions 0-2 ran the whole 5 s interval (timer), 3-5 were cut short (fsync)
    ctx = _commit_ctx("rw,relatime", [5000.0, 5000.0, 4950.0, 300.0, 20.0, 700.0])
    (r,) = recommend.commit_interval(ctx)
    inp = r.inputs
    assert (inp["closed_by_timer"], inp["closed_other"], inp["commit_s_advised"]) == (3, 3, 15)
    assert inp["transaction_wait_ms_beside_timer_commits"] == pytest.approx(600.0)
    assert inp["commit_wait_ms_beside_timer_commits"] == pytest.approx(100.0)
    assert r.stall_ms_addressed == pytest.approx(2 / 3 * 700.0)
    recommend.annotate(ctx, [r])
    assert (r.cost, r.command) == ("remount", "mount -o remount,commit=15 /mnt")
    # the low end: 2/3 of the lock waits' share beside timer commits (600 of 800 ms), every
    # handle wait alike; the high end adds 2/3 of the commit wait
    lo = 2 / 3 * 600 / 800 * 800.0
    assert r.stall_ms_removed_low == pytest.approx(lo)
    assert r.stall_ms_removed_high == pytest.approx(lo + 2 / 3 * 100.0)
    assert "commit=15" in r.text and "1/3 as many" in r.text


def test_commit_interval_says_nothing_where_no_timer_closed_a_commit():
    # commit=10: 5 s transactions were closed by something else
    ctx = _commit_ctx("rw,commit=10", [5000.0, 5000.0, 4950.0, 300.0, 20.0, 700.0])
    assert recommend.commit_interval(ctx) == []
    assert recommend.commit_seconds("rw,commit=10") == 10
    assert recommend.commit_seconds("rw,commit=0") == recommend.DEFAULT_COMMIT_S


def test_durable_time_shortens_at_most_by_the_removed_waits_on_the_critical_path():
    from jstall.metadata import PhaseRecord

    # two tasks in phase 1 (0-10 s), one in phase 2 (10-14 s)
    t = stalls([
        {"latency_ms": 900.0, "checkpoint_ms": 800.0, "tid": 1, "ts_ns": int(1e9)},
        {"latency_ms": 500.0, "checkpoint_ms": 500.0, "tid": 1, "ts_ns": int(2e9)},
        {"latency_ms": 700.0, "checkpoint_ms": 700.0, "tid": 2, "ts_ns": int(3e9)},
        {"latency_ms": 400.0, "commit_wait_ms": 400.0, "tid": 3, "ts_ns": int(11e9)},
        {"latency_ms": 300.0, "checkpoint_ms": 300.0, "tid": 3, "ts_ns": int(12e9)},
    ])
    ph = [PhaseRecord("a", start_ns=0, end_ns=int(10e9), durable_s=10.0),
          PhaseRecord("b", start_ns=int(10e9), end_ns=int(14e9), durable_s=4.0)]
    lo, hi = remedies.durable_interval(t, {"checkpoint": 1.0}, 10.0, ph)
    # phase a: task 1 loses 800 + 500 (the longer path), task 2 700; phase b: task 3 300
    assert (lo, hi) == pytest.approx((14.0 - 1.3 - 0.3, 14.0))
    assert remedies.durable_interval(t, {"checkpoint": 1.0}, 10.0, []) is None
    r = Recommendation("journal_size", "")
    assert "durable_s_low" not in r.to_dict()
    r.durable_s_low, r.durable_s_high = lo, hi
    assert r.to_dict()["durable_s_low"] == lo


def test_the_predicted_curve_falls_as_the_square_of_the_shortfall_and_its_text_is_its_values():
    from jstall.analyzer.advice import curve

    sizes = curve.sizes_for(4, 20)
    assert sizes == [4.0, 8.0, 16.0, 20.0]
    t = curve.size_curve(4, 1600.0, 8.0, 16.0, 2000.0, 1200.0, 1800.0, sizes)
    assert list(t.columns) == list(curve.COLUMNS)
    # at the session's size: what it measured; at 8 MiB the high curve (N = 16) keeps
    # (8/12)^2 of the waits, the low one (N = 8) none; from 16 MiB on none
    assert t["wait_ms_high"].tolist() == pytest.approx([1600.0, 1600.0 * (8 / 12) ** 2, 0.0, 0.0])
    assert t["wait_ms_low"].tolist() == pytest.approx([1600.0, 0.0, 0.0, 0.0])
    # the stall time left: the total less the remedy's interval times the share gone
    assert t["stall_ms_low"].tolist() == pytest.approx([2000.0, 200.0, 200.0, 200.0])
    assert t["stall_ms_high"].tolist() == pytest.approx(
        [2000.0, 2000.0 - 1200.0 * (1 - (8 / 12) ** 2), 800.0, 800.0])
    text = curve.curve_text(t.to_dict("records"))
    assert "8 MiB 0-711 ms (stall time 200-1,333 ms)" in text and "20 MiB 0 ms" in text
    # a lower bound no more than the journal: nothing predicted beyond it at the low end
    low = curve.size_curve(4, 1600.0, 3.0, 16.0, 2000.0, 1200.0, 1800.0, [8])["wait_ms_low"]
    assert low[0] == 0.0
    table = curve.curves([Recommendation("journal_size", "", dev="7:0",
                                         inputs={"curve": t.to_dict("records")})])
    assert len(table) == 4 and set(table["dev"]) == {"7:0"}


def test_waits_for_reserved_credits_are_a_journal_size_mechanism():
    """A handle asleep in add_transaction_credits' own wait_event (the journal's reserved
    credits at their bound, a quarter of the journal) counts towards what a larger journal
    removes; a wait for the transaction's lock or for log space does not, nor a wait of
    another device or outside a stall."""
    from types import SimpleNamespace

    from jstall.analyzer.advice.recommend import reserved_credit_share
    from jstall.analyzer.stalls.causes import innermost_function

    reserved = ["bpf_prog_40e186c019bd9040_btf_sched_switc", "bpf_trace_run4", "__schedule", "schedule",
                "add_transaction_credits", "start_this_handle"]
    locked = ["__schedule", "schedule", "wait_transaction_locked", "add_transaction_credits"]
    space = ["schedule", "io_schedule", "jbd2_log_do_checkpoint", "__jbd2_log_wait_for_space",
             "add_transaction_credits"]
    assert innermost_function(reserved) == "add_transaction_credits"
    assert innermost_function(["__schedule+0x2f1/0x8a0", "schedule+0x5d/0xe0",
                               "add_transaction_credits+0x1ca/0x2d0 [jbd2]"]) == "add_transaction_credits"
    assert innermost_function(locked) == "wait_transaction_locked"
    assert innermost_function(space) == "jbd2_log_do_checkpoint"
    assert innermost_function(["schedule"]) is None and innermost_function([]) is None
    stacks = pd.DataFrame({"stack_id": [1, 2, 3], "frames": [reserved, locked, space]})
    # three stalls: two on 7:1 (80 and 20 ms of transaction_wait), one on 7:2
    stalls = pd.DataFrame({"dev": ["7:1", "7:1", "7:2"], "tid": [10, 11, 12], "ts_ns": [100, 200, 300],
                           "transaction_wait_ms": [80.0, 20.0, 50.0]})
    offcpu = pd.DataFrame({"tid": [10, 11, 12, 10, 13], "call_ts_ns": [100, 200, 300, 100, 400],
                           "stack_id": [1, 2, 1, 1, 1], "runnable": [False, False, False, True, False],
                           "offcpu_ns": [80e6, 20e6, 50e6, 5e6, 30e6]})
    ctx = SimpleNamespace(stalls=stalls, session=SimpleNamespace(offcpu=offcpu, stacks=stacks))
    # 80 of 7:1's 100 ms: the runnable interval, 7:2's stall and the interval outside any call left out
    assert reserved_credit_share(ctx, "7:1") == pytest.approx(0.8)
    assert reserved_credit_share(ctx, "7:2") == pytest.approx(1.0)
    assert reserved_credit_share(ctx, "8:0") == 0.0


def test_an_inode_size_where_the_journal_holds_the_hot_set_already_only_slows_its_fill():
    # maildir: the 4 MiB journal held the hot set, its forced checkpoints came from commits
    # wrapping the log; 256-byte inodes (a quarter fewer blocks logged) removed none of them
    # in three runs: none for sure, at most the slower fill's share
    r = Recommendation("inode_size", "", dev="7:0", estimate=True, stall_ms_addressed=260.0,
                       inputs={"verdict": "held_already", "logged_share_saved": 0.26})
    fig = {"checkpoint_device_share": 0.04, "device_util": 0.99, "saved_home_share": 1.0}
    lo, hi, cost, _ = recommend._checkpoint_effects(None, r, "device_bound", fig, 1000.0, "/dev/loop0", "/mnt")
    assert lo["checkpoint"] == 0.0 and hi["checkpoint"] == pytest.approx(0.26) and cost == "new_filesystem"
    assert lo["commit_wait"] == 0.0 and hi["commit_wait"] == pytest.approx(0.04 * 0.26)
    # where it does not hold it, a fit is all of them at the high end
    r.inputs = {"verdict": "suffices", "logged_share_saved": 0.26}
    r.stall_ms_addressed = 1000.0
    lo, hi, _, _ = recommend._checkpoint_effects(None, r, "hot_set", fig, 1000.0, "/dev/loop0", "/mnt")
    assert lo["checkpoint"] == pytest.approx(0.8) and hi["checkpoint"] == 1.0
