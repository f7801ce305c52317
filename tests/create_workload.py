"""Distinct XFS metadata: N empty files in 200 directories, each with a 64-byte user.*
attribute, then sync: more than an 8 MiB log holds while a paced device writes it home.

usage: create_workload.py DIR N
"""
import os
import sys

top, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = f"{top}/d{i % 200}"
    if i < 200:
        os.mkdir(d)
    p = f"{d}/f{i}"
    open(p, "w").close()
    os.setxattr(p, "user.a", b"x" * 64)
os.sync()
