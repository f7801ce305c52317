"""A session's metadata.json (docs/session-format.md; a jstall.metadata.SessionDoc), built here
for a recording and a monitor capture alike: what was traced, how, on which journals, and what
was lost.
Times: ``start``/``end``/``last_flush`` are clock() readings; ``min_ms`` milliseconds,
``offcpu_min_us`` microseconds."""

import datetime
import os
import socket
import time

from jstall import __version__, cgroups, flavour
from jstall.metadata import SessionDoc
from jstall.session import FORMAT, SCHEMA_VERSION

from . import host
from .probeset import XATTR_FILES_MAX


def clock():
    """Now, as the metadata stores a time: ISO 8601 UTC, Unix ns and CLOCK_MONOTONIC ns."""
    return {
        "wall": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "wall_ns": time.time_ns(),
        "monotonic_ns": time.monotonic_ns(),
    }


def clock_at(monotonic_ns):
    """A past (or future) CLOCK_MONOTONIC time as the metadata stores a time: its wall time is
    now's, moved by the same interval."""
    wall_ns = time.time_ns() - (time.monotonic_ns() - monotonic_ns)
    return {"wall": datetime.datetime.fromtimestamp(wall_ns / 1e9, datetime.timezone.utc).isoformat(),
            "wall_ns": wall_ns, "monotonic_ns": monotonic_ns}


def session_doc(*, status, start, end, probes, filters, min_ms, events_lost, stacks_lost, journals, **fields):
    """The SessionDoc of a recording or a capture: what every session's metadata holds about
    the tool, the kernel and the host filled here, once; the rest from the writer (``fields``:
    any other SessionDoc field)."""
    return SessionDoc(format=FORMAT, schema_version=SCHEMA_VERSION, tool_version=__version__, status=status,
                      kernel_release=os.uname().release, kernel_flavour=flavour.running(),
                      host=fields.pop("host", None) or socket.gethostname(), recorder_pid=os.getpid(),
                      hz=fields.pop("hz", None), start=start, end=end, command=fields.pop("command", None),
                      command_exit_status=fields.pop("command_exit_status", None), filters=filters, min_ms=min_ms,
                      probes=probes, events_lost=events_lost, stacks_lost=stacks_lost, journals=journals,
                      writeback=host.writeback_settings(), **fields)


def session_metadata(rec, status, end_clock, traced, measured, lost, stacks_lost):
    """metadata.json of recorder ``rec`` as of ``end_clock``. ``traced``: {dev: journal
    description} of the journals recorded; ``measured``: host.measured_hz() over the
    recording, or None; ``lost``: {ring buffer: events lost}; ``stacks_lost``: stack ids
    the probes could not store."""
    p = rec.probes
    return session_doc(
        status=status, start=rec.start_clock, end=end_clock,
        probes={"attached": p.attached, "missing": p.missing,
                "syscalls": sorted(p.syscall_numbers), "attach": p.attach_mode,
                "attach_note": p.attach_note, "calls_unavailable": p.calls_unavailable,
                "btf_typed": p.btf_typed, "btf_refused": p.btf_refused,
                "xattr_files_max": XATTR_FILES_MAX if p.xattr_files_noted else None},
        filters={"devices": rec.devices, "pid": rec.opts.pid, "cgroup": rec.opts.cgroup,
                 "cgroup_id": p.cgroup_id, "command_tree": bool(rec.opts.command_tree)},
        min_ms=rec.opts.min_ms, events_lost=lost, stacks_lost=stacks_lost, journals=list(traced.values()),
        stop_reason=rec.stop_reason, hz=rec.hz, hz_source=rec.hz_source,
        hz_measured=round(measured[1], 1) if measured else None, last_flush=rec.last_flush,
        command=getattr(rec, "command", None), command_exit_status=getattr(rec, "exit_status", None),
        offcpu_min_us=rec.opts.offcpu_min_us, max_size_bytes=rec.opts.max_size_bytes,
        traced_calls=sorted(p.syscall_numbers), calls_without_device=rec.calls_without_device,
        offcpu_without_stack=rec.offcpu_without_stack, rows=dict(rec.rows), cgroups=rec.cgroups,
    ).to_dict()


def cgroup_paths(ids):
    """{cgroup id: path under the cgroup v2 mount} for the ids the calls and writers carry."""
    return cgroups.paths_of(ids)
