"""The call counters' reader: the probes count each traced syscall's calls in per-CPU array
slots (call_slots: a row per syscall, tables.CALL_SLOT_WAYS ways chosen by device, each
CPU's way owned by the first device counted in it) and the rest in the call_stats hash;
tables.histogram_tables must give the same call_histograms and call_totals as if every
call had been counted in the hash. Hand-built maps, shaped as bcc reads them."""

import ctypes

from jstall.probes import tables
from jstall.probes.probeset import HIST_BUCKETS

NAMES = {188: "setxattr", 87: "unlink", 257: "openat"}
DEV_A, DEV_B = (7 << 20) | 3, (7 << 20) | 4
OWNER_BIT = 1 << 32


class Key(ctypes.Structure):
    _fields_ = [("syscall_nr", ctypes.c_uint32), ("dev", ctypes.c_uint32)]


class Stats(ctypes.Structure):
    _fields_ = [("count", ctypes.c_uint64), ("errors", ctypes.c_uint64), ("total_ns", ctypes.c_uint64),
                ("max_ns", ctypes.c_uint64), ("buckets", ctypes.c_uint64 * HIST_BUCKETS)]


class SlotStats(ctypes.Structure):
    _fields_ = [("owner", ctypes.c_uint64), ("stats", Stats)]


class Maps(dict):
    """b[b"name"].items() as bcc's per-CPU maps give them: (key, [value per CPU])."""

    def __getitem__(self, name):
        rows = dict.__getitem__(self, name)
        return type("Map", (), {"items": lambda self: list(rows)})()


def stats(calls):
    """Stats of calls [(latency_ns, ret)]."""
    s = Stats()
    for lat, ret in calls:
        s.count += 1
        s.errors += ret < 0
        s.total_ns += lat
        s.max_ns = max(s.max_ns, lat)
        s.buckets[max(lat.bit_length() - 1, 0)] += 1
    return s


# (syscall, dev, cpu) -> calls
CALLS = {
    (188, DEV_A, 0): [(3_000, 0), (5_000, 0), (2_000_000, 0)],
    (188, DEV_A, 1): [(4_000, -61)],
    (188, DEV_B, 0): [(70_000, 0)],
    (87, DEV_A, 1): [(9_000, 0), (12_000, -2)],
    (87, 0, 0): [(1_000, -2)],
    (257, DEV_B, 1): [(100, 0)],
}


def hash_only():
    """Every call in the call_stats hash (the probes before call_slots, and the monitor)."""
    rows = {}
    for (nr, dev, cpu), calls in CALLS.items():
        per_cpu = rows.setdefault((nr, dev), [Stats(), Stats()])
        per_cpu[cpu] = stats(calls)
    return Maps({b"call_stats": [(Key(nr, dev), v) for (nr, dev), v in rows.items()]})


def slots_and_hash(slots, taken):
    """Calls in their syscall's call_slots row where the device's way on that CPU is free or
    its own; ``taken``: {(row, way, cpu): dev} owned by another device first (its calls then
    go to the hash)."""
    ways = tables.CALL_SLOT_WAYS
    array = {i: [SlotStats(), SlotStats()] for i in range(len(slots) * ways)}
    for (row, way, cpu), dev in taken.items():
        array[row * ways + way][cpu].owner = OWNER_BIT | dev
    hashed = {}
    for (nr, dev, cpu), calls in CALLS.items():
        way = (dev ^ (dev >> 20) * 37) & (ways - 1)
        slot = array[slots[nr] * ways + way][cpu]
        if slot.owner in (0, OWNER_BIT | dev):
            slot.owner = OWNER_BIT | dev
            slot.stats = stats(calls)
        else:
            hashed.setdefault((nr, dev), [Stats(), Stats()])[cpu] = stats(calls)
    return Maps({
        b"call_stats": [(Key(nr, dev), v) for (nr, dev), v in hashed.items()],
        b"call_slots": [(ctypes.c_int(i), v) for i, v in array.items()],
    })


def test_slots_and_hash_read_as_the_hash_alone():
    slots = {nr: row for row, nr in enumerate(NAMES)}
    want = tables.histogram_tables(hash_only(), NAMES)
    for taken in ({}, {(slots[188], (DEV_A ^ (DEV_A >> 20) * 37) & 3, 1): DEV_B,
                       (slots[87], 0, 0): DEV_B}):
        got = tables.histogram_tables(slots_and_hash(slots, taken), NAMES, slots=slots)
        assert got[0].equals(want[0]) and got[1].equals(want[1])
        assert got[2] == want[2] == {"unlink": {"count": 1, "errors": 1}}
    totals = want[1].to_pylist()
    assert sum(r["count"] for r in totals) == sum(len(c) for c in CALLS.values())
    setxattr_a = next(r for r in totals if r["syscall"] == "setxattr" and r["dev"] == "7:3")
    assert (setxattr_a["count"], setxattr_a["errors"], setxattr_a["max_latency_ns"]) == (4, 1, 2_000_000)


def test_devless_calls_stay_apart_with_a_device_filter():
    slots = {nr: row for row, nr in enumerate(NAMES)}
    hist, totals, devless = tables.histogram_tables(slots_and_hash(slots, {}), NAMES, True, slots)
    assert None not in totals["dev"].to_pylist() and None not in hist["dev"].to_pylist()
    assert devless == {"unlink": {"count": 1, "errors": 1}}
