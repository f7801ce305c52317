"""``jstall report``: one self-contained HTML report of a session or a sweep.

Kept light at import: pandas and plotly load inside ``run``."""

DESCRIPTION = """\
Write one self-contained HTML file (plotly, works offline: plotly.js is inlined) showing a
session: every stalled call on a timeline, colored by cause, over the journal's fill level
with the forced-checkpoint level drawn, commit phases and checkpoints as bands; latency per
call; stall time by cause; per-transaction size and phase times. For a lab sweep directory:
rates and stalls against each swept option."""

EXAMPLES = """\
examples:
  jstall report jstall-session-20261123-070000               # writes report.html
  jstall report SESSION -o /tmp/xattr.html --min-ms 50       # stalls are calls >= 50 ms
  jstall report SWEEP_DIR -o sweep.html                      # a lab sweep
  jstall report SESSION -o - > report.html                   # to stdout"""


def add_arguments(parser):
    parser.add_argument("path", metavar="SESSION|SWEEP_DIR", help="a session directory or a lab sweep directory")
    parser.add_argument("-o", "--output", default="report.html", metavar="FILE",
                        help="the HTML file to write (default report.html; '-' for stdout)")
    parser.add_argument("--min-ms", type=float, default=10.0, metavar="MS",
                        help="calls at least this slow are stalls (default 10)")


def run(args):
    import os
    import sys

    from jstall.errors import JstallError
    from jstall.session import is_sweep_dir

    from .report import session_report, sweep_report

    if is_sweep_dir(args.path):
        from .sweep import analyze_sweep

        html = sweep_report(analyze_sweep(args.path, min_ms=args.min_ms))
    else:
        from .analysis import analyze

        html = session_report(analyze(args.path, min_ms=args.min_ms))
    if args.output == "-":
        sys.stdout.write(html)
        return 0
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir):
        raise JstallError(f"{out_dir}: no such directory for -o; create it or choose another path")
    tmp = args.output + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(html)
    os.replace(tmp, args.output)
    print(f"jstall report: wrote {args.output} ({os.path.getsize(args.output) / 1e6:.1f} MB)", file=sys.stderr)
    return 0
