"""The `jstall` command: one subcommand per job, each defined by the part that does it."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import TYPE_CHECKING

from . import __version__
from .errors import JstallError

if TYPE_CHECKING:
    from types import ModuleType

# subcommand -> module that defines add_arguments(parser) and run(args) -> exit status
COMMANDS = {
    "record": ("jstall.probes.record_cmd", "record jbd2 events, slow metadata calls and their stacks"),
    "analyze": ("jstall.analyzer.commands.analyze_cmd", "explain the stalls in a session or a sweep"),
    "report": ("jstall.analyzer.commands.report_cmd", "write a self-contained HTML report of a session or a sweep"),
    "fleet": ("jstall.analyzer.commands.fleet_cmd", "summarize many sessions on Dask: worst hosts and filesystems"),
    "compare": ("jstall.analyzer.commands.compare_cmd", "two sessions side by side, with a verdict"),
    "lab": ("jstall.workloads.lab_cmd",
            "reproduce stalls on scratch ext4 or XFS filesystems (run, sweep, tune, cleanup)"),
    "monitor": ("jstall.monitor.monitor_cmd", "always-on monitoring: Prometheus metrics and stall-triggered captures"),
    "top": ("jstall.monitor.top_cmd", "a live view of journals and slow calls, local or from a running monitor"),
}


def description(mod: ModuleType, default: str | None = None) -> str | None:
    """A command module's description: its ``description()`` when it builds one as the parser
    is built (e.g. from a registry), else its ``DESCRIPTION``."""
    build = getattr(mod, "description", None)
    return build() if callable(build) else getattr(mod, "DESCRIPTION", default)


def build_parser(selected: str | None = None) -> argparse.ArgumentParser:
    """The parser; only the selected subcommand's module is imported (the analyzer's
    pandas and plotly load only for the commands that use them)."""
    parser = argparse.ArgumentParser(
        prog="jstall",
        description="Find and explain ext4/jbd2 journal checkpoint stalls.",
        epilog="Run 'jstall COMMAND -h' for a command's options and examples.",
    )
    parser.add_argument("--version", action="version", version=f"jstall {__version__}")
    sub = parser.add_subparsers(dest="subcommand", metavar="COMMAND")
    sub.required = True
    for name, (module, summary) in COMMANDS.items():
        if name != selected:
            sub.add_parser(name, help=summary)
            continue
        mod = importlib.import_module(module)
        p = sub.add_parser(
            name,
            help=summary,
            description=description(mod, summary),
            epilog=getattr(mod, "EXAMPLES", None),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


class _Stderr(logging.Handler):
    """The library modules' log messages (logging.getLogger(__name__) under 'jstall'),
    shown as the command's own 'jstall: ...' lines on stderr."""

    def emit(self, record):
        print(f"jstall: {record.getMessage()}", file=sys.stderr, flush=True)


def _show_log_messages():
    log = logging.getLogger("jstall")
    if not any(isinstance(h, _Stderr) for h in log.handlers):
        log.addHandler(_Stderr())
    log.setLevel(logging.INFO)
    log.propagate = False


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _show_log_messages()
    selected = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(selected if selected in COMMANDS else None)
    args = parser.parse_args(argv)
    try:
        return args._run(args) or 0
    except JstallError as e:
        print(f"jstall {args.subcommand}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
