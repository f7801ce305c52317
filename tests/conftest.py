"""Shared fixtures: a scratch directory for loop-device filesystems, checked to be left
clean (no loop device, mount or throttle rule of its own remains) after each test."""

import functools
import os
import resource
import shutil
import signal
import subprocess
import uuid

import pytest

# A test run started in the background by a script has SIGINT ignored (POSIX: an asynchronous
# command of a shell without job control), and every child would inherit it: the tests that
# interrupt jstall as Ctrl-C does would see it run to its end. Ctrl-C's meaning restored here
# (a handler resets to the default in each child at exec).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

#: In an emulated guest (scripts/guest.sh test sets it) everything runs ~20x slower: every
#: timeout the tests give a child is stretched by this factor, so a test fails on a hang,
#: not on emulation.
SLOWDOWN = float(os.environ.get("JSTALL_TEST_SLOWDOWN") or 1)


def _stretch(fn):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        if kwargs.get("timeout") is not None:
            kwargs["timeout"] *= SLOWDOWN
        return fn(*args, **kwargs)
    return call


if SLOWDOWN != 1:
    subprocess.run = _stretch(subprocess.run)
    subprocess.Popen.wait = _stretch(subprocess.Popen.wait)
    subprocess.Popen.communicate = _stretch(subprocess.Popen.communicate)

def pytest_collection_modifyitems(config, items):
    """The timed tests first, the guest tests last: the guests boot once the timed tests are
    done (pytest_runtest_setup) and run beside the rest."""
    items.sort(key=lambda item: (item.get_closest_marker("guest") is not None,
                                 item.get_closest_marker("timed") is None))


_guests_pending = []


def pytest_collection_finish(session):
    if session.config.option.collectonly:
        return
    # the set-up's writes (a venv, packages) written back before the first test: every cache
    # flush of a lab device on /var/tmp also waits for the host disk's (ram_scratch_dir)
    if os.geteuid() == 0:
        os.sync()
    if not any(i.get_closest_marker("guest") for i in session.items):
        return
    _guests_pending.append(True)


def pytest_runtest_setup(item):
    """The guests boot before the first test that is not timed: emulated, they take CPU time
    and memory bandwidth that a timed test's runs would not get alike (a dbench run beside two
    booting guests did half its I/O)."""
    if _guests_pending and item.get_closest_marker("timed") is None:
        _guests_pending.clear()
        from guest_runs import RUNS

        RUNS.start()


def pytest_sessionfinish(session):
    import sys

    if "guest_runs" in sys.modules:
        sys.modules["guest_runs"].RUNS.stop()


#: CPU seconds each test took (its own process's and the children it waited for, qemu's
#: guests among them; not the kernel's threads: loop devices, jbd2, writeback). On a 2-core
#: machine the emulated guests take most of make test's CPU and decide when it ends; the
#: host's tests mostly wait (README, Tests)
_cpu = {}


def _cpu_seconds():
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    t0 = _cpu_seconds()
    yield
    _cpu[item.nodeid] = _cpu_seconds() - t0


def pytest_terminal_summary(terminalreporter):
    """Beside --durations: the tests that took the most CPU time, and the session's total."""
    if not _cpu:
        return
    tr = terminalreporter
    tr.write_sep("=", "most CPU time (the test process and its children)")
    for nodeid, cpu in sorted(_cpu.items(), key=lambda kv: -kv[1])[:15]:
        tr.write_line(f"{cpu:8.1f} s  {nodeid}")
    guests = sum(v for k, v in _cpu.items() if "test_guest_kernels" in k)
    tr.write_line(f"{sum(_cpu.values()):8.1f} s  in all {len(_cpu)} tests ({guests:.1f} s in the guest tests)")


BLKIO = "/sys/fs/cgroup/blkio"
THROTTLE_FILES = ("read_iops", "write_iops", "read_bps", "write_bps")


def throttle_rules():
    """{(limit, 'MAJ:MIN'): value} of the cgroup v1 blkio throttle rules now set."""
    rules = {}
    for name in THROTTLE_FILES:
        try:
            with open(f"{BLKIO}/blkio.throttle.{name}_device") as f:
                for line in f:
                    dev, value = line.split()
                    rules[(name, dev)] = int(value)
        except (OSError, ValueError):
            pass
    return rules


def leftovers(directory):
    """Loop devices backed by files under directory (or stacked on such a loop device), and
    mounts under it."""
    prefix = directory.rstrip("/") + "/"
    backing = {}
    for name in os.listdir("/sys/block"):
        try:
            with open(f"/sys/block/{name}/loop/backing_file") as f:
                backing[name] = f.read().strip()
        except OSError:
            pass
    loops = [name for name, path in backing.items() if path.startswith(prefix)]
    loops += [name for name, path in backing.items() if path in {f"/dev/{lp}" for lp in loops}]
    with open("/proc/self/mounts") as f:
        mounts = [line.split()[1] for line in f if line.split()[1].startswith(prefix)]
    return loops, mounts


def loop_devs():
    """{'MAJ:MIN'} of attached loop devices."""
    out = set()
    for name in os.listdir("/sys/block"):
        if os.path.exists(f"/sys/block/{name}/loop/backing_file"):
            with open(f"/sys/block/{name}/dev") as f:
                out.add(f.read().strip())
    return out


@pytest.fixture
def scratch_dir():
    """A new directory under /var/tmp for scratch filesystems; after the test, asserts that no
    loop device, mount or new throttle rule of its own is left, and removes it."""
    yield from _scratch_dir("/var/tmp")


@pytest.fixture
def ram_scratch_dir():
    """scratch_dir on a tmpfs (/dev/shm), for a test whose claim must not depend on the host's
    disk: a cache flush of the lab's device reaches the lower loop device, which fsyncs its
    image file, so on /var/tmp each journal commit also waits for the host disk's own flush.
    Measured with another process writing 64 MiB + fsync in a loop on the host disk: the
    write-then-fsync loop's commits took 70-250 ms each and were 86-93 % of its stall time
    (11-12 % when the host disk is quiet, most of it the first fsync's commit of the new
    file's blocks; 21 % in one clean-clone make test beside the guests' runs); with the image
    on /dev/shm and the same load, 6-8 %."""
    yield from _scratch_dir("/dev/shm")


def _scratch_dir(base):
    path = f"{base}/jstall-test-{uuid.uuid4().hex[:10]}"
    before = throttle_rules()
    yield path
    loops, mounts = leftovers(path)
    # A rule that is new and not on a device someone else's loop now holds is ours.
    others = loop_devs()
    new_rules = {k: v for k, v in throttle_rules().items() if k not in before and k[1] not in others}
    if loops or mounts or new_rules:  # undo them anyway, so that a failing test leaves nothing behind
        from jstall.workloads import scratch, throttle

        scratch.cleanup(path, include_alive=True)
        for name, dev in new_rules:
            throttle.set_rule(dev, name, 0)
    if not leftovers(path)[1]:
        shutil.rmtree(path, ignore_errors=True)
    assert not loops and not mounts and not new_rules, (loops, mounts, new_rules)
