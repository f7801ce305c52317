"""Recommendations as typed rules, ranked by the stall time each would remove.

A rule is one function ``rule(ctx) -> list[Recommendation]`` registered in :data:`RULES`;
``ctx`` is a :class:`Context` holding the analysis tables.  A rule returns nothing when no
stall time stands behind its change (no journal-size advice at 0 ms of checkpoint stall, no
fast_commit without fsync-driven commit waits).  :func:`recommendations` runs every rule and
ranks the results: findings about the recording (``lost_events``) first, then by
``stall_ms_addressed``, largest first.  Adding a rule is one function and one line in RULES.

Every :class:`Recommendation` carries its numbers as fields (``journal_size_mib``,
``low_mib``, ``high_mib``, ``stall_ms_addressed``) and its ``inputs``; ``estimate`` is true when
a number rests on a model (the text states the model's inputs and range).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jstall.enough import BOUND, verdict
from jstall.metadata import lab_of
from jstall import jbd2, xfs

from jstall.analyzer.advice import curve, remedies
from jstall.analyzer.stalls import causes
from jstall.analyzer.stalls.find import stall_intervals, stall_keys
from jstall.analyzer.jbd2.fill import timeline as fill_timeline
from jstall.analyzer.jbd2.model import MARGIN, holding_divisor, model
from jstall.analyzer.jbd2 import xattrs
from jstall.analyzer.stalls import writers
from jstall.analyzer.jbd2.journals import checkpoints as checkpoint_events
from jstall.analyzer.jbd2.journals import (checkpoint_costs, checkpoint_spans, checkpoint_waits, device_load,
                                           device_saturation, log_share_during, superblock_share, tail_moves,
                                           untraced_checkpoints, untraced_text)
from jstall.analyzer.session.devices import device_rows, device_time
from jstall.analyzer.session.recording import NOTE_SHARE, home_writes, losses, session_span_s, xattr_files
from jstall.analyzer.xfs.logs import kernel_delta

if TYPE_CHECKING:
    from collections.abc import Iterable

    from numpy.typing import ArrayLike

    from jstall.analyzer.session.load import Session
    from jstall.enough import Enough

XATTR_SYSCALLS = ("setxattr", "lsetxattr", "fsetxattr", "setxattrat", "removexattr", "lremovexattr",
                  "fremovexattr", "removexattrat")
FSYNC_SYSCALLS = ("fsync", "fdatasync", "sync_file_range", "msync", "syncfs", "sync")
#: Causes advised by rules of their own (journal_size, inode_size, external_journal; fast_commit;
#: XFS's log_size).
RULE_CAUSES = ("checkpoint", "commit_wait", "log_space")
#: The causes whose per-cause advice comes first, in this order (advice with equal stall time
#: keeps it); every other registered cause follows in registry order.
ADVICE_FIRST = ("metadata_io", "data_writeback", "device_flush", "transaction_wait")
#: A cause with less than this share of the stall time gets no advice of its own.
MIN_SHARE = 0.05
#: an inode-size margin within this share of the journal is "borderline": the margin moves
#: that much between identical runs (an xattr storm beside an fdatasync loop, 4 MiB journal,
#: three runs: -33 %, +11 % and +25 % of the journal, as the share of handles that set
#: attributes went from 0.7 to 0.9)
INODE_BAND = 0.35


@dataclass
class Recommendation:
    """One ranked piece of advice.  ``kind`` names the change or finding; ``text`` one
    paragraph; ``stall_ms_addressed`` the stall time (ms) the change would remove;
    ``estimate`` true when a number rests on a model; sizes in MiB (``low_mib``-``high_mib``
    the range the recommended ``journal_size_mib`` lies in, its upper end); ``inputs`` the
    numbers the text rests on."""

    kind: str
    text: str
    stall_ms_addressed: float = 0.0
    estimate: bool = False
    dev: str = None
    journal_size_mib: float = None
    low_mib: float = None
    high_mib: float = None
    inputs: dict = field(default_factory=dict)
    #: what a remedy removes of the stall time (ms, all causes, all tasks: the summary's
    #: total), as an interval (the model's bounds: remedies.stall_interval); None for a finding
    stall_ms_removed_low: float = None
    stall_ms_removed_high: float = None
    #: the session's stall time the interval is a part of
    stall_ms_total: float = None
    #: what it removes of its own mechanism (forced-checkpoint waits, log-space waits, ...)
    mechanism_ms_removed: float = None
    #: remedies.REGIMES, decided by the figures in inputs["regime_figures"]
    regime: str = None
    #: remedies.COSTS: what applying it takes; ``command`` the exact command(s)
    cost: str = None
    command: str = None
    #: a lab session's durable time (s, its phases') with the remedy applied, as an interval
    #: (remedies.durable_interval); None without phases' durable times
    durable_s_low: float = None
    durable_s_high: float = None

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("durable_s_low", "durable_s_high"):
            if d[k] is None:
                del d[k]   # absent outside a lab session with phases' durable times
        d["values"] = dict(self.inputs)  # the earlier name of ``inputs``
        return d


@dataclass
class Context:
    """What the rules read: the session and the analysis tables (see analysis.Analysis)."""

    session: object
    journals: object
    stalls: object
    causes: object
    calls: object
    txns: object
    timeline: object
    min_ms: float
    waits: object = None
    given_costs: object = None

    def enough(self, dev: object) -> Enough:
        """The jstall.enough verdict of a journal's forced-checkpoint waits (journals.checkpoint_waits)."""
        def make():
            w = self.waits
            if w is None:
                w = checkpoint_waits(self.session, self.stalls, self.costs)
            return {r["dev"]: r for r in w.to_dict("records")}  # one row per journal

        return verdict(self._memo("waits_by_dev", make).get(str(dev)), session_span_s(self.session) * 1e3)

    @property
    def total_ms(self) -> float:
        return float(self.stalls["latency_ms"].sum()) if len(self.stalls) else 0.0

    @property
    def costs(self) -> pd.DataFrame:
        """journals.checkpoint_costs of the session (as given, or once per context)."""
        if self.given_costs is not None:
            return self.given_costs
        return self._memo("costs", lambda: checkpoint_costs(self.session, self.min_ms))

    def _memo(self, key, make):
        """``make()`` computed once per context (the rules ask the same questions)."""
        memo = self.__dict__.setdefault("_answers", {})
        if key not in memo:
            memo[key] = make()
        return memo[key]

    def cause_ms(self, cause: str, dev: str | None = None) -> float:
        def make():
            v = self.stalls[f"{cause}_ms"].to_numpy(dtype="float64")
            if dev is not None:
                v = v[self._memo(("dev", dev), lambda: self.stalls["dev"].astype("str").to_numpy(dtype=object) == dev)]
            return float(np.nansum(v)) if len(v) else 0.0  # Series.sum: NaN counts as 0

        return self._memo(("cause_ms", cause, dev), make)

    def call_count(self, names: Iterable[str]) -> int:
        c = self.calls
        sel = np.isin(c["syscall"].to_numpy(dtype=object), list(names))
        return int(c["count"].to_numpy()[sel].sum()) if sel.any() else 0

    @property
    def lab(self) -> dict:
        return (self.session.meta.get("lab") or {}).get("config") or {}


def _fmt_mib(mib):
    return f"{mib / 1024:g} GiB" if mib >= 1024 else f"{mib:g} MiB"


# --- rules ------------------------------------------------------------------------------------

def lost_events(ctx: Context) -> list[Recommendation]:
    m = ctx.session.meta
    lost = {k: int(v or 0) for k, v in (m.get("events_lost") or {}).items()}
    stacks = int(m.get("stacks_lost") or 0)
    # smaller losses are only a note; runs the kernel skipped (share unknown) always count
    if not any(r["share"] is None or r["share"] >= NOTE_SHARE for r in losses(ctx.session)):
        return []
    parts = ", ".join(f"{k} {v}" for k, v in lost.items() if v)
    if stacks:
        parts = (parts + ", " if parts else "") + f"stacks {stacks}"
    fix = "Record again with fewer devices or a higher --min-ms."
    if lost.get("skipped"):
        fix += " Runs the kernel skipped (another BPF program active on the CPU) need fewer BPF tools beside it."
    return [Recommendation("lost_events", f"Events were lost while recording ({parts}): counts and stall times "
                           f"below are lower bounds. {fix}", inputs={**lost, "stacks": stacks})]


def no_stalls(ctx: Context) -> list[Recommendation]:
    """No stall in the traced calls: said so only when the kernel forced no checkpoint
    outside them either (else where they ran, and how to trace them)."""
    if len(ctx.stalls):
        return []
    xw = ctx.session.xfs_waits
    out = xw[~xw["in_traced_call"].astype(bool)]
    if len(out):
        n, ms = len(out), float(out["wait_ns"].sum()) / 1e6
        return [Recommendation(
            "untraced_checkpoints",
            f"No traced call took {ctx.min_ms:g} ms or more, but {n} XFS log-space wait{'s' * (n != 1)} "
            f"({ms:,.0f} ms) ran outside them. Record again with --calls all, and with those tasks in the "
            "recording's scope, to see the calls that waited.", inputs={"xfs_waits": n, "wait_ms": ms})]
    if len(xw):
        n, ms, longest = len(xw), float(xw["wait_ns"].sum()) / 1e6, float(xw["wait_ns"].max()) / 1e6
        return [Recommendation(
            "no_stalls",
            f"No traced call took {ctx.min_ms:g} ms or more: {n} XFS log-space wait{'s' * (n != 1)} "
            f"({ms:,.0f} ms, the longest {longest:,.1f} ms) cost less than the threshold each.",
            inputs={"min_ms": ctx.min_ms, "xfs_waits": n, "wait_ms": ms})]
    untraced = ctx._memo("untraced", lambda: untraced_checkpoints(ctx.session))
    if len(untraced):
        n = int(untraced["checkpoints"].sum())
        return [Recommendation(
            "untraced_checkpoints",
            f"No traced call took {ctx.min_ms:g} ms or more, but the kernel forced {n} checkpoint"
            f"{'s' * (n != 1)} outside the traced calls ({untraced_text(untraced)}): a task waited for log "
            "space there. Record again with --calls all, and with those tasks in the recording's scope, "
            "to see the calls that waited.",
            inputs={"checkpoints": n, "tasks": len(untraced)})]
    return [Recommendation("no_stalls", f"No traced call took {ctx.min_ms:g} ms or more: no journal stall to remove.",
                           inputs={"min_ms": ctx.min_ms})]


def _models(ctx):
    return ctx._memo("models", lambda: _make_models(ctx))


def sync_points(session: Session, dev: str) -> list[int]:
    """Times (ns) at which every dirty metadata block of ``dev`` was on the device: the end of
    each lab phase (made durable: syncfs returned and the device idle) and of each recorded
    syncfs on it or sync."""
    out = [int(p.end_ns) for p in lab_of(session.meta).phases if p.end_ns]
    c = session.calls
    if len(c):
        sel = c["syscall"].isin(["syncfs", "sync"]).to_numpy() & (
            c["dev"].isna().to_numpy() | (c["dev"].astype("str").to_numpy(dtype=object) == dev)
            | (c["syscall"].to_numpy(dtype=object) == "sync"))
        ends = c["ts_ns"].to_numpy(dtype="int64")[sel] + c["latency_ns"].to_numpy(dtype="int64")[sel]
        out += [int(x) for x in ends]
    return sorted(set(out))


def _make_models(ctx):
    out = {}
    for _, j in ctx.journals.iterrows():  # one row per journal
        m = model(j, ctx.txns, ctx.session.checkpoint_stats, ctx.timeline, ctx.session.meta.get("kernel_release"),
                  run_s=session_span_s(ctx.session), writeback=ctx.session.meta.get("writeback"),
                  sync_ns=sync_points(ctx.session, str(j["dev"])), home_writes=home_writes(ctx.session))
        if m is not None:
            out[j["dev"]] = m
    return out


def journal_size(ctx: Context) -> list[Recommendation]:
    out = []
    models = _models(ctx)
    for _, j in ctx.journals.iterrows():  # one row per journal
        dev = j["dev"]
        e = ctx.enough(dev)
        m = models.get(dev)
        if e.big_enough or m is None:
            continue
        if math.ceil(m.high_mib) <= m.journal_mib:
            forced = int(j.get("forced_checkpoints") or 0)
            # the model sizes what one transaction must hold; the waits came from elsewhere
            # (many small, fsync-driven commits whose blocks stay in the log until written home)
            out.append(Recommendation(
                "journal_size", dev=dev, stall_ms_addressed=e.wait_ms, inputs={**m.as_dict(), "enough": e.as_dict()},
                text=(f"{dev}: the {_fmt_mib(m.journal_mib)} journal is {e.describe()} (jstall's bound: {BOUND}), "
                      f"yet its hot set fits: one transaction holds {m.hot_blocks_high:.0f} blocks of it "
                      f"({m.transactions} transactions of {m.blocks / max(m.transactions, 1):.1f} blocks on average)"
                      + (f", and its {forced:,} forced checkpoints wrote {m.written_home_blocks:,} blocks home "
                         f"({m.written_home_blocks / forced:.1f} each on average"
                         + (f"; {m.home_blocks:,} distinct)" if m.home_blocks else ")")
                         if m.written_home_blocks and forced else "")
                      + ". The model gives no size for this; find one with jstall lab tune (the smallest journal big "
                      "enough, by running the workload).")))
            continue
        low_mib = math.floor(m.low_mib * 10) / 10
        low_text = (f"journals from {low_mib:g} MiB may already do" if low_mib > m.journal_mib else
                    f"the model's lower bound, {low_mib:g} MiB, is no more than this journal, which was not "
                    "enough: a size above it")
        hot = (f"{m.hot_blocks_low:.0f}-{m.hot_blocks_high:.0f} blocks" if round(m.hot_blocks_low) !=
               round(m.hot_blocks_high) else f"{m.hot_blocks_high:.0f} blocks")
        held = holding_divisor(m.divisor, m.stream_share)
        out.append(Recommendation(
            "journal_size", estimate=True, dev=dev, stall_ms_addressed=e.wait_ms, journal_size_mib=m.journal_size_mib,
            # the range holds the recommendation: from the model's lower bound (rounded down) to
            # its upper bound with the margin, rounded up to whole MiB (the recommended size); inputs keep
            # both bounds
            low_mib=max(low_mib, float(m.journal_mib)), high_mib=float(m.journal_size_mib),
            inputs={**m.as_dict(), "enough": e.as_dict()},
            text=(f"{dev}: the {_fmt_mib(m.journal_mib)} journal is {e.describe()} (jstall's bound: {BOUND}). "
                  f"Estimate: a journal of {m.journal_size_mib} MiB (mkfs.ext4 -J size={m.journal_size_mib}, or "
                  f"tune2fs) {_holds_text(m)} (the model's upper bound, "
                  f"{m.high_mib:.1f} MiB, and {100 * (MARGIN - 1):.0f}% for how the smallest journal big enough "
                  f"moves between runs, rounded up to whole MiB); {low_text}. Inputs: {m.blocks} blocks in "
                  f"{m.transactions} transactions, {m.relogged_blocks} of them "
                  f"re-logged by a later commit and {m.written_home_blocks} written home by checkpoints; a log span "
                  f"of {m.span_mean_blocks:.0f} blocks on average ({m.span_peak_blocks:.0f} at most) "
                  f"{_home_text(m)}give a hot set of {hot}; j_max_transaction_buffers = journal / "
                  f"{m.divisor:g}" + (f", and the journal holds a stream once each with a transaction beside it "
                                      f"(journal / {held:.2f})" if held < m.divisor else "")
                  + f"{_epoch_text(m)}. {_regime_text(m)}Confirm with jstall lab tune before changing a "
                  "production filesystem."),
        ))
    return out


def _holds_text(m):
    """What the recommended journal holds: the hot set in one transaction, or a stream once."""
    if holding_divisor(m.divisor, m.stream_share) < m.divisor:
        return "holds the blocks the workload streams once each, with room for a transaction beside them"
    return "lets one transaction hold the workload's hot set"


def _home_text(m):
    if not m.home_blocks:
        return ""
    return f"and the {m.home_blocks:,} distinct blocks forced checkpoints wrote home "


def _epoch_text(m):
    if m.epochs <= 1:
        return ""
    return (f"; these figures are of the busiest of {m.epochs} stretches between points where every dirty "
            "metadata block was on the device (syncfs, sync, a lab phase made durable): blocks logged before one "
            "need no journal space after it")


def _regime_text(m):
    """What the model saw of the workload's regime (journal_model: hot set or streaming)."""
    if m.regime != "streaming":
        return "The workload re-dirtied a hot set of blocks: the size holds for a longer run of the same work. "
    rate = m.new_to_log_blocks / m.run_s if m.run_s else None
    keep = (f"No size holds a longer or faster run of it: checkpoint throughput bounds it, so the device must "
            f"write home the blocks as fast as they enter the log ({rate:,.0f} blocks/s here), sooner (a shorter "
            "writeback window) or beside the log (an external journal). " if rate else "")
    if m.run_s and m.run_s > m.window_s:
        return (f"The workload streamed (it logged most blocks once): the journal must hold the blocks logged in "
                f"writeback's window, {m.window_s:g} s (dirty_expire + one writeback period), about "
                f"{m.window_blocks:,.0f} blocks at this run's rate; a faster run needs more. " + keep)
    return (f"The workload streamed (it logged most blocks once) and ran {m.run_s or 0:.1f} s, less than writeback's "
            f"window of {m.window_s:g} s (dirty_expire + one writeback period): the size is this job's; a larger job "
            f"of the same kind needs more, up to the blocks it logs in {m.window_s:g} s. " + keep)


def writeback_window(ctx: Context) -> list[Recommendation]:
    """A streamed journal (journal_model: most blocks logged once) holds its blocks until they
    are written home; the flusher writes a dirty block once it is dirty_expire_centisecs old
    (checked every dirty_writeback_centisecs), and a checkpoint then finds it clean. A window
    shorter than the time the log takes to fill with new blocks keeps the tail moving: the
    journal holds ``(J (d - 1) / d - 32) * blocks / logged`` blocks once each (a maximum
    transaction beside them) and fills at the run's rate of blocks new to the log. Online (a
    sysctl), for the whole host's page cache."""
    out = []
    models = _models(ctx)
    for _, j in ctx.journals.iterrows():  # one row per journal
        dev = j["dev"]
        m = models.get(dev)
        if m is None or m.regime != "streaming" or not m.run_s or ctx.cause_ms("checkpoint", dev) <= 0:
            continue
        e = ctx.enough(dev)
        if e.big_enough or not e.wait_ms:
            continue
        jb = m.journal_mib * 2**20 / m.block_size
        d = max(m.divisor, 2.0)
        hold = max((jb * (d - 1.0) / d - jbd2.RESERVED_BLOCKS) * m.blocks / max(m.logged_blocks, 1), 0.0)
        rate = m.new_to_log_blocks / m.run_s
        if rate <= 0:
            continue
        fill_s = hold / rate
        wb = ctx.session.meta.get("writeback") or {}
        period_cs = min(int(wb.get("dirty_writeback_centisecs", 500)), 100)
        # a fifth of margin for the flusher's own pace
        expire_cs = int(100 * (0.8 * fill_s) - period_cs)
        inputs = {"journal_blocks": jb, "holds_blocks": hold, "new_blocks_per_s": rate, "fill_s": fill_s,
                  "window_s": m.window_s, "dirty_expire_centisecs": expire_cs,
                  "dirty_writeback_centisecs": period_cs}
        if expire_cs < 100:
            continue   # under a second: writeback would chase every block as it is logged
        cmd = f"sysctl -w vm.dirty_expire_centisecs={expire_cs} vm.dirty_writeback_centisecs={period_cs}"
        inputs["command"] = cmd
        out.append(Recommendation(
            "writeback_window", estimate=True, dev=dev, stall_ms_addressed=e.wait_ms, inputs=inputs,
            text=(f"{dev}: the journal streams: it holds about {hold:,.0f} blocks once each and the run logged "
                  f"{rate:,.0f} new blocks/s, so it fills in {fill_s:,.1f} s, before writeback's window of "
                  f"{m.window_s:g} s writes them home. A window that writes them home sooner ({cmd}; it takes "
                  f"effect at once, for every filesystem's dirty pages on the host, and costs "
                  f"writes of blocks that would have been re-dirtied) lets checkpoints find them clean: up to "
                  f"{e.wait_ms:,.0f} ms of forced-checkpoint waits removed.")))
    return out


#: ext4's commit interval when the mount options do not set one (JBD2_DEFAULT_MAX_COMMIT_AGE)
DEFAULT_COMMIT_S = 5
#: the longer commit interval advised, as a multiple of the current one
COMMIT_LONGER = 3
#: a transaction whose running phase lasted this share of the commit interval or more was
#: closed by the interval's timer (its running phase ends when the timer fires; jiffies)
TIMER_SHARE = 0.9
#: a transaction that logged this share of j_max_transaction_buffers or more was closed
#: because it was full: it closes when the credits its handles reserved reach the limit, so
#: the blocks it logs fall short of it by what they reserved and did not use (xattr updates,
#: 4 MiB journal: every full one logged 292 or 331 blocks of 341, 86 % and 97 %)
FULL_SHARE = 0.8


def commit_seconds(mount_options: str | None) -> float:
    """ext4's commit interval (s) from a filesystem's mount options (``commit=N``; 0 is the
    default), DEFAULT_COMMIT_S without one."""
    for opt in (mount_options or "").split(","):
        if opt.startswith("commit="):
            try:
                v = int(opt.split("=", 1)[1])
            except ValueError:
                continue
            return v if v > 0 else DEFAULT_COMMIT_S
    return DEFAULT_COMMIT_S


def commit_closes(txns: pd.DataFrame, interval_s: float, max_buffers: float | None = None) -> pd.Series:
    """What closed each transaction (a Series: ``timer``, the commit interval expired;
    ``full``, it logged FULL_SHARE of ``max_buffers`` or more; ``other``, a commit asked for
    (fsync, sync, a checkpoint) or a running phase cut short), from the transactions table."""
    run = txns["running_ms"].to_numpy(dtype="float64")
    out = np.where(run >= TIMER_SHARE * interval_s * 1e3, "timer", "other").astype(object)
    if max_buffers:
        full = txns["blocks"].to_numpy(dtype="float64") >= FULL_SHARE * max_buffers
        out = np.where((out == "other") & full, "full", out)
    return pd.Series(out, index=txns.index, dtype=object)


def commit_interval(ctx: Context) -> list[Recommendation]:
    """A longer commit interval (mount -o remount,commit=N): transactions the interval's timer
    closed become 1/COMMIT_LONGER as many; the handles that waited for one of them to lock
    (transaction_wait) wait once where they waited COMMIT_LONGER times, and so do the commit
    waits overlapping them at best (a bigger commit carries more data and metadata, so at
    worst those stay). Commits fsync or a full transaction forced are as many as before.
    Nothing when no timer-closed commit had a wait beside it. Costs a remount; a crash loses
    up to N seconds of metadata changes."""
    out = []
    models = _models(ctx)
    for _, j in ctx.journals.iterrows():  # one row per journal
        dev = str(j["dev"])
        if j.get("kind") == "xfs":
            continue
        t = ctx.txns[ctx.txns["dev"].astype("str") == dev] if len(ctx.txns) else ctx.txns
        if not len(t) or "running_ms" not in t:
            continue
        jrow = next((x for x in ctx.session.journals if str(x.get("dev")) == dev), {})
        interval = commit_seconds(jrow.get("mount_options"))
        m = models.get(dev)
        maxb = None
        if m is not None:
            maxb = m.journal_mib * 2**20 / m.block_size / max(m.divisor, 1.0)
        by = commit_closes(t, interval, maxb)
        n = {k: int((by == k).sum()) for k in ("timer", "full", "other")}
        if not n["timer"]:
            continue
        tt = t[(by == "timer").to_numpy()]
        c0 = tt["commit_locking_ns"].to_numpy(dtype="float64")
        c1 = tt["end_commit_ns"].to_numpy(dtype="float64")
        ok = np.isfinite(c0) & np.isfinite(c1)
        if not ok.any():
            continue
        c0, c1 = c0[ok].astype("int64"), c1[ok].astype("int64")
        share = {c: remedies.through_share(ctx.stalls, c0, c1, dev, c) for c in remedies.THROUGH}
        ms = {c: share[c] * ctx.cause_ms(c, dev) for c in remedies.THROUGH}
        if not sum(ms.values()) > 0:
            continue
        longer = interval * COMMIT_LONGER
        gone = 1.0 - 1.0 / COMMIT_LONGER
        _, mnt = _where(ctx, dev)
        cmd = f"mount -o remount,commit={longer} {mnt}"
        inputs = {"commit_s": interval, "commit_s_advised": longer, "transactions": int(len(t)),
                  "closed_by_timer": n["timer"], "closed_full": n["full"],
                  "closed_other": n["other"],
                  "timer_commits_removed_share": gone, "command": cmd,
                  **{f"{c}_share_beside_timer_commits": share[c] for c in remedies.THROUGH},
                  **{f"{c}_ms_beside_timer_commits": ms[c] for c in remedies.THROUGH}}
        out.append(Recommendation(
            "commit_interval", estimate=True, dev=dev, stall_ms_addressed=gone * sum(ms.values()),
            inputs=inputs,
            text=(f"{dev}: the commit interval ({interval} s) closed {n['timer']:,} of the "
                  f"{len(t):,} transactions ({n['full']:,} closed full, {n['other']:,} by a "
                  "commit asked for: fsync, sync or a checkpoint); "
                  f"{ms['transaction_wait']:,.0f} ms of waits for a transaction to lock and "
                  f"{ms['commit_wait']:,.0f} ms of commit waits overlapped those commits. "
                  f"A {longer} s "
                  f"interval ({cmd}; a remount, online; a crash loses up to {longer} s of metadata "
                  f"changes) closes 1/{COMMIT_LONGER} as many: the lock waits go with the "
                  "commits "
                  "removed; the commit waits at best (a bigger commit carries more).")))
    return out


def inode_size(ctx: Context) -> list[Recommendation]:
    """256-byte (or larger) inodes where 128-byte ones keep every file's attributes in an
    external block the journal logs: the smallest size that holds the attributes the session
    saw set (its xattr_files table; the lab's attributes where the session has none), the
    hot set without the blocks they move."""
    out = []
    xc = ctx.call_count(XATTR_SYSCALLS)
    models = _models(ctx)
    noted = xattr_files(ctx.session)
    for _, j in ctx.journals.iterrows():  # one row per journal
        dev = j["dev"]
        cp_ms = ctx.cause_ms("checkpoint", dev)
        if j["inode_size"] != 128 or not xc:
            continue
        e = ctx.enough(dev)
        if cp_ms <= 0 and (e.big_enough or not e.wait_ms):
            # the same journals journal_size speaks of: forced-checkpoint waits, in stalls
            # or under the recording's threshold (rsync's were 96 ms in one run, the longest
            # 8 ms, and stalls in the next)
            continue
        m = models.get(dev)
        handles = m.handles if m else 0
        xshare = min(xc / handles, 1.0) if handles else float("nan")
        inputs = {"inode_size": 128, "xattr_calls": xc, "handles": handles, "xattr_handle_share": xshare}
        text = (f"{dev}: 128-byte inodes have no room for extended attributes, so each file's attributes live in "
                f"an external block that the journal logs ({xc} xattr calls of {handles} handles). ")
        size, fit_share, why = _inode_size_held(ctx, noted, dev, inputs)
        if size is None:
            # no inode holds them: their blocks stay, and a larger inode table is logged; a
            # finding, not a remedy to try
            out.append(Recommendation("xattr_blocks", text + f"No inode size holds them: {why}.", estimate=True,
                                      dev=dev, inputs=inputs))
            continue
        inputs.update(inode_size_advised=size)
        big = f"{size}-byte inodes"
        rec = Recommendation("inode_size", "", estimate=True, dev=dev, inputs=inputs)
        files_fit = inputs.get("attribute_files_fit")
        if m is not None and (files_fit is not None or not math.isnan(xshare)):
            # the share of the blocks logged that leave the log: each file whose attributes
            # move had an external block of its own, logged at least once (noted); and a
            # handle that set an attribute logged its file's block (the share of handles that
            # did, where a storm re-logs the same blocks)
            moved = xshare * fit_share if not math.isnan(xshare) else 0.0
            if files_fit is not None:
                logged = min(files_fit / max(m.blocks, 1), 1.0)
                moved = max(moved, logged)
                # and the inode table grows: each file's inode takes size / block of a block
                # where it took 128 / block. The log fills at least the files' blocks' share
                # less that more slowly, and its forced checkpoints come that much less often
                grown = (inputs["attribute_files"] * (size - xattrs.BASE_INODE_BYTES) / m.block_size
                         / max(m.blocks, 1))
                inputs.update(inode_table_share_added=grown, logged_share_saved=max(logged - grown, 0.0))
            inputs["moved_block_share"] = moved
            hot = m.hot_blocks_high * (1.0 - moved)
            overhead = m.logged_blocks / max(m.blocks, 1)
            need_low = jbd2.blocks_needed(hot, overhead, m.divisor / max(m.divisor - 1.0, 1.0), m.fast_commit_blocks)
            need_high = jbd2.blocks_needed(hot, overhead, m.divisor, m.fast_commit_blocks)
            jb = m.journal_mib * 2**20 / m.block_size
            margin = jb - need_low
            inputs.update(predicted_hot_blocks=hot, predicted_needed_blocks_low=need_low,
                          predicted_needed_blocks_high=need_high, journal_blocks=jb,
                          predicted_margin_blocks=margin, predicted_margin_pct=100.0 * margin / jb,
                          predicted_margin_one_transaction_blocks=jb - need_high,
                          predicted_margin_one_transaction_pct=100.0 * (jb - need_high) / jb)
            # a margin within INODE_BAND of the journal is within what the figures move between
            # identical runs: neither verdict is sure, and the advice says so (the same on each run)
            band = INODE_BAND * jb
            ok = margin >= 0
            inputs["verdict"] = "suffices" if margin >= band else "short" if margin <= -band else "borderline"
            if math.ceil(m.high_mib) <= m.journal_mib:
                # the journal holds the hot set already (journal_size gives no size): its forced
                # checkpoints come from elsewhere (many small commits wrapping the log, their
                # tail moves), and fewer blocks logged only make it wrap less often
                inputs["verdict"] = "held_already"
            rec.stall_ms_addressed = cp_ms if inputs["verdict"] not in ("short", "held_already") else 0.0
            rec.journal_size_mib = None if need_high <= jb else float(int(-(-need_high * m.block_size // 2**20)))
            head = (f"Estimate: with {big} (mkfs.ext4 -I {size}) {why}, so their blocks are not logged "
                    f"({100 * moved:.0f}% of the {m.blocks:,} blocks logged); the hot set "
                    f"drops from about {m.hot_blocks_high:.0f} to {hot:.0f} blocks, which needs {need_low:.0f} "
                    f"(held once in the log) to {need_high:.0f} (held in one transaction) of the journal's "
                    f"{jb:.0f} blocks: ")
            if inputs["verdict"] == "held_already":
                p = _slower_fill_share(inputs)
                rec.stall_ms_addressed = p * cp_ms
                rec.text = text + head + (f"but the {_fmt_mib(m.journal_mib)} journal holds the hot set already "
                                          f"(about {m.hot_blocks_high:.0f} blocks), so its forced checkpoints come "
                                          "from elsewhere (many small commits wrapping the log); the log fills "
                                          f"{100 * p:.0f}% more slowly with them, and its checkpoints come at most "
                                          "that much less often.")
            elif inputs["verdict"] == "borderline":
                rec.text = text + head + (f"the margin, {margin:.0f} blocks at the peak, is within "
                                          f"{100 * INODE_BAND:.0f}% of the journal, as much as identical runs "
                                          "differ: they may suffice alone; with them a "
                                          f"{_fmt_mib(rec.journal_size_mib or m.journal_mib)} journal would.")
            elif not ok and "logged_share_saved" in inputs:
                saved_share = inputs["logged_share_saved"]
                rec.stall_ms_addressed = saved_share * cp_ms
                rec.text = text + head + (f"they alone would not hold it (short by {-margin:.0f} blocks), so forced "
                                          "checkpoints go on unless writeback keeps up with the slower fill; the log "
                                          f"fills at least {100 * saved_share:.0f}% more slowly (the attributes' "
                                          "blocks less the inode table's growth: each of its blocks holds "
                                          f"{size // 128} times fewer inodes), and its checkpoints come that much "
                                          f"less often. With them a {_fmt_mib(rec.journal_size_mib)} journal would "
                                          "hold it.")
            elif not ok:
                rec.text = text + head + (f"{big} alone would NOT suffice (short by {-margin:.0f} blocks), "
                                          f"and each inode-table block the journal logs would hold {size // 128} "
                                          "times fewer inodes (more blocks to log, not fewer, where the attributes "
                                          f"did not move); with them a {_fmt_mib(rec.journal_size_mib)} journal "
                                          "would.")
            elif need_high <= jb:
                rec.text = text + head + (f"they suffice with a margin of {margin:.0f} blocks "
                                          f"({100 * margin / jb:.0f}% of the journal) at the peak, and "
                                          f"{jb - need_high:.0f} ({100 * (jb - need_high) / jb:.0f}%) even for one "
                                          "transaction.")
            else:
                rec.text = text + head + (f"they likely suffice, with a margin of {margin:.0f} blocks "
                                          f"({100 * margin / jb:.0f}% of the journal) at the peak; a "
                                          f"{_fmt_mib(rec.journal_size_mib)} journal would leave room for the hot set "
                                          "in one transaction.")
        else:
            rec.stall_ms_addressed = cp_ms
            rec.text = text + f"With {big} (mkfs.ext4 -I {size}) {why}."
        out.append(rec)
    return out


def _slower_fill_share(inputs):
    """The share by which an inode size makes the log fill more slowly (the inode rule's
    ``inputs``): ``logged_share_saved`` where the session noted the attributes, else the
    moved blocks' share."""
    return inputs.get("logged_share_saved", inputs.get("moved_block_share", 0.0))


def _inode_size_held(ctx, noted, dev, inputs):
    """(inode size, share of the files it holds, why in words) for the inode_size rule: the
    smallest size holding the attributes of xattrs.FIT_SHARE of the files the session saw
    (``noted``: its xattr_files table, or None), else of the lab's attributes, else 256
    bytes with the share unknown (1.0). The size is None when no size holds them. Adds the
    figures to ``inputs``."""
    fit = xattrs.inode_fit(noted, dev) if noted is not None else None
    if fit is not None and len(fit):
        held = xattrs.smallest_holding(fit)
        med = xattrs.median_bytes(noted, dev)
        inputs.update(attribute_files=int(fit["files"].iloc[0]), attribute_bytes_median=med,
                      attribute_fit=fit.to_dict("records"))
        f256 = fit.iloc[0]
        if held is None:
            return None, 0.0, (f"the median file's attributes take {med:.0f} bytes; "
                               f"{100 * fit['fit_share'].iloc[-1]:.0f}% of the {int(f256['files']):,} files' fit "
                               f"even in {int(fit['inode_size_bytes'].iloc[-1])}-byte inodes")
        inputs["attribute_files_fit"] = held["files_fit"]
        size, space, share = held["inode_size_bytes"], held["attribute_space_bytes"], held["fit_share"]
        why = (f"{100 * share:.0f}% of the {held['files']:,} files' attributes fit in the inode (the median file's "
               f"take {med:.0f} bytes of the {space} it holds")
        if size > 256:
            why += (f"; {100 * f256['fit_share']:.0f}% fit the {int(f256['attribute_space_bytes'])} bytes of "
                    "256-byte inodes")
        return size, share, why + ")"
    attrs, asize = ctx.lab.get("attrs"), ctx.lab.get("attr_size")
    if isinstance(attrs, int) and isinstance(asize, int):
        # the lab's attributes: a short "user." name each
        need = 4 + attrs * (16 + 8 + ((asize + 3) // 4) * 4)
        inputs.update(in_inode_bytes_needed=need)
        for size in xattrs.INODE_SIZES:
            if need <= xattrs.attribute_space_bytes(size):
                return size, 1.0, (f"the {attrs} attributes of {asize} bytes fit in the inode ({need} bytes of "
                                   f"the {xattrs.attribute_space_bytes(size)} it holds)")
        return None, 0.0, f"{attrs} attributes of {asize} bytes take {need} bytes"
    return 256, 1.0, "small attributes live in the inode"


#: the largest request a device takes when the session does not say (the block layer's
#: default max_sectors_kb, BLK_DEF_MAX_SECTORS)
DEFAULT_MAX_REQUEST_KIB = 1280
#: the memory segments a request takes when the session does not say (BLK_MAX_SEGMENTS)
DEFAULT_MAX_SEGMENTS = 128
PAGE_BYTES = 4096


def commit_requests(logged_blocks: ArrayLike, block_size: int, max_request_kib: float | None = None,
                    max_segments: int | None = None) -> np.ndarray:
    """Write requests each commit's log write took (an array, one per commit): its logged
    blocks merged into requests (they are written in order, contiguous) of up to
    max_request_kib and up to max_segments memory segments (each buffer in its own page: a
    4 KiB-block log write carries 128 blocks, 512 KiB, on a device of 128 segments whatever
    its max_sectors_kb), and the commit block on its own (a cache flush and a FUA write)."""
    bs = int(block_size or 4096)
    cap = min(int(max_request_kib or DEFAULT_MAX_REQUEST_KIB) * 1024,
              int(max_segments or DEFAULT_MAX_SEGMENTS) * max(bs, PAGE_BYTES))
    per = max(1, cap // bs)
    return 1.0 + np.ceil(np.asarray(logged_blocks, dtype="float64") / per)


def log_requests(logged_blocks: ArrayLike, block_size: int, max_request_kib: float | None = None,
                 max_segments: int | None = None, journal_blocks: int | None = None,
                 superblock_writes: int = 0) -> float:
    """Write requests the log took on its device: each commit's (commit_requests), one more
    each time the log wraps at the journal's end (``journal_blocks``), and the journal
    superblock's writes as the tail moves. Measured: fs_mark (2 threads, 20,000 files each)
    with a 1,025-block journal on its own loop device (128 segments, 1,280 KiB): 335 write
    requests on that device for 66 commits (bpftrace, block_rq_issue); the session's 64
    commits of 289 logged blocks on average and its 62 superblock writes give 333 (without the
    segment limit, 128)."""
    logged = np.asarray(logged_blocks, dtype="float64")
    wraps = np.floor(logged.sum() / float(journal_blocks)) if journal_blocks else 0.0
    return float(commit_requests(logged, block_size, max_request_kib, max_segments).sum() + wraps
                 + int(superblock_writes or 0))


#: causes whose waits are on the data device's own requests (queued behind the log's on a
#: shared device)
DEVICE_CAUSES = ("metadata_io", "data_writeback", "device_flush")


def external_journal(ctx: Context) -> list[Recommendation]:
    """Judged by device time: a device serves requests one after another, whatever their
    size, and the waits on it queue behind the log's requests; an own journal device takes
    those away. The log's share of the data device's requests — its writes merged into
    requests (counted from the commits) and the device's cache flushes but the one before
    each move of the log's tail (jbd2_cleanup_journal_tail flushes the filesystem's device
    wherever the journal is), against the device's write and flush requests from its own
    counters; for the checkpoints, that share of what the device served while they waited
    (journals.log_share_during), and the rounds of each move of the log's tail that go to the
    journal's device (tail_rounds). What each cause loses: external_journal_fractions. None
    for the checkpoints when they wrote nothing home (their waits were not the device's)."""
    out = []
    meta = {j["dev"]: j for j in ctx.session.journals}
    for _, j in ctx.journals.iterrows():  # one row per journal
        if j.get("journal_device"):
            continue
        r = _external_journal(ctx, j, meta.get(j["dev"], {}))
        if r is not None:
            out.append(r)
    return out


def flush_requests(write_cache: str | None, fua: int | None) -> tuple[int, int]:
    """(flushes a REQ_PREFLUSH costs, flushes a REQ_FUA write costs beside the write) on a
    device: none on one without a volatile cache (``write_cache`` "write through": flushes
    are no-ops); one each on one with it, but a FUA write's flush only where the device has
    no FUA (``fua`` 0: a loop device; the block layer then sends the write and a flush).
    Unknown: a device with a volatile cache and FUA."""
    flush = 0 if write_cache == "write through" else 1
    return flush, (1 if flush and fua == 0 else 0)


def tail_rounds(write_cache: str | None, fua: int | None) -> tuple[int, int]:
    """(rounds, of them the journal superblock's) a forced checkpoint that wrote blocks home
    waits for one after another on a shared device: its writes home, then
    jbd2_cleanup_journal_tail's cache flush of the filesystem's device and the journal
    superblock's REQ_FUA write (jbd2_write_superblock) with its flush where it costs one
    (flush_requests). The superblock's rounds go to the journal's own device; the flush stays
    on the filesystem's."""
    flush, fua_flush = flush_requests(write_cache, fua)
    sb = 1 + fua_flush
    return 1 + flush + sb, sb


def tail_moved_shares(rounds: int, sb_rounds: int, write_requests: float) -> tuple[float, float]:
    """(low, high) share of a forced checkpoint's time in the rounds that go to the journal's
    device (tail_rounds), as the queue ahead of each round is unknown: none (each round takes
    its own requests' time: ``write_requests`` for the writes home, one for each other round)
    or long (every round takes the same time, the queue's)."""
    return sb_rounds / (max(write_requests, 1.0) + rounds - 1), sb_rounds / rounds


#: the waits that queue on the data device's requests (the log's among them): they shrink as
#: its work does
QUEUE_CAUSES = ("commit_wait", "lock_buffer", "transaction_wait", *DEVICE_CAUSES)


def external_journal_fractions(inp: dict) -> tuple[dict[str, float], dict[str, float]]:
    """(low, high): the share of each cause's waits an external journal removes, on a journal
    device as slow as the data device (low) and on a fast one (high), from the figures of
    external_journal's ``inputs`` — the one definition the recommendation's text, its
    stall-time interval and its own-mechanism figure are rendered from.

    - The waits on the device's queue (QUEUE_CAUSES: commits' I/O, the running transaction's
      handles, data pages, metadata blocks, cache flushes) shrink as its work does: a device
      busy throughout serves the same requests in the same time whoever waits for them, so
      the work that leaves it leaves every wait on it. On a fast journal device that is the
      log's share of its requests (``log_request_share``: its writes and every cache flush but
      the tail moves'). On one as slow (``log_request_share_low``): its writes and only the
      flushes surely the log's (each commit's before its commit block, and after it on a
      device without FUA: ``commit_log_flushes``; an fsync that needs no commit flushes the
      device itself), less the flush of the data device each commit with ordered data still
      sends before its commit record (``commit_data_flushes``: t_need_data_flush in
      jbd2_journal_commit_transaction), and no more than the journal device's own share of
      the two devices' work (the slower one then bounds them), at the load the device ran at
      during the waits (``device_load``).
    - ``checkpoint`` (forced checkpoints that wrote blocks home): the rounds of the move of
      the log's tail that go to the journal's device (``tail_moved_share_low``/``_high``:
      tail_moved_shares; where the session holds the kernel's events of each move, the share
      its superblock writes measured, ``superblock_share``, bounds both: no more goes than
      they took) and, of the rest, the log's share of what the data device served while
      they waited (``log_request_share_checkpoints``). On as slow a journal device the
      moved rounds still queue behind the log's own requests there (that share, at the rate
      the device ran during them: ``device_saturation``), and the rest lose the log's share
      at that rate, of its writes alone (``log_write_share_checkpoints``: a cache flush may
      cost the device nothing).
    - ``commit_wait`` while the forced checkpoints wrote home (``commit_wait_during_checkpoints``,
      the share of the commit waits they covered): a commit's log writes queued behind every
      request the device served then; on a fast device of their own, behind the log's alone,
      so at most all but the log's share of them goes (the high end).

    The high end is no bound for a hot set larger than the journal: a faster log fills it
    sooner, and the checkpoints stay as many or more (measured once: a 4 MiB journal beside
    an xattr storm and an fdatasync loop stalled 14.3 s with its log on an unpaced device,
    11.8 s on the data device). No counters of the data device: from nothing to every wait
    on the commits' I/O."""
    share = inp.get("log_request_share")
    if share is None:
        return {}, {c: 1.0 for c in ("commit_wait", "lock_buffer")}
    slow = inp.get("log_request_share_low", share)
    load = inp.get("device_load") or 0.0
    lo = {c: min(slow, 1.0 - slow) * load for c in QUEUE_CAUSES}
    hi = {c: share for c in QUEUE_CAUSES}
    cps = inp.get("log_request_share_checkpoints") or 0.0
    if cps > 0:
        busy = inp.get("device_saturation") or 0.0
        t_lo, t_hi = inp.get("tail_moved_share_low") or 0.0, inp.get("tail_moved_share_high") or 0.0
        # a cache flush may cost the device nothing: the low end counts the log's writes alone
        cpw = min(inp.get("log_write_share_checkpoints", cps), cps)
        lo["checkpoint"] = t_lo * (1 - cpw * busy) + (1 - t_lo) * cpw * busy
        hi["checkpoint"] = t_hi + (1 - t_hi) * cps
        # a commit's log writes queued behind what the device served while the checkpoints
        # wrote home; on a device of their own, behind the log's alone
        during = inp.get("commit_wait_during_checkpoints") or 0.0
        hi["commit_wait"] = during * max(1.0 - cps, share) + (1.0 - during) * share
    return lo, hi


def _external_journal(ctx, j, m):
    """external_journal's Recommendation for journal row ``j`` (metadata ``m``), or None."""
    dev = j["dev"]
    io_ms = sum(ctx.cause_ms(c, dev) for c in ("commit_wait", "lock_buffer"))
    txn_ms = ctx.cause_ms("transaction_wait", dev)
    cp_ms = ctx.cause_ms("checkpoint", dev)
    dev_ms = sum(ctx.cause_ms(c, dev) for c in DEVICE_CAUSES)
    if io_ms + txn_ms <= 0 and cp_ms <= 0:
        return None
    t = ctx.txns[ctx.txns["dev"] == dev]
    ev = ctx.session.jbd2_events
    sb = ev[(ev["event"] == "write_superblock") & (ev["dev"].astype("str") == dev)] if len(ev) else ev
    jb = j.get("journal_blocks")
    log_req = log_requests(t["blocks_logged"].to_numpy(), j.get("block_size"), m.get("max_request_kib"),
                           m.get("max_segments"), jb if jb and jb == jb else None, len(sb))
    written = int(j.get("forced_checkpoint_written_blocks") or 0)
    rounds, sb_rounds = tail_rounds(m.get("write_cache"), m.get("fua"))
    per_cp = written / max(int(j.get("forced_checkpoints") or 0), 1)
    t_lo, t_hi = tail_moved_shares(rounds, sb_rounds, per_cp)
    moves = tail_moves(ctx.session, dev)
    measured = superblock_share(moves)
    measured = None if measured != measured else measured   # NaN: no move with a time
    if measured is not None:
        # the superblock writes' own time, measured by the kernel's events: no more than that
        # goes with them, and no more than they took on a device with no queue
        t_lo, t_hi = min(t_lo, measured), measured
    inputs = {"commit_stall_ms": io_ms + txn_ms, "commit_io_stall_ms": io_ms, "transaction_stall_ms": txn_ms,
              "checkpoint_stall_ms": cp_ms, "device_stall_ms": dev_ms,
              "logged_blocks": float(j.get("logged_blocks") or 0),
              "log_write_requests": log_req, "max_request_kib": m.get("max_request_kib") or DEFAULT_MAX_REQUEST_KIB,
              "checkpoint_written_blocks": written, "write_cache": m.get("write_cache"), "fua": m.get("fua"),
              "tail_rounds": rounds, "tail_moved_share_low": t_lo, "tail_moved_share_high": t_hi,
              "superblock_share": measured,
              "superblock_ms": float(moves["superblock_ms"].sum()) if len(moves) else None,
              "tail_move_span_ms": float(moves["span_ms"].sum()) if len(moves) else None}
    share, cp_share, basis = _log_request_share(ctx, j, m, t, sb, log_req, cp_ms, inputs)
    load = _device_load_in_waits(ctx, dev) if share is not None else 0.0
    if share is not None:
        # the flushes that are surely the log's: each commit's before its commit block and,
        # without FUA, after it; the rest may be the filesystem's own (an fsync that needs no
        # commit flushes the device itself). And a commit with ordered data flushes the data
        # device before its commit record wherever the journal is.
        preflush, fua_flush = flush_requests(m.get("write_cache"), m.get("fua"))
        sure = min(inputs["log_flushes"], (preflush + fua_flush) * len(t))
        stays = preflush * len(t)
        inputs.update(commits=len(t), commit_log_flushes=sure, commit_data_flushes=stays,
                      log_request_share_low=max(log_req + sure - stays, 0.0) / inputs["device_requests"])
    busy = device_saturation(ctx.session, ctx.costs, dev) if cp_ms > 0 and cp_share > 0 else 0.0
    inputs.update(device_saturation=0.0 if busy != busy else busy, device_load=load)
    if cp_share > 0:
        inputs["commit_wait_during_checkpoints"] = remedies.covered_share(
            ctx.stalls, *checkpoint_spans(ctx.costs, dev), dev, "commit_wait")
    lo, hi = external_journal_fractions(inputs)
    by = {c: ctx.cause_ms(c, dev) for c in set(lo) | set(hi)}
    low = sum(f * by[c] for c, f in lo.items())
    if sum(f * by[c] for c, f in hi.items()) <= 0:
        return None
    fua = " and its flush: no FUA" if sb_rounds > 1 else ""
    took = (f" (the superblock's writes took {inputs['superblock_ms']:,.0f} ms, {100 * measured:.1f}% of the "
            f"{inputs['tail_move_span_ms']:,.0f} ms from each checkpoint to its tail's move)"
            if measured is not None else "")
    tail = (f"; {sb_rounds} of the {rounds} rounds a forced checkpoint waits for one after another (its writes "
            f"home, the cache flush, the journal superblock's write{fua}) go to the journal's device{took}"
            if "checkpoint" in hi else "")
    return Recommendation(
        "external_journal", estimate=True, dev=dev, stall_ms_addressed=low, inputs=inputs,
        text=(f"{dev}: the log and the checkpoints write to the same device. An external journal on its own "
              f"device (mkfs.ext4 -O journal_dev; -J device=...) takes the log's writes off it, even at the same "
              f"size: {io_ms:.0f} ms of stalls waited on commits' I/O, {txn_ms:.0f} ms for the running "
              f"transaction to close, {dev_ms:.0f} ms on the device's other requests (data pages, metadata "
              f"blocks, cache flushes), {cp_ms:.0f} ms on checkpoints; {basis}{tail}. "
              + _fractions_text(inputs, lo, hi, by)),
    )


def _fractions_text(inp, lo, hi, by):
    """What external_journal_fractions removes, in words: the queue's waits (one share for
    all of them) and the checkpoints'."""
    q = sum(by.get(c, 0.0) for c in QUEUE_CAUSES)
    out = []
    if q > 0 and inp.get("log_request_share") is not None:
        c = "lock_buffer"   # one of the queue's causes with the queue's own share
        out.append(f"The {q:,.0f} ms of waits on the device's queue shrink as its work does: by "
                   f"{100 * lo[c]:.0f}% on a journal device as slow as this one (the log's writes and the "
                   f"{inp.get('commit_log_flushes', 0):.0f} flushes surely its own, less the flush each of the "
                   f"{inp.get('commits', 0)} commits with ordered data still sends the data device, no more than "
                   f"the journal device's own share of the two devices' work, at the "
                   f"{100 * (inp.get('device_load') or 0.0):.0f}% of its busiest rate the device ran at then), by "
                   f"{100 * hi[c]:.0f}% on a fast one.")
    elif q > 0:
        io = by.get("commit_wait", 0.0) + by.get("lock_buffer", 0.0)
        out.append(f"Without the device's counters, from none to all of the {io:,.0f} ms of waits on commits' I/O.")
    if "checkpoint" in hi and by.get("checkpoint", 0.0) > 0:
        out.append(f"The checkpoints' {by['checkpoint']:,.0f} ms: by {100 * lo['checkpoint']:.0f}% to "
                   f"{100 * hi['checkpoint']:.0f}%.")
    during = inp.get("commit_wait_during_checkpoints") or 0.0
    if during > 0 and by.get("commit_wait", 0.0) > 0 and hi["commit_wait"] > hi["lock_buffer"]:
        out.append(f"{100 * during:.0f}% of the {by['commit_wait']:,.0f} ms of commit waits ran while the forced "
                   f"checkpoints wrote home, their commits' log writes queued behind those writes: on a fast device "
                   f"of their own, behind the log's alone (the commit waits by up to {100 * hi['commit_wait']:.0f}%).")
    return " ".join(out)


def _log_request_share(ctx, j, m, t, sb, log_req, cp_ms, inputs):
    """(share, cp_share, basis) of external_journal for journal row ``j`` (metadata ``m``, its
    transactions ``t``, journal superblock writes ``sb``, ``log_req`` log write requests): the
    log's share of the data device's requests (None without the device's counters), that share
    while the forced checkpoints waited, and the words that say how; ``inputs`` gets the
    figures."""
    dev = j["dev"]
    d = device_rows(ctx.session, dev)
    written = inputs["checkpoint_written_blocks"]
    flushes = float(d["flush_ios"].sum()) if len(d) else 0.0
    requests = float(d["write_ios"].sum()) + flushes if len(d) else 0.0
    # the cache flush before each move of the log's tail stays on the data device
    # (jbd2_cleanup_journal_tail flushes j_fs_dev), one a journal superblock write
    log_flushes = max(flushes - len(sb), 0.0)
    share = min((log_req + log_flushes) / requests, 1.0) if requests else None
    if share is None:
        cp_share = 0.0
        basis = "the session has no counters of the data device: the checkpoint waits are not estimated"
    else:
        inputs.update(device_requests=requests, device_flushes=flushes, log_flushes=log_flushes,
                      log_request_share=share)
        basis = (f"{log_req + log_flushes:.0f} of the data device's {requests:.0f} requests were the log's "
                 f"({inputs['logged_blocks']:.0f} blocks merged into {log_req:.0f} writes, and {log_flushes:.0f} "
                 f"of its {flushes:.0f} cache flushes: the {flushes - log_flushes:.0f} before the log's tail "
                 f"moved stay)")
        # the checkpoints queue behind what the device served while they waited: the log's
        # share then (each commit's requests at its end, the superblock's at its write)
        during = float("nan")
        if written and cp_ms > 0:
            per = commit_requests(t["blocks_logged"].to_numpy(), j.get("block_size"), m.get("max_request_kib"),
                                  m.get("max_segments"))
            tails = sb["ts_ns"].to_numpy(dtype="float64")
            ts = np.concatenate([t["ts_ns"].to_numpy(dtype="float64"), tails])
            n = np.concatenate([per, np.ones(len(sb))])
            n = n * (log_req / n.sum()) if n.sum() > 0 else n   # the log's wraps spread with its writes
            spans = checkpoint_spans(ctx.costs, dev)
            during = log_share_during(ctx.session, dev, *spans, ts, n, tails)
            writes = log_share_during(ctx.session, dev, *spans, ts, n, tails, flushes=False)
            if writes == writes:
                inputs.update(log_write_share_checkpoints=writes)
        cp_share = (share if during != during else during) if written else 0.0
        inputs.update(log_request_share_checkpoints=cp_share)
        if not written and int(j.get("forced_checkpoints") or 0):
            basis += "; the forced checkpoints wrote nothing home: their waits were not the device's"
        elif not written:
            basis += "; no forced checkpoint wrote blocks home"
        elif during == during:
            basis += (f"; of the requests it served while the forced checkpoints waited, {100 * during:.1f}% "
                      f"were the log's, so their writes would queue behind {100 * during:.1f}% fewer")
        else:
            basis += f", so checkpoint writes would queue behind {100 * share:.1f}% fewer"
    return share, cp_share, basis


def _device_load_in_waits(ctx, dev):
    """How busy device ``dev`` ran, as a share of its busiest rate of requests, during the
    stalls that waited on its queue (QUEUE_CAUSES); 0 when unknown."""
    s = ctx.stalls
    cols = [f"{c}_ms" for c in QUEUE_CAUSES if f"{c}_ms" in s]
    on = (s["dev"].astype("str") == dev).to_numpy() & (s[cols].fillna(0).sum(axis=1) > 0).to_numpy()
    load = device_load(ctx.session, dev, s["ts_ns"].to_numpy(dtype="int64")[on],
                       s["end_ns"].to_numpy(dtype="int64")[on])
    return 0.0 if load != load else load


def fast_commit(ctx: Context) -> list[Recommendation]:
    """Only when fsync-driven commit waits dominate the stall time and no xattr change makes
    the commits ineligible (ext4_fc_mark_ineligible for EXT4_FC_REASON_XATTR)."""
    fs = ctx.call_count(FSYNC_SYSCALLS)
    cw = ctx.cause_ms("commit_wait")
    total = ctx.total_ms
    if not fs or cw <= 0 or not total or cw < 0.5 * total:
        return []
    out = []
    xc = ctx.call_count(XATTR_SYSCALLS)
    for _, j in ctx.journals.iterrows():  # one row per journal
        if j.get("fast_commit"):
            continue
        dev = j["dev"]
        inputs = {"fsync_calls": fs, "commit_wait_ms": cw, "commit_wait_share": cw / total, "xattr_calls": xc,
                  "transactions": int(j.get("transactions") or 0)}
        # a fast commit writes one block for the inodes' deltas where a full commit writes its
        # logged blocks and a commit block: the share of the device's requests a commit saves
        # (without the device's counters: the commit's own, and a data write and the cache flush
        # before its commit block)
        t = ctx.txns[ctx.txns["dev"] == dev]
        d = device_time(ctx.session, dev)
        if len(t):
            per = float(commit_requests(t["blocks_logged"].to_numpy(), j.get("block_size")).mean())
            each = d["requests"] / len(t) if d is not None and d["requests"] else per + 2.0
            inputs.update(log_requests_per_commit=per, device_requests_per_commit=each,
                          commit_request_share_saved=min(max((per - 1.0) / max(each, per), 0.0), 1.0))
        if xc:
            # ext4_fc_mark_ineligible (EXT4_FC_REASON_XATTR) keeps the filesystem ineligible
            # until the transaction holding the change commits (s_fc_ineligible_tid): that
            # transaction's fsyncs commit in full, the others' may go fast
            out.append(Recommendation(
                "fast_commit", dev=dev, estimate=True, stall_ms_addressed=cw,
                inputs=dict(inputs, ineligible_xattr=True),
                text=(f"{dev}: {100 * cw / total:.0f}% of the stall time ({cw:.0f} ms) waited for commits that "
                      f"{fs} fsync/fdatasync calls forced. fast_commit (tune2fs -O fast_commit) logs only the "
                      f"changed inodes' deltas for them, but an extended-attribute change ({xc} here) makes the "
                      "fsyncs of the transaction holding it full commits (the kernel keeps the filesystem "
                      "ineligible for fast commits until that transaction commits): how many go fast depends "
                      "on how the changes fall among the transactions, from none of these waits to all of "
                      "them.")))
            continue
        out.append(Recommendation(
            "fast_commit", dev=dev, stall_ms_addressed=cw, inputs=inputs,
            text=(f"{dev}: {100 * cw / total:.0f}% of the stall time ({cw:.0f} ms) waited for commits that "
                  f"{fs} fsync/fdatasync calls forced; fast_commit (mkfs.ext4 -O fast_commit, or tune2fs -O "
                  "fast_commit) logs only the changed inodes' deltas for them.")))
    return out


def per_cause(ctx: Context) -> list[Recommendation]:
    """The registry's own advice for each cause with at least MIN_SHARE of the stall time."""
    total = ctx.total_ms
    out = []
    if not total:
        return out
    for c in generic_causes():
        ms = ctx.cause_ms(c)
        if ms <= 0 or ms < MIN_SHARE * total:
            continue
        cause = causes.BY_NAME[c]
        n = int(ctx.causes.loc[c, "count"]) if c in ctx.causes.index else 0
        top = ctx.stalls[ctx.stalls["cause"] == c]
        label = top.sort_values("latency_ms").iloc[-1]["cause_label"] if len(top) else ""
        out.append(Recommendation(
            c, stall_ms_addressed=ms, inputs={"share_pct": 100.0 * ms / total, "total_ms": ms, "stalls": n,
                                              "top_label": label},
            text=(f"{100 * ms / total:.0f}% of the stall time ({ms:.0f} ms, {n} stalls) was {cause.explanation}"
                  + (f"; the longest blocked in {label}" if label and c != "cpu" else "")
                  + f". What helps: {cause.advice}.")))
    return out


def own_filesystem(ctx: Context) -> list[Recommendation]:
    """The tenant remedy: the writer that filled a journal (writers.tenant: a cgroup, or a
    process) moved to a filesystem of its own, on a device of its own, for the others' stalls
    on this journal; the culprit's own stalls go with it (to its new filesystem, where it fills
    its own journal), so the interval is a part of the others' stall time only.

    What goes of each other task's stalls (fractions of its per-cause waits):
    - the waits for log space (checkpoint, log_space): at least the culprit's share of what
      the log held when it filled (the log fills that much more slowly), at most all of them;
    - the commits' waits (commit_wait, transaction_wait): a shared journal commits everyone's
      blocks together, so at least the culprit's share of what was logged over the run where
      the device ran under its limit (remedies.DEVICE_BOUND_UTIL), none at its limit;
    - every other wait on the device's queue (data pages, cache flushes, metadata reads) and
      the unclassified ones: at most all of them (the culprit's requests leave the device),
      at least none (the others' own requests may still keep it at its limit)."""
    out = []
    devs = {str(d) for d in ctx.stalls["dev"].astype("str").unique()} if len(ctx.stalls) else set()
    if not devs or not len(ctx.session.writers):
        return out
    fill = ctx._memo("at_fill", lambda: writers.at_fill(ctx.session, checkpoint_events(ctx.session)))
    run = ctx._memo("writer_shares", lambda: writers.writer_shares(ctx.session))
    for dev in sorted(devs):
        t = writers.tenant(ctx.session, fill, run, ctx.stalls, dev)
        if t is None:
            continue
        o = t["others"]
        log_ms = sum(float(np.nansum(o[f"{c}_ms"].to_numpy(dtype="float64"))) for c in remedies.LOG_CAUSES
                     if f"{c}_ms" in o)
        device_ms = sum(float(np.nansum(o[f"{c}_ms"].to_numpy(dtype="float64"))) for c in remedies.DEVICE_SIDE
                        if f"{c}_ms" in o)
        if log_ms + device_ms <= 0:
            continue
        fill_share = t["fill_share"] if t["fill_share"] is not None else t["run_share"]
        run_text = f"{100 * t['run_share']:.0f}% of what was logged over the run"
        wrote = (f"{100 * fill_share:.0f}% of what the journal held when it filled ({run_text})"
                 if t["fill_share"] is not None else run_text)
        inputs = {k: v for k, v in t.items() if k != "others"}
        inputs.update(log_wait_ms=log_ms, device_wait_ms=device_ms, moved_pids=t["pids"])
        out.append(Recommendation(
            "own_filesystem", dev=dev, estimate=True, stall_ms_addressed=log_ms, inputs=inputs,
            text=(f"{dev}: {t['who']} wrote {wrote}; the other tasks stalled "
                  f"{remedies.fmt_ms(t['others_ms'])} on it ({t['victim']} "
                  f"{remedies.fmt_ms(t['victim_ms'])}), {remedies.fmt_ms(log_ms)} of it waiting for log space "
                  f"and {remedies.fmt_ms(device_ms)} on the device's queue. On a filesystem of its own, on "
                  f"another device, {t['who']} fills a journal of its own: its "
                  f"{remedies.fmt_ms(t['culprit_ms'])} of stalls go with it, and the others' log-space waits "
                  "go in part (the journal fills that much more slowly), their commits' too (a shared journal "
                  "commits everyone's blocks together), and their other waits on the device as far as its "
                  "requests kept them queued.")))
    return out


def _xfs_logs_waiting(ctx):
    """(journal description, jstall.enough verdict) of each XFS log not big enough for the
    run, whose log-space waits took time."""
    for j in ctx.session.journals:
        if j.get("kind") != "xfs":
            continue
        e = ctx.enough(j["dev"])
        if not e.big_enough and e.wait_ms:
            yield j, e


def log_size(ctx: Context) -> list[Recommendation]:
    """XFS: a log that holds what the run logged. An XFS log fills when the metadata it holds
    is not written home (xfsaild) as fast as new metadata is logged; a log that holds all the
    run logged (/sys/fs/xfs stats: ``xs_log_blocks`` over the session) waits on nothing.
    That is the size of this job: a larger one of the kind needs more. No size when the run
    logged less than the log holds (the waits came from elsewhere: lab tune measures)."""
    out = []
    for j, e in _xfs_logs_waiting(ctx):
        dev = j["dev"]
        log_mib = (j.get("log_bytes") or 0) / 2**20
        delta = kernel_delta(j)
        blocks = xfs.counter(delta, "xs_log_blocks") if delta else None
        logged_mib = blocks * 512 / 2**20 if blocks is not None else None
        inputs = {"log_mib": log_mib, "logged_mib": logged_mib, "wait_ms": e.wait_ms, "longest_ms": e.longest_ms,
                  "share": e.share}
        head = f"{dev}: the {_fmt_mib(log_mib)} XFS log is {e.describe()} (jstall's bound: {e.as_dict()['bound']}). "
        if logged_mib is None or logged_mib <= log_mib:
            why = (f"The run logged {logged_mib:,.1f} MiB, no more than the log holds: " if logged_mib is not None
                   else "The kernel's log counters were not read: ")
            out.append(Recommendation(
                "log_size", dev=dev, stall_ms_addressed=e.wait_ms, inputs=inputs,
                text=head + why + "the model gives no size. Measure one: jstall lab tune --fs-type xfs with this "
                "workload."))
            continue
        mib = min(math.ceil(logged_mib), xfs.MAX_LOG_BYTES >> 20)
        room = internal_log_room(j, mib)
        inputs.update(room)
        out.append(Recommendation(
            "log_size", dev=dev, stall_ms_addressed=e.wait_ms, estimate=True, journal_size_mib=float(mib),
            low_mib=log_mib, high_mib=float(mib), inputs=inputs,
            text=head + (f"The run logged {logged_mib:,.1f} MiB (the kernel's xs_log_blocks); a log that holds it, "
                         f"{_fmt_mib(mib)}, would not have waited: up to {e.wait_ms:,.0f} ms removed. "
                         + _internal_log_text(room, mib) + " A larger job of this kind needs more; "
                         "jstall lab tune --fs-type xfs measures the smallest.")))
    return out


def internal_log_room(j: dict, mib: float) -> dict:
    """What an internal log of ``mib`` MiB takes on the traced XFS (the journal's description:
    ``log_bytes``, ``data_bytes``, ``ag_bytes``, ``free_bytes``, None where not recorded):
    ``more_mib`` it takes from the data section beyond today's log, as ``data_share`` of
    it; ``fits_ag`` whether it fits in one allocation group (mkfs.xfs places an internal log
    in one and refuses a larger one); ``fits_free`` whether what the data held at the start
    still fits beside it (the filesystem is made again and its contents copied back)."""
    mib_b = 1 << 20
    log, data, ag, free = (j.get(k) for k in ("log_bytes", "data_bytes", "ag_bytes", "free_bytes"))
    more = max(0.0, mib - (log or 0) / mib_b)
    return {"more_mib": more,
            "data_mib": data / mib_b if data else None,
            "data_share": more * mib_b / data if data else None,
            "ag_mib": ag / mib_b if ag else None,
            "fits_ag": (mib * mib_b < ag) if ag else None,
            "free_mib": free / mib_b if free is not None else None,
            "fits_free": (more * mib_b <= free) if free is not None else None}


def _internal_log_text(room: dict, mib: float) -> str:
    """How to make the log ``mib`` MiB and what it takes (internal_log_room's figures): the
    mkfs.xfs command for an internal log where one fits, else the external log."""
    external = f"an external log (mkfs.xfs -l logdev=DEV,size={mib:g}m) takes no room from the data"
    if room["fits_ag"] is False:
        return (f"An internal log that large does not fit in one of this filesystem's "
                f"{_fmt_mib(round(room['ag_mib'], 1))} allocation groups (mkfs.xfs refuses it): {external}; or "
                "make the filesystem with fewer, larger allocation groups (mkfs.xfs -d agcount=).")
    takes = (f"it takes {_fmt_mib(round(room['more_mib'], 1))} more of the data section's "
             f"{_fmt_mib(round(room['data_mib'], 1))} ({100 * room['data_share']:.1f}%)" if room["data_mib"] else "")
    if room["fits_free"] is False:
        return (f"An internal log of {mib:g} MiB does not leave room for the data: {takes}, more than the "
                f"{_fmt_mib(round(room['free_mib'], 1))} free when the recording began, so what the filesystem "
                f"holds would not fit back. Instead, {external}.")
    text = (f"mkfs.xfs -l size={mib:g}m (an internal log cannot grow: the filesystem is made again and its "
            "contents copied back)")
    if takes:
        text += f"; {takes}"
        if room["free_mib"] is not None:
            text += f" ({_fmt_mib(round(room['free_mib'], 1))} were free when the recording began)"
    return f"{text}. Or {external}."


def internal_log_fits(inputs: dict) -> bool:
    """Whether the internal log a log_size recommendation's ``inputs`` give can be made: it fits
    in one allocation group and leaves the data its room (True where not recorded)."""
    return inputs.get("fits_ag") is not False and inputs.get("fits_free") is not False


#: the largest in-core log buffer XFS takes (mount -o logbsize=256k), and the default
XFS_MAX_LOGBSIZE, XFS_DEFAULT_LOGBSIZE = 256 << 10, 32 << 10


def _xfs_log_io(ctx, j):
    """What the log and the filesystem's own device did over the session, for judging a change
    by device time: the log's writes (the kernel's ``xs_log_writes``: one request per in-core
    log buffer written) and bytes (``xs_log_blocks`` x 512); the data device's write and flush
    requests and its device time (devices.device_time). None without either."""
    delta = kernel_delta(j)
    d = device_time(ctx.session, j["dev"])
    if not delta or d is None:
        return None
    return {"log_writes": float(xfs.counter(delta, "xs_log_writes", 0)),
            "log_bytes": float(xfs.counter(delta, "xs_log_blocks", 0)) * xfs.BBSIZE,
            "device_writes": d["writes"], "device_flushes": d["flushes"], "device_requests": d["requests"],
            "device_ms": d["device_ms"], "device_time_basis": d["basis"]}


def _logbsize(mount_options):
    """The log buffer size a mount's options give (logbsize=), or XFS's default."""
    for opt in (mount_options or "").split(","):
        k, _, v = opt.partition("=")
        if k == "logbsize" and v:
            mult = {"k": 1 << 10, "m": 1 << 20}.get(v[-1].lower(), 1)
            try:
                return int(v.rstrip("kKmM")) * mult
            except ValueError:
                break
    return XFS_DEFAULT_LOGBSIZE


def _share_of_requests(n, requests):
    """'40% of the device's 900 requests', or, where the log's requests outnumber what the
    device's counters saw (the block layer merged them), that said."""
    if n <= requests:
        return f"{100 * n / requests:.0f}% of the device's {requests:,.0f} requests"
    return (f"{n:,.0f} requests, more than the {requests:,.0f} the device's counters saw (the block layer merged "
            "them): all of its requests, at most")


def _waits_span_ms(ctx, dev, wait_ms):
    """The wall time (ms) a log's waits covered, overlapping waits counted once (at most
    ``wait_ms``, the tasks' waits summed): what a device's time compares with."""
    w = ctx.session.xfs_waits
    if len(w):
        w = w[w["dev"].astype("str") == str(dev)]
    if not len(w):
        return wait_ms
    t0 = w["ts_ns"].to_numpy(dtype="int64")
    span = remedies.union_ms(t0, t0 + w["wait_ns"].to_numpy(dtype="int64"))
    return min(span, wait_ms) if span > 0 else wait_ms


def _device_time_removed(saved_requests, io, wait_ms, span_ms):
    """(waits removed, share of requests saved) when the device serves ``saved_requests``
    fewer: a device serves requests one after another, and the log's tail moves as it serves
    them, so the waits for the tail shrink by their share of its requests, and by no more than
    the device time that share is against the wall time the waits covered (``span_ms``: many
    tasks wait at once, and the waits summed are task time)."""
    share = min(saved_requests / io["device_requests"], 1.0) if io["device_requests"] else 0.0
    return _of_waits(share, share * io["device_ms"], wait_ms, span_ms), share


def _of_waits(share, device_ms, wait_ms, span_ms):
    """``share`` of the waits (``wait_ms``, task time), at most ``device_ms`` of each moment
    of the ``span_ms`` they covered."""
    return wait_ms * min(share, device_ms / span_ms if span_ms > 0 else 0.0)


def xfs_log_device(ctx: Context) -> list[Recommendation]:
    """XFS: the log's writes against the metadata's on one device, judged by device time
    (requests, not blocks: devices.device_time). ``log_buffers``: larger in-core log buffers
    (-o logbsize=256k,logbufs=8) write the same log in fewer requests; ``external_log``: a log
    on its own device takes its requests (and the cache flushes of its writes) off the
    filesystem's. The waits for the tail shrink by the share of the device's requests a change
    takes off it (no more than the device time that is), as the ext4 journal's do
    (external_journal): the low end; every wait the high end (the tail also moves sooner once
    log writes unpin items sooner). An external log as slow as the data device takes the
    metadata's requests from before the log's (their share of the waits); a fast one, the
    log's device time (every wait, at most)."""
    out = []
    for j, e in _xfs_logs_waiting(ctx):
        dev = j["dev"]
        io = _xfs_log_io(ctx, j)
        if io is None or not io["log_writes"]:
            continue
        per_write = io["log_bytes"] / io["log_writes"]
        span = _waits_span_ms(ctx, dev, e.wait_ms)
        head = f"{dev}: the XFS log is {e.describe()}. "
        logbsize = _logbsize(j.get("mount_options"))
        cap = min(XFS_MAX_LOGBSIZE, int(j.get("max_request_kib") or DEFAULT_MAX_REQUEST_KIB) << 10)
        if logbsize < cap and per_write < cap / 2:
            after = math.ceil(io["log_bytes"] / cap)
            # each log buffer written is a write and a cache flush (REQ_PREFLUSH | REQ_FUA)
            flushes_per = min(io["device_flushes"] / io["log_writes"], 1.0)
            saved = (io["log_writes"] - after) * (1 + flushes_per)
            saved = min(saved, io["device_requests"])   # the device's counters: what it served
            low, share = _device_time_removed(saved, io, e.wait_ms, span)
            freed = share * io["device_ms"]
            if low > 0:
                inputs = dict(io, logbsize_bytes=logbsize, logbsize_target_kib=cap >> 10,
                              bytes_per_log_write=per_write, log_writes_after=after,
                              saved_requests=saved, saved_share=share, waits_span_ms=span, removed_low_ms=low,
                              removed_high_ms=e.wait_ms, log_wait_ms=e.wait_ms)
                out.append(Recommendation(
                    "log_buffers", dev=dev, estimate=True, stall_ms_addressed=low, inputs=inputs,
                    text=head + (f"Its {io['log_writes']:,.0f} log writes averaged {per_write / 1024:,.0f} KiB "
                                 f"(logbsize {logbsize >> 10}k) and, with their cache flushes, were "
                                 + _share_of_requests(io["log_writes"] * (1 + flushes_per), io["device_requests"])
                                 + ". Larger log buffers "
                                 f"(mount -o logbsize={cap >> 10}k,logbufs=8) write the same "
                                 f"{io['log_bytes'] / 2**20:,.1f} MiB in about {after:,} writes: the device serves "
                                 f"{100 * share:.0f}% fewer requests, {freed:,.0f} ms of device time "
                                 f"({io['device_time_basis']}). Estimate: "
                                 + (f"every wait removed ({e.wait_ms:,.0f} ms). " if low >= e.wait_ms else
                                    f"{low:,.0f} ms removed (the waits for the tail shrink with the device's "
                                    f"requests, {100 * share:.0f}% fewer"
                                    + ("" if low >= share * e.wait_ms * (1 - 1e-9) else
                                       f", by no more than the {freed:,.0f} ms freed over the {span:,.0f} ms the "
                                       "waits covered")
                                    + f") up to {e.wait_ms:,.0f} ms (every wait: the "
                                    "log's tail also moves sooner when its items are unpinned sooner). ")
                                 + "A remount; no mkfs needed.")))
        if not j.get("journal_device"):
            flushes = min(io["device_flushes"], io["log_writes"])
            saved = io["log_writes"] + flushes
            # on a log device as slow as this one the log's requests no longer queue behind the
            # metadata's: the waits shrink by the metadata's share of the requests (the log's and
            # the metadata's device times overlap instead of adding: the smaller of the two, at
            # most); on a fast one the log's device time is freed
            log_share = min(saved / io["device_requests"], 1.0) if io["device_requests"] else 0.0
            log_ms = log_share * io["device_ms"]
            meta_ms = io["device_ms"] - log_ms
            low = _of_waits(1 - log_share, min(log_ms, meta_ms), e.wait_ms, span)
            high = _of_waits(1.0, log_ms, e.wait_ms, span)
            if high > 0:
                inputs = dict(io, saved_requests=saved, log_share=log_share, log_device_ms=log_ms,
                              waits_span_ms=span, removed_low_ms=low, removed_high_ms=high, log_wait_ms=e.wait_ms)
                out.append(Recommendation(
                    "external_log", dev=dev, estimate=True, stall_ms_addressed=low, inputs=inputs,
                    text=head + (f"The log's {io['log_writes']:,.0f} writes and {flushes:,.0f} cache flushes were "
                                 + _share_of_requests(saved, io["device_requests"])
                                 + f", about {log_ms:,.0f} ms of its {io['device_ms']:,.0f} ms of device time "
                                 f"({io['device_time_basis']}). An external log "
                                 "(mkfs.xfs -l logdev=DEV,size=; "
                                 f"the filesystem is made again) takes them off it. Estimate: {low:,.0f} ms removed "
                                 f"on a log device as slow as this one, up to {high:,.0f} ms on a fast one.")))
    return out


# --- what each remedy removes of the stall time, its regime, cost and command ------------------

def _where(ctx, dev):
    """(device path, mountpoint) of a filesystem, for commands (placeholders when unknown)."""
    j = next((j for j in ctx.session.journals if str(j.get("dev")) == str(dev)), {})
    return j.get("device") or "DEV", j.get("mountpoint") or "MNT"


def regime(ctx: Context, dev: str) -> tuple[str, dict]:
    """(regime, figures) of a filesystem (remedies.regime_of): its journal model's regime, its
    data device's utilisation during the stalls, its log and device-side stall time."""
    def make():
        m = _models(ctx).get(dev)
        log_ms = sum(ctx.cause_ms(c, dev) for c in remedies.LOG_CAUSES)
        dev_ms = sum(ctx.cause_ms(c, dev) for c in remedies.DEVICE_SIDE if f"{c}_ms" in ctx.stalls)
        util = remedies.utilisation(ctx.session, ctx.stalls, dev)
        mr = m.regime if m is not None else _xfs_regime(ctx, dev)
        name, fig = remedies.regime_of(mr, util, log_ms, dev_ms)
        run_ms = session_span_s(ctx.session) * 1e3
        if run_ms > 0 and len(ctx.costs):
            spans = checkpoint_spans(ctx.costs, str(dev))
            fig["checkpoint_device_share"] = min(remedies.union_ms(*spans) / run_ms, 1.0)
            for c in remedies.THROUGH:
                fig[f"{c}_through_checkpoints"] = remedies.through_share(ctx.stalls, *spans, dev, c)
        if m is not None:
            fig.update(relogged_blocks=m.relogged_blocks, blocks=m.blocks, new_to_log_blocks=m.new_to_log_blocks,
                       written_home_blocks=m.written_home_blocks, distinct_home_blocks=m.home_blocks,
                       saved_home_share=remedies.saved_home_share(m))
        return name, fig

    return ctx._memo(("regime", str(dev)), make)


def _xfs_regime(ctx, dev):
    """An XFS log's regime by its counters: the run logged more than the log holds
    ("streaming": the size that holds it grows with the job), or less ("hot set")."""
    j = next((j for j in ctx.session.journals if str(j.get("dev")) == str(dev) and j.get("kind") == "xfs"), None)
    if j is None:
        return None
    delta = kernel_delta(j)
    blocks = xfs.counter(delta, "xs_log_blocks") if delta else None
    if blocks is None:
        return None
    return "streaming" if blocks * 512 > (j.get("log_bytes") or 0) else "hot set"


def _effects(ctx, r):
    """(low, high) per-cause fractions of the stall table a remedy removes, its cost and its
    command; None for advice that is not a remedy."""
    dev, inp = r.dev, r.inputs
    device, mnt = _where(ctx, dev)
    name, fig = regime(ctx, dev)
    cp = ctx.cause_ms("checkpoint", dev)
    if r.kind in ("journal_size", "inode_size", "writeback_window"):
        return _checkpoint_effects(ctx, r, name, fig, cp, device, mnt)
    if r.kind == "commit_interval":
        g = inp["timer_commits_removed_share"]
        tw = g * inp["transaction_wait_share_beside_timer_commits"]
        cw = g * inp["commit_wait_share_beside_timer_commits"]
        return ({"transaction_wait": tw}, {"transaction_wait": tw, "commit_wait": cw}, "remount",
                inp["command"])
    if r.kind == "external_journal":
        return _external_journal_effects(inp, device, mnt)
    if r.kind == "fast_commit":
        s = inp.get("commit_request_share_saved") or 0.0
        lo, hi = (0.0, 1.0) if inp.get("ineligible_xattr") else (s / 2, s)
        return ({"commit_wait": lo}, {"commit_wait": hi}, "offline",
                f"umount {mnt} && tune2fs -O fast_commit {device} && mount {device} {mnt}")
    if r.kind == "own_filesystem":
        fill = inp["fill_share"] if inp["fill_share"] is not None else inp["run_share"]
        lo = {"checkpoint": fill, "log_space": fill}
        u = fig.get("device_util")
        if u is not None and u < remedies.DEVICE_BOUND_UTIL:
            # a device under its limit: the others' commits carry the culprit's blocks no more
            lo.update(commit_wait=inp["run_share"], transaction_wait=inp["run_share"])
        # at its limit the others' own requests may keep it there, their waits moving from
        # one cause to another (measured at 500 writes/s: the latency tenant alone waited
        # 631 ms for its data pages against 90 ms beside the storm)
        hi = {c: 1.0 for c in (*remedies.LOG_CAUSES, *remedies.DEVICE_SIDE, "workqueue", "other")}
        return (lo, hi, "new_filesystem",
                f"make a filesystem on another device (mkfs NEWDEV; mount NEWDEV DIR) and move {inp['who']}'s "
                f"files from {mnt} to it")
    if r.kind in ("log_size", "log_buffers", "external_log"):
        ls = ctx.cause_ms("log_space", dev)
        # a flush of delayed allocations waits for writeback whose transactions wait for log
        # space, a wait for a worker (inodegc) for work whose transactions do too: either may
        # shorten by the share the log's waits covered (the high end), or not
        flush = {c: _log_covered_share(ctx, dev, c) for c in ("enospc_flush", "workqueue")}
        if r.kind == "log_size":
            share = min(r.stall_ms_addressed / ls, 1.0) if ls > 0 else 0.0
            lo, hi = remedies.log_fractions(name, 1.0, share)
            if not r.estimate:
                lo = 0.0
            size = f"{int(r.journal_size_mib)}m" if r.journal_size_mib else "N"
            if not internal_log_fits(inp):   # no internal log that large: the external one
                return ({"log_space": lo}, {"log_space": hi, **flush}, "new_filesystem",
                        f"mkfs.xfs -l logdev=LOGDEV,size={size} NEWDEV && mount -o logdev=LOGDEV NEWDEV {mnt}, "
                        f"then copy the files from {mnt}")
            return ({"log_space": lo}, {"log_space": hi, **flush}, "new_filesystem",
                    f"mkfs.xfs -l size={size} NEWDEV, then copy the files from {mnt}")
        # the share of the log-space waits it removes (every task's, the workers' and the
        # queued ones too: what the estimate is a part of), of each stall's log-space time
        waits = inp["log_wait_ms"]
        lo = min(inp["removed_low_ms"] / waits, 1.0) if waits > 0 and ls > 0 else 0.0
        hi = min(inp["removed_high_ms"] / waits, 1.0) if waits > 0 and ls > 0 else 0.0
        if r.kind == "log_buffers":
            opts = f"logbsize={int(inp.get('logbsize_target_kib') or 256)}k,logbufs=8"
            return ({"log_space": lo}, {"log_space": hi, **flush}, "remount",
                    f"umount {mnt} && mount -o {opts} {device} {mnt} (mount -o remount does not change them)")
        return ({"log_space": lo}, {"log_space": hi, **flush}, "new_filesystem",
                (f"mkfs.xfs -l logdev=LOGDEV,size=N NEWDEV && mount -o logdev=LOGDEV NEWDEV {mnt}, then copy "
                 f"the files from {mnt}"))
    return None


def _log_covered_share(ctx, dev, cause):
    """The share of ``cause``'s stall time on ``dev`` that ran while some task (a kernel
    worker's writeback among them) waited for the XFS log's space (remedies.covered_share)."""
    w = ctx.session.xfs_waits
    if not len(w):
        return 0.0
    w = w[w["dev"].astype("str") == str(dev)]
    t0 = w["ts_ns"].to_numpy(dtype="int64")
    return remedies.covered_share(ctx.stalls, t0, t0 + w["wait_ns"].to_numpy(dtype="int64"), dev, cause)


def _checkpoint_effects(ctx, r, name, fig, cp, device, mnt):
    """_effects of journal_size, inode_size and writeback_window: the checkpoint waits they
    remove (``cp`` ms of them on the device; ``name``, ``fig``: the journal's regime), and
    those of the waits on the device's queue and through the checkpoints."""
    dev, inp = r.dev, r.inputs
    saved = fig.get("saved_home_share", 1.0)
    share = min(r.stall_ms_addressed / cp, 1.0) if cp > 0 else 0.0
    lo, hi = remedies.log_fractions(name, saved, share)
    if r.kind == "journal_size" and not r.estimate:
        lo = 0.0   # no size from the model: what lab tune finds
    if r.kind == "inode_size" and inp.get("verdict") in ("borderline", "short"):
        # fewer blocks logged shorten the checkpoint waits even where the hot set does not
        # fit: at most the share of the needed log the journal holds; none at the low end
        # when short, half when the margin is within the runs' spread
        held = 1.0 if inp["verdict"] == "borderline" else min(
            inp["journal_blocks"] / max(inp["predicted_needed_blocks_low"], 1.0), 1.0)
        lo, hi = remedies.log_fractions(name, saved, held)
        lo *= 0.5 if inp["verdict"] == "borderline" else 0.0
    if r.kind == "inode_size" and inp.get("verdict") == "held_already":
        # the hot set is held already: the log only fills more slowly, its checkpoints come
        # at most that much less often; none for sure
        lo, hi = 0.0, min(max(_slower_fill_share(inp), 0.0), 1.0)
    elif r.kind == "inode_size" and inp.get("logged_share_saved") is not None:
        # the attributes the session saw: the log fills that share more slowly, and its forced
        # checkpoints, each as long, come that much less often (the low end); where the hot
        # set then fits, or writeback keeps up with the slower fill, none is forced (the high end)
        p = inp["logged_share_saved"]
        lo, hi = max(lo, p), max(hi, 1.0 if inp.get("verdict") == "short" else p)
    # the writes home it saves leave the device's queue: the others' waits shrink
    dlo, dhi = remedies.device_fractions(fig.get("checkpoint_device_share", 0.0), saved * hi, fig.get("device_util"))
    # waits for a transaction, or for a commit, that could not close while the log was full
    # go with the checkpoint they waited through: the high end; the low end keeps them
    for c in remedies.THROUGH:
        dhi[c] = max(fig.get(f"{c}_through_checkpoints", 0.0) * hi, dhi[c])
    if r.kind == "journal_size" and r.estimate:
        # a larger journal takes larger transactions: handles that waited for a full one
        # to commit wait less (all of it at the high end)
        full = full_transaction_share(ctx, dev)
        # and handles that waited for the reserved credits to drain: their bounds are the
        # largest transaction and half of it, a quarter of the journal
        reserved = reserved_credit_share(ctx, dev)
        dhi["transaction_wait"] = min(dhi["transaction_wait"] + full + reserved, 1.0)
        fig["transaction_wait_full_transactions"] = full
        fig["transaction_wait_reserved_credits"] = reserved
    lo, hi = {**dlo, "checkpoint": lo}, {**dhi, "checkpoint": hi}
    if r.kind == "journal_size":
        size = f"{int(r.journal_size_mib)}" if r.journal_size_mib else "N"
        return (lo, hi, "offline",
                (f"umount {mnt} && tune2fs -O ^has_journal {device} && tune2fs -J size={size} {device} "
                 f"&& mount {device} {mnt}"))
    if r.kind == "inode_size":
        return (lo, hi, "new_filesystem",
                (f"mkfs.ext4 -I {inp.get('inode_size_advised', 256)} NEWDEV, then copy the files with their "
                 "attributes (cp -a, rsync -aHAX) "
                 f"from {mnt}"))
    return lo, hi, "online", inp.get("command")


def _external_journal_effects(inp, device, mnt):
    """_effects of external_journal (its ``inputs`` ``inp``): external_journal_fractions."""
    lo, hi = external_journal_fractions(inp)
    return lo, hi, "offline", _ext_command(device, mnt)


def full_transaction_share(ctx: Context, dev: str) -> float:
    """The share of a journal's transaction_wait stall time in stalls that did not overlap a
    forced checkpoint and whose running transaction was closed full (commit_closes): handles
    that waited for a transaction at j_max_transaction_buffers (journal / divisor) to commit."""
    st = ctx.stalls
    if not len(st) or "running_transaction" not in st or not len(ctx.txns):
        return 0.0
    m = _models(ctx).get(dev)
    t = ctx.txns[ctx.txns["dev"].astype("str") == str(dev)]
    if m is None or not len(t):
        return 0.0
    jrow = next((x for x in ctx.session.journals if str(x.get("dev")) == str(dev)), {})
    maxb = m.journal_mib * 2**20 / m.block_size / max(m.divisor, 1.0)
    by = commit_closes(t, commit_seconds(jrow.get("mount_options")), maxb)
    full = set(t["transaction"].to_numpy()[(by == "full").to_numpy()].tolist())
    on = st[st["dev"].astype("str") == str(dev)]
    tw = np.nan_to_num(on["transaction_wait_ms"].to_numpy(dtype="float64"))
    if not full or not tw.sum() > 0:
        return 0.0
    hit = on["running_transaction"].isin(full).to_numpy().copy()
    if len(ctx.costs):
        c0, c1 = checkpoint_spans(ctx.costs, str(dev))
        s0, s1 = on["ts_ns"].to_numpy(dtype="int64"), on["end_ns"].to_numpy(dtype="int64")
        for a, b in zip(c0, c1):
            hit &= ~((s0 < b) & (s1 > a))
    return float(tw[hit].sum() / tw.sum())


def reserved_credit_share(ctx: Context, dev: str) -> float:
    """The share of a journal's transaction_wait stall time in off-CPU intervals that waited
    for reserved credits to drain (fs/jbd2/transaction.c add_transaction_credits: the
    journal's reserved credits stay within j_max_transaction_buffers, and a new reservation
    within half of it; writeback's handles reserve credits for their I/O's completion). The
    bound is a quarter of the journal: a larger one takes more reservations at once. Those
    intervals sleep in add_transaction_credits' own wait_event on j_wait_reserved: the
    stack's innermost function past the scheduler (a wait for the transaction's lock sleeps
    in wait_transaction_locked, for log space under __jbd2_log_wait_for_space)."""
    st = ctx.stalls
    off, stacks = ctx.session.offcpu, ctx.session.stacks
    if not len(st) or not len(off) or not len(stacks):
        return 0.0
    on = st[st["dev"].astype("str") == str(dev)]
    tw = float(np.nan_to_num(on["transaction_wait_ms"].to_numpy(dtype="float64")).sum())
    ids = [int(i) for i, f in zip(stacks["stack_id"], stacks["frames"])
           if causes.innermost_function(f) == "add_transaction_credits"]
    if tw <= 0 or not ids:
        return 0.0
    _, keep = stall_intervals(off, stall_keys(on))
    inside = off.iloc[keep]
    hit = inside["stack_id"].isin(ids).to_numpy() & ~inside["runnable"].to_numpy(dtype=bool)
    return min(float(inside["offcpu_ns"].to_numpy(dtype="float64")[hit].sum()) / 1e6 / tw, 1.0)


def _ext_command(device, mnt):
    return (f"mkfs.ext4 -O journal_dev JDEV && umount {mnt} && tune2fs -O ^has_journal {device} && "
            f"tune2fs -J device=JDEV {device} && mount {device} {mnt}")


def _stalls_applied(ctx, r):
    """The stalls a remedy's fractions (:func:`_effects`) apply to: every stall, but the other
    tasks' for own_filesystem (the culprit's stalls move with it)."""
    if r.kind == "own_filesystem":
        return ctx.stalls[~ctx.stalls["pid"].astype("int64").isin(r.inputs["moved_pids"])]
    return ctx.stalls


def annotate(ctx: Context, recs: list[Recommendation]) -> None:
    """Fill every remedy's stall-time interval, mechanism figure, regime, cost and command
    (advice); advice that is not a remedy keeps only ``stall_ms_total``."""
    total = ctx.total_ms
    for r in recs:
        if r.kind in FINDINGS:
            continue
        r.stall_ms_total = total
        if r.kind not in remedies.REMEDIES or r.dev is None:
            continue
        e = _effects(ctx, r)
        if e is None:
            continue
        lo, hi, r.cost, r.command = e
        r.mechanism_ms_removed = float(r.stall_ms_addressed or 0.0)
        r.regime, fig = regime(ctx, r.dev)
        r.inputs = {**r.inputs, "regime_figures": fig, "fractions_low": lo, "fractions_high": hi}
        on = _stalls_applied(ctx, r)
        r.stall_ms_removed_low, r.stall_ms_removed_high = remedies.stall_interval(
            on, lo, hi, ctx.min_ms, r.dev, total)
        lab = lab_of(ctx.session.meta)
        phases = lab.phases if lab else None
        d = remedies.durable_interval(on, hi, ctx.min_ms, phases, r.dev)
        if d is not None:
            r.durable_s_low, r.durable_s_high = d
        _add_curve(r)
        r.text += " " + _removal_text(r)


def _add_curve(r):
    """A log-size remedy's predicted curve (advice.curve: waits and stall time at the current
    size, twice and four times it, the recommended) into ``inputs["curve"]`` and its text."""
    inp = r.inputs
    if not r.estimate or r.kind not in ("journal_size", "log_size") or not r.journal_size_mib:
        return
    if r.kind == "journal_size":
        cur, lo, hi = inp["journal_mib"], inp["low_mib"], inp["high_mib"]
        what = "forced-checkpoint waits"
    else:
        cur, lo, hi = inp["log_mib"], r.journal_size_mib, r.journal_size_mib
        what = "log-space waits"
    t = curve.size_curve(cur, r.mechanism_ms_removed, lo, hi, r.stall_ms_total,
                         r.stall_ms_removed_low, r.stall_ms_removed_high,
                         curve.sizes_for(cur, r.journal_size_mib))
    r.inputs = {**inp, "curve": t.to_dict("records")}
    r.text += " " + curve.curve_text(r.inputs["curve"], what)


def _removal_text(r):
    """The sentence every remedy ends with: what it removes of the stall time, beside its own
    mechanism, the regime and what applying it costs (from the fields the JSON holds)."""
    fig = r.inputs.get("regime_figures") or {}
    u = fig.get("device_util")
    why = {"hot_set": "blocks re-logged: a size holds them for a longer run of the same work",
           "streaming": "new blocks each transaction: checkpoint throughput bounds it, and no size holds a "
                        "longer run; the writeback window or a faster device does",
           "device_bound": "the device ran at its write limit: only the checkpoint waits whose writes this "
                           "saves go; commit, data and flush waits stay"}[r.regime]
    dev = (f"; the data device at {100 * u:.0f}% of its limit ({fig['device_util_basis']})" if u is not None else "")
    dur = (f"; the work durable in {r.durable_s_low:,.1f}-{r.durable_s_high:,.1f} s (measured "
           f"{r.durable_s_high:,.1f} s; at most the removed waits on the critical path shorter)"
           if r.durable_s_low is not None else "")
    return (f"Stall time removed: {remedies.fmt_interval(r)}{dur}; of its own mechanism "
            f"{r.mechanism_ms_removed:,.0f} ms. "
            f"Regime {r.regime} ({why}{dev}). Cost: {r.cost}: {r.command}.")


def generic_causes() -> tuple[str, ...]:
    """Every registered cause not in RULE_CAUSES, ADVICE_FIRST first: its own advice (the
    registry's) is a recommendation of its own kind (per_cause)."""
    rest = [c for c in causes.CAUSES if c not in RULE_CAUSES]
    first = [c for c in ADVICE_FIRST if c in rest]
    return tuple(first + [c for c in rest if c not in first])


#: Every rule, in no particular order (the result is ranked).
RULES = (lost_events, no_stalls, writeback_window, commit_interval, journal_size, inode_size,
         external_journal, fast_commit, log_size, xfs_log_device, own_filesystem, per_cause)
#: Kinds ranked before all others whatever their stall time.
FINDINGS = ("lost_events", "no_stalls", "untraced_checkpoints")


def rank(recs: Iterable[Recommendation]) -> list[Recommendation]:
    """Findings first, then by the stall time removed as the advice prints it (remedies.fmt_ms:
    tenths of a second from 1 s, whole ms below; the interval's middle, then its high end;
    ``stall_ms_addressed`` for advice without an interval), largest first, then the cheapest
    to apply (remedies.COSTS: online first). Two remedies next to each other whose intervals'
    ends lie close (remedies.same_removal) cannot be told apart by what they remove: the
    cheaper goes first, and of two as costly the one remedies.REMEDIES names first (a size
    before a device of its own: XFS rm -rf's larger log and external log printed 44-89 and
    43-89 ms in one run, 105-210 and 108-210 in another)."""
    def cost(r):
        return remedies.COSTS.index(r.cost) if r.cost in remedies.COSTS else len(remedies.COSTS)

    def order(r):
        kinds = remedies.REMEDIES
        return (cost(r), kinds.index(r.kind) if r.kind in kinds else len(kinds))

    def key(r):
        if r.stall_ms_removed_high is None:
            return (r.kind not in FINDINGS, -(r.stall_ms_addressed or 0.0), 0.0)
        lo, hi = remedies.printed_ms(r.stall_ms_removed_low), remedies.printed_ms(r.stall_ms_removed_high)
        return (r.kind not in FINDINGS, -(lo + hi) / 2, -hi, cost(r))

    out = sorted(recs, key=key)
    swapped = True
    while swapped:   # each swap puts a cheaper (or first-named) remedy first: it ends
        swapped = False
        for i in range(len(out) - 1):
            a, b = out[i], out[i + 1]
            if order(b) < order(a) and remedies.same_removal(a, b):
                out[i], out[i + 1], swapped = b, a, True
    return out


def recommendations(session: Session, journals: pd.DataFrame, stalls: pd.DataFrame, causes: pd.DataFrame,
                    call_table: pd.DataFrame, txns: pd.DataFrame, min_ms: float,
                    timeline: pd.DataFrame | None = None, waits: pd.DataFrame | None = None,
                    costs: pd.DataFrame | None = None) -> list[Recommendation]:
    """Run every rule of RULES and return the ranked list of :class:`Recommendation`
    (``waits``: journals.checkpoint_waits, ``costs``: journals.checkpoint_costs, each computed
    when not given)."""
    if timeline is None:
        timeline = fill_timeline(session)
    ctx = Context(session, journals, stalls, causes, call_table, txns, timeline, min_ms, waits, costs)
    recs = []
    for rule in RULES:
        recs.extend(rule(ctx))
    annotate(ctx, recs)
    return rank(recs)
