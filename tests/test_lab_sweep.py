"""`jstall lab sweep`: two tiny configurations × 2 repeats make the results table; running
the same sweep again does no new run; an interrupted run is redone."""

import json
import os
import shutil
import subprocess
import sys

import pandas as pd
import pytest

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]

JSTALL = os.path.join(os.path.dirname(sys.executable), "jstall")


def sweep(out, scratch, *extra):
    return subprocess.run(
        [JSTALL, "lab", "sweep", "xattr", "--fs-size", "32M", "--journal-size", "4M,8M", "--block-size", "1024",
         "--files", "100", "--updates", "200", "--repeat", "2", "--scratch", scratch, "-o", str(out), *extra],
        capture_output=True, text=True, timeout=600)


def session_mtimes(out):
    return {d: os.stat(os.path.join(out, d, "metadata.json")).st_mtime_ns
            for d in os.listdir(out) if os.path.isfile(os.path.join(out, d, "metadata.json"))}


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
    for col in ("create_s", "update_s", "create_rate_per_s", "update_rate_per_s"):
        assert col in res and (res[col] > 0).all(), list(res.columns)
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
