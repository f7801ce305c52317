"""Lab sweeps: compare the runs of ``jstall lab sweep`` per configuration.

A sweep directory holds ``sweep.json`` (the sweep's options: jstall.metadata.SweepDoc) and
one session directory per run.  Each run's session is analyzed; its lab configuration and
phase records (jstall.metadata.LabDoc and PhaseRecord) come from the session's metadata.  Per
configuration (the values of the swept options), every figure is reported as mean and
standard deviation over the repeats (jstall.metadata.mean_sd, as the lab's own summary).
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

import pandas as pd

from jstall.errors import JstallError
from jstall.metadata import LabDoc, PhaseRecord, SweepDoc, mean_sd
from jstall.session import is_sweep_dir

from jstall.analyzer.stalls import causes
from jstall.analyzer.analysis import analyze
from jstall.analyzer.summary import JSON_SCHEMA_VERSION, json_safe
from jstall.analyzer.render.text import text_table

if TYPE_CHECKING:
    from collections.abc import Iterable

#: Config keys that differ between repeats of one configuration, never a swept option.
_NOT_OPTIONS = {"seed", "repeat", "run", "run_id", "session", "scratch", "output", "out", "name"}


def flatten(d: dict | None, prefix: str = "") -> dict:
    out = {}
    for k, v in (d or {}).items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        elif isinstance(v, (list, tuple)):
            out[key] = ",".join(map(str, v))
        else:
            out[key] = v
    return out


def _rate_key(p):
    """The main rate field of a phase record (a dict as written): PhaseRecord.main_rate."""
    return PhaseRecord.from_dict(p).main_rate()


def find_runs(path: str, depth: int = 3) -> list[str]:
    """Session directories (holding metadata.json) under ``path``, sorted by path."""
    found = []
    base = path.rstrip(os.sep).count(os.sep)
    for root, dirs, files in os.walk(path):
        if "metadata.json" in files and os.path.abspath(root) != os.path.abspath(path):
            found.append(root)
            dirs[:] = []
            continue
        if root.count(os.sep) - base >= depth:
            dirs[:] = []
        dirs.sort()
    return sorted(found)


class Sweep:
    """Analysis of a sweep directory.  Attributes: ``path``, ``meta`` (sweep.json),
    ``runs`` (DataFrame, one row per analyzed run: ``run``, the config columns, ``stalls``,
    ``stall_ms``, ``max_stall_ms``, ``<cause>_ms``, ``forced_checkpoints``, ``transactions``,
    ``max_fill_pct``, ``<call>_p50_ms``/``_p99_ms``/``_max_ms``, ``<phase>_s`` (durable
    seconds), ``<phase>_returned_s`` and ``<phase>_rate`` (per durable second)), ``options``
    (swept option names), ``phases``, ``warnings``."""

    def __init__(self, path, min_ms=10.0):
        self.path = path
        self.min_ms = float(min_ms)
        self.meta = SweepDoc.load(path)
        self.warnings = []
        runs = find_runs(path)
        for entry in sorted(os.listdir(path)):
            full = os.path.join(path, entry)
            if (os.path.isdir(full) and full not in runs and not any(r.startswith(full + os.sep) for r in runs)
                    and any(f.endswith(".parquet") for f in os.listdir(full))):
                self.warnings.append(f"{entry}: incomplete run (no metadata.json); re-run the sweep to redo it")
        rows, self._rate_units = [], {}
        phase_order = []
        for run_dir in runs:  # one iteration per run (tens), each a whole analysis
            try:
                a = analyze(run_dir, min_ms=min_ms)
            except JstallError as e:
                self.warnings.append(f"{os.path.relpath(run_dir, path)}: skipped ({e})")
                continue
            lab = LabDoc.from_dict(a.session.meta.get("lab") or {})
            row = {"run": os.path.relpath(run_dir, path)}
            row.update(flatten(lab.config))
            su = a.summary
            st = su.stalls
            row.update({"stalls": st.count, "stall_ms": st.total_ms, "max_stall_ms": st.max_ms,
                        "checkpoint_stalls": st.by_cause["checkpoint"].count})
            for c, t in st.by_cause.items():
                row[f"{c}_ms"] = t.total_ms
            js = su.journals
            row["forced_checkpoints"] = sum(j.forced_checkpoints for j in js)
            row["background_checkpoints"] = sum(j.background_checkpoints for j in js)
            row["transactions"] = sum(j.transactions for j in js)
            row["max_fill_pct"] = max([j.max_fill_pct for j in js if j.max_fill_pct is not None], default=None)
            for c in su.calls:
                for k in ("p50_ms", "p99_ms", "max_ms"):
                    row[f"{c.syscall}_{k}"] = getattr(c, k)
            for p in lab.phases:
                n = str(p.name)
                if n not in phase_order:
                    phase_order.append(n)
                if p.durable is not None:
                    row[f"{n}_s"] = float(p.durable)  # until syncfs returned and the device was idle
                if isinstance(p.returned_s, (int, float)):
                    row[f"{n}_returned_s"] = float(p.returned_s)
                rk = p.main_rate()
                if rk:
                    row[f"{n}_rate"] = float(p.rates[rk])
                    self._rate_units.setdefault(n, p.rate_name())
            rows.append(row)
        if not rows:
            raise JstallError(f"{path}: no loadable run sessions in this sweep directory; run 'jstall lab sweep' again")
        self.runs = pd.DataFrame(rows)
        self.phases = phase_order
        self.options = self._options()

    @property
    def name(self) -> str:
        return os.path.basename(os.path.normpath(self.path))

    def rate_unit(self, phase: str) -> str:
        return self._rate_units.get(phase, "per s").replace("_per_s", "/s").replace("_", " ")

    def _options(self):
        """The swept options sweep.json declares (present in the runs' configurations); with
        none declared, the configuration columns whose values differ between runs."""
        found = [o for o in self.meta.swept if o in self.runs.columns]
        if found:
            return found
        cols = [c for c in self.runs.columns if c not in ("run",)]
        config = [c for c in cols if c in self._config_columns() and c not in _NOT_OPTIONS]
        return [c for c in config if self.runs[c].astype("str").nunique() > 1]

    def _config_columns(self):
        measured = {"stalls", "stall_ms", "max_stall_ms", "checkpoint_stalls", "forced_checkpoints",
                    "background_checkpoints", "transactions", "max_fill_pct"}
        return [c for c in self.runs.columns if c != "run" and c not in measured and not c.endswith(
            ("_ms", "_s", "_rate"))]

    @staticmethod
    def value_key(v: object) -> tuple[int, float, str]:
        """Sort key for option values: sizes like 16M/1G by bytes, numbers numerically."""
        s = str(v)
        m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]i?B?)?", s, re.I)
        if m:
            mult = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[(m.group(2) or "")[:1].upper()]
            return (0, float(m.group(1)) * mult, s)
        return (1, 0.0, s)

    def measures(self) -> list[str]:
        """The measured columns aggregated per configuration."""
        base = ["stalls", "stall_ms", "max_stall_ms", "forced_checkpoints", "transactions", "max_fill_pct"]
        base += [f"{c}_ms" for c in causes.CAUSES]
        calls = [c for c in self.runs.columns if c.endswith(("_p50_ms", "_p99_ms")) or
                 (c.endswith("_max_ms") and c != "max_stall_ms")]
        phases = [f"{p}_{k}" for p in self.phases for k in ("s", "returned_s", "rate") if f"{p}_{k}" in self.runs]
        return [c for c in base + sorted(calls) + phases if c in self.runs]

    def by_config(self, options: Iterable[str] | None = None) -> pd.DataFrame:
        """Mean and standard deviation (``<col>_mean``, ``<col>_sd``) of every measure per
        combination of ``options`` (default: all swept options), with ``runs`` (count)."""
        options = list(self.options if options is None else options)
        r = self.runs.copy()
        meas = self.measures()
        r[meas] = r[meas].apply(pd.to_numeric, errors="coerce")
        if not options:
            r["config"] = "all"
            options = ["config"]
        for o in options:
            r[o] = r[o].astype("str")
        out = mean_sd(r, options, meas)
        keys = [tuple(self.value_key(v) for v in row) for row in out[options].itertuples(index=False)]
        out = out.iloc[sorted(range(len(out)), key=keys.__getitem__)].reset_index(drop=True)
        out["_order"] = range(len(out))
        return out.reset_index(drop=True)

    def by_option(self, option: str) -> pd.DataFrame:
        """by_config grouped by ``option`` and the other swept options."""
        return self.by_config([option] + [o for o in self.options if o != option])

    def phase_table(self, row_option: str | None = None, value: str = "rate") -> pd.DataFrame:
        """The journal-size layout: rows the values of ``row_option`` (default
        ``journal_size`` when swept, else the first option), columns the phases, cells
        ``mean ± sd`` of each phase's rate (or seconds with ``value="s"``)."""
        if row_option is None:
            row_option = next((o for o in self.options if "journal" in o and "size" in o),
                              self.options[0] if self.options else None)
        # rows: row_option first, then every other swept option, so no configuration is pooled
        keys = [row_option] + [o for o in self.options if o != row_option] if row_option else []
        t = self.by_config(keys or None)
        cols = {}
        for p in self.phases:
            m, s = f"{p}_{value}_mean", f"{p}_{value}_sd"
            if m in t:
                d = 3 if value in ("s", "returned_s") else 1
                cols[p] = [f"{a:.{d}f} ± {b:.{d}f}" if pd.notna(a) else "-" for a, b in zip(t[m], t[s])]
        if not keys:
            return pd.DataFrame(cols, index=pd.Index(t["config"], name="config"))
        index = pd.MultiIndex.from_frame(t[keys]) if len(keys) > 1 else pd.Index(t[keys[0]], name=keys[0])
        return pd.DataFrame(cols, index=index)

    def to_dict(self) -> dict:
        """JSON document of the sweep (see docs/analysis.md)."""
        t = self.by_config().drop(columns="_order")
        return json_safe({
            "schema_version": JSON_SCHEMA_VERSION, "kind": "sweep", "path": self.path, "min_ms": self.min_ms,
            "options": self.options, "phases": self.phases, "warnings": self.warnings,
            "configurations": t.to_dict(orient="records"),
            "runs": self.runs.to_dict(orient="records"),
        })

    def text(self) -> str:
        """The sweep tables as text."""
        out = [f"sweep {self.path}: {len(self.runs)} runs; swept: {', '.join(self.options) or 'nothing'}"]
        out += [f"WARNING: {w}" for w in self.warnings]
        t = self.by_config()
        opts = self.options or ["config"]
        rows = []
        for _, r in t.iterrows():
            rows.append([" ".join(str(r[o]) for o in opts), int(r["runs"]),
                         f"{r['stalls_mean']:.1f} ± {r['stalls_sd']:.1f}",
                         f"{r['stall_ms_mean']:.0f} ± {r['stall_ms_sd']:.0f}",
                         f"{r['checkpoint_ms_mean']:.0f}", f"{r['max_stall_ms_mean']:.1f}",
                         f"{r['forced_checkpoints_mean']:.1f} ± {r['forced_checkpoints_sd']:.1f}",
                         "-" if pd.isna(r["max_fill_pct_mean"]) else f"{r['max_fill_pct_mean']:.1f}"])
        out.append("")
        out.append(f"stalls per configuration (calls >= {self.min_ms:g} ms; mean ± sd over runs)")
        out.append(text_table([" ".join(opts), "runs", "stalls", "stall ms", "checkpoint ms", "worst ms",
                               "forced cp", "max fill%"], rows))
        calls = sorted({c[: -len("_p99_ms")] for c in self.runs.columns if c.endswith("_p99_ms")})
        if calls:
            out.append("")
            out.append("call latency per configuration (ms, mean over runs: p50 / p99 / max)")
            rows = [[" ".join(str(r[o]) for o in opts)] +
                    [f"{r.get(f'{c}_p50_ms_mean', float('nan')):.3f} / {r.get(f'{c}_p99_ms_mean', float('nan')):.2f}"
                     f" / {r.get(f'{c}_max_ms_mean', float('nan')):.1f}" for c in calls] for _, r in t.iterrows()]
            out.append(text_table([" ".join(opts)] + calls, rows))
        if self.phases:
            for value, label in (("rate", "phase rates per durable second"),
                                 ("s", "phase durable seconds (syncfs and the emulated device idle inside)"),
                                 ("returned_s", "phase returned seconds (until the jobs returned)")):
                pt = self.phase_table(value=value)
                if len(pt.columns):
                    units = ", ".join(f"{p}: {self.rate_unit(p)}" for p in pt.columns) if value == "rate" else "s"
                    out.append("")
                    out.append(f"{label} (mean ± sd; {units})")
                    names = [n for n in pt.index.names if n]
                    out.append(text_table([" ".join(names)] + list(pt.columns),
                                          [[" ".join(map(str, i)) if isinstance(i, tuple) else str(i)] + list(r)
                                           for i, r in zip(pt.index, pt.itertuples(index=False))]))
        return "\n".join(out) + "\n"


def analyze_sweep(path: str | os.PathLike, min_ms: float = 10.0) -> Sweep:
    """Analyze every run of the sweep at ``path``; returns a :class:`Sweep`."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise JstallError(f"{path}: no such sweep directory")
    if not is_sweep_dir(path):
        raise JstallError(f"{path}: no sweep.json; not a lab sweep directory (make one with 'jstall lab sweep')")
    return Sweep(path, min_ms)
