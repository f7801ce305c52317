"""Scratch ext4 filesystems on loop devices, for the lab and for tests.

    cfg = FsConfig(fs_size="64M", journal_size="4M", inode_size=128, write_iops=500)
    with ScratchFs(cfg) as fs:
        fs.mountpoint, fs.device, fs.dev, fs.journal_dev, fs.dumpe2fs()

Everything lives in a run directory under the scratch directory (default
/var/tmp/jstall-lab): the image files, the mount point, and a marker file (``jstall-lab.json``)
naming the loop devices, mount and throttle rules the run set up.

Each image is an emulated device. With ``throttle_mode="stacked"`` (the default) it is two loop
devices: a lower one over the image file, which carries the throttle rules, and an upper one
with ``--direct-io=on`` over the lower one, which the filesystem (or the external journal) is
made on. The upper loop turns every request it gets -- ext4 metadata, jbd2 log writes,
checkpoint writes, data, flushes -- into an ordinary direct I/O on the lower device, so every
one waits its turn under the lower device's limits (see throttle.py and docs/lab.md). With
``throttle_mode="direct"`` the filesystem sits on a single loop device that carries the rules
itself: ext4/jbd2 metadata writes then pass the throttle at once (the old, unfaithful lab). Only loop devices backed by
those image files are formatted or mounted. On exit -- normal, an exception, Ctrl-C or
SIGTERM -- the throttles are removed, the filesystem unmounted, the loops detached and the
images deleted. ``cleanup()`` does the same for runs whose process died, found by their marker.
"""

import dataclasses
import errno
import json
import os
import re
import shlex
import signal
import subprocess
import threading
import time
import uuid

from jstall.errors import JstallError

from . import throttle

DEFAULT_SCRATCH = "/var/tmp/jstall-lab"
MARKER = "jstall-lab.json"
SCRATCH_MARKER = ".jstall-lab-scratch"
DATA_MODES = ("ordered", "writeback", "journal")
BLOCK_SIZES = (1024, 2048, 4096)
#: ext4's journal holds 1,024 to 10,240,000 blocks (mke2fs); an internal one within half the
#: blocks left free after the inode tables (checked as 40% of the filesystem).
JOURNAL_MIN_BLOCKS, JOURNAL_MAX_BLOCKS = 1024, 10_240_000
#: blocks the kernel takes for fast commits from an external journal (JBD2_DEFAULT_FAST_COMMIT_BLOCKS)
FAST_COMMIT_BLOCKS = 256
#: how an emulated device is built: "stacked" (a direct-I/O loop device over a throttled lower
#: loop device: every request paced) or "direct" (one throttled loop device: metadata unpaced)
THROTTLE_MODES = ("stacked", "direct")
#: space kept free beyond the images on the scratch directory's filesystem (bytes)
FREE_MARGIN = 64 << 20

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
#: mke2fs options the pass-through accepts (each takes a value); the rest have their own option
MKFS_PASSTHROUGH = {"-E", "-O", "-N", "-i", "-m", "-g", "-G", "-L", "-e"}
MKFS_OWN = {"-I": "use --inode-size", "-J": "use --journal-size/--journal-device", "-b": "use --block-size",
            "-t": "the lab makes ext4", "-T": "use --inode-size/--mkfs-options -i", "-F": "the lab always gives it",
            "-q": "the lab always gives it", "-n": "the lab formats for real"}
MKFS_FEATURES_OWN = {"journal_dev": "use --journal-device", "has_journal": "the lab studies journals",
                     "fast_commit": "use --fast-commit"}
MOUNT_OWN = {"data": "use --data-mode", "barrier": "use --barrier/--no-barrier", "nobarrier": "use --no-barrier",
             "commit": "use --commit-interval", "journal_path": "use --journal-device",
             "journal_dev": "use --journal-device", "ro": "the lab writes",
             "noload": "the lab studies journals", "norecovery": "the lab studies journals"}


def parse_size(text, what="size"):
    """Bytes of a size: an int, or text like '4096', '512K', '4M', '1G', '1.5G', '4MiB'
    (binary units)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text <= 0:
            raise JstallError(f"{what} {text}: must be positive (e.g. 4M, 1G)")
        return text
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*", str(text))
    if not m:
        raise JstallError(f"{what} '{text}': not a size; write it like 4096, 512K, 16M or 1G")
    value = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    if value <= 0:
        raise JstallError(f"{what} '{text}': must be positive (e.g. 4M, 1G)")
    return value


def format_size(n):
    """'4M', '1G', '1536K' or bytes: the largest binary unit that divides n."""
    for unit in ("T", "G", "M", "K"):
        if n % _UNITS[unit] == 0:
            return f"{n // _UNITS[unit]}{unit}"
    return str(n)


def _split_tokens(value):
    if value is None:
        return []
    if isinstance(value, str):
        return shlex.split(value)
    return [str(v) for v in value]


@dataclasses.dataclass
class FsConfig:
    """A scratch filesystem. Sizes: bytes or text ('64M', '1G'); inode and block sizes in
    bytes; commit_interval in seconds; limits in operations or bytes per second.

    ``device_profile`` and the explicit ``read_iops/write_iops/read_bps/write_bps`` throttle the
    filesystem's device; the ``journal_*`` ones throttle the external journal device
    (``journal_device=True`` only). ``mkfs_options`` (e.g. "-E stride=4 -O ^metadata_csum")
    and ``mount_options`` (e.g. "noatime,journal_checksum") pass other options through.
    """

    fs_size: object = "64M"
    journal_size: object = "4M"
    inode_size: int = 256
    block_size: int = 4096
    journal_device: bool = False
    fast_commit: bool = False
    data_mode: str = "ordered"
    barrier: bool = True
    commit_interval: int = None
    mkfs_options: object = ()
    mount_options: object = ()
    device_profile: str = "none"
    read_iops: int = None
    write_iops: int = None
    read_bps: int = None
    write_bps: int = None
    journal_device_profile: str = "none"
    journal_read_iops: int = None
    journal_write_iops: int = None
    journal_read_bps: int = None
    journal_write_bps: int = None
    throttle_mode: str = "stacked"

    # ---- derived values ---------------------------------------------------------

    @property
    def fs_bytes(self):
        return parse_size(self.fs_size, "--fs-size")

    @property
    def journal_bytes(self):
        return parse_size(self.journal_size, "--journal-size")

    @property
    def journal_blocks(self):
        """Journal size in filesystem blocks, as requested."""
        return self.journal_bytes // self.block_size

    def data_limits(self):
        return throttle.profile_limits(self.device_profile, read_iops=self.read_iops, write_iops=self.write_iops,
                                       read_bps=self.read_bps, write_bps=self.write_bps)

    def journal_limits(self):
        return throttle.profile_limits(self.journal_device_profile, read_iops=self.journal_read_iops,
                                       write_iops=self.journal_write_iops, read_bps=self.journal_read_bps,
                                       write_bps=self.journal_write_bps)

    @property
    def journal_image_bytes(self):
        """Size of an external journal's device: the journal and 4 KiB more. The device starts
        with an ext4 superblock that names it, so its journal begins one or two blocks later than
        an internal one, and mke2fs uses whole 4 KiB of it; the extra 4 KiB keep at least as many
        usable blocks as an internal journal of the same size (and the smallest one above the
        kernel's minimum of 1,024). With fast_commit the kernel takes its fast-commit area
        (JBD2_DEFAULT_FAST_COMMIT_BLOCKS, 256 blocks) from the end of an external journal, so
        those blocks are added too, as mke2fs adds them to an internal journal."""
        return self.journal_bytes + 4096 + (FAST_COMMIT_BLOCKS * self.block_size if self.fast_commit else 0)

    def image_bytes(self):
        """Bytes of every image file the filesystem needs (sparse, but may fill)."""
        return self.fs_bytes + (self.journal_image_bytes if self.journal_device else 0)

    def mkfs_args(self):
        """mke2fs arguments after validation (without the device)."""
        ext = ["lazy_itable_init=0", "lazy_journal_init=1", "nodiscard"]
        features = ["fast_commit"] if self.fast_commit else []
        rest = []
        toks = _split_tokens(self.mkfs_options)
        for i in range(0, len(toks), 2):
            opt, val = toks[i], toks[i + 1]
            if opt == "-E":
                ext.append(val)
            elif opt == "-O":
                features.append(val)
            else:
                rest += [opt, val]
        args = ["-q", "-F", "-t", "ext4", "-b", str(self.block_size), "-I", str(self.inode_size)]
        if not self.journal_device:
            args += ["-J", f"size={self.journal_bytes >> 20}"]
        if features:
            args += ["-O", ",".join(features)]
        return args + ["-E", ",".join(ext)] + rest

    def mount_opts(self, journal_device_path=None):
        """The -o string the filesystem is mounted with."""
        opts = [f"data={self.data_mode}", "barrier" if self.barrier else "nobarrier"]
        if self.commit_interval is not None:
            opts.append(f"commit={self.commit_interval}")
        if journal_device_path:
            opts.append(f"journal_path={journal_device_path}")
        for part in _split_tokens(self.mount_options):
            opts += [o for o in part.split(",") if o]
        return ",".join(opts)

    def as_dict(self):
        """The configuration as plain JSON values (sizes as given and in bytes)."""
        d = dataclasses.asdict(self)
        d["mkfs_options"] = _split_tokens(self.mkfs_options)
        d["mount_options"] = [o for p in _split_tokens(self.mount_options) for o in p.split(",") if o]
        d["fs_size_bytes"] = self.fs_bytes
        d["journal_size_bytes"] = self.journal_bytes
        d["data_limits"] = self.data_limits().as_dict()
        d["journal_limits"] = self.journal_limits().as_dict() if self.journal_device else None
        return d

    # ---- validation ---------------------------------------------------------------

    def validate(self):
        """Raise JstallError for an impossible or refused configuration; touch nothing."""
        fs, jb = self.fs_bytes, self.journal_bytes
        if self.block_size not in BLOCK_SIZES:
            raise JstallError(f"--block-size {self.block_size}: choose one of {', '.join(map(str, BLOCK_SIZES))}")
        isz = self.inode_size
        if not isinstance(isz, int) or isz < 128 or isz & (isz - 1) or isz > self.block_size:
            raise JstallError(f"--inode-size {isz}: must be a power of two from 128 to the block size "
                              f"({self.block_size}), e.g. 128, 256 or 512")
        if fs < 16 << 20:
            raise JstallError(f"--fs-size {format_size(fs)}: too small; give at least 16M")
        if fs % self.block_size:
            raise JstallError(f"--fs-size {fs}: not a whole number of {self.block_size}-byte blocks")
        if not self.journal_device and jb % (1 << 20):
            raise JstallError(f"--journal-size {self.journal_size}: mke2fs takes an internal journal size in "
                              "whole MiB; give e.g. 4M or 16M")
        if jb % self.block_size:
            raise JstallError(f"--journal-size {self.journal_size}: not a whole number of {self.block_size}-byte blocks")
        blocks = jb // self.block_size
        if not JOURNAL_MIN_BLOCKS <= blocks <= JOURNAL_MAX_BLOCKS:
            lo = format_size(JOURNAL_MIN_BLOCKS * self.block_size)
            raise JstallError(f"--journal-size {self.journal_size} is {blocks} blocks; ext4 takes {JOURNAL_MIN_BLOCKS} to "
                              f"{JOURNAL_MAX_BLOCKS:,} blocks (at least {lo} with {self.block_size}-byte blocks)")
        # mke2fs (figure_journal_size) wants the journal within half the blocks left free after
        # the inode tables and bitmaps: keep it to 40% of the filesystem.
        if not self.journal_device and jb * 5 > fs * 2:
            raise JstallError(f"--journal-size {format_size(jb)} does not fit in --fs-size {format_size(fs)}: an internal "
                              f"journal takes at most 40% of the filesystem; give --fs-size {format_size(4 * jb)} or more")
        if self.throttle_mode not in THROTTLE_MODES:
            raise JstallError(f"--throttle-mode {self.throttle_mode}: choose one of {', '.join(THROTTLE_MODES)}")
        if self.data_mode not in DATA_MODES:
            raise JstallError(f"--data-mode {self.data_mode}: choose one of {', '.join(DATA_MODES)}")
        if self.commit_interval is not None and (not isinstance(self.commit_interval, int) or self.commit_interval < 0):
            raise JstallError(f"--commit-interval {self.commit_interval}: give whole seconds ≥ 0 (0 = ext4's default, 5)")
        if self.fast_commit and self.data_mode == "journal":
            raise JstallError("--fast-commit does nothing with --data-mode journal (ext4 turns it off); drop one of them")
        self.data_limits()
        jl = self.journal_limits()
        if jl and not self.journal_device:
            raise JstallError("journal device limits need an external journal; add --journal-device, or throttle the "
                              "filesystem's device (it holds an internal journal)")
        self._validate_mkfs()
        self._validate_mount()

    def _validate_mkfs(self):
        try:
            toks = _split_tokens(self.mkfs_options)
        except ValueError as e:
            raise JstallError(f"--mkfs-options: {e}; quote it as one shell word list") from None
        i = 0
        while i < len(toks):
            opt = toks[i]
            if opt in MKFS_OWN:
                raise JstallError(f"--mkfs-options {opt}: not passed through; {MKFS_OWN[opt]}")
            if opt not in MKFS_PASSTHROUGH:
                raise JstallError(f"--mkfs-options {opt}: not accepted; the pass-through takes "
                                  f"{' '.join(sorted(MKFS_PASSTHROUGH))}, each with a value")
            if i + 1 >= len(toks) or toks[i + 1].startswith("-"):
                raise JstallError(f"--mkfs-options {opt}: needs a value (e.g. '{opt} VALUE')")
            if opt == "-O":
                for feat in toks[i + 1].split(","):
                    name = feat.lstrip("^")
                    if name in MKFS_FEATURES_OWN:
                        raise JstallError(f"--mkfs-options -O {feat}: not passed through; {MKFS_FEATURES_OWN[name]}")
            if opt == "-E" and re.search(r"(^|,)(lazy_journal_init|lazy_itable_init|nodiscard|discard)\b", toks[i + 1]):
                raise JstallError(f"--mkfs-options -E {toks[i + 1]}: the lab sets lazy_*_init and discard itself; drop them")
            i += 2

    def _validate_mount(self):
        for part in _split_tokens(self.mount_options):
            for opt in part.split(","):
                if not opt:
                    continue
                if not re.fullmatch(r"[a-z0-9_]+(=[A-Za-z0-9_.:/-]+)?", opt):
                    raise JstallError(f"--mount-options {opt}: not a mount option (write name or name=value, comma-separated)")
                name = opt.split("=", 1)[0]
                if name in MOUNT_OWN:
                    raise JstallError(f"--mount-options {opt}: not passed through; {MOUNT_OWN[name]}")


# ---- loop devices, mounts and the marker ----------------------------------------------------


def _run(cmd, what=None):
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        msg = (res.stderr.strip() or res.stdout.strip()).splitlines()
        raise JstallError(f"{what or cmd[0]} failed: {msg[-1] if msg else 'exit status %d' % res.returncode}")
    return res.stdout


def syncfs(path):
    """syncfs(2) on the filesystem holding path (Python's os has no syncfs)."""
    import ctypes

    fd = os.open(path, os.O_RDONLY)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


#: /sys/block/<dev>/stat fields (Documentation/block/stat.rst), in order
BLOCK_STAT_FIELDS = ("read_ios", "read_merges", "read_sectors", "read_ticks_ms", "write_ios", "write_merges",
                     "write_sectors", "write_ticks_ms", "in_flight", "io_ticks_ms", "time_in_queue_ms",
                     "discard_ios", "discard_merges", "discard_sectors", "discard_ticks_ms", "flush_ios",
                     "flush_ticks_ms")


def read_block_stat(name):
    """{field: int} of /sys/block/<name>/stat (missing trailing fields read 0)."""
    with open(f"/sys/block/{name}/stat") as f:
        vals = [int(v) for v in f.read().split()]
    vals += [0] * (len(BLOCK_STAT_FIELDS) - len(vals))
    return dict(zip(BLOCK_STAT_FIELDS, vals))


def read_inflight(name):
    """(reads, writes) in flight on /sys/block/<name> (0, 0 when the device is gone)."""
    try:
        with open(f"/sys/block/{name}/inflight") as f:
            r, w = f.read().split()[:2]
        return int(r), int(w)
    except (OSError, ValueError):
        return 0, 0


def dev_of(path):
    """'MAJ:MIN' of a block device node."""
    st = os.stat(path)
    return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"


def loop_backing_files():
    """{'/dev/loopN': backing file path} of attached loop devices (' (deleted)' stripped)."""
    out = {}
    for name in sorted(os.listdir("/sys/block")):
        if not name.startswith("loop"):
            continue
        try:
            with open(f"/sys/block/{name}/loop/backing_file") as f:
                path = f.read().strip()
        except OSError:
            continue
        if path.endswith(" (deleted)"):
            path = path[: -len(" (deleted)")]
        out[f"/dev/{name}"] = path
    return out


def _mounts():
    """[(source, mountpoint)] from /proc/self/mounts, in mount order."""
    out = []
    with open("/proc/self/mounts") as f:
        for line in f:
            p = line.split()
            out.append((p[0], p[1].replace("\\040", " ")))
    return out


def mount_options(mountpoint):
    """The options string /proc/mounts shows for a mount point (the last mount there)."""
    opts = None
    with open("/proc/self/mounts") as f:
        for line in f:
            p = line.split()
            if p[1] == mountpoint:
                opts = p[3]
    return opts


def _umount(mountpoint):
    for attempt in range(20):
        res = subprocess.run(["umount", mountpoint], capture_output=True, text=True)
        if res.returncode == 0 or not any(m == mountpoint for _, m in _mounts()):
            return
        time.sleep(0.1 * (attempt + 1) if attempt < 5 else 0.5)
    # Still busy (a process keeps a file or its working directory there): detach it from the
    # tree now; the kernel drops it, and with autoclear the loop, when the last user lets go.
    subprocess.run(["umount", "-l", mountpoint], capture_output=True)


def _detach(loop):
    for attempt in range(20):
        res = subprocess.run(["losetup", "-d", loop], capture_output=True, text=True)
        if res.returncode == 0 or loop not in loop_backing_files():
            return
        time.sleep(0.1 * (attempt + 1) if attempt < 5 else 0.5)


def _proc_start(pid):
    """The start time of a process (clock ticks since boot), or None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _read_marker(run_dir):
    try:
        with open(os.path.join(run_dir, MARKER)) as f:
            m = json.load(f)
        return m if isinstance(m, dict) and m.get("format") == "jstall-lab-scratch" else None
    except (OSError, ValueError):
        return None


def _write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def prepare_scratch(scratch_dir=None, create=True):
    """Create (or check) the scratch directory; refuse a directory holding files the lab did
    not make. With create=False only check (nothing is created)."""
    base = os.path.abspath(scratch_dir or DEFAULT_SCRATCH)
    if os.path.lexists(base):
        if not os.path.isdir(base):
            raise JstallError(f"--scratch {base}: not a directory; give a new or empty directory")
        entries = os.listdir(base)
        if entries and SCRATCH_MARKER not in entries:
            raise JstallError(f"--scratch {base}: holds files the lab did not create; give a new or empty directory")
    if not create:
        return base
    if not os.path.isdir(base):
        os.makedirs(base, exist_ok=True)
    marker = os.path.join(base, SCRATCH_MARKER)
    if not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write("jstall lab scratch directory: run directories with a jstall-lab.json marker\n")
    return base


def check_free_space(base, needed):
    """Refuse when the scratch directory's filesystem (that of its nearest existing parent,
    before it is created) has less than needed + margin bytes free."""
    where = base
    while not os.path.isdir(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    st = os.statvfs(where)
    free = st.f_bavail * st.f_frsize
    if free < needed + FREE_MARGIN:
        raise JstallError(f"{base} has {format_size(free // (1 << 20) << 20)} free; the images need "
                          f"{format_size(needed)} plus {format_size(FREE_MARGIN)} spare: free space there, choose "
                          "another --scratch, or give a smaller --fs-size/--journal-size")


# ---- the context manager ----------------------------------------------------------------


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived while a scratch filesystem was set up (handled like Ctrl-C)."""


def parse_dumpe2fs(text):
    """{key: value} of the 'Key: value' lines of `dumpe2fs -h` (first occurrence wins)."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key and not key.startswith((" ", "\t")):
            out.setdefault(key.strip(), value.strip())
    return out


def _int(text):
    m = re.match(r"\s*(\d+)", text or "")
    return int(m.group(1)) if m else None


class ScratchFs:
    """A mounted scratch ext4 (see the module docstring). Attributes once entered:
    ``mountpoint``, ``device`` ('/dev/loopN', the filesystem's device), ``dev`` ('MAJ:MIN'),
    ``journal_device`` ('/dev/loopM' or None), ``journal_dev`` ('MAJ:MIN' or None),
    ``lower_device``/``lower_dev`` and ``journal_lower_device``/``journal_lower_dev`` (the
    loop devices under them that carry the throttle rules and serve every request; the same
    as the upper ones with throttle_mode "direct"), ``run_dir``, ``limits`` ({'MAJ:MIN':
    Limits} applied, keyed by the lower device), ``throttle_backend`` ('blkio' or None)."""

    def __init__(self, cfg, scratch_dir=None):
        self.cfg = cfg
        self.scratch_dir = scratch_dir
        self.run_dir = self.mountpoint = self.device = self.dev = None
        self.journal_device = self.journal_dev = None
        self.lower_device = self.lower_dev = self.journal_lower_device = self.journal_lower_dev = None
        self.limits = {}
        self.throttle_backend = None
        self._loops, self._throttled, self._mounted = [], {}, False
        self._old_sigterm = None
        self._sb = None

    # ---- set-up ---------------------------------------------------------------------

    def __enter__(self):
        cfg = self.cfg
        if os.geteuid() != 0:
            raise JstallError("the lab makes loop devices and mounts: run it as root (sudo)")
        cfg.validate()
        data_limits = cfg.data_limits()
        journal_limits = cfg.journal_limits() if cfg.journal_device else throttle.Limits()
        if data_limits or journal_limits:
            self.throttle_backend = throttle.backend()
        base = prepare_scratch(self.scratch_dir, create=False)
        check_free_space(base, cfg.image_bytes())
        prepare_scratch(base)
        self._install_sigterm()
        try:
            self._setup(base, data_limits, journal_limits)
        except BaseException:
            self._teardown()
            raise
        return self

    def _install_sigterm(self):
        if threading.current_thread() is not threading.main_thread():
            return

        def on_term(signum, frame):
            raise Terminated(f"signal {signum}")

        self._old_sigterm = signal.signal(signal.SIGTERM, on_term)

    def _marker(self):
        return {
            "format": "jstall-lab-scratch",
            "pid": os.getpid(),
            "pid_start": _proc_start(os.getpid()),
            "created": time.time(),
            "run_dir": self.run_dir,
            "mountpoint": self.mountpoint,
            "loops": self._loops,
            "throttles": {dev: sorted(names) for dev, names in self._throttled.items()},
            "config": self.cfg.as_dict(),
        }

    def _save_marker(self):
        _write_json(os.path.join(self.run_dir, MARKER), self._marker())

    def _attach(self, image, direct_io=False):
        cmd = ["losetup", "--find", "--show"] + (["--direct-io=on"] if direct_io else []) + [image]
        loop = _run(cmd, "losetup").strip()
        self._loops.append(loop)
        self._save_marker()
        # Refuse to format anything but a loop device backed by the image just created (or,
        # stacked, by the lower loop device just attached to it).
        if loop_backing_files().get(loop) != image:
            raise JstallError(f"{loop} is not backed by {image}; another program took it, run again")
        return loop

    def _device(self, image):
        """Attach an emulated device over image: (device the filesystem uses, lower device
        that carries the throttle). Stacked: the upper loop does direct I/O to the lower one,
        so that every request -- metadata and journal writes included -- reaches the lower
        device as an ordinary bio that blk-throttle paces (blk_throtl_bio)."""
        lower = self._attach(image)
        if self.cfg.throttle_mode == "direct":
            return lower, lower
        return self._attach(lower, direct_io=True), lower

    def _setup(self, base, data_limits, journal_limits):
        cfg = self.cfg
        self.run_dir = os.path.join(base, f"run-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        os.mkdir(self.run_dir)
        self.mountpoint = os.path.join(self.run_dir, "mnt")
        os.mkdir(self.mountpoint)
        self._save_marker()
        data_img = os.path.join(self.run_dir, "fs.img")
        with open(data_img, "wb") as f:
            f.truncate(cfg.fs_bytes)
        if cfg.journal_device:
            jimg = os.path.join(self.run_dir, "journal.img")
            with open(jimg, "wb") as f:
                f.truncate(cfg.journal_image_bytes)
            self.journal_device, self.journal_lower_device = self._device(jimg)
            self.journal_dev, self.journal_lower_dev = dev_of(self.journal_device), dev_of(self.journal_lower_device)
            _run(["mkfs.ext4", "-q", "-F", "-O", "journal_dev", "-b", str(cfg.block_size), self.journal_device],
                 "mkfs.ext4 -O journal_dev")
        self.device, self.lower_device = self._device(data_img)
        self.dev, self.lower_dev = dev_of(self.device), dev_of(self.lower_device)
        args = cfg.mkfs_args()
        if cfg.journal_device:
            args += ["-J", f"device={self.journal_device}"]
        _run(["mkfs.ext4", *args, self.device], "mkfs.ext4 " + " ".join(args))
        self._sb = self._read_dumpe2fs()
        _run(["mount", "-t", "ext4", "-o", cfg.mount_opts(self.journal_device), self.device, self.mountpoint],
             f"mount -o {cfg.mount_opts(self.journal_device)} (see dmesg for the option ext4 refused)")
        self._mounted = True
        self._save_marker()
        for dev, limits in ((self.lower_dev, data_limits), (self.journal_lower_dev, journal_limits)):
            if dev and limits:
                # Recorded before the write, so that cleanup() finds a rule set by a crashed run.
                self._throttled[dev] = [n for n, _ in limits.items()]
                self._save_marker()
                throttle.apply(dev, limits)
                self.limits[dev] = limits

    # ---- read-back ------------------------------------------------------------------

    def _read_dumpe2fs(self):
        raw = parse_dumpe2fs(_run(["dumpe2fs", "-h", self.device], "dumpe2fs"))
        jraw = parse_dumpe2fs(_run(["dumpe2fs", "-h", self.journal_device], "dumpe2fs")) if self.journal_device else {}
        src = jraw or raw
        jblocks = _int(src.get("Total journal blocks") or src.get("Journal length"))
        bs = _int(raw.get("Block size"))
        feats = raw.get("Filesystem features", "").split()
        return {
            "block_size": bs,
            "inode_size": _int(raw.get("Inode size")),
            "block_count": _int(raw.get("Block count")),
            "inode_count": _int(raw.get("Inode count")),
            "features": feats,
            "journal_blocks": jblocks,
            "journal_bytes": jblocks * bs if jblocks and bs else None,
            "journal_max_transaction_blocks": _int(src.get("Max transaction length")),
            "fast_commit": "fast_commit" in feats,
            "fast_commit_blocks": _int(src.get("Fast commit length")) or 0,
            "journal_features": [f for f in src.get("Journal features", "").split() if f != "(none)"],
            "journal_uuid": raw.get("Journal UUID"),
            "journal_device_number": raw.get("Journal device"),
            "external_journal": bool(jraw),
            "default_mount_options": raw.get("Default mount options"),
            "raw": raw,
            "journal_raw": jraw or None,
        }

    def dumpe2fs(self, refresh=False):
        """The filesystem's real geometry read back with `dumpe2fs -h` after mkfs (sizes in
        blocks of ``block_size`` bytes; ``raw`` holds every field as text)."""
        if refresh or self._sb is None:
            self._sb = self._read_dumpe2fs()
        return json.loads(json.dumps(self._sb))

    def mount_options(self):
        """The options /proc/mounts shows for the mount point."""
        return mount_options(self.mountpoint)

    def sync(self):
        """Write back this filesystem (syncfs(2)): not sync(2), which would also wait for every
        other filesystem of the machine, other labs' throttled ones included."""
        syncfs(self.mountpoint)

    def drop_caches(self):
        """Write back this filesystem, then drop the clean page cache, dentries and inodes (the
        whole machine's: dropping does not wait for other filesystems' writeback)."""
        self.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")

    def describe(self):
        """JSON-ready description: devices, mount, throttles."""
        return {
            "device": self.device, "dev": self.dev, "journal_device": self.journal_device,
            "journal_dev": self.journal_dev, "mountpoint": self.mountpoint,
            "mount_options": self.mount_options() if self._mounted else None,
            "throttle_backend": self.throttle_backend,
            "throttle_mode": self.cfg.throttle_mode,
            "lower_device": self.lower_device, "lower_dev": self.lower_dev,
            "journal_lower_device": self.journal_lower_device, "journal_lower_dev": self.journal_lower_dev,
            "throttles": {dev: lim.as_dict() for dev, lim in self.limits.items()},
        }

    def emulated_devices(self):
        """[(role, fs-facing device 'MAJ:MIN', lower device name in /sys/block, lower 'MAJ:MIN')]
        of the emulated devices: 'data', and 'journal' with an external journal."""
        out = [("data", self.dev, os.path.basename(self.lower_device), self.lower_dev)]
        if self.journal_device:
            out.append(("journal", self.journal_dev, os.path.basename(self.journal_lower_device), self.journal_lower_dev))
        return out

    def in_flight(self):
        """Requests in flight on every loop device of this filesystem (upper and lower): an
        upper request stays in flight until the lower device has served it, throttle included."""
        total = 0
        for loop in {self.device, self.lower_device, self.journal_device, self.journal_lower_device} - {None}:
            total += sum(read_inflight(os.path.basename(loop)))
        return total

    def wait_idle(self, timeout=600.0, poll=0.002):
        """Wait until no request is in flight on this filesystem's devices; return seconds waited."""
        t0 = time.monotonic()
        while self.in_flight():
            if time.monotonic() - t0 > timeout:
                raise JstallError(f"the emulated device of {self.mountpoint} is still busy after {timeout:.0f} s")
            time.sleep(poll)
        return time.monotonic() - t0

    # ---- tear-down ------------------------------------------------------------------

    def __exit__(self, *exc):
        self._teardown()
        return False

    def close(self):
        self._teardown()

    def _teardown(self):
        old_mask = None
        if threading.current_thread() is threading.main_thread():
            old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            if self.run_dir:
                undo_run(self.run_dir, self._marker())
            self._loops, self._throttled, self._mounted, self.limits = [], {}, False, {}
        finally:
            if self._old_sigterm is not None:
                signal.signal(signal.SIGTERM, self._old_sigterm)
                self._old_sigterm = None
            if old_mask is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


# ---- undoing a run, and finding the runs crashed processes left ------------------------------


def run_state(run_dir, marker=None):
    """What a run directory still holds on the system: {'throttles': {dev: [names]},
    'mounts': [mountpoint], 'loops': [/dev/loopN], 'files': [path]}. Loops are found by
    their backing file (inside run_dir), mounts by mount point or source; throttle rules only
    for devices that are unbound or still bound to the run's images."""
    marker = marker or _read_marker(run_dir) or {}
    prefix = run_dir.rstrip("/") + "/"
    backing = loop_backing_files()
    loops = [lp for lp, path in backing.items() if path.startswith(prefix)]
    # loop devices stacked on those (a stacked device's upper loop), detached first
    upper = [lp for lp, path in backing.items() if path in loops]
    loops = upper + loops
    mounts = [m for src, m in _mounts() if m.startswith(prefix) or src in loops]
    ours = {dev_of(lp) for lp in loops}
    throttles = {}
    for dev in list(marker.get("throttles", {})) + sorted(ours):
        bound = [lp for lp in backing if os.path.exists(lp) and dev_of(lp) == dev]
        if bound and not (set(bound) & set(loops)):
            continue  # the device now belongs to someone else's loop: leave its rules alone
        names = [n for n in throttle.LIMIT_FILES if throttle.read_rules(n).get(dev)]
        if names:
            throttles[dev] = names
    files = []
    if os.path.isdir(run_dir):
        for root, dirs, fnames in os.walk(run_dir):
            if root == run_dir.rstrip("/") and mounts and "mnt" in dirs:
                dirs.remove("mnt")  # a mounted filesystem's files go with its image
            files += [os.path.join(root, n) for n in fnames]
    return {"throttles": throttles, "mounts": mounts[::-1], "loops": loops, "files": sorted(files)}


def undo_run(run_dir, marker=None):
    """Remove throttles, unmount, detach loops, delete images and the run directory; return
    the actions taken as text lines."""
    st = run_state(run_dir, marker)
    done = []
    for dev, names in st["throttles"].items():
        throttle.remove(dev, names)
        done.append(f"removed throttle {dev} ({', '.join(names)})")
    for m in st["mounts"]:
        _umount(m)
        done.append(f"unmounted {m}")
    for lp in st["loops"]:
        _detach(lp)
        done.append(f"detached {lp}")
    for path in st["files"]:
        try:
            os.unlink(path)
        except OSError as e:
            if e.errno != errno.ENOENT:
                raise
    if st["files"]:
        done.append(f"deleted {len(st['files'])} files in {run_dir}")
    for root, dirs, _ in os.walk(run_dir, topdown=False):
        for d in dirs:
            try:
                os.rmdir(os.path.join(root, d))
            except OSError:
                pass
    try:
        os.rmdir(run_dir)
        done.append(f"removed {run_dir}")
    except OSError:
        pass
    return done


def find_runs(scratch_dir=None):
    """Run directories under a scratch directory, each {'run_dir', 'marker', 'alive', 'state'};
    'alive' when the process that made it still runs."""
    base = os.path.abspath(scratch_dir or DEFAULT_SCRATCH)
    if not os.path.isdir(base):
        return []
    out = []
    for name in sorted(os.listdir(base)):
        run_dir = os.path.join(base, name)
        marker = _read_marker(run_dir)
        if not os.path.isdir(run_dir) or marker is None:
            continue
        alive = marker.get("pid_start") is not None and _proc_start(marker.get("pid")) == marker.get("pid_start")
        out.append({"run_dir": run_dir, "marker": marker, "alive": alive, "state": run_state(run_dir, marker)})
    return out


def cleanup(scratch_dir=None, dry_run=False, include_alive=False):
    """Undo the runs crashed processes left under a scratch directory (runs whose process
    still runs only with include_alive). Returns [(run_dir, [action lines])]; with dry_run
    the lines say what would be done and nothing changes."""
    base = os.path.abspath(scratch_dir or DEFAULT_SCRATCH)
    if os.path.exists(base) and os.listdir(base) and not os.path.exists(os.path.join(base, SCRATCH_MARKER)):
        raise JstallError(f"--scratch {base}: not a lab scratch directory (no {SCRATCH_MARKER}); nothing to clean there")
    out = []
    for run in find_runs(base):
        if run["alive"] and not include_alive:
            continue
        if dry_run:
            st = run["state"]
            lines = [f"would remove throttle {d} ({', '.join(n)})" for d, n in st["throttles"].items()]
            lines += [f"would unmount {m}" for m in st["mounts"]]
            lines += [f"would detach {lp}" for lp in st["loops"]]
            lines += [f"would delete {p}" for p in st["files"]]
            lines.append(f"would remove {run['run_dir']}")
            out.append((run["run_dir"], lines))
        else:
            out.append((run["run_dir"], undo_run(run["run_dir"], run["marker"])))
    return out
