"""The journal fill timeline and the level at which handles must checkpoint.

Fill samples come from three tables that carry the journal fill columns: ``fill`` (handle
starts, at most one per 10 ms per journal), ``jbd2_events`` and ``log_tail`` (whose columns show
the journal just before the tail moves).  A sample is the journal's state at ``ts_ns``.

Units: ``*_blocks`` in filesystem blocks, ``fill_pct`` in percent of the log
(``last_block - first_block`` blocks), times in monotonic ns.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jstall import jbd2
from jstall.jbd2 import RESERVED_BLOCKS, forced_fill_pct, headroom  # noqa: F401 (the analyzer's names for them)
from jstall.jbd2 import Values

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from jstall.analyzer.session.load import Session

TIMELINE_COLUMNS = ("ts_ns", "dev", "source", "free_blocks", "space_left_blocks", "headroom_blocks", "headroom_pct",
                    "log_blocks", "used_blocks", "fill_pct", "max_transaction_blocks", "journal_blocks",
                    "running_transaction", "committing_transaction")


def fill_pct(free_blocks: Values, log_blocks: Values) -> Values:
    """``100 * (1 - free / log_blocks)``; scalars or arrays."""
    return 100.0 * (1.0 - free_blocks / log_blocks)


def timeline(session: Session) -> pd.DataFrame:
    """All fill samples of the session, sorted by (dev, ts_ns), as a DataFrame with
    TIMELINE_COLUMNS.  ``source`` is the table (and event) the sample came from.  Samples with
    a null ``free_blocks`` or a non-positive log size are dropped; values are float64 so that
    NaN marks an unknown transaction id (-1 in the kernel means none).  ``space_left_blocks``
    is what ``jbd2_log_space_left()`` returns: ``free - 32 - committing_credits``; a handle
    must checkpoint when it is below ``max_transaction_blocks``; ``headroom_blocks`` is the
    difference and ``headroom_pct`` that in percent of the log (see :func:`headroom`)."""
    cols = ["ts_ns", "dev", "free_blocks", "first_block", "last_block", "max_transaction_blocks",
            "journal_blocks", "running_transaction", "committing_transaction", "committing_credits"]
    parts = []  # (table, rows kept, source of each row)
    f = session.fill
    if len(f):
        parts.append((f, None, "fill:" + f["source"].astype("str").to_numpy(dtype=object)))
    j = session.jbd2_events
    if len(j):
        keep = j["free_blocks"].notna().to_numpy()
        parts.append((j, keep, "jbd2:" + j["event"].astype("str").to_numpy(dtype=object)[keep]))
    lt = session.log_tail
    if len(lt):
        keep = lt["free_blocks"].notna().to_numpy()
        parts.append((lt, keep, np.full(int(keep.sum()), "log_tail", dtype=object)))
    parts = [p for p in parts if len(p[2])]
    if not parts:
        return pd.DataFrame({c: pd.Series([], dtype="float64") for c in TIMELINE_COLUMNS}).astype(
            {"ts_ns": "int64", "dev": "str", "source": "str"})

    def column(name, **kw):
        arrays = [df[name].to_numpy(**kw) for df, _, _ in parts]
        return np.concatenate([a if keep is None else a[keep] for a, (_, keep, _) in zip(arrays, parts)])

    num = {c: column(c, dtype="float64", na_value=np.nan) for c in cols[2:]}
    ts = column("ts_ns", dtype="int64")
    dev = column("dev", dtype=object)
    source = np.concatenate([p[2] for p in parts])
    log_blocks = num["last_block"] - num["first_block"]
    ok = log_blocks > 0
    space_left = jbd2.space_left(num["free_blocks"], np.nan_to_num(num["committing_credits"], nan=0.0))
    h_blocks, h_pct = headroom(space_left, num["max_transaction_blocks"], log_blocks)
    values = {
        "ts_ns": ts, "dev": dev, "source": source, "free_blocks": num["free_blocks"],
        "space_left_blocks": space_left, "headroom_blocks": h_blocks, "headroom_pct": h_pct,
        "log_blocks": log_blocks, "used_blocks": log_blocks - num["free_blocks"],
        "fill_pct": fill_pct(num["free_blocks"], log_blocks),
        "max_transaction_blocks": num["max_transaction_blocks"], "journal_blocks": num["journal_blocks"],
        "running_transaction": num["running_transaction"], "committing_transaction": num["committing_transaction"],
    }
    # by (dev, ts_ns), ties in table order (fill, jbd2_events, log_tail)
    devcode = pd.factorize(dev[ok], sort=True)[0]
    order = np.flatnonzero(ok)[np.lexsort((ts[ok], devcode))]
    out = {c: values[c][order] for c in TIMELINE_COLUMNS}
    out["dev"] = pd.array(out["dev"], dtype="str")
    out["source"] = pd.array(out["source"], dtype="str")
    return pd.DataFrame(out)


def asof_positions(left_by: ArrayLike, left_ts: ArrayLike, right_by: ArrayLike,
                   right_ts: ArrayLike) -> np.ndarray:
    """For each left row, the position of the last right row with the same ``by`` code and
    ``ts <= left ts`` (-1 when none): a backward as-of join with exact matches, in numpy.

    ``*_by``: integer codes (equal codes join; a left code of -1 never matches); ``*_ts``:
    int64 times.  Among right rows at equal times the last one (in right's order) wins, as
    in ``pandas.merge_asof``.  Sorts once (O((n + m) log(n + m)))."""
    left_by = np.asarray(left_by, dtype="int64")
    right_by = np.asarray(right_by, dtype="int64")
    m = len(right_by)
    out = np.full(len(left_by), -1, dtype="int64")
    if not m or not len(left_by):
        return out
    by = np.concatenate([right_by, left_by])
    ts = np.concatenate([np.asarray(right_ts, dtype="int64"), np.asarray(left_ts, dtype="int64")])
    side = np.concatenate([np.zeros(m, dtype="int8"), np.ones(len(left_by), dtype="int8")])
    # by, then time, then right before left at equal times (exact matches count); stable
    order = np.lexsort((side, ts, by))
    is_right = order < m
    last = np.maximum.accumulate(np.where(is_right, np.arange(len(order)), -1))
    left_at = np.flatnonzero(~is_right)
    cand = last[left_at]
    hit = cand >= 0
    cand_row = np.where(hit, order[np.maximum(cand, 0)], 0)
    hit &= by[cand_row] == by[order[left_at]]
    hit &= by[order[left_at]] >= 0
    out[order[left_at] - m] = np.where(hit, cand_row, -1)
    return out


def dev_codes(samples_dev: pd.Series, keys_dev: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes of two ``dev`` columns (Series) on a common scale, for
    :func:`asof_positions`: a null key or a key device without samples gets -1, a null
    sample device -2 (never joined).  Keys are compared as strings."""
    codes, uniques = pd.factorize(samples_dev)
    codes = np.where(codes < 0, -2, codes).astype("int64")
    if not len(keys_dev):
        return codes, np.zeros(0, dtype="int64")
    kcodes = pd.Index(uniques).get_indexer(keys_dev.astype("str"))
    return codes, np.where(keys_dev.isna().to_numpy(), -1, kcodes).astype("int64")


def asof(samples: pd.DataFrame, keys: pd.DataFrame, ts_col: str = "ts_ns") -> pd.DataFrame:
    """The last sample at or before each key's time on the same device.

    ``keys``: DataFrame with ``dev`` and ``ts_col``; returns a DataFrame aligned with ``keys``
    (same index order) holding the sample's columns but ``dev`` (``ts_ns`` as
    ``_sample_ts_ns``; NaN where none).  A sample exactly at the key's time counts; among
    samples at equal times the last one (in ``samples``' order) wins."""
    scodes, kcodes = dev_codes(samples["dev"], keys["dev"])
    pos = asof_positions(kcodes, keys[ts_col].to_numpy(dtype="int64", na_value=0), scodes,
                         samples["ts_ns"].to_numpy(dtype="int64"))
    m = samples.drop(columns=["dev"]).rename(columns={"ts_ns": "_sample_ts_ns"}).reset_index(drop=True)
    m = m.reindex(pos) if (pos < 0).any() else m.take(pos)
    m.index = keys.index
    return m


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


def range_min(samples: pd.DataFrame, keys: pd.DataFrame, value: str | Iterable[str] = "free_blocks",
              start_col: str = "ts_ns", end_col: str = "end_ns") -> np.ndarray | dict[str, np.ndarray]:
    """Minimum of ``samples[value]`` over samples with start <= ts_ns <= end (both ends
    inclusive) on each key's device; NaN when no sample falls inside.  Vectorized: a
    searchsorted per device and a sparse-table range-minimum query.  Returns a float64
    numpy array aligned with ``keys``; for a tuple of columns ``value``, a dict of them
    (the ranges are found once)."""
    values = (value,) if isinstance(value, str) else tuple(value)
    out = {v: np.full(len(keys), np.nan) for v in values}
    devs = keys["dev"].astype("str").to_numpy(dtype=object)
    starts = keys[start_col].to_numpy(dtype="int64")
    ends = keys[end_col].to_numpy(dtype="int64")
    sdev = samples["dev"].to_numpy(dtype=object)
    sts = samples["ts_ns"].to_numpy(dtype="int64")
    svals = {v: samples[v].to_numpy(dtype="float64") for v in values}
    for dev in dict.fromkeys(sdev.tolist()):  # one iteration per journal
        if pd.isna(dev):  # null devices form no group
            continue
        sel = np.flatnonzero(devs == dev)
        if not len(sel):
            continue
        mine = sdev == dev
        ts = sts[mine]
        lo = np.searchsorted(ts, starts[sel], side="left")
        hi = np.searchsorted(ts, ends[sel], side="right")  # exclusive
        ok = hi > lo
        if not ok.any():
            continue
        lo, hi, idx = lo[ok], hi[ok], sel[ok]
        k = np.floor(np.log2(hi - lo)).astype(int)
        for v in values:
            table = _sparse_min(svals[v][mine])
            res = np.empty(len(idx))
            for level in np.unique(k):  # at most log2(n) levels
                m = k == level
                t = table[level]
                res[m] = np.minimum(t[lo[m]], t[hi[m] - (1 << level)])
            out[v][idx] = res
    return out[value] if isinstance(value, str) else out


def journal_limits(session: Session, timeline: pd.DataFrame) -> pd.DataFrame:
    """Per device: ``log_blocks`` and ``max_transaction_blocks`` (the last values the fill
    samples show, else the metadata's), as a DataFrame indexed by ``dev``."""
    rows = {}
    for j in session.journals:
        if j.get("kind", "jbd2") != "jbd2":   # an XFS log: no jbd2 limits (xfs_logs)
            continue
        mtb = j.get("max_transaction_blocks")
        jb = j.get("journal_blocks")
        rows[j["dev"]] = (float(jb) if jb else float("nan"), float(mtb) if mtb else float("nan"))
    if len(timeline):
        # the last non-null value per device (GroupBy.last), devices in sorted order
        dev = timeline["dev"].to_numpy(dtype=object)
        lb = timeline["log_blocks"].to_numpy(dtype="float64")
        mt = timeline["max_transaction_blocks"].to_numpy(dtype="float64")
        for d in sorted(set(dev.tolist())):  # one iteration per journal
            m = dev == d
            v = [x[m][~np.isnan(x[m])] for x in (lb, mt)]
            rows[d] = tuple(float(x[-1]) if len(x) else float("nan") for x in v)
    df = pd.DataFrame(list(rows.values()), index=pd.Index(list(rows), name="dev"),
                      columns=["log_blocks", "max_transaction_blocks"], dtype="float64")
    return df
