"""Benchmark: an rm -rf on XFS whose unlinks wait for the inodegc workers (__flush_work in
destroy_inode) while those wait for log space: the share of the stall time left `other`
without and with the waits through kernel workers (chains.worker_causes, on the same
session), and the workers' log-space waits jstall recorded against the kernel's count
(/sys/fs/xfs/<dev>/stats/stats sleep_logspace) and an independent bpftrace program.

The filesystem: XFS of --fs-size (400M), a 6 MiB log (--log), on a device paced at --iops writes a second.
FILES files of EXTENTS one-block extents each (made with the device unpaced), removed by
`jstall record -- rm -rf`; with --filler, an untraced task creates files with an attribute
beside it, keeping the log short of space. Needs root, bpftrace and mkfs.xfs.
Usage: python benchmarks/inodegc_chain.py [--files N] [--extents N] [--iops N] [--filler] [--keep DIR]
       [--fs-size SIZE]
"""

import os
import re
import signal
import subprocess
import sys

from benchlib import loadavg, options, workdir

from jstall.workloads import throttle
from jstall.workloads.scratch import FsConfig, ScratchFs

JSTALL = os.path.join(os.path.dirname(sys.executable), "jstall")

MAKE = """
import os, sys
top, n, ext = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
block = b"x" * 4096
for i in range(n):
    d = f"{top}/d{i % 100}"
    if i < 100:
        os.mkdir(d)
    fd = os.open(f"{d}/f{i}", os.O_WRONLY | os.O_CREAT, 0o644)
    for k in range(ext):
        os.pwrite(fd, block, 8192 * k)
    os.close(fd)
os.sync()
"""

FILLER = """
import os, sys
top, stop = sys.argv[1], sys.argv[2]
os.mkdir(top)
i = 0
while not os.path.exists(stop):
    p = f"{top}/f{i}"
    open(p, "w").close()
    os.setxattr(p, "user.a", b"x" * 64)
    i += 1
"""

# log-space sleeps and waits on DEV by kind of task (0 rm, 1 a kworker, 2 another: integer
# keys, as bpftrace 0.17 garbles a string key's second use), and the inodegc throttles
BT = """
#define xfs_lsn_t long long
BEGIN { printf("Attaching\\n"); }
tracepoint:xfs:xfs_log_grant_sleep /args->dev == DEV/ {
  $k = strncmp(comm, "kworker/", 8) == 0 ? 1 : (comm == "rm" ? 0 : 2);
  @sleeps[$k] = count();
  if (@s[tid] == 0) { @s[tid] = nsecs; }
}
tracepoint:xfs:xfs_log_reserve_exit, tracepoint:xfs:xfs_log_regrant_exit /@s[tid]/ {
  $k = strncmp(comm, "kworker/", 8) == 0 ? 1 : (comm == "rm" ? 0 : 2);
  @waits[$k] = count(); @wait_us[$k] = sum((nsecs - @s[tid]) / 1000);
  delete(@s[tid]);
}
tracepoint:xfs:xfs_inodegc_throttle /args->dev == DEV/ { @throttles = count(); }
END { clear(@s); }
"""


def shares(path, chains):
    """(share of stall off-CPU time per cause, the stall summary) of one analysis."""
    from jstall.analyzer import analyze
    from jstall.analyzer.stalls import find as stalls

    keep = stalls.worker_waits
    if not chains:
        stalls.worker_waits = lambda *a, **k: None
    try:
        a = analyze(path)
        d = a.to_dict()
    finally:
        stalls.worker_waits = keep
    st = d["stalls"]
    return {c: v["total_ms"] / st["offcpu_ms"] for c, v in st["by_cause"].items() if v["total_ms"]}, st, a, d


def main():
    opts = options(__doc__, files=10000, extents=6, iops=20, log=("6M", "the log's size"),
                   filler=(False, "keep the log short of space with an untraced task beside"),
                   keep=(None, "keep the session in DIR (DIR/s)"), fs_size=("400M", "the filesystem's size"))
    if opts.keep:
        os.makedirs(opts.keep, exist_ok=True)
    with workdir("jstall-inodegc-", opts.keep) as tmp:
        out = os.path.join(tmp, "s")
        cfg = FsConfig(fs_type="xfs", fs_size=opts.fs_size, journal_size=opts.log, write_iops=opts.iops)
        with ScratchFs(cfg) as fs:
            throttle.set_rule(fs.lower_dev, "write_iops", 0)
            subprocess.run([sys.executable, "-c", MAKE, fs.mountpoint, str(opts.files), str(opts.extents)],
                           check=True)
            throttle.apply(fs.lower_dev, fs.limits[fs.lower_dev])
            major, minor = (int(x) for x in fs.dev.split(":"))
            bt = subprocess.Popen(["bpftrace", "-e", BT.replace("DEV", str(major << 20 | minor))],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  errors="replace")
            for line in bt.stdout:
                if line.startswith("Attaching"):
                    break
            stop = os.path.join(tmp, "stop")
            filler = (subprocess.Popen([sys.executable, "-c", FILLER, os.path.join(fs.mountpoint, "bg"), stop])
                      if opts.filler else None)
            try:
                dirs = [os.path.join(fs.mountpoint, f"d{i}") for i in range(100)]
                subprocess.run([JSTALL, "record", "-q", "-o", out, "-d", fs.mountpoint, "--", "rm", "-rf", *dirs],
                               check=True, capture_output=True)
            finally:
                open(stop, "w").close()
                if filler:
                    filler.wait()
                bt.send_signal(signal.SIGINT)
                text = bt.communicate()[0]
        kinds = {"0": "rm", "1": "kworker", "2": "other", "": ""}
        seen = {(m[0], kinds[m[1]]): int(m[2]) for m in re.findall(r"^@(\w+)(?:\[(\d)\])?: (\d+)$", text, re.M)}
        before, _, _, _ = shares(out, False)
        after, st, a, d = shares(out, True)
        (log,) = d["xfs_logs"]
        w = a.xfs_waits
        k = w[w["context"] == "kernel thread"]
        print(f"rm -rf of {opts.files:,} files of {opts.extents} extents, {opts.log} log, {opts.iops} writes/s, "
              f"filler {'on' if opts.filler else 'off'}; load {loadavg()}")
        print(f"stalls {st['count']}, off CPU {st['offcpu_ms']:,.0f} ms; "
              f"other before {100 * before.get('other', 0):.1f} %,"
              f" after {100 * after.get('other', 0):.1f} %; log_space before {100 * before.get('log_space', 0):.1f} %,"
              f" after {100 * after.get('log_space', 0):.1f} %; workqueue (a worker's wait no record explains) "
              f"after {100 * after.get('workqueue', 0):.1f} %")
        print(f"through workers: {st['through_worker']['count']} stalls, {st['through_worker']['total_ms']:,.0f} ms; "
              f"{st['workers']}")
        print(f"inodegc throttles (bpftrace) {seen.get(('throttles', ''), 0)}; flush waits in stalls "
              f"{int(a.stalls['cause_label'].str.contains('__flush_work').sum())}")
        print(f"worker log-space waits: jstall {len(k)} waits, {int(k['sleeps'].sum())} sleeps, "
              f"{k['wait_ms'].sum():,.0f} ms; bpftrace {seen.get(('waits', 'kworker'), 0)} waits, "
              f"{seen.get(('sleeps', 'kworker'), 0)} sleeps, {seen.get(('wait_us', 'kworker'), 0) / 1e3:,.0f} ms")
        print(f"all sleeps on the log: jstall {log['sleeps']} (rm and workers), kernel sleep_logspace "
              f"{log['kernel_sleep_logspace']}, bpftrace rm {seen.get(('sleeps', 'rm'), 0)} + workers "
              f"{seen.get(('sleeps', 'kworker'), 0)} + others {seen.get(('sleeps', 'other'), 0)}")


if __name__ == "__main__":
    main()
