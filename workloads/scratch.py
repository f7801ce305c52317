"""Scratch ext4 and XFS filesystems on loop devices, for the lab and for tests.

    cfg = FsConfig(fs_size="64M", journal_size="4M", inode_size=128, write_iops=500)
    with ScratchFs(cfg) as fs:
        fs.mountpoint, fs.device, fs.dev, fs.journal_dev, fs.geometry()
    with ScratchFs(FsConfig(fs_type="xfs", fs_size="320M", journal_size="8M", log_buffer_size="256K")) as fs:
        ...

Everything lives in a run directory under the scratch directory (default
/var/tmp/jstall-lab): the image files, the mount point, and a marker file (``jstall-lab.json``)
naming the loop devices, mount and throttle rules the run set up.

Each image is an emulated device. With ``throttle_mode="stacked"`` (the default) it is two loop
devices: a lower one over the image file, which carries the throttle rules, and an upper one
with ``--direct-io=on`` over the lower one, which the filesystem (or the external journal) is
made on. The upper loop turns every request it gets -- ext4 metadata, jbd2 log writes,
checkpoint writes, XFS log and metadata writeback, data, flushes -- into an ordinary direct I/O
on the lower device, so every one waits its turn under the lower device's limits (see
throttle.py and docs/lab.md). With ``throttle_mode="direct"`` the filesystem sits on a single
loop device that carries the rules itself: ext4/jbd2 metadata writes then pass the throttle at
once (the old, unfaithful lab). Only loop devices backed by those image files are formatted or
mounted. On exit -- normal, an exception, Ctrl-C or SIGTERM -- the throttles are removed, the
filesystem unmounted, the loops detached and the images deleted. ``cleanup()`` does the same
for runs whose process died, found by their marker.

The parts live in modules named for their job; this module gathers their public names:

- fsconfig.py: ``FsConfig`` and sizes (validation and mke2fs/mkfs.xfs/mount arguments; no root
  needed)
- loopdev.py: loop devices, /sys/block statistics, unmounting (the mount table, dumpe2fs and
  signal handling are jstall.system's)
- rundir.py: the scratch directory, run markers, the free-space check
- scratchfs.py: ``ScratchFs``, the mounted filesystem (and the XFS superblock read-back)
- cleanup.py: undoing a run and the runs crashed processes left
- tenantcg.py: the tenants pattern's cgroups (made per run, removed with the run)
"""

from jstall.jbd2 import parse_dumpe2fs
from jstall.system import mount_options
from jstall.units import format_size, parse_size

from .cleanup import cleanup, scratch_runs, run_state, undo_run
from .fsconfig import (BLOCK_SIZES, DATA_MODES, FAST_COMMIT_BLOCKS, FS_TYPES, JOURNAL_MAX_BLOCKS,
                       JOURNAL_MIN_BLOCKS, MKFS_FEATURES_OWN, MKFS_OWN, MKFS_PASSTHROUGH, MKFS_XFS_PASSTHROUGH,
                       MOUNT_OWN, THROTTLE_MODES, XFS_INODE_SIZES, XFS_LOG_BUFFER_SIZES, XFS_TEST_HARNESS, FsConfig)
from .loopdev import BLOCK_STAT_FIELDS, dev_of, loop_backing_files, read_block_stat, read_inflight, syncfs
from .rundir import DEFAULT_SCRATCH, FREE_MARGIN, MARKER, SCRATCH_MARKER, check_free_space, prepare_scratch
from .scratchfs import ScratchFs, Terminated, parse_xfs_db

__all__ = [
    "BLOCK_SIZES", "BLOCK_STAT_FIELDS", "DATA_MODES", "DEFAULT_SCRATCH", "FAST_COMMIT_BLOCKS", "FREE_MARGIN",
    "FS_TYPES", "JOURNAL_MAX_BLOCKS", "JOURNAL_MIN_BLOCKS", "MARKER", "MKFS_FEATURES_OWN", "MKFS_OWN",
    "MKFS_PASSTHROUGH", "MKFS_XFS_PASSTHROUGH", "MOUNT_OWN", "SCRATCH_MARKER", "THROTTLE_MODES", "XFS_INODE_SIZES",
    "XFS_LOG_BUFFER_SIZES", "XFS_TEST_HARNESS", "FsConfig", "ScratchFs", "Terminated", "check_free_space",
    "cleanup", "dev_of", "scratch_runs", "format_size", "loop_backing_files", "mount_options", "parse_dumpe2fs",
    "parse_size", "parse_xfs_db", "prepare_scratch", "read_block_stat", "read_inflight", "run_state", "syncfs",
    "undo_run",
]
