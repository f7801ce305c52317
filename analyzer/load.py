"""Load a session directory into typed pandas DataFrames, one per event kind.

``load_session(path)`` checks the metadata (format, schema version, every table present; see
``jstall.session.read_metadata``), reads every Parquet table, checks that it holds the
columns of docs/session-format.md with castable types, and returns a :class:`Session`.

Types after loading: ``*_ns``, ``*_jiffies``, ``*_blocks`` and other integer columns are
``int64`` (``int32`` for ``tid``, ``pid``, ``handles``, ``stack_id``, ``bucket``); integer columns
the format allows to be null (``transaction`` in jbd2_events, the journal fill columns,
``result``, ...) are pandas ``Int64``; strings are pandas strings; ``runnable`` and
``jbd2_thread`` are ``bool``; ``stacks.frames`` holds one array of function names per row,
innermost first.  Times stay in monotonic nanoseconds.
"""

import os

from jstall import schema
from jstall.errors import JstallError
from jstall.session import TABLES, read_metadata, table_path


class Session:
    """A loaded session: ``meta`` (the metadata dict), ``path``, and one DataFrame per table
    as attributes (``calls``, ``offcpu``, ``stacks``, ``jbd2_events``, ``run_stats``, ...)."""

    def __init__(self, path, meta, tables):
        self.path = path
        self.meta = meta
        self.tables = tables
        self._lab_tables = {}
        for name, df in tables.items():
            if name in schema.LAB_TABLES:
                self._lab_tables[name] = df
            else:
                setattr(self, name, df)

    @property
    def hz(self):
        """The kernel's HZ: jbd2 statistics count time in jiffies of 1/hz s."""
        return self.meta["hz"]

    @property
    def start_ns(self):
        """Monotonic ns of the session start (or the first event when metadata lacks it)."""
        return _clock(self.meta, "start")

    @property
    def end_ns(self):
        return _clock(self.meta, "end")

    @property
    def journals(self):
        """The metadata's list of traced journals (dicts), possibly empty."""
        return self.meta.get("journals") or []

    @property
    def device_stats(self):
        """What each emulated device of a lab run served per sampling interval (read on first
        use; empty for a session ``jstall record`` wrote). See docs/session-format.md."""
        if "device_stats" not in self._lab_tables:
            self._lab_tables["device_stats"] = _read_or_empty(self.path, "device_stats")
        return self._lab_tables["device_stats"]

    @property
    def name(self):
        return os.path.basename(os.path.normpath(self.path))

    def __repr__(self):
        rows = ", ".join(f"{n}={len(df)}" for n, df in self.tables.items())
        return f"<Session {self.path}: {rows}>"


def _clock(meta, key):
    v = (meta.get(key) or {}).get("monotonic_ns")
    return int(v) if isinstance(v, (int, float)) else None


def _check_meta(path, meta):
    hz = meta.get("hz")
    if not isinstance(hz, int) or hz <= 0:
        raise JstallError(f"{path}: metadata has no valid 'hz'; the session is corrupt, record it again")
    journals = meta.get("journals")
    if journals is not None and not isinstance(journals, list):
        raise JstallError(f"{path}: metadata 'journals' is not a list; the session is corrupt, record it again")
    for j in journals or []:
        if not isinstance(j, dict) or not isinstance(j.get("dev"), str):
            raise JstallError(f"{path}: a metadata journal entry has no 'dev'; the session is corrupt, record it again")


def read_table(session_dir, table, columns=None):
    """Read one table of a session as a typed DataFrame (see the module docstring)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = table_path(session_dir, table)
    try:
        t = pq.read_table(path, columns=columns)
    except Exception as e:  # pyarrow raises several types for damaged files
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise JstallError(f"{path}: unreadable table ({msg}); the session is corrupt, record it again") from None
    spec = [c for c in schema.COLUMNS[table] if columns is None or c[0] in columns]
    for n, typ, _ in spec:
        if n in schema.OPTIONAL and n not in t.column_names:
            t = t.append_column(n, pa.nulls(len(t), type=typ))
    missing = [n for n, _, _ in spec if n not in t.column_names]
    if missing:
        raise JstallError(
            f"{path}: missing columns {', '.join(missing)}; the session is corrupt or from another jstall, record it again"
        )
    arrays, names = [], []
    for n, typ, nullable in spec:
        col = t.column(n)
        if not col.type.equals(typ):
            try:
                col = col.cast(typ)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise JstallError(
                    f"{path}: column {n} has type {col.type}, expected {typ}; the session is corrupt, record it again"
                ) from None
        if not nullable and col.null_count and n != "comm":
            raise JstallError(f"{path}: column {n} has nulls; the session is corrupt, record it again")
        arrays.append(col)
        names.append(n)
    t = pa.table(arrays, names=names)
    df = t.to_pandas(split_blocks=True, self_destruct=True)
    for n in schema.nullable_int_columns(table):
        if n in df.columns and df[n].dtype != "Int64":
            df[n] = df[n].astype("Int64")
    return df


def load_session(path, tables=None):
    """Load the session at ``path``; raise JstallError when it is missing, truncated, corrupt
    or newer than this jstall.  ``tables`` restricts which tables are read (default: all)."""
    path = os.fspath(path)
    meta = read_metadata(path)
    _check_meta(path, meta)
    names = TABLES if tables is None else tuple(tables)
    return Session(path, meta, {name: _read_or_empty(path, name) for name in names})


def _read_or_empty(path, table):
    """A lab table (schema.LAB_TABLES) is absent from sessions ``jstall record`` wrote: empty."""
    if table in schema.LAB_TABLES and not (path and os.path.exists(table_path(path, table))):
        return empty_table(table)
    return read_table(path, table)


def empty_table(table):
    """A DataFrame with a table's columns and types and no rows."""
    df = schema.SCHEMAS[table].empty_table().to_pandas()
    for n in schema.nullable_int_columns(table):
        df[n] = df[n].astype("Int64")
    return df
