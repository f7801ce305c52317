"""`jstall analyze` and `jstall report` command modules."""

import argparse
import json
import subprocess
import sys

import pytest

from jstall.analyzer import analyze_cmd, report_cmd
from jstall.analyzer.causes import CAUSES
from jstall.errors import JstallError

from test_report import classic_session


def run(args):
    p = argparse.ArgumentParser()
    analyze_cmd.add_arguments(p)
    return analyze_cmd.run(p.parse_args(args))


def test_command_modules_are_light_and_documented():
    code = ("import sys, jstall.analyzer.analyze_cmd as a, jstall.analyzer.report_cmd as r;"
            "heavy = [m for m in ('pandas', 'pyarrow', 'plotly', 'numpy') if m in sys.modules];"
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    for mod in (analyze_cmd, report_cmd):
        assert mod.DESCRIPTION and "examples:" in mod.EXAMPLES and callable(mod.add_arguments)


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


def test_every_cause_and_rule_is_described_where_users_read():
    """The causes registry feeds --help and the figures; docs/analysis.md names every cause and
    every recommendation kind; the recorder's --calls groups are documented too."""
    import os

    from jstall.analyzer import figures, recommend
    from jstall.analyzer.causes import REGISTRY
    from jstall.probes.syscalls import GROUPS, parse_calls

    doc = open(os.path.join(os.path.dirname(__file__), "..", "docs", "analysis.md")).read()
    for c in REGISTRY:
        assert f"  {c.name} " in analyze_cmd.DESCRIPTION and f"`{c.name}`" in doc, c.name
        assert figures.CAUSE_COLORS[c.name] == c.colour
    kinds = {"lost_events", "no_stalls", "journal_size", "inode_size", "external_journal", "fast_commit",
             *recommend.GENERIC_CAUSES}
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
