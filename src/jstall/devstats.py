"""What each block device under a session's filesystems served: /sys/dev/block/<dev>/stat
sampled by a thread.

    with DeviceSampler(devices_under(journals), interval_s=1.0) as sampler:
        before = sampler.snapshot()
        ...
        used = served(before, sampler.snapshot())   # {dev: {column: count}}
    sampler.rows                                     # the device_stats table, as columns

A device is (role, the filesystem-facing 'MAJ:MIN', the serving device's name, its 'MAJ:MIN'):
the serving device is the one whose counters say what the hardware did — the lower loop
device of the lab's stacked emulated device (where every request is throttled and served),
the block device a loop device reads, the one device under a device-mapper device, or the
device itself (Documentation/block/stat.rst). One row per device per interval, ending at
``ts_ns`` (CLOCK_MONOTONIC, the session's clock); columns as schema.LAB_COLUMNS
["device_stats"] (docs/session-format.md). The recorder samples the devices of the journals
it traces; the lab those of its emulated devices.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from jstall.session import table_path

if TYPE_CHECKING:
    import pyarrow as pa

#: /sys/block/<dev>/stat fields (Documentation/block/stat.rst), in order
BLOCK_STAT_FIELDS = ("read_ios", "read_merges", "read_sectors", "read_ticks_ms", "write_ios", "write_merges",
                     "write_sectors", "write_ticks_ms", "in_flight", "io_ticks_ms", "time_in_queue_ms",
                     "discard_ios", "discard_merges", "discard_sectors", "discard_ticks_ms", "flush_ios",
                     "flush_ticks_ms")


def read_block_stat(name: str) -> dict[str, int]:
    """{field: int} of /sys/block/<name>/stat, or of /sys/dev/block/<MAJ:MIN>/stat for a
    'MAJ:MIN' (missing trailing fields read 0)."""
    path = f"/sys/dev/block/{name}/stat" if ":" in name else f"/sys/block/{name}/stat"
    with open(path) as f:
        vals = [int(v) for v in f.read().split()]
    vals += [0] * (len(BLOCK_STAT_FIELDS) - len(vals))
    return dict(zip(BLOCK_STAT_FIELDS, vals))


def serving_device(dev: str) -> tuple[str, str]:
    """(name, 'MAJ:MIN') of the device that serves block device dev's requests: a loop
    device's backing block device, a device-mapper or md device's only slave, else itself."""
    sysdir = os.path.realpath(f"/sys/dev/block/{dev}")
    name = os.path.basename(sysdir)
    try:
        with open(os.path.join(sysdir, "loop", "backing_file")) as f:
            backing = f.read().strip()
        st = os.stat(backing)
        import stat

        if stat.S_ISBLK(st.st_mode):
            lower = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
            return os.path.basename(os.path.realpath(f"/sys/dev/block/{lower}")), lower
    except OSError:
        pass
    try:
        slaves = os.listdir(os.path.join(sysdir, "slaves"))
    except OSError:
        slaves = []
    if len(slaves) == 1:
        with open(os.path.join(sysdir, "slaves", slaves[0], "dev")) as f:
            return slaves[0], f.read().strip()
    return name, dev


def devices_under(journals: Iterable[dict]) -> list[tuple[str, str, str, str]]:
    """The DeviceSampler devices of journal descriptions (probes.filesystems.describe):
    each filesystem's ('data') and its external journal's ('journal'), once each."""
    out, seen = [], set()
    for j in journals:
        for role, dev in (("data", j.get("dev")), ("journal", j.get("journal_device"))):
            if not dev or ":" not in str(dev) or dev in seen or not os.path.exists(f"/sys/dev/block/{dev}/stat"):
                continue
            seen.add(dev)
            name, lower = serving_device(dev)
            out.append((role, dev, name, lower))
    return out

#: device_stats column -> the /sys/block stat field it differences ('in_flight_requests' is
#: the value at the end of the interval, not a difference)
STAT_COLUMNS = {
    "read_ios": "read_ios", "read_merges": "read_merges", "read_sectors": "read_sectors",
    "write_ios": "write_ios", "write_merges": "write_merges", "write_sectors": "write_sectors",
    "flush_ios": "flush_ios", "busy_ms": "io_ticks_ms", "queue_ms": "time_in_queue_ms",
}
COLUMNS = ("ts_ns", "interval_ns", "dev", "role", "lower_dev", *STAT_COLUMNS, "in_flight_requests")


def served(before: dict, after: dict) -> dict[str, dict[str, int]]:
    """{dev: {column: after - before}} of two snapshots (``in_flight_requests``: after's)."""
    out = {}
    for dev, (ts1, st1) in after.items():
        if dev not in before:  # a device added since
            continue
        ts0, st0 = before[dev]
        d = {col: st1[f] - st0[f] for col, f in STAT_COLUMNS.items()}
        d["in_flight_requests"] = st1["in_flight"]
        d["seconds"] = (ts1 - ts0) / 1e9
        out[dev] = d
    return out


def empty_rows() -> dict[str, list]:
    """device_stats columns with no rows: {column: []}."""
    return {c: [] for c in COLUMNS}


def add_rows(rows: dict[str, list], devices: list[tuple], before: dict, after: dict) -> None:
    """Append to ``rows`` (device_stats columns) one row per device of ``devices`` (as
    devices_under gives them) for what it served between two snapshots
    (DeviceSampler.snapshot)."""
    d = served(before, after)
    for role, dev, _, lower in devices:
        if dev not in d:
            continue
        rows["ts_ns"].append(after[dev][0])
        rows["interval_ns"].append(after[dev][0] - before[dev][0])
        rows["dev"].append(dev)
        rows["role"].append(role)
        rows["lower_dev"].append(lower)
        for col in (*STAT_COLUMNS, "in_flight_requests"):
            rows[col].append(int(d[dev][col]))
    return rows


def table(rows: dict[str, list]) -> pa.Table:
    """device_stats columns as a pyarrow Table with the session schema."""
    # pyarrow (and schema, which builds its tables' schemas with it) load when a table is
    # built: the lab and the monitor import this module before they write anything
    import pyarrow as pa

    from jstall.schema import SCHEMAS

    return pa.table(rows, schema=SCHEMAS["device_stats"])


def snapshot(devices: list[tuple]) -> dict[str, tuple[int, dict[str, int]]]:
    """{dev: (monotonic ns, /sys/block stat dict)} of ``devices`` now (each device once: a
    filesystem's and its external journal's, of every traced filesystem)."""
    return {dev: (time.monotonic_ns(), read_block_stat(lower)) for _, dev, _, lower in devices}


class DeviceSampler:
    """Samples the serving device of every device given every ``interval_s`` seconds in a
    daemon thread, from start() to stop() (a last, shorter interval included)."""

    def __init__(self, devices, interval_s=1.0):
        self.devices = list(devices)  # [(role, dev, serving device's name, its dev)]
        self.interval_s = interval_s
        self.rows = empty_rows()
        self._last = None
        self._stop = threading.Event()
        self._thread = None
        self._lock = threading.Lock()

    def snapshot(self) -> dict[str, tuple[int, dict[str, int]]]:
        """{dev: (monotonic ns, stat dict)} now."""
        return snapshot(self.devices)

    def _sample(self):
        snap = self.snapshot()
        with self._lock:
            if self._last is not None:
                add_rows(self.rows, self.devices, self._last, snap)
            self._last = snap

    def start(self) -> DeviceSampler:
        self._sample()

        def loop():
            while not self._stop.wait(self.interval_s):
                self._sample()

        self._thread = threading.Thread(target=loop, name="jstall-devstats", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict[str, list]:
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

    def table(self) -> pa.Table:
        """The rows so far as a pyarrow Table with the session schema (copied under the
        sampler's lock: the sampling thread may be appending a row, column by column)."""
        with self._lock:
            rows = {c: list(v) for c, v in self.rows.items()}
        return table(rows)

    def write(self, session_dir: str) -> None:
        """Write device_stats.parquet into a session directory (before its metadata.json)."""
        import pyarrow.parquet as pq

        pq.write_table(self.table(), table_path(session_dir, "device_stats"))

    def summary(self) -> dict[str, dict[str, int]]:
        """{role: {column: total}} over all rows (what each device served in the run)."""
        out = {}
        for i, role in enumerate(self.rows["role"]):
            d = out.setdefault(role, {c: 0 for c in STAT_COLUMNS})
            for c in STAT_COLUMNS:
                d[c] += self.rows[c][i]
        return out
