/* ==== handles: which journal a call (or a traced task) uses; fill samples ==========
 * ext4_journal_start_sb/_inode fire as a journal handle starts: a traced call gets its
 * journal's device and fill at its first handle; a traced task's handle wait outside
 * traced calls is an operation of its own (HANDLE_WAITS, or the monitor's, MONITOR_OPS),
 * ended by jbd2_handle_start; at most one fill sample per journal per FILL_SAMPLE_NS.
 * Included by recorder.bpf.c and monitor.bpf.c after their own calls (probeset.bpf_text
 * inlines it).
 */
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
