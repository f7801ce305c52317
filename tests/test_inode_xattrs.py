"""Which inode sizes hold each file's attributes (analyzer.jbd2.xattrs), on hand-built
xattr_files tables."""

import pandas as pd

from jstall.analyzer.jbd2 import xattrs


def files(rows):
    return pd.DataFrame(rows, columns=["dev", "in_inode_bytes", "files"])


def test_an_inodes_attribute_space_is_ext4s():
    # 256 - 128 (base inode) - 32 (extra fields) - 4 (header magic)
    assert [xattrs.attribute_space_bytes(s) for s in xattrs.INODE_SIZES] == [92, 348, 860]


def test_the_smallest_size_holding_nine_in_ten_files_is_chosen():
    # two 32-byte "user.a"/"user.b" values: 2 x (20 + 32) + 4 = 108 bytes, over 256's 92
    t = files([("7:0", 108, 95), ("7:0", 76, 5), ("7:1", 76, 10)])
    fit = xattrs.inode_fit(t, "7:0")
    assert fit["files"].tolist() == [100, 100, 100]
    assert fit["files_fit"].tolist() == [5, 100, 100]
    held = xattrs.smallest_holding(fit)
    assert held == {"inode_size_bytes": 512, "attribute_space_bytes": 348, "files": 100, "files_fit": 100,
                    "fit_share": 1.0}
    assert xattrs.median_bytes(t, "7:0") == 108
    # the other device's small attributes fit 256-byte inodes
    assert xattrs.smallest_holding(xattrs.inode_fit(t, "7:1"))["inode_size_bytes"] == 256
    # 90 of 100 at 92 bytes or under is enough; 89 is not
    assert xattrs.smallest_holding(xattrs.inode_fit(files([("7:0", 92, 90), ("7:0", 96, 10)]), "7:0"))[
        "inode_size_bytes"] == 256
    assert xattrs.smallest_holding(xattrs.inode_fit(files([("7:0", 92, 89), ("7:0", 96, 11)]), "7:0"))[
        "inode_size_bytes"] == 512


def test_attributes_no_inode_holds_and_none_seen():
    big = files([("7:0", 2000, 40)])
    assert xattrs.smallest_holding(xattrs.inode_fit(big, "7:0")) is None
    none = xattrs.inode_fit(big, "8:0")
    assert none.empty and xattrs.smallest_holding(none) is None and xattrs.median_bytes(big, "8:0") is None
