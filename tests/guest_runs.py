"""The guest smoke runs of tests/test_guest_kernels.py, started once the timed tests have run
(tests/conftest.py) so that the guests boot and run beside the other tests, at the lowest CPU
priority (nice 19: the host's own tests, some of them paced or timed, keep the CPUs they
need; the emulated guests take what is idle). The guest tests run last and wait for them.

Each guest runs tests/guest/smoke.sh with its own output directory (a host directory the
guest may write) and has a bound on its time: emulated, and starved while the host is
busy, it needs minutes; no timing is asserted."""

import os
import re
import shutil
import signal
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUEST = os.path.join(ROOT, "scripts", "guest.sh")
#: each guest's bound (guest.sh -t): it shares two CPUs with the other tests at nice 19
GUEST_SECONDS = 3000


def listed_kernels():
    """The kernels whose smoke runs these tests check: the releases of tests/guest-kernels.txt
    (its first column, the generic kernels); JSTALL_GUEST_KERNELS names others, `all` for
    every release and its flavours (`make test-kernels` runs each flavour's alone)."""
    chosen = os.environ.get("JSTALL_GUEST_KERNELS", "").split()
    if chosen and chosen != ["all"]:
        return chosen
    # guest.sh reads the list (its `kernels` command): every flavour, or the releases alone
    kernels = ["kernels"] if chosen else ["kernels", "generic"]
    return subprocess.run(["bash", GUEST, *kernels], capture_output=True, text=True, check=True).stdout.split()


def lowest_priority(pid):
    """nice 19 for a new session's group too: with autogroups (CONFIG_SCHED_AUTOGROUP, on
    here and on distribution kernels) each session's tasks share the CPUs as one group
    against the other sessions', whatever their own nice, so a guest started in its own
    session at nice 19 took half a CPU from a nice-0 test task beside it (0.50 of the
    time; 0.015 with its group at 19). The group's nice is /proc/PID/autogroup."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write("19")
    except OSError:   # no autogroups: nice alone orders the CPUs
        pass


class GuestRuns:
    """The smoke run of every listed kernel: start() boots them all at once, results() waits
    for them, stop() ends what still runs and removes their directories."""

    def __init__(self):
        self.dir = None
        self.runs = {}      # kernel -> (output directory, Popen, console file)
        self.done = None

    def start(self):
        self.dir = tempfile.mkdtemp(prefix="jstall-guests-", dir="/tmp")
        for kernel in listed_kernels():
            out = os.path.join(self.dir, re.sub(r"[^\w.-]", "_", kernel))
            os.mkdir(out)
            console = open(os.path.join(out, "console.txt"), "w")
            proc = subprocess.Popen(["nice", "-n", "19", "bash", GUEST, "run", kernel, "-t", str(GUEST_SECONDS),
                                     "-w", out, "--", f"bash tests/guest/smoke.sh {out}"], cwd=ROOT, stdout=console,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            lowest_priority(proc.pid)
            self.runs[kernel] = (out, proc, console)

    def results(self):
        """{kernel: (output directory, guest exit status, console output)}, once every guest ended."""
        if self.done is None:
            if not self.runs:   # a guest test run on its own (no session start saw it): start now
                self.start()
            done = {}
            for kernel, (out, proc, console) in self.runs.items():
                try:
                    rc = proc.wait(timeout=GUEST_SECONDS + 60)
                except subprocess.TimeoutExpired:   # guest.sh's own bound failed: end it
                    os.killpg(proc.pid, signal.SIGKILL)
                    rc = proc.wait()
                console.close()
                with open(os.path.join(out, "console.txt"), errors="replace") as f:
                    done[kernel] = (out, rc, f.read())
            self.done = done
        return self.done

    def stop(self):
        for _, proc, console in self.runs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)   # guest.sh, its timeout and qemu
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            console.close()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)


RUNS = GuestRuns()
