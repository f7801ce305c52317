"""Readable summaries of an analysis (what ``jstall analyze`` prints), read from its
summary (summary.Summary) and tables."""

from __future__ import annotations

import math
import shlex
import textwrap
from typing import TYPE_CHECKING

from jstall import enough
from jstall.flavour import attach_words

from jstall.analyzer.advice.remedies import verdict_lines
from jstall.analyzer.session import devices
from jstall.analyzer.session.recording import filters_text
from jstall.analyzer.summary import json_safe
from jstall.analyzer.xfs.logs import TAIL_REASONS

if TYPE_CHECKING:
    from jstall.analyzer.analysis import Analysis
    from jstall.analyzer.summary import Summary


def text_table(headers: list[str], rows: list[list], align: list[str] | None = None) -> str:
    """A plain text table: ``headers`` list, ``rows`` list of lists of str."""
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h))
              for i, h in enumerate(headers)]
    align = align or ["<"] + [">"] * (len(headers) - 1)
    fmt = "  ".join(f"{{:{a}{w}}}" for a, w in zip(align, widths))
    lines = [fmt.format(*headers).rstrip()]
    lines += [fmt.format(*[str(c) for c in r]).rstrip() for r in rows]
    return "\n".join(lines)


def _f(v, fmt="{:.1f}", none="-"):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return none
    return fmt.format(v)


def call_label(syscall: str, context: object = None) -> str:
    """A stall's call as the tables print it: a journal handle wait outside the traced calls
    (syscall journal_start) by what its task was doing, 'mknodat (wait)'."""
    if syscall == "journal_start" and isinstance(context, str) and context:
        return f"{context} (wait)"
    return syscall


def session_summary(analysis: Analysis, top: int = 10) -> str:
    """The text summary: header, warnings, stall totals by cause, top stalls, journals,
    slowest calls, recommendations (read from ``analysis.summary``)."""
    su = analysis.summary
    out = header_lines(su)
    out[1:1] = verdict_lines(json_safe(analysis.verdict))
    out += _lab_lines(su)
    out += warning_lines(su)
    out += _stall_total_lines(su)
    out += _checkpoint_cost_lines(su)
    if su.stalls.count:
        out += _stall_table_lines(analysis, top)
    out += _journal_lines(su)
    out += xfs_log_lines(su)
    out += writer_lines(su)
    out += _device_lines(su)
    out += _call_lines(su)
    out += _recommendation_lines(analysis)
    return "\n".join(out) + "\n"


def _lab_lines(su):
    """The lab run's configuration, when the session came from the lab."""
    out = []
    lab = su.session.lab
    if lab and isinstance(lab.get("config"), dict):
        cfg = lab["config"]
        keys = [k for k in ("pattern", "journal_size", "inode_size", "device_profile", "fs_size") if k in cfg]
        out.append("lab: " + ", ".join(f"{k}={cfg[k]}" for k in keys))
    return out


def _stall_total_lines(su):
    """The stalls in one paragraph: how many, how long, forced, queued behind
    other tasks, through kernel workers, during another task's checkpoint; or why none."""
    out = []
    st = su.stalls
    out.append("")
    if not st.count and su.untraced_checkpoints:
        out.append(f"No stalls in the traced calls (none took {su.min_ms:g} ms or more); but the kernel forced "
                   "checkpoints outside them (see the warning above).")
    elif not st.count and any(x["waits"] for x in su.xfs_logs):
        n = sum(x["waits"] for x in su.xfs_logs)
        ms = sum(x["wait_ms"] for x in su.xfs_logs)
        longest = max(x["longest_wait_ms"] for x in su.xfs_logs)
        out.append(f"No call took {su.min_ms:g} ms or more; but {n} XFS log reservation{'s' * (n != 1)} waited for "
                   f"log space, {ms:,.0f} ms in all, the longest {longest:,.1f} ms (see XFS logs below).")
    elif not st.count:
        out.append(f"No stalls: no call took {su.min_ms:g} ms or more.")
    else:
        parts = []
        if su.journals or not su.xfs_logs:
            parts.append(f"{st.forced.count} forced to wait for log space (jbd2_log_space_left() below "
                         f"j_max_transaction_buffers, then __jbd2_log_wait_for_space); {st.own_checkpoint} "
                         "checkpointed in their own task")
        if su.xfs_logs:
            n = st.by_cause["log_space"].count
            parts.append(f"{n} waited for XFS log space most of all (xlog_grant_head_wait)")
        out.append(f"{st.count} stalls (calls >= {su.min_ms:g} ms): {st.total_ms:.0f} ms in all, "
                   f"worst {st.max_ms:.1f} ms; " + "; ".join(parts) + ".")
        if st.queued.count:
            pct = 100 * st.queued.total_ms / st.offcpu_ms if st.offcpu_ms else 0
            who = ", ".join(f"{task} {ms:,.0f} ms" for task, ms in st.queued_behind.items())
            out.append(f"{st.queued.total_ms:,.0f} ms of the stall time ({pct:.0f}% of it off CPU) queued behind other "
                       f"tasks that held what the call needed (a lock) while they stalled, in {st.queued.count} "
                       f"stall{'s' * (st.queued.count != 1)}; direct {st.offcpu_ms - st.queued.total_ms:,.0f} ms. "
                       f"Behind: {who}.")
        if st.through_worker.count:
            pct = 100 * st.through_worker.total_ms / st.offcpu_ms if st.offcpu_ms else 0
            who = ", ".join(f"{task} {ms:,.0f} ms" for task, ms in st.workers.items())
            n = st.through_worker.count
            out.append(f"{st.through_worker.total_ms:,.0f} ms of the stall time ({pct:.0f}% of it off CPU) "
                       "waited for kernel workers (__flush_work, a completion, a lock the worker held), in "
                       f"{n} stall{'s' * (n != 1)}; each took the cause of what its worker waited on meanwhile, "
                       f"or workqueue where the worker's records name none. Workers: {who}.")
        if st.during_checkpoint.count:
            who = ", ".join(f"{task} {ms:,.0f} ms" for task, ms in st.checkpointers.items())
            n = st.during_checkpoint.count
            out.append(f"{st.during_checkpoint.total_ms:,.0f} ms of waits on the device's queue "
                       "(data_writeback, commit_wait, device_flush) ran while another task's "
                       f"checkpoint wrote home on the same device, in {n} stall{'s' * (n != 1)} "
                       f"(their cause unchanged). Checkpointing: {who}.")
    return out


def _checkpoint_cost_lines(su):
    """The forced checkpoints: in stalls, negligible, outside the recording."""
    out = []
    cc = su.checkpoint_costs
    if cc["forced"]:
        line = (f"{cc['forced']} forced checkpoint{'s' * (cc['forced'] != 1)}: {cc['expensive']} ran in stalls "
                f"(>= {su.min_ms:g} ms; {cc['expensive_wait_ms']:.0f} ms of waits, "
                f"{cc['expensive_written_blocks']:,} blocks written home)")
        if cc["negligible"]:
            line += (f", {cc['negligible']} negligible (< {su.min_ms:g} ms; "
                     f"{cc['negligible_written_blocks_mean']:.0f} blocks written home each on average)")
        if cc["outside"]:
            line += f", {cc['outside']} in tasks outside the recording"
        out.append(line + ".")
    return out


def _stall_table_lines(analysis, top):
    """Stall time by cause, the top stalls and the processes that stalled."""
    su = analysis.summary
    st = su.stalls
    out = []
    rows = []
    for c, bc in st.by_cause.items():
        if bc.count or bc.total_ms:
            pct = 100 * bc.total_ms / st.total_ms if st.total_ms else 0
            rows.append([c, bc.count, f"{bc.total_ms:.1f}", f"{pct:.1f}"])
    rows.append(["(on CPU, unattributed)", "", f"{st.oncpu_ms:.1f}",
                 f"{100 * st.oncpu_ms / st.total_ms:.1f}" if st.total_ms else "0.0"])
    out.append("")
    out.append("stall time by cause (count: stalls with that primary cause; ms: off-CPU time in it)")
    out.append(text_table(["cause", "stalls", "ms", "% of stall time"], rows))
    out.append("")
    out.append(f"top {min(top, st.count)} stalls")
    tops = analysis.top_stalls(top)
    rows = [[_clock(r), r.comm, r.pid, call_label(r.syscall, r.context), f"{r.latency_ms:.1f}", r.dev or "-",
             r.cause,
             _f(r.headroom_start_pct), _f(r.min_headroom_pct), "yes" if r.forced else "", r.cause_label[:48]]
            for r in tops]
    out.append(text_table([_clock_heading(tops), "comm", "pid", "call", "ms", "dev", "cause", "headroom%", "low%",
                           "forced", "blocked in"], rows, ["<", "<", ">", "<", ">", "<", "<", ">", ">", "<", "<"]))
    if su.journals or not su.xfs_logs:
        out.append("headroom: log space left (j_free - 32 - committing credits) minus j_max_transaction_buffers, "
                   "in % of the log, at the call's start and its low; below 0 handles must wait for space")
    if su.xfs_logs:
        out.append("headroom (XFS): the grant head's space left minus what the transaction's ticket needs, in % "
                   "of the log, at the call's first log-space wait and its lowest; below 0 the reservation sleeps")
    out += process_lines(su, top)
    return out


def _journal_lines(su):
    """The journals table, and each journal's size verdict and /proc/fs/jbd2 agreement."""
    out = []
    if su.journals:
        out.append("")
        out.append("journals")
        rows = []
        for j in su.journals:
            ph = j.avg_phase_ms
            rows.append([j.dev, _f(j.journal_mib, "{:g}"), j.transactions,
                         _f(j.avg_handles_per_transaction), _f(j.avg_blocks_per_transaction),
                         _f(j.avg_logged_blocks_per_transaction), _f(ph["running"]), _f(ph["locked"]),
                         _f(ph["flushing"]), _f(ph["logging"]), _f(j.log_rate_blocks_per_s, "{:.0f}"),
                         j.forced_checkpoints, j.background_checkpoints, _f(j.max_fill_pct),
                         _f(j.forced_fill_pct)])
        out.append(text_table(["dev", "MiB", "txns", "handles/t", "blocks/t", "logged/t", "run ms", "lock ms",
                               "flush ms", "log ms", "blocks/s", "forced cp", "bg cp", "max fill%", "forced at%"],
                              rows))
        for j in su.journals:
            if j.enough:
                e = enough.judge(j.enough["wait_ms"], j.enough["longest_ms"], j.enough["run_ms"])
                out.append(f"{j.dev}: journal {e.describe()} (bound: {enough.BOUND})")
            pa = j.proc_agreement
            if pa:
                bad = [m["metric"] for m in pa["metrics"] if m["status"] == "disagree"]
                und = [m["metric"] for m in pa["metrics"] if m["status"] == "undetermined"]
                tol = (f"tolerance per transaction: one jiffy ({pa['jiffy_ms']:g} ms at HZ {pa['hz']}) for times, "
                       "1 for counts, or the since-mount averages' rounding if wider, +1%")
                out.append(f"{j.dev}: /proc/fs/jbd2 agreement: "
                           + ("all figures agree" if not bad and not und else
                              "; ".join(x for x in ("disagree on " + ", ".join(bad) if bad else "",
                                                    "too coarse to check " + ", ".join(und) if und else "") if x))
                           + f" ({tol})")
    return out


def _device_lines(su):
    """The devices under the filesystems, as sampled while recording."""
    out = []
    if su.devices:
        out.append("")
        out.append("devices (each device's /sys/block stat under the filesystems, sampled while recording; "
                   "busy: time with a request in flight)")
        out += devices.device_lines(su.devices)
    return out


def _call_lines(su):
    """Latency per traced call (the 12 with the most time)."""
    out = []
    if su.calls:
        out.append("")
        out.append("calls (all traced calls; p50 below the recording threshold is from log2 histograms"
                   + ("; the whole session, not the window)" if su.window else ")"))
        tc = su.traced_groups
        if tc:
            out.append("traced: " + (", ".join(tc["groups"]) + " groups" if tc["groups"] else "")
                       + ("; " if tc["groups"] else "") + f"{len(tc['calls'])} calls"
                       + ("" if "write" in tc["groups"] else " (write family not traced: jstall record --calls "
                                                              "metadata,fsync,write)"))
        rows = [[c.syscall, c.count, c.errors, _f(c.p50_ms, "{:.3f}"), _f(c.p99_ms, "{:.3f}"),
                 _f(c.max_ms, "{:.1f}"), _f(c.total_ms, "{:.0f}")] for c in su.calls[:12]]
        out.append(text_table(["call", "count", "errors", "p50 ms", "p99 ms", "max ms", "total ms"], rows))
    return out


def _recommendation_lines(analysis):
    """The diagnosis and recommendations, one line each."""
    out = []
    if analysis.recommendations:
        out.append("")
        out.append("diagnosis and recommendations")
        for r in analysis.recommendations:
            out.append(f"- [{r.kind}] {r.text}")
    return out

# --- what was recorded, how whole it is, who stalled (the console view) ----------------------

def _hms(iso):
    """ISO 8601 -> ``HH:MM:SS.mmm`` (the time of day it names)."""
    return iso[11:23] if iso else None


def _clock(stall):
    """A top stall's start (summary.TopStall): wall clock ``HH:MM:SS.mmm`` with seconds since
    the start."""
    hms = _hms(stall.wall)
    return f"{hms} +{stall.t_s:.3f}" if hms else f"{stall.t_s:.3f}"


def _clock_heading(tops):
    return "time (+s)" if any(t.wall for t in tops) else "t s"


def _quote(arg):
    return shlex.quote(str(arg))


def header_lines(su: Summary) -> list[str]:
    """The summary's first lines (from a summary.Summary): the session, when it ran (wall
    clock), the traced command and its exit status, the filters, the traced calls, the status
    and the window."""
    s = su.session
    kernel = (f"kernel {s.kernel_release}{f' ({s.kernel_flavour})' if s.kernel_flavour else ''}, HZ {s.hz}"
              + (f"; probes on {attach_words(s.attach)}" if s.attach else ""))
    out = [f"session {s.path}: {s.duration_s:.1f} s on {s.host} ({kernel})" if not su.window else
           f"session {s.path} on {s.host} ({kernel})"]
    if s.start and s.end:
        zone = s.start[26:]
        zone = "UTC" if zone in ("", "+00:00") else f"UTC{zone}"
        line = (f"recorded {s.start[:10]} {_hms(s.start)} to {_hms(s.end)} ({zone}); "
                f"status {s.status or 'unknown'}")
        if su.recorded_min_ms is not None:
            line += f"; calls >= {su.recorded_min_ms:g} ms stored one by one"
        out.append(line)
    elif s.status:
        out.append(f"status {s.status}")
    w = su.window
    if w:
        span = f"{_hms(w['from'])} to {_hms(w['to'])} " if w.get("from") else ""
        out.append(f"window: {span}(+{w['from_s']:.3f} s to +{w['to_s']:.3f} s, {w['duration_s']:.1f} s)")
    if s.command:
        line = "command: " + " ".join(_quote(a) for a in s.command)
        if s.exit_status_text:
            line += f"  -> {s.exit_status_text}"
        out.append(line)
    if s.filters is not None:
        out.append(f"filters: {filters_text(s.filters)}")
    calls = s.traced_calls
    if calls:
        out += textwrap.wrap(f"traced calls ({len(calls)}): " + ", ".join(calls), width=100,
                             subsequent_indent="    ", break_on_hyphens=False)
    return out


def warning_lines(su: Summary) -> list[str]:
    """``WARNING:`` lines (the session is incomplete, large losses, disagreements) and
    ``note:`` lines (small losses, the threshold, what a window cannot narrow)."""
    return [f"WARNING: {w}" for w in su.warnings] + [f"note: {n}" for n in su.notes]


def process_lines(su: Summary, top: int = 10) -> list[str]:
    """The per-process stall table (the ``top`` processes with the most stall time)."""
    procs = su.per_process
    if not procs:
        return []
    cg = any("cgroup_id" in p for p in procs)
    rows = [[p["comm"], p["pid"]] + ([p.get("cgroup") or p.get("cgroup_id") or "-"] if cg else [])
            + [p["threads"], p["stalls"], f"{p['stall_ms']:.1f}", f"{p['share_pct']:.1f}", f"{p['max_ms']:.1f}",
               p["cause"]] for p in procs[:top]]
    head = ["comm", "pid"] + (["cgroup"] if cg else []) + ["threads", "stalls", "ms", "% of stall time",
                                                           "max ms", "main cause"]
    align = ["<", ">"] + ([">"] if cg else []) + [">", ">", ">", ">", ">", "<"]
    more = f" (top {top} of {len(procs)})" if len(procs) > top else ""
    return ["", f"stall time by process{more}", text_table(head, rows, align)]


def writer_lines(su: Summary, top: int = 5) -> list[str]:
    """Who filled each journal: the sentence tying the victim to the writer, then the top
    writers over the run and when the log ran out (from su.writers, the JSON's values)."""
    w = su.writers or {}
    if not w.get("writers"):
        return []
    out = ["", "who filled the journal (jbd2: each transaction's logged blocks shared by the blocks its writers' "
           "handles dirtied; XFS: the kernel's log bytes shared by what their tickets used)"]
    out += [v["text"] for v in w.get("verdicts", [])]
    for title, rows in (("over the run", w["writers"]), ("when the log ran out (forced checkpoints)", w["at_fill"])):
        if not rows:
            continue
        out.append(f"writers {title}")
        out.append(text_table(
            ["dev", "comm", "pid", "cgroup", "handles", "logged blocks", "logged bytes", "share %"],
            [[r["dev"], r["comm"], r["pid"], r["cgroup"], r["handles"], _f(r["logged_blocks"], "{:,.0f}"),
              _f(r["logged_bytes"], "{:,.0f}"), _f(r["share_pct"])] for r in rows[:top]],
            ["<", "<", ">", "<", ">", ">", ">", ">"]))
    return out


def xfs_log_lines(su: Summary) -> list[str]:
    """The XFS logs' section: per log its waits for log space against the kernel's count of
    sleeps, the lowest headroom a wait started from, and what the tail waited for."""
    if not su.xfs_logs:
        return []

    out = ["", "XFS logs (a wait: a transaction's reservation slept in xlog_grant_head_wait until the log's "
           "tail moved)"]
    rows = []
    for x in su.xfs_logs:
        k = x["kernel_sleep_logspace"]
        rows.append([x["dev"], _f(x["log_mib"], "{:g}"), x["waits"], x["sleeps"], "-" if k is None else k,
                     _f(x["wait_ms"], "{:,.0f}"), _f(x["longest_wait_ms"], "{:,.1f}"),
                     x["waits_in_traced_calls"], _f(x["min_headroom_start_pct"])])
    out.append(text_table(["dev", "log MiB", "waits", "sleeps", "kernel sleeps", "wait ms", "longest ms", "in calls",
                           "headroom low%"], rows))
    for x in su.xfs_logs:
        e = enough.judge(x["enough"]["wait_ms"], x["enough"]["longest_ms"], x["enough"]["run_ms"], "xfs")
        out.append(f"{x['dev']}: log {e.describe()} (bound: {enough.bound('xfs')})")
        if x["waits"]:
            parts = [f"{TAIL_REASONS[r].split(' (')[0]} {x[f'tail_{r}_ms']:,.0f} ms" for r in TAIL_REASONS
                     if x[f"tail_{r}_ms"] > 0]
            out.append(f"{x['dev']}: the log's tail waited on " + ", ".join(parts))
            if x.get("waits_queued"):
                out.append(f"{x['dev']}: {x['waits_queued']} of the {x['waits']} waits asked behind tickets already "
                           "waiting (the kernel grants those first)")
        if x["sleeps_agree"] is not None:
            out.append(f"{x['dev']}: /sys/fs/xfs sleep_logspace: "
                       + ("agrees with the sleeps recorded" if x["sleeps_agree"]
                          else "DISAGREES with the sleeps recorded"))
    out.append("headroom: the grant head's space left (log size - tail space - grants) minus what the ticket "
               "needs, in % of the log, when it asked")
    return out
