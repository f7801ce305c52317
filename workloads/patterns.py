"""The lab's workload patterns. Each is a list of timed phases; each phase runs in ``jobs``
forked processes at once, job ``j`` working under ``<mount>/job<j>``. Everything random comes
from ``random.Random`` seeded with (seed, pattern, phase, job): the same seed does the same work.

Counts a phase reports are of operations that succeeded: ``files``, ``dirs``, ``attrs``
(extended attributes set or removed), ``bytes`` (file data written or read, or attribute value
bytes set), and ``ops`` in the phase's ``unit``.
"""

import dataclasses
import functools
import os
import random
import re
import shlex
import shutil
import signal
import struct
import subprocess
import time

from jstall.errors import JstallError

from jstall.units import format_size, parse_size

from . import tenantcg

CHUNK = 1 << 20


class Progress:
    """Per-job operation counters in shared memory (a forked job writes, the parent reads)."""

    def __init__(self, jobs):
        import mmap

        self.jobs = jobs
        self.mem = mmap.mmap(-1, 8 * max(jobs, 1))

    def set(self, job, value):
        struct.pack_into("q", self.mem, 8 * job, value)

    def total(self):
        return sum(struct.unpack_from("q", self.mem, 8 * j)[0] for j in range(self.jobs))

    def reset(self):
        for j in range(self.jobs):
            self.set(j, 0)


@dataclasses.dataclass
class Phase:
    """One timed phase: ``run(job, root, rng, tick)`` does job ``job``'s share under ``root``
    and returns its counts; ``tick(n)`` reports n operations done so far. ``removal`` phases
    delete what earlier phases made (the lab takes its census before the first of them);
    ``drop_caches``: the page cache is dropped before the phase starts."""

    name: str
    unit: str
    total: int
    run: object
    removal: bool = False
    drop_caches: bool = False
    #: a phase that runs its jobs itself instead of in forked lab jobs:
    #: ``run_all(mountpoint, roots) -> (start_ns, returned_ns, [counts per job], {extra record fields})``
    run_all: object = None


def _split(n, jobs, job):
    return n // jobs + (1 if job < n % jobs else 0)


def _fill(fd, size, seed_byte):
    """Write size bytes to fd (CHUNK at a time); return bytes written."""
    block = bytes([seed_byte & 0xFF]) * min(size, CHUNK)
    done = 0
    while done < size:
        done += os.write(fd, block[: min(CHUNK, size - done)])
    return done


def _positive(name, value, lo=1, hi=None):
    if not isinstance(value, int) or value < lo or (hi is not None and value > hi):
        rng = f"{lo} to {hi:,}" if hi is not None else f"≥ {lo}"
        raise JstallError(f"--{name.replace('_', '-')} {value}: give a whole number {rng}")
    return value


class Pattern:
    name = None
    #: {param: default} -- the pattern's own options
    defaults = {}
    #: {param: (kind, help)} -- how the command line takes each option (kinds as in
    #: options.FS_OPTIONS: int, size, bool, choice:a|b, str; list: given once per value)
    options = {}

    def __init__(self, params, jobs=1, seed=1):
        unknown = set(params) - set(self.defaults)
        if unknown:
            opts = ", ".join("--" + u.replace("_", "-") for u in sorted(unknown))
            raise JstallError(f"{opts} does not apply to the {self.name} pattern; drop it (see 'jstall lab run -h')")
        self.params = dict(self.defaults)
        self.params.update({k: v for k, v in params.items() if v is not None})
        self.jobs = _positive("jobs", jobs, 1, 1024)
        self.seed = seed
        self.validate()

    #: tenants working on a second scratch filesystem the lab makes (TenantsPattern)
    own_filesystems = ()

    def validate(self):
        pass

    def setup(self, fs, own_fs=None):
        """Called with the scratch filesystems (scratchfs.ScratchFs) before the phases run."""

    def roots(self, mountpoint):
        """The jobs' directories (the lab makes them; its census walks them): ``<mount>/job<j>``."""
        return [os.path.join(mountpoint, f"job{j}") for j in range(self.jobs)]

    def check_fits(self, fs_cfg):
        """Refuse work that cannot fit the filesystem (fs_cfg: FsConfig)."""

    def phases(self):
        raise NotImplementedError

    def rng(self, phase, job):
        return random.Random(f"{self.seed}:{self.name}:{phase}:{job}")

    def describe(self):
        return dict(self.params)

    def lab_fields(self, phase_records):
        """Fields the pattern adds to the lab metadata once its phases ran (default none)."""
        return {}


# ---- xattr --------------------------------------------------------------------------


class XattrPattern(Pattern):
    """N files each given K attributes of S bytes with unique random values (with 128-byte
    inodes every file then needs its own external attribute block: ext4 shares identical
    attribute blocks between inodes, so the values are kept unique), then M setxattr updates of
    random attributes of random files, and with ``remove`` every attribute removed and every
    file unlinked. Files and updates are split among the jobs, each on its own files."""

    name = "xattr"
    defaults = {"files": 5000, "attrs": 2, "attr_size": 16, "updates": 54247, "remove": False}
    options = {"files": ("int", "files in all"), "attrs": ("int", "attributes per file"),
               "attr_size": ("int", "bytes per attribute value"),
               "updates": ("int", "setxattr updates on random files"),
               "remove": ("bool", "finally remove every attribute and file")}

    def validate(self):
        p = self.params
        _positive("files", p["files"], 1, 10_000_000)
        _positive("attrs", p["attrs"], 1, 100)
        _positive("attr_size", p["attr_size"], 1, 4000)
        _positive("updates", p["updates"], 0, 100_000_000)
        p["remove"] = bool(p["remove"])
        if p["files"] < self.jobs:
            raise JstallError(f"--files {p['files']} is fewer than --jobs {self.jobs}: each job works on its own "
                              "files; give more files or fewer jobs")

    def check_fits(self, fs_cfg):
        p = self.params
        # an ext4 attribute block: 32-byte header, per entry 16 bytes + name (4-aligned) + value (4-aligned)
        need = 32 + p["attrs"] * (16 + 4 + -(-p["attr_size"] // 4) * 4 + 4)
        # (XFS spills attributes that outgrow one block into an attribute tree)
        if need > fs_cfg.block_size and fs_cfg.fs_type == "ext4":
            raise JstallError(f"--attrs {p['attrs']} of --attr-size {p['attr_size']} need {need} bytes, more than one "
                              f"{fs_cfg.block_size}-byte attribute block; give fewer or smaller attributes")
        inodes = fs_cfg.fs_bytes // 16384
        if p["files"] > inodes * 0.9:
            raise JstallError(f"--files {p['files']} needs more inodes than --fs-size {format_size(fs_cfg.fs_bytes)} "
                              f"has (about {inodes}); "
                              f"give --fs-size {format_size(-(-p['files'] * 32768 // (1 << 20)) << 20)}")
        if p["files"] * fs_cfg.block_size > fs_cfg.fs_bytes * 0.7:
            raise JstallError(f"--files {p['files']} attribute blocks do not fit in --fs-size "
                              f"{format_size(fs_cfg.fs_bytes)}; give a larger --fs-size")

    def _value(self, rng, job, seq):
        size = self.params["attr_size"]
        if size >= 12:  # job and sequence number first: unique whatever the random bytes
            return struct.pack("<IQ", job, seq) + rng.randbytes(size - 12)
        return rng.randbytes(size)

    def phases(self):
        p = self.params
        names = [f"user.a{k}" for k in range(p["attrs"])]

        def create(job, root, rng, tick):
            n = _split(p["files"], self.jobs, job)
            files = attrs = nbytes = 0
            for i in range(n):
                path = os.path.join(root, f"f{i}")
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644))
                files += 1
                for name in names:
                    v = self._value(rng, job, attrs)
                    os.setxattr(path, name, v)
                    attrs += 1
                    nbytes += len(v)
                if i % 64 == 0:
                    tick(files)
            return {"ops": files, "files": files, "attrs": attrs, "bytes": nbytes}

        def update(job, root, rng, tick):
            n = _split(p["files"], self.jobs, job)
            m = _split(p["updates"], self.jobs, job) if n else 0
            nbytes = 0
            base = n * len(names)  # sequence numbers continue after the create phase's
            for u in range(m):
                path = os.path.join(root, f"f{rng.randrange(n)}")
                v = self._value(rng, job, base + u)
                os.setxattr(path, names[rng.randrange(len(names))], v)
                nbytes += len(v)
                if u % 256 == 0:
                    tick(u)
            return {"ops": m, "attrs": m, "bytes": nbytes}

        def remove(job, root, rng, tick):
            n = _split(p["files"], self.jobs, job)
            attrs = 0
            for i in range(n):
                path = os.path.join(root, f"f{i}")
                for name in names:
                    os.removexattr(path, name)
                    attrs += 1
                os.unlink(path)
                if i % 64 == 0:
                    tick(i)
            return {"ops": n, "files": n, "attrs": attrs}

        out = [Phase("create", "files", p["files"], create), Phase("update", "setxattr", p["updates"], update)]
        if p["remove"]:
            out.append(Phase("remove", "files", p["files"], remove, removal=True))
        return out


# ---- fdtree -----------------------------------------------------------------------------

FDTREE_SHAPES = {
    "shallow": {"levels": 1, "fanout": 100, "files_per_dir": 100},
    "deep": {"levels": 5, "fanout": 4, "files_per_dir": 5},
}


class FdtreePattern(Pattern):
    """A directory tree per job, ``levels`` deep with ``fanout`` subdirectories in each
    directory, and ``files_per_dir`` files of ``file_size`` bytes in every directory of the tree
    (the fdtree benchmark). Phases: dir_create, file_create, file_remove, dir_remove.
    ``shape`` sets levels, fanout and files_per_dir at once: shallow (1 level of 100 directories,
    100 files each) or deep (5 levels of 4, 5 files each); explicit values override it."""

    name = "fdtree"
    defaults = {"shape": "shallow", "levels": None, "fanout": None, "files_per_dir": None, "file_size": "4K"}
    options = {"shape": ("choice:shallow|deep",
                         "shallow (1 level × 100 dirs × 100 files) or deep (5 levels × 4, 5 files)"),
               "levels": ("int", "directory levels"), "fanout": ("int", "subdirectories per directory"),
               "files_per_dir": ("int", "files in each directory"), "file_size": ("size", "bytes per file")}

    def __init__(self, params, jobs=1, seed=1):
        shape = params.get("shape") or self.defaults["shape"]
        if shape not in FDTREE_SHAPES:
            raise JstallError(f"--shape {shape}: choose shallow or deep")
        merged = dict(FDTREE_SHAPES[shape], shape=shape)
        merged.update({k: v for k, v in params.items() if v is not None})
        super().__init__(merged, jobs, seed)

    def validate(self):
        p = self.params
        _positive("levels", p["levels"], 1, 20)
        _positive("fanout", p["fanout"], 1, 100_000)
        _positive("files_per_dir", p["files_per_dir"], 0, 1_000_000)
        p["file_size"] = (format_size(parse_size(p["file_size"], "--file-size"))
                          if p["file_size"] not in (0, "0") else "0")
        if self.dirs_per_job() > 2_000_000:
            raise JstallError(f"--levels {p['levels']} --fanout {p['fanout']} "
                              f"make {self.dirs_per_job():,} directories; "
                              "give fewer levels or a smaller fanout")

    @property
    def file_bytes(self):
        return 0 if self.params["file_size"] == "0" else parse_size(self.params["file_size"])

    def dirs_per_job(self):
        f, lv = self.params["fanout"], self.params["levels"]
        return sum(f ** i for i in range(1, lv + 1))

    def tree(self):
        """Directory paths of one job's tree, relative to its root, parents first."""
        f = self.params["fanout"]
        level, out = [""], []
        for _ in range(self.params["levels"]):
            level = [os.path.join(d, f"d{k}") for d in level for k in range(f)]
            out += level
        return out

    def check_fits(self, fs_cfg):
        bs = fs_cfg.block_size
        dirs = self.dirs_per_job() * self.jobs
        files = dirs * self.params["files_per_dir"]
        need = dirs * bs + files * (-(-self.file_bytes // bs) * bs)
        if need > fs_cfg.fs_bytes * 0.8:
            raise JstallError(f"the tree needs about {format_size(need >> 20 << 20)} "
                              f"({dirs:,} directories, {files:,} files of {self.params['file_size']}), "
                              f"more than --fs-size {format_size(fs_cfg.fs_bytes)} holds; "
                              f"give --fs-size {format_size((need * 2 >> 20) + 16 << 20)} or a smaller tree")
        if dirs + files > fs_cfg.fs_bytes // 16384 * 0.9:
            raise JstallError(f"{dirs + files:,} directories and files need more inodes than --fs-size "
                              f"{format_size(fs_cfg.fs_bytes)} has; give a larger --fs-size")

    def phases(self):
        p = self.params
        nf, size = p["files_per_dir"], self.file_bytes
        dirs_total = self.dirs_per_job() * self.jobs

        def dir_create(job, root, rng, tick):
            n = 0
            for d in self.tree():
                os.mkdir(os.path.join(root, d))
                n += 1
                if n % 64 == 0:
                    tick(n)
            return {"ops": n, "dirs": n}

        def file_create(job, root, rng, tick):
            files = nbytes = 0
            for d in self.tree():
                for i in range(nf):
                    fd = os.open(os.path.join(root, d, f"f{i}"), os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
                    try:
                        nbytes += _fill(fd, size, i)
                    finally:
                        os.close(fd)
                    files += 1
                tick(files)
            return {"ops": files, "files": files, "bytes": nbytes}

        def file_remove(job, root, rng, tick):
            files = nbytes = 0
            for d in self.tree():
                for i in range(nf):
                    os.unlink(os.path.join(root, d, f"f{i}"))
                    files += 1
                    nbytes += size
                tick(files)
            return {"ops": files, "files": files, "bytes": nbytes}

        def dir_remove(job, root, rng, tick):
            n = 0
            for d in reversed(self.tree()):
                os.rmdir(os.path.join(root, d))
                n += 1
                if n % 64 == 0:
                    tick(n)
            return {"ops": n, "dirs": n}

        return [
            Phase("dir_create", "dirs", dirs_total, dir_create),
            Phase("file_create", "files", dirs_total * nf, file_create),
            Phase("file_remove", "files", dirs_total * nf, file_remove, removal=True),
            Phase("dir_remove", "dirs", dirs_total, dir_remove, removal=True),
        ]

    def describe(self):
        d = dict(self.params)
        d["dirs_per_job"] = self.dirs_per_job()
        d["file_size_bytes"] = self.file_bytes
        return d


# ---- smallfile ----------------------------------------------------------------------------


def _walk_files(root, fn, tick):
    """(files, sum of ``fn(path)``) over the files of ``root``'s directories, in readdir
    order; ``tick(files)`` every 64 files."""
    files = nbytes = 0
    for d in os.scandir(root):
        for e in os.scandir(d.path):  # readdir order
            nbytes += fn(e.path)
            files += 1
            if files % 64 == 0:
                tick(files)
    return files, nbytes


def _read_all(path):
    """Read a file to its end (CHUNK at a time, unbuffered); return its bytes read."""
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(CHUNK)
            if not b:
                return n
            n += len(b)


class SmallfilePattern(Pattern):
    """Per job, ``files`` files of ``file_size`` bytes on average (each uniformly between half
    and one and a half times it), ``files_per_dir`` to a directory (the smallfile benchmark).
    Phases: write (mkdir, open, write, close, chown, chmod), rewrite (overwrite in place), read
    (in readdir order), stat (in readdir order), unlink (files, then directories). The page
    cache is dropped before every phase but the first."""

    name = "smallfile"
    defaults = {"files": 1000, "file_size": "64K", "files_per_dir": 100}
    options = {"files": ("int", "files per job"), "file_size": ("size", "average bytes per file"),
               "files_per_dir": ("int", "files per directory")}
    OWNER = (65534, 65534)   # nobody:nogroup
    MODE = 0o640

    def validate(self):
        p = self.params
        _positive("files", p["files"], 1, 10_000_000)
        _positive("files_per_dir", p["files_per_dir"], 1, 1_000_000)
        p["file_size"] = format_size(parse_size(p["file_size"], "--file-size"))

    def sizes(self, job):
        avg = parse_size(self.params["file_size"])
        rng = self.rng("sizes", job)
        return [rng.randint(max(1, avg // 2), max(1, avg * 3 // 2)) for _ in range(self.params["files"])]

    def check_fits(self, fs_cfg):
        avg = parse_size(self.params["file_size"])
        bs = fs_cfg.block_size
        need = self.jobs * self.params["files"] * (-(-avg * 3 // 2 // bs) + 1) * bs
        if need > fs_cfg.fs_bytes * 0.8:
            raise JstallError(f"{self.jobs} × {self.params['files']:,} files of about {self.params['file_size']} "
                              "need up "
                              f"to {format_size(need >> 20 << 20)}, more than --fs-size {format_size(fs_cfg.fs_bytes)} "
                              f"holds; give --fs-size {format_size((need * 2 >> 20) + 16 << 20)} or fewer files")

    def _path(self, root, i):
        return os.path.join(root, f"d{i // self.params['files_per_dir']}", f"f{i}")

    def phases(self):
        p = self.params
        total = p["files"] * self.jobs

        def write(job, root, rng, tick):
            files = dirs = nbytes = 0
            for i, size in enumerate(self.sizes(job)):
                if i % p["files_per_dir"] == 0:
                    os.mkdir(os.path.dirname(self._path(root, i)))
                    dirs += 1
                path = self._path(root, i)
                fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
                try:
                    nbytes += _fill(fd, size, i)
                finally:
                    os.close(fd)
                os.chown(path, *self.OWNER)
                os.chmod(path, self.MODE)
                files += 1
                if i % 64 == 0:
                    tick(i)
            return {"ops": files, "files": files, "dirs": dirs, "bytes": nbytes}

        def rewrite(job, root, rng, tick):
            files = nbytes = 0
            for i, size in enumerate(self.sizes(job)):
                fd = os.open(self._path(root, i), os.O_WRONLY)
                try:
                    nbytes += _fill(fd, size, i + 1)
                finally:
                    os.close(fd)
                files += 1
                if i % 64 == 0:
                    tick(i)
            return {"ops": files, "files": files, "bytes": nbytes}

        def read(job, root, rng, tick):
            files, nbytes = _walk_files(root, _read_all, tick)
            return {"ops": files, "files": files, "bytes": nbytes}

        def stat(job, root, rng, tick):
            files, _ = _walk_files(root, lambda path: os.stat(path).st_size * 0, tick)
            return {"ops": files, "files": files}

        def unlink(job, root, rng, tick):
            files = dirs = 0
            for d in sorted(os.scandir(root), key=lambda e: e.name):
                for e in os.scandir(d.path):
                    os.unlink(e.path)
                    files += 1
                    if files % 64 == 0:
                        tick(files)
                os.rmdir(d.path)
                dirs += 1
            return {"ops": files, "files": files, "dirs": dirs}

        return [
            Phase("write", "files", total, write),
            Phase("rewrite", "files", total, rewrite, drop_caches=True),
            Phase("read", "files", total, read, drop_caches=True),
            Phase("stat", "files", total, stat, drop_caches=True),
            Phase("unlink", "files", total, unlink, removal=True, drop_caches=True),
        ]


# ---- command ------------------------------------------------------------------------------


#: words a shell would take as lists, not as a program's arguments (redirections and pipes:
#: any word that begins with one, SHELL_PREFIXES)
SHELL_OPERATORS = frozenset(("&&", "&", ";", ";;"))
SHELL_PREFIXES = (">", "<", "2>", "&>", "|")


class CommandPattern(Pattern):
    """Any external command, ``jobs`` copies at once, each with its own directory
    ``<mount>/job<j>`` as working directory and JSTALL_LAB_MOUNT, JSTALL_LAB_JOB,
    JSTALL_LAB_SEED in its environment. One phase, ``command``; its exit statuses are kept."""

    name = "command"
    defaults = {"command": None}
    options = {"command": ("str", "the program and its arguments, run in the mount point "
                                  "without a shell (for redirections or pipes: --command "
                                  "\"sh -c 'PROGRAM ARGS > FILE'\")")}

    def validate(self):
        cmd = self.params["command"]
        if not cmd:
            raise JstallError("the command pattern needs --command 'PROGRAM ARGS' "
                              "(e.g. --command 'fs_mark -d . -n 1000')")
        self.argv = command_argv(cmd, "--command")

    def phases(self):
        return [Phase("command", "runs", self.jobs, None, run_all=self._run_all)]

    def _run_all(self, mountpoint, roots):
        start, returned, statuses = self.run_command(mountpoint, roots)
        return start, returned, [{"ops": 1}] * len(statuses), {"exit_statuses": statuses}

    def lab_fields(self, phase_records):
        return {"command_exit_statuses": next(p["exit_statuses"] for p in phase_records if "exit_statuses" in p)}

    def run_command(self, mountpoint, roots):
        """Run the copies; return (start_ns, end_ns, exit statuses)."""
        procs = []
        start = time.monotonic_ns()
        try:
            for j, root in enumerate(roots):
                env = dict(os.environ, JSTALL_LAB_MOUNT=mountpoint, JSTALL_LAB_JOB=str(j),
                           JSTALL_LAB_SEED=str(self.seed))
                procs.append(subprocess.Popen(self.argv, cwd=root, env=env, stdin=subprocess.DEVNULL))
            statuses = [p.wait() for p in procs]
        except BaseException:
            _kill_unfinished(procs)
            raise
        return start, time.monotonic_ns(), statuses

    def describe(self):
        return {"command": shlex.join(self.argv)}


def _kill_unfinished(procs):
    """End (SIGKILL) and reap the programs a phase started that still run: its error or
    Ctrl-C leaves none behind."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


# ---- tenants -------------------------------------------------------------------------

#: a tenant's name: a cgroup's and a directory's
TENANT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: seconds the tenants still running get after SIGTERM (--until) before SIGKILL
TENANT_GRACE_S = 30.0


def command_argv(cmd, opt, fix_as=None):
    """The argv of a command given as one string (or a list), checked as the command pattern
    checks it: split like a shell's words, no shell operator, the program found. ``fix_as``:
    how the error's fix gives the command (default ``<opt> "sh -c '...'"``)."""
    try:
        argv = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
    except ValueError as e:
        raise JstallError(f"{opt}: {e}; quote it as one shell word list") from None
    shell = next((a for a in argv if a in SHELL_OPERATORS or a.startswith(SHELL_PREFIXES)), None)
    if shell is not None:
        text = cmd if isinstance(cmd, str) else " ".join(argv)
        inner = shlex.quote(text)
        fix = f'"sh -c {inner}"' if not set(inner) & set('"$`\\') else "\"sh -c '...'\""
        raise JstallError(f"{opt} runs the program without a shell, so '{shell}' would be one of its "
                          f"arguments; for redirections or pipes give {fix_as or opt + ' ' + fix}")
    if not argv or not shutil.which(argv[0]):
        raise JstallError(f"{opt}: program '{argv[0] if argv else ''}' not found; install it or give its full path")
    return argv


class TenantsPattern(Pattern):
    """Several commands at once, each a tenant in a cgroup v2 cgroup of its own
    (``<name>.scope``, tenantcg.py) with its own working directory ``<mount>/<name>``; a
    tenant named in ``own_filesystem`` works on a second scratch filesystem instead, made as
    the first on a paced device of its own and not recorded (the tenant remedy: the writer
    that fills a journal moved to a filesystem of its own). With ``until``, the run ends when
    that tenant exits: the others get SIGTERM (a tenant that loops for as long as another
    works), and their end by it counts as a clean exit. One phase, ``tenants``."""

    name = "tenants"
    defaults = {"tenant": None, "own_filesystem": None, "until": None}
    options = {
        "tenant": ("list", "NAME=COMMAND: a tenant, in its own cgroup NAME.scope and directory <mount>/NAME "
                           "(give it once per tenant; the command runs without a shell as --command does)"),
        "own_filesystem": ("str", "NAME,...: these tenants work on a second filesystem made like the first, on a "
                                  "paced device of its own (not recorded)"),
        "until": ("str", "NAME: end the run when this tenant exits; the others get SIGTERM then"),
    }

    def validate(self):
        given = self.params["tenant"] or []
        if isinstance(given, str):
            given = [given]
        if not given:
            raise JstallError("the tenants pattern needs --tenant NAME=COMMAND, once per tenant (e.g. --tenant "
                              "'db=sqlite3 x.db ...' --tenant 'storm=fs_mark -d . -n 1000')")
        self.tenants = {}
        for t in given:
            name, eq, cmd = str(t).partition("=")
            name = name.strip()
            if not eq or not TENANT_NAME.match(name):
                raise JstallError(f"--tenant {t}: give NAME=COMMAND, NAME of letters, digits, '.', '_' or '-' "
                                  "(e.g. --tenant 'db=sqlite3 x.db')")
            if name in self.tenants:
                raise JstallError(f"--tenant {name}: given twice; give each tenant one name")
            self.tenants[name] = command_argv(cmd, f"--tenant {name}", f"--tenant '{name}=sh -c \"...\"'")
        own = self.params["own_filesystem"] or ""
        # tenants on a filesystem of their own (the lab makes it: lab.run_lab)
        self.own_filesystems = [n.strip() for n in (own.split(",") if isinstance(own, str) else own) if n.strip()]
        until = self.params["until"]
        for opt, n in [("--own-filesystem", n) for n in self.own_filesystems] + ([("--until", until)] if until else []):
            if n not in self.tenants:
                raise JstallError(f"{opt} {n}: no tenant of that name; the tenants are {', '.join(self.tenants)}")
        if self.jobs != 1:
            raise JstallError(f"--jobs {self.jobs}: the tenants pattern runs each tenant once; give more tenants")
        tenantcg.require()   # before anything is made
        self.run_dir = self.own_mount = None

    def setup(self, fs, own_fs=None):
        """The scratch filesystems, before the phases: the run's (its run directory names the
        cgroups) and the second one for ``own_filesystem`` tenants."""
        self.run_dir = fs.run_dir
        self.own_mount = own_fs.mountpoint if own_fs is not None else None

    def roots(self, mountpoint):
        """The directories of the tenants on the lab's filesystem, ``<mount>/<name>``."""
        return [os.path.join(mountpoint, n) for n in self.tenants if n not in self.own_filesystems]

    def phases(self):
        return [Phase("tenants", "runs", 1, None, run_all=self._run_all)]

    def _run_all(self, mountpoint, roots):
        cgs = tenantcg.make(self.run_dir, list(self.tenants))
        procs, info, ended = {}, {}, set()
        start = time.monotonic_ns()
        try:
            for name, argv in self.tenants.items():
                base = self.own_mount if name in self.own_filesystems else mountpoint
                cwd = os.path.join(base, name)
                os.makedirs(cwd, exist_ok=True)
                env = dict(os.environ, JSTALL_LAB_MOUNT=base, JSTALL_LAB_TENANT=name, JSTALL_LAB_SEED=str(self.seed))
                procs[name] = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                               preexec_fn=functools.partial(tenantcg.enter, cgs[name]))
                info[name] = {"cgroup": f"{name}.scope", "own_filesystem": name in self.own_filesystems,
                              "start_ns": time.monotonic_ns()}
            until = self.params["until"]
            if until:
                procs[until].wait()
                for name, p in procs.items():
                    if p.poll() is None:
                        p.terminate()
                        ended.add(name)
                deadline = time.monotonic() + TENANT_GRACE_S
                for p in procs.values():
                    try:
                        p.wait(timeout=max(deadline - time.monotonic(), 0.1))
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
            for name, p in procs.items():
                p.wait()
                clean = name in ended and p.returncode == -signal.SIGTERM
                info[name].update(exit_status=0 if clean else p.returncode, ended_by_lab=name in ended)
        except BaseException:
            _kill_unfinished(procs.values())
            raise
        # the cgroups stay until the scratch filesystem goes (cleanup.undo_run): the recorder
        # reads their paths when it stops
        returned = time.monotonic_ns()
        statuses = [info[n]["exit_status"] for n in self.tenants]
        return start, returned, [{"ops": 1}], {"exit_statuses": statuses, "tenants": info}

    def lab_fields(self, phase_records):
        rec = next(p for p in phase_records if "tenants" in p)
        return {"command_exit_statuses": rec["exit_statuses"], "tenants": rec["tenants"]}

    def describe(self):
        return {"tenants": {n: shlex.join(a) for n, a in self.tenants.items()}, "own_filesystem": self.own_filesystems,
                "until": self.params["until"]}


PATTERNS = {c.name: c for c in (XattrPattern, FdtreePattern, SmallfilePattern, CommandPattern, TenantsPattern)}


def make_pattern(name, params, jobs=1, seed=1):
    if name not in PATTERNS:
        raise JstallError(f"pattern '{name}' is unknown; choose one of {', '.join(PATTERNS)}")
    return PATTERNS[name](params, jobs=jobs, seed=seed)


def census(roots):
    """Walk the job directories: {'dirs', 'files', 'bytes' (file sizes), 'attrs', 'attr_bytes'
    (user.* attributes and their value sizes)}; the job roots themselves are not counted."""
    out = {"dirs": 0, "files": 0, "bytes": 0, "attrs": 0, "attr_bytes": 0}
    for root in roots:
        for top, dirs, files in os.walk(root):
            out["dirs"] += len(dirs)
            for f in files:
                path = os.path.join(top, f)
                out["files"] += 1
                out["bytes"] += os.lstat(path).st_size
                for name in os.listxattr(path, follow_symlinks=False):
                    if name.startswith("user."):
                        out["attrs"] += 1
                        out["attr_bytes"] += len(os.getxattr(path, name, follow_symlinks=False))
    return out
