"""Scratch filesystem configuration: sizes, mkfs and mount options, and their validation.

Everything here can be checked without root and without touching the system: ``FsConfig``
validates a configuration and derives the mkfs arguments (mke2fs for ext4, mkfs.xfs for XFS)
and the mount options from it. What only mkfs.xfs knows (the smallest log of a geometry) is
left to it: ScratchFs turns its refusal into one line.
"""

import dataclasses
import re
import shlex

from jstall import jbd2, kinds, xfs
from jstall.errors import JstallError
from jstall.units import format_size, parse_size

from . import throttle

FS_TYPES = kinds.FS_TYPES
DATA_MODES = ("ordered", "writeback", "journal")
BLOCK_SIZES = (1024, 2048, 4096)
#: ext4's journal holds 1,024 to 10,240,000 blocks (mke2fs); an internal one within half the
#: blocks left free after the inode tables (checked as 40% of the filesystem).
JOURNAL_MIN_BLOCKS, JOURNAL_MAX_BLOCKS = jbd2.MIN_BLOCKS, jbd2.MAX_BLOCKS
#: blocks the kernel takes for fast commits from an external journal (JBD2_DEFAULT_FAST_COMMIT_BLOCKS)
FAST_COMMIT_BLOCKS = 256
#: how an emulated device is built: "stacked" (a direct-I/O loop device over a throttled lower
#: loop device: every request paced) or "direct" (one throttled loop device: metadata unpaced)
THROTTLE_MODES = ("stacked", "direct")

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
#: XFS's mount options, refused on ext4 (each names the lab option that sets it, if any)
MOUNT_XFS_ONLY = {"logbsize": "--log-buffer-size", "logbufs": "--log-buffers", "logdev": "--journal-device"}

# ---- XFS -----------------------------------------------------------------------------------

#: the defaults FsConfig fills in per filesystem type (the command line's are in options.py).
#: XFS: 320M is above the 300 MB mkfs.xfs formats without its test-harness variables; an 8M
#: log is above the smallest log mkfs.xfs takes on it (1,368 4-KiB blocks, 5.3 MiB).
TYPE_DEFAULTS = {"ext4": {"fs_size": "64M", "journal_size": "4M", "inode_size": 256},
                 "xfs": {"fs_size": "320M", "journal_size": "8M", "inode_size": 512}}
#: XFS v5 (metadata CRCs, mkfs.xfs's default): 512 to 2048 bytes, at most half a block
XFS_INODE_SIZES = (512, 1024, 2048)
#: mount -o logbsize= (the kernel takes 16k, 32k, 64k, 128k or 256k) and logbufs= (2 to 8)
XFS_LOG_BUFFER_SIZES = tuple(16384 << k for k in range(5))
XFS_LOG_BUFFERS = (2, 8)
#: mkfs.xfs's bounds on any log (jstall.xfs; the smallest log of a geometry, 1,368 to 4,175
#: blocks on the lab's sizes, only mkfs.xfs computes)
XFS_LOG_MIN_BYTES, XFS_LOG_MAX_BYTES = xfs.MIN_LOG_BYTES, xfs.MAX_LOG_BYTES
XFS_LOG_MIN_BLOCKS, XFS_LOG_MAX_BLOCKS = xfs.MIN_BLOCKS, xfs.MAX_BLOCKS
#: what mkfs.xfs (5.19 and later) refuses outside xfsprogs' own tests: a filesystem under
#: 300 MB (MiB in fact), a log under 64 MiB, fewer than two allocation groups. The kernel
#: mounts all three; the variables of xfsprogs' test harness lift the refusal.
XFS_SUPPORTED_FS_BYTES, XFS_SUPPORTED_LOG_BYTES = 300 << 20, 64 << 20
XFS_TEST_HARNESS = ("TEST_DIR", "TEST_DEV", "QA_CHECK_FS")
#: an allocation group holds 16 MiB at least; mkfs.xfs makes 1 below 32 MiB, 2 below 64 MiB,
#: then 4 (up to 4 TiB); an internal log lives inside one group
XFS_AG_MIN_BYTES = 16 << 20
#: mkfs.xfs options the pass-through accepts (each with a value), and sub-options the lab sets
MKFS_XFS_PASSTHROUGH = ("-d", "-i", "-l", "-m", "-n", "-s", "-L")
MKFS_XFS_OWN = {"-b": "use --block-size", "-f": "the lab always gives it", "-q": "the lab always gives it",
                "-K": "the lab always gives it (no discard)", "-N": "the lab formats for real",
                "-r": "the lab makes no realtime device", "-p": "the lab makes an empty filesystem"}
MKFS_XFS_SUBOPTS_OWN = {
    "-d": {"size": "the data section is --fs-size", "name": "the lab names its own device",
           "file": "the lab names its own device"},
    "-i": {"size": "use --inode-size", "perblock": "use --inode-size"},
    "-l": {"size": "use --journal-size", "logdev": "use --journal-device", "internal": "use --journal-device",
           "file": "use --journal-device", "name": "use --journal-device", "agnum": "the lab places the log"},
    "-m": {"crc": "the lab makes v5 XFS (crc=1), the format --inode-size is checked for"},
}
#: mke2fs options, refused with --fs-type xfs (mkfs.xfs reads some of the same letters otherwise)
MKE2FS_ONLY = {"-E", "-O", "-J", "-I", "-T", "-t", "-g", "-G", "-e"}
#: ext4's mount options, refused with --fs-type xfs
MOUNT_EXT4_ONLY = {"data", "commit", "journal_path", "journal_dev", "journal_checksum", "journal_async_commit",
                   "noload", "barrier", "nobarrier", "delalloc", "nodelalloc", "data_err", "journal_ioprio",
                   "auto_da_alloc", "noauto_da_alloc", "init_itable", "noinit_itable", "dioread_nolock",
                   "dioread_lock", "max_batch_time", "min_batch_time"}
MOUNT_XFS_OWN = {"logbsize": "use --log-buffer-size", "logbufs": "use --log-buffers",
                 "logdev": "use --journal-device", "rtdev": "the lab makes no realtime device",
                 "ro": "the lab writes", "norecovery": "the lab studies journals"}


def _split_tokens(value):
    if value is None:
        return []
    if isinstance(value, str):
        return shlex.split(value)
    return [str(v) for v in value]


def _xfs_subopts(value):
    """{name: value or None} of a mkfs.xfs option's comma-separated sub-options."""
    out = {}
    for part in value.split(","):
        if part:
            name, _, v = part.partition("=")
            out[name.strip()] = v.strip() if _ else None
    return out


def xfs_agcount(fs_bytes, mkfs_tokens=()):
    """Allocation groups mkfs.xfs makes: -d agcount= or agsize= when given, else its default
    (1 below 32 MiB, 2 below 64 MiB, then 4; beyond 4 TiB groups of at most 1 TiB)."""
    toks = list(mkfs_tokens)
    for opt, val in zip(toks[::2], toks[1::2]):
        if opt == "-d":
            sub = _xfs_subopts(val)
            try:
                if sub.get("agcount"):
                    return int(sub["agcount"])
                if sub.get("agsize"):
                    return -(-fs_bytes // parse_size(sub["agsize"], "-d agsize"))
            except (ValueError, JstallError):
                return None  # mkfs.xfs says what is wrong with it
    if fs_bytes < 2 * XFS_AG_MIN_BYTES:
        return 1
    if fs_bytes < 4 * XFS_AG_MIN_BYTES:
        return 2
    return max(4, -(-fs_bytes // (1 << 40)))


@dataclasses.dataclass
class FsConfig:
    """A scratch filesystem: ``fs_type`` "ext4" (default) or "xfs". Sizes: bytes or text
    ('64M', '1G'); inode and block sizes in bytes; commit_interval in seconds; limits in
    operations or bytes per second. ``fs_size``, ``journal_size`` and ``inode_size`` left
    None take the type's defaults (TYPE_DEFAULTS: ext4 64M, 4M, 256; xfs 320M, 8M, 512).

    With XFS ``journal_size`` is the log's size (mkfs.xfs -l size=), ``journal_device`` an
    external log (-l logdev=, mount -o logdev=), and ``log_buffer_size``/``log_buffers`` the
    in-memory log buffers (mount -o logbsize=/logbufs=; XFS only). ``data_mode`` (other than
    ordered), ``fast_commit``, ``commit_interval`` and ``barrier=False`` are ext4's.

    ``device_profile`` and the explicit ``read_iops/write_iops/read_bps/write_bps`` throttle the
    filesystem's device; the ``journal_*`` ones throttle the external journal (or log) device
    (``journal_device=True`` only). ``mkfs_options`` (ext4: e.g. "-E stride=4 -O
    ^metadata_csum"; xfs: e.g. "-d agcount=8 -m reflink=0") and ``mount_options`` (e.g.
    "noatime,journal_checksum") pass other options through.
    """

    fs_type: str = "ext4"
    fs_size: object = None
    journal_size: object = None
    inode_size: int = None
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
    log_buffer_size: object = None
    log_buffers: int = None

    def __post_init__(self):
        for name, value in TYPE_DEFAULTS.get(self.fs_type, TYPE_DEFAULTS["ext4"]).items():
            if getattr(self, name) is None:
                setattr(self, name, value)

    @property
    def xfs(self):
        return kinds.of_fs_type(self.fs_type) is kinds.XFS

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
    def log_buffer_bytes(self):
        """mount -o logbsize= in bytes (XFS), or None."""
        return None if self.log_buffer_size is None else parse_size(self.log_buffer_size, "--log-buffer-size")

    @property
    def agcount(self):
        """Allocation groups mkfs.xfs will make (XFS; None when the pass-through's value is bad)."""
        return xfs_agcount(self.fs_bytes, self._mkfs_tokens())

    def xfs_unsupported(self):
        """Why mkfs.xfs would refuse this filesystem outside xfsprogs' tests (XFS; [] for one
        it formats as it is): under 300 MB, a log under 64 MiB, fewer than two groups."""
        if not self.xfs:
            return []
        out = []
        if self.fs_bytes < XFS_SUPPORTED_FS_BYTES:
            out.append(f"the filesystem is under 300 MB ({format_size(self.fs_bytes)})")
        if self.journal_bytes < XFS_SUPPORTED_LOG_BYTES:
            out.append(f"the log is under 64 MiB ({format_size(self.journal_bytes)})")
        ag = self.agcount
        if ag is not None and ag < 2:
            out.append("it has one allocation group")
        return out

    def mkfs_env(self, device=None, run_dir=None):
        """The environment variables mkfs.xfs runs with: xfsprogs' test-harness variables
        (TEST_DIR, TEST_DEV, QA_CHECK_FS) when it would otherwise refuse the filesystem
        (xfs_unsupported()), else none. Only mkfs.xfs sees them."""
        if not self.xfs_unsupported():
            return {}
        return {"TEST_DIR": run_dir or "/", "TEST_DEV": device or "/dev/null", "QA_CHECK_FS": "1"}

    @property
    def journal_image_bytes(self):
        """Size of an external journal's (or XFS log's) device. XFS: the log, which starts at
        the device's first block. ext4: the journal and 4 KiB more. The device starts
        with an ext4 superblock that names it, so its journal begins one or two blocks later than
        an internal one, and mke2fs uses whole 4 KiB of it; the extra 4 KiB keep at least as many
        usable blocks as an internal journal of the same size (and the smallest one above the
        kernel's minimum of 1,024). With fast_commit the kernel takes its fast-commit area
        (JBD2_DEFAULT_FAST_COMMIT_BLOCKS, 256 blocks) from the end of an external journal, so
        those blocks are added too, as mke2fs adds them to an internal journal."""
        if self.xfs:
            return self.journal_bytes
        return self.journal_bytes + 4096 + (FAST_COMMIT_BLOCKS * self.block_size if self.fast_commit else 0)

    def image_bytes(self):
        """Bytes of every image file the filesystem needs (sparse, but may fill)."""
        return self.fs_bytes + (self.journal_image_bytes if self.journal_device else 0)

    def mkfs_args(self, journal_device_path=None):
        """mkfs arguments after validation (without the device): mke2fs's for ext4, mkfs.xfs's
        for XFS. ``journal_device_path``: the external journal's (log's) device."""
        if self.xfs:
            return self._mkfs_xfs_args(journal_device_path)
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
        args += ["-E", ",".join(ext)] + rest
        if self.journal_device and journal_device_path:
            args += ["-J", f"device={journal_device_path}"]
        return args

    def _mkfs_xfs_args(self, journal_device_path):
        args = ["-q", "-f", "-K", "-b", f"size={self.block_size}", "-i", f"size={self.inode_size}"]
        if self.journal_device:
            args += ["-l", f"logdev={journal_device_path or 'LOGDEV'},size={self.journal_bytes}"]
        else:
            args += ["-l", f"size={self.journal_bytes}"]
        return args + _split_tokens(self.mkfs_options)

    def mount_opts(self, journal_device_path=None):
        """The -o string the filesystem is mounted with ('' when none: XFS's defaults)."""
        if self.xfs:
            opts = []
            if self.log_buffer_size is not None:
                opts.append(f"logbsize={self.log_buffer_bytes >> 10}k")  # as /proc/mounts shows it
            if self.log_buffers is not None:
                opts.append(f"logbufs={self.log_buffers}")
            if journal_device_path:
                opts.append(f"logdev={journal_device_path}")
        else:
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
        d["log_buffer_size_bytes"] = self.log_buffer_bytes
        if self.xfs:  # ext4's options mean nothing here (validate() refuses all but their defaults)
            d["data_mode"] = d["fast_commit"] = d["commit_interval"] = None
        return d

    # ---- validation ---------------------------------------------------------------

    def validate(self):
        """Raise JstallError for an impossible or refused configuration; touch nothing."""
        if self.fs_type not in FS_TYPES:
            raise JstallError(f"--fs-type {self.fs_type}: choose one of {', '.join(FS_TYPES)}")
        if self.xfs:
            return self._validate_xfs()
        fs, jb = self.fs_bytes, self.journal_bytes
        if self.block_size not in BLOCK_SIZES:
            raise JstallError(f"--block-size {self.block_size}: choose one of {', '.join(map(str, BLOCK_SIZES))}")
        isz = self.inode_size
        if not isinstance(isz, int) or isz < 128 or isz & (isz - 1) or isz > self.block_size:
            raise JstallError(f"--inode-size {isz}: must be a power of two from 128 to the block size "
                              f"({self.block_size}), e.g. 128, 256 or 512")
        self._validate_fs_size()
        if not self.journal_device and jb % (1 << 20):
            raise JstallError(f"--journal-size {self.journal_size}: mke2fs takes an internal journal size in "
                              "whole MiB; give e.g. 4M or 16M")
        if jb % self.block_size:
            raise JstallError(f"--journal-size {self.journal_size}: "
                              f"not a whole number of {self.block_size}-byte blocks")
        blocks = jb // self.block_size
        if not JOURNAL_MIN_BLOCKS <= blocks <= JOURNAL_MAX_BLOCKS:
            lo = format_size(JOURNAL_MIN_BLOCKS * self.block_size)
            raise JstallError(f"--journal-size {self.journal_size} is {blocks} blocks; ext4 takes "
                              f"{JOURNAL_MIN_BLOCKS} to {JOURNAL_MAX_BLOCKS:,} blocks "
                              f"(at least {lo} with {self.block_size}-byte blocks)")
        # mke2fs (figure_journal_size) wants the journal within half the blocks left free after
        # the inode tables and bitmaps: keep it to 40% of the filesystem.
        if not self.journal_device and jb * 5 > fs * 2:
            raise JstallError(f"--journal-size {format_size(jb)} does not fit in --fs-size {format_size(fs)}: "
                              "an internal journal takes at most 40% of the filesystem; "
                              f"give --fs-size {format_size(4 * jb)} or more")
        if self.throttle_mode not in THROTTLE_MODES:
            raise JstallError(f"--throttle-mode {self.throttle_mode}: choose one of {', '.join(THROTTLE_MODES)}")
        if self.data_mode not in DATA_MODES:
            raise JstallError(f"--data-mode {self.data_mode}: choose one of {', '.join(DATA_MODES)}")
        if self.commit_interval is not None and (not isinstance(self.commit_interval, int) or self.commit_interval < 0):
            raise JstallError(f"--commit-interval {self.commit_interval}: give whole seconds ≥ 0 "
                              "(0 = ext4's default, 5)")
        if self.fast_commit and self.data_mode == "journal":
            raise JstallError("--fast-commit does nothing with --data-mode journal (ext4 turns it off); "
                              "drop one of them")
        self._validate_limits()
        if self.log_buffer_size is not None:
            raise JstallError("--log-buffer-size is XFS's (mount -o logbsize=); ext4 has no log buffers to size: "
                              "drop it, "
                              "or give --fs-type xfs")
        if self.log_buffers is not None:
            raise JstallError("--log-buffers is XFS's (mount -o logbufs=); ext4 has no log buffers to count: drop it, "
                              "or give --fs-type xfs")
        self._validate_mkfs()
        self._validate_mount()

    def _validate_fs_size(self):
        fs = self.fs_bytes
        if fs < 16 << 20:
            raise JstallError(f"--fs-size {format_size(fs)}: too small; give at least 16M")
        if fs % self.block_size:
            raise JstallError(f"--fs-size {fs}: not a whole number of {self.block_size}-byte blocks")

    def _validate_limits(self):
        self.data_limits()
        jl = self.journal_limits()
        if jl and not self.journal_device:
            what = "log" if self.xfs else "journal"
            raise JstallError(f"journal device limits need an external {what}; add --journal-device, or throttle the "
                              f"filesystem's device (it holds an internal {what})")

    def _validate_xfs(self):
        """XFS: what can be checked without mkfs.xfs. The smallest log of a geometry (its
        largest transaction's reservation) is mkfs.xfs's to say: ScratchFs quotes its reason."""
        fs, jb, bs = self.fs_bytes, self.journal_bytes, self.block_size
        if bs not in BLOCK_SIZES:
            raise JstallError(f"--block-size {bs}: choose one of {', '.join(map(str, BLOCK_SIZES))}")
        isz = self.inode_size
        if isz not in XFS_INODE_SIZES or isz > bs // 2:
            fits = [str(i) for i in XFS_INODE_SIZES if i <= bs // 2]
            fits = ", ".join(fits[:-1]) + " or " + fits[-1] if len(fits) > 1 else fits[0]
            raise JstallError(f"--inode-size {isz}: XFS (v5, with metadata checksums) takes 512 to 2048 bytes, at most "
                              f"half a block ({fits} with {bs}-byte blocks); give 512")
        self._validate_fs_size()
        if jb % bs:
            raise JstallError(f"--journal-size {self.journal_size}: not a whole number of {bs}-byte blocks")
        blocks = jb // bs
        if jb < XFS_LOG_MIN_BYTES or blocks < XFS_LOG_MIN_BLOCKS:
            lo = format_size(max(XFS_LOG_MIN_BYTES, XFS_LOG_MIN_BLOCKS * bs))
            raise JstallError(f"--journal-size {self.journal_size}: an XFS log (mkfs.xfs -l size=) takes "
                              f"at least {lo}, "
                              "and most geometries more (5.3M on 320M with 4 KiB blocks); give 8M or more")
        hi_blocks = min(XFS_LOG_MAX_BYTES // bs, XFS_LOG_MAX_BLOCKS)
        if blocks > hi_blocks:
            raise JstallError(f"--journal-size {self.journal_size}: an XFS log takes "
                              f"at most {format_size(hi_blocks * bs)} "
                              f"({hi_blocks:,} blocks of {bs} bytes); give a smaller one")
        ag = self.agcount
        if not self.journal_device and ag and jb >= fs // ag:
            need = ag * (-(-jb // (1 << 20)) + 1) << 20
            raise JstallError(f"--journal-size {format_size(jb)} does not fit in --fs-size {format_size(fs)}: "
                              f"an internal XFS log lives in one of its {ag} allocation groups "
                              f"({format_size(fs // ag)} each); give "
                              f"--fs-size {format_size(max(need, 64 << 20))} or more, or --journal-device")
        if self.throttle_mode not in THROTTLE_MODES:
            raise JstallError(f"--throttle-mode {self.throttle_mode}: choose one of {', '.join(THROTTLE_MODES)}")
        if self.data_mode not in (None, "ordered"):
            raise JstallError(f"--data-mode {self.data_mode} is ext4's (mount -o data=); "
                              "XFS logs metadata only and has "
                              "no data modes: drop it, or give --fs-type ext4")
        if self.fast_commit:
            raise JstallError("--fast-commit is ext4's (mkfs.ext4 -O fast_commit); "
                              "XFS has no fast commits: drop it, or "
                              "give --fs-type ext4")
        if self.commit_interval is not None:
            raise JstallError("--commit-interval is ext4's (mount -o commit=); "
                              "XFS has no commit interval mount option: "
                              "drop it, or give --fs-type ext4")
        if not self.barrier:
            raise JstallError("--no-barrier is ext4's; XFS always flushes (Linux 4.19 removed its nobarrier): drop it")
        self._validate_limits()
        if self.log_buffer_size is not None and self.log_buffer_bytes not in XFS_LOG_BUFFER_SIZES:
            raise JstallError(f"--log-buffer-size {self.log_buffer_size}: XFS takes 16K, 32K, 64K, 128K or 256K "
                              "(mount -o logbsize=)")
        n, (lo, hi) = self.log_buffers, XFS_LOG_BUFFERS
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or not lo <= n <= hi):
            raise JstallError(f"--log-buffers {n}: XFS takes 2 to 8 (mount -o logbufs=)")
        self._validate_mkfs_xfs()
        self._validate_mount()

    def _mkfs_tokens(self):
        try:
            return _split_tokens(self.mkfs_options)
        except ValueError as e:
            raise JstallError(f"--mkfs-options: {e}; quote it as one shell word list") from None

    def _validate_mkfs_xfs(self):
        toks = self._mkfs_tokens()
        accepted = " ".join(MKFS_XFS_PASSTHROUGH)
        i = 0
        while i < len(toks):
            opt = toks[i]
            if opt in MKE2FS_ONLY:
                raise JstallError(f"--mkfs-options {opt}: a mke2fs option; with --fs-type xfs the pass-through takes "
                                  f"mkfs.xfs's {accepted}, each with a value")
            if opt in MKFS_XFS_OWN:
                raise JstallError(f"--mkfs-options {opt}: not passed through; {MKFS_XFS_OWN[opt]}")
            if opt not in MKFS_XFS_PASSTHROUGH:
                raise JstallError(f"--mkfs-options {opt}: not accepted; with --fs-type xfs the pass-through takes "
                                  f"{accepted}, each with a value")
            if i + 1 >= len(toks) or toks[i + 1].startswith("-"):
                raise JstallError(f"--mkfs-options {opt}: needs a value (e.g. '{opt} VALUE')")
            for name, value in _xfs_subopts(toks[i + 1]).items():
                why = MKFS_XFS_SUBOPTS_OWN.get(opt, {}).get(name)
                if why and not (opt, name, value) == ("-m", "crc", "1"):
                    raise JstallError(f"--mkfs-options {opt} {name}{'=' + value if value else ''}: not passed "
                                      f"through; {why}")
            i += 2

    def _validate_mkfs(self):
        toks = self._mkfs_tokens()
        i = 0
        while i < len(toks):
            opt = toks[i]
            if opt in MKFS_OWN:
                raise JstallError(f"--mkfs-options {opt}: not passed through; {MKFS_OWN[opt]}")
            if opt not in MKFS_PASSTHROUGH:
                hint = "; -d, -l and -s are mkfs.xfs's: give --fs-type xfs" if opt in ("-d", "-l", "-s") else ""
                raise JstallError(f"--mkfs-options {opt}: not accepted; the pass-through takes "
                                  f"{' '.join(sorted(MKFS_PASSTHROUGH))}, each with a value{hint}")
            if i + 1 >= len(toks) or toks[i + 1].startswith("-"):
                raise JstallError(f"--mkfs-options {opt}: needs a value (e.g. '{opt} VALUE')")
            if opt == "-O":
                for feat in toks[i + 1].split(","):
                    name = feat.lstrip("^")
                    if name in MKFS_FEATURES_OWN:
                        raise JstallError(f"--mkfs-options -O {feat}: not passed through; {MKFS_FEATURES_OWN[name]}")
            if opt == "-E" and re.search(r"(^|,)(lazy_journal_init|lazy_itable_init|nodiscard|discard)\b", toks[i + 1]):
                raise JstallError(f"--mkfs-options -E {toks[i + 1]}: the lab sets lazy_*_init and discard itself; "
                                  "drop them")
            i += 2

    def _validate_mount(self):
        for part in _split_tokens(self.mount_options):
            for opt in part.split(","):
                if not opt:
                    continue
                if not re.fullmatch(r"[a-z0-9_]+(=[A-Za-z0-9_.:/-]+)?", opt):
                    raise JstallError(f"--mount-options {opt}: not a mount option (write name or name=value, "
                                      "comma-separated)")
                name = opt.split("=", 1)[0]
                if self.xfs:
                    if name in MOUNT_XFS_OWN:
                        raise JstallError(f"--mount-options {opt}: not passed through; {MOUNT_XFS_OWN[name]}")
                    if name in MOUNT_EXT4_ONLY:
                        raise JstallError(f"--mount-options {opt}: ext4's; XFS does not take it")
                    continue
                if name in MOUNT_OWN:
                    raise JstallError(f"--mount-options {opt}: not passed through; {MOUNT_OWN[name]}")
                if name in MOUNT_XFS_ONLY:
                    raise JstallError(f"--mount-options {opt}: XFS's; ext4 does not take it (with --fs-type xfs: "
                                      f"{MOUNT_XFS_ONLY[name]})")
