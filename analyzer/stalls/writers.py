"""Who filled each journal, and who waited: writers and victims.

The session's ``writers`` table holds what each process (in its cgroup) put into each jbd2
transaction (the blocks its handles dirtied) or XFS log (the bytes its tickets used). Per
journal:

- ``writer_shares``: each writer's logged blocks (jbd2: its share of each transaction's
  dirtied blocks times the transaction's ``blocks_logged`` from jbd2_run_stats, so the
  writers of a committed transaction add up to what the kernel logged; a transaction not
  committed in the session counts its dirtied blocks) or logged bytes (XFS), and its share of
  the journal's total, over the whole run (XFS: the kernel's log bytes, xs_log_blocks,
  shared out by the bytes each writer's tickets used, ``ticket_bytes``);
- ``at_fill``: the same over the moments the log ran out: at each forced checkpoint, the
  transactions between the log's tail (the last ``jbd2_update_log_tail`` before it) and its
  head (the last commit before it), each such transaction counted once;
- ``victims``: stall time by journal, process and cgroup (processes.per_process of each
  journal's stalls);
- ``verdicts``: one sentence per journal tying the top victim to the top writer at fill.

Cgroups are named by jstall.cgroups from the paths the recorder kept (metadata ``cgroups``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jstall import cgroups

from jstall.analyzer.stalls.processes import per_process, stall_cgroups
from jstall.analyzer.xfs.logs import kernel_delta

if TYPE_CHECKING:
    from jstall.analyzer.session.load import Session

WRITER_KEYS = ["dev", "pid", "comm", "cgroup_id"]
COLUMNS = WRITER_KEYS + ["cgroup", "handles", "dirtied_blocks", "logged_blocks", "ticket_bytes",
                         "logged_bytes", "share_pct"]
#: bytes in one of the kernel's xs_log_blocks (basic blocks)
BBSIZE = 512


def cgroup_names(session: Session) -> dict[int, str]:
    """{cgroup id (int): name} from the session's metadata ``cgroups``."""
    return {int(k): v for k, v in cgroups.names(session.meta.get("cgroups")).items()}


def _empty():
    return pd.DataFrame({c: pd.Series([], dtype="object") for c in COLUMNS})


def logged_per_transaction(session: Session) -> pd.DataFrame:
    """One row per (writer, jbd2 transaction): WRITER_KEYS, ``transaction``, ``handles``,
    ``dirtied_blocks`` and ``logged_blocks`` (its dirtied share of the transaction's
    blocks_logged, or its dirtied blocks when the session saw no commit of it)."""
    w = session.writers
    w = w[w["transaction"].notna()]
    if not len(w):
        return pd.DataFrame(
            columns=WRITER_KEYS + ["transaction", "handles", "dirtied_blocks", "logged_blocks"])
    g = (w.assign(transaction=w["transaction"].astype("int64"))
         .groupby(WRITER_KEYS + ["transaction"], as_index=False)[["handles", "dirtied_blocks"]]
         .sum())
    tx_dirtied = g.groupby(["dev", "transaction"])["dirtied_blocks"].transform("sum")
    rs = session.run_stats[["dev", "transaction", "blocks_logged"]]
    rs = rs.drop_duplicates(["dev", "transaction"])
    rs = rs.assign(dev=rs["dev"].astype("str"), transaction=rs["transaction"].astype("int64"))
    g = g.assign(dev=g["dev"].astype("str")).merge(rs, on=["dev", "transaction"], how="left")
    share = g["dirtied_blocks"] / tx_dirtied.where(tx_dirtied > 0)
    logged = share * g["blocks_logged"]
    g["logged_blocks"] = logged.where(g["blocks_logged"].notna(), g["dirtied_blocks"])
    return g.drop(columns=["blocks_logged"])


def _shares(rows, names):
    """Writers summed over ``rows`` (logged_per_transaction rows, or XFS writers rows) with
    their share of each journal's total, most first."""
    if not len(rows):
        return _empty()
    cols = [c for c in ("handles", "dirtied_blocks", "logged_blocks", "ticket_bytes",
                        "logged_bytes") if c in rows.columns]
    s = rows.groupby(WRITER_KEYS, as_index=False)[cols].sum()
    for c in ("dirtied_blocks", "logged_blocks", "ticket_bytes", "logged_bytes"):
        if c not in s.columns:
            s[c] = None
    amount = s["logged_blocks"].fillna(0).astype(float) + s["logged_bytes"].fillna(0).astype(float)
    total = amount.groupby(s["dev"]).transform("sum")
    s["share_pct"] = (100.0 * amount / total.where(total > 0)).fillna(0.0)
    s["cgroup"] = [names.get(int(c), str(int(c))) for c in s["cgroup_id"]]
    s["_amount"] = amount
    s = s.sort_values(["dev", "_amount"], ascending=[True, False], kind="stable")
    return s[COLUMNS].reset_index(drop=True)


def xfs_logged(session: Session) -> pd.DataFrame:
    """XFS writers rows (WRITER_KEYS, handles, ticket_bytes: what their tickets used) with
    ``logged_bytes``: the kernel's log bytes over the session (xs_log_blocks, from the
    journal's counters at the start and end) shared out by ticket bytes (the ticket bytes
    themselves where the session lacks the counters)."""

    w = session.writers
    x = w[w["transaction"].isna()]
    if not len(x):
        return x
    x = x.assign(dev=x["dev"].astype("str"), ticket_bytes=x["logged_bytes"].astype("int64"))
    x = x[WRITER_KEYS + ["handles", "ticket_bytes"]].copy()
    x["logged_bytes"] = x["ticket_bytes"].astype(float)
    for j in session.meta.get("journals") or []:
        delta = kernel_delta(j) if j.get("kind") == "xfs" else None
        blocks = ((delta or {}).get("log") or {}).get("blocks")
        on = x["dev"] == str(j.get("dev"))
        total = x.loc[on, "ticket_bytes"].sum()
        if blocks is not None and total > 0:
            x.loc[on, "logged_bytes"] = x.loc[on, "ticket_bytes"] * (blocks * BBSIZE / total)
    return x


def writer_shares(session: Session) -> pd.DataFrame:
    """Every writer of every journal over the run: COLUMNS (jbd2 writers have handles,
    dirtied_blocks and logged_blocks; XFS writers handles, ticket_bytes and logged_bytes
    (xfs_logged)), most first."""
    names = cgroup_names(session)
    jbd2 = logged_per_transaction(session)
    xfs = xfs_logged(session)
    parts = [p for p in (_shares(jbd2, names), _shares(xfs, names)) if len(p)]
    return pd.concat(parts, ignore_index=True) if parts else _empty()


def log_contents(session: Session, checkpoints: pd.DataFrame) -> pd.DataFrame:
    """The transactions in each journal's log when it ran out, each once: ``dev``,
    ``transaction``, for those committed before a forced checkpoint from the log's tail then
    (the newest jbd2_update_log_tail's first_tid before it; the first transaction committed
    in the session when none) on, at any forced checkpoint."""
    forced = checkpoints[checkpoints["forced"].astype(bool)] if len(checkpoints) else checkpoints
    rs, lt = session.run_stats, session.log_tail
    out = []
    for dev, cps in (forced.groupby(forced["dev"].astype("str")) if len(forced) else []):
        commits = rs[rs["dev"].astype("str") == dev].sort_values("ts_ns", kind="stable")
        if not len(commits):
            continue
        tails = lt[lt["dev"].astype("str") == dev].sort_values("ts_ns", kind="stable")
        c_ts, c_tx = commits["ts_ns"].to_numpy("int64"), commits["transaction"].to_numpy("int64")
        t = np.unique(cps["ts_ns"].to_numpy("int64"))
        done = np.searchsorted(c_ts, t, side="right")    # commits[:done] ended by each checkpoint
        k = np.searchsorted(tails["ts_ns"].to_numpy("int64"), t, side="right") - 1
        tail = np.where(k >= 0, tails["first_tid"].to_numpy("int64")[np.maximum(k, 0)] if len(tails) else 0,
                        c_tx.min())
        # commit i is held by some checkpoint c with i < done[c] and its transaction >= tail[c]:
        # the checkpoints after the first whose done passes i, the smallest tail among them
        lowest = np.minimum.accumulate(tail[::-1])[::-1]
        first = np.searchsorted(done, np.arange(len(c_tx)), side="right")
        held = first < len(t)
        held[held] = c_tx[held] >= lowest[first[held]]
        out.extend((dev, int(tx)) for tx in c_tx[held])
    return pd.DataFrame(out, columns=["dev", "transaction"]).drop_duplicates(ignore_index=True)


def at_fill(session: Session, checkpoints: pd.DataFrame) -> pd.DataFrame:
    """The writers of what the logs held when they ran out (log_contents): each transaction
    in a log at any forced checkpoint counted once; COLUMNS, most first (empty without
    forced checkpoints)."""
    held = log_contents(session, checkpoints)
    if not len(held):
        return _empty()
    per_tx = logged_per_transaction(session)
    rows = held.merge(per_tx, on=["dev", "transaction"], how="inner")
    return _shares(rows, cgroup_names(session))


def named(session: Session, processes: pd.DataFrame) -> pd.DataFrame:
    """processes.per_process rows with ``cgroup``, their cgroup's name (None: unknown), where
    they have a ``cgroup_id``."""
    v = processes.copy()
    if "cgroup_id" in v.columns:
        names = cgroup_names(session)
        v["cgroup"] = [names.get(int(c), str(int(c))) if pd.notna(c) and int(c) else None
                       for c in v["cgroup_id"]]
    return v


def victims(session: Session, stalls: pd.DataFrame) -> pd.DataFrame:
    """Stall time by journal, process and cgroup: processes.per_process of each device's
    stalls, with ``dev`` and ``cgroup`` (its name); share_pct of that journal's stall time."""
    parts = [named(session, per_process(session, st)).assign(dev=dev)
             for dev, st in stalls.groupby(stalls["dev"].astype("str"))] if len(stalls) else []
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(columns=["dev", "pid", "comm", "cgroup", "stall_ms"])
    v = pd.concat(parts, ignore_index=True)
    return v[["dev"] + [c for c in v.columns if c != "dev"]]


def _who(r):
    cg = r.get("cgroup")
    return f"{r['comm']} (pid {int(r['pid'])}" + (f", cgroup {cg})" if cg else ")")


def verdicts(writers: pd.DataFrame, fill: pd.DataFrame, victim_rows: pd.DataFrame) -> list:
    """One sentence per journal: who had written most of the journal when it filled (over
    the run when it never ran out), and the process other than that writer that waited
    longest (the writer itself when no other waited)."""
    out = []
    if not len(writers):
        return out
    for dev, ws in writers.groupby("dev", sort=True):
        v = victim_rows[victim_rows["dev"] == dev]
        v = v.sort_values("stall_ms", ascending=False, kind="stable")
        f = fill[fill["dev"] == dev] if len(fill) else fill
        if len(f):
            top, when = f.iloc[0], "when the journal filled"
        else:
            top, when = ws.iloc[0], "over the run"
        unit = "logged blocks" if pd.notna(top["logged_blocks"]) else "logged bytes"
        if not len(v):
            text = (f"{dev}: {when}, {_who(top)} had written {top['share_pct']:.1f} % of the "
                    f"{unit}; no call stalled")
            out.append({"dev": dev, "text": text, "writer": _who(top),
                        "share_pct": float(top["share_pct"]),
                        "victim": None, "victim_stall_ms": None})
            continue
        # the victim: who waited longest but for the top writer (unless it alone waited)
        others = v[v["pid"].astype("int64") != int(top["pid"])]
        vic = (others if len(others) else v).iloc[0]
        same = int(vic["pid"]) == int(top["pid"])
        text = (f"{dev}: {_who(vic)} waited {vic['stall_ms'] / 1e3:,.1f} s; {when}, "
                + ("it had itself written" if same else f"{_who(top)} had written")
                + f" {top['share_pct']:.1f} % of the {unit}")
        out.append({"dev": dev, "text": text, "writer": _who(top),
                    "share_pct": float(top["share_pct"]), "victim": _who(vic),
                    "victim_stall_ms": float(vic["stall_ms"]), "same_process": same})
    return out


def summary(session: Session, checkpoints: pd.DataFrame, stalls: pd.DataFrame) -> dict:
    """{"writers", "at_fill", "victims" (records), "verdicts"} for the JSON document."""
    w = writer_shares(session)
    f = at_fill(session, checkpoints)
    v = victims(session, stalls)
    return {"writers": w.to_dict("records"), "at_fill": f.to_dict("records"),
            "victims": v.to_dict("records"), "verdicts": verdicts(w, f, v)}


#: the share of what a journal held when it filled (over the run, where it never filled or
#: the kind keeps no transactions: XFS) a writer must have written to be called its culprit
CULPRIT_SHARE = 50.0
#: the kernel's own threads by name: they write and wait for whoever dirtied the pages
#: (writeback's workers, the journal's thread, XFS's AIL), never a tenant to move nor a victim
KERNEL_THREADS = ("kworker/", "jbd2/", "xfsaild/", "xfs-", "kswapd", "ksoftirqd/", "kcompactd")


def kernel_thread(comm: object) -> bool:
    """The task named ``comm`` is one of the kernel's own threads (KERNEL_THREADS)."""
    return str(comm).startswith(KERNEL_THREADS)


def tenant(session: Session, fill: pd.DataFrame, run: pd.DataFrame, stalls: pd.DataFrame,
           dev: str) -> dict | None:
    """The writer that filled journal ``dev`` and the others that stalled on it, for the
    tenant remedy (the culprit on a filesystem of its own): None unless one writer (a cgroup;
    a program, its processes together, where its cgroup is the root one or holds every other
    task that stalled) wrote at least CULPRIT_SHARE % of what the journal held when it filled
    (``fill``: at_fill rows; over the run, ``run``: writer_shares rows, where it never filled)
    and another program, not one of the kernel's threads (KERNEL_THREADS), stalled on it once
    it had begun writing.

    ``{"dev", "who", "unit" ("cgroup" or "process"), "pids" (the culprit's processes),
    "cgroup_id", "fill_share" and "run_share" (0-1: of what the log held at fill, and of what
    it logged over the run), "others" (the stall table's rows of the other processes on the
    device), "others_ms", "culprit_ms", "victim" (who of the others stalled longest)}``."""
    def on_dev(t):
        return t[t["dev"].astype("str") == str(dev)] if len(t) else t

    f, r = on_dev(fill), on_dev(run)
    basis = f if len(f) else r
    if not len(basis) or not len(stalls):
        return None
    top = basis.iloc[0]
    st_on = stalls["dev"].astype("str").to_numpy(dtype=object) == str(dev)
    st = stalls[st_on]
    if not len(st):
        return None
    pid = int(top["pid"])
    cg = int(top["cgroup_id"]) if pd.notna(top.get("cgroup_id")) else 0
    st_pid = st["pid"].to_numpy(dtype="int64")
    st_cg = stall_cgroups(session, st)
    if st_cg is None:
        st_cg = np.zeros(len(st), dtype="int64")
    # a cgroup (a container, a unit) moves as one, its helpers with it (a tenant's shell
    # children stalled beside it in an emulated guest); a program (its processes by name)
    # where its cgroup is the root one, or holds every other task that stalled
    names = cgroup_names(session)
    beyond = float(st.loc[st_cg != cg, "latency_ms"].sum()) > 0
    unit = "cgroup" if cg and names.get(cg) != "/" and beyond else "process"

    comm = str(top["comm"])

    def mine(t):
        if unit == "cgroup":
            return pd.to_numeric(t["cgroup_id"], errors="coerce").fillna(0).astype("int64").to_numpy() == cg
        # a program's workers (a file server's, a mail server's) move together
        return t["comm"].astype("str").to_numpy(dtype=object) == comm

    fill_share = float(f.loc[mine(f), "share_pct"].sum()) if len(f) else None
    run_share = float(r.loc[mine(r), "share_pct"].sum()) if len(r) else 0.0
    if (fill_share if fill_share is not None else run_share) < CULPRIT_SHARE:
        return None
    culprit = (st_cg == cg) if unit == "cgroup" else mine(st)
    # the others' stalls from the culprit's first write on: one over before it began was not
    # its doing (tar --xattrs copying a tree a tree builder had just written: the builder's
    # stalls all ended before tar's first handle)
    w = session.writers
    w = w[w["dev"].astype("str") == str(dev)] if len(w) else w
    began = w.loc[mine(w), "first_ns"].min() if len(w) else None
    other = ~culprit
    if began is not None and pd.notna(began):
        other &= st["end_ns"].to_numpy(dtype="int64") > int(began)
    others = st[other]
    user = ~others["comm"].map(kernel_thread).to_numpy(dtype=bool)
    if not user.any() or not float(others.loc[user, "latency_ms"].sum()) > 0:
        return None
    pids = sorted({int(p) for p in basis.loc[mine(basis), "pid"]} | {int(p) for p in st_pid[culprit]})
    # the victim: the other cgroup (a unit, a container: its processes together, a shell
    # loop's short-lived children among them) or, where cgroups are not known, the process
    # that stalled longest
    o_cg = st_cg[other]
    if unit == "cgroup" and (o_cg != 0).all():
        per = others.groupby(o_cg)["latency_ms"].sum().sort_values(ascending=False, kind="stable")
        victim = f"cgroup {names.get(int(per.index[0]), str(int(per.index[0])))}"
    else:
        per = others[user].groupby("pid")["latency_ms"].sum().sort_values(ascending=False, kind="stable")
        vpid = int(per.index[0])
        victim = f"{others.loc[others['pid'] == vpid, 'comm'].iloc[0]} (pid {vpid})"
    who = (f"cgroup {top['cgroup']}" if unit == "cgroup" and top.get("cgroup")
           else f"{comm} (pid {pid})" if len(pids) == 1 else f"{comm} (pids {', '.join(map(str, pids))})")
    return {"dev": str(dev), "who": who, "unit": unit, "pids": pids, "cgroup_id": cg or None,
            "comm": comm,
            "fill_share": None if fill_share is None else fill_share / 100.0, "run_share": run_share / 100.0,
            "others": others, "others_ms": float(others["latency_ms"].sum()),
            "culprit_ms": float(st.loc[culprit, "latency_ms"].sum()),
            "victim": victim, "victim_ms": float(per.iloc[0])}
