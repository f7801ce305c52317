"""Stall time per process: which programs paid for the stalls.

``per_process(session, stalls)`` groups the stall table (stalls.find_stalls) by process id
(and by ``cgroup_id`` when the session's calls carry one): one row per process with stalls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jstall.analyzer.stalls.causes import CAUSES

if TYPE_CHECKING:
    from jstall.analyzer.session.load import Session

COLUMNS = ["pid", "comm", "threads", "stalls", "stall_ms", "share_pct", "max_ms", "cause", "cause_ms"]


def stall_cgroups(session: Session, stalls: pd.DataFrame) -> np.ndarray | None:
    """The cgroup id of each stall's call (0: not known), in the table's order; None when the
    session's calls carry no cgroup (sessions that did not record it: an all-null column)."""
    c = session.calls
    if "cgroup_id" not in c.columns or not bool(c["cgroup_id"].notna().any()):
        return None
    if not len(stalls):
        return np.zeros(0, dtype="int64")
    m = stalls[["tid", "ts_ns"]].merge(c[["tid", "ts_ns", "cgroup_id"]].drop_duplicates(["tid", "ts_ns"]),
                                       on=["tid", "ts_ns"], how="left")
    return m["cgroup_id"].fillna(0).to_numpy(dtype="int64")


def per_process(session: Session, stalls: pd.DataFrame) -> pd.DataFrame:
    """One row per process that stalled, most stall time first.

    Columns: ``pid``; ``comm`` (the name most of its stalls ran under); ``threads`` (distinct
    tids that stalled); ``stalls``; ``stall_ms`` (summed latency of its stalls);
    ``share_pct`` (of all stall time); ``max_ms`` (its worst stall); ``cause`` and
    ``cause_ms`` (the cause that took most of its off-CPU stall time, and that time);
    ``cgroup_id`` too when the session's ``calls`` table has that column."""
    st = stalls
    keys = ["pid"]
    ids = stall_cgroups(session, st)
    cg = ids is not None
    if cg and len(st):
        st = st.assign(cgroup_id=ids)
        keys = ["pid", "cgroup_id"]
    cols = COLUMNS[:2] + (["cgroup_id"] if cg else []) + COLUMNS[2:]
    if not len(st):
        return pd.DataFrame({c: pd.Series([], dtype="object") for c in cols})
    # groups in order of first appearance (groupby sort=False); counts and maxima in numpy,
    # float sums by pandas (its compensated summation, as every other stall-time sum)
    if len(keys) == 1:
        code, uniq = pd.factorize(st["pid"].to_numpy())
        index = pd.Index(uniq, name="pid")
    else:
        code, uniq = pd.MultiIndex.from_arrays([st[k].to_numpy() for k in keys], names=keys).factorize()
        index = pd.MultiIndex.from_tuples(list(uniq), names=keys)
    k = len(uniq)
    lat = st["latency_ms"].to_numpy(dtype="float64")
    cause_cols = [f"{c}_ms" for c in CAUSES]
    sums = st[["latency_ms"] + cause_cols].groupby(code, sort=True).sum()
    out = pd.DataFrame(index=index)
    pairs = np.unique(np.stack([code, st["tid"].to_numpy(dtype="int64")]), axis=1)
    out["threads"] = np.bincount(pairs[0], minlength=k).astype("int64")
    out["stalls"] = np.bincount(code, minlength=k).astype("int64")
    out["stall_ms"] = sums["latency_ms"].to_numpy()
    mx = np.full(k, -np.inf)
    np.maximum.at(mx, code, lat)
    out["max_ms"] = mx
    # the comm most of a process's stalls ran under (ties: the first in name order)
    cc, cnames = pd.factorize(st["comm"].astype("str").to_numpy(dtype=object), sort=True)
    names = np.append(np.asarray(cnames, dtype=object), np.nan)  # a null comm sorts last
    base = len(names)
    key, n = np.unique(code * base + np.where(cc < 0, base - 1, cc), return_counts=True)
    kg, kc = key // base, key % base
    order = np.lexsort((kc, -n, kg))
    first = order[np.r_[True, kg[order][1:] != kg[order][:-1]]]
    comm = np.empty(k, dtype=object)
    comm[kg[first]] = names[kc[first]]
    out["comm"] = pd.array(comm, dtype="str")
    by = sums[cause_cols].to_numpy()
    out["cause"] = np.asarray(CAUSES)[by.argmax(axis=1)]
    out["cause_ms"] = by.max(axis=1)
    out.loc[out["cause_ms"] <= 0, "cause"] = "other"
    total = float(st["latency_ms"].sum())
    out["share_pct"] = 100 * out["stall_ms"] / total if total else 0.0
    out = out.reset_index()
    out["pid"] = out["pid"].astype("int64")
    return out.sort_values(["stall_ms", "pid"], ascending=[False, True], kind="stable")[cols].reset_index(drop=True)
