"""Scratch filesystem configuration: sizes, mke2fs and mount options, and their validation.

Everything here can be checked without root and without touching the system: ``FsConfig``
validates a configuration and derives the mke2fs arguments and the mount options from it.
"""

import dataclasses
import re
import shlex

from jstall.errors import JstallError

from . import throttle

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
