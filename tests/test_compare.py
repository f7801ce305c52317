"""`jstall compare`: two sessions side by side; the verdict names what the change removed."""

import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest

from jstall.analyzer.analysis import analyze
from jstall.analyzer.multi.compare import compare
from jstall.cli import main

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "notebooks", "data")
JSTALL = os.path.join(os.path.dirname(sys.executable), "jstall")
I128, I256 = os.path.join(DATA, "xattr-i128"), os.path.join(DATA, "xattr-i256")
SWEEP = os.path.join(DATA, "sweep")

# --- a real lab pair: the same xattr work on 128- and 256-byte inodes ----------------------

#: 3,000 files with 2 attributes, 3,000 updates, a 4 MiB journal of 1 KiB blocks, 2,000 write IOPS
PAIR_ARGS = ["--fs-size", "64M", "--journal-size", "4M", "--block-size", "1024", "--files", "3000",
             "--updates", "3000", "--write-iops", "2000"]
_PAIR = {}


def record_lab_pair(root):
    """Record the pair once per test run with `jstall lab run --collect-dir ROOT` (so in the
    collection layout); returns {128: session dir, 256: session dir}.  Checks that the lab
    left no loop device, mount or throttle behind."""
    from conftest import leftovers, loop_devs, throttle_rules

    if _PAIR:
        return _PAIR
    scratch = f"/var/tmp/jstall-test-{uuid.uuid4().hex[:10]}"
    before = throttle_rules()
    try:
        for inode in (128, 256):
            p = subprocess.run([JSTALL, "lab", "run", "xattr", *PAIR_ARGS, "--inode-size", str(inode),
                                "--scratch", scratch, "--collect-dir", str(root)],
                               capture_output=True, text=True, timeout=300)
            assert p.returncode == 0, p.stderr
            found = [d for d, _, files in os.walk(root) if "metadata.json" in files and d not in _PAIR.values()]
            assert len(found) == 1
            _PAIR[inode] = found[0]
    finally:
        loops, mounts = leftovers(scratch)
        others = loop_devs()
        new_rules = {k: v for k, v in throttle_rules().items() if k not in before and k[1] not in others}
        shutil.rmtree(scratch, ignore_errors=True)
        assert not loops and not mounts and not new_rules, (loops, mounts, new_rules)
    return _PAIR


@pytest.fixture(scope="session")
def lab_pair(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root")
    return record_lab_pair(tmp_path_factory.mktemp("collection"))


@pytest.mark.kernel
def test_lab_pair_in_the_collection_layout_and_its_verdict(lab_pair):
    """Recorded with --collect-dir: ROOT/host=HOST/date=DAY/NAME; compare names the checkpoint
    stall time that 256-byte inodes removed, with the numbers of each side's analysis."""
    import datetime as dt
    import socket

    from jstall.session import collected_partitions, read_metadata

    for inode, path in lab_pair.items():
        part = collected_partitions(path)
        meta = read_metadata(path)
        start = dt.datetime.fromisoformat(meta["start"]["wall"]).astimezone(dt.timezone.utc).date()
        assert part["host"] == socket.gethostname() == meta["host"]
        assert part["date"] in (start.isoformat(), (start - dt.timedelta(days=1)).isoformat())  # UTC day
        assert os.path.basename(path).startswith("jstall-lab-xattr-")
        assert meta["lab"]["config"]["inode_size"] == inode
    a, b = analyze(lab_pair[128]), analyze(lab_pair[256])
    cp_a = float(a.causes.loc["checkpoint", "total_ms"])
    assert cp_a > 0 and float(b.causes.loc["checkpoint", "total_ms"]) == 0
    c = compare(a, b)
    v = c.verdict()
    assert v.startswith("inode_size 128 -> 256: B removed 100% of checkpoint stall time")
    removed = f"{cp_a / 1000:.2f} s" if cp_a >= 1000 else f"{cp_a:.0f} ms"  # seconds from 1 s on
    assert f"({removed} -> 0.00 s)" in v
    ph = c.phases().set_index("phase")
    upd = ph.loc["update"]
    basis = "durable" if upd["basis"] == "durable" else "until its calls returned"
    assert f"update phase {upd['seconds_a']:.2f} s -> {upd['seconds_b']:.2f} s {basis}" in v
    assert upd["seconds_b"] < upd["seconds_a"]


# --- on the shipped recordings (no root needed) --------------------------------------------

def test_compare_i128_i256_names_the_removed_checkpoint_time(capsys):
    a, b = analyze(I128), analyze(I256)
    cp = float(a.causes.loc["checkpoint", "total_ms"])
    assert main(["compare", I128, I256]) == 0
    out = capsys.readouterr().out
    verdict = next(line for line in out.splitlines() if line.startswith("verdict: "))
    assert "B removed 100% of checkpoint stall time" in verdict and f"{cp / 1000:.2f} s -> 0.00 s" in verdict
    assert "inode_size 128 -> 256" in verdict
    upd_a = next(p for p in a.session.meta["lab"]["phases"] if p["name"] == "update")
    upd_b = next(p for p in b.session.meta["lab"]["phases"] if p["name"] == "update")
    assert f"update phase {upd_a['seconds']:.2f} s -> {upd_b['seconds']:.2f} s" in verdict
    # the shared bound (jstall.enough) judged on each side, from each side's own waits
    (wa,), (wb,) = (x.checkpoint_waits.to_dict("records") or [None] for x in (a, b))
    assert wa["wait_ms"] >= cp and not wa["big_enough"] and (wb is None or wb["big_enough"])
    assert (f"journal not big enough -> big enough (forced-checkpoint waits {wa['wait_ms'] / 1000:.2f} s -> "
            in verdict and "bound: at most 1% and none of 10 ms" in verdict), verdict
    rows = {r["figure"]: r for r in compare(I128, I256).to_dict()["journals"]}
    assert rows["big_enough"]["a"] is False and rows["big_enough"]["b"] is True
    assert rows["checkpoint_waits_ms"]["a"] == pytest.approx(wa["wait_ms"])


def test_compare_json_carries_each_sides_analysis(capsys):
    assert main(["compare", I128, I256, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    da, db = analyze(I128).to_dict(), analyze(I256).to_dict()
    causes = {r["cause"]: r for r in doc["causes"]}
    for c, v in da["stalls"]["by_cause"].items():
        assert causes[c]["ms_a"] == v["total_ms"] and causes[c]["stalls_a"] == v["count"]
        assert causes[c]["ms_b"] == db["stalls"]["by_cause"][c]["total_ms"]
    calls = {r["syscall"]: r for r in doc["calls"]}
    for name, v in da["calls"].items():
        assert (calls[name]["p50_ms_a"], calls[name]["p99_ms_a"], calls[name]["max_ms_a"]) == \
            (v["p50_ms"], v["p99_ms"], v["max_ms"])
        w = db["calls"][name]
        assert (calls[name]["p99_ms_b"], calls[name]["max_ms_b"]) == (w["p99_ms"], w["max_ms"])
    j = {(r["figure"]): r for r in doc["journals"]}
    assert j["inode_size"]["a"] == 128 and j["inode_size"]["b"] == 256
    assert j["forced_checkpoints"]["a"] == da["journals"][0]["forced_checkpoints"] > 0
    assert j["forced_checkpoints"]["b"] == 0
    # headroom: below the forced level in A (negative), above it in B
    assert j["headroom_low_blocks"]["a"] < 0 < j["headroom_low_blocks"]["b"]
    assert doc["config_changes"] == [{"option": "inode_size", "a": 128, "b": 256}]
    ph = {r["phase"]: r for r in doc["phases"]}
    assert ph["update"]["basis"] == "durable"  # both recorded with durable phase times
    assert ph["update"]["seconds_b"] < ph["update"]["seconds_a"]


def test_durable_phase_times_are_used_when_both_sides_have_them():
    a, b = analyze(I128), analyze(I256)
    for an, durable in ((a, 9.5), (b, 0.25)):
        for p in an.session.meta["lab"]["phases"]:
            p["durable_s"] = durable if p["name"] == "update" else p["seconds"]
    c = compare(a, b)
    ph = c.phases().set_index("phase")
    assert ph.loc["update", "basis"] == "durable" and ph.loc["update", "seconds_a"] == 9.5
    assert "update phase 9.50 s -> 0.25 s durable" in c.verdict()
    del b.session.meta["lab"]["phases"][1]["durable_s"]
    c = compare(a, b)
    assert c.phases().set_index("phase").loc["update", "basis"] == "returned"
    assert "until its calls returned" in c.verdict()


def test_compare_the_other_way_names_the_added_stall_time():
    c = compare(I256, I128)
    assert "B added" in c.verdict() and "of checkpoint stall time (A: none)" in c.verdict()


def test_compare_two_sweep_configurations(capsys):
    assert main(["compare", f"{SWEEP}:journal_size=4M,inode_size=128", f"{SWEEP}:journal_size=16M,inode_size=128"]) == 0
    out = capsys.readouterr().out
    assert "journal_size=4M,inode_size=128: 2 run(s); the run with the median stall time is 001-" in out
    assert "journal_size 4M -> 16M: B removed 100% of checkpoint stall time" in out


def test_compare_html_shows_both_runs(tmp_path):
    from test_report import check_page, check_rendered, render

    out = str(tmp_path / "compare.html")
    assert main(["compare", I128, I256, "-o", out]) == 0
    html = open(out, encoding="utf-8").read()
    n = html.count("data-figure=")
    check_page(html, n)
    assert 'id="timeline-A"' in html and 'id="timeline-B"' in html and "B removed 100%" in html
    if os.path.exists(shutil.which("chromium") or "/usr/bin/chromium"):
        dom, console, attrs, _ = render(out)
        check_rendered(dom, console, attrs, n)


@pytest.mark.parametrize("argv, message", [
    (["compare", "/nonexistent-a", I256], "no such session directory"),
    (["compare", SWEEP, I256], "a sweep directory; compare two of its runs or configurations"),
    (["compare", f"{SWEEP}:journal_size=9M", I256], "no run with journal_size=9M"),
    (["compare", I128, I256, "-o", "/nonexistent-dir/c.html"], "no such directory for -o"),
    (["compare", I128, I256, "-o", "/proc/c.html"], "-o /proc/c.html: cannot write there"),
    (["fleet", I128, "-o", "/proc/f.html"], "-o /proc/f.html: cannot write there"),
])
def test_bad_input_is_one_line_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_compare_names_what_differs_between_any_two_sessions(tmp_path):
    """Two recorded (not lab) sessions: compare reads what differs from their metadata."""
    from synthetic import journal_meta, metadata, write_session

    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    write_session(a, {}, metadata())
    write_session(b, {}, metadata(kernel_release="6.1.0-56-amd64", journals=[journal_meta(
        journal_blocks=16384, inode_size=256, features=["has_journal", "ext_attr", "extent", "fast_commit"],
        fast_commit=True, mount_options="rw,relatime,nobarrier")]))
    c = compare(a, b)
    assert c.filesystem_changes() == [
        ("kernel", "6.18.0", "6.1.0-56-amd64"), ("journal", "4 MiB", "64 MiB"), ("inode size", "128", "256"),
        ("fast_commit", "False", "True"), ("features", "-", "+fast_commit"), ("mount options", "-", "nobarrier")]
    assert c.verdict().startswith("kernel 6.18.0 -> 6.1.0-56-amd64, journal 4 MiB -> 64 MiB, inode size 128 -> 256: ")
    assert "filesystems, journals and kernels that differ: kernel 6.18.0 -> 6.1.0-56-amd64" in c.text()
    assert c.to_dict()["filesystem_changes"][1] == {"what": "journal", "a": "4 MiB", "b": "64 MiB"}
