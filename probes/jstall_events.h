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
	KIND_XFS_WAIT,
	KIND_WORKER_OFFCPU,
};

/* Which XFS grant head a log-space wait was on (struct xfs_wait_event.head):
 * xfs_log_reserve waits on the reserve head, xfs_log_regrant on the write head. */
enum jstall_xfs_head {
	XFS_HEAD_RESERVE = 0,
	XFS_HEAD_WRITE,
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
	HOME_WRITES_LOST,  /* a block a forced checkpoint wrote home, not counted: home_writes was full */
	WRITERS_LOST,      /* a journal handle or XFS ticket not counted: the writers map was full */
	NR_COUNTERS,
};

/* home_writes: a block forced checkpoints wrote home (key), how often and when (value) */
struct home_key {
	__u32 dev;       /* the journal's filesystem device */
	__u32 pad;
	__u64 sector;    /* the block's first 512-byte sector on the device the bio was queued to */
};

struct home_val {
	__u64 first_ns;
	__u64 last_ns;
	__u64 writes;
};

/* writers: what one process (in one cgroup) put into one journal's transaction (key), summed
 * in the kernel per CPU and read by the recorder at each flush (value). transaction is jbd2's
 * tid; XFS tickets carry none (WRITER_NO_TRANSACTION). */
#define WRITER_NO_TRANSACTION 4294967295
struct writer_key {
	__u32 tgid;
	__u32 dev;             /* the journal's filesystem device (kernel dev_t) */
	__u64 cgroup_id;       /* bpf_get_current_cgroup_id(): the cgroup v2 directory's inode */
	__u32 transaction;
	__u32 pad;
};

struct writer_val {
	__u64 handles;            /* jbd2 handles stopped; XFS tickets released or regranted */
	__u64 requested_blocks;   /* jbd2: credits the handles asked for */
	__u64 dirtied_blocks;     /* jbd2: credits they used (buffers first dirtied in the transaction) */
	__u64 logged_bytes;       /* XFS: reservation bytes used (unit_res - curr_res) */
	__u64 first_ns;           /* this CPU's first count for the key */
	char comm[JSTALL_COMM_LEN];
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

/* An off-CPU interval of a kernel worker running a work item of the filesystems' or
 * writeback's code (WAIT_CHAINS): what a traced call that waited for the worker
 * (__flush_work, a completion) waited on in turn. */
struct worker_offcpu_event {
	__u32 kind;
	__s32 stack_id;
	__u64 ts_ns;
	__u64 offcpu_ns;
	struct jstall_task task;
	__s64 state;
	__u64 work_ts_ns;   /* the work item's start */
	__u64 work_func;    /* its function's address */
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

/* An XFS log reservation that slept for log space (xlog_grant_head_wait), written when
 * the reservation returned (xfs_log_reserve_exit / xfs_log_regrant_exit): the ticket, the
 * grant heads and the tail when it asked (start_*: xfs_log_reserve / xfs_log_regrant, what
 * xlog_grant_head_check() then compared) and when it got its space (end_*),
 * and what the AIL and the log did on its filesystem meanwhile. Since 6.11 the heads are
 * bytes and tail_space is the log's used space up to its tail; before, each head is a
 * (cycle, bytes) pair and tail_space is 0 (src/jstall/xfs.py has both rules). */
struct xfs_wait_event {
	__u32 kind;
	__u32 dev;
	__u64 ts_ns;              /* its first xfs_log_grant_sleep */
	__u64 end_ns;             /* the reservation's exit */
	struct jstall_task task;
	__u64 tic;
	__s32 unit_res;
	__s32 cnt;
	__u32 tic_flags;          /* XLOG_TIC_PERM_RESERV = 1 */
	__u32 head;               /* enum jstall_xfs_head */
	__u32 sleeps;             /* xfs_log_grant_sleep events: xs_sleep_logspace counts each */
	__s32 context_nr;         /* the syscall it was in (>= 0), or a jstall_context */
	__u64 call_ts_ns;         /* the traced call it was in (0: none) */
	__u32 task_flags;         /* PF_* */
	__u32 in_traced_call;
	__u64 start_reserve_bytes;
	__u64 start_write_bytes;
	__u64 start_tail_space;
	__s64 start_tail_lsn;
	__u64 end_reserve_bytes;
	__u64 end_write_bytes;
	__u64 end_tail_space;
	__s64 end_tail_lsn;
	__s32 start_reserve_cycle;
	__s32 start_write_cycle;
	__s32 end_reserve_cycle;
	__s32 end_write_cycle;
	__s32 curr_cycle;
	__s32 curr_block;
	__u64 ail_pushes;         /* xfs_ail_push on its filesystem during the wait */
	__u64 ail_pinned;         /* xfs_ail_pinned: items the AIL could not push until a log force */
	__u64 ail_locked;         /* xfs_ail_locked: items locked by another task */
	__u64 ail_flushing;       /* xfs_ail_flushing: items already being written home */
	__u64 log_forces;         /* xfs_log_force */
	__u64 log_writes;         /* xlog_iclog_sync_done: the log's own writes completed */
	__u64 cgroup_id;          /* the waiting task's cgroup (bpf_get_current_cgroup_id) */
	__u32 queued;             /* tickets already waited on its head when it asked */
	__u32 pad;
};

#endif
