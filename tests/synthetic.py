"""Write session directories from DataFrames with the exact schema of docs/session-format.md.

For tests, notebooks and the benchmark: ``write_session(path, {"calls": df, ...}, meta)``
writes every table (absent ones with zero rows), filling columns a DataFrame leaves out with
nulls (nullable columns) or zero/empty values, and metadata.json last, as the recorder does.
``metadata()`` and ``journal_meta()`` build valid metadata with overridable fields.
"""

import os

import numpy as np
import pandas as pd

from jstall import __version__, schema
from jstall.session import FORMAT, SCHEMA_VERSION, TABLES, table_path, write_metadata


def journal_meta(dev="7:0", journal_blocks=1024, block_size=4096, max_transaction_blocks=256, **kw):
    """One metadata ``journals[]`` entry (a 4 MiB journal by default)."""
    j = {
        "dev": dev, "device": f"/dev/loop{dev.split(':')[1]}", "mountpoint": f"/mnt/jstall-{dev.replace(':', '-')}",
        "block_size": block_size, "journal_blocks": journal_blocks,
        "max_transaction_blocks": max_transaction_blocks, "inode_size": 128,
        "features": ["has_journal", "ext_attr", "extent"], "mount_options": "rw,relatime",
        "journal_device": None, "fast_commit": False, "proc_info_start": None, "proc_info_end": None,
    }
    j.update(kw)
    return j


def metadata(start_ns=0, end_ns=10_000_000_000, journals=None, hz=250, **kw):
    """A complete metadata dict for a session spanning [start_ns, end_ns] monotonic."""
    m = {
        "format": FORMAT, "schema_version": SCHEMA_VERSION, "tool_version": __version__,
        "status": "complete", "kernel_release": "6.18.0", "host": "synthetic", "hz": hz,
        "hz_source": "config",
        "start": {"wall": "2026-01-01T00:00:00+00:00", "wall_ns": 1_767_225_600_000_000_000, "monotonic_ns": start_ns},
        "end": {"wall": "2026-01-01T00:00:10+00:00", "wall_ns": 1_767_225_600_000_000_000 + end_ns - start_ns,
                "monotonic_ns": end_ns},
        "command": None, "command_exit_status": None,
        "filters": {"devices": [], "pid": None, "cgroup": None, "command_tree": False},
        "min_ms": 1.0, "probes": {"attached": [], "missing": []},
        "events_lost": {"calls": 0, "offcpu": 0, "jbd2": 0}, "stacks_lost": 0,
        "journals": [journal_meta()] if journals is None else journals,
    }
    m.update(kw)
    return m


def _arrow_table(name, df):
    import pyarrow as pa

    sch = schema.arrow_schema(name)
    n = 0 if df is None else len(df)
    arrays = []
    for field in sch:
        if df is not None and field.name in df.columns:
            col = df[field.name]
            if pa.types.is_list(field.type):
                arrays.append(pa.array([list(v) for v in col], type=field.type))
            else:
                arrays.append(pa.array(col, type=field.type, from_pandas=True))
        elif field.nullable:
            arrays.append(pa.nulls(n, type=field.type))
        elif pa.types.is_string(field.type):
            arrays.append(pa.array([""] * n, type=field.type))
        elif pa.types.is_boolean(field.type):
            arrays.append(pa.array([False] * n, type=field.type))
        elif pa.types.is_list(field.type):
            arrays.append(pa.array([[]] * n, type=field.type))
        else:
            arrays.append(pa.array([0] * n, type=field.type))
    return pa.Table.from_arrays(arrays, schema=sch)


def write_session(path, tables=None, meta=None):
    """Write a complete session directory at ``path`` and return ``path``.

    ``tables`` maps table names to DataFrames (columns as in the format; any left out are
    filled), ``meta`` is a metadata dict (default ``metadata()``)."""
    import pyarrow.parquet as pq

    tables = tables or {}
    unknown = set(tables) - set(TABLES) - set(schema.LAB_TABLES)
    if unknown:
        raise ValueError(f"unknown tables: {sorted(unknown)}")
    os.makedirs(path, exist_ok=True)
    for name in TABLES + tuple(t for t in schema.LAB_TABLES if t in tables):   # device_stats when given
        pq.write_table(_arrow_table(name, tables.get(name)), table_path(path, name))
    write_metadata(path, metadata() if meta is None else meta)
    return path


def fill_columns(free_blocks, first_block=1, last_block=1025, max_transaction_blocks=256, journal_blocks=1024,
                 running_transaction=-1, committing_transaction=-1, head_block=None, tail_block=None,
                 committing_credits=0):
    """The journal fill columns of one event as a dict (defaults: a 1024-block journal whose
    log spans blocks 1..1024, so ``last_block - first_block`` = 1024)."""
    return {
        "free_blocks": free_blocks, "head_block": first_block if head_block is None else head_block,
        "tail_block": first_block if tail_block is None else tail_block, "first_block": first_block,
        "last_block": last_block, "journal_blocks": journal_blocks,
        "max_transaction_blocks": max_transaction_blocks, "running_transaction": running_transaction,
        "committing_transaction": committing_transaction, "committing_credits": committing_credits,
    }


def rows(records):
    """DataFrame from a list of dicts (columns left out are filled by ``write_session``)."""
    return pd.DataFrame.from_records(records)


# --- generated sessions: many hosts for the fleet, long ones for the report ------------------

#: Blocking stacks (innermost first) the generated sessions use, one per kind of wait.
STACKS = {
    "checkpoint": ["__schedule", "schedule", "io_schedule", "bit_wait_io", "__wait_on_bit", "out_of_line_wait_on_bit",
                   "__wait_on_buffer", "jbd2_log_do_checkpoint", "__jbd2_log_wait_for_space",
                   "add_transaction_credits", "start_this_handle", "jbd2__journal_start", "__ext4_journal_start_sb",
                   "ext4_xattr_set", "__vfs_setxattr"],
    "transaction_wait": ["__schedule", "schedule", "wait_transaction_locked", "add_transaction_credits",
                         "start_this_handle"],
    "commit_wait": ["__schedule", "schedule", "jbd2_log_wait_commit", "jbd2_complete_transaction", "ext4_sync_file"],
    "metadata": ["__schedule", "schedule", "io_schedule", "bit_wait_io", "__wait_on_bit", "__wait_on_buffer",
                 "ext4_read_bh"],
    "lock_buffer": ["__schedule", "schedule", "io_schedule", "bit_wait_io", "__wait_on_bit_lock", "__lock_buffer",
                    "do_get_write_access"],
    "other": ["__schedule", "schedule", "rwsem_down_write_slowpath", "down_write", "vfs_setxattr"],
}
SYSCALLS = ("setxattr", "openat", "unlinkat", "mkdir", "fsync", "renameat2")


def generate_session(path, seed=0, host="host-0", duration_s=60.0, calls=2_000, stalls=20, journals=None,
                     checkpoint_share=0.6, fill_per_s=20.0, commit_every_s=1.0, kernel="6.18.0"):
    """Write a plausible session of ``duration_s`` seconds and return ``path``.

    ``calls`` calls of 1 ms or more are stored one by one (``stalls`` of them 10 ms or more,
    each with one off-CPU interval whose stack is a checkpoint with probability
    ``checkpoint_share``, else another wait; a checkpointing stall has its own forced
    checkpoint event), 100 times as many faster calls are counted in the histograms and totals;
    ``journals``: metadata entries (default one 4 MiB journal of 128-byte inodes); a transaction
    commits every ``commit_every_s`` seconds per journal with its five commit events; fill samples
    every 1/``fill_per_s`` s per journal, saw-toothing up to the forced level where stalls
    are.  Vectorized: a 30-minute session with 100,000 calls takes seconds."""
    rng = np.random.default_rng(seed)
    S = 1_000_000_000
    start = 1_000 * S
    dur = int(duration_s * S)
    journals = journals or [journal_meta()]
    devs = np.array([j["dev"] for j in journals])
    n = max(int(calls), int(stalls))
    # recorded calls: 1..9 ms, the stalls 10 ms .. 2 s (log-uniform)
    lat = (rng.uniform(1, 9.9, n) * 1e6).astype("int64")
    is_stall = np.zeros(n, dtype=bool)
    is_stall[rng.choice(n, size=int(stalls), replace=False)] = True
    lat[is_stall] = (np.exp(rng.uniform(np.log(10), np.log(2000), int(stalls))) * 1e6).astype("int64")
    ts = np.sort(rng.integers(start, start + dur - 2 * S, n))
    tid = (1000 + np.arange(n) % 4096).astype("int32")  # calls of one thread never overlap
    dev = devs[rng.integers(0, len(devs), n)]
    syscall = rng.choice(np.array(SYSCALLS), n, p=[0.5, 0.2, 0.1, 0.08, 0.07, 0.05])
    syscall[is_stall & (rng.random(n) < 0.8)] = "setxattr"
    comm = np.array([f"app{k}" for k in range(4)])[tid % 4]
    jb = {j["dev"]: j for j in journals}
    log_blocks = np.array([jb[d]["journal_blocks"] for d in dev])
    mtb = np.array([jb[d]["max_transaction_blocks"] for d in dev])
    forced_free = mtb + 32
    free = np.where(is_stall, forced_free - rng.integers(1, 16, n), log_blocks // 2)
    calls_df = pd.DataFrame({"ts_ns": ts, "latency_ns": lat, "tid": tid, "pid": tid, "comm": comm, "syscall": syscall,
                             "ret": 0, "dev": dev, "handles": 1, "journal_free_blocks": free,
                             "journal_min_free_blocks": free, "journal_log_blocks": log_blocks,
                             "journal_committing_credits": 0})
    st = np.flatnonzero(is_stall)
    kinds = np.array(list(STACKS))
    other = kinds[kinds != "checkpoint"]
    kind = np.where(rng.random(len(st)) < checkpoint_share, "checkpoint", other[rng.integers(0, len(other), len(st))])
    stack_id = np.array([list(STACKS).index(k) for k in kind], dtype="int32")
    off_ns = (lat[st] * rng.uniform(0.7, 0.95, len(st))).astype("int64")
    offcpu = pd.DataFrame({"ts_ns": ts[st] + 200_000, "offcpu_ns": off_ns, "tid": tid[st], "pid": tid[st],
                           "comm": comm[st], "state": 2, "runnable": False, "stack_id": stack_id,
                           "call_ts_ns": ts[st], "syscall": syscall[st], "dev": dev[st]})
    stacks = pd.DataFrame({"stack_id": np.arange(len(STACKS), dtype="int32"), "frames": list(STACKS.values())})
    # jbd2: per journal a commit every commit_every_s with its five events; forced checkpoints
    ev_parts, rs_parts, fill_parts = [], [], []
    for k, j in enumerate(journals):
        d = j["dev"]
        lb, m = j["journal_blocks"], j["max_transaction_blocks"]
        fill = {"first_block": 1, "last_block": lb + 1, "journal_blocks": lb, "max_transaction_blocks": m,
                "committing_transaction": -1, "committing_credits": 0, "head_block": 1, "tail_block": 1}
        ct = np.arange(start + S // 2, start + dur, int(commit_every_s * S))
        txn = np.arange(len(ct)) + 100 * (k + 1)
        evts = ("start_commit", "commit_locking", "commit_flushing", "commit_logging", "end_commit")
        e = pd.DataFrame({"ts_ns": np.concatenate([ct + i * 2_000_000 for i in range(5)]),
                          "event": np.repeat(np.array(evts), len(ct)), "dev": d,
                          "transaction": np.tile(txn, 5), "tid": 77 + k, "pid": 77 + k, "comm": f"jbd2/loop{k}-8",
                          "jbd2_thread": True, "free_blocks": lb // 2, "running_transaction": np.tile(txn, 5), **fill})
        ev_parts.append(e)
        mine = st[(dev[st] == d) & (kind == "checkpoint")]
        if len(mine):
            ev_parts.append(pd.DataFrame({
                "ts_ns": ts[mine] + 300_000, "event": "checkpoint", "dev": d, "tid": tid[mine], "pid": tid[mine],
                "comm": comm[mine], "jbd2_thread": False, "result": 0, "free_blocks": m + 20,
                "running_transaction": -1, **fill}).assign(transaction=pd.NA))
        blocks = rng.integers(8, max(9, m // 2), len(ct))
        r = {"ts_ns": ct + 10_000_000, "dev": d, "transaction": txn, "tid": 77 + k, "pid": 77 + k,
             "comm": f"jbd2/loop{k}-8", "handle_count": rng.integers(1, 400, len(ct)), "blocks": blocks,
             "blocks_logged": blocks + 2}
        for p in ("wait", "request_delay", "running", "locked", "flushing", "logging"):
            jf = rng.integers(0, 3, len(ct)) if p != "running" else rng.integers(200, 300, len(ct))
            r[f"{p}_jiffies"] = jf
            r[f"{p}_ns"] = jf * 4_000_000
        rs_parts.append(pd.DataFrame(r))
        ft = np.arange(start, start + dur, int(S / fill_per_s))
        saw = (np.arange(len(ft)) % 200) / 200.0  # fills up to the forced level, then drops
        ff = (lb - (lb - m - 32) * saw).astype("int64")
        fill_parts.append(pd.DataFrame({"ts_ns": ft, "dev": d, "free_blocks": ff, "running_transaction": 1,
                                        "source": "handle_start", **fill}))
    jbd2 = pd.concat(ev_parts, ignore_index=True).sort_values("ts_ns", kind="stable")
    jbd2["transaction"] = jbd2["transaction"].astype("Int64")
    # every call, fast ones included, in the histograms and totals: 100 fast calls (2 us to
    # 1 ms) per recorded one, spread evenly over call types, devices and log2 buckets 11..19
    combos = pd.MultiIndex.from_product([list(SYSCALLS), list(devs), range(11, 20)], names=["syscall", "dev", "bucket"])
    fast = rng.multinomial(100 * n, np.full(len(combos), 1.0 / len(combos)))
    fh = pd.DataFrame(index=combos).reset_index().assign(count=fast)
    fh["total"] = fh["count"] * (3 * 2 ** fh["bucket"].astype("int64") // 2)  # bucket middles
    fh["max"] = np.where(fh["count"] > 0, 2 ** (fh["bucket"].astype("int64") + 1) - 1, 0)
    rec = pd.DataFrame({"syscall": syscall, "dev": dev, "bucket": np.floor(np.log2(lat)).astype("int64"), "lat": lat})
    rh = rec.groupby(["syscall", "dev", "bucket"], as_index=False).agg(count=("lat", "size"), total=("lat", "sum"),
                                                                        max=("lat", "max"))
    both = pd.concat([fh, rh], ignore_index=True)
    hist = both.groupby(["syscall", "dev", "bucket"], as_index=False)["count"].sum()
    hist = hist[hist["count"] > 0].astype({"bucket": "int32"})
    hist["low_ns"] = 2 ** hist["bucket"].astype("int64")
    hist["high_ns"] = hist["low_ns"] * 2
    tot = both.groupby(["syscall", "dev"], as_index=False).agg(
        count=("count", "sum"), total_latency_ns=("total", "sum"), max_latency_ns=("max", "max"))
    tot["errors"] = 0
    meta = metadata(start_ns=start, end_ns=start + dur, journals=journals, host=host, kernel_release=kernel)
    wall0 = 1_795_000_000 + seed * 3_600
    meta["start"]["wall"] = _iso(wall0)
    meta["end"]["wall"] = _iso(wall0 + duration_s)
    return write_session(path, {"calls": calls_df, "offcpu": offcpu, "stacks": stacks, "jbd2_events": jbd2,
                                "run_stats": pd.concat(rs_parts, ignore_index=True),
                                "fill": pd.concat(fill_parts, ignore_index=True), "call_histograms": hist,
                                "call_totals": tot}, meta)


def _iso(epoch_s):
    import datetime as dt

    return dt.datetime.fromtimestamp(epoch_s, tz=dt.timezone.utc).isoformat()


def generate_fleet(root, sessions=100, hosts=20, seed=0, collected=True):
    """Write ``sessions`` small generated sessions (varied hosts, journal sizes, inode sizes,
    stall counts and causes) under ``root`` -- in the collection layout
    ``host=HOST/date=DAY/NAME`` when ``collected`` -- and return their paths.  Host ``k`` has
    a journal of 4 MiB × 2^(k mod 4), 128-byte inodes on even hosts, and about ``k`` stalls
    per session."""
    import datetime as dt

    from jstall.session import collected_path

    rng = np.random.default_rng(seed)
    paths = []
    for i in range(sessions):
        k = i % hosts
        host = f"host-{k:03d}"
        mib = 4 << (k % 4)
        js = [journal_meta("7:0", journal_blocks=256 * mib, max_transaction_blocks=64 * mib,
                           inode_size=128 if k % 2 == 0 else 256)]
        if k % 5 == 0:
            js.append(journal_meta("7:1", journal_blocks=8192, max_transaction_blocks=2048, inode_size=256))
        stalls = int(rng.poisson(k / 2)) if k % 3 else int(rng.poisson(k + 2))
        name = f"jstall-session-{i:05d}"
        when = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc) + dt.timedelta(hours=i % 72)
        path = collected_path(root, host, when, name) if collected else f"{root}/{name}"
        generate_session(path, seed=seed * 100_000 + i, host=host, duration_s=float(rng.integers(20, 120)),
                         calls=int(rng.integers(50, 400)), stalls=stalls, journals=js,
                         checkpoint_share=0.9 if k % 2 == 0 else 0.2, fill_per_s=10.0, commit_every_s=2.0)
        paths.append(path)
    return paths
