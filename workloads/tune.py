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

from jstall import kinds, system
from jstall.errors import JstallError
from jstall.enough import verdict
from jstall.metadata import lab_of

from jstall.analyzer.multi.tune import STEPS_PER_OCTAVE, Prediction, TuneResult, TuneRun

from .fsconfig import (JOURNAL_MAX_BLOCKS, JOURNAL_MIN_BLOCKS, XFS_LOG_MAX_BYTES, XFS_LOG_MIN_BLOCKS,
                      XFS_LOG_MIN_BYTES, FsConfig, xfs_agcount)
from .lab import LabConfig, prepare, run_lab
from .loopdev import LAB_NEEDS_ROOT

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
    if fs.xfs:
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
    # the analysis (pandas) loads when a run is measured, not with `jstall lab`'s parser
    from jstall.analyzer.analysis import analyze
    from jstall.analyzer.jbd2.journals import checkpoints
    from jstall.analyzer.session.recording import session_span_s
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
        kind = (kinds.XFS if any(kinds.is_xfs(j) for j in a.session.journals) else kinds.JBD2).name
    e = verdict(waits.iloc[0].to_dict() if len(waits) else None, session_span_s(a.session) * 1e3, kind)
    logs = a.xfs_logs if kind == kinds.XFS.name else None
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


def _start_and_bounds(fs, max_mib):
    """(start_mib, lo_mib, hi_mib) of tune: the starting size (whole MiB) and the search's
    bounds (the geometry's, the upper one no higher than ``max_mib``)."""
    start = fs.journal_bytes
    if start % (1 << 20):
        raise JstallError(f"--journal-size {fs.journal_size}: give whole MiB for the search")
    start_mib = start >> 20
    lo_mib, hi_mib = bounds_mib(fs)
    if max_mib is not None:
        if max_mib < start_mib:
            raise JstallError(f"--max-journal-size {max_mib}M is below --journal-size {start_mib}M; give a larger one")
        hi_mib = min(hi_mib, max_mib)
    return start_mib, lo_mib, hi_mib


def _note_refusal(result, refusal, label, mib, sdir, console):
    """A run mkfs.xfs refused (xfs_log_refusal's ``refusal``): said, kept in ``result`` (with
    the smallest log it named), its empty directory removed."""
    reason, smallest, _ = refusal
    print(f"tune: {label}: not possible: mkfs.xfs refused it ({reason})", file=console, flush=True)
    result.refused.append({"journal_mib": mib, "label": label, "reason": reason})
    if smallest is not None and smallest > mib:
        result.smallest_mib = max(result.smallest_mib or 0, smallest)
    if os.path.isdir(sdir) and not os.listdir(sdir):
        os.rmdir(sdir)


def _search(size, first, start_mib, hi_mib, result):
    """(stalled, enough) of tune: the largest size measured not big enough and the smallest
    big enough (None when not found), from the ``first`` run at ``start_mib``: halving or
    doubling (up to ``hi_mib``, down to ``result.smallest_mib``), then bisecting on the grid
    between them. ``size(mib)``: the run at that size, or None when refused."""
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
    return stalled, enough


def tune(pattern, params=None, fs=None, jobs=1, seed=1, threshold_ms=10.0, max_mib=None, compare=True,
         output_dir=None, scratch_dir=None, min_ms=1.0, console=None):
    """Search the threshold journal size and compare the remedies (module docstring); return
    a TuneResult. ``fs``: the FsConfig of the starting point (its journal_size is the starting
    size; an internal journal, or XFS log). Every run's session is kept under ``output_dir``
    (default jstall-tune-PATTERN), with tune.json. Progress lines go to ``console`` (default
    stderr)."""
    console = console or sys.stderr
    fs = fs or FsConfig()
    params = dict(params or {})
    xfs = fs.xfs
    noun = kinds.of_fs_type(fs.fs_type).noun
    if fs.journal_device:
        raise JstallError(f"lab tune searches an internal {noun}'s size; drop --journal-device (an external {noun} "
                          "is one of the comparisons)")
    if not isinstance(threshold_ms, (int, float)) or threshold_ms <= 0:
        raise JstallError(f"--threshold-ms {threshold_ms}: give milliseconds > 0")
    start_mib, lo_mib, hi_mib = _start_and_bounds(fs, max_mib)
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
            _note_refusal(result, refusal, label, mib, sdir, console)
            cache[key] = None
            _save(result)
            return None
        r = measure(sdir, label, mib, change, threshold_ms)
        if r.kind == kinds.XFS.name:
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
    stalled, enough = _search(size, first, start_mib, hi_mib, result)
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


def _check_advice(first, result, run_size, threshold_ms):
    """[Prediction] of the starting run's advice (jstall analyze), each checked by a run."""
    from jstall.analyzer.analysis import analyze  # pandas, as in measure()

    recs = {r.kind: r for r in reversed(analyze(first.session_dir, min_ms=threshold_ms).recommendations)}
    by_label = {c.label: c for c in result.comparisons}
    out = []
    kind = kinds.KINDS.get(first.kind, kinds.JBD2).size_advice
    js = recs.get(kind)
    if js is not None and js.journal_size_mib:
        mib = int(js.journal_size_mib)
        p = Prediction(kind, round(js.stall_ms_addressed, 3), journal_mib=mib, **_stall_interval(js))
        r = run_size(mib) if mib <= result.bound_mib else None
        if r is not None:
            p.measured_label, p.big_enough = r.label, r.big_enough
            p.measured_ms = round(first.checkpoint_waits_ms - r.checkpoint_waits_ms, 3)
            p.stall_removed_ms = round(first.stall_ms - r.stall_ms, 3)
        out.append(p)
    xfs_first = first.kind == kinds.XFS.name
    for kind, label in (_CHECKED_BY_XFS if xfs_first else _CHECKED_BY).items():
        rec, r = recs.get(kind), by_label.get(label)
        if rec is None or r is None:
            continue
        removed = (first.checkpoint_waits_ms - r.checkpoint_waits_ms if kind == "inode_size" or xfs_first
                   else first.stall_ms - r.stall_ms)
        high = rec.inputs.get("removed_high_ms")
        out.append(Prediction(kind, round(rec.stall_ms_addressed, 3), measured_label=r.label,
                              measured_ms=round(removed, 3), big_enough=r.big_enough,
                              predicted_high_ms=None if high is None else round(high, 3),
                              stall_removed_ms=round(first.stall_ms - r.stall_ms, 3), **_stall_interval(rec)))
    return out


def _stall_interval(rec) -> dict:
    """A recommendation's stall-time interval as Prediction's fields (None without one)."""
    lo, hi = rec.stall_ms_removed_low, rec.stall_ms_removed_high
    return {"stall_removed_low_ms": None if lo is None else round(lo, 3),
            "stall_removed_high_ms": None if hi is None else round(hi, 3)}


#: XFS's comparison: the largest in-memory log buffers, as many as it takes
XFS_BIG_LOG_BUFFERS = {"log_buffer_size": "256K", "log_buffers": 8}


def _variants(fs):
    """[(label, FsConfig changes)] of the remedies compared at the starting size."""
    out = []
    if not fs.xfs and fs.inode_size < 256:
        out.append(("256-byte inodes", {"inode_size": 256}))
    ext = {"journal_device": True}
    if fs.journal_device_profile == "none" and not fs.journal_limits():
        # its own device of the same kind as the filesystem's
        ext.update(journal_device_profile=fs.device_profile, journal_read_iops=fs.read_iops,
                   journal_write_iops=fs.write_iops, journal_read_bps=fs.read_bps, journal_write_bps=fs.write_bps)
    if fs.xfs:
        out.append(("external log", ext))
        if (fs.log_buffer_bytes, fs.log_buffers) != (256 << 10, 8):
            out.append(("8x256K log buffers", dict(XFS_BIG_LOG_BUFFERS)))
        return out
    out.append(("external journal", ext))
    if not fs.fast_commit and fs.data_mode != "journal":
        out.append(("fast_commit", {"fast_commit": True}))
    return out


def _save(result):
    path = os.path.join(result.output_dir, "tune.json")
    with open(path + ".tmp", "w") as f:
        json.dump(result.to_dict(), f, indent=2)
        f.write("\n")
    os.replace(path + ".tmp", path)
