"""What each emulated device served: /sys/block/<lower>/stat sampled by a thread.

    with DeviceSampler(fs, interval_s=1.0) as sampler:
        before = sampler.snapshot()
        ...
        used = served(before, sampler.snapshot())   # {role: {column: count}}
    sampler.rows                                     # the device_stats table, as columns

The lower loop device of a stacked emulated device (scratch.py) is where every request of the
filesystem, or of its external journal, is throttled and served, so its counters are what the
device actually did (Documentation/block/stat.rst). One row per device per interval, ending
at ``ts_ns`` (CLOCK_MONOTONIC, the session's clock); columns as schema.LAB_COLUMNS
["device_stats"] (docs/session-format.md).
"""

import threading
import time

from .loopdev import read_block_stat

#: device_stats column -> the /sys/block stat field it differences ('in_flight_requests' is
#: the value at the end of the interval, not a difference)
STAT_COLUMNS = {
    "read_ios": "read_ios", "read_merges": "read_merges", "read_sectors": "read_sectors",
    "write_ios": "write_ios", "write_merges": "write_merges", "write_sectors": "write_sectors",
    "flush_ios": "flush_ios", "busy_ms": "io_ticks_ms", "queue_ms": "time_in_queue_ms",
}
COLUMNS = ("ts_ns", "interval_ns", "dev", "role", "lower_dev", *STAT_COLUMNS, "in_flight_requests")


def served(before, after):
    """{role: {column: after - before}} of two snapshots (``in_flight_requests``: after's)."""
    out = {}
    for role, (ts1, st1) in after.items():
        ts0, st0 = before[role]
        d = {col: st1[f] - st0[f] for col, f in STAT_COLUMNS.items()}
        d["in_flight_requests"] = st1["in_flight"]
        d["seconds"] = (ts1 - ts0) / 1e9
        out[role] = d
    return out


class DeviceSampler:
    """Samples the lower device of every emulated device of a ScratchFs every ``interval_s``
    seconds in a daemon thread, from start() to stop() (a last, shorter interval included)."""

    def __init__(self, fs, interval_s=1.0):
        self.devices = fs.emulated_devices()  # [(role, dev, lower name, lower dev)]
        self.interval_s = interval_s
        self.rows = {c: [] for c in COLUMNS}
        self._last = None
        self._stop = threading.Event()
        self._thread = None
        self._lock = threading.Lock()

    def snapshot(self):
        """{role: (monotonic ns, stat dict)} now."""
        return {role: (time.monotonic_ns(), read_block_stat(name)) for role, _, name, _ in self.devices}

    def _sample(self):
        snap = self.snapshot()
        with self._lock:
            if self._last is not None:
                d = served(self._last, snap)
                for role, dev, _, lower in self.devices:
                    self.rows["ts_ns"].append(snap[role][0])
                    self.rows["interval_ns"].append(snap[role][0] - self._last[role][0])
                    self.rows["dev"].append(dev)
                    self.rows["role"].append(role)
                    self.rows["lower_dev"].append(lower)
                    for col in (*STAT_COLUMNS, "in_flight_requests"):
                        self.rows[col].append(int(d[role][col]))
            self._last = snap

    def start(self):
        self._sample()

        def loop():
            while not self._stop.wait(self.interval_s):
                self._sample()

        self._thread = threading.Thread(target=loop, name="jstall-devstats", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        if self._thread is None:
            return self.rows
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._sample()
        return self.rows

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False

    def table(self):
        """The rows as a pyarrow Table with the session schema."""
        import pyarrow as pa

        from jstall.schema import SCHEMAS

        return pa.table(self.rows, schema=SCHEMAS["device_stats"])

    def write(self, session_dir):
        """Write device_stats.parquet into a session directory (before its metadata.json)."""
        import pyarrow.parquet as pq

        from jstall.session import table_path

        pq.write_table(self.table(), table_path(session_dir, "device_stats"))

    def summary(self):
        """{role: {column: total}} over all rows (what each device served in the run)."""
        out = {}
        for i, role in enumerate(self.rows["role"]):
            d = out.setdefault(role, {c: 0 for c in STAT_COLUMNS})
            for c in STAT_COLUMNS:
                d[c] += self.rows[c][i]
        return out
