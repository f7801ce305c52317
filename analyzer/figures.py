"""Plotly figures of an analysis (computing stays in the other modules; these only draw).

Every function takes an :class:`~jstall.analyzer.analysis.Analysis` (or sweep tables) and
returns a ``plotly.graph_objects.Figure``.  Times on x axes are seconds since the session
start.
"""

from .causes import COLOURS
from .fill import asof

#: cause -> colour (the causes registry holds them).
CAUSE_COLORS = COLOURS
PHASE_COLORS = {"locked": "#c7c7c7", "flushing": "#98df8a", "logging": "#2ca02c"}

#: Above this many fill samples per journal the timeline keeps each bucket's fullest sample.
MAX_POINTS = 10_000


def _t0(analysis):
    s = analysis.session
    if s.start_ns is not None:
        return s.start_ns
    ts = [int(df["ts_ns"].min()) for df in (s.calls, s.jbd2_events, s.fill) if len(df)]
    return min(ts) if ts else 0


def _segments(x0, x1, y):
    """x/y arrays drawing one horizontal segment per row, separated by None (one trace)."""
    import numpy as np

    n = len(x0)
    xs = np.empty(3 * n, dtype=object)
    ys = np.empty(3 * n, dtype=object)
    xs[0::3], xs[1::3], xs[2::3] = x0, x1, None
    ys[0::3], ys[1::3], ys[2::3] = y, y, None
    return xs, ys


def _bands(x0, x1, y0, y1):
    """x/y arrays of filled rectangles separated by None (one ``fill='toself'`` trace)."""
    import numpy as np

    n = len(x0)
    xs = np.empty(6 * n, dtype=object)
    ys = np.empty(6 * n, dtype=object)
    xs[0::6], xs[1::6], xs[2::6], xs[3::6], xs[4::6], xs[5::6] = x0, x1, x1, x0, x0, None
    ys[0::6], ys[1::6], ys[2::6], ys[3::6], ys[4::6], ys[5::6] = y0, y0, y1, y1, y0, None
    return xs, ys


def _thin(tl):
    """Keep at most MAX_POINTS samples: the one with the least headroom per time bucket (lows survive)."""
    if len(tl) <= MAX_POINTS:
        return tl
    bucket = ((tl["ts_ns"] - tl["ts_ns"].min()) * MAX_POINTS // (tl["ts_ns"].max() - tl["ts_ns"].min() + 1))
    idx = tl.groupby(bucket)["headroom_pct"].idxmin()
    return tl.loc[idx.sort_values()]


def timeline(analysis, dev=None):
    """Stalled calls over the journal fill level, for one journal (default: the one with the
    most stall time, else the first).  Rows: fill % with the forced-checkpoint level and
    checkpoints; stalled calls as segments start..end at their latency, colored by cause;
    commit phases and forced checkpoints as bands."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    a = analysis
    t0 = _t0(a)
    j = a.journals
    if dev is None and len(j):
        dev = j.sort_values(["stall_ms", "transactions"], ascending=False).iloc[0]["dev"]
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.04, row_heights=[0.45, 0.4, 0.15],
                        subplot_titles=(f"log space left above one maximum transaction ({dev or 'no journal'})", "stalled calls (colored by cause)",
                                        "commit phases and checkpoints"))
    tl = a.timeline[a.timeline["dev"] == dev] if dev else a.timeline.iloc[:0]
    tl = _thin(tl)
    # headroom: jbd2_log_space_left() - j_max_transaction_buffers; below 0 handles must wait
    fig.add_trace(go.Scatter(x=(tl["ts_ns"] - t0) / 1e9, y=tl["headroom_pct"], mode="lines", line_shape="hv",
                             name="headroom %", line=dict(color="#1f77b4", width=1),
                             customdata=tl[["headroom_blocks", "fill_pct", "source"]].to_numpy(),
                             hovertemplate="%{x:.3f} s: headroom %{y:.1f}% (%{customdata[0]:.0f} blocks), "
                                           "%{customdata[1]:.1f}% full (%{customdata[2]})<extra></extra>"),
                  row=1, col=1)
    fig.add_hline(y=0, line=dict(color="#d62728", dash="dash"), row=1, col=1,
                  annotation_text="below 0: handles wait for log space (__jbd2_log_wait_for_space)",
                  annotation_position="bottom right")
    cp = a.checkpoints[a.checkpoints["dev"] == dev] if dev else a.checkpoints.iloc[:0]
    for forced, name, color, sym in ((True, "forced checkpoint", "#d62728", "triangle-down"),
                                     (False, "background checkpoint", "#7f7f7f", "circle-open")):
        c = cp[cp["forced"] == forced]
        if len(c):
            at = asof(tl, c.assign(dev=dev))["headroom_pct"].fillna(0.0) if len(tl) else c["ts_ns"] * 0.0
            fig.add_trace(go.Scatter(x=(c["ts_ns"] - t0) / 1e9, y=at, mode="markers",
                                     name=name, marker=dict(color=color, symbol=sym, size=7),
                                     customdata=c[["comm", "pid"]].to_numpy(),
                                     hovertemplate="%{x:.3f} s: " + name + " in %{customdata[0]} "
                                                   "(%{customdata[1]})<extra></extra>"), row=1, col=1)
    st = a.stalls[a.stalls["dev"].astype("str") == dev] if dev else a.stalls
    if dev is not None:
        st = a.stalls[(a.stalls["dev"].astype("str") == dev) | a.stalls["dev"].isna()]
    for cause, color in CAUSE_COLORS.items():
        s = st[st["cause"] == cause]
        if not len(s):
            continue
        x0, x1 = (s["ts_ns"] - t0) / 1e9, (s["end_ns"] - t0) / 1e9
        xs, ys = _segments(x0.to_numpy(), x1.to_numpy(), s["latency_ms"].to_numpy())
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line=dict(color=color, width=3), name=cause,
                                 legendgroup=cause, hoverinfo="skip"), row=2, col=1)
        fig.add_trace(go.Scatter(
            x=x0, y=s["latency_ms"], mode="markers", marker=dict(color=color, size=6), legendgroup=cause,
            showlegend=False, name=cause,
            customdata=s[["syscall", "comm", "pid", "headroom_start_pct", "min_headroom_pct", "cause_label"]].to_numpy(),
            hovertemplate="%{customdata[0]} by %{customdata[1]} (%{customdata[2]}): %{y:.1f} ms<br>"
                          "headroom %{customdata[3]:.1f}% at the start, low %{customdata[4]:.1f}%<br>%{customdata[5]}"
                          "<extra>" + cause + "</extra>"), row=2, col=1)
    ph = a.phases[a.phases["dev"] == dev] if dev else a.phases.iloc[:0]
    for phase, color in PHASE_COLORS.items():
        p = ph[ph["phase"] == phase]
        if len(p):
            xs, ys = _bands(((p["start_ns"] - t0) / 1e9).to_numpy(), ((p["end_ns"] - t0) / 1e9).to_numpy(), 0.0, 1.0)
            fig.add_trace(go.Scatter(x=xs, y=ys, fill="toself", mode="lines", line=dict(width=0), fillcolor=color,
                                     name=f"commit: {phase}", hoverinfo="skip"), row=3, col=1)
    own = st[st["own_checkpoint"]]
    if len(own):
        xs, ys = _bands(((own["ts_ns"] - t0) / 1e9).to_numpy(), ((own["end_ns"] - t0) / 1e9).to_numpy(), 1.2, 2.2)
        fig.add_trace(go.Scatter(x=xs, y=ys, fill="toself", mode="lines", line=dict(width=0),
                                 fillcolor="rgba(214,39,40,0.6)", name="call that checkpointed", hoverinfo="skip"),
                      row=3, col=1)
    fig.update_yaxes(title_text="headroom % of the log", row=1, col=1)
    fig.update_yaxes(title_text="latency ms", type="log", row=2, col=1)
    fig.update_yaxes(showticklabels=False, range=[-0.1, 2.3], row=3, col=1)
    fig.update_xaxes(title_text="seconds since the session start", row=3, col=1)
    fig.update_layout(height=760, margin=dict(l=60, r=20, t=40, b=40), legend=dict(orientation="h", y=-0.08))
    return fig


def latency(analysis):
    """Latency distribution per call: counts per log2 bucket (all traced calls)."""
    import plotly.graph_objects as go

    h = analysis.session.call_histograms
    fig = go.Figure()
    if len(h):
        g = h.groupby(["syscall", "bucket"], as_index=False).agg(low_ns=("low_ns", "min"), count=("count", "sum"))
        for name, d in g.groupby("syscall"):
            d = d[d["count"] > 0]
            fig.add_trace(go.Scatter(x=d["low_ns"] / 1e6, y=d["count"], mode="lines+markers", name=name,
                                     line_shape="hv"))
    else:
        c = analysis.session.calls
        for name, d in c.groupby("syscall"):
            fig.add_trace(go.Histogram(x=d["latency_ns"] / 1e6, name=name))
    fig.update_xaxes(type="log", title_text="latency ms (bucket start)")
    fig.update_yaxes(type="log", title_text="calls")
    fig.update_layout(title="latency distribution per call", height=420, margin=dict(l=60, r=20, t=50, b=40))
    return fig


def causes(analysis):
    """Stall time by cause (off-CPU ms inside stalls) with the stall count per primary cause."""
    import plotly.graph_objects as go

    c = analysis.causes.reset_index()
    fig = go.Figure(go.Bar(x=c["cause"], y=c["total_ms"], marker_color=[CAUSE_COLORS[k] for k in c["cause"]],
                           text=[f"{n} stalls" for n in c["count"]], textposition="outside",
                           hovertemplate="%{x}: %{y:.1f} ms<extra></extra>"))
    fig.update_layout(title="stall time by cause", yaxis_title="ms off CPU inside stalls", height=420,
                      margin=dict(l=60, r=20, t=50, b=40))
    return fig


def transactions(analysis):
    """Per transaction: blocks and logged blocks, and commit phase times (ms, stacked)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    t = analysis.transactions
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("blocks per transaction", "commit phase times per transaction"))
    for dev, d in t.groupby("dev"):
        fig.add_trace(go.Scatter(x=d["transaction"], y=d["blocks"], mode="markers", name=f"{dev} blocks"), row=1, col=1)
        fig.add_trace(go.Scatter(x=d["transaction"], y=d["blocks_logged"], mode="markers",
                                 name=f"{dev} logged blocks"), row=1, col=1)
        for p in ("locked", "flushing", "logging"):
            fig.add_trace(go.Bar(x=d["transaction"], y=d[f"{p}_ms"], name=f"{dev} {p}",
                                 marker_color=PHASE_COLORS[p]), row=2, col=1)
    fig.update_layout(barmode="stack", height=560, margin=dict(l=60, r=20, t=50, b=40))
    fig.update_xaxes(title_text="transaction id", row=2, col=1)
    fig.update_yaxes(title_text="blocks", row=1, col=1)
    fig.update_yaxes(title_text="ms", row=2, col=1)
    return fig


def sweep_option(table, option, value, error=None, title=None, ylabel=None, group=None):
    """One swept option on x, ``value`` on y (one line per ``group``), error bars from ``error``."""
    import plotly.graph_objects as go

    fig = go.Figure()
    groups = [(None, table)] if group is None else list(table.groupby(group, sort=True))
    for name, d in groups:
        d = d.sort_values("_order") if "_order" in d else d
        fig.add_trace(go.Scatter(x=d[option].astype("str"), y=d[value], mode="lines+markers",
                                 name=str(name if name is not None else value),
                                 error_y=dict(type="data", array=d[error]) if error else None))
    fig.update_layout(title=title or f"{value} by {option}", xaxis_title=option, yaxis_title=ylabel or value,
                      height=380, margin=dict(l=60, r=20, t=50, b=40))
    return fig


def device_served(analysis):
    """What each emulated device of a lab run served (the session's device_stats): requests
    per second -- writes and reads as the throttle counts them (completed + merged), cache
    flushes -- with the profile's IOPS limits dashed, and phase boundaries shaded. Empty for
    a session without the table."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    ds = analysis.session.device_stats
    lab = analysis.session.meta.get("lab") or {}
    roles = list(dict.fromkeys(ds["role"])) if len(ds) else []
    fig = make_subplots(rows=max(1, len(roles)), cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=[f"{r} device ({d})" for r, d in
                                        ds[["role", "dev"]].drop_duplicates().itertuples(index=False)] or None)
    t0 = _t0(analysis)
    limits = {"data": (lab.get("config") or {}).get("data_limits") or {},
              "journal": (lab.get("config") or {}).get("journal_limits") or {}}
    colors = {"writes": "#d62728", "reads": "#1f77b4", "flushes": "#7f7f7f"}
    for i, role in enumerate(roles, 1):
        d = ds[ds["role"] == role]
        x = (d["ts_ns"] - t0) / 1e9
        secs = d["interval_ns"] / 1e9
        series = {"writes": (d["write_ios"] + d["write_merges"]) / secs,
                  "reads": (d["read_ios"] + d["read_merges"]) / secs, "flushes": d["flush_ios"] / secs}
        for name, y in series.items():
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines", line_shape="hv", name=f"{role} {name}/s",
                                     line=dict(color=colors[name])), row=i, col=1)
        for kind, name in (("write_iops", "writes"), ("read_iops", "reads")):
            lim = limits.get(role, {}).get(kind)
            if lim:
                fig.add_hline(y=lim, line_dash="dash", line_color=colors[name], row=i, col=1,
                              annotation_text=f"{kind} {lim:,}", annotation_position="top left")
        fig.update_yaxes(title_text="requests/s", row=i, col=1)
    for p in lab.get("phases") or []:
        fig.add_vrect(x0=(p["start_ns"] - t0) / 1e9, x1=(p["end_ns"] - t0) / 1e9, fillcolor="#2ca02c", opacity=0.06,
                      line_width=0, annotation_text=p["name"], annotation_position="top left")
    fig.update_layout(height=260 + 200 * max(1, len(roles)), margin=dict(l=60, r=20, t=50, b=40))
    fig.update_xaxes(title_text="seconds since the session start", row=max(1, len(roles)), col=1)
    return fig
