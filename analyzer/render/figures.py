"""Plotly figures of an analysis (computing stays in the other modules; these only draw).

Every function takes an :class:`~jstall.analyzer.analysis.Analysis` (or sweep tables) and
returns a ``plotly.graph_objects.Figure``.  Times on x axes are seconds since the session
start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from jstall.analyzer.stalls.causes import CAUSES, COLOURS
from jstall.analyzer.jbd2.fill import asof

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from jstall.analyzer.analysis import Analysis

#: cause -> colour (the causes registry holds them).
CAUSE_COLORS = COLOURS
PHASE_COLORS = {"locked": "#c7c7c7", "flushing": "#98df8a", "logging": "#2ca02c"}

# Size budget: what a figure draws is bounded whatever the session length, so a report stays
# a few MB and opens in seconds.  Long series are drawn with WebGL (scattergl).

#: Above this many fill samples per journal the timeline keeps each time bucket's fullest and
#: emptiest sample (the peaks survive).
MAX_POINTS = 10_000
#: Up to this many stalls per journal are drawn one by one; above it, each time bucket keeps
#: the slowest stall of each cause (every peak survives; the title says so).
MAX_STALLS = 10_000
#: The slowest stalls get a full hover label (call, task, fill, blocking frame); the others
#: show their latency and fill only.
HOVER_STALLS = 2_000
#: Bands (commit phases, calls that checkpointed) closer than 1/MAX_BANDS of the time span
#: (about a pixel of the report's plot width) merge into one band: the drawing is the same.
MAX_BANDS = 1_500
#: Above this many transactions, consecutive transactions are grouped and each group drawn by
#: its largest values.
MAX_TRANSACTIONS = 2_000
#: Above this many points a trace is drawn with WebGL and its coordinates stored as float32.
WEBGL_POINTS = 5_000


def _t0(analysis):
    s = analysis.session
    if s.start_ns is not None:
        return s.start_ns
    ts = [int(df["ts_ns"].min()) for df in (s.calls, s.jbd2_events, s.fill) if len(df)]
    return min(ts) if ts else 0


def _f(a, n=None):
    """A float array for plotly (float32 when long: half the bytes, 0.1 ms at 30 minutes)."""
    a = np.asarray(a, dtype="float64")
    return a.astype("float32") if len(a) > WEBGL_POINTS else a


def _segments(x0, x1, y):
    """x/y arrays drawing one horizontal segment per row, separated by NaN (one trace)."""
    n = len(x0)
    xs = np.full(3 * n, np.nan)
    ys = np.full(3 * n, np.nan)
    xs[0::3], xs[1::3] = x0, x1
    ys[0::3], ys[1::3] = y, y
    return xs, ys


def _bands(x0, x1, y0, y1):
    """x/y arrays of filled rectangles separated by NaN (one ``fill='toself'`` trace)."""
    n = len(x0)
    xs = np.full(6 * n, np.nan)
    ys = np.full(6 * n, np.nan)
    xs[0::6], xs[1::6], xs[2::6], xs[3::6], xs[4::6] = x0, x1, x1, x0, x0
    ys[0::6], ys[1::6], ys[2::6], ys[3::6], ys[4::6] = y0, y0, y1, y1, y0
    return xs, ys


def merge_intervals(start: ArrayLike, end: ArrayLike, gap: float) -> tuple[np.ndarray, np.ndarray]:
    """Sorted intervals whose gaps are at most ``gap`` merged into one: (starts, ends)."""
    start = np.asarray(start, dtype="float64")
    end = np.asarray(end, dtype="float64")
    if not len(start):
        return start, end
    o = np.argsort(start, kind="stable")
    start, end = start[o], np.maximum.accumulate(end[o])
    new = np.concatenate([[True], start[1:] > end[:-1] + gap])
    idx = np.flatnonzero(new)
    ends = np.concatenate([end[idx[1:] - 1], [end[-1]]])
    return start[idx], ends


def _thin(tl):
    """Keep at most MAX_POINTS samples: the least and the most headroom per time bucket, in
    time order (the lows that make handles wait, and the peaks, survive)."""
    if len(tl) <= MAX_POINTS:
        return tl
    span = tl["ts_ns"].max() - tl["ts_ns"].min() + 1
    bucket = (tl["ts_ns"] - tl["ts_ns"].min()) * (MAX_POINTS // 2) // span
    g = tl.groupby(bucket)["headroom_pct"]
    keep = set(g.idxmax().tolist()) | set(g.idxmin().tolist())
    return tl[tl.index.isin(keep)].sort_values("ts_ns", kind="stable")


def thin_stalls(st: pd.DataFrame, t0: float, t1: float,
                buckets: int = MAX_STALLS // 2) -> tuple[pd.DataFrame, bool]:
    """At most about MAX_STALLS stalls: all of them when there are few, else per time bucket
    and cause the slowest one.  Returns (stalls, thinned?)."""
    if len(st) <= MAX_STALLS:
        return st, False
    span = max(t1 - t0, 1)
    b = (st["ts_ns"] - t0) * buckets // span
    idx = st.groupby([b, st["cause"].astype("str")])["latency_ms"].idxmax()
    return st.loc[sorted(idx.tolist())], True


def timeline(analysis: Analysis, dev: str | None = None) -> go.Figure:
    """Stalled calls over the journal's headroom, for one journal (default: the one with the
    most stall time, else the first).  Rows: headroom % (log space left minus
    j_max_transaction_buffers; below 0 handles wait) with checkpoints; stalled calls as segments
    start..end at their latency, colored by cause;
    commit phases and calls that checkpointed as bands.  Within the size budget (see the
    constants above): long series in WebGL, headroom thinned to its lows and peaks, bands merged at
    screen resolution, stalls thinned to the slowest per bucket and cause beyond MAX_STALLS."""
    a = analysis
    t0 = _t0(a)
    j = a.journals
    if dev is None and len(j):
        dev = j.sort_values(["stall_ms", "transactions"], ascending=False).iloc[0]["dev"]
    st = a.stalls
    if dev is not None:
        st = st[(st["dev"].astype("str") == dev) | st["dev"].isna()]
    span = [int(x) for x in (st["ts_ns"].min(), st["end_ns"].max())] if len(st) else [t0, t0 + 1]
    tl = a.timeline[a.timeline["dev"] == dev] if dev else a.timeline.iloc[:0]
    if len(tl):
        span = [min(span[0], int(tl["ts_ns"].min())), max(span[1], int(tl["ts_ns"].max()))]
    shown, thinned = thin_stalls(st, span[0], span[1])
    title = "stalled calls (colored by cause)" if not thinned else (
        f"stalled calls: the slowest per cause in each of {MAX_STALLS // 2:,} time buckets "
        f"({len(shown):,} of {len(st):,} drawn)")
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.04, row_heights=[0.45, 0.4, 0.15],
                        subplot_titles=(f"log space left above one maximum transaction ({dev or 'no journal'})", title,
                                        "commit phases and checkpoints"))
    tl = _thin(tl)
    _add_headroom(fig, tl, t0)
    _add_checkpoints(fig, a.checkpoints[a.checkpoints["dev"] == dev] if dev else a.checkpoints.iloc[:0], tl, dev, t0)
    _add_stalls(fig, shown, t0)
    _add_bands(fig, a.phases[a.phases["dev"] == dev] if dev else a.phases.iloc[:0], st[st["own_checkpoint"]],
               (span[1] - span[0]) / 1e9 / MAX_BANDS, t0)
    fig.update_yaxes(title_text="headroom % of the log", row=1, col=1)
    fig.update_yaxes(title_text="latency ms", type="log", row=2, col=1)
    fig.update_yaxes(showticklabels=False, range=[-0.1, 2.3], row=3, col=1)
    fig.update_xaxes(title_text="seconds since the session start", row=3, col=1)
    fig.update_layout(height=760, margin=dict(l=60, r=20, t=40, b=40), legend=dict(orientation="h", y=-0.08))
    return fig


def _add_headroom(fig, tl, t0):
    """Row 1: the headroom line of the (thinned) fill time line ``tl`` and its 0 level."""
    big = len(tl) > WEBGL_POINTS
    Line = go.Scattergl if big else go.Scatter
    # headroom: jbd2_log_space_left() - j_max_transaction_buffers; below 0 handles must wait
    fig.add_trace(Line(x=_f((tl["ts_ns"] - t0) / 1e9), y=_f(tl["headroom_pct"]), mode="lines", line_shape="hv",
                       name="headroom %", line=dict(color="#1f77b4", width=1),
                       customdata=np.stack([_f(tl["headroom_blocks"]), _f(tl["fill_pct"])], axis=1),
                       hovertemplate="%{x:.3f} s: headroom %{y:.1f}% (%{customdata[0]:.0f} blocks), "
                                     "%{customdata[1]:.1f}% full<extra></extra>"),
                  row=1, col=1)
    fig.add_hline(y=0, line=dict(color="#d62728", dash="dash"), row=1, col=1,
                  annotation_text="below 0: handles wait for log space (__jbd2_log_wait_for_space)",
                  annotation_position="bottom right")


def _add_checkpoints(fig, cp, tl, dev, t0):
    """Row 1: the journal's checkpoints ``cp``, forced and background, on the headroom line."""
    for forced, name, color, sym in ((True, "forced checkpoint", "#d62728", "triangle-down"),
                                     (False, "background checkpoint", "#7f7f7f", "circle-open")):
        c = cp[cp["forced"] == forced]
        if len(c) > MAX_POINTS:  # one marker per time bucket: the emptiest journal's
            b = (c["ts_ns"] - c["ts_ns"].min()) * (MAX_POINTS // 2) // (c["ts_ns"].max() - c["ts_ns"].min() + 1)
            c = c.loc[sorted(c["fill_pct"].fillna(100.0).groupby(b).idxmax().tolist())]
        if len(c):
            at = asof(tl, c.assign(dev=dev))["headroom_pct"].fillna(0.0) if len(tl) else c["ts_ns"] * 0.0
            Cp = go.Scattergl if len(c) > WEBGL_POINTS else go.Scatter
            fig.add_trace(Cp(x=_f((c["ts_ns"] - t0) / 1e9), y=_f(at), mode="markers",
                             name=name, marker=dict(color=color, symbol=sym, size=7),
                             customdata=c[["comm", "pid"]].to_numpy(),
                             hovertemplate="%{x:.3f} s: " + name + " in %{customdata[0]} "
                                           "(%{customdata[1]})<extra></extra>"), row=1, col=1)


def _add_stalls(fig, shown, t0):
    """Row 2: the stalls drawn (``shown``) as segments at their latency, one trace per cause,
    and their markers (full hover text for the slowest HOVER_STALLS)."""
    slow = set(shown.nlargest(HOVER_STALLS, "latency_ms").index) if len(shown) > HOVER_STALLS else None
    causes = [c for c in CAUSES if (shown["cause"].astype("str") == c).any()]
    for cause in causes:
        color = CAUSE_COLORS.get(cause, "#999999")
        s = shown[shown["cause"].astype("str") == cause]
        x0, x1 = ((s["ts_ns"] - t0) / 1e9).to_numpy(), ((s["end_ns"] - t0) / 1e9).to_numpy()
        lat = s["latency_ms"].to_numpy(dtype="float64")
        xs, ys = _segments(x0, x1, lat)
        Seg = go.Scattergl if len(xs) > WEBGL_POINTS else go.Scatter
        fig.add_trace(Seg(x=_f(xs), y=_f(ys), mode="lines", line=dict(color=color, width=3), name=cause,
                          legendgroup=cause, hoverinfo="skip", connectgaps=False), row=2, col=1)
        full = s if slow is None else s[s.index.isin(slow)]
        rest = s.iloc[:0] if slow is None else s[~s.index.isin(slow)]
        if len(full):
            fig.add_trace(go.Scatter(
                x=(full["ts_ns"] - t0) / 1e9, y=full["latency_ms"], mode="markers", marker=dict(color=color, size=6),
                legendgroup=cause, showlegend=False, name=cause,
                customdata=full[["syscall", "comm", "pid", "headroom_start_pct", "min_headroom_pct",
                                 "cause_label"]].to_numpy(),
                hovertemplate="%{customdata[0]} by %{customdata[1]} (%{customdata[2]}): %{y:.1f} ms<br>"
                              "headroom %{customdata[3]:.1f}% at the start, low %{customdata[4]:.1f}%<br>"
                              "%{customdata[5]}<extra>" + cause + "</extra>"), row=2, col=1)
        if len(rest):
            fig.add_trace(go.Scattergl(
                x=_f((rest["ts_ns"] - t0) / 1e9), y=_f(rest["latency_ms"]), mode="markers",
                marker=dict(color=color, size=4), legendgroup=cause, showlegend=False, name=cause,
                customdata=np.stack([_f(rest["headroom_start_pct"]), _f(rest["min_headroom_pct"])], axis=1),
                hovertemplate="%{y:.1f} ms, headroom %{customdata[0]:.1f}% -> low %{customdata[1]:.1f}%<extra>"
                              + cause + "</extra>"), row=2, col=1)


def _add_bands(fig, ph, own, gap, t0):
    """Row 3: the commit phases ``ph`` and the calls that checkpointed ``own`` as bands,
    merged where closer than ``gap`` seconds."""
    for phase, color in PHASE_COLORS.items():
        p = ph[ph["phase"] == phase]
        if len(p):
            b0, b1 = merge_intervals((p["start_ns"] - t0) / 1e9, (p["end_ns"] - t0) / 1e9, gap)
            xs, ys = _bands(b0, b1, 0.0, 1.0)
            fig.add_trace(go.Scatter(x=_f(xs), y=_f(ys), fill="toself", mode="lines", line=dict(width=0),
                                     fillcolor=color, name=f"commit: {phase}", hoverinfo="skip"), row=3, col=1)
    if len(own):
        b0, b1 = merge_intervals((own["ts_ns"] - t0) / 1e9, (own["end_ns"] - t0) / 1e9, gap)
        xs, ys = _bands(b0, b1, 1.2, 2.2)
        fig.add_trace(go.Scatter(x=_f(xs), y=_f(ys), fill="toself", mode="lines", line=dict(width=0),
                                 fillcolor="rgba(214,39,40,0.6)", name="call that checkpointed", hoverinfo="skip"),
                      row=3, col=1)


def latency(analysis: Analysis) -> go.Figure:
    """Latency distribution per call: counts per log2 bucket (all traced calls)."""
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


def causes(analysis: Analysis) -> go.Figure:
    """Stall time by cause (off-CPU ms inside stalls) with the stall count per primary cause."""
    c = analysis.causes.reset_index()
    fig = go.Figure(go.Bar(x=c["cause"], y=c["total_ms"], marker_color=[CAUSE_COLORS[k] for k in c["cause"]],
                           text=[f"{n} stalls" for n in c["count"]], textposition="outside",
                           hovertemplate="%{x}: %{y:.1f} ms<extra></extra>"))
    fig.update_layout(title="stall time by cause", yaxis_title="ms off CPU inside stalls", height=420,
                      margin=dict(l=60, r=20, t=50, b=40))
    return fig


def transactions(analysis: Analysis) -> go.Figure:
    """Per transaction: blocks and logged blocks, and commit phase times (ms, stacked)."""
    t = analysis.transactions
    grouped = len(t) > MAX_TRANSACTIONS
    if grouped:
        t = group_transactions(t)
    what = "per transaction" if not grouped else f"per group of {int(t['group_size'].max())} transactions (largest)"
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=(f"blocks {what}", f"commit phase times {what}"))
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


def group_transactions(t: pd.DataFrame, groups: int = MAX_TRANSACTIONS // 2) -> pd.DataFrame:
    """Consecutive transactions of each journal grouped into at most ``groups`` groups, each
    row the group's first transaction id and its largest blocks, logged blocks and phase times
    (peaks survive); ``group_size`` is the transactions per group."""
    out = []
    for dev, d in t.groupby("dev", sort=False):  # one iteration per journal
        size = max(1, int(np.ceil(len(d) / groups)))
        key = np.arange(len(d)) // size
        g = d.groupby(key).agg(transaction=("transaction", "first"), blocks=("blocks", "max"),
                               blocks_logged=("blocks_logged", "max"), locked_ms=("locked_ms", "max"),
                               flushing_ms=("flushing_ms", "max"), logging_ms=("logging_ms", "max"))
        out.append(g.assign(dev=dev, group_size=size))
    return pd.concat(out, ignore_index=True)


def sweep_option(table: pd.DataFrame, option: str, value: str, error: str | None = None, title: str | None = None,
                 ylabel: str | None = None, group: str | None = None) -> go.Figure:
    """One swept option on x, ``value`` on y (one line per ``group``), error bars from ``error``."""
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


def device_served(analysis: Analysis) -> go.Figure:
    """What each block device under the traced filesystems served (the session's device_stats:
    a lab run's emulated devices, or those jstall record sampled): requests per second --
    writes and reads as a throttle counts them (completed + merged), cache flushes -- and its
    utilisation (% of each interval with a request in flight, right axis), with a lab profile's
    IOPS limits dashed and its phase boundaries shaded. Empty for a session without the table."""
    ds = analysis.session.device_stats
    lab = analysis.session.meta.get("lab") or {}
    roles = list(dict.fromkeys(ds["role"])) if len(ds) else []
    fig = make_subplots(rows=max(1, len(roles)), cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        specs=[[{"secondary_y": True}]] * max(1, len(roles)),
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
        busy = (100 * d["busy_ms"] * 1e6 / d["interval_ns"]).clip(upper=100)
        fig.add_trace(go.Scatter(x=x, y=busy, mode="lines", line_shape="hv", name=f"{role} busy %",
                                 line=dict(color="#2ca02c", dash="dot")), row=i, col=1, secondary_y=True)
        fig.update_yaxes(title_text="busy %", range=[0, 105], row=i, col=1, secondary_y=True)
        for kind, name in (("write_iops", "writes"), ("read_iops", "reads")):
            lim = limits.get(role, {}).get(kind)
            if lim:
                fig.add_hline(y=lim, line_dash="dash", line_color=colors[name], row=i, col=1,
                              annotation_text=f"{kind} {lim:,}", annotation_position="top left")
        fig.update_yaxes(title_text="requests/s", row=i, col=1, secondary_y=False)
    for p in lab.get("phases") or []:
        fig.add_vrect(x0=(p["start_ns"] - t0) / 1e9, x1=(p["end_ns"] - t0) / 1e9, fillcolor="#2ca02c", opacity=0.06,
                      line_width=0, annotation_text=p["name"], annotation_position="top left")
    fig.update_layout(height=260 + 200 * max(1, len(roles)), margin=dict(l=60, r=20, t=50, b=40))
    fig.update_xaxes(title_text="seconds since the session start", row=max(1, len(roles)), col=1)
    return fig


def size_curve(table: pd.DataFrame) -> go.Figure:
    """The predicted waits and stall time (ms) against the journal's or log's size (MiB): a
    band from the low to the high end per filesystem (advice.curve.curves' table)."""
    fig = go.Figure()
    for (dev, kind), t in table.groupby(["dev", "kind"], sort=True):
        t = t.sort_values("size_mib")
        x = list(t["size_mib"])
        for what, col, dash in (("waits", "wait_ms", "solid"), ("stall time", "stall_ms", "dot")):
            name = f"{dev} {kind}: {what}"
            fig.add_trace(go.Scatter(x=x, y=list(t[f"{col}_high"]), mode="lines+markers",
                                     name=f"{name} (high)",
                                     line=dict(dash=dash), legendgroup=name))
            fig.add_trace(go.Scatter(x=x, y=list(t[f"{col}_low"]), mode="lines+markers",
                                     name=f"{name} (low)",
                                     line=dict(dash=dash), fill="tonexty", legendgroup=name))
    fig.update_layout(title="predicted by size: the mechanism's waits and the stall time left",
                      xaxis_title="journal (or log) size, MiB", yaxis_title="ms", height=420,
                      margin=dict(l=60, r=20, t=50, b=40))
    return fig
