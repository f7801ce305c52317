"""The comparison HTML report: the verdict first, A against B per cause, call, phase and
journal figure, then both sessions' timelines.  (Figures here only draw.)"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from jstall.analyzer.render import figures
from jstall.analyzer.render.report import figure_div, headline, html_page, html_table, session_headline

if TYPE_CHECKING:
    import plotly.graph_objects as go


def causes_side_by_side(comparison) -> go.Figure:
    """Grouped bars: stall time (s off CPU inside stalls) per cause, A and B."""
    import plotly.graph_objects as go

    c = comparison.causes()
    c = c[(c["ms_a"] > 0) | (c["ms_b"] > 0)]
    A, B = comparison.names
    fig = go.Figure([go.Bar(x=c["cause"], y=c["ms_a"] / 1000.0, name=A, marker_color="#d62728",
                            text=[f"{n} stalls" for n in c["stalls_a"]]),
                     go.Bar(x=c["cause"], y=c["ms_b"] / 1000.0, name=B, marker_color="#2ca02c",
                            text=[f"{n} stalls" for n in c["stalls_b"]])])
    fig.update_layout(barmode="group", title="stall time by cause", yaxis_title="s off CPU inside stalls",
                      height=380, margin=dict(l=60, r=20, t=50, b=40))
    return fig


def latency_side_by_side(comparison) -> go.Figure:
    """p99 and max latency per call type, A and B (log scale)."""
    import plotly.graph_objects as go

    c = comparison.calls()
    A, B = comparison.names
    fig = go.Figure()
    for key, dash in (("p99_ms", None), ("max_ms", "dot")):
        for side, color in (("a", "#d62728"), ("b", "#2ca02c")):
            fig.add_trace(go.Scatter(x=c["syscall"], y=c[f"{key}_{side}"], mode="markers+lines",
                                     name=f"{A if side == 'a' else B} {key[:-3]}",
                                     line=dict(color=color, dash=dash)))
    fig.update_yaxes(type="log", title_text="ms")
    fig.update_layout(title="latency per call: p99 and max", height=380, margin=dict(l=60, r=20, t=50, b=40))
    return fig


def phases_side_by_side(comparison) -> go.Figure:
    """Lab phase times, A and B (durable seconds when both have them)."""
    import plotly.graph_objects as go

    p = comparison.phases()
    A, B = comparison.names
    label = [f"{r['phase']} ({r['basis']})" for _, r in p.iterrows()]
    fig = go.Figure([go.Bar(x=label, y=p["seconds_a"], name=A, marker_color="#d62728"),
                     go.Bar(x=label, y=p["seconds_b"], name=B, marker_color="#2ca02c")])
    fig.update_layout(barmode="group", title="lab phase times", yaxis_title="s", height=360,
                      margin=dict(l=60, r=20, t=50, b=40))
    return fig


def compare_report(comparison) -> str:
    """The comparison as one self-contained HTML page."""
    c = comparison
    A, B = c.names
    sa, sb = c.sa.stalls, c.sb.stalls
    parts = [f"<h1>jstall compare: {html.escape(c.a.session.name)} ({A}) and "
             f"{html.escape(c.b.session.name)} ({B})</h1>",
             f'<p class="verdict"><b>{html.escape(c.verdict())}</b></p>',
             headline([("stalls", f"{sa.count} &rarr; {sb.count}",
                        f"{sa.total_ms / 1000:.2f} s &rarr; {sb.total_ms / 1000:.2f} s"),
                       ("worst stall", f"{sa.max_ms:.0f} &rarr; {sb.max_ms:.0f} ms", ""),
                       ("checkpointed in own task", f"{sa.own_checkpoint} &rarr; {sb.own_checkpoint}", "")])]
    ch = c.config_changes()
    if ch:
        parts.append("<p>Lab options that differ: " + html.escape(", ".join(f"{k} {x} → {y}" for k, x, y in ch))
                     + "</p>")
    parts.append("<h2>Stalls</h2>" + html_table(c.stalls().rename(columns={"a": A, "b": B})))
    parts.append(figure_div(causes_side_by_side(c), "compare-causes"))
    ph = c.phases()
    if len(ph):
        parts.append("<h2>Lab phases</h2>" + figure_div(phases_side_by_side(c), "compare-phases")
                     + html_table(ph, floatfmt="{:.3f}"))
    parts.append("<h2>Latency per call</h2>" + figure_div(latency_side_by_side(c), "compare-latency")
                 + html_table(c.calls(), floatfmt="{:.3f}"))
    parts.append("<h2>Journals</h2>" + html_table(c.journals().rename(columns={"a": A, "b": B})))
    for side, an in ((A, c.a), (B, c.b)):
        parts.append(f"<h2>{side}: {html.escape(an.session.name)}</h2>" + session_headline(an))
        parts.append(figure_div(figures.timeline(an), f"timeline-{side}"))
    return html_page(f"jstall compare: {c.a.session.name} and {c.b.session.name}", "\n".join(parts))
