"""Benchmark: analyze a synthetic session of 1,000,000 syscall rows, 1,000,000 off-CPU rows and
100,000 jbd2 rows; print wall time and peak memory (target: <= 10 s, <= 2 GiB).

The session is written in the real format (synthetic) to a temporary
directory; the analysis (load, stalls, causes, journals, the JSON document and the text
summary, as `jstall analyze --json` does) runs in a fresh child process so its peak RSS is its
own.  Usage: python benchmarks/analyze_speed.py [--calls N] [--offcpu N] [--jbd2 N] [--keep DIR]
"""

import os
import subprocess
import sys
import time

import numpy as np
import pandas as pd

from benchlib import parser, run_main, verdict, workdir

from synthetic import journal_meta, metadata, write_session

S = 1_000_000_000
THREADS = 16
DEVS = ("7:0", "7:1")

STACKS = [
    ["__schedule", "schedule", "io_schedule", "bit_wait_io", "__wait_on_bit", "out_of_line_wait_on_bit",
     "__wait_on_buffer", "jbd2_log_do_checkpoint", "__jbd2_log_wait_for_space", "add_transaction_credits",
     "start_this_handle", "jbd2__journal_start", "__ext4_journal_start_sb", "ext4_xattr_set", "__vfs_setxattr"],
    ["__schedule", "schedule", "wait_transaction_locked", "add_transaction_credits", "start_this_handle"],
    ["__schedule", "schedule", "jbd2_log_wait_commit", "jbd2_complete_transaction", "ext4_sync_file"],
    ["__schedule", "schedule", "io_schedule", "bit_wait_io", "__wait_on_bit", "__wait_on_buffer", "ext4_read_bh"],
    ["__schedule", "schedule", "io_schedule", "bit_wait_io", "__wait_on_bit_lock", "__lock_buffer",
     "do_get_write_access"],
    ["__schedule", "schedule_timeout", "io_schedule_timeout", "balance_dirty_pages"],
    ["__schedule", "schedule", "rwsem_down_write_slowpath", "down_write", "vfs_setxattr"],
]


def build(path, n_calls, n_off, n_jbd2, seed=1):
    rng = np.random.default_rng(seed)
    per = n_calls // THREADS
    n_calls = per * THREADS
    lat = rng.lognormal(mean=np.log(200_000), sigma=2.0, size=n_calls).astype("int64") + 1000  # ~0.2 ms median
    gap = rng.integers(1_000, 50_000, size=n_calls)
    ts = (np.cumsum((lat + gap).reshape(THREADS, per), axis=1) - lat.reshape(THREADS, per)).ravel() + S
    tid = np.repeat(np.arange(1000, 1000 + THREADS, dtype="int32"), per)
    dev = np.where(tid % 2 == 0, DEVS[0], DEVS[1])
    syscall = rng.choice(np.array(["setxattr", "openat", "unlink", "mkdir", "fsync"]), size=n_calls,
                         p=[0.5, 0.2, 0.15, 0.1, 0.05])
    calls = pd.DataFrame({"ts_ns": ts, "latency_ns": lat, "tid": tid, "pid": tid, "comm": "bench",
                          "syscall": syscall, "ret": 0, "dev": dev, "handles": 1,
                          "journal_free_blocks": rng.integers(0, 8192, n_calls),
                          "journal_min_free_blocks": rng.integers(0, 8192, n_calls), "journal_log_blocks": 8192})
    # off-CPU intervals inside calls, weighted to the slow ones
    which = rng.choice(n_calls, size=n_off, p=lat / lat.sum())
    frac = rng.random(n_off) * 0.5
    off = pd.DataFrame({"ts_ns": ts[which] + (frac * lat[which]).astype("int64"),
                        "offcpu_ns": np.maximum((lat[which] * rng.random(n_off) * 0.4).astype("int64"), 100_001),
                        "tid": tid[which], "pid": tid[which], "comm": "bench", "state": 2,
                        "runnable": rng.random(n_off) < 0.05,
                        "stack_id": rng.integers(-1, len(STACKS), n_off).astype("int32"),
                        "call_ts_ns": ts[which], "syscall": syscall[which], "dev": dev[which]})
    end = int(ts.max() + lat.max())
    events = np.array(["start_commit", "commit_locking", "commit_flushing", "commit_logging", "end_commit",
                       "checkpoint", "drop_transaction"])
    ev = rng.choice(events, size=n_jbd2, p=[0.17, 0.17, 0.17, 0.17, 0.17, 0.1, 0.05])
    jts = np.sort(rng.integers(S, end, n_jbd2))
    jdev = rng.choice(np.array(DEVS), n_jbd2)
    cp = ev == "checkpoint"
    own = cp & (rng.random(n_jbd2) < 0.7)
    ctid = np.where(own, rng.choice(tid, n_jbd2), 77).astype("int32")
    free = rng.integers(0, 8192, n_jbd2)
    jbd2 = pd.DataFrame({"ts_ns": jts, "event": ev, "dev": jdev,
                         "transaction": pd.array(np.where(cp, -1, np.arange(n_jbd2) // 5), dtype="Int64"),
                         "tid": ctid, "pid": ctid, "comm": np.where(own, "bench", "jbd2/loop0-8"),
                         "jbd2_thread": ~own, "free_blocks": free, "head_block": 1, "tail_block": 1,
                         "first_block": 1, "last_block": 8193, "journal_blocks": 8192,
                         "max_transaction_blocks": 2048, "running_transaction": np.arange(n_jbd2) // 5,
                         "committing_transaction": -1, "committing_credits": 0})
    jbd2.loc[cp, "transaction"] = pd.NA
    n_txn = n_jbd2 // 5
    rs = {"ts_ns": np.sort(rng.integers(S, end, n_txn)), "dev": rng.choice(np.array(DEVS), n_txn),
          "transaction": np.arange(n_txn), "tid": 77, "pid": 77, "comm": "jbd2/loop0-8",
          "handle_count": rng.integers(1, 500, n_txn), "blocks": rng.integers(1, 2000, n_txn),
          "blocks_logged": rng.integers(1, 2100, n_txn)}
    for p in ("wait", "request_delay", "running", "locked", "flushing", "logging"):
        rs[f"{p}_jiffies"] = rng.integers(0, 300, n_txn)
        rs[f"{p}_ns"] = rs[f"{p}_jiffies"] * 4_000_000
    n_fill = 10_000
    fill = pd.DataFrame({"ts_ns": np.sort(rng.integers(S, end, n_fill)), "dev": rng.choice(np.array(DEVS), n_fill),
                         "free_blocks": rng.integers(0, 8192, n_fill), "head_block": 1, "tail_block": 1,
                         "first_block": 1, "last_block": 8193, "journal_blocks": 8192,
                         "max_transaction_blocks": 2048, "running_transaction": 1, "committing_transaction": -1,
                         "committing_credits": 0, "source": "handle_start"})
    b = np.floor(np.log2(lat)).astype("int32")
    hist = (pd.DataFrame({"syscall": syscall, "dev": dev, "bucket": b}).value_counts().rename("count").reset_index())
    hist["low_ns"] = 2 ** hist["bucket"].astype("int64")
    hist["high_ns"] = hist["low_ns"] * 2
    totals = calls.groupby(["syscall", "dev"], as_index=False).agg(count=("latency_ns", "size"),
                                                                    total_latency_ns=("latency_ns", "sum"),
                                                                    max_latency_ns=("latency_ns", "max"))
    totals["errors"] = 0
    stacks = pd.DataFrame({"stack_id": np.arange(len(STACKS), dtype="int32"), "frames": STACKS})
    meta = metadata(start_ns=S, end_ns=end, journals=[journal_meta(d, journal_blocks=8192, max_transaction_blocks=2048)
                                                      for d in DEVS])
    write_session(path, {"calls": calls, "offcpu": off, "jbd2_events": jbd2, "run_stats": pd.DataFrame(rs),
                         "fill": fill, "call_histograms": hist, "call_totals": totals, "stacks": stacks}, meta)


CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
from jstall.analyzer.analysis import analyze
from jstall.analyzer.render.text import session_summary
a = analyze(sys.argv[1])
doc = json.dumps(a.to_dict(), allow_nan=False)
text = session_summary(a)
t = time.perf_counter() - t0
print(json.dumps({"seconds": t, "stalls": len(a.stalls),
                  "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def main():
    ap = parser(__doc__)
    ap.add_argument("--calls", type=int, default=1_000_000)
    ap.add_argument("--offcpu", type=int, default=1_000_000)
    ap.add_argument("--jbd2", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3, help="analysis runs (the best and worst are printed)")
    ap.add_argument("--keep", metavar="DIR", help="write the session here and keep it")
    args = ap.parse_args()
    with workdir("jstall-bench-", keep=args.keep) as tmp:
        path = args.keep or os.path.join(tmp, "session")
        t = time.perf_counter()
        build(path, args.calls, args.offcpu, args.jbd2)
        size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
        print(f"synthetic session: {args.calls:,} calls, {args.offcpu:,} off-CPU rows, {args.jbd2:,} jbd2 rows "
              f"({size / 2**20:.0f} MiB on disk, built in {time.perf_counter() - t:.1f} s)")
        import json

        runs = []
        for _ in range(args.repeat):
            out = subprocess.run([sys.executable, "-c", CHILD, path], capture_output=True, text=True, check=True)
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        secs = sorted(r["seconds"] for r in runs)
        peak = max(r["peak_rss_kib"] for r in runs) / 2**20
        print(f"analyze (load, stalls, causes, journals, JSON, summary): {runs[0]['stalls']:,} stalls")
        print(f"  wall time: best {secs[0]:.2f} s, worst {secs[-1]:.2f} s over {len(runs)} runs (target <= 10 s)")
        print(f"  peak memory: {peak:.2f} GiB RSS (target <= 2 GiB)")
        print(f"  machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, pandas {pd.__version__}")
        ok = secs[-1] <= 10 and peak <= 2
        return verdict(ok)


if __name__ == "__main__":
    run_main(main)
