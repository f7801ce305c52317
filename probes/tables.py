"""Arrow tables from the probes' records: one builder per session table (columns from
schema.COLUMNS), fed the numpy records events.decode() makes of a ring buffer's raw bytes,
and the call counters (call_histograms, call_totals) from the probes' ``call_stats`` map.

A probe field becomes a column here: the builder of its table copies it (with its unit in
the column name). The recorder writes these tables as chunks; monitor captures use the same
builders. Times are CLOCK_MONOTONIC nanoseconds, as the probes read them.
"""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jstall.schema import FILL_COLUMNS, PHASES, SCHEMAS

from . import events, filesystems, syscalls

#: tables appended to while recording, one closed chunk per flush
STREAMED = ("calls", "offcpu", "jbd2_events", "run_stats", "checkpoint_stats", "log_tail", "fill", "xfs_waits",
            "worker_offcpu")
CHUNKED = STREAMED + ("stacks", "writers")
#: the in-kernel counters, rewritten whole at every flush: call_histograms, call_totals
#: counters per syscall row in the probes' call_slots array (their STATS_WAYS; a power of 2)
CALL_SLOT_WAYS = 4


def streamed_tables(a, names, hz, ksym=None):
    """{table: Arrow table} of the streamed tables whose records ``a`` holds ({struct: records});
    ``names``: {syscall number: name}; ``hz``: the kernel's HZ (jiffies to ns), or None;
    ``ksym``: a kernel text address's symbol (bytes), for the workers' work functions."""
    builders = {
        "calls": ("call_event", lambda r: calls_table(r, names)),
        "offcpu": ("offcpu_event", lambda r: offcpu_table(r, names)),
        "jbd2_events": ("jbd2_event", jbd2_table),
        "run_stats": ("run_stats_event", lambda r: run_stats_table(r, hz)),
        "checkpoint_stats": ("checkpoint_stats_event", lambda r: checkpoint_stats_table(r, hz)),
        "log_tail": ("log_tail_event", log_tail_table),
        "fill": ("fill_event", fill_table),
        "xfs_waits": ("xfs_wait_event", lambda r: xfs_waits_table(r, names)),
        "worker_offcpu": ("worker_offcpu_event", lambda r: worker_offcpu_table(r, names, ksym)),
    }
    return {name: build(a[struct]) for name, (struct, build) in builders.items() if struct in a}


def _table(name, columns):
    schema = SCHEMAS[name]
    arrays = []
    for field in schema:
        col = columns[field.name]
        arrays.append(col if isinstance(col, pa.Array) else pa.array(col, type=field.type, from_pandas=True))
    return pa.Table.from_arrays(arrays, schema=schema)


def _devs(values):
    uniq, inv = np.unique(np.asarray(values, dtype=np.uint64), return_inverse=True)
    names = np.array([filesystems.dev_name(int(u)) if u else None for u in uniq], dtype=object)
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


def calls_table(a, names):
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
        "context": _contexts(a),
    })


def _contexts(a):
    """What the task of each handle wait (OP_JOURNAL_START) was doing: the syscall it was in
    (named from the kernel's syscall table), "page fault" (in the kernel by another way than
    a syscall), "kernel thread", "io_uring worker"; null for other rows or when unknown."""
    out = np.full(len(a), None, dtype=object)
    waits = np.flatnonzero(a["syscall_nr"] == events.OPS["OP_JOURNAL_START"]) if len(a) else []
    for i in waits:
        out[i] = context_name(int(a["context_nr"][i]), int(a["task_flags"][i]))
    return pa.array(out, type=pa.string())


def context_name(nr, flags):
    """What a handle wait's task was doing, from call_event's context_nr and task_flags, or
    None when not known."""
    if flags & events.PF_KTHREAD:
        return "kernel thread"
    if flags & events.PF_IO_WORKER:
        return "io_uring worker"
    if nr == events.CONTEXTS["CONTEXT_NOT_SYSCALL"]:
        return "page fault"
    return syscalls.kernel_name(nr) if nr >= 0 else None


def _file(a):
    """The file name the probes read (empty: not known) as strings or nulls."""
    if not len(a):
        return pa.array([], type=pa.string())
    names = np.char.decode(a["file"], "utf-8", "replace")
    return pa.array(names, type=pa.string(), mask=names == "")


def _who(a):
    return {"in_traced_call": a["in_traced_call"] != 0, "traced_task": a["traced_task"] != 0}


def offcpu_table(a, names):
    state = a["state"].astype(np.int64)
    runnable = state == 0  # the probe stores 0 for a preempted task
    return _table("offcpu", {
        "ts_ns": a["ts_ns"].astype(np.int64), "offcpu_ns": a["offcpu_ns"].astype(np.int64), **_task(a),
        "state": state, "runnable": runnable, "stack_id": a["stack_id"].astype(np.int32),
        "call_ts_ns": a["call_ts_ns"].astype(np.int64), "syscall": _names(a["syscall_nr"], names),
        "dev": _devs(a["dev"]), **_waker(a, names),
    })


def worker_offcpu_table(a, names, ksym=None):
    """Off-CPU intervals of kernel workers inside a work item of the filesystems' code, with
    the item's start and function (its symbol; null where ``ksym`` is None)."""
    state = a["state"].astype(np.int64)
    funcs = np.unique(a["work_func"]) if len(a) else []
    symbol = {int(f): ksym(int(f)).decode(errors="replace") if ksym else None for f in funcs}
    return _table("worker_offcpu", {
        "ts_ns": a["ts_ns"].astype(np.int64), "offcpu_ns": a["offcpu_ns"].astype(np.int64), **_task(a),
        "state": state, "runnable": state == 0, "stack_id": a["stack_id"].astype(np.int32),
        "work_ts_ns": a["work_ts_ns"].astype(np.int64),
        "work_function": pa.array([symbol[int(f)] for f in a["work_func"]], type=pa.string()),
        **_waker(a, names),
    })


def _waker(a, names):
    """Who woke each interval (null where no wakeup was seen: preempted, or not recorded)."""
    none = a["wake_ts_ns"] == 0
    in_call = ~none & (a["waker_call_ts_ns"] != 0)

    def masked(values, typ, mask):
        return pa.array(values, type=typ, mask=mask) if len(values) else pa.array([], type=typ)

    calls = _names(a["waker_syscall_nr"], names).to_numpy(zero_copy_only=False) if len(a) else np.zeros(0, dtype=object)
    comm = np.char.decode(a["waker_comm"], "utf-8", "replace") if len(a) else np.zeros(0, dtype=str)
    return {
        "wake_ts_ns": masked(a["wake_ts_ns"].astype(np.int64), pa.int64(), none),
        "waker_tid": masked(a["waker_tid"].astype(np.int32), pa.int32(), none),
        "waker_pid": masked(a["waker_pid"].astype(np.int32), pa.int32(), none),
        "waker_comm": masked(comm, pa.string(), none),
        "waker_stack_id": masked(a["waker_stack_id"].astype(np.int32), pa.int32(), none),
        "waker_call_ts_ns": masked(a["waker_call_ts_ns"].astype(np.int64), pa.int64(), ~in_call),
        "waker_syscall": masked(calls, pa.string(), ~in_call),
    }


#: the kernel stack maps (recorder.bpf.c): ids below STACK_ENTRIES are the stacks map's,
#: those from it the second way's (stacks2, id - STACK_ENTRIES: a stack whose bucket in
#: stacks held another one)
STACK_ENTRIES = 16384
STACK2_ENTRIES = 4096


def stack_addrs(b, sid):
    """The return addresses of a stored kernel stack id, innermost first (KeyError: none)."""
    if sid >= STACK_ENTRIES:
        return b[b"stacks2"].walk(sid - STACK_ENTRIES)
    return b[b"stacks"].walk(sid)


def stacks_table(b, ids):
    frames = []
    for sid in ids:
        try:
            frames.append([b.ksym(addr).decode(errors="replace") for addr in stack_addrs(b, sid)])
        except KeyError:
            frames.append([])
    return _table("stacks", {"stack_id": np.array(ids, dtype=np.int32),
                             "frames": pa.array(frames, type=pa.list_(pa.string()))})


def jbd2_table(a):
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
    if not hz:
        return np.full(len(values), None)
    return np.rint(np.asarray(values, dtype=np.float64) * (1e9 / hz)).astype(np.int64)


def run_stats_table(a, hz):
    cols = {"ts_ns": a["ts_ns"].astype(np.int64), "dev": _devs(a["dev"]),
            "transaction": a["transaction"].astype(np.int64), **_task(a)}
    for phase in PHASES:
        cols[f"{phase}_jiffies"] = a[f"{phase}_jiffies"].astype(np.int64)
        cols[f"{phase}_ns"] = _jiffies_ns(a[f"{phase}_jiffies"], hz)
    for c in ("handle_count", "blocks", "blocks_logged"):
        cols[c] = a[c].astype(np.int64)
    return _table("run_stats", cols)


def checkpoint_stats_table(a, hz):
    return _table("checkpoint_stats", {
        "ts_ns": a["ts_ns"].astype(np.int64), "dev": _devs(a["dev"]),
        "transaction": a["transaction"].astype(np.int64), **_task(a),
        "chp_time_jiffies": a["chp_time_jiffies"].astype(np.int64),
        "chp_time_ns": _jiffies_ns(a["chp_time_jiffies"], hz),
        "forced_to_close": a["forced_to_close"].astype(np.int64),
        "written": a["written"].astype(np.int64), "dropped": a["dropped"].astype(np.int64), **_who(a),
    })


def log_tail_table(a):
    return _table("log_tail", {
        "ts_ns": a["ts_ns"].astype(np.int64), "dev": _devs(a["dev"]), **_task(a),
        "tail_sequence": a["tail_sequence"].astype(np.int64), "first_tid": a["first_tid"].astype(np.int64),
        "block_nr": a["block_nr"].astype(np.int64), "freed_blocks": a["freed_blocks"].astype(np.int64),
        **_who(a), **_fill_columns(a),
    })


def fill_table(a):
    return _table("fill", {
        "ts_ns": a["ts_ns"].astype(np.int64), "dev": _devs(a["dev"]), **_fill_columns(a),
        "source": pa.array(["handle_start"] * len(a), type=pa.string()),
    })


def xfs_waits_table(a, names):
    """XFS log-space waits (xfs_wait_event): what each task was doing is the traced call it
    was in (named as its calls are), else as a handle wait's context."""
    n = len(a)
    context = np.full(n, None, dtype=object)
    for i in range(n):
        nr, in_call = int(a["context_nr"][i]), bool(a["in_traced_call"][i])
        context[i] = names.get(nr, f"nr{nr}") if in_call else context_name(nr, int(a["task_flags"][i]))
    cycles = (a["start_tail_space"] == 0) & ((a["start_reserve_cycle"] != 0) | (a["start_write_cycle"] != 0))
    lsn = {}
    for end in ("start", "end"):
        v = a[f"{end}_tail_lsn"].astype(np.int64)
        lsn[f"{end}_tail_cycle"], lsn[f"{end}_tail_block"] = v >> 32, v & 0xFFFFFFFF
    return _table("xfs_waits", {
        "ts_ns": a["ts_ns"].astype(np.int64), "end_ns": a["end_ns"].astype(np.int64),
        "wait_ns": (a["end_ns"] - a["ts_ns"]).astype(np.int64), "dev": _devs(a["dev"]), **_task(a),
        "head": _names(a["head"], events.XFS_HEADS), "ticket": a["tic"].astype(np.int64),
        "unit_res_bytes": a["unit_res"].astype(np.int64), "cnt": a["cnt"].astype(np.int32),
        "permanent": (a["tic_flags"] & 1) != 0, "sleeps": a["sleeps"].astype(np.int32),
        "in_traced_call": a["in_traced_call"] != 0, "call_ts_ns": _masked(a["call_ts_ns"], a["call_ts_ns"] != 0),
        "context": pa.array(context, type=pa.string()),
        "start_reserve_bytes": a["start_reserve_bytes"].astype(np.int64),
        "start_write_bytes": a["start_write_bytes"].astype(np.int64),
        "start_tail_space_bytes": _masked(a["start_tail_space"], ~cycles),
        "end_reserve_bytes": a["end_reserve_bytes"].astype(np.int64),
        "end_write_bytes": a["end_write_bytes"].astype(np.int64),
        "end_tail_space_bytes": _masked(a["end_tail_space"], ~cycles),
        **lsn,
        **{f"{end}_{h}_cycle": _masked(a[f"{end}_{h}_cycle"], cycles) for end in ("start", "end")
           for h in ("reserve", "write")},
        "curr_cycle": a["curr_cycle"].astype(np.int64), "curr_block": a["curr_block"].astype(np.int64),
        **{c: a[c].astype(np.int64) for c in ("ail_pushes", "ail_pinned", "ail_locked", "ail_flushing", "log_forces",
                                                 "log_writes")},
        "queued": a["queued"] != 0,
    })


def call_counters(b, slots=None):
    """{(syscall_nr or op, kernel dev): (count, errors, total_ns, max_ns, buckets int64[])}, the
    in-kernel call counters summed over CPUs: the ``call_stats`` hash and, when ``slots``
    ({syscall nr or op: row}) is given, the ``call_slots`` rows, whose counters name their
    device (owner)."""
    out = {}

    def add(key, v):
        count, errors, total_ns, max_ns, buckets = out.get(key) or (0, 0, 0, 0, 0)
        out[key] = (count + v.count, errors + v.errors, total_ns + v.total_ns, max(max_ns, v.max_ns),
                    buckets + np.ctypeslib.as_array(v.buckets).astype(np.int64))

    for k, per_cpu in b[b"call_stats"].items():
        for v in per_cpu:
            add((int(k.syscall_nr), int(k.dev)), v)
    if slots:
        rows = {row: nr for nr, row in slots.items()}
        for k, per_cpu in b[b"call_slots"].items():
            nr = rows.get(k.value // CALL_SLOT_WAYS)
            for v in per_cpu:
                if v.owner and v.stats.count and nr is not None:
                    add((nr, int(v.owner & 0xFFFFFFFF)), v.stats)
    return out


def histogram_tables(b, names, devless_apart=False, slots=None):
    """(call_histograms, call_totals, calls_without_device) from the in-kernel counters
    (:func:`call_counters`). calls_without_device: {syscall: {"count", "errors"}} of calls
    that resolved to no filesystem; with devless_apart (-d) they stay out of the tables."""
    counters = call_counters(b, slots)
    hist, tot, devless = [], [], {}
    for (nr, dev), (count, errors, total_ns, max_ns, buckets) in counters.items():
        if not dev:
            name = names.get(nr, f"nr{nr}")
            devless[name] = {"count": count, "errors": errors}
            if devless_apart:
                continue
        tot.append((nr, dev, count, errors, total_ns, max_ns))
        hist += [(nr, dev, i, int(n)) for i, n in enumerate(buckets) if n]
    histograms, totals = counter_tables(sorted(hist), sorted(tot), names)
    return histograms, totals, dict(sorted(devless.items()))


def counter_tables(hist, tot, names):
    """(call_histograms, call_totals) from counter rows: ``hist`` (syscall_nr, dev, log2
    bucket, count), ``tot`` (syscall_nr, dev, count, errors, total_ns, max_ns), in table order."""
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
    return histograms, totals


def home_writes_table(homes):
    """The home_writes table from {(dev, sector): (writes, first_ns, last_ns)}
    (ProbeSet.read_home_writes), in device and sector order."""
    keys = sorted(homes)
    vals = [homes[k] for k in keys]
    return _table("home_writes", {
        "dev": [k[0] for k in keys], "sector": [k[1] for k in keys], "writes": [v[0] for v in vals],
        "first_ns": [v[1] for v in vals], "last_ns": [v[2] for v in vals]})


def xattr_files_table(files):
    """The xattr_files table from {(dev, in_inode_bytes): files} (ProbeSet.read_xattr_files),
    in device and size order."""
    keys = sorted(files)
    return _table("xattr_files", {
        "dev": [k[0] for k in keys], "in_inode_bytes": [k[1] for k in keys], "files": [files[k] for k in keys]})


def _signed64(x):
    """An integer read from a 64-bit counter, as int64 holds it (two's complement)."""
    x &= (1 << 64) - 1
    return x - (1 << 64) if x >= 1 << 63 else x


def writers_table(rows, ts_ns):
    """The writers rows read at ``ts_ns`` from {(pid, dev, cgroup id, transaction): (handles,
    requested_blocks, dirtied_blocks, logged_bytes, first_ns, comm)} (the counts since the
    previous read), in device, transaction and pid order."""
    keys = sorted(rows, key=lambda k: (k[1], -1 if k[3] is None else k[3], k[0], k[2]))
    # the map's counters are unsigned 64-bit: one past int64 (a difference below zero read
    # back as unsigned) is kept as the signed value it is, never an error at the flush
    vals = [tuple(_signed64(x) if isinstance(x, int) else x for x in rows[k]) for k in keys]
    return _table("writers", {
        "ts_ns": [ts_ns] * len(keys), "first_ns": [v[4] for v in vals], "dev": [k[1] for k in keys],
        "transaction": [k[3] for k in keys], "pid": [k[0] for k in keys], "comm": [v[5] for v in vals],
        "cgroup_id": [_signed64(k[2]) for k in keys], "handles": [v[0] for v in vals],
        "requested_blocks": [v[1] for v in vals], "dirtied_blocks": [v[2] for v in vals],
        "logged_bytes": [v[3] for v in vals]})
