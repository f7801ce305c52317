"""The scratch filesystem: ``ScratchFs`` makes an emulated device (loop devices over image
files, throttled), formats and mounts ext4 or XFS on it, reads its geometry back (dumpe2fs,
xfs_db), and undoes it all on exit (see jstall.workloads.scratch for the whole picture)."""

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import time
import uuid

from jstall import jbd2, kinds, system
from jstall.errors import JstallError

from . import throttle
from .cleanup import undo_run
from .loopdev import LAB_NEEDS_ROOT, dev_of, loop_backing_files, read_inflight, run_tool, syncfs
from .rundir import MARKER, check_free_space, prepare_scratch, write_json

log = logging.getLogger(__name__)


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived while a scratch filesystem was set up (handled like Ctrl-C)."""


def _int(text):
    m = re.match(r"\s*(\d+)", text or "")
    return int(m.group(1)) if m else None


def mkfs_xfs(args, device, env=None):
    """Run mkfs.xfs ARGS DEVICE (``env``: variables added to the environment); raise
    JstallError quoting its reason -- the line before its usage text -- with a hint for a
    log it finds too small or too large."""
    res = subprocess.run(["mkfs.xfs", *args, device], capture_output=True, text=True,
                         env={**os.environ, **(env or {})})
    if res.returncode == 0:
        return res.stdout
    reason = xfs_reason(res.stderr or res.stdout) or f"exit status {res.returncode}"
    raise JstallError(f"mkfs.xfs {' '.join(args)} failed: {reason}{_mkfs_xfs_hint(reason, args)}")


def xfs_reason(text):
    """mkfs.xfs's reason for a refusal: the last line before the usage text it prints after it."""
    lines = [ln.strip() for ln in text.splitlines()]
    if any(ln.startswith("Usage:") for ln in lines):
        lines = lines[:next(i for i, ln in enumerate(lines) if ln.startswith("Usage:"))]
    lines = [ln for ln in lines if ln]
    return lines[-1] if lines else None


def _mkfs_xfs_hint(reason, args):
    bs = 4096
    for opt, val in zip(args, args[1:]):
        if opt == "-b" and val.startswith("size="):
            bs = int(val[len("size="):])
    m = re.search(r"minimum size is (\d+) blocks", reason)
    if m and "log" in reason:
        need = int(m.group(1)) * bs
        return f" (give --journal-size {-(-need // (1 << 20))}M or more)"
    m = re.search(r"(?:must be less than|maximum size is) (\d+)", reason)
    if m and "log" in reason:
        return f" (give --journal-size {int(m.group(1)) * bs >> 20}M or less, or a larger --fs-size)"
    return ""


def parse_xfs_db(text):
    """{field: text} of `xfs_db -c 'sb 0' -c print -c version` output, and 'features': the
    version line's feature names (lower case)."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" = ")
        if not sep:
            continue
        key = key.strip()
        if key.startswith("versionnum ["):
            out["features"] = [f.lower() for f in value.strip().split(",") if f]
        else:
            out[key] = value.strip()
    return out


def xfs_superblock(device, log_device=None):
    """The XFS superblock of ``device`` read with xfs_db (read-only; ``log_device``: its external
    log's device) as parse_xfs_db() returns it."""
    cmd = ["xfs_db", "-r"] + (["-l", log_device] if log_device else []) + ["-c", "sb 0", "-c", "print", "-c",
                                                                           "version", device]
    return parse_xfs_db(run_tool(cmd, "xfs_db"))


class ScratchFs:
    """A mounted scratch ext4 or XFS (see the module docstring; ``cfg.fs_type``). Attributes once entered:
    ``mountpoint``, ``device`` ('/dev/loopN', the filesystem's device), ``dev`` ('MAJ:MIN'),
    ``journal_device`` ('/dev/loopM' or None: the external journal's, or XFS log's, device),
    ``journal_dev`` ('MAJ:MIN' or None),
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
        system.require_root(LAB_NEEDS_ROOT)
        cfg.validate()
        if cfg.xfs:
            missing = [t for t in ("mkfs.xfs", "xfs_db") if shutil.which(t) is None]
            if missing:
                raise JstallError(f"--fs-type xfs needs xfsprogs ({', '.join(missing)} not found): install it "
                                  "(Debian: apt install xfsprogs)")
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
        self._old_sigterm = system.raise_on_sigterm(Terminated)

    def _marker(self):
        return {
            "format": "jstall-lab-scratch",
            "pid": os.getpid(),
            "pid_start": system.proc_start(os.getpid()),
            "created": time.time(),
            "run_dir": self.run_dir,
            "mountpoint": self.mountpoint,
            "loops": self._loops,
            "throttles": {dev: sorted(names) for dev, names in self._throttled.items()},
            "config": self.cfg.as_dict(),
        }

    def _save_marker(self):
        write_json(os.path.join(self.run_dir, MARKER), self._marker())

    def _attach(self, image, direct_io=False):
        cmd = ["losetup", "--find", "--show"] + (["--direct-io=on"] if direct_io else []) + [image]
        loop = run_tool(cmd, "losetup").strip()
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
            if not cfg.xfs:  # an XFS log device needs no format of its own: mkfs.xfs writes the log
                run_tool(["mkfs.ext4", "-q", "-F", "-O", "journal_dev", "-b", str(cfg.block_size), self.journal_device],
                         "mkfs.ext4 -O journal_dev")
        self.device, self.lower_device = self._device(data_img)
        self.dev, self.lower_dev = dev_of(self.device), dev_of(self.lower_device)
        if cfg.xfs:
            self._make_xfs()
        else:
            self._make_ext4()
        self._mounted = True
        self._save_marker()
        for dev, limits in ((self.lower_dev, data_limits), (self.journal_lower_dev, journal_limits)):
            if dev and limits:
                # Recorded before the write, so that cleanup() finds a rule set by a crashed run.
                self._throttled[dev] = [n for n, _ in limits.items()]
                self._save_marker()
                throttle.apply(dev, limits)
                self.limits[dev] = limits

    def _make_ext4(self):
        cfg = self.cfg
        args = cfg.mkfs_args(self.journal_device)
        run_tool(["mkfs.ext4", *args, self.device], "mkfs.ext4 " + " ".join(args))
        self._sb = self._read_dumpe2fs()
        opts = cfg.mount_opts(self.journal_device)
        run_tool(["mount", "-t", "ext4", "-o", opts, self.device, self.mountpoint],
                 f"mount -o {opts} (see dmesg for the option ext4 refused)")

    def _make_xfs(self):
        """mkfs.xfs (with xfsprogs' test-harness variables when it would refuse the filesystem
        otherwise: under 300 MB, a log under 64 MiB, one allocation group; the kernel mounts
        them), the superblock read back, mount -t xfs."""
        cfg = self.cfg
        args = cfg.mkfs_args(self.journal_device)
        env = cfg.mkfs_env(self.device, self.run_dir)
        if env:
            log.debug("mkfs.xfs with %s set: %s", ", ".join(env), "; ".join(cfg.xfs_unsupported()))
        mkfs_xfs(args, self.device, env)
        self._sb = self._read_xfs()
        opts = cfg.mount_opts(self.journal_device)
        run_tool(["mount", "-t", "xfs"] + (["-o", opts] if opts else []) + [self.device, self.mountpoint],
                 f"mount -t xfs{' -o ' + opts if opts else ''} (see dmesg for the option xfs refused)")

    # ---- read-back ------------------------------------------------------------------

    def _read_dumpe2fs(self):
        raw = jbd2.dumpe2fs(self.device)
        jraw = jbd2.dumpe2fs(self.journal_device) if self.journal_device else {}
        src = jraw or raw
        jblocks = _int(src.get("Total journal blocks") or src.get("Journal length"))
        bs = _int(raw.get("Block size"))
        feats = raw.get("Filesystem features", "").split()
        return {
            "fs_type": "ext4",
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

    def _read_xfs(self):
        raw = xfs_superblock(self.device, self.journal_device)
        bs, lb = _int(raw.get("blocksize")), _int(raw.get("logblocks"))
        log_start = _int(raw.get("logstart"))
        return {
            "fs_type": kinds.XFS.fs_type,
            "block_size": bs,
            "inode_size": _int(raw.get("inodesize")),
            "block_count": _int(raw.get("dblocks")),
            "inode_count": _int(raw.get("icount")),
            "features": raw.get("features", []),
            "journal_blocks": lb,
            "journal_bytes": lb * bs if lb and bs else None,
            "external_journal": log_start == 0,
            "ag_count": _int(raw.get("agcount")),
            "ag_blocks": _int(raw.get("agblocks")),
            "log_start": log_start,
            "log_stripe_unit_bytes": _int(raw.get("logsunit")),
            "sector_size": _int(raw.get("sectsize")),
            "log_sector_size": _int(raw.get("logsectsize")) or _int(raw.get("sectsize")),
            "uuid": raw.get("uuid"),
            "raw": {k: v for k, v in raw.items() if k != "features"},
        }

    def geometry(self, refresh=False):
        """The filesystem's real geometry read back after mkfs: ext4's from `dumpe2fs -h`, XFS's
        superblock from xfs_db. Both give ``fs_type``, ``block_size``, ``inode_size``,
        ``block_count``, ``inode_count``, ``features``, ``journal_blocks`` (the journal's or
        log's, in blocks of ``block_size`` bytes), ``journal_bytes``, ``external_journal`` and
        ``raw`` (every field as text); the rest is the type's own (docs/lab.md)."""
        if refresh or self._sb is None:
            self._sb = self._read_xfs() if self.cfg.xfs else self._read_dumpe2fs()
        return json.loads(json.dumps(self._sb))

    def dumpe2fs(self, refresh=False):
        """The ext4 geometry read back with `dumpe2fs -h` after mkfs (sizes in blocks of
        ``block_size`` bytes; ``raw`` holds every field as text): geometry() of an ext4."""
        if self.cfg.xfs:
            raise JstallError("dumpe2fs reads ext4; this scratch filesystem is XFS: use geometry()")
        return self.geometry(refresh)

    def mount_options(self):
        """The options /proc/mounts shows for the mount point."""
        return system.mount_options(self.mountpoint)

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
            "fs_type": self.cfg.fs_type,
            "device": self.device, "dev": self.dev, "journal_device": self.journal_device,
            "journal_dev": self.journal_dev, "mountpoint": self.mountpoint,
            "mount_options": self.mount_options() if self._mounted else None,
            "throttle_backend": self.throttle_backend,
            "throttle_mode": self.cfg.throttle_mode,
            "lower_device": self.lower_device, "lower_dev": self.lower_dev,
            "journal_lower_device": self.journal_lower_device, "journal_lower_dev": self.journal_lower_dev,
            "throttles": {dev: lim.as_dict() for dev, lim in self.limits.items()},
            "mkfs_test_harness": self.cfg.xfs_unsupported(),
        }

    def emulated_devices(self):
        """[(role, fs-facing device 'MAJ:MIN', lower device name in /sys/block, lower 'MAJ:MIN')]
        of the emulated devices: 'data', and 'journal' with an external journal."""
        out = [("data", self.dev, os.path.basename(self.lower_device), self.lower_dev)]
        if self.journal_device:
            out.append(("journal", self.journal_dev, os.path.basename(self.journal_lower_device),
                        self.journal_lower_dev))
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
        with system.signals_deferred():
            try:
                if self.run_dir:
                    undo_run(self.run_dir, self._marker())
                self._loops, self._throttled, self._mounted, self.limits = [], {}, False, {}
            finally:
                if self._old_sigterm is not None:
                    system.restore_handlers({signal.SIGTERM: self._old_sigterm})
                    self._old_sigterm = None
