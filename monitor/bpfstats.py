"""The kernel's run-time statistics of BPF programs, for the monitor's own cost.

``BPF_ENABLE_STATS`` turns on run_time_ns/run_cnt accounting for as long as the returned
file descriptor is open (nothing persists after the monitor exits, unlike the
kernel.bpf_stats_enabled sysctl); bpfsys.prog_info reads a program's totals.
"""

import os
import time

from jstall.probes import bpfsys


def enable():
    """A descriptor that keeps BPF run-time statistics on, or None where unsupported."""
    return bpfsys.enable_stats()


def disable(fd):
    if fd is not None:
        os.close(fd)


def prog_run(prog_fd):
    """(run seconds, runs) of a loaded program, or None."""
    info = bpfsys.prog_info(prog_fd)
    return None if info is None else (info["run_time_ns"] / 1e9, info["run_cnt"])


def run_totals(bpf):
    """{program name: (run seconds, runs)} of a bcc BPF object's loaded programs (counted only
    while statistics are on)."""
    out = {}
    for name, fn in list(bpf.funcs.items()):
        info = prog_run(fn.fd)
        if info:
            out[name.decode() if isinstance(name, bytes) else name] = info
    return out


class Sampler:
    """BPF run time measured in windows: statistics on for ``duty`` of every ``period_s``.

    Statistics cost every run of every BPF program on the host two clock reads (the kernel's
    ``bpf_stats_enabled_key`` in __bpf_prog_run), so an always-on monitor keeps them on only
    part of the time and scales each window's run time to its whole period: an estimate of
    the run time, exact when ``duty`` is 1. ``duty`` 0: never on, nothing measured.

        s = Sampler(bpf, duty=0.1); ...; s.tick(now_ns) each poll; s.totals(); s.close()
    """

    def __init__(self, bpf, duty=0.1, period_s=10.0):
        self.bpf = bpf
        self.duty = min(1.0, max(0.0, duty))
        self.period_ns = int(period_s * 1e9)
        self.fd = None
        self.estimated = {}          # program -> [run seconds, runs], scaled to the time covered
        self.sampled_s = 0.0         # seconds statistics were on
        self._base = None
        self._on_ns = self._cycle_ns = 0
        if self.duty >= 1.0:
            self._open(time.monotonic_ns())

    def _open(self, now):
        self.fd = enable()
        if self.fd is not None:
            self._base, self._on_ns = run_totals(self.bpf), now

    def _close_window(self, now, scale):
        totals = run_totals(self.bpf)
        for name, (secs, runs) in totals.items():
            s0, r0 = self._base.get(name, (0.0, 0))
            e = self.estimated.setdefault(name, [0.0, 0])
            e[0] += (secs - s0) * scale
            e[1] += int(round((runs - r0) * scale))
        self.sampled_s += (now - self._on_ns) / 1e9
        self._base = totals
        self._on_ns = now

    def tick(self, now=None):
        """Open or close a window as the period goes (call often: each poll)."""
        if self.duty <= 0.0:
            return
        now = time.monotonic_ns() if now is None else now
        if self.duty >= 1.0:
            if self.fd is not None and now - self._on_ns >= 1e9:
                self._close_window(now, 1.0)
            return
        if self.fd is None and now - self._cycle_ns >= self.period_ns:
            self._cycle_ns = now
            self._open(now)
        elif self.fd is not None and now - self._on_ns >= self.duty * self.period_ns:
            # the window stands for the whole period it opened (scaled by period / window)
            self._close_window(now, self.period_ns / max(1, now - self._on_ns))
            disable(self.fd)
            self.fd = None

    def totals(self):
        """{program: (run seconds, runs)}: the estimate so far."""
        return {k: (v[0], v[1]) for k, v in list(self.estimated.items())}   # read by the scrape thread

    def close(self):
        if self.fd is not None and self.duty >= 1.0:
            self._close_window(time.monotonic_ns(), 1.0)
        disable(self.fd)
        self.fd = None
