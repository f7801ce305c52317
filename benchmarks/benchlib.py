"""What every benchmark script here shares: its argument parser, a scratch directory it
removes, the machine's load, CPU and memory readings, stopping a child, the verdict line.

The scripts run as ``python benchmarks/NAME.py``; this directory is then on ``sys.path``, and
importing this module puts tests/ there too, for the hand-built sessions (``synthetic``)."""

import argparse
import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile

#: tests/, whose ``synthetic`` module writes hand-built sessions in the real format
TESTS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)
#: the environment of a benchmark's child Python that imports tests/ modules (synthetic)
CHILD_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (TESTS_DIR, os.environ.get("PYTHONPATH")) if p)}


def run_main(main):
    """Exit with ``main()``'s status; a reader that went away (``| head``) ends it quietly, as
    it ends jstall's own commands (analyze_cmd.emit_text)."""
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 0
    sys.exit(status)


def parser(doc):
    """An argument parser whose --help is the script's docstring, line breaks kept."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def options(doc, **defaults):
    """Parse the command line of a script whose options are all ``--name VALUE`` with a
    default: each keyword is an option (``dd_bytes`` is ``--dd-bytes``) whose type is its
    default's; ``(default, help)`` adds a help text; a default of False is a flag, None a
    string (e.g. a path)."""
    ap = parser(doc)
    for name, value in defaults.items():
        default, text = value if isinstance(value, tuple) else (value, None)
        flag = "--" + name.replace("_", "-")
        if default is False:
            ap.add_argument(flag, action="store_true", help=text)
        elif default is None:
            ap.add_argument(flag, metavar=name.upper(), help=text)
        else:
            ap.add_argument(flag, type=type(default), default=default, help=text)
    return ap.parse_args()


@contextlib.contextmanager
def workdir(prefix, keep=None):
    """``keep`` when given (kept; the caller makes it), else a new temporary directory
    removed at the end."""
    if keep:
        yield keep
        return
    tmp = tempfile.mkdtemp(prefix=prefix)
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def loadavg():
    """The 1, 5 and 15-minute load averages, as /proc/loadavg gives them."""
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cpu_seconds():
    """User + system CPU seconds of this process (all its threads)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def rss_kib(pid="self"):
    """A process' resident set size in KiB (VmRSS; 0 once it has gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def interrupt(proc, timeout=60):
    """SIGINT to a child (a tracer ends its session cleanly on it), then its output; killed
    when it has not ended after ``timeout`` seconds."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()


def verdict(ok):
    """Print PASS or FAIL; the script's exit status (0 when the targets were met)."""
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1
