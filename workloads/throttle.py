"""Slow-device emulation for the lab's loop devices.

Two mechanisms, chosen in this order:

- ``dm-delay`` (device-mapper): every I/O to the device is held for a fixed time. It needs the
  kernel's device-mapper with the ``delay`` target and the ``dmsetup`` program. The lab does not
  use it yet: its limits are IOPS and bandwidth, which dm-delay cannot express; it is only
  detected and reported (see docs/lab.md).
- ``blkio``: cgroup v1 blkio throttling, ``/sys/fs/cgroup/blkio/blkio.throttle.*_device``.
  A rule "MAJ:MIN N" caps the I/O operations (or bytes) per second that tasks of that cgroup
  issue to the device; "MAJ:MIN 0" removes it. The rule is written in the root blkio cgroup,
  which holds every task of the machine, the jbd2 and writeback kernel threads included.

Without either, a throttled run is refused.

Where the rule goes matters. A blkio rule on the filesystem's own loop device does not pace
ext4/jbd2 metadata writes on this kernel: they are dispatched at once and the debt is charged
to the next ordinary I/O (measured on 6.18 at 500 write IOPS: 10,408 metadata writes in
43 ms, then a 6.8 s wait for one 4 KiB O_DIRECT write). So the lab stacks two loop devices per
emulated device (scratch.py, ``throttle_mode="stacked"``): the filesystem's loop device does
direct I/O (``losetup --direct-io=on``) to a lower loop device over the image, and the rule
goes on the lower one. Every request the filesystem makes -- metadata, journal, data, cache
flush -- then arrives at the lower device as an ordinary bio issued by the upper loop's
worker, and waits its turn (measured: a steady 238-250 writes per 0.5 s at 500 IOPS through
a 20,000-file xattr burst). ``throttle_mode="direct"`` keeps the single throttled loop device,
as a named, documented option for comparing with the old lab.
"""

import dataclasses
import os

from jstall.errors import JstallError

BLKIO_DIR = "/sys/fs/cgroup/blkio"
LIMIT_FILES = {
    "read_iops": "blkio.throttle.read_iops_device",
    "write_iops": "blkio.throttle.write_iops_device",
    "read_bps": "blkio.throttle.read_bps_device",
    "write_bps": "blkio.throttle.write_bps_device",
}


@dataclasses.dataclass(frozen=True)
class Limits:
    """I/O limits of one device: operations per second (``*_iops``) and bytes per
    second (``*_bps``); None or 0 means unlimited."""

    read_iops: int = None
    write_iops: int = None
    read_bps: int = None
    write_bps: int = None

    def items(self):
        """(name, value) of the limits that are set."""
        return [(k, v) for k, v in dataclasses.asdict(self).items() if v]

    def __bool__(self):
        return bool(self.items())

    def as_dict(self):
        return dataclasses.asdict(self)


#: Device profiles. The numbers stand for a class of device as a journal sees it: the
#: rate of small random writes it sustains, and its sequential bandwidth. They are rate
#: limits only (blk-throttle admits a request when the device's budget allows, else queues
#: it): a request on an idle device is served at once, so a lone fsync on "hdd" costs well
#: under a disk's 8-12 ms, while a burst of scattered metadata or checkpoint writes queues
#: at the disk's random-write rate, which is what makes journal checkpoints stall. Requests
#: are counted after the upper loop device merged adjacent ones (as a disk's queue would),
#: so a sequential journal commit of many blocks is a few large requests, and a checkpoint
#: of scattered blocks is one request per block.
PROFILES = {
    # nothing throttled: the loop device runs at the speed of the page cache under it
    "none": Limits(),
    # a 7,200 rpm disk: ~8 ms average seek + 4 ms half rotation -> ~100 random IOPS;
    # ~150 MB/s sequential
    "hdd": Limits(read_iops=150, write_iops=100, read_bps=150 * 10**6, write_bps=150 * 10**6),
    # a modest SATA SSD under sustained load (or a cloud block volume): a few thousand
    # IOPS each way; ~400 MB/s
    "ssd": Limits(read_iops=8000, write_iops=4000, read_bps=400 * 10**6, write_bps=400 * 10**6),
}


def profile_limits(name, **explicit):
    """The limits of a profile, with each explicit limit that is not None replacing its own."""
    if name not in PROFILES:
        raise JstallError(f"device profile '{name}' is unknown; choose one of {', '.join(PROFILES)}")
    base = PROFILES[name].as_dict()
    for k, v in explicit.items():
        if k not in base:
            raise TypeError(k)
        if v is not None:
            if v < 0:
                raise JstallError(f"--{k.replace('_', '-')} {v}: a limit must be ≥ 0 (0 = unlimited)")
            base[k] = int(v)
    return Limits(**base)


def dm_delay_available():
    """True when the kernel has device-mapper's delay target (and dmsetup is installed)."""
    try:
        with open("/proc/misc") as f:
            if "device-mapper" not in f.read():
                return False
    except OSError:
        return False
    import shutil
    import subprocess

    if not shutil.which("dmsetup"):
        return False
    res = subprocess.run(["dmsetup", "targets"], capture_output=True, text=True)
    return res.returncode == 0 and any(line.split()[:1] == ["delay"] for line in res.stdout.splitlines())


def blkio_available():
    return all(os.access(os.path.join(BLKIO_DIR, f), os.W_OK) for f in LIMIT_FILES.values())


def backend():
    """The mechanism the lab throttles with here: 'blkio', or raise naming what is missing."""
    if blkio_available():
        return "blkio"
    dm = dm_delay_available()
    raise JstallError(
        "cannot emulate a slow device: no writable cgroup v1 blkio throttle files in "
        f"{BLKIO_DIR} (mount the blkio controller: mount -t cgroup -o blkio none {BLKIO_DIR})"
        + ("; dm-delay is present but cannot express IOPS limits" if dm else "")
        + "; or run with --device-profile none"
    )


def read_rules(limit):
    """{'MAJ:MIN': value} of the blkio rules set for one limit name ('write_iops', ...)."""
    try:
        with open(os.path.join(BLKIO_DIR, LIMIT_FILES[limit])) as f:
            return {p[0]: int(p[1]) for p in (line.split() for line in f) if len(p) == 2}
    except OSError:
        return {}


def set_rule(dev, limit, value):
    """Set (value > 0) or remove (value 0) one blkio rule of device 'MAJ:MIN'."""
    path = os.path.join(BLKIO_DIR, LIMIT_FILES[limit])
    try:
        with open(path, "w") as f:
            f.write(f"{dev} {int(value)}")
    except OSError as e:
        if value == 0 and e.errno in (19, 22):  # ENODEV/EINVAL: the device is gone, so is its rule
            return
        raise JstallError(f"cannot write '{dev} {value}' to {path}: {e.strerror}") from None


def apply(dev, limits):
    """Set every limit of a device; return the limit names set (for undoing)."""
    done = []
    for name, value in limits.items():
        set_rule(dev, name, value)
        done.append(name)
    return done


def remove(dev, names=LIMIT_FILES):
    """Remove the rules of a device (those named, or all)."""
    for name in names:
        if read_rules(name).get(dev):
            set_rule(dev, name, 0)
