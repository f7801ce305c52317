"""One set of jstall's probes (recorder.bpf.c, or the monitor's monitor.bpf.c: each a short
list of the shared parts in probes/*.bpf.h and its own calls): what to trace, checked when
the set is made (a JstallError naming the fix, nothing attached); open() compiles the
programs for this kernel (its BTF, attach plan and tracepoints), attaches them and hands
every ring-buffer record to a callback; close() detaches them. Who reads the records is
apart: the recorder writes sessions from them (recorder.py), the monitor keeps live totals
(monitor/tracer.py).

    p = ProbeSet(ProbeOptions(devices=["/mnt/x"], quiet=True)).open(on_record)
    p.bpf.ring_buffer_poll(100)    # on_record(ctx, data, size) for each record
    p.close()
"""

import concurrent.futures
import ctypes
import dataclasses
import logging
import os
import re

from jstall import kinds
from jstall.errors import JstallError

from . import bpfsys, btf, events, filesystems, host, syscalls, tables

BPF_SOURCE = os.path.join(os.path.dirname(__file__), "recorder.bpf.c")
#: the monitor's program: the same parts, the monitor's fs-level operations for syscalls
MONITOR_BPF_SOURCE = os.path.join(os.path.dirname(__file__), "monitor.bpf.c")

JBD2_RAW_TRACEPOINTS = (
    "jbd2_start_commit", "jbd2_commit_locking", "jbd2_commit_flushing", "jbd2_commit_logging",
    "jbd2_end_commit", "jbd2_drop_transaction", "jbd2_checkpoint", "jbd2_write_superblock",
    "jbd2_lock_buffer_stall", "jbd2_update_log_tail", "jbd2_run_stats", "jbd2_checkpoint_stats",
)
EXT4_RAW_TRACEPOINTS = ("ext4_journal_start_sb", "ext4_journal_start_inode")
#: XFS's tracepoints the XFS_LOG programs attach to (bcc attaches them as it loads the probes)
XFS_TRACEPOINTS = ("xfs_log_reserve", "xfs_log_regrant", "xfs_log_grant_sleep", "xfs_log_reserve_exit",
                   "xfs_log_regrant_exit", "xfs_ail_push", "xfs_ail_pinned", "xfs_ail_locked", "xfs_ail_flushing",
                   "xfs_log_force", "xlog_iclog_sync_done")
#: XFS's ticket tracepoints the writers' programs attach to (with the XFS_LOG programs)
XFS_WRITER_TRACEPOINTS = ("xfs_log_ticket_ungrant", "xfs_log_ticket_regrant")
#: Where a journal handle starts, per kernel (the attach plan): (tracepoint, the program
#: suffix that serves it), newest kernels first. Since 6.2 ext4 has ext4_journal_start_sb(sb,
#: ...) and ext4_journal_start_inode(inode, ...); before, one ext4_journal_start(sb, ...),
#: which the _sb programs serve (the same first argument).
HANDLE_START_PLANS = (
    (("ext4_journal_start_sb", "ext4_journal_start_sb"), ("ext4_journal_start_inode", "ext4_journal_start_inode")),
    (("ext4_journal_start", "ext4_journal_start_sb"),),
)
#: loaded as BTF-typed raw tracepoints (tp_btf) where the kernel takes them: their programs
#: (btf_<name> in handles.bpf.h, jbd2.bpf.h, offcpu.bpf.h) read the superblock, journal and
#: statistics they are given without bpf_probe_read_kernel, and sched_switch finds the
#: thread switched in by its task storage
BTF_TRACEPOINTS = EXT4_RAW_TRACEPOINTS + tuple(n for n in JBD2_RAW_TRACEPOINTS if n != "jbd2_lock_buffer_stall") + (
    "sched_switch", "sched_waking")
RING_PAGES = 1024          # 4 MiB per ring buffer
POLL_MS = 100              # the ring buffers are read at least this often
#: a record wakes the reader once this many came from its CPU since the last wakeup
#: (rb_flags in common.bpf.h): 512 of the largest (168 bytes) are 84 KiB a CPU
RB_WAKE_EVERY = 512
STACK_ENTRIES = tables.STACK_ENTRIES
HIST_BUCKETS = 40          # log2(latency_ns) buckets: the last holds everything from 2^39 ns (9 min)
FILL_SAMPLE_NS = 10_000_000
#: distinct blocks forced checkpoints wrote home, counted at most (home_writes; the map
#: grows as they come: about 100 bytes of kernel memory each)
HOME_BLOCKS_MAX = 1 << 18
#: files whose set extended attributes are noted at most (xattr_files, an LRU map: the
#: last ones set; about 100 bytes of kernel memory each)
XATTR_FILES_MAX = 1 << 14
#: (process, cgroup, journal, transaction) keys the writers map holds between two reads
#: (the recorder reads it at every flush and drops committed transactions' keys)
WRITERS_MAX = 4096
#: kernel workers' work items whose off-CPU intervals are kept (WAIT_CHAINS): those of
#: functions with these prefixes (the filesystems' and their logs') and writeback's own,
#: what a traced call waiting for a worker (__flush_work, a completion) may wait on
WORK_FN_PREFIXES = ("xfs_", "xlog_", "ext4_", "jbd2_")
WORK_FNS = ("wb_workfn",)
#: functions work_fns holds at most (xfs, ext4 and jbd2 have about 3,000 here), and work
#: items under way at once
WORK_FNS_MAX = 16384
WORKER_ITEMS_MAX = 4096

#: How the traced syscalls are entered and left (the JSTALL_ATTACH override):
#: "fentry", fentry/fexit programs on each traced call's syscall function
#: (__x64_sys_<name>), so that no other syscall runs a program or takes the slow syscall
#: path; "syscalls", a program pair on each traced call's own tracepoints
#: (syscalls:sys_enter_<name>/sys_exit_<name>): other syscalls run no program but take the
#: slow syscall path; "raw", one program pair on raw_syscalls that every syscall of every
#: task runs; "auto" (default), fentry where the kernel takes it (stock distribution
#: kernels do), else syscalls (benchmarks/record_overhead.py measures them).
ATTACH_MODES = ("auto", "fentry", "syscalls", "raw")
ATTACH = os.environ.get("JSTALL_ATTACH", "auto")


_LOCAL_INCLUDE = re.compile(r'^#include "(\w+\.bpf\.h)"\s*$', re.M)


def work_functions(kallsyms="/proc/kallsyms"):
    """The addresses of the kernel's text symbols whose work items the recorder keeps
    (WORK_FN_PREFIXES, WORK_FNS), from ``kallsyms`` (a module's symbols once it is loaded);
    [] when it cannot be read or hides its addresses."""
    found = set()
    try:
        with open(kallsyms) as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3 or parts[1] not in ("t", "T"):
                    continue
                name = parts[2]
                if name.startswith(WORK_FN_PREFIXES) or name in WORK_FNS:
                    addr = int(parts[0], 16)
                    if addr:
                        found.add(addr)
    except OSError:
        return []
    return sorted(found)


def bpf_text(path=BPF_SOURCE):
    """A top program (recorder.bpf.c, monitor.bpf.c) with each of its parts kept in a header
    of its own (``#include "<name>.bpf.h"``) put in place of the include line: bcc rewrites
    map calls and loads programs only in the file it compiles, never in what that file
    includes."""
    here = os.path.dirname(path)

    def inline(m):
        with open(os.path.join(here, m.group(1))) as f:
            return f.read()

    with open(path) as f:
        return _LOCAL_INCLUDE.sub(inline, f.read())


def handle_start_plan():
    """The (tracepoint, program suffix) pairs of HANDLE_START_PLANS this kernel has: the
    first plan any of whose tracepoints exists (none: the newest, then reported missing)."""
    for plan in HANDLE_START_PLANS:
        if any(host.tracepoint_exists("ext4", tp) for tp, _ in plan):
            return plan
    return HANDLE_START_PLANS[0]

log = logging.getLogger(__name__)


@dataclasses.dataclass
class ProbeOptions:
    """What to trace. Times: min_ms in milliseconds, offcpu_min_us in microseconds."""

    devices: list = dataclasses.field(default_factory=list)   # MAJ:MIN, mount points or block devices
    pid: int = None
    cgroup: str = None                                        # cgroup v2 directory
    command_tree: bool = False                                # trace only tgids added with trace_tgid()
    min_ms: float = 1.0
    offcpu_min_us: int = 100
    quiet: bool = False                                       # no warning about missing tracepoints
    attach: str = ATTACH                                      # one of ATTACH_MODES
    calls: tuple = None                                       # call names (syscalls.parse_calls); None: default


#: threads that detach programs at once (detach_together)
DETACH_THREADS = 64


def detach_together(b):
    """Detach a bcc BPF object's tracepoint programs and links each from its own thread, at
    once; b.cleanup() then frees the rest. Closing a tracepoint's perf event waits for an RCU
    grace period (perf_trace_event_unreg -> tracepoint_synchronize_unregister): one after
    another (bcc's cleanup) 48 syscall tracepoints took 3.4 s of a recording's stop,
    together 1.75 s (benchmarks/probe_startstop.py; they still queue on the kernel's
    event_mutex). fentry links go the same way. ctypes' calls release the GIL. A detach
    that fails is left to b.cleanup(), which tries it again and raises."""
    jobs = [(b.detach_tracepoint, k) for k in list(b.tracepoint_fds)] + \
        [(b.detach_raw_tracepoint, k) for k in list(b.raw_tracepoint_fds)]
    if len(jobs) < 2:
        return

    def one(job):
        try:
            job[0](job[1])
        except Exception:   # noqa: BLE001 - b.cleanup() tries it again and says why
            pass

    with concurrent.futures.ThreadPoolExecutor(max_workers=min(len(jobs), DETACH_THREADS)) as pool:
        list(pool.map(one, jobs))


#: the ring buffers the probes write (each record begins with its kind: events.KINDS)
RINGS = ("calls_rb", "offcpu_rb", "jbd2_rb")


class ProbeSet:
    """The probes for one set of options: checked when made, attached by open(), detached
    by close(). Subclasses choose the program (source), what is compiled in (handle_waits,
    wait_chains, xfs_log, _cflags) and attached (_attach): the monitor's operations are one
    such set."""

    def __init__(self, options):
        self.opts = options
        host.require_root()
        host.require_kernel()
        if options.attach not in ATTACH_MODES:
            raise JstallError(f"JSTALL_ATTACH={options.attach}: unknown attach mode; "
                              f"use one of {', '.join(ATTACH_MODES)}")
        host.ensure_tracefs()
        self.syscall_numbers = syscalls.numbers(calls=options.calls)
        # calls this kernel does not have (setxattrat before 6.13, ...): skipped, listed once
        self.calls_unavailable = [n for n in self.syscall_numbers if not host.syscall_exists(n)]
        for name in self.calls_unavailable:
            del self.syscall_numbers[name]
        if not self.syscall_numbers:
            raise JstallError(f"--calls {options.calls}: none of these calls exist on this kernel "
                              f"({', '.join(self.calls_unavailable)}); choose others")
        self.attach_mode = options.attach    # resolved in _cflags when "auto"
        self.attach_note = None              # why fentry was not used, when it was not
        self.syscall_names = {nr: name for name, nr in self.syscall_numbers.items()}
        if self.handle_waits:
            self.syscall_names.update(events.OP_NAMES)
        mounts = filesystems.journaled_mounts()
        self.devices = list(dict.fromkeys(filesystems.resolve_device(d, mounts) for d in options.devices))
        if options.pid is not None and (options.pid <= 0 or not os.path.exists(f"/proc/{options.pid}")):
            raise JstallError(f"-p {options.pid}: no such process; give the PID of a running process")
        self.journals = {}
        for dev in self.devices:
            self.journals[dev] = filesystems.describe(dev, mounts[dev])
        if not self.devices:  # every mounted ext4 with a journal and XFS (narrowed to those used with a task filter)
            for dev, m in mounts.items():
                try:
                    self.journals[dev] = filesystems.describe(dev, m)
                except JstallError:
                    continue
        self.cgroup_id = None
        if options.cgroup:
            try:
                self.cgroup_id = os.stat(options.cgroup).st_ino
            except OSError as e:
                raise JstallError(f"--cgroup {options.cgroup}: {e.strerror}; give a cgroup v2 directory") from None
        self.task_filter = bool(options.pid or options.command_tree or self.cgroup_id)
        self.bpf = None
        self.attached, self.missing = [], []
        self.btf_typed = []                               # tracepoints whose programs load BTF-typed
        self.btf_refused = {}                             # tracepoint -> why its typed program was refused
        self.call_slots = self._call_slot_rows()          # syscall nr -> its call_slots row
        self._btf_trace_ids = {}                          # tracepoint -> (btf_trace_<name> type id, module) (_cflags)
        self._fentry_ids = {}                             # call -> its syscall function's BTF id (fentry mode)
        self._xfs_refused = None                          # why the XFS programs did not compile (_compile)
        self._syscall_args = False                        # pt_regs' argument offsets are known (_cflags)

    # ---- set-up -------------------------------------------------------------------

    #: the top program compiled (bpf_text inlines its parts)
    source = BPF_SOURCE

    #: a traced task's handle waits outside traced calls are recorded (HANDLE_WAITS)
    handle_waits = True
    #: who woke each off-CPU interval inside a traced call is recorded (WAIT_CHAINS)
    wait_chains = True
    #: the blocks forced checkpoints write home are counted (HOME_WRITES; needs handle_waits:
    #: a checkpointing task's handle start ends its checkpoint)
    home_writes = True
    #: what each process put into each journal is counted in the kernel (WRITERS: the
    #: writers map, read by the owner with read_writers)
    writers = True
    #: each file's set extended attributes are noted (XATTR_FILES: the xattr_files map)
    xattr_files = True

    @property
    def xattr_files_noted(self):
        """XATTR_FILES: a call that sets an attribute is traced, and its arguments are read."""
        return bool(self.xattr_files and set(syscalls.XATTR_SET) & set(self.syscall_numbers)
                    and self._syscall_args)

    @property
    def xfs_log(self):
        """The XFS probes are compiled in (XFS_LOG): an XFS is traced and the kernel has its
        tracepoints (xfs as a module: loaded once an XFS is mounted)."""
        return (not self._xfs_refused
                and any(kinds.is_xfs(j) for j in self.journals.values())
                and all(host.tracepoint_exists("xfs", tp)
                        for tp in XFS_TRACEPOINTS + XFS_WRITER_TRACEPOINTS * self.writers))

    def _call_slot_rows(self):
        """{syscall nr: row}: each traced syscall counts its calls in a row of per-CPU array
        slots (call_slots) rather than the call_stats hash; tables.call_counters reads both."""
        return {nr: row for row, nr in enumerate(self.syscall_numbers.values())}

    def _cflags(self):
        names = set(BTF_TRACEPOINTS) | {tp for plan in HANDLE_START_PLANS for tp, _ in plan}
        prefix = btf.SYSCALL_PREFIX.get(os.uname().machine)
        funcs = {n: prefix + n for n in self.syscall_numbers} if prefix else {}
        known = btf.facts([f"btf_trace_{n}" for n in names], funcs.values())
        defines, ids = dict(known["defines"]), known["typedefs"]
        self._btf_trace_ids = {n: tuple(ids[f"btf_trace_{n}"]) for n in names if f"btf_trace_{n}" in ids}
        self._fentry_ids = self._resolve_attach(funcs, known["funcs"])
        for struct_name, dt in events.DTYPES.items():
            defines[f"SIZEOF_{struct_name}"] = dt.itemsize
        self._syscall_args = bool(defines.get("SYSCALL_ARGS"))
        xfs_log = self.xfs_log
        defines.update(
            MIN_NS=int(self.opts.min_ms * 1e6),
            OFFCPU_MIN_NS=int(self.opts.offcpu_min_us * 1000),
            FILL_SAMPLE_NS=FILL_SAMPLE_NS,
            FILL_SAMPLE_SURE_TICKS=FILL_SAMPLE_NS * hz // 1_000_000_000 if (hz := host.config_hz()) else 0,
            COMMIT_EVENTS=int(all(host.tracepoint_exists("jbd2", f"jbd2_{e}_commit") for e in ("start", "end"))),
            RB_PAGES=RING_PAGES,
            RB_WAKE_EVERY=RB_WAKE_EVERY,
            STACK_ENTRIES=STACK_ENTRIES,
            STACK2_ENTRIES=tables.STACK2_ENTRIES,
            HIST_BUCKETS=HIST_BUCKETS,
            FILTER_PID=0,  # -p traces the process's tree (FILTER_TREE), seeded with the pid
            FILTER_TREE=int(bool(self.opts.command_tree or self.opts.pid)),
            FILTER_DEV=int(bool(self.devices)),
            FILTER_CGROUP=self.cgroup_id or 0,
            PER_SYSCALL_TRACEPOINTS=int(self.attach_mode == "syscalls"),
            FENTRY_SYSCALLS=int(self.attach_mode == "fentry"),
            HANDLE_WAITS=int(self.handle_waits),
            HOME_WRITES=int(self.home_writes_counted),
            HOME_BLOCKS_MAX=HOME_BLOCKS_MAX,
            XATTR_FILES=int(self.xattr_files_noted),
            XATTR_FILES_MAX=XATTR_FILES_MAX,
            WAIT_CHAINS=int(self.wait_chains),
            TASK_PT_REGS=int((host.kernel_version() or (0, 0)) >= (5, 15)),
            XFS_LOG=int(xfs_log),
            WRITERS=int(self.writers),
            WRITERS_MAX=WRITERS_MAX,
            WORK_FNS_MAX=WORK_FNS_MAX,
            WORKER_ITEMS_MAX=WORKER_ITEMS_MAX,
            XFS_GRANT_CYCLES=int(xfs_log and not host.tracepoint_has_field("xfs", "xfs_log_grant_sleep", "tail_space")),
            XFS_TRACE_TIC=int(xfs_log and host.tracepoint_has_field("xfs", "xfs_log_grant_sleep", "tic")),
            SELF_TGID=os.getpid(),
            CALL_SLOTS=max(len(self.call_slots), 1),
            STATS_WAYS=tables.CALL_SLOT_WAYS,
        )
        # -w: clang's warnings about the kernel's own headers (6.12's nocf_check, ...) are
        # not the user's business, and would land on the traced command's stderr
        return [f"-D{k}={v}" for k, v in defines.items()] + [f"-I{os.path.dirname(BPF_SOURCE)}", "-w"]

    def _resolve_attach(self, funcs, found):
        """Settle the attach mode ("auto": fentry where the kernel takes it, else syscalls)
        and return {call: its syscall function's BTF id} for the fentry mode ({} otherwise),
        from ``funcs`` ({call: its syscall function}) and ``found`` ({function: BTF id}). An
        empty fentry program is loaded on the first call's function to ask the kernel."""
        if self.attach_mode not in ("auto", "fentry"):
            return {}
        ids = {n: found[f] for n, f in funcs.items() if f in found}
        reason = None
        if not funcs:
            reason = f"no syscall functions known on {os.uname().machine}"
        elif len(ids) < len(funcs):
            reason = "no BTF for " + ", ".join(sorted(set(funcs.values()) - set(found)))
        else:
            name = next(iter(ids))
            fd = bpfsys.load_tracing_program(bpfsys.EMPTY_PROGRAM, bpfsys.BPF_TRACE_FENTRY, ids[name], b"jstall_probe")
            if isinstance(fd, str):
                reason = f"the kernel refuses fentry on {funcs[name]}: {fd}"
            else:
                os.close(fd)
        if reason is None:
            self.attach_mode = "fentry"
            return ids
        if self.attach_mode == "fentry":
            raise JstallError(f"JSTALL_ATTACH=fentry: {reason}; use JSTALL_ATTACH=syscalls (or auto)")
        self.attach_mode, self.attach_note = "syscalls", f"fentry not used: {reason}"
        log.debug("%s", self.attach_note)
        return {}

    def _compile(self):
        os.environ.update(host.kernel_headers_env())
        from bcc import BPF  # Debian's python3-bpfcc

        cflags = self._cflags()
        try:
            return BPF(text=bpf_text(self.source).encode(), cflags=cflags)
        except Exception as e:
            if self.xfs_log:   # this kernel's XFS tracepoints: the rest is recorded without them
                self._xfs_refused = f"the XFS programs did not compile ({e})"
                log.warning("%s; tracing without XFS log waits", self._xfs_refused)
                return self._compile()
            raise JstallError(
                f"bcc could not compile the probes ({e}); if it says headers are missing, run "
                "'sh scripts/setup.sh' (builds the generic-header fallback) or install linux-headers-$(uname -r)"
            ) from None

    def _attach(self, b):
        traced = b[b"traced_nr"]
        for name, nr in self.syscall_numbers.items():
            row = self.call_slots.get(nr)
            slot = row + 1 if row is not None else 0
            traced[ctypes.c_uint32(nr)] = traced.Leaf(syscalls.probe_flags(name) | slot << 8)
        if self.attach_mode == "fentry":
            insns = {kind: b.dump_func(f"{kind}_call".encode()) for kind in ("fentry", "fexit")}
            for name in self.syscall_numbers:
                for kind, attach_type in (("fentry", bpfsys.BPF_TRACE_FENTRY), ("fexit", bpfsys.BPF_TRACE_FEXIT)):
                    point = f"{kind}:{btf.SYSCALL_PREFIX[os.uname().machine]}{name}"
                    prog_fd, link_fd = bpfsys.load_and_attach(insns[kind], attach_type, self._fentry_ids[name],
                                                              f"{kind}_{name}".encode())
                    if link_fd is None:
                        raise JstallError(f"cannot attach {point} ({prog_fd}); use JSTALL_ATTACH=syscalls")
                    from bcc import BPF

                    b.funcs[point.encode()] = BPF.Function(b, point.encode(), prog_fd)  # closed by b.cleanup()
                    b.raw_tracepoint_fds[point.encode()] = link_fd                      # detached by b.cleanup()
                    self.attached.append(point)
        elif self.attach_mode == "syscalls":
            for name in self.syscall_numbers:
                for kind in ("enter", "exit"):
                    tp = f"sys_{kind}_{name}"
                    if not host.tracepoint_exists("syscalls", tp):
                        self.missing.append(f"syscalls:{tp}")
                        continue
                    fn = ("sc_enter_xattr" if kind == "enter" and name in syscalls.XATTR_SET
                          else "sc_enter_at" if kind == "enter" and name in syscalls.PATH_ARG1 else f"sc_{kind}")
                    b.attach_tracepoint(tp=f"syscalls:{tp}".encode(), fn_name=fn.encode())
                    self.attached.append(f"syscalls:{tp}")
        else:
            for name in ("sys_enter", "sys_exit"):
                if not host.tracepoint_exists("raw_syscalls", name):
                    raise JstallError(f"tracepoint raw_syscalls:{name} is missing; "
                                      "jstall needs a kernel with CONFIG_FTRACE_SYSCALLS")
                b.attach_raw_tracepoint(tp=name.encode(), fn_name=f"on_{name}".encode())
                self.attached.append(f"raw:raw_syscalls:{name}")
        for cat, tp, prog in self._tracepoints():
            if not host.tracepoint_exists(cat, tp):
                self.missing.append(f"raw:{cat}:{tp}")
                continue
            # a BTF-typed raw tracepoint where the kernel takes it, else its untyped twin
            if not (prog in BTF_TRACEPOINTS and self._attach_btf(b, prog, tp)):
                b.attach_raw_tracepoint(tp=tp.encode(), fn_name=f"rtp_{prog}".encode())
            self.attached.append(f"raw:{cat}:{tp}")
        self._attach_writers(b)
        if self.home_writes_counted:
            if host.tracepoint_exists("block", "block_bio_queue"):
                b.attach_raw_tracepoint(tp=b"block_bio_queue", fn_name=b"rtp_block_bio_queue")
                self.attached.append("raw:block:block_bio_queue")
            else:
                self.missing.append("raw:block:block_bio_queue")
        self._note_xfs()
        sched = ["sched_switch"] + (["sched_process_fork"] if self.opts.command_tree or self.opts.pid else [])
        for name in sched:
            if not (name in BTF_TRACEPOINTS and self._attach_btf(b, name)):
                b.attach_raw_tracepoint(tp=name.encode(), fn_name=f"rtp_{name}".encode())
            self.attached.append(f"raw:sched:{name}")
        if self.wait_chains:
            # the waker goes where sched_switch keeps the interval: the typed program writes
            # the task storage only a typed sched_waking reads, the untyped one the hash
            if "sched_switch" in self.btf_typed:
                if self._attach_btf(b, "sched_waking"):
                    self.attached.append("raw:sched:sched_waking")
                else:
                    self.missing.append("raw:sched:sched_waking (typed)")
            else:
                b.attach_raw_tracepoint(tp=b"sched_waking", fn_name=b"rtp_sched_waking")
                self.attached.append("raw:sched:sched_waking")
            self._attach_workers(b)
        if self.missing and not self.opts.quiet:
            log.warning("tracepoints missing on this kernel, not recorded: %s", " ".join(self.missing))

    def _attach_workers(self, b):
        """The kernel workers' work items (WAIT_CHAINS): work_fns from kallsyms, then the
        workqueue tracepoints that mark a worker inside one."""
        fns = work_functions()
        table = b[b"work_fns"]
        for addr in fns[:WORK_FNS_MAX]:
            table[ctypes.c_uint64(addr)] = ctypes.c_uint8(1)
        for tp in ("workqueue_execute_start", "workqueue_execute_end"):
            if not host.tracepoint_exists("workqueue", tp):
                self.missing.append(f"raw:workqueue:{tp}")
                continue
            b.attach_raw_tracepoint(tp=tp.encode(), fn_name=f"rtp_{tp}".encode())
            self.attached.append(f"raw:workqueue:{tp}")

    def _attach_writers(self, b):
        """jbd2_handle_stats for the writers' counts (the XFS ones bcc attached as it loaded)."""
        if not self.writers:
            return
        if host.tracepoint_exists("jbd2", "jbd2_handle_stats"):
            b.attach_raw_tracepoint(tp=b"jbd2_handle_stats", fn_name=b"rtp_jbd2_handle_stats")
            self.attached.append("raw:jbd2:jbd2_handle_stats")
        else:
            self.missing.append("raw:jbd2:jbd2_handle_stats")

    def _note_xfs(self):
        """List the XFS tracepoints as attached (bcc attached them as it loaded their
        programs) or, on a traced XFS, as missing and why."""
        if self.xfs_log:
            self.attached += [f"xfs:{tp}" for tp in XFS_TRACEPOINTS + XFS_WRITER_TRACEPOINTS * self.writers]
        elif any(kinds.is_xfs(j) for j in self.journals.values()):
            refused = self._xfs_refused
            self.missing += [f"xfs:{tp}" + (f" ({refused})" if refused else "") for tp in XFS_TRACEPOINTS
                             if refused or not host.tracepoint_exists("xfs", tp)]

    def _tracepoints(self):
        """(category, tracepoint, program suffix) of the ext4 and jbd2 tracepoints to
        attach, by this kernel's attach plan (handle_start_plan)."""
        return ([("ext4", tp, prog) for tp, prog in handle_start_plan()]
                + [("jbd2", n, n) for n in JBD2_RAW_TRACEPOINTS + ("jbd2_handle_start",) * self.handle_waits])

    def _attach_btf(self, b, name, tracepoint=None):
        """Load btf_<name> as a BTF-typed raw tracepoint program on tracepoint (default:
        name; once) and attach it (bcc loads only untyped raw tracepoints); False where the
        kernel refuses. A module's tracepoint (ext4, jbd2 as modules) is named by the
        module's BTF object and its type id there."""
        tracepoint = tracepoint or name
        type_id, module = self._btf_trace_ids.get(tracepoint, (None, None))
        fn_name = f"btf_{name}".encode()
        if not type_id:
            return False
        if fn_name in b.funcs:   # loaded before, detached since: attach it again
            link_fd = bpfsys.open_btf_link(b.funcs[fn_name].fd)
            if link_fd is None:
                return False
        else:
            try:
                insns = b.dump_func(fn_name)
            except Exception:  # not in this build of the probes
                return False
            prog_fd, link_fd = bpfsys.load_and_attach(insns, bpfsys.BPF_TRACE_RAW_TP, type_id, fn_name, module)
            if link_fd is None:
                log.debug("tracepoint %s: no BTF-typed program (%s); a raw one instead", tracepoint, prog_fd)
                self.btf_refused[tracepoint] = prog_fd[:300]
                return False
            from bcc import BPF

            b.funcs[fn_name] = BPF.Function(b, fn_name, prog_fd)   # closed by b.cleanup()
        b.raw_tracepoint_fds[tracepoint.encode()] = link_fd        # detached by b.cleanup()
        if tracepoint not in self.btf_typed:
            self.btf_typed.append(tracepoint)
        return True

    # ---- attached -----------------------------------------------------------------

    def open(self, on_record):
        """Compile and attach the probes; ``on_record(ctx, data, size)`` is called for each
        ring-buffer record as the owner polls (bpf.ring_buffer_poll/consume). Returns self."""
        b = self.bpf = self._compile()
        try:
            one = ctypes.c_uint8(1)
            for dev in self.devices:
                major, minor = filesystems.parse_dev(dev)
                b[b"devices"][ctypes.c_uint32(filesystems.kernel_dev(major, minor))] = one
            if self.opts.pid:
                for tgid in [self.opts.pid] + host.descendants(self.opts.pid):
                    self.trace_tgid(tgid)
            self._attach(b)
            for name in RINGS:
                b[name.encode()].open_ring_buffer(on_record)
        except BaseException:
            self.close()
            raise
        return self

    def close(self):
        """Detach every program and free the maps (idempotent)."""
        if self.bpf is not None:
            detach_together(self.bpf)
            self.bpf.cleanup()
            self.bpf = None

    def trace_tgid(self, tgid):
        """Add a process (and, through sched_process_fork, its descendants) to the traced tree."""
        self.bpf[b"tgids"][ctypes.c_uint32(tgid)] = ctypes.c_uint8(1)

    def untrace_tgid(self, tgid):
        if self.bpf is None:
            return
        try:
            del self.bpf[b"tgids"][ctypes.c_uint32(tgid)]
        except KeyError:
            pass

    def used_devs(self):
        """Journals the traced tasks used ('MAJ:MIN'), read from the probes' map."""
        return {filesystems.dev_name(int(k.value)) for k in self.bpf[b"used_devs"].keys()}

    def lost(self):
        """{'calls', 'offcpu', 'jbd2', 'stacks', 'skipped'} (and 'home_writes' where counted):
        records the kernel could not hand over (home_writes: blocks written home not counted,
        the map being full), and the runs of the programs it skipped (:meth:`skipped`)."""
        c = events.lost_counts(self.bpf)
        return {**{k: c[k] for k in ("calls", "offcpu", "jbd2", "stacks") + ("home_writes",) * self.home_writes_counted
                   + ("writers",) * self.writers}, "skipped": self.skipped()}

    def skipped(self):
        """Runs of the probes' programs the kernel skipped, a BPF program being active on the
        CPU already (bpf_prog_info.recursion_misses, summed): events nothing saw. On
        PREEMPT_RT a task preempted inside a BPF map operation (bpf_disable_instrumentation)
        holds its CPU's guard meanwhile. The kernel counts these for fentry (since 5.12), raw
        and BTF-typed tracepoints (6.1) and perf (syscall) tracepoints (6.7)."""
        infos = (bpfsys.prog_info(f.fd) for f in list(self.bpf.funcs.values()))
        return sum(i["recursion_misses"] for i in infos if i)

    def writers_since(self, committed=()):
        """What each writer put into each journal since the last call (read_writers' counts
        less those it returned then), keys whose counts grew only; ``committed`` as for
        read_writers."""
        now = self.read_writers(committed)
        seen = getattr(self, "_writers_seen", {})
        rows = {}
        for k, v in now.items():
            was = seen.get(k)
            d = tuple(v[i] - (was[i] if was else 0) for i in range(4))
            if any(d):
                rows[k] = d + v[4:]
        # an XFS key (no transaction to end it) idle since the last read leaves the map, so
        # that short-lived processes do not fill it; a count between the read and the delete
        # would be lost, for a writer idle a whole interval before
        idle = {k for k, v in now.items() if k[3] is None and seen.get(k, (None,))[:4] == v[:4]}
        for k in idle:
            try:
                del self.bpf[b"writers"][self._writer_keys[k]]
            except KeyError:
                pass
        self._writers_seen = {k: v for k, v in now.items()
                              if (k[3] is None or (k[1], k[3]) not in committed) and k not in idle}
        return rows

    def read_writers(self, committed=()):
        """What each writer put into each journal so far, summed over CPUs:
        {(tgid, dev 'MAJ:MIN', cgroup id, transaction or None): (handles, requested_blocks,
        dirtied_blocks, logged_bytes, first_ns, comm)}; then the keys of the transactions in
        ``committed`` ({(dev 'MAJ:MIN', transaction)}: their commits ended, so no handle
        counts into them any more) are deleted from the map. {} when not counted."""
        if not (self.writers and self.bpf is not None):
            return {}
        m = self.bpf[b"writers"]
        out, done, self._writer_keys = {}, [], {}
        none = events.DEFINES["WRITER_NO_TRANSACTION"]
        for k, per_cpu in m.items():
            dev = filesystems.dev_name(int(k.dev))
            tx = None if k.transaction == none else int(k.transaction)
            first = [int(v.first_ns) for v in per_cpu if v.first_ns]
            comm = next((bytes(v.comm).rstrip(b"\0").decode(errors="replace") for v in per_cpu if v.comm), "")
            self._writer_keys[(int(k.tgid), dev, int(k.cgroup_id), tx)] = k
            out[(int(k.tgid), dev, int(k.cgroup_id), tx)] = (
                sum(int(v.handles) for v in per_cpu), sum(int(v.requested_blocks) for v in per_cpu),
                sum(int(v.dirtied_blocks) for v in per_cpu), sum(int(v.logged_bytes) for v in per_cpu),
                min(first) if first else 0, comm)
            if tx is not None and (dev, tx) in committed:
                done.append(k)
        for k in done:
            try:
                del m[k]
            except KeyError:
                pass
        return out

    def read_home_writes(self):
        """The blocks forced checkpoints wrote home so far: {(dev 'MAJ:MIN', sector): (writes,
        first_ns, last_ns)}, read from the probes' map ({} when not counted)."""
        if not (self.home_writes_counted and self.bpf is not None):
            return {}
        return {(filesystems.dev_name(int(k.dev)), int(k.sector)): (int(v.writes), int(v.first_ns), int(v.last_ns))
                for k, v in self.bpf[b"home_writes"].items()}

    def read_xattr_files(self):
        """What each file's set extended attributes take in an inode: {(dev 'MAJ:MIN', bytes):
        files}, bytes the entries' sum with the 4-byte end marker ({} when not noted)."""
        if not (self.xattr_files_noted and self.bpf is not None):
            return {}
        out = {}
        for k, v in self.bpf[b"xattr_files"].items():
            key = (filesystems.dev_name(int(k.dev)), 4 + sum(int(b) for b in v.entry_bytes) + int(v.more_bytes))
            out[key] = out.get(key, 0) + 1
        return out

    @property
    def home_writes_counted(self):
        """The blocks forced checkpoints write home are counted (HOME_WRITES)."""
        return bool(self.home_writes and self.handle_waits)

    def stack_frames(self, stack_id):
        """The kernel frames of a stored stack id (innermost first), or None once it is gone."""
        try:
            addrs = tables.stack_addrs(self.bpf, stack_id)
            return [self.bpf.ksym(addr).decode(errors="replace") for addr in addrs]
        except KeyError:
            return None
