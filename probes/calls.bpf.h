/* ==== calls: a traced call begins and ends ====================================
 * A call is a syscall (the recorder's entry points, recorder.bpf.c) or one of the
 * monitor's fs-level operations (monitor.bpf.c): call_begin keeps it in the thread's task
 * storage (inflight), call_end counts it (call_slots or call_stats, log2 latency buckets)
 * and emits it to calls_rb at or above MIN_NS.
 * Included by recorder.bpf.c and monitor.bpf.c after common.bpf.h (probeset.bpf_text inlines it).
 */
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
	c->arg3 = 0;
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
#if XATTR_FILES
	if ((c->flags & NR_XATTR_SET) && ret == 0 && allowed && dev)
		xattr_note(c, dev, regs ? syscall_arg(regs, ARG0_OFF) : c->arg0, regs ? syscall_arg(regs, ARG1_OFF) : c->arg1,
			   regs ? syscall_arg(regs, ARG3_OFF) : c->arg3);
#endif
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

