"""Stall-triggered captures (a flight recorder): when an operation of ``trigger_ms`` or more
completes, the tracer's flight buffer is written, ``after_s`` seconds later, as a session
directory covering [trigger - before_s, trigger + after_s] in the format of ``jstall record``
(docs/session-format.md), so ``jstall analyze`` and ``jstall report`` read it.

Layout: ``DIR/host=<host>/date=<YYYY-MM-DD>/capture-<MAJ>-<MIN>-<YYYYmmddTHHMMSSZ>`` (the
collected-sessions layout; ``.1``, ``.2``... follow for more captures in the same second). A
capture is written under a ``.partial`` name and renamed when complete. Captures are
rate-limited (one at a time, at least ``min_interval_s`` apart), the oldest are removed beyond
``max_captures`` or ``max_disk`` bytes, and every outcome is counted.
"""

import collections
import datetime
import errno
import os
import shutil
import socket
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from jstall import devstats
from jstall.probes import events
from jstall.probes.session_metadata import clock_at, session_doc
from jstall.probes import tables as rec
from jstall.session import collected_path, table_path, write_metadata

PARTIAL = ".partial"


def capture_name(host, dev, wall):
    """(relative directory, name) of a capture of ``dev`` ('MAJ:MIN') triggered at ``wall``
    (a UTC datetime): the collected-sessions layout ``host=HOST/date=YYYY-MM-DD``."""
    name = f"capture-{dev.replace(':', '-')}-{wall:%Y%m%dT%H%M%S}Z"
    return os.path.dirname(collected_path("", host, wall, name)), name


def list_captures(root):
    """Finished capture directories under ``root``, oldest first."""
    out = []
    for dirpath, dirnames, _files in os.walk(root):
        for d in list(dirnames):
            if d.startswith("capture-") and not d.endswith(PARTIAL):
                p = os.path.join(dirpath, d)
                if os.path.exists(os.path.join(p, "metadata.json")):
                    out.append(p)
                dirnames.remove(d)
    return sorted(out, key=_capture_order)


def _capture_order(path):
    """A capture's place in time: its trigger second, then its ``.N`` within that second."""
    stamp, _, n = os.path.basename(path).rsplit("-", 1)[-1].partition(".")
    return stamp, int(n) if n.isdigit() else 0, path


def _free_name(parent, name):
    """``name``, or for a further capture in the same second ``name.N`` past every N in use
    under ``parent`` (finished or partial): never a lower N freed by rotation, which would
    sort before the captures it follows."""
    used = []
    for d in os.listdir(parent) if os.path.isdir(parent) else ():
        d = d.removesuffix(PARTIAL)
        if d == name:
            used.append(0)
        elif d.startswith(name + ".") and d[len(name) + 1:].isdigit():
            used.append(int(d[len(name) + 1:]))
    return f"{name}.{max(used) + 1}" if used else name


def dir_bytes(path):
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_blocks * 512
            except OSError:
                pass
    return total


class Captures:
    """Watches the tracer's stalls and writes captures."""

    def __init__(self, tracer, directory, trigger_ms=100.0, max_captures=10, max_disk=1 << 30,
                 min_interval_s=60.0, console=None):
        self.tracer = tracer
        self.dir = directory
        self.trigger_ms = trigger_ms
        self.max_captures = max_captures
        self.max_disk = max_disk
        self.min_interval_s = min_interval_s
        self.console = console
        self.counts = collections.Counter({"written": 0, "rate_limited": 0, "rotated": 0, "failed": 0})
        self.pending = None               # the capture being gathered: dict
        self.last_trigger = None
        self.writing = None               # the writer thread
        self.written = []                 # paths written by this monitor
        self.host = socket.gethostname()
        os.makedirs(directory, exist_ok=True)
        self.disk_bytes = sum(dir_bytes(p) for p in list_captures(directory))
        self._lock = threading.Lock()
        self._base_stats = collections.deque()    # (monotonic ns, raw call stats) once a second
        # (devices, snapshot) of the block devices under the journals, once a second: a
        # capture's device_stats table
        self._dev_snaps = collections.deque()
        tracer.listeners.append(self.on_stall)
        tracer.tick_listeners.append(self.on_tick)

    def on_stall(self, call):
        if call["latency_s"] * 1e3 < self.trigger_ms:
            return
        now = time.monotonic_ns()
        with self._lock:
            busy = self.pending is not None or (self.writing is not None and self.writing.is_alive())
            recent = self.last_trigger is not None and now - self.last_trigger < self.min_interval_s * 1e9
            if busy or recent:
                self.counts["rate_limited"] += 1
                return
            self.last_trigger = now
            start = call["ts_ns"] - int(self.tracer.mopts.before_s * 1e9)
            self.pending = {"trigger": call, "start_ns": start, "end_ns": now + int(self.tracer.mopts.after_s * 1e9),
                            "wall": datetime.datetime.now(datetime.timezone.utc),
                            "stats_start": self._stats_at(start)}

    def _stats_at(self, t_ns):
        """The call statistics snapshot nearest before t_ns (the oldest one if none)."""
        best = None
        for t, s in self._base_stats:
            if t <= t_ns or best is None:
                best = s
        return best or {}

    def on_tick(self):
        now = time.monotonic_ns()
        if not self._base_stats or now - self._base_stats[-1][0] >= 1e9:
            self._base_stats.append((now, self.tracer.raw_call_stats()))
            keep = (self.tracer.mopts.before_s + 2) * 1e9
            while len(self._base_stats) > 2 and self._base_stats[1][0] < now - keep:
                self._base_stats.popleft()
            self._sample_devices(now)
        with self._lock:
            p = self.pending
            if p is None or now < p["end_ns"]:
                return
            self.pending = None
        p["records"] = self.tracer.flight_window(p["start_ns"], now)
        p["stats_end"] = self.tracer.raw_call_stats()
        p["devices"] = self._device_rows(p["start_ns"], now)
        p["frames"] = {}
        self.writing = threading.Thread(target=self._write, args=(p,), name="jstall-capture")
        self.writing.start()

    def _sample_devices(self, now):
        """A snapshot of the devices under the traced journals (those mounted since included),
        kept for the longest window a capture covers."""
        try:
            devs = devstats.devices_under(self.tracer.journals.values())
            self._dev_snaps.append((devs, devstats.snapshot(devs)))
        except OSError:  # a device gone between listing and reading: the next tick has it
            return
        keep = (self.tracer.mopts.before_s + self.tracer.mopts.after_s + 3) * 1e9
        while len(self._dev_snaps) > 2 and next(iter(self._dev_snaps[1][1].values()), (now,))[0] < now - keep:
            self._dev_snaps.popleft()

    def _device_rows(self, start_ns, end_ns):
        """device_stats columns of the intervals ending in [start_ns, end_ns + 1 s]."""
        rows = devstats.empty_rows()
        snaps = list(self._dev_snaps)
        for (_, before), (devs, after) in zip(snaps, snaps[1:]):
            t = next(iter(after.values()), (0,))[0]
            if start_ns <= t <= end_ns + 1_000_000_000:
                devstats.add_rows(rows, devs, before, after)
        return rows

    def finish(self, timeout=None):
        """On shutdown: write the capture being gathered now (its window cut short) and wait
        for the writer."""
        with self._lock:
            p, self.pending = self.pending, None
        if p is not None and self.tracer.bpf is not None:
            p["records"] = self.tracer.flight_window(p["start_ns"], time.monotonic_ns())
            p["stats_end"] = self.tracer.raw_call_stats()
            p["devices"] = self._device_rows(p["start_ns"], time.monotonic_ns())
            p["cut_short"] = True
            self._write(p)
        if self.writing is not None:
            self.writing.join(timeout)

    # ---- writing ---------------------------------------------------------------------------

    def _write(self, p):
        trig = p["trigger"]
        sub, name = capture_name(self.host, trig["dev"], p["wall"])
        parent = os.path.join(self.dir, sub)
        final = os.path.join(parent, _free_name(parent, name))
        tmp = final + PARTIAL
        try:
            os.makedirs(tmp, exist_ok=True)
            self._write_session(tmp, p)
            os.replace(tmp, final)
        except Exception as e:  # a failed capture must not stop the monitor
            self.counts["failed"] += 1
            shutil.rmtree(tmp, ignore_errors=True)
            if self.console:
                why = os.strerror(e.errno) if isinstance(e, OSError) and e.errno else str(e)
                fix = ("; free space there or give another --capture-dir" if getattr(e, "errno", None) == errno.ENOSPC
                       else "")
                print(f"jstall monitor: capture failed: {final}: {why}{fix}; the monitor goes on",
                      file=self.console, flush=True)
            return
        self.counts["written"] += 1
        self.written.append(final)
        pa.default_memory_pool().release_unused()   # Arrow's pool keeps freed memory otherwise
        if self.console:
            print(f"jstall monitor: captured {trig['op']} of {trig['latency_s'] * 1e3:.0f} ms on {trig['dev']} "
                  f"({trig['cause']}) -> {final}", file=self.console, flush=True)
        self._rotate()

    def _rotate(self):
        caps = list_captures(self.dir)
        sizes = {c: dir_bytes(c) for c in caps}
        while caps and (len(caps) > self.max_captures or sum(sizes[c] for c in caps) > self.max_disk):
            old = caps.pop(0)
            shutil.rmtree(old, ignore_errors=True)
            self.counts["rotated"] += 1
        self.disk_bytes = sum(sizes[c] for c in caps)

    def _write_session(self, path, p):
        t = self.tracer
        by_kind = p["records"]          # {kind: [joined records, ...]} (Tracer.flight_window)
        a = {s: events.decode(s, by_kind.get(k, [])) for k, s in events.KIND_STRUCTS.items()}
        names = t.op_names
        tables = rec.streamed_tables(a, names, t.hz)
        ids = sorted({int(s) for s in a["offcpu_event"]["stack_id"] if s >= 0})
        tables["stacks"] = rec.stacks_table(t.bpf, ids)
        tables["call_histograms"], tables["call_totals"] = _histogram_tables(p["stats_start"], p["stats_end"], names)
        tables["device_stats"] = devstats.table(p.get("devices") or devstats.empty_rows())
        for n, table in tables.items():
            pq.write_table(table, table_path(path, n))
        jbd = a["jbd2_event"]
        is_cp = jbd["event"] == events.ENUMS["jstall_jbd2_event"]["JBD2_CHECKPOINT"]
        in_jbd2 = np.char.startswith(jbd["comm"], b"jbd2/")
        described = []
        for dev, j in t.journals.items():
            d = dict(j)
            s = t.states.get(dev)
            if s is not None and s.fill:
                d["max_transaction_blocks"] = s.fill["max_transaction_blocks"]
            described.append(d)
        end_ns = max(p["end_ns"] if not p.get("cut_short") else time.monotonic_ns(), p["start_ns"])
        metadata = session_doc(
            status="interrupted" if p.get("cut_short") else "complete", host=self.host,
            start=clock_at(p["start_ns"]), end=clock_at(end_ns),
            probes={"attached": t.probes.attached, "missing": t.probes.missing,
                    "syscalls": sorted(t.probes.syscall_numbers) if t.mopts.syscalls else sorted(OP_LIST),
                    "attach": getattr(t.probes, "attach_mode", None)},
            filters={"devices": t.devices, "pid": None, "cgroup": None, "cgroup_id": None, "command_tree": False},
            min_ms=t.mopts.min_ms, events_lost={k: v for k, v in t.events_lost().items() if k != "stacks"},
            stacks_lost=t.events_lost().get("stacks", 0), journals=described,
            hz=t.hz, hz_source=t.hz_source, stop_reason="interrupted" if p.get("cut_short") else None,
            offcpu_min_us=t.mopts.offcpu_min_us,
            traced_calls=list(OP_LIST) if not t.mopts.syscalls else sorted(t.probes.syscall_numbers),
            offcpu_without_stack=int(np.sum(a["offcpu_event"]["stack_id"] < 0)),
            rows={n: tables[n].num_rows for n in tables},
            capture={
                "trigger": {k: trig_v for k, trig_v in p["trigger"].items() if k not in ("offcpu_s",)},
                "trigger_ms": self.trigger_ms, "before_s": t.mopts.before_s, "after_s": t.mopts.after_s,
                "checkpoints": {"forced": int(np.sum(is_cp & ~in_jbd2)), "background": int(np.sum(is_cp & in_jbd2))},
                "flight_dropped": t.flight_dropped,
            },
        ).to_dict()
        write_metadata(path, metadata)


OP_LIST = ("journal_start", "sync_file")


def _histogram_tables(start, end, names):
    """call_histograms and call_totals of the operations between two statistics snapshots."""
    hist, tot = [], []
    for key, (count, errors, total_ns, max_ns, buckets) in sorted(end.items()):
        s = start.get(key)
        if s is not None:
            count, errors, total_ns, buckets = count - s[0], errors - s[1], total_ns - s[2], buckets - s[4]
        if count <= 0:
            continue
        nr, dev = key
        tot.append((nr, dev, count, errors, total_ns, max_ns))
        hist += [(nr, dev, i, int(n)) for i, n in enumerate(buckets) if n]
    return rec.counter_tables(hist, tot, names)
