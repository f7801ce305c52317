/* jstall's recorder: jbd2 lifecycle and journal fill, metadata syscalls, off-CPU stacks,
 * XFS log-space waits, who filled each journal. Its calls are the traced syscalls, entered
 * and left at the attach points below; the rest is in the shared headers.
 *
 * bcc compiles this program at each start of a recording, so the -D switches (listed in
 * common.bpf.h) are the run-time configuration, chosen per session by ProbeSet._cflags
 * (probes/probeset.py); each leaves out at compile time what a session does not trace,
 * at no cost per event. probeset.bpf_text puts each "<name>.bpf.h" in place of its
 * #include line before bcc compiles (bcc rewrites map calls and finds programs only in the
 * file it compiles). Each part uses only what the parts before it define.
 *
 * Its own switches: PER_SYSCALL_TRACEPOINTS 1, per-syscall tracepoints
 * (syscalls:sys_enter_<name>); 0: raw_syscalls, or with FENTRY_SYSCALLS fentry/fexit on
 * the syscalls' functions (JSTALL_ATTACH, ProbeSet.attach_mode).
 */
#define MONITOR_OPS 0   /* its calls are syscalls (common.bpf.h) */
#ifndef PER_SYSCALL_TRACEPOINTS
#define PER_SYSCALL_TRACEPOINTS 0
#endif
#ifndef FENTRY_SYSCALLS
#define FENTRY_SYSCALLS 0
#endif

#include "common.bpf.h"
#if XATTR_FILES
#include "xattrs.bpf.h"
#endif
#include "calls.bpf.h"

/* ==== the traced syscalls' entry and exit ======================================== */
#if PER_SYSCALL_TRACEPOINTS
/* syscalls:sys_enter_<name> / sys_exit_<name>, one program pair attached to each traced
 * call: other syscalls run no program at all (they pay only the kernel's slow syscall
 * path, which any syscall tracepoint switches on). Record layouts as in
 * /sys/kernel/tracing/events/syscalls/sys_enter_openat/format. */
struct sc_enter_args {
	__u64 common;
	__s32 nr;
	__u32 pad;
	__u64 args[6];
};
struct sc_exit_args {
	__u64 common;
	__s32 nr;
	__u32 pad;
	__s64 ret;
};

/* The kernel refuses a program that reads past a tracepoint's record: calls with one
 * argument (fsync, unlink, ...) get sc_enter, those with a path after a directory
 * descriptor (unlinkat, openat, ...) sc_enter_at. */
int sc_enter(struct sc_enter_args *ctx)
{
	__u32 nr = ctx->nr;
	__u16 *traced = traced_nr.lookup(&nr);
	if (!traced || !*traced)
		return 0;
	return call_enter(nr, *traced, ctx->args[0], 0, 0);
}

int sc_enter_at(struct sc_enter_args *ctx)
{
	__u32 nr = ctx->nr;
	__u16 *traced = traced_nr.lookup(&nr);
	if (!traced || !*traced)
		return 0;
	return call_enter(nr, *traced, ctx->args[0], ctx->args[1], 0);
}

/* setxattr, lsetxattr, fsetxattr: their fourth argument is the value's size */
int sc_enter_xattr(struct sc_enter_args *ctx)
{
	__u32 nr = ctx->nr;
	__u16 *traced = traced_nr.lookup(&nr);
	if (!traced || !*traced)
		return 0;
	struct inflight *c = call_begin(nr, *traced, ctx->args[0], ctx->args[1], 0);
	if (c)
		c->arg3 = ctx->args[3];
	return 0;
}

int sc_exit(struct sc_exit_args *ctx)
{
	struct inflight *c = current_call(0);
	return c && c->ts_ns ? call_end(c, ctx->ret, 0) : 0;
}
#else
/* A traced call enters and leaves where the attach point hands over the saved user
 * registers: raw_syscalls, or fentry/fexit on the syscall's function. */
static __always_inline int regs_enter(__u32 nr, __u64 regs)
{
	__u16 *traced = traced_nr.lookup(&nr);
	if (!traced || !*traced)
		return 0;
	return call_enter(nr, *traced, 0, 0, regs);
}

static __always_inline int regs_exit(__s64 ret, __u64 regs)
{
	struct inflight *c = current_call(0);
	return c && c->ts_ns ? call_end(c, ret, regs) : 0;
}

#if FENTRY_SYSCALLS
/* fentry/fexit on each traced call's syscall function (__x64_sys_<name>(const struct
 * pt_regs *regs)), loaded once per call by the recorder: only traced calls run a program,
 * and other syscalls stay off the slow syscall path that any syscall tracepoint turns on.
 * ctx: the function's arguments (regs, the saved user registers), then for fexit its
 * return value. The call's number is the one the registers were entered with. */
int fentry_call(struct bpf_raw_tracepoint_args *ctx)
{
	return regs_enter(read_sized((const void *)ctx->args[0] + SYSCALL_NR_OFF, 4), ctx->args[0]);
}

int fexit_call(struct bpf_raw_tracepoint_args *ctx)
{
	return regs_exit(ctx->args[1], ctx->args[0]);
}
#else
/* raw_syscalls:sys_enter(struct pt_regs *regs, long id): one program for every syscall
 * of every task; untraced numbers return at once. */
int on_sys_enter(struct bpf_raw_tracepoint_args *ctx)
{
	return regs_enter(ctx->args[1], ctx->args[0]);
}

/* raw_syscalls:sys_exit(struct pt_regs *regs, long ret) */
int on_sys_exit(struct bpf_raw_tracepoint_args *ctx)
{
	return regs_exit(ctx->args[1], ctx->args[0]);
}
#endif
#endif

#include "handles.bpf.h"
#include "jbd2.bpf.h"
#include "offcpu.bpf.h"
#include "xfslog.bpf.h"
#include "forks.bpf.h"
#include "writers.bpf.h"
