"""The journal kinds jstall traces, and what differs between them, in one table (as
libbpf-tools' fsslower keeps what differs per filesystem in ``fs_configs[]``).

Each kind's rules and readers are a module with the same names (``jstall.jbd2``,
``jstall.xfs``: ``NOUN``, ``MIN_BLOCKS``/``MAX_BLOCKS``, ``read_geometry``, ``read_counters``,
``headroom``); code that differs by kind looks the kind up here rather than comparing
strings. Pandas-free (the probes and the monitor import it)."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from . import jbd2, xfs
from .enough import WAITS


@dataclass(frozen=True)
class Kind:
    #: the kind's name in a session's journal descriptions (``kind``) and the analysis
    name: str
    #: what the filesystem calls it: "journal" (ext4) or "log" (XFS)
    noun: str
    #: what the verdict judges: "forced-checkpoint waits" or "log-space waits"
    waits: str
    #: the filesystem type in the mount table and the lab (``--fs-type``)
    fs_type: str
    #: the recommendation that sizes it
    size_advice: str
    #: the mkfs option that sizes it
    mkfs_option: str
    #: its rules and readers (the interface above)
    module: ModuleType


KINDS = {
    "jbd2": Kind("jbd2", jbd2.NOUN, WAITS["jbd2"], "ext4", "journal_size", "mke2fs -J size=", jbd2),
    "xfs": Kind("xfs", xfs.NOUN, WAITS["xfs"], "xfs", "log_size", "mkfs.xfs -l size=", xfs),
}
JBD2, XFS = KINDS["jbd2"], KINDS["xfs"]
#: the mount table's filesystem types, each kind's
FS_TYPES = tuple(k.fs_type for k in KINDS.values())
_BY_FS_TYPE = {k.fs_type: k for k in KINDS.values()}


def of(journal: dict) -> Kind:
    """The kind of a journal description (a session's ``journals`` entry; without ``kind``,
    written before XFS was traced: jbd2)."""
    return KINDS.get(journal.get("kind"), JBD2)


def of_fs_type(fs_type: str | None) -> Kind:
    """The kind of a filesystem type ("ext4", "xfs"; any other: ext4's)."""
    return _BY_FS_TYPE.get(fs_type, JBD2)


def is_xfs(journal: dict) -> bool:
    """Whether a journal description is an XFS log."""
    return of(journal) is XFS
