"""The recorder's live console output, as bcc's tools print theirs: the "Tracing ... Hit
Ctrl-C to end." line (what is traced, how the probes attached, the kernel and its flavour)
and a column header once the probes are attached, then one line per slow call (the call's
latency in milliseconds, the journal fill the handle saw in percent)."""

import os
import time

from jstall import flavour

from . import events, filesystems, tables

HEADER = f"{'TIME':<8} {'COMM':<16} {'PID':>7} {'TID':>7} {'CALL':<13} {'LAT(ms)':>9} {'DEV':>7} {'FILL%':>6} FILE"


def fill_pct(free, log_blocks):
    return 100.0 * (1.0 - free / log_blocks) if log_blocks else float("nan")


def scope(rec):
    """What a set of probes ``rec`` (probeset.ProbeSet) covers, in words (the 'Tracing ...' line)."""
    where = ("on " + ", ".join(f"{d} ({rec.journals[d]['mountpoint']})" for d in rec.devices)
             if rec.devices else "on every ext4 and XFS")
    who = ""
    if rec.opts.pid:
        who = f" of PID {rec.opts.pid} and its children"
    elif rec.opts.command_tree:
        who = " of the command and its children"
    if rec.cgroup_id:
        who += f" in cgroup {rec.opts.cgroup}"
    kinds = {j.get("kind", "jbd2") for d, j in rec.journals.items() if not rec.devices or d in rec.devices}
    logs = " and ".join(k for k, on in (("jbd2", "jbd2" in kinds or not kinds), ("the XFS log", "xfs" in kinds)) if on)
    fs = "/".join(k for k, on in (("ext4", "jbd2" in kinds or not kinds), ("XFS", "xfs" in kinds)) if on)
    return f"Tracing {fs} metadata calls{who} and {logs} {where} ({how(rec)})"


def how(rec):
    """How the probes attached and on which kernel, in words: ``syscall tracepoints, kernel
    6.1.0-56-rt-amd64 (rt)`` (the attach mode and the kernel's flavour, as metadata.json
    keeps them: probes.attach, kernel_flavour)."""
    mode = flavour.attach_words(getattr(rec, "attach_mode", None)) or "attach mode unknown"
    return f"{mode}, kernel {os.uname().release} ({flavour.running()})"


def print_start(out, what):
    """The 'Tracing ... Hit Ctrl-C to end.' line for scope ``what``, then the column header."""
    print(f"{what}... Hit Ctrl-C to end.", file=out)
    print(HEADER, file=out, flush=True)


def print_call(out, e, syscall_names):
    """One line for call record ``e`` (a call_event); ``syscall_names``: {number: name}."""
    name = syscall_names.get(int(e["syscall_nr"]), str(e["syscall_nr"]))
    dev = filesystems.dev_name(int(e["dev"])) if e["dev"] else "-"
    # the fill the handle saw: the committing transaction's credits count as used
    # (jbd2_log_space_left), as they do when jbd2 decides whether a handle must wait
    used_free = int(e["journal_free_blocks"]) - int(e["journal_committing_credits"])
    fill = f"{fill_pct(used_free, int(e['journal_log_blocks'])):6.1f}" if e["handles"] else "     -"
    t = time.strftime("%H:%M:%S")
    comm = e["comm"].decode(errors="replace")
    file = e["file"].decode(errors="replace") or "-"
    if int(e["syscall_nr"]) == events.OPS["OP_JOURNAL_START"]:   # a handle wait outside traced calls
        file = f"(in {tables.context_name(int(e['context_nr']), int(e['task_flags'])) or 'an untraced call'})"
    print(f"{t:<8} {comm:<16} {e['pid']:>7} {e['tid']:>7} {name:<13} {e['latency_ns'] / 1e6:>9.2f} {dev:>7} "
          f"{fill} {file}", file=out, flush=True)
