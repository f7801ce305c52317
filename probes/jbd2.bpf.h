/* ==== jbd2: lifecycle of the traced journals ====================================
 * Commits, checkpoints (and, with HOME_WRITES, the blocks a forced checkpoint writes
 * home), the journal superblock's rewrites, the log tail, and the per-transaction
 * statistics jbd2 reports; each record carries the journal's fill.
 * Included by recorder.bpf.c and monitor.bpf.c after handles.bpf.h (probeset.bpf_text inlines it).
 */
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
