"""The JSON documents jstall writes beside its tables, defined once (docs/session-format.md,
docs/lab.md): a session's metadata and its journals, the lab's metadata of one run (its
configuration and one record per phase), and a lab sweep's ``sweep.json``.

Writers build these dataclasses and write ``to_dict()``; readers take ``from_dict()`` and use
the fields by their names. The JSON keys are the field names (what the documents always held).
Stdlib only: the probes, the lab and the analyzer all import it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import typing

from .errors import JstallError

if typing.TYPE_CHECKING:
    import pandas as pd

# ---- a session's metadata.json ---------------------------------------------------------------

#: metadata.json "format" of a session
SESSION_FORMAT = "jstall-session"
#: the session format's version (tables and metadata); a reader refuses a newer one
SESSION_SCHEMA_VERSION = 1
METADATA_FILE = "metadata.json"


@dataclasses.dataclass
class JournalDoc:
    """One traced journal in a session's ``journals`` list (written by probes/filesystems.describe,
    read back from `dumpe2fs -h` and the mount table). Sizes in filesystem blocks of
    ``block_size`` bytes; ``dev`` and ``journal_device`` are 'MAJ:MIN'."""

    dev: str
    device: str
    mountpoint: str
    mount_options: str
    block_size: int
    inode_size: int
    features: list
    journal_features: list
    journal_blocks: typing.Optional[int]
    fast_commit_blocks: int
    #: j_max_transaction_buffers, read from journal_t by the probes (None until then)
    max_transaction_blocks: typing.Optional[int]
    journal_device: typing.Optional[str]
    fast_commit: bool
    #: the /proc/fs/jbd2/<name> directory, and its info file at the start and end
    proc_info_name: typing.Optional[str]
    proc_info_start: typing.Optional[str] = None
    proc_info_end: typing.Optional[str] = None
    #: the device's largest request (queue/max_sectors_kb)
    max_request_kib: typing.Optional[int] = None
    #: the memory segments one request takes at most (queue/max_segments): a log write of
    #: buffers in separate pages carries at most this many
    max_segments: typing.Optional[int] = None
    #: the journal's kind: "jbd2" (ext4; absent in sessions written before XFS) or "xfs"
    kind: str = "jbd2"
    #: XFS: the log's size in bytes (the kernel's l_logsize) and block size, the
    #: /sys/fs/xfs/<xfs_name> directory, and its stats/stats counters at the start and end
    log_bytes: typing.Optional[int] = None
    log_block_size: typing.Optional[int] = None
    xfs_name: typing.Optional[str] = None
    #: XFS: the data section's bytes, one allocation group's, and the bytes free when the
    #: recording began (statvfs): the room a larger internal log would take
    data_bytes: typing.Optional[int] = None
    ag_bytes: typing.Optional[int] = None
    free_bytes: typing.Optional[int] = None
    xfs_stats_start: typing.Optional[dict] = None
    xfs_stats_end: typing.Optional[dict] = None


@dataclasses.dataclass
class SessionDoc:
    """A session's metadata.json, for a recording (probes/recorder.py, written at its start and
    rewritten at every flush and at its end) and a monitor capture (monitor/capture.py) alike:
    both build it with ``session_doc`` (probes/session_metadata.py), the one place its common
    fields are filled. Times: ``start``/``end``/``last_flush`` are ``clock()`` readings
    ({'wall', 'wall_ns', 'monotonic_ns'}); ``min_ms`` in milliseconds, ``offcpu_min_us`` in
    microseconds; ``events_lost`` {kind: count}; ``journals`` [JournalDoc as dict]; ``rows``
    {table: rows written}; ``cgroups`` {cgroup id: path}; ``lab`` (a lab run only) a LabDoc as
    dict; ``capture`` (a monitor capture only) what triggered it."""

    format: str
    schema_version: int
    tool_version: str
    status: str
    kernel_release: str
    host: str
    hz: typing.Optional[int]
    start: dict
    end: dict
    command: typing.Optional[list]
    command_exit_status: typing.Optional[int]
    filters: dict
    min_ms: float
    probes: dict
    events_lost: dict
    stacks_lost: int
    journals: list
    stop_reason: typing.Optional[str] = None
    #: the kernel's flavour (jstall.flavour: "generic", "cloud", "rt")
    kernel_flavour: typing.Optional[str] = None
    #: the recording's own process (its tasks are never the workload's)
    recorder_pid: typing.Optional[int] = None
    hz_source: typing.Optional[str] = None
    hz_measured: typing.Optional[float] = None
    writeback: typing.Optional[dict] = None
    last_flush: typing.Optional[dict] = None
    offcpu_min_us: typing.Optional[float] = None
    max_size_bytes: typing.Optional[int] = None
    traced_calls: list = dataclasses.field(default_factory=list)
    calls_without_device: dict = dataclasses.field(default_factory=dict)
    offcpu_without_stack: int = 0
    rows: dict = dataclasses.field(default_factory=dict)
    cgroups: dict = dataclasses.field(default_factory=dict)
    lab: typing.Optional[dict] = None
    capture: typing.Optional[dict] = None

    def to_dict(self) -> dict:
        """The metadata.json document: every field, but ``lab`` and ``capture`` only when set."""
        d = dataclasses.asdict(self)
        for key in ("lab", "capture"):
            if d[key] is None:
                del d[key]
        return d


def check_session(meta: dict, session_dir: str, path: str) -> dict:
    """The loader's checks of a session's metadata (read from ``path``): raise JstallError
    naming what is wrong, else return meta. Tables are checked by the caller."""
    if not isinstance(meta, dict) or meta.get("format") != SESSION_FORMAT:
        raise JstallError(f"{session_dir}: not a jstall session (metadata format is not '{SESSION_FORMAT}')")
    version = meta.get("schema_version")
    if not isinstance(version, int):
        raise JstallError(f"{path}: no schema_version; the session is corrupt, record it again")
    if version > SESSION_SCHEMA_VERSION:
        raise JstallError(f"{session_dir}: schema version {version} is newer than this jstall reads "
                          f"({SESSION_SCHEMA_VERSION}); upgrade jstall")
    return meta


# ---- a lab run's metadata (metadata["lab"], or lab.json unrecorded) ----------------------------

#: the lab metadata's ``lab_version``
LAB_VERSION = 1
#: the lab metadata of an unrecorded run (no session to hold it)
LAB_FILE = "lab.json"


def _num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclasses.dataclass
class PhaseRecord:
    """One timed phase of a lab run (docs/lab.md). Times: ``start_ns``, ``returned_ns`` (the
    jobs returned) and ``end_ns`` (the work durable: syncfs returned and the emulated device
    idle) on CLOCK_MONOTONIC, the session's clock; ``start_wall``/``end_wall`` Unix seconds;
    ``returned_s`` and ``durable_s`` seconds from the start to each (``seconds`` = durable_s).
    Counts: ``ops`` (in ``unit``), ``files``, ``dirs``, ``attrs``, ``bytes``. ``rates``:
    every ``<what>_per_s`` field, per durable second, in the order written: ``rate_per_s``
    (ops), then the phase's own (``dirs_per_s``, ``files_per_s``) and ``kib_per_s``.
    ``device``: {role: requests the emulated device served}; ``extra``: a pattern's own
    fields (e.g. the command pattern's ``exit_statuses``)."""

    name: str
    unit: str = None
    start_ns: int = None
    returned_ns: int = None
    end_ns: int = None
    start_wall: float = None
    end_wall: float = None
    returned_s: float = None
    durable_s: float = None
    seconds: float = None
    ops: int = 0
    files: int = 0
    dirs: int = 0
    attrs: int = 0
    bytes: int = 0
    jobs: int = None
    per_job_ops: list = None
    device: dict = None
    rates: dict = dataclasses.field(default_factory=dict)
    extra: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def measured(cls, name: str, unit: str | None, start: int, returned: int, end: int, wall0: float, wall1: float,
                 counts: list[dict], device: dict | None = None) -> PhaseRecord:
        """The record of a phase run as ``len(counts)`` jobs (each a dict of counts) from
        ``start`` until ``returned`` (jobs returned) and ``end`` (durable), monotonic ns."""
        secs = (end - start) / 1e9
        tot = {k: sum(int(c.get(k, 0)) for c in counts) for k in ("ops", "files", "dirs", "attrs", "bytes")}

        def rate(n):
            return n / secs if secs > 0 else None

        rates = {"rate_per_s": rate(tot["ops"])}
        # Per-unit rates only for the phase's own unit (and KiB/s where file data moved), so that
        # the phase's own rate is the first per-unit one (see main_rate).
        if unit == "dirs":
            rates["dirs_per_s"] = rate(tot["dirs"])
        if unit == "files":
            rates["files_per_s"] = rate(tot["files"])
            if tot["bytes"] and name not in ("create", "remove", "file_remove"):
                rates["kib_per_s"] = rate(tot["bytes"] / 1024)
        return cls(name=name, unit=unit, start_ns=start, returned_ns=returned, end_ns=end, start_wall=wall0,
                   end_wall=wall1, returned_s=(returned - start) / 1e9, durable_s=secs, seconds=secs, **tot,
                   jobs=len(counts), per_job_ops=[int(c.get("ops", 0)) for c in counts], device=device,
                   rates=rates)

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("rates", "extra")}
        if self.device is None:
            del d["device"]
        return {**d, **self.rates, **self.extra}

    @classmethod
    def from_dict(cls, d: dict) -> PhaseRecord:
        """A phase record as written (fields missing from older or hand-made records default)."""
        names = {f.name for f in dataclasses.fields(cls)} - {"rates", "extra"}
        known = {k: v for k, v in d.items() if k in names}
        rates = {k: v for k, v in d.items() if k.endswith("_per_s") and k not in names}
        extra = {k: v for k, v in d.items() if k not in names and k not in rates}
        return cls(**known, rates=rates, extra=extra)

    @property
    def durable(self) -> float | None:
        """Seconds until the phase's work was durable (``durable_s``, or ``seconds``)."""
        return self.durable_s if _num(self.durable_s) else self.seconds if _num(self.seconds) else None

    def main_rate(self) -> str | None:
        """The name of the phase's main rate: ``<unit>_per_s`` (e.g. files_per_s) when the
        record has it, else the first numeric rate (``rate_per_s``: ops per second)."""
        own = f"{self.unit}_per_s"
        if _num(self.rates.get(own)):
            return own
        return next((k for k, v in self.rates.items() if _num(v)), None)

    def rate_name(self) -> str | None:
        """What main_rate() counts, as '<what>_per_s': the unit's own rate, or for
        ``rate_per_s`` (ops) the unit the ops are counted in (e.g. setxattr_per_s)."""
        rk = self.main_rate()
        if rk == "rate_per_s" and isinstance(self.unit, str):
            return f"{self.unit}_per_s"
        return rk

    def device_writes(self) -> int | None:
        """Write requests the emulated devices served in the phase (merged ones included), or None."""
        if not self.device:
            return None
        return sum(d["write_ios"] + d["write_merges"] for d in self.device.values())


@dataclasses.dataclass
class LabConfigRecord:
    """The lab metadata's ``config``: the filesystem configuration (FsConfig.as_dict()), the
    pattern with its jobs and seed, and the pattern's parameters, as one flat mapping."""

    fs: dict
    pattern: str
    jobs: int
    seed: int
    params: dict

    def to_dict(self) -> dict:
        return {**self.fs, "pattern": self.pattern, "jobs": self.jobs, "seed": self.seed, **self.params}


@dataclasses.dataclass
class LabDoc:
    """The lab metadata of one run (metadata["lab"] of its session; lab.json unrecorded). See
    docs/lab.md for every field. ``phases``: [PhaseRecord]; ``start``/``end``:
    {'monotonic_ns', 'wall'}; ``seconds``/``returned_seconds``: the phases' durable and
    returned seconds summed; ``extra``: fields a caller or the pattern adds (a sweep's
    ``sweep``, the command pattern's ``command_exit_statuses``)."""

    status: str
    pattern: str
    params: dict
    jobs: int
    seed: int
    config: dict
    phases: list = dataclasses.field(default_factory=list)
    census: dict = None
    lab_version: int = LAB_VERSION
    dumpe2fs: dict = None
    filesystem: dict = None
    start: dict = None
    end: dict = None
    seconds: float = None
    returned_seconds: float = None
    error: str = None
    device_served: dict = None
    device_interval_s: float = None
    device_stats: list = None
    extra: dict = dataclasses.field(default_factory=dict)

    #: fields written only once known (absent from the document until then)
    _LATE = ("dumpe2fs", "filesystem", "start", "end", "seconds", "returned_seconds", "error", "device_served",
             "device_interval_s", "device_stats")

    def to_dict(self) -> dict:
        d = {"lab_version": self.lab_version, "status": self.status, "pattern": self.pattern, "params": self.params,
             "jobs": self.jobs, "seed": self.seed, "config": self.config,
             "phases": [p.to_dict() for p in self.phases], "census": self.census}
        d.update({k: getattr(self, k) for k in self._LATE if getattr(self, k) is not None})
        d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> LabDoc:
        names = {f.name for f in dataclasses.fields(cls)} - {"extra", "phases"}
        known = {k: v for k, v in d.items() if k in names}
        extra = {k: v for k, v in d.items() if k not in names and k != "phases"}
        known.setdefault("status", None)
        for k in ("pattern", "params", "jobs", "seed", "config"):
            known.setdefault(k, None)
        phases = [PhaseRecord.from_dict(p) for p in d.get("phases") or [] if isinstance(p, dict) and "name" in p]
        return cls(**known, phases=phases, extra=extra)

    def totals(self) -> tuple[float, float]:
        """(durable seconds, returned seconds) of all phases."""
        return sum(p.seconds for p in self.phases), sum(p.returned_s for p in self.phases)


def lab_of(meta: typing.Optional[dict]) -> "typing.Optional[LabDoc]":
    """The LabDoc of a session's metadata (meta["lab"]) or of a lab.json document, or None."""
    lab = meta.get("lab", meta) if isinstance(meta, dict) and meta.get("format") == SESSION_FORMAT else meta
    return LabDoc.from_dict(lab) if isinstance(lab, dict) and lab else None


# ---- a lab sweep's sweep.json -----------------------------------------------------------------

SWEEP_FORMAT = "jstall-sweep"
SWEEP_VERSION = 1
SWEEP_FILE = "sweep.json"
#: the file a lab tune directory holds beside its runs' sessions
TUNE_FILE = "tune.json"


@dataclasses.dataclass
class SweepRun:
    """One run of a sweep: its directory name, repeat number (from 1) and swept option values
    (as given: {dest: text})."""

    run: str
    repeat: int
    options: dict


@dataclasses.dataclass
class SweepDoc:
    """A sweep directory's sweep.json (written first by `jstall lab sweep`). ``options``: the
    swept options {dest: [values as given]} (the axes); ``base``: options with one value
    {dest: text}; ``runs``: [SweepRun]; ``created``: Unix time of the first start."""

    options: dict
    pattern: str = None
    base: dict = dataclasses.field(default_factory=dict)
    repeat: int = 1
    record: bool = True
    min_ms: float = None
    runs: list = dataclasses.field(default_factory=list)
    created: float = None
    format: str = SWEEP_FORMAT
    version: int = SWEEP_VERSION

    #: the fields that make two sweep.json the same sweep (a resumed one must match)
    IDENTITY = ("format", "pattern", "options", "base", "repeat", "record", "min_ms")

    @property
    def swept(self) -> list[str]:
        """The swept options' names, in order."""
        return list(self.options)

    def to_dict(self) -> dict:
        return {"format": self.format, "version": self.version, "pattern": self.pattern, "options": self.options,
                "base": self.base, "repeat": self.repeat, "record": self.record, "min_ms": self.min_ms,
                "runs": [dataclasses.asdict(r) for r in self.runs], "created": self.created}

    def same_sweep(self, other: SweepDoc) -> bool:
        return all(getattr(self, k) == getattr(other, k) for k in self.IDENTITY)

    @classmethod
    def from_dict(cls, d: dict, where: str = "sweep.json") -> SweepDoc:
        """Check and read a sweep.json document: a mapping whose ``options`` is a mapping, of
        this format (when it names one) and no newer version."""
        if not isinstance(d, dict) or not isinstance(d.get("options", {}), dict):
            raise JstallError(f"{where}: not a sweep document (no options mapping); run the sweep again")
        if d.get("format", SWEEP_FORMAT) != SWEEP_FORMAT:
            raise JstallError(f"{where}: format '{d.get('format')}' is not '{SWEEP_FORMAT}'; not a lab sweep")
        if isinstance(d.get("version"), int) and d["version"] > SWEEP_VERSION:
            raise JstallError(f"{where}: sweep version {d['version']} is newer than this jstall reads "
                              f"({SWEEP_VERSION}); upgrade jstall")
        names = {f.name for f in dataclasses.fields(cls)}
        known = {k: v for k, v in d.items() if k in names and k != "runs"}
        known.setdefault("options", {})
        runs = [SweepRun(r["run"], r["repeat"], r.get("options", {})) for r in d.get("runs") or []]
        return cls(**known, runs=runs)

    @classmethod
    def load(cls, sweep_dir: str) -> SweepDoc:
        """The sweep.json of a sweep directory; JstallError when unreadable."""
        path = os.path.join(sweep_dir, SWEEP_FILE)
        try:
            with open(path) as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            raise JstallError(f"{sweep_dir}: unreadable {SWEEP_FILE} ({e}); run the sweep again to resume it") from None
        return cls.from_dict(d, where=path)

    def write(self, sweep_dir: str) -> None:
        """Write sweep.json atomically."""
        path = os.path.join(sweep_dir, SWEEP_FILE)
        with open(path + ".tmp", "w") as f:
            json.dump(self.to_dict(), f, indent=2)
            f.write("\n")
        os.replace(path + ".tmp", path)


# ---- the summary of a sweep, shared by the lab and the analyzer ----------------------------------


def mean_sd(table: "pd.DataFrame", by: typing.Iterable[str],
            measures: typing.Iterable[str]) -> "pd.DataFrame":
    """Per combination of the ``by`` columns (in order of appearance): ``runs`` (rows),
    ``<measure>_mean`` and ``<measure>_sd`` (sample standard deviation, ddof=1; 0 for a
    single row). With no ``by`` columns, one row over the whole table. ``table``: a pandas
    DataFrame, one row per run."""
    import pandas as pd

    by, measures = list(by), list(measures)
    if not by:
        return pd.DataFrame([{"runs": len(table), **{f"{m}_mean": table[m].mean() for m in measures},
                              **{f"{m}_sd": (table[m].std(ddof=1) if len(table) > 1 else 0.0) for m in measures}}])
    g = table.groupby(by, sort=False)
    return pd.concat([g.size().rename("runs"), g[measures].mean().add_suffix("_mean"),
                      g[measures].std(ddof=1).fillna(0.0).add_suffix("_sd")], axis=1).reset_index()
