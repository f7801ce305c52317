"""The session directory's names and its metadata file (docs/session-format.md).

Shared by the recorder, which writes sessions, and the analyzer, which reads them;
it needs neither BPF nor pandas.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from typing import TYPE_CHECKING

from .errors import JstallError
from .metadata import METADATA_FILE, SWEEP_FILE, TUNE_FILE, check_session
from .metadata import SESSION_FORMAT as FORMAT  # noqa: F401 -- the writers' and readers' name
from .metadata import SESSION_SCHEMA_VERSION as SCHEMA_VERSION  # noqa: F401

if TYPE_CHECKING:
    import pyarrow as pa

#: Every table a session holds, each as <name>.parquet.
TABLES = (
    "calls",
    "call_histograms",
    "call_totals",
    "offcpu",
    "stacks",
    "jbd2_events",
    "run_stats",
    "checkpoint_stats",
    "log_tail",
    "fill",
    "xfs_waits",
    "home_writes",
    "writers",
    "worker_offcpu",
    "xattr_files",
)

#: Tables added to the format after sessions were first written: a session without one
#: (recorded before, or a monitor capture, which has no XFS probes and counts no blocks
#: written home) loads it empty.
LATER_TABLES = ("xfs_waits", "home_writes", "writers", "worker_offcpu", "xattr_files")

#: jbd2 lifecycle events, in the order a transaction meets them.
JBD2_EVENTS = (
    "start_commit",
    "commit_locking",
    "commit_flushing",
    "commit_logging",
    "end_commit",
    "drop_transaction",
    "checkpoint",
    "lock_buffer_stall",
    "write_superblock",
)


def table_path(session_dir: str, table: str) -> str:
    return os.path.join(session_dir, table + ".parquet")


def write_metadata(session_dir: str, metadata: dict) -> None:
    """Write metadata.json atomically; it is the last file of a session written."""
    path = os.path.join(session_dir, METADATA_FILE)
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(metadata, f, indent=2, sort_keys=True)
            f.write("\n")
    except OSError:
        _removed_on_error(tmp)
        raise
    os.replace(tmp, path)


def _removed_on_error(tmp: str) -> None:
    """Remove a temporary file a failed write left (a full disk keeps no half file)."""
    try:
        os.unlink(tmp)
    except OSError:
        pass


def read_metadata(session_dir: str) -> dict:
    """Read and check a session's metadata; raise JstallError naming what is wrong."""
    if not os.path.isdir(session_dir):
        raise JstallError(f"{session_dir}: no such session directory (record one with 'jstall record -o DIR')")
    path = os.path.join(session_dir, METADATA_FILE)
    if not os.path.exists(path) and is_tune_dir(session_dir):
        runs = sorted(d for d in os.listdir(session_dir) if os.path.exists(os.path.join(session_dir, d, METADATA_FILE)))
        raise JstallError(f"{session_dir}: a lab tune directory, whose runs are sessions "
                          f"({', '.join(runs[:4]) or 'none yet'}{', ...' if len(runs) > 4 else ''}); "
                          "give one run, e.g. "
                          f"{os.path.join(session_dir, runs[0] if runs else 'RUN')}, or 'jstall analyze' the directory "
                          "for the tune's table")
    if not os.path.exists(path):
        raise JstallError(
            f"{session_dir}: no {METADATA_FILE}; not a jstall session, or its recording did not finish "
            "(record it again)"
        )
    try:
        with open(path) as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        raise JstallError(f"{path}: unreadable metadata ({e}); the session is corrupt, record it again") from None
    check_session(meta, session_dir, path)
    missing = [t for t in TABLES if t not in LATER_TABLES and not table_exists(session_dir, t)]
    if missing:
        raise JstallError(f"{session_dir}: missing tables {', '.join(missing)}; the session is truncated, "
                          "record it again")
    return meta


def is_tune_dir(path: str) -> bool:
    """A lab tune directory holds tune.json and one session per run."""
    return os.path.isfile(os.path.join(path, TUNE_FILE))


def is_sweep_dir(path: str) -> bool:
    """A lab sweep directory holds sweep.json and one session per run."""
    return os.path.isfile(os.path.join(path, SWEEP_FILE))


# ---- tables written in chunks while recording ------------------------------------------
#
# While a recording runs, each streamed table is a directory <name>.parquet/ of closed
# chunk files part-NNNNNN.parquet, each written under a hidden temporary name and renamed
# when complete: a recorder killed at any moment leaves only readable chunks. A recording
# that ends normally compacts each directory into one file <name>.parquet.

CHUNK_PREFIX = "part-"
#: metadata "status" of a session whose recorder is still running or died before it ended
RECORDING = "recording"


def table_files(session_dir: str, table: str) -> list[str]:
    """The Parquet files holding ``table``, in order: the single file, or the chunks of a
    session recorded in chunks (also those of a compaction cut short)."""
    path = table_path(session_dir, table)
    if os.path.isfile(path):
        return [path]
    for d in (path, os.path.join(session_dir, "." + table + ".parquet.chunks")):
        if os.path.isdir(d):
            return [os.path.join(d, f) for f in sorted(os.listdir(d))
                    if f.startswith(CHUNK_PREFIX) and f.endswith(".parquet")]
    return []


def table_exists(session_dir: str, table: str) -> bool:
    path = table_path(session_dir, table)
    return os.path.exists(path) or os.path.isdir(os.path.join(session_dir, "." + table + ".parquet.chunks"))


def read_arrow(session_dir: str, table: str, schema: pa.Schema,
               columns: list[str] | None = None) -> pa.Table:
    """One table of a session as a single Arrow table, whether stored as one file or as
    chunks; an empty table of ``schema`` when it has no rows yet."""
    import pyarrow as pa

    parts = [_read_file(f, columns) for f in table_files(session_dir, table)]
    if not parts:
        empty = schema.empty_table()
        return empty.select(columns) if columns else empty
    if len(parts) == 1:
        return parts[0]
    return pa.concat_tables(parts, promote_options="default")


#: Files smaller than this are decoded in the calling thread (a thread pool costs more than
#: it saves on a small table, and a fleet of sessions is parallel per session already).
THREADED_READ_BYTES = 8 << 20


def _read_file(path, columns=None):
    """One Parquet file as an Arrow table (``pyarrow.parquet.ParquetFile``: no dataset
    discovery, which dominates the cost of reading a small file)."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as f:
        return f.read(columns=columns, use_threads=os.path.getsize(path) > THREADED_READ_BYTES)


def write_chunk(session_dir: str, table: str, arrow_table: pa.Table, seq: int) -> int:
    """Write one closed chunk of a streamed table (atomic: temporary name, then rename);
    return its size in bytes."""
    import pyarrow.parquet as pq

    d = table_path(session_dir, table)
    os.makedirs(d, exist_ok=True)
    name = f"{CHUNK_PREFIX}{seq:06d}.parquet"
    tmp = os.path.join(d, "." + name + ".tmp")
    try:
        pq.write_table(arrow_table, tmp)
    except OSError:
        _removed_on_error(tmp)
        raise
    size = os.path.getsize(tmp)
    os.replace(tmp, os.path.join(d, name))
    return size


def write_table_atomic(session_dir: str, table: str, arrow_table: pa.Table) -> None:
    """Replace a whole (small) table file atomically, e.g. a snapshot of running totals."""
    import pyarrow.parquet as pq

    path = table_path(session_dir, table)
    tmp = os.path.join(session_dir, "." + table + ".parquet.tmp")
    try:
        pq.write_table(arrow_table, tmp)
    except OSError:
        _removed_on_error(tmp)
        raise
    os.replace(tmp, path)


def compact_table(session_dir: str, table: str, schema: pa.Schema) -> None:
    """Turn a chunked table into the single file <table>.parquet (one row group per chunk,
    one chunk in memory at a time); a crash midway leaves the chunks readable."""
    import shutil

    import pyarrow.parquet as pq

    path = table_path(session_dir, table)
    if not os.path.isdir(path):
        return
    files = table_files(session_dir, table)
    tmp = os.path.join(session_dir, "." + table + ".parquet.tmp")
    try:
        with pq.ParquetWriter(tmp, schema) as w:
            for f in files:
                w.write_table(pq.read_table(f).cast(schema))
            if not files:
                w.write_table(schema.empty_table())
    except OSError:   # the chunks stay, readable as they are
        _removed_on_error(tmp)
        raise
    old = os.path.join(session_dir, "." + table + ".parquet.chunks")
    os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old)


def session_bytes(session_dir: str) -> int:
    """Bytes the session's files take on disk now."""
    total = 0
    for top, _, files in os.walk(session_dir):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(top, f))
            except OSError:
                pass
    return total


def is_incomplete(meta: dict) -> bool:
    """A session whose recorder did not end it (killed, crashed, out of memory, power loss):
    its tables hold what was flushed until ``meta['last_flush']``."""
    return meta.get("status") == RECORDING


# --- collections of sessions (docs/fleet.md) ----------------------------------------------

def _partition_value(text):
    """A host name made safe as one path component of ``host=...``: '/', '=' and whitespace
    become '_'; an empty name becomes 'unknown'."""
    import re

    text = re.sub(r"[/=\s\\]", "_", str(text or "").strip())
    return text or "unknown"


def collected_path(root: str, host: str, when: dt.date | float, name: str) -> str:
    """Where a session belongs in a collection: ``ROOT/host=HOST/date=YYYY-MM-DD/NAME``.

    ``when`` is a ``datetime``/``date`` or seconds since the epoch (the session's start; a
    naive datetime is taken as UTC, an aware one is converted to UTC); ``name`` is the
    session's directory name.  ``jstall record``, ``jstall lab run`` and ``jstall monitor``
    write there with ``--collect-dir ROOT``; ``jstall fleet ROOT`` reads the collection."""
    if isinstance(when, (int, float)):
        day = dt.datetime.fromtimestamp(when, tz=dt.timezone.utc).date()
    elif isinstance(when, dt.datetime):
        day = (when.astimezone(dt.timezone.utc) if when.tzinfo else when).date()
    elif isinstance(when, dt.date):
        day = when
    else:
        raise TypeError(f"when: a datetime, a date or epoch seconds, not {type(when).__name__}")
    if not name or os.sep in name or name in (".", ".."):
        raise JstallError(f"{name!r}: a collected session's name is one directory name")
    return os.path.join(root, f"host={_partition_value(host)}", f"date={day.isoformat()}", name)


def collect_here(root: str, name: str, option: str = "--collect-dir") -> str:
    """The directory for a new session named ``name`` in the collection at ``root``, for this
    host and today (UTC), its ``host=``/``date=`` parents made; ``root`` must be an existing
    directory (a one-line JstallError otherwise)."""
    import datetime as dt
    import socket

    if not os.path.isdir(root):
        raise JstallError(f"{option} {root}: no such directory; create the collection's root first")
    path = collected_path(root, socket.gethostname(), dt.datetime.now(dt.timezone.utc), name)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    except OSError as e:
        raise JstallError(f"{option} {root}: cannot write there ({e.strerror})") from None
    return path


def collected_partitions(path: str) -> dict[str, str]:
    """``{"host": ..., "date": ...}`` from the ``key=value`` components of a collected
    session's path (empty when the path is not in a collection)."""
    out = {}
    for part in str(path).replace("\\", "/").split("/"):
        key, eq, value = part.partition("=")
        if eq and key in ("host", "date") and value:
            out[key] = value
    return out
