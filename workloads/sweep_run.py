"""`jstall lab sweep`: lab runs over the cartesian product of option values × repeats.

The sweep directory holds ``sweep.json`` (written first: the options, the runs and their
directory names), one session directory per run, ``results.parquet``/``results.csv`` (one row
per finished run) and ``summary.parquet``/``summary.csv`` (mean and sample standard deviation
per configuration). A run is finished when its session's metadata says complete; running the
same sweep again skips finished runs and redoes the others from scratch.
"""

import itertools
import json
import os
import shutil
import sys
import time

from jstall import system
from jstall.errors import JstallError
from jstall.metadata import LAB_FILE, METADATA_FILE, SWEEP_FORMAT, SWEEP_VERSION, SweepDoc, SweepRun, lab_of, mean_sd

from .lab import prepare, run_lab
from .loopdev import LAB_NEEDS_ROOT
from .options import config_from
from .rundir import check_free_space, prepare_scratch

__all__ = ["SWEEP_FORMAT", "SWEEP_VERSION", "collect", "plan", "run_sweep", "write_results"]


def _slug(text):
    return "".join(c if c.isalnum() or c in ".-" else "_" for c in str(text))


def plan(pattern, values, repeat):
    """(axes {dest: [text]}, base {dest: text}, runs [{run, repeat, options {dest: text}}])."""
    axes = {d: [t for t, _ in v] for d, v in values.items() if len(v) > 1}
    base = {d: v[0][0] for d, v in values.items() if len(v) == 1}
    combos = list(itertools.product(*axes.values())) if axes else [()]
    runs = []
    for i, combo in enumerate(combos, 1):
        opts = dict(zip(axes, combo))
        label = "-".join(f"{d}={_slug(t)}" for d, t in opts.items()) or pattern
        for r in range(1, repeat + 1):
            runs.append({"run": f"{i:03d}-{label}-rep{r}", "repeat": r, "options": opts})
    return axes, base, runs


def _finished(run_dir):
    """The run's metadata (session metadata, or unrecorded lab.json) when it and its lab run
    are complete, else None."""
    for name in (METADATA_FILE, LAB_FILE):
        try:
            with open(os.path.join(run_dir, name)) as f:
                meta = json.load(f)
        except (OSError, ValueError):
            continue
        lab = lab_of(meta)
        if isinstance(meta, dict) and meta.get("status", "complete") == "complete" and lab is not None \
                and lab.status == "complete":
            return meta
    return None


def run_sweep(pattern, values, repeat, out_dir, record=True, min_ms=1.0, scratch_dir=None, progress=False,
              out=None, console=None):
    """Run (or resume) a sweep; return 0. ``values``: {dest: [(text, parsed value)]}."""
    out = out or sys.stdout
    console = console or sys.stderr
    axes, base, runs = plan(pattern, values, repeat)
    parsed = {d: dict(v) for d, v in values.items()}
    configs, image_bytes = {}, 0
    for r in runs:  # validate every combination before touching anything
        vals = {d: parsed[d][t] for d, t in {**base, **r["options"]}.items()}
        configs[r["run"]] = vals
        try:
            lab_cfg = config_from(vals, pattern, record=record, min_ms=min_ms)
            prepare(lab_cfg)
        except JstallError as e:
            where = " ".join(f"--{d.replace('_', '-')} {t}" for d, t in r["options"].items())
            # name the combination, unless the message already starts with it
            raise JstallError(f"{where}: {e}" if where and not str(e).startswith(where) else str(e)) from None
        image_bytes = max(image_bytes, lab_cfg.fs.image_bytes())
    system.require_root(LAB_NEEDS_ROOT)
    # the largest configuration's images must fit (one run at a time)
    check_free_space(prepare_scratch(scratch_dir, create=False), image_bytes)
    doc = SweepDoc(pattern=pattern, options=axes, base=base, repeat=repeat, record=record, min_ms=min_ms,
                   runs=[SweepRun(**r) for r in runs])
    if os.path.exists(os.path.join(out_dir, "sweep.json")):
        try:
            old = SweepDoc.load(out_dir)
        except JstallError:
            old = None
        if old is None or not doc.same_sweep(old):
            raise JstallError(f"{out_dir} holds a different sweep; give the same options to resume it, or another -o")
        doc.created = old.created
    elif os.path.isdir(out_dir) and os.listdir(out_dir):
        raise JstallError(f"-o {out_dir}: holds files and no sweep.json; give a new or empty directory")
    if doc.created is None:
        doc.created = time.time()
    os.makedirs(out_dir, exist_ok=True)
    doc.write(out_dir)

    todo = [r for r in runs if _finished(os.path.join(out_dir, r["run"])) is None]
    print(f"sweep {out_dir}: {len(runs)} runs ({len(runs) - len(todo)} finished before, {len(todo)} to run)", file=out,
          flush=True)
    # Repeats interleaved (rep 1 of every configuration, then rep 2, ...): slow drift of the
    # machine spreads over all configurations instead of biasing one.
    todo.sort(key=lambda r: (r["repeat"], r["run"]))
    durations = []
    try:
        for k, r in enumerate(todo, 1):
            run_dir = os.path.join(out_dir, r["run"])
            if os.path.exists(run_dir):  # an interrupted run: redo it from scratch
                shutil.rmtree(run_dir)
            eta = ""
            if durations:
                eta = f", about {_fmt_s(sum(durations) / len(durations) * (len(todo) - k + 1))} left"
            opts = " ".join(f"{d}={t}" for d, t in r["options"].items())
            print(f"[{k}/{len(todo)}] {opts or pattern} rep {r['repeat']}{eta}", file=console, flush=True)
            t0 = time.monotonic()
            cfg = config_from(configs[r["run"]], pattern, record=record, min_ms=min_ms, output_dir=run_dir,
                              scratch_dir=scratch_dir, progress=progress,
                              extra={"sweep": {"run": r["run"], "repeat": r["repeat"], "options": r["options"]}})
            run_lab(cfg)
            durations.append(time.monotonic() - t0)
            write_results(out_dir)
    except KeyboardInterrupt:
        done = sum(1 for r in runs if _finished(os.path.join(out_dir, r["run"])))
        print(f"sweep {out_dir}: interrupted with {done} of {len(runs)} runs finished; run the same command again "
              "to resume", file=console, flush=True)
        raise
    finally:
        if any(_finished(os.path.join(out_dir, r["run"])) for r in runs):
            write_results(out_dir)
    res = write_results(out_dir)
    _print_summary(res, axes, out)
    return 0


def _fmt_s(s):
    return f"{s / 60:.1f} min" if s >= 90 else f"{s:.0f} s"


def collect(out_dir):
    """One dict per finished run: run, repeat, swept options (as given), pattern, jobs, seed,
    per phase ``<phase>_s`` (durable seconds: until syncfs returned and the emulated device was
    idle), ``<phase>_returned_s`` (until the jobs returned), ``<phase>_rate_per_s`` (per durable
    second), ``<phase>_ops`` (and ``<phase>_kib_per_s``), ``<phase>_device_writes`` (requests the
    emulated devices served), ``seconds``, ``slow_calls`` and ``events_lost`` (recorded runs)."""
    doc = SweepDoc.load(out_dir)
    rows = []
    for r in doc.runs:
        run_dir = os.path.join(out_dir, r.run)
        meta = _finished(run_dir)
        if meta is None:
            continue
        lab = lab_of(meta)
        row = {"run": r.run, "repeat": r.repeat}
        row.update({d: t for d, t in {**doc.base, **r.options}.items() if d in doc.options})
        row.update({"pattern": lab.pattern, "jobs": lab.jobs, "seed": lab.seed,
                    "journal_blocks": (lab.dumpe2fs or {}).get("journal_blocks"),
                    "inode_size_real": (lab.dumpe2fs or {}).get("inode_size")})
        for p in lab.phases:
            n = p.name
            row[f"{n}_s"] = p.durable
            if p.returned_s is not None:
                row[f"{n}_returned_s"] = p.returned_s
            row[f"{n}_ops"] = p.ops
            if p.device:
                row[f"{n}_device_writes"] = p.device_writes()
            row[f"{n}_rate_per_s"] = p.rates.get("rate_per_s")
            if p.rates.get("kib_per_s") is not None:
                row[f"{n}_kib_per_s"] = p.rates["kib_per_s"]
        row["seconds"] = lab.seconds
        if "events_lost" in meta:
            import pyarrow.parquet as pq

            row["slow_calls"] = pq.read_metadata(os.path.join(run_dir, "calls.parquet")).num_rows
            row["events_lost"] = sum(meta["events_lost"].values())
        rows.append(row)
    return doc, rows


def write_results(out_dir):
    """Write results.{parquet,csv} and summary.{parquet,csv}; return (results, summary) DataFrames."""
    import pandas as pd

    doc, rows = collect(out_dir)
    options = doc.swept
    res = pd.DataFrame(rows)
    if res.empty:
        res = pd.DataFrame(columns=["run", "repeat", *options])
    res.to_parquet(os.path.join(out_dir, "results.parquet"), index=False)
    res.to_csv(os.path.join(out_dir, "results.csv"), index=False)
    measures = [c for c in res.columns if c not in ("run", "repeat", "pattern", "seed", *options)
                and pd.api.types.is_numeric_dtype(res[c])]
    summ = pd.DataFrame(columns=[*options, "runs"]) if res.empty else mean_sd(res, options, measures)
    summ.to_parquet(os.path.join(out_dir, "summary.parquet"), index=False)
    summ.to_csv(os.path.join(out_dir, "summary.csv"), index=False)
    return res, summ


def _print_summary(tables, axes, out):
    res, summ = tables
    if summ.empty:
        return
    phases = [c[:-len("_s_mean")] for c in summ.columns if c.endswith("_s_mean") and c != "seconds_mean"
              and not c.endswith(("_kib_per_s_mean", "_rate_per_s_mean", "_returned_s_mean"))]
    print("durable seconds per phase (until syncfs returned and the emulated device was idle; mean±sd)", file=out)
    head = [*axes, "runs"] + [f"{p} s" for p in phases]
    print("  ".join(f"{h:>14}" for h in head), file=out)
    for _, row in summ.iterrows():
        cells = [str(row[a]) for a in axes] + [str(int(row["runs"]))]
        cells += [f"{row[f'{p}_s_mean']:.3f}±{row[f'{p}_s_sd']:.3f}" for p in phases]
        print("  ".join(f"{c:>14}" for c in cells), file=out)
