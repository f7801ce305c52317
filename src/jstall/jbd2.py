"""jbd2's log-space rules: the one definition the monitor, the analyzer and the lab read.

Pure arithmetic on scalars or numpy arrays (no pandas: the monitor imports it), each rule as
the kernel has it (fs/jbd2/transaction.c, include/linux/jbd2.h):

- ``jbd2_log_space_left()`` = ``j_free - JBD2_RESERVED (32) - committing transaction's
  outstanding credits``;
- a handle must checkpoint (``add_transaction_credits -> __jbd2_log_wait_for_space``) when
  that is below ``j_max_transaction_buffers``;
- ``j_max_transaction_buffers`` = (journal blocks - fast-commit blocks) / 4, / 3 since 6.11
  (``jbd2_journal_init_transaction_limits``).

A journal kind's interface, the same names in ``jstall.xfs``: ``NOUN``, ``MIN_BLOCKS`` and
``MAX_BLOCKS`` (bounds on its size), ``read_geometry(mount)``, ``read_counters(name)``,
``headroom(...)``; ``jstall.kinds`` holds the facts that differ per kind.
"""

from __future__ import annotations

import re
import subprocess
from typing import TYPE_CHECKING, Union

from .errors import JstallError

if TYPE_CHECKING:
    import numpy as np

#: a number, or a numpy array of them: the rules work element-wise
Values = Union[int, float, "np.ndarray"]

#: what ext4 calls the place its metadata is logged
NOUN = "journal"
#: ext4's journal holds 1,024 to 10,240,000 blocks (mke2fs; JBD2_MIN_JOURNAL_BLOCKS)
MIN_BLOCKS, MAX_BLOCKS = 1024, 10_240_000
#: jbd2 keeps this many blocks in reserve (``jbd2_log_space_left``: ``j_free - 32``).
RESERVED_BLOCKS = 32


def space_left(free_blocks: Values, committing_credits: Values = 0) -> Values:
    """``jbd2_log_space_left()``: free blocks less the reserve and the committing
    transaction's outstanding credits. Scalars or arrays."""
    return free_blocks - RESERVED_BLOCKS - committing_credits


def headroom(space_left_blocks: Values, max_transaction_blocks: Values,
             log_blocks: Values) -> tuple[Values, Values]:
    """``(blocks, percent of the log)`` by which ``jbd2_log_space_left()`` exceeds
    ``j_max_transaction_buffers``; below 0 the next handle must wait for space
    (``add_transaction_credits -> __jbd2_log_wait_for_space``). Scalars or arrays."""
    h = space_left_blocks - max_transaction_blocks
    return h, 100.0 * h / log_blocks


def headroom_ratio(space_left_blocks: Values, max_transaction_blocks: Values,
                   log_blocks: Values) -> Values:
    """Headroom over its value in an empty journal, clipped to [0, 1]: 1 for an empty journal,
    0 at the forced-checkpoint condition (and for a log too small to hold a transaction).
    Scalars (a float) or numpy arrays (element-wise)."""
    full = log_blocks - RESERVED_BLOCKS - max_transaction_blocks
    h = space_left_blocks - max_transaction_blocks
    if hasattr(h, "clip") or hasattr(full, "clip"):
        fits = full > 0
        return (h / (full * fits + (1 - fits))).clip(0.0, 1.0) * fits
    return min(1.0, max(0.0, h / full)) if full > 0 else 0.0


def forced_fill_pct(max_transaction_blocks: Values, log_blocks: Values) -> Values:
    """Fill percent at and above which the next handle must checkpoint: a handle waits for
    space when ``free - 32 < max_transaction_blocks`` (ignoring the committing transaction's
    outstanding credits, which make it happen a little earlier), so the level is
    ``100 * (1 - (max_transaction_blocks + 32) / log_blocks)``. Scalars or arrays."""
    return 100.0 * (1.0 - (max_transaction_blocks + RESERVED_BLOCKS) / log_blocks)


def divisor(kernel_release: str | None = None) -> float:
    """journal blocks / ``j_max_transaction_buffers`` on a kernel: 3 since 6.11, 4 before
    (and 3 when the release is unknown: the newest rule)."""
    m = re.match(r"(\d+)\.(\d+)", str(kernel_release or ""))
    return 3.0 if not m or (int(m.group(1)), int(m.group(2))) >= (6, 11) else 4.0


def transaction_divisor(journal_blocks: int, max_transaction_blocks: int | None = None,
                        fast_commit_blocks: int = 0, kernel_release: str | None = None) -> float:
    """The divisor a journal shows (its blocks less fast-commit blocks over its
    ``j_max_transaction_buffers``, rounded), else the kernel's rule (:func:`divisor`)."""
    if max_transaction_blocks and max_transaction_blocks > 0 and max_transaction_blocks == max_transaction_blocks:
        return float(round((journal_blocks - fast_commit_blocks) / float(max_transaction_blocks)))
    return divisor(kernel_release)


def blocks_needed(hot_blocks: Values, overhead: float, divisor_: float,
                  fast_commit_blocks: int = 0) -> Values:
    """Journal blocks of which ``1 / divisor_`` holds ``hot_blocks`` (times the log overhead
    per block) plus jbd2's reserve (``divisor_``: journal / j_max_transaction_buffers for
    one transaction holding them all)."""
    return divisor_ * (hot_blocks * overhead + RESERVED_BLOCKS) + fast_commit_blocks


def headroom_low(journal: dict) -> tuple[float | None, float | None]:
    """The journal's lowest headroom in blocks and % of the log (below 0 a handle had to wait
    for log space: jbd2_log_space_left against j_max_transaction_buffers), as the analyzer
    gives it (``headroom_low_blocks``/``headroom_low_pct``, counting the committing
    transaction's credits); for documents without them, ``min_free_blocks - 32 -
    max_transaction_blocks`` and ``forced_fill_pct - max_fill_pct``.  ``journal`` is one
    entry of the analyze JSON's ``journals``."""
    blocks = journal.get("headroom_low_blocks")
    pct = journal.get("headroom_low_pct")
    if blocks is None:
        mf, mtb = journal.get("min_free_blocks"), journal.get("max_transaction_blocks")
        blocks = None if mf is None or mtb is None else float(mf) - RESERVED_BLOCKS - float(mtb)
    if pct is None:
        ff, mx = journal.get("forced_fill_pct"), journal.get("max_fill_pct")
        pct = None if ff is None or mx is None else float(ff) - float(mx)
    return blocks, pct


# ---- the kernel's and e2fsprogs' view ------------------------------------------------------------


def parse_dumpe2fs(text: str) -> dict[str, str]:
    """{key: value} of the 'Key: value' lines of `dumpe2fs -h` (first occurrence wins; indented
    continuation lines are skipped)."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key and not key.startswith((" ", "\t")):
            out.setdefault(key.strip(), value.strip())
    return out


def dumpe2fs(device: str) -> dict[str, str]:
    """The superblock fields `dumpe2fs -h DEVICE` prints, as {name: text}."""
    res = subprocess.run(["dumpe2fs", "-h", device], capture_output=True, text=True)
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["no output"])[-1]
        raise JstallError(f"dumpe2fs -h {device} failed: {last}")
    return parse_dumpe2fs(res.stdout)


def read_geometry(mount: dict) -> dict[str, str]:
    """The journal's geometry: ``dumpe2fs -h`` of a mount-table entry's ``source``."""
    return dumpe2fs(mount["source"])


def read_counters(name: str | None) -> str | None:
    """The kernel's counters of a journal: ``/proc/fs/jbd2/<name>/info`` (its text), or None
    without a name or when the kernel has no such journal."""
    if not name:
        return None
    try:
        with open(f"/proc/fs/jbd2/{name}/info") as f:
            return f.read()
    except OSError:
        return None
