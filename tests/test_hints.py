"""Every jstall command line the project prints or documents (hints in error messages,
recommendations, --help examples, README and docs/) names only options that command has."""

import argparse
import glob
import os
import re

import pytest

from jstall.cli import COMMANDS, build_parser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = [p for d in ("analyzer", "probes", "monitor", "workloads", "src/jstall", "scripts", "benchmarks")
           for p in glob.glob(os.path.join(ROOT, d, "**", "*.py"), recursive=True)]
DOCS = [os.path.join(ROOT, "README.md")] + glob.glob(os.path.join(ROOT, "docs", "*.md"))
# "jstall SUB[ ACTION] ...": the rest of the command up to a quote, a backtick or the line's end
COMMAND = re.compile(r"\bjstall (" + "|".join(COMMANDS) + r")\b((?: (?:run|sweep|tune|cleanup)\b)?)([^'\"`\n]*)")


def options_of(sub, action):
    """Every option string the parser of 'jstall SUB [ACTION]' takes."""
    p = build_parser(sub)
    (subparsers,) = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    sp = subparsers.choices[sub]
    if action:
        (inner,) = [a for a in sp._actions if isinstance(a, argparse._SubParsersAction)]
        sp = inner.choices[action]
    return {o for a in sp._actions for o in a.option_strings}


def command_lines():
    for path in SOURCES + DOCS:
        with open(path, errors="replace") as f:
            for n, line in enumerate(f, 1):
                for m in COMMAND.finditer(line):
                    opts = re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", m.group(3))
                    if opts:
                        yield os.path.relpath(path, ROOT), n, m.group(1), m.group(2).strip(), opts


LINES = list(command_lines())


def test_the_scan_finds_the_documented_commands():
    assert len(LINES) > 50 and {sub for _, _, sub, _, _ in LINES} >= {"record", "analyze", "lab", "monitor", "fleet"}


@pytest.mark.parametrize("sub", sorted(COMMANDS))
def test_every_option_named_exists(sub):
    known = {}
    bad = []
    for path, n, s, action, opts in LINES:
        if s != sub or (sub == "lab" and not action):
            continue
        have = known.setdefault(action, options_of(sub, action))
        bad += [f"{path}:{n}: jstall {sub} {action} {o}".replace("  ", " ") for o in opts if o not in have]
    assert not bad, "\n".join(bad)
