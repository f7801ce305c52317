"""Self-contained HTML reports that open in a browser in seconds, whatever the session length.

- plotly.js is inlined once, gzip-compressed (about 1.9 MB instead of 4.8 MB) and unpacked
  by the browser (``DecompressionStream``); nothing is fetched, the file works offline.
- every figure is a ``<div>`` and its JSON (``<script type="application/json"
  data-figure=ID>``, numbers as typed arrays); one loader draws them in order once plotly.js is
  in, then marks ``<body data-rendered="true" data-render-ms=...>``.  Figures keep to a size
  budget (figures.py: decimation that keeps peaks and stalls, WebGL for long timelines).
- the page starts with headline figures; tables wrap to fit a 1,400-pixel window.
"""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING

from jstall.analyzer.advice import curve
from jstall.analyzer.render import figures
from jstall.jbd2 import headroom_low
from jstall.analyzer.render.text import session_summary

if TYPE_CHECKING:
    from collections.abc import Iterable

    import pandas as pd
    import plotly.graph_objects as go

    from jstall.analyzer.analysis import Analysis

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1340px;padding:0 16px;
color:#222}
h1{font-size:1.5em} h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
pre{background:#f6f8fa;padding:12px;overflow-x:auto;font-size:12px;max-width:100%}
table{border-collapse:collapse;font-size:13px;margin:8px 0;display:block;max-width:100%;overflow-x:auto}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:right} th{background:#f0f0f0;font-weight:600}
td:first-child,th:first-child{text-align:left} td.t{text-align:left;white-space:normal;overflow-wrap:anywhere;
min-width:8em;max-width:36em}
.warn{color:#a00} .rec{margin:6px 0} .kind{font-weight:bold} .est{color:#a60}
.head{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0 8px}
.card{border:1px solid #ddd;border-radius:6px;padding:8px 14px;min-width:150px;max-width:420px;background:#fafafa}
.card .k{font-size:12px;color:#666} .card .v{font-size:22px;font-weight:600} .card .n{font-size:12px;color:#444}
.figure{width:100%}
"""

#: Draws every figure once plotly.js is unpacked; records the render time and any error.
_LOADER = """
(function(){
  var errors = 0, t0 = performance.now(), body = document.body;
  window.addEventListener('error', function(){ errors++; body.dataset.errors = String(errors); });
  function unpack(){
    var b = atob(document.getElementById('plotly-js-gz').textContent.trim());
    var u = new Uint8Array(b.length);
    for (var i = 0; i < b.length; i++) u[i] = b.charCodeAt(i);
    var ds = new Blob([u]).stream().pipeThrough(new DecompressionStream('gzip'));
    return new Response(ds).text();
  }
  unpack().then(function(js){
    var s = document.createElement('script'); s.text = js; document.head.appendChild(s);
    var figs = document.querySelectorAll('script[type="application/json"][data-figure]');
    var p = Promise.resolve();
    figs.forEach(function(el){
      p = p.then(function(){
        var f = JSON.parse(el.textContent);
        return Plotly.newPlot(document.getElementById(el.dataset.figure), f.data, f.layout || {}, f.config || {});
      });
    });
    return p;
  }).then(function(){
    body.dataset.renderMs = String(Math.round(performance.now() - t0));
    body.dataset.scrollWidth = String(document.documentElement.scrollWidth);
    body.dataset.rendered = 'true';
  }).catch(function(e){
    errors++; body.dataset.errors = String(errors); body.dataset.rendered = 'error: ' + e;
    console.error('jstall report: ' + e);
  });
})();
"""

_PLOTLY_GZ = {}


def _plotly_gz_b64():
    """plotly.js, gzip-compressed and base64-encoded (computed once per process)."""
    if "v" not in _PLOTLY_GZ:
        import base64
        import gzip

        from plotly.offline import get_plotlyjs

        _PLOTLY_GZ["v"] = base64.b64encode(gzip.compress(get_plotlyjs().encode("utf-8"), 9, mtime=0)).decode("ascii")
    return _PLOTLY_GZ["v"]


def html_page(title: str, body: str) -> str:
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width\"><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head>"
            f"<body>\n{body}\n"
            f"<script id=\"plotly-js-gz\" type=\"application/octet-stream\">{_plotly_gz_b64()}</script>\n"
            f"<script>{_LOADER}</script>\n</body></html>\n")


def figure_div(fig: go.Figure, div_id: str) -> str:
    """A figure as a div and its JSON (drawn by the page's loader)."""
    from plotly.io import to_json

    fig.update_layout(autosize=True)
    data = to_json(fig, validate=False, remove_uids=True).replace("</", "<\\/")
    config = '{"displaylogo": false, "responsive": true}'
    data = data[:-1] + f', "config": {config}}}' if data.endswith("}") else data
    return (f'<div id="{html.escape(div_id)}" class="figure"></div>'
            f'<script type="application/json" data-figure="{html.escape(div_id)}">{data}</script>')


def _header(c):
    """Column names wrap after underscores (units stay in the names)."""
    return html.escape(str(c)).replace("_", "_<wbr>")


def html_table(df: pd.DataFrame, floatfmt: str = "{:.2f}", wrap: bool = False) -> str:
    """A DataFrame as an HTML table (numbers formatted, text escaped; text cells wrap)."""
    def cell(v):
        if isinstance(v, float):
            return "<td></td>" if math.isnan(v) else f"<td>{floatfmt.format(v)}</td>"
        if v is None:
            return "<td></td>"
        text = html.escape(str(v))
        if isinstance(v, str) and (wrap or len(v) > 24):
            return f'<td class="t">{text}</td>'
        return f"<td>{text}</td>"

    head = "".join(f"<th>{_header(c)}</th>" for c in df.columns)
    rows = "".join("<tr>" + "".join(cell(v) for v in r) + "</tr>" for r in df.itertuples(index=False, name=None))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def headline(items: Iterable[tuple[str, str, str]]) -> str:
    """Headline figures as cards: ``items`` of (label, value, note); value and note are
    HTML-safe text."""
    cards = "".join(f'<div class="card"><div class="k">{html.escape(k)}</div><div class="v">{v}</div>'
                    f'<div class="n">{n}</div></div>' for k, v, n in items)
    return f'<div class="head">{cards}</div>'


def _recs(recs):
    """Recommendations (recommend.Recommendation) as HTML lines."""
    out = []
    for r in recs:
        est = ' <span class="est">(estimate)</span>' if r.estimate else ""
        out.append(f'<div class="rec"><span class="kind">{html.escape(r.kind)}</span>{est}: '
                   f'{html.escape(r.text)}</div>')
    return "\n".join(out)


def session_headline(analysis: Analysis) -> str:
    """The headline cards of one session's analysis (its summary): stall count and time,
    dominant cause, worst call, headroom low, the first recommendation."""
    su = analysis.summary
    st = su.stalls
    items = [("stalls", f"{st.count}", f"{st.total_ms / 1000:.2f} s in all (calls &ge; {su.min_ms:g} ms)")]
    dom = st.dominant()
    if dom and st.by_cause[dom].total_ms > 0:
        ms = st.by_cause[dom].total_ms
        pct = 100.0 * ms / st.total_ms if st.total_ms else 0.0
        items.append(("dominant cause", html.escape(dom), f"{ms / 1000:.2f} s, {pct:.0f}% of stall time"))
    else:
        items.append(("dominant cause", "-", "no stall time off CPU"))
    worst = analysis.top_stalls(1)
    if worst:
        w = worst[0]
        items.append(("worst call", f"{w.latency_ms:.0f} ms",
                      html.escape(f"{w.syscall} by {w.comm} ({w.pid}), {w.cause}")))
    lows = [(headroom_low(j.to_dict()), j) for j in su.journals]
    lows = [(b, p, j) for (b, p), j in lows if b is not None]
    if lows:
        b, p, j = min(lows, key=lambda x: x[0])
        note = f"{j.dev}: " + ("reached the forced-checkpoint level" if b < 0 else "above the forced level")
        if p is not None:
            note += f", {p:.1f} points of the log"
        items.append(("headroom low", f"{b:.0f} blocks", html.escape(note)))
    recs = analysis.recommendations
    if recs:
        r = recs[0]
        text = r.text if len(r.text) <= 160 else r.text[:157] + "..."
        items.append(("first recommendation", html.escape(r.kind), html.escape(text)))
    return headline(items)


def session_report(analysis: Analysis) -> str:
    """The HTML report of one session analysis."""
    a = analysis
    parts = [f"<h1>jstall report: {html.escape(a.session.name)}</h1>", session_headline(a)]
    for w in a.summary.warnings:
        parts.append(f'<p class="warn">WARNING: {html.escape(w)}</p>')
    parts.append("<h2>Diagnosis</h2>" + _recs(a.recommendations))
    sc = curve.curves(a.recommendations)
    if len(sc):
        parts.append("<h2>Predicted by journal (or log) size</h2>"
                     + figure_div(figures.size_curve(sc), "size-curve"))
    devs = list(a.journals["dev"]) if len(a.journals) else [None]
    with_stalls = [x for x in devs if x is not None and (a.stalls["dev"].astype("str") == x).any()]
    for i, dev in enumerate(with_stalls or devs[:1]):
        parts.append(f"<h2>Timeline{': ' + html.escape(dev) if dev else ''}</h2>")
        parts.append(figure_div(figures.timeline(a, dev), f"timeline-{i}"))
    parts.append("<h2>Stall time by cause</h2>" + figure_div(figures.causes(a), "causes"))
    parts.append("<h2>Latency per call</h2>" + figure_div(figures.latency(a), "latency"))
    if len(a.transactions):
        parts.append("<h2>Transactions</h2>" + figure_div(figures.transactions(a), "transactions"))
    if len(a.session.device_stats):
        title = "Emulated device" if a.session.meta.get("lab") else "Block devices"
        parts.append(f"<h2>{title}: requests served and utilisation</h2>"
                     + figure_div(figures.device_served(a), "device"))
    cols = ["dev", "journal_mib", "transactions", "avg_handles_per_transaction", "avg_blocks_per_transaction",
            "avg_logged_blocks_per_transaction", "avg_running_ms", "avg_locked_ms", "avg_flushing_ms",
            "avg_logging_ms", "log_rate_blocks_per_s", "forced_checkpoints", "background_checkpoints",
            "forced_checkpoint_written_blocks", "max_fill_pct", "forced_fill_pct", "time_at_forced_level_s"]
    if len(a.journals):
        parts.append("<h2>Journals</h2>" + html_table(a.journals[[c for c in cols if c in a.journals]]))
    if len(a.proc):
        parts.append("<h3>Agreement with /proc/fs/jbd2</h3>" + html_table(a.proc))
    if len(a.stalls):
        top = a.stalls.sort_values("latency_ms", ascending=False).head(50)
        t0 = a.session.start_ns or 0
        top = top.assign(t_s=(top["ts_ns"] - t0) / 1e9)
        parts.append("<h2>Slowest stalls</h2>" + html_table(top[[
            "t_s", "comm", "pid", "syscall", "latency_ms", "dev", "cause", "cause_label", "offcpu_ms",
            "fill_start_pct", "fill_max_pct", "own_checkpoint"]].astype({"cause": "str"})))
    parts.append("<h2>Summary</h2><pre>" + html.escape(session_summary(a)) + "</pre>")
    return html_page(f"jstall: {a.session.name}", "\n".join(parts))


def sweep_report(sweep) -> str:
    """The HTML report of a sweep analysis (:class:`~jstall.analyzer.multi.sweep.Sweep`)."""
    parts = [f"<h1>jstall sweep report: {html.escape(sweep.name)}</h1>"]
    for w in sweep.warnings:
        parts.append(f'<p class="warn">WARNING: {html.escape(w)}</p>')
    parts.append(f"<p>{len(sweep.runs)} runs; swept options: {html.escape(', '.join(sweep.options) or 'none')}.</p>")
    n = 0
    for option in sweep.options or ["config"]:
        per = sweep.by_option(option)
        others = [o for o in sweep.options if o != option]
        group = others[0] if others else None
        parts.append(f"<h2>By {html.escape(option)}</h2>")
        for value, label in (("stalls_mean", "stalls per run"), ("stall_ms_mean", "stall ms per run"),
                             ("forced_checkpoints_mean", "forced checkpoints per run")):
            if value in per:
                parts.append(figure_div(figures.sweep_option(per, option, value, value.replace("_mean", "_sd"),
                                                             title=f"{label} by {option}", ylabel=label, group=group),
                                        f"sweep-{n}"))
                n += 1
        for phase in sweep.phases:
            col = f"{phase}_rate_mean"
            if col in per:
                fig = figures.sweep_option(per, option, col, f"{phase}_rate_sd", title=f"{phase} rate by {option}",
                                           ylabel=sweep.rate_unit(phase), group=group)
                parts.append(figure_div(fig, f"sweep-{n}"))
                n += 1
    parts.append("<h2>Tables</h2><pre>" + html.escape(sweep.text()) + "</pre>")
    return html_page(f"jstall sweep: {sweep.name}", "\n".join(parts))
