/* ==== xfslog: XFS log reservations (XFS_LOG) =====================================
 * An XFS transaction reserves log space (xfs_log_reserve on the reserve head, or
 * xfs_log_regrant on the write head for a permanent reservation's next roll); when the
 * head has less space left than the ticket needs, xlog_grant_head_wait() sleeps until
 * xfsaild has moved the log's tail (one xfs_log_grant_sleep per sleep, each counted in
 * xs_sleep_logspace). Tracepoint records as in /sys/kernel/tracing/events/xfs/.../format
 * (bcc builds their structs; xfs_lsn_t is the kernel's typedef).
 * Included by recorder.bpf.c and monitor.bpf.c after offcpu.bpf.h (probeset.bpf_text inlines it).
 */
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
 * handle does on ext4: path-based calls find their filesystem here). Returns the task's
 * wait state, which the caller fills with what the ticket asked against, or NULL. */
static __always_inline struct xfs_wait *xfs_reserve(__u32 dev, __u32 head)
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
			return NULL;
		w = xfs_waiting.task_storage_get(task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (w)
			w->head = head;
	}
	return w;
}

/* What the ticket asked against: the heads as xlog_grant_head_check() is about to read them,
 * and whether tickets already waited on its head (queued: it then sleeps unless the space
 * covers theirs too; reserveq and writeq are list_empty() of the heads' waiters). */
#define XFS_ASKED(w, a, waiters_empty)                                                   \
	do {                                                                             \
		if (w) {                                                                 \
			(w)->e.queued = !(waiters_empty);                                \
			XFS_HEADS(&(w)->e, start, a);                                    \
		}                                                                        \
	} while (0)

TRACEPOINT_PROBE(xfs, xfs_log_reserve)
{
	struct xfs_wait *w = xfs_reserve(args->dev, XFS_HEAD_RESERVE);
	XFS_ASKED(w, args, args->reserveq);
	return 0;
}

TRACEPOINT_PROBE(xfs, xfs_log_regrant)
{
	struct xfs_wait *w = xfs_reserve(args->dev, XFS_HEAD_WRITE);
	XFS_ASKED(w, args, args->writeq);
	return 0;
}

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
	e->cgroup_id = bpf_get_current_cgroup_id();
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
