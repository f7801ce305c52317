"""`jstall fleet`: many sessions summarized on a real dask.distributed cluster, each by the
analyzer's own functions; a broken session is reported, never fatal."""

import datetime as dt
import json
import os
import shutil

import pytest

from jstall.analyzer.analysis import analyze
from jstall.analyzer.multi.fleet import Fleet, find_sessions, run_fleet, summarize
from synthetic import generate_fleet
from jstall.cli import main
from jstall.errors import JstallError
from jstall.session import collected_partitions, collected_path

from test_compare import I128, I256, SWEEP, lab_pair  # noqa: F401  (lab_pair: a fixture)


def analyze_json(path, capsys):
    """`jstall analyze PATH --json`, parsed."""
    assert main(["analyze", path, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def broken_sessions(root):
    """A session with a missing table and one with unreadable metadata, under ``root``."""
    a = os.path.join(root, "host=broken/date=2026-11-02/missing-table")
    shutil.copytree(I128, a)
    os.remove(os.path.join(a, "offcpu.parquet"))
    b = os.path.join(root, "host=broken/date=2026-11-02/bad-metadata")
    os.makedirs(b)
    with open(os.path.join(b, "metadata.json"), "w") as f:
        f.write("{not json")
    return a, b


@pytest.fixture(scope="module")
def cluster():
    """A real LocalCluster of 2 worker processes, shared by the tests of this module."""
    from distributed import Client

    from jstall.analyzer.multi.fleet import local_cluster

    c = local_cluster(2)
    client = Client(c)
    assert len(client.scheduler_info()["workers"]) == 2
    yield c
    client.close()
    c.close()


def check_rows_match_analyze(fleet, sessions, capsys):
    """Each session's row(s) carry exactly the figures `jstall analyze --json` prints."""
    from jstall.analyzer.stalls.causes import CAUSES

    rows = fleet.rows
    for path in sessions:
        d = analyze_json(path, capsys)
        mine = rows[rows["session"] == os.path.abspath(path)]
        assert len(mine) == max(len(d["journals"]), 1), path
        r = mine.iloc[0]
        st = d["stalls"]
        assert (r["session_stalls"], r["session_stall_ms"], r["max_stall_ms"]) == \
            (st["count"], st["total_ms"], st["max_ms"])
        for c in CAUSES:
            assert r[f"session_{c}_ms"] == st["by_cause"][c]["total_ms"]
        assert r["calls"] == sum(c["count"] for c in d["calls"].values())
        for name, c in d["calls"].items():
            assert r[f"{name}_p99_ms"] == c["p99_ms"]
        assert r["host"] == d["session"]["host"] and r["kernel"] == d["session"]["kernel_release"]
        assert r["duration_s"] == d["session"]["duration_s"]
        for j in d["journals"]:
            jr = mine[mine["dev"] == j["dev"]].iloc[0]
            assert (jr["stalls"], jr["stall_ms"], jr["forced_checkpoints"]) == \
                (j["stalls"], j["stall_ms"], j["forced_checkpoints"])
            assert jr["journal_mib"] == j["journal_mib"] and jr["inode_size"] == j["inode_size"]
            want = j.get("headroom_low_blocks", j["min_free_blocks"] - 32 - j["max_transaction_blocks"])
            assert jr["headroom_low_blocks"] == want
        if d["recommendations"]:
            first = next(x for x in d["recommendations"] if x["kind"] != "lost_events")
            assert r["top_recommendation"] == first["kind"]
            if first.get("journal_size_mib"):
                assert f"{first['journal_size_mib']:g} MiB journal" in r["top_recommendation_summary"]
            ms = first.get("stall_ms_addressed")
            if ms:
                said = f"{ms / 1000:.1f} s" if ms >= 1000 else f"{ms:.0f} ms"
                assert f"{said} of stalls" in r["top_recommendation_summary"]


def test_fleet_of_synthetic_and_recorded_sessions_on_two_workers(tmp_path, cluster, capsys):
    root = str(tmp_path / "collection")
    generated = generate_fleet(root, sessions=12, hosts=5, seed=3)
    missing, bad = broken_sessions(root)
    shutil.copytree(I128, collected_path(root, "lab-vm", dt.date(2026, 11, 23), "xattr-i128"))
    shutil.copytree(I256, collected_path(root, "lab-vm", dt.date(2026, 11, 23), "xattr-i256"))
    fleet = run_fleet([root, SWEEP], scheduler=cluster.scheduler_address)
    assert len(fleet.summaries) == 12 + 2 + 2 + 8
    # broken sessions are listed with their error, the others all analyzed
    errors = dict(zip(fleet.errors["session"], fleet.errors["error"]))
    assert set(errors) == {os.path.abspath(missing), os.path.abspath(bad)}
    assert "missing tables offcpu" in errors[os.path.abspath(missing)]
    assert "unreadable metadata" in errors[os.path.abspath(bad)]
    assert len(fleet.ok) == 12 + 2 + 8
    check_rows_match_analyze(fleet, generated[:6] + [os.path.join(SWEEP, sorted(os.listdir(SWEEP))[0])], capsys)
    # rankings: sums of the rows, worst first
    hosts = fleet.hosts()
    assert hosts["stall_ms"].is_monotonic_decreasing
    assert hosts["stall_ms"].sum() == pytest.approx(fleet.rows["stall_ms"].sum())
    per_host = fleet.rows.groupby("host")["stall_ms"].sum().sort_values(ascending=False)
    assert hosts.iloc[0]["host"] == per_host.index[0]
    assert set(hosts["host"]) == {f"host-{k:03d}" for k in range(5)} | {"vm"}
    fs = fleet.filesystems()
    assert fs["stall_ms"].is_monotonic_decreasing and fs["stall_ms"].sum() == pytest.approx(hosts["stall_ms"].sum())
    # the fleet-wide histograms are the sum of every analyzed session's call_histograms
    from jstall.analyzer.session.load import read_table

    want = {}
    for s in fleet.ok:
        h = read_table(s["path"], "call_histograms")
        for (name, b), n in h.groupby(["syscall", "bucket"])["count"].sum().items():
            want[(name, int(b))] = want.get((name, int(b)), 0) + int(n)
    got = {(r["syscall"], int(r["bucket"])): int(r["count"]) for _, r in fleet.histograms().iterrows()}
    assert got == {k: v for k, v in want.items() if v}
    dist = fleet.distributions().set_index("syscall")
    tot = {}
    for s in fleet.ok:
        for name, c in s["analysis"]["calls"].items():
            tot[name] = tot.get(name, 0) + c["count"]
    assert dist["count"].to_dict() == tot  # exact counts: every traced call, fast ones included


def test_fleet_cli_json_html_and_an_existing_scheduler(tmp_path, cluster, capsys):
    root = str(tmp_path / "c")
    generate_fleet(root, sessions=6, hosts=3, seed=9)
    broken_sessions(root)
    out = str(tmp_path / "fleet.html")
    assert main(["fleet", root, "--scheduler", cluster.scheduler_address, "--json", "-o", out]) == 0
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    assert doc["kind"] == "fleet" and doc["sessions"] == 8 and doc["analyzed"] == 6 and doc["failed"] == 2
    assert {e["session"].split("/")[-1] for e in doc["errors"]} == {"missing-table", "bad-metadata"}
    assert [h["host"] for h in doc["hosts"]] == [h["host"] for h in sorted(doc["hosts"], key=lambda h: -h["stall_ms"])]
    assert "8 sessions in" in cap.err and "2 failed to load" in cap.err
    html = open(out, encoding="utf-8").read()
    from test_report import CHROMIUM, check_page, check_rendered, render

    check_page(html, 2)
    assert "Worst hosts" in html and "missing-table" in html
    if os.path.exists(CHROMIUM):
        dom, console, attrs, _ = render(out)
        check_rendered(dom, console, attrs, 2)
    # text, through a glob of hosts
    assert main(["fleet", os.path.join(root, "host=host-00[01]"), "--scheduler", cluster.scheduler_address]) == 0
    text = capsys.readouterr().out
    assert "sessions (0 failed to load) from 2 hosts" in text and "host-002" not in text


@pytest.mark.kernel
def test_fleet_on_sessions_recorded_by_the_lab(lab_pair, cluster, capsys):  # noqa: F811
    """The lab pair recorded into a collection (--collect-dir): the collection root finds both,
    their rows equal `jstall analyze --json`, the 128-byte-inode filesystem ranks first."""
    root = os.path.commonpath(list(lab_pair.values()))
    while collected_partitions(root):
        root = os.path.dirname(root)
    fleet = run_fleet([root], scheduler=cluster.scheduler_address)
    assert sorted(s["path"] for s in fleet.summaries) == sorted(lab_pair.values()) and not len(fleet.errors)
    check_rows_match_analyze(fleet, list(lab_pair.values()), capsys)
    fs = fleet.filesystems()
    worst = fs.iloc[0]
    assert worst["inode_size"] == 128 and worst["stall_ms"] > 0 and worst["dominant_cause"] == "checkpoint"


def _die(urls, min_ms):
    os._exit(3)  # a worker process that dies outright (a crash in a native library)


def test_a_worker_that_dies_fails_only_its_sessions(tmp_path, cluster, monkeypatch):
    from distributed import Client

    from jstall.analyzer.multi import fleet as F

    root = str(tmp_path / "c")
    paths = generate_fleet(root, sessions=2, hosts=2, seed=4)
    with Client(cluster.scheduler_address) as client:
        real = F.summarize_many
        monkeypatch.setattr(F, "summarize_many", lambda urls, min_ms: _die(urls, min_ms) if urls == [paths[1]]
                            else real(urls, min_ms))
        got = F.summarize_all(paths, client, batch=1)
    assert got[0]["error"] is None and got[0]["path"] == paths[0]
    assert got[1]["path"] == paths[1] and "the worker analyzing it failed" in got[1]["error"]


def test_default_local_cluster(tmp_path, capsys):
    """Without --scheduler, a LocalCluster of worker processes is made and closed."""
    root = str(tmp_path / "c")
    generate_fleet(root, sessions=3, hosts=3, seed=1)
    assert main(["fleet", root, "--workers", "2"]) == 0
    assert "3 sessions (0 failed to load) from 3 hosts" in capsys.readouterr().out


def test_remote_url_is_copied_and_analyzed(tmp_path):
    """A session behind an fsspec URL other than a local path (here fsspec's in-memory
    filesystem) is copied to the worker and analyzed like a local one."""
    import fsspec

    mem = fsspec.filesystem("memory")
    for f in os.listdir(I128):
        mem.pipe(f"/fleet-test/c/host=vm/date=2026-11-23/xattr-i128/{f}", open(os.path.join(I128, f), "rb").read())
    try:
        urls = find_sessions(["memory://fleet-test/c"])
        assert len(urls) == 1 and urls[0].startswith("memory://")
        assert urls[0].endswith("/fleet-test/c/host=vm/date=2026-11-23/xattr-i128")
        s = summarize(urls[0])
        assert s["error"] is None
        local = summarize(I128)
        assert s["analysis"]["stalls"] == local["analysis"]["stalls"] and s["histograms"] == local["histograms"]
    finally:
        mem.rm("/fleet-test", recursive=True)


def test_find_sessions_dirs_globs_urls_and_files(tmp_path):
    root = str(tmp_path / "c")
    paths = generate_fleet(root, sessions=4, hosts=2, seed=2)
    assert find_sessions([root]) == sorted(paths)
    assert find_sessions(["file://" + root]) == sorted(paths)
    assert find_sessions([os.path.join(root, "host=host-001", "*", "*")]) == sorted(p for p in paths if "host-001" in p)
    assert find_sessions([os.path.join(paths[0], "metadata.json")]) == [paths[0]]
    assert find_sessions([paths[0], root]) == sorted(paths)  # each once
    with pytest.raises(JstallError, match="no such file or directory"):
        find_sessions([str(tmp_path / "nope")])


def test_summarize_is_not_fatal_and_fleet_keeps_order():
    s = summarize("/nonexistent/session")
    assert s["error"] and "no such session directory" in s["error"] and "analysis" not in s
    ok = summarize(I128)
    assert ok["error"] is None and ok["analysis"]["stalls"]["count"] == analyze(I128).to_dict()["stalls"]["count"] > 0
    f = Fleet([ok, s])
    assert len(f.rows) == 1 and list(f.errors["session"]) == ["/nonexistent/session"]


def test_fleet_refusals_are_one_line(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    for argv, message in ((["fleet", str(tmp_path / "nope")], "no such file or directory"),
                          (["fleet", str(empty)], "no session (a directory holding metadata.json) under"),
                          (["fleet", I128, "--workers", "0"], "--workers must be 1 or more"),
                          (["fleet", I128, "-o", "/nonexistent-dir/f.html"], "no such directory for -o")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1


def test_collected_path_layout():
    when = dt.datetime(2026, 11, 23, 23, 30, tzinfo=dt.timezone(dt.timedelta(hours=-5)))
    p = collected_path("/c", "db/7 main", when, "jstall-session-1")
    assert p == "/c/host=db_7_main/date=2026-11-24/jstall-session-1"  # the UTC day
    assert collected_partitions(p) == {"host": "db_7_main", "date": "2026-11-24"}
    assert collected_path("/c", "h", 0, "s") == "/c/host=h/date=1970-01-01/s"
    with pytest.raises(JstallError):
        collected_path("/c", "h", 0, "a/b")


@pytest.mark.parametrize("argv", [
    ["record", "-o", "x", "--collect-dir", "y", "--", "true"],
    ["lab", "run", "xattr", "-o", "x", "--collect-dir", "y"],
])
def test_collect_dir_and_output_refused_together(argv, tmp_path, capsys):
    os.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "give either -o DIR or --collect-dir ROOT, not both" in err and err.count("\n") == 1
    assert os.listdir(tmp_path) == []  # nothing created


def test_fleet_ranks_writers_across_hosts_on_dask(tmp_path, cluster, capsys):
    """Writers summed by cgroup over sessions collected from two hosts, on the cluster's
    workers: what the local Fleet of the same summaries says, in the JSON and the text."""
    from test_writers import writer_session

    root = tmp_path / "c"
    day = dt.date(2026, 11, 23)
    for host, name, culprit, victim, stall in (("db-1", "a", 90, 10, 300), ("db-2", "b", 45, 5, None),
                                               ("db-2", "c", 30, 0, None)):
        writer_session(collected_path(str(root), host, day, name), host, culprit, victim, stall)
    fleet = run_fleet([str(root)], scheduler=cluster.scheduler_address)
    local = Fleet([summarize(p) for p in find_sessions([str(root)])])
    assert fleet.writers().to_dict("records") == local.writers().to_dict("records")
    top = fleet.writers().iloc[0]
    assert (top["cgroup"], top["logged"], top["hosts"]) == ("pod 1a2b-3c4d (burstable)", 165.0, ["db-1", "db-2"])
    assert main(["fleet", str(root), "--scheduler", cluster.scheduler_address, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(r["cgroup"], r["sessions"], r["stall_ms"]) for r in doc["writers"]] == [
        ("pod 1a2b-3c4d (burstable)", 3, 0.0), ("victim.service", 2, 300.0)]
    html = tmp_path / "fleet.html"
    assert main(["fleet", str(root), "--scheduler", cluster.scheduler_address, "-o", str(html)]) == 0
    assert "who fills the journals" in capsys.readouterr().out
    page = html.read_text()
    assert "Who fills the journals" in page and "db-1, db-2" in page
