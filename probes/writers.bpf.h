/* ==== WRITERS: who put what into each journal =====================================
 * Included last by recorder.bpf.c and monitor.bpf.c (it uses common.bpf.h: journal_traced,
 * count; and xfslog.bpf.h: xfs_traced).
 *
 * jbd2: jbd2_handle_stats(dev_t dev, tid_t tid, unsigned int type, unsigned int line_no,
 * int interval, int sync, int requested_blocks, int dirtied_blocks) fires in
 * jbd2_journal_stop() for every outermost handle attached to a transaction, in the writer's
 * context; dirtied_blocks = credits requested - credits left, one credit per buffer the
 * transaction first sees dirtied (jbd2_journal_dirty_metadata, b_modified), so a
 * transaction's handles sum to its metadata buffers.
 *
 * XFS (with XFS_LOG): xfs_log_ticket_ungrant / xfs_log_ticket_regrant fire when a
 * transaction commits its ticket (xfs_trans_commit -> xlog_cil_commit, in the writer's
 * context) or rolls it; the ticket's unit_res - curr_res is what the transaction took from
 * its reservation for the log (the CIL's growth from its items, and the share of a
 * checkpoint's headers it was charged).
 *
 * Each count lands in a per-CPU hash keyed by (tgid, dev, cgroup id, transaction): no
 * ring-buffer record per handle. The recorder sums the CPUs at each flush and deletes the
 * keys of committed transactions (writers table, probes/tables.py).
 *
 * bcc rewrites map calls and finds programs only in the file it compiles: probeset.bpf_text
 * puts this header's text in place of its #include line in the top program. */
#ifndef WRITERS
#define WRITERS 0
#endif
#ifndef WRITERS_MAX
#define WRITERS_MAX 4096
#endif

#if WRITERS
BPF_PERCPU_HASH(writers, struct writer_key, struct writer_val, WRITERS_MAX);

/* The writer's counts for this journal and transaction. The map is looked up first: a key
 * exists only for a traced journal, so the journal filter (a second hash lookup) runs only
 * when this writer first counts into this transaction on this CPU. */
static __always_inline struct writer_val *writer_of(__u32 dev, __u32 transaction)
{
	struct writer_key k = {};
	k.tgid = bpf_get_current_pid_tgid() >> 32;
	k.dev = dev;
	k.cgroup_id = bpf_get_current_cgroup_id();
	k.transaction = transaction;
	struct writer_val *v = writers.lookup(&k);
	if (v)
		return v;
	if (!journal_traced(dev))
		return 0;
	struct writer_val zero = {};
	zero.first_ns = bpf_ktime_get_ns();
	bpf_get_current_comm(&zero.comm, sizeof(zero.comm));
	v = writers.lookup_or_try_init(&k, &zero);
	if (!v)
		count(WRITERS_LOST);
	return v;
}

int rtp_jbd2_handle_stats(struct bpf_raw_tracepoint_args *ctx)
{
	struct writer_val *v = writer_of(ctx->args[0], (__u32)ctx->args[1]);
	if (!v)
		return 0;
	/* this CPU's value: no atomics. The tracepoint's counts are ints: dirtied_blocks (requested
	 * less the credits left) is below zero for a handle that ends with more credits than it
	 * asked for, which dirtied none; added to the u64 sum it would wrap */
	__s32 requested = (__s32)ctx->args[6], dirtied = (__s32)ctx->args[7];
	v->handles++;
	if (requested > 0)
		v->requested_blocks += requested;
	if (dirtied > 0)
		v->dirtied_blocks += dirtied;
	return 0;
}

#if XFS_LOG
static __always_inline int xfs_ticket_used(__u32 dev, __s32 unit_res, __s32 curr_res)
{
	struct writer_val *v = writer_of(dev, WRITER_NO_TRANSACTION);
	if (!v)
		return 0;
	v->handles++;
	if (unit_res > curr_res)
		v->logged_bytes += unit_res - curr_res;
	return 0;
}

TRACEPOINT_PROBE(xfs, xfs_log_ticket_ungrant) { return xfs_ticket_used(args->dev, args->unit_res, args->curr_res); }
TRACEPOINT_PROBE(xfs, xfs_log_ticket_regrant) { return xfs_ticket_used(args->dev, args->unit_res, args->curr_res); }
#endif /* XFS_LOG */
#endif /* WRITERS */
