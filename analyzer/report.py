"""Self-contained HTML reports: plotly.js is inlined once, every figure is a div, the text
summary and tables are plain HTML.  The file works offline."""

import html

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1200px;color:#222}
h1{font-size:1.5em} h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
pre{background:#f6f8fa;padding:12px;overflow-x:auto;font-size:12px}
table{border-collapse:collapse;font-size:13px;margin:8px 0} td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f0f0f0} td:first-child,th:first-child{text-align:left}
.warn{color:#a00} .rec{margin:6px 0} .kind{font-weight:bold} .est{color:#a60}
"""


def _page(title, body):
    from plotly.offline import get_plotlyjs

    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style><script type=\"text/javascript\">{get_plotlyjs()}</script></head>"
            f"<body>\n{body}\n</body></html>\n")


def _fig(fig, div_id):
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id,
                       config={"displaylogo": False, "responsive": True})


def _df_table(df, floatfmt="{:.2f}"):
    """A DataFrame as an HTML table (numbers formatted, text escaped)."""
    def cell(v):
        if isinstance(v, float):
            return "" if v != v else floatfmt.format(v)
        return html.escape(str(v))

    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    rows = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in r) + "</tr>"
                   for r in df.itertuples(index=False, name=None))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _recs(recs):
    out = []
    for r in recs:
        est = ' <span class="est">(estimate)</span>' if r.get("estimate") else ""
        out.append(f'<div class="rec"><span class="kind">{html.escape(r["kind"])}</span>{est}: '
                   f'{html.escape(r["text"])}</div>')
    return "\n".join(out)


def session_report(analysis):
    """The HTML report of one session analysis."""
    from . import figures
    from .text import session_summary

    a = analysis
    d = a.to_dict()
    parts = [f"<h1>jstall report: {html.escape(a.session.name)}</h1>"]
    for w in d["warnings"]:
        parts.append(f'<p class="warn">WARNING: {html.escape(w)}</p>')
    parts.append("<h2>Diagnosis</h2>" + _recs(d["recommendations"]))
    devs = list(a.journals["dev"]) if len(a.journals) else [None]
    with_stalls = [x for x in devs if x is not None and (a.stalls["dev"].astype("str") == x).any()]
    for i, dev in enumerate(with_stalls or devs[:1]):
        parts.append(f"<h2>Timeline{': ' + html.escape(dev) if dev else ''}</h2>")
        parts.append(_fig(figures.timeline(a, dev), f"timeline-{i}"))
    parts.append("<h2>Stall time by cause</h2>" + _fig(figures.causes(a), "causes"))
    parts.append("<h2>Latency per call</h2>" + _fig(figures.latency(a), "latency"))
    if len(a.transactions):
        parts.append("<h2>Transactions</h2>" + _fig(figures.transactions(a), "transactions"))
    if len(a.session.device_stats):
        parts.append("<h2>Emulated device: requests served</h2>" + _fig(figures.device_served(a), "device"))
    cols = ["dev", "journal_mib", "transactions", "avg_handles_per_transaction", "avg_blocks_per_transaction",
            "avg_logged_blocks_per_transaction", "avg_running_ms", "avg_locked_ms", "avg_flushing_ms",
            "avg_logging_ms", "log_rate_blocks_per_s", "forced_checkpoints", "background_checkpoints",
            "forced_checkpoint_written_blocks", "max_fill_pct", "forced_fill_pct", "time_at_forced_level_s"]
    if len(a.journals):
        parts.append("<h2>Journals</h2>" + _df_table(a.journals[[c for c in cols if c in a.journals]]))
    if len(a.proc):
        parts.append("<h3>Agreement with /proc/fs/jbd2</h3>" + _df_table(a.proc))
    if len(a.stalls):
        top = a.stalls.sort_values("latency_ms", ascending=False).head(50)
        t0 = a.session.start_ns or 0
        top = top.assign(t_s=(top["ts_ns"] - t0) / 1e9)
        parts.append("<h2>Slowest stalls</h2>" + _df_table(top[[
            "t_s", "comm", "pid", "syscall", "latency_ms", "dev", "cause", "cause_label", "offcpu_ms",
            "fill_start_pct", "fill_max_pct", "own_checkpoint"]].astype({"cause": "str"})))
    parts.append("<h2>Summary</h2><pre>" + html.escape(session_summary(a)) + "</pre>")
    return _page(f"jstall: {a.session.name}", "\n".join(parts))


def sweep_report(sweep):
    """The HTML report of a sweep analysis (:class:`~jstall.analyzer.sweep.Sweep`)."""
    from . import figures

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
                parts.append(_fig(figures.sweep_option(per, option, value, value.replace("_mean", "_sd"),
                                                       title=f"{label} by {option}", ylabel=label, group=group),
                                  f"sweep-{n}"))
                n += 1
        for phase in sweep.phases:
            col = f"{phase}_rate_mean"
            if col in per:
                parts.append(_fig(figures.sweep_option(per, option, col, f"{phase}_rate_sd",
                                                       title=f"{phase} rate by {option}", ylabel=sweep.rate_unit(phase),
                                                       group=group), f"sweep-{n}"))
                n += 1
    parts.append("<h2>Tables</h2><pre>" + html.escape(sweep.text()) + "</pre>")
    return _page(f"jstall sweep: {sweep.name}", "\n".join(parts))
