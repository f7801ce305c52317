/* jstall recorder: jbd2 lifecycle and journal fill, metadata syscalls, off-CPU stacks.
 *
 * Compiled by bcc with these macros from probes/probeset.py (ProbeSet._cflags, monitor/tracer.py):
 *   <FIELD>_OFF / <FIELD>_SIZE  struct member offsets and sizes from the kernel's BTF
 *   MIN_NS                      calls at or above this latency are emitted one by one
 *   OFFCPU_MIN_NS               off-CPU intervals above this are emitted
 *   FILL_SAMPLE_NS              at most one fill sample per journal per this interval
 *   FILL_SAMPLE_SURE_TICKS      fewer jiffies than this since a sample: less than FILL_SAMPLE_NS
 *                               for sure (0: unknown HZ, always ask the clock)
 *   COMMIT_EVENTS               jbd2_start_commit and jbd2_end_commit are both attached
 *   FILTER_PID, FILTER_TREE, FILTER_DEV, FILTER_CGROUP   filters (0 = off)
 *   SIZEOF_<struct>             record sizes the Python side decodes
 *   SYSCALL_ARGS, ARG0_OFF, ARG1_OFF  where pt_regs holds a syscall's first two arguments
 *   SYSCALL_NR_OFF              where pt_regs holds the syscall's number (fentry mode)
 *   SYSCALL_CONTEXT, SYSCALL_RET_OFF  where pt_regs holds the return value, -ENOSYS inside a
 *                               syscall (x86_64): what a handle wait's task was doing
 *   SELF_TGID                   the recorder's own process, never traced
 *   CALL_SLOTS, STATS_WAYS      rows of the call_slots counters (one per traced syscall, or per
 *                               monitor operation), and counters per row (a power of 2)
 *
 * Sections, each behind a compile-time switch so modes can leave them out:
 *   common            maps, field reads, filters, a file descriptor's device and name
 *   TRACE_SYSCALLS    metadata syscalls (raw_syscalls) and their off-CPU intervals
 *   journal handles   which journal a call (or a traced task) uses; fill samples
 *   jbd2 lifecycle    commits, checkpoints, log tail, statistics of traced journals
 *   TRACE_FORKS       the traced process tree (sched_process_fork)
 *   MONITOR_OPS       the monitor's fs-level operations instead of syscalls (handle waits,
 *                     fsync); needs TASK_JOURNAL_INFO_* and FILE_INODE_* too
 *   WAIT_CHAINS       who woke each off-CPU interval inside a traced call (sched_waking)
 *   XFS_LOG           XFS log reservations: a traced call's XFS device, and each log-space
 *                     wait of a traced task or a kernel thread with the grant heads and what
 *                     the AIL did
 *                     (XFS_GRANT_CYCLES: the kernel's heads are (cycle, bytes), before 6.11;
 *                     XFS_TRACE_TIC: its tracepoints carry the ticket's address)
 */
#ifndef TRACE_SYSCALLS
#define TRACE_SYSCALLS 1
#endif
/* 1: per-syscall tracepoints (syscalls:sys_enter_<name>); 0: raw_syscalls, or with
 * FENTRY_SYSCALLS fentry/fexit on the syscalls' functions */
#ifndef PER_SYSCALL_TRACEPOINTS
#define PER_SYSCALL_TRACEPOINTS 0
#endif
#ifndef FENTRY_SYSCALLS
#define FENTRY_SYSCALLS 0
#endif
#ifndef TRACE_FORKS
#define TRACE_FORKS 1
#endif
#ifndef MONITOR_OPS
#define MONITOR_OPS 0
#endif
/* 1: a traced task's journal handle wait outside every traced call is an operation of its
 * own (OP_JOURNAL_START, from ext4_journal_start* to jbd2_handle_start), whatever the task
 * was doing: a call not traced, a page fault, a kernel thread */
#ifndef HANDLE_WAITS
#define HANDLE_WAITS 0
#endif
#if HANDLE_WAITS && !TRACE_SYSCALLS
#error "HANDLE_WAITS needs TRACE_SYSCALLS"
#endif
/* 1: the waker of each off-CPU interval inside a traced call is recorded (sched_waking):
 * a wait queued behind another task (a lock it held) can take that task's cause */
#ifndef WAIT_CHAINS
#define WAIT_CHAINS 0
#endif
/* 1: bpf_task_pt_regs() (5.15) and SYSCALL_CONTEXT: a handle wait names its syscall */
#ifndef TASK_PT_REGS
#define TASK_PT_REGS 0
#endif
#ifndef XFS_LOG
#define XFS_LOG 0
#endif
#ifndef XFS_GRANT_CYCLES
#define XFS_GRANT_CYCLES 0
#endif
#ifndef XFS_TRACE_TIC
#define XFS_TRACE_TIC 1   /* the loggrant tracepoints carry the ticket (since 6.11) */
#endif
/* any task filter: jbd2 events are kept only for journals the traced tasks used */
#define FILTER_TASKS (FILTER_PID || FILTER_TREE || FILTER_CGROUP)

/* per-syscall-number flags in traced_nr (probes/syscalls.py probe_flags) */
#define NR_TRACED 1
#define NR_FD_ARG0 2
#define NR_RETURNS_FD 4
#define NR_PATH_ARG0 8
#define NR_PATH_ARG1 16
#include <uapi/linux/ptrace.h>
#include <linux/types.h>
#include "jstall_events.h"

#ifndef ENOMEM
#define ENOMEM 12
#endif
#ifndef EEXIST
#define EEXIST 17
#endif
#define ENOSYS_VALUE 38
#define PF_KTHREAD_FLAG 0x00200000   /* include/linux/sched.h PF_KTHREAD */
#define REQ_OP_MASK_VALUE 0xff       /* include/linux/blk_types.h: (1 << REQ_OP_BITS) - 1 */
#define REQ_OP_WRITE_VALUE 1

_Static_assert(sizeof(struct call_event) == SIZEOF_call_event, "call_event layout");
_Static_assert(sizeof(struct offcpu_event) == SIZEOF_offcpu_event, "offcpu_event layout");
_Static_assert(sizeof(struct jbd2_event) == SIZEOF_jbd2_event, "jbd2_event layout");
_Static_assert(sizeof(struct run_stats_event) == SIZEOF_run_stats_event, "run_stats_event layout");
_Static_assert(sizeof(struct checkpoint_stats_event) == SIZEOF_checkpoint_stats_event, "checkpoint_stats layout");
_Static_assert(sizeof(struct log_tail_event) == SIZEOF_log_tail_event, "log_tail_event layout");
_Static_assert(sizeof(struct fill_event) == SIZEOF_fill_event, "fill_event layout");
_Static_assert(sizeof(struct xfs_wait_event) == SIZEOF_xfs_wait_event, "xfs_wait_event layout");

/* A traced call in flight, per thread. */
struct inflight {
	__u64 ts_ns;
	__u32 syscall_nr;
	__u32 dev;
	__u32 handles;
	__u32 pid;
	__u16 flags;       /* NR_* of the call */
	__u16 slot;        /* its call_slots row + 1, 0: counted in call_stats */
	__u32 dev_checked; /* dev passed the device filter (call_end need not look again) */
	__u64 arg0;        /* first two arguments (per-syscall tracepoints only) */
	__u64 arg1;
	__u64 free_first;
	__u64 free_min;
	__u64 log_blocks;
	__u64 credits_first;
	/* the journal of the call's first handle: a later handle on the same super_block
	 * reads only j_free (the call pins its filesystem, so the pointers stay valid) */
	__u64 jsb;
	__u64 journal;
	__u32 jdev;
	/* an off-CPU interval inside the call, from the switch-out (tp_btf sched_switch) */
	__s32 off_stack_id;
	__u64 off_ts_ns;   /* 0: the thread is on a CPU */
	__s64 off_state;
	struct jstall_waker off_waker;  /* who woke it (WAIT_CHAINS) */
	__s32 context_nr;  /* a handle wait's: call_event.context_nr */
	__u32 task_flags;
};

/* Fill-sample clock of a traced journal, in an array slot chosen by its device:
 * no hash on the handle path. Two devices in one slot take it in turn (each then
 * samples at every handle until the other comes back: more samples, none wrong). */
struct dev_clock {
	__u32 dev;
	__u32 traced;      /* CLOCK_TRACED or CLOCK_UNTRACED, fixed for the session's filters */
	__u64 last_ns;     /* last fill sample */
	__u64 last_jiffies; /* jiffies read just before last_ns */
	__u32 idle_dev;    /* == dev: dev's journal has no committing transaction (see note_commit) */
	__u32 pad;
};
#define CLOCK_TRACED 1
#define CLOCK_UNTRACED 2
#define FILL_SLOTS 256

/* A traced thread switched out (untyped sched_switch); the call's fields are copied
 * because only the current task's storage can be read there. */
struct offstart {
	__u64 ts_ns;
	__s64 state;
	__s32 stack_id;
	__u32 syscall_nr;
	__u64 call_ts_ns;
	__u32 pid;
	__u32 dev;
	struct jstall_waker waker;   /* who woke it (WAIT_CHAINS) */
};

struct call_key {
	__u32 syscall_nr;
	__u32 dev;
};

/* Every call of one syscall on one device: totals and log2(latency_ns) buckets. */
struct call_stats {
	__u64 count;
	__u64 errors;
	__u64 total_ns;
	__u64 max_ns;
	__u64 buckets[HIST_BUCKETS];
};

BPF_RINGBUF_OUTPUT(calls_rb, RB_PAGES);
BPF_RINGBUF_OUTPUT(offcpu_rb, RB_PAGES);
BPF_RINGBUF_OUTPUT(jbd2_rb, RB_PAGES);
BPF_PERCPU_ARRAY(counters, __u64, NR_COUNTERS);  /* summed by the reader */
BPF_PERCPU_ARRAY(rb_unannounced, __u64, 1);      /* records since this CPU last woke the reader */
BPF_TASK_STORAGE(inflight, struct inflight);   /* ts_ns == 0: no traced call */
BPF_HASH(offstart, __u32, struct offstart, 65536);
BPF_STACK_TRACE(stacks, STACK_ENTRIES);
BPF_STACK_TRACE(stacks2, STACK2_ENTRIES);   /* a second way: kernel_stack_id() */
/* A call_slots counter: a syscall's row holds STATS_WAYS of them, chosen by device; each
 * CPU's copy belongs to the first device counted in it (owner), others go to call_stats. */
struct slot_stats {
	__u64 owner;       /* OWNER_BIT | dev, 0: unused */
	struct call_stats stats;
};
#define OWNER_BIT (1ULL << 32)

BPF_PERCPU_HASH(call_stats, struct call_key, struct call_stats, 4096);  /* summed by the reader */
BPF_PERCPU_ARRAY(call_slots, struct slot_stats, CALL_SLOTS * STATS_WAYS); /* ... with these */
BPF_HASH(journals, __u32, __u64, 256);          /* dev -> journal_t * */
BPF_ARRAY(fill_clock, struct dev_clock, FILL_SLOTS);  /* fill_slot(dev) -> clock */
BPF_ARRAY(offstart_pending, __u64, 1);          /* entries in offstart: 0 = nothing to look up */
BPF_HASH(devices, __u32, __u8, 64);             /* device filter */
BPF_HASH(tgids, __u32, __u8, 65536);            /* traced process tree */
BPF_HASH(used_devs, __u32, __u8, 256);          /* journals the traced tasks used (task filters) */
BPF_ARRAY(traced_nr, __u16, 1024);              /* syscall number -> NR_* flags | call_slots row + 1 << 8; 0 = untraced */
#if HOME_WRITES
BPF_HASH(checkpointing, __u32, __u32, 4096);    /* tid -> the journal's dev it checkpoints, until its handle starts */
BPF_ARRAY(checkpointing_tasks, __s64, 1);       /* entries in checkpointing: 0 = no bio to look at */
BPF_HASH(writing_journal_sb, __u32, __u8, 4096); /* tid: its next write bio is the journal's superblock */
/* the blocks forced checkpoints wrote home: allocated as they come (HOME_BLOCKS_MAX at most) */
BPF_F_TABLE("hash", struct home_key, struct home_val, home_writes, HOME_BLOCKS_MAX, BPF_F_NO_PREALLOC);
#endif

/* Read a scalar or pointer member; the array type fails to compile for a wider one. */
#define READ_FIELD(base, NAME) \
	read_sized((const void *)(base) + NAME##_OFF, NAME##_SIZE + 0 * sizeof(char[NAME##_SIZE <= 8 ? 1 : -1]))

/* A direct load of a member from a BTF-typed kernel pointer (programs loaded as BTF-typed
 * raw tracepoints, tp_btf: the verifier knows the pointer's type from the tracepoint's
 * arguments and checks the member; a faulting load gives 0). No helper call: each
 * bpf_probe_read_kernel costs ~35 ns here. A pointer member loaded so is typed in turn. */
#define LOAD_FIELD(base, NAME) ({                                                                  \
	__u64 __v = 0;                                                                              \
	_Static_assert(NAME##_SIZE == 8 || NAME##_SIZE == 4, #NAME ": 4 or 8 bytes");              \
	if (NAME##_SIZE == 8)                                                                       \
		asm volatile("%0 = *(u64 *)(%1 + %2)" : "=r"(__v) : "r"(base), "i"(NAME##_OFF));    \
	else                                                                                        \
		asm volatile("%0 = *(u32 *)(%1 + %2)" : "=r"(__v) : "r"(base), "i"(NAME##_OFF));    \
	__v; })

/* A member read one way or the other: typed (a constant once inlined) when base is a
 * BTF-typed pointer (tp_btf programs) */
#define FIELD(typed, base, NAME) ((typed) ? LOAD_FIELD(base, NAME) : READ_FIELD(base, NAME))

static __always_inline __u64 read_sized(const void *addr, int size)
{
	__u64 v = 0;
	/* little-endian: a narrower field lands in the low bytes */
	bpf_probe_read_kernel(&v, size & 0xf, addr);
	return v;
}

static __always_inline void count(__u32 idx)
{
	__u64 *c = counters.lookup(&idx);   /* this CPU's slot: no atomic needed */
	if (c)
		(*c)++;
}

/* The flags a record goes into its ring buffer with. bpf_ringbuf_commit() queues an
 * irq_work to wake the reader (a self-IPI: a VM exit on a virtual machine, several
 * microseconds) for each record that lands in a ring the reader has emptied, unless
 * BPF_RB_NO_WAKEUP. The reader reads every ring every POLL_MS (recorder.py) anyway, so a
 * record wakes it only once RB_WAKE_EVERY records came from this CPU since the last
 * wakeup (BPF_RB_FORCE_WAKEUP): at most NR_CPUS x RB_WAKE_EVERY records, far less than a
 * ring holds, wait for a reader that is not polling yet. */
static __always_inline __u64 rb_flags(void)
{
	__u32 zero = 0;
	__u64 *n = rb_unannounced.lookup(&zero);
	if (!n || ++*n < RB_WAKE_EVERY)
		return BPF_RB_NO_WAKEUP;
	*n = 0;
	return BPF_RB_FORCE_WAKEUP;
}

static __always_inline void current_task(struct jstall_task *t)
{
	__u64 id = bpf_get_current_pid_tgid();
	t->tid = (__u32)id;
	t->pid = id >> 32;
	bpf_get_current_comm(&t->comm, sizeof(t->comm));
}

/* dev_t as the kernel encodes it: major << 20 | minor */
static __always_inline int dev_allowed(__u32 dev)
{
#if FILTER_DEV
	return devices.lookup(&dev) != NULL;
#else
	return 1;
#endif
}

static __always_inline int task_allowed(__u32 tgid)
{
	/* never the recorder itself: its own writes of the session are not the workload's */
	if (tgid == SELF_TGID)
		return 0;
#if FILTER_PID
	if (tgid != FILTER_PID)
		return 0;
#endif
#if FILTER_TREE
	if (!tgids.lookup(&tgid))
		return 0;
#endif
#if FILTER_CGROUP
	if (bpf_get_current_cgroup_id() != FILTER_CGROUP)
		return 0;
#endif
	return 1;
}

/* Is this journal's device one the session records jbd2 events of? With -d: the listed
 * filesystems; with a task filter: those the traced tasks used (a call or a handle
 * on it); system-wide: all. */
static __always_inline int journal_traced(__u32 dev)
{
#if FILTER_DEV
	return dev_allowed(dev);
#else
	return !FILTER_TASKS || used_devs.lookup(&dev) != NULL;
#endif
}

static __always_inline void mark_used(__u32 dev)
{
#if FILTER_TASKS && !FILTER_DEV
	if (dev && !used_devs.lookup(&dev)) {
		__u8 one = 1;
		used_devs.update(&dev, &one);
	}
#endif
}

/* The struct file * of the current task's descriptor fd, or 0:
 * current->files->fdt->fd[fd] (files_lookup_fd_raw() without the RCU rules, read once). */
static __always_inline __u64 fd_file(__u64 fd)
{
	__u64 task = bpf_get_current_task();
	__u64 files = READ_FIELD(task, TASK_FILES);
	__u64 fdt = files ? READ_FIELD(files, FILES_FDT) : 0;
	if (!fdt || fd >= (__u32)READ_FIELD(fdt, FDT_MAX_FDS))
		return 0;
	__u64 array = READ_FIELD(fdt, FDT_FD);
	__u64 file = 0;
	if (array)
		bpf_probe_read_kernel(&file, sizeof(file), (const void *)(array + fd * 8));
	return file;
}

/* file->f_inode->i_sb->s_dev: the filesystem an open file is on */
static __always_inline __u32 file_dev(__u64 file)
{
	__u64 inode = file ? READ_FIELD(file, FILE_INODE) : 0;
	__u64 sb = inode ? READ_FIELD(inode, INODE_SB) : 0;
	return sb ? (__u32)READ_FIELD(sb, SB_DEV) : 0;
}

/* file->f_path.dentry->d_name.name, as ext4slower prints it */
static __always_inline void file_name(__u64 file, char *buf, int size)
{
	__u64 dentry = file ? read_sized((const void *)file + FILE_PATH_OFF + PATH_DENTRY_OFF, 8) : 0;
	__u64 name = dentry ? read_sized((const void *)dentry + DENTRY_NAME_OFF + QSTR_NAME_OFF, 8) : 0;
	if (name)
		bpf_probe_read_kernel_str(buf, size, (const void *)name);
}

/* a syscall argument from the saved user registers (raw_syscalls pass struct pt_regs *) */
static __always_inline __u64 syscall_arg(__u64 regs, int off)
{
	return read_sized((const void *)regs + off, 8);
}

static __always_inline __u32 journal_dev(__u64 journal, int typed)
{
	__u64 bdev = FIELD(typed, journal, J_FS_DEV);
	return bdev ? (__u32)FIELD(typed, bdev, BDEV_DEV) : 0;
}

static __always_inline __s32 transaction_tid(__u64 transaction, int typed)
{
	return transaction ? (__s32)FIELD(typed, transaction, T_TID) : -1;
}

/* journal_t's log window: j_head, j_tail, j_free, j_first, j_last, adjacent unsigned
 * longs in struct journal_s (include/linux/jbd2.h), so one read serves them all. */
struct log_window {
	__u64 head;
	__u64 tail;
	__u64 free;
	__u64 first;
	__u64 last;
};
#define LOG_WINDOW_ADJACENT (J_TAIL_OFF == J_HEAD_OFF + 8 && J_FREE_OFF == J_HEAD_OFF + 16 && \
			     J_FIRST_OFF == J_HEAD_OFF + 24 && J_LAST_OFF == J_HEAD_OFF + 32 && \
			     J_HEAD_SIZE == 8 && J_TAIL_SIZE == 8 && J_FREE_SIZE == 8 && \
			     J_FIRST_SIZE == 8 && J_LAST_SIZE == 8)

static __always_inline void read_log_window(__u64 journal, struct log_window *w, int typed)
{
	if (typed) {
		w->head = LOAD_FIELD(journal, J_HEAD);
		w->tail = LOAD_FIELD(journal, J_TAIL);
		w->free = LOAD_FIELD(journal, J_FREE);
		w->first = LOAD_FIELD(journal, J_FIRST);
		w->last = LOAD_FIELD(journal, J_LAST);
		return;
	}
#if LOG_WINDOW_ADJACENT
	bpf_probe_read_kernel(w, sizeof(*w), (const void *)journal + J_HEAD_OFF);
#else
	w->head = READ_FIELD(journal, J_HEAD);
	w->tail = READ_FIELD(journal, J_TAIL);
	w->free = READ_FIELD(journal, J_FREE);
	w->first = READ_FIELD(journal, J_FIRST);
	w->last = READ_FIELD(journal, J_LAST);
#endif
}

static __always_inline void read_fill(__u64 journal, struct jstall_fill *f, int typed)
{
	if (!journal)
		return;
	struct log_window w = {};
	read_log_window(journal, &w, typed);
	f->free_blocks = w.free;
	f->head_block = w.head;
	f->tail_block = w.tail;
	f->first_block = w.first;
	f->last_block = w.last;
	f->journal_blocks = FIELD(typed, journal, J_TOTAL_LEN);
	f->max_transaction_blocks = FIELD(typed, journal, J_MAX_TX);
	f->running_transaction = transaction_tid(FIELD(typed, journal, J_RUNNING), typed);
	__u64 committing = FIELD(typed, journal, J_COMMITTING);
	f->committing_transaction = transaction_tid(committing, typed);
	/* jbd2_log_space_left() counts the committing transaction's outstanding
	 * credits as used: they decide, with j_free, whether a handle must wait. */
	f->committing_credits = committing ? (__s32)FIELD(typed, committing, T_OUTSTANDING_CREDITS) : 0;
	f->has_journal = 1;
}

/* dev -> journal for events that give only the device; updated only when it changed (an
 * update of a hash entry takes its bucket lock and replaces the element) */
static __always_inline void remember_journal(__u32 dev, __u64 journal)
{
	__u64 *j = journals.lookup(&dev);
	if (!j || *j != journal)
		journals.update(&dev, &journal);
}

static __always_inline __u64 journal_of_dev(__u32 dev)
{
	__u64 *j = journals.lookup(&dev);
	return j ? *j : 0;
}

static __always_inline struct inflight *current_call(__u64 flags)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task_btf();
	return inflight.task_storage_get(task, 0, flags);
}

/* the device's fill clock: its array slot, claimed when another device held it */
static __always_inline struct dev_clock *clock_of(__u32 dev)
{
	__u32 idx = (dev ^ (dev >> 20) * 37) & (FILL_SLOTS - 1);   /* minor ^ major * 37 */
	struct dev_clock *k = fill_clock.lookup(&idx);
	if (k && k->dev != dev) {
		k->dev = dev;
		k->traced = journal_traced(dev) ? CLOCK_TRACED : CLOCK_UNTRACED;
		k->last_ns = 0;
		k->last_jiffies = 0;
		k->idle_dev = 0;
	}
	return k;
}

/* jbd2_journal_commit_transaction() sets j_committing_transaction after jbd2_start_commit
 * and clears it before jbd2_end_commit, in the journal's one commit thread: between an
 * end_commit and the next start_commit the journal has none, and a handle need not read
 * it. idle_dev holds the device so idle only at the last end_commit (a slot taken over by
 * another device starts at 0: unknown, read). */
static __always_inline void note_commit(__u32 dev, __u32 event)
{
#if COMMIT_EVENTS
	if (event != JBD2_START_COMMIT && event != JBD2_END_COMMIT)
		return;
	struct dev_clock *k = clock_of(dev);
	if (k)
		k->idle_dev = event == JBD2_END_COMMIT ? dev : 0;
#endif
}

static __always_inline int journal_idle(struct dev_clock *k, __u32 dev)
{
	return COMMIT_EVENTS && dev && k->idle_dev == dev;
}

/* The first handle of call c (a syscall, or the monitor's handle wait) on journal (of
 * super_block sb, device dev, fill clock k): the journal it uses and the fill it starts
 * from; later handles on it read only j_free. */
static __always_inline void first_handle(struct inflight *c, struct dev_clock *k, __u64 sb, __u64 journal, __u32 dev)
{
	c->jsb = sb;
	c->journal = journal;
	c->jdev = dev;
	struct log_window w = {};
	read_log_window(journal, &w, 0);
	c->free_first = w.free;
	c->free_min = w.free;
	c->log_blocks = w.last - w.first;
	/* jbd2_log_space_left() counts the committing transaction's outstanding credits
	 * as used: with j_free they decide whether the handle waits */
	__u64 committing = journal_idle(k, dev) ? 0 : READ_FIELD(journal, J_COMMITTING);
	c->credits_first = committing ? (__s32)READ_FIELD(committing, T_OUTSTANDING_CREDITS) : 0;
}

/* Is the clock's journal traced? With a task filter alone the answer grows while
 * recording (used_devs), so it is asked each time; otherwise it is fixed. */
static __always_inline int clock_traced(struct dev_clock *k, __u32 dev)
{
#if FILTER_TASKS && !FILTER_DEV
	return journal_traced(dev);
#else
	return k->traced == CLOCK_TRACED;
#endif
}

/* ==== TRACE_SYSCALLS: metadata syscalls ========================================= */
#if TRACE_SYSCALLS || MONITOR_OPS   /* call_begin and call_end serve monitor operations too */

/* Call c (a syscall, or a monitor operation) of process pid begins at now: flags are
 * its NR_* bits | its call_slots row + 1 << 8; dev its device when known (then it passed
 * the device filter), else 0; arg0/arg1 its first two arguments (or 0). */
static __always_inline void call_init(struct inflight *c, __u64 now, __u32 nr, __u32 flags, __u32 pid, __u32 dev,
				      __u64 arg0, __u64 arg1)
{
	c->ts_ns = now;
	c->syscall_nr = nr;
	c->flags = flags & 0xff;
	c->slot = flags >> 8;
	c->pid = pid;
	c->dev = dev;
	c->dev_checked = dev != 0;
	c->handles = 0;
	c->arg0 = arg0;
	c->arg1 = arg1;
	c->free_first = c->free_min = c->log_blocks = c->credits_first = 0;
	c->context_nr = CONTEXT_UNKNOWN;
	c->task_flags = 0;
}

/* A traced call begins: flags are its NR_* bits, arg0/arg1 its first two arguments
 * (0 when they are read later from the saved registers). Returns the call, or NULL
 * when it is not traced. */
static __always_inline struct inflight *call_begin(__u32 nr, __u32 flags, __u64 arg0, __u64 arg1, __u64 regs)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!task_allowed(id >> 32))
		return NULL;
	__u32 dev = 0;
#if SYSCALL_ARGS
	if (flags & NR_FD_ARG0) {
		/* fsync, fdatasync, fsetxattr, ...: the descriptor's filesystem, journal handle or not */
		if (regs)
			arg0 = syscall_arg(regs, ARG0_OFF);
		dev = file_dev(fd_file(arg0));
#if FILTER_DEV
		if (dev && !devices.lookup(&dev))
			return NULL;  /* a call on another filesystem */
#endif
	}
#endif
	struct inflight *c = current_call(BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (c)
		call_init(c, bpf_ktime_get_ns(), nr, flags, id >> 32, dev, arg0, arg1);
	return c;
}

static __always_inline int call_enter(__u32 nr, __u32 flags, __u64 arg0, __u64 arg1, __u64 regs)
{
	call_begin(nr, flags, arg0, arg1, regs);
	return 0;
}

/* The counters of c's syscall on dev: this CPU's call_slots counter when the syscall has a
 * row and one of the device's ways is free or the device's (an array slot: no hash on the
 * exit path), else its call_stats entry. The reader sums both per (syscall, device). */
static __always_inline struct call_stats *call_counters(struct inflight *c, __u32 dev)
{
	__u32 slot = c->slot;
	if (slot) {
		__u32 idx = (slot - 1) * STATS_WAYS + ((dev ^ (dev >> 20) * 37) & (STATS_WAYS - 1));
		struct slot_stats *s = call_slots.lookup(&idx);
		if (s) {
			__u64 owner = OWNER_BIT | dev;
			/* claimed atomically: a preempted program on this CPU may claim it too */
			if (s->owner == owner || (!s->owner && __sync_val_compare_and_swap(&s->owner, 0, owner) == 0))
				return &s->stats;
		}
	}
	struct call_key ck = {.syscall_nr = c->syscall_nr, .dev = dev};
	struct call_stats zero = {};
	return call_stats.lookup_or_try_init(&ck, &zero);
}

/* The call c (in flight) ends with ret; regs: the saved user registers (raw_syscalls),
 * or 0 when call_begin kept the arguments. */
static __always_inline int call_end(struct inflight *c, __s64 ret, __u64 regs)
{
	__u64 lat = bpf_ktime_get_ns() - c->ts_ns;
	__u32 dev = c->dev;
	int checked = c->dev_checked;
#if SYSCALL_ARGS
	if (!dev && (c->flags & NR_RETURNS_FD) && ret >= 0) {
		dev = file_dev(fd_file(ret));  /* open without a handle: the opened file's filesystem */
		checked = 0;
	}
#endif
	/* With -d, a call with no device (a path that did not resolve, nothing journaled) is
	 * still counted, under device 0, so the session can say how many there were. */
	int allowed = checked || dev_allowed(dev);
	if (allowed || !dev) {
		struct call_stats *t = call_counters(c, dev);
		if (t) {
			/* bcc's bpf_log2l is floor(log2)+1, 1 for 0. A 64-bit index, bounded and
			 * masked: 6.1's verifier loses the bound of a 32-bit one widened at the access. */
			__u64 bucket = (__u64)(bpf_log2l(lat) - 1);
			if (bucket >= HIST_BUCKETS)
				bucket = HIST_BUCKETS - 1;
			t->buckets[bucket & 63]++;
			t->count++;
			t->total_ns += lat;
			if (ret < 0)
				t->errors++;
			if (lat > t->max_ns)
				t->max_ns = lat;
		}
	}
	if (allowed) {
		mark_used(dev);
		if (lat >= MIN_NS) {
			struct call_event e = {};
			e.kind = KIND_CALL;
			e.syscall_nr = c->syscall_nr;
			e.ts_ns = c->ts_ns;
			e.latency_ns = lat;
			current_task(&e.task);
			e.ret = ret;
			e.dev = dev;
			e.handles = c->handles;
			e.journal_free_blocks = c->free_first;
			e.journal_min_free_blocks = c->free_min;
			e.journal_log_blocks = c->log_blocks;
			e.journal_committing_credits = c->credits_first;
			e.cgroup_id = bpf_get_current_cgroup_id();
			e.context_nr = c->context_nr;
			e.task_flags = c->task_flags;
#if SYSCALL_ARGS
			__u64 arg0 = regs ? syscall_arg(regs, ARG0_OFF) : c->arg0;
			__u64 arg1 = regs ? syscall_arg(regs, ARG1_OFF) : c->arg1;
			if (c->flags & NR_FD_ARG0)
				file_name(fd_file(arg0), e.file, sizeof(e.file));
			else if (c->flags & NR_PATH_ARG1)
				bpf_probe_read_user_str(e.file, sizeof(e.file), (const void *)arg1);
			else
				bpf_probe_read_user_str(e.file, sizeof(e.file), (const void *)arg0);
#endif
			if (calls_rb.ringbuf_output(&e, sizeof(e), rb_flags()))
				count(BUF_CALLS);
		}
	}
	c->ts_ns = 0;
	return 0;
}

#if TRACE_SYSCALLS
#if PER_SYSCALL_TRACEPOINTS
/* syscalls:sys_enter_<name> / sys_exit_<name>, one program pair attached to each traced
 * call: other syscalls run no program at all (they pay only the kernel's slow syscall
 * path, which any syscall tracepoint switches on). Record layouts as in
 * /sys/kernel/tracing/events/syscalls/sys_enter_openat/format. */
struct sc_enter_args {
	__u64 common;
	__s32 nr;
	__u32 pad;
	__u64 args[6];
};
struct sc_exit_args {
	__u64 common;
	__s32 nr;
	__u32 pad;
	__s64 ret;
};

/* The kernel refuses a program that reads past a tracepoint's record: calls with one
 * argument (fsync, unlink, ...) get sc_enter, those with a path after a directory
 * descriptor (unlinkat, openat, ...) sc_enter_at. */
int sc_enter(struct sc_enter_args *ctx)
{
	__u32 nr = ctx->nr;
	__u16 *traced = traced_nr.lookup(&nr);
	if (!traced || !*traced)
		return 0;
	return call_enter(nr, *traced, ctx->args[0], 0, 0);
}

int sc_enter_at(struct sc_enter_args *ctx)
{
	__u32 nr = ctx->nr;
	__u16 *traced = traced_nr.lookup(&nr);
	if (!traced || !*traced)
		return 0;
	return call_enter(nr, *traced, ctx->args[0], ctx->args[1], 0);
}

int sc_exit(struct sc_exit_args *ctx)
{
	struct inflight *c = current_call(0);
	return c && c->ts_ns ? call_end(c, ctx->ret, 0) : 0;
}
#else
/* A traced call enters and leaves where the attach point hands over the saved user
 * registers: raw_syscalls, or fentry/fexit on the syscall's function. */
static __always_inline int regs_enter(__u32 nr, __u64 regs)
{
	__u16 *traced = traced_nr.lookup(&nr);
	if (!traced || !*traced)
		return 0;
	return call_enter(nr, *traced, 0, 0, regs);
}

static __always_inline int regs_exit(__s64 ret, __u64 regs)
{
	struct inflight *c = current_call(0);
	return c && c->ts_ns ? call_end(c, ret, regs) : 0;
}

#if FENTRY_SYSCALLS
/* fentry/fexit on each traced call's syscall function (__x64_sys_<name>(const struct
 * pt_regs *regs)), loaded once per call by the recorder: only traced calls run a program,
 * and other syscalls stay off the slow syscall path that any syscall tracepoint turns on.
 * ctx: the function's arguments (regs, the saved user registers), then for fexit its
 * return value. The call's number is the one the registers were entered with. */
int fentry_call(struct bpf_raw_tracepoint_args *ctx)
{
	return regs_enter(read_sized((const void *)ctx->args[0] + SYSCALL_NR_OFF, 4), ctx->args[0]);
}

int fexit_call(struct bpf_raw_tracepoint_args *ctx)
{
	return regs_exit(ctx->args[1], ctx->args[0]);
}
#else
/* raw_syscalls:sys_enter(struct pt_regs *regs, long id): one program for every syscall
 * of every task; untraced numbers return at once. */
int on_sys_enter(struct bpf_raw_tracepoint_args *ctx)
{
	return regs_enter(ctx->args[1], ctx->args[0]);
}

/* raw_syscalls:sys_exit(struct pt_regs *regs, long ret) */
int on_sys_exit(struct bpf_raw_tracepoint_args *ctx)
{
	return regs_exit(ctx->args[1], ctx->args[0]);
}
#endif
#endif
#endif /* TRACE_SYSCALLS: entry points */

#endif /* TRACE_SYSCALLS || MONITOR_OPS */

/* ==== MONITOR_OPS: fs-level operations instead of syscalls ======================== *
 * A bystander's syscalls run no program here: an operation starts at an ext4 tracepoint
 * and ends at another, and sched_switch looks only at tasks inside one.
 *   OP_JOURNAL_START: the handle wait, from ext4_journal_start* to jbd2_handle_start
 *     (start_this_handle -> add_transaction_credits: transaction and checkpoint waits);
 *   OP_SYNC_FILE: ext4_sync_file_enter to ext4_sync_file_exit (fsync, fdatasync). */
#if MONITOR_OPS
/* an operation's call_slots row, as the monitor's reader numbers them (Tracer._call_slot_rows) */
#define OP_ROW(op) ((op) - OP_JOURNAL_START)
_Static_assert(CALL_SLOTS >= 2, "a call_slots row for each operation");

/* an operation on a traced journal's device begins (dev passes the device filter) */
static __always_inline struct inflight *op_begin(__u32 op, __u32 dev)
{
	struct inflight *c = call_begin(op, (OP_ROW(op) + 1) << 8, 0, 0, 0);
	if (c) {
		c->dev = dev;
		c->dev_checked = 1;
	}
	return c;
}

static __always_inline int handle_start(__u64 sb, int typed);   /* the journal handles section */
static __always_inline int fill_sample(struct dev_clock *k, __u32 dev, __u64 journal, __u64 now, __u64 jiffies);
static __always_inline int sample_due(struct dev_clock *k, __u64 *now, __u64 *jiffies);

/* The device and journal_t of a super_block, cached in a slot chosen by the
 * super_block's address, so that a handle wait reads sb->s_dev and
 * sb->s_fs_info->s_journal only when a fill sample is due (at most every FILL_SAMPLE_NS
 * per journal) or its slot held another super_block. An entry is thus at most
 * FILL_SAMPLE_NS older than a read from its live super_block: a super_block freed and
 * reallocated at the same address (umount, mount) within that time is the only way to
 * a stale entry. */
struct mon_journal {
	__u64 sb;
	__u64 journal;
	__u32 dev;
	__u32 pad;
};
BPF_ARRAY(mon_journals, struct mon_journal, FILL_SLOTS);

/* A journal handle starts (ext4_journal_start_sb/_inode, just before jbd2__journal_start
 * -> start_this_handle): the monitor's handle wait begins, with the least the wait needs:
 * its device and time, and the journal's fill at its start (j_free, the log window and
 * the committing transaction's credits, as a call's first handle records them). A
 * nested handle, a handle inside fsync and the monitor's own handles are handle_start's
 * (fill samples; the fsync's journal fields). */
static __always_inline int mon_handle_start(__u64 sb)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task_btf();
	/* a nested handle (current->journal_info set) takes a reference in
	 * jbd2__journal_start and never waits, nor fires jbd2_handle_start */
	if (READ_FIELD(task, TASK_JOURNAL_INFO))
		return handle_start(sb, 0);
	__u64 id = bpf_get_current_pid_tgid();
	if (!task_allowed(id >> 32))
		return handle_start(sb, 0);
	struct inflight *c = inflight.task_storage_get(task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!c || (c->ts_ns && c->syscall_nr == OP_SYNC_FILE))
		return handle_start(sb, 0);   /* a handle inside fsync: counted in the fsync */
	__u32 slot = (__u32)((sb >> 11) ^ (sb >> 19)) & (FILL_SLOTS - 1);
	struct mon_journal *mj = mon_journals.lookup(&slot);
	if (!mj)
		return 0;
	__u64 journal = 0;
	__u32 dev;
	if (mj->sb == sb) {
		dev = mj->dev;
		journal = mj->journal;
	} else {
		dev = READ_FIELD(sb, SB_DEV);
	}
	struct dev_clock *k = clock_of(dev);
	if (!k || !clock_traced(k, dev))
		return 0;
	__u64 now = bpf_ktime_get_ns(), jiffies;
	int sample = sample_due(k, &now, &jiffies);
	if (journal && sample) {
		/* a fill sample is due: the entry is checked against its super_block */
		__u32 d = READ_FIELD(sb, SB_DEV);
		if (d != dev) {
			dev = d;
			k = clock_of(dev);
			if (!k || !clock_traced(k, dev))
				return 0;
			sample = sample_due(k, &now, &jiffies);
		}
		journal = 0;
	}
	if (!journal) {
		__u64 sbi = READ_FIELD(sb, SB_FS_INFO);
		journal = sbi ? READ_FIELD(sbi, EXT4_SB_JOURNAL) : 0;
		mj->sb = sb;
		mj->dev = dev;
		mj->journal = journal;
	}
	if (!journal)
		return 0;   /* ext4 without a journal: no handle waits */
	/* a traced journal's device passes the device filter */
	call_init(c, now, OP_JOURNAL_START, (OP_ROW(OP_JOURNAL_START) + 1) << 8, id >> 32, dev, 0, 0);
	c->handles = 1;
	first_handle(c, k, sb, journal, dev);
	if (sample)
		fill_sample(k, dev, journal, now, jiffies);
	return 0;
}

/* trace_ext4_journal_start_sb(sb, blocks, rsv_blocks, revoke_creds, type, ip) */
int mon_ext4_journal_start_sb(struct bpf_raw_tracepoint_args *ctx)
{
	return mon_handle_start(ctx->args[0]);
}

/* trace_ext4_journal_start_inode(inode, blocks, rsv_blocks, revoke_creds, type, ip) */
int mon_ext4_journal_start_inode(struct bpf_raw_tracepoint_args *ctx)
{
	return mon_handle_start(READ_FIELD(ctx->args[0], INODE_SB));
}

/* ext4_sync_file_enter(struct file *file, int datasync) */
int rtp_ext4_sync_file_enter(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 inode = READ_FIELD(ctx->args[0], FILE_INODE);
	__u32 dev = inode ? READ_FIELD(READ_FIELD(inode, INODE_SB), SB_DEV) : 0;
	if (dev && journal_traced(dev))
		op_begin(OP_SYNC_FILE, dev);
	return 0;
}

/* ext4_sync_file_exit(struct inode *inode, int ret) */
int rtp_ext4_sync_file_exit(struct bpf_raw_tracepoint_args *ctx)
{
	struct inflight *c = current_call(0);
	if (c && c->ts_ns && c->syscall_nr == OP_SYNC_FILE)
		call_end(c, (__s32)ctx->args[1], 0);
	return 0;
}
#endif /* MONITOR_OPS */

#if MONITOR_OPS || HANDLE_WAITS
/* jbd2_handle_start(dev_t dev, tid_t tid, unsigned int type, unsigned int line_no,
 *                   int requested_blocks): start_this_handle() returned with credits, and
 * the handle wait that ext4_journal_start* began ends */
int rtp_jbd2_handle_start(struct bpf_raw_tracepoint_args *ctx)
{
#if HOME_WRITES
	__u32 zero = 0;
	__s64 *marked = checkpointing_tasks.lookup(&zero);
	if (marked && *marked > 0) {
		__u32 tid = (__u32)bpf_get_current_pid_tgid();
		if (checkpointing.delete(&tid) == 0) {
			__sync_fetch_and_add(marked, -1);
			writing_journal_sb.delete(&tid);
		}
	}
#endif
	struct inflight *c = current_call(0);
	if (c && c->ts_ns && c->syscall_nr == OP_JOURNAL_START)
		call_end(c, 0, 0);   /* the monitor's: its call_slots row; the recorder's: call_stats */
	return 0;
}
#endif


/* ==== journal handles: which journal a call (or a traced task) uses; fill samples == */

/* a record for jbd2_rb; a full buffer is counted */
static __always_inline int jbd2_output(void *e, int size)
{
	if (jbd2_rb.ringbuf_output(e, size, rb_flags()))
		count(BUF_JBD2);
	return 0;
}

/* Is a fill sample due on clock k (FILL_SAMPLE_NS since its last)? *now: the time, read
 * here unless given and only when a sample may be due; *jiffies: read just before it.
 * jiffies first, a plain load where bpf_ktime_get_ns costs ~40 ns here: fewer than
 * FILL_SAMPLE_SURE_TICKS ticks since the sample's jiffies mean less than FILL_SAMPLE_NS
 * for sure (the clock is at most one tick past a jiffy's start; late ticks only delay
 * a sample). */
static __always_inline int sample_due(struct dev_clock *k, __u64 *now, __u64 *jiffies)
{
	*jiffies = bpf_jiffies64();
	if (!*now) {
		if (FILL_SAMPLE_SURE_TICKS > 0 && *jiffies - k->last_jiffies < FILL_SAMPLE_SURE_TICKS)
			return 0;
		*now = bpf_ktime_get_ns();
	}
	return *now - k->last_ns >= FILL_SAMPLE_NS;
}

static __always_inline int fill_sample(struct dev_clock *k, __u32 dev, __u64 journal, __u64 now, __u64 jiffies)
{
	k->last_ns = now;  /* a race between CPUs costs at most one extra sample */
	k->last_jiffies = jiffies;
	remember_journal(dev, journal);
	struct fill_event e = {};
	read_fill(journal, &e.fill, 0);
	e.kind = KIND_FILL;
	e.dev = dev;
	e.ts_ns = now;
	return jbd2_output(&e, sizeof(e));
}

/* A journal handle starts (ext4_journal_start_sb/_inode fire just before
 * jbd2__journal_start -> start_this_handle, where a handle waits for log space:
 * add_transaction_credits -> __jbd2_log_wait_for_space). Inside a traced call the
 * call gets the journal's device and fill at its first handle, and the lowest j_free
 * any of its handles saw; at most one fill sample per journal per FILL_SAMPLE_NS. */
#if HANDLE_WAITS
/* What a task starting a handle wait outside traced calls was doing: its PF_* flags and,
 * from its saved user registers, the syscall it is in (CONTEXT_NOT_SYSCALL: it entered the
 * kernel otherwise, a page fault on a shared mapping, say). */
static __always_inline void handle_context(struct inflight *c, struct task_struct *task)
{
	c->task_flags = READ_FIELD(task, TASK_FLAGS);
#if TASK_PT_REGS && SYSCALL_CONTEXT
	if (!(c->task_flags & PF_KTHREAD_FLAG)) {
		__u64 regs = (__u64)bpf_task_pt_regs(task);
		if (regs && (__s64)read_sized((const void *)regs + SYSCALL_RET_OFF, 8) == -ENOSYS_VALUE)
			c->context_nr = (__s32)read_sized((const void *)regs + SYSCALL_NR_OFF, 4);
		else if (regs)
			c->context_nr = CONTEXT_NOT_SYSCALL;
	}
#endif
}
#endif

static __always_inline int handle_start(__u64 sb, int typed)
{
	struct inflight *c = current_call(0);
	if (c && !c->ts_ns)
		c = NULL;
#if HANDLE_WAITS
	/* a handle wait whose jbd2_handle_start never came (start_this_handle failed) */
	if (c && c->syscall_nr == OP_JOURNAL_START) {
		c->ts_ns = 0;
		c = NULL;
	}
#endif
	__u32 dev;
	/* (the monitor's handle wait is one handle: a second one starts anew) */
	if (c && c->handles && sb == c->jsb && (!MONITOR_OPS || c->syscall_nr != OP_JOURNAL_START)) {
		/* a later handle of the call on its first journal: only j_free moves */
		__u64 free = READ_FIELD(c->journal, J_FREE);
		if (free < c->free_min)
			c->free_min = free;
		c->handles++;
		dev = c->jdev;
		struct dev_clock *k = clock_of(dev);
		__u64 now = 0, jiffies;
		if (!k || !sample_due(k, &now, &jiffies))
			return 0;
		return fill_sample(k, dev, c->journal, now, jiffies);
	}

	dev = typed ? LOAD_FIELD(sb, SB_DEV) : READ_FIELD(sb, SB_DEV);
#if FILTER_TASKS && !FILTER_DEV
	/* a journal the traced tasks use, inside a traced call or not */
	if (c || task_allowed(bpf_get_current_pid_tgid() >> 32))
		mark_used(dev);
#endif
	struct dev_clock *k = clock_of(dev);
	if (!k || !clock_traced(k, dev))
		return 0;
	__u64 now = 0, jiffies;
	int sample = sample_due(k, &now, &jiffies);
#if HANDLE_WAITS
	/* outside traced calls, a traced task's outermost handle may wait (a nested one, with
	 * current->journal_info set, takes a reference and never waits) */
	struct task_struct *task = (struct task_struct *)bpf_get_current_task_btf();
	__u64 id = bpf_get_current_pid_tgid();
	int wait = !c && !READ_FIELD(task, TASK_JOURNAL_INFO) && task_allowed(id >> 32);
#else
	int wait = 0;
#endif
	if (!c && !sample && !wait)
		return 0;

	__u64 sbi = typed ? LOAD_FIELD(sb, SB_FS_INFO) : READ_FIELD(sb, SB_FS_INFO);
	__u64 journal = sbi ? READ_FIELD(sbi, EXT4_SB_JOURNAL) : 0;
	if (!journal)
		return 0;
#if HANDLE_WAITS
	if (wait) {
		c = inflight.task_storage_get(task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (c) {
			if (!now)
				now = bpf_ktime_get_ns();
			/* its device passed the journal filter (clock_traced) */
			call_init(c, now, OP_JOURNAL_START, 0, id >> 32, dev, 0, 0);
			handle_context(c, task);
		}
	}
#endif
	if (c) {
		if (c->handles == 0) {
			if (!c->dev) {
				c->dev = dev;
				c->dev_checked = 1;  /* a traced journal's device passes the device filter */
			}
			first_handle(c, k, sb, journal, dev);
		} else {
			/* a handle on another journal than the call's first */
			__u64 free = READ_FIELD(journal, J_FREE);
			if (free < c->free_min)
				c->free_min = free;
		}
		c->handles++;
	}
	if (!sample)
		return 0;
	return fill_sample(k, dev, journal, now, jiffies);
}

/* trace_ext4_journal_start_sb(sb, blocks, rsv_blocks, revoke_creds, type, ip) */
int rtp_ext4_journal_start_sb(struct bpf_raw_tracepoint_args *ctx)
{
	return handle_start(ctx->args[0], 0);
}

/* trace_ext4_journal_start_inode(inode, blocks, rsv_blocks, revoke_creds, type, ip) */
int rtp_ext4_journal_start_inode(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 inode = ctx->args[0];
	return handle_start(READ_FIELD(inode, INODE_SB), 0);
}

/* The same two as BTF-typed raw tracepoints (the recorder loads them so where the kernel
 * takes them, else the two above): inode->i_sb, sb->s_dev and sb->s_fs_info are direct
 * loads. (ctx is then the tracepoint's arguments array, laid out as args[] here.) */
int btf_ext4_journal_start_sb(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 sb = ctx->args[0];
	if (!sb)   /* 6.12 marks tracepoint arguments nullable: checked before any load */
		return 0;
	return handle_start(sb, 1);
}

int btf_ext4_journal_start_inode(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 inode = ctx->args[0];
	if (!inode)
		return 0;
	__u64 sb = LOAD_FIELD(inode, INODE_SB);
	if (!sb)
		return 0;
	return handle_start(sb, 1);
}

/* ==== jbd2 lifecycle of the traced journals ======================================= */

/* Who an event fired in: inside a traced call, and in a task the session traces
 * (system-wide every task is traced). */
static __always_inline void event_scope(struct jstall_scope *scope)
{
	struct inflight *c = current_call(0);
	scope->in_traced_call = c && c->ts_ns;
	scope->traced_task = scope->in_traced_call || task_allowed(bpf_get_current_pid_tgid() >> 32);
}

static __always_inline int emit_jbd2(__u64 journal, __u32 dev, __u32 event, __s32 transaction, __s64 arg,
				     int typed)
{
	if (typed) {
		/* a typed journal stays typed: never merged with the map's untyped one (6.1's and
		 * 6.12's verifiers then see a scalar), and checked before any load (6.12 marks
		 * tracepoint arguments nullable) */
		if (!journal)
			return 0;
		dev = journal_dev(journal, 1);
	} else if (journal) {
		dev = journal_dev(journal, 0);
	} else {
		journal = journal_of_dev(dev);
	}
	if (!journal_traced(dev))
		return 0;
	note_commit(dev, event);   /* only traced journals' handles ask (handle_start) */
	if (journal)
		remember_journal(dev, journal);
	struct jbd2_event e = {};
	e.kind = KIND_JBD2;
	e.event = event;
	e.ts_ns = bpf_ktime_get_ns();
	e.dev = dev;
	e.transaction = transaction;
	e.arg = arg;
	current_task(&e.task);
	event_scope(&e.scope);
	read_fill(journal, &e.fill, typed);
	return jbd2_output(&e, sizeof(e));
}

/* Each jbd2 event whose arguments hold a pointer has two programs: rtp_<name>, a raw
 * tracepoint reading with bpf_probe_read_kernel, and btf_<name>, the same as a BTF-typed
 * raw tracepoint reading members directly (the recorder loads it where the kernel takes
 * it; see btf_ext4_journal_start_sb). BOTH_PROGRAMS(name) defines them from name##_body. */
#define BOTH_PROGRAMS(name)                                                              \
	int rtp_##name(struct bpf_raw_tracepoint_args *ctx)                              \
	{                                                                                \
		return name##_body(ctx, 0);                                              \
	}                                                                                \
	int btf_##name(struct bpf_raw_tracepoint_args *ctx)                              \
	{                                                                                \
		return name##_body(ctx, 1);                                              \
	}

/* (journal_t *journal, transaction_t *commit_transaction) */
#define TRANSACTION_EVENT(name, EVENT)                                                   \
	static __always_inline int name##_body(struct bpf_raw_tracepoint_args *ctx, int typed) \
	{                                                                                \
		return emit_jbd2(ctx->args[0], 0, EVENT, transaction_tid(ctx->args[1], typed), 0, typed); \
	}                                                                                \
	BOTH_PROGRAMS(name)

TRANSACTION_EVENT(jbd2_start_commit, JBD2_START_COMMIT)
TRANSACTION_EVENT(jbd2_commit_locking, JBD2_COMMIT_LOCKING)
TRANSACTION_EVENT(jbd2_commit_flushing, JBD2_COMMIT_FLUSHING)
TRANSACTION_EVENT(jbd2_commit_logging, JBD2_COMMIT_LOGGING)
TRANSACTION_EVENT(jbd2_end_commit, JBD2_END_COMMIT)
TRANSACTION_EVENT(jbd2_drop_transaction, JBD2_DROP_TRANSACTION)

/* (journal_t *journal, int result): fires in the task that checkpoints, which is a
 * user task when start_this_handle -> __jbd2_log_wait_for_space forced it. */
static __always_inline int jbd2_checkpoint_body(struct bpf_raw_tracepoint_args *ctx, int typed)
{
#if HOME_WRITES
	/* the task writes the oldest transactions' blocks home until its handle starts */
	__u64 journal = ctx->args[0];
	if (journal) {
		__u32 dev = journal_dev(journal, typed);
		__u32 tid = (__u32)bpf_get_current_pid_tgid(), zero = 0;
		__s64 *marked = checkpointing_tasks.lookup(&zero);
		if (marked && journal_traced(dev) && !checkpointing.lookup(&tid) &&
		    checkpointing.insert(&tid, &dev) == 0)
			__sync_fetch_and_add(marked, 1);
	}
#endif
	return emit_jbd2(ctx->args[0], 0, JBD2_CHECKPOINT, -1, (__s32)ctx->args[1], typed);
}
BOTH_PROGRAMS(jbd2_checkpoint)

#if HOME_WRITES
/* block_bio_queue(struct bio *bio): a bio enters the block layer (one per buffer a
 * checkpoint writes: write_dirty_buffer -> submit_bh, before any merge). A write queued by
 * a task between jbd2_checkpoint and its handle's start is a block going home (but for the
 * cache flush and the journal superblock's rewrite that moving the log's tail adds); the distinct
 * blocks so written (and how often each) tell the journal model the working set the log
 * could not hold. */
int rtp_block_bio_queue(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 zero = 0;
	__s64 *marked = checkpointing_tasks.lookup(&zero);
	if (!marked || *marked <= 0)
		return 0;   /* no task checkpoints: every other bio leaves here */
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u32 *dev = checkpointing.lookup(&tid);
	if (!dev)
		return 0;
	__u64 bio = ctx->args[0];
	if (!bio || (READ_FIELD(bio, BIO_OPF) & REQ_OP_MASK_VALUE) != REQ_OP_WRITE_VALUE)
		return 0;
	/* an empty write is the cache flush jbd2_cleanup_journal_tail issues, no block */
	if (!read_sized((const void *)bio + BIO_ITER_OFF + ITER_SIZE_OFF, ITER_SIZE_SIZE))
		return 0;
	if (writing_journal_sb.delete(&tid) == 0)
		return 0;   /* the journal's superblock */
	struct home_key k = {};
	k.dev = *dev;
	k.sector = read_sized((const void *)bio + BIO_ITER_OFF + ITER_SECTOR_OFF, ITER_SECTOR_SIZE);
	__u64 now = bpf_ktime_get_ns();
	struct home_val first = {};
	first.first_ns = now;
	struct home_val *v = home_writes.lookup_or_try_init(&k, &first);
	if (!v) {
		count(HOME_WRITES_LOST);
		return 0;
	}
	v->last_ns = now;
	__sync_fetch_and_add(&v->writes, 1);
	return 0;
}
#endif

/* (journal_t *journal, blk_opf_t write_flags) */
static __always_inline int jbd2_write_superblock_body(struct bpf_raw_tracepoint_args *ctx, int typed)
{
#if HOME_WRITES
	/* a checkpoint moving the log's tail rewrites the journal's superblock: a write to the
	 * log, not a block going home (jbd2_write_superblock submits it next) */
	__u32 zero = 0;
	__s64 *marked = checkpointing_tasks.lookup(&zero);
	if (marked && *marked > 0) {
		__u32 tid = (__u32)bpf_get_current_pid_tgid();
		__u8 one = 1;
		if (checkpointing.lookup(&tid))
			writing_journal_sb.update(&tid, &one);
	}
#endif
	return emit_jbd2(ctx->args[0], 0, JBD2_WRITE_SUPERBLOCK, -1, (__u32)ctx->args[1], typed);
}
BOTH_PROGRAMS(jbd2_write_superblock)

/* (dev_t dev, unsigned long stall_ms) */
int rtp_jbd2_lock_buffer_stall(struct bpf_raw_tracepoint_args *ctx)
{
	return emit_jbd2(0, (__u32)ctx->args[0], JBD2_LOCK_BUFFER_STALL, -1, ctx->args[1], 0);
}

/* (journal_t *journal, tid_t first_tid, unsigned long block_nr, unsigned long freed) */
static __always_inline int jbd2_update_log_tail_body(struct bpf_raw_tracepoint_args *ctx, int typed)
{
	__u64 journal = ctx->args[0];
	if (!journal)
		return 0;
	__u32 dev = journal_dev(journal, typed);
	if (!journal_traced(dev))
		return 0;
	remember_journal(dev, journal);
	struct log_tail_event e = {};
	e.kind = KIND_LOG_TAIL;
	e.dev = dev;
	e.ts_ns = bpf_ktime_get_ns();
	e.tail_sequence = FIELD(typed, journal, J_TAIL_SEQ);
	e.first_tid = ctx->args[1];
	e.block_nr = ctx->args[2];
	e.freed_blocks = ctx->args[3];
	current_task(&e.task);
	event_scope(&e.scope);
	read_fill(journal, &e.fill, typed);
	return jbd2_output(&e, sizeof(e));
}
BOTH_PROGRAMS(jbd2_update_log_tail)

/* The per-transaction statistics jbd2 reports when a commit or a checkpoint ends:
 * jbd2_run_stats / jbd2_checkpoint_stats(dev_t dev, tid_t tid, struct ... *stats).
 * STATS_EVENT_BEGIN opens the handler (record e, stats pointer s); the caller fills the rest. */
#define STATS_EVENT_BEGIN(struct_name, KIND)                 \
	__u32 dev = ctx->args[0];                            \
	if (!journal_traced(dev))                            \
		return 0;                                    \
	__u64 s = ctx->args[2];                              \
	if (!s)                                              \
		return 0;                                    \
	struct struct_name e = {};                           \
	e.kind = KIND;                                       \
	e.dev = dev;                                         \
	e.ts_ns = bpf_ktime_get_ns();                        \
	e.transaction = ctx->args[1];                        \
	current_task(&e.task)

/* transaction_run_stats_s, filled by jbd2_journal_commit_transaction */
static __always_inline int jbd2_run_stats_body(struct bpf_raw_tracepoint_args *ctx, int typed)
{
	STATS_EVENT_BEGIN(run_stats_event, KIND_RUN_STATS);
	e.wait_jiffies = FIELD(typed, s, RS_WAIT);
	e.request_delay_jiffies = FIELD(typed, s, RS_REQUEST_DELAY);
	e.running_jiffies = FIELD(typed, s, RS_RUNNING);
	e.locked_jiffies = FIELD(typed, s, RS_LOCKED);
	e.flushing_jiffies = FIELD(typed, s, RS_FLUSHING);
	e.logging_jiffies = FIELD(typed, s, RS_LOGGING);
	e.handle_count = FIELD(typed, s, RS_HANDLE_COUNT);
	e.blocks = FIELD(typed, s, RS_BLOCKS);
	e.blocks_logged = FIELD(typed, s, RS_BLOCKS_LOGGED);
	return jbd2_output(&e, sizeof(e));
}
BOTH_PROGRAMS(jbd2_run_stats)

/* transaction_chp_stats_s, filled by __jbd2_journal_remove_checkpoint */
static __always_inline int jbd2_checkpoint_stats_body(struct bpf_raw_tracepoint_args *ctx, int typed)
{
	STATS_EVENT_BEGIN(checkpoint_stats_event, KIND_CHECKPOINT_STATS);
	e.chp_time_jiffies = FIELD(typed, s, CS_CHP_TIME);
	e.forced_to_close = FIELD(typed, s, CS_FORCED_TO_CLOSE);
	e.written = FIELD(typed, s, CS_WRITTEN);
	e.dropped = FIELD(typed, s, CS_DROPPED);
	event_scope(&e.scope);
	return jbd2_output(&e, sizeof(e));
}
BOTH_PROGRAMS(jbd2_checkpoint_stats)

/* ==== TRACE_SYSCALLS: off-CPU intervals of threads inside traced calls =========== */
#if TRACE_SYSCALLS || MONITOR_OPS


/* An off-CPU interval of thread tid inside a traced call ends (it is switched back in,
 * at now); s_ts_ns, s_state, s_stack: its start, task state and stack at switch-out;
 * call_ts_ns, syscall_nr, pid, dev: its call's; next: its task_struct; waker: who woke it. */
static __always_inline void offcpu_end(__u64 now, __u32 tid, __u64 next, __u64 s_ts_ns, __s64 s_state,
				       __s32 s_stack, __u64 call_ts_ns, __u32 syscall_nr, __u32 pid, __u32 dev,
				       struct jstall_waker *waker)
{
	__u64 delta = now - s_ts_ns;
	if (delta <= OFFCPU_MIN_NS || (dev && !dev_allowed(dev)))
		return;
	struct offcpu_event e = {};
	e.kind = KIND_OFFCPU;
	e.task.tid = tid;
	e.task.pid = pid;
	e.ts_ns = s_ts_ns;
	e.offcpu_ns = delta;
	e.stack_id = s_stack;
	e.state = s_state;
	e.call_ts_ns = call_ts_ns;
	e.syscall_nr = syscall_nr;
	e.dev = dev;
#if WAIT_CHAINS
	e.waker = *waker;
#endif
	bpf_probe_read_kernel_str(&e.task.comm, sizeof(e.task.comm), (void *)next + TASK_COMM_OFF);
	if (offcpu_rb.ringbuf_output(&e, sizeof(e), rb_flags()))
		count(BUF_OFFCPU);
}

/* A kernel stack's id. The stack map is a hash table of STACK_ENTRIES buckets, a stack's
 * bucket its hash's low bits, and a bucket that holds another stack refuses it (-EEXIST; no
 * BPF_F_REUSE_STACKID: the reader symbolizes each stack id once, so an id taken over by
 * another stack would lend its frames to later intervals). Such a stack goes to stacks2, a
 * second way, its id there offset by STACK_ENTRIES. PREEMPT_RT kernels sleep in many more
 * places (their spinlocks are rt_mutexes): hundreds of distinct stacks in a session where
 * a generic kernel has tens, and a collision in every session. */
static __always_inline __s32 kernel_stack_id(void *ctx)
{
	__s32 id = stacks.get_stackid(ctx, 0);
	if (id != -EEXIST)
		return id;
	__s32 id2 = stacks2.get_stackid(ctx, 0);
	return id2 >= 0 ? STACK_ENTRIES + id2 : id2;
}

/* sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next,
 *              unsigned int prev_state): fires in prev's context, before the switch
 * (__schedule). A thread switched out inside a traced call keeps the time, its task state
 * and its kernel stack; switched back in, the interval is recorded if over OFFCPU_MIN_NS.
 * typed (tp_btf): next is a BTF-typed task_struct, whose own task storage holds the
 * start; untyped: only the current task's storage can be read, so the start and the
 * call's fields go to the offstart hash by thread id. */
static __always_inline int sched_switch_body(struct bpf_raw_tracepoint_args *ctx, int typed)
{
	__u32 zero = 0;
	__u64 *pending = 0;
	if (!typed) {
		pending = offstart_pending.lookup(&zero);
		if (!pending)
			return 0;
	}
	__u64 now = 0;
	struct inflight *c = current_call(0);
	if (c && c->ts_ns) {
		now = bpf_ktime_get_ns();
		/* a preempted task is runnable whatever its __state says */
		__s64 state = ctx->args[0] ? 0 : (__u32)ctx->args[3];
		/* a hash collision in both ways (-EEXIST) and a full map (-ENOMEM) are counted
		 * apart */
		__s32 stack_id = kernel_stack_id(ctx);
		if (stack_id == -ENOMEM)
			count(STACKS_FULL);
		else if (stack_id == -EEXIST)
			count(STACKS_COLLIDED);
		else if (stack_id < 0)
			count(STACKS_LOST);
		if (typed) {
			c->off_ts_ns = now;
			c->off_state = state;
			c->off_stack_id = stack_id;
#if WAIT_CHAINS
			__builtin_memset(&c->off_waker, 0, sizeof(c->off_waker));
#endif
		} else {
			struct offstart s = {};
			s.ts_ns = now;
			s.state = state;
			s.stack_id = stack_id;
			s.call_ts_ns = c->ts_ns;
			s.syscall_nr = c->syscall_nr;
			s.pid = c->pid;
			s.dev = c->dev;
			__u32 prev = (__u32)bpf_get_current_pid_tgid();
			if (offstart.insert(&prev, &s) == 0)
				__sync_fetch_and_add(pending, 1);
			else
				offstart.update(&prev, &s);
		}
	}
	__u64 next_task = ctx->args[2];
	if (typed) {
		struct inflight *n = inflight.task_storage_get((struct task_struct *)next_task, 0, 0);
		if (!n || !n->off_ts_ns)
			return 0;
		if (!now)
			now = bpf_ktime_get_ns();
		offcpu_end(now, LOAD_FIELD(next_task, TASK_PID), next_task, n->off_ts_ns, n->off_state,
			   n->off_stack_id, n->ts_ns, n->syscall_nr, n->pid, n->dev, &n->off_waker);
		n->off_ts_ns = 0;
		return 0;
	}
	/* no traced thread is off-CPU inside a call: nothing to look up for next */
	if (!*pending)
		return 0;
	__u32 next = READ_FIELD(next_task, TASK_PID);
	if (!next)
		return 0;
	struct offstart *s = offstart.lookup(&next);
	if (!s)
		return 0;
	if (!now)
		now = bpf_ktime_get_ns();
	offcpu_end(now, next, next_task, s->ts_ns, s->state, s->stack_id, s->call_ts_ns, s->syscall_nr, s->pid, s->dev,
		   &s->waker);
	if (offstart.delete(&next) == 0)
		__sync_fetch_and_add(pending, -1);
	return 0;
}
BOTH_PROGRAMS(sched_switch)

#if WAIT_CHAINS
/* sched_waking(struct task_struct *p): fires in the waker's context when p is about to be
 * woken (try_to_wake_up, once p's state matched). A thread off-CPU inside a traced call
 * keeps its first waker: thread, kernel stack (where it released what p waited for) and
 * the waker's own traced call in flight, if any. The analysis gives a wait queued behind a
 * lock the cause of what its holder was doing (bcc's offwaketime idea, kept to traced
 * calls). A wakeup from an interrupt names the task it interrupted: the analysis uses
 * wakers only for waits no stack explains. typed: p's task storage (the typed
 * sched_switch's); untyped: the offstart hash. */
static __always_inline int sched_waking_body(struct bpf_raw_tracepoint_args *ctx, int typed)
{
	__u64 p = ctx->args[0];
	struct jstall_waker *w = 0;
	if (!p)
		return 0;
	if (typed) {
		struct inflight *n = inflight.task_storage_get((struct task_struct *)p, 0, 0);
		if (!n || !n->off_ts_ns || n->off_waker.wake_ts_ns)
			return 0;
		w = &n->off_waker;
	} else {
		__u32 zero = 0;
		__u64 *pending = offstart_pending.lookup(&zero);
		if (!pending || !*pending)
			return 0;
		__u32 tid = READ_FIELD(p, TASK_PID);
		struct offstart *s = offstart.lookup(&tid);
		if (!s || s->waker.wake_ts_ns)
			return 0;
		w = &s->waker;
	}
	__u64 id = bpf_get_current_pid_tgid();
	w->wake_ts_ns = bpf_ktime_get_ns();
	w->waker_tid = (__u32)id;
	w->waker_pid = id >> 32;
	w->waker_stack_id = kernel_stack_id(ctx);
	bpf_get_current_comm(&w->waker_comm, sizeof(w->waker_comm));
	struct inflight *c = current_call(0);
	if (c && c->ts_ns) {
		w->waker_call_ts_ns = c->ts_ns;
		w->waker_syscall_nr = c->syscall_nr;
	} else {
		w->waker_call_ts_ns = 0;
		w->waker_syscall_nr = 0;
	}
	return 0;
}
BOTH_PROGRAMS(sched_waking)
#endif /* WAIT_CHAINS */

#endif /* TRACE_SYSCALLS || MONITOR_OPS (off-CPU) */

/* ==== XFS_LOG: XFS log reservations =============================================
 * An XFS transaction reserves log space (xfs_log_reserve on the reserve head, or
 * xfs_log_regrant on the write head for a permanent reservation's next roll); when the
 * head has less space left than the ticket needs, xlog_grant_head_wait() sleeps until
 * xfsaild has moved the log's tail (one xfs_log_grant_sleep per sleep, each counted in
 * xs_sleep_logspace). Tracepoint records as in /sys/kernel/tracing/events/xfs/.../format
 * (bcc builds their structs; xfs_lsn_t is the kernel's typedef). */
#if XFS_LOG
typedef __s64 xfs_lsn_t;

/* What the AIL and the log did on one XFS, counted as it happens: a wait's share is the
 * difference between its end and its first sleep. */
struct xfs_ail_counts {
	__u64 pushes;
	__u64 pinned;
	__u64 locked;
	__u64 flushing;
	__u64 forces;
	__u64 log_writes;
};
BPF_HASH(xfs_ail, __u32, struct xfs_ail_counts, 64);

/* A traced task's log reservation in progress (head) and, once it slept, the wait. */
struct xfs_wait {
	__u32 head;
	__u32 sleeps;
	__u64 ts_ns;          /* first sleep, 0: not slept */
	struct xfs_wait_event e;
	struct xfs_ail_counts ail;
};
BPF_TASK_STORAGE(xfs_waiting, struct xfs_wait);

static __always_inline int xfs_traced(__u32 dev)
{
	return journal_traced(dev);
}

static __always_inline void xfs_count(__u32 dev, int which)
{
	if (!xfs_traced(dev))
		return;
	struct xfs_ail_counts zero = {};
	struct xfs_ail_counts *k = xfs_ail.lookup_or_try_init(&dev, &zero);
	if (!k)
		return;
	if (which == 0)
		__sync_fetch_and_add(&k->pushes, 1);
	else if (which == 1)
		__sync_fetch_and_add(&k->pinned, 1);
	else if (which == 2)
		__sync_fetch_and_add(&k->locked, 1);
	else if (which == 3)
		__sync_fetch_and_add(&k->flushing, 1);
	else if (which == 4)
		__sync_fetch_and_add(&k->forces, 1);
	else
		__sync_fetch_and_add(&k->log_writes, 1);
}

TRACEPOINT_PROBE(xfs, xfs_ail_push) { xfs_count(args->dev, 0); return 0; }
TRACEPOINT_PROBE(xfs, xfs_ail_pinned) { xfs_count(args->dev, 1); return 0; }
TRACEPOINT_PROBE(xfs, xfs_ail_locked) { xfs_count(args->dev, 2); return 0; }
TRACEPOINT_PROBE(xfs, xfs_ail_flushing) { xfs_count(args->dev, 3); return 0; }
TRACEPOINT_PROBE(xfs, xfs_log_force) { xfs_count(args->dev, 4); return 0; }
/* an iclog's write completed: the log's own I/O, which releases the space of the
 * transactions it carried (a wait with no AIL event ends on these) */
TRACEPOINT_PROBE(xfs, xlog_iclog_sync_done) { xfs_count(args->dev, 5); return 0; }

/* The grant heads and the tail of a loggrant record a into the event's pre##_ fields: the
 * heads' cycles before 6.11, the tail space since */
#if XFS_GRANT_CYCLES
#define XFS_HEAD_POSITIONS(dst, pre, a)                                                  \
	((dst)->pre##_reserve_cycle = (a)->grant_reserve_cycle,                          \
	 (dst)->pre##_write_cycle = (a)->grant_write_cycle)
#else
#define XFS_HEAD_POSITIONS(dst, pre, a) ((dst)->pre##_tail_space = (a)->tail_space)
#endif
#define XFS_HEADS(dst, pre, a)                                                           \
	do {                                                                             \
		(dst)->pre##_reserve_bytes = (a)->grant_reserve_bytes;                   \
		(dst)->pre##_write_bytes = (a)->grant_write_bytes;                       \
		(dst)->pre##_tail_lsn = (a)->tail_lsn;                                   \
		XFS_HEAD_POSITIONS(dst, pre, a);                                         \
	} while (0)

/* A reservation begins: a traced call's first one names its device (as a journal
 * handle does on ext4: path-based calls find their filesystem here). */
static __always_inline int xfs_reserve(__u32 dev, __u32 head)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task_btf();
	struct inflight *c = current_call(0);
	if (c && c->ts_ns) {
#if FILTER_TASKS && !FILTER_DEV
		mark_used(dev);
#endif
		/* (no jbd2 handle: the call's handle count and fill columns stay empty) */
		if (!c->dev && xfs_traced(dev)) {
			c->dev = dev;
			c->dev_checked = 1;
		}
	}
	struct xfs_wait *w = xfs_waiting.task_storage_get(task, 0, 0);
	if (w) {
		w->ts_ns = 0;
		w->sleeps = 0;
		w->head = head;
	} else if (head == XFS_HEAD_RESERVE) {
		/* storage only for tasks that may wait: made at their first reservation; a kernel
		 * thread's whatever the task filter (a worker a traced call may wait for: XFS's
		 * inodegc workers inactivate the inodes a traced unlink released) */
		if (!(c && c->ts_ns) && !task_allowed(bpf_get_current_pid_tgid() >> 32) &&
		    !(READ_FIELD(task, TASK_FLAGS) & PF_KTHREAD_FLAG))
			return 0;
		w = xfs_waiting.task_storage_get(task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (w)
			w->head = head;
	}
	return 0;
}

TRACEPOINT_PROBE(xfs, xfs_log_reserve) { return xfs_reserve(args->dev, XFS_HEAD_RESERVE); }
TRACEPOINT_PROBE(xfs, xfs_log_regrant) { return xfs_reserve(args->dev, XFS_HEAD_WRITE); }

/* Each sleep of xlog_grant_head_wait(); the first one starts the wait. */
TRACEPOINT_PROBE(xfs, xfs_log_grant_sleep)
{
	__u32 dev = args->dev;
	if (!xfs_traced(dev))
		return 0;
	struct task_struct *task = (struct task_struct *)bpf_get_current_task_btf();
	struct xfs_wait *w = xfs_waiting.task_storage_get(task, 0, 0);
	if (!w)
		return 0;
	w->sleeps++;
	if (w->ts_ns)
		return 0;
	w->ts_ns = bpf_ktime_get_ns();
	struct xfs_wait_event *e = &w->e;
#if XFS_TRACE_TIC
	e->tic = args->tic;
#endif
	e->unit_res = args->unit_res;
	e->cnt = args->cnt;
	e->tic_flags = args->flags;
	e->curr_cycle = args->curr_cycle;
	e->curr_block = args->curr_block;
	XFS_HEADS(e, start, args);
	struct xfs_ail_counts *k = xfs_ail.lookup(&dev);
	if (k)
		w->ail = *k;
	else
		__builtin_memset(&w->ail, 0, sizeof(w->ail));
	return 0;
}

/* The reservation of task got its space after the wait w (its end fields filled): written now. */
static __always_inline int xfs_granted(struct task_struct *task, struct xfs_wait *w, __u32 dev)
{
	struct xfs_wait_event *e = &w->e;
	e->kind = KIND_XFS_WAIT;
	e->dev = dev;
	e->ts_ns = w->ts_ns;
	e->end_ns = bpf_ktime_get_ns();
	e->head = w->head;
	e->sleeps = w->sleeps;
	current_task(&e->task);
	struct inflight *c = current_call(0);
	e->in_traced_call = c && c->ts_ns;
	e->call_ts_ns = e->in_traced_call ? c->ts_ns : 0;
	e->context_nr = e->in_traced_call ? (__s32)c->syscall_nr : CONTEXT_UNKNOWN;
	e->task_flags = READ_FIELD(task, TASK_FLAGS);
#if TASK_PT_REGS && SYSCALL_CONTEXT
	if (!e->in_traced_call && !(e->task_flags & PF_KTHREAD_FLAG)) {
		__u64 regs = (__u64)bpf_task_pt_regs(task);
		if (regs && (__s64)read_sized((const void *)regs + SYSCALL_RET_OFF, 8) == -ENOSYS_VALUE)
			e->context_nr = (__s32)read_sized((const void *)regs + SYSCALL_NR_OFF, 4);
		else if (regs)
			e->context_nr = CONTEXT_NOT_SYSCALL;
	}
#endif
	struct xfs_ail_counts *k = xfs_ail.lookup(&dev);
	if (k) {
		e->ail_pushes = k->pushes - w->ail.pushes;
		e->ail_pinned = k->pinned - w->ail.pinned;
		e->ail_locked = k->locked - w->ail.locked;
		e->ail_flushing = k->flushing - w->ail.flushing;
		e->log_forces = k->forces - w->ail.forces;
		e->log_writes = k->log_writes - w->ail.log_writes;
	}
	w->ts_ns = 0;
	w->sleeps = 0;
	return jbd2_output(e, sizeof(*e));
}

/* task's wait in progress, if its reservation slept (bcc takes no map call inside a macro) */
static __always_inline struct xfs_wait *xfs_slept(struct task_struct *task)
{
	struct xfs_wait *w = xfs_waiting.task_storage_get(task, 0, 0);
	return w && w->ts_ns ? w : NULL;
}

/* The body of both exits (reserve and regrant): a reservation that slept is written. */
#define XFS_GRANTED(a)                                                                   \
	do {                                                                             \
		struct task_struct *task = (struct task_struct *)bpf_get_current_task_btf(); \
		struct xfs_wait *w = xfs_slept(task);                                    \
		if (!w)                                                                  \
			return 0;                                                        \
		XFS_HEADS(&w->e, end, a);                                                \
		return xfs_granted(task, w, (a)->dev);                                   \
	} while (0)

TRACEPOINT_PROBE(xfs, xfs_log_reserve_exit) { XFS_GRANTED(args); }
TRACEPOINT_PROBE(xfs, xfs_log_regrant_exit) { XFS_GRANTED(args); }
#endif /* XFS_LOG */

/* ==== TRACE_FORKS: the traced process tree ======================================= */
#if TRACE_FORKS

/* sched_process_fork(struct task_struct *parent, struct task_struct *child): a new
 * process of a traced one is traced too (a new thread shares its tgid already). */
int rtp_sched_process_fork(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 parent = bpf_get_current_pid_tgid() >> 32;
	__u32 child = READ_FIELD(ctx->args[1], TASK_TGID);
	if (child != parent && tgids.lookup(&parent)) {
		__u8 one = 1;
		tgids.update(&child, &one);
	}
	return 0;
}

#endif /* TRACE_FORKS */

/* ==== sections in headers of their own (probeset.bpf_text inlines them) =========== */
#include "writers.bpf.h"
