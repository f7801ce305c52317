"""Mounted journaling filesystems (ext4 with jbd2, XFS) and their journals: device
resolution for -d, the journal (or log) geometry stored in a session's metadata, and the
kernel's own counters read at the start and end (/proc/fs/jbd2, /sys/fs/xfs)."""

import os
import re
import stat

from jstall import jbd2, kinds, system, xfs
from jstall.errors import JstallError


def kernel_dev(major, minor):
    """dev_t as the kernel encodes it inside (MKDEV): major << 20 | minor."""
    return (major << 20) | minor


def dev_name(kdev):
    """'MAJOR:MINOR' of a kernel-encoded dev_t."""
    return f"{kdev >> 20}:{kdev & 0xFFFFF}"


def parse_dev(text):
    major, minor = text.split(":")
    return int(major), int(minor)


#: the filesystems whose journals jstall records, by their mount table type
FSTYPES = kinds.FS_TYPES


def journaled_mounts(fstypes=FSTYPES):
    """{'MAJ:MIN': {'mountpoint', 'source', 'options', 'fstype'}} of mounted ext4 and XFS
    filesystems (first mount of each)."""
    mounts = {}
    for m in system.mounts():
        if m["fstype"] in fstypes and m["dev"] not in mounts:
            mounts[m["dev"]] = {"mountpoint": m["mountpoint"], "source": m["source"], "options": m["options"],
                                "fstype": m["fstype"]}
    return mounts


def ext4_mounts():
    """journaled_mounts() of ext4 only."""
    return journaled_mounts(("ext4",))


def resolve_device(spec, mounts=None):
    """'MAJ:MIN' of the mounted ext4 or XFS named by spec: MAJ:MIN, a block device, or a path on it."""
    mounts = journaled_mounts() if mounts is None else mounts
    if re.fullmatch(r"\d+:\d+", spec):
        dev = spec
    else:
        try:
            st = os.stat(spec)
        except OSError as e:
            raise JstallError(f"-d {spec}: {e.strerror}; give a mount point, a block device or MAJOR:MINOR") from None
        num = st.st_rdev if stat.S_ISBLK(st.st_mode) else st.st_dev
        dev = f"{os.major(num)}:{os.minor(num)}"
    if dev not in mounts:
        raise JstallError(f"-d {spec}: device {dev} is not a mounted ext4 or XFS filesystem; give one of those "
                          "(see findmnt -t ext4,xfs)")
    return dev


def proc_info_name(dev, source, sb):
    """The /proc/fs/jbd2 directory name of a journal: '<fsdev>-<journal inode>' for an
    internal journal, '<journal device>' for an external one (jbd2_journal_init_*)."""
    ext = sb.get("Journal device")
    if ext:
        num = int(ext.split()[0], 0)
        try:
            with open(f"/sys/dev/block/{os.major(num)}:{os.minor(num)}/uevent") as f:
                for line in f:
                    if line.startswith("DEVNAME="):
                        return line.strip().split("=", 1)[1]
        except OSError:
            return None
    inode = sb.get("Journal inode", "8")
    return f"{os.path.basename(os.path.realpath(source))}-{inode}"


def read_kernel_counters(journal, end):
    """Read a journal's own counters into its description at ``end`` ('start' or 'end'):
    jbd2's /proc/fs/jbd2/<name>/info, XFS's /sys/fs/xfs/<name>/stats/stats."""
    if kinds.is_xfs(journal):
        stats = xfs.read_counters(journal["xfs_name"])
        # JSON keys are text: a value past the names the kernel's lines have here is kept by
        # its position, "0", "1", ... (analyzer.xfs_logs reads them back)
        journal[f"xfs_stats_{end}"] = ({line: {str(k): v for k, v in values.items()} for line, values in stats.items()}
                                       if stats is not None else None)
    else:
        journal[f"proc_info_{end}"] = jbd2.read_counters(journal["proc_info_name"])


def describe(dev, mount):
    """The journal description stored in a session's metadata (docs/session-format.md)."""
    if kinds.of_fs_type(mount.get("fstype")) is kinds.XFS:
        return describe_xfs(dev, mount)
    source = mount["source"]
    try:
        sb = jbd2.read_geometry(mount)
    except JstallError:
        base = os.path.basename(os.path.realpath(source)) + "-"
        if not any(d.startswith(base) for d in _jbd2_dirs()):  # no journal running for it
            raise JstallError(f"{mount['mountpoint']} ({dev}) has no journal; nothing for jbd2 to record") from None
        raise
    features = sb.get("Filesystem features", "").split()
    if "has_journal" not in features:
        raise JstallError(f"{mount['mountpoint']} ({dev}) has no journal; nothing for jbd2 to record")
    ext = sb.get("Journal device")
    journal_dev = None
    if ext:
        num = int(ext.split()[0], 0)
        journal_dev = f"{os.major(num)}:{os.minor(num)}"
    blocks = sb.get("Total journal blocks") or sb.get("Journal length")
    fc = int(sb.get("Fast commit length", "0") or 0)
    journal_blocks = int(blocks) if blocks else None
    name = proc_info_name(dev, source, sb)
    return {
        "dev": dev,
        "device": source,
        "mountpoint": mount["mountpoint"],
        "mount_options": mount["options"],
        "block_size": int(sb.get("Block size", "0")),
        "inode_size": int(sb.get("Inode size", "0")),
        "features": features,
        "journal_features": sb.get("Journal features", "").split(),
        "journal_blocks": journal_blocks,
        "fast_commit_blocks": fc,
        # j_max_transaction_buffers: the recorder fills it in from the probes' reading
        # of journal_t (its formula, jbd2_journal_get_max_txn_bufs(), varies by version).
        "max_transaction_blocks": None,
        "journal_device": journal_dev,
        "fast_commit": "fast_commit" in features,
        "proc_info_name": name,
        "proc_info_start": None,
        "proc_info_end": None,
        # the largest request the device takes: how many logged blocks one log write carries
        "max_request_kib": max_request_kib(dev),
        "max_segments": max_segments(dev),
        **cache_of(dev),
    }


def describe_xfs(dev, mount):
    """An XFS log's description: its geometry from xfs_info (``log_bytes`` is the kernel's
    l_logsize), sizes in blocks of the log's block size; the fields of ext4's journal that
    XFS has not are empty. ``xfs_stats_start``/``_end``: /sys/fs/xfs/<name>/stats/stats."""
    geo = xfs.read_geometry(mount)
    log_dev = None
    if geo.log_device:
        try:
            st = os.stat(geo.log_device)
            log_dev = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
        except OSError:
            log_dev = None
    return {
        "kind": kinds.XFS.name,
        "dev": dev,
        "device": mount["source"],
        "mountpoint": mount["mountpoint"],
        "mount_options": mount["options"],
        "block_size": geo.block_size,
        "inode_size": geo.inode_size,
        "features": [],
        "journal_features": [],
        "journal_blocks": geo.log_blocks,
        "fast_commit_blocks": 0,
        "max_transaction_blocks": None,
        "journal_device": log_dev,
        "fast_commit": False,
        "proc_info_name": None,
        "log_bytes": geo.log_bytes,
        "log_block_size": geo.log_block_size,
        # what a larger internal log would take its room from: the data section, its
        # allocation groups (an internal log lies in one) and the space free at the start
        "data_bytes": geo.data_blocks * geo.block_size if geo.data_blocks and geo.block_size else None,
        "ag_bytes": geo.ag_blocks * geo.block_size if geo.ag_blocks and geo.block_size else None,
        "free_bytes": free_bytes(mount["mountpoint"]),
        "xfs_name": xfs.sysfs_name(mount["source"]),
        "xfs_stats_start": None,
        "xfs_stats_end": None,
        "max_request_kib": max_request_kib(dev),
        "max_segments": max_segments(dev),
        **cache_of(dev),
    }


def free_bytes(mountpoint):
    """The bytes an unprivileged user may still allocate on a mounted filesystem (statvfs's
    f_bavail), or None."""
    try:
        st = os.statvfs(mountpoint)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _queue_value(dev, name):
    """/sys/dev/block/<dev>/queue/<name>'s text, stripped, or None."""
    try:
        with open(f"/sys/dev/block/{dev}/queue/{name}") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _queue_limit(dev, name):
    """/sys/dev/block/<dev>/queue/<name> as an int, or None."""
    v = _queue_value(dev, name)
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def max_request_kib(dev):
    """/sys/dev/block/<dev>/queue/max_sectors_kb, or None."""
    return _queue_limit(dev, "max_sectors_kb")


def max_segments(dev):
    """/sys/dev/block/<dev>/queue/max_segments (memory segments a request takes at most), or None."""
    return _queue_limit(dev, "max_segments")


def cache_of(dev):
    """How the device serves flushes: ``write_cache`` (/sys/dev/block/<dev>/queue/write_cache:
    "write back" when it has a volatile cache a flush empties, "write through" when flushes
    are no-ops) and ``fua`` (queue/fua: 1 when it takes a write with FUA as one request; 0 when
    the block layer sends a FUA write as the write and then a flush). None where unreadable."""
    return {"write_cache": _queue_value(dev, "write_cache"), "fua": _queue_limit(dev, "fua")}


def _jbd2_dirs():
    try:
        return os.listdir("/proc/fs/jbd2")
    except OSError:
        return []
