"""Stall time per process: which programs paid for the stalls.

``per_process(session, stalls)`` groups the stall table (stalls.find_stalls) by process id
(and by ``cgroup_id`` when the session's calls carry one): one row per process with stalls.
"""

import numpy as np
import pandas as pd

from .causes import CAUSES

COLUMNS = ["pid", "comm", "threads", "stalls", "stall_ms", "share_pct", "max_ms", "cause", "cause_ms"]


def per_process(session, stalls):
    """One row per process that stalled, most stall time first.

    Columns: ``pid``; ``comm`` (the name most of its stalls ran under); ``threads`` (distinct
    tids that stalled); ``stalls``; ``stall_ms`` (summed latency of its stalls);
    ``share_pct`` (of all stall time); ``max_ms`` (its worst stall); ``cause`` and
    ``cause_ms`` (the cause that took most of its off-CPU stall time, and that time);
    ``cgroup_id`` too when the session's ``calls`` table has that column."""
    st = stalls
    keys = ["pid"]
    # a cgroup_id column that is all null (sessions that did not record it) splits nothing
    cg = "cgroup_id" in session.calls.columns and bool(session.calls["cgroup_id"].notna().any())
    if cg and len(st):
        st = st.merge(session.calls[["tid", "ts_ns", "cgroup_id"]].drop_duplicates(["tid", "ts_ns"]),
                      on=["tid", "ts_ns"], how="left")
        st["cgroup_id"] = st["cgroup_id"].fillna(0).astype("int64")  # 0: not known
        keys = ["pid", "cgroup_id"]
    cols = COLUMNS[:2] + (["cgroup_id"] if cg else []) + COLUMNS[2:]
    if not len(st):
        return pd.DataFrame({c: pd.Series([], dtype="object") for c in cols})
    g = st.groupby(keys, dropna=False, sort=False)
    out = g.agg(threads=("tid", "nunique"), stalls=("latency_ms", "size"), stall_ms=("latency_ms", "sum"),
                max_ms=("latency_ms", "max"))
    # the comm most of a process's stalls ran under (ties: the first in name order)
    cc = st[keys].assign(comm=st["comm"].astype("str")).value_counts(dropna=False).reset_index(name="_n")
    cc = cc.sort_values(["_n", "comm"], ascending=[False, True], kind="stable").drop_duplicates(keys)
    out["comm"] = cc.set_index(keys)["comm"].reindex(out.index)
    by = g[[f"{c}_ms" for c in CAUSES]].sum()
    out["cause"] = np.asarray(CAUSES)[by.to_numpy().argmax(axis=1)]
    out["cause_ms"] = by.to_numpy().max(axis=1)
    out.loc[out["cause_ms"] <= 0, "cause"] = "other"
    total = float(st["latency_ms"].sum())
    out["share_pct"] = 100 * out["stall_ms"] / total if total else 0.0
    out = out.reset_index()
    out["pid"] = out["pid"].astype("int64")
    return out.sort_values(["stall_ms", "pid"], ascending=[False, True], kind="stable")[cols].reset_index(drop=True)
