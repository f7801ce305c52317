"""Which inode sizes hold each file's extended attributes (the session's ``xattr_files``).

ext4 keeps a file's attributes inside its inode when they fit the space past the inode's
extra fields, else in an external block that the journal logs with every change. The
recorder notes, per file, what its attributes take in that space (ext4's entries: a 16-byte
``ext4_xattr_entry`` and the name without its prefix, each rounded to 4 bytes, the value
rounded to 4, and the 4-byte end marker). An inode of ``S`` bytes holds
``S - 128 - 32 - 4`` of them (the base inode, the 32 bytes of extra fields mkfs.ext4 reserves,
the attribute header's magic number): 92 bytes at 256, 348 at 512.
"""

from __future__ import annotations

import pandas as pd

#: ext4's base inode (EXT4_GOOD_OLD_INODE_SIZE), the extra fields mkfs.ext4 reserves past it
#: (s_want_extra_isize) and the in-inode attribute header's magic number, in bytes
BASE_INODE_BYTES, EXTRA_ISIZE_BYTES, XATTR_HEADER_BYTES = 128, 32, 4
#: the inode sizes mkfs.ext4 -I offers past the smallest, smallest first
INODE_SIZES = (256, 512, 1024)
#: an inode size holds the attributes when it holds every attribute of this share of the
#: files (the rest keep their external block)
FIT_SHARE = 0.9


def attribute_space_bytes(inode_size: int) -> int:
    """The bytes of attributes an inode of ``inode_size`` bytes holds (ext4_xattr_ibody_set's
    space, with the end marker)."""
    return inode_size - BASE_INODE_BYTES - EXTRA_ISIZE_BYTES - XATTR_HEADER_BYTES


def inode_fit(xattr_files: pd.DataFrame, dev: str) -> pd.DataFrame:
    """One row per inode size of INODE_SIZES: ``inode_size_bytes``, ``attribute_space_bytes``,
    ``files`` (whose attributes the session saw set on ``dev``), ``files_fit`` (those whose
    attributes all fit) and ``fit_share``; empty when no file's were seen."""
    t = xattr_files[xattr_files["dev"].astype("str") == str(dev)]
    n = int(t["files"].sum()) if len(t) else 0
    if not n:
        return pd.DataFrame(columns=["inode_size_bytes", "attribute_space_bytes", "files", "files_fit", "fit_share"])
    rows = []
    for size in INODE_SIZES:
        space = attribute_space_bytes(size)
        fit = int(t.loc[t["in_inode_bytes"] <= space, "files"].sum())
        rows.append({"inode_size_bytes": size, "attribute_space_bytes": space, "files": n, "files_fit": fit,
                     "fit_share": fit / n})
    return pd.DataFrame(rows)


def smallest_holding(fit: pd.DataFrame) -> dict | None:
    """The row of ``fit`` (:func:`inode_fit`) of the smallest inode size that holds the
    attributes of FIT_SHARE of the files, or None (none does, or no file's were seen)."""
    ok = fit[fit["fit_share"] >= FIT_SHARE] if len(fit) else fit
    if not len(ok):
        return None
    return {k: (float(v) if k == "fit_share" else int(v)) for k, v in ok.iloc[0].to_dict().items()}


def median_bytes(xattr_files: pd.DataFrame, dev: str) -> float | None:
    """The median file's attribute bytes on ``dev`` (None: no file's were seen)."""
    t = xattr_files[xattr_files["dev"].astype("str") == str(dev)].sort_values("in_inode_bytes")
    n = int(t["files"].sum()) if len(t) else 0
    if not n:
        return None
    cum = t["files"].cumsum()
    return float(t.loc[cum >= n / 2, "in_inode_bytes"].iloc[0])
