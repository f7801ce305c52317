"""A recorded session's metadata.json (docs/session-format.md; the fields are
jstall.metadata.SessionDoc's): what was traced, how, on which journals, and what was lost.
Times: ``start``/``end``/``last_flush`` are clock() readings; ``min_ms`` milliseconds,
``offcpu_min_us`` microseconds."""

import datetime
import os
import socket
import time

from jstall import __version__, cgroups
from jstall.session import FORMAT, SCHEMA_VERSION

from . import host


def clock():
    """Now, as the metadata stores a time: ISO 8601 UTC, Unix ns and CLOCK_MONOTONIC ns."""
    return {
        "wall": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "wall_ns": time.time_ns(),
        "monotonic_ns": time.monotonic_ns(),
    }


def session_metadata(rec, status, end_clock, traced, measured, lost, stacks_lost):
    """metadata.json of recorder ``rec`` as of ``end_clock``. ``traced``: {dev: journal
    description} of the journals recorded; ``measured``: host.measured_hz() over the
    recording, or None; ``lost``: {ring buffer: events lost}; ``stacks_lost``: stack ids
    the probes could not store."""
    p = rec.probes
    return {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "tool_version": __version__,
        "status": status,
        "stop_reason": rec.stop_reason,
        "kernel_release": os.uname().release,
        "host": socket.gethostname(),
        "hz": rec.hz,
        "hz_source": rec.hz_source,
        "hz_measured": round(measured[1], 1) if measured else None,
        "writeback": host.writeback_settings(),
        "start": rec.start_clock,
        "end": end_clock,
        "last_flush": rec.last_flush,
        "command": getattr(rec, "command", None),
        "command_exit_status": getattr(rec, "exit_status", None),
        "filters": {
            "devices": rec.devices,
            "pid": rec.opts.pid,
            "cgroup": rec.opts.cgroup,
            "cgroup_id": p.cgroup_id,
            "command_tree": bool(rec.opts.command_tree),
        },
        "min_ms": rec.opts.min_ms,
        "offcpu_min_us": rec.opts.offcpu_min_us,
        "max_size_bytes": rec.opts.max_size_bytes,
        "probes": {"attached": p.attached, "missing": p.missing,
                   "syscalls": sorted(p.syscall_numbers), "attach": p.attach_mode,
                   "attach_note": p.attach_note, "calls_unavailable": p.calls_unavailable,
                   "btf_typed": p.btf_typed, "btf_refused": p.btf_refused},
        "traced_calls": sorted(p.syscall_numbers),
        "calls_without_device": rec.calls_without_device,
        "events_lost": lost,
        "stacks_lost": stacks_lost,
        "offcpu_without_stack": rec.offcpu_without_stack,
        "rows": dict(rec.rows),
        "cgroups": rec.cgroups,
        "journals": list(traced.values()),
    }


def cgroup_paths(ids):
    """{cgroup id: path under the cgroup v2 mount} for the ids the calls and writers carry."""
    return cgroups.paths_of(ids)
