"""What the block devices under a session's filesystems did (the device_stats table: the
recorder's samples of the traced journals' devices, or the lab's of its emulated ones),
over the whole session and during its stalls."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from collections.abc import Iterable

    from jstall.analyzer.session.load import Session

COLUMNS = ["role", "dev", "lower_dev", "seconds", "read_ios", "write_ios", "write_iops", "busy_pct",
           "stall_seconds", "write_iops_in_stalls", "busy_pct_in_stalls", "limit_write_iops", "limit_pct",
           "limit_pct_in_stalls", "queued_pct_in_stalls", "latency_ms_in_stalls", "alone_latency_ms"]


def device_summary(session: Session, stalls: pd.DataFrame) -> pd.DataFrame:
    """One row per device (``role`` data or journal, ``dev`` the filesystem's, ``lower_dev`` the
    one that served the requests): requests over the session, ``write_iops``, ``busy_pct``
    (the share of the time the device had a request in flight, from io_ticks), and the same
    over the sampling intervals that overlap a stall (``stall_seconds`` of them; NaN when no
    interval does). ``limit_write_iops``: the device's write limit where the session knows it
    (the lab's pace: write_limit), and ``limit_pct``/``limit_pct_in_stalls`` the writes a
    second against it (NaN where it is not known: busy time then says how busy it was, but
    not how near its limit). ``queued_pct_in_stalls``: the share of its requests' time during
    the stalls they waited behind others (:func:`queueing`, with ``latency_ms_in_stalls`` and
    ``alone_latency_ms``; NaN where no interval served one request at a time)."""
    ds = session.device_stats
    if not len(ds):
        return pd.DataFrame(columns=COLUMNS)
    spans = stalls[["ts_ns", "end_ns"]].to_numpy(dtype="int64") if len(stalls) else np.zeros((0, 2), "int64")
    rows = []
    for (role, dev, lower), g in ds.groupby(["role", "dev", "lower_dev"], sort=False, observed=True):
        end = g["ts_ns"].to_numpy(dtype="int64")
        start = end - g["interval_ns"].to_numpy(dtype="int64")
        secs = g["interval_ns"].to_numpy(dtype="float64") / 1e9
        writes = g["write_ios"].to_numpy(dtype="float64")
        busy = g["busy_ms"].to_numpy(dtype="float64") / 1e3
        # intervals that overlap any stall
        hit = np.zeros(len(g), dtype=bool)
        for s, e in spans:
            hit |= (start < e) & (end > s)
        total = secs.sum()
        in_stalls = secs[hit].sum()
        limit = write_limit(session, lower)
        q = queueing(g, hit if hit.any() else np.ones(len(g), dtype=bool))
        rows.append({
            "role": role, "dev": dev, "lower_dev": lower, "seconds": total,
            "read_ios": int(g["read_ios"].sum()), "write_ios": int(writes.sum()),
            "write_iops": writes.sum() / total if total else np.nan,
            "busy_pct": 100.0 * busy.sum() / total if total else np.nan,
            "stall_seconds": in_stalls,
            "write_iops_in_stalls": writes[hit].sum() / in_stalls if in_stalls else np.nan,
            "busy_pct_in_stalls": 100.0 * busy[hit].sum() / in_stalls if in_stalls else np.nan,
            "limit_write_iops": float(limit) if limit else np.nan,
            "limit_pct": 100.0 * writes.sum() / total / limit if limit and total else np.nan,
            "limit_pct_in_stalls": 100.0 * writes[hit].sum() / in_stalls / limit if limit and in_stalls else np.nan,
            "queued_pct_in_stalls": 100.0 * q["util"] if q and in_stalls else np.nan,
            "latency_ms_in_stalls": q["latency_ms"] if q and in_stalls else np.nan,
            "alone_latency_ms": q["alone_ms"] if q else np.nan,
        })
    return pd.DataFrame(rows, columns=COLUMNS)


#: an interval whose requests were at most this many in flight on average was served one
#: request at a time: their latency then is the device's own service time
ALONE_IN_FLIGHT = 1.0
#: the device's latency alone: this percentile of those intervals' (a busier one among them,
#: a request or so in flight, has its requests wait some for each other)
ALONE_PERCENTILE = 25
#: an interval with fewer requests says little of their latency
LATENCY_MIN_REQUESTS = 20


def _requests(d: pd.DataFrame) -> np.ndarray:
    return (d["read_ios"].to_numpy(dtype="float64") + d["write_ios"].to_numpy(dtype="float64")
            + d["flush_ios"].to_numpy(dtype="float64"))


def queueing(d: pd.DataFrame, hit: np.ndarray) -> dict | None:
    """How much of each request's time a device spent behind other requests over its
    ``device_stats`` rows ``d`` where ``hit`` (the intervals of the stalls), from its own
    counters: a request's latency there (``time_in_queue`` counts each request's time in
    flight: ``queue_ms`` over the requests) against the device's latency serving one request
    at a time (``alone_ms``: the ALONE_PERCENTILE of the session's intervals with at most
    ALONE_IN_FLIGHT requests in flight on average and LATENCY_MIN_REQUESTS requests). ``util``
    is ``1 - alone_ms / latency_ms``: 0 when requests took no longer than alone, near 1 when
    they mostly waited for others. Busy time (io_ticks) does not say this: a device that
    serves requests side by side is busy all the time long before they queue. ``in_flight``:
    the average requests in flight there. None without an interval served one at a time or a
    request where ``hit``."""
    if not len(d):
        return None
    n = _requests(d)
    queue = d["queue_ms"].to_numpy(dtype="float64")
    span_ms = d["interval_ns"].to_numpy(dtype="float64") / 1e6
    alone = (n >= LATENCY_MIN_REQUESTS) & (queue <= ALONE_IN_FLIGHT * span_ms)
    if not alone.any() or not n[hit].sum() > 0:
        return None
    alone_ms = float(np.percentile(queue[alone] / n[alone], ALONE_PERCENTILE))
    latency_ms = float(queue[hit].sum() / n[hit].sum())
    util = min(max(1.0 - alone_ms / latency_ms, 0.0), 1.0) if latency_ms > 0 else 0.0
    return {"util": util, "latency_ms": latency_ms, "alone_ms": alone_ms,
            "in_flight": float(queue[hit].sum() / span_ms[hit].sum()) if span_ms[hit].sum() > 0 else 0.0}


def write_limit(session: Session, lower_dev: object) -> float | None:
    """The writes a second a device (the lower device that serves a filesystem's requests) is
    held to, where the session knows it: the lab's throttle on it (lab metadata); else None."""
    lab = session.meta.get("lab") or {}
    throttles = (lab.get("filesystem") or {}).get("throttles") or {}
    return (throttles.get(str(lower_dev)) or {}).get("write_iops")


def device_rows(session: Session, dev: str, role: str = "data") -> pd.DataFrame:
    """The ``device_stats`` rows of a filesystem's device (``role`` data or journal; none
    without its counters)."""
    ds = session.device_stats
    return ds[(ds["role"].astype("str") == role) & (ds["dev"].astype("str") == dev)] if len(ds) else ds


def device_time(session: Session, dev: str, role: str = "data") -> dict | None:
    """What a filesystem's device (``role`` data or journal) served over the session, as device
    time: ``{"writes", "flushes", "requests", "device_ms", "basis"}``, or None without its
    counters. Device time is its busy time (io_ticks); on a lab device paced at a write rate
    (a throttle below the loop device: io_ticks do not see a request wait for its turn there),
    its writes at that rate when that is longer."""
    d = device_rows(session, dev, role)
    if not len(d):
        return None
    writes, flushes = float(d["write_ios"].sum()), float(d["flush_ios"].sum())
    busy = float(d["busy_ms"].sum())
    out = {"writes": writes, "flushes": flushes, "requests": writes + flushes, "device_ms": busy,
           "basis": "busy time (io_ticks)"}
    lab = session.meta.get("lab") or {}
    throttles = (lab.get("filesystem") or {}).get("throttles") or {}
    lower = str(d["lower_dev"].iloc[0])
    iops = (throttles.get(lower) or {}).get("write_iops")
    if iops and writes / iops * 1e3 > busy:
        out.update(device_ms=writes / iops * 1e3, basis=f"writes at the device's pace ({iops} writes/s)")
    return out


def _unknown(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _limit(r, key):
    v = r.get(key)
    if _unknown(v):
        return ""
    return f" ({v:.0f}% of its limit, {r['limit_write_iops']:,.0f} writes/s)"


def device_lines(records: Iterable[dict]) -> list[str]:
    """One line per device (device_summary's rows as records), for the text summary."""
    out = []
    for r in records:
        served = f" (served by {r['lower_dev']})" if r["lower_dev"] != r["dev"] else ""
        line = (f"{r['dev']} {r['role']}{served}: {r['write_ios']:,} writes and {r['read_ios']:,} reads in "
                f"{r['seconds']:.1f} s, {r['write_iops']:,.0f} writes/s{_limit(r, 'limit_pct')}, "
                f"busy {r['busy_pct']:.0f}%")
        if r["stall_seconds"]:
            line += (f"; during stalls ({r['stall_seconds']:.1f} s of samples) {r['write_iops_in_stalls']:,.0f} "
                     f"writes/s{_limit(r, 'limit_pct_in_stalls')}, busy {r['busy_pct_in_stalls']:.0f}%")
            q = r.get("queued_pct_in_stalls")
            if not _unknown(q) and _unknown(r.get("limit_write_iops")):
                line += (f", requests {q:.0f}% of their time behind others ({r['latency_ms_in_stalls']:.2f} ms "
                         f"each against {r['alone_latency_ms']:.2f} ms served one at a time)")
        out.append(line)
    return out
