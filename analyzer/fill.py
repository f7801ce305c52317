"""The journal fill timeline and the level at which handles must checkpoint.

Fill samples come from three tables that carry the journal fill columns: ``fill`` (handle
starts, at most one per 10 ms per journal), ``jbd2_events`` and ``log_tail`` (whose columns show
the journal just before the tail moves).  A sample is the journal's state at ``ts_ns``.

Units: ``*_blocks`` in filesystem blocks, ``fill_pct`` in percent of the log
(``last_block - first_block`` blocks), times in monotonic ns.
"""

import numpy as np
import pandas as pd

#: jbd2 keeps this many blocks in reserve (``jbd2_log_space_left``: ``j_free - 32``).
RESERVED_BLOCKS = 32

TIMELINE_COLUMNS = ("ts_ns", "dev", "source", "free_blocks", "space_left_blocks", "headroom_blocks", "headroom_pct",
                    "log_blocks", "used_blocks", "fill_pct", "max_transaction_blocks", "journal_blocks", "running_transaction",
                    "committing_transaction")


def forced_fill_pct(max_transaction_blocks, log_blocks):
    """Fill percent at and above which the next handle must checkpoint.

    A handle waits for space when ``free - 32 < max_transaction_blocks`` (ignoring the
    committing transaction's outstanding credits, which make it happen a little earlier), so
    the level is ``100 * (1 - (max_transaction_blocks + 32) / log_blocks)``.  Works on scalars
    and arrays."""
    return 100.0 * (1.0 - (max_transaction_blocks + RESERVED_BLOCKS) / log_blocks)


def headroom(space_left_blocks, max_transaction_blocks, log_blocks):
    """``(blocks, percent of the log)`` by which ``jbd2_log_space_left()`` exceeds
    ``j_max_transaction_buffers``; below 0 the next handle must wait for space
    (``add_transaction_credits -> __jbd2_log_wait_for_space``).  Scalars or arrays."""
    h = space_left_blocks - max_transaction_blocks
    return h, 100.0 * h / log_blocks


def fill_pct(free_blocks, log_blocks):
    """``100 * (1 - free / log_blocks)``; scalars or arrays."""
    return 100.0 * (1.0 - free_blocks / log_blocks)


def timeline(session):
    """All fill samples of the session, sorted by (dev, ts_ns), as a DataFrame with
    TIMELINE_COLUMNS.  ``source`` is the table (and event) the sample came from.  Samples with
    a null ``free_blocks`` or a non-positive log size are dropped; values are float64 so that
    NaN marks an unknown transaction id (-1 in the kernel means none).  ``space_left_blocks``
    is what ``jbd2_log_space_left()`` returns: ``free - 32 - committing_credits``; a handle
    must checkpoint when it is below ``max_transaction_blocks``; ``headroom_blocks`` is the
    difference and ``headroom_pct`` that in percent of the log (see :func:`headroom`)."""
    cols = ["ts_ns", "dev", "free_blocks", "first_block", "last_block", "max_transaction_blocks",
            "journal_blocks", "running_transaction", "committing_transaction", "committing_credits"]
    parts = []
    f = session.fill
    if len(f):
        parts.append(f[cols].assign(source=f["source"].astype("str").radd("fill:")))
    j = session.jbd2_events
    if len(j):
        j = j[j["free_blocks"].notna()]
        parts.append(j[cols].assign(source=j["event"].astype("str").radd("jbd2:")))
    lt = session.log_tail
    if len(lt):
        lt = lt[lt["free_blocks"].notna()]
        parts.append(lt[cols].assign(source="log_tail"))
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame({c: pd.Series([], dtype="float64") for c in TIMELINE_COLUMNS}).astype(
            {"ts_ns": "int64", "dev": "str", "source": "str"})
    t = pd.concat(parts, ignore_index=True)
    num = {c: t[c].astype("float64") for c in cols[2:]}
    log_blocks = num["last_block"] - num["first_block"]
    out = pd.DataFrame({
        "ts_ns": t["ts_ns"].astype("int64"),
        "dev": t["dev"].astype("str"),
        "source": t["source"].astype("str"),
        "free_blocks": num["free_blocks"],
        "space_left_blocks": num["free_blocks"] - RESERVED_BLOCKS - num["committing_credits"].fillna(0.0),
        "log_blocks": log_blocks,
        "used_blocks": log_blocks - num["free_blocks"],
        "fill_pct": fill_pct(num["free_blocks"], log_blocks),
        "max_transaction_blocks": num["max_transaction_blocks"],
        "journal_blocks": num["journal_blocks"],
        "running_transaction": num["running_transaction"],
        "committing_transaction": num["committing_transaction"],
    })
    out = out[out["log_blocks"] > 0]
    out["headroom_blocks"], out["headroom_pct"] = headroom(out["space_left_blocks"], out["max_transaction_blocks"],
                                                           out["log_blocks"])
    out = out[list(TIMELINE_COLUMNS)]
    return out.sort_values(["dev", "ts_ns"], kind="stable").reset_index(drop=True)


def asof(samples, keys, ts_col="ts_ns"):
    """The last sample at or before each key's time on the same device.

    ``keys``: DataFrame with ``dev`` and ``ts_col``; returns a DataFrame aligned with ``keys``
    (same index order) holding the sample's columns (NaN where none).  A sample exactly at
    the key's time counts (``allow_exact_matches``)."""
    k = keys[["dev", ts_col]].copy()
    k["_pos"] = range(len(k))
    k = k[k["dev"].notna()].astype({"dev": "str", ts_col: "int64"}).sort_values(ts_col, kind="stable")
    s = samples.rename(columns={"ts_ns": "_sample_ts_ns"}).sort_values("_sample_ts_ns", kind="stable")
    m = pd.merge_asof(k, s, left_on=ts_col, right_on="_sample_ts_ns", by="dev", direction="backward",
                      allow_exact_matches=True)
    m = m.set_index("_pos").reindex(range(len(keys)))
    m.index = keys.index
    return m.drop(columns=["dev", ts_col])


def _sparse_min(values):
    """Sparse table for O(1) range-minimum queries over ``values`` (float64)."""
    table = [values]
    k = 1
    while (1 << k) <= len(values):
        prev = table[-1]
        half = 1 << (k - 1)
        table.append(np.minimum(prev[:-half], prev[half:]))
        k += 1
    return table


def range_min(samples, keys, value="free_blocks", start_col="ts_ns", end_col="end_ns"):
    """Minimum of ``samples[value]`` over samples with start <= ts_ns <= end (both ends
    inclusive) on each key's device; NaN when no sample falls inside.  Vectorized: a
    searchsorted per device and a sparse-table range-minimum query.  Returns a float64
    numpy array aligned with ``keys``."""
    out = np.full(len(keys), np.nan)
    devs = keys["dev"].astype("str").to_numpy()
    starts = keys[start_col].to_numpy(dtype="int64")
    ends = keys[end_col].to_numpy(dtype="int64")
    for dev, s in samples.groupby("dev", sort=False):  # one iteration per journal
        sel = np.flatnonzero(devs == dev)
        if not len(sel):
            continue
        ts = s["ts_ns"].to_numpy(dtype="int64")
        vals = s[value].to_numpy(dtype="float64")
        lo = np.searchsorted(ts, starts[sel], side="left")
        hi = np.searchsorted(ts, ends[sel], side="right")  # exclusive
        ok = hi > lo
        if not ok.any():
            continue
        table = _sparse_min(vals)
        lo, hi, idx = lo[ok], hi[ok], sel[ok]
        length = hi - lo
        k = np.floor(np.log2(length)).astype(int)
        res = np.empty(len(idx))
        for level in np.unique(k):  # at most log2(n) levels
            m = k == level
            t = table[level]
            res[m] = np.minimum(t[lo[m]], t[hi[m] - (1 << level)])
        out[idx] = res
    return out
