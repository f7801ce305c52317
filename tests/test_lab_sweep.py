"""`jstall lab sweep`: two tiny configurations × 2 repeats make the results table; running
the same sweep again does no new run; an interrupted run is redone."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from conftest import leftovers
from jstall.workloads import scratch

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]

JSTALL = os.path.join(os.path.dirname(sys.executable), "jstall")


def sweep(out, scratch, *extra):
    return subprocess.run(
        [JSTALL, "lab", "sweep", "xattr", "--fs-size", "32M", "--journal-size", "4M,8M", "--block-size", "1024",
         "--files", "100", "--updates", "200", "--repeat", "2", "--scratch", scratch, "-o", str(out), *extra],
        capture_output=True, text=True, timeout=600)


def session_mtimes(out):
    """Finished sessions (a recording still running has a metadata.json saying "recording")."""
    found = {}
    for d in os.listdir(out):
        p = os.path.join(out, d, "metadata.json")
        if os.path.isfile(p) and json.load(open(p)).get("status") != "recording":
            found[d] = os.stat(p).st_mtime_ns
    return found


def test_sweep_results_resume_and_redo(scratch_dir, tmp_path):
    out = tmp_path / "sw"
    first = sweep(out, scratch_dir)
    assert first.returncode == 0, first.stderr
    assert "4 runs (0 finished before, 4 to run)" in first.stdout
    runs = json.load(open(out / "sweep.json"))["runs"]
    assert sorted(r["run"] for r in runs) == sorted(session_mtimes(out))

    res = pd.read_parquet(out / "results.parquet")
    assert len(res) == 4 and sorted(res["journal_size"]) == ["4M", "4M", "8M", "8M"]
    assert sorted(res["repeat"]) == [1, 1, 2, 2]
    for col in ("create_s", "update_s", "create_rate_per_s", "update_rate_per_s", "seconds"):
        assert col in res and (res[col] > 0).all(), list(res.columns)
    assert (res["create_ops"] == 100).all() and (res["update_ops"] == 200).all()
    assert res["create_rate_per_s"].tolist() == pytest.approx((res["create_ops"] / res["create_s"]).tolist())
    assert sorted(res["journal_blocks"]) == [4096, 4096, 8192, 8192] and (res["inode_size_real"] == 256).all()
    assert (res["events_lost"] == 0).all() and (res["slow_calls"] >= 0).all()
    assert set(res["pattern"]) == {"xattr"} and "fs_size" not in res  # only swept options are columns
    csv = pd.read_csv(out / "results.csv")
    assert len(csv) == 4 and list(csv.columns) == list(res.columns)
    summary = pd.read_parquet(out / "summary.parquet")
    assert sorted(summary["journal_size"]) == ["4M", "8M"] and (summary["runs"] == 2).all()
    row = summary[summary["journal_size"] == "4M"].iloc[0]
    mine = res[res["journal_size"] == "4M"]["update_s"]
    assert row["update_s_mean"] == pytest.approx(mine.mean())
    assert row["update_s_sd"] == pytest.approx(mine.std(ddof=1))
    # every run is a loadable session carrying the lab configuration and its sweep entry
    from jstall.analyzer import load_session

    for r in runs:
        meta = load_session(str(out / r["run"])).meta
        assert meta["lab"]["sweep"]["run"] == r["run"]
        assert meta["lab"]["config"]["journal_size"] == r["options"]["journal_size"]
        assert meta["lab"]["dumpe2fs"]["journal_blocks"] == int(r["options"]["journal_size"][:-1]) * 1024

    before = session_mtimes(out)
    again = sweep(out, scratch_dir)
    assert again.returncode == 0 and "4 runs (4 finished before, 0 to run)" in again.stdout
    assert session_mtimes(out) == before

    # a run interrupted midway (its session never completed) is redone, the others kept
    victim = runs[1]["run"]
    meta_path = out / victim / "metadata.json"
    meta = json.load(open(meta_path))
    meta["status"] = "interrupted"
    json.dump(meta, open(meta_path, "w"))
    third = sweep(out, scratch_dir)
    assert third.returncode == 0 and "(3 finished before, 1 to run)" in third.stdout
    after = session_mtimes(out)
    assert after[victim] != before[victim]
    assert {k: v for k, v in after.items() if k != victim} == {k: v for k, v in before.items() if k != victim}
    assert len(pd.read_parquet(out / "results.parquet")) == 4


def test_a_different_sweep_in_the_same_directory_is_refused(scratch_dir, tmp_path):
    out = tmp_path / "sw"
    out.mkdir()
    (out / "sweep.json").write_text(json.dumps({"format": "jstall-sweep", "pattern": "fdtree"}))
    p = sweep(out, scratch_dir)
    assert p.returncode == 2 and "different sweep" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert os.listdir(out) == ["sweep.json"]
    shutil.rmtree(out)


def test_a_run_interrupted_midway_is_redone(scratch_dir, tmp_path):
    """Ctrl-C (to the sweep and its command, as a terminal sends it) while the second run's
    command is running: nothing is left set up, the first run is kept, the results hold it
    alone; the same command again runs only the interrupted run."""
    out, counter = tmp_path / "sw", tmp_path / "count"
    # the command counts its runs; the second one waits to be interrupted
    cmd = (f"sh -c 'n=$(cat {counter} 2>/dev/null || echo 0); echo $((n+1)) > {counter}; touch f; "
           "if [ $n -eq 1 ]; then sleep 60; fi'")
    argv = [JSTALL, "lab", "sweep", "command", "--command", cmd, "--fs-size", "32M", "--journal-size", "4M,8M",
            "--scratch", scratch_dir, "-o", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (counter.exists() and counter.read_text().strip() == "2"):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    time.sleep(0.5)
    assert leftovers(scratch_dir)[1]                         # the second run is set up
    runs = [r["run"] for r in json.load(open(out / "sweep.json"))["runs"]]
    first = session_mtimes(out)
    assert list(first) == [runs[0]]
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted with 1 of 2 runs finished" in err, err
    assert leftovers(scratch_dir) == ([], []) and os.listdir(scratch_dir) == [scratch.SCRATCH_MARKER]
    meta = json.load(open(out / runs[1] / "metadata.json"))
    assert meta["status"] == "interrupted" and meta["lab"]["status"] == "interrupted"
    assert pd.read_parquet(out / "results.parquet")["run"].tolist() == [runs[0]]

    again = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "2 runs (1 finished before, 1 to run)" in again.stdout, again.stderr
    assert counter.read_text().strip() == "3"                # one more run, not two
    assert session_mtimes(out)[runs[0]] == first[runs[0]]
    res = pd.read_parquet(out / "results.parquet")
    assert sorted(res["run"]) == runs and (res["command_ops"] == 1).all()
    assert json.load(open(out / runs[1] / "metadata.json"))["lab"]["status"] == "complete"


@pytest.mark.parametrize("args, message", [
    (["--journal-size", "4M,64M"], "jstall lab: --journal-size 64M does not fit"),
    (["--journal-size", "4M,4M"], "distinct"),
    (["--inode-size", "128,300", "--journal-size", "4M"], "jstall lab: --inode-size 300: must be a power of two"),
    (["--repeat", "0"], "--repeat"),
    (["--journal-size", "4M", "--block-size", "4096,1024", "--attrs", "30"], "--block-size 1024: --attrs 30 of"),
    (["--write-iops", "100,x"], "not an integer"),
])
def test_every_combination_is_checked_before_anything_is_made(scratch_dir, tmp_path, args, message):
    p = subprocess.run([JSTALL, "lab", "sweep", "xattr", "--fs-size", "32M", "--files", "10", "--updates", "10",
                        "--scratch", scratch_dir, "-o", str(tmp_path / "sw"), *args], capture_output=True, text=True)
    assert p.returncode == 2 and message in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "sw").exists() and not os.path.exists(scratch_dir)
    assert leftovers(scratch_dir) == ([], [])
