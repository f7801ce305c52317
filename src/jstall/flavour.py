"""The kernel's flavour, as Debian builds its kernels: ``rt`` (PREEMPT_RT: stack captures
fail under load), ``cloud`` (ext4/jbd2 built in, no 9p) or ``generic`` (everything else).
Read from /sys/kernel/realtime (1 on a PREEMPT_RT kernel since 5.x), ``uname -v`` (says
PREEMPT_RT) and the release's suffix (``6.1.0-56-rt-amd64``, ``6.6.0-rt15``, ``6.12.117+deb12-cloud-amd64``).
Free of pandas and numpy: the recorder and the analyzer both use it."""

from __future__ import annotations

import os
import re

FLAVOURS = ("generic", "cloud", "rt")

#: how a recording's probes attached the traced calls (ProbeSet.attach_mode), in words
ATTACH_WORDS = {"fentry": "fentry", "syscalls": "syscall tracepoints"}


def flavour(release: str | None, realtime: str | None = None, version: str | None = None) -> str:
    """``rt``, ``cloud`` or ``generic`` from a kernel ``release`` (``uname -r``),
    ``realtime`` (/sys/kernel/realtime's text, or None when absent) and ``version``
    (``uname -v``, or None)."""
    parts = (release or "").replace("+", "-").split("-")
    rt = any(re.fullmatch(r"rt\d*", p) for p in parts[1:])   # -rt-amd64 (Debian), -rt15 (upstream)
    if (realtime or "").strip() == "1" or "PREEMPT_RT" in (version or "") or rt:
        return "rt"
    if "cloud" in parts[1:]:
        return "cloud"
    return "generic"


def running(realtime_path: str = "/sys/kernel/realtime") -> str:
    """The running kernel's flavour."""
    try:
        with open(realtime_path) as f:
            realtime = f.read()
    except OSError:
        realtime = None
    u = os.uname()
    return flavour(u.release, realtime, u.version)


def attach_words(mode: str | None) -> str | None:
    """The attach mode in words (``fentry``, ``syscall tracepoints``), or None unknown."""
    return ATTACH_WORDS.get(mode, mode) if mode else None


#: the first release whose syscall (perf) tracepoints count the runs of a program the kernel
#: skips (trace_call_bpf: recursion_misses); fentry counts its own since 5.12, raw and
#: BTF-typed tracepoints since 6.1, and neither is held off by another tool's map operation
SKIPS_COUNTED = (6, 7)


def uncounted_skips(flavour_: str, version: tuple[int, int] | None, mode: str | None) -> bool:
    """Whether the kernel may skip runs of the probes and count none of them: a PREEMPT_RT
    kernel (a task preempted inside any BPF tool's map operation holds its CPU's
    bpf_prog_active) before 6.7, with the syscall tracepoints (docs/recording.md)."""
    return flavour_ == "rt" and mode == "syscalls" and version is not None and tuple(version) < SKIPS_COUNTED
