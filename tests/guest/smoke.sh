#!/bin/bash
# The guest smoke run (tests/test_guest_kernels.py; runs inside a guest, in the checkout):
# on a stock kernel, at once and over the same lab run,
#   - `jstall monitor` system-wide (fs-level probes), scraped after the run;
#   - `jstall record` system-wide with JSTALL_ATTACH=syscalls (syscall tracepoints), of
#     setxattr alone (the count the host test compares);
#   - `jstall lab run xattr` (its recording in the kernel's default attach mode: fentry on a
#     stock kernel) of the seed stall: 128-byte inodes, a 4 MiB journal, a paced device,
#     with probes/jstall-commits.bt and probes/jstall-slowcalls.bt (jbd2 a module) over it;
#   - `jstall lab run command` on an XFS with an 8 MiB log: its log-space waits, and
#     probes/jstall-xfslog.bt (bpftrace, xfs a module) over the same run, given XFSLOG_SECS
#     as its duration: it is ended with Ctrl-C (SIGINT, again every 5 s: bpftrace 0.17 can
#     miss a lone one, see interrupt_until_gone) once the run is over, as a user ends it, and
#     its duration ends it by itself whatever becomes of the signals.
# Everything lands in OUT (a host directory the guest may write); the host test analyzes
# and checks it there. Every wait has a bound.
set -u
# a fault in a Python process prints its threads' stacks to its step's log (lab.log, ...)
export PYTHONFAULTHANDLER=1
OUT=$1
# the XFS lab run's bound, and jstall-xfslog.bt's duration: the latest it ends by itself
XFSLOG_SECS=${XFSLOG_SECS:-1200}
ROOT=$PWD
J=$PWD/.venv/bin/jstall
PORT=9853
cd "$OUT" || exit 1
uname -r > kernel.txt
T0=$(date +%s)
"$J" monitor -q --listen 127.0.0.1:$PORT > monitor.log 2>&1 &
MON=$!
JSTALL_ATTACH=syscalls "$J" record -q --calls setxattr --min-ms 1000 -o syscalls-session > record.log 2>&1 &
REC=$!
ready=0
for _ in $(seq 2400); do   # both compile their probes: minutes under emulation, at nice 19
    if [ -e syscalls-session/metadata.json ] && curl -sf "http://127.0.0.1:$PORT/metrics" -o /dev/null; then
        ready=1; break
    fi
    kill -0 $MON 2>/dev/null && kill -0 $REC 2>/dev/null || break
    sleep 1
done
echo "ready=$ready" > status.txt
echo "ready_s=$(( $(date +%s) - T0 ))" >> status.txt   # each step's seconds: where a guest's time goes

# wait_tracing FILE PID: until bpftrace (PID) printed its "Tracing ..." line in FILE, or ended
wait_tracing() {
    for _ in $(seq 600); do
        grep -q "^Tracing" "$1" && break
        kill -0 "$2" 2>/dev/null || break
        sleep 1
    done
}
# interrupt_until_gone PID SECONDS: Ctrl-C, again every 5 s until it ends or SECONDS pass.
# bpftrace 0.17 leaves its event loop only when a signal interrupts its epoll_wait: one that
# lands while it reads events sets its exit flag, which the loop never looks at again
# (tests/child_output.py end_bpftrace: the same on the host)
interrupt_until_gone() {
    for _ in $(seq 0 5 "$2"); do
        kill -0 "$1" 2>/dev/null || return 0
        kill -INT "$1" 2>/dev/null
        for _ in 1 2 3 4 5; do kill -0 "$1" 2>/dev/null || return 0; sleep 1; done
    done
}
# end_bpftrace PID NAME: Ctrl-C until it ends, then its exit status as NAME in status.txt
# (killed after 600 s)
end_bpftrace() {
    interrupt_until_gone "$1" 600
    kill -KILL "$1" 2>/dev/null
    wait "$1"; echo "$2=$?" >> status.txt
}

if [ $ready = 1 ]; then
    # the jbd2 bpftrace scripts (jbd2 a module there) over the ext4 lab run, each given a duration
    bpftrace "$ROOT/probes/jstall-commits.bt" 0 "$XFSLOG_SECS" > commits.txt 2>&1 &
    CBT=$!
    bpftrace "$ROOT/probes/jstall-slowcalls.bt" 10 "$XFSLOG_SECS" > slowcalls.txt 2>&1 &
    SBT=$!
    wait_tracing commits.txt $CBT
    wait_tracing slowcalls.txt $SBT
    echo "jbd2_bt_ready_s=$(( $(date +%s) - T0 ))" >> status.txt
    "$J" lab run xattr --fs-size 64M --journal-size 4M --inode-size 128 --files 1500 --updates 6000 \
        --write-iops 2000 --scratch /var/tmp/jstall-smoke -o lab > lab.log 2>&1
    rc=$?
    echo "lab=$rc" >> status.txt
    echo "lab_s=$(( $(date +%s) - T0 ))" >> status.txt
    # a failed step's log on the console too: the guest's log under $JSTALL_GUEST_BASE/logs keeps it
    [ $rc = 0 ] || { echo "== lab.log (exit $rc)"; tail -n 60 lab.log; }
    end_bpftrace $CBT commits
    end_bpftrace $SBT slowcalls
    # XFS (a module there, loaded here for bpftrace's tracepoints): distinct metadata on an
    # 8 MiB log over a device paced for the emulator's speed
    modprobe xfs
    bpftrace "$ROOT/probes/jstall-xfslog.bt" "$XFSLOG_SECS" > xfslog.txt 2>&1 &
    BT=$!
    t0=$(date +%s)
    wait_tracing xfslog.txt $BT
    t1=$(date +%s)
    echo "xfslog_ready_s=$(( t1 - t0 ))" >> status.txt
    timeout -s INT -k 60 "$XFSLOG_SECS" \
        "$J" lab run command --fs-type xfs --fs-size 400M --journal-size 8M --write-iops 20 \
        --command "$ROOT/.venv/bin/python $ROOT/tests/create_workload.py . 20000" \
        --scratch /var/tmp/jstall-smoke -o lab-xfs > lab-xfs.log 2>&1
    rc=$?
    echo "lab_xfs=$rc" >> status.txt
    [ $rc = 0 ] || { echo "== lab-xfs.log (exit $rc)"; tail -n 60 lab-xfs.log; }
    echo "lab_xfs_s=$(( $(date +%s) - t1 ))" >> status.txt
fi
# (the recorder and the monitor end first)
if [ $ready = 1 ]; then
    sleep 2   # the monitor reads its ring buffers every 100 ms
    curl -sf "http://127.0.0.1:$PORT/metrics" > metrics.txt
    echo "scrape=$?" >> status.txt
fi
kill -INT $REC 2>/dev/null
kill -TERM $MON 2>/dev/null
for pid in $REC $MON; do
    for _ in $(seq 120); do kill -0 $pid 2>/dev/null || break; sleep 1; done
    kill -KILL $pid 2>/dev/null
done
wait $REC; echo "record=$?" >> status.txt
wait $MON; echo "monitor=$?" >> status.txt
if [ $ready = 1 ]; then
    # Ctrl-C now; else bpftrace ends XFSLOG_SECS after it began tracing. Either way it drains
    # its buffers and prints its maps (in a starved emulated guest that took more than 120 s once)
    t2=$(date +%s)
    interrupt_until_gone $BT $(( XFSLOG_SECS + 600 ))
    echo "xfslog_ran_s=$(( $(date +%s) - t1 ))" >> status.txt
    echo "xfslog_exit_s=$(( $(date +%s) - t2 ))" >> status.txt
    if kill -0 $BT 2>/dev/null; then
        # where it is stuck, for the test's message
        for t in /proc/$BT/task/*; do
            echo "== $t $(cat $t/comm 2>/dev/null) $(cat $t/wchan 2>/dev/null)"
            grep -E "^(State|SigPnd|ShdPnd|SigBlk|SigCgt):" $t/status 2>/dev/null
            cat $t/stack 2>/dev/null
        done > xfslog-hang.txt 2>&1
    fi
    kill -KILL $BT 2>/dev/null
    wait $BT; echo "xfslog=$?" >> status.txt
fi
echo "total_s=$(( $(date +%s) - T0 ))" >> status.txt
# the steps' statuses and seconds on the console too (the guest's log keeps them)
echo "== status: $(tr '\n' ' ' < status.txt)"
