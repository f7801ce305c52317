"""Sweep analysis on a hand-built lab sweep directory: per-configuration mean ± sd."""

import json
import os

import pandas as pd
import pytest

from jstall.analyzer.commands import analyze_cmd
from jstall.analyzer.multi.sweep import analyze_sweep
from synthetic import journal_meta, metadata, rows, write_session
from jstall.errors import JstallError

MS = 1_000_000
S = 1_000_000_000
CP_STACK = ["__schedule", "schedule", "jbd2_log_do_checkpoint", "__jbd2_log_wait_for_space",
            "add_transaction_credits", "start_this_handle"]


def make_sweep(root, sizes=("4M", "16M"), inodes=(128, 256), repeats=2):
    """One session per run; stalls only with 128-byte inodes, fewer with the larger journal;
    phase rates that depend on the configuration (known means and deviations)."""
    os.makedirs(root, exist_ok=True)
    json.dump({"options": {"journal_size": list(sizes), "inode_size": list(inodes)}, "repeat": repeats},
              open(os.path.join(root, "sweep.json"), "w"))
    results = []
    for js in sizes:
        for ino in inodes:
            for rep in range(repeats):
                n = (4 if js == "4M" else 1) * (ino == 128)
                calls = [{"ts_ns": S + i * S, "latency_ns": (100 + 10 * rep) * MS, "tid": 7, "pid": 7, "comm": "x",
                          "syscall": "setxattr", "ret": 0, "dev": "7:0", "handles": 1} for i in range(n)]
                off = [{"ts_ns": c["ts_ns"] + MS, "offcpu_ns": 90 * MS, "tid": 7, "pid": 7, "comm": "x", "state": 2,
                        "runnable": False, "stack_id": 1, "call_ts_ns": c["ts_ns"], "syscall": "setxattr",
                        "dev": "7:0"} for c in calls]
                jev = [{"ts_ns": c["ts_ns"] + 2 * MS, "event": "checkpoint", "dev": "7:0", "tid": 7, "pid": 7,
                        "comm": "x", "jbd2_thread": False, "result": 0} for c in calls]
                rate = (1000 if ino == 256 else 200) * (2 if js == "16M" else 1) + 10 * rep
                lab = {"config": {"pattern": "xattr", "journal_size": js, "inode_size": ino, "seed": rep},
                       "phases": [{"name": "create", "seconds": 1.0 + rep, "files_per_s": 5000.0 + rep},
                                  {"name": "update", "seconds": 100.0 / rate, "updates_per_s": float(rate)}]}
                name = f"run-{js}-{ino}-{rep}"
                write_session(os.path.join(root, name),
                              {"calls": rows(calls), "offcpu": rows(off), "jbd2_events": rows(jev),
                               "stacks": pd.DataFrame({"stack_id": [1], "frames": [CP_STACK]})},
                              metadata(journals=[journal_meta(inode_size=ino)], lab=lab))
                results.append({"run": name, "journal_size": js, "inode_size": ino, "repeat": rep})
    pd.DataFrame(results).to_parquet(os.path.join(root, "results.parquet"))
    return root


def test_sweep_tables(tmp_path):
    sw = analyze_sweep(make_sweep(str(tmp_path / "sw")))
    assert sw.options == ["journal_size", "inode_size"]
    assert sw.phases == ["create", "update"]
    t = sw.by_config().set_index(["journal_size", "inode_size"])
    assert len(t) == 4 and (t["runs"] == 2).all()
    assert t.loc[("4M", "128"), "stalls_mean"] == 4 and t.loc[("16M", "128"), "stalls_mean"] == 1
    assert t.loc[("4M", "256"), "stalls_mean"] == 0 and t.loc[("4M", "256"), "checkpoint_ms_mean"] == 0
    assert t.loc[("4M", "128"), "checkpoint_ms_mean"] == 4 * 90
    assert t.loc[("4M", "128"), "forced_checkpoints_mean"] == 4
    assert t.loc[("16M", "256"), "update_rate_mean"] == 2005
    assert t.loc[("16M", "256"), "update_rate_sd"] == pytest.approx(pd.Series([2000, 2010]).std())
    assert t.loc[("4M", "128"), "setxattr_max_ms_mean"] == 105
    # the journal-size layout: rows journal size (ordered by size), then the other swept
    # option, so that no two configurations are pooled; columns phases
    pt = sw.phase_table()
    assert list(pt.index) == [("4M", "128"), ("4M", "256"), ("16M", "128"), ("16M", "256")]
    assert list(pt.index.names) == ["journal_size", "inode_size"] and list(pt.columns) == ["create", "update"]
    for cfg in pt.index:
        assert pt.loc[cfg, "update"] == f"{t.loc[cfg, 'update_rate_mean']:.1f} ± {t.loc[cfg, 'update_rate_sd']:.1f}"
    assert list(sw.phase_table(row_option="inode_size").index)[:2] == [("128", "4M"), ("128", "16M")]
    assert sw.rate_unit("update") == "updates/s" and sw.rate_unit("create") == "files/s"
    text = sw.text()
    assert "4M 128" in text and "update" in text
    d = sw.to_dict()
    assert d["kind"] == "sweep" and len(d["configurations"]) == 4 and len(d["runs"]) == 8
    json.dumps(d, allow_nan=False)


def test_sweep_command_and_damaged_runs(tmp_path, capsys):
    root = make_sweep(str(tmp_path / "sw"), sizes=("8M",), inodes=(128,), repeats=2)
    os.remove(os.path.join(root, "run-8M-128-1", "metadata.json"))  # a run interrupted midway
    import argparse

    p = argparse.ArgumentParser()
    analyze_cmd.add_arguments(p)
    assert analyze_cmd.run(p.parse_args([root, "--json"])) == 0
    d = json.loads(capsys.readouterr().out)
    assert len(d["runs"]) == 1
    assert any("run-8M-128-1: incomplete run" in w for w in d["warnings"])
    os.remove(os.path.join(root, "run-8M-128-0", "metadata.json"))
    with pytest.raises(JstallError, match="no loadable run sessions"):
        analyze_sweep(root)
    with pytest.raises(JstallError, match="not a lab sweep"):
        analyze_sweep(str(tmp_path))


def test_a_phase_rate_is_its_own_units():
    from jstall.analyzer.multi.sweep import _rate_key

    # a lab phase record: rate_per_s (ops/s) first, then the phase's own rate
    assert _rate_key({"name": "file_create", "unit": "files", "rate_per_s": 9.0, "files_per_s": 9.0,
                      "kib_per_s": 36.0}) == "files_per_s"
    assert _rate_key({"name": "dir_create", "unit": "dirs", "rate_per_s": 3.0, "dirs_per_s": 3.0}) == "dirs_per_s"
    assert _rate_key({"name": "update", "unit": "setxattr", "rate_per_s": 5.0}) == "rate_per_s"
