"""The HTML report: self-contained, and it renders in headless Chromium without errors."""

import argparse
import os
import re
import shutil
import subprocess
import tempfile

import pytest

from jstall.analyzer import report_cmd

from test_analyzer import MS, S, call, fsample, jev, off, run_stat, stacks_df, _session  # noqa: F401
from test_analyzer_sweep import make_sweep

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def classic_session(tmp_path):
    calls, offs, evs, fills, txns = [], [], [], [], []
    for i in range(30):
        t = S + i * 150 * MS
        c = call(t, (40 + 10 * (i % 5)) * MS, 100 + i % 3)
        calls.append(c)
        offs.append(off(c, t + MS, 30 * MS, 1 if i % 4 else 4))
        if i % 4:
            evs.append(jev(t + MS, "checkpoint", c["tid"], result=0, free=200))
        fills.append(fsample(t, 1000 - 25 * i))
        txns.append(run_stat(t + 50 * MS, i, handles=50, blocks=60, logged=64, logging=3, locked=1))
        for k, e in enumerate(("start_commit", "commit_locking", "commit_flushing", "commit_logging", "end_commit")):
            evs.append(jev(t + (50 + 2 * k) * MS, e, 9, jbd2_thread=True, transaction=i, free=900))
    hist = [{"syscall": "setxattr", "dev": "7:0", "bucket": b, "low_ns": 2**b, "high_ns": 2**(b + 1), "count": n}
            for b, n in ((12, 500), (13, 300), (25, 30))]
    return _session(tmp_path, calls=calls, offcpu=offs, jbd2_events=evs, fill=fills, run_stats=txns,
                    stacks=stacks_df(), call_histograms=hist)


def write_report(path, out):
    p = argparse.ArgumentParser()
    report_cmd.add_arguments(p)
    assert report_cmd.run(p.parse_args([path, "-o", out])) == 0
    return open(out, encoding="utf-8").read()


def render(html_path):
    """Load the page in headless Chromium; return (dom, console lines)."""
    with tempfile.TemporaryDirectory() as profile:
        r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                            "--no-first-run", "--disable-background-networking", "--disable-component-update",
                            "--disable-sync", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
                            "--virtual-time-budget=10000", "--dump-dom", "file://" + os.path.abspath(html_path)],
                           capture_output=True, text=True, timeout=120)
    console = [ln for ln in r.stderr.splitlines() if ":CONSOLE" in ln]
    return r.stdout, console


def check_page(html, n_figures):
    from plotly.offline import get_plotlyjs

    js = get_plotlyjs()
    assert html.count(js) == 1  # plotly.js inlined once
    rest = html.replace(js, "")
    assert "<script src=" not in rest and not re.search(r"https?://", rest)  # nothing fetched
    assert rest.count("Plotly.newPlot(") == n_figures


needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium is not installed")


@needs_chromium
def test_session_report_renders(tmp_path):
    s = classic_session(tmp_path)
    out = str(tmp_path / "report.html")
    html = write_report(s.path, out)
    check_page(html, 4)
    assert "below 0: handles wait for log space" in html and "journal_size" in html
    dom, console = render(out)
    assert console == [], console
    assert len(re.findall(r'class="[^"]*js-plotly-plot', dom)) == 4  # every figure was drawn
    assert dom.count("class=\"main-svg\"") >= 4
    # the timeline holds the stalled calls (colored by cause) and the forced level
    assert "checkpoint" in dom and "metadata_io" in dom


@needs_chromium
def test_sweep_report_renders(tmp_path):
    root = make_sweep(str(tmp_path / "sw"))
    out = str(tmp_path / "sweep.html")
    html = write_report(root, out)
    n = html.count("Plotly.newPlot(")
    assert n >= 4
    dom, console = render(out)
    assert console == [], console
    assert len(re.findall(r'class="[^"]*js-plotly-plot', dom)) == n


def test_report_refuses_missing_session_and_bad_output(tmp_path):
    from jstall.errors import JstallError

    p = argparse.ArgumentParser()
    report_cmd.add_arguments(p)
    with pytest.raises(JstallError, match="no such session directory"):
        report_cmd.run(p.parse_args([str(tmp_path / "nope"), "-o", str(tmp_path / "r.html")]))
    s = classic_session(tmp_path)
    with pytest.raises(JstallError, match="no such directory for -o"):
        report_cmd.run(p.parse_args([s.path, "-o", str(tmp_path / "no" / "r.html")]))


def test_timeline_thinning_keeps_the_lows():
    import numpy as np
    import pandas as pd

    from jstall.analyzer import figures

    n = 50_000
    rng = np.random.default_rng(3)
    tl = pd.DataFrame({"ts_ns": np.arange(n) * 1000, "headroom_pct": rng.random(n) * 50})
    tl.loc[12_345, "headroom_pct"] = -9.0
    thin = figures._thin(tl)
    assert len(thin) <= figures.MAX_POINTS and thin["headroom_pct"].min() == -9.0
    assert thin["ts_ns"].is_monotonic_increasing
