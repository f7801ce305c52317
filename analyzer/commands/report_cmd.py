"""``jstall report``: one self-contained HTML report of a session or a sweep.

Kept light at import: pandas and plotly load inside ``run``."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING

from jstall.errors import JstallError
from jstall.session import is_sweep_dir

from jstall.analyzer.commands.analyze_cmd import check_options

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from typing import TextIO

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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="SESSION|SWEEP_DIR", help="a session directory or a lab sweep directory")
    parser.add_argument("-o", "--output", default="report.html", metavar="FILE",
                        help="the HTML file to write (default report.html; '-' for stdout)")
    parser.add_argument("--min-ms", type=float, default=10.0, metavar="MS",
                        help="calls at least this slow are stalls (default 10; never below the session's "
                             "recorded threshold)")


def check_output(output: str) -> TextIO | None:
    """Refuse an -o path that cannot be written, with one line naming the fix, and create its
    temporary file (``output.<pid>.tmp``, open for writing) so that the report is written only
    where writing works; returns that open file, or None for stdout ('-')."""
    if output == "-":
        return None
    if not output or output.endswith(os.sep) or os.path.isdir(output):
        example = os.path.join(output or ".", "report.html")
        raise JstallError(f"-o {output}: is a directory; give a file name, e.g. -o {example}")
    out_dir = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(out_dir):
        raise JstallError(f"{out_dir}: no such directory for -o; create it or choose another path")
    tmp = f"{output}.{os.getpid()}.tmp"
    try:
        return open(tmp, "x", encoding="utf-8")
    except OSError as e:
        raise JstallError(f"-o {output}: cannot write there ({e.strerror}); choose a directory you can write") from None


def discard_output(f: TextIO) -> None:
    f.close()
    with contextlib.suppress(OSError):
        os.unlink(f.name)


def write_page(f: TextIO, output: str, make_html: Callable[[], str], tool: str) -> None:
    """Write the page ``make_html()`` returns to ``f`` (the temporary file check_output
    opened), move it to ``output`` and say so on stderr; on any error or interruption the
    temporary file is removed and nothing is left at ``output``."""
    try:
        html = make_html()
        try:
            f.write(html)
            f.close()
            os.replace(f.name, output)
        except OSError as e:
            raise JstallError(f"-o {output}: cannot write the page ({e.strerror}); choose another path") from None
    except BaseException:
        discard_output(f)
        raise
    print(f"jstall {tool}: wrote {output} ({os.path.getsize(output) / 1e6:.1f} MB)", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    # deferred on purpose, as below: the pages load plotly, the analysis pandas and pyarrow
    from jstall.analyzer.render.report import session_report, sweep_report

    check_options(args)
    sweep = is_sweep_dir(args.path)
    session = None
    if not sweep:
        from jstall.analyzer.session.load import load_session

        session = load_session(args.path)  # a bad session path is refused before -o is touched
    f = check_output(args.output)

    def page():
        if sweep:
            from jstall.analyzer.multi.sweep import analyze_sweep

            return sweep_report(analyze_sweep(args.path, min_ms=args.min_ms))
        from jstall.analyzer.analysis import analyze

        return session_report(analyze(session, min_ms=args.min_ms))

    if f is None:
        sys.stdout.write(page())
        return 0
    write_page(f, args.output, page, "report")
    return 0
