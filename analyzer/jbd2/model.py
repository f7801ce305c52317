"""A journal-size model: the smallest journal whose handles never wait for log space.

jbd2 makes a handle checkpoint when ``jbd2_log_space_left() < j_max_transaction_buffers``
(``add_transaction_credits -> __jbd2_log_wait_for_space``), and
``j_max_transaction_buffers = (journal blocks - fast-commit blocks) / 3`` since 6.11 (``/ 4``
before; the session shows the divisor as journal blocks / max_transaction_blocks).  What must
fit is the workload's *hot set*: the distinct metadata blocks it keeps dirty.  A larger
journal allows larger transactions, and a block dirtied again while its transaction runs is
logged once per commit, not once per handle; a block re-logged by a later transaction leaves
the older one's checkpoint list without I/O (``jbd2_journal_commit_transaction``:
``cp_transaction->t_chp_stats.cs_dropped++``).  So the run's logged blocks overstate what a
larger journal must hold, and a run slowed by its own stalls says nothing about wall-clock
rates: the model uses only work counts.

Inputs, all from the session (per journal):

- ``blocks``: distinct blocks per transaction summed (``jbd2_run_stats``: ``blocks``);
  ``logged_blocks`` (with descriptor and commit blocks) gives the log overhead per block;
- ``relogged_blocks``: blocks whose copy in an older transaction was superseded by a later
  commit (``jbd2_checkpoint_stats``: ``dropped``); ``new_to_log_blocks = blocks - relogged``
  counts blocks entering the log without an older copy in it (first touches, and blocks
  touched again after a checkpoint wrote them home);
- ``span_blocks``: the log the run actually had (used blocks, mean and peak of the fill
  samples).

With a hot set of ``D`` blocks touched at random, a block's copy stays in a log span of ``S``
blocks until it is touched again, so the share of later touches that find no copy in the log
is ``exp(-S / D)``: ``(new - D) / (blocks - D) = exp(-S / D)``, solved for ``D`` by
bisection with ``S`` the mean span (giving ``D_low``) and the peak span (``D_high``), both
kept within ``[new - written_home, new]``: a block enters the log again only after a
checkpoint wrote it home (or writeback cleaned it), so with nothing written home the count
of blocks new to the log is the hot set itself.  Where the session counted the blocks
forced checkpoints wrote home (``home_writes``), the distinct ones bound ``D`` from below
(every one is of the hot set: this is what a log far smaller than the hot set shows best,
where the equation sees mostly the few blocks every transaction re-logs), and each write of a
block beyond its first bounds it from above (the block had returned to the log, counted new).
All but a stream's: blocks written home once in runs of adjacent blocks (an inode table
filled in order) need only the log to hold them, once, beside the hot set's transaction.
A transaction logs a block once however often it was touched, so the span's logged blocks
stood for more touches than blocks (``hot_set``'s ``txn_blocks``).

Two bounds on the journal follow from the kernel's condition.  ``high``: one transaction
(at most ``j_max_transaction_buffers``) holds the whole hot set, so no handle ever has to
wait: ``divisor * (D_high * logged/blocks + 32) + fast-commit blocks``.  ``low``: the log
holds the hot set once (every older copy re-logged away) with one maximum transaction of
room left: ``divisor / (divisor - 1) * (D_low * logged/blocks + 32) + fast-commit blocks``.
A stream is what the low bound describes: its blocks stay in the log once each until they
are written home, and no transaction needs to hold them all; so ``high`` takes the divisor
down to ``divisor / (divisor - 1)`` as the stream share (``D_high / new``) goes from
``STREAMING_SHARE`` to 1 (holding_divisor).  The recommendation is ``high`` and a margin of
10 % (``MARGIN``: the threshold's spread between runs) rounded up to a whole MiB (ext4 takes
whole MiB).  Checked against bisected thresholds in the lab (benchmarks/advice_accuracy.py).

**Two regimes.** A *hot set* workload re-dirties the same blocks (the equation has a root
well below the blocks new to the log). A *streaming* one (a copy, an archive extracted, a
tree created or removed) logs most blocks once: its hot set is every block it touched, and
the journal holds each until a checkpoint writes it home or writeback does, which happens
once the block has been dirty for ``dirty_expire_centisecs`` (plus up to one
``dirty_writeback_centisecs`` period: the ``writeback`` settings the session keeps; the
kernel's defaults, 30 s and 5 s, when it has none). A streaming journal that holds the
blocks newly logged in that window finds them clean when it checkpoints. So, streaming:
``D`` is the blocks new to the log in one window at the run's rate (``new`` when the run was
shorter than the window, and then a larger job of the same kind needs more, up to a
window's worth).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jstall import jbd2

if TYPE_CHECKING:
    from collections.abc import Sequence

    from numpy.typing import ArrayLike


@dataclass(frozen=True)
class JournalModel:
    """The model's inputs and result for one journal.  Sizes in MiB, counts in blocks."""

    dev: str
    block_size: int
    journal_mib: float
    divisor: float
    fast_commit_blocks: int
    transactions: int
    handles: int
    blocks: int
    logged_blocks: int
    relogged_blocks: int
    written_home_blocks: int
    new_to_log_blocks: int
    span_mean_blocks: float
    span_peak_blocks: float
    hot_blocks_low: float
    hot_blocks_high: float
    low_mib: float
    high_mib: float
    journal_size_mib: int
    regime: str = "hot set"
    run_s: float = None
    window_s: float = None
    window_blocks: float = None
    epochs: int = 1
    epoch: int = 1
    stream_share: float = None
    home_blocks: int = None
    home_hot_blocks: int = None

    def as_dict(self) -> dict:
        return asdict(self)


def hot_set(blocks: float, new_blocks: float, span: float, txn_blocks: ArrayLike | None = None) -> float:
    """The hot-set size ``D`` with ``(new - D) / (blocks - D) = exp(-span / D)`` (bisection);
    ``new_blocks`` when every block was new (nothing re-logged) or the equation has no root.

    ``txn_blocks``: the distinct blocks of each transaction. A transaction logs a block once
    however often its handles touched it, so a span of logged blocks stood for more touches
    than blocks: a transaction of ``b`` distinct blocks drawn from ``D`` took
    ``-D ln(1 - b / D)`` touches. And a block's older copy is looked for behind its own
    transaction, half of which (on average) the span already counts. With them the
    equation's exponent is ``(span - b2 / 2) * touches_per_block / D`` (``b2``: the size
    of the transaction an average block was logged in)."""
    if blocks <= 0 or new_blocks <= 0 or span <= 0 or new_blocks >= blocks:
        return float(max(new_blocks, 0))
    sizes = None if txn_blocks is None else np.asarray(txn_blocks, dtype="float64")
    if sizes is not None:
        sizes = sizes[sizes > 0]
    if sizes is not None and len(sizes):
        total = float(sizes.sum())
        reach = max(span - float((sizes * sizes).sum()) / total / 2.0, 0.0)

        def exponent(d):
            touches = float(-d * np.log(1.0 - np.minimum(sizes / d, 0.999)).sum())
            return reach * (touches / total) / d
    else:
        def exponent(d):
            return span / d

    def f(d):
        return (new_blocks - d) / (blocks - d) - math.exp(-exponent(d))

    lo, hi = 1e-6 * new_blocks + 1e-9, float(new_blocks) - 1e-9
    f_lo = f(lo)
    if f_lo * f(hi) > 0:
        return float(new_blocks)
    for _ in range(80):  # bisection to ~1e-24 of the interval
        mid = 0.5 * (lo + hi)
        f_mid = f(mid)
        if f_lo * f_mid <= 0:
            hi = mid
        else:
            lo, f_lo = mid, f_mid
    return 0.5 * (lo + hi)


#: the recommended size over the model's upper bound: the smallest journal big enough for the
#: same workload moves between runs (lab tune: 16, 18 and 20 MiB for the lab's xattr of 1,500
#: files in three tunes; 10 and 9 for fs_mark's 20,000 files a thread), and a size at the
#: estimate itself would be big enough for about half of them
MARGIN = 1.1
#: a hot set this close to the blocks new to the log means nearly nothing was touched twice
#: (from it on, what the log holds is partly a stream: holding_divisor)
STREAMING_SHARE = 0.9
#: the kernel's defaults of dirty_expire_centisecs and dirty_writeback_centisecs
DEFAULT_EXPIRE_CS, DEFAULT_WRITEBACK_CS = 3000, 500


def writeback_window_s(writeback: dict | None = None) -> float:
    """Seconds a dirty block waits at most for writeback: dirty_expire plus one flusher
    period (the session's ``writeback`` settings, else the kernel's defaults)."""
    wb = writeback or {}
    expire = wb.get("dirty_expire_centisecs", DEFAULT_EXPIRE_CS)
    period = wb.get("dirty_writeback_centisecs", DEFAULT_WRITEBACK_CS)
    return (float(expire) + float(period)) / 100.0


def model(journal: dict, txns: pd.DataFrame, checkpoint_stats: pd.DataFrame, timeline: pd.DataFrame,
          kernel_release: str | None = None, run_s: float | None = None, writeback: dict | None = None,
          sync_ns: Sequence[int] | None = None, home_writes: pd.DataFrame | None = None) -> JournalModel | None:
    """The :class:`JournalModel` of one journal (a row of ``journals.summary``), or None
    without committed transactions or journal geometry. ``run_s``: the session's time;
    ``writeback``: its /proc/sys/vm writeback settings (the streaming regime's window);
    ``sync_ns``: times at which every dirty metadata block was on the device (a lab phase
    made durable, a syncfs or sync returned): blocks logged before one need no journal space
    after it, so the model sizes the busiest stretch between them (``epochs``, ``epoch``);
    ``home_writes``: the session's home_writes table (each block forced checkpoints wrote
    home, with its first and last time), whose distinct blocks in a stretch bound its hot
    set from below."""
    dev = journal["dev"]
    t = txns[txns["dev"] == dev]
    jb = journal.get("journal_blocks")
    bs = journal.get("block_size")
    bs = int(bs) if bs and pd.notna(bs) else 4096
    if not len(t) or not jb or pd.isna(jb):
        return None
    jb = float(jb)
    mtb = journal.get("max_transaction_blocks")
    fc = float(journal.get("fast_commit_blocks") or 0) if journal.get("fast_commit") else 0.0
    divisor = jbd2.transaction_divisor(jb, float(mtb) if mtb and pd.notna(mtb) else None, fc, kernel_release)
    cs = checkpoint_stats[checkpoint_stats["dev"].astype("str") == dev]
    tl = timeline[timeline["dev"] == dev]
    window = writeback_window_s(writeback)
    ts = t["ts_ns"].to_numpy(dtype="int64") if "ts_ns" in t else None
    bounds = sorted({int(b) for b in (sync_ns or ())})
    hw = home_writes[home_writes["dev"].astype("str") == dev] if home_writes is not None and len(home_writes) else None
    if ts is None or not bounds:
        epochs = [(t, cs, tl, run_s, _home(hw, block_size=bs))]
    else:
        # the first stretch from the start, the last to the end: checkpoint statistics and fill
        # samples outside the transactions' own times belong to them
        edges = [-2**63] + [b for b in bounds if ts.min() <= b < ts.max()] + [2**63 - 1]
        c_ts = cs["ts_ns"].to_numpy(dtype="int64") if "ts_ns" in cs else None
        l_ts = tl["ts_ns"].to_numpy(dtype="int64") if "ts_ns" in tl else None
        epochs = []
        for lo, hi in zip(edges[:-1], edges[1:]):
            sel = (ts > lo) & (ts <= hi)
            if not sel.any():
                continue
            span_s = (min(hi, int(ts.max())) - max(lo, int(ts.min()))) / 1e9 if len(edges) > 2 else run_s
            home = _home(hw, lo, hi, bs)
            epochs.append((t[sel], cs if c_ts is None else cs[(c_ts > lo) & (c_ts <= hi)],
                           tl if l_ts is None else tl[(l_ts > lo) & (l_ts <= hi)], span_s, home))
    fits = [_hot_set_of(*e, window) for e in epochs]
    mib = bs / 2**20

    def sizes(f):  # (high, low) in MiB
        overhead = f["logged"] / f["blocks"] if f["blocks"] else 1.0
        holding = holding_divisor(divisor, f["stream_share"])
        high = jbd2.blocks_needed(f["d_high"], overhead, holding, fc)
        if f["home_stream"]:
            # the hot set the blocks written home show, in one transaction, and beside it the
            # stream they show, held once
            high = max(high, jbd2.blocks_needed(f["home_hot"], overhead, holding, fc)
                       + holding_divisor(divisor, 1.0) * f["home_stream"] * overhead)
        return high * mib, jbd2.blocks_needed(f["d_low"], overhead, holding_divisor(divisor, 1.0), fc) * mib

    # the busiest stretch: the one that needs the largest journal
    k = max(range(len(fits)), key=lambda i: sizes(fits[i]))
    f = fits[k]
    high, low = sizes(f)
    if t["blocks"].gt(0).any() and float(journal.get("forced_checkpoints") or 0) > 0:
        low = min(max(low, jb * mib), high)  # the run shows that the journal it had was too small
    return JournalModel(
        dev=dev, block_size=bs, journal_mib=jb * mib, divisor=divisor, fast_commit_blocks=int(fc),
        transactions=f["transactions"], handles=f["handles"], blocks=f["blocks"], logged_blocks=f["logged"],
        relogged_blocks=f["relogged"], written_home_blocks=f["written"], new_to_log_blocks=f["new"],
        span_mean_blocks=f["s_mean"], span_peak_blocks=f["s_peak"], hot_blocks_low=f["d_low"],
        hot_blocks_high=f["d_high"], low_mib=low, high_mib=high, journal_size_mib=int(math.ceil(high * MARGIN)),
        regime=f["regime"], run_s=float(f["run_s"]) if f["run_s"] else None, window_s=window,
        window_blocks=f["window_blocks"], epochs=len(epochs), epoch=k + 1, stream_share=f["stream_share"],
        home_blocks=f["home"] if home_writes is not None else None,
        home_hot_blocks=f["home_hot"] if home_writes is not None else None)


def holding_divisor(divisor: float, stream_share: float) -> float:
    """Journal blocks per hot-set block (before the log overhead) at the model's upper bound:
    ``divisor`` for a hot set (one transaction holds it), ``divisor / (divisor - 1)`` for a
    stream (the log holds each block once, until it is written home, with one transaction's
    room left), and between them, linearly, for a stream share (hot set over the blocks new
    to the log) from STREAMING_SHARE to 1."""
    once = divisor / max(divisor - 1.0, 1.0)
    if stream_share is None or stream_share <= STREAMING_SHARE:
        return divisor
    w = min((stream_share - STREAMING_SHARE) / (1.0 - STREAMING_SHARE), 1.0)
    return divisor - (divisor - once) * w


#: write bios of adjacent blocks queued within this of each other went in one checkpoint's
#: batch (jbd2 submits a checkpoint's buffers together): one request's worth on the device
RUN_GAP_NS = 10_000_000
#: a stream's run: this many adjacent blocks or more (a random hot set's blocks written home
#: together are rarely three in a row)
STREAM_RUN_BLOCKS = 3


def _home(hw, lo=None, hi=None, block_size=4096):
    """(distinct blocks, hot ones, re-entries) of the home_writes rows ``hw`` in the stretch
    (lo, hi]: the blocks forced checkpoints wrote home in it (at their first or last write, or
    between); of them the hot set's, which are all but a stream's (blocks written home once,
    each beside an adjacent block written home at the same time: what a run of blocks
    dirtied together and never again leaves, and what the device takes in few requests); and
    the writes beyond each block's first of the blocks written home only within it, each of
    which followed the block's return to the log. (0, 0, 0) without rows."""
    if hw is None or not len(hw):
        return 0, 0, 0
    if lo is not None:
        first, last = hw["first_ns"], hw["last_ns"]
        inside = (first > lo) & (last <= hi)
        reentries = int(hw["writes"][inside].sum()) - int(inside.sum())
        hw = hw[(first <= hi) & (last > lo)]
    else:
        reentries = int(hw["writes"].sum()) - len(hw)
    h = hw.sort_values("sector")
    sector, first = h["sector"].to_numpy(dtype="int64"), h["first_ns"].to_numpy(dtype="int64")
    once = h["writes"].to_numpy() == 1
    # runs of blocks written home once, each adjacent to the next and written with it
    joined = (np.diff(sector) == max(int(block_size) // 512, 1)) & (np.abs(np.diff(first)) <= RUN_GAP_NS) \
        & once[1:] & once[:-1]
    run_id = np.concatenate(([0], np.cumsum(~joined)))
    length = np.bincount(run_id)[run_id]
    stream = once & (length >= STREAM_RUN_BLOCKS)
    return len(h), len(h) - int(stream.sum()), reentries


def _hot_set_of(t, cs, tl, run_s, home, window):
    """The hot set (blocks) of one stretch of transactions: their counts, the log span, the
    regime and, streaming, the blocks new to the log in writeback's window. ``home``: the
    distinct blocks forced checkpoints wrote home in the stretch and the re-entries their
    repeated writes show ((0, 0): not counted)."""
    blocks = int(t["blocks"].sum())
    logged = int(t["blocks_logged"].sum())
    relogged = int(cs["dropped"].sum()) if "dropped" in cs else 0
    written = int(cs["written"].sum()) if len(cs) else 0
    new = max(blocks - relogged, 0)
    used = tl["used_blocks"] if len(tl) else None
    s_mean = float(used.mean()) if used is not None else float("nan")
    s_peak = float(used.max()) if used is not None else float("nan")
    sizes = t["blocks"].to_numpy()
    d_low = float(new) if math.isnan(s_mean) else hot_set(blocks, new, s_mean, sizes)
    d_high = float(new) if math.isnan(s_peak) else hot_set(blocks, new, s_peak, sizes)
    # a block enters the log again only after it left it unre-logged: written home by a
    # checkpoint (or cleaned by writeback), so new - written <= D <= new. Every distinct block
    # a checkpoint wrote home is one of the hot set: home <= D (a log far smaller than the hot
    # set re-logs little of it, and the equation then sees mostly the few blocks every
    # transaction touches); and each of its writes home beyond the first followed a return to
    # the log that counted as new: D <= new - re-entries
    distinct, hot, reentries = home
    # a stream's blocks written home in a longer run than writeback's window: a window's worth
    stream = (distinct - hot) * (min(1.0, window / run_s) if run_s else 1.0)
    ceiling = float(max(new - reentries, 0))
    floor = min(float(max(new - written, hot, 0)), ceiling)
    d_low, d_high = min(d_low, d_high), max(d_low, d_high, float(t["blocks"].max()))
    d_low, d_high = min(max(d_low, floor), ceiling), min(max(d_high, floor), ceiling)
    regime, window_blocks = "hot set", None
    stream_share = d_high / new if new > 0 else None
    if new > 0 and d_high >= STREAMING_SHARE * new:
        regime = "streaming"
        window_blocks = float(new) if not run_s or run_s <= window else new * window / run_s
        biggest = float(t["blocks"].max())
        d_low, d_high = min(d_low, max(window_blocks, biggest)), min(d_high, max(window_blocks, biggest))
    return {"transactions": len(t), "handles": int(t["handle_count"].sum()), "blocks": blocks, "logged": logged,
            "relogged": relogged, "written": written, "new": new, "s_mean": s_mean, "s_peak": s_peak,
            "d_low": d_low, "d_high": d_high, "regime": regime, "window_blocks": window_blocks, "run_s": run_s,
            "stream_share": stream_share, "home": distinct, "home_hot": hot, "home_stream": stream}
