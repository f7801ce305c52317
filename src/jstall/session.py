"""The session directory's names and its metadata file (docs/session-format.md).

Shared by the recorder, which writes sessions, and the analyzer, which reads them;
it needs neither BPF nor pandas.
"""

import json
import os

from .errors import JstallError

FORMAT = "jstall-session"
SCHEMA_VERSION = 1
METADATA_FILE = "metadata.json"

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
)

#: The journal fill columns read from journal_t (see the format document).
FILL_COLUMNS = (
    "free_blocks",
    "head_block",
    "tail_block",
    "first_block",
    "last_block",
    "journal_blocks",
    "max_transaction_blocks",
    "running_transaction",
    "committing_transaction",
    "committing_credits",
)

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


def table_path(session_dir, table):
    return os.path.join(session_dir, table + ".parquet")


def write_metadata(session_dir, metadata):
    """Write metadata.json atomically; it is the last file of a session written."""
    path = os.path.join(session_dir, METADATA_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(metadata, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def read_metadata(session_dir):
    """Read and check a session's metadata; raise JstallError naming what is wrong."""
    if not os.path.isdir(session_dir):
        raise JstallError(f"{session_dir}: no such session directory (record one with 'jstall record -o DIR')")
    path = os.path.join(session_dir, METADATA_FILE)
    if not os.path.exists(path):
        raise JstallError(
            f"{session_dir}: no {METADATA_FILE}; not a jstall session, or its recording did not finish (record it again)"
        )
    try:
        with open(path) as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        raise JstallError(f"{path}: unreadable metadata ({e}); the session is corrupt, record it again") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise JstallError(f"{session_dir}: not a jstall session (metadata format is not '{FORMAT}')")
    version = meta.get("schema_version")
    if not isinstance(version, int):
        raise JstallError(f"{path}: no schema_version; the session is corrupt, record it again")
    if version > SCHEMA_VERSION:
        raise JstallError(
            f"{session_dir}: schema version {version} is newer than this jstall reads ({SCHEMA_VERSION}); upgrade jstall"
        )
    missing = [t for t in TABLES if not os.path.exists(table_path(session_dir, t))]
    if missing:
        raise JstallError(f"{session_dir}: missing tables {', '.join(missing)}; the session is truncated, record it again")
    return meta


def is_sweep_dir(path):
    """A lab sweep directory holds sweep.json and one session per run."""
    return os.path.isfile(os.path.join(path, "sweep.json"))


# --- collections of sessions (docs/fleet.md) ----------------------------------------------

def _partition_value(text):
    """A host name made safe as one path component of ``host=...``: '/', '=' and whitespace
    become '_'; an empty name becomes 'unknown'."""
    import re

    text = re.sub(r"[/=\s\\]", "_", str(text or "").strip())
    return text or "unknown"


def collected_path(root, host, when, name):
    """Where a session belongs in a collection: ``ROOT/host=HOST/date=YYYY-MM-DD/NAME``.

    ``when`` is a ``datetime``/``date`` or seconds since the epoch (the session's start; a
    naive datetime is taken as UTC, an aware one is converted to UTC); ``name`` is the
    session's directory name.  ``jstall record``, ``jstall lab run`` and ``jstall monitor``
    write there with ``--collect-dir ROOT``; ``jstall fleet ROOT`` reads the collection."""
    import datetime as dt

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


def collected_partitions(path):
    """``{"host": ..., "date": ...}`` from the ``key=value`` components of a collected
    session's path (empty when the path is not in a collection)."""
    out = {}
    for part in str(path).replace("\\", "/").split("/"):
        key, eq, value = part.partition("=")
        if eq and key in ("host", "date") and value:
            out[key] = value
    return out
