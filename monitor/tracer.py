"""The monitor's live state: jstall's probes in monitor mode (MonitorProbes), streamed into
running totals (per journal, per stall cause), a flight buffer of recent detailed events, and
a list of the slowest recent operations.

The probes are a probes.probeset.ProbeSet compiled from probes/monitor.bpf.c: an operation is a
handle wait (``ext4_journal_start*`` to ``jbd2_handle_start``) or an fsync
(``ext4_sync_file_enter`` to ``_exit``), so tasks that do not journal run no program; on XFS,
each log-space wait of a reservation (``xfs_log_grant_sleep`` to its ``_exit``). With
``syscalls=True`` the probes are exactly ``jstall record``'s (every metadata syscall).

Times: ``*_ns`` are CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns), ``*_s`` seconds.
"""

import collections
import ctypes
import dataclasses
import gc
import resource
import threading
import time

import numpy as np

from jstall import cgroups, jbd2, kinds, xfs
from jstall.analyzer.stalls import causes
from jstall.probes import events, filesystems, host, tables
from jstall.probes.probeset import (BPF_SOURCE, BTF_TRACEPOINTS, EXT4_RAW_TRACEPOINTS,
                                    MONITOR_BPF_SOURCE, POLL_MS, ProbeOptions, ProbeSet)
from jstall.schema import PHASES

from . import bpfstats

OPS, OP_NAMES = events.OPS, events.OP_NAMES
MONITOR_RAW_TRACEPOINTS = (("jbd2", "jbd2_handle_start"), ("ext4", "ext4_sync_file_enter"),
                           ("ext4", "ext4_sync_file_exit"))
#: jbd2_log_space_left(): j_free - JBD2_CONTROL_BLOCKS_RESERVED (32) - committing credits
#: commit phases of jbd2_run_stats, and the upper bounds (seconds) of their histogram buckets
PHASE_BUCKETS_S = (0.001, 0.004, 0.016, 0.064, 0.25, 1.0, 4.0, 16.0, float("inf"))


def phase_buckets(counts):
    """Prometheus' cumulative [(le, count)] of per-bucket counts over PHASE_BUCKETS_S."""
    return [("+Inf" if le == float("inf") else repr(le), int(n)) for le, n in zip(PHASE_BUCKETS_S, np.cumsum(counts))]
RECENT_CALLS = 50
POLL_S = POLL_MS / 1000               # the ring buffers are read this often
OFFCPU_KEEP_NS = 30_000_000_000      # off-CPU rows wait this long for their operation to end
#: a journal's low headroom is the lowest of its fill samples over this many seconds: a
#: scrape at any interval up to it sees each dip to the forced-checkpoint condition, however
#: briefly the journal stayed there
HEADROOM_LOW_WINDOW_S = 60


#: how often the writers' counts are read from the probes' map
WRITERS_EVERY_NS = 2_000_000_000


def top_writers(amounts, n):
    """{(dev, kind, cgroup): amount} with, per (dev, kind), the ``n`` largest amounts under
    their own cgroup and the rest summed as cgroup "other" (bounded label sets); zero
    amounts dropped. Kinds: ``blocks`` (jbd2) and ``bytes`` (XFS) logged, ``stall_s`` (off-CPU
    seconds inside stalls)."""
    out = collections.Counter()
    groups = collections.defaultdict(list)
    for (dev, kind, cg), v in amounts.items():
        if v:
            groups[(dev, kind)].append((v, cg))
    for (dev, kind), vs in groups.items():
        vs.sort(key=lambda x: (-x[0], x[1]))
        for i, (v, cg) in enumerate(vs):
            out[(dev, kind, cg if i < n else "other")] += v
    return dict(out)


def journal_writers(logged, stall_s, n=None):
    """{dev: [{"cgroup", "logged", "unit" (blocks or bytes), "share", "stall_s"}, ...]}: what
    each named cgroup (and "other") logged on each journal, its share of the journal's total
    (0-1) and its tasks' off-CPU seconds in stalls there (a cgroup that only stalled logged 0),
    largest writer first, "other" last; with ``n``, at most ``n`` rows (the smallest summed
    into "other"). ``logged``: {(dev, kind, cgroup): amount}; ``stall_s``: {(dev, cgroup):
    seconds} (Tracer.logged and Tracer.cgroup_stall_seconds: the metrics' values)."""
    amount, units = collections.defaultdict(dict), {}
    for (dev, kind, cg), v in logged.items():
        amount[dev][cg] = amount[dev].get(cg, 0) + v
        units[dev] = kind
    for (dev, cg), v in stall_s.items():
        amount[dev].setdefault(cg, 0)
    out = {}
    for dev, ws in amount.items():
        total = sum(ws.values())
        order = sorted(ws, key=lambda cg: (cg == "other", -ws[cg], -stall_s.get((dev, cg), 0.0), cg))
        keep = order if n is None or len(order) <= n else order[:max(n - 1, 0)]
        rows = [(cg, ws[cg], stall_s.get((dev, cg), 0.0)) for cg in keep]
        rest = order[len(keep):]
        if rest:
            rows.append(("other", sum(ws[cg] for cg in rest), sum(stall_s.get((dev, cg), 0.0) for cg in rest)))
        out[dev] = [{"cgroup": cg, "logged": v, "unit": units.get(dev, "blocks"),
                     "share": v / total if total else 0.0, "stall_s": st} for cg, v, st in rows]
    return out


@dataclasses.dataclass
class MonitorOptions:
    """What to monitor. ``min_ms``: operations at or above it are streamed (kept for captures
    and recent calls); ``stall_ms``: a stall for the stall counters; ``before_s``/``after_s``:
    a capture's window around its trigger; ``top_writers``: the writers (cgroups) per journal
    and interval counted under their own name, the rest as "other"; ``flight_bytes``: the flight buffer's bound (0: no
    flight buffer, for a monitor that writes no captures); ``bpf_stats_duty``: the share of
    time BPF run-time statistics are on (bpfstats.Sampler: 1 always, 0 never); ``freeze_heap``:
    gc.freeze() after start-up (a long-running monitor process)."""

    devices: list = dataclasses.field(default_factory=list)
    syscalls: bool = False
    min_ms: float = 1.0
    stall_ms: float = 10.0
    offcpu_min_us: int = 100
    before_s: float = 10.0
    after_s: float = 5.0
    flight_bytes: int = 128 << 20
    bpf_stats_duty: float = 0.1
    freeze_heap: bool = True
    top_writers: int = 5


class JournalState:
    """Running totals of one journal (device ``dev``, 'MAJ:MIN')."""

    def __init__(self, dev):
        self.dev = dev
        self.fill = None                     # latest fill sample: dict of the jstall_fill fields
        self.fill_ts_ns = 0
        self.lows = {}                       # second: the lowest headroom ratio sampled in it
        self.transactions = 0
        self.blocks = 0
        self.blocks_logged = 0
        self.phase_counts = {p: np.zeros(len(PHASE_BUCKETS_S), dtype=np.int64) for p in PHASES}
        self.phase_sum_s = dict.fromkeys(PHASES, 0.0)
        self.checkpoints = {"forced": 0, "background": 0}
        self.checkpoint_written = {"forced": 0, "background": 0}
        # forced checkpoints that ran in an operation at or above the stall threshold (the
        # analyzer's "in stalls"; the rest of the forced ones cost less: negligible)
        self.checkpoints_in_stalls = 0

    def space(self, now_ns=None):
        """(size, free, log space left, headroom blocks, headroom ratio 0-1, its low, max
        transaction blocks) from the latest fill sample, or None before the first one.

        Headroom is the log space left above the forced-checkpoint condition
        (add_transaction_credits waits when jbd2_log_space_left() < j_max_transaction_buffers);
        the ratio is headroom over its value in an empty journal; its low, the lowest ratio of
        the fill samples in the HEADROOM_LOW_WINDOW_S before ``now_ns`` (and the latest)."""
        f = self.fill
        if not f:
            return None
        log_blocks = f["last_block"] - f["first_block"]
        left = jbd2.space_left(f["free_blocks"], f["committing_credits"])
        headroom = left - f["max_transaction_blocks"]
        ratio = jbd2.headroom_ratio(left, f["max_transaction_blocks"], log_blocks)
        since = (time.monotonic_ns() if now_ns is None else now_ns) // 1_000_000_000 - HEADROOM_LOW_WINDOW_S
        low = min([ratio] + [r for sec, r in self.lows.items() if sec >= since])
        return {"size_blocks": f["journal_blocks"], "free_blocks": f["free_blocks"], "log_blocks": log_blocks,
                "log_space_left_blocks": left, "headroom_blocks": headroom, "headroom_ratio": ratio,
                "headroom_low_ratio": low, "max_transaction_blocks": f["max_transaction_blocks"]}

    def add_fill(self, rows):
        """Fill samples of this journal (a record array of jstall_fill fields and ts_ns): the
        latest becomes its fill, and each second's lowest headroom ratio is kept for the
        window."""
        last = rows[np.argmax(rows["ts_ns"])]
        if int(last["ts_ns"]) >= self.fill_ts_ns:
            self.fill_ts_ns = int(last["ts_ns"])
            self.fill = {k: int(last[k]) for k in ("free_blocks", "first_block", "last_block", "journal_blocks",
                                                   "max_transaction_blocks", "committing_credits")}
        mtb = rows["max_transaction_blocks"].astype(np.int64)
        ratio = jbd2.headroom_ratio(jbd2.space_left(rows["free_blocks"].astype(np.int64), rows["committing_credits"]),
                                    mtb, rows["last_block"].astype(np.int64) - rows["first_block"])
        secs = rows["ts_ns"].astype(np.int64) // 1_000_000_000
        for sec in np.unique(secs).tolist():
            self.lows[sec] = min(float(ratio[secs == sec].min()), self.lows.get(sec, 1.0))
        newest = max(self.lows)
        self.lows = {sec: r for sec, r in self.lows.items() if sec >= newest - HEADROOM_LOW_WINDOW_S}


class XfsLogState:
    """Running totals of one XFS log's log-space waits (device ``dev``): per grant head, a
    histogram of the waits (first xfs_log_grant_sleep to the reservation's exit) over
    PHASE_BUCKETS_S and their seconds; the seconds by what the tail waited for
    (jstall.xfs.tail_reason); the sleeps (the kernel's xs_sleep_logspace counts each)."""

    def __init__(self, dev):
        self.dev = dev
        self.wait_counts = {h: np.zeros(len(PHASE_BUCKETS_S), dtype=np.int64) for h in xfs.HEADS}
        self.wait_sum_s = dict.fromkeys(xfs.HEADS, 0.0)
        self.tail_s = dict.fromkeys(xfs.TAIL_REASONS, 0.0)
        self.sleeps = 0

    def add(self, head, seconds, tail, sleeps):
        self.wait_counts[head][int(np.searchsorted(PHASE_BUCKETS_S, seconds))] += 1
        self.wait_sum_s[head] += seconds
        self.tail_s[tail] += seconds
        self.sleeps += sleeps


class MonitorProbes(ProbeSet):
    """jstall's probes in monitor mode: monitor.bpf.c, the monitor's operations (handle
    waits, fsyncs) and XFS log-space waits, or with ``syscalls`` exactly record's
    (recorder.bpf.c); no sched_waking (the monitor's stalls are classified as they end), no
    blocks going home, no files' attributes (what a recording's advice reads)."""

    wait_chains = False
    home_writes = False
    xattr_files = False

    def __init__(self, options):
        self.mopts = options
        # (its fs-level operations trace no syscall: no attach mode to settle for them)
        super().__init__(ProbeOptions(devices=list(options.devices), min_ms=options.min_ms,
                                      offcpu_min_us=options.offcpu_min_us, quiet=True,
                                      **({} if options.syscalls else {"attach": "syscalls"})))

    @property
    def source(self):
        """The program compiled: the monitor's, or with --syscalls the recorder's."""
        return BPF_SOURCE if self.mopts.syscalls else MONITOR_BPF_SOURCE

    @property
    def handle_waits(self):
        """Handle waits as the recorder records them: with --syscalls (else the monitor's own
        operations time every handle wait)."""
        return self.mopts.syscalls

    def _call_slot_rows(self):
        """The operations' call_slots rows (monitor.bpf.c: OP_ROW), or the syscalls'."""
        if self.mopts.syscalls:
            return super()._call_slot_rows()
        return {OPS["OP_JOURNAL_START"]: 0, OPS["OP_SYNC_FILE"]: 1}

    def _attach(self, b):
        if self.mopts.syscalls:
            return super()._attach(b)
        extra = [(cat, n, n) for cat, n in list(MONITOR_RAW_TRACEPOINTS) + [("sched", "sched_switch")]]
        for cat, tp, prog in self._tracepoints() + extra:
            if cat == "sched" or host.tracepoint_exists(cat, tp):
                # a handle start begins the monitor's handle wait in a program of its own
                if prog in EXT4_RAW_TRACEPOINTS:
                    b.attach_raw_tracepoint(tp=tp.encode(), fn_name=f"mon_{prog}".encode())
                elif not (prog in BTF_TRACEPOINTS and self._attach_btf(b, prog, tp)):
                    b.attach_raw_tracepoint(tp=tp.encode(), fn_name=f"rtp_{prog}".encode())
                self.attached.append(f"raw:{cat}:{tp}")
            else:
                self.missing.append(f"raw:{cat}:{tp}")
        self._attach_writers(b)
        self._note_xfs()


class Tracer:
    """MonitorProbes streamed into live totals.

        t = Tracer(MonitorOptions(devices=["/mnt/x"])).start()
        t.journal_states(), t.stalls, t.recent_calls(), t.call_stats()
        t.stop()
    """

    def __init__(self, options):
        self.mopts = options
        self.probes = MonitorProbes(options)
        self.journals, self.devices = self.probes.journals, self.probes.devices
        self.op_names = dict(self.probes.syscall_names)
        self.op_names.update(OP_NAMES)
        self.bpf = None
        self._stop = threading.Event()
        self._thread = None
        self.state_lock = threading.Lock()
        self.states = {}                                  # dev -> JournalState
        self.xfs_states = {}                              # dev -> XfsLogState
        self.stalls = collections.Counter()               # (dev, op, cause) -> stalled operations
        self.stall_seconds = collections.Counter()        # (dev, cause) -> off-CPU seconds inside stalls
        self.cgroup_stall_seconds = collections.Counter() # (dev, cgroup name) -> the same, by the task's cgroup
        self._stalled_cgroups = collections.Counter()     # (dev, cgroup id) -> seconds since the last read
        self.recent = collections.deque(maxlen=RECENT_CALLS)
        self.flight = collections.deque()                 # (poll monotonic ns, {kind: records}, records, bytes)
        self.flight_bytes = 0
        self.flight_dropped = 0
        self._batch = []
        self._pending_calls = None                        # call_event records of the last poll
        self._stalls_waiting = []                         # (call_event record, off-CPU rows) to classify
        self._stack_causes = {}                           # stack_id -> (cause, label) or None
        self._offcpu = {}                                 # (tid, call_ts_ns) -> [offcpu rows]
        self._own_checkpoints = collections.deque()       # (tid, ts_ns) of checkpoints in user tasks
        self._frames = {}                                 # stack_id -> frames
        self.listeners = []                               # f(stall dict) for each classified stall
        self.tick_listeners = []                          # f() after each poll
        self.stats = None                                 # bpfstats.Sampler while attached
        self._last_prune_ns = 0
        self.last_lost = {}
        self.logged = collections.Counter()               # (dev, kind, cgroup name) -> blocks or bytes
        self._committed = set()                           # (dev, transaction) committed since the last read
        self._cgroup_names = {}                           # cgroup id -> name
        self._writers_read_ns = 0

    def start(self):
        """Open the probes; stream in a background thread. Returns self."""
        self.hz, self.hz_source = host.kernel_hz()
        b = self.bpf = self.probes.open(self._on_event).bpf
        self.stats = bpfstats.Sampler(b, self.mopts.bpf_stats_duty)
        # the kernel symbol table, loaded now rather than at the first stall (bcc reads
        # /proc/kallsyms once: about 0.4 s and 27 MiB, which would otherwise land mid-run)
        addr = b.ksymname(b"schedule")
        if addr and addr != -1:
            b.ksym(addr)
        causes.classify_stack(["schedule"])   # likewise the pandas paths of the first stall (about 10 MiB)
        if self.mopts.freeze_heap:
            # the objects alive after start-up (modules, the compiled probes) leave the
            # cyclic collector's view: its full collections over them took 60-140 ms with
            # the GIL held, delaying scrapes and costing the monitor about 2% of a CPU
            gc.collect()
            gc.freeze()
        self.start_monotonic_ns = time.monotonic_ns()
        self._thread = threading.Thread(target=self._poll, name="jstall-monitor-poll", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """Detach every probe and free the maps (idempotent)."""
        self._stop.set()
        if self._thread:
            self._thread.join()
            self._thread = None
        if self.bpf is not None:
            self.last_lost = self.events_lost()
            if self.stats is not None:
                self.stats.close()
            self.probes.close()
            self.bpf = None

    # ---- streaming ------------------------------------------------------------------------

    def _on_event(self, ctx, data, size):
        # per record only a copy out of the ring; everything else is done per poll
        self._batch.append(ctypes.string_at(data, size))

    def _poll(self):
        """Read the ring buffers every POLL_S and process what came (records wake nobody:
        rb_flags in common.bpf.h; a forced wake-up finds no one waiting here)."""
        next_ns = time.monotonic_ns()
        while not self._stop.is_set():
            next_ns += int(POLL_S * 1e9)
            self._stop.wait(max(0.0, (next_ns - time.monotonic_ns()) / 1e9))
            if self._stop.is_set():
                break
            self.bpf.ring_buffer_consume()
            self._process()
            self.stats.tick()
            for f in self.tick_listeners:
                f()
            next_ns = max(next_ns, time.monotonic_ns() - int(POLL_S * 1e9))
        self.bpf.ring_buffer_consume()
        self._process()
        self._process()  # the calls of the last poll, with their off-CPU rows

    def _keep_flight(self, now_ns, blobs, nrecords, nbytes):
        """Add one poll's records ({kind: joined records}) to the flight buffer and drop
        what is older than a capture can need, or over its bound (counted)."""
        keep_ns = int((self.mopts.before_s + self.mopts.after_s + 2) * 1e9)
        with self.state_lock:
            if nrecords:
                self.flight.append((now_ns, blobs, nrecords, nbytes))
                self.flight_bytes += nbytes
            while self.flight and (self.flight[0][0] < now_ns - keep_ns or self.flight_bytes > self.mopts.flight_bytes):
                _t, _b, n, size = self.flight.popleft()
                if _t >= now_ns - keep_ns:
                    self.flight_dropped += n
                self.flight_bytes -= size

    def flight_window(self, start_ns, end_ns):
        """{kind: [joined records, ...]} of the records that arrived in [start_ns, end_ns]
        (monotonic; a record's arrival is the poll that read it, at most POLL_S late)."""
        out = collections.defaultdict(list)
        with self.state_lock:
            for t, blobs, _n, _size in self.flight:
                if start_ns <= t <= end_ns:
                    for k, blob in blobs.items():
                        out[k].append(blob)
        return out

    def _process(self):
        batch, self._batch = self._batch, []
        now = time.monotonic_ns()
        by_kind = collections.defaultdict(list)
        for raw in batch:
            by_kind[raw[0]].append(raw)
        blobs = {k: b"".join(v) for k, v in by_kind.items()}
        if self.mopts.flight_bytes:   # no flight buffer: a monitor that writes no captures
            self._keep_flight(now, blobs, len(batch), sum(len(v) for v in blobs.values()))
        a = {events.KIND_STRUCTS[k]: events.decode(events.KIND_STRUCTS[k], [v]) for k, v in blobs.items()}
        with self.state_lock:
            for struct in ("jbd2_event", "log_tail_event", "fill_event"):
                if struct in a:
                    self._update_fill(a[struct])
            if "jbd2_event" in a:
                self._count_checkpoints(a["jbd2_event"])
            if "run_stats_event" in a:
                self._count_commits(a["run_stats_event"])
                r = a["run_stats_event"]
                self._committed.update((filesystems.dev_name(int(d)), int(t))
                                       for d, t in zip(r["dev"].tolist(), r["transaction"].tolist()))
        if now - self._writers_read_ns >= WRITERS_EVERY_NS:
            self._writers_read_ns = now
            self._count_writers(self.probes.writers_since(self._committed))
            self._committed = set()
            self._count_stalled_cgroups()
            if "checkpoint_stats_event" in a:
                self._count_checkpoint_blocks(a["checkpoint_stats_event"])
        if "xfs_wait_event" in a:
            self._xfs_waits(a["xfs_wait_event"])
        if "offcpu_event" in a:
            r = a["offcpu_event"]
            offcpu = self._offcpu
            for tid, call_ts, ts, off, sid, state in zip(r["tid"].tolist(), r["call_ts_ns"].tolist(),
                                                         r["ts_ns"].tolist(), r["offcpu_ns"].tolist(),
                                                         r["stack_id"].tolist(), r["state"].tolist()):
                offcpu.setdefault((tid, call_ts), []).append((ts, off, sid, state == 0))
        # operations of the previous poll: their off-CPU rows (emitted before the operation
        # ended, on another ring buffer) have all been read by now
        ready, self._pending_calls = self._pending_calls, a.get("call_event")
        if ready is not None:
            self._gather(ready)
        if self._stalls_waiting:
            self._classify()
        cutoff = now - OFFCPU_KEEP_NS
        if self._offcpu and now - self._last_prune_ns > 5_000_000_000:
            self._offcpu = {k: v for k, v in self._offcpu.items() if k[1] >= cutoff}
            self._last_prune_ns = now
        while self._own_checkpoints and self._own_checkpoints[0][1] < cutoff:
            self._own_checkpoints.popleft()

    def _name_cgroups(self, ids):
        """Name the cgroup ids not named yet (cgroups.name_of of their paths)."""
        new = set(ids) - set(self._cgroup_names)
        if new:
            paths = cgroups.paths_of(new)
            self._cgroup_names.update({i: cgroups.name_of(paths.get(str(i)))["name"] for i in new})

    def _count_writers(self, rows):
        """Add what the writers put into the journals since the last read (ProbeSet.writers_since
        rows) to ``logged``, by cgroup name, the top_writers per journal and the rest as other."""
        self._name_cgroups(k[2] for k in rows)
        amounts = collections.Counter()
        for (_, dev, cg, tx), v in rows.items():
            kind = "bytes" if tx is None else "blocks"
            amounts[(dev, kind, self._cgroup_names.get(cg, str(cg)))] += v[3] if tx is None else v[2]
        with self.state_lock:
            self.logged.update(top_writers(amounts, self.mopts.top_writers))

    def _count_stalled_cgroups(self):
        """Add the stall seconds of each cgroup since the last read to ``cgroup_stall_seconds``,
        by name, the top_writers per journal (here: those that stalled most) and the rest as
        other."""
        with self.state_lock:
            pending, self._stalled_cgroups = self._stalled_cgroups, collections.Counter()
        if not pending:
            return
        self._name_cgroups(cg for _dev, cg in pending)
        amounts = collections.Counter()
        for (dev, cg), v in pending.items():
            amounts[(dev, "stall_s", self._cgroup_names.get(cg, str(cg)))] += v
        with self.state_lock:
            self.cgroup_stall_seconds.update({(dev, cg): v for (dev, _k, cg), v in
                                              top_writers(amounts, self.mopts.top_writers).items()})

    def _state(self, dev):
        s = self.states.get(dev)
        if s is None:
            s = self.states[dev] = JournalState(dev)
        return s

    def _update_fill(self, a):
        known = a[a["has_journal"] != 0]
        for kdev in np.unique(known["dev"]):
            self._state(filesystems.dev_name(int(kdev))).add_fill(known[known["dev"] == kdev])

    def _count_checkpoints(self, j):
        cp = j[j["event"] == events.ENUMS["jstall_jbd2_event"]["JBD2_CHECKPOINT"]]
        for r in cp:
            forced = not bytes(r["comm"]).startswith(b"jbd2/")
            self._state(filesystems.dev_name(int(r["dev"]))).checkpoints["forced" if forced else "background"] += 1
            if forced:
                self._own_checkpoints.append((int(r["tid"]), int(r["ts_ns"])))

    def _count_commits(self, rs):
        for r in rs:
            s = self._state(filesystems.dev_name(int(r["dev"])))
            s.transactions += 1
            s.blocks += int(r["blocks"])
            s.blocks_logged += int(r["blocks_logged"])
            if self.hz:
                for p in PHASES:
                    secs = int(r[f"{p}_jiffies"]) / self.hz
                    s.phase_counts[p][int(np.searchsorted(PHASE_BUCKETS_S, secs))] += 1
                    s.phase_sum_s[p] += secs

    def _count_checkpoint_blocks(self, cs):
        for r in cs:
            mode = "background" if bytes(r["comm"]).startswith(b"jbd2/") else "forced"
            self._state(filesystems.dev_name(int(r["dev"]))).checkpoint_written[mode] += int(r["written"])

    def _xfs_waits(self, w):
        """Count XFS log-space waits (xfs_wait_event records) per log. Without --syscalls a
        wait at or above the stall threshold is itself a stalled operation (``xfs_log_reserve``
        or ``xfs_log_regrant``, cause log_space); with it, the traced call it was in is."""
        stall_ns = int(self.mopts.stall_ms * 1e6)
        out = []
        with self.state_lock:
            for r in w:
                dev = filesystems.dev_name(int(r["dev"]))
                head = events.XFS_HEADS.get(int(r["head"]), xfs.RESERVE_HEAD)
                ns = int(r["end_ns"]) - int(r["ts_ns"])
                tail = xfs.tail_reason(int(r["ail_pushes"]) + int(r["ail_flushing"]), int(r["ail_pinned"]),
                                       int(r["ail_locked"]), int(r["log_writes"]))
                s = self.xfs_states.get(dev)
                if s is None:
                    s = self.xfs_states[dev] = XfsLogState(dev)
                s.add(head, ns / 1e9, tail, int(r["sleeps"]))
                if self.mopts.syscalls or ns < stall_ns:
                    continue
                op = "xfs_log_reserve" if head == xfs.RESERVE_HEAD else "xfs_log_regrant"
                out.append(self._stalled(r, dev, op, int(r["ts_ns"]), ns, "log_space",
                                         "tail waited for " + xfs.TAIL_REASONS[tail].split(" (")[0],
                                         {"log_space": ns / 1e9}))
        self._tell(out)

    def _stalled(self, r, dev, op, ts_ns, latency_ns, cause, label, seconds):
        """One stalled operation of the task in record ``r`` (its pid, tid and comm): counted
        by its primary cause, its off-CPU seconds by cause ({cause: s}) added, kept among the
        recent ones. Returns what the listeners are told. Call it with state_lock held."""
        call = {"ts_ns": ts_ns, "latency_s": latency_ns / 1e9, "dev": dev, "op": op,
                "pid": int(r["pid"]), "tid": int(r["tid"]), "comm": bytes(r["comm"]).decode(errors="replace"),
                "cause": cause, "label": label, "offcpu_s": seconds,
                "wall": time.time() - (time.monotonic_ns() - ts_ns - latency_ns) / 1e9}
        self.stalls[(dev, op, cause)] += 1
        for k, v in seconds.items():
            self.stall_seconds[(dev, k)] += v
        self._stalled_cgroups[(dev, int(r["cgroup_id"]))] += sum(seconds.values())
        self.recent.append(call)
        return call

    def _tell(self, calls):
        """Each listener, of each stalled operation (outside state_lock)."""
        for call in calls:
            for f in self.listeners:
                f(call)

    # ---- stalls: causes with the analyzer's own taxonomy -----------------------------------

    def _stack_frames(self, stack_id):
        if stack_id not in self._frames:
            self._frames[stack_id] = self.probes.stack_frames(stack_id)
        return self._frames[stack_id]

    def _gather(self, calls):
        """Take the off-CPU rows of finished operations (a record array of call_event); keep
        the stalls among them, with their rows, for classification."""
        stall_ns = int(self.mopts.stall_ms * 1e6)
        offcpu = self._offcpu
        for i, (tid, ts, lat) in enumerate(zip(calls["tid"].tolist(), calls["ts_ns"].tolist(),
                                                calls["latency_ns"].tolist())):
            rows = offcpu.pop((tid, ts), ())
            if lat >= stall_ns:
                self._stalls_waiting.append((calls[i], rows))

    def _stack_cause(self, sid):
        """(cause, label) of a stack by the analyzer's stack_causes, once per stack id (the
        stack table never reuses an id: no BPF_F_REUSE_STACKID), or None without frames."""
        if sid not in self._stack_causes:
            frames = self._stack_frames(sid)
            if frames is None:
                self._stack_causes[sid] = None
            else:
                import pandas as pd

                r = causes.stack_causes(pd.DataFrame({"stack_id": pd.Series([sid], dtype="int32"), "frames": [frames]}))
                self._stack_causes[sid] = (r["cause"].iloc[0], r["label"].iloc[0])
        return self._stack_causes[sid]

    def _classify(self):
        """Give each stall waiting its primary cause, count it and tell the listeners."""
        calls, self._stalls_waiting = self._stalls_waiting, []
        out = []
        for c, rows in calls:
            tid, ts, lat = int(c["tid"]), int(c["ts_ns"]), int(c["latency_ns"])
            n_own = sum(1 for t, cts in self._own_checkpoints if t == tid and ts <= cts <= ts + lat)
            own = n_own > 0
            cause, label, seconds = causes.primary_cause([(off, runnable, None if sid < 0 else self._stack_cause(sid))
                                                   for _ts, off, sid, runnable in rows], own)
            dev = filesystems.dev_name(int(c["dev"])) if c["dev"] else "-"
            op = self.op_names.get(int(c["syscall_nr"]), f"nr{int(c['syscall_nr'])}")
            with self.state_lock:
                out.append(self._stalled(c, dev, op, ts, lat, cause, label, seconds))
                if n_own and dev != "-":
                    self._state(dev).checkpoints_in_stalls += n_own
        self._tell(out)

    # ---- reading the live state (scrape and top threads) -----------------------------------

    def call_stats(self):
        """{(op name, dev): (count, errors, total_ns, max_ns, buckets int64[HIST_BUCKETS])},
        summed over CPUs; bucket i counts latencies in [2^i, 2^(i+1)) ns."""
        return {(self.op_names.get(nr, f"nr{nr}"), filesystems.dev_name(dev) if dev else "-"): v
                for (nr, dev), v in self.raw_call_stats().items()}

    def raw_call_stats(self):
        """{(syscall_nr or op, kernel dev): (count, errors, total_ns, max_ns, buckets)} for
        captures, summed over CPUs (tables.call_counters)."""
        return {} if self.bpf is None else tables.call_counters(self.bpf, self.probes.call_slots)

    def events_lost(self):
        """{'calls', 'offcpu', 'jbd2', 'stacks'}: records the kernel could not hand over."""
        return {} if self.bpf is None else self.probes.lost()

    def bpf_run(self):
        """{program: (run seconds, runs)}: the run time of the monitor's BPF programs so far,
        estimated from the statistics windows (bpfstats.Sampler), or {} with none."""
        if self.bpf is None or self.stats is None:
            return {}
        return self.stats.totals()

    @staticmethod
    def cpu_seconds():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    def snapshot(self):
        """The state ``jstall top`` shows, as plain JSON-ready data."""
        with self.state_lock:
            js = {}
            for dev, s in self.states.items():
                j = {"transactions": s.transactions, "blocks_logged": s.blocks_logged,
                     "checkpoints": dict(s.checkpoints), "checkpoint_written": dict(s.checkpoint_written)}
                j.update(s.space() or {})
                js[dev] = j
            xs = {dev: {"waits": int(sum(c.sum() for c in x.wait_counts.values())),
                        "wait_s": sum(x.wait_sum_s.values()), "sleeps": x.sleeps}
                  for dev, x in self.xfs_states.items()}
            recent = list(self.recent)
            writers = journal_writers(dict(self.logged), dict(self.cgroup_stall_seconds), self.mopts.top_writers + 1)
        mounts = filesystems.ext4_mounts()
        for dev, j in js.items():
            j["mountpoint"] = mounts.get(dev, {}).get("mountpoint")
        # XFS logs: the probes' waits, and the space left as the kernel's log/* files say now
        for dev, j in self.journals.items():
            if not kinds.is_xfs(j):
                continue
            x = xs.setdefault(dev, {"waits": 0, "wait_s": 0.0, "sleeps": 0})
            x.update(mountpoint=j.get("mountpoint"), log_bytes=j.get("log_bytes"), headroom_ratio=None)
            state = xfs.read_log_state(j["xfs_name"])
            if state and j.get("log_bytes") and xfs.log_state_kind(state):
                x["headroom_ratio"] = xfs.log_state_space_left(state, j["log_bytes"]) / j["log_bytes"]
        return {"time": time.time(), "journals": js, "xfs_logs": xs, "recent": recent, "writers": writers,
                "events_lost": self.events_lost()}
