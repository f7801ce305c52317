"""When a journal is big enough: the one definition analyze, ``lab tune``, the journal
model's advice, compare and the advice benchmark share (pandas-free).

A journal is **big enough** for a run when the waits on forced checkpoints cost next to
nothing:

- their total, every task's (the calls that ran a checkpoint, those queued behind one, and
  forced checkpoints outside the traced calls), is at most ``MAX_SHARE`` (1 %) of the run's
  time, and
- no single call waited ``MAX_WAIT_MS`` (10 ms) or more on them.

On XFS the same bound judges the waits for log space (reservations asleep in
``xlog_grant_head_wait`` until the tail moved, queued waits included): ``kind="xfs"``.

Forced checkpoints themselves may remain: a streaming workload's late checkpoint that writes
a few blocks home costs a millisecond, and no journal size a host can afford removes every
one of them. What counts is the time tasks lost.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

#: at most this share of the run's time spent waiting on forced checkpoints
MAX_SHARE = 0.01
#: and no single call waiting this long (ms) or longer on them
MAX_WAIT_MS = 10.0
#: what a journal kind's tasks wait on when its log is too small
WAITS = {"jbd2": "forced-checkpoint waits", "xfs": "log-space waits"}


def bound(kind: str = "jbd2") -> str:
    """The definition, as printed beside every verdict of a journal kind."""
    return (f"{WAITS[kind]} (every task's, queued ones included) at most {MAX_SHARE:.0%} of the run's time "
            f"and none of {MAX_WAIT_MS:g} ms or more")


#: the definition for jbd2 (ext4)
BOUND = bound()


@dataclass(frozen=True)
class Enough:
    """A run's forced-checkpoint waits against the bound: ``wait_ms`` their total,
    ``longest_ms`` the longest one call's, ``run_ms`` the run's time."""

    wait_ms: float
    longest_ms: float
    run_ms: float
    kind: str = "jbd2"

    @property
    def share(self) -> float:
        """wait_ms / run_ms (0 for a run of no time)."""
        return self.wait_ms / self.run_ms if self.run_ms > 0 else 0.0

    @property
    def big_enough(self) -> bool:
        return self.share <= MAX_SHARE and self.longest_ms < MAX_WAIT_MS

    def describe(self) -> str:
        """'big enough: 12 ms of forced-checkpoint waits, 0.1% of the run, the longest 4 ms' or
        'not big enough: …'."""
        verdict = "big enough" if self.big_enough else "not big enough"
        if self.wait_ms <= 0:
            return f"{verdict}: no {WAITS[self.kind]}"
        # waits of several tasks overlap: their sum can pass the run's time, and is then said as
        # task-seconds a second
        share = (f"{_pct(self.share)} of the run" if self.share <= 1.0 else
                 f"{self.share:,.1f} task-seconds of overlapping waits a second of the run")
        return (f"{verdict}: {self.wait_ms:,.0f} ms of {WAITS[self.kind]}, {share}, "
                f"the longest {self.longest_ms:,.0f} ms")

    def as_dict(self) -> dict:
        return {**asdict(self), "share": self.share, "big_enough": self.big_enough, "bound": bound(self.kind)}


def judge(wait_ms: float | None, longest_ms: float | None, run_ms: float | None, kind: str = "jbd2") -> Enough:
    """The Enough verdict of a run whose waits for log space (forced checkpoints on jbd2,
    ``kind="xfs"``: XFS reservations) total ``wait_ms`` (ms), the longest of one call
    ``longest_ms``, over ``run_ms`` of run time."""
    return Enough(float(wait_ms or 0.0), float(longest_ms or 0.0), float(run_ms or 0.0), kind)


def _pct(share):
    pct = 100.0 * share
    return f"{pct:.2f}%" if pct < 0.1 else f"{pct:.1f}%" if pct < 10 else f"{pct:.0f}%"


def verdict(row: dict | None, run_ms: float, kind: str = "jbd2") -> Enough:
    """The jstall.enough verdict of one journal from its checkpoint_waits row (a dict), or,
    with no row (no wait on it), of no waits over ``run_ms``."""
    if row:
        return judge(row["wait_ms"], row["longest_ms"], row["run_ms"], row.get("kind") or kind)
    return judge(0.0, 0.0, run_ms, kind)
