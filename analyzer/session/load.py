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

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from jstall import schema
from jstall.errors import JstallError
from jstall.session import TABLES, is_incomplete, read_arrow, read_metadata, table_path

if TYPE_CHECKING:
    import pandas as pd  # for the annotations only: pandas loads when a table is read


class Session:
    """A loaded session: ``meta`` (the metadata dict), ``path``, and one DataFrame per table
    as attributes (``calls``, ``offcpu``, ``stacks``, ``jbd2_events``, ``run_stats``, ...).
    ``window_ns``: ``(from_ns, to_ns)`` when the tables were restricted to a time window
    (window.restrict), else None; ``whole``: then the unrestricted session, else None."""

    window_ns = None
    whole = None

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
    def hz(self) -> int:
        """The kernel's HZ: jbd2 statistics count time in jiffies of 1/hz s."""
        return self.meta["hz"]

    @property
    def start_ns(self) -> int:
        """Monotonic ns of the session start (or the first event when metadata lacks it)."""
        return _clock(self.meta, "start")

    @property
    def end_ns(self) -> int:
        """Monotonic ns of the session end; for an incomplete session, of its last flush."""
        end = _clock(self.meta, "end")
        return end if end is not None else _clock(self.meta, "last_flush")

    @property
    def incomplete(self) -> bool:
        """True when the recorder never ended the session (killed, crashed, power loss): the
        tables hold what it flushed up to ``recorded_until``."""
        return is_incomplete(self.meta)

    @property
    def recorded_until(self) -> str | None:
        """Wall-clock time (ISO 8601, UTC) up to which the tables are complete: the session
        end, or for an incomplete session its last flush."""
        key = "last_flush" if self.incomplete else "end"
        return (self.meta.get(key) or {}).get("wall")

    @property
    def journals(self) -> list:
        """The metadata's list of traced journals (dicts), possibly empty."""
        return self.meta.get("journals") or []

    @property
    def device_stats(self) -> pd.DataFrame:
        """What each emulated device of a lab run served per sampling interval (read on first
        use; empty for a session ``jstall record`` wrote). See docs/session-format.md."""
        if "device_stats" not in self._lab_tables:
            self._lab_tables["device_stats"] = _read_or_empty(self.path, "device_stats")
        return self._lab_tables["device_stats"]

    @property
    def name(self) -> str:
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
    _check_meta_types(path, meta)


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


#: Optional metadata keys and the shape each must have when present and not null.
_META_SHAPES = {
    "status": (lambda v: isinstance(v, str), "a string"),
    "command": (lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v), "a list of strings"),
    "command_exit_status": (_is_int, "an integer"),
    "filters": (lambda v: isinstance(v, dict), "an object"),
    "probes": (lambda v: isinstance(v, dict) and (v.get("syscalls") is None or isinstance(v["syscalls"], list)),
               "an object whose 'syscalls' is a list"),
    "min_ms": (_is_num, "a number"),
    "events_lost": (lambda v: isinstance(v, dict) and all(_is_int(n) and n >= 0 for n in v.values()),
                    "an object of counts"),
    "stacks_lost": (lambda v: _is_int(v) and v >= 0, "a count"),
}
for _key in ("start", "end"):
    _META_SHAPES[_key] = (lambda v: isinstance(v, dict) and all(_is_int(v[k]) for k in ("wall_ns", "monotonic_ns")
                                                               if v.get(k) is not None),
                          "a clock object with integer 'wall_ns' and 'monotonic_ns'")
del _key


def _check_meta_types(path, meta):
    """Refuse metadata whose optional keys have the wrong shape (the analysis reads them)."""
    for key, (ok, what) in _META_SHAPES.items():
        v = meta.get(key)
        if v is not None and not ok(v):
            raise JstallError(f"{path}: metadata '{key}' is not {what}; the session is corrupt, record it again")


def read_table(session_dir: str, table: str, columns: list[str] | None = None) -> pd.DataFrame:
    """Read one table of a session as a typed DataFrame (see the module docstring)."""
    import pandas as pd
    import pyarrow as pa

    path = table_path(session_dir, table)
    try:
        t = read_arrow(session_dir, table, schema.SCHEMAS[table], columns=columns)
    except Exception as e:  # pyarrow raises several types for damaged files
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise JstallError(f"{path}: unreadable table ({msg}); the session is corrupt, record it again") from None
    spec = [c for c in schema.COLUMNS[table] if columns is None or c[0] in columns]
    if [f.name for f in t.schema] != [n for n, _, _ in spec] or \
            not all(f.type.equals(typ) for f, (_, typ, _) in zip(t.schema, spec)):
        t = _conform(path, t, spec)  # older files, optional columns absent, other types: cast
    for n, _, nullable in spec:
        if not nullable and n != "comm" and t.column(n).null_count:
            raise JstallError(f"{path}: column {n} has nulls; the session is corrupt, record it again")
    nullable_ints = [n for n in schema.nullable_int_columns(table) if columns is None or n in columns]
    cols = {n: t.column(n).cast(pa.int64()) for n in nullable_ints}
    df = t.to_pandas(split_blocks=True, self_destruct=True)
    del t
    for n, col in cols.items():  # straight from Arrow: no float64 round trip
        df[n] = pd.Int64Dtype().__from_arrow__(col)
    return df


def _conform(path, t, spec):
    """``t`` with the columns of ``spec`` in order and of its types: absent optional columns
    added as nulls, castable types cast; a JstallError naming the column otherwise."""
    import pyarrow as pa

    for n, typ, _ in spec:
        if n in schema.OPTIONAL and n not in t.column_names:
            t = t.append_column(n, pa.nulls(len(t), type=typ))
    missing = [n for n, _, _ in spec if n not in t.column_names]
    if missing:
        raise JstallError(
            f"{path}: missing columns {', '.join(missing)}; the session is corrupt or from another jstall, "
            "record it again"
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
        arrays.append(col)
        names.append(n)
    return pa.table(arrays, names=names)


def load_session(path: str | os.PathLike, tables: Iterable[str] | None = None) -> Session:
    """Load the session at ``path``; raise JstallError when it is missing, truncated, corrupt
    or newer than this jstall.  ``tables`` restricts which tables are read (default: all)."""
    path = os.fspath(path)
    check_path(path)
    meta = read_metadata(path)
    _check_meta(path, meta)
    names = TABLES if tables is None else tuple(tables)
    return Session(path, meta, {name: _read_or_empty(path, name) for name in names})


def _read_or_empty(path, table):
    """A lab table (schema.LAB_TABLES) is absent from sessions ``jstall record`` wrote, a later
    one (schema.LATER_TABLES) from sessions written before it: empty."""
    optional = table in schema.LAB_TABLES or table in schema.LATER_TABLES
    if optional and not (path and os.path.exists(table_path(path, table))):
        return empty_table(table)
    return read_table(path, table)


def empty_table(table: str) -> pd.DataFrame:
    """A DataFrame with a table's columns and types and no rows."""
    df = schema.SCHEMAS[table].empty_table().to_pandas()
    for n in schema.nullable_int_columns(table):
        df[n] = df[n].astype("Int64")
    return df


def check_path(path: str) -> None:
    """Refuse, with one line naming the fix, a session path that is missing, not a directory,
    or not readable by this user (the directory or any file in it)."""
    if not os.path.lexists(path):
        raise JstallError(f"{path}: no such session directory (record one with 'jstall record -o DIR')")
    if not os.path.isdir(path):
        raise JstallError(f"{path}: not a session directory (give the directory 'jstall record -o DIR' wrote)")
    denied = f"{path}: permission denied; run as a user who can read the session (e.g. with sudo)"
    if not os.access(path, os.R_OK | os.X_OK):
        raise JstallError(denied)
    try:
        names = os.listdir(path)
    except OSError as e:
        raise JstallError(f"{path}: cannot list the session directory ({e.strerror})") from None
    for name in names:
        p = os.path.join(path, name)
        if os.path.isfile(p) and not os.access(p, os.R_OK):
            raise JstallError(f"{p}: permission denied; run as a user who can read the session (e.g. with sudo)")
