"""Recorder overhead, every candidate side by side in one run (needs root).

1. Tight metadata loop (benchmarks/metadata_loop.py: per file create, 2 x setxattr, unlink;
   unthrottled 256-byte-inode ext4 with a 64 MiB journal on a loop device), in rounds
   whose order alternates (ABBA: forward, then reversed): untraced; `jstall record -d`
   with per-syscall tracepoints ("syscalls", the default where fentry is refused), with
   raw_syscalls ("raw") and, where the kernel takes it, fentry/fexit ("fentry");
   bcc's `syscount -L` (Debian: syscount-bpfcc); a bpftrace raw_syscalls latency
   histogram. Each traced rate is divided by the same round's untraced rate. Prints every
   round, then the median and range of each ratio, and checks that jstall counted every call.
2. Bystanders, while jstall records `-d` the idle scratch ext4, in the same ABBA way:
   `dd if=/dev/zero of=/dev/null` with bs=1 and bs=4096 (read/write syscalls nobody
   traces, as fast as they go); a small-read server (a client asks for 512-byte records
   over a unix socket, the server preads them from a page-cached file on another
   filesystem and sends them back: 5 untraced syscalls a request, paced at --server-rate
   syscalls/s), measured as requests per CPU-second of both processes.
3. dbench (Debian's, its client.txt load) on the traced scratch ext4: MB/s while jstall
   records `-d` it, against untraced, ABBA.
4. Each jstall BPF program's run time per event (kernel.bpf_stats_enabled, on for that
   run only), per attach mode, in one loop run, and in one dbench run (which programs run
   how often there).

--floor adds, to 1 and 3, jstall's attach floor: the same probes attached at the same
points with every program returning at once (what attaching alone costs); and, to 1 and
2, the kernel's slow syscall path alone: empty bpftrace programs on the entry and exit
tracepoints of a syscall nothing here makes (syscalls:sys_enter_acct/sys_exit_acct).
Enabling any syscall tracepoint switches every task onto that path (syscall_regfunc():
SYSCALL_WORK_SYSCALL_TRACEPOINT), where every syscall calls the tracepoints' probes
(perf_syscall_enter/exit), which return for the syscalls not traced: what a bystander of
jstall's default attach pays.

It prints first whether this kernel takes kprobes and fentry programs, the attach points
that would spare the traced calls the syscall tracepoints (other_attach_points).

The machine may be shared: ABBA order, medians and ranges; the load average is printed.

--writers adds jstall without its writers' probes (jbd2_handle_stats; XFS's ticket
tracepoints) in each attach mode: the writers' cost, side by side. --xattrs adds jstall
without its note of each file's attributes (xattrs.bpf.h: the name and path read and hashed
at each setxattr's exit), in each attach mode.

usage: record_overhead.py [--rounds 8] [--files 5000] [--loops 10] [--mount DIR] [--fs-type xfs] [--floor] [--writers]
                          [--xattrs]
                          [--skip-loop] [--skip-bystanders] [--skip-dbench] [--skip-stats]
                          [--dbench-seconds 10]
"""

import contextlib
import json
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import interrupt, parser
from jstall.probes import probeset
from jstall.probes.recorder import RecordOptions, Recorder

LOOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "metadata_loop.py")
SYSCOUNT = shutil.which("syscount-bpfcc") or "/usr/sbin/syscount-bpfcc"
SLOW_PATH_ONLY = "tracepoint:syscalls:sys_enter_acct, tracepoint:syscalls:sys_exit_acct { }"
BPFTRACE_HIST = ("tracepoint:raw_syscalls:sys_enter { @start[tid] = nsecs; } "
                 "tracepoint:raw_syscalls:sys_exit /@start[tid]/ "
                 "{ @ns = hist(nsecs - @start[tid]); delete(@start[tid]); }")


def other_attach_points():
    """Whether this kernel takes the attach points that would spare the syscall tracepoints'
    cost, in words: kprobes (the kprobe_events file exists with CONFIG_KPROBES) and fentry
    (bpf(2) BPF_PROG_LOAD of an empty fentry program on the unlinkat syscall's function)."""
    from jstall.probes import bpfsys, btf

    kprobes = "available" if os.path.exists("/sys/kernel/tracing/kprobe_events") else "not built in"
    func = {"x86_64": "__x64_sys_unlinkat", "aarch64": "__arm64_sys_unlinkat"}.get(os.uname().machine)
    func_id = btf.BtfTypes.load().type_ids("FUNC", [func]).get(func) if func else None
    if not func_id:
        return f"kprobes {kprobes}; fentry not tried (no {func} in the kernel BTF)"
    fd = bpfsys.load_tracing_program(bpfsys.EMPTY_PROGRAM, bpfsys.BPF_TRACE_FENTRY, func_id, b"fentry_probe")
    if isinstance(fd, str):
        return f"kprobes {kprobes}; fentry on {func} refused at load ({fd})"
    os.close(fd)
    return f"kprobes {kprobes}; fentry on {func} loads"


def run_loop(mount, files, loops):
    out = subprocess.run([sys.executable, LOOP, os.path.join(mount, "bench"), str(files), str(loops)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def run_dd(bs, count):
    """Blocks (a read and a write syscall each) per second, over dd's own copying time."""
    err = subprocess.run(["dd", "if=/dev/zero", "of=/dev/null", f"bs={bs}", f"count={count}"], check=True,
                         capture_output=True, text=True).stderr
    seconds = float(err.strip().splitlines()[-1].split(", ")[-2].split()[0])
    return count / seconds


def small_read_server(path, requests, syscalls_per_s):
    """Requests per CPU-second (client and server together) of a client-server pair over a
    unix socket: the client asks for the 512-byte record at an offset, the server preads
    it from the page-cached file at path and sends it back; 5 syscalls a request, paced
    in batches at syscalls_per_s."""
    client, server = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    size = os.path.getsize(path)
    pid = os.fork()
    if pid == 0:  # the server
        try:
            client.close()
            fd = os.open(path, os.O_RDONLY)
            while req := server.recv(8):
                server.send(os.pread(fd, 512, int.from_bytes(req, "little")))
        finally:
            os._exit(0)
    server.close()
    batch, period = 200, 200 * 5 / syscalls_per_s
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    for i in range(0, requests, batch):
        for k in range(i, i + batch):
            client.send(((k * 4096) % (size - 512)).to_bytes(8, "little"))
            client.recv(512)
        wait = t0 + (i + batch) / batch * period - time.monotonic()
        if wait > 0:
            time.sleep(wait)
    client.close()
    os.waitpid(pid, 0)
    r1, rc = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime) + rc.ru_utime + rc.ru_stime
    return requests / cpu


def run_server(path, requests, syscalls_per_s):
    """small_read_server in a fresh process, so RUSAGE_CHILDREN counts only its server."""
    out = subprocess.run([sys.executable, __file__, "--_server", path, str(requests), str(syscalls_per_s)],
                         check=True, capture_output=True, text=True).stdout
    return float(out)


DBENCH_LOAD = "/usr/share/dbench/client.txt"


def run_dbench(mount, seconds, clients=2):
    """dbench's throughput (MB/s) on mount: its final 'Throughput N MB/sec' line."""
    out = subprocess.run(["dbench", "-D", mount, "-c", DBENCH_LOAD, "-t", str(seconds), str(clients)],
                         check=True, capture_output=True, text=True).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("Throughput"))
    return float(line.split()[1])


@contextlib.contextmanager
def scratch_mount(mount, fs_type="ext4"):
    if mount:
        yield mount
        return
    from jstall.workloads.scratch import FsConfig, ScratchFs

    inode = 256 if fs_type == "ext4" else 512
    with ScratchFs(FsConfig(fs_type=fs_type, fs_size="512M", journal_size="64M", inode_size=inode)) as fs:
        yield fs.mountpoint


@contextlib.contextmanager
def tool_running(argv, ready):
    """An external tracer, from the line it prints once attached until SIGINT."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        while True:
            line = p.stdout.readline()
            if not line:
                raise RuntimeError(f"{argv[0]} ended before attaching")
            if ready in line:
                break
        yield p
    finally:
        interrupt(p)


#: the start of each program's body in the probes' inlined text (plain and in a macro), and the
#: opening brace's line continuation if any
PROGRAM_START = re.compile(r"(^\s*int [\w#]+\(struct \w+ \*ctx\)[ \t\\]*\n\s*\{)([ \t]*\\?)\n", re.M)


def floor_source(text):
    """The probes' text with every program returning at once (maps, sections and attach
    points unchanged): what attaching alone costs."""
    out, n = PROGRAM_START.subn(lambda m: f"{m.group(1)} return 0;{m.group(2)}\n", text)
    if n < 10:
        raise RuntimeError(f"floor: found only {n} programs in the probes' text")
    return out


class FloorProbes(probeset.ProbeSet):
    """The probes compiled from floor_source(): same maps, same attach points."""

    def _compile(self):
        from bcc import BPF

        os.environ.update(probeset.host.kernel_headers_env())
        text = floor_source(probeset.bpf_text(self.source))
        return BPF(text=text.encode(), cflags=self._cflags())


class NoWritersProbes(probeset.ProbeSet):
    """jstall's probes without the writers' (jbd2_handle_stats, the XFS ticket programs)."""

    writers = False


class NoXattrProbes(probeset.ProbeSet):
    """jstall's probes without the note of each file's attributes (XATTR_FILES 0)."""

    xattr_files = False


class Jstall:
    """`jstall record -d MOUNT` in this process, for one run (floor: FloorProbes; writers
    False: NoWritersProbes; xattrs False: NoXattrProbes)."""

    def __init__(self, mount, tmp, attach, floor=False, writers=True, xattrs=True):
        self.mount, self.tmp, self.attach, self.floor, self.n = mount, tmp, attach, floor, 0
        self.writers, self.xattrs = writers, xattrs

    @contextlib.contextmanager
    def running(self):
        self.n += 1
        tag = "floor-" * self.floor + "nowriters-" * (not self.writers) + "noxattrs-" * (not self.xattrs)
        opts = RecordOptions(output_dir=os.path.join(self.tmp, f"{tag}{self.attach}{self.n}"),
                             devices=[self.mount], quiet=True, attach=self.attach)
        probes = (FloorProbes(opts) if self.floor else NoWritersProbes(opts) if not self.writers
                  else NoXattrProbes(opts) if not self.xattrs else None)
        rec = Recorder(opts, probes)
        rec.start()
        try:
            yield rec
        finally:
            rec.stop()
            self.last = rec


def bpf_prog_stats(rec):
    """{program: (events, ns per event)} from /proc/self/fdinfo of the recorder's programs."""
    out = {}
    for name, fn in rec.bpf.funcs.items():
        info = {}
        with open(f"/proc/self/fdinfo/{fn.fd}") as f:
            for line in f:
                k, _, v = line.partition(":")
                info[k.strip()] = v.strip()
        cnt, ns = int(info.get("run_cnt", 0)), int(info.get("run_time_ns", 0))
        if cnt:
            out[name.decode()] = (cnt, ns / cnt)
    return out


def summary(label, values, unit=""):
    return (f"{label:<34} median {statistics.median(values):.3f}{unit}  "
            f"(range {min(values):.3f}-{max(values):.3f}, n={len(values)})")


def stats_run(mount, tmp, attach, workload):
    """{program: (events, ns per event)} of one jstall run (bpf_stats on) around workload()."""
    rec = Recorder(RecordOptions(output_dir=os.path.join(tmp, f"stats-{attach}-{time.monotonic_ns()}"), devices=[mount],
                                 quiet=True, attach=attach))
    rec.start()
    try:
        workload()
        return bpf_prog_stats(rec)
    finally:
        rec.stop()


def print_stats(title, stats):
    print(f"   {title}")
    for name, (cnt, ns) in sorted(stats.items(), key=lambda kv: -kv[1][0] * kv[1][1]):
        print(f"      {name:<32} {cnt:>10,} events  {ns:>7.0f} ns/event  {cnt * ns / 1e6:>8.1f} ms")


def main():
    if sys.argv[1:2] == ["--_server"]:  # the bystander server's own process (run_server)
        print(small_read_server(sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
        return
    ap = parser(__doc__)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--loops", type=int, default=10)
    ap.add_argument("--dd-count", type=int, default=5_000_000, help="blocks per dd run at bs=1 (half at bs=4096)")
    ap.add_argument("--mount", help="an existing ext4 or XFS mount to use instead of a scratch loop device")
    ap.add_argument("--fs-type", default="ext4", choices=("ext4", "xfs"),
                    help="the scratch filesystem (xfs: the recorder's XFS log probes run too)")
    ap.add_argument("--floor", action="store_true", help="add jstall's attach floor to the loop and dbench")
    ap.add_argument("--writers", action="store_true",
                    help="add jstall without its writers' probes (jbd2_handle_stats, XFS tickets), each attach mode")
    ap.add_argument("--xattrs", action="store_true",
                    help="add jstall without its note of each file's attributes (xattrs.bpf.h), each attach mode")
    ap.add_argument("--skip-loop", action="store_true")
    ap.add_argument("--skip-bystanders", action="store_true")
    ap.add_argument("--server-rate", type=float, default=100_000, help="the small-read server's syscalls/s")
    ap.add_argument("--server-requests", type=int, default=100_000)
    ap.add_argument("--skip-dbench", action="store_true")
    ap.add_argument("--dbench-seconds", type=int, default=10)
    ap.add_argument("--skip-stats", action="store_true")
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()}; CPUs: {os.cpu_count()}; kernel {os.uname().release}")
    others = other_attach_points()
    print(f"besides tracepoints: {others}")
    # jstall's fentry mode where the kernel takes it (its default there)
    modes = ("fentry",) * others.endswith("loads") + ("syscalls", "raw")
    with scratch_mount(args.mount, args.fs_type) as mount, tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        jstall = {a: Jstall(mount, tmp, a) for a in modes}
        floor = {a: Jstall(mount, tmp, a, floor=True) for a in ("syscalls", "raw")}
        conditions = {
            "untraced": contextlib.nullcontext,
            **{f"jstall ({a})": jstall[a].running for a in modes},
            "syscount -L": lambda: tool_running([SYSCOUNT, "-L"], "Tracing"),
            "bpftrace hist": lambda: tool_running(["bpftrace", "-e", BPFTRACE_HIST], "Attaching"),
        }
        if args.writers:
            for a in modes:
                jstall[f"{a}, no writers"] = Jstall(mount, tmp, a, writers=False)
                conditions[f"jstall ({a}, no writers)"] = jstall[f"{a}, no writers"].running
        if args.xattrs:
            for a in modes:
                jstall[f"{a}, no xattrs"] = Jstall(mount, tmp, a, xattrs=False)
                conditions[f"jstall ({a}, no xattrs)"] = jstall[f"{a}, no xattrs"].running
        if args.floor:
            conditions["floor (syscalls)"] = floor["syscalls"].running
            conditions["floor (raw)"] = floor["raw"].running
            conditions["slow path only"] = lambda: tool_running(["bpftrace", "-e", SLOW_PATH_ONLY], "Attaching")
        names = list(conditions)
        run_loop(mount, args.files, 1)  # warm the caches
        if not args.skip_loop:
            rates = {n: [] for n in names}
            counted_ok = True
            print("\n1. tight metadata loop: calls/s per condition, then ratio to the round's untraced run")
            print(f"{'round':>5} " + " ".join(f"{n:>18}" for n in names))
            for r in range(args.rounds):
                order = names if r % 2 == 0 else names[::-1]
                got = {}
                for n in order:
                    with conditions[n]():
                        res = run_loop(mount, args.files, args.loops)
                    got[n] = res["calls_per_s"]
                    if n.startswith("jstall"):
                        rec = jstall[n.split("(")[1].rstrip(")")].last
                        t = rec.tables["call_totals"]
                        counted = sum(t["count"].to_pylist())
                        lost = sum(rec.metadata["events_lost"].values())
                        if counted != res["calls"] or lost:
                            counted_ok = False
                            print(f"      {n}: counted {counted} of {res['calls']} calls, {lost} events lost",
                                  file=sys.stderr)
                for n in names:
                    rates[n].append(got[n])
                print(f"{r + 1:>5} " + " ".join(f"{got[n]:>18,.0f}" for n in names))
            print(f"      every call counted by jstall, 0 events lost: {counted_ok}")
            base = rates["untraced"]
            print(summary("untraced calls/s (thousands)", [v / 1000 for v in base]))
            for n in names[1:]:
                print(summary(f"ratio {n}", [t / u for t, u in zip(rates[n], base)]))

        if not args.skip_bystanders:
            for bs, count in ((1, args.dd_count), (4096, args.dd_count // 2)):
                print(f"\n2. bystander dd bs={bs} count={count} while jstall records -d the idle scratch ext4")
                by = {"untraced": [], "jstall (syscalls)": [], "jstall (raw)": []}
                if args.floor:
                    by["slow path only"] = []
                bnames = list(by)
                for r in range(args.rounds):
                    for n in (bnames if r % 2 == 0 else bnames[::-1]):
                        with conditions[n]():
                            by[n].append(run_dd(bs, count))
                print(summary("untraced blocks/s (millions)", [v / 1e6 for v in by["untraced"]]))
                for n in bnames[1:]:
                    print(summary(f"ratio {n}", [t / u for t, u in zip(by[n], by["untraced"])]))
            data = os.path.join(tmp, "server-data")  # /var/tmp: not the traced filesystem
            with open(data, "wb") as f:
                f.write(os.urandom(8 << 20))
            print(f"\n2b. bystander small-read server at {args.server_rate:,.0f} syscalls/s, {args.server_requests:,} "
                  "requests, while jstall records -d the idle scratch ext4: requests per CPU-second")
            by = {"untraced": [], "jstall (syscalls)": [], "jstall (raw)": []}
            bnames = list(by)
            for r in range(args.rounds):
                for n in (bnames if r % 2 == 0 else bnames[::-1]):
                    with conditions[n]():
                        by[n].append(run_server(data, args.server_requests, args.server_rate))
            print(summary("untraced requests per CPU-s (thousands)", [v / 1e3 for v in by["untraced"]]))
            for n in bnames[1:]:
                print(summary(f"ratio {n}", [t / u for t, u in zip(by[n], by["untraced"])]))

        dbench_dir = os.path.join(mount, "dbench")
        if not args.skip_dbench:
            print(f"\n3. dbench ({DBENCH_LOAD}, 2 clients, {args.dbench_seconds} s) on the traced scratch ext4: MB/s")
            os.makedirs(dbench_dir, exist_ok=True)
            db = {"untraced": [], "jstall (syscalls)": []}
            if args.floor:
                db["floor (syscalls)"] = []
            dnames = list(db)
            for r in range(args.rounds):
                for n in (dnames if r % 2 == 0 else dnames[::-1]):
                    with conditions[n]():
                        db[n].append(run_dbench(dbench_dir, args.dbench_seconds))
                    if n.startswith("jstall"):
                        lost = sum(jstall["syscalls"].last.metadata["events_lost"].values())
                        if lost:
                            print(f"      {n}: {lost} events lost", file=sys.stderr)
            print(summary("untraced MB/s", db["untraced"]))
            for n in dnames[1:]:
                print(summary(f"ratio {n}", [t / u for t, u in zip(db[n], db["untraced"])]))

        if not args.skip_stats:
            print("\n4. BPF program run time per event (kernel.bpf_stats_enabled): one loop run per attach mode, "
                  "one dbench run")
            old = open("/proc/sys/kernel/bpf_stats_enabled").read().strip()
            try:
                with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
                    f.write("1")
                for a in modes:
                    loop = stats_run(mount, tmp, a, lambda: run_loop(mount, args.files, args.loops))
                    print_stats(f"attach={a}, tight loop", loop)
                if not args.skip_dbench:
                    print_stats(f"attach=syscalls, dbench {args.dbench_seconds} s",
                                stats_run(mount, tmp, "syscalls", lambda: run_dbench(dbench_dir, args.dbench_seconds)))
            finally:
                with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
                    f.write(old)
    print(f"\nload average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
