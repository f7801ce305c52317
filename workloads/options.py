"""The lab's options as a library: each option's name, kind, default and help, parsing a
value given as text, and building a LabConfig from parsed values. The command line
(lab_cmd.py) and sweeps (sweep.py) both build their configurations here. A pattern's own
options come from its class (patterns.py: ``defaults`` and ``options``)."""

from jstall import kinds
from jstall.errors import JstallError
from jstall.units import format_size, parse_size

from .fsconfig import FsConfig
from .lab import LabConfig
from .patterns import PATTERNS


def pattern_options():
    """(dest, kind, None, help) of every pattern option, in pattern order; an option several
    patterns take (e.g. --files) names each with its meaning and default."""
    out = {}
    for name, cls in PATTERNS.items():
        for dest, (kind, help_) in cls.options.items():
            default = cls.defaults.get(dest)
            text = f"{name}: {help_}" + (f" (default {default})" if default not in (None, False) else "")
            if dest in out:
                if out[dest][0] != kind:
                    raise TypeError(f"pattern option {dest}: {name} gives it kind {kind}, another {out[dest][0]}")
                out[dest] = (kind, out[dest][1] + "; " + text)
            else:
                out[dest] = (kind, text)
    return [(dest, kind, None, help_) for dest, (kind, help_) in out.items()]


# (dest, kind, default, help). kind: size, rate (0 or a size), int, float, bool, choice:a|b, str,
# list (strings, the option given once per value).
FS_OPTIONS = [
    ("fs_type", "choice:ext4|xfs", "ext4", "the filesystem made: ext4, or xfs (see docs/lab.md, XFS)"),
    ("fs_size", "size", None, "filesystem size (e.g. 64M, 2G; default 2G, or 4 × an internal journal larger than 512M; "
     "xfs: 4 × the log and 64M more for an internal log larger than 496M)"),
    ("journal_size", "size", "32M", "journal size (ext4 internal: whole MiB, 1,024 blocks or more; xfs: the log, "
     "xfsprogs' -l size=, 2M to 2038M, and at least what mkfs.xfs asks of the geometry)"),
    ("inode_size", "int", None, "inode size in bytes: ext4 128, 256 (default), 512, ... up to the block size (128: no "
     "room for attributes in the inode); xfs 512 (default), 1024 or 2048, at most half the block size"),
    ("block_size", "int", 4096, "filesystem block size in bytes"),
    ("journal_device", "bool", False, "put the journal on a second loop device (ext4: mkfs.ext4 -O journal_dev; "
     "xfs: an external log, -l logdev= and mount -o logdev=)"),
    ("fast_commit", "bool", False, "ext4: mkfs.ext4 -O fast_commit"),
    ("data_mode", "choice:ordered|writeback|journal", "ordered", "ext4: mount -o data=MODE"),
    ("barrier", "bool", True, "ext4: mount with barrier or nobarrier (xfs always flushes)"),
    ("commit_interval", "int", None, "ext4: mount -o commit=SECONDS"),
    ("log_buffer_size", "size", None, "xfs: the in-memory log buffers' size, mount -o logbsize= (16K, 32K, 64K, 128K "
     "or 256K)"),
    ("log_buffers", "int", None, "xfs: the number of in-memory log buffers, mount -o logbufs= (2 to 8)"),
    ("mkfs_options", "str", None, "more mkfs options: ext4 mke2fs' -E -O -N -i -m -g -G -L -e, e.g. '-E stride=4 "
     "-O ^metadata_csum'; xfs mkfs.xfs' -d -i -l -m -n -s -L, e.g. '-d agcount=8 -m reflink=0'"),
    ("mount_options", "str", None, "more mount options, comma-separated, e.g. noatime,journal_checksum"),
    ("device_profile", "choice:none|hdd|ssd", "none", "emulate a slow filesystem device (see docs/lab.md)"),
    ("read_iops", "int", None, "filesystem device: read operations per second (0 = unlimited)"),
    ("write_iops", "int", None, "filesystem device: write operations per second (0 = unlimited)"),
    ("read_bps", "rate", None, "filesystem device: read bytes per second (e.g. 50M)"),
    ("write_bps", "rate", None, "filesystem device: write bytes per second (e.g. 50M)"),
    ("journal_device_profile", "choice:none|hdd|ssd", "none", "emulate a slow external journal (or log) device"),
    ("throttle_mode", "choice:stacked|direct", "stacked",
     "stacked: the filesystem's loop device does direct I/O to a throttled lower loop device, so every request "
     "(metadata, journal, data, flush) is paced; direct: the throttle sits on the filesystem's own loop device and "
     "lets ext4/jbd2 metadata writes through unpaced (see docs/lab.md)"),
    ("journal_read_iops", "int", None, "external journal (or log) device: read operations per second"),
    ("journal_write_iops", "int", None, "external journal (or log) device: write operations per second"),
    ("journal_read_bps", "rate", None, "external journal (or log) device: read bytes per second"),
    ("journal_write_bps", "rate", None, "external journal (or log) device: write bytes per second"),
]
PATTERN_OPTIONS = pattern_options()
RUN_OPTIONS = [
    ("jobs", "int", 1, "concurrent processes"),
    ("seed", "int", 1, "seed of every random choice (same seed, same work)"),
]
PATTERN_NAMES = tuple(PATTERNS)
SWEEP_KINDS = ("size", "rate", "int", "float", "bool", "choice")



def flag(dest):
    return "--" + dest.replace("_", "-")


def parse_value(dest, kind, text):
    """Parse one option value given as text; raise JstallError naming the option."""
    opt = flag(dest)
    if kind == "size":
        if dest == "file_size" and str(text).strip() == "0":
            return "0"  # fdtree's empty files (smallfile refuses it)
        parse_size(text, opt)
        return str(text)
    if kind == "rate":
        return 0 if str(text) == "0" else parse_size(text, opt)
    if kind in ("int", "float"):
        try:
            return int(text) if kind == "int" else float(text)
        except ValueError:
            raise JstallError(f"{opt} {text}: not a{'n integer' if kind == 'int' else ' number'}") from None
    if kind == "bool":
        t = str(text).lower()
        if t in ("on", "yes", "true", "1"):
            return True
        if t in ("off", "no", "false", "0"):
            return False
        raise JstallError(f"{opt} {text}: give on or off")
    if kind.startswith("choice:"):
        choices = kind.split(":", 1)[1].split("|")
        if text not in choices:
            raise JstallError(f"{opt} {text}: choose one of {', '.join(choices)}")
        return text
    return text



ALL_OPTIONS = FS_OPTIONS + PATTERN_OPTIONS + RUN_OPTIONS


def default_fs_size(journal_size, journal_device, fs_type="ext4"):
    """2G, or room for an internal journal larger than 512M (ext4: it takes at most 40% of the
    fs) or an internal XFS log larger than 496M (it lives in one of four allocation groups)."""
    jb = parse_size(journal_size, "--journal-size")
    if kinds.of_fs_type(fs_type) is kinds.XFS:
        return "2G" if journal_device or 4 * jb <= (2 << 30) - (64 << 20) else format_size(4 * jb + (64 << 20))
    return "2G" if journal_device or jb <= 512 << 20 else format_size(4 * jb)


def config_from(values, pattern, record=True, min_ms=1.0, output_dir=None, scratch_dir=None, progress=False,
                extra=None):
    """LabConfig from parsed option values {dest: value or None}."""
    fs = {}
    for dest, kind, default, _ in FS_OPTIONS:
        v = values.get(dest)
        fs[dest] = default if v is None else v
    if fs["fs_size"] is None:
        fs["fs_size"] = default_fs_size(fs["journal_size"], fs["journal_device"], fs["fs_type"])
    params = {dest: values[dest] for dest, *_ in PATTERN_OPTIONS if values.get(dest) is not None}
    run_vals = {dest: (default if values.get(dest) is None else values[dest]) for dest, _, default, _ in RUN_OPTIONS}
    return LabConfig(fs=FsConfig(**fs), pattern=pattern, params=params, jobs=run_vals["jobs"], seed=run_vals["seed"],
                     record=record, min_ms=min_ms, output_dir=output_dir, scratch_dir=scratch_dir, progress=progress,
                     extra=extra)
