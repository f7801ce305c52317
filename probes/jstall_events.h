/* Event records the BPF side writes to its ring buffers and the Python side reads
 * (probes/events.py parses this file to build its record layouts).
 * Rules that keep both sides in step: only __u32/__s32/__u64/__s64, char arrays and
 * the shared structs defined here (flattened into their fields by the reader), every
 * field naturally aligned, every struct a multiple of 8 bytes or of 4 bytes holding no
 * 64-bit field, and the first field of each record is its kind.
 */
#ifndef JSTALL_EVENTS_H
#define JSTALL_EVENTS_H

#define JSTALL_COMM_LEN 16
#define JSTALL_FILE_LEN 64

enum jstall_kind {
	KIND_CALL = 1,
	KIND_OFFCPU,
	KIND_JBD2,
	KIND_RUN_STATS,
	KIND_CHECKPOINT_STATS,
	KIND_LOG_TAIL,
	KIND_FILL,
};

/* jbd2 lifecycle events (struct jbd2_event.event) */
enum jstall_jbd2_event {
	JBD2_START_COMMIT = 0,
	JBD2_COMMIT_LOCKING,
	JBD2_COMMIT_FLUSHING,
	JBD2_COMMIT_LOGGING,
	JBD2_END_COMMIT,
	JBD2_DROP_TRANSACTION,
	JBD2_CHECKPOINT,
	JBD2_LOCK_BUFFER_STALL,
	JBD2_WRITE_SUPERBLOCK,
};

/* fs-level operations, in call_event.syscall_nr (above every syscall number): the monitor's,
 * and the recorder's handle waits outside traced calls */
enum jstall_op {
	OP_JOURNAL_START = 4096,
	OP_SYNC_FILE,
};

/* call_event.context_nr of a handle wait that is not a syscall number */
enum jstall_context {
	CONTEXT_UNKNOWN = -1,      /* not read (a syscall itself, or no bpf_task_pt_regs) */
	CONTEXT_NOT_SYSCALL = -2,  /* the task entered the kernel other than by a syscall: a fault */
};

/* ring buffers, and the index of each one's lost-event counter */
enum jstall_buffer {
	BUF_CALLS = 0,
	BUF_OFFCPU,
	BUF_JBD2,
	STACKS_LOST,       /* stack captures failed: no stack, or another error */
	STACKS_FULL,       /* ... the stack map was full (-ENOMEM) */
	STACKS_COLLIDED,   /* ... another stack held the hash bucket (-EEXIST) */
	NR_COUNTERS,
};

/* The journal's fill level, read from journal_t; has_journal is 0 when unknown. */
struct jstall_fill {
	__u64 free_blocks;
	__u64 head_block;
	__u64 tail_block;
	__u64 first_block;
	__u64 last_block;
	__u32 journal_blocks;
	__s32 max_transaction_blocks;
	__s32 running_transaction;
	__s32 committing_transaction;
	__s32 committing_credits;
	__u32 has_journal;
};

/* The task an event fired in (for off-CPU intervals: the thread switched back in). */
struct jstall_task {
	__u32 tid;
	__u32 pid;
	char comm[JSTALL_COMM_LEN];
};

/* Whether a jbd2 event fired inside a traced call, and in a task the session traces
 * (system-wide: every task). */
struct jstall_scope {
	__u32 in_traced_call;
	__u32 traced_task;
};

/* A traced metadata call at or above the threshold. */
struct call_event {
	__u32 kind;
	__u32 syscall_nr;
	__u64 ts_ns;
	__u64 latency_ns;
	struct jstall_task task;
	__s64 ret;
	__u32 dev;
	__u32 handles;
	__u64 journal_free_blocks;
	__u64 journal_min_free_blocks;
	__u64 journal_log_blocks;
	__u64 journal_committing_credits;
	__u64 cgroup_id;
	/* a handle wait (OP_JOURNAL_START) outside a traced call: what its task was doing,
	 * the syscall number it was in (>= 0), CONTEXT_NOT_SYSCALL, or CONTEXT_UNKNOWN; and the
	 * task's PF_* flags (kernel thread, io_uring worker) */
	__s32 context_nr;
	__u32 task_flags;
	char file[JSTALL_FILE_LEN];
};

/* Who woke a thread that was off-CPU inside a traced call (sched_waking, in the waker's
 * context): its thread, stack and traced call in flight. wake_ts_ns 0: no wakeup seen
 * (preempted, or the probe is off); waker_call_ts_ns 0: the waker was in no traced call. */
struct jstall_waker {
	__u64 wake_ts_ns;
	__u64 waker_call_ts_ns;
	__u32 waker_tid;
	__u32 waker_pid;
	__s32 waker_stack_id;
	__u32 waker_syscall_nr;
	char waker_comm[JSTALL_COMM_LEN];
};

/* An off-CPU interval of a thread inside a traced call. */
struct offcpu_event {
	__u32 kind;
	__s32 stack_id;
	__u64 ts_ns;
	__u64 offcpu_ns;
	struct jstall_task task;
	__s64 state;
	__u64 call_ts_ns;
	__u32 syscall_nr;
	__u32 dev;
	struct jstall_waker waker;
};

/* A jbd2 lifecycle event with the journal's fill level at that moment. */
struct jbd2_event {
	__u32 kind;
	__u32 event;
	__u64 ts_ns;
	__u32 dev;
	__s32 transaction;
	struct jstall_task task;
	__s64 arg;
	struct jstall_scope scope;
	struct jstall_fill fill;
};

/* jbd2_run_stats: times are raw jiffies */
struct run_stats_event {
	__u32 kind;
	__u32 dev;
	__u64 ts_ns;
	__u32 transaction;
	__u32 handle_count;
	struct jstall_task task;
	__u64 wait_jiffies;
	__u64 request_delay_jiffies;
	__u64 running_jiffies;
	__u64 locked_jiffies;
	__u64 flushing_jiffies;
	__u64 logging_jiffies;
	__u32 blocks;
	__u32 blocks_logged;
};

/* jbd2_checkpoint_stats: chp_time is raw jiffies */
struct checkpoint_stats_event {
	__u32 kind;
	__u32 dev;
	__u64 ts_ns;
	__u32 transaction;
	__u32 forced_to_close;
	struct jstall_task task;
	__u64 chp_time_jiffies;
	__u32 written;
	__u32 dropped;
	struct jstall_scope scope;
};

/* jbd2_update_log_tail: fires before j_free grows by freed_blocks */
struct log_tail_event {
	__u32 kind;
	__u32 dev;
	__u64 ts_ns;
	__u32 tail_sequence;
	__u32 first_tid;
	struct jstall_task task;
	__u64 block_nr;
	__u64 freed_blocks;
	struct jstall_scope scope;
	struct jstall_fill fill;
};

/* A fill-level sample taken at a handle start. */
struct fill_event {
	__u32 kind;
	__u32 dev;
	__u64 ts_ns;
	struct jstall_fill fill;
};

#endif
