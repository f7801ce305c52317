"""Two real cgroup v2 cgroups for the writers' kernel tests: a culprit in a kubepods-style pod
path with a container scope, and a victim in a systemd-style slice and scope; and the victim's
loop (4 KiB write + fdatasync every 5 ms until a stop file exists)."""

import contextlib
import os
import time

ROOT = "/sys/fs/cgroup/unified"
UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
CID = "c0ffee" + "0123456789abcdef" * 3 + "abcdef0123"   # 64 hex digits
#: what jstall.cgroups names them
CULPRIT_NAME = f"pod {UID} (burstable) container {CID[:12]}"
VICTIM_NAME = "victim.scope"

VICTIM = """
import os, sys, time
fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o644)
buf = b"v" * 4096
while not os.path.exists(sys.argv[2]):
    os.pwrite(fd, buf, 0)
    os.fdatasync(fd)
    time.sleep(0.005)
"""


def in_cgroup(cg, argv):
    """argv run as a process that first moves itself into cgroup directory ``cg``."""
    return ["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh"] + argv


def available():
    return os.path.exists(os.path.join(ROOT, "cgroup.procs"))


@contextlib.contextmanager
def cgroup_pair():
    """{"victim": its directory, "culprit": its directory}, made under a directory of this
    test process and removed after (every directory it made, deepest first)."""
    top = os.path.join(ROOT, f"jstall-test-{os.getpid()}")
    victim = os.path.join(top, "tenant.slice", VICTIM_NAME)
    culprit = os.path.join(top, "kubepods.slice", "kubepods-burstable.slice",
                           f"kubepods-burstable-pod{UID.replace('-', '_')}.slice",
                           f"cri-containerd-{CID}.scope")
    made = []
    try:
        for leaf in (victim, culprit):
            parts = os.path.relpath(leaf, ROOT).split("/")
            for i in range(1, len(parts) + 1):
                d = os.path.join(ROOT, *parts[:i])
                if not os.path.exists(d):
                    os.mkdir(d)
                    made.append(d)
        yield {"victim": victim, "culprit": culprit}
    finally:
        for d in reversed(made):
            for _ in range(50):   # a process that just exited may linger a moment in cgroup.procs
                try:
                    os.rmdir(d)
                    break
                except OSError:
                    time.sleep(0.1)
