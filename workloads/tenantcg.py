"""The lab's tenant cgroups: one cgroup v2 cgroup per tenant of the tenants pattern, named
as systemd names a transient unit (``<tenant>.scope``) under a slice named after the run's
directory (``jstall-lab-<run>.slice``), so jstall.cgroups names each tenant ``<tenant>.scope``.

A run's cgroups are found again from its run directory's name alone (``parent``): lab
cleanup removes those a killed run left (ending the processes still in them, which only the
run started) with the rest of the run's state (cleanup.py).
"""

import os
import time

from jstall import cgroups
from jstall.errors import JstallError

SLICE = "jstall-lab-{run}.slice"


def parent(run_dir):
    """The cgroup directory of a run's tenants (None without a cgroup v2 hierarchy)."""
    top = cgroups.root()
    if top is None:
        return None
    return os.path.join(top, SLICE.format(run=os.path.basename(run_dir.rstrip("/"))))


def require():
    """The cgroup v2 mount point; JstallError naming the fix when there is none."""
    top = cgroups.root()
    if top is None:
        raise JstallError("the tenants pattern runs each tenant in a cgroup v2 cgroup, and this system has no cgroup2 "
                          "hierarchy: mount one (mkdir -p /sys/fs/cgroup/unified && mount -t cgroup2 none "
                          "/sys/fs/cgroup/unified)")
    return top


def make(run_dir, names):
    """{tenant: its cgroup directory}, made under parent(run_dir)."""
    require()
    top = parent(run_dir)
    os.makedirs(top, exist_ok=True)
    out = {}
    for n in names:
        d = os.path.join(top, f"{n}.scope")
        os.makedirs(d, exist_ok=True)
        out[n] = d
    return out


def enter(cgroup_dir):
    """Move the calling process into ``cgroup_dir`` (a child, before it execs its program)."""
    with open(os.path.join(cgroup_dir, "cgroup.procs"), "w") as f:
        f.write("0")


def leftovers(run_dir):
    """The cgroup directories a run made that still exist, deepest first."""
    top = parent(run_dir)
    if top is None or not os.path.isdir(top):
        return []
    out = [os.path.join(r, d) for r, dirs, _ in os.walk(top) for d in dirs]
    return sorted(out, key=lambda p: -p.count("/")) + [top]


def _procs(d):
    try:
        with open(os.path.join(d, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def remove(run_dir, kill=False, timeout=5.0):
    """Remove a run's cgroups (leftovers); with ``kill``, first end the processes still in them
    (cgroup.kill, else SIGKILL to each): a killed run's tenants. Returns the directories removed."""
    dirs = leftovers(run_dir)
    if kill:
        for d in dirs:
            if os.path.exists(os.path.join(d, "cgroup.kill")):
                try:
                    with open(os.path.join(d, "cgroup.kill"), "w") as f:
                        f.write("1")
                    continue
                except OSError:
                    pass
            for pid in _procs(d):
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
    done = []
    for d in dirs:
        end = time.monotonic() + timeout
        while True:   # a process that just exited lingers a moment in cgroup.procs
            try:
                os.rmdir(d)
                done.append(d)
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > end:
                    raise JstallError(f"cannot remove cgroup {d}: processes {_procs(d)} are still in it; end them "
                                      "and run jstall lab cleanup") from None
                time.sleep(0.05)
    return done
