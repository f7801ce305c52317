"""`jstall lab tune`: the smallest journal big enough for the workload, found by running it,
and what the other remedies do at the starting journal size.

    from jstall.workloads.tune import tune
    r = tune("xattr", {"files": 1000, "updates": 4000}, FsConfig(journal_size="4M", inode_size=128,
             write_iops=2000), output_dir="t1")
    r.threshold_mib, r.stalled_below_mib, r.runs, r.comparisons, r.to_dict()

**Big enough** is jstall's one definition (jstall.enough, the one analyze, compare and the
advice benchmark use): the run's waits on forced checkpoints, every task's (the calls that
ran one, those queued behind one, and forced checkpoints outside the traced calls), take at
most 1 % of the run's time and no call waits 10 ms or more on them. Read from each run's
recorded session with the analyzer's public ``analyze()`` (``checkpoint_waits``); each run
also keeps what it cost in the terms analyze prints: ``stalls`` (calls of at least
``threshold_ms``, default 10 ms), checkpoint stalls (their primary cause ``checkpoint``, or
they ran one), every forced checkpoint (a ``jbd2:jbd2_checkpoint`` event in a task other
than the journal's jbd2 thread: ``start_this_handle -> add_transaction_credits ->
__jbd2_log_wait_for_space -> jbd2_log_do_checkpoint``) and those that cost a stall. A journal
size may be big enough and still force checkpoints: a few late ones, each writing a handful
of blocks home, cost a streaming workload nothing a larger journal would buy back.

**Search.** Journal sizes are whole MiB on a grid of at most eight steps between consecutive
powers of two (every MiB up to 16 MiB, then 16, 18, …, 30, 32, 36, …, 60, 64, 72, …), bounded below by ext4's
1,024 blocks and above by 40% of the filesystem (the lab's rule for an internal journal) or
``max_mib``. From the starting size the journal is doubled until a run is big enough (or
halved until one is not when the starting size is), then the grid between the largest size
not big enough and the smallest big enough is bisected. The filesystem, workload, seed and
device stay the same in every run, and every run is recorded and kept (``output_dir``), so
the table of runs is the curve walked: size → forced checkpoints, their waits, durable time.
Bisection assumes a larger journal is big enough wherever a smaller one was; the result
names the size just below the threshold, both measured.

**Comparisons** at the starting journal size, each changing one thing: 256-byte inodes
(when the filesystem has smaller ones), an external journal of the same size on its own
emulated device of the same profile as the filesystem's (unless one is given), and
fast_commit. Each with durable phase seconds (docs/lab.md), stalls and stall ms.

**Predicted against measured.** With the comparisons, what ``jstall analyze`` advises from
the starting run is checked by running it: the journal size it recommends (run once more
when the search did not run that size; not beyond the bound), and the 256-byte-inode,
external-journal and fast_commit advice against their comparison runs. Each
``Prediction`` holds the stall time the advice says it removes and the time it removed:
forced-checkpoint waits for the journal size and the inode size, all stall time for the
external journal and fast_commit (they also shorten commit waits).

**XFS** (``FsConfig(fs_type="xfs")``): the size searched is the internal log's (mkfs.xfs -l
size=), judged by the same bound on its log-space waits (reservations asleep in
``xlog_grant_head_wait`` until the tail moved, queued ones and those outside the traced
calls included: ``checkpoint_waits``' row of kind "xfs"); each run also keeps how many
reservations waited (``log_waits``) and the stalls whose primary cause is log space
(``log_space_stalls``, ``log_space_stall_ms``); jbd2's forced-checkpoint fields stay 0. The
grid runs from mkfs.xfs's fixed smallest log (2 MiB) to the largest that fits in one
allocation group, or ``max_mib``. The smallest log of a geometry only mkfs.xfs knows: a size
it refuses as too small is not possible (``refused``), the search goes on from the smallest
it names (``smallest_mib``). Comparisons: an external log of the same size (on a device of
the filesystem's profile, as for ext4) and eight 256 KiB log buffers (mount -o
logbsize=256k,logbufs=8); inode size and fast_commit are ext4's. The advice checked is
analyze's ``log_size`` (the size that holds what the run logged), run as the journal size is.
"""

import dataclasses
import json
import os
import re
import sys

from jstall import system
from jstall.enough import bound, judge
from jstall.errors import JstallError
from jstall.metadata import lab_of

from .fsconfig import (JOURNAL_MAX_BLOCKS, JOURNAL_MIN_BLOCKS, XFS_LOG_MAX_BYTES, XFS_LOG_MIN_BLOCKS,
                      XFS_LOG_MIN_BYTES, FsConfig, xfs_agcount)
from .loopdev import LAB_NEEDS_ROOT

TUNE_FORMAT = "jstall-tune"
TUNE_VERSION = 1
#: grid steps between consecutive powers of two
STEPS_PER_OCTAVE = 8


@dataclasses.dataclass
class TuneRun:
    """One measured run: ``label`` (e.g. 'journal 12M', '256-byte inodes'), the journal size
    in MiB, the changed options, and what the session showed: ``stalls`` (calls ≥ the
    threshold), ``stall_ms`` (their summed latency), ``checkpoint_stalls`` and
    ``checkpoint_stall_ms`` (those that ran or waited on a forced checkpoint),
    ``forced_checkpoints`` (jbd2_checkpoint events in user tasks: the search removes both),
    ``durable_s`` and ``returned_s`` per phase and in all, ``session_dir``; the forced
    checkpoints by cost as analyze counts them: ``checkpoints_in_stalls`` (run in a call of
    ``threshold_ms`` or more) and ``checkpoint_wait_ms`` (those calls' waits, each once),
    ``negligible_checkpoints`` (the rest in the run's tasks); ``checkpoint_waits_ms``,
    ``longest_checkpoint_wait_ms`` and ``run_ms``: what jstall.enough judges (None in runs
    measured before it: those were judged by their forced checkpoints). ``kind``: the journal's,
    "jbd2" (ext4) or "xfs"; on XFS the judged waits are log-space waits, ``log_waits`` counts the
    reservations that waited, ``log_space_stalls`` and ``log_space_stall_ms`` are the stalls
    whose primary cause is log space, and the forced-checkpoint fields are 0."""

    label: str
    journal_mib: int
    options: dict
    stalls: int
    stall_ms: float
    checkpoint_stalls: int
    checkpoint_stall_ms: float
    forced_checkpoints: int
    durable_s: dict
    returned_s: dict
    total_durable_s: float
    total_returned_s: float
    session_dir: str = None
    threshold_ms: float = 10.0
    checkpoints_in_stalls: int = 0
    checkpoint_wait_ms: float = 0.0
    negligible_checkpoints: int = 0
    checkpoint_waits_ms: float = None
    longest_checkpoint_wait_ms: float = None
    run_ms: float = None
    kind: str = "jbd2"
    log_waits: int = 0
    log_space_stalls: int = 0
    log_space_stall_ms: float = 0.0

    @property
    def enough(self):
        """The jstall.enough verdict of the run (None for a run measured before it)."""
        if self.run_ms is None:
            return None
        return judge(self.checkpoint_waits_ms, self.longest_checkpoint_wait_ms, self.run_ms, self.kind)

    @property
    def big_enough(self):
        """The journal was big enough for the run (jstall.enough; runs measured before it: no
        forced checkpoint and no checkpoint stall)."""
        e = self.enough
        return e.big_enough if e is not None else self.forced_checkpoints == 0 and self.checkpoint_stalls == 0


@dataclasses.dataclass
class Prediction:
    """One piece of ``jstall analyze``'s advice from the starting run, and what running it
    measured: ``kind`` (journal_size, inode_size, external_journal, fast_commit; XFS: log_size,
    log_buffers, external_log), ``predicted_ms`` (its stall_ms_addressed; with
    ``predicted_high_ms``, the low end of the range it gives), ``journal_mib`` (the recommended size, for
    journal_size and log_size), ``measured_label`` (the run that checked it; None when none
    could: beyond the bound, or a log mkfs.xfs refused), ``measured_ms`` (the stall time it
    removed against the starting run: the judged waits -- forced-checkpoint waits, XFS's
    log-space waits -- for journal_size, inode_size and every XFS advice, all stall time
    otherwise) and ``big_enough`` (that run's verdict)."""

    kind: str
    predicted_ms: float
    journal_mib: int = None
    measured_label: str = None
    measured_ms: float = None
    big_enough: bool = None
    predicted_high_ms: float = None

    def error(self):
        """The prediction's error as text: 'in' when the measured lies in the predicted range,
        else its distance from the nearest end in % of the measured; '-' when nothing was
        removed."""
        if self.measured_ms is None or self.measured_ms <= 0:
            return "-"
        lo, hi = self.predicted_ms, self.predicted_high_ms if self.predicted_high_ms is not None else self.predicted_ms
        if self.predicted_high_ms is not None and lo <= self.measured_ms <= hi:
            return "in"
        near = lo if abs(lo - self.measured_ms) <= abs(hi - self.measured_ms) else hi
        return f"{100 * (near - self.measured_ms) / self.measured_ms:+.0f}%"


@dataclasses.dataclass
class TuneResult:
    """``threshold_mib``: the smallest journal (XFS: log) size found big enough (None when
    none up to the bound was); ``stalled_below_mib``: the largest size tried that was not (None
    when the smallest size the filesystem takes already was); ``start_mib``; ``runs``: the
    search's runs in the order tried; ``comparisons``: the runs at the starting size, the
    baseline first; ``tried_mib``: the sizes run; ``bound_mib``: the largest size allowed;
    ``smallest_mib``: the smallest size known possible (ext4's 1,024 blocks; XFS: 2 MiB, or the
    smallest log mkfs.xfs named when it refused one); ``refused``: [{journal_mib, reason}] of
    the sizes mkfs.xfs refused (not possible: no run)."""

    pattern: str
    params: dict
    threshold_ms: float
    start_mib: int
    bound_mib: int
    threshold_mib: int = None
    stalled_below_mib: int = None
    runs: list = dataclasses.field(default_factory=list)
    comparisons: list = dataclasses.field(default_factory=list)
    config: dict = None
    output_dir: str = None
    predictions: list = dataclasses.field(default_factory=list)
    smallest_mib: int = None
    refused: list = dataclasses.field(default_factory=list)

    @property
    def tried_mib(self):
        return [r.journal_mib for r in self.runs]

    @property
    def xfs(self):
        return (self.config or {}).get("fs_type") == "xfs"

    def to_dict(self):
        def run(r):
            return {**dataclasses.asdict(r), "big_enough": r.big_enough}

        return {"format": TUNE_FORMAT, "version": TUNE_VERSION, "pattern": self.pattern, "params": self.params,
                "threshold_ms": self.threshold_ms, "start_mib": self.start_mib, "bound_mib": self.bound_mib,
                "threshold_mib": self.threshold_mib, "stalled_below_mib": self.stalled_below_mib,
                "tried_mib": self.tried_mib, "runs": [run(r) for r in self.runs],
                "comparisons": [run(r) for r in self.comparisons], "config": self.config,
                "output_dir": self.output_dir, "predictions": [dataclasses.asdict(p) for p in self.predictions],
                "smallest_mib": self.smallest_mib, "refused": self.refused}


def grid(lo_mib, hi_mib):
    """Journal sizes (MiB) strictly between lo and hi on the search grid."""
    out = set()
    p = 1
    while p < hi_mib:
        step = max(1, p // STEPS_PER_OCTAVE)
        out.update(range(p, 2 * p, step))
        p *= 2
    return sorted(s for s in out if lo_mib < s < hi_mib)


def bounds_mib(fs):
    """(smallest, largest) internal journal in MiB the lab takes on this filesystem. XFS: the
    log's fixed bounds (2 MiB and 512 blocks; mkfs.xfs may ask more of the geometry: see
    tune()) and, above, what fits in one allocation group (a MiB below the group's size: the
    group's headers take a few blocks of it) and 2038 MiB."""
    if fs.fs_type == "xfs":
        lo = -(-max(XFS_LOG_MIN_BYTES, XFS_LOG_MIN_BLOCKS * fs.block_size) // (1 << 20))
        ag = xfs_agcount(fs.fs_bytes, fs._mkfs_tokens()) or 1
        hi = min(fs.fs_bytes // ag - (1 << 20), XFS_LOG_MAX_BYTES) >> 20
        return lo, max(hi, lo)
    lo = -(-JOURNAL_MIN_BLOCKS * fs.block_size // (1 << 20))
    hi = min(fs.fs_bytes * 2 // 5, JOURNAL_MAX_BLOCKS * fs.block_size) >> 20
    return lo, hi


#: mkfs.xfs refusing a log size (scratchfs.mkfs_xfs quotes its reason): "log size 512 blocks
#: too small, minimum size is 1368 blocks", "... too large, maximum size is N blocks"
_XFS_LOG_REFUSAL = re.compile(r"mkfs\.xfs .*failed: (.*\blog size\b.*?(too small|too large).*)")


def xfs_log_refusal(message, block_size=4096):
    """(reason, smallest MiB or None, largest MiB or None) when ``message`` (a JstallError's)
    is mkfs.xfs refusing the log's size, else None: the sizes it names as the smallest or
    largest it takes, in whole MiB."""
    m = _XFS_LOG_REFUSAL.search(message)
    if not m:
        return None
    reason = m.group(1).split(" (give ")[0]
    lo = re.search(r"minimum size is (\d+) blocks", reason)
    hi = re.search(r"maximum size is (\d+) blocks", reason)
    return (reason, -(-int(lo.group(1)) * block_size // (1 << 20)) if lo else None,
            int(hi.group(1)) * block_size >> 20 if hi else None)


def measure(session_dir, label, journal_mib, options, threshold_ms):
    """A TuneRun from a recorded lab session (see the module docstring for the definitions)."""
    from jstall.analyzer.analysis import analyze
    from jstall.analyzer.journals import checkpoints, session_span_s, verdict
    from jstall.analyzer.summary import checkpoint_cost_summary

    a = analyze(session_dir, min_ms=threshold_ms)
    st = a.stalls
    cps = lsp = st
    if len(st):
        cause = st["cause"].astype("str")
        cps = st[st["own_checkpoint"].astype(bool) | (cause == "checkpoint")]
        lsp = st[cause == "log_space"]
    forced = checkpoints(a.session)
    cost = checkpoint_cost_summary(a.checkpoint_costs)   # not the whole summary: only this
    phases = lab_of(a.session.meta).phases
    waits = a.checkpoint_waits   # the lab's one filesystem: its journal's (or XFS log's) row, if any
    if len(waits) and "kind" in waits:
        kind = str(waits["kind"].iloc[0])
    else:
        kind = "xfs" if any(j.get("kind") == "xfs" for j in a.session.journals) else "jbd2"
    e = verdict(waits.iloc[0].to_dict() if len(waits) else None, session_span_s(a.session) * 1e3, kind)
    logs = a.xfs_logs if kind == "xfs" else None
    return TuneRun(label=label, journal_mib=journal_mib, options=options, stalls=len(st),
                   stall_ms=round(float(st["latency_ms"].sum()), 3) if len(st) else 0.0,
                   checkpoint_stalls=len(cps),
                   checkpoint_stall_ms=round(float(cps["latency_ms"].sum()), 3) if len(cps) else 0.0,
                   forced_checkpoints=int(forced["forced"].sum()) if len(forced) else 0,
                   durable_s={p.name: round(p.durable_s, 4) for p in phases},
                   returned_s={p.name: round(p.returned_s, 4) for p in phases},
                   total_durable_s=round(sum(p.durable_s for p in phases), 4),
                   total_returned_s=round(sum(p.returned_s for p in phases), 4), session_dir=session_dir,
                   threshold_ms=float(threshold_ms), checkpoints_in_stalls=int(cost.get("expensive") or 0),
                   checkpoint_wait_ms=round(float(cost.get("expensive_wait_ms") or 0.0), 3),
                   negligible_checkpoints=int(cost.get("negligible") or 0),
                   checkpoint_waits_ms=round(e.wait_ms, 3), longest_checkpoint_wait_ms=round(e.longest_ms, 3),
                   run_ms=round(e.run_ms, 3), kind=kind,
                   log_waits=int(logs["waits"].sum()) if logs is not None and len(logs) else 0,
                   log_space_stalls=len(lsp),
                   log_space_stall_ms=round(float(lsp["latency_ms"].sum()), 3) if len(lsp) else 0.0)


def _slug(label):
    return "".join(c if c.isalnum() else "-" for c in label).strip("-")


def tune(pattern, params=None, fs=None, jobs=1, seed=1, threshold_ms=10.0, max_mib=None, compare=True,
         output_dir=None, scratch_dir=None, min_ms=1.0, console=None):
    """Search the threshold journal size and compare the remedies (module docstring); return
    a TuneResult. ``fs``: the FsConfig of the starting point (its journal_size is the starting
    size; an internal journal, or XFS log). Every run's session is kept under ``output_dir``
    (default jstall-tune-PATTERN), with tune.json. Progress lines go to ``console`` (default
    stderr)."""
    from .lab import LabConfig, prepare, run_lab

    console = console or sys.stderr
    fs = fs or FsConfig()
    params = dict(params or {})
    xfs = fs.fs_type == "xfs"
    noun = "log" if xfs else "journal"
    if fs.journal_device:
        raise JstallError(f"lab tune searches an internal {noun}'s size; drop --journal-device (an external {noun} "
                          "is one of the comparisons)")
    if not isinstance(threshold_ms, (int, float)) or threshold_ms <= 0:
        raise JstallError(f"--threshold-ms {threshold_ms}: give milliseconds > 0")
    start = fs.journal_bytes
    if start % (1 << 20):
        raise JstallError(f"--journal-size {fs.journal_size}: give whole MiB for the search")
    start_mib = start >> 20
    lo_mib, hi_mib = bounds_mib(fs)
    if max_mib is not None:
        if max_mib < start_mib:
            raise JstallError(f"--max-journal-size {max_mib}M is below --journal-size {start_mib}M; give a larger one")
        hi_mib = min(hi_mib, max_mib)
    out_dir = output_dir or f"jstall-tune-{pattern}"
    if os.path.exists(os.path.join(out_dir, "tune.json")) or (os.path.isdir(out_dir) and os.listdir(out_dir)):
        raise JstallError(f"-o {out_dir}: holds files; give a new or empty directory")
    base = LabConfig(fs=fs, pattern=pattern, params=params, jobs=jobs, seed=seed, min_ms=min_ms,
                     scratch_dir=scratch_dir)
    variants = _variants(fs) if compare else []
    for _, change in [(None, {})] + variants:  # validate every configuration before running any
        prepare(dataclasses.replace(base, fs=dataclasses.replace(fs, **change)))
    system.require_root(LAB_NEEDS_ROOT)
    os.makedirs(out_dir, exist_ok=True)
    result = TuneResult(pattern=pattern, params=params, threshold_ms=float(threshold_ms), start_mib=start_mib,
                        bound_mib=hi_mib, config={**fs.as_dict(), "jobs": jobs, "seed": seed}, output_dir=out_dir,
                        smallest_mib=lo_mib)
    cache = {}

    def run(label, mib, change):
        """The measured run, or None when mkfs.xfs refused the log's size (not possible; the
        first run's refusal is the caller's error)."""
        key = (mib, tuple(sorted(change.items())))
        if key in cache:
            return cache[key]
        sdir = os.path.join(out_dir, _slug(label))
        cfg = dataclasses.replace(base, fs=dataclasses.replace(fs, journal_size=f"{mib}M", **change), output_dir=sdir,
                                  extra={"tune": {"label": label, "journal_mib": mib, "options": change}})
        print(f"tune: {label} ...", file=console, flush=True)
        try:
            run_lab(cfg)
        except JstallError as e:
            refusal = xfs_log_refusal(str(e), fs.block_size) if xfs and cache else None
            if refusal is None:
                raise
            reason, smallest, _ = refusal
            print(f"tune: {label}: not possible: mkfs.xfs refused it ({reason})", file=console, flush=True)
            result.refused.append({"journal_mib": mib, "label": label, "reason": reason})
            if smallest is not None and smallest > mib:
                result.smallest_mib = max(result.smallest_mib or 0, smallest)
            if os.path.isdir(sdir) and not os.listdir(sdir):
                os.rmdir(sdir)
            cache[key] = None
            _save(result)
            return None
        r = measure(sdir, label, mib, change, threshold_ms)
        if r.kind == "xfs":
            what = f"{r.log_waits} log-space waits, {r.log_space_stalls} log-space stalls"
        else:
            what = f"{r.forced_checkpoints} forced checkpoints, {r.checkpoint_stalls} checkpoint stalls"
        print(f"tune: {label}: {r.enough.describe()} ({what}; durable {r.total_durable_s:.2f} s)", file=console,
              flush=True)
        cache[key] = r
        if not change:
            result.runs.append(r)
        _save(result)
        return r

    def size(mib):
        return run(f"{noun} {mib}M", mib, {})

    first = size(start_mib)
    stalled, enough = (None, start_mib) if first.big_enough else (start_mib, None)
    if first.big_enough:  # halve until a size is not big enough or the smallest is
        m = start_mib
        while m > result.smallest_mib:
            m = max(result.smallest_mib, m // 2)
            r = size(m)
            if r is None:  # below the geometry's smallest log: try the smallest mkfs.xfs named
                if not m < result.smallest_mib < enough:
                    break
                m = result.smallest_mib
                r = size(m)
                if r is None:
                    break
            if r.big_enough:
                enough = m
            else:
                stalled = m
                break
    else:  # double until a size is big enough or the bound is not
        m = start_mib
        while m < hi_mib:
            m = min(hi_mib, m * 2)
            r = size(m)
            if r is None:  # mkfs.xfs refused it as too large: the bound is below it
                break
            if r.big_enough:
                enough = m
                break
            stalled = m
    if stalled is not None and enough is not None:
        cand = grid(stalled, enough)
        while cand:
            mid = cand[len(cand) // 2]
            r = size(mid)
            if r is not None and r.big_enough:
                enough = mid
                cand = [c for c in cand if c < mid]
            else:  # (refused: not possible, as a size not big enough is no answer)
                stalled = mid
                cand = [c for c in cand if c > mid]
    result.threshold_mib, result.stalled_below_mib = enough, stalled
    result.comparisons = [first] + [c for c in (run(label, start_mib, change) for label, change in variants)
                                    if c is not None]
    if compare:
        result.predictions = _check_advice(first, result, lambda mib: size(mib), threshold_ms)
    _save(result)
    return result


#: the comparison run that checks each kind of advice
_CHECKED_BY = {"inode_size": "256-byte inodes", "external_journal": "external journal", "fast_commit": "fast_commit"}
#: on XFS (analyze's log_size advice is run as a size)
_CHECKED_BY_XFS = {"log_buffers": "8x256K log buffers", "external_log": "external log"}
#: the advice a size run checks, by journal kind
_SIZE_ADVICE = {"jbd2": "journal_size", "xfs": "log_size"}


def _check_advice(first, result, run_size, threshold_ms):
    """[Prediction] of the starting run's advice (jstall analyze), each checked by a run."""
    from jstall.analyzer.analysis import analyze

    recs = {r.kind: r for r in reversed(analyze(first.session_dir, min_ms=threshold_ms).recommendations)}
    by_label = {c.label: c for c in result.comparisons}
    out = []
    kind = _SIZE_ADVICE.get(first.kind, "journal_size")
    js = recs.get(kind)
    if js is not None and js.journal_size_mib:
        mib = int(js.journal_size_mib)
        p = Prediction(kind, round(js.stall_ms_addressed, 3), journal_mib=mib)
        r = run_size(mib) if mib <= result.bound_mib else None
        if r is not None:
            p.measured_label, p.big_enough = r.label, r.big_enough
            p.measured_ms = round(first.checkpoint_waits_ms - r.checkpoint_waits_ms, 3)
        out.append(p)
    for kind, label in (_CHECKED_BY_XFS if first.kind == "xfs" else _CHECKED_BY).items():
        rec, r = recs.get(kind), by_label.get(label)
        if rec is None or r is None:
            continue
        removed = (first.checkpoint_waits_ms - r.checkpoint_waits_ms if kind == "inode_size" or first.kind == "xfs"
                   else first.stall_ms - r.stall_ms)
        high = rec.inputs.get("removed_high_ms")
        out.append(Prediction(kind, round(rec.stall_ms_addressed, 3), measured_label=r.label,
                              measured_ms=round(removed, 3), big_enough=r.big_enough,
                              predicted_high_ms=None if high is None else round(high, 3)))
    return out


#: XFS's comparison: the largest in-memory log buffers, as many as it takes
XFS_BIG_LOG_BUFFERS = {"log_buffer_size": "256K", "log_buffers": 8}


def _variants(fs):
    """[(label, FsConfig changes)] of the remedies compared at the starting size."""
    out = []
    if fs.fs_type != "xfs" and fs.inode_size < 256:
        out.append(("256-byte inodes", {"inode_size": 256}))
    ext = {"journal_device": True}
    if fs.journal_device_profile == "none" and not fs.journal_limits():
        # its own device of the same kind as the filesystem's
        ext.update(journal_device_profile=fs.device_profile, journal_read_iops=fs.read_iops,
                   journal_write_iops=fs.write_iops, journal_read_bps=fs.read_bps, journal_write_bps=fs.write_bps)
    if fs.fs_type == "xfs":
        out.append(("external log", ext))
        if (fs.log_buffer_bytes, fs.log_buffers) != (256 << 10, 8):
            out.append(("8x256K log buffers", dict(XFS_BIG_LOG_BUFFERS)))
        return out
    out.append(("external journal", ext))
    if not fs.fast_commit and fs.data_mode != "journal":
        out.append(("fast_commit", {"fast_commit": True}))
    return out


def load(tune_dir):
    """The TuneResult a lab tune directory's tune.json holds (a search cut short: the runs it
    finished). Raises JstallError for an unreadable one."""
    from jstall.metadata import TUNE_FILE

    path = os.path.join(tune_dir, TUNE_FILE)
    try:
        with open(path) as f:
            d = json.load(f)
        if d.get("format") != TUNE_FORMAT:
            raise ValueError(f"format is not {TUNE_FORMAT!r}")
        names = {f.name for f in dataclasses.fields(TuneRun)}

        def run(x):
            return TuneRun(**{k: v for k, v in x.items() if k in names})

        keep = {f.name for f in dataclasses.fields(TuneResult)} - {"runs", "comparisons", "predictions"}
        pnames = {f.name for f in dataclasses.fields(Prediction)}
        return TuneResult(**{k: v for k, v in d.items() if k in keep}, runs=[run(x) for x in d.get("runs", [])],
                          comparisons=[run(x) for x in d.get("comparisons", [])],
                          predictions=[Prediction(**{k: v for k, v in x.items() if k in pnames})
                                       for x in d.get("predictions", [])])
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise JstallError(f"{path}: unreadable ({e}); run jstall lab tune again") from None


def _save(result):
    path = os.path.join(result.output_dir, "tune.json")
    with open(path + ".tmp", "w") as f:
        json.dump(result.to_dict(), f, indent=2)
        f.write("\n")
    os.replace(path + ".tmp", path)


def print_result(r, out):
    """The text summary of a TuneResult."""
    c = r.config or {}
    xfs = r.xfs
    limits = ",".join(f"{k}={v}" for k, v in (c.get("data_limits") or {}).items() if v)
    if xfs:
        bufs = (f"log buffers {c.get('log_buffers') or 'default'} x {c.get('log_buffer_size') or 'default size'}"
                if c.get("log_buffers") or c.get("log_buffer_size") else "default log buffers")
        fs = f"xfs {c.get('fs_size')}, {c.get('inode_size')}-byte inodes, {bufs}"
    else:
        fs = f"ext4 {c.get('fs_size')}, {c.get('inode_size')}-byte inodes, data={c.get('data_mode')}"
    print(f"lab tune {r.pattern}: {', '.join(f'{k}={v}' for k, v in r.params.items()) or 'defaults'}; {fs}; device "
          f"{c.get('device_profile')} " + limits, file=out)
    noun, fs_name = ("log", "mkfs.xfs") if xfs else ("journal", "ext4")
    rule = (f"big enough: {bound('xfs' if xfs else 'jbd2')}; {noun} sizes on a grid of at most {STEPS_PER_OCTAVE} "
            f"steps per doubling, {r.bound_mib}M at most")
    if r.threshold_mib is None:
        print(f"no {noun} up to {r.bound_mib}M is big enough ({rule})", file=out)
    elif r.stalled_below_mib is None:
        print(f"threshold: {r.threshold_mib}M, the smallest {noun} {fs_name} takes here, is already big enough "
              f"({rule})", file=out)
    else:
        print(f"threshold: {r.threshold_mib}M is the smallest {noun} big enough; {r.stalled_below_mib}M is not "
              f"({rule})", file=out)
    for x in r.refused or []:
        print(f"not possible: {noun} {x['journal_mib']}M, mkfs.xfs refused it ({x['reason']})", file=out)
    phases = list(r.runs[0].durable_s) if r.runs else []
    print("", file=out)
    if xfs:
        print("runs in the order tried (WAITS_MS: every task's log-space waits, reservations asleep in "
              "xlog_grant_head_wait until the log's tail moved, LONGEST_MS the longest one call's, WAITS how many; "
              "LS_STALLS: stalls whose primary cause is log space; durable seconds: until syncfs returned and the "
              "emulated device was idle)", file=out)
    else:
        print("runs in the order tried (CP_WAITS_MS: every task's waits on forced checkpoints, LONGEST_MS the "
              "longest one call's; durable seconds: until syncfs returned and the emulated device was idle)",
              file=out)
    _table(out, r.runs, phases, xfs)
    if len(r.comparisons) > 1:
        print("", file=out)
        print(f"at the starting {noun} size ({r.start_mib}M), one change at a time", file=out)
        _table(out, r.comparisons, phases, xfs)
    if r.predictions:
        print("", file=out)
        removed = ("log-space waits" if xfs
                   else "forced-checkpoint waits for the journal and inode size")
        print(f"jstall analyze's advice from the {r.start_mib}M run, predicted against measured (stall ms removed: "
              f"{removed}, all stall time otherwise)", file=out)
        print(f"{'ADVICE':<18} {'PREDICTED_MS':>13} {'MEASURED_MS':>11} {'ERROR':>6}  MEASURED BY", file=out)
        refused = {x["journal_mib"] for x in r.refused or []}
        for p in r.predictions:
            what = p.kind + (f" {p.journal_mib}M" if p.journal_mib else "")
            ranged = p.predicted_high_ms is not None and round(p.predicted_high_ms) > round(p.predicted_ms)
            pred = f"{p.predicted_ms:,.0f}" + (f"-{p.predicted_high_ms:,.0f}" if ranged else "")
            if p.measured_label is None:
                why = "mkfs.xfs refused it" if p.journal_mib in refused else f"beyond {r.bound_mib}M"
                print(f"{what:<18} {pred:>13} {'-':>11} {'-':>6}  not run: {why}", file=out)
                continue
            print(f"{what:<18} {pred:>13} {p.measured_ms:>11,.0f} {p.error():>6}  {p.measured_label} "
                  f"({'big enough' if p.big_enough else 'not big enough'})", file=out)
    print("", file=out)
    print(f"sessions and tune.json in {r.output_dir} (explain one: jstall analyze {r.output_dir}/RUN)", file=out)


def _table(out, runs, phases, xfs=False):
    if xfs:  # jbd2's forced-checkpoint columns mean nothing on XFS: its log's waits instead
        head = f"{'RUN':<18} {'LOG':>7} {'ENOUGH':>6} {'WAITS_MS':>9} {'LONGEST_MS':>10} {'SHARE':>6} {'WAITS':>6} " \
               f"{'LS_STALLS':>9} {'LS_STALL_MS':>11} {'STALLS':>6} {'STALL_MS':>9} {'DURABLE_S':>9} {'RETURNED_S':>10}"
    else:
        head = f"{'RUN':<18} {'JOURNAL':>7} {'ENOUGH':>6} {'CP_WAITS_MS':>11} {'LONGEST_MS':>10} {'SHARE':>6} " \
               f"{'CP_STALLS':>9} {'CP_STALL_MS':>11} {'STALLS':>6} " \
               f"{'STALL_MS':>9} {'FORCED_CP':>9} {'IN_STALLS':>9} {'CP_WAIT_MS':>10} {'NEGLIGIBLE':>10} " \
               f"{'DURABLE_S':>9} {'RETURNED_S':>10}"
    head += "".join(f" {p[:12] + '_s':>14}" for p in phases)
    print(head, file=out)
    for x in runs:
        e = x.enough
        width = 9 if xfs else 11
        waits = (f"{e.wait_ms:>{width},.0f} {e.longest_ms:>10,.0f} {100 * e.share:>5.1f}%" if e is not None
                 else f"{'-':>{width}} {'-':>10} {'-':>6}")
        if xfs:
            line = (f"{x.label:<18} {str(x.journal_mib) + 'M':>7} {'yes' if x.big_enough else 'no':>6} {waits} "
                    f"{x.log_waits:>6,} {x.log_space_stalls:>9,} {x.log_space_stall_ms:>11,.0f} {x.stalls:>6,} "
                    f"{x.stall_ms:>9,.0f} {x.total_durable_s:>9.2f} {x.total_returned_s:>10.2f}")
        else:
            line = (f"{x.label:<18} {str(x.journal_mib) + 'M':>7} {'yes' if x.big_enough else 'no':>6} {waits} "
                    f"{x.checkpoint_stalls:>9,} "
                    f"{x.checkpoint_stall_ms:>11,.0f} {x.stalls:>6,} {x.stall_ms:>9,.0f} {x.forced_checkpoints:>9,} "
                    f"{x.checkpoints_in_stalls:>9,} {x.checkpoint_wait_ms:>10,.0f} {x.negligible_checkpoints:>10,} "
                    f"{x.total_durable_s:>9.2f} {x.total_returned_s:>10.2f}")
        line += "".join(f" {x.durable_s.get(p, float('nan')):>14.2f}" for p in phases)
        print(line, file=out)
