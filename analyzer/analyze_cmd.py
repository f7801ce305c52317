"""``jstall analyze``: explain the stalls in a session, or compare the runs of a sweep.

Kept light at import: pandas and the analysis modules load inside ``run``."""

from .causes import describe as describe_causes

DESCRIPTION = """\
Explain the stalls in a recorded session: which metadata calls stalled, for how long, what
they waited on (the causes below), how much log space the kernel had left, why it filled,
and which change removes the stall. Given a lab sweep directory, print per-configuration
tables instead. The --json document is described in docs/analysis.md.

causes:
""" + describe_causes()

EXAMPLES = """\
examples:
  jstall analyze jstall-session-20261123-070000        # summary: stalls, journals, recommendations
  jstall analyze SESSION --min-ms 100                  # only calls of 100 ms or more are stalls
  jstall analyze SESSION --json | jq .stalls.by_cause  # machine-readable, stable keys
  jstall analyze SWEEP_DIR                             # a lab sweep: rows journal size, columns phases
  jstall analyze SWEEP_DIR --json > sweep.json"""


def add_arguments(parser):
    parser.add_argument("path", metavar="SESSION|SWEEP_DIR", help="a session directory or a lab sweep directory")
    parser.add_argument("--min-ms", type=float, default=10.0, metavar="MS",
                        help="calls at least this slow are stalls (default 10)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the summary")
    parser.add_argument("--top", type=int, default=10, metavar="N",
                        help="list the N slowest stalls (default 10; --json lists 20)")


def _emit(text):
    """Write to stdout; a reader that went away (``| head``) is not an error."""
    import os
    import sys

    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def run(args):
    import json

    from jstall.errors import JstallError
    from jstall.session import is_sweep_dir

    if args.min_ms < 0:
        raise JstallError("--min-ms must be 0 or more")
    if is_sweep_dir(args.path):
        from .sweep import analyze_sweep

        sw = analyze_sweep(args.path, min_ms=args.min_ms)
        _emit(json.dumps(sw.to_dict(), indent=2, allow_nan=False) + "\n" if args.json else sw.text())
        return 0
    from .analysis import analyze
    from .text import session_summary

    a = analyze(args.path, min_ms=args.min_ms)
    if args.json:
        _emit(json.dumps(a.to_dict(top=max(args.top, 20)), indent=2, allow_nan=False) + "\n")
    else:
        _emit(session_summary(a, top=args.top))
    return 0
