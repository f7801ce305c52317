"""The analysis' view model (analyzer/summary.py): the text summary, the HTML report, compare and
sweep read it and the tables, never the JSON document, and ``to_dict()`` serializes it."""

import dataclasses

import pytest

from jstall.analyzer import analyze, analyze_sweep
from jstall.analyzer.analysis import Analysis
from jstall.analyzer.stalls.causes import CAUSES
from jstall.analyzer.multi.compare import compare
from jstall.analyzer.render.report import session_headline
from jstall.analyzer.render.text import session_summary

from test_analyzer_sweep import make_sweep
from test_report import classic_session


def test_summary_holds_the_documents_figures(tmp_path):
    a = analyze(classic_session(tmp_path))
    su = a.summary
    assert a.summary is su  # computed once
    with pytest.raises(dataclasses.FrozenInstanceError):
        su.stalls.count = 0
    d = a.to_dict(top=3)
    assert d["stalls"]["count"] == su.stalls.count == len(a.stalls) == 30
    assert d["stalls"]["by_cause"] == {c: {"count": su.stalls.by_cause[c].count,
                                           "total_ms": su.stalls.by_cause[c].total_ms} for c in CAUSES}
    assert su.stalls.dominant() == max(CAUSES, key=lambda c: float(a.stalls[f"{c}_ms"].sum()))
    assert d["journals"] == [j.to_dict() for j in su.journals]
    assert su.journals[0].transactions == 30 and su.journals[0].avg_phase_ms["logging"] == 12.0  # 3 jiffies
    assert d["calls"] == {c.syscall: c.to_dict() for c in su.calls}
    assert d["session"] == su.session.to_dict() and d["session"]["path"] == a.session.path
    top = a.top_stalls(3)
    assert [t.to_dict() for t in top] == d["stalls"]["top"]
    assert [t.latency_ms for t in top] == sorted(a.stalls["latency_ms"], reverse=True)[:3]


def test_text_report_compare_and_sweep_never_read_the_json(tmp_path, monkeypatch):
    s = classic_session(tmp_path)
    sweep_dir = str(tmp_path / "sweep")
    make_sweep(sweep_dir)

    def refuse(self, top=20):
        raise AssertionError("to_dict() is for serialization only")

    monkeypatch.setattr(Analysis, "to_dict", refuse)
    a = analyze(s)
    text = session_summary(a)
    assert "30 stalls (calls >= 10 ms)" in text and "checkpoint" in text
    assert ">30<" in session_headline(a)
    c = compare(a, analyze(s))
    assert "stalls 30 -> 30" in c.verdict() and c.to_dict()["a"]["session"]["path"] == s.path
    sw = analyze_sweep(sweep_dir)
    assert len(sw.runs) == 8 and sw.to_dict()["kind"] == "sweep"
