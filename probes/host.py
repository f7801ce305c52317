"""What the running kernel offers the probes: privileges, tracefs, tracepoints,
kernel headers for bcc's includes, and HZ."""

import gzip
import logging
import os
import subprocess
import sys
import time

from jstall import system
from jstall.errors import JstallError

TRACEFS = "/sys/kernel/tracing"
COMMON_HZ = (100, 250, 300, 1000)

log = logging.getLogger(__name__)


def require_root():
    system.require_root("tracing needs root: run it with sudo")


def ensure_tracefs():
    """Mount tracefs at /sys/kernel/tracing when nothing is mounted there yet."""
    if os.path.isdir(os.path.join(TRACEFS, "events")):
        return
    res = subprocess.run(["mount", "-t", "tracefs", "nodev", TRACEFS], capture_output=True, text=True)
    if res.returncode != 0 or not os.path.isdir(os.path.join(TRACEFS, "events")):
        raise JstallError(f"tracefs is not mounted and mounting it failed ({res.stderr.strip()}); "
                          f"run: mount -t tracefs nodev {TRACEFS}")
    log.info("mounted tracefs at %s", TRACEFS)


def tracepoint_exists(category, event):
    return os.path.isdir(os.path.join(TRACEFS, "events", category, event))


def tracepoint_has_field(category, event, field):
    """Does the tracepoint's record (its format file) have this field?"""
    try:
        with open(os.path.join(TRACEFS, "events", category, event, "format")) as f:
            return any(line.strip().startswith("field:") and line.split(";")[0].split()[-1] == field for line in f)
    except OSError:
        return False


#: The oldest kernel the probes run on: BPF task storage for tracing programs and
#: bpf_get_current_task_btf (5.11), ring buffers (5.8), BTF-typed raw tracepoints (5.5).
OLDEST_KERNEL = (5, 11)


def kernel_version(release=None):
    """(major, minor) of a kernel release string such as '6.1.0-56-amd64'."""
    release = release or os.uname().release
    parts = release.split("-", 1)[0].split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return None


def require_kernel(release=None):
    """Refuse, in one line, a kernel older than OLDEST_KERNEL or one without BTF."""
    release = release or os.uname().release
    version = kernel_version(release)
    if version is not None and version < OLDEST_KERNEL:
        raise JstallError(f"kernel {release} is older than {OLDEST_KERNEL[0]}.{OLDEST_KERNEL[1]}, the oldest jstall "
                          "supports (BPF task storage, ring buffers); run it on a newer kernel")
    if not btf_path_ok():
        raise JstallError("/sys/kernel/btf/vmlinux is missing: this kernel has no BTF; use a kernel built with "
                          "CONFIG_DEBUG_INFO_BTF=y")


def syscall_exists(name):
    """Does this kernel have the syscall (its syscalls:sys_enter_<name> tracepoint)? True
    when the kernel has no syscall tracepoints at all (nothing to tell by)."""
    if not os.path.isdir(os.path.join(TRACEFS, "events", "syscalls")):
        return True
    return tracepoint_exists("syscalls", f"sys_enter_{name}")


def kernel_headers_env():
    """Environment for bcc: BCC_KERNEL_SOURCE pointing at the project's generic-header
    tree when the running kernel has no headers of its own (scripts/kernel-headers.sh)."""
    release = os.uname().release
    if own_headers(release):
        return {}
    if os.environ.get("BCC_KERNEL_SOURCE"):
        return {}
    candidates = [
        os.path.join(sys.prefix, "share", "jstall", "kernel-headers"),
        os.path.join(os.path.dirname(__file__), "..", ".venv", "share", "jstall", "kernel-headers"),
    ]
    for c in candidates:
        if os.path.exists(os.path.join(c, "include", "linux", "kconfig.h")):
            return {"BCC_KERNEL_SOURCE": os.path.realpath(c)}
    raise JstallError(
        f"no kernel headers for {release}: install linux-headers-{release}, or run "
        "'sh scripts/setup.sh' (make demo does) to build the generic-header fallback"
    )


def own_headers(release=None, root="/lib/modules"):
    """Are the kernel's own headers installed? bcc takes them from /lib/modules/<release>/build
    and, where a distribution splits them (Debian: build/ the generated files, source/ the
    -common package with include/linux/kconfig.h), from source/ too."""
    release = release or os.uname().release
    return any(os.path.exists(f"{root}/{release}/{d}/include/linux/kconfig.h") for d in ("build", "source"))


def config_hz():
    """CONFIG_HZ from /proc/config.gz, /boot/config-<release> or the kernel's headers'
    .config, or None."""
    release = os.uname().release
    paths = ["/proc/config.gz", f"/boot/config-{release}", f"/lib/modules/{release}/build/.config"]
    for path in paths:
        try:
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rt") as f:
                for line in f:
                    if line.startswith("CONFIG_HZ="):
                        return int(line.split("=", 1)[1])
        except OSError:
            continue
    return None


def kernel_hz():
    """(HZ, how it was found): CONFIG_HZ from the kernel's config ("config"), else jiffies
    counted over 0.25 s ("measured"), else (None, None)."""
    hz = config_hz()
    if hz:
        return hz, "config"
    first = read_jiffies()
    time.sleep(0.25)
    measured = measured_hz(first, read_jiffies())
    return (measured[0], "measured") if measured else (None, None)


#: the writeback settings a session keeps (/proc/sys/vm): a dirty metadata block pins the
#: journal's tail until a checkpoint writes it home or writeback, after dirty_expire, does
WRITEBACK_SETTINGS = ("dirty_expire_centisecs", "dirty_writeback_centisecs", "dirty_background_ratio",
                      "dirty_ratio", "dirty_background_bytes", "dirty_bytes")


def writeback_settings():
    """{setting: value} of /proc/sys/vm's writeback settings (those readable)."""
    out = {}
    for name in WRITEBACK_SETTINGS:
        try:
            with open(f"/proc/sys/vm/{name}") as f:
                out[name] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return out


def read_jiffies():
    """(jiffies, CLOCK_MONOTONIC ns) from /proc/timer_list, or None."""
    try:
        with open("/proc/timer_list") as f:
            for line in f:
                if line.startswith("jiffies:"):
                    return int(line.split()[1]), time.monotonic_ns()
    except OSError:
        pass
    return None


def measured_hz(first, last):
    """HZ from two read_jiffies() readings, snapped to the nearest common value."""
    if not first or not last or last[1] - first[1] < 200_000_000:
        return None
    raw = (last[0] - first[0]) * 1e9 / (last[1] - first[1])
    return min(COMMON_HZ, key=lambda hz: abs(hz - raw)), raw


def btf_path_ok():
    return os.path.exists("/sys/kernel/btf/vmlinux")


def descendants(pid):
    """PIDs of the running descendants of pid (from /proc/*/stat parent ids)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), ()):
            out.append(c)
            todo.append(c)
    return out
