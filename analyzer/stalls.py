"""Stalled calls: which calls were slow, what they waited on, how full the journal was.

A stall is a traced call (``calls`` table) with ``latency_ns >= min_ms * 1e6``.  Off-CPU
intervals join to their call by (``tid``, ``call_ts_ns`` == calls.``ts_ns``).
"""

from .causes import CAUSES, offcpu_causes
from .fill import RESERVED_BLOCKS, asof, fill_pct, forced_fill_pct, headroom, range_min

DEFAULT_MIN_MS = 10.0


def stall_columns():
    """Columns of the stall table, in order (``<cause>_ms`` for every registered cause follows
    ``oncpu_ms``)."""
    return (["ts_ns", "end_ns", "latency_ms", "tid", "pid", "comm", "syscall", "ret", "dev", "handles",
             "cause", "cause_label", "offcpu_ms", "oncpu_ms"]
            + [f"{c}_ms" for c in CAUSES]
            + ["free_start_blocks", "fill_start_pct", "min_free_blocks", "fill_max_pct", "log_blocks",
               "max_transaction_blocks", "forced_fill_pct", "min_space_left_blocks", "at_forced_level",
               "headroom_start_blocks", "headroom_start_pct", "min_headroom_blocks", "min_headroom_pct", "forced",
               "running_transaction", "committing_transaction", "own_checkpoint", "own_checkpoints",
               "background_checkpoints"])


def select_stalls(calls, min_ms=DEFAULT_MIN_MS):
    """Calls with latency >= min_ms, sorted by start, with ``end_ns`` (= ts + latency) added."""
    s = calls[calls["latency_ns"] >= int(round(min_ms * 1e6))]
    s = s.sort_values(["ts_ns", "tid"], kind="stable").reset_index(drop=True)
    return s.assign(end_ns=s["ts_ns"] + s["latency_ns"])


def own_checkpoints(stalls, jbd2_events):
    """Checkpoints that ran in each stall's own task during it.

    A ``checkpoint`` jbd2 event belongs to a stall when its ``tid`` is the stall's and
    ``ts_ns`` lies in [ts_ns, end_ns] (both inclusive).  Calls of one thread do not overlap, so
    an as-of join of each event to the latest call start in its thread finds it.  Returns an
    int64 numpy array of counts aligned with ``stalls``."""
    import numpy as np
    import pandas as pd

    counts = np.zeros(len(stalls), dtype="int64")
    ev = jbd2_events[jbd2_events["event"] == "checkpoint"]
    if not len(ev) or not len(stalls):
        return counts
    left = ev[["ts_ns", "tid"]].astype({"tid": "int64"}).sort_values("ts_ns", kind="stable")
    right = pd.DataFrame({"call_ts_ns": stalls["ts_ns"].to_numpy(), "tid": stalls["tid"].astype("int64").to_numpy(),
                          "end_ns": stalls["end_ns"].to_numpy(), "_row": np.arange(len(stalls))})
    right = right.sort_values("call_ts_ns", kind="stable")
    m = pd.merge_asof(left, right, left_on="ts_ns", right_on="call_ts_ns", by="tid", direction="backward")
    m = m[m["_row"].notna() & (m["ts_ns"] <= m["end_ns"])]
    np.add.at(counts, m["_row"].astype("int64").to_numpy(), 1)
    return counts


def count_between(times, keys, start_col="ts_ns", end_col="end_ns"):
    """For each key row, how many of ``times`` (DataFrame ts_ns, dev) fall in [start, end] on
    the key's device.  Returns an int64 numpy array aligned with ``keys``."""
    import numpy as np

    out = np.zeros(len(keys), dtype="int64")
    devs = keys["dev"].astype("str").to_numpy()
    for dev, t in times.groupby("dev", sort=False):  # one iteration per journal
        sel = np.flatnonzero(devs == dev)
        ts = np.sort(t["ts_ns"].to_numpy(dtype="int64"))
        lo = np.searchsorted(ts, keys[start_col].to_numpy(dtype="int64")[sel], side="left")
        hi = np.searchsorted(ts, keys[end_col].to_numpy(dtype="int64")[sel], side="right")
        out[sel] = hi - lo
    return out


def journal_limits(session, timeline):
    """Per device: ``log_blocks`` and ``max_transaction_blocks`` (the last values the fill
    samples show, else the metadata's), as a DataFrame indexed by ``dev``."""
    import pandas as pd

    rows = {}
    for j in session.journals:
        mtb = j.get("max_transaction_blocks")
        jb = j.get("journal_blocks")
        rows[j["dev"]] = {"log_blocks": float(jb) if jb else float("nan"),
                          "max_transaction_blocks": float(mtb) if mtb else float("nan")}
    if len(timeline):
        last = timeline.groupby("dev").last()
        for dev, r in last.iterrows():  # one row per journal
            rows[dev] = {"log_blocks": r["log_blocks"], "max_transaction_blocks": r["max_transaction_blocks"]}
    df = pd.DataFrame.from_dict(rows, orient="index", columns=["log_blocks", "max_transaction_blocks"])
    df.index.name = "dev"
    return df.astype("float64")


def find_stalls(session, timeline, min_ms=DEFAULT_MIN_MS):
    """The stall table: one row per stalled call (columns stall_columns()).

    Units and meaning:
    - ``latency_ms``: entry to exit.  ``offcpu_ms``: off-CPU intervals (> 100 µs) inside the
      call; ``<cause>_ms``: that time split by cause; ``oncpu_ms`` = latency - off-CPU
      (running, or off CPU in intervals too short to be recorded).
    - ``cause``: the cause with the largest share of off-CPU time; ``other`` when the call
      has none.  ``cause_label``: the frame (or stack summary) behind the largest share.
    - ``free_start_blocks``/``fill_start_pct``: the last fill sample at or before the call's
      start on its device (else the call's own ``journal_free_blocks``);
      ``min_free_blocks``/``fill_max_pct``: the lowest free space from the start sample, every
      sample inside [ts_ns, end_ns] and the call's ``journal_min_free_blocks``.
    - ``min_space_left_blocks``: lowest ``jbd2_log_space_left()`` (free - 32 - committing
      transaction's credits) at the start sample, the samples inside the call and the call's
      first handle (``journal_free_blocks``, ``journal_committing_credits``).
    - ``at_forced_level``: ``min_free_blocks - 32 < max_transaction_blocks`` or
      ``min_space_left_blocks < max_transaction_blocks``: the journal reached the level at
      which handles must checkpoint.
    - ``headroom_start_blocks``/``headroom_start_pct``: ``jbd2_log_space_left() -
      j_max_transaction_buffers`` at the start sample (or the call's first handle), in blocks
      and % of the log; ``min_headroom_blocks``/``min_headroom_pct``: its low during the call.
      Below 0 a handle must wait for log space.
    - ``forced``: the kernel's condition held (headroom below 0 at the start or during the
      call) and the call itself waited for space (checkpoint time in its stacks, or a
      checkpoint in its own task): ``add_transaction_credits -> __jbd2_log_wait_for_space``.
      ``fill_max_pct`` (the fullest the log got during the call) is a consequence of the
      stall, not its cause.
    - ``running_transaction``/``committing_transaction``: at the start sample (-1: none).
    - ``own_checkpoint``: a checkpoint ran in this call's own task during it;
      ``background_checkpoints``: checkpoints by the jbd2 thread on its device during it.
    """
    import numpy as np
    import pandas as pd

    st = select_stalls(session.calls, min_ms)
    n = len(st)
    own = own_checkpoints(st, session.jbd2_events)

    # off-CPU time of each stall, by cause
    keys = pd.DataFrame({"tid": st["tid"].to_numpy(), "call_ts_ns": st["ts_ns"].to_numpy(), "_row": np.arange(n)})
    off = session.offcpu.merge(keys, on=["tid", "call_ts_ns"], how="inner")
    own_keys = keys[own > 0]
    off = offcpu_causes(off, session.stacks, own_keys)
    by = off.pivot_table(index="_row", columns="cause", values="offcpu_ns", aggfunc="sum", observed=False,
                         fill_value=0)
    by = by.reindex(index=range(n), columns=list(CAUSES), fill_value=0).fillna(0)
    out = pd.DataFrame({c: st[c] for c in ["ts_ns", "end_ns", "tid", "pid", "comm", "syscall", "ret", "dev",
                                           "handles"]})
    out.insert(2, "latency_ms", st["latency_ns"] / 1e6)
    off_ns = by.sum(axis=1).to_numpy(dtype="float64")
    out["offcpu_ms"] = off_ns / 1e6
    out["oncpu_ms"] = np.maximum(st["latency_ns"].to_numpy() - off_ns, 0) / 1e6
    for c in CAUSES:
        out[f"{c}_ms"] = by[c].to_numpy(dtype="float64") / 1e6
    if n:
        primary = np.asarray(CAUSES)[by.to_numpy().argmax(axis=1)]
        primary = np.where(off_ns > 0, primary, "other")
    else:
        primary = np.array([], dtype=object)
    out["cause"] = pd.Categorical(primary, categories=CAUSES)
    # the label with the most time inside the primary cause
    lab = off.groupby(["_row", "cause", "label"], observed=True)["offcpu_ns"].sum().reset_index()
    lab = lab[lab["cause"].astype("str").to_numpy() == primary[lab["_row"].to_numpy()]] if n else lab
    lab = lab.sort_values("offcpu_ns", ascending=False, kind="stable").drop_duplicates("_row")
    label = pd.Series(lab["label"].to_numpy(), index=lab["_row"].to_numpy()).reindex(range(n))
    out["cause_label"] = label.fillna("no off-CPU interval > 100 us (ran on CPU)").to_numpy()

    # journal fill at the start and its low point during the call
    start = asof(timeline, st)
    limits = journal_limits(session, timeline)
    dev_limits = limits.reindex(st["dev"].astype("str")).reset_index(drop=True) if n else limits.iloc[:0]
    free_start = start["free_blocks"].astype("float64").fillna(st["journal_free_blocks"].astype("float64"))
    log_blocks = start["log_blocks"].astype("float64").fillna(st["journal_log_blocks"].astype("float64"))
    log_blocks = log_blocks.fillna(dev_limits["log_blocks"])
    inside = pd.Series(range_min(timeline, st.assign(dev=st["dev"].fillna(""))), index=st.index)
    min_free = pd.concat([free_start, inside, st["journal_min_free_blocks"].astype("float64")], axis=1).min(axis=1)
    mtb = start["max_transaction_blocks"].astype("float64").fillna(dev_limits["max_transaction_blocks"])
    out["free_start_blocks"] = free_start.to_numpy()
    out["fill_start_pct"] = fill_pct(free_start, log_blocks).to_numpy()
    out["min_free_blocks"] = min_free.to_numpy()
    out["fill_max_pct"] = fill_pct(min_free, log_blocks).to_numpy()
    out["log_blocks"] = log_blocks.to_numpy()
    out["max_transaction_blocks"] = mtb.to_numpy()
    out["forced_fill_pct"] = forced_fill_pct(mtb, log_blocks).to_numpy()
    own_space = (st["journal_free_blocks"].astype("float64") - RESERVED_BLOCKS
                 - st["journal_committing_credits"].astype("float64").fillna(0.0))
    space = pd.concat([start["space_left_blocks"].astype("float64"), own_space,
                       pd.Series(range_min(timeline, st.assign(dev=st["dev"].fillna("")), value="space_left_blocks"),
                                 index=st.index)], axis=1).min(axis=1)
    out["min_space_left_blocks"] = space.to_numpy()
    out["at_forced_level"] = (((min_free - RESERVED_BLOCKS) < mtb) | (space < mtb)).to_numpy()
    space_start = start["space_left_blocks"].astype("float64").fillna(own_space)
    out["headroom_start_blocks"], out["headroom_start_pct"] = (
        x.to_numpy() for x in headroom(space_start, mtb, log_blocks))
    out["min_headroom_blocks"], out["min_headroom_pct"] = (x.to_numpy() for x in headroom(space, mtb, log_blocks))
    waited = (out["checkpoint_ms"].to_numpy() > 0) | (own > 0)
    out["forced"] = (space < mtb).to_numpy() & waited
    out["running_transaction"] = start["running_transaction"].astype("Int64").to_numpy()
    out["committing_transaction"] = start["committing_transaction"].astype("Int64").to_numpy()
    out["own_checkpoints"] = own
    out["own_checkpoint"] = own > 0
    ev = session.jbd2_events
    bg = ev[(ev["event"] == "checkpoint") & ev["jbd2_thread"]]
    out["background_checkpoints"] = count_between(bg, st.assign(dev=st["dev"].fillna(""))) if n else own
    return out[stall_columns()].reset_index(drop=True)


def by_cause(stalls):
    """Per cause: ``count`` (stalls whose primary cause it is) and ``total_ms`` (off-CPU time
    inside stalls attributed to it).  Every cause has a row, zeros included."""
    import pandas as pd

    count = stalls["cause"].value_counts().reindex(list(CAUSES), fill_value=0)
    total = pd.Series({c: float(stalls[f"{c}_ms"].sum()) for c in CAUSES})
    return pd.DataFrame({"count": count.astype("int64"), "total_ms": total}).rename_axis("cause")
