"""The advice judged by running it: for each workload, scale and device speed, a baseline
run on a small-journal filesystem, `jstall analyze` of it, and every remedy that advice names
and the lab can apply (journal or log size, 256-byte inodes, an external journal or log as
slow as the data device, fast_commit, XFS log buffers, the commit= interval, the tenant
that filled the journal on a filesystem of its own), each run 3 times interleaved with the baseline
(B R1 R2 B R1 R2 B R1 R2); medians of the stall time (analyze's JSON `stalls.total_ms`:
every stalled call of 10 ms or more, every cause; for the tenant remedy, the stall time of
the processes it does not move) and of the durable time (the lab's phases, until their
work was durable on the device). Then the targets, each printed:

  1. calibration: the measured median stall-time removal lies inside the interval the advice
     printed (the medians of the three baseline runs' intervals as shares of their own stall
     time, times the median stall time) for >= 80 % of (workload,
     remedy) pairs, intervals no wider than 2x (high/low
     <= 2, or +- 1 s under 2 s);
  2. where a tried remedy removes >= 90 % of the stall time, the headline one does, in >= 90 %
     of those workloads; where none does, the verdict says no filesystem option removes most;
  3. (with --tunes) the journal size advised <= 2x the median of 3 `lab tune` thresholds on
     >= 90 % of hot-set workloads;
  4. identical verdicts (remedy kinds and ranks) on the 3 identical baseline runs;
  5. (with --tunes) the log-size remedy's predicted curve (stall time by journal or log
     size) within 2x of the stall time the tunes measured at each size they ran, on >= 90 %
     of those points;

and the table of every pair (predicted interval, measured median removal) as markdown.

Every run of a case must do the same work: the lab's census of the filesystem at its end
(files, directories, attributes) is kept with each run, a run whose work differs from its
case's is run again (up to 3 times: fs_mark -t 2 in one directory once left 20,001 of its
40,001 files, its threads' names colliding, and stalled 0 ms), and the judging leaves out any
left. dbench runs for a fixed time, so a remedy that shrinks its waits leaves it more calls:
its stall time is judged at the baseline's median number of traced calls.

The judging is benchmarks/advice_judge.py (pure functions, tests/test_advice_bench.py).

usage: sudo .venv/bin/python benchmarks/advice_accuracy.py [--resume DIR] [--only NAME,...]
           [--scale small|large|both] [--write-iops N[,N...]] [--tunes] [--scratch DIR]
       .venv/bin/python benchmarks/advice_accuracy.py --report DIR   # judge what DIR holds
       .venv/bin/python benchmarks/advice_accuracy.py --readvise DIR # this analyzer's advice of
                                                                     # DIR's kept baselines

  # the new clients at the smaller scale, 1,000 writes/s, kept to resume in another session
  sudo .venv/bin/python benchmarks/advice_accuracy.py --resume /var/tmp/adv \\
      --only 'sqlite rollback,maildir,tenants,xfs rm -rf' --scale small --write-iops 1000

--resume DIR keeps every run's result in DIR/results.jsonl as it ends (one line per
workload, scale, speed, configuration and run) and skips the runs it holds: a killed run
loses only the run in progress. Without it the results live in a temporary directory.

Workloads (each at two scales; nothing here is fitted to jstall's model): the lab's patterns
(xattr, fdtree); fs_mark, dbench, GNU tar --xattrs, rsync -aX, cp -a then rm -rf, git add
and commit, copying trees of small files with two user.* attributes (benchmarks/maketree.py);
and benchmarks/clients.py: SQLite commits with a rollback journal, maildir delivery (4
writers: write, fsync, setxattr, rename; one mover), a file server keeping Windows metadata
in attributes as Samba does (DOS attributes and an NT ACL), two tenants in cgroups of their own
(the lab's tenants pattern: an xattr storm beside a 4 KiB write + fdatasync every 5 ms,
ended when the storm is done). ext4: 2 GiB, 128-byte inodes, a 4 MiB internal
journal. XFS (rm -rf and tar of a tree): 1 GiB, an 8 MiB internal log (below what mkfs.xfs
makes outside xfsprogs' tests: the lab sets its test-harness variables for mkfs.xfs).
Every filesystem is on the lab's paced device (every request waits its turn) at each
--write-iops (default 1,000 and 500).

Not tried: advice that changes a setting of the whole host (vm.dirty_* writeback window:
other filesystems share it) or names no setting; each is listed with its reason.
"""

import datetime
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

import advice_judge as judge
from benchlib import parser, run_main
from tune_check import WORKLOADS as TUNED_WORKLOADS

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENTS = os.path.join(HERE, "clients.py")
EXT4 = {"fs_size": "2G", "inode_size": 128, "journal_size": "4M"}
XFS = {"fs_type": "xfs", "fs_size": "1G", "journal_size": "8M"}
MIN_MS = 10.0
#: clients that run for a fixed time: their stall time is judged per traced call
#: (advice_judge.at_baseline_calls)
FIXED_TIME = ("dbench",)
#: a run whose work differs from its case's is run this many times at most (advice_judge.work_of)
WORK_ATTEMPTS = 3
TAR_PIPE = "tar --xattrs -cf - src | tar --xattrs -xf - -C dst"
#: the tenants pattern's option that moves a tenant to a filesystem of its own (the tenant
#: remedy), kept with a remedy's changes
OWN_FS = "own_filesystem"


def _sh(script):
    return {"command": "bash -c " + shlex.quote("set -e; " + script)}


def _client(*args):
    return _sh(
        f"{shlex.quote(sys.executable)} {shlex.quote(CLIENTS)} " + " ".join(str(a) for a in args)
    )


def _tenants(files, updates):
    """The lab's tenants pattern: the storm and the latency tenant in cgroups of their own,
    the latency tenant ended when the storm is done."""
    client = f"{shlex.quote(sys.executable)} {shlex.quote(CLIENTS)}"
    return {"tenant": [f"latency={client} latency", f"storm={client} storm {files} {updates}"],
            "until": "storm"}


def _tree(directory, n):
    maketree = shlex.quote(os.path.join(HERE, "maketree.py"))
    return f"{shlex.quote(sys.executable)} {maketree} {directory} {n}"


#: name -> (filesystem, [(scale, pattern, params)], the smaller scale first)
WORKLOADS = {name: (EXT4, cases) for name, cases in TUNED_WORKLOADS.items()}
WORKLOADS.update(
    {
        "sqlite rollback": (
            EXT4,
            [(f"{n:,} commits", "command", _client("sqlite", n)) for n in (1000, 3000)],
        ),
        "maildir": (
            EXT4,
            [(f"{n:,} messages", "command", _client("maildir", n)) for n in (2000, 6000)],
        ),
        "fileserver": (
            EXT4,
            [(f"{n:,} files", "command", _client("fileserver", n)) for n in (5000, 20000)],
        ),
        "tenants": (
            EXT4,
            [
                (f"{f:,} files, {u:,} updates", "tenants", _tenants(f, u))
                for f, u in ((1500, 6000), (3000, 12000))
            ],
        ),
        "xfs rm -rf": (
            XFS,
            [
                (f"{n:,} files", "command", _sh(f"{_tree('src', n)}; sync -f .; rm -rf src"))
                for n in (20000, 50000)
            ],
        ),
        "xfs tar --xattrs": (
            XFS,
            [
                (
                    f"{n:,} files",
                    "command",
                    _sh(f"{_tree('src', n)}; mkdir dst; " + TAR_PIPE),
                )
                for n in (5000, 20000)
            ],
        ),
    }
)


def fs_config(fs, iops, change=None):
    from jstall.workloads.scratch import FsConfig

    return FsConfig(write_iops=iops, **{**fs, **(change or {})})


def remedy(a, fs, pattern=None):
    """(label, FsConfig changes) of one piece of advice (advice_judge.advice_of) on a case of
    the lab's ``pattern``, or (None, why it is not tried)."""
    from jstall.workloads.tune import XFS_BIG_LOG_BUFFERS, bounds_mib

    kind, xfs = a["kind"], fs.fs_type == "xfs"
    if kind in ("journal_size", "log_size"):
        mib = a.get("journal_size_mib")
        if not mib:
            return None, "no size given"
        mib = math.ceil(mib)
        hi = bounds_mib(fs)[1]
        if mib > hi:
            return None, f"{mib} MiB is more than the lab's {hi} MiB on this filesystem"
        return f"{'log' if xfs else 'journal'} {mib}M", {"journal_size": f"{mib}M"}
    if kind == "inode_size":
        m = re.search(r"mkfs\.ext4 -I (\d+)", a.get("command") or "")
        size = int(m.group(1)) if m else 256
        return (
            (f"{size}-byte inodes", {"inode_size": size})
            if not xfs and fs.inode_size < size
            else (None, "inodes not smaller")
        )
    if kind in ("external_journal", "external_log", "xfs_log_device"):
        # a device of its own, as slow as the data device (the advice's low end)
        return (
            "external log" if xfs else "external journal",
            {
                "journal_device": True,
                "journal_device_profile": fs.device_profile,
                "journal_read_iops": fs.read_iops,
                "journal_write_iops": fs.write_iops,
                "journal_read_bps": fs.read_bps,
                "journal_write_bps": fs.write_bps,
            },
        )
    if kind == "fast_commit":
        return "fast_commit", {"fast_commit": True}
    if kind == "own_filesystem":
        # the lab's tenants pattern moves a tenant (its process name is its tenant's name)
        if not a.get("moved"):
            return None, "names no process"
        if pattern not in (None, "tenants"):
            return None, "the lab moves a process to a filesystem of its own in its tenants pattern only"
        return f"{a['moved']} on its own filesystem", {OWN_FS: a["moved"]}
    if kind == "log_buffers":
        return "8x256K log buffers", dict(XFS_BIG_LOG_BUFFERS)
    cmd = a.get("command") or ""
    m = re.search(r"\bcommit=(\d+)", cmd)
    if m and not xfs:
        return f"commit={m.group(1)}", {"commit_interval": int(m.group(1))}
    if "dirty_" in cmd:
        return None, "a setting of the whole host (other filesystems share it)"
    return None, "names no setting the lab applies"


def _git(*args):
    p = subprocess.run(["git", "-C", HERE, *args], check=False, capture_output=True, text=True)
    return p.stdout.strip() or None


def _commit():
    """(this checkout's commit, the last commit that changed the advice's code, analyzer/;
    "+changes" after it when analyzer/ differs from it in the work tree)."""
    top = _git("rev-parse", "--show-toplevel")
    head = _git("rev-parse", "--short=12", "HEAD")
    analyzer = os.path.join(top or "", "analyzer")
    advice = (_git("log", "-1", "--format=%H", "--", analyzer) or "")[:12] or None
    if advice and _git("status", "--porcelain", "--", analyzer):
        advice += "+changes"
    return head, advice


def _stall_by_comm(doc):
    """{process name: stall ms} of analyze's JSON document (its per_process rows)."""
    out = {}
    for p in doc.get("per_process") or []:
        out[str(p.get("comm"))] = out.get(str(p.get("comm")), 0.0) + float(p.get("stall_ms") or 0.0)
    return out


def _calls(doc):
    """The calls jstall traced on the filesystem (analyze's JSON ``calls`` counts; handle
    waits outside every traced call are not calls)."""
    return sum(int(v.get("count") or 0) for k, v in (doc.get("calls") or {}).items() if k != "journal_start")


def _json_safe(change):
    return {k: v for k, v in (change or {}).items()}


def run_one(fs, pattern, params, out, scratch):
    """One lab run recorded into out; (stall ms, durable s, analyze's JSON document, what each
    device served: {role: {"write_ios", "flush_ios"}} from /sys/block/*/stat, as the lab
    sampled it, and the lab's census of the work)."""
    from jstall.analyzer.analysis import analyze
    from jstall.workloads.lab import LabConfig, run_lab

    from jstall.metadata import lab_of

    with open(os.devnull, "w") as quiet:
        r = run_lab(
            LabConfig(fs=fs, pattern=pattern, params=params, output_dir=out, scratch_dir=scratch),
            console=quiet,
            out=quiet,
        )
    if r.exit_status:
        raise SystemExit(
            f"{params.get('command', pattern)}: exited {r.exit_status}; its session is {out}"
        )
    a = analyze(out, min_ms=MIN_MS)
    doc = a.to_dict()
    phases = lab_of(a.session.meta).phases
    served = {
        role: {c: int(v.get(c) or 0) for c in ("write_ios", "flush_ios")}
        for role, v in (r.lab.get("device_served") or {}).items()
    }
    return (
        float(doc["stalls"]["total_ms"] or 0.0),
        round(sum(p.durable_s for p in phases), 4),
        doc,
        served,
        r.lab.get("census"),
    )


def run_case(
    name, scale, pattern, params, fs_fields, iops, results, runs_dir, scratch, keep_sessions, tunes
):
    """Every run of one case not yet in the results file, in the interleaved order."""
    records, _ = judge.read_results(results)
    done = {judge.key(r): r for r in records}
    base = fs_config(fs_fields, iops)
    ident = {"workload": name, "scale": scale, "iops": iops}
    commit, advice_commit = _commit()

    def run(config, n, change, kind):
        k = (name, scale, iops, config, n)
        if k in done:
            return done[k]
        out = run_dir(runs_dir, name, scale, iops, config, n)
        fs_change = {k: v for k, v in (change or {}).items() if k != OWN_FS}
        moved = OWN_FS in (change or {})
        run_params = {**params, OWN_FS: change[OWN_FS]} if moved else params
        usual = judge.usual_work(list(done.values()), (name, scale, iops))
        for attempt in range(1, WORK_ATTEMPTS + 1):
            shutil.rmtree(out, ignore_errors=True)  # a run killed before, or one run again
            stall, durable, doc, served, census = run_one(
                fs_config(fs_fields, iops, fs_change), pattern, run_params, out, scratch
            )
            work = judge.work_of(census)
            if moved or usual is None or work is None or work == usual or attempt == WORK_ATTEMPTS:
                break
            print(
                f"# {name} ({scale}, {iops:,} writes/s) {config} run {n}: other work than its case's "
                f"(files, dirs, attributes {work} against {usual}): run again",
                file=sys.stderr,
                flush=True,
            )
        rec = {
            **ident,
            "config": config,
            "run": n,
            "kind": kind,
            "change": _json_safe(change),
            "stall_ms": stall,
            "durable_s": durable,
            "device_served": served,
            **measured_work(name, change, census, doc),
            "commit": commit,
            "advice_commit": advice_commit,
            "date": datetime.date.today().isoformat(),
        }
        if config == "baseline":
            rec["stall_ms_by_comm"] = _stall_by_comm(doc)
            rec["advice"] = judge.advice_of(doc)
            rec["verdict"] = doc.get("verdict")
        judge.append_result(results, rec)
        if not keep_sessions:
            shutil.rmtree(out, ignore_errors=True)
        done[k] = rec
        print(
            f"# {name} ({scale}, {iops:,} writes/s) {config} run {n}: stall {stall:,.0f} ms, "
            f"durable {durable:.1f} s",
            file=sys.stderr,
            flush=True,
        )
        return rec

    first = run("baseline", 1, None, None)
    configs, skipped = {"baseline": (None, None)}, []
    for a in first["advice"]:
        label, change = remedy(a, base, pattern)
        if label is None:
            skipped.append((a["kind"], change))
        elif label not in configs:
            configs[label] = (change, a["kind"])
    for config, n in judge.schedule(list(configs)):
        run(config, n, *configs[config])
    for kind, why in skipped:
        print(f"# {name} ({scale}, {iops:,} writes/s): {kind} not tried: {why}", file=sys.stderr)
    if tunes and any(
        a["kind"] in ("journal_size", "log_size") and a["regime"] == "hot_set"
        for a in first["advice"]
    ):
        from jstall.workloads.tune import tune

        for n in range(1, judge.RUNS + 1):
            k = (name, scale, iops, "tune", n)
            if k in done:
                continue
            out = run_dir(runs_dir, name, scale, iops, "tune", n)
            shutil.rmtree(out, ignore_errors=True)
            with open(os.devnull, "w") as quiet:
                t = tune(
                    pattern,
                    params,
                    base,
                    compare=False,
                    output_dir=out,
                    scratch_dir=scratch,
                    console=quiet,
                )
            judge.append_result(
                results,
                {
                    **ident,
                    "config": "tune",
                    "run": n,
                    "threshold_mib": t.threshold_mib,
                    # every size the search ran: the predicted curve is judged on them (target 5)
                    "points": [{"journal_mib": x.journal_mib, "stall_ms": x.stall_ms,
                                "waits_ms": x.checkpoint_waits_ms if x.kind == "jbd2" else x.log_space_stall_ms}
                               for x in t.runs],
                    "commit": commit,
                    "date": datetime.date.today().isoformat(),
                },
            )
            if not keep_sessions:
                shutil.rmtree(out, ignore_errors=True)


def run_dir(runs_dir, workload, scale, iops, config, run):
    """The session directory of one run (``--keep-sessions``): where the runner writes it and
    --readvise finds it."""
    return os.path.join(runs_dir, f"{_slug(workload, scale, iops)}-{re.sub(r'[^A-Za-z0-9]+', '-', config)}-{run}")


def measured_work(workload, change, census, doc):
    """The fields the judging reads of what a run did (advice_judge: ``work``, ``moved_work``,
    ``calls``, ``per_call``), from the lab's census and analyze's JSON document."""
    return {"work": judge.work_of(census), "moved_work": OWN_FS in (change or {}), "calls": _calls(doc),
            "per_call": workload in FIXED_TIME}


def _slug(*parts):
    return re.sub(r"[^A-Za-z0-9]+", "-", "-".join(str(p) for p in parts)).strip("-")


def readvise(top):
    """Analyze every kept baseline session under ``top`` again with this checkout's analyzer:
    its advice, verdict and per-process stall time replace the record's (appended: a later
    record of a run replaces the earlier one). The measured runs do not change; the advice
    judged is then this commit's. A run kept before its work and calls were recorded (any
    configuration) gets them from its session: the lab's census, analyze's calls. Returns
    how many records were renewed."""
    from jstall.analyzer.analysis import analyze

    results = os.path.join(top, "results.jsonl")
    records, _ = judge.read_results(results)
    commit, advice_commit = _commit()
    n = 0
    for rec in records:
        base = rec.get("config") == "baseline"
        if rec.get("config") == "tune" or (not base and "work" in rec and "calls" in rec):
            continue
        out = run_dir(os.path.join(top, "runs"), rec["workload"], rec["scale"], rec["iops"], rec["config"],
                      rec["run"])
        if not os.path.exists(os.path.join(out, "metadata.json")):
            print(f"# {out}: no kept session, its {'advice' if base else 'record'} stays", file=sys.stderr)
            continue
        a = analyze(out, min_ms=MIN_MS)
        doc = a.to_dict()
        new = {**rec, **measured_work(rec["workload"], rec.get("change"),
                                      (a.session.meta.get("lab") or {}).get("census"), doc)}
        if base:
            new.update(advice=judge.advice_of(doc), verdict=doc.get("verdict"), stall_ms_by_comm=_stall_by_comm(doc),
                       advice_commit=advice_commit, readvised_at=commit)
        judge.append_result(results, new)
        n += 1
    return n


def report(results, out=sys.stdout):
    """Print the table and the targets of a results file; the benchmark's exit status."""
    records, bad = judge.read_results(results)
    if bad:
        print(f"{results}: {bad} lines unreadable (a run killed while writing): left out", file=out)
    for r in judge.other_work(records):
        print(f"{r['workload']} ({r['scale']}, {r['iops']:,} writes/s) {r['config']} run {r['run']}: "
              f"other work than its case's (files, dirs, attributes {tuple(r['work'])} against "
              f"{judge.usual_work(records, judge.case_of(r))}): left out", file=out)
    cs = judge.cases(records)
    commits = sorted({r.get("commit") for r in records if r.get("commit")})
    advice = sorted({r.get("advice_commit") for r in records if r.get("advice_commit")})
    dates = sorted({r.get("date") for r in records if r.get("date")})
    sources = sorted({a["source"] for r in records for a in r.get("advice") or []})
    src = " and ".join(sources) or "no advice"
    print(
        f"advice judged by running it: {len(cs)} cases, {len(records)} runs; dates "
        f"{', '.join(dates)}; commits {', '.join(commits)} (analyzer/ last changed at "
        f"{', '.join(advice) or 'not recorded'}); predicted intervals from {src} fields\n",
        file=out,
    )
    print(judge.table(judge.pairs(cs)) + "\n", file=out)
    cp = judge.curve_points(cs)
    if cp:
        print(judge.curve_table(cp) + "\n", file=out)
    ok = True
    for line, met in judge.targets(cs):
        print(
            f"{line}: {'met' if met else 'not met' if met is not None else 'nothing measured'}",
            file=out,
        )
        ok = ok and met is not False
    print("PASS" if ok else "FAIL", file=out)
    return 0 if ok else 1


def main():
    ap = parser(__doc__)
    ap.add_argument(
        "--resume",
        metavar="DIR",
        help="keep results in DIR/results.jsonl and skip the runs it holds",
    )
    ap.add_argument(
        "--report", metavar="DIR", help="no runs: the table and targets of DIR/results.jsonl"
    )
    ap.add_argument(
        "--readvise",
        metavar="DIR",
        help="no runs: analyze DIR's kept baseline sessions (--keep-sessions) again with this "
        "checkout's analyzer, then report",
    )
    ap.add_argument("--only", help="these workloads only (names as in the table, comma-separated)")
    ap.add_argument("--scale", choices=("small", "large", "both"), default="both")
    ap.add_argument(
        "--write-iops", default="1000,500", help="the paced device's write IOPS, comma-separated"
    )
    ap.add_argument(
        "--tunes", action="store_true", help="also 3 lab tunes of each hot-set case (target 3)"
    )
    ap.add_argument("--scratch", help="lab scratch directory (default: the lab's)")
    ap.add_argument(
        "--keep-sessions", action="store_true", help="keep every run's session beside the results"
    )
    args = ap.parse_args()
    if args.readvise:
        n = readvise(args.readvise)
        print(f"# {n} runs analyzed again", file=sys.stderr)
        return report(os.path.join(args.readvise, "results.jsonl"))
    if args.report:
        path = os.path.join(args.report, "results.jsonl")
        if not os.path.exists(path):
            ap.error(f"--report: {path} does not exist; give the directory a --resume run kept")
        return report(path)
    if os.geteuid() != 0:
        ap.error(
            "needs root (the lab makes loop devices); --report DIR judges kept results without"
        )
    names = list(WORKLOADS) if not args.only else [n.strip() for n in args.only.split(",")]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        ap.error(f"--only: unknown workload {unknown[0]!r}; choose from {', '.join(WORKLOADS)}")
    try:
        speeds = [int(x) for x in args.write_iops.split(",")]
    except ValueError:
        ap.error(
            f"--write-iops {args.write_iops}: give whole numbers, comma-separated (e.g. 1000,500)"
        )
    pick = {"small": slice(0, 1), "large": slice(1, 2), "both": slice(0, 2)}[args.scale]
    top = args.resume or tempfile.mkdtemp(prefix="jstall-advice-", dir="/var/tmp")
    os.makedirs(os.path.join(top, "runs"), exist_ok=True)
    results = os.path.join(top, "results.jsonl")
    try:
        for iops in speeds:
            for name in names:
                fs, cases = WORKLOADS[name]
                for scale, pattern, params in cases[pick]:
                    run_case(
                        name,
                        scale,
                        pattern,
                        params,
                        fs,
                        iops,
                        results,
                        os.path.join(top, "runs"),
                        args.scratch,
                        args.keep_sessions,
                        args.tunes,
                    )
    except KeyboardInterrupt:
        print(
            "interrupted: the runs finished are kept" + (f" in {results}" if args.resume else ""),
            file=sys.stderr,
        )
    finally:
        status = report(results)
        if not args.resume:
            shutil.rmtree(top, ignore_errors=True)
    return status


if __name__ == "__main__":
    run_main(main)
