"""The advice against the lab, on workloads it was not fitted to: for each workload, scale
and device speed, the threshold `jstall lab tune` finds by running it (the smallest journal
big enough, jstall.enough: forced-checkpoint waits at most 1 % of the run and none of 10 ms),
the journal size `jstall analyze` recommends from runs at 4 MiB and at a quarter and half of
that threshold, the ratio recommended / threshold (target: 1x to 2x), and a confirming run
at the size recommended from 4 MiB: how much of the 4 MiB run's forced-checkpoint waits it
removed (target: 90 % or more) and whether it is big enough. With --remedies, the 256-byte
inode and external-journal advice too: the stall time analyze says each would remove,
against what tune's comparison run at 4 MiB measured (target: within 30 %, or the range
holding it; an estimate of nothing removed holds when the change removed nothing), beside
how far a second run at 4 MiB differed from the first (the noise).

usage: sudo .venv/bin/python benchmarks/tune_check.py [--quick] [--write-iops N[,N...]]
           [--only NAME[,NAME...]] [--remedies] [--scratch DIR] [--keep DIR]
       .venv/bin/python benchmarks/tune_check.py --reanalyze DIR

Workloads: the lab's patterns (xattr, fdtree) and real clients run as the lab's command
pattern in the scratch filesystem (fs_mark, dbench, GNU tar --xattrs, rsync -aX, cp -a then
rm -rf, git add and commit of a new tree), each at two scales; the copy clients copy a tree
of small files with two user.* attributes each (benchmarks/maketree.py) that they make
first. Every filesystem: ext4, 2 GiB, 128-byte inodes, an internal journal starting at 4 MiB,
on the lab's paced device (every request waits its turn), default 2,000 and 500 write IOPS.
--quick: the smaller scale, 2,000 IOPS. Every run is recorded and analyzed as `jstall
analyze` does (10 ms stalls); nothing is fitted here.
"""

import os
import re
import shlex
import shutil
import sys
import tempfile

from benchlib import parser, run_main

HERE = os.path.dirname(os.path.abspath(__file__))
MAKETREE = os.path.join(HERE, "maketree.py")
FS = {"fs_size": "2G", "inode_size": 128}
START_MIB = 4


def _sh(script):
    """The command pattern's parameters for a shell script run in the job's directory."""
    return {"command": "bash -c " + shlex.quote("set -e; " + script)}


def _tree(directory, n, xattrs=True):
    return f"{shlex.quote(sys.executable)} {shlex.quote(MAKETREE)} {directory} {n}" + ("" if xattrs else " --no-xattrs")


def _git(n):
    return _sh(f"git init -q r; {_tree('r', n, xattrs=False)}; cd r; git add -A; "
               "git -c user.name=jstall -c user.email=jstall@localhost commit -qm tree")


#: name -> [(scale, pattern, params)], the smaller scale first
WORKLOADS = {
    "xattr": [("1,500 files, 6,000 updates", "xattr", {"files": 1500, "updates": 6000}),
              ("3,000 files, 12,000 updates", "xattr", {"files": 3000, "updates": 12000})],
    "fdtree": [("deep (5 levels x 4, 5 files)", "fdtree", {"shape": "deep"}),
               ("shallow (100 dirs x 100 files)", "fdtree", {"shape": "shallow"})],
    "fs_mark": [(f"2 threads x {n:,} empty files", "command",
                 _sh(f"fs_mark -d . -t 2 -n {n} -s 0 -S 0 -k > /dev/null")) for n in (20000, 50000)],
    "dbench": [(f"{c} clients, 10 s", "command",
                _sh(f"dbench -c /usr/share/dbench/client.txt -D . -t 10 {c} > /dev/null")) for c in (4, 8)],
    "tar --xattrs": [(f"{n:,} files", "command",
                      _sh(f"{_tree('src', n)}; mkdir dst; tar --xattrs -cf - src | tar --xattrs -xf - -C dst"))
                     for n in (5000, 20000)],
    "rsync -aX": [(f"{n:,} files", "command", _sh(f"{_tree('src', n)}; rsync -aX src/ dst/")) for n in (5000, 20000)],
    "cp -a + rm -rf": [(f"{n:,} files", "command", _sh(f"{_tree('src', n)}; cp -a src dst; rm -rf src dst"))
                      for n in (5000, 20000)],
    "git": [(f"{n:,} files", "command", _git(n)) for n in (20000, 50000)],
}


def _fs(mib, iops, **change):
    from jstall.workloads.scratch import FsConfig

    return FsConfig(journal_size=f"{mib}M", write_iops=iops or None, **{**FS, **change})


def _run(out, pattern, params, mib, iops, scratch):
    """A lab run at a journal of mib MiB, recorded into out; its TuneRun (workloads.tune.measure)."""
    from jstall.workloads.lab import LabConfig, run_lab
    from jstall.workloads.tune import measure

    with open(os.devnull, "w") as quiet:
        run_lab(LabConfig(fs=_fs(mib, iops), pattern=pattern, params=params, output_dir=out, scratch_dir=scratch),
                console=quiet, out=quiet)
    return measure(out, f"journal {mib}M", mib, {}, 10.0)


def _advice(session_dir, kind):
    from jstall.analyzer import analyze

    return next((r for r in analyze(session_dir).recommendations if r.kind == kind), None)


def _noise(first, again):
    """How far two runs of the same setting differ: all stall time (what the external
    journal's removal is measured in) and forced-checkpoint waits (the inode size's)."""
    return {"external_journal": abs(first.stall_ms - again.stall_ms),
            "inode_size": abs(first.checkpoint_waits_ms - again.checkpoint_waits_ms)}


def case(name, scale, pattern, params, iops, tmp, scratch, remedies):
    """One workload at one scale and speed: {"name", "scale", "iops", "threshold", "advice":
    [(from MiB, Recommendation or None)], "confirm": (MiB, TuneRun at 4 MiB, TuneRun) or None,
    "remedies": [(kind, predicted ms, measured ms)]}."""
    from jstall.workloads.tune import tune

    d = os.path.join(tmp, f"c{len(os.listdir(tmp))}")
    with open(os.devnull, "w") as quiet:
        r = tune(pattern, params, _fs(START_MIB, iops), compare=remedies, output_dir=os.path.join(d, "tune"),
                 scratch_dir=scratch, console=quiet)
    thr = r.threshold_mib
    by = {x.journal_mib: x for x in r.runs}
    first = by[START_MIB]
    froms = [START_MIB]
    if thr:
        froms += sorted({m for m in (round(thr / 4), round(thr / 2)) if START_MIB < m < thr})
    advice = []
    for mib in froms:
        run = by.get(mib) or _run(os.path.join(d, f"at-{mib}M"), pattern, params, mib, iops, scratch)
        advice.append((mib, run.big_enough, _advice(run.session_dir, "journal_size")))
    confirm = None
    rec = advice[0][2]
    if rec is not None and rec.journal_size_mib and rec.journal_size_mib <= r.bound_mib:
        mib = int(rec.journal_size_mib)
        run = by.get(mib) or _run(os.path.join(d, f"confirm-{mib}M"), pattern, params, mib, iops, scratch)
        confirm = (mib, first, run)
    # tune's own check of the advice (workloads.tune.Prediction): the stall time each piece of
    # advice says it removes against its comparison run
    rem = [p for p in r.predictions if p.kind in ("inode_size", "external_journal") and p.measured_ms is not None]
    noise = None
    if rem:
        # the starting run again: how far two runs of the same setting differ
        noise = _noise(first, _run(os.path.join(d, "again-4M"), pattern, params, START_MIB, iops, scratch))
    print(f"# {name} ({scale}, {iops} IOPS): threshold {thr} MiB, {r.stalled_below_mib} MiB is not big enough; "
          f"tried {r.tried_mib}", file=sys.stderr, flush=True)
    return {"name": name, "scale": scale, "iops": iops, "threshold": thr, "bound": r.bound_mib, "advice": advice,
            "confirm": confirm, "remedies": rem, "noise": noise}


def _portable(params):
    """A workload's parameters as they compare between checkouts: the interpreter's and
    maketree.py's paths in its command (a run kept by another checkout) left out."""
    out = dict(params)
    if "command" in out:
        out["command"] = re.sub(r"\S*/python3?(\.\d+)?(?=\s)", "PYTHON", out["command"])
        out["command"] = re.sub(r"\S*/benchmarks/maketree\.py", "MAKETREE", out["command"])
    return out


def reanalyze(kept):
    """The cases of a run kept with --keep, their advice computed again from the sessions as
    recorded (the thresholds and runs as measured then): a changed model checked against the
    same runs. A confirming run counts only where one was recorded at the size recommended
    now. Remedies: the stall time the advice from the 4 MiB run says each removes, computed
    again, against what tune's comparison run measured then (and the noise of the second
    4 MiB run, where one was kept)."""
    import dataclasses
    import json

    from jstall.workloads.tune import Prediction, measure

    out = []
    for d in sorted((x for x in os.listdir(kept) if x[1:].isdigit()), key=lambda x: int(x[1:])):
        d = os.path.join(kept, d)
        with open(os.path.join(d, "tune", "tune.json")) as f:
            t = json.load(f)
        found = [(n, sc) for n, cases in WORKLOADS.items() for sc, pat, par in cases
                 if (pat, _portable(par)) == (t["pattern"], _portable(t["params"]))]
        if not found:
            print(f"# {d}: not one of this benchmark's workloads ({t['pattern']} {t['params']}): left out",
                  file=sys.stderr)
            continue
        (name, scale), iops, thr = found[0], t["config"]["write_iops"], t["threshold_mib"]
        runs = {r["journal_mib"]: r for r in t["runs"]}

        def session(mib, *names):
            if mib in runs:
                return runs[mib]["session_dir"]
            return next((p for p in (os.path.join(d, n) for n in names) if os.path.isdir(p)), None)

        froms = [START_MIB] + (sorted({m for m in (round(thr / 4), round(thr / 2)) if START_MIB < m < thr})
                               if thr else [])
        advice = []
        for mib in froms:
            sd = session(mib, f"at-{mib}M")
            if sd:
                advice.append((mib, measure(sd, f"journal {mib}M", mib, {}, 10.0).big_enough,
                               _advice(sd, "journal_size")))
        confirm = None
        rec = advice[0][2] if advice else None
        if rec is not None and rec.journal_size_mib:
            mib = int(rec.journal_size_mib)
            sd = session(mib, f"confirm-{mib}M")
            if sd:
                first = measure(session(START_MIB), "first", START_MIB, {}, 10.0)
                confirm = (mib, first, measure(sd, f"journal {mib}M", mib, {}, 10.0))
        rem, noise = [], None
        kept_rem = [p for p in t.get("predictions", []) if p["kind"] in ("inode_size", "external_journal")
                    and p.get("measured_ms") is not None]
        if kept_rem and session(START_MIB):
            fields = {f.name for f in dataclasses.fields(Prediction)}
            for p in kept_rem:
                rec = _advice(session(START_MIB), p["kind"])
                if rec is None:
                    continue
                high = rec.inputs.get("removed_high_ms")
                rem.append(Prediction(**{**{k: v for k, v in p.items() if k in fields},
                                         "predicted_ms": round(rec.stall_ms_addressed, 3),
                                         "predicted_high_ms": None if high is None else round(high, 3)}))
            again = os.path.join(d, "again-4M")
            if os.path.isdir(again):
                noise = _noise(measure(session(START_MIB), "first", START_MIB, {}, 10.0),
                               measure(again, "again", START_MIB, {}, 10.0))
        out.append({"name": name, "scale": scale, "iops": iops, "threshold": thr, "bound": t["bound_mib"],
                    "advice": advice, "confirm": confirm, "remedies": rem, "noise": noise})
    return out


def report(results):
    print("journal-size advice against lab tune (big enough: forced-checkpoint waits at most 1% of the run, "
          "none of 10 ms)\n")
    print("| workload | scale | write IOPS | threshold MiB | run at MiB | recommended MiB (range) | ratio |")
    print("|---|---|---:|---:|---:|---:|---:|")
    inside = counted = 0
    for c in results:
        thr = c["threshold"]
        for mib, enough, rec in c["advice"]:
            head = f"| {c['name']} | {c['scale']} | {c['iops']} | {thr if thr else '> ' + str(c['bound'])} | {mib} |"
            if rec is None or not rec.journal_size_mib:
                why = "none: big enough" if enough else "no size: the model's fits" if rec else "none"
                print(f"{head} ({why}) | |")
                if not enough and thr:
                    counted += 1  # advice missing where a journal was not big enough
                continue
            ratio = rec.journal_size_mib / thr if thr else float("nan")
            ok = 1.0 <= ratio <= 2.0
            counted += 1
            inside += ok
            print(f"{head} {rec.journal_size_mib:g} ({rec.low_mib:g}-{rec.high_mib:g}) | {ratio:.2f}"
                  f"{'' if ok else ' (outside)'} |")
    print(f"\n{inside} of {counted} runs that were not big enough got a recommendation within [1x, 2x] of the "
          "threshold\n")
    print("confirming runs at the size recommended from 4 MiB\n")
    print("| workload | scale | write IOPS | recommended MiB | waits at 4 MiB ms | waits there ms | removed | "
          "big enough | durable s 4 MiB -> there |")
    print("|---|---|---:|---:|---:|---:|---:|---|---:|")
    good = tried = 0
    for c in results:
        if not c["confirm"]:
            continue
        mib, a, b = c["confirm"]
        removed = 1.0 - b.checkpoint_waits_ms / a.checkpoint_waits_ms if a.checkpoint_waits_ms else float("nan")
        tried += 1
        good += removed >= 0.9
        print(f"| {c['name']} | {c['scale']} | {c['iops']} | {mib} | {a.checkpoint_waits_ms:,.0f} | "
              f"{b.checkpoint_waits_ms:,.0f} | {100 * removed:.0f}% | {'yes' if b.big_enough else 'no'} | "
              f"{a.total_durable_s:.2f} -> {b.total_durable_s:.2f} |")
    print(f"\n{good} of {tried} confirming runs removed 90% or more of the forced-checkpoint waits")
    rem = [(c, x) for c in results for x in c["remedies"]]
    if rem:
        print("\nremedies at 4 MiB: the stall time analyze says each removes (its range: a journal device as slow "
              "as the data device to a fast one), against tune's comparison run; noise: how far a second run at "
              "4 MiB differed from the first\n")
        print("| workload | scale | write IOPS | advice | predicted ms | measured ms | error | noise ms |")
        print("|---|---|---:|---|---:|---:|---:|---:|")
        near = within_noise = neither = 0
        for c, p in rem:
            noise = (c["noise"] or {}).get(p.kind)
            err = p.error()
            high = p.predicted_high_ms if p.predicted_high_ms is not None else p.predicted_ms
            # the advice said the change removes nothing (inode size: "would NOT suffice") and it
            # removed nothing: as the advice said
            none = high <= 0 and p.measured_ms <= 0
            if none:
                err = "none, as predicted"
            neither += none
            ok = none or err == "in" or (err != "-" and abs(float(err.rstrip("%"))) <= 30)
            miss = min(abs(p.predicted_ms - p.measured_ms), abs(high - p.measured_ms))
            quiet = not ok and noise is not None and miss <= noise   # off by less than two runs differ
            near += ok
            within_noise += quiet
            pred = f"{p.predicted_ms:,.0f}" + (f"-{p.predicted_high_ms:,.0f}" if p.predicted_high_ms is not None
                                               and round(p.predicted_high_ms) > round(p.predicted_ms) else "")
            print(f"| {c['name']} | {c['scale']} | {c['iops']} | {p.kind} | {pred} | {p.measured_ms:,.0f} | "
                  f"{'within noise' if quiet else err} | {'' if noise is None else f'{noise:,.0f}'} |")
        print(f"\n{near} of {len(rem)} remedy estimates within 30% of the measured removal, holding it in their "
              f"range or, {neither} of them, predicting nothing removed where nothing was; {within_noise} more off "
              "by less than the noise")


def main():
    ap = parser(__doc__)
    ap.add_argument("--quick", action="store_true", help="the smaller scale at 2,000 write IOPS only")
    ap.add_argument("--write-iops", default="2000,500", help="the paced device's write IOPS, comma-separated")
    ap.add_argument("--only", help="these workloads only (names as in the table, comma-separated)")
    ap.add_argument("--remedies", action="store_true", help="also check the inode-size and external-journal advice")
    ap.add_argument("--scratch", help="lab scratch directory (default: the lab's)")
    ap.add_argument("--keep", metavar="DIR", help="keep every run's session under DIR (a new directory)")
    ap.add_argument("--reanalyze", metavar="DIR", help="no runs: the advice computed again from the sessions a "
                    "run kept with --keep (the same thresholds and runs, the current model)")
    args = ap.parse_args()
    if args.reanalyze:
        if not os.path.isdir(args.reanalyze):
            raise SystemExit(f"--reanalyze: {args.reanalyze} is not a directory kept with --keep")
        report(reanalyze(args.reanalyze))
        return 0
    if os.geteuid() != 0:
        raise SystemExit("needs root (the lab makes loop devices)")
    speeds = [2000] if args.quick else [int(x) for x in args.write_iops.split(",")]
    names = list(WORKLOADS) if not args.only else [n.strip() for n in args.only.split(",")]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise SystemExit(f"--only: unknown workload {unknown[0]!r}; choose from {', '.join(WORKLOADS)}")
    results = []
    if args.keep:
        os.makedirs(args.keep)
    tmp = args.keep or tempfile.mkdtemp(prefix="jstall-accuracy-", dir="/var/tmp")
    try:
        for iops in speeds:
            for name in names:
                for scale, pattern, params in WORKLOADS[name][:1] if args.quick else WORKLOADS[name]:
                    results.append(case(name, scale, pattern, params, iops, tmp, args.scratch, args.remedies))
    except KeyboardInterrupt:
        print("interrupted: the table holds the cases finished", file=sys.stderr)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        report(results)
    return 0


if __name__ == "__main__":
    run_main(main)
