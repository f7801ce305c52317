"""Write session directories from DataFrames with the exact schema of docs/session-format.md.

For tests, notebooks and the benchmark: ``write_session(path, {"calls": df, ...}, meta)``
writes every table (absent ones with zero rows), filling columns a DataFrame leaves out with
nulls (nullable columns) or zero/empty values, and metadata.json last, as the recorder does.
``metadata()`` and ``journal_meta()`` build valid metadata with overridable fields.
"""

import os

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
    unknown = set(tables) - set(TABLES)
    if unknown:
        raise ValueError(f"unknown tables: {sorted(unknown)}")
    os.makedirs(path, exist_ok=True)
    for name in TABLES:
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
    import pandas as pd

    return pd.DataFrame.from_records(records)
