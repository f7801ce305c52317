"""Reading a child process's output in tests with a bound on the wait: no test hangs on a
child that never writes (a recorder compiles its probes before its first line, which takes
minutes in an emulated guest, hence the generous default)."""

import os
import queue
import threading


def read_line(stream, timeout=600):
    """The next line of a child's output stream, or AssertionError after timeout seconds."""
    timeout *= float(os.environ.get("JSTALL_TEST_SLOWDOWN") or 1)   # tests/conftest.py
    q = queue.Queue()
    threading.Thread(target=lambda: q.put(stream.readline()), daemon=True).start()
    try:
        return q.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError(f"no line from the child in {timeout} s") from None


def end_bpftrace(proc, timeout=60):
    """End a bpftrace with Ctrl-C as a user does, and return its (stdout, stderr): SIGINT,
    again every 5 s until it exits (then SIGKILL and AssertionError after ``timeout`` s).

    Debian's bpftrace 0.17 leaves its event loop only when a signal interrupts its
    epoll_wait; a SIGINT that lands while it reads events sets its exit flag, which the loop
    never looks at again, and it polls on. Seen here: a bpftrace alive 56 minutes after its
    test's SIGINT, asleep in do_epoll_wait with no signal pending, ended at once by a second
    one (it then printed its maps as after the first)."""
    import signal
    import subprocess
    import time

    deadline = time.monotonic() + timeout * float(os.environ.get("JSTALL_TEST_SLOWDOWN") or 1)
    while True:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            return proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            if time.monotonic() > deadline:
                proc.kill()
                proc.communicate()
                raise AssertionError(f"bpftrace did not end within {timeout} s of Ctrl-C") from None
