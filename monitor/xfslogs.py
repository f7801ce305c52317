"""The monitor's XFS logs: each traced XFS's log size, space left on its grant heads and
the kernel's own log counters (/sys/fs/xfs/<name>/stats/stats and log/*), read at scrape
time by the collector, and the log-space waits its probes timed (tracer.XfsLogState). They
follow jbd2's naming (``jstall_journal_*``) as ``jstall_xfs_log_*``; a scrape reads two small
sysfs files per log.
"""

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from jstall import kinds, xfs

from .tracer import phase_buckets

#: (metric, help, stats member) of the counters exported from stats/stats
COUNTERS = (
    ("jstall_xfs_log_reservations", "Log space reservations (xs_try_logspace: xfs_log_reserve and xfs_log_regrant).",
     "xs_try_logspace"),
    ("jstall_xfs_log_space_sleeps", "Sleeps of reservations waiting for log space (xs_sleep_logspace: each pass of "
     "xlog_grant_head_wait); any increase is a task that stalled until xfsaild moved the log's tail.",
     "xs_sleep_logspace"),
    ("jstall_xfs_log_forces", "Log forces (xs_log_force).", "xs_log_force"),
    ("jstall_xfs_log_writes", "In-core log buffers written to the log (xs_log_writes).", "xs_log_writes"),
    ("jstall_xfs_log_iclog_waits", "Waits for a free in-core log buffer (xs_log_noiclogs).", "xs_log_noiclogs"),
)
#: AIL items by what a push found them (the push_ail line), as the ``result`` label
AIL_RESULTS = (("success", "xs_push_ail_success"), ("pinned", "xs_push_ail_pinned"),
               ("locked", "xs_push_ail_locked"), ("flushing", "xs_push_ail_flushing"))


def xfs_logs(journals):
    """{dev: (sysfs name, log bytes)} of the XFS logs among journal descriptions."""
    return {dev: (j["xfs_name"], j.get("log_bytes")) for dev, j in journals.items() if kinds.is_xfs(j)}


def collect(logs, waits=None):
    """Metric families of ``logs`` ({dev: (sysfs name, log bytes)}); a log whose files are gone
    (unmounted) is left out. ``waits``: {dev: ({head: counts per bucket}, {head: seconds},
    {tail reason: seconds}, sleeps)} of the waits timed so far (over PHASE_BUCKETS_S)."""
    size = GaugeMetricFamily("jstall_xfs_log_size_bytes", "XFS log size (xfs_info: the kernel's l_logsize).",
                             labels=["device"])
    left = GaugeMetricFamily("jstall_xfs_log_space_left_bytes",
                             "Space left on a grant head (xlog_grant_space_left; since 6.11 the tail space is "
                             "estimated from the tail and head LSNs, which errs low): below what a transaction "
                             "needs, its reservation sleeps.", labels=["device", "head"])
    ratio = GaugeMetricFamily("jstall_xfs_log_headroom_ratio",
                              "Space left on the reserve head over the log's size: 1 for an empty log.",
                              labels=["device"])
    counters = [CounterMetricFamily(n, h, labels=["device"]) for n, h, _ in COUNTERS]
    written = CounterMetricFamily("jstall_xfs_log_written_bytes", "Bytes written to the log (xs_log_blocks x 512).",
                                  labels=["device"])
    ail = CounterMetricFamily("jstall_xfs_ail_pushed_items", "AIL items xfsaild tried to push, by what it found "
                              "(pinned: waiting for a log force; locked; flushing: already being written).",
                              labels=["device", "result"])
    for dev, (name, log_bytes) in sorted(logs.items()):
        stats = xfs.read_stats(name)
        if stats is None:
            continue
        if log_bytes:
            size.add_metric([dev], log_bytes)
            state = xfs.read_log_state(name)
            if state and xfs.log_state_kind(state):
                for head in xfs.HEADS:
                    left.add_metric([dev, head], xfs.log_state_space_left(state, log_bytes, head))
                ratio.add_metric([dev], xfs.log_state_space_left(state, log_bytes) / log_bytes)
        for fam, (_, _, member) in zip(counters, COUNTERS):
            fam.add_metric([dev], xfs.counter(stats, member, 0))
        written.add_metric([dev], xfs.counter(stats, "xs_log_blocks", 0) * xfs.BBSIZE)
        for result, member in AIL_RESULTS:
            ail.add_metric([dev, result], xfs.counter(stats, member, 0))
    wait = HistogramMetricFamily("jstall_xfs_log_wait_seconds",
                                 "Log-space waits of reservations, from their first sleep in xlog_grant_head_wait "
                                 "to the reservation's exit (xfs_log_grant_sleep to xfs_log_*_exit), by grant head.",
                                 labels=["device", "head"])
    tail = CounterMetricFamily("jstall_xfs_log_tail_wait_seconds",
                               "Seconds of log-space waits by what the log's tail waited for meanwhile (the AIL's "
                               "most frequent event: metadata_writeback, log_force, lock_contention; with none, "
                               "log_write when the log's own writes completed; else unknown).",
                               labels=["device", "tail"])
    slept = CounterMetricFamily("jstall_xfs_log_wait_sleeps", "Sleeps in xlog_grant_head_wait inside the timed waits: "
                                "while every waiting task is traced, the increase of "
                                "jstall_xfs_log_space_sleeps_total.", labels=["device"])
    for dev, (counts, sums, tails, sleeps) in sorted((waits or {}).items()):
        slept.add_metric([dev], sleeps)
        for head, c in counts.items():
            wait.add_metric([dev, head], phase_buckets(c), sums[head])
        for reason, v in tails.items():
            tail.add_metric([dev, reason], v)
    return [size, left, ratio, *counters, written, ail, wait, tail, slept]
