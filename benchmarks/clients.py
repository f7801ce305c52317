"""Real clients for benchmarks/advice_accuracy.py, each written as such a program does its
I/O, nothing in them chosen to suit jstall's advice. Run in the current directory.

usage: python3 benchmarks/clients.py sqlite COMMITS
       python3 benchmarks/clients.py maildir MESSAGES
       python3 benchmarks/clients.py storm FILES UPDATES
       python3 benchmarks/clients.py latency
       python3 benchmarks/clients.py fileserver FILES

sqlite   a database with a rollback journal (journal_mode=DELETE, synchronous=FULL, the
         defaults of the sqlite3 library): COMMITS single-row INSERT transactions, each of
         which creates, writes and fsyncs db-journal, writes and fsyncs the database and
         deletes db-journal.
maildir  mail delivery into a maildir: 4 writer processes deliver MESSAGES messages between
         them (1 to 8 KiB each) as a delivery agent does: write tmp/NAME, fsync it, set a
         user.* attribute (the flags a filtering agent keeps), rename it into new/; one mover
         process renames what arrives in new/ into cur/NAME:2,S (a reader marking it seen)
         until the writers are done and new/ is empty.
storm    a noisy tenant: an xattr storm (FILES files, then UPDATES setxattr calls of 32-byte
         values on them in turn, two attribute names), process name "storm".
latency  a latency tenant, process name "latency": writes 4 KiB at the next offset of a 4 MiB
         file and fdatasyncs it every 5 ms until SIGTERM (the lab's tenants pattern, --until
         storm, sends it when the storm is done).
fileserver  a file server storing Windows metadata as Samba does (store dos attributes,
         vfs objects = acl_xattr): 2 client processes write FILES files between them (4 to
         16 KiB each, 50 to a directory), each with its DOS attributes (user.DOSATTRIB, a
         60-byte blob with the file's times) and its NT ACL (security.NTACL, a 192-byte blob:
         the descriptor and its hash), set once the data is written.
"""

import contextlib
import os
import signal
import sqlite3
import sys
import time


def sqlite_commits(n):
    db = sqlite3.connect("db", isolation_level=None)  # autocommit: one transaction a statement
    db.execute("PRAGMA journal_mode=DELETE")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT)")
    for i in range(n):
        db.execute("INSERT INTO t (v) VALUES (?)", (f"row {i:08d} " + "x" * 100,))
    db.close()


def _deliver(w, count):
    for i in range(count):
        name = f"{int(time.time())}.M{i}P{os.getpid()}Q{w}.lab"
        tmp = os.path.join("tmp", name)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(
                fd,
                (f"From: w{w}@lab\nSubject: {i}\n\n".encode() + b"m" * (1024 + (i * 997) % 7168)),
            )
            os.fsync(fd)
        finally:
            os.close(fd)
        os.setxattr(tmp, "user.flags", b"filtered,spam-score=0.0")
        os.rename(tmp, os.path.join("new", name))


def _move(done):
    while True:
        names = os.listdir("new")
        for name in names:
            os.rename(os.path.join("new", name), os.path.join("cur", name + ":2,S"))
        if not names:
            if os.path.exists(done):
                if not os.listdir("new"):
                    return
            else:
                time.sleep(0.005)


def _in_processes(work, n, procs):
    """``work(k, count)`` in ``procs`` child processes sharing ``n`` items between them;
    how many of them failed."""
    kids = []
    for k in range(procs):
        pid = os.fork()
        if pid == 0:
            work(k, n // procs + (k < n % procs))
            os._exit(0)
        kids.append(pid)
    return sum(os.waitpid(p, 0)[1] != 0 for p in kids)


def maildir(n, writers=4):
    for d in ("tmp", "new", "cur"):
        os.makedirs(d, exist_ok=True)
    done = "writers-done"
    mover = os.fork()
    if mover == 0:
        _move(done)
        os._exit(0)
    bad = _in_processes(_deliver, n, writers)
    open(done, "w").close()
    bad += os.waitpid(mover, 0)[1] != 0
    if bad:
        raise SystemExit(f"maildir: {bad} of its processes failed")


def _set_comm(name):
    """Set the process's name as ps, top and jstall show it (its comm); return the old one."""
    with open("/proc/self/comm", "r+") as f:
        old = f.read().strip()
        f.seek(0)
        f.write(name)
    return old


@contextlib.contextmanager
def _named(name):
    """The process named ``name`` while the block runs."""
    old = _set_comm(name)
    try:
        yield
    finally:
        _set_comm(old)


def storm(files, updates):
    with _named("storm"):
        os.makedirs("storm", exist_ok=True)
        paths = [os.path.join("storm", f"f{i:06d}") for i in range(files)]
        for p in paths:
            open(p, "w").close()
        for k in range(updates):
            os.setxattr(
                paths[k % files], "user.a" if (k // files) % 2 == 0 else "user.b", f"{k:032d}".encode()
            )


def _until_terminated():
    """A loop condition true until SIGTERM arrives (the lab's tenants pattern ends a tenant so)."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    return lambda: not stop


def latency(running=None, period_s=0.005, size=4096, span=4 << 20):
    """The latency tenant's loop, while ``running()`` (default: until SIGTERM)."""
    running = running or _until_terminated()
    block, off, writes = b"l" * size, 0, 0
    fd = os.open("latency.dat", os.O_WRONLY | os.O_CREAT, 0o644)
    nxt = time.monotonic()
    with _named("latency"):
        try:
            while running():
                os.pwrite(fd, block, off)
                os.fdatasync(fd)
                off, writes = (off + size) % span, writes + 1
                nxt += period_s
                delay = nxt - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                else:
                    nxt = time.monotonic()  # behind: the next write at once, no burst to catch up
        finally:
            os.close(fd)
    if writes == 0:
        raise SystemExit("latency: the latency tenant wrote nothing")


def _serve(c, count):
    acl = bytes(range(192))   # one inherited ACL: the same descriptor on every file
    for i in range(count):
        d = os.path.join("share", f"c{c}d{i // 50:04d}")
        if i % 50 == 0:
            os.makedirs(d, exist_ok=True)
        p = os.path.join(d, f"doc{i:06d}.dat")
        with open(p, "wb") as f:
            f.write(b"s" * (4096 + (i * 1237) % 12288))
        dos = f"DOS:{c}:{i}:{time.time_ns()}".encode().ljust(60, b"\0")
        os.setxattr(p, "user.DOSATTRIB", dos)
        os.setxattr(p, "security.NTACL", acl)


def fileserver(n, clients=2):
    bad = _in_processes(_serve, n, clients)
    if bad:
        raise SystemExit(f"fileserver: {bad} of its clients failed")


def main(argv):
    usage = __doc__.split("usage: ")[1].split("\n\n")[0]
    try:
        kind, nums = argv[0], [int(x) for x in argv[1:]]
        run = {
            "sqlite": (sqlite_commits, 1),
            "maildir": (maildir, 1),
            "storm": (storm, 2),
            "latency": (latency, 0),
            "fileserver": (fileserver, 1),
        }[kind]
        if len(nums) != run[1]:
            raise ValueError
    except (IndexError, ValueError, KeyError):
        print("usage: " + usage, file=sys.stderr)
        return 2
    run[0](*nums)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
