"""The predicted curve of a log-size remedy: forced-checkpoint (or log-space) waits and stall
time against the journal's (or XFS log's) size, a pure function of the remedy's figures.

The model's two bounds on the size that needs no wait (jbd2.model: ``low_mib``, the log
holds the hot set once; ``high_mib``, one transaction holds it) each end a curve. Below a
bound ``N`` the journal is short of the hot set by ``N - J``: the blocks a forced checkpoint
must write home each time the log fills grow with that shortfall, and so does how long each
handle waits for them, so the waits fall as its square,
``W(J) = W0 * ((N - J) / (N - J0))**2`` for ``J < N`` (``W0``: the waits measured at the
session's size ``J0``), and none from ``N`` on. The ``high_mib`` bound gives the upper curve,
``low_mib`` the lower one (none beyond ``J0`` when the model's lower bound is no more than the
journal). The stall time follows the remedy's interval: at a size its removal is the
interval's end times the share of the waits gone, ``1 - W(J) / W0``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from jstall.analyzer.advice.recommend import Recommendation

#: the columns of :func:`size_curve`'s table
COLUMNS = ("size_mib", "wait_ms_low", "wait_ms_high", "stall_ms_low", "stall_ms_high")


def _waits(w0, j0, n, j):
    if n <= j0:
        return 0.0 if j > j0 else w0
    return w0 * (max(n - j, 0.0) / (n - j0)) ** 2


def sizes_for(current_mib: float, recommended_mib: float | None = None) -> list[float]:
    """The sizes the advice prints: the current one, twice and four times it, the recommended."""
    out = [float(current_mib), 2.0 * current_mib, 4.0 * current_mib]
    if recommended_mib:
        out.append(float(recommended_mib))
    return sorted(set(out))


def size_curve(current_mib: float, wait_ms: float, low_mib: float, high_mib: float, stall_ms: float,
               removed_low_ms: float, removed_high_ms: float, sizes: Iterable[float]) -> pd.DataFrame:
    """One row per size (``COLUMNS``): the waits of the remedy's mechanism predicted there
    (``wait_ms_low``/``_high``, ms) and the session's stall time left (``stall_ms_low``/
    ``_high``, ms), from the waits measured at ``current_mib`` (``wait_ms``), the model's
    bounds (``low_mib``, ``high_mib``), the stall time (``stall_ms``) and the remedy's
    interval (``removed_low_ms``, ``removed_high_ms``)."""
    rows = []
    j0, w0 = float(current_mib), float(wait_ms or 0.0)
    lo_n, hi_n = float(low_mib), float(max(high_mib, low_mib))
    for j in sizes:
        j = float(j)
        w_lo, w_hi = _waits(w0, j0, lo_n, j), _waits(w0, j0, hi_n, j)
        gone_lo = 1.0 - w_hi / w0 if w0 > 0 else 0.0
        gone_hi = 1.0 - w_lo / w0 if w0 > 0 else 0.0
        rows.append({
            "size_mib": j,
            "wait_ms_low": w_lo,
            "wait_ms_high": w_hi,
            "stall_ms_low": max(stall_ms - removed_high_ms * gone_hi, 0.0),
            "stall_ms_high": max(stall_ms - removed_low_ms * gone_lo, 0.0),
        })
    return pd.DataFrame(rows, columns=list(COLUMNS))


def curve_text(records: Sequence[dict], what: str = "forced-checkpoint waits") -> str:
    """The advice's sentence for a curve (records of :func:`size_curve`, as the JSON holds)."""
    if not records:
        return ""

    def span(a, b):
        return f"{a:,.0f} ms" if round(a) == round(b) else f"{a:,.0f}-{b:,.0f} ms"

    parts = [f"{r['size_mib']:g} MiB {span(r['wait_ms_low'], r['wait_ms_high'])} "
             f"(stall time {span(r['stall_ms_low'], r['stall_ms_high'])})" for r in records]
    return f"Predicted {what} by size: " + "; ".join(parts) + "."


def curves(recs: Iterable[Recommendation]) -> pd.DataFrame:
    """Every log-size remedy's predicted curve (its ``inputs["curve"]``) as one table: ``dev``,
    ``kind`` and COLUMNS, one row per size (empty with those columns when there is none)."""
    rows = [{"dev": r.dev, "kind": r.kind, **row}
            for r in recs for row in (r.inputs or {}).get("curve") or ()]
    return pd.DataFrame(rows, columns=["dev", "kind", *COLUMNS])
