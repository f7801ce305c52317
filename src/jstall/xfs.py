"""XFS's log-space rules and its kernel counters: the one definition the probes, the monitor
and the analyzer read.

Pure arithmetic on scalars or numpy arrays (no pandas, no numpy import: the probes import it),
each rule as the kernel has it (fs/xfs/xfs_log.c, xfs_log_priv.h, xfs_trace.h, xfs_stats.h,
xfs_stats.c, xfs_sysfs.c, xfs_trans_ail.c), and the readers of what the kernel and xfsprogs
show: ``/sys/fs/xfs/<name>/stats/stats``, ``/sys/fs/xfs/<name>/log/*`` and ``xfs_info``.

A transaction reserves log space on two *grant heads* before it runs:

- ``xfs_log_reserve()`` (a new ticket) checks the **reserve head**
  (``xlog_grant_head_check(log, &log->l_reserve_head, ...)``), then adds what it needs to
  both heads; ``xfs_log_regrant()`` (the next transaction of a rolling, permanent ticket
  whose count ran out) checks the **write head** (``&log->l_write_head``) and adds to it only;
- what a ticket needs (``xlog_ticket_reservation()``): on the write head ``t_unit_res``; on
  the reserve head ``t_unit_res * t_cnt`` for a permanent reservation
  (``XLOG_TIC_PERM_RESERV``), else ``t_unit_res``;
- it sleeps (``xlog_grant_head_wait()``) while the head's space left is below that need,
  and also, when tickets already wait on the head, unless the space covers theirs first
  (``xlog_grant_head_wake()`` serves waiters in order before a newcomer).

Space left on a head changed in Linux 6.11 ("xfs: grant heads track byte counts, not LSNs"):

- since 6.11 a head is a byte count of outstanding reservations, and
  ``xlog_grant_space_left(log, head) = l_logsize - l_tail_space - head->grant``, 0 at least,
  where ``l_tail_space`` is the log between the tail and the AIL's head
  (``__xfs_ail_assign_tail_lsn``: ``xlog_lsn_sub(log, ail_head_lsn, tail_lsn)``). The
  ``xfs_loggrant_class`` tracepoints record ``tail_space`` and, as ``grant_reserve_bytes``
  and ``grant_write_bytes``, *tail_space plus* each head's grant: space left is then
  ``l_logsize - grant_*_bytes`` (:func:`space_left_traced`);
- before, a head was a ``(cycle, bytes)`` position in the log and
  ``xlog_space_left(log, &head->grant)`` measured it against the tail LSN
  (:func:`space_left_cycles`); the tracepoints carried ``grant_reserve_cycle``,
  ``grant_reserve_bytes``, ``grant_write_cycle``, ``grant_write_bytes`` and no ``tail_space``.

:func:`grant_heads_kind` tells the two apart from a tracepoint's field names.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Union

from jstall.errors import JstallError

if TYPE_CHECKING:
    import numpy as np

#: a number, or a numpy array of them: the rules work element-wise
Values = Union[int, float, "np.ndarray"]

#: The bounds on any log (xfs_fs.h, as mkfs.xfs applies them): -l size= takes 2 MiB to
#: ``XFS_MAX_LOG_BYTES`` (2 GiB less ``XFS_MIN_LOG_BYTES``, 10 MiB), and 512
#: (``XFS_MIN_LOG_BLOCKS``) to 1,048,576 blocks (``XFS_MAX_LOG_BLOCKS``). The smallest log of a
#: geometry (its largest transaction's reservation) only mkfs.xfs computes.
MIN_LOG_BYTES, MAX_LOG_BYTES = 2 << 20, (2 << 30) - (10 << 20)
MIN_LOG_BLOCKS, MAX_LOG_BLOCKS = 512, 1 << 20
#: the journal kinds' interface (as jstall.jbd2): the noun, the bounds in blocks
NOUN = "log"
MIN_BLOCKS, MAX_BLOCKS = MIN_LOG_BLOCKS, MAX_LOG_BLOCKS

#: LSN blocks are 512-byte basic blocks (``BBTOB(bb) = bb << BBSHIFT``, BBSHIFT 9)
BBSIZE = 512
#: an LSN's cycle is its high 32 bits
_CYCLE = 1 << 32
#: ``XLOG_TIC_PERM_RESERV`` in a ticket's ``t_flags`` (0x1 since Linux 5.7, which dropped
#: ``XLOG_TIC_INITED``; every kernel jstall runs on)
XLOG_TIC_PERM_RESERV = 0x1

RESERVE_HEAD = "reserve"
WRITE_HEAD = "write"
HEADS = (RESERVE_HEAD, WRITE_HEAD)
#: the grant head each ``xfs_loggrant_class`` call tracepoint checks. ``xfs_log_reserve`` and
#: ``xfs_log_regrant`` fire before the check (the heads do not hold the ticket yet: the
#: values to judge a wait by), their ``_exit`` after the grant was added.
#: ``xfs_log_grant_sleep``/``_wake`` serve both heads: a sleep is on the head of the
#: reserve or regrant call the same ticket (``tic``, since 6.11) or task made just before.
EVENT_HEAD = {
    "xfs_log_reserve": RESERVE_HEAD,
    "xfs_log_reserve_exit": RESERVE_HEAD,
    "xfs_log_regrant": WRITE_HEAD,
    "xfs_log_regrant_exit": WRITE_HEAD,
}
SLEEP_EVENT = "xfs_log_grant_sleep"
WAKE_EVENT = "xfs_log_grant_wake"

SYSFS = "/sys/fs/xfs"
#: the global counters (also /proc/fs/xfs/stat), and each mount's (``<name>`` the data
#: device's kernel name, ``sb->s_id``: loop3, dm-2, nvme0n1p2)
STATS_GLOBAL = f"{SYSFS}/stats/stats"
STATS_MOUNT = SYSFS + "/{name}/stats/stats"
LOG_DIR = SYSFS + "/{name}/log"


# ---- grant heads ------------------------------------------------------------------------------


def grant_heads_kind(field_names: Iterable[str]) -> str | None:
    """``"bytes"`` (Linux 6.11 and later: the heads are byte counts, the tracepoint has
    ``tail_space``), ``"cycles"`` (before: ``grant_reserve_cycle`` and friends) or None (not
    an xfs_loggrant_class tracepoint) from a tracepoint's field names."""
    names = set(field_names)
    if "tail_space" in names and "grant_reserve_bytes" in names:
        return "bytes"
    if "grant_reserve_cycle" in names:
        return "cycles"
    return None


def crack_lsn(lsn: Values) -> tuple[Values, Values]:
    """``(CYCLE_LSN(lsn), BLOCK_LSN(lsn))`` of a 64-bit ``xfs_lsn_t`` (a tracepoint's
    ``tail_lsn``): the cycle in the high 32 bits, the 512-byte block in the low. Scalars or
    arrays."""
    return lsn // _CYCLE, lsn % _CYCLE


def assign_lsn(cycle: Values, block: Values) -> Values:
    """``xlog_assign_lsn()``: the 64-bit LSN of ``cycle:block``."""
    return cycle * _CYCLE + block


def lsn_sub(log_bytes: Values, high_cycle: Values, high_block: Values, low_cycle: Values,
            low_block: Values) -> Values:
    """``xlog_lsn_sub(log, high, low)``: bytes of log from LSN low to LSN high (high at most
    one cycle ahead): ``BBTOB(high_block - low_block)`` in the same cycle, else
    ``l_logsize - BBTOB(low_block - high_block)``. Since 6.11 ``l_tail_space`` is this from
    the tail LSN to the AIL's head. Scalars or arrays."""
    same = high_cycle == low_cycle
    return same * (high_block - low_block) * BBSIZE + (1 - same) * (log_bytes - (low_block - high_block) * BBSIZE)


def grant_space_left(log_bytes: Values, tail_space: Values, grant: Values) -> Values:
    """``xlog_grant_space_left(log, head)`` (Linux 6.11 and later): ``l_logsize -
    l_tail_space - head->grant``, 0 when negative. ``grant`` is the head's own byte count (as
    ``/sys/fs/xfs/<name>/log/*_grant_head_bytes`` shows it). Scalars or arrays."""
    free = _signed(log_bytes) - _signed(tail_space) - _signed(grant)
    return free * (free > 0)


def space_left_traced(log_bytes: Values, grant_bytes: Values) -> Values:
    """Space left on a head from a 6.11+ xfs_loggrant_class tracepoint: its
    ``grant_reserve_bytes``/``grant_write_bytes`` are ``tail_space + head->grant``, so
    ``xlog_grant_space_left()`` is ``l_logsize - grant_*_bytes``, 0 when negative. Scalars or
    arrays."""
    return grant_space_left(log_bytes, 0, grant_bytes)


def space_left_cycles(log_bytes: Values, head_cycle: Values, head_bytes: Values, tail_cycle: Values,
                      tail_block: Values) -> Values:
    """``xlog_space_left(log, &head->grant)`` before Linux 6.11: a head at ``(head_cycle,
    head_bytes)`` against the tail LSN ``tail_cycle:tail_block`` (512-byte blocks):

    - same cycle, head at or past the tail: ``l_logsize - (head_bytes - BBTOB(tail_block))``;
    - head more than one cycle ahead: 0 (the head overran the tail);
    - head one cycle ahead: ``BBTOB(tail_block) - head_bytes``;
    - otherwise (head behind the tail, which the kernel reports with "head behind tail"):
      ``l_logsize``.

    Scalars or arrays."""
    tail_bytes = _signed(tail_block) * BBSIZE
    head_cycle, head_bytes, tail_cycle = _signed(head_cycle), _signed(head_bytes), _signed(tail_cycle)
    same = (tail_cycle == head_cycle) & (head_bytes >= tail_bytes)
    overrun = tail_cycle + 1 < head_cycle
    wrapped = tail_cycle + 1 == head_cycle
    behind = 1 - same - overrun - wrapped
    return same * (log_bytes - (head_bytes - tail_bytes)) + wrapped * (tail_bytes - head_bytes) + behind * log_bytes


def ticket_need(head: str, unit_res: Values, cnt: Values, flags: Values) -> Values:
    """``xlog_ticket_reservation()``: the bytes a ticket needs on ``head`` ("reserve" or
    "write"): ``unit_res`` on the write head; on the reserve head ``unit_res * cnt`` for a
    permanent reservation (``flags & XLOG_TIC_PERM_RESERV``), else ``unit_res``. At
    ``xfs_log_reserve`` ``cnt`` is the ticket's full count; ``xfs_log_regrant`` fires only
    once the count ran out (a regrant with count left returns before the check). Scalars or
    arrays."""
    if head == WRITE_HEAD:
        return unit_res
    if head != RESERVE_HEAD:
        raise ValueError(f"no grant head {head!r} (reserve or write)")
    perm = (flags & XLOG_TIC_PERM_RESERV) != 0
    return unit_res * (1 + perm * (cnt - 1))


def headroom(space_left_bytes: Values, need_bytes: Values,
             log_bytes: Values) -> tuple[Values, Values]:
    """``(bytes, percent of the log)`` by which a head's space left exceeds what the ticket
    needs; below 0 the reservation sleeps (``xlog_grant_head_wait()``). At or above 0 it may
    still sleep when tickets already wait on the head (the tracepoint's ``reserveq`` or
    ``writeq`` is 0, "active") and the space does not cover theirs too. Scalars or arrays."""
    h = space_left_bytes - need_bytes
    return h, 100.0 * h / log_bytes


def sleep_fill_pct(need_bytes: Values, log_bytes: Values) -> Values:
    """Fill percent (log bytes taken by the tail space and the grants) above which a ticket
    needing ``need_bytes`` sleeps: ``100 * (1 - need_bytes / log_bytes)``. Scalars or arrays."""
    return 100.0 * (1.0 - need_bytes / log_bytes)


def event_space_left(event: Any, log_bytes: Values, head: str) -> Values:
    """Space left on ``head`` from one xfs_loggrant_class record or a table of them
    (``event["field"]`` and field names: a dict, a numpy structured array, a DataFrame),
    of either kind (:func:`grant_heads_kind`)."""
    kind = grant_heads_kind(_field_names(event))
    if head not in HEADS:
        raise ValueError(f"no grant head {head!r} (reserve or write)")
    if kind == "bytes":
        return space_left_traced(log_bytes, event[f"grant_{head}_bytes"])
    if kind == "cycles":
        tail_cycle, tail_block = crack_lsn(_signed(event["tail_lsn"]))
        return space_left_cycles(log_bytes, event[f"grant_{head}_cycle"], event[f"grant_{head}_bytes"],
                                 tail_cycle, tail_block)
    raise ValueError("not an xfs_loggrant_class record (no grant head fields)")


def event_headroom(event: Any, log_bytes: Values, head: str) -> tuple[Values, Values]:
    """:func:`headroom` of the ticket in an ``xfs_log_reserve`` (reserve head) or
    ``xfs_log_regrant`` (write head) record or table: space left on the head less
    :func:`ticket_need` from its ``unit_res``, ``cnt`` and ``flags``."""
    need = ticket_need(head, _signed(event["unit_res"]), _signed(event["cnt"]), event["flags"])
    return headroom(event_space_left(event, log_bytes, head), need, log_bytes)


# ---- what the log's tail waited for ---------------------------------------------------------

#: what the log's tail was waiting for during a wait, by the AIL's dominant event
TAIL_REASONS = {
    "metadata_writeback": "metadata writeback (xfsaild pushing items home, or waiting on their I/O)",
    "log_force": "a log force (AIL items pinned until the log reaches the disk)",
    "lock_contention": "locks (AIL items locked by other tasks)",
    "log_write": "the log's own writes (committed transactions' space, released as their log writes complete)",
    "unknown": "nothing the AIL or the log reported",
}


def tail_reason(pushed: Values, pinned: Values, locked: Values,
                log_writes: Values = 0) -> str | list[str]:
    """What the tail waited for during a wait (a key of :data:`TAIL_REASONS`), from the AIL's
    events on its filesystem meanwhile: ``pushed`` (xfs_ail_push + xfs_ail_flushing: items
    written home or being written), ``pinned`` (xfs_ail_pinned: waiting for a log force),
    ``locked`` (xfs_ail_locked). The most frequent wins; a tie goes to metadata writeback, then
    the log force. With no AIL event, ``log_writes`` (xlog_iclog_sync_done: the log's writes
    that completed meanwhile) names the log's own writes: the space the wait needed was held by
    committed transactions until their log write completed. Scalars give a str; sequences
    (numpy arrays) a list."""
    def one(pu, pi, lo, lw):
        if pu > 0 and pu >= pi and pu >= lo:
            return "metadata_writeback"
        if pi > 0 and pi > pu and pi >= lo:
            return "log_force"
        if lo > 0:
            return "lock_contention"
        if lw > 0:
            return "log_write"
        return "unknown"

    if hasattr(pushed, "__len__"):
        lws = log_writes if hasattr(log_writes, "__len__") else [log_writes] * len(pushed)
        return [one(*t) for t in zip(pushed, pinned, locked, lws)]
    return one(pushed, pinned, locked, log_writes)


# ---- /sys/fs/xfs/<name>/stats/stats -----------------------------------------------------------

_XBTS = ("lookup", "compare", "insrec", "delrec", "newroot", "killroot", "increment", "decrement",
         "lshift", "rshift", "split", "join", "alloc", "free", "moves")

#: Each stats line and the ``struct __xfsstats`` members it prints, in order (xfs_stats.c
#: ``xfs_stats_format``, xfs_stats.h). The btree lines print 15 counters each, named by the
#: ``__XBTS_*`` index; ``xpc`` and ``defer_relog`` are 64-bit, ``debug`` is 1 on a DEBUG build.
STATS_MEMBERS = {
    "extent_alloc": ("xs_allocx", "xs_allocb", "xs_freex", "xs_freeb"),
    "abt": ("xs_abt_lookup", "xs_abt_compare", "xs_abt_insrec", "xs_abt_delrec"),
    "blk_map": ("xs_blk_mapr", "xs_blk_mapw", "xs_blk_unmap", "xs_add_exlist", "xs_del_exlist",
                "xs_look_exlist", "xs_cmp_exlist"),
    "bmbt": ("xs_bmbt_lookup", "xs_bmbt_compare", "xs_bmbt_insrec", "xs_bmbt_delrec"),
    "dir": ("xs_dir_lookup", "xs_dir_create", "xs_dir_remove", "xs_dir_getdents"),
    "trans": ("xs_trans_sync", "xs_trans_async", "xs_trans_empty"),
    "ig": ("xs_ig_attempts", "xs_ig_found", "xs_ig_frecycle", "xs_ig_missed", "xs_ig_dup", "xs_ig_reclaims",
           "xs_ig_attrchg"),
    "log": ("xs_log_writes", "xs_log_blocks", "xs_log_noiclogs", "xs_log_force", "xs_log_force_sleep"),
    "push_ail": ("xs_try_logspace", "xs_sleep_logspace", "xs_push_ail", "xs_push_ail_success",
                 "xs_push_ail_pushbuf", "xs_push_ail_pinned", "xs_push_ail_locked", "xs_push_ail_flushing",
                 "xs_push_ail_restarts", "xs_push_ail_flush"),
    "xstrat": ("xs_xstrat_quick", "xs_xstrat_split"),
    "rw": ("xs_write_calls", "xs_read_calls"),
    "attr": ("xs_attr_get", "xs_attr_set", "xs_attr_remove", "xs_attr_list"),
    "icluster": ("xs_iflush_count", "xs_icluster_flushcnt", "xs_icluster_flushinode"),
    "vnodes": ("vn_active", "vn_alloc", "vn_get", "vn_hold", "vn_rele", "vn_reclaim", "vn_remove", "vn_free"),
    "buf": ("xb_get", "xb_create", "xb_get_locked", "xb_get_locked_waited", "xb_busy_locked", "xb_miss_locked",
            "xb_page_retries", "xb_page_found", "xb_get_read"),
    **{line: tuple(f"{member}[{x}]" for x in _XBTS) for line, member in (
        ("abtb2", "xs_abtb_2"), ("abtc2", "xs_abtc_2"), ("bmbt2", "xs_bmbt_2"), ("ibt2", "xs_ibt_2"),
        ("fibt2", "xs_fibt_2"), ("rmapbt", "xs_rmap_2"), ("refcntbt", "xs_refcbt_2"),
        ("rmapbt_mem", "xs_rmap_mem_2"), ("rcbagbt", "xs_rcbag_2"), ("rtrmapbt", "xs_rtrmap_2"),
        ("rtrmapbt_mem", "xs_rtrmap_mem_2"), ("rtrefcntbt", "xs_rtrefcbt_2"))},
    "qm": ("xs_qm_dqreclaims", "xs_qm_dqreclaim_misses", "xs_qm_dquot_dups", "xs_qm_dqcachemisses",
           "xs_qm_dqcachehits", "xs_qm_dqwants", "xs_qm_dquot", "xs_qm_dquot_unused"),
    "xpc": ("xs_xstrat_bytes", "xs_write_bytes", "xs_read_bytes"),
    "defer_relog": ("defer_relog",),
    "debug": ("debug",),
}
#: lines of 64-bit counters (the rest are 32-bit and wrap)
STATS_64BIT = frozenset({"xpc", "defer_relog"})
#: counters that go down as well as up (not wrapped in a delta)
STATS_GAUGES = frozenset({("vnodes", "active"), ("debug", "debug")})


def _short(line, member):
    """A counter's name in its line: the member without ``xs_``/``vn_``/``xb_`` and, when every
    member of the line starts so, without ``<line>_`` (``xs_log_force`` -> ``force``;
    ``xs_push_ail_success`` stays ``push_ail_success``); a btree counter by its index name."""
    if "[" in member:
        return member[member.index("[") + 1:-1]
    bare = [m.split("_", 1)[1] if m.startswith(("xs_", "vn_", "xb_")) else m for m in STATS_MEMBERS[line]]
    name = bare[STATS_MEMBERS[line].index(member)]
    prefix = line + "_"
    return name[len(prefix):] if all(b.startswith(prefix) and b != prefix for b in bare) else name


#: {line: (counter names)}: e.g. "log": ("writes", "blocks", "noiclogs", "force", "force_sleep")
STATS_NAMES = {line: tuple(_short(line, m) for m in members) for line, members in STATS_MEMBERS.items()}
#: {kernel member: (line, name)}: "xs_sleep_logspace" -> ("push_ail", "sleep_logspace")
MEMBER_COUNTER = {m: (line, _short(line, m)) for line, members in STATS_MEMBERS.items() for m in members}


def parse_stats(text: str) -> dict[str, dict]:
    """``{line: {name: value}}`` of an XFS stats file, each counter under its name in
    :data:`STATS_NAMES` (the kernel's). A line this table does not know, and values past the
    names of a line it knows (a newer kernel's), are kept by position (``{0: v, 1: v}``)."""
    out = {}
    for raw in text.splitlines():
        parts = raw.split()
        if not parts:
            continue
        names = STATS_NAMES.get(parts[0], ())
        values = {}
        for i, token in enumerate(parts[1:]):
            try:
                value = int(token)
            except ValueError:
                continue
            values[names[i] if i < len(names) else i] = value
        out[parts[0]] = values
    return out


def read_stats(dev_name: str | None = None) -> dict[str, dict] | None:
    """The counters of one mount (``/sys/fs/xfs/<dev_name>/stats/stats``) or, without a name,
    every mount's since XFS loaded (``/sys/fs/xfs/stats/stats``), parsed by
    :func:`parse_stats`; None when the file is absent (not mounted, no XFS).

    For log space (``XFS_STATS_INC`` bumps the mount's counter and the global one):

    - ``push_ail.try_logspace`` (``xs_try_logspace``): +1 per ``xfs_log_reserve()`` and per
      ``xfs_log_regrant()``, before the check, including the regrants of a permanent ticket
      with count left, which return at once and fire no tracepoint: it is at least the count
      of ``xfs_log_reserve`` plus ``xfs_log_regrant`` events;
    - ``push_ail.sleep_logspace`` (``xs_sleep_logspace``): +1 per pass of
      ``xlog_grant_head_wait()``'s loop, right before ``trace_xfs_log_grant_sleep``: it equals
      the count of ``xfs_log_grant_sleep`` events (a ticket woken without enough space
      sleeps, and counts, again);
    - ``xlog_grant_head_check()`` itself counts nothing;
    - ``log.force`` (``xs_log_force``): +1 per ``xfs_log_force()`` and
      ``xfs_log_force_seq()``, each right before ``trace_xfs_log_force``: it equals the count
      of ``xfs_log_force`` events; ``log.force_sleep``: a force's waits for an iclog's write
      (``xlog_wait_on_iclog``) or a CIL push (``xlog_cil_force_seq``);
    - ``log.writes`` and ``log.blocks``: iclog writes (``xlog_sync``) and their 512-byte
      blocks; ``log.noiclogs``: waits for a free iclog (``xlog_state_get_iclog_space``);
      ``trans.sync``/``async``/``empty``: committed transactions.
    """
    path = STATS_GLOBAL if dev_name is None else STATS_MOUNT.format(name=dev_name)
    try:
        with open(path) as f:
            return parse_stats(f.read())
    except (FileNotFoundError, NotADirectoryError):
        return None


def stats_delta(start: dict[str, dict], end: dict[str, dict]) -> dict[str, dict]:
    """``{line: {name: end - start}}`` over the counters both hold. A 32-bit counter that went
    down wrapped (``+ 2**32``); 64-bit lines and gauges (``vnodes.active``) subtract plainly.
    (``stats_clear`` between the two makes the delta meaningless.)"""
    out = {}
    for line, values in end.items():
        before = start.get(line)
        if before is None:
            continue
        d = {}
        for name, value in values.items():
            if name in before:
                diff = value - before[name]
                if diff < 0 and line not in STATS_64BIT and (line, name) not in STATS_GAUGES:
                    diff += 1 << 32
                d[name] = diff
        out[line] = d
    return out


def counter(stats: dict[str, dict], member: str, default: int | None = None) -> int | None:
    """One counter of a parsed stats dict (or delta) by its kernel member name
    (``"xs_sleep_logspace"``), ``default`` when absent."""
    line, name = MEMBER_COUNTER[member]
    return stats.get(line, {}).get(name, default)


# ---- /sys/fs/xfs/<name>/log -------------------------------------------------------------------


def parse_log_value(text: str) -> tuple[int, int] | int | str:
    """A /sys/fs/xfs/<name>/log file's value: ``"cycle:block"`` (an LSN, or a pre-6.11 grant
    head's ``cycle:bytes``) as a ``(cycle, n)`` tuple, a number as an int, else the text."""
    text = text.strip()
    a, sep, b = text.partition(":")
    try:
        return (int(a), int(b)) if sep else int(text)
    except ValueError:
        return text


def read_log_state(dev_name: str) -> dict | None:
    """``{file: value}`` of every file in ``/sys/fs/xfs/<dev_name>/log`` (xfs_sysfs.c), or None
    when absent. ``log_head_lsn`` (``l_curr_cycle:l_curr_block``, where iclogs are written)
    and ``log_tail_lsn`` are ``(cycle, block)`` with 512-byte blocks; since 6.11
    ``reserve_grant_head_bytes`` and ``write_grant_head_bytes`` are each head's grant in
    bytes, before they were ``reserve_grant_head`` and ``write_grant_head``, ``(cycle,
    bytes)``."""
    path = LOG_DIR.format(name=dev_name)
    try:
        names = sorted(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return None
    state = {}
    for name in names:
        try:
            with open(os.path.join(path, name)) as f:
                state[name] = parse_log_value(f.read())
        except OSError:
            continue
    return state


def log_state_kind(state: dict | None) -> str | None:
    """``"bytes"`` or ``"cycles"`` (as :func:`grant_heads_kind`) from :func:`read_log_state`'s
    file names, None when neither."""
    if "reserve_grant_head_bytes" in state:
        return "bytes"
    if "reserve_grant_head" in state:
        return "cycles"
    return None


def log_state_space_left(state: dict, log_bytes: int, head: str = RESERVE_HEAD) -> int:
    """Space left on ``head`` from :func:`read_log_state`. Before 6.11 this is
    ``xlog_space_left()`` on the values the kernel uses. Since 6.11 sysfs does not show
    ``l_tail_space``; it is estimated as :func:`lsn_sub` from the tail LSN to the head LSN,
    which also counts what iclogs wrote and the AIL has not yet taken from the grant heads: an
    estimate that errs low by that."""
    kind = log_state_kind(state)
    tail_cycle, tail_block = state["log_tail_lsn"]
    if kind == "bytes":
        head_cycle, head_block = state["log_head_lsn"]
        tail_space = lsn_sub(log_bytes, head_cycle, head_block, tail_cycle, tail_block)
        return grant_space_left(log_bytes, tail_space, state[f"{head}_grant_head_bytes"])
    if kind == "cycles":
        cycle, nbytes = state[f"{head}_grant_head"]
        return space_left_cycles(log_bytes, cycle, nbytes, tail_cycle, tail_block)
    raise ValueError("no grant heads in this log state")


# ---- xfs_info ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class XfsGeometry:
    """A filesystem's geometry as ``xfs_info`` (xfsprogs) prints it. ``log_bytes`` = log
    blocks × log block size is the kernel's ``l_logsize``; ``log_device`` is None for an
    internal log. ``sections`` holds every ``key=value`` of every section (``meta-data``,
    ``data``, ``naming``, ``log``, ``realtime``), ``""`` the section's leading value."""

    log_bytes: int
    log_blocks: int
    log_block_size: int
    log_device: object
    log_sector_size: int
    log_sunit_blocks: int
    log_version: int
    lazy_count: int
    inode_size: int
    block_size: int
    data_blocks: int
    ag_count: int
    ag_blocks: int
    sector_size: int
    sections: dict = field(default_factory=dict, compare=False, repr=False)

    def as_dict(self) -> dict:
        return asdict(self)


def _xfs_info_sections(text):
    """{section: {key: value}} of xfs_info's (or mkfs.xfs's) report: a line ``name =rest``
    opens a section, ``         =rest`` continues it; ``rest`` is a leading value then
    ``key=value`` pairs (trailing commas and unit words such as ``blks`` dropped)."""
    sections, current = {}, None
    for line in text.splitlines():
        name, sep, rest = line.partition("=")
        if not sep:
            continue
        name = name.strip()
        if name:
            current = sections.setdefault(name, {})
        elif current is None:
            continue
        tokens = rest.split()
        lead = []
        while tokens and "=" not in tokens[0]:
            lead.append(tokens.pop(0))
        if name:
            current[""] = " ".join(lead)
        for token in tokens:
            key, eq, value = token.rstrip(",").partition("=")
            if eq:
                try:
                    current[key] = int(value)
                except ValueError:
                    current[key] = value
    return sections


def parse_xfs_info(text: str) -> XfsGeometry:
    """The :class:`XfsGeometry` of ``xfs_info`` output (mkfs.xfs prints the same report).
    Raises ValueError when the text has no log section."""
    s = _xfs_info_sections(text)
    meta, data, log = s.get("meta-data", {}), s.get("data", {}), s.get("log")
    if not log or "blocks" not in log or "bsize" not in log:
        raise ValueError("no log section in the xfs_info output")
    where = log.get("", "")
    return XfsGeometry(
        log_bytes=log["blocks"] * log["bsize"], log_blocks=log["blocks"], log_block_size=log["bsize"],
        log_device=None if where.startswith("internal") else (where or None),
        log_sector_size=log.get("sectsz"), log_sunit_blocks=log.get("sunit"), log_version=log.get("version"),
        lazy_count=log.get("lazy-count"), inode_size=meta.get("isize"), block_size=data.get("bsize"),
        data_blocks=data.get("blocks"), ag_count=meta.get("agcount"), ag_blocks=meta.get("agsize"),
        sector_size=meta.get("sectsz"), sections=s)


def xfs_info(mountpoint: str, timeout: float = 30) -> XfsGeometry:
    """The :class:`XfsGeometry` of a mounted XFS (``xfs_info MOUNTPOINT``; an unmounted device
    works too). Raises JstallError, one line naming the fix, when it cannot."""
    try:
        res = subprocess.run(["xfs_info", mountpoint], capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise JstallError("xfs_info not found: install xfsprogs") from None
    except subprocess.TimeoutExpired:
        raise JstallError(f"xfs_info {mountpoint} did not answer in {timeout:g} s: is the filesystem or "
                          f"its device hung?") from None
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or res.stdout.strip().splitlines() or ["no output"])[-1]
        raise JstallError(f"xfs_info {mountpoint} failed ({last}): give the mount point of an XFS filesystem")
    try:
        return parse_xfs_info(res.stdout)
    except ValueError:
        raise JstallError(f"xfs_info {mountpoint} printed no log geometry: update xfsprogs") from None


def sysfs_name(device: str) -> str:
    """The kernel's name of a block device (``/dev/mapper/vg-lv`` -> ``dm-2``), the ``<name>``
    of ``/sys/fs/xfs/<name>``."""
    return os.path.basename(os.path.realpath(device))


# ---- helpers ----------------------------------------------------------------------------------


def _signed(x):
    """x with an unsigned numpy dtype (a tracepoint's uint64 fields) as int64, so that a
    difference can go below 0; anything else as it is."""
    dtype = getattr(x, "dtype", None)
    if dtype is not None and getattr(dtype, "kind", "") == "u":
        return x.astype("int64")
    return x


def _field_names(event):
    """The field names of a dict, a numpy structured array or record, or a DataFrame."""
    dtype = getattr(event, "dtype", None)
    if dtype is not None and getattr(dtype, "names", None):
        return dtype.names
    columns = getattr(event, "columns", None)
    if columns is not None:
        return list(columns)
    return list(event.keys())



def read_geometry(mount: dict) -> XfsGeometry:
    """The log's geometry: ``xfs_info`` of a mount-table entry's ``mountpoint``."""
    return xfs_info(mount["mountpoint"])


def read_counters(name: str | None) -> dict[str, dict] | None:
    """The kernel's counters of a log: ``/sys/fs/xfs/<name>/stats/stats``, parsed
    (:func:`read_stats`), or None when the kernel has none."""
    return read_stats(name)
