"""A lab tune's result read back and shown: ``tune.json``'s runs (``TuneRun``), the advice
checked against them (``Prediction``) and the whole search (``TuneResult``); ``load`` and
``print_result``, what `jstall analyze TUNE_DIR` and `jstall lab tune` print. The search itself
is the lab's (jstall.workloads.tune)."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import TYPE_CHECKING, TextIO

from jstall import kinds
from jstall.enough import bound, judge
from jstall.errors import JstallError
from jstall.metadata import TUNE_FILE

if TYPE_CHECKING:
    from jstall.enough import Enough

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
    def enough(self) -> Enough | None:
        """The jstall.enough verdict of the run (None for a run measured before it)."""
        if self.run_ms is None:
            return None
        return judge(self.checkpoint_waits_ms, self.longest_checkpoint_wait_ms, self.run_ms, self.kind)

    @property
    def big_enough(self) -> bool:
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
    otherwise) and ``big_enough`` (that run's verdict). What a user feels, beside it: the
    stall time (every stalled call, all causes) the advice said it removes,
    ``stall_removed_low_ms`` to ``stall_removed_high_ms`` (its interval), and what the run
    removed, ``stall_removed_ms`` (the starting run's stall time less the checking run's)."""

    kind: str
    predicted_ms: float
    journal_mib: int = None
    measured_label: str = None
    measured_ms: float = None
    big_enough: bool = None
    predicted_high_ms: float = None
    stall_removed_low_ms: float = None
    stall_removed_high_ms: float = None
    stall_removed_ms: float = None

    def error(self) -> str:
        """The prediction's error as text: 'in' when the measured lies in the predicted range,
        else its distance from the nearest end in % of the measured; '-' when nothing was
        removed."""
        return _error(self.predicted_ms, self.predicted_high_ms, self.measured_ms)

    def stall_error(self) -> str:
        """The stall-time interval's error, as :meth:`error` gives it ('' without an interval)."""
        if self.stall_removed_low_ms is None:
            return ""
        return _error(self.stall_removed_low_ms, self.stall_removed_high_ms, self.stall_removed_ms)


def _error(lo: float, high: float | None, measured: float | None) -> str:
    """'in' when ``measured`` lies in [lo, high], else its distance from the nearest end in % of
    the measured; '-' when nothing was removed. Without ``high``, a point: never 'in'."""
    if measured is None or measured <= 0:
        return "-"
    hi = high if high is not None else lo
    if high is not None and lo <= measured <= hi:
        return "in"
    near = lo if abs(lo - measured) <= abs(hi - measured) else hi
    return f"{100 * (near - measured) / measured:+.0f}%"


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
    def tried_mib(self) -> list[int]:
        return [r.journal_mib for r in self.runs]

    @property
    def xfs(self) -> bool:
        return kinds.of_fs_type((self.config or {}).get("fs_type")) is kinds.XFS

    def to_dict(self) -> dict:
        def run(r):
            return {**dataclasses.asdict(r), "big_enough": r.big_enough}

        return {"format": TUNE_FORMAT, "version": TUNE_VERSION, "pattern": self.pattern, "params": self.params,
                "threshold_ms": self.threshold_ms, "start_mib": self.start_mib, "bound_mib": self.bound_mib,
                "threshold_mib": self.threshold_mib, "stalled_below_mib": self.stalled_below_mib,
                "tried_mib": self.tried_mib, "runs": [run(r) for r in self.runs],
                "comparisons": [run(r) for r in self.comparisons], "config": self.config,
                "output_dir": self.output_dir, "predictions": [dataclasses.asdict(p) for p in self.predictions],
                "smallest_mib": self.smallest_mib, "refused": self.refused}


def load(tune_dir: str) -> TuneResult:
    """The TuneResult a lab tune directory's tune.json holds (a search cut short: the runs it
    finished). Raises JstallError for an unreadable one."""
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


def print_result(r: TuneResult, out: TextIO) -> None:
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
                   else "forced-checkpoint waits for the journal and inode size, all stall time otherwise")
        print(f"jstall analyze's advice from the {r.start_mib}M run, predicted against measured: STALL_*, the "
              f"stall time it removes (every stalled call, all causes); then of its own mechanism ({removed})",
              file=out)
        print(f"{'ADVICE':<18} {'STALL_PREDICTED':>15} {'STALL_MEASURED':>14} {'ERROR':>6} {'PREDICTED_MS':>13} "
              f"{'MEASURED_MS':>11} {'ERROR':>6}  MEASURED BY", file=out)
        refused = {x["journal_mib"] for x in r.refused or []}
        for p in r.predictions:
            what = p.kind + (f" {p.journal_mib}M" if p.journal_mib else "")
            pred = _interval(p.predicted_ms, p.predicted_high_ms)
            stall = "-" if p.stall_removed_low_ms is None else _interval(p.stall_removed_low_ms,
                                                                         p.stall_removed_high_ms)
            if p.measured_label is None:
                why = "mkfs.xfs refused it" if p.journal_mib in refused else f"beyond {r.bound_mib}M"
                print(f"{what:<18} {stall:>15} {'-':>14} {'-':>6} {pred:>13} {'-':>11} {'-':>6}  not run: {why}",
                      file=out)
                continue
            measured = "-" if p.stall_removed_ms is None else f"{p.stall_removed_ms:,.0f}"
            print(f"{what:<18} {stall:>15} {measured:>14} {p.stall_error() or '-':>6} {pred:>13} "
                  f"{p.measured_ms:>11,.0f} {p.error():>6}  {p.measured_label} "
                  f"({'big enough' if p.big_enough else 'not big enough'})", file=out)
    print("", file=out)
    print(f"sessions and tune.json in {r.output_dir} (explain one: jstall analyze {r.output_dir}/RUN)", file=out)


def _interval(low: float, high: float | None) -> str:
    """'low-high' in ms, or 'low' when the range rounds to one value."""
    ranged = high is not None and round(high) > round(low)
    return f"{low:,.0f}" + (f"-{high:,.0f}" if ranged else "")


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
