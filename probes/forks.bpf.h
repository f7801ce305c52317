/* ==== forks: the traced process tree (the recorder's) =============================
 * Included by recorder.bpf.c after xfslog.bpf.h (probeset.bpf_text inlines it).
 */

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
