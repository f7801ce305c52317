"""Recorder memory over a long recording: `jstall record -d` a scratch ext4 while dbench
(a client nobody here wrote) runs on it, sampling the recorder's resident set size
(VmRSS) every 10 s. Prints the RSS at 1 minute and at the end, their ratio (target: the
end within 5% of the 1-minute value), the session's size and what it holds. Needs root
and dbench (scripts/setup.sh installs it).

usage: record_memory.py [--minutes 10] [--clients 4] [--min-ms 1] [--max-size MB]
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from benchlib import interrupt, parser, rss_kib
from jstall.session import session_bytes
from jstall.workloads.scratch import FsConfig, ScratchFs

JSTALL = os.path.join(os.path.dirname(sys.executable), "jstall")
LOADFILE = "/usr/share/dbench/client.txt"


def main():
    ap = parser(__doc__)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--min-ms", type=float, default=1.0)
    ap.add_argument("--max-size", type=float, help="pass --max-size MB to the recorder")
    args = ap.parse_args()
    if not shutil.which("dbench"):
        sys.exit("record_memory.py: dbench is not installed; run 'sh scripts/setup.sh'")
    seconds = args.minutes * 60
    samples = []
    tmpdir = tempfile.TemporaryDirectory(dir="/var/tmp")
    with ScratchFs(FsConfig(fs_size="2G", journal_size="64M")) as fs, tmpdir as tmp:
        out = os.path.join(tmp, "s")
        cmd = [JSTALL, "record", "-q", "-o", out, "-d", fs.mountpoint, "--min-ms", str(args.min_ms)]
        if args.max_size:
            cmd += ["--max-size", str(args.max_size)]
        rec = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        time.sleep(5)
        bench = subprocess.Popen(["dbench", "-D", fs.mountpoint, "-c", LOADFILE, "-t", str(int(seconds) + 30),
                                  str(args.clients)], stdout=subprocess.PIPE, text=True)
        t0 = time.monotonic()
        try:
            while time.monotonic() - t0 < seconds and rec.poll() is None:
                time.sleep(10)
                samples.append((round(time.monotonic() - t0), rss_kib(rec.pid), session_bytes(out)))
                secs, rss, size = samples[-1]
                print(f"{secs:>5} s  RSS {rss / 1024:8.1f} MiB  session {size / 1e6:8.1f} MB", flush=True)
        finally:
            _, err = interrupt(rec, timeout=300)
            interrupt(bench)
        meta = json.load(open(os.path.join(out, "metadata.json")))
        size = session_bytes(out)
    at_1min = next(r for t, r, _ in samples if t >= 60)
    end = samples[-1][1]
    print(f"\nRSS at 1 min {at_1min / 1024:.1f} MiB, at {samples[-1][0]} s {end / 1024:.1f} MiB: "
          f"ratio {end / at_1min:.3f} (target <= 1.05)")
    print(f"session {size / 1e6:.1f} MB; rows {meta['rows']}; events lost {meta['events_lost']}; "
          f"status {meta['status']} ({meta['stop_reason']})")
    print(err.strip().splitlines()[0] if err.strip() else "")


if __name__ == "__main__":
    main()
