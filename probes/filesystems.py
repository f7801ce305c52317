"""Mounted ext4 filesystems and their journals: device resolution for -d, the
journal geometry stored in a session's metadata, and /proc/fs/jbd2 statistics."""

import os
import re
import stat

from jstall import system
from jstall.errors import JstallError
from jstall.system import dumpe2fs


def kernel_dev(major, minor):
    """dev_t as the kernel encodes it inside (MKDEV): major << 20 | minor."""
    return (major << 20) | minor


def dev_name(kdev):
    """'MAJOR:MINOR' of a kernel-encoded dev_t."""
    return f"{kdev >> 20}:{kdev & 0xFFFFF}"


def parse_dev(text):
    major, minor = text.split(":")
    return int(major), int(minor)


def ext4_mounts():
    """{'MAJ:MIN': {'mountpoint', 'source', 'options'}} of mounted ext4 filesystems (first mount of each)."""
    mounts = {}
    for m in system.mounts():
        if m["fstype"] == "ext4" and m["dev"] not in mounts:
            mounts[m["dev"]] = {"mountpoint": m["mountpoint"], "source": m["source"], "options": m["options"]}
    return mounts


def resolve_device(spec, mounts=None):
    """'MAJ:MIN' of the mounted ext4 named by spec: MAJ:MIN, a block device, or a path on it."""
    mounts = ext4_mounts() if mounts is None else mounts
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
        raise JstallError(f"-d {spec}: device {dev} is not a mounted ext4 filesystem; give a mounted ext4 (see findmnt -t ext4)")
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


def read_proc_info(name):
    if not name:
        return None
    try:
        with open(f"/proc/fs/jbd2/{name}/info") as f:
            return f.read()
    except OSError:
        return None


def describe(dev, mount):
    """The journal description stored in a session's metadata (docs/session-format.md)."""
    source = mount["source"]
    try:
        sb = dumpe2fs(source)
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
    }


def max_request_kib(dev):
    """/sys/dev/block/<dev>/queue/max_sectors_kb, or None."""
    try:
        with open(f"/sys/dev/block/{dev}/queue/max_sectors_kb") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def _jbd2_dirs():
    try:
        return os.listdir("/proc/fs/jbd2")
    except OSError:
        return []
