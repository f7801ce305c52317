"""The `jstall lab` command: run, sweep, cleanup (see docs/lab.md)."""

import argparse
import datetime
import json
import os
import signal
import sys

from jstall import system
from jstall.errors import JstallError
from jstall.probes.syscalls import parse_calls
from jstall.session import collect_here
from jstall.units import parse_size

from jstall.analyzer.multi.tune import print_result

from .cleanup import cleanup
from .lab import prepare, run_lab
from .loopdev import LAB_NEEDS_ROOT
from .options import (ALL_OPTIONS, FS_OPTIONS, PATTERN_NAMES, PATTERN_OPTIONS, RUN_OPTIONS, SWEEP_KINDS,  # noqa: F401
                      config_from, parse_value)
from .options import flag as _flag
from .scratchfs import Terminated
from .sweep_run import run_sweep
from .tune import tune

DESCRIPTION = """\
Reproduce journal stalls on scratch ext4 or XFS filesystems. 'run' makes a loop-device ext4
(or XFS, --fs-type xfs) with the options given (journal or log size, inode size, external
journal or log, fast_commit, data mode, log buffers, a slow-device profile), records with
jstall's probes while a workload pattern runs on it (xattr, fdtree, smallfile, any command,
or tenants: several commands at once, each in a cgroup of its own, one of them optionally on
a second filesystem), times each phase, and removes everything again, leaving a session
directory whose metadata holds the configuration and the phase timings. 'sweep' runs 'run'
over every combination of comma-separated option values. 'tune' finds the smallest journal
(or XFS log) big enough for the workload by running it, and compares the other remedies.
'cleanup' removes what a crashed run left behind. Needs root."""

SWEEP_DESCRIPTION = """\
Run 'jstall lab run' over the cartesian product of comma-separated option values, times
--repeat, one session per run under the sweep directory -o. Writes results.parquet/.csv
(one row per run: configuration, per-phase seconds, ops and rates) and summary.parquet/.csv
(mean and standard deviation per configuration). Running the same command again resumes:
finished runs are kept, unfinished ones redone. Needs root."""

CLEANUP_DESCRIPTION = """\
Remove what crashed or killed lab runs left under the scratch directory: blkio throttle
rules, mounts, loop devices backed by the run's own images, the images and run directories,
found by the jstall-lab.json marker each run writes. Runs whose process still runs and
anything without a marker are left alone. Needs root (--dry-run does not)."""

RUN_EXAMPLES = """\
examples:
  # the classic stall in under a minute: 128-byte inodes (every attribute in its own block),
  # a 4 MiB journal, a device that takes 2,000 writes/s; then the same with 256-byte inodes
  sudo jstall lab run xattr --fs-size 256M --journal-size 4M --inode-size 128 \\
      --files 3000 --updates 12000 --write-iops 2000 -o i128
  sudo jstall lab run xattr --fs-size 256M --journal-size 4M --inode-size 256 \\
      --files 3000 --updates 12000 --write-iops 2000 -o i256
  jstall analyze i128
  # the same updates on XFS: an 8 MiB log, 64 KiB log buffers (mount -o logbsize=64k)
  sudo jstall lab run xattr --fs-type xfs --fs-size 320M --journal-size 8M --log-buffer-size 64K \\
      --files 3000 --updates 12000 --write-iops 2000 -o xfs8m
  # the full-size classic report (5,000 files, 2 attributes of 16 bytes, 54,247 updates) on a
  # disk that takes 200 writes/s: minutes with a 32 MiB journal and 128-byte inodes
  sudo jstall lab run xattr --inode-size 128 --journal-size 32M --write-iops 200 -o classic
  # a quick look at a pattern, nothing recorded
  sudo jstall lab run fdtree --shape deep --no-record
  # 1,000 files of about 64 KiB per process, 4 processes, the filesystem on an emulated
  # disk, its journal on a second, unthrottled loop device (a few minutes: the page cache
  # is dropped before each phase after the first, and the disk reads 150 blocks a second)
  sudo jstall lab run smallfile --jobs 4 --journal-device --device-profile hdd
  # any program, with the job's directory on the scratch filesystem as its working directory
  # (fs_mark is in Debian's fsmark package)
  sudo jstall lab run command --command 'fs_mark -d . -n 2000 -s 0' --journal-size 16M
  # two tenants, each in its own cgroup (sync.scope, storm.scope): a 4 KiB write + fsync loop
  # beside a metadata storm, the loop ended when the storm is done; then the storm on a
  # filesystem (and a paced device) of its own, as analyze's own_filesystem advice says
  sudo jstall lab run tenants --journal-size 4M --inode-size 128 --write-iops 1000 \\
      --tenant 'sync=sh -c "while :; do dd if=/dev/zero of=f bs=4k count=1 conv=fsync; done"' \\
      --tenant 'storm=fs_mark -d . -n 20000 -s 0' --until storm -o shared
  sudo jstall lab run tenants ... --own-filesystem storm -o apart
"""

SWEEP_EXAMPLES = """\
examples:
  # journal size × inode size on the xattr pattern, 3 repeats of each; re-running resumes
  sudo jstall lab sweep xattr --journal-size 16M,64M,256M,1G --inode-size 128,256 --repeat 3 -o sweep1
  jstall analyze sweep1
  # metadata rates against journal size, shallow and deep trees (booleans take on,off)
  sudo jstall lab sweep fdtree --shape shallow,deep --journal-size 16M,64M,256M,1G -o fdtree-sweep
  # ext4 against XFS, each with a 16 MiB and a 64 MiB journal (log)
  sudo jstall lab sweep fdtree --fs-type ext4,xfs --journal-size 16M,64M --write-iops 1000 -o ext4-xfs
  # internal against external journal, the filesystem on an emulated disk
  sudo jstall lab sweep smallfile --device-profile hdd --journal-device off,on --repeat 2 -o extj
"""

TUNE_DESCRIPTION = """\
Find, by running the workload, the smallest journal big enough for it, and
what 256-byte inodes, an external journal and fast_commit each do to the same workload at
the starting journal size (--journal-size). Big enough, as jstall analyze and compare judge
it too: forced-checkpoint waits (every task's, queued ones included) at most 1% of the run's
time and none of 10 ms or more. From the starting size the journal is doubled until a run
is big enough (halved while it is), then the sizes between are bisected (whole MiB, at most
eight steps per doubling, at most 40% of --fs-size). With the comparisons, jstall analyze's
advice from the starting run is run too, predicted against measured. Every run is recorded;
the sessions and tune.json go to -o. Durable phase seconds side by side. Needs root.

With --fs-type xfs the size searched is the internal log's, judged by the same bound on its
log-space waits (reservations asleep in xlog_grant_head_wait); sizes run from 2M (a size
mkfs.xfs refuses for the geometry is not possible: the search goes on from the smallest it
names) to the largest log that fits in one allocation group. The comparisons are an
external log and eight 256 KiB log buffers, and the advice checked is analyze's log size."""

TUNE_EXAMPLES = """\
examples:
  # a tiny xattr workload on 128-byte inodes, a disk taking 2,000 writes/s (a minute or two)
  sudo jstall lab tune xattr --fs-size 256M --journal-size 4M --inode-size 128 \\
      --files 1500 --updates 6000 --write-iops 2000 -o tune-xattr
  # fdtree deep trees on an emulated hdd; the search only, as JSON
  sudo jstall lab tune fdtree --shape deep --journal-size 4M --fs-size 1G --device-profile hdd \\
      --no-compare --json -o tune-fdtree
  # any program: confirm a journal size before changing production
  sudo jstall lab tune command --command 'fs_mark -d . -n 2000 -s 0' --journal-size 16M -o tune-fsmark
  # XFS: 20,000 empty files in 200 directories made and removed, from an 8 MiB log, on a disk
  # taking 300 writes/s (about a minute)
  sudo jstall lab tune fdtree --fanout 200 --files-per-dir 100 --file-size 0 --fs-type xfs \
      --fs-size 400M --journal-size 8M --max-journal-size 64M --write-iops 300 -o tune-xfs
"""

CLEANUP_EXAMPLES = """\
examples:
  # what a crashed or killed run left under the default scratch directory, then remove it
  sudo jstall lab cleanup --dry-run
  sudo jstall lab cleanup
  # the same for runs made with --scratch
  sudo jstall lab cleanup --scratch /var/tmp/my-lab
"""

EXAMPLES = RUN_EXAMPLES + "\n" + SWEEP_EXAMPLES.replace("examples:\n", "") + "\n" + \
    TUNE_EXAMPLES.replace("examples:\n", "") + "\n" + CLEANUP_EXAMPLES.replace("examples:\n", "")

#: metavars of options that take a number or text
METAVARS = {"inode_size": "BYTES", "block_size": "BYTES", "commit_interval": "SECONDS", "mkfs_options": "OPTIONS",
            "mount_options": "OPT,...", "command": "COMMAND", "jobs": "N", "seed": "N",
            "tenant": "NAME=COMMAND", "own_filesystem": "NAME,...", "until": "NAME"}


def _add_options(p, sweep):
    groups = [("filesystem", FS_OPTIONS), ("workload pattern", PATTERN_OPTIONS), ("run", RUN_OPTIONS)]
    for title, opts in groups:
        g = p.add_argument_group(title + (" (comma-separated values are swept)" if sweep else ""))
        for dest, kind, default, help_ in opts:
            sweepable = kind.split(":")[0] in SWEEP_KINDS
            if kind == "bool" and not sweep:
                g.add_argument(_flag(dest), dest=dest, action=argparse.BooleanOptionalAction, default=None,
                               help=help_ + (f" (default: {'on' if default else 'off'})"
                                             if default is not None else ""))
                continue
            meta = "ON|OFF" if kind == "bool" else ("LIST" if sweep and sweepable else
                                                     ("BYTES" if kind in ("size", "rate") else
                                                      METAVARS.get(dest, "N" if kind == "int" else None)))
            if kind == "bool" and default is not None:
                default = "on" if default else "off"
            if kind == "list":
                g.add_argument(_flag(dest), dest=dest, metavar=METAVARS.get(dest), action="append", default=None,
                               help=help_)
                continue
            if kind.startswith("choice:") and not sweep:
                g.add_argument(_flag(dest), dest=dest, choices=kind.split(":", 1)[1].split("|"), default=None,
                               help=help_ + (f" (default: {default})" if default is not None else ""))
            else:
                g.add_argument(_flag(dest), dest=dest, metavar=meta, default=None,
                               help=help_ + (f" (default: {default})" if default is not None else ""))
    p.add_argument("--min-ms", metavar="MS", type=float, default=1.0,
                   help="record calls at or above this many ms one by one (default 1)")
    p.add_argument("--scratch", metavar="DIR", default=None,
                   help="scratch directory for images and mounts (default /var/tmp/jstall-lab)")
    p.add_argument("--no-record", dest="record", action="store_false", help="run the pattern without recording")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (default: when stderr is a terminal)")


def add_arguments(parser):
    sub = parser.add_subparsers(dest="lab_command", metavar="ACTION")
    sub.required = True
    fmt = argparse.RawDescriptionHelpFormatter
    run = sub.add_parser("run", help="one run: scratch ext4 or XFS, record a pattern, tear down", formatter_class=fmt,
                         description=DESCRIPTION, epilog=RUN_EXAMPLES)
    run.add_argument("pattern", choices=PATTERN_NAMES, help="the workload")
    run.add_argument("-o", "--output", metavar="DIR", help="session directory (default jstall-lab-PATTERN-TIME)")
    run.add_argument("--json", action="store_true", help="print the lab metadata as JSON instead of the summary")
    run.add_argument("--calls", metavar="GROUP,...",
                     help="calls the recording traces, as jstall record --calls (default: metadata,fsync)")
    run.add_argument("--collect-dir", metavar="ROOT",
                     help="write the session to ROOT/host=HOST/date=YYYY-MM-DD/NAME (docs/fleet.md), not -o")
    _add_options(run, sweep=False)
    run.set_defaults(_lab=_run)
    sw = sub.add_parser("sweep", help="run over every combination of comma-separated option values",
                        formatter_class=fmt, description=SWEEP_DESCRIPTION, epilog=SWEEP_EXAMPLES)
    sw.add_argument("pattern", choices=PATTERN_NAMES, help="the workload")
    sw.add_argument("-o", "--output", metavar="DIR", required=True, help="sweep directory (re-run to resume)")
    sw.add_argument("--repeat", metavar="N", type=int, default=1, help="runs of each configuration (default 1)")
    _add_options(sw, sweep=True)
    sw.set_defaults(_lab=_sweep)
    tu = sub.add_parser("tune", help="the smallest journal (or XFS log) big enough, and the other remedies",
                        formatter_class=fmt, description=TUNE_DESCRIPTION, epilog=TUNE_EXAMPLES)
    tu.add_argument("pattern", choices=PATTERN_NAMES, help="the workload")
    tu.add_argument("-o", "--output", metavar="DIR", help="results directory (default jstall-tune-PATTERN-TIME)")
    tu.add_argument("--json", action="store_true", help="print the result as JSON instead of the text")
    tu.add_argument("--threshold-ms", metavar="MS", type=float, default=10.0,
                    help="calls at or above this are stalls, the STALLS and CP_STALLS (XFS: LS_STALLS) columns "
                         "(default 10)")
    tu.add_argument("--max-journal-size", metavar="SIZE", default=None,
                    help="largest journal to try (default: 40%% of --fs-size; XFS: the largest log that "
                         "fits in one allocation group)")
    tu.add_argument("--no-compare", dest="compare", action="store_false",
                    help="search the threshold only; skip 256-byte inodes, external journal, fast_commit "
                         "(XFS: external log, 256 KiB log buffers) and the advice check")
    _add_options(tu, sweep=False)
    tu.set_defaults(_lab=_tune)
    cl = sub.add_parser("cleanup", help="remove what crashed runs left (loops, mounts, throttles, images)",
                        formatter_class=fmt, description=CLEANUP_DESCRIPTION, epilog=CLEANUP_EXAMPLES)
    cl.add_argument("--scratch", metavar="DIR", default=None, help="scratch directory (default /var/tmp/jstall-lab)")
    cl.add_argument("--dry-run", action="store_true", help="list what would be removed; change nothing")
    cl.set_defaults(_lab=_cleanup)


def run(args):
    return args._lab(args)


def _values(args, sweep):
    """{dest: parsed value} of a run's options; for a sweep {dest: [(text, value), ...]}."""
    out = {}
    for dest, kind, _, _ in ALL_OPTIONS:
        raw = getattr(args, dest)
        if raw is None:
            continue
        if not sweep:
            out[dest] = raw if kind in ("bool",) or kind.startswith("choice:") else parse_value(dest, kind, raw)
        elif kind.split(":")[0] in SWEEP_KINDS:
            texts = [t.strip() for t in str(raw).split(",")]
            if any(not t for t in texts) or len(set(texts)) != len(texts):
                raise JstallError(f"{_flag(dest)} {raw}: give distinct comma-separated values, e.g. 16M,64M")
            out[dest] = [(t, parse_value(dest, kind, t)) for t in texts]
        else:
            out[dest] = [("; ".join(raw) if isinstance(raw, list) else raw, raw)]
    return out


def _progress(args):
    return sys.stderr.isatty() if args.progress is None else args.progress


# ---- actions ----------------------------------------------------------------------------


def _run(args):
    values = _values(args, sweep=False)
    out_dir = args.output
    if args.record and not out_dir:
        out_dir = f"jstall-lab-{args.pattern}-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    if args.collect_dir and args.record:
        if args.output:
            raise JstallError("give either -o DIR or --collect-dir ROOT, not both")
        out_dir = collect_here(args.collect_dir, os.path.basename(out_dir))
    cfg = config_from(values, args.pattern, record=args.record, min_ms=args.min_ms, output_dir=out_dir,
                      scratch_dir=args.scratch, progress=_progress(args))
    if args.calls:
        cfg.calls = parse_calls(args.calls)
    prepare(cfg)
    system.require_root(LAB_NEEDS_ROOT)
    try:
        res = run_lab(cfg, out=None if args.json else sys.stdout)
    except KeyboardInterrupt as e:
        kept = ""
        if out_dir and (os.path.exists(os.path.join(out_dir, "metadata.json"))
                        or os.path.exists(os.path.join(out_dir, "lab.json"))):
            kept = f"; the session so far is in {out_dir} (status interrupted)"
        print(f"jstall lab run: interrupted, everything it set up is removed{kept}", file=sys.stderr)
        if isinstance(e, Terminated):
            return 128 + signal.SIGTERM
        raise
    if args.json:
        json.dump(res.lab, sys.stdout, indent=2, sort_keys=True)
        print()
    if res.exit_status:
        print(f"jstall lab run: the command exited with status {res.exit_status}", file=sys.stderr)
        return 1
    return 0


def _sweep(args):
    values = _values(args, sweep=True)
    if args.repeat < 1:
        raise JstallError(f"--repeat {args.repeat}: give 1 or more")
    return run_sweep(args.pattern, values, repeat=args.repeat, out_dir=args.output, record=args.record,
                     min_ms=args.min_ms, scratch_dir=args.scratch, progress=_progress(args), out=sys.stdout)


def _tune(args):
    if not args.record:
        raise JstallError("lab tune reads each run's recording; drop --no-record")
    values = _values(args, sweep=False)
    out_dir = args.output or f"jstall-tune-{args.pattern}-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    cfg = config_from(values, args.pattern, scratch_dir=args.scratch)
    max_mib = None
    if args.max_journal_size is not None:
        max_mib = parse_size(args.max_journal_size, "--max-journal-size") >> 20
    try:
        res = tune(args.pattern, cfg.params, cfg.fs, jobs=cfg.jobs, seed=cfg.seed, threshold_ms=args.threshold_ms,
                   max_mib=max_mib, compare=args.compare, output_dir=out_dir, scratch_dir=args.scratch,
                   min_ms=args.min_ms)
    except KeyboardInterrupt as e:
        print(f"jstall lab tune: interrupted, everything it set up is removed; the runs so far are in {out_dir}",
              file=sys.stderr)
        if isinstance(e, Terminated):
            return 128 + signal.SIGTERM
        raise
    if args.json:
        json.dump(res.to_dict(), sys.stdout, indent=2)
        print()
    else:
        print_result(res, sys.stdout)
    return 0


def _cleanup(args):
    if not args.dry_run:
        system.require_root("cleanup detaches loop devices and unmounts: run it as root (sudo), or add --dry-run")
    done = cleanup(args.scratch, dry_run=args.dry_run)
    if not done:
        print("nothing to clean up")
    for run_dir, lines in done:
        print(run_dir)
        for line in lines:
            print("  " + line)
    return 0
