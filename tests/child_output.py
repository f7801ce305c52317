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
