"""Two sessions side by side: did the change help, and by how much?

``compare(a, b)`` takes two sessions (paths, loaded sessions or :class:`Analysis` objects --
e.g. two runs of a lab sweep) and returns a :class:`Comparison` whose tables set A against
B: call latency per type (p50/p99/max), stalls and stall time by cause, journal figures and
headroom, the lab's phase times when both came from the lab, the lab options that differ,
and a one-line verdict with numbers.  Every figure is read from the two analyses' summaries
(summary.Summary, the figures of the ``jstall analyze --json`` document), so a comparison
never disagrees with the analysis of either side.

Phase times: a phase's durable seconds (``durable_s``: until its work was on the device)
when both sides have them, else the seconds the workload's calls took to return; the
``basis`` column says which.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pandas as pd

from jstall.enough import MAX_SHARE, MAX_WAIT_MS
from jstall.errors import JstallError
from jstall.metadata import lab_of
from jstall.session import is_sweep_dir, read_metadata

from jstall.analyzer.analysis import Analysis, analyze
from jstall.jbd2 import headroom_low
from jstall.analyzer.stalls.find import DEFAULT_MIN_MS
from jstall.analyzer.summary import json_safe
from jstall.analyzer.multi.sweep import flatten, find_runs
from jstall.analyzer.render.text import text_table

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jstall.analyzer.session.load import Session

#: Version of the JSON document ``jstall compare --json`` prints.
JSON_SCHEMA_VERSION = 1

#: Journal figures compared (keys of the analyze JSON's ``journals`` entries), then headroom.
JOURNAL_FIGURES = ("journal_mib", "inode_size", "fast_commit", "transactions", "logged_blocks",
                   "avg_logged_blocks_per_transaction", "log_rate_blocks_per_s", "forced_checkpoints",
                   "background_checkpoints", "forced_checkpoint_written_blocks", "max_fill_pct", "forced_fill_pct",
                   "time_at_forced_level_s", "stalls", "stall_ms")

#: Lab configuration keys that say nothing about the configuration itself.
_NOT_CONFIG = {"seed", "output_dir", "scratch_dir", "progress", "record"}


def _pct_change(a, b):
    if a is None or b is None:
        return None
    if a == 0:
        return 0.0 if b == 0 else None
    return 100.0 * (b - a) / a


def _phases(analysis):
    """{name: phase dict} of a lab session's phases (empty when not from the lab), read from the
    session's metadata through the lab document's definition (jstall.metadata.LabDoc)."""
    lab = lab_of(json_safe(analysis.session.meta.get("lab") or {}))  # the document's figures
    return {p.name: p.to_dict() for p in lab.phases} if lab else {}


def _durable(p):
    v = p.get("durable_s")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _journal_mib(j):
    """A journal's size as 'N MiB' from its metadata (journal_blocks x block_size)."""
    jb, bs = j.get("journal_blocks"), j.get("block_size") or 4096
    return f"{jb * bs / 2**20:g} MiB" if jb else "unknown"


def _flat_config(analysis):
    cfg = (analysis.session.meta.get("lab") or {}).get("config") or {}
    flat = {k: v for k, v in flatten(cfg).items() if k not in _NOT_CONFIG}
    # "journal_size_bytes" says again what "journal_size" says
    return {k: v for k, v in flat.items() if not (k.endswith("_bytes") and k[:-6] in flat)}


class Comparison:
    """A against B.  ``a``/``b``: the two :class:`Analysis` objects; ``sa``/``sb``: their
    summaries (summary.Summary); ``names``: labels (default "A", "B")."""

    def __init__(self, a, b, names=("A", "B")):
        self.a, self.b = a, b
        self.names = tuple(names)
        self.sa, self.sb = a.summary, b.summary
        self.notes = []  # how a sweep configuration was reduced to one run

    # --- tables ---------------------------------------------------------------------------

    def calls(self) -> pd.DataFrame:
        """One row per call type traced in either: ``count_a/_b``, ``p50_ms_a/_b``,
        ``p99_ms_a/_b``, ``max_ms_a/_b`` and ``p99_change_pct``."""
        ca, cb = ({c.syscall: c for c in s.calls} for s in (self.sa, self.sb))
        rows = []
        for name in sorted(set(ca) | set(cb)):
            x, y = ca.get(name), cb.get(name)
            r = {"syscall": name}
            for k in ("count", "p50_ms", "p99_ms", "max_ms", "total_ms"):
                r[f"{k}_a"], r[f"{k}_b"] = getattr(x, k, None), getattr(y, k, None)
            r["p99_change_pct"] = _pct_change(r["p99_ms_a"], r["p99_ms_b"])
            rows.append(r)
        df = pd.DataFrame(rows)
        return df.sort_values("total_ms_a", ascending=False, na_position="last", kind="stable").reset_index(drop=True) \
            if len(df) else df

    def causes(self) -> pd.DataFrame:
        """One row per cause: stalls and off-CPU ms inside stalls in A and B, and the change."""
        ba, bb = self.sa.stalls.by_cause, self.sb.stalls.by_cause
        rows = [{"cause": c, "stalls_a": ba[c].count, "stalls_b": bb[c].count, "ms_a": ba[c].total_ms,
                 "ms_b": bb[c].total_ms, "change_ms": bb[c].total_ms - ba[c].total_ms,
                 "change_pct": _pct_change(ba[c].total_ms, bb[c].total_ms)} for c in ba]
        return pd.DataFrame(rows)

    def stalls(self) -> pd.DataFrame:
        """Stall totals: count, total/max ms, checkpointed in own task, at the forced level,
        queued behind other tasks, waiting for kernel workers, on the device's queue beside
        another task's checkpoint; forced checkpoints by cost (in stalls and their waits,
        negligible, outside the recording)."""
        rows = []
        for key, label in (("count", "stalls"), ("total_ms", "stall ms"), ("max_ms", "worst stall ms"),
                           ("own_checkpoint", "checkpointed in own task")):
            x, y = getattr(self.sa.stalls, key), getattr(self.sb.stalls, key)
            rows.append({"figure": label, "a": x, "b": y, "change_pct": _pct_change(x, y)})
        x, y = self.sa.stalls.at_forced_level.count, self.sb.stalls.at_forced_level.count
        rows.append({"figure": "at the forced-checkpoint level", "a": x, "b": y, "change_pct": _pct_change(x, y)})
        x, y = self.sa.stalls.queued.total_ms, self.sb.stalls.queued.total_ms
        rows.append({"figure": "stall ms queued behind other tasks", "a": x, "b": y, "change_pct": _pct_change(x, y)})
        for key, label in (("through_worker", "stall ms waiting for kernel workers"),
                           ("during_checkpoint", "device-queue ms beside another task's checkpoint")):
            x, y = getattr(self.sa.stalls, key).total_ms, getattr(self.sb.stalls, key).total_ms
            rows.append({"figure": label, "a": x, "b": y, "change_pct": _pct_change(x, y)})
        # checkpoints by cost, in analyze's words
        ca, cb = self.sa.checkpoint_costs, self.sb.checkpoint_costs
        for key, label in (("forced", "forced checkpoints"), ("expensive", "forced checkpoints in stalls"),
                           ("expensive_wait_ms", "their waits ms"), ("negligible", "negligible forced checkpoints"),
                           ("outside", "forced checkpoints outside the recording")):
            x, y = ca.get(key, 0), cb.get(key, 0)
            rows.append({"figure": label, "a": x, "b": y, "change_pct": _pct_change(x, y)})
        return pd.DataFrame(rows)

    def journal_pairs(self) -> list[tuple[dict | None, dict | None]]:
        """Journals of A and B paired: by device when both have it, else in order (the
        analyze document's journal entries)."""
        ja, jb = ([j.to_dict() for j in s.journals] for s in (self.sa, self.sb))
        by_dev = {j["dev"]: j for j in jb}
        pairs, used = [], set()
        for j in ja:
            if j["dev"] in by_dev and len(ja) > 1:
                pairs.append((j, by_dev[j["dev"]]))
                used.add(j["dev"])
        if not pairs:
            pairs = list(zip(ja, jb))
            used = {y["dev"] for _, y in pairs}
            pairs += [(x, None) for x in ja[len(pairs):]]
        pairs += [(None, y) for y in jb if y["dev"] not in used]
        return pairs

    def journals(self) -> pd.DataFrame:
        """One row per (journal pair, figure): ``a``, ``b``, ``change_pct``; headroom low
        (blocks above the forced-checkpoint level at the fullest moment, below 0: reached it)
        included."""
        rows = []
        for x, y in self.journal_pairs():
            label = " / ".join(str(j["dev"]) if j else "-" for j in (x, y))
            hx = headroom_low(x) if x else (None, None)
            hy = headroom_low(y) if y else (None, None)
            for k in JOURNAL_FIGURES:
                va, vb = (x or {}).get(k), (y or {}).get(k)
                num = isinstance(va, (int, float)) and isinstance(vb, (int, float)) and not isinstance(va, bool)
                rows.append({"journal": label, "figure": k, "a": va, "b": vb,
                             "change_pct": _pct_change(va, vb) if num else None})
            for i, k in enumerate(("headroom_low_blocks", "headroom_low_pct")):
                rows.append({"journal": label, "figure": k, "a": hx[i], "b": hy[i], "change_pct": None})
            # big enough (jstall.enough): its verdict and what it judged
            ea, eb = ((j or {}).get("enough") or {} for j in (x, y))
            for k, key in (("big_enough", "big_enough"), ("checkpoint_waits_ms", "wait_ms"),
                           ("longest_checkpoint_wait_ms", "longest_ms")):
                va, vb = ea.get(key), eb.get(key)
                rows.append({"journal": label, "figure": k, "a": va, "b": vb,
                             "change_pct": None if k == "big_enough" else _pct_change(va, vb)})
            va, vb = (100.0 * e["share"] if "share" in e else None for e in (ea, eb))
            rows.append({"journal": label, "figure": "checkpoint_waits_pct_of_run", "a": va, "b": vb,
                         "change_pct": None})
        return pd.DataFrame(rows, columns=["journal", "figure", "a", "b", "change_pct"])

    #: the XFS log figures compared (xfs_logs' columns)
    XFS_FIGURES = ("log_mib", "waits", "sleeps", "kernel_sleep_logspace", "wait_ms", "longest_wait_ms",
                   "min_headroom_start_pct")

    def xfs_logs(self) -> pd.DataFrame:
        """One row per (XFS log pair, figure), paired in order: ``a``, ``b``, ``change_pct``;
        and the log's verdict (big enough)."""
        la, lb = (list(s.xfs_logs) for s in (self.sa, self.sb))
        rows = []
        for i in range(max(len(la), len(lb))):
            x, y = (la[i] if i < len(la) else None), (lb[i] if i < len(lb) else None)
            label = " / ".join(str(j["dev"]) if j else "-" for j in (x, y))
            for k in self.XFS_FIGURES + ("big_enough",):
                get = (lambda j: (j.get("enough") or {}).get("big_enough")) if k == "big_enough" else \
                    (lambda j, k=k: j.get(k))
                va, vb = (get(j) if j else None for j in (x, y))
                num = isinstance(va, (int, float)) and isinstance(vb, (int, float)) and not isinstance(va, bool)
                rows.append({"log": label, "figure": k, "a": va, "b": vb,
                             "change_pct": _pct_change(va, vb) if num else None})
        return pd.DataFrame(rows, columns=["log", "figure", "a", "b", "change_pct"])

    def writers(self, top: int = 5) -> pd.DataFrame:
        """The top writers of each side by cgroup name (a process's pid differs between runs):
        ``cgroup``, ``comm``, ``share_a``, ``share_b`` (% of what their journals logged over the
        run), the ``top`` largest of either side."""
        def shares(su):
            out = {}
            for r in (su.writers or {}).get("writers", []):
                k = (r.get("cgroup") or "?", r["comm"])
                out[k] = out.get(k, 0.0) + float(r["share_pct"] or 0)
            return out

        a, b = shares(self.sa), shares(self.sb)
        keys = sorted(set(a) | set(b), key=lambda k: -max(a.get(k, 0.0), b.get(k, 0.0)))[:top]
        return pd.DataFrame([{"cgroup": k[0], "comm": k[1], "share_a": a.get(k), "share_b": b.get(k)} for k in keys],
                            columns=["cgroup", "comm", "share_a", "share_b"])

    def phases(self) -> pd.DataFrame:
        """Lab phases present in both: ``seconds_a/_b`` on one ``basis`` ("durable" when
        both phases carry durable seconds, else "returned"), ``ops``, ``change_pct``."""
        pa, pb = _phases(self.a), _phases(self.b)
        rows = []
        for name in [n for n in pa if n in pb]:
            x, y = pa[name], pb[name]
            dx, dy = _durable(x), _durable(y)
            basis = "durable" if dx is not None and dy is not None else "returned"
            sa = dx if basis == "durable" else x.get("seconds")
            sb = dy if basis == "durable" else y.get("seconds")
            rows.append({"phase": name, "basis": basis, "seconds_a": sa, "seconds_b": sb, "ops_a": x.get("ops"),
                         "ops_b": y.get("ops"), "change_pct": _pct_change(sa, sb)})
        return pd.DataFrame(rows, columns=["phase", "basis", "seconds_a", "seconds_b", "ops_a", "ops_b", "change_pct"])

    def config_changes(self) -> list[tuple[str, object, object]]:
        """Lab options whose values differ: [(key, value in A, value in B)]."""
        ca, cb = _flat_config(self.a), _flat_config(self.b)
        if not ca or not cb:
            return []
        return [(k, ca.get(k), cb.get(k)) for k in sorted(set(ca) | set(cb)) if ca.get(k) != cb.get(k)]

    def filesystem_changes(self) -> list[tuple[str, object, object]]:
        """What differs between the two sessions' filesystems, journals, mounts and kernels,
        from their metadata (any two sessions, recorded or lab): [(what, value in A, value in
        B)], journals paired as journal_pairs pairs them (a journal in one only: its device)."""
        ma, mb = self.a.session.meta, self.b.session.meta
        out = []
        if ma.get("kernel_release") != mb.get("kernel_release"):
            out.append(("kernel", ma.get("kernel_release"), mb.get("kernel_release")))
        ja = {j["dev"]: j for j in ma.get("journals") or []}
        jb = {j["dev"]: j for j in mb.get("journals") or []}
        pairs = self.journal_pairs()
        for x, y in pairs:
            fa, fb = ja.get((x or {}).get("dev")), jb.get((y or {}).get("dev"))
            if fa is None or fb is None:
                out.append(("journal", fa and fa["dev"], fb and fb["dev"]))
                continue
            pre = f"{fa['dev']}: " if len(pairs) > 1 else ""
            for label, value in (("journal", _journal_mib), ("inode size", lambda j: str(j.get("inode_size"))),
                                 ("block size", lambda j: str(j.get("block_size"))),
                                 ("fast_commit", lambda j: str(j.get("fast_commit"))),
                                 ("journal device", lambda j: j.get("journal_device") or "internal"),
                                 ("device", lambda j: str(j.get("device")))):
                va, vb = value(fa), value(fb)
                if va != vb:
                    out.append((pre + label, va, vb))
            for key, label in (("features", "features"), ("journal_features", "journal features")):
                sa, sb = set(fa.get(key) or ()), set(fb.get(key) or ())
                if sa != sb:
                    out.append((pre + label, " ".join(f"-{f}" for f in sorted(sa - sb)) or "-",
                                " ".join(f"+{f}" for f in sorted(sb - sa)) or "-"))
            oa, ob = (set((f.get("mount_options") or "").split(",")) - {""} for f in (fa, fb))
            if oa != ob:
                out.append((pre + "mount options", ",".join(sorted(oa - ob)) or "-", ",".join(sorted(ob - oa)) or "-"))
        return out

    def changes(self) -> list[tuple[str, object, object]]:
        """What B changed: the lab options when both are lab runs, else filesystem_changes()."""
        return self.config_changes() or self.filesystem_changes()

    # --- the verdict ----------------------------------------------------------------------

    def verdict(self) -> str:
        """One line with numbers: what B did to A's dominant stall cause (its stall time,
        off CPU, before and after) and to the phase whose time changed most."""
        A, B = self.names
        st_a, st_b = self.sa.stalls, self.sb.stalls
        ba, bb = st_a.by_cause, st_b.by_cause
        if not st_a.count and not st_b.count:
            line = f"No stalls in {A} or {B} (calls >= {self.sa.min_ms:g} ms)"
        else:
            src = ba if st_a.total_ms >= st_b.total_ms else bb
            cause = max(src, key=lambda c: src[c].total_ms)
            x, y = ba[cause].total_ms, bb[cause].total_ms
            if x > 0 and y <= x:
                line = (f"{B} removed {100.0 * (x - y) / x:.0f}% of {cause} stall time "
                        f"({_s(x)} -> {_s(y)})")
            elif y > x:
                more = f"{100.0 * (y - x) / x:.0f}% more" if x > 0 else "added"
                line = f"{B} {more} {cause} stall time ({_s(x)} -> {_s(y)})" if x > 0 else \
                    f"{B} added {_s(y)} of {cause} stall time ({A}: none)"
            else:
                line = f"{B} and {A} both stalled without {cause} stall time"
            line += (f"; stalls {st_a.count} -> {st_b.count}, "
                     f"{_s(st_a.total_ms)} -> {_s(st_b.total_ms)} in all")
        ph = self.phases()
        if len(ph):
            ph = ph.assign(delta=(ph["seconds_b"] - ph["seconds_a"]).abs()).sort_values("delta", ascending=False)
            p = ph.iloc[0]
            if p["seconds_a"] is not None and p["seconds_b"] is not None:
                line += (f"; {p['phase']} phase {p['seconds_a']:.2f} s -> {p['seconds_b']:.2f} s "
                         f"{'durable' if p['basis'] == 'durable' else 'until its calls returned'}")
        for x, y in self.journal_pairs():
            ea, eb = ((j or {}).get("enough") for j in (x, y))
            if ea and eb:
                line += (f"; journal {'big enough' if ea['big_enough'] else 'not big enough'} -> "
                         f"{'big enough' if eb['big_enough'] else 'not big enough'} (forced-checkpoint waits "
                         f"{_s(ea['wait_ms'])} -> {_s(eb['wait_ms'])}, {_pct(ea['share'])} -> {_pct(eb['share'])} of "
                         f"the run; bound: at most {MAX_SHARE:.0%} and none of {MAX_WAIT_MS:g} ms)")
                break
        changes = self.changes()
        if changes:
            what = ", ".join(f"{k} {va} -> {vb}" for k, va, vb in changes[:3])
            line = f"{what}: {line}"
        return line + "."

    # --- output ---------------------------------------------------------------------------

    def to_dict(self) -> dict:
        """The ``jstall compare --json`` document (docs/analysis.md, Compare)."""
        def rec(df):
            return [] if not len(df) else df.astype(object).where(df.notna(), None).to_dict("records")

        ha, hb = self.sa.session, self.sb.session
        return json_safe({
            "schema_version": JSON_SCHEMA_VERSION, "kind": "compare", "min_ms": self.sa.min_ms,
            "a": {"path": ha.path, "name": self.names[0], "session": ha.to_dict()},
            "b": {"path": hb.path, "name": self.names[1], "session": hb.to_dict()},
            "verdict": self.verdict(), "notes": list(self.notes),
            "config_changes": [{"option": k, "a": x, "b": y} for k, x, y in self.config_changes()],
            "filesystem_changes": [{"what": k, "a": x, "b": y} for k, x, y in self.filesystem_changes()],
            "stalls": rec(self.stalls()), "causes": rec(self.causes()), "calls": rec(self.calls()),
            "journals": rec(self.journals()), "xfs_logs": rec(self.xfs_logs()), "phases": rec(self.phases()),
            "writers": rec(self.writers()),
            "recommendations": {"a": [r.to_dict() for r in self.a.recommendations],
                                "b": [r.to_dict() for r in self.b.recommendations]},
        })

    def text(self) -> str:
        """The side-by-side summary ``jstall compare`` prints."""
        A, B = self.names

        def f(v, fmt="{:.1f}"):
            if v is None or pd.isna(v):
                return "-"
            if isinstance(v, bool) or isinstance(v, str):
                return str(v)
            return fmt.format(v)

        out = [f"{A}: {self.sa.session.path}", f"{B}: {self.sb.session.path}", "",
               *self.notes, "", "verdict: " + self.verdict(), ""]
        out.append(text_table(["", A, B, "change %"],
                              [[r["figure"], f(r["a"], "{:.0f}"), f(r["b"], "{:.0f}"), f(r["change_pct"], "{:+.0f}")]
                               for _, r in self.stalls().iterrows()]))
        c = self.causes()
        c = c[(c["ms_a"] > 0) | (c["ms_b"] > 0) | (c["stalls_a"] > 0) | (c["stalls_b"] > 0)]
        if len(c):
            out += ["", "stall time by cause (ms off CPU inside stalls; stalls with that primary cause)"]
            out.append(text_table(["cause", f"{A} stalls", f"{B} stalls", f"{A} ms", f"{B} ms", "change %"],
                                  [[r["cause"], r["stalls_a"], r["stalls_b"], f(r["ms_a"]), f(r["ms_b"]),
                                    f(r["change_pct"], "{:+.0f}")] for _, r in c.iterrows()]))
        ph = self.phases()
        if len(ph):
            out += ["", "lab phases (seconds; durable: until the work was on the device, returned: until the "
                    "calls returned)"]
            out.append(text_table(["phase", "basis", A, B, "ops", "change %"],
                                  [[r["phase"], r["basis"], f(r["seconds_a"], "{:.3f}"), f(r["seconds_b"], "{:.3f}"),
                                    f(r["ops_a"], "{:.0f}"), f(r["change_pct"], "{:+.0f}")] for _, r in ph.iterrows()]))
        j = self.journals()
        if len(j):
            out += ["", "journals"]
            out.append(text_table(["journal", "figure", A, B, "change %"],
                                  [[r["journal"], r["figure"], f(r["a"], "{:g}"), f(r["b"], "{:g}"),
                                    f(r["change_pct"], "{:+.0f}")] for _, r in j.iterrows()]))
        x = self.xfs_logs()
        if len(x):
            out += ["", "XFS logs"]
            out.append(text_table(["log", "figure", A, B, "change %"],
                                  [[r["log"], r["figure"], f(r["a"], "{:g}"), f(r["b"], "{:g}"),
                                    f(r["change_pct"], "{:+.0f}")] for _, r in x.iterrows()]))
        w = self.writers()
        if len(w):
            out += ["", "top writers (% of what the journals logged over the run)"]
            out.append(text_table(["cgroup", "comm", f"{A} %", f"{B} %"],
                                  [[r["cgroup"], r["comm"], f(r["share_a"]), f(r["share_b"])]
                                   for _, r in w.iterrows()]))
        calls = self.calls()
        if len(calls):
            out += ["", "latency per call (ms; p50 below the recording threshold is from log2 histograms)"]
            out.append(text_table(["call", f"{A} count", f"{B} count", f"{A} p50", f"{B} p50", f"{A} p99", f"{B} p99",
                                   f"{A} max", f"{B} max"],
                                  [[r["syscall"], f(r["count_a"], "{:.0f}"), f(r["count_b"], "{:.0f}"),
                                    f(r["p50_ms_a"], "{:.3f}"), f(r["p50_ms_b"], "{:.3f}"), f(r["p99_ms_a"], "{:.3f}"),
                                    f(r["p99_ms_b"], "{:.3f}"), f(r["max_ms_a"]), f(r["max_ms_b"])]
                                   for _, r in calls.iterrows()]))
        ch = self.config_changes()
        if ch:
            out += ["", "lab options that differ: " + ", ".join(f"{k} {x} -> {y}" for k, x, y in ch)]
        fs = self.filesystem_changes()
        if fs:
            out += ["", "filesystems, journals and kernels that differ: "
                    + ", ".join(f"{k} {x} -> {y}" for k, x, y in fs)]
        return "\n".join(out) + "\n"


def _pct(share):
    return f"{100.0 * share:.1f}%"


def _s(ms):
    """Milliseconds as readable seconds or ms."""
    return f"{ms / 1000:.2f} s" if ms >= 1000 or ms == 0 else f"{ms:.0f} ms"


def parse_side(text: str) -> tuple[str, dict[str, str] | None]:
    """``SWEEP_DIR:key=value[,key=value...]`` -> (sweep dir, {key: value}); a plain path ->
    (path, None).  Only a sweep directory (holding sweep.json) takes a selection."""
    if ":" in text and not os.path.exists(text):
        root, _, sel = text.rpartition(":")
        if is_sweep_dir(root) and "=" in sel:
            pairs = [p.split("=", 1) for p in sel.split(",") if p]
            return root, {k.strip(): v.strip() for k, v in pairs}
    return text, None


def select_configuration(sweep_dir: str, selection: dict[str, str],
                         min_ms: float = DEFAULT_MIN_MS) -> tuple[Analysis, list[str], str]:
    """The runs of a sweep whose lab options match ``selection`` ({option: value as text,
    e.g. {"inode_size": "128"}}), analyzed; the representative is the run with the median
    stall time (the lower middle one of an even count).  Returns (analysis, runs, note)."""
    runs = []
    for run in find_runs(sweep_dir):
        try:
            cfg = flatten(((read_metadata(run).get("lab") or {}).get("config")) or {})
        except JstallError:
            continue
        if all(str(cfg.get(k)) == v for k, v in selection.items()):
            runs.append(run)
    what = ",".join(f"{k}={v}" for k, v in selection.items())
    if not runs:
        raise JstallError(f"{sweep_dir}: no run with {what}; 'jstall analyze {sweep_dir}' lists the configurations")
    analyses = sorted((analyze(r, min_ms=min_ms) for r in runs),
                      key=lambda a: (float(a.stalls["latency_ms"].sum()), a.session.path))
    rep = analyses[(len(analyses) - 1) // 2]
    note = f"{what}: {len(runs)} run(s); the run with the median stall time is {rep.session.name}"
    return rep, runs, note


def compare(a: str | Session | Analysis, b: str | Session | Analysis, min_ms: float = DEFAULT_MIN_MS,
            names: Sequence[str] = ("A", "B")) -> Comparison:
    """Compare two sessions (paths, Sessions or Analyses); returns a :class:`Comparison`."""
    notes = []
    sides = []
    for x in (a, b):
        if isinstance(x, Analysis):
            sides.append(x)
            continue
        if isinstance(x, str):
            root, sel = parse_side(x)
            if sel:
                rep, _, note = select_configuration(root, sel, min_ms=min_ms)
                sides.append(rep)
                notes.append(note)
                continue
        sides.append(analyze(x, min_ms=min_ms))
    c = Comparison(sides[0], sides[1], names=names)
    c.notes = notes
    return c
