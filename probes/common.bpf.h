/* ==== common: what every part of jstall's BPF programs uses ========================
 * The configuration, the record layouts' checks, the maps, member reads, filters, and a
 * file descriptor's device and name; a journal's log window and fill clock.
 * Included first by recorder.bpf.c and monitor.bpf.c (probeset.bpf_text puts each
 * "<name>.bpf.h" in place of its #include line: bcc rewrites map calls and finds programs
 * only in the file it compiles, never in what that file includes).
 *
 * bcc compiles the program at each start, so these -D macros are its run-time
 * configuration, chosen per session by ProbeSet._cflags (probes/probeset.py); a
 * compile-time switch leaves out what a session does not trace, at no cost per event:
 *   <FIELD>_OFF / <FIELD>_SIZE  struct member offsets and sizes from the kernel's BTF
 *   MIN_NS                      calls at or above this latency are emitted one by one
 *   OFFCPU_MIN_NS               off-CPU intervals above this are emitted
 *   FILL_SAMPLE_NS              at most one fill sample per journal per this interval
 *   FILL_SAMPLE_SURE_TICKS      fewer jiffies than this since a sample: less than FILL_SAMPLE_NS
 *                               for sure (0: unknown HZ, always ask the clock)
 *   COMMIT_EVENTS               jbd2_start_commit and jbd2_end_commit are both attached
 *   FILTER_PID, FILTER_TREE, FILTER_DEV, FILTER_CGROUP   filters (0 = off)
 *   SIZEOF_<struct>             record sizes the Python side decodes
 *   SYSCALL_ARGS, ARG0_OFF, ARG1_OFF, ARG3_OFF  where pt_regs holds a syscall's first two
 *                               arguments and its fourth
 *   SYSCALL_NR_OFF              where pt_regs holds the syscall's number (fentry mode)
 *   SYSCALL_CONTEXT, SYSCALL_RET_OFF  where pt_regs holds the return value, -ENOSYS inside a
 *                               syscall (x86_64): what a handle wait's task was doing
 *   STACK_ENTRIES, STACK2_ENTRIES  the kernel stack maps' buckets (stacks, and stacks2: the
 *                               second way a colliding stack takes, kernel_stack_id)
 *   SELF_TGID                   the recorder's own process, never traced
 *   CALL_SLOTS, STATS_WAYS      rows of the call_slots counters (one per traced syscall, or per
 *                               monitor operation), and counters per row (a power of 2)
 *   HANDLE_WAITS, WAIT_CHAINS, HOME_WRITES, XFS_LOG, WRITERS, XATTR_FILES   the parts below
 *
 * MONITOR_OPS is the top program's own (recorder.bpf.c 0, monitor.bpf.c 1): its calls are
 * the monitor's fs-level operations (handle waits, fsync), not syscalls. */
#ifndef MONITOR_OPS
#define MONITOR_OPS 0
#endif
/* 1: a traced task's journal handle wait outside every traced call is an operation of its
 * own (OP_JOURNAL_START, from ext4_journal_start* to jbd2_handle_start), whatever the task
 * was doing: a call not traced, a page fault, a kernel thread */
#ifndef HANDLE_WAITS
#define HANDLE_WAITS 0
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
/* 1: each file's set extended attributes are noted (xattrs.bpf.h, SYSCALL_ARGS only) */
#ifndef XATTR_FILES
#define XATTR_FILES 0
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
#define NR_XATTR_SET 32   /* sets an attribute (name, value, size): xattrs.bpf.h */
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
	__u64 arg3;        /* the fourth: a set attribute's size (per-syscall tracepoints only) */
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
