/* ==== offcpu: off-CPU intervals of threads inside traced calls ====================
 * sched_switch keeps a traced call's thread's switch-out (time, state, kernel stack) and
 * emits the interval when it is switched back in; with WAIT_CHAINS, sched_waking keeps
 * who woke it, and the kernel workers a traced call may wait for get the same (workers
 * below).
 * Included by recorder.bpf.c and monitor.bpf.c after jbd2.bpf.h (probeset.bpf_text inlines it).
 */
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

/* A kernel stack's id, its failures counted: a hash collision in both ways (-EEXIST) and
 * a full map (-ENOMEM) apart from the rest. */
static __always_inline __s32 counted_stack_id(void *ctx)
{
	__s32 stack_id = kernel_stack_id(ctx);
	if (stack_id == -ENOMEM)
		count(STACKS_FULL);
	else if (stack_id == -EEXIST)
		count(STACKS_COLLIDED);
	else if (stack_id < 0)
		count(STACKS_LOST);
	return stack_id;
}

#if WAIT_CHAINS
/* The waker of an off-CPU interval, from sched_waking in the waker's context: its thread,
 * kernel stack (where it released what the sleeper waited for) and its own traced call in
 * flight, if any. */
static __always_inline void note_waker(void *ctx, struct jstall_waker *w)
{
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
}

/* ---- kernel workers ---------------------------------------------------------------
 * A traced call that waits for a kernel worker (__flush_work: XFS's inodegc, or the flush
 * of every delayed allocation when a reservation finds no free space; a completion) sleeps
 * in a stack that names no cause: it waited for whatever the worker waited on. From
 * workqueue_execute_start to workqueue_execute_end, a worker running a work item whose
 * function is in work_fns (the filesystems' functions and writeback's, filled from
 * kallsyms by ProbeSet._attach_workers) has its off-CPU intervals over OFFCPU_MIN_NS
 * recorded as worker_offcpu_event, with their stacks and wakers; the analysis gives the
 * traced call the cause of the worker's waits (chains.worker_causes). */
struct worker_item {
	__u64 ts_ns;        /* the work item's start */
	__u64 func;
	__u64 off_ts_ns;    /* its switch-out: 0 while on a CPU */
	__s64 off_state;
	__s32 off_stack_id;
	__u32 pad;
	struct jstall_waker waker;
};
BPF_HASH(work_fns, __u64, __u8, WORK_FNS_MAX);                       /* functions whose items are kept */
BPF_HASH(worker_items, __u32, struct worker_item, WORKER_ITEMS_MAX); /* tid -> its item under way */
BPF_ARRAY(worker_items_n, __u64, 1);                                 /* entries in worker_items */

/* workqueue_execute_start(struct work_struct *work): in the worker, before the function runs */
int rtp_workqueue_execute_start(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 func = READ_FIELD(ctx->args[0], WORK_FUNC);
	if (!func || !work_fns.lookup(&func))
		return 0;
	__u32 zero = 0;
	__u64 *n = worker_items_n.lookup(&zero);
	if (!n)
		return 0;
	struct worker_item w = {};
	w.ts_ns = bpf_ktime_get_ns();
	w.func = func;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	if (worker_items.insert(&tid, &w) == 0)
		__sync_fetch_and_add(n, 1);
	else if (worker_items.update(&tid, &w) != 0)   /* the map is full: its waits are not kept */
		count(BUF_OFFCPU);
	return 0;
}

/* workqueue_execute_end(struct work_struct *work, work_func_t function): in the worker, after it */
int rtp_workqueue_execute_end(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 zero = 0;
	__u64 *n = worker_items_n.lookup(&zero);
	if (!n || !*n)
		return 0;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	if (worker_items.delete(&tid) == 0)
		__sync_fetch_and_add(n, -1);
	return 0;
}

/* sched_switch's part for workers: prev (the current task) running a kept item keeps its
 * switch-out; next, a worker off-CPU inside one, ends its interval. */
static __always_inline void worker_switch(struct bpf_raw_tracepoint_args *ctx, __u64 next_task)
{
	__u32 zero = 0;
	__u64 *n = worker_items_n.lookup(&zero);
	if (!n || !*n)
		return;
	__u32 prev = (__u32)bpf_get_current_pid_tgid();
	struct worker_item *w = worker_items.lookup(&prev);
	if (w) {
		w->off_ts_ns = bpf_ktime_get_ns();
		w->off_state = ctx->args[0] ? 0 : (__u32)ctx->args[3];   /* preempted: runnable */
		w->off_stack_id = counted_stack_id(ctx);
		__builtin_memset(&w->waker, 0, sizeof(w->waker));
	}
	__u32 next = READ_FIELD(next_task, TASK_PID);
	struct worker_item *x = next ? worker_items.lookup(&next) : 0;
	if (!x || !x->off_ts_ns)
		return;
	__u64 now = bpf_ktime_get_ns();
	if (now - x->off_ts_ns > OFFCPU_MIN_NS) {
		struct worker_offcpu_event e = {};
		e.kind = KIND_WORKER_OFFCPU;
		e.stack_id = x->off_stack_id;
		e.ts_ns = x->off_ts_ns;
		e.offcpu_ns = now - x->off_ts_ns;
		e.task.tid = next;
		e.task.pid = READ_FIELD(next_task, TASK_TGID);
		bpf_probe_read_kernel_str(&e.task.comm, sizeof(e.task.comm), (void *)next_task + TASK_COMM_OFF);
		e.state = x->off_state;
		e.work_ts_ns = x->ts_ns;
		e.work_func = x->func;
		e.waker = x->waker;
		if (offcpu_rb.ringbuf_output(&e, sizeof(e), rb_flags()))
			count(BUF_OFFCPU);
	}
	x->off_ts_ns = 0;
}

/* sched_waking's part for workers: the first waker of a kept worker's interval */
static __always_inline void worker_waking(void *ctx, __u64 p)
{
	__u32 zero = 0;
	__u64 *n = worker_items_n.lookup(&zero);
	if (!n || !*n)
		return;
	__u32 tid = READ_FIELD(p, TASK_PID);
	struct worker_item *x = worker_items.lookup(&tid);
	if (x && x->off_ts_ns && !x->waker.wake_ts_ns)
		note_waker(ctx, &x->waker);
}
#endif /* WAIT_CHAINS */

/* sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next,
 *              unsigned int prev_state): fires in prev's context, before the switch
 * (__schedule). A thread switched out inside a traced call keeps the time, its task state
 * and its kernel stack; switched back in, the interval is recorded if over OFFCPU_MIN_NS.
 * typed (tp_btf): next is a BTF-typed task_struct, whose own task storage holds the
 * start; untyped: only the current task's storage can be read, so the start and the
 * call's fields go to the offstart hash by thread id. */
static __always_inline int call_switch(struct bpf_raw_tracepoint_args *ctx, int typed)
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
		__s32 stack_id = counted_stack_id(ctx);
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

static __always_inline int sched_switch_body(struct bpf_raw_tracepoint_args *ctx, int typed)
{
	call_switch(ctx, typed);
#if WAIT_CHAINS
	worker_switch(ctx, ctx->args[2]);
#endif
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
static __always_inline int call_waking(struct bpf_raw_tracepoint_args *ctx, int typed)
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
	note_waker(ctx, w);
	return 0;
}

static __always_inline int sched_waking_body(struct bpf_raw_tracepoint_args *ctx, int typed)
{
	call_waking(ctx, typed);
	if (ctx->args[0])
		worker_waking(ctx, ctx->args[0]);
	return 0;
}
BOTH_PROGRAMS(sched_waking)
#endif /* WAIT_CHAINS */
