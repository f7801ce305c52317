"""`jstall analyze` and `jstall report` command modules."""

import argparse
import json
import subprocess
import sys

import pytest

from jstall.analyzer.commands import analyze_cmd, report_cmd
from jstall.analyzer.stalls.causes import CAUSES
from jstall import cli
from jstall.errors import JstallError

from test_report import classic_session


def run(args):
    p = argparse.ArgumentParser()
    analyze_cmd.add_arguments(p)
    return analyze_cmd.run(p.parse_args(args))


def test_command_modules_are_light_and_documented():
    code = ("import sys, jstall.analyzer.commands.analyze_cmd as a, jstall.analyzer.commands.report_cmd as r;"
            "heavy = [m for m in ('pandas', 'pyarrow', 'plotly', 'numpy') if m in sys.modules];"
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    for mod in (analyze_cmd, report_cmd):
        assert cli.description(mod) and "examples:" in mod.EXAMPLES and callable(mod.add_arguments)


def test_analyze_text_and_json(tmp_path, capsys):
    s = classic_session(tmp_path)
    assert run([s.path]) == 0
    text = capsys.readouterr().out
    assert "30 stalls (calls >= 10 ms)" in text
    assert "checkpoint" in text and "journals" in text and "[journal_size]" in text
    assert run([s.path, "--json", "--min-ms", "45"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["min_ms"] == 45 and d["stalls"]["count"] == 24  # latencies 40..80 ms, 6 of them are 40
    assert set(d["stalls"]["by_cause"]) == set(CAUSES)
    assert d["journals"][0]["transactions"] == 30


def test_analyze_user_errors(tmp_path):
    with pytest.raises(JstallError, match="no such session directory"):
        run([str(tmp_path / "missing")])
    s = classic_session(tmp_path)
    with pytest.raises(JstallError, match="--min-ms"):
        run([s.path, "--min-ms", "-1"])


# --- bad input through the real command: one line, exit 2, no traceback, nothing created ----

import os  # noqa: E402
import shutil  # noqa: E402

JSTALL = os.path.join(os.path.dirname(sys.executable), "jstall")
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
can_drop_privileges = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                                         reason="needs root and setpriv to run as an unprivileged user")


def refused(args, match, prefix=()):
    """Run jstall; assert exit 2 and exactly one stderr line containing ``match``."""
    proc = subprocess.run([*prefix, JSTALL, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"jstall {args[0]}: ") and match in proc.stderr, proc.stderr
    assert proc.stdout == ""
    return proc.stderr


def listing(path):
    return sorted(os.listdir(path))


def test_bad_session_paths_are_one_line_errors(tmp_path):
    s = classic_session(tmp_path)
    (tmp_path / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    before = listing(tmp_path)
    for cmd in ("analyze", "report"):
        out = ["-o", str(tmp_path / "r.html")] if cmd == "report" else []
        refused([cmd, str(tmp_path / "missing"), *out], "no such session directory")
        refused([cmd, str(tmp_path / "file"), *out], "not a session directory")
        refused([cmd, str(tmp_path / "empty"), *out], "not a jstall session")
        refused([cmd, s.path, "--min-ms", "-5", *out], "--min-ms -5: give 0 or more")
    assert listing(tmp_path) == before


@pytest.mark.parametrize("args,match", [
    (["--top", "-3"], "--top -3: give a count of 1 or more"),
    (["--top", "0"], "--top 0: give a count of 1 or more"),
    (["--from", "yesterday"], "--from yesterday: not a time; give HH:MM"),
    (["--to", "24:10"], "--to 24:10: not a time of day"),
    (["--from", "+3", "--to", "+1"], "is not before --to"),
    (["--from", "+3600"], "at or after the session's end"),
])
def test_bad_counts_and_windows_are_one_line_errors(tmp_path, args, match):
    s = classic_session(tmp_path)
    refused(["analyze", s.path, *args], match)


def test_windows_do_not_apply_to_sweeps(tmp_path):
    from test_analyzer_sweep import make_sweep

    sweep = make_sweep(tmp_path)
    refused(["analyze", str(sweep), "--from", "+1"], "--from/--to apply to one session, not a sweep")


def test_report_outputs_that_cannot_be_written(tmp_path):
    s = classic_session(tmp_path)
    refused(["report", s.path, "-o", "/proc/x.html"], "-o /proc/x.html: cannot write there")
    assert not [n for n in os.listdir("/proc") if n.startswith("x.html")]
    refused(["report", s.path, "-o", str(tmp_path)], "is a directory; give a file name")
    refused(["report", s.path, "-o", str(tmp_path / "no" / "r.html")], "no such directory for -o")
    assert not (tmp_path / "no").exists()


@can_drop_privileges
def test_unprivileged_user_gets_one_line_errors():
    import pathlib
    import tempfile

    # pytest's base directory is private to root: this one is readable by everyone
    base = pathlib.Path(tempfile.mkdtemp(prefix="jstall-test-", dir="/var/tmp"))
    try:
        os.chmod(base, 0o755)
        s = classic_session(base)
        for root, dirs, files in os.walk(base):  # readable by everyone, writable by root only
            os.chmod(root, 0o755)
            for f in files:
                os.chmod(os.path.join(root, f), 0o644)
        before = listing(base)
        refused(["report", s.path, "-o", str(base / "r.html")], "cannot write there (Permission denied)", NOBODY)
        assert listing(base) == before
        os.chmod(os.path.join(s.path, "calls.parquet"), 0o600)
        refused(["analyze", s.path], "calls.parquet: permission denied; run as a user who can read", NOBODY)
        os.chmod(s.path, 0o700)
        refused(["analyze", s.path], "permission denied", NOBODY)
        refused(["report", s.path, "-o", "/tmp/jstall-nobody.html"], "permission denied", NOBODY)
        assert not os.path.exists("/tmp/jstall-nobody.html")
    finally:
        shutil.rmtree(base)


def test_every_cause_and_rule_is_described_where_users_read():
    """The causes registry feeds --help and the figures; docs/analysis.md names every cause and
    every recommendation kind; the recorder's --calls groups are documented too."""
    import os

    from jstall.analyzer.render import figures
    from jstall.analyzer.advice import recommend
    from jstall.analyzer.stalls.causes import REGISTRY
    from jstall.probes.syscalls import GROUPS, parse_calls

    doc = open(os.path.join(os.path.dirname(__file__), "..", "docs", "analysis.md")).read()
    for c in REGISTRY:
        assert f"  {c.name} " in analyze_cmd.description() and f"`{c.name}`" in doc, c.name
        assert figures.CAUSE_COLORS[c.name] == c.colour
    kinds = {"lost_events", "no_stalls", "journal_size", "inode_size", "external_journal", "fast_commit", "log_size",
             "log_buffers", "external_log", *recommend.generic_causes()}
    assert all(f"`{k}`" in doc for k in kinds)
    assert parse_calls(None) == tuple(GROUPS["metadata"] + GROUPS["fsync"])
    assert set(parse_calls("all")) >= {"write", "pwritev2", "utimensat", "symlinkat", "fchmodat", "fallocate"}
    assert parse_calls("write,fsync") == GROUPS["write"] + ("fsync", "fdatasync")
    with pytest.raises(JstallError, match="unknown group or call 'wrte'"):
        parse_calls("wrte")


def test_record_refuses_an_unknown_calls_group(tmp_path):
    import os

    out = tmp_path / "s"
    jstall = os.path.join(os.path.dirname(sys.executable), "jstall")
    p = subprocess.run([jstall, "record", "--calls", "metadata,bogus", "-o", str(out), "--", "true"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and not out.exists()
    assert len(p.stderr.strip().splitlines()) == 1 and "--calls" in p.stderr and "groups:" in p.stderr


def test_a_lab_tune_directory_is_analyzed_as_its_table_and_refused_as_a_session(tmp_path, capsys):
    """jstall analyze on a lab tune directory prints the curve the tune walked (tune.json);
    report and compare, which take one session, name the directory's runs instead."""
    from jstall.workloads.tune import TuneResult, TuneRun, _save

    s = classic_session(tmp_path)
    d = tmp_path / "tune"
    d.mkdir()
    (d / "journal-4M").symlink_to(s.path)
    runs = [TuneRun("journal 4M", 4, {}, 30, 3000.0, 30, 3000.0, 25, {"update": 2.5}, {"update": 2.3}, 2.5, 2.3,
                    checkpoints_in_stalls=21, checkpoint_wait_ms=1821.0, negligible_checkpoints=4,
                    checkpoint_waits_ms=2900.0, longest_checkpoint_wait_ms=410.0, run_ms=4000.0),
            # 2 forced checkpoints of 3 ms: big enough (0.15% of the run, none of 10 ms)
            TuneRun("journal 8M", 8, {}, 0, 0.0, 0, 0.0, 2, {"update": 0.4}, {"update": 0.3}, 0.4, 0.3,
                    negligible_checkpoints=2, checkpoint_waits_ms=6.0, longest_checkpoint_wait_ms=3.0, run_ms=4000.0)]
    _save(TuneResult("xattr", {"files": 1500}, 10.0, 4, 819, threshold_mib=8, stalled_below_mib=4, runs=runs,
                     comparisons=runs[:1], config={"fs_size": "2G"}, output_dir=str(d)))
    assert run([str(d)]) == 0
    text = capsys.readouterr().out
    assert "threshold: 8M is the smallest journal big enough; 4M is not (big enough: forced-checkpoint waits" in text
    assert "ENOUGH CP_WAITS_MS LONGEST_MS  SHARE" in text and "IN_STALLS CP_WAIT_MS NEGLIGIBLE" in text
    (r8,) = [line.split() for line in text.splitlines() if line.startswith("journal 8M")]
    assert r8[2:7] == ["8M", "yes", "6", "3", "0.1%"]
    assert run([str(d), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["checkpoint_wait_ms"] == 1821.0
    refused(["report", str(d), "-o", str(tmp_path / "r.html")], f"{d}: a lab tune directory, whose runs are "
            f"sessions (journal-4M); give one run, e.g. {d / 'journal-4M'}")
