"""A session writer: a set of probes (probeset.py) opened, their ring buffers polled in a
background thread, what they gathered flushed into a session directory
(docs/session-format.md) as it goes, and the probes closed.

What it writes is built apart: the Arrow tables in tables.py, metadata.json in
session_metadata.py; the per-call console lines in console.py.

Library use (the lab records this way):

    rec = Recorder(RecordOptions(output_dir="s1", devices=["7:0"], quiet=True))
    rec.start()            # probes attached when it returns
    ...                    # run the workload
    path = rec.stop(extra_metadata={"lab": {...}})
"""

import ctypes
import dataclasses
import errno
import datetime
import os
import select
import shutil
import sys
import threading
import time

import numpy as np

from jstall import flavour
from jstall.devstats import DeviceSampler, devices_under
from jstall.errors import JstallError
from jstall.schema import SCHEMAS
from jstall.session import RECORDING, compact_table, table_path, write_chunk, write_metadata, write_table_atomic

from . import console, events, filesystems, host, tables
from .probeset import POLL_MS, ProbeOptions, ProbeSet
from .session_metadata import cgroup_paths, clock, session_metadata
from .tables import CHUNKED, STREAMED

FLUSH_SECONDS = 2.0        # a closed chunk per table, counters and metadata.json this often


@dataclasses.dataclass
class RecordOptions(ProbeOptions):
    """What to record: the probes' options (ProbeOptions), and where and how the session is written."""

    output_dir: str = None
    console: object = None                                    # stream for live lines (default stdout)
    max_size_bytes: int = None                                # end the recording at this session size
    device_interval_s: float = 1.0                            # device_stats sampling (0: none; the lab samples its own)


def default_output_dir():
    return "jstall-session-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


class Recorder:
    """One recording: the options are checked when it is made (JstallError naming the fix,
    nothing created), start() opens the probes (``probes``: a ProbeSet, by default made
    from the options), stop() closes them and finishes the session directory."""

    def __init__(self, options, probes=None):
        self.opts = options
        self.console = options.console or sys.stdout
        self.probes = probes or ProbeSet(options)
        self.output_dir = options.output_dir or default_output_dir()
        check_output_dir(self.output_dir)
        p = self.probes
        self.journals, self.devices = p.journals, p.devices
        self.bpf = None
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
        self._stack_ids = set()                           # symbolized; at most both stack maps' entries
        self._max_tx = {}                                 # dev -> j_max_transaction_buffers seen
        self._pidfd = None
        self.last_flush = None
        self.cgroups = {}                                 # str(cgroup id) -> path, of the calls' and writers' cgroups
        self._committed = set()                           # (dev, transaction) committed since the last read
        self.sampler = None                               # DeviceSampler of the traced journals' devices
        self.write_error = None                           # (what, OSError): the first write that failed
        self.unwritten_rows = 0                           # rows gathered that no write could keep
        self._symbols = {}                                # kernel text address -> symbol (work functions)

    def _ksym(self, addr):
        """A kernel text address's symbol (bytes), each looked up once."""
        if addr not in self._symbols:
            self._symbols[addr] = self.bpf.ksym(addr)
        return self._symbols[addr]

    def start(self):
        """Open the probes, then stream events in a background thread."""
        created = not os.path.exists(self.output_dir)
        writing = False
        try:
            if self.opts.pid:
                self._pidfd = os.pidfd_open(self.opts.pid)
            b = self.bpf = self.probes.open(self._on_event).bpf
            writing = True
            os.makedirs(self.output_dir, exist_ok=True)
            self.hz, self.hz_source = host.kernel_hz()
            self.start_clock = clock()
            self._jiffies_start = host.read_jiffies()
            for j in self.journals.values():  # the kernel's own statistics, from now on traced
                filesystems.read_kernel_counters(j, "start")
            for name in CHUNKED:
                os.makedirs(table_path(self.output_dir, name), exist_ok=True)
            if self.opts.device_interval_s:
                self.sampler = DeviceSampler(devices_under(self.journals.values()),
                                             self.opts.device_interval_s).start()
            self._write_snapshots(b)
            self.last_flush = self.start_clock
            write_metadata(self.output_dir, self._metadata(RECORDING, self.start_clock))
        except OSError as e:
            self._undo_start(created)
            if not writing or not _is_write_error(e, self.output_dir):
                raise
            raise JstallError(f"cannot write the session in {self.output_dir}: {_why(e)}"
                              f"{_fix(e)}; nothing was recorded") from None
        except BaseException:
            self._undo_start(created)
            raise
        if not self.opts.quiet:
            console.print_start(self.console, console.scope(self.probes))
        if flavour.uncounted_skips(flavour.running(), host.kernel_version(), self.probes.attach_mode):
            print("jstall: note: this PREEMPT_RT kernel (before 6.7) skips a syscall tracepoint's program while "
                  "any BPF tool's map operation is preempted on that CPU, and counts none of those skips; "
                  "JSTALL_ATTACH=fentry counts them", file=sys.stderr)
        self._thread = threading.Thread(target=self._poll, name="jstall-poll", daemon=True)
        self._thread.start()
        return self

    def _undo_start(self, created):
        self.probes.close()
        self.bpf = None
        if self.sampler is not None:
            self.sampler.stop()
            self.sampler = None
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        if created:
            shutil.rmtree(self.output_dir, ignore_errors=True)

    def trace_tgid(self, tgid):
        """Add a process (and its descendants) to the traced tree (ProbeSet.trace_tgid)."""
        self.probes.trace_tgid(tgid)

    def untrace_tgid(self, tgid):
        self.probes.untrace_tgid(tgid)

    # ---- streaming ------------------------------------------------------------------

    def _on_event(self, ctx, data, size):
        raw = ctypes.string_at(data, size)
        kind = raw[0]
        with self._lock:
            self._chunks[kind].append(raw)
        if kind == events.KINDS["KIND_CALL"]:
            if not self.opts.quiet:
                console.print_call(self.console, np.frombuffer(raw, dtype=events.DTYPES["call_event"])[0],
                                   self.probes.syscall_names)

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
            # woken early only by a CPU's RB_WAKE_EVERY-th record (rb_flags); then every
            # ring is read, whichever woke it
            self.bpf.ring_buffer_poll(POLL_MS)
            self.bpf.ring_buffer_consume()
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
        self._seq += 1
        for name, table in tables.streamed_tables(a, self.probes.syscall_names, self.hz, self._ksym).items():
            if self._kept(name, self._write_chunk, name, table):
                self.rows[name] += table.num_rows
            else:
                self.unwritten_rows += table.num_rows
        ids = set()
        if "call_event" in a:
            ids = {int(i) for i in np.unique(a["call_event"]["cgroup_id"])}
        if "run_stats_event" in a:
            r = a["run_stats_event"]
            self._committed.update((filesystems.dev_name(int(d)), int(t)) for d, t in zip(r["dev"], r["transaction"]))
        ids |= self._read_writers()
        ids -= {int(k) for k in self.cgroups}
        if ids:
            self.cgroups.update(cgroup_paths(ids))
            self.cgroups.update({str(i): None for i in ids if str(i) not in self.cgroups})
        if "offcpu_event" in a or "worker_offcpu_event" in a:
            if "offcpu_event" in a:
                self.offcpu_without_stack += int(np.sum(a["offcpu_event"]["stack_id"] < 0))
            ids = np.unique(np.concatenate([np.concatenate([o["stack_id"], o["waker_stack_id"][o["wake_ts_ns"] != 0]])
                                            for o in (a.get("offcpu_event"), a.get("worker_offcpu_event"))
                                            if o is not None]))
            new = sorted(int(s) for s in ids if s >= 0 and int(s) not in self._stack_ids)
            if new and self._kept("stacks", self._write_chunk, "stacks", tables.stacks_table(self.bpf, new)):
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
                self._max_tx[filesystems.dev_name(int(dev))] = mtb
        self._kept("call counters", self._write_snapshots, self.bpf)
        if not final and self.write_error is None:
            self.last_flush = clock()
            self._kept("metadata.json", write_metadata, self.output_dir, self._metadata(RECORDING, self.last_flush))
        if self.write_error is not None and not self.done.is_set():   # end the recording, say why
            self.stop_reason = "error: " + self.write_error_text()
            self.done.set()

    def _kept(self, what, write, *args):
        """Run one write of the session; on an OSError (a full or failing disk) remember the
        first, and return False: the recording ends with what was written before it."""
        try:
            write(*args)
            return True
        except OSError as e:
            if self.write_error is None:
                self.write_error = (what, e)
            return False

    def write_error_text(self):
        """The first failed write in words: what, why, and what was kept (None: none failed)."""
        if self.write_error is None:
            return None
        what, e = self.write_error
        kept = sum(self.rows.values())
        return (f"writing the session in {self.output_dir} failed ({what}: {_why(e)}): {kept:,} rows "
                f"written before it are kept, {self.unwritten_rows:,} gathered after could not be written{_fix(e)}")

    def _read_writers(self):
        """Write what each writer put into the journals since the last read (a writers
        chunk, ProbeSet.writers_since); return the rows' cgroup ids. Committed transactions'
        keys leave the map."""
        rows = self.probes.writers_since(self._committed)
        self._committed = set()
        if rows:
            if self._kept("writers", self._write_chunk, "writers", tables.writers_table(rows, time.monotonic_ns())):
                self.rows["writers"] = self.rows.get("writers", 0) + len(rows)
            else:
                self.unwritten_rows += len(rows)
        return {k[2] for k in rows}

    def _write_chunk(self, name, table):
        self._bytes += write_chunk(self.output_dir, name, table, self._seq)

    def _write_snapshots(self, b):
        """The in-kernel call counters so far, as whole tables (rewritten atomically)."""
        hist, totals, self.calls_without_device = tables.histogram_tables(
            b, self.probes.syscall_names, bool(self.devices), self.probes.call_slots)
        self.tables = {"call_histograms": hist, "call_totals": totals}
        if self.sampler is not None:   # what the devices served so far: a table of its own
            self.tables["device_stats"] = self.sampler.table()
        for name, table in self.tables.items():
            write_table_atomic(self.output_dir, name, table)

    # ---- tear-down and writing ------------------------------------------------------

    def stop(self, extra_metadata=None, command=None, exit_status=None, status="complete", stop_reason=None):
        """Detach, drain the buffers, write every table and then metadata.json; return the path."""
        self._stop.set()
        if self._thread:
            self._thread.join()
        b = self.bpf
        b.ring_buffer_consume()
        end_clock = clock()
        for j in self.journals.values():
            filesystems.read_kernel_counters(j, "end")
        self._jiffies_end = host.read_jiffies()
        if self.sampler is not None:
            self.sampler.stop()
        try:
            self._flush(final=True)
            self.command, self.exit_status = command, exit_status
            self.stop_reason = stop_reason or self.stop_reason
            if self.probes.home_writes_counted:
                self._kept("home_writes", write_table_atomic, self.output_dir, "home_writes",
                           tables.home_writes_table(self.probes.read_home_writes()))
            if self.probes.xattr_files_noted:
                self._kept("xattr_files", write_table_atomic, self.output_dir, "xattr_files",
                           tables.xattr_files_table(self.probes.read_xattr_files()))
            metadata = self._metadata(status, end_clock)   # reads the probes' maps: before they close
        finally:
            self.probes.close()
            self.bpf = None
            if self._pidfd is not None:
                os.close(self._pidfd)
        for name in CHUNKED:   # a compaction that fails leaves its chunks, readable as they are
            self._kept(f"{name} compacted", compact_table, self.output_dir, name, SCHEMAS[name])
        if extra_metadata:
            metadata.update(extra_metadata)
        if self.write_error is not None:
            metadata.update(status=WRITE_FAILED, stop_reason="error: " + self.write_error_text(),
                            rows_unwritten=self.unwritten_rows)
        self.metadata = metadata
        self._kept("metadata.json", write_metadata, self.output_dir, metadata)
        if self.write_error is not None:
            # metadata.json says so, or (unwritable) the last flush's says 'recording': either
            # way the session loads as incomplete
            raise JstallError(self.write_error_text())
        return self.output_dir

    def _metadata(self, status, end_clock):
        """metadata.json as of now: while recording (status 'recording') 'end' is the last flush."""
        mounts = None
        for dev, mtb in self._max_tx.items():
            if dev not in self.journals:  # mounted while recording
                mounts = filesystems.journaled_mounts() if mounts is None else mounts
                if dev in mounts:
                    try:
                        self.journals[dev] = filesystems.describe(dev, mounts[dev])
                    except JstallError:
                        continue
            if dev in self.journals:
                self.journals[dev]["max_transaction_blocks"] = mtb
        traced = self.journals
        if self.probes.task_filter and not self.devices:  # only the journals the traced tasks used
            used = self.probes.used_devs()
            traced = {d: j for d, j in self.journals.items() if d in used}
        jiffies_end = getattr(self, "_jiffies_end", None)
        measured = host.measured_hz(self._jiffies_start, jiffies_end) if jiffies_end else None
        lost = self.probes.lost()
        stacks_lost = lost.pop("stacks")
        return session_metadata(self, status, end_clock, traced, measured, lost, stacks_lost)


#: the status of a session whose writing failed (a full or failing disk): what was written
#: before loads, flagged incomplete
WRITE_FAILED = "write_failed"


#: errors of a write that fails for the disk's sake, whatever the file
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EFBIG)


def _is_write_error(e, output_dir):
    """Is this OSError a failed write of the session (not, say, a kernel file unreadable)?"""
    name = str(getattr(e, "filename", None) or "")
    return e.errno in WRITE_ERRNOS or name.startswith((os.path.abspath(output_dir), output_dir))


def _why(e):
    """An OSError's reason in the C library's words (pyarrow's own text is longer)."""
    return os.strerror(e.errno) if e.errno else str(e)


def _fix(e):
    """What to do about a failed write, by its errno."""
    return {errno.ENOSPC: "; free space there or record to another -o",
            errno.EDQUOT: "; raise the quota or record to another -o",
            errno.EIO: "; the disk under it failed: record to another -o",
            errno.EROFS: "; it is read-only now: record to another -o"}.get(e.errno, "; record to another -o")


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
