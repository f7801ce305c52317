"""Explanations and recommendations, each with the numbers behind it.

Every recommendation is a dict ``{kind, text, estimate, values}``: ``kind`` names the change
(or finding), ``text`` is one paragraph for people, ``estimate`` is true when a number in it
rests on a model rather than a measurement (the text says "estimate" and its assumption),
``values`` holds the numbers.  Kinds: ``lost_events``, ``no_stalls``, ``journal_size``,
``inode_size``, ``external_journal``, ``fast_commit``, ``transaction_wait``, ``commit_wait``,
``buffer_io``, ``lock_buffer``, ``writeback_throttle``, ``cpu``.
"""

import math

from .fill import RESERVED_BLOCKS

XATTR_SYSCALLS = ("setxattr", "lsetxattr", "fsetxattr", "setxattrat", "removexattr", "lremovexattr",
                  "fremovexattr", "removexattrat")
FSYNC_SYSCALLS = ("fsync", "fdatasync")

#: How long logged metadata stays in the journal before the flusher threads write it home and
#: a commit frees the space: dirty_expire_centisecs (30 s) + dirty_writeback_centisecs (5 s)
#: + the default commit interval (5 s).  Used only for the journal-size estimate.
RESIDENCE_S = 40.0


def _fmt_mib(mib):
    return f"{mib / 1024:g} GiB" if mib >= 1024 else f"{mib:g} MiB"


def peak_window_blocks(txns, window_s):
    """Largest number of blocks logged (run_stats ``blocks_logged``) by the transactions of
    one journal within any ``window_s``-second window (vectorized: cumulative sums and a
    searchsorted)."""
    import numpy as np

    if not len(txns):
        return 0
    t = txns.sort_values("ts_ns")
    ts = t["ts_ns"].to_numpy(dtype="int64")
    cum = np.concatenate([[0], np.cumsum(t["blocks_logged"].to_numpy(dtype="int64"))])
    hi = np.searchsorted(ts, ts + int(window_s * 1e9), side="right")
    return int((cum[hi] - cum[np.arange(len(ts))]).max())


def journal_size_needed(journal, txns, window_s=RESIDENCE_S):
    """Estimate the journal size (blocks) that keeps the free space above the forced level.

    The log must hold the blocks logged in any ``window_s`` window (the peak measured here)
    plus jbd2's reserve (32) plus one maximum transaction, which jbd2 sizes in proportion to
    the journal (``max_transaction_blocks / journal_blocks`` as measured).  Returns
    ``(blocks, peak_window_blocks)``."""
    jb = float(journal["journal_blocks"])
    lb = float(journal["log_blocks"]) if journal["log_blocks"] == journal["log_blocks"] else jb
    ratio = float(journal["max_transaction_blocks"]) / jb
    overhead = max(jb - lb, 0.0)
    peak = peak_window_blocks(txns, window_s)
    need = (peak + RESERVED_BLOCKS + overhead) / max(1.0 - ratio, 0.05)
    return int(math.ceil(need)), peak


def _pow2_mib(blocks, block_size):
    mib = blocks * block_size / 2**20
    return float(2 ** math.ceil(math.log2(max(mib, 1.0))))


def recommendations(session, journals, stalls, causes, call_table, txns, min_ms):
    """Build the list of recommendations (see the module docstring)."""
    out = []
    lost = {k: int(v) for k, v in (session.meta.get("events_lost") or {}).items()}
    stacks_lost = int(session.meta.get("stacks_lost") or 0)
    from .recording import NOTE_SHARE, losses

    if any(r["share"] >= NOTE_SHARE for r in losses(session)):  # smaller losses are only a note
        parts = ", ".join(f"{k} {v}" for k, v in lost.items() if v)
        if stacks_lost:
            parts = (parts + ", " if parts else "") + f"stacks {stacks_lost}"
        out.append({"kind": "lost_events", "estimate": False, "values": {**lost, "stacks": stacks_lost},
                    "text": f"Events were lost while recording ({parts}): counts and stall times below are "
                            "lower bounds. Record again with fewer devices or a higher --min-ms."})
    if not len(stalls):
        out.append({"kind": "no_stalls", "estimate": False, "values": {"min_ms": min_ms},
                    "text": f"No traced call took {min_ms:g} ms or more: no journal stall to remove."})
        return out
    total_ms = float(stalls["latency_ms"].sum())
    share = {c: float(causes.loc[c, "total_ms"]) / total_ms if total_ms else 0.0 for c in causes.index}
    xattr_calls = call_table[call_table["syscall"].isin(XATTR_SYSCALLS)]
    lab = (session.meta.get("lab") or {}).get("config") or {}
    for _, j in journals.iterrows():  # one iteration per journal
        dev = j["dev"]
        s = stalls[stalls["dev"].astype("str") == dev]
        cp_ms = float(s["checkpoint_ms"].sum())
        if not (cp_ms > 0 or j["forced_checkpoints"] > 0):
            continue
        t = txns[txns["dev"] == dev]
        bs = int(j["block_size"] or 4096)
        jb = j["journal_blocks"]
        if jb == jb and jb and j["max_transaction_blocks"] == j["max_transaction_blocks"]:
            need, peak = journal_size_needed(j, t)
            cur_mib = jb * bs / 2**20
            rec_mib = _pow2_mib(need, bs)
            out.append({
                "kind": "journal_size", "estimate": True,
                "values": {"dev": dev, "journal_mib": cur_mib, "needed_blocks": need, "recommended_mib": rec_mib,
                           "peak_logged_blocks": peak, "window_s": RESIDENCE_S,
                           "forced_fill_pct": j["forced_fill_pct"], "max_fill_pct": j["max_fill_pct"],
                           "forced_checkpoints": int(j["forced_checkpoints"]), "checkpoint_stall_ms": cp_ms},
                "text": (f"{dev}: the {_fmt_mib(cur_mib)} journal reached {j['max_fill_pct']:.1f}% full; from "
                         f"{j['forced_fill_pct']:.1f}% on, a task asking for a handle must checkpoint. "
                         f"{int(j['forced_checkpoints'])} checkpoints were forced on user tasks and "
                         f"{cp_ms:.0f} ms of stall time was spent in them. Estimate: the run logged up to "
                         f"{peak} blocks in {RESIDENCE_S:g} s (how long metadata stays in the log before "
                         f"writeback frees it); a journal of at least {need} blocks, i.e. "
                         f"{_fmt_mib(rec_mib)} (mkfs.ext4 -J size={int(rec_mib)} or tune2fs), "
                         "would have kept the fill below the forced-checkpoint level."),
            })
        xc = int(xattr_calls["count"].sum()) if len(xattr_calls) else 0
        if j["inode_size"] == 128 and xc:
            logged = int(t["blocks_logged"].sum())
            files = lab.get("files")
            if len(t) and t["handle_count"].sum() > 0:
                per_t = xc * t["handle_count"] / t["handle_count"].sum()
                cap = per_t.clip(upper=t["blocks_logged"])
                if isinstance(files, int) and files > 0:
                    cap = cap.clip(upper=files)
                xblocks = float(cap.sum())
            else:
                xblocks = float(min(xc, logged))
            xshare = 100.0 * xblocks / logged if logged else float("nan")
            out.append({
                "kind": "inode_size", "estimate": True,
                "values": {"dev": dev, "inode_size": 128, "xattr_calls": xc, "logged_blocks": logged,
                           "xattr_blocks": xblocks, "xattr_block_pct": xshare},
                "text": (f"{dev}: 128-byte inodes have no room for extended attributes, so each of the {xc} "
                         "xattr calls dirtied an external attribute block (one "
                         f"{bs // 1024} KiB filesystem block) that the journal logs. "
                         f"Estimate: about {xshare:.0f}% of the {logged} logged blocks were such blocks "
                         "(assuming one distinct block per xattr call within a transaction). With "
                         "256-byte inodes (mkfs.ext4 -I 256) small attributes (up to about 90 bytes in "
                         "all) live inside the inode and those blocks are not written at all."),
            })
        if not j.get("journal_device"):
            out.append({
                "kind": "external_journal", "estimate": False,
                "values": {"dev": dev, "avg_logging_ms": j["avg_logging_ms"]},
                "text": (f"{dev}: an external journal on a faster device (mkfs.ext4 -O journal_dev; "
                         "-J device=...) shortens commits (logging took "
                         f"{j['avg_logging_ms']:.1f} ms per transaction) but a checkpoint still writes the "
                         "blocks home to this device: it helps checkpoint stalls only together with a "
                         "larger journal."),
            })
        fs = call_table[call_table["syscall"].isin(FSYNC_SYSCALLS)]
        if not j.get("fast_commit"):
            if xc:
                text = (f"{dev}: fast_commit would not help here: changes to extended attributes make a "
                        "transaction ineligible for a fast commit, so every commit stays a full one.")
            else:
                text = (f"{dev}: fast_commit (mkfs.ext4 -O fast_commit) shortens fsync-driven commits "
                        f"({int(fs['count'].sum()) if len(fs) else 0} fsync/fdatasync calls here) but does "
                        "not reduce the journal space that checkpoints must free.")
            out.append({"kind": "fast_commit", "estimate": False,
                        "values": {"dev": dev, "xattr_calls": xc,
                                   "fsync_calls": int(fs["count"].sum()) if len(fs) else 0}, "text": text})
    notes = {
        "transaction_wait": "waiting for the running transaction to be locked or committed: commits are slow "
                            "(see logging and flushing times); a faster journal device or a lower commit "
                            "load helps",
        "commit_wait": "waiting for commits to reach disk (fsync/sync): fast_commit or a faster journal "
                       "device shortens them",
        "buffer_io": "waiting on metadata block reads or writes: the device is slow for this metadata load",
        "lock_buffer": "waiting for jbd2 to release a buffer it was writing",
        "writeback_throttle": "dirty page throttling (balance_dirty_pages): the device cannot keep up with "
                              "the written data",
        "cpu": "waiting for a CPU: the machine was busy",
    }
    for cause, what in notes.items():
        if share.get(cause, 0.0) >= 0.10:
            out.append({"kind": cause, "estimate": False,
                        "values": {"share_pct": 100.0 * share[cause], "total_ms": float(causes.loc[cause, "total_ms"]),
                                   "stalls": int(causes.loc[cause, "count"])},
                        "text": f"{100 * share[cause]:.0f}% of the stall time was {what}."})
    return out
