"""The fleet HTML report: rankings, fleet-wide latency distributions, every session's row.
(Figures here only draw; the tables come from :class:`~jstall.analyzer.multi.fleet.Fleet`.)"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from jstall.analyzer.stalls.causes import CAUSES
from jstall.analyzer.render.figures import CAUSE_COLORS
from jstall.analyzer.render.report import html_table, figure_div, html_page, headline

if TYPE_CHECKING:
    import plotly.graph_objects as go


def stall_time_by_host(fleet, top: int = 30) -> go.Figure:
    """Stacked bars: stall time per cause for the ``top`` worst hosts."""
    import plotly.graph_objects as go


    h = fleet.hosts().head(top)
    fig = go.Figure()
    for c in CAUSES:
        if len(h) and h[f"{c}_ms"].sum() > 0:
            fig.add_trace(go.Bar(x=h["host"].astype("str"), y=h[f"{c}_ms"] / 1000.0, name=c,
                                 marker_color=CAUSE_COLORS.get(c)))
    fig.update_layout(barmode="stack", title=f"stall time by cause, worst {len(h)} hosts", yaxis_title="s",
                      height=420, margin=dict(l=60, r=20, t=50, b=80))
    return fig


def latency_distributions(fleet) -> go.Figure:
    """Fleet-wide calls per log2 latency bucket, one line per call type (exact counts)."""
    import plotly.graph_objects as go

    h = fleet.histograms()
    fig = go.Figure()
    for name, d in h.groupby("syscall"):
        fig.add_trace(go.Scatter(x=d["low_ns"].clip(lower=1) / 1e6, y=d["count"], mode="lines+markers", name=name,
                                 line_shape="hv"))
    fig.update_xaxes(type="log", title_text="latency ms (bucket start)")
    fig.update_yaxes(type="log", title_text="calls")
    fig.update_layout(title="latency distribution per call over the fleet", height=420,
                      margin=dict(l=60, r=20, t=50, b=40))
    return fig


def fleet_report(fleet, top: int = 50) -> str:
    """The fleet report as one self-contained HTML page."""

    f = fleet
    d_st = sum(s["analysis"]["stalls"]["count"] for s in f.ok)
    d_ms = sum(s["analysis"]["stalls"]["total_ms"] for s in f.ok)
    hosts = f.hosts()
    fsys = f.filesystems()
    worst = hosts.iloc[0] if len(hosts) and hosts.iloc[0]["stall_ms"] > 0 else None
    parts = ["<h1>jstall fleet report</h1>", headline([
        ("sessions", f"{len(f.summaries)}", f"{len(f.errors)} failed to load"),
        ("hosts", f"{len(hosts)}", f"{len(fsys)} filesystems"),
        ("stalls", f"{d_st}", f"{d_ms / 1000:.1f} s in all"),
        ("worst host", html.escape(str(worst["host"])) if worst is not None else "-",
         f"{worst['stall_ms'] / 1000:.1f} s, {worst['dominant_cause']}" if worst is not None else "no stall"),
    ])]
    parts.append("<h2>Worst hosts</h2>" + figure_div(stall_time_by_host(f), "fleet-hosts"))
    cols = ["host", "sessions", "stalls", "stall_ms", "stall_ms_per_hour", "max_stall_ms", "forced_checkpoints",
            "headroom_low_blocks", "dominant_cause"]
    parts.append(html_table(hosts[cols].head(top).fillna({"dominant_cause": "-"})) if len(hosts) else "<p>none</p>")
    parts.append("<h2>Worst filesystems</h2>")
    cols = ["host", "dev", "mountpoint", "journal_mib", "inode_size", "sessions", "stalls", "stall_ms",
            "forced_checkpoints", "headroom_low_blocks", "dominant_cause"]
    parts.append(html_table(fsys[cols].head(top).fillna({"dominant_cause": "-"})) if len(fsys) else "<p>none</p>")
    ws = f.writers()
    if len(ws):
        parts.append("<h2>Who fills the journals</h2><p>cgroups by their share of what the fleet's journals "
                     "logged (ext4: blocks, XFS: log bytes), with the hosts they ran on and their processes' "
                     "stall time.</p>")
        parts.append(html_table(ws.head(top).assign(hosts=ws["hosts"].head(top).map(", ".join))))
    parts.append("<h2>Latency per call over the fleet</h2>" + figure_div(latency_distributions(f), "fleet-latency"))
    dist = f.distributions()
    if len(dist):
        parts.append("<p>Counts are exact (the sessions' log2 histograms added); p50 and p99 are the upper "
                     "bound of the bucket that holds the rank.</p>" + html_table(dist, floatfmt="{:.3f}"))
    if len(f.errors):
        parts.append(f"<h2>Sessions that failed to load ({len(f.errors)})</h2>" + html_table(f.errors))
    if len(f.rows):
        cols = ["session", "host", "dev", "kernel", "journal_mib", "inode_size", "duration_s", "calls", "stalls",
                "stall_ms", "dominant_cause", "headroom_low_blocks", "forced_checkpoints", "top_recommendation",
                "top_recommendation_summary"]
        rows = f.rows[cols].assign(dominant_cause=f.rows["dominant_cause"].fillna("-"),
                                   top_recommendation=f.rows["top_recommendation"].fillna("-"))
        parts.append(f"<h2>Sessions and journals ({len(f.rows)}, worst first)</h2>" + html_table(rows))
    return html_page("jstall fleet", "\n".join(parts))
