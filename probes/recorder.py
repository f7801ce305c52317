"""The recorder: loads the bcc probes (recorder.bpf.c), streams their events, and
writes a session directory (docs/session-format.md).

Library use (the lab records this way):

    rec = Recorder(RecordOptions(output_dir="s1", devices=["7:0"], quiet=True))
    rec.start()            # probes attached when it returns
    ...                    # run the workload
    path = rec.stop(extra_metadata={"lab": {...}})
"""

import ctypes
import dataclasses
import datetime
import os
import select
import shutil
import socket
import sys
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from jstall import __version__
from jstall.errors import JstallError
from jstall.schema import SCHEMAS
from jstall.session import (FILL_COLUMNS, FORMAT, RECORDING, SCHEMA_VERSION, compact_table, table_path,
                            write_chunk, write_metadata, write_table_atomic)

from . import btf, events, host, journals, syscalls

BPF_SOURCE = os.path.join(os.path.dirname(__file__), "recorder.bpf.c")

JBD2_RAW_TRACEPOINTS = (
    "jbd2_start_commit", "jbd2_commit_locking", "jbd2_commit_flushing", "jbd2_commit_logging",
    "jbd2_end_commit", "jbd2_drop_transaction", "jbd2_checkpoint", "jbd2_write_superblock",
    "jbd2_lock_buffer_stall", "jbd2_update_log_tail", "jbd2_run_stats", "jbd2_checkpoint_stats",
)
EXT4_RAW_TRACEPOINTS = ("ext4_journal_start_sb", "ext4_journal_start_inode")
RING_PAGES = 1024          # 4 MiB per ring buffer
STACK_ENTRIES = 16384
HIST_BUCKETS = 40          # log2(latency_ns) buckets: the last holds everything from 2^39 ns (9 min)
FILL_SAMPLE_NS = 10_000_000
FLUSH_SECONDS = 2.0        # a closed chunk per table, counters and metadata.json this often

#: How the metadata syscalls are traced: "syscalls", a program pair on each traced call's
#: own tracepoints (syscalls:sys_enter_<name>/sys_exit_<name>), so that other syscalls run
#: no program; or "raw", one program pair on raw_syscalls that every syscall of every task
#: runs (benchmarks/record_overhead.py measures both).
ATTACH = os.environ.get("JSTALL_ATTACH", "syscalls")

#: tables appended to while recording, one closed chunk per flush
STREAMED = ("calls", "offcpu", "jbd2_events", "run_stats", "checkpoint_stats", "log_tail", "fill")
CHUNKED = STREAMED + ("stacks",)
#: the in-kernel counters, rewritten whole at every flush: call_histograms, call_totals


@dataclasses.dataclass
class RecordOptions:
    """What to record. Times: min_ms in milliseconds, offcpu_min_us in microseconds."""

    output_dir: str = None
    devices: list = dataclasses.field(default_factory=list)   # MAJ:MIN, mount points or block devices
    pid: int = None
    cgroup: str = None                                        # cgroup v2 directory
    command_tree: bool = False                                # trace only tgids added with trace_tgid()
    min_ms: float = 1.0
    offcpu_min_us: int = 100
    quiet: bool = False
    console: object = None                                    # stream for live lines (default stdout)
    max_size_bytes: int = None                                # end the recording at this session size
    attach: str = ATTACH                                      # "syscalls" or "raw" (see ATTACH)
    calls: tuple = None                                       # call names (syscalls.parse_calls); None: default


def default_output_dir():
    return "jstall-session-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


def _clock():
    return {
        "wall": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "wall_ns": time.time_ns(),
        "monotonic_ns": time.monotonic_ns(),
    }


def _fill_pct(free, log_blocks):
    return 100.0 * (1.0 - free / log_blocks) if log_blocks else float("nan")


class Recorder:
    def __init__(self, options):
        self.opts = options
        self.console = options.console or sys.stdout
        host.require_root()
        if not host.btf_path_ok():
            raise JstallError("/sys/kernel/btf/vmlinux is missing: this kernel has no BTF; use a kernel built with CONFIG_DEBUG_INFO_BTF=y")
        host.ensure_tracefs()
        self.output_dir = options.output_dir or default_output_dir()
        check_output_dir(self.output_dir)
        self.syscall_numbers = syscalls.numbers(calls=options.calls)
        self.syscall_names = {nr: name for name, nr in self.syscall_numbers.items()}
        mounts = journals.ext4_mounts()
        self.devices = list(dict.fromkeys(journals.resolve_device(d, mounts) for d in options.devices))
        if options.pid is not None and (options.pid <= 0 or not os.path.exists(f"/proc/{options.pid}")):
            raise JstallError(f"-p {options.pid}: no such process; give the PID of a running process")
        self.journals = {}
        for dev in self.devices:
            self.journals[dev] = journals.describe(dev, mounts[dev])
        if not self.devices:  # every mounted ext4 with a journal (narrowed to those used with a task filter)
            for dev, m in mounts.items():
                try:
                    self.journals[dev] = journals.describe(dev, m)
                except JstallError:
                    continue
        self.cgroup_id = None
        if options.cgroup:
            try:
                self.cgroup_id = os.stat(options.cgroup).st_ino
            except OSError as e:
                raise JstallError(f"--cgroup {options.cgroup}: {e.strerror}; give a cgroup v2 directory") from None
        self.task_filter = bool(options.pid or options.command_tree or self.cgroup_id)
        self.bpf = None
        self.attached, self.missing = [], []
        self._chunks = {kind: [] for kind in events.KIND_STRUCTS}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.done = threading.Event()                     # the recording should end (stop_reason says why)
        self.stop_reason = None
        self._thread = None
        self._seq = 0                                     # chunks written
        self._bytes = 0                                   # bytes of the chunks written
        self.rows = dict.fromkeys(STREAMED, 0)            # rows written per streamed table
        self.checkpoints = {"forced": 0, "background": 0}  # jbd2_checkpoint events by task
        self.calls_without_device = {}
        self.offcpu_without_stack = 0                     # off-CPU rows whose stack was lost
        self._stack_ids = set()                           # symbolized; at most STACK_ENTRIES
        self._max_tx = {}                                 # dev -> j_max_transaction_buffers seen
        self._pidfd = None
        self.last_flush = None
        self._cgroups = {}                                # str(cgroup id) -> path, of the calls' cgroups

    # ---- set-up -------------------------------------------------------------------

    def _cflags(self):
        types = btf.BtfTypes.load()
        defines = btf.probe_defines(types)
        defines.update(btf.syscall_arg_defines(types))
        for struct, dt in events.DTYPES.items():
            defines[f"SIZEOF_{struct}"] = dt.itemsize
        defines.update(
            MIN_NS=int(self.opts.min_ms * 1e6),
            OFFCPU_MIN_NS=int(self.opts.offcpu_min_us * 1000),
            FILL_SAMPLE_NS=FILL_SAMPLE_NS,
            RB_PAGES=RING_PAGES,
            STACK_ENTRIES=STACK_ENTRIES,
            HIST_BUCKETS=HIST_BUCKETS,
            FILTER_PID=0,  # -p traces the process's tree (FILTER_TREE), seeded with the pid
            FILTER_TREE=int(bool(self.opts.command_tree or self.opts.pid)),
            FILTER_DEV=int(bool(self.devices)),
            FILTER_CGROUP=self.cgroup_id or 0,
            PER_SYSCALL_TRACEPOINTS=int(self.opts.attach == "syscalls"),
            SELF_TGID=os.getpid(),
        )
        return [f"-D{k}={v}" for k, v in defines.items()] + [f"-I{os.path.dirname(BPF_SOURCE)}"]

    def _compile(self):
        os.environ.update(host.kernel_headers_env())
        from bcc import BPF  # Debian's python3-bpfcc

        try:
            return BPF(src_file=BPF_SOURCE.encode(), cflags=self._cflags())
        except Exception as e:
            raise JstallError(
                f"bcc could not compile the probes ({e}); if it says headers are missing, run "
                "'sh scripts/setup.sh' (builds the generic-header fallback) or install linux-headers-$(uname -r)"
            ) from None

    def _attach(self, b):
        traced = b[b"traced_nr"]
        for name, nr in self.syscall_numbers.items():
            traced[ctypes.c_uint32(nr)] = ctypes.c_uint8(syscalls.probe_flags(name))
        if self.opts.attach == "syscalls":
            for name in self.syscall_numbers:
                for kind in ("enter", "exit"):
                    tp = f"sys_{kind}_{name}"
                    if not host.tracepoint_exists("syscalls", tp):
                        self.missing.append(f"syscalls:{tp}")
                        continue
                    fn = "sc_enter_at" if kind == "enter" and name in syscalls.PATH_ARG1 else f"sc_{kind}"
                    b.attach_tracepoint(tp=f"syscalls:{tp}".encode(), fn_name=fn.encode())
                    self.attached.append(f"syscalls:{tp}")
        else:
            for name in ("sys_enter", "sys_exit"):
                if not host.tracepoint_exists("raw_syscalls", name):
                    raise JstallError(f"tracepoint raw_syscalls:{name} is missing; jstall needs a kernel with CONFIG_FTRACE_SYSCALLS")
                b.attach_raw_tracepoint(tp=name.encode(), fn_name=f"on_{name}".encode())
                self.attached.append(f"raw:raw_syscalls:{name}")
        for cat, names in (("ext4", EXT4_RAW_TRACEPOINTS), ("jbd2", JBD2_RAW_TRACEPOINTS)):
            for name in names:
                if host.tracepoint_exists(cat, name):
                    b.attach_raw_tracepoint(tp=name.encode(), fn_name=f"rtp_{name}".encode())
                    self.attached.append(f"raw:{cat}:{name}")
                else:
                    self.missing.append(f"raw:{cat}:{name}")
        sched = ["sched_switch"] + (["sched_process_fork"] if self.opts.command_tree or self.opts.pid else [])
        for name in sched:
            b.attach_raw_tracepoint(tp=name.encode(), fn_name=f"rtp_{name}".encode())
            self.attached.append(f"raw:sched:{name}")
        if self.missing and not self.opts.quiet:
            print(f"jstall: tracepoints missing on this kernel, not recorded: {' '.join(self.missing)}", file=sys.stderr)

    def scope(self):
        """What the recording covers, in words (the 'Tracing ...' line)."""
        where = ("on " + ", ".join(f"{d} ({self.journals[d]['mountpoint']})" for d in self.devices)
                 if self.devices else "on every ext4")
        who = ""
        if self.opts.pid:
            who = f" of PID {self.opts.pid} and its children"
        elif self.opts.command_tree:
            who = " of the command and its children"
        if self.cgroup_id:
            who += f" in cgroup {self.opts.cgroup}"
        return f"Tracing ext4 metadata calls{who} and jbd2 {where}"

    def start(self):
        """Compile and attach the probes, then stream events in a background thread."""
        b = self.bpf = self._compile()
        created = not os.path.exists(self.output_dir)
        try:
            os.makedirs(self.output_dir, exist_ok=True)
            one = ctypes.c_uint8(1)
            for dev in self.devices:
                major, minor = journals.parse_dev(dev)
                b[b"devices"][ctypes.c_uint32(journals.kernel_dev(major, minor))] = one
            if self.opts.pid:
                self._pidfd = os.pidfd_open(self.opts.pid)
                for tgid in [self.opts.pid] + host.descendants(self.opts.pid):
                    self.trace_tgid(tgid)
            self._attach(b)
            for name in ("calls_rb", "offcpu_rb", "jbd2_rb"):
                b[name.encode()].open_ring_buffer(self._on_event)
            self.hz, self.hz_source = host.config_hz(), "config"
            if not self.hz:
                first = host.read_jiffies()
                time.sleep(0.25)
                measured = host.measured_hz(first, host.read_jiffies())
                self.hz, self.hz_source = (measured[0], "measured") if measured else (None, None)
            self.start_clock = _clock()
            self._jiffies_start = host.read_jiffies()
            for j in self.journals.values():  # the kernel's own statistics, from now on traced
                j["proc_info_start"] = journals.read_proc_info(j["proc_info_name"])
            for name in CHUNKED:
                os.makedirs(table_path(self.output_dir, name), exist_ok=True)
            self._write_snapshots(b)
            self.last_flush = self.start_clock
            write_metadata(self.output_dir, self._metadata(RECORDING, self.start_clock))
        except BaseException:
            self.bpf.cleanup()
            self.bpf = None
            if created:
                shutil.rmtree(self.output_dir, ignore_errors=True)
            raise
        if not self.opts.quiet:
            print(f"{self.scope()}... Hit Ctrl-C to end.", file=self.console)
            print(f"{'TIME':<8} {'COMM':<16} {'PID':>7} {'TID':>7} {'CALL':<13} {'LAT(ms)':>9} {'DEV':>7} {'FILL%':>6} FILE",
                  file=self.console, flush=True)
        self._thread = threading.Thread(target=self._poll, name="jstall-poll", daemon=True)
        self._thread.start()
        return self

    def trace_tgid(self, tgid):
        """Add a process (and, through sched_process_fork, its descendants) to the traced tree."""
        self.bpf[b"tgids"][ctypes.c_uint32(tgid)] = ctypes.c_uint8(1)

    def untrace_tgid(self, tgid):
        if self.bpf is None:
            return
        try:
            del self.bpf[b"tgids"][ctypes.c_uint32(tgid)]
        except KeyError:
            pass

    # ---- streaming ------------------------------------------------------------------

    def _on_event(self, ctx, data, size):
        raw = ctypes.string_at(data, size)
        kind = raw[0]
        with self._lock:
            self._chunks[kind].append(raw)
        if kind == events.KINDS["KIND_CALL"]:
            if not self.opts.quiet:
                self._print_call(np.frombuffer(raw, dtype=events.DTYPES["call_event"])[0])

    def _print_call(self, e):
        name = self.syscall_names.get(int(e["syscall_nr"]), str(e["syscall_nr"]))
        dev = journals.dev_name(int(e["dev"])) if e["dev"] else "-"
        # the fill the handle saw: the committing transaction's credits count as used
        # (jbd2_log_space_left), as they do when jbd2 decides whether a handle must wait
        used_free = int(e["journal_free_blocks"]) - int(e["journal_committing_credits"])
        fill = f"{_fill_pct(used_free, int(e['journal_log_blocks'])):6.1f}" if e["handles"] else "     -"
        t = time.strftime("%H:%M:%S")
        comm = e["comm"].decode(errors="replace")
        file = e["file"].decode(errors="replace") or "-"
        print(f"{t:<8} {comm:<16} {e['pid']:>7} {e['tid']:>7} {name:<13} {e['latency_ns'] / 1e6:>9.2f} {dev:>7} {fill} {file}",
              file=self.console, flush=True)

    def _poll(self):
        try:
            self._poll_loop()
        except Exception as e:  # e.g. the disk is full: end the recording, say why
            self.error = f"{type(e).__name__}: {e}"
            self.stop_reason = f"error: {self.error}"
            self.done.set()

    def _poll_loop(self):
        last_flush = time.monotonic()
        while not self._stop.is_set():
            self.bpf.ring_buffer_poll(100)
            if self._pidfd is not None and not self.done.is_set() and _readable(self._pidfd):
                self.stop_reason = "process exited"
                self.done.set()
            if time.monotonic() - last_flush >= FLUSH_SECONDS:
                self._flush()
                last_flush = time.monotonic()
                if self.opts.max_size_bytes and self._bytes >= self.opts.max_size_bytes and not self.done.is_set():
                    self.stop_reason = "max size"
                    self.done.set()

    def _flush(self, final=False):
        """Decode the records gathered so far, write them as closed chunks, snapshot the
        call counters and update metadata.json (last_flush)."""
        with self._lock:
            chunks, self._chunks = self._chunks, {kind: [] for kind in events.KIND_STRUCTS}
        a = {events.KIND_STRUCTS[k]: events.decode(events.KIND_STRUCTS[k], v) for k, v in chunks.items() if v}
        builders = {
            "calls": ("call_event", lambda r: _calls_table(r, self.syscall_names)),
            "offcpu": ("offcpu_event", lambda r: _offcpu_table(r, self.syscall_names)),
            "jbd2_events": ("jbd2_event", _jbd2_table),
            "run_stats": ("run_stats_event", lambda r: _run_stats_table(r, self.hz)),
            "checkpoint_stats": ("checkpoint_stats_event", lambda r: _checkpoint_stats_table(r, self.hz)),
            "log_tail": ("log_tail_event", _log_tail_table),
            "fill": ("fill_event", _fill_table),
        }
        self._seq += 1
        for name, (struct, build) in builders.items():
            if struct not in a:
                continue
            table = build(a[struct])
            self._write_chunk(name, table)
            self.rows[name] += table.num_rows
        if "call_event" in a:
            ids = {int(i) for i in np.unique(a["call_event"]["cgroup_id"])} - {int(k) for k in self._cgroups}
            if ids:
                self._cgroups.update(_cgroup_paths(ids))
                self._cgroups.update({str(i): None for i in ids if str(i) not in self._cgroups})
        if "offcpu_event" in a:
            self.offcpu_without_stack += int(np.sum(a["offcpu_event"]["stack_id"] < 0))
            new = sorted(int(s) for s in np.unique(a["offcpu_event"]["stack_id"]) if s >= 0 and int(s) not in self._stack_ids)
            if new:
                self._write_chunk("stacks", _stacks_table(self.bpf, new))
                self._stack_ids.update(new)
        if "jbd2_event" in a:
            j = a["jbd2_event"]
            is_checkpoint = j["event"] == events.ENUMS["jstall_jbd2_event"]["JBD2_CHECKPOINT"]
            in_jbd2 = np.char.startswith(j["comm"], b"jbd2/")
            self.checkpoints["forced"] += int(np.sum(is_checkpoint & ~in_jbd2))
            self.checkpoints["background"] += int(np.sum(is_checkpoint & in_jbd2))
            known = j[j["has_journal"] != 0]
            for dev in np.unique(known["dev"]):
                mtb = int(known["max_transaction_blocks"][known["dev"] == dev].max())
                self._max_tx[journals.dev_name(int(dev))] = mtb
        self._write_snapshots(self.bpf)
        self.last_flush = _clock()
        if not final:
            write_metadata(self.output_dir, self._metadata(RECORDING, self.last_flush))

    def _write_chunk(self, name, table):
        self._bytes += write_chunk(self.output_dir, name, table, self._seq)

    def _write_snapshots(self, b):
        """The in-kernel call counters so far, as whole tables (rewritten atomically)."""
        hist, totals, self.calls_without_device = _histogram_tables(b, self.syscall_names, bool(self.devices))
        self.tables = {"call_histograms": hist, "call_totals": totals}
        for name, table in self.tables.items():
            write_table_atomic(self.output_dir, name, table)

    def _used_devs(self):
        """Journals the traced tasks used ('MAJ:MIN'), read from the probes' map."""
        return {journals.dev_name(int(k.value)) for k in self.bpf[b"used_devs"].keys()}

    def _lost(self):
        c = events.lost_counts(self.bpf)
        return {name: c[name] for name in ("calls", "offcpu", "jbd2")}, c["stacks"]

    # ---- tear-down and writing ------------------------------------------------------

    def stop(self, extra_metadata=None, command=None, exit_status=None, status="complete", stop_reason=None):
        """Detach, drain the buffers, write every table and then metadata.json; return the path."""
        self._stop.set()
        if self._thread:
            self._thread.join()
        b = self.bpf
        b.ring_buffer_consume()
        end_clock = _clock()
        for j in self.journals.values():
            j["proc_info_end"] = journals.read_proc_info(j["proc_info_name"])
        self._jiffies_end = host.read_jiffies()
        self._flush(final=True)
        self.command, self.exit_status = command, exit_status
        self.stop_reason = stop_reason or self.stop_reason
        metadata = self._metadata(status, end_clock)   # reads the probes' maps: before cleanup
        b.cleanup()
        self.bpf = None
        if self._pidfd is not None:
            os.close(self._pidfd)
        for name in CHUNKED:
            compact_table(self.output_dir, name, SCHEMAS[name])
        if extra_metadata:
            metadata.update(extra_metadata)
        write_metadata(self.output_dir, metadata)
        self.metadata = metadata
        return self.output_dir

    def _metadata(self, status, end_clock):
        """metadata.json as of now: while recording (status 'recording') 'end' is the last flush."""
        mounts = None
        for dev, mtb in self._max_tx.items():
            if dev not in self.journals:  # mounted while recording
                mounts = journals.ext4_mounts() if mounts is None else mounts
                if dev in mounts:
                    try:
                        self.journals[dev] = journals.describe(dev, mounts[dev])
                    except JstallError:
                        continue
            if dev in self.journals:
                self.journals[dev]["max_transaction_blocks"] = mtb
        traced = self.journals
        if self.task_filter and not self.devices:  # only the journals the traced tasks used
            used = self._used_devs()
            traced = {d: j for d, j in self.journals.items() if d in used}
        jiffies_end = getattr(self, "_jiffies_end", None)
        measured = host.measured_hz(self._jiffies_start, jiffies_end) if jiffies_end else None
        lost, stacks_lost = self._lost()
        return {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "tool_version": __version__,
            "status": status,
            "stop_reason": self.stop_reason,
            "kernel_release": os.uname().release,
            "host": socket.gethostname(),
            "hz": self.hz,
            "hz_source": self.hz_source,
            "hz_measured": round(measured[1], 1) if measured else None,
            "start": self.start_clock,
            "end": end_clock,
            "last_flush": self.last_flush,
            "command": getattr(self, "command", None),
            "command_exit_status": getattr(self, "exit_status", None),
            "filters": {
                "devices": self.devices,
                "pid": self.opts.pid,
                "cgroup": self.opts.cgroup,
                "cgroup_id": self.cgroup_id,
                "command_tree": bool(self.opts.command_tree),
            },
            "min_ms": self.opts.min_ms,
            "offcpu_min_us": self.opts.offcpu_min_us,
            "max_size_bytes": self.opts.max_size_bytes,
            "probes": {"attached": self.attached, "missing": self.missing,
                       "syscalls": sorted(self.syscall_numbers)},
            "traced_calls": sorted(self.syscall_numbers),
            "calls_without_device": self.calls_without_device,
            "events_lost": lost,
            "stacks_lost": stacks_lost,
            "offcpu_without_stack": self.offcpu_without_stack,
            "rows": dict(self.rows),
            "cgroups": self._cgroups,
            "journals": list(traced.values()),
        }



def check_output_dir(path):
    """Refuse a session directory that cannot be made (one line naming the fix); make nothing."""
    if os.path.exists(os.path.join(path, "metadata.json")):
        raise JstallError(f"{path} already holds a session; choose another -o")
    if os.path.exists(path) and not os.path.isdir(path):
        raise JstallError(f"-o {path}: exists and is not a directory; choose another -o")
    real = os.path.realpath(path)
    if real == "/proc" or real.startswith(("/proc/", "/sys/")) or real == "/sys":
        raise JstallError(f"-o {path}: cannot write a session under /proc or /sys; choose a directory on a disk")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise JstallError(f"-o {path}: {parent} does not exist; create it first or choose another -o")
    target = path if os.path.isdir(path) else parent
    if not os.access(target, os.W_OK | os.X_OK):
        raise JstallError(f"-o {path}: {target} is not writable; choose a writable directory")


def _readable(fd):
    """Has a pidfd's process exited (the pidfd polls readable)?"""
    p = select.poll()
    p.register(fd, select.POLLIN)
    return bool(p.poll(0))


def _cgroup_paths(ids):
    """{cgroup id: path under the cgroup v2 mount} for the ids the calls carry."""
    if not ids:
        return {}
    root = "/sys/fs/cgroup/unified" if os.path.isdir("/sys/fs/cgroup/unified") else "/sys/fs/cgroup"
    want, found = set(ids), {}
    for top, dirs, _ in os.walk(root):
        try:
            ino = os.stat(top).st_ino
        except OSError:
            continue
        if ino in want:
            found[str(ino)] = "/" if top == root else "/" + os.path.relpath(top, root)
            if len(found) == len(want):
                break
    return found


# ---- raw records -> Arrow tables ---------------------------------------------------


def _table(name, columns):
    schema = SCHEMAS[name]
    arrays = []
    for field in schema:
        col = columns[field.name]
        arrays.append(col if isinstance(col, pa.Array) else pa.array(col, type=field.type, from_pandas=True))
    return pa.Table.from_arrays(arrays, schema=schema)


def _devs(values):
    uniq, inv = np.unique(np.asarray(values, dtype=np.uint64), return_inverse=True)
    names = np.array([journals.dev_name(int(u)) if u else None for u in uniq], dtype=object)
    return pa.array(names[inv] if len(values) else [], type=pa.string())


def _names(values, table):
    uniq, inv = np.unique(np.asarray(values), return_inverse=True)
    names = np.array([table.get(int(u), f"nr{int(u)}") for u in uniq], dtype=object)
    return pa.array(names[inv] if len(values) else [], type=pa.string())


def _comm(a):
    return pa.array(np.char.decode(a["comm"], "utf-8", "replace") if len(a) else [], type=pa.string())


def _masked(values, valid):
    return pa.array(np.asarray(values, dtype=np.int64), type=pa.int64(), mask=~np.asarray(valid, dtype=bool))


def _fill_columns(a):
    has = a["has_journal"] != 0
    return {col: _masked(a[col], has) for col in FILL_COLUMNS}


def _task(a):
    return {"tid": a["tid"].astype(np.int32), "pid": a["pid"].astype(np.int32), "comm": _comm(a)}


def _calls_table(a, names):
    has = a["handles"] > 0
    return _table("calls", {
        "ts_ns": a["ts_ns"].astype(np.int64), "latency_ns": a["latency_ns"].astype(np.int64), **_task(a),
        "syscall": _names(a["syscall_nr"], names), "ret": a["ret"], "dev": _devs(a["dev"]),
        "handles": a["handles"].astype(np.int32),
        "journal_free_blocks": _masked(a["journal_free_blocks"], has),
        "journal_min_free_blocks": _masked(a["journal_min_free_blocks"], has),
        "journal_log_blocks": _masked(a["journal_log_blocks"], has),
        "journal_committing_credits": _masked(a["journal_committing_credits"], has),
        "file": _file(a), "cgroup_id": a["cgroup_id"].astype(np.int64),
    })


def _file(a):
    """The file name the probes read (empty: not known) as strings or nulls."""
    if not len(a):
        return pa.array([], type=pa.string())
    names = np.char.decode(a["file"], "utf-8", "replace")
    return pa.array(names, type=pa.string(), mask=names == "")


def _who(a):
    return {"in_traced_call": a["in_traced_call"] != 0, "traced_task": a["traced_task"] != 0}


def _offcpu_table(a, names):
    state = a["state"].astype(np.int64)
    runnable = state == 0  # the probe stores 0 for a preempted task
    return _table("offcpu", {
        "ts_ns": a["ts_ns"].astype(np.int64), "offcpu_ns": a["offcpu_ns"].astype(np.int64), **_task(a),
        "state": state, "runnable": runnable, "stack_id": a["stack_id"].astype(np.int32),
        "call_ts_ns": a["call_ts_ns"].astype(np.int64), "syscall": _names(a["syscall_nr"], names),
        "dev": _devs(a["dev"]),
    })


def _stacks_table(b, ids):
    table = b[b"stacks"]
    frames = []
    for sid in ids:
        try:
            frames.append([b.ksym(addr).decode(errors="replace") for addr in table.walk(sid)])
        except KeyError:
            frames.append([])
    return _table("stacks", {"stack_id": np.array(ids, dtype=np.int32), "frames": pa.array(frames, type=pa.list_(pa.string()))})


def _jbd2_table(a):
    names = events.JBD2_EVENT_NAMES
    ev = a["event"]
    comm = _comm(a)
    is_ = {n: ev == code for code, n in names.items()}
    return _table("jbd2_events", {
        "ts_ns": a["ts_ns"].astype(np.int64), "event": _names(ev, names), "dev": _devs(a["dev"]),
        "transaction": _masked(a["transaction"], a["transaction"] >= 0),
        "tid": a["tid"].astype(np.int32), "pid": a["pid"].astype(np.int32), "comm": comm,
        "jbd2_thread": pc.starts_with(comm, "jbd2/") if len(a) else pa.array([], type=pa.bool_()),
        "result": _masked(a["arg"], is_["checkpoint"]),
        "write_flags": _masked(a["arg"], is_["write_superblock"]),
        "stall_ms": _masked(a["arg"], is_["lock_buffer_stall"]),
        **_who(a), **_fill_columns(a),
    })


def _jiffies_ns(values, hz):
    return np.rint(np.asarray(values, dtype=np.float64) * (1e9 / hz)).astype(np.int64) if hz else np.full(len(values), None)


def _run_stats_table(a, hz):
    cols = {"ts_ns": a["ts_ns"].astype(np.int64), "dev": _devs(a["dev"]),
            "transaction": a["transaction"].astype(np.int64), **_task(a)}
    for phase in ("wait", "request_delay", "running", "locked", "flushing", "logging"):
        cols[f"{phase}_jiffies"] = a[f"{phase}_jiffies"].astype(np.int64)
        cols[f"{phase}_ns"] = _jiffies_ns(a[f"{phase}_jiffies"], hz)
    for c in ("handle_count", "blocks", "blocks_logged"):
        cols[c] = a[c].astype(np.int64)
    return _table("run_stats", cols)


def _checkpoint_stats_table(a, hz):
    return _table("checkpoint_stats", {
        "ts_ns": a["ts_ns"].astype(np.int64), "dev": _devs(a["dev"]),
        "transaction": a["transaction"].astype(np.int64), **_task(a),
        "chp_time_jiffies": a["chp_time_jiffies"].astype(np.int64),
        "chp_time_ns": _jiffies_ns(a["chp_time_jiffies"], hz),
        "forced_to_close": a["forced_to_close"].astype(np.int64),
        "written": a["written"].astype(np.int64), "dropped": a["dropped"].astype(np.int64), **_who(a),
    })


def _log_tail_table(a):
    return _table("log_tail", {
        "ts_ns": a["ts_ns"].astype(np.int64), "dev": _devs(a["dev"]), **_task(a),
        "tail_sequence": a["tail_sequence"].astype(np.int64), "first_tid": a["first_tid"].astype(np.int64),
        "block_nr": a["block_nr"].astype(np.int64), "freed_blocks": a["freed_blocks"].astype(np.int64),
        **_who(a), **_fill_columns(a),
    })


def _fill_table(a):
    return _table("fill", {
        "ts_ns": a["ts_ns"].astype(np.int64), "dev": _devs(a["dev"]), **_fill_columns(a),
        "source": pa.array(["handle_start"] * len(a), type=pa.string()),
    })


def _histogram_tables(b, names, devless_apart=False):
    """(call_histograms, call_totals, calls_without_device) from the in-kernel counters.
    calls_without_device: {syscall: {"count", "errors"}} of calls that resolved to no
    filesystem; with devless_apart (-d) they stay out of the tables."""
    hist, tot, devless = [], [], {}
    for k, per_cpu in b[b"call_stats"].items():
        if not k.dev:
            name = names.get(int(k.syscall_nr), f"nr{k.syscall_nr}")
            devless[name] = {"count": sum(v.count for v in per_cpu), "errors": sum(v.errors for v in per_cpu)}
            if devless_apart:
                continue
        tot.append((k.syscall_nr, k.dev, sum(v.count for v in per_cpu), sum(v.errors for v in per_cpu),
                    sum(v.total_ns for v in per_cpu), max(v.max_ns for v in per_cpu)))
        buckets = np.sum([np.ctypeslib.as_array(v.buckets) for v in per_cpu], axis=0)
        hist += [(k.syscall_nr, k.dev, i, int(n)) for i, n in enumerate(buckets) if n]
    hist.sort()
    tot.sort()
    h = np.array(hist, dtype=np.int64).reshape(-1, 4)
    t = np.array(tot, dtype=np.int64).reshape(-1, 6)
    bucket = h[:, 2]
    histograms = _table("call_histograms", {
        "syscall": _names(h[:, 0], names), "dev": _devs(h[:, 1]), "bucket": bucket.astype(np.int32),
        "low_ns": np.where(bucket == 0, 0, np.left_shift(1, bucket)), "high_ns": np.left_shift(1, bucket + 1),
        "count": h[:, 3],
    })
    totals = _table("call_totals", {
        "syscall": _names(t[:, 0], names), "dev": _devs(t[:, 1]), "count": t[:, 2], "errors": t[:, 3],
        "total_latency_ns": t[:, 4], "max_latency_ns": t[:, 5],
    })
    return histograms, totals, dict(sorted(devless.items()))
