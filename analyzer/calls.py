"""Latency statistics per syscall over every traced call.

Exact counts, errors, totals and maxima come from ``call_totals`` (counted in the kernel).
Percentiles use nearest rank (the ``ceil(p * N)``-th smallest latency): when that rank falls
among the calls the recorder emitted one by one (latency >= the session's ``min_ms``), the
value is exact from ``calls``; below it, it is interpolated inside the log2 bucket of
``call_histograms`` that holds the rank (an estimate within a factor of 2 of the bucket).
"""

import math

import numpy as np
import pandas as pd

PERCENTILES = (0.5, 0.99)


def _hist_value(h, k):
    """The k-th smallest (1-based) latency in ns from a histogram (bucket-sorted low_ns,
    high_ns, count), interpolated linearly inside its bucket."""
    cum = np.cumsum(h["count"].to_numpy())
    i = int(np.searchsorted(cum, k, side="left"))
    i = min(i, len(cum) - 1)
    before = cum[i - 1] if i else 0
    cnt = max(int(h["count"].iloc[i]), 1)
    lo, hi = float(h["low_ns"].iloc[i]), float(h["high_ns"].iloc[i])
    return lo + (hi - lo) * (k - before - 0.5) / cnt


def call_stats(session):
    """One row per syscall: ``count``, ``errors``, ``total_ms``, ``max_ms``, ``p50_ms``,
    ``p99_ms``, ``recorded`` (calls emitted one by one), ``p50_exact``/``p99_exact`` (whether
    the percentile came from individual calls rather than the histogram).  Sorted by total
    time, largest first."""
    tot = session.call_totals.groupby("syscall").agg(
        count=("count", "sum"), errors=("errors", "sum"), total_ns=("total_latency_ns", "sum"),
        max_ns=("max_latency_ns", "max"))
    calls = session.calls
    rec = calls.groupby("syscall").agg(recorded=("latency_ns", "size"), rec_total=("latency_ns", "sum"),
                                       rec_max=("latency_ns", "max"),
                                       rec_errors=("ret", lambda r: int((r < 0).sum())))
    names = sorted(set(tot.index) | set(rec.index))
    hist = session.call_histograms.groupby(["syscall", "bucket"], as_index=False).agg(
        low_ns=("low_ns", "min"), high_ns=("high_ns", "max"), count=("count", "sum"))
    hist = hist[hist["count"] > 0].sort_values(["syscall", "bucket"])
    hist_by = dict(tuple(hist.groupby("syscall")))
    lat_by = {k: np.sort(v.to_numpy()) for k, v in calls.groupby("syscall")["latency_ns"]}
    rows = []
    for name in names:  # one iteration per syscall name
        t = tot.loc[name] if name in tot.index else None
        r = rec.loc[name] if name in rec.index else None
        nrec = int(r["recorded"]) if r is not None else 0
        n = int(t["count"]) if t is not None else nrec
        n = max(n, nrec)
        row = {
            "syscall": name, "count": n, "recorded": nrec,
            "errors": int(t["errors"]) if t is not None else int(r["rec_errors"]),
            "total_ms": (int(t["total_ns"]) if t is not None else int(r["rec_total"])) / 1e6,
            "max_ms": max(int(t["max_ns"]) if t is not None else 0, int(r["rec_max"]) if r is not None else 0) / 1e6,
        }
        lat = lat_by.get(name, np.array([], dtype="int64"))
        h = hist_by.get(name)
        for p in PERCENTILES:
            key = f"p{int(round(p * 100))}"
            if n == 0:
                row[f"{key}_ms"], row[f"{key}_exact"] = float("nan"), False
                continue
            k = max(1, math.ceil(p * n))
            below = n - nrec
            if k > below:
                v, exact = float(lat[k - below - 1]), True
            elif h is not None and len(h):
                v, exact = min(_hist_value(h, k), row["max_ms"] * 1e6), False
            else:
                v, exact = float("nan"), False
            row[f"{key}_ms"], row[f"{key}_exact"] = v / 1e6, exact
        rows.append(row)
    cols = ["syscall", "count", "errors", "total_ms", "p50_ms", "p99_ms", "max_ms", "recorded", "p50_exact",
            "p99_exact"]
    out = pd.DataFrame(rows, columns=cols)
    return out.sort_values("total_ms", ascending=False, kind="stable").reset_index(drop=True)
