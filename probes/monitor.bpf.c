/* jstall's monitor: the recorder's parts with the monitor's own calls, fs-level operations
 * instead of syscalls. A bystander's syscalls run no program here: an operation starts at
 * an ext4 tracepoint and ends at another, and sched_switch looks only at tasks inside one.
 *   OP_JOURNAL_START: the handle wait, from ext4_journal_start* to jbd2_handle_start
 *     (start_this_handle -> add_transaction_credits: transaction and checkpoint waits);
 *   OP_SYNC_FILE: ext4_sync_file_enter to ext4_sync_file_exit (fsync, fdatasync).
 * No process tree (forks.bpf.h) and no syscall is traced; a monitor with --syscalls runs
 * recorder.bpf.c instead (monitor/tracer.py MonitorProbes).
 *
 * bcc compiles this program at each start of the monitor, so the -D switches (listed in
 * common.bpf.h) are the run-time configuration, chosen by ProbeSet._cflags
 * (probes/probeset.py); each leaves out at compile time what is not traced, at no cost
 * per event. probeset.bpf_text puts each "<name>.bpf.h" in place of its #include line
 * before bcc compiles. Each part uses only what the parts before it define (the operations
 * declare the three functions of handles.bpf.h they call).
 */
#define MONITOR_OPS 1   /* its calls are the operations below (common.bpf.h) */
#if HANDLE_WAITS
#error "HANDLE_WAITS: the monitor's operations time handle waits themselves"
#endif

#include "common.bpf.h"
#include "calls.bpf.h"

/* ==== the monitor's operations ================================================== */
/* an operation's call_slots row, as the monitor's reader numbers them (Tracer._call_slot_rows) */
#define OP_ROW(op) ((op) - OP_JOURNAL_START)
_Static_assert(CALL_SLOTS >= 2, "a call_slots row for each operation");

/* an operation on a traced journal's device begins (dev passes the device filter) */
static __always_inline struct inflight *op_begin(__u32 op, __u32 dev)
{
	struct inflight *c = call_begin(op, (OP_ROW(op) + 1) << 8, 0, 0, 0);
	if (c) {
		c->dev = dev;
		c->dev_checked = 1;
	}
	return c;
}

static __always_inline int handle_start(__u64 sb, int typed);   /* handles.bpf.h */
static __always_inline int fill_sample(struct dev_clock *k, __u32 dev, __u64 journal, __u64 now, __u64 jiffies);
static __always_inline int sample_due(struct dev_clock *k, __u64 *now, __u64 *jiffies);

/* The device and journal_t of a super_block, cached in a slot chosen by the
 * super_block's address, so that a handle wait reads sb->s_dev and
 * sb->s_fs_info->s_journal only when a fill sample is due (at most every FILL_SAMPLE_NS
 * per journal) or its slot held another super_block. An entry is thus at most
 * FILL_SAMPLE_NS older than a read from its live super_block: a super_block freed and
 * reallocated at the same address (umount, mount) within that time is the only way to
 * a stale entry. */
struct mon_journal {
	__u64 sb;
	__u64 journal;
	__u32 dev;
	__u32 pad;
};
BPF_ARRAY(mon_journals, struct mon_journal, FILL_SLOTS);

/* A journal handle starts (ext4_journal_start_sb/_inode, just before jbd2__journal_start
 * -> start_this_handle): the monitor's handle wait begins, with the least the wait needs:
 * its device and time, and the journal's fill at its start (j_free, the log window and
 * the committing transaction's credits, as a call's first handle records them). A
 * nested handle, a handle inside fsync and the monitor's own handles are handle_start's
 * (fill samples; the fsync's journal fields). */
static __always_inline int mon_handle_start(__u64 sb)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task_btf();
	/* a nested handle (current->journal_info set) takes a reference in
	 * jbd2__journal_start and never waits, nor fires jbd2_handle_start */
	if (READ_FIELD(task, TASK_JOURNAL_INFO))
		return handle_start(sb, 0);
	__u64 id = bpf_get_current_pid_tgid();
	if (!task_allowed(id >> 32))
		return handle_start(sb, 0);
	struct inflight *c = inflight.task_storage_get(task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!c || (c->ts_ns && c->syscall_nr == OP_SYNC_FILE))
		return handle_start(sb, 0);   /* a handle inside fsync: counted in the fsync */
	__u32 slot = (__u32)((sb >> 11) ^ (sb >> 19)) & (FILL_SLOTS - 1);
	struct mon_journal *mj = mon_journals.lookup(&slot);
	if (!mj)
		return 0;
	__u64 journal = 0;
	__u32 dev;
	if (mj->sb == sb) {
		dev = mj->dev;
		journal = mj->journal;
	} else {
		dev = READ_FIELD(sb, SB_DEV);
	}
	struct dev_clock *k = clock_of(dev);
	if (!k || !clock_traced(k, dev))
		return 0;
	__u64 now = bpf_ktime_get_ns(), jiffies;
	int sample = sample_due(k, &now, &jiffies);
	if (journal && sample) {
		/* a fill sample is due: the entry is checked against its super_block */
		__u32 d = READ_FIELD(sb, SB_DEV);
		if (d != dev) {
			dev = d;
			k = clock_of(dev);
			if (!k || !clock_traced(k, dev))
				return 0;
			sample = sample_due(k, &now, &jiffies);
		}
		journal = 0;
	}
	if (!journal) {
		__u64 sbi = READ_FIELD(sb, SB_FS_INFO);
		journal = sbi ? READ_FIELD(sbi, EXT4_SB_JOURNAL) : 0;
		mj->sb = sb;
		mj->dev = dev;
		mj->journal = journal;
	}
	if (!journal)
		return 0;   /* ext4 without a journal: no handle waits */
	/* a traced journal's device passes the device filter */
	call_init(c, now, OP_JOURNAL_START, (OP_ROW(OP_JOURNAL_START) + 1) << 8, id >> 32, dev, 0, 0);
	c->handles = 1;
	first_handle(c, k, sb, journal, dev);
	if (sample)
		fill_sample(k, dev, journal, now, jiffies);
	return 0;
}

/* trace_ext4_journal_start_sb(sb, blocks, rsv_blocks, revoke_creds, type, ip) */
int mon_ext4_journal_start_sb(struct bpf_raw_tracepoint_args *ctx)
{
	return mon_handle_start(ctx->args[0]);
}

/* trace_ext4_journal_start_inode(inode, blocks, rsv_blocks, revoke_creds, type, ip) */
int mon_ext4_journal_start_inode(struct bpf_raw_tracepoint_args *ctx)
{
	return mon_handle_start(READ_FIELD(ctx->args[0], INODE_SB));
}

/* ext4_sync_file_enter(struct file *file, int datasync) */
int rtp_ext4_sync_file_enter(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 inode = READ_FIELD(ctx->args[0], FILE_INODE);
	__u32 dev = inode ? READ_FIELD(READ_FIELD(inode, INODE_SB), SB_DEV) : 0;
	if (dev && journal_traced(dev))
		op_begin(OP_SYNC_FILE, dev);
	return 0;
}

/* ext4_sync_file_exit(struct inode *inode, int ret) */
int rtp_ext4_sync_file_exit(struct bpf_raw_tracepoint_args *ctx)
{
	struct inflight *c = current_call(0);
	if (c && c->ts_ns && c->syscall_nr == OP_SYNC_FILE)
		call_end(c, (__s32)ctx->args[1], 0);
	return 0;
}

#include "handles.bpf.h"
#include "jbd2.bpf.h"
#include "offcpu.bpf.h"
#include "xfslog.bpf.h"
#include "writers.bpf.h"
