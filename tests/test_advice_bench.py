"""The judging arithmetic of benchmarks/advice_accuracy.py (benchmarks/advice_judge.py) on
hand-built results: medians, the interleaved order, the interval check, the targets' tallies,
reading a results file a killed run left, and the advice read from analyze's JSON (the new
stall-time fields, and the fallback to what the advice prints today)."""

import json
import os
import sys

import pytest

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
)

import advice_judge as judge
import clients

CASE = {"workload": "maildir", "scale": "2,000 messages", "iops": 1000}


def adv(kind, low, high, rank, regime=None, mib=None, source="model"):
    return {
        "kind": kind,
        "rank": rank,
        "low_ms": low,
        "high_ms": high,
        "regime": regime,
        "journal_size_mib": mib,
        "source": source,
        "total_ms": None,
        "mechanism_ms": None,
        "cost": None,
        "command": None,
    }


def rec(config, run, stall, durable=10.0, kind=None, advice=None, verdict=None, case=CASE):
    r = {
        **case,
        "config": config,
        "run": run,
        "kind": kind,
        "stall_ms": stall,
        "durable_s": durable,
    }
    if config == "baseline":
        r["advice"], r["verdict"] = advice or [], verdict
    return r


def test_schedule_interleaves_round_after_round():
    assert judge.schedule(["B", "R1", "R2"]) == [
        ("B", 1),
        ("R1", 1),
        ("R2", 1),
        ("B", 2),
        ("R1", 2),
        ("R2", 2),
        ("B", 3),
        ("R1", 3),
        ("R2", 3),
    ]
    assert judge.schedule(["B"], runs=2) == [("B", 1), ("B", 2)]


def test_median_leaves_out_missing_runs():
    assert judge.median([3.0, 1.0, 2.0]) == 2.0
    assert judge.median([4.0, None, 1.0]) == 2.5
    assert judge.median([None]) is None and judge.median([]) is None


@pytest.mark.parametrize(
    "low,high,ok",
    [
        (1000.0, 2000.0, True),  # 2x exactly
        (1000.0, 2100.0, False),  # over 2x, and not under 2 s
        (0.0, 1900.0, True),  # under 2 s: within +- 1 s
        (0.0, 2500.0, False),
        (5000.0, 10000.0, True),
        (5000.0, 10001.0, False),
        (None, 10.0, False),
    ],
)
def test_narrow_is_2x_or_plus_minus_1s_under_2s(low, high, ok):
    assert judge.narrow(low, high) is ok


def test_inside_holds_both_ends():
    assert judge.inside(5.0, 5.0, 9.0) and judge.inside(9.0, 5.0, 9.0)
    # to the whole ms printed: a hair past an end (the JSON's rounding) is inside, 1 ms is not
    assert judge.inside(9.001, 5.0, 9.0) and judge.inside(4.6, 5.0, 9.0)
    assert not judge.inside(4.0, 5.0, 9.0) and not judge.inside(10.0, 5.0, 9.0)
    assert not judge.inside(None, 5.0, 9.0)


def test_advice_of_reads_the_new_fields_and_falls_back_to_what_is_printed():
    doc = {
        "recommendations": [
            {"kind": "lost_events", "stall_ms_addressed": 0.0},
            {
                "kind": "external_journal",
                "stall_ms_addressed": 800.0,
                "stall_ms_removed_low": 900.0,
                "stall_ms_removed_high": 1500.0,
                "stall_ms_total": 3000.0,
                "mechanism_ms_removed": 700.0,
                "regime": "device_bound",
                "cost": "new_filesystem",
                "command": "mke2fs -O journal_dev ...",
            },
            {
                "kind": "journal_size",
                "stall_ms_addressed": 400.0,
                "journal_size_mib": 66.0,
                "inputs": {"regime": "hot set"},
            },
            {
                "kind": "external_journal",
                "stall_ms_addressed": 300.0,
                "inputs": {"removed_low_ms": 300.0, "removed_high_ms": 700.0},
            },
        ]
    }
    a = judge.advice_of(doc)
    assert [(x["kind"], x["rank"], x["source"]) for x in a] == [
        ("external_journal", 1, "model"),
        ("journal_size", 2, "fallback"),
        ("external_journal", 3, "fallback"),
    ]
    assert (a[0]["low_ms"], a[0]["high_ms"], a[0]["total_ms"], a[0]["cost"]) == (
        900.0,
        1500.0,
        3000.0,
        "new_filesystem",
    )
    assert (a[1]["low_ms"], a[1]["high_ms"], a[1]["regime"], a[1]["journal_size_mib"]) == (
        400.0,
        400.0,
        "hot_set",
        66.0,
    )
    assert (a[2]["low_ms"], a[2]["high_ms"]) == (300.0, 700.0)


def _case(base, remedies, advice, verdict=None, case=CASE):
    """Records of one case: base = [stall by run], remedies = {config: (kind, [stall by run])}."""
    out = [
        rec("baseline", i + 1, s, advice=advice, verdict=verdict, case=case)
        for i, s in enumerate(base)
    ]
    for config, (kind, stalls) in remedies.items():
        out += [rec(config, i + 1, s, kind=kind, case=case) for i, s in enumerate(stalls)]
    return out


def test_pairs_use_medians_of_stall_time_and_of_intervals():
    advice = [
        adv("journal_size", 7000.0, 9000.0, 1, mib=66.0),
        adv("inode_size", 1000.0, 1000.0, 2),
    ]
    rs = _case(
        [10000.0, 12000.0, 30000.0],
        {
            "journal 66M": ("journal_size", [3000.0, 2500.0, 4000.0]),
            "256-byte inodes": ("inode_size", [11000.0, 9000.0, 12500.0]),
        },
        advice,
    )
    ps = {p["config"]: p for p in judge.pairs(judge.cases(rs))}
    j = ps["journal 66M"]
    assert (j["baseline_stall_ms"], j["stall_ms"], j["removed_ms"]) == (12000.0, 3000.0, 9000.0)
    assert j["inside"] and j["narrow"] and j["rank"] == 1 and j["removed_share"] == 0.75
    i = ps["256-byte inodes"]
    assert i["removed_ms"] == 1000.0 and i["inside"] and i["narrow"]
    assert judge.calibration(list(ps.values())) == (2, 2, 2, 2)


def test_the_tenant_remedy_is_judged_on_the_stall_time_of_the_processes_it_leaves():
    # the storm moves to a filesystem of its own, with its stalls: the baseline's stall time
    # without the storm's (each run's own) against the remedy's, which records only the rest
    moved = {**adv("own_filesystem", 500.0, 700.0, 1), "moved": "storm"}
    rs = _case([1200.0, 1100.0, 1300.0], {"storm on its own filesystem": ("own_filesystem", [10.0, 0.0, 30.0])},
               [moved])
    for r, storm in zip(rs[:3], (500.0, 550.0, 600.0)):
        r["stall_ms_by_comm"] = {"storm": storm, "latency": r["stall_ms"] - storm}
    (p,) = judge.pairs(judge.cases(rs))
    assert p["baseline_runs_ms"] == [550.0, 700.0, 700.0]
    assert (p["baseline_stall_ms"], p["stall_ms"], p["removed_ms"]) == (700.0, 10.0, 690.0)
    assert p["inside"] and p["narrow"]
    # the advice read from analyze's JSON names the process it moves
    doc = {"recommendations": [{"kind": "own_filesystem", "stall_ms_removed_low": 1.0, "stall_ms_removed_high": 2.0,
                                "inputs": {"comm": "storm"}}]}
    assert judge.advice_of(doc)[0]["moved"] == "storm"


def test_calibration_counts_a_wide_interval_as_a_miss_though_inside():
    advice = [adv("external_journal", 1000.0, 9000.0, 1)]
    rs = _case([10000.0] * 3, {"external journal": ("external_journal", [5000.0] * 3)}, advice)
    (p,) = judge.pairs(judge.cases(rs))
    assert p["inside"] and not p["narrow"]
    assert judge.calibration([p]) == (0, 1, 1, 0)
    assert "(wider than 2x)" in judge.table([p])


def test_pairs_whose_runs_spread_wider_than_their_interval_are_counted_apart():
    # an interval 200 ms wide, runs that move 1,000 ms (500 + 500): not resolved, a miss apart
    advice = [adv("external_journal", 400.0, 600.0, 1), adv("journal_size", 4000.0, 6000.0, 2, mib=66.0)]
    rs = _case([10000.0, 9000.0, 10000.0], {"external journal": ("external_journal", [9000.0, 10000.0, 9500.0]),
                                             "journal 66M": ("journal_size", [3000.0, 3200.0, 2900.0])}, advice)
    ps = {p["config"]: p for p in judge.pairs(judge.cases(rs))}
    e, j = ps["external journal"], ps["journal 66M"]
    assert e["spread_ms"] == 1000.0 and not judge.resolved(e) and e["removed_ms"] == 500.0 and e["inside"]
    assert j["spread_ms"] == 650.0 and judge.resolved(j) and not j["inside"]  # 7,000 removed: over the high end
    assert judge.calibration_resolved(list(ps.values())) == (0, 1)
    assert "(runs spread 1,000)" in judge.table([e]) and "runs spread" not in judge.table([j])
    line = judge.targets(judge.cases(rs))[0][0]
    assert "over the 1 pairs whose runs spread less than their interval is wide, 0 (0 %); the other 1" in line
    assert judge.spread([1.0], [2.0, 3.0]) is None


def test_headline_target_most_and_none():
    other = {**CASE, "workload": "sqlite rollback"}
    # case 1: the second-ranked remedy removes 95 %, the headline only 40 %: a miss
    a1 = [adv("journal_size", 1.0, 2.0, 1, mib=8.0), adv("external_journal", 1.0, 2.0, 2)]
    rs = _case(
        [10000.0] * 3,
        {
            "journal 8M": ("journal_size", [6000.0] * 3),
            "external journal": ("external_journal", [500.0] * 3),
        },
        a1,
    )
    # case 2: nothing removes 90 %, and the verdict says so
    rs += _case(
        [10000.0] * 3,
        {"fast_commit": ("fast_commit", [7000.0] * 3)},
        [adv("fast_commit", 1.0, 2.0, 1)],
        verdict={
            "text": "No filesystem option removes most of it: commit waits on a device at its limit"
        },
        case=other,
    )
    cs = judge.cases(rs)
    h = {x[0][0]: x for x in judge.headline(cs, judge.pairs(cs))}
    assert h["maildir"][1:4] == ("most", False, "journal_size")
    assert h["sqlite rollback"][1:3] == ("none", True)
    # the verdict naming the remedy decides the headline over the rank
    rs[0]["verdict"] = {"remedy": "external_journal"}
    cs = judge.cases(rs)
    assert {x[0][0]: x for x in judge.headline(cs, judge.pairs(cs))}["maildir"][1:4] == (
        "most",
        True,
        "external_journal",
    )
    (_, met) = judge.targets(cs)[1]
    assert met is True


def test_headline_none_without_a_verdict_is_a_miss():
    rs = _case(
        [10000.0] * 3,
        {"fast_commit": ("fast_commit", [7000.0] * 3)},
        [adv("fast_commit", 1.0, 2.0, 1)],
    )
    cs = judge.cases(rs)
    assert judge.headline(cs, judge.pairs(cs))[0][1:3] == ("none", False)
    assert not judge.says_none_removes_most(None)
    assert judge.says_none_removes_most({"filesystem_removes_most": False})


def test_journal_size_target_on_hot_set_cases_with_three_tunes():
    hot = [adv("journal_size", 1.0, 2.0, 1, regime="hot_set", mib=40.0)]
    rs = _case([1000.0], {}, hot)
    rs += [
        {**CASE, "config": "tune", "run": n, "threshold_mib": t}
        for n, t in ((1, 12.0), (2, 25.0), (3, 90.0))
    ]
    stream = {**CASE, "workload": "dbench"}
    rs += _case(
        [1000.0], {}, [adv("journal_size", 1.0, 2.0, 1, regime="streaming", mib=400.0)], case=stream
    )
    rs += [{**stream, "config": "tune", "run": n, "threshold_mib": 10.0} for n in (1, 2, 3)]
    (row,) = judge.journal_sizes(judge.cases(rs))  # the streaming case is not judged here
    assert row[1:] == (40.0, 25.0, True)
    rs[0]["advice"] = [adv("journal_size", 1.0, 2.0, 1, regime="hot_set", mib=51.0)]
    assert judge.journal_sizes(judge.cases(rs))[0][1:] == (51.0, 25.0, False)
    # two tunes only: not judged
    two = [
        r
        for r in rs
        if not (r["workload"] == "maildir" and r["config"] == "tune" and r["run"] == 3)
    ]
    assert [x[0][0] for x in judge.journal_sizes(judge.cases(two))] == []


def test_the_curve_is_judged_at_every_size_the_tunes_ran():
    # 1,000 ms of checkpoint waits at 4 MiB, none needed from 20 MiB (both bounds), 1,200 ms of
    # stall time of which the journal removes 800-1,200: at 12 MiB the waits are a quarter,
    # (20 - 12)^2 / (20 - 4)^2, and the stall time left 1,200 - 0.75 x (800-1,200) = 300-600
    js = {**adv("journal_size", 800.0, 1200.0, 1, regime="hot_set", mib=20.0), "total_ms": 1200.0,
          "curve": {"current_mib": 4.0, "wait_ms": 1000.0, "low_mib": 20.0, "high_mib": 20.0}}
    rs = _case([1200.0], {}, [js])
    rs += [{**CASE, "config": "tune", "run": 1, "threshold_mib": 20.0,
            "points": [{"journal_mib": 4, "stall_ms": 1300.0}, {"journal_mib": 12, "stall_ms": 1400.0},
                       {"journal_mib": 20, "stall_ms": 30.0}]},
           {**CASE, "config": "tune", "run": 2, "threshold_mib": 20.0,
            "points": [{"journal_mib": 12, "stall_ms": 140.0}]}]
    got = judge.curve_points(judge.cases(rs))
    assert [(x[1], x[2], x[5]) for x in got] == [(4.0, 1300.0, True), (12.0, 1400.0, False), (20.0, 30.0, True),
                                                  (12.0, 140.0, True)]
    assert got[1][3:5] == pytest.approx((300.0, 600.0))
    (line, met) = judge.targets(judge.cases(rs))[4]
    assert line.startswith("5.") and "3 of 4 points, 1 workloads (75 %" in line and met is False
    assert "| 12 | 300-600 | 1,400 | no |" in judge.curve_table(got)
    # a remedy without a curve, or no tune's points: nothing judged
    rs[0]["advice"] = [adv("journal_size", 800.0, 1200.0, 1, mib=20.0)]
    assert judge.curve_points(judge.cases(rs)) == [] and judge.targets(judge.cases(rs))[4][1] is None


def test_stability_compares_kinds_and_ranks_of_three_baseline_runs():
    a = [adv("journal_size", 1.0, 2.0, 1), adv("inode_size", 1.0, 2.0, 2)]
    b = [adv("inode_size", 5.0, 9.0, 1), adv("journal_size", 1.0, 2.0, 2)]
    same = _case([1.0, 2.0, 3.0], {}, a)
    assert judge.stability(judge.cases(same))[0][1] is True
    flipped = same[:2] + [rec("baseline", 3, 3.0, advice=b)]
    assert judge.stability(judge.cases(flipped))[0][1] is False
    assert judge.stability(judge.cases(same[:2])) == []  # two runs: not judged yet
    # a per-cause finding moving between them changes no remedy's rank
    noted = [
        adv("journal_size", 1.0, 2.0, 1),
        adv("cpu", 1.0, 1.0, 2),
        adv("inode_size", 1.0, 2.0, 3),
    ]
    moved = same[:2] + [rec("baseline", 3, 3.0, advice=noted)]
    assert judge.stability(judge.cases(moved))[0][1] is True
    # the same ranks, but the verdict leads with another remedy in one run
    for r, v in zip(
        moved, ({"remedy": "journal_size"}, {"remedy": "journal_size"}, {"remedy": "inode_size"})
    ):
        r["verdict"] = v
    assert judge.stability(judge.cases(moved))[0][1] is False
    # a new kind that states its cost is a remedy
    online = [*a, {**adv("dirty_expire", 1.0, 2.0, 3), "cost": "online"}]
    assert judge.signature(online) == ("journal_size", "inode_size", "dirty_expire")


def test_results_file_survives_a_killed_write_and_resumes(tmp_path):
    path = str(tmp_path / "results.jsonl")
    assert judge.read_results(path) == ([], 0)
    judge.append_result(path, rec("baseline", 1, 100.0))
    judge.append_result(path, rec("journal 8M", 1, 50.0, kind="journal_size"))
    with open(path, "a") as f:
        f.write('{"workload": "maildir", "scale": "2,000 mess')  # killed mid-line
    records, bad = judge.read_results(path)
    assert bad == 1 and sorted(judge.key(r) for r in records) == [
        ("maildir", "2,000 messages", 1000, "baseline", 1),
        ("maildir", "2,000 messages", 1000, "journal 8M", 1),
    ]
    # a run again of the same key replaces the first record (the last one wins)
    with open(path, "a") as f:
        f.write("\n")
    judge.append_result(path, rec("baseline", 1, 120.0))
    records, bad = judge.read_results(path)
    assert bad == 1 and len(records) == 2
    assert next(r for r in records if r["config"] == "baseline")["stall_ms"] == 120.0
    with open(path) as f:
        assert json.loads(f.readline())["stall_ms"] == 100.0


def test_targets_met_and_not_met():
    advice = [adv("journal_size", 8000.0, 9500.0, 1, mib=66.0)]
    rs = _case(
        [10000.0, 10000.0, 10000.0],
        {"journal 66M": ("journal_size", [500.0, 900.0, 700.0])},
        advice,
    )
    t = judge.targets(judge.cases(rs))
    assert [m for _, m in t] == [True, True, None, True, None]
    assert t[0][0].startswith("1. calibration: 1 of 1")
    # measured 9,300 removed; an interval of 5,000-6,000 misses it
    for r in rs[:3]:
        r["advice"] = [adv("journal_size", 5000.0, 6000.0, 1, mib=66.0)]
    assert judge.targets(judge.cases(rs))[0][1] is False


def test_the_interval_judged_is_the_median_of_the_baseline_runs_intervals():
    # each run's interval is a part of its own stall time: the measured removal (of the
    # median run's) is judged against the median of the three intervals, not the first's
    rs = _case([10000.0, 12000.0, 11000.0], {"journal 66M": ("journal_size", [500.0, 900.0, 700.0])}, [])
    for r, (lo, hi) in zip(rs[:3], ((7000.0, 9000.0), (9000.0, 11500.0), (8500.0, 10500.0))):
        r["advice"] = [adv("journal_size", lo, hi, 1, mib=66.0)]
    (p,) = judge.pairs(judge.cases(rs))
    assert (p["low_ms"], p["high_ms"], p["removed_ms"]) == (8500.0, 10500.0, 10300.0)
    assert p["inside"] and p["rank"] == 1
    # with each run's own stall time known: the medians of the shares of it, times the median
    # stall time. Every run predicted all of its own (the middle run's interval is under its
    # total): the medians of the highs (11,000) would miss the 11,000 - 0 measured in the
    # median run; the shares' (1.0) hold it
    rs = _case([10000.0, 12000.0, 11000.0], {"journal 66M": ("journal_size", [0.0, 0.0, 0.0])}, [])
    for r, (lo, hi) in zip(rs[:3], ((8000.0, 10000.0), (6000.0, 12000.0), (8800.0, 11000.0))):
        r["advice"] = [{**adv("journal_size", lo, hi, 1, mib=66.0), "total_ms": r["stall_ms"]}]
    (p,) = judge.pairs(judge.cases(rs))
    assert (p["low_ms"], p["high_ms"], p["removed_ms"]) == (8800.0, 11000.0, 11000.0) and p["inside"]


def test_clients_refuse_bad_arguments(capsys):
    assert clients.main(["sqlite"]) == 2
    assert clients.main(["tenants", "10"]) == 2
    assert clients.main(["mbox", "10"]) == 2
    assert "usage:" in capsys.readouterr().err


def test_sqlite_client_commits_through_a_rollback_journal(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert clients.main(["sqlite", "5"]) == 0
    import sqlite3

    db = sqlite3.connect(str(tmp_path / "db"))
    assert db.execute("SELECT count(*) FROM t").fetchone() == (5,)
    assert db.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    assert not (tmp_path / "db-journal").exists()


def test_maildir_client_delivers_every_message_through_tmp_new_cur(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert clients.main(["maildir", "10"]) == 0
    cur = sorted(os.listdir(tmp_path / "cur"))
    assert len(cur) == 10 and all(n.endswith(":2,S") for n in cur)
    assert os.listdir(tmp_path / "tmp") == [] and os.listdir(tmp_path / "new") == []
    assert os.getxattr(tmp_path / "cur" / cur[0], "user.flags") == b"filtered,spam-score=0.0"
    # 4 writers shared them: each writer's number is in its messages' names
    assert {n.split("Q")[1].split(".")[0] for n in cur} == {"0", "1", "2", "3"}


def test_fileserver_client_stores_dos_attributes_and_an_nt_acl_on_every_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert clients.main(["fileserver", "120"]) == 0
    files = sorted(str(p) for p in (tmp_path / "share").rglob("*.dat"))
    assert len(files) == 120
    # 2 clients, 50 files to a directory: 60 each, 2 directories each
    assert sorted(os.listdir(tmp_path / "share")) == ["c0d0000", "c0d0001", "c1d0000", "c1d0001"]
    dos = {os.getxattr(f, "user.DOSATTRIB") for f in files}
    assert len(dos) == 120 and all(len(v) == 60 for v in dos)
    assert {os.getxattr(f, "security.NTACL") for f in files} == {bytes(range(192))}
    assert all(4096 <= os.path.getsize(f) < 16384 for f in files)


def test_tenants_clients_storm_and_latency(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    comm = open("/proc/self/comm").read()
    assert clients.main(["storm", "20", "40"]) == 0
    files = sorted(os.listdir(tmp_path / "storm"))
    assert len(files) == 20
    # 40 updates over 20 files: each got user.a, then user.b, with the update's number
    assert os.getxattr(tmp_path / "storm" / files[0], "user.b") == f"{20:032d}".encode()
    names, rounds = [], iter(range(3))

    def running():   # three rounds, noting the process's name in each
        names.append(open("/proc/self/comm").read().strip())
        return next(rounds, None) is not None

    clients.latency(running, period_s=0.001)
    assert os.path.getsize(tmp_path / "latency.dat") == 3 * 4096 and set(names) == {"latency"}
    # each named itself while it ran (as ps and jstall show it), then took its own name back
    assert open("/proc/self/comm").read() == comm


def test_a_case_cut_short_is_shown_but_not_judged():
    """A run stopped half-way (resumed later): the pairs without all three runs of the
    baseline and the remedy count in no target, and the table says so."""
    advice = [adv("journal_size", 8000.0, 9500.0, 1, mib=66.0)]
    rs = _case([10000.0, 10000.0], {"journal 66M": ("journal_size", [500.0, 900.0])}, advice)
    cs = judge.cases(rs)
    (p,) = judge.pairs(cs)
    assert p["inside"] and not p["complete"] and p["runs"] == (2, 2)
    assert judge.calibration([p]) == (0, 0, 0, 0)
    assert judge.headline(cs, [p]) == [] and judge.stability(cs) == []
    assert "(2 of 3 runs: not judged)" in judge.table([p])
    assert [m for _, m in judge.targets(cs)] == [None, None, None, None, None]


def test_each_remedy_is_the_change_the_advice_names_where_the_lab_can_apply_it():
    import advice_accuracy

    fs = advice_accuracy.fs_config(advice_accuracy.EXT4, 1000)
    # the inode size the command gives, not a fixed one
    big = {"kind": "inode_size", "command": "mkfs.ext4 -I 512 NEWDEV, then copy the files"}
    assert advice_accuracy.remedy(big, fs) == ("512-byte inodes", {"inode_size": 512})
    assert advice_accuracy.remedy({"kind": "inode_size", "command": None}, fs) == ("256-byte inodes",
                                                                                  {"inode_size": 256})
    # a process moved to a filesystem of its own: the tenants pattern only
    moved = {"kind": "own_filesystem", "moved": "storm"}
    assert advice_accuracy.remedy(moved, fs, "tenants")[1] == {advice_accuracy.OWN_FS: "storm"}
    label, why = advice_accuracy.remedy(moved, fs, "xattr")
    assert label is None and "tenants pattern only" in why


def test_a_run_that_did_other_work_is_left_out_and_a_moved_one_is_not_compared():
    # fs_mark -t 2 once left half its files (its threads' names collided) and stalled 0 ms
    def did(r, files, moved=False):
        return {**r, "work": [files, 0, 0], "moved_work": moved}

    records = [
        did(rec("baseline", 1, 6470.0), 40001),
        did(rec("baseline", 2, 0.0), 20001),
        did(rec("baseline", 3, 6670.0), 40001),
        did(rec("ext", 1, 5690.0, kind="external_journal"), 40001),
        did(rec("ext", 2, 6091.0, kind="external_journal"), 40001),
        did(rec("ext", 3, 5987.0, kind="external_journal"), 40001),
        did(rec("own", 1, 100.0, kind="own_filesystem"), 1, moved=True),
        {**rec("tune", 1, None), "threshold_mib": 9.0},
    ]
    assert judge.work_of({"files": 40001, "dirs": 0, "attrs": 0, "bytes": 633}) == (40001, 0, 0)
    assert judge.work_of(None) is None
    assert judge.usual_work(records, judge.case_of(records[0])) == (40001, 0, 0)
    assert [(r["config"], r["run"]) for r in judge.other_work(records)] == [("baseline", 2)]
    c = judge.cases(records)[judge.case_of(records[0])]
    assert c["baseline"]["stall_ms"] == {1: 6470.0, 3: 6670.0}
    assert c["remedies"]["own"]["stall_ms"] == {1: 100.0}
    assert c["thresholds"] == {1: 9.0}
    (p,) = [p for p in judge.pairs({judge.case_of(records[0]): c}) if p["config"] == "ext"]
    assert p["removed_ms"] == 6570.0 - 5987.0
    # records kept before the work was recorded are all compared as they were
    old = [{k: v for k, v in r.items() if k not in ("work", "moved_work")} for r in records]
    assert judge.other_work(old) == []


def test_a_client_that_runs_for_a_fixed_time_is_judged_at_the_baselines_number_of_calls():
    # dbench -t 10 with its waits shrunk did 57 % more calls, each with its share of stall time
    case = {"workload": "dbench", "scale": "4 clients, 10 s", "iops": 500}

    def run(config, n, stall, calls, per_call=True, kind=None):
        return {**rec(config, n, stall, kind=kind, case=case), "calls": calls, "per_call": per_call}

    records = [run("baseline", n, 41000.0 + 100 * n, 100_000 + 1000 * n) for n in (1, 2, 3)]
    records += [run("ext", n, 38400.0, 157_000, kind="external_journal") for n in (1, 2, 3)]
    records[0]["advice"] = [adv("external_journal", 12000.0, 20000.0, 1)]
    (p,) = judge.pairs(judge.cases(records))
    assert p["at_calls"] == 102_000
    assert p["baseline_stall_ms"] == pytest.approx(41200.0)
    assert p["stall_ms"] == pytest.approx(38400.0 * 102_000 / 157_000)
    assert p["removed_ms"] == pytest.approx(41200.0 - 38400.0 * 102_000 / 157_000)
    assert "at 102,000 calls" in judge.table([p])
    # a client that does fixed work is judged as it ran, whatever its calls
    fixed = [{**r, "per_call": False} for r in records]
    (q,) = judge.pairs(judge.cases(fixed))
    assert q["removed_ms"] == pytest.approx(41200.0 - 38400.0) and q["at_calls"] is None
    # a run whose calls are unknown (kept before they were recorded): judged as it ran
    old = [{k: v for k, v in r.items() if k != "calls"} for r in records]
    (o,) = judge.pairs(judge.cases(old))
    assert o["removed_ms"] == pytest.approx(41200.0 - 38400.0)


def test_readvise_fills_the_work_and_calls_of_runs_kept_before_they_were_recorded(tmp_path):
    import advice_accuracy
    from synthetic import metadata, rows, write_session

    case = {"workload": "dbench", "scale": "4 clients, 10 s", "iops": 500}
    top = tmp_path / "round"
    slug = advice_accuracy._slug(case["workload"], case["scale"], case["iops"])
    census = {"files": 7, "dirs": 45, "attrs": 0, "bytes": 1, "attr_bytes": 0, "before_phase": None}
    totals = [{"syscall": s, "dev": "7:0", "count": n, "errors": 0, "total_latency_ns": 1000, "max_latency_ns": 10}
              for s, n in (("openat", 1200), ("fsync", 300), ("journal_start", 5))]
    write_session(str(top / "runs" / f"{slug}-external-journal-1"), {"call_totals": rows(totals)},
                  metadata(lab={"census": census}))
    old = {**rec("external journal", 1, 38400.0, kind="external_journal", case=case), "change": {}}
    kept_elsewhere = {**rec("external journal", 2, 38000.0, kind="external_journal", case=case), "change": {}}
    judge.append_result(str(top / "results.jsonl"), old)
    judge.append_result(str(top / "results.jsonl"), kept_elsewhere)
    assert advice_accuracy.readvise(str(top)) == 1
    records, _ = judge.read_results(str(top / "results.jsonl"))
    got = {r["run"]: r for r in records}
    assert got[1]["work"] == [7, 45, 0] and got[1]["calls"] == 1500 and got[1]["per_call"] is True
    assert got[1]["moved_work"] is False and got[1]["stall_ms"] == 38400.0   # as measured
    assert "work" not in got[2]   # no kept session: the record stays
