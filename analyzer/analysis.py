"""The whole analysis of one session: every table the summary, the JSON and the report use.

``analyze(path_or_session, min_ms=10)`` returns an :class:`Analysis` whose attributes are
DataFrames (see each module for units), ``summary`` the figures the text, the report, compare
and sweep read (summary.Summary), and ``to_dict()`` the stable JSON document
(docs/analysis.md), a serialization of the same summary.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from jstall.analyzer import summary
from jstall.analyzer.session import recording
from jstall.analyzer.stalls.calls import call_stats
from jstall.analyzer.session.devices import device_summary
from jstall.analyzer.jbd2.fill import timeline
from jstall.analyzer.jbd2.journals import (checkpoint_costs, checkpoint_waits, checkpoints, commit_phases,
                                           proc_agreement, recorder_checkpoints, recorder_text, transactions,
                                           untraced_checkpoints,
                                           untraced_text)
from jstall.analyzer.jbd2.journals import summary as journal_summary
from jstall.analyzer.session.load import Session, load_session
from jstall.analyzer.stalls.processes import per_process
from jstall.analyzer.stalls.writers import summary as writers_summary
from jstall.analyzer.advice.recommend import recommendations
from jstall.analyzer.advice.remedies import utilisation, verdict
from jstall.analyzer.xfs.logs import summary as xfs_log_summary
from jstall.analyzer.xfs.logs import untraced_waits as xfs_untraced_waits
from jstall.analyzer.xfs.logs import waits as xfs_waits
from jstall.analyzer.xfs.logs import xfs_only
from jstall.analyzer.stalls.find import DEFAULT_MIN_MS, by_cause, find_stalls

if TYPE_CHECKING:
    import pandas as pd

    from jstall.analyzer.summary import Summary


def _result(fn, *needs):
    """A result computed on its first use and kept (functools.cached_property):
    ``fn(session, *needs)``, each of ``needs`` an attribute of the Analysis (an earlier result
    or ``min_ms``).  A caller that needs the stall table does not pay for commit phases or
    recommendations."""
    def get(self):
        return fn(self.session, *(getattr(self, n) for n in needs))

    get.__doc__ = fn.__doc__
    return cached_property(get)


class Analysis:
    """Result of :func:`analyze`.  Attributes:

    - ``session``: the loaded :class:`~jstall.analyzer.session.load.Session`; ``min_ms``.
    - ``timeline``: fill samples (fill.timeline); ``stalls``: the stall table
      (stalls.find_stalls); ``causes``: stall count and off-CPU ms per cause.
    - ``transactions``, ``phases`` (commit phase bands), ``checkpoints``: per journal event;
      ``checkpoint_costs``: each forced checkpoint, its blocks written home and the wait it
      cost (expensive: a stall); ``untraced_checkpoints``: those outside every traced call;
      ``checkpoint_waits``: per journal, the waits on them judged by the bound of a journal
      big enough (jstall.enough).
    - ``journals``: one row per jbd2 journal (journals.summary); ``proc``: agreement with
      /proc/fs/jbd2 (journals.proc_agreement).
    - ``xfs_waits``: each XFS log-space wait with its space left, need and the tail's reason;
      ``xfs_logs``: one row per XFS log, with the kernel's counters beside (xfs_logs).
    - ``writers``: who filled each journal, over the run and when it ran out, the victims and
      a sentence tying them (writers.summary);
    - ``calls``: latency statistics per syscall; ``processes``: stall time per process;
      ``devices``: what the block devices under the filesystems did (devices.device_summary);
      ``recommendations``; ``warnings`` and ``notes`` (strings).
    - ``summary``: the view model the text, the report, compare and sweep read
      (summary.Summary); ``top_stalls(n)``: the slowest stalls.

    Every result is computed on its first use and cached; ``to_dict()`` only serializes the
    summary, the slowest stalls and the recommendations.
    """

    def __init__(self, session, min_ms=DEFAULT_MIN_MS):
        self.session = session
        self.requested_min_ms = float(min_ms)
        self.min_ms = recording.effective_min_ms(session.meta, min_ms)

    timeline = _result(timeline)
    @cached_property
    def stalls(self) -> pd.DataFrame:
        # the XFS waits computed once, and only for a session that has any
        return find_stalls(self.session, self.timeline, self.min_ms,
                           self.xfs_waits if len(self.session.xfs_waits) else None)

    stalls.__doc__ = find_stalls.__doc__
    transactions = _result(transactions)
    phases = _result(commit_phases)
    checkpoints = _result(checkpoints)
    untraced_checkpoints = _result(untraced_checkpoints)
    checkpoint_costs = _result(checkpoint_costs, "min_ms")
    checkpoint_waits = _result(checkpoint_waits, "stalls", "checkpoint_costs")
    journals = _result(journal_summary, "timeline", "transactions", "stalls")
    proc = _result(proc_agreement, "transactions")
    calls = _result(call_stats)
    processes = _result(per_process, "stalls")
    devices = _result(device_summary, "stalls")
    xfs_waits = _result(xfs_waits)
    writers = _result(writers_summary, "checkpoints", "stalls")
    xfs_logs = _result(xfs_log_summary, "xfs_waits", "stalls", "checkpoint_waits")
    recommendations = _result(recommendations, "journals", "stalls", "causes", "calls", "transactions", "min_ms",
                              "timeline", "checkpoint_waits", "checkpoint_costs")

    @cached_property
    def verdict(self) -> dict:
        """What dominates the stall time and which remedy removes how much of it
        (advice.verdict: a dict, the JSON's ``verdict``; the text renders it)."""
        st = self.stalls
        devs = st["dev"].astype("str").value_counts() if len(st) else None
        util = utilisation(self.session, st, devs.index[0]) if devs is not None and len(devs) else None
        return verdict(self.recommendations, st, self.min_ms, self.summary.stalls.total_ms, util)

    @cached_property
    def causes(self) -> pd.DataFrame:
        return by_cause(self.stalls)

    @cached_property
    def _messages(self):
        """(warnings, notes): see _warnings."""
        notes = []
        return self._warnings(notes), notes

    @property
    def warnings(self) -> list:
        return self._messages[0]

    @property
    def notes(self) -> list:
        return self._messages[1]

    def _warnings(self, notes):
        """The warning lines; appends the note lines to ``notes``."""
        m = self.session.meta
        w, loss_notes = recording.loss_messages(self.session)
        notes.extend(loss_notes)
        done = recording.completeness(self.session)
        if done["reason"]:
            w.insert(0, done["reason"])
        if done.get("note"):
            notes.insert(0, done["note"])
        if self.min_ms > self.requested_min_ms:
            notes.append(f"calls faster than {self.min_ms:g} ms were never stored (recorded with --min-ms "
                              f"{self.min_ms:g}): stalls are calls >= {self.min_ms:g} ms, not "
                              f"{self.requested_min_ms:g} ms")
        if getattr(self.session, "window_ns", None):
            notes.append("the calls table (counts, percentiles) and events lost cover the whole session: "
                              "the kernel counts them with no time")
        missing = (m.get("probes") or {}).get("missing") or []
        if missing:
            w.append("probes missing while recording: " + ", ".join(missing))
        untraced = self.untraced_checkpoints
        if len(untraced):
            n = int(untraced["checkpoints"].sum())
            w.append(f"{n} forced checkpoint{'s' * (n != 1)} ran outside the traced calls: "
                     f"{untraced_text(untraced)}; their waits are in no stall below")
        own = recorder_text(recorder_checkpoints(self.session))
        if own:
            notes.append(own)
        for r in self.xfs_logs.to_dict("records"):   # one row per XFS log
            if r["sleeps_agree"] is False:
                w.append(f"{r['dev']}: {r['sleeps']} log-space sleeps recorded, the kernel counted "
                         f"{r['kernel_sleep_logspace']} (/sys/fs/xfs sleep_logspace): the probes missed some")
        u = xfs_untraced_waits(self.xfs_waits)
        if len(u):
            n = int(u["waits"].sum())
            where = ", ".join(f"{r['comm']} in {r['context']} ({r['waits']}, {r['wait_ms']:,.0f} ms)"
                              for r in u.head(3).to_dict("records"))
            w.append(f"{n} XFS log-space wait{'s' * (n != 1)} ran outside the traced calls: {where}; "
                     "their time is in no stall below")
        if not len(self.session.jbd2_events) and not len(self.session.run_stats) and not xfs_only(self.session):
            w.append("no jbd2 events in this session: no commit or checkpoint happened while recording, "
                     "or the journal's device was not traced")
        if len(self.proc):
            bad = self.proc[self.proc["status"] == "disagree"]
            for _, r in bad.iterrows():  # a handful of rows at most
                w.append(f"{r['dev']}: {r['metric']} disagrees with /proc/fs/jbd2 "
                         f"(analyzer {r['analyzer']:.2f}, kernel {r['kernel']:.2f} "
                         f"[{r['kernel_low']:.2f}, {r['kernel_high']:.2f}], tolerance ±{r['tolerance_abs']:.2f})")
        return w

    # --- the view model and its JSON --------------------------------------------------------

    @cached_property
    def summary(self) -> Summary:
        """The figures the text summary, the report, compare and sweep read
        (:class:`~jstall.analyzer.summary.Summary`)."""
        return summary.summarize(self)

    def top_stalls(self, n: int) -> tuple:
        """The ``n`` slowest stalls, slowest first (:class:`~jstall.analyzer.summary.TopStall`)."""
        return summary.top_stalls(self, n)

    def to_dict(self, top: int = 20) -> dict:
        """The JSON document of docs/analysis.md (stable keys; numbers rounded to 3 decimals,
        NaN as null): the summary, the ``top`` slowest stalls and the recommendations."""
        return summary.document(self.summary, self.top_stalls(top), self.recommendations, self.verdict)


def analyze(session: str | Session, min_ms: float = DEFAULT_MIN_MS) -> Analysis:
    """Analyze a session (a path or a loaded Session) and return an :class:`Analysis`."""
    if not isinstance(session, Session):
        session = load_session(session)
    return Analysis(session, min_ms)
