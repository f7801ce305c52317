"""``jstall analyze``: explain the stalls in a session, or compare the runs of a sweep.

Kept light at import: pandas and the analysis modules load inside ``run``."""

from __future__ import annotations

import io
import json
import os
import sys
from typing import TYPE_CHECKING

from jstall.errors import JstallError
from jstall.session import is_sweep_dir, is_tune_dir

from jstall.analyzer.multi.tune import load, print_result
from jstall.analyzer.stalls.causes import describe as describe_causes

if TYPE_CHECKING:
    import argparse

    from jstall.analyzer.analysis import Analysis

_DESCRIPTION = """\
Explain the stalls in a recorded session: which metadata calls stalled, for how long, what
they waited on (the causes below), how much log space the kernel had left, why it filled,
and which change removes the stall. The header names the traced command and its exit
status, the filters, the traced calls and the recording's status; stall start times are
wall clock (local time zone; TZ=UTC for UTC) beside seconds since the start, so they line
up with an application's logs; stall time is broken down per process; --from/--to analyze
a time window only. Given a lab sweep directory, print per-configuration tables instead.
The --json document is described in docs/analysis.md.

causes:
"""


def description() -> str:
    """The description, listing the causes registered when the parser is built (after any
    causes.register), so a new cause is described without an edit here."""
    return _DESCRIPTION + describe_causes()


EXAMPLES = """\
examples:
  jstall analyze jstall-session-20261123-070000        # summary: stalls, journals, recommendations
  jstall analyze SESSION --min-ms 100                  # only calls of 100 ms or more are stalls
  jstall analyze SESSION --from 11:02:00 --to 11:03:30 # only that window (local wall clock)
  jstall analyze SESSION --from +60 --to +90           # seconds 60 to 90 after the start
  TZ=UTC jstall analyze SESSION                        # wall-clock times in UTC
  jstall analyze SESSION --json | jq .stalls.by_cause  # machine-readable, stable keys
  jstall analyze SWEEP_DIR                             # a lab sweep: rows journal size, columns phases
  jstall analyze SWEEP_DIR --json > sweep.json
  jstall analyze TUNE_DIR                              # a lab tune: each run's journal, stalls, durable time"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="SESSION|SWEEP_DIR|TUNE_DIR",
                        help="a session directory, a lab sweep directory or a lab tune directory")
    parser.add_argument("--min-ms", type=float, default=None, metavar="MS",
                        help="calls at least this slow are stalls (default 10; never below the session's "
                             "recorded threshold: faster calls were not stored)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the summary")
    parser.add_argument("--top", type=int, default=10, metavar="N",
                        help="list the N slowest stalls and processes (default 10; --json lists 20)")
    add_window_arguments(parser)


def add_window_arguments(parser: argparse.ArgumentParser) -> None:
    """``--from``/``--to``: analyze only a time window of a session."""
    parser.add_argument("--from", dest="time_from", metavar="TIME",
                        help="start of the window: HH:MM[:SS[.fff]] local wall clock, ISO 8601, or +SECONDS "
                             "since the session start")
    parser.add_argument("--to", dest="time_to", metavar="TIME", help="end of the window (same forms; excluded)")


def check_options(args: argparse.Namespace) -> None:
    """Refuse bad option values with one line (JstallError) before any work."""
    if args.min_ms is not None and not args.min_ms >= 0:
        raise JstallError(f"--min-ms {args.min_ms:g}: give 0 or more milliseconds")
    top = getattr(args, "top", None)
    if top is not None and top < 1:
        raise JstallError(f"--top {top}: give a count of 1 or more")


def load_analysis(args: argparse.Namespace) -> Analysis:
    """The session at ``args.path`` (restricted to ``--from``/``--to``) analyzed at
    ``--min-ms``: an Analysis.  Sweeps take no window."""
    # deferred on purpose: the analysis loads pandas and pyarrow
    from jstall.analyzer.analysis import analyze
    from jstall.analyzer.session.load import load_session
    from jstall.analyzer.stalls.find import DEFAULT_MIN_MS
    from jstall.analyzer.session.window import resolve, restrict

    session = load_session(args.path)
    w = resolve(session, getattr(args, "time_from", None), getattr(args, "time_to", None))
    if w is not None:
        session = restrict(session, *w)
    return analyze(session, min_ms=DEFAULT_MIN_MS if args.min_ms is None else args.min_ms)


def check_sweep_options(args: argparse.Namespace) -> None:
    if getattr(args, "time_from", None) is not None or getattr(args, "time_to", None) is not None:
        raise JstallError(f"{args.path}: --from/--to apply to one session, not a sweep or a tune; "
                          "analyze a run's session")


def emit_text(text: str) -> None:
    """Write to stdout; a reader that went away (``| head``) is not an error."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def run(args: argparse.Namespace) -> int:
    check_options(args)
    if is_tune_dir(args.path):  # a lab tune: the curve it walked, from tune.json
        check_sweep_options(args)
        r = load(args.path)
        if args.json:
            emit_text(json.dumps(r.to_dict(), indent=2) + "\n")
        else:
            buf = io.StringIO()
            print_result(r, buf)
            emit_text(buf.getvalue())
        return 0
    if is_sweep_dir(args.path):
        # deferred on purpose, as below: the sweep's and the session's analysis load pandas and pyarrow
        from jstall.analyzer.stalls.find import DEFAULT_MIN_MS
        from jstall.analyzer.multi.sweep import analyze_sweep

        check_sweep_options(args)
        sw = analyze_sweep(args.path, min_ms=DEFAULT_MIN_MS if args.min_ms is None else args.min_ms)
        emit_text(json.dumps(sw.to_dict(), indent=2, allow_nan=False) + "\n" if args.json else sw.text())
        return 0
    from jstall.analyzer.render.text import session_summary

    a = load_analysis(args)
    if args.json:
        emit_text(json.dumps(a.to_dict(top=max(args.top, 20)), indent=2, allow_nan=False) + "\n")
    else:
        emit_text(session_summary(a, top=args.top))
    return 0
