"""Latency statistics per syscall over every traced call.

Exact counts, errors, totals and maxima come from ``call_totals`` (counted in the kernel).
Percentiles use nearest rank (the ``ceil(p * N)``-th smallest latency): when that rank falls
among the calls the recorder emitted one by one (latency >= the session's ``min_ms``), the
value is exact from ``calls``; below it, it is interpolated inside the log2 bucket of
``call_histograms`` that holds the rank (an estimate within a factor of 2 of the bucket).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from jstall.analyzer.session.load import Session

PERCENTILES = (0.5, 0.99)


def _hist_value(h, k):
    """The k-th smallest (1-based) latency in ns from a histogram (``(low_ns, high_ns,
    count)`` numpy arrays, bucket-sorted), interpolated linearly inside its bucket."""
    low, high, count = h
    cum = np.cumsum(count)
    i = int(np.searchsorted(cum, k, side="left"))
    i = min(i, len(cum) - 1)
    before = cum[i - 1] if i else 0
    cnt = max(int(count[i]), 1)
    lo, hi = float(low[i]), float(high[i])
    return lo + (hi - lo) * (k - before - 0.5) / cnt


def _groups(values):
    """(codes, names) of a string column; a null name gets code -1 (left out, as groupby)."""
    return pd.factorize(values.to_numpy(dtype=object))


def _per_name(codes, k, values, how):
    """``values`` summed (``how`` "sum") or their maximum ("max") per code 0..k-1; code -1 is
    left out."""
    out = np.zeros(k, dtype="int64") if how == "sum" else np.full(k, np.iinfo("int64").min)
    ok = codes >= 0
    (np.add if how == "sum" else np.maximum).at(out, codes[ok], values[ok])
    return out


def _histograms_by_name(ch):
    """{syscall: (low_ns, high_ns, count)} from ``call_histograms``: one row per non-empty
    bucket (devices summed), bucket-sorted, as _hist_value takes them."""
    hist_by = {}
    if len(ch):
        hc, hnames = _groups(ch["syscall"])
        keys = pd.MultiIndex.from_arrays([hc, ch["bucket"].to_numpy(dtype="int64")])
        g, uniq = keys.factorize()
        lows = np.full(len(uniq), np.iinfo("int64").max)
        highs = np.full(len(uniq), np.iinfo("int64").min)
        counts = np.zeros(len(uniq), dtype="int64")
        ok = hc >= 0
        np.minimum.at(lows, g[ok], ch["low_ns"].to_numpy(dtype="int64")[ok])
        np.maximum.at(highs, g[ok], ch["high_ns"].to_numpy(dtype="int64")[ok])
        np.add.at(counts, g[ok], ch["count"].to_numpy(dtype="int64")[ok])
        ucode = uniq.get_level_values(0).to_numpy()
        ubucket = uniq.get_level_values(1).to_numpy()
        keep = (counts > 0) & (ucode >= 0)
        for c in np.unique(ucode[keep]):  # one iteration per syscall name
            sel = np.flatnonzero(keep & (ucode == c))
            sel = sel[np.argsort(ubucket[sel], kind="stable")]
            hist_by[hnames[c]] = (lows[sel], highs[sel], counts[sel])
    return hist_by


def call_stats(session: Session) -> pd.DataFrame:
    """One row per syscall: ``count``, ``errors``, ``total_ms``, ``max_ms``, ``p50_ms``,
    ``p99_ms``, ``recorded`` (calls emitted one by one), ``p50_exact``/``p99_exact`` (whether
    the percentile came from individual calls rather than the histogram).  Sorted by total
    time, largest first.  Grouped with numpy over the syscall codes: a fixed handful of
    array operations per table, then one small step per syscall name."""
    ct = session.call_totals
    tc, tnames = _groups(ct["syscall"])
    k = len(tnames)
    tot = {name: i for i, name in enumerate(tnames)}
    t_count = _per_name(tc, k, ct["count"].to_numpy(dtype="int64"), "sum")
    t_errors = _per_name(tc, k, ct["errors"].to_numpy(dtype="int64"), "sum")
    t_total = _per_name(tc, k, ct["total_latency_ns"].to_numpy(dtype="int64"), "sum")
    t_max = _per_name(tc, k, ct["max_latency_ns"].to_numpy(dtype="int64"), "max")

    calls = session.calls
    rc, rnames = _groups(calls["syscall"])
    k = len(rnames)
    rec = {name: i for i, name in enumerate(rnames)}
    lat_all = calls["latency_ns"].to_numpy(dtype="int64")
    ones = np.ones(len(lat_all), dtype="int64")
    r_n = _per_name(rc, k, ones, "sum")
    r_total = _per_name(rc, k, lat_all, "sum")
    r_max = _per_name(rc, k, lat_all, "max")
    r_err = _per_name(rc, k, (calls["ret"].to_numpy(dtype="int64") < 0).astype("int64"), "sum")
    # every name's latencies, sorted: one sort by (name, latency)
    order = np.lexsort((lat_all, rc))
    lat_sorted, code_sorted = lat_all[order], rc[order]
    bounds = np.searchsorted(code_sorted, np.arange(k + 1), side="left")

    hist_by = _histograms_by_name(session.call_histograms)

    names = sorted(set(tot) | set(rec))
    rows = []
    for name in names:  # one iteration per syscall name
        ti = tot.get(name)
        ri = rec.get(name)
        nrec = int(r_n[ri]) if ri is not None else 0
        n = int(t_count[ti]) if ti is not None else nrec
        n = max(n, nrec)
        row = {
            "syscall": name, "count": n, "recorded": nrec,
            "errors": int(t_errors[ti]) if ti is not None else int(r_err[ri]),
            "total_ms": (int(t_total[ti]) if ti is not None else int(r_total[ri])) / 1e6,
            "max_ms": max(int(t_max[ti]) if ti is not None else 0, int(r_max[ri]) if ri is not None else 0) / 1e6,
        }
        lat = lat_sorted[bounds[ri]:bounds[ri + 1]] if ri is not None else np.array([], dtype="int64")
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
            elif h is not None and len(h[0]):
                v, exact = min(_hist_value(h, k), row["max_ms"] * 1e6), False
            else:
                v, exact = float("nan"), False
            row[f"{key}_ms"], row[f"{key}_exact"] = v / 1e6, exact
        rows.append(row)
    cols = ["syscall", "count", "errors", "total_ms", "p50_ms", "p99_ms", "max_ms", "recorded", "p50_exact",
            "p99_exact"]
    out = pd.DataFrame(rows, columns=cols)
    return out.sort_values("total_ms", ascending=False, kind="stable").reset_index(drop=True)
