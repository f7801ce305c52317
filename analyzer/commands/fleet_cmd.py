"""``jstall fleet``: many sessions summarized on Dask; worst hosts and filesystems.

Kept light at import: pandas and dask load inside ``run``."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING

from jstall.errors import JstallError

from jstall.analyzer.commands.analyze_cmd import emit_text
from jstall.analyzer.commands.report_cmd import check_output, discard_output, write_page

if TYPE_CHECKING:
    import argparse

DESCRIPTION = """\
Summarize many sessions at once -- a collection (ROOT/host=HOST/date=YYYY-MM-DD/SESSION, see
docs/fleet.md), lab sweeps, any directories holding sessions -- and rank the hosts and
filesystems that stall. Each session is analyzed as 'jstall analyze' does, on a Dask
worker: by default a local cluster of one worker process per CPU, or an existing cluster
with --scheduler. Prints one row per session and journal, the worst hosts and filesystems
and fleet-wide latency distributions per call; sessions that fail to load are listed with
their error. PATH is a directory (searched recursively), a glob, or a URL fsspec
understands (s3://, gs://, ... when its backend is installed)."""

EXAMPLES = """\
examples:
  jstall fleet /srv/jstall-sessions                      # a collection, on a local cluster
  jstall fleet '/srv/jstall-sessions/host=db*/date=2026-11-*' --json > fleet.json
  jstall fleet SWEEP_DIR other-session -o fleet.html     # also write the HTML report
  jstall fleet s3://bucket/jstall --scheduler tcp://dask-head:8786   # on an existing cluster
  jstall fleet ROOT --min-ms 100 --top 50                # stalls are calls of 100 ms or more"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="session directories, collection roots, globs, URLs")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="run on the Dask cluster at ADDRESS (e.g. tcp://HOST:8786) instead of a local one")
    parser.add_argument("--workers", type=int, metavar="N",
                        help="local cluster: N worker processes (default: one per CPU)")
    parser.add_argument("--min-ms", type=float, default=10.0, metavar="MS",
                        help="calls at least this slow are stalls (default 10)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the summary")
    parser.add_argument("-o", "--output", metavar="FILE", help="also write the fleet HTML report to FILE")
    parser.add_argument("--top", type=int, default=20, metavar="N",
                        help="rows of each table in the summary (default 20; --json lists all)")


def run(args: argparse.Namespace) -> int:
    # deferred on purpose: the fleet loads dask and pandas, its page plotly
    from jstall.analyzer.multi.fleet import run_fleet

    if args.min_ms < 0:
        raise JstallError("--min-ms must be 0 or more")
    if args.workers is not None and args.workers < 1:
        raise JstallError("--workers must be 1 or more")
    if args.scheduler and args.workers:
        raise JstallError("--workers sizes the local cluster; leave it out with --scheduler")
    page = check_output(args.output) if args.output and args.output != "-" else None  # refused before any work
    t0 = time.perf_counter()
    try:
        fleet = run_fleet(args.paths, scheduler=args.scheduler, min_ms=args.min_ms, n_workers=args.workers)
    except BaseException:
        if page is not None:
            discard_output(page)
        raise
    secs = time.perf_counter() - t0
    if args.json:
        emit_text(json.dumps(fleet.to_dict(), indent=2, allow_nan=False) + "\n")
    else:
        emit_text(fleet.text(top=args.top))
    if page is not None:
        from jstall.analyzer.render.fleet_report import fleet_report

        write_page(page, args.output, lambda: fleet_report(fleet), "fleet")
    print(f"jstall fleet: {len(fleet.summaries)} sessions in {secs:.1f} s "
          f"({'on ' + args.scheduler if args.scheduler else 'local cluster'}); {len(fleet.errors)} failed to load",
          file=sys.stderr)
    return 0
