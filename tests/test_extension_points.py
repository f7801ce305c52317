"""The analyzer's extension points: a stall cause is one registry entry, a recommendation is one
rule function.  Each test adds one at run time and follows it to the stall table, the text
summary, the JSON document, the figures' colours and ``jstall analyze --help``, with no other
edit."""

import json

import pandas as pd
import pytest

from jstall.analyzer import analyze
from jstall.analyzer.commands import analyze_cmd
from jstall.analyzer.stalls import causes
from jstall.analyzer.render import figures
from jstall.analyzer.advice import recommend
from jstall.analyzer.render.report import session_headline
from jstall.analyzer.render.text import session_summary

from test_analyzer import MS, S, STACKS, _session, call, off

#: A made-up cause: a wait inside a made-up kernel function.
NEW = causes.Cause("xattr_lock", ("ext4_xattr_lock_wait",), 2, "#123456",
                   "waiting for a test lock on a file's extended attributes (ext4_xattr_lock_wait)",
                   "hold the test lock for less time")
NEW_STACK = ["__schedule", "schedule", "ext4_xattr_lock_wait", "ext4_xattr_set", "__vfs_setxattr"]


@pytest.fixture
def new_cause():
    causes.register(NEW)
    yield NEW
    causes.unregister(NEW.name)


def _two_stalls(tmp_path):
    """A 50 ms setxattr blocked 40 ms in the new cause's frame and a 20 ms one checkpointing
    for 15 ms (stack 1 of test_analyzer)."""
    a = call(1 * S, 50 * MS, 10)
    b = call(3 * S, 20 * MS, 11)
    stacks = pd.DataFrame({"stack_id": [1, 100], "frames": [STACKS[1][1], NEW_STACK]})
    return _session(tmp_path, calls=[a, b], offcpu=[off(a, a["ts_ns"] + MS, 40 * MS, 100),
                                                    off(b, b["ts_ns"] + MS, 15 * MS, 1)], stacks=stacks)


def test_a_registered_cause_flows_to_the_table_text_json_figures_and_help(tmp_path, new_cause):
    assert causes.classify_stack(NEW_STACK) == "xattr_lock"
    assert causes.CAUSES[-3:] == ["xattr_lock", "cpu", "other"]  # before cpu and other
    a = analyze(_two_stalls(tmp_path))
    st = a.stalls.set_index("tid")
    assert st.loc[10, "cause"] == "xattr_lock" and st.loc[10, "xattr_lock_ms"] == pytest.approx(40.0)
    assert st.loc[11, "cause"] == "checkpoint" and st.loc[11, "xattr_lock_ms"] == 0.0

    d = json.loads(json.dumps(a.to_dict(), allow_nan=False))
    assert d["stalls"]["by_cause"]["xattr_lock"] == {"count": 1, "total_ms": 40.0}
    assert d["stalls"]["top"][0]["cause"] == "xattr_lock"
    assert d["stalls"]["top"][0]["by_cause_ms"] == {"xattr_lock": 40.0}
    assert d["per_process"][0]["cause"] == "xattr_lock"
    advice = [r for r in d["recommendations"] if r["kind"] == "xattr_lock"]
    assert len(advice) == 1 and advice[0]["stall_ms_addressed"] == 40.0
    assert NEW.explanation in advice[0]["text"] and NEW.advice in advice[0]["text"]

    text = session_summary(a)
    row = next(line for line in text.splitlines() if line.startswith("xattr_lock "))
    assert row.split()[:3] == ["xattr_lock", "1", "40.0"]
    assert "- [xattr_lock] " in text and "dominant cause" in session_headline(a)
    assert ">xattr_lock<" in session_headline(a)  # the dominant cause card

    bars = figures.causes(a).data[0]
    colours = dict(zip(bars.x, bars.marker.color))
    assert colours["xattr_lock"] == "#123456" and colours["checkpoint"] == causes.BY_NAME["checkpoint"].colour
    drawn = [t for t in figures.timeline(a).data if t.name == "xattr_lock"]  # the stall's trace(s)
    assert drawn and {getattr(t, "line", None) and t.line.color or t.marker.color for t in drawn} == {"#123456"}

    assert "  xattr_lock " in analyze_cmd.description() and NEW.explanation[:40] in analyze_cmd.description()


def test_unregistering_restores_the_registry(tmp_path):
    before = list(causes.CAUSES)
    causes.register(NEW)
    with pytest.raises(ValueError, match="already registered"):
        causes.register(NEW)
    with pytest.raises(ValueError, match="ext4_xattr_lock_wait"):
        causes.register(causes.Cause("other_name", NEW.frames, 2, "#000000", "x", "y"))
    causes.unregister(NEW.name)
    assert causes.CAUSES == before and "ext4_xattr_lock_wait" not in causes.FRAME_CAUSES
    assert "xattr_lock" not in analyze_cmd.description()
    # without the cause, the frame is not known: the wait is "other", labelled by its frames
    a = analyze(_two_stalls(tmp_path))
    assert a.stalls.set_index("tid").loc[10, "cause"] == "other"
    assert "xattr_lock_ms" not in a.stalls.columns


def test_a_new_rule_is_ranked_and_shown_in_text_json_and_report(tmp_path, monkeypatch):
    def noatime(ctx):
        """A made-up rule: advise against the checkpoint stall time it finds."""
        ms = ctx.cause_ms("checkpoint")
        if ms <= 0:
            return []
        return [recommend.Recommendation("test_rule", f"{ms:.0f} ms of checkpoint stalls: a made-up change.",
                                         stall_ms_addressed=ms + 1000.0, inputs={"checkpoint_ms": ms})]

    monkeypatch.setattr(recommend, "RULES", recommend.RULES + (noatime,))
    a = analyze(_two_stalls(tmp_path))
    first = a.recommendations[0]  # ranked by the stall time it addresses
    assert (first.kind, first.inputs) == ("test_rule", {"checkpoint_ms": 15.0})
    d = a.to_dict()
    assert d["recommendations"][0] == {**first.to_dict(), "values": {"checkpoint_ms": 15.0}}
    assert d["recommendations"][0]["stall_ms_addressed"] == 1015.0
    assert "- [test_rule] 15 ms of checkpoint stalls: a made-up change." in session_summary(a)
    assert ">test_rule<" in session_headline(a)  # the first recommendation card
    monkeypatch.undo()
    assert "test_rule" not in [r.kind for r in analyze(a.session).recommendations]
