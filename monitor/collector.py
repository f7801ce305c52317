"""Prometheus metrics of the monitor: a custom collector that reads the BPF maps and the
tracer's running totals at scrape time (nothing is exported per event).

Labels are bounded: ``device`` (MAJ:MIN of a traced ext4 or XFS), ``head`` (an XFS grant
head), ``op`` (journal_start,
sync_file, xfs_log_reserve, xfs_log_regrant, or a syscall name with --syscalls), ``tail``
(what an XFS log's tail waited for), ``cause`` (the analyzer's taxonomy),
``phase`` (a jbd2 commit phase), ``mode`` (forced or background), ``buffer``, ``program``,
``result``, ``cgroup`` (the --top-writers cgroups of each interval by name, the rest "other").
Never a pid, comm or path.
"""

import collections

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from . import xfslogs
from .tracer import HEADROOM_LOW_WINDOW_S, PHASES, phase_buckets

#: the in-kernel log2 buckets exported as classic ``le`` buckets: bucket i holds latencies in
#: [2^i, 2^(i+1)) ns, so ``le`` = 2^(i+1) ns; from 2^10 ns (1 us) to 2^35 ns (34 s), then +Inf
LE_FIRST, LE_LAST = 9, 34


def log2_buckets(buckets):
    """Cumulative [(le seconds as text, count)] of a log2(ns) histogram, ending with +Inf."""
    total = int(buckets.sum())
    out, cum = [], int(buckets[:LE_FIRST + 1].sum())
    for i in range(LE_FIRST, LE_LAST + 1):
        if i > LE_FIRST:
            cum += int(buckets[i])
        out.append((repr((1 << (i + 1)) / 1e9), cum))
    out.append(("+Inf", total))
    return out


class MonitorCollector:
    """Collects from a ``Tracer`` and a ``Captures`` (or None)."""

    def __init__(self, tracer, captures=None):
        self.tracer = tracer
        self.captures = captures

    def describe(self):
        return []

    def collect(self):
        t = self.tracer
        yield from _op_families(t)

        with t.state_lock:
            stalls = dict(t.stalls)
            stall_s = dict(t.stall_seconds)
            cgroup_stall_s = dict(t.cgroup_stall_seconds)
            in_stalls = {dev: s.checkpoints_in_stalls for dev, s in t.states.items()}
            states = {dev: (s.space(), s.transactions, s.blocks_logged, dict(s.checkpoints),
                            dict(s.checkpoint_written),
                            {p: (s.phase_counts[p].copy(), s.phase_sum_s[p]) for p in PHASES})
                      for dev, s in t.states.items()}
            flight_dropped = t.flight_dropped
        yield from _stall_families(stalls, stall_s, cgroup_stall_s)
        yield from _journal_families(states, in_stalls)
        yield from _writer_families(t)
        with t.state_lock:
            waits = {dev: ({h: c.copy() for h, c in x.wait_counts.items()}, dict(x.wait_sum_s), dict(x.tail_s),
                           x.sleeps)
                     for dev, x in t.xfs_states.items()}
        yield from xfslogs.collect(xfslogs.xfs_logs(t.journals), waits)

        yield from _process_families(t, flight_dropped)

        if self.captures is not None:
            yield from _capture_families(self.captures)


def _op_families(t):
    """Latency histograms and error counts per device and operation."""
    lat = HistogramMetricFamily("jstall_op_latency_seconds",
                                "Latency of traced operations: journal_start is the handle wait "
                                "(ext4_journal_start* to jbd2_handle_start), sync_file is ext4_sync_file; "
                                "syscall names with --syscalls.", labels=["device", "op"])
    errors = CounterMetricFamily("jstall_op_errors", "Traced operations that returned an error.",
                                 labels=["device", "op"])
    for (op, dev), (count, errs, total_ns, _max_ns, buckets) in sorted(t.call_stats().items()):
        lat.add_metric([dev, op], log2_buckets(buckets), total_ns / 1e9)
        errors.add_metric([dev, op], errs)
    yield lat
    yield errors


def _stall_families(stalls, stall_s, cgroup_stall_s):
    """Stalls and their off-CPU seconds by cause, and the seconds by the stalled task's cgroup."""
    c = CounterMetricFamily("jstall_stalls", "Operations at or above the stall threshold, by primary cause "
                            "(the largest off-CPU share, the analyzer's taxonomy).",
                            labels=["device", "op", "cause"])
    for (dev, op, cause), n in sorted(stalls.items()):
        c.add_metric([dev, op, cause], n)
    yield c
    c = CounterMetricFamily("jstall_stall_seconds", "Off-CPU time inside stalled operations, by cause.",
                            labels=["device", "cause"])
    for (dev, cause), v in sorted(stall_s.items()):
        c.add_metric([dev, cause], v)
    yield c
    c = CounterMetricFamily("jstall_cgroup_stall_seconds", "Off-CPU time inside stalled operations, by the "
                            "stalled task's cgroup (the cgroups that stalled most per device and interval by "
                            "name, the rest as other; read every 2 s).", labels=["device", "cgroup"])
    for (dev, cg), v in sorted(cgroup_stall_s.items()):
        c.add_metric([dev, cg], v)
    yield c


def _journal_families(states, in_stalls):
    """Each journal's fill, transactions, checkpoints and commit phases (``states``: a
    snapshot taken under the tracer's lock)."""
    gauges = {
        "size_blocks": ("jstall_journal_size_blocks", "Journal size in blocks (j_total_len)."),
        "free_blocks": ("jstall_journal_free_blocks", "Free journal blocks (j_free) at the latest sample."),
        "log_space_left_blocks": ("jstall_journal_log_space_left_blocks",
                                  "jbd2_log_space_left(): j_free - 32 - the committing transaction's credits."),
        "headroom_blocks": ("jstall_journal_headroom_blocks",
                            "Log space left above j_max_transaction_buffers; "
                            "below 0 a new handle must checkpoint."),
        "headroom_ratio": ("jstall_journal_headroom_ratio",
                           "Headroom to the forced-checkpoint condition, 1 for an empty journal, 0 at it."),
        "headroom_low_ratio": ("jstall_journal_headroom_low_ratio",
                               f"The lowest headroom ratio of the journal's fill samples in the last "
                               f"{HEADROOM_LOW_WINDOW_S} seconds (a scrape sees each dip to the "
                               "forced-checkpoint condition)."),
        "max_transaction_blocks": ("jstall_journal_max_transaction_blocks",
                                   "j_max_transaction_buffers: the largest transaction, in blocks."),
    }
    fams = {k: GaugeMetricFamily(n, h, labels=["device"]) for k, (n, h) in gauges.items()}
    tx = CounterMetricFamily("jstall_journal_transactions", "Transactions committed (jbd2_run_stats).",
                             labels=["device"])
    logged = CounterMetricFamily("jstall_journal_blocks_logged", "Blocks written to the log by commits.",
                                 labels=["device"])
    cps = CounterMetricFamily("jstall_journal_checkpoints", "Checkpoints (jbd2_checkpoint): forced ones run in "
                              "a task waiting for log space, background ones in jbd2.", labels=["device", "mode"])
    cps_stall = CounterMetricFamily("jstall_journal_checkpoints_in_stalls",
                                    "Forced checkpoints that ran in an operation at or above the stall threshold "
                                    "(the rest of the forced ones cost less).", labels=["device"])
    cpw = CounterMetricFamily("jstall_journal_checkpoint_written_blocks",
                              "Blocks written home by checkpoints (jbd2_checkpoint_stats).",
                              labels=["device", "mode"])
    phase = HistogramMetricFamily("jstall_journal_commit_phase_seconds",
                                  "Duration of each commit phase (jbd2_run_stats, jiffy resolution).",
                                  labels=["device", "phase"])
    for dev, (space, ntx, nlog, cp, cpwr, ph) in sorted(states.items()):
        for k, fam in fams.items():
            if space:
                fam.add_metric([dev], space[k])
        tx.add_metric([dev], ntx)
        logged.add_metric([dev], nlog)
        cps_stall.add_metric([dev], in_stalls.get(dev, 0))
        for mode in ("forced", "background"):
            cps.add_metric([dev, mode], cp[mode])
            cpw.add_metric([dev, mode], cpwr[mode])
        for p, (counts, total) in ph.items():
            phase.add_metric([dev, p], phase_buckets(counts), total)
    yield from fams.values()
    yield from (tx, logged, cps, cps_stall, cpw, phase)


def _writer_families(t):
    """What each cgroup logged, per journal or XFS log."""
    with t.state_lock:
        writers = dict(t.logged)
    by = {"blocks": CounterMetricFamily(
              "jstall_journal_logged_blocks",
              "Blocks the journal handles of each cgroup dirtied (jbd2_handle_stats; "
              "the top writers per journal and interval by name, the rest as other).",
              labels=["device", "cgroup"]),
          "bytes": CounterMetricFamily(
              "jstall_journal_logged_bytes", "XFS log bytes the transaction tickets of each cgroup used (the top "
              "writers per log and interval by name, the rest as other).", labels=["device", "cgroup"])}
    for (dev, kind, cg), v in sorted(writers.items()):
        by[kind].add_metric([dev, cg], v)
    yield from by.values()


def _process_families(t, flight_dropped):
    """The monitor's own costs: lost events, its CPU time, its BPF programs' run time."""
    lost = CounterMetricFamily("jstall_events_lost", "Records the probes could not hand over (ring buffer "
                               "full, stack table full), runs of its programs the kernel skipped (skipped: another BPF "
                               "program active on the CPU) and flight-buffer records dropped over its bound.",
                               labels=["buffer"])
    for k, v in sorted(t.events_lost().items()):
        lost.add_metric([k], v)
    lost.add_metric(["flight"], flight_dropped)
    yield lost

    yield CounterMetricFamily("jstall_monitor_cpu_seconds", "CPU time of the monitor process (user + system).",
                              value=t.cpu_seconds())
    run = CounterMetricFamily("jstall_bpf_run_seconds", "Time the monitor's BPF programs ran (BPF_ENABLE_STATS), "
                              "measured while statistics are on (--bpf-stats, a share of each 10 s) and scaled "
                              "to the whole time.", labels=["program"])
    runs = CounterMetricFamily("jstall_bpf_runs", "Runs of the monitor's BPF programs (measured and scaled as "
                               "jstall_bpf_run_seconds).", labels=["program"])
    for name, (secs, n) in sorted(t.bpf_run().items()):
        run.add_metric([name], secs)
        runs.add_metric([name], n)
    yield run
    yield runs


def _capture_families(captures):
    """Stall-triggered captures by result, and the disk they take."""
    caps = CounterMetricFamily("jstall_captures", "Stall-triggered captures: written, rate_limited "
                               "(a trigger inside the minimum interval or during a capture), rotated "
                               "(removed by --max-captures or --max-disk), failed.", labels=["result"])
    for k, v in sorted(captures.counts.items()):
        caps.add_metric([k], v)
    yield caps
    yield GaugeMetricFamily("jstall_capture_disk_bytes", "Bytes the captures on disk take.",
                            value=captures.disk_bytes)


def scrape_counts(registry):
    """{metric name: samples} of one collection (for tests and the benchmark)."""
    out = collections.Counter()
    for fam in registry.collect():
        out[fam.name] += len(fam.samples)
    return out
