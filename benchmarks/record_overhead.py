"""Recorder overhead: a fixed metadata workload (create, 2 x setxattr, unlink per file,
unthrottled) on a scratch ext4, run alternately without and with `jstall record`
(device filter), several pairs in ABBA order. Prints each pair's throughput, the
median ratio traced/untraced and the events lost. Throughput is calls per wall
second; calls per CPU second of the workload (user + system, where the probes run)
is printed beside it because it is less disturbed by other load. Needs root.

usage: record_overhead.py [--pairs N] [--files N] [--rounds N] [--mount DIR]
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile

from jstall.probes.recorder import RecordOptions, Recorder

LOOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "metadata_loop.py")


def run_workload(mount, files, rounds):
    out = subprocess.run([sys.executable, LOOP, os.path.join(mount, "bench"), str(files), str(rounds)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


@contextlib.contextmanager
def scratch_mount(mount):
    if mount:
        yield mount
        return
    from jstall.workloads.scratch import FsConfig, ScratchFs

    with ScratchFs(FsConfig(fs_size="512M", journal_size="64M", inode_size=256)) as fs:
        yield fs.mountpoint


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--mount", help="an existing ext4 mount to use instead of a scratch loop device")
    args = ap.parse_args()
    ratios, cpu_ratios, lost_total, traced_rates = [], [], 0, []
    with scratch_mount(args.mount) as mount, tempfile.TemporaryDirectory() as tmp:
        run_workload(mount, args.files, 1)  # warm the caches
        print(f"{'pair':>4} {'untraced calls/s':>17} {'traced calls/s':>15} {'ratio':>6} {'cpu ratio':>9} "
              f"{'counted':>8} {'lost':>5}")
        for i in range(args.pairs):
            rec = Recorder(RecordOptions(output_dir=os.path.join(tmp, f"s{i}"), devices=[mount], quiet=True))
            if i % 2 == 0:
                base = run_workload(mount, args.files, args.rounds)
            rec.start()
            traced = run_workload(mount, args.files, args.rounds)
            rec.stop()
            if i % 2 == 1:
                base = run_workload(mount, args.files, args.rounds)
            counted = sum(rec.tables["call_totals"]["count"].to_pylist())
            lost = sum(rec.metadata["events_lost"].values()) + rec.metadata["stacks_lost"]
            ratio = traced["calls_per_s"] / base["calls_per_s"]
            cpu_ratio = traced["calls_per_cpu_s"] / base["calls_per_cpu_s"]
            ratios.append(ratio)
            cpu_ratios.append(cpu_ratio)
            traced_rates.append(traced["calls_per_s"])
            lost_total += lost
            print(f"{i + 1:>4} {base['calls_per_s']:>17,.0f} {traced['calls_per_s']:>15,.0f} {ratio:>6.3f} "
                  f"{cpu_ratio:>9.3f} {counted:>8} {lost:>5}")
            if counted < traced["calls"]:
                print(f"     the probes counted {counted} of {traced['calls']} calls", file=sys.stderr)
    print(f"\nmedian ratio traced/untraced: {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}) at a median {statistics.median(traced_rates):,.0f} "
          f"traced calls/s; per CPU second: {statistics.median(cpu_ratios):.3f}; events lost: {lost_total}")


if __name__ == "__main__":
    main()
