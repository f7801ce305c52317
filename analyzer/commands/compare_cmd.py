"""``jstall compare``: two sessions side by side, with a verdict.

Kept light at import: pandas loads inside ``run``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from jstall.errors import JstallError
from jstall.session import is_sweep_dir

from jstall.analyzer.commands.analyze_cmd import emit_text
from jstall.analyzer.commands.report_cmd import check_output, discard_output, write_page

if TYPE_CHECKING:
    import argparse

DESCRIPTION = """\
Set two sessions side by side -- before and after a change, two runs of a lab sweep, a
128-byte against a 256-byte-inode run -- and say in one line what changed, with numbers:
call latency per type (p50/p99/max), stalls and stall time by cause, journal figures and
headroom (how far the fullest moment stayed from the forced-checkpoint level), the lab's
phase times when both came from the lab (durable seconds when both have them, else until
the calls returned), and the lab options that differ. A or B may name a configuration of a
lab sweep (SWEEP_DIR:OPTION=VALUE,...): its run with the median stall time stands for it.
The --json document is described in docs/fleet.md."""

EXAMPLES = """\
examples:
  jstall compare before after                         # text: verdict, then the tables
  jstall compare i128 i256 -o compare.html            # also write the HTML report (both timelines)
  jstall compare SWEEP/001-journal_size=4M-rep1 SWEEP/003-journal_size=16M-rep1 --json
  jstall compare SWEEP:journal_size=4M,inode_size=128 SWEEP:journal_size=16M,inode_size=128
                                                      # two configurations of a sweep: of each, the
                                                      # run with the median stall time
  jstall compare A B --min-ms 100                     # stalls are calls of 100 ms or more"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", metavar="A", help="the first session (before), or SWEEP_DIR:OPTION=VALUE,...")
    parser.add_argument("b", metavar="B", help="the second session (after), or SWEEP_DIR:OPTION=VALUE,...")
    parser.add_argument("--min-ms", type=float, default=10.0, metavar="MS",
                        help="calls at least this slow are stalls (default 10)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the summary")
    parser.add_argument("-o", "--output", metavar="FILE", help="also write the HTML comparison to FILE")


def run(args: argparse.Namespace) -> int:
    # deferred on purpose: the comparison loads pandas and pyarrow, its page plotly
    from jstall.analyzer.multi.compare import compare

    if args.min_ms < 0:
        raise JstallError("--min-ms must be 0 or more")
    for p in (args.a, args.b):
        if is_sweep_dir(p):
            raise JstallError(f"{p}: a sweep directory; compare two of its runs or configurations "
                              f"({p}:inode_size=128), or see 'jstall analyze {p}' for all of them")
    page = check_output(args.output) if args.output and args.output != "-" else None  # refused before any work
    try:
        c = compare(args.a, args.b, min_ms=args.min_ms)
    except BaseException:
        if page is not None:
            discard_output(page)
        raise
    emit_text(json.dumps(c.to_dict(), indent=2, allow_nan=False) + "\n" if args.json else c.text())
    if page is not None:
        from jstall.analyzer.render.compare_report import compare_report

        write_page(page, args.output, lambda: compare_report(c), "compare")
    return 0
