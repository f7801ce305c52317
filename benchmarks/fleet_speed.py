"""Benchmark: `jstall fleet` over 1,000 generated sessions (100 hosts, journals of 4 to 32 MiB,
128- and 256-byte inodes, 0 to ~40 stalls each with varied causes) on a LocalCluster sized to
the machine; print wall time and the client's peak memory (targets: <= 60 s, <= 1 GiB).

The sessions are written in the real format and the collection layout
(synthetic.generate_fleet) to a temporary directory first (not timed).  The
fleet runs in a fresh child process -- exactly what `jstall fleet ROOT --json -o fleet.html`
does: find the sessions, start the cluster, summarize every session on the workers, build
the rankings, the JSON document, the text and the HTML report -- so the peak RSS printed is
the client's own (the Dask scheduler runs inside it; the workers are separate processes,
whose peak is printed apart).  Then ``--one-process N`` sessions are summarized one after the
other in one process (``jstall.analyzer.multi.fleet.summarize``, what each worker runs per session):
CPU ms per session, a figure that a busy shared machine disturbs far less than wall time.
Usage: python benchmarks/fleet_speed.py [--sessions N] [--hosts N] [--workers N] [--keep DIR]
       [--one-process N]
"""

import json
import os
import subprocess
import sys
import time

from benchlib import TESTS_DIR, parser, run_main, verdict, workdir

CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
from jstall.analyzer.multi import fleet as F
from jstall.analyzer.render.fleet_report import fleet_report
seen = {}
def worker_peak():
    import resource, time
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.process_time()
orig = F.summarize_all
def summarize_all(urls, client, **kw):
    out = orig(urls, client, **kw)
    seen["workers"] = client.run(worker_peak)
    return out
F.summarize_all = summarize_all
fleet = F.run_fleet([sys.argv[1]], n_workers=int(sys.argv[2]) or None)
doc = json.dumps(fleet.to_dict(), allow_nan=False)
text = fleet.text()
html = fleet_report(fleet)
t = time.perf_counter() - t0
import os
workers = seen.get("workers", {})
print(json.dumps({"seconds": t, "client_cpu_s": time.process_time(), "load": os.getloadavg()[0],
                  "worker_cpu_s": sum(v[1] for v in workers.values()),
                  "sessions": len(fleet.summaries), "failed": len(fleet.errors),
                  "stalls": sum(s["analysis"]["stalls"]["count"] for s in fleet.ok),
                  "hosts": len(fleet.hosts()), "json_bytes": len(doc), "html_bytes": len(html),
                  "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "worker_peak_rss_kib": max([v[0] for v in workers.values()] or [0])}))
"""

ONE_PROCESS = """
import json, os, sys, time
from jstall.analyzer.multi.fleet import find_sessions, summarize
urls = find_sessions([sys.argv[1]])[: int(sys.argv[2])]
summarize(urls[0])  # imports
c, w = time.process_time(), time.perf_counter()
for u in urls:
    summarize(u)
print(json.dumps({"n": len(urls), "cpu_ms": 1000 * (time.process_time() - c) / len(urls),
                  "wall_ms": 1000 * (time.perf_counter() - w) / len(urls), "load": os.getloadavg()[0]}))
"""


def main():
    ap = parser(__doc__)
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--workers", type=int, default=0, help="worker processes (default: one per CPU)")
    ap.add_argument("--repeat", type=int, default=1, help="fleet runs (the best and worst are printed)")
    ap.add_argument("--keep", metavar="DIR", help="write the sessions here and keep them")
    ap.add_argument("--one-process", type=int, default=200, metavar="N",
                    help="then summarize N sessions one after the other in one process (0: skip)")
    args = ap.parse_args()
    with workdir("jstall-bench-fleet-", keep=args.keep) as tmp:
        root = args.keep or os.path.join(tmp, "collection")
        t = time.perf_counter()
        if not os.path.isdir(root) or not os.listdir(root):  # in a child: its memory is not ours
            subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[4]); "
                            "from synthetic import generate_fleet; "
                            "generate_fleet(sys.argv[1], sessions=int(sys.argv[2]), hosts=int(sys.argv[3]), seed=1)",
                            root, str(args.sessions), str(args.hosts), TESTS_DIR], check=True)
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)
        n = sum(1 for _, _, fs in os.walk(root) if "metadata.json" in fs)
        hosts = sum(1 for d in os.listdir(root) if d.startswith("host="))
        print(f"collection: {n:,} generated sessions from {hosts} hosts "
              f"({size / 2**20:.0f} MiB on disk, built in {time.perf_counter() - t:.1f} s)")
        runs = []
        for _ in range(args.repeat):
            out = subprocess.run([sys.executable, "-c", CHILD, root, str(args.workers)], capture_output=True,
                                 text=True, check=True)
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        r = runs[0]
        secs = sorted(x["seconds"] for x in runs)
        peak = max(x["peak_rss_kib"] for x in runs) / 2**20
        wpeak = max(x["worker_peak_rss_kib"] for x in runs) / 2**20
        print(f"jstall fleet: {r['sessions']:,} sessions ({r['failed']} failed), {r['stalls']:,} stalls, "
              f"{r['hosts']} hosts; JSON {r['json_bytes'] / 1e6:.1f} MB, HTML {r['html_bytes'] / 1e6:.1f} MB")
        print(f"  wall time (cluster start to HTML): best {secs[0]:.1f} s, worst {secs[-1]:.1f} s over "
              f"{len(runs)} run(s) (target <= 60 s); {r['sessions'] / secs[0]:.0f} sessions/s")
        cpu = r["worker_cpu_s"] + r["client_cpu_s"]
        print(f"  CPU time: workers {r['worker_cpu_s']:.1f} s ({1000 * r['worker_cpu_s'] / r['sessions']:.0f} ms per "
              f"session, imports included), client {r['client_cpu_s']:.1f} s; on {os.cpu_count()} idle CPUs that "
              f"is {cpu / (os.cpu_count() or 1):.1f} s of wall time (load average at the end: {r['load']:.1f})")
        print(f"  client peak memory: {peak:.2f} GiB RSS (target <= 1 GiB); each worker: {wpeak:.2f} GiB")
        print(f"  machine: {os.cpu_count()} CPUs, {args.workers or os.cpu_count()} worker processes, "
              f"Python {sys.version.split()[0]}")
        if args.one_process:
            out = subprocess.run([sys.executable, "-c", ONE_PROCESS, root, str(args.one_process)],
                                 capture_output=True, text=True, check=True)
            o = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"  one process, {o['n']} sessions one after the other: {o['cpu_ms']:.1f} ms CPU per session "
                  f"({o['wall_ms']:.1f} ms wall; load average {o['load']:.1f})")
        ok = secs[-1] <= 60 and peak <= 1
        return verdict(ok)


if __name__ == "__main__":
    run_main(main)
