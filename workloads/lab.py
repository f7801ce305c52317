"""`jstall lab run` as a library: a scratch ext4 or XFS, a recording, a pattern's timed phases.

    from jstall.workloads.lab import LabConfig, run_lab
    result = run_lab(LabConfig(fs=FsConfig(...), pattern="xattr", params={"files": 200}, output_dir="s1"))
    result.session_dir, result.lab      # the session (None with record=False), the "lab" metadata

Phases run in forked processes (``jobs`` at once). A phase is timed on CLOCK_MONOTONIC
(``time.monotonic_ns()``, the clock of the session's ``ts_ns``) from just before the first
fork to the moment its work is durable on the emulated device: after the last job is reaped
(``returned_ns``), the lab calls syncfs(2) on the scratch filesystem and then waits until no
request is in flight on its loop devices, upper and lower (``end_ns``). ``durable_s`` (also
``seconds``) and every rate use that end; ``returned_s`` is the time until the jobs returned.
A throttled device serves long after the calls return (ext4 and jbd2, or XFS and its log
worker, write metadata and the journal in the background), so timing to the return leaves most of the device's work out.
"""

import contextlib
import ctypes
import dataclasses
import json
import os
import signal
import sys
import threading
import time

from jstall import kinds, system
from jstall.errors import JstallError
from jstall.metadata import LAB_FILE, LabConfigRecord, LabDoc, PhaseRecord

from . import patterns
from jstall.devstats import DeviceSampler, served
from .fsconfig import FsConfig
from .scratchfs import ScratchFs


@dataclasses.dataclass
class LabConfig:
    """One lab run. ``min_ms``: the recorder's per-call threshold in milliseconds."""

    fs: FsConfig = dataclasses.field(default_factory=FsConfig)
    pattern: str = "xattr"
    params: dict = dataclasses.field(default_factory=dict)
    jobs: int = 1
    seed: int = 1
    record: bool = True
    min_ms: float = 1.0
    calls: tuple = None         # the recorder's traced calls (probes.syscalls.parse_calls); None: its default
    output_dir: str = None
    scratch_dir: str = None
    progress: bool = False
    census: bool = True
    extra: dict = None          # copied into the lab metadata (e.g. the sweep's run name)
    device_interval_s: float = 1.0  # sampling interval of the device_stats table


@dataclasses.dataclass
class LabResult:
    lab: dict
    session_dir: str = None
    slow_calls: int = None
    events_lost: dict = None

    @property
    def exit_status(self):
        st = self.lab.get("command_exit_statuses") or []
        return next((s for s in st if s), 0)


def prepare(cfg):
    """Validate everything before touching anything: return the pattern object."""
    cfg.fs.validate()
    pat = patterns.make_pattern(cfg.pattern, cfg.params, jobs=cfg.jobs, seed=cfg.seed)
    pat.check_fits(cfg.fs)
    if not isinstance(cfg.min_ms, (int, float)) or cfg.min_ms < 0:
        raise JstallError(f"--min-ms {cfg.min_ms}: give milliseconds ≥ 0")
    if cfg.output_dir:
        if os.path.exists(os.path.join(cfg.output_dir, "metadata.json")) or os.path.exists(
                os.path.join(cfg.output_dir, LAB_FILE)):
            raise JstallError(f"{cfg.output_dir} already holds a session; choose another -o")
        if os.path.exists(cfg.output_dir) and not os.path.isdir(cfg.output_dir):
            raise JstallError(f"-o {cfg.output_dir}: exists and is not a directory; choose another -o")
    return pat


class _Bar:
    """A one-line progress bar on a terminal (phase, done/total, rate, elapsed)."""

    def __init__(self, stream, enabled):
        self.stream, self.enabled = stream, enabled
        self._stop = threading.Event()

    def run(self, phase, total, progress, start):
        if not self.enabled:
            return None
        self._stop.clear()
        self._start = start

        def loop():
            while not self._stop.wait(0.25):
                self.draw(phase, total, progress.total(), start)

        t = threading.Thread(target=loop, daemon=True)
        t.start()
        return t

    def draw(self, phase, total, done, start, end=False):
        el = (time.monotonic_ns() - start) / 1e9
        frac = min(1.0, done / total) if total else 1.0
        width = 30
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        rate = done / el if el > 0 else 0.0
        line = f"\r{phase:<12} [{bar}] {done:>9,}/{total:<9,} {rate:>10,.0f}/s {el:7.1f} s"
        self.stream.write(line + ("\n" if end else ""))
        self.stream.flush()

    def finish(self, thread, phase, total, done):
        if thread is None:
            return
        self._stop.set()
        thread.join()
        self.draw(phase, total, done, self._start, end=True)


def _set_comm(name):
    """Name this process (its comm, 15 bytes) so recordings show which pattern job it is."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def _fork_phase(phase, pat, roots, progress):
    """Run a phase in len(roots) forked jobs; return (start_ns, end_ns, wall start/end, [counts])."""
    progress.reset()
    pids, pipes = [], []
    wall0 = time.time()
    start = time.monotonic_ns()
    try:
        for j, root in enumerate(roots):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the job: never returns into the lab's own code
                code = 1
                try:
                    # Ctrl-C and SIGTERM end a job at once (the lab reaps it and cleans up); a
                    # signal the lab was started ignoring (nohup, a background job) stays ignored.
                    for sig in (signal.SIGINT, signal.SIGTERM):
                        if signal.getsignal(sig) is not signal.SIG_IGN:
                            signal.signal(sig, signal.SIG_DFL)
                    _set_comm(f"lab-{pat.name}")
                    os.close(r)
                    rng = pat.rng(phase.name, j)
                    res = phase.run(j, root, rng, lambda n, j=j: progress.set(j, n))
                    progress.set(j, res.get("ops", 0))
                    os.write(w, json.dumps(res).encode())
                    code = 0
                except BaseException as e:  # noqa: BLE001 -- reported to the parent
                    try:
                        os.write(w, json.dumps({"error": f"{type(e).__name__}: {e}"}).encode())
                    except BaseException:  # noqa: BLE001
                        pass
                finally:
                    os._exit(code)
            os.close(w)
            pids.append(pid)
            pipes.append(r)
        statuses = [os.waitpid(pid, 0)[1] for pid in pids]
        end = time.monotonic_ns()
        wall1 = time.time()
    except BaseException:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in pids:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        for r in pipes:
            os.close(r)
        raise
    texts = []
    for r in pipes:
        with os.fdopen(r, "rb") as f:
            texts.append(f.read())
    # A job ended by Ctrl-C or SIGTERM (sent to the whole process group, as a terminal does)
    # means the run was interrupted, not that the pattern failed.
    for st in statuses:
        if os.WIFSIGNALED(st) and os.WTERMSIG(st) in (signal.SIGINT, signal.SIGTERM):
            raise KeyboardInterrupt(f"a {pat.name} job was ended by {signal.Signals(os.WTERMSIG(st)).name}")
    results = []
    for j, (text, st) in enumerate(zip(texts, statuses)):
        try:
            res = json.loads(text) if text else {"error": _status_text(st)}
        except ValueError:
            res = {"error": _status_text(st)}
        if "error" in res:
            hint = " (the filesystem is full: give a larger --fs-size)" if "No space left" in res["error"] else ""
            raise JstallError(f"{pat.name} phase {phase.name}, job {j}: {res['error']}{hint}")
        results.append(res)
    return start, end, wall0, wall1, results


def _status_text(status):
    """'killed by SIGKILL' or 'exited with status N' for a waitpid status."""
    if os.WIFSIGNALED(status):
        try:
            name = signal.Signals(os.WTERMSIG(status)).name
        except ValueError:
            name = f"signal {os.WTERMSIG(status)}"
        return f"killed by {name}" + (" (out of memory?)" if os.WTERMSIG(status) == signal.SIGKILL else "")
    return f"exited with status {os.waitstatus_to_exitcode(status)} without reporting its counts"


def make_durable(fs):
    """syncfs(2) the scratch filesystem, then wait until its devices have no request in
    flight; return (monotonic ns, wall time) at that moment."""
    fs.sync()
    fs.wait_idle()
    return time.monotonic_ns(), time.time()


def served_by_role(sampler, before):
    """{role: what the lab's emulated device of that role served since ``before``}."""
    d = served(before, sampler.snapshot())
    return {role: d[dev] for role, dev, _, _ in sampler.devices if dev in d}


def _phase_record(phase, start, returned, end, wall0, wall1, counts, device=None):
    """The phase's entry in the lab metadata (jstall.metadata.PhaseRecord, docs/lab.md):
    ``returned`` when the jobs returned, ``end`` when their work was durable (both monotonic ns)."""
    return PhaseRecord.measured(phase.name, phase.unit, start, returned, end, wall0, wall1, counts, device)


def _run_phase(cfg, lab, pat, phase, fs, roots, sampler, bar, progress, before_phase):
    """One phase of run_lab: its census when it removes files first, its jobs, then its work
    made durable; its record (with what the devices served) appended to ``lab.phases``."""
    if phase.removal and lab.census is None and cfg.census:
        lab.census = {**patterns.census(roots), "before_phase": phase.name}
    if phase.drop_caches:
        fs.drop_caches()
    if before_phase:
        before_phase(phase.name, fs)
    before = sampler.snapshot()
    extra = {}
    if phase.run_all is not None:  # the pattern runs its jobs itself (e.g. a command)
        w0 = time.time()
        start, returned, counts, extra = phase.run_all(fs.mountpoint, roots)
        end, w1 = make_durable(fs)
    else:
        t = bar.run(phase.name, phase.total, progress, time.monotonic_ns())
        try:
            start, returned, w0, _, counts = _fork_phase(phase, pat, roots, progress)
            end, w1 = make_durable(fs)
        finally:
            bar.finish(t, phase.name, phase.total, progress.total())
    record = _phase_record(phase, start, returned, end, w0, w1, counts,
                            served_by_role(sampler, before))
    record.extra.update(extra)
    lab.phases.append(record)
    lab.extra.update(pat.lab_fields([p.to_dict() for p in lab.phases]))


def _write_run(cfg, lab, result, rec, sampler, status):
    """The end of run_lab, whatever the run's ``status``: the device sampler stopped, the
    session written (the lab metadata in it, or in lab.json without a recording) and
    ``result`` filled."""
    if sampler is not None:
        sampler.stop()
        lab.device_served = sampler.summary()
        lab.device_interval_s = cfg.device_interval_s
    result.lab = lab.to_dict()
    if rec is not None:
        if sampler is not None:
            sampler.write(rec.output_dir)  # before the recorder's metadata.json
        result.session_dir = rec.stop(extra_metadata={"lab": result.lab},
                                      status="complete" if status == "complete" else "interrupted")
        result.slow_calls = rec.rows["calls"]
        result.events_lost = rec.metadata.get("events_lost")
    else:
        if sampler is not None:  # no session to hold the table: the lab metadata does
            lab.device_stats = sampler.rows
            result.lab = lab.to_dict()
    if rec is None and cfg.output_dir:
        os.makedirs(cfg.output_dir, exist_ok=True)
        with open(os.path.join(cfg.output_dir, LAB_FILE), "w") as f:
            json.dump(result.lab, f, indent=2, sort_keys=True)
        result.session_dir = None


def run_lab(cfg, before_phase=None, console=None, out=None):
    """Run one lab run (see the module docstring). ``before_phase(name, fs)`` is called before
    each phase, untimed (tests walk the filesystem there). Prints a progress bar (with
    cfg.progress) to ``console`` and the summary to ``out``."""
    console = console or sys.stderr
    pat = prepare(cfg)
    lab = LabDoc(status="running", pattern=pat.name, params=pat.describe(), jobs=cfg.jobs, seed=cfg.seed,
                 config=LabConfigRecord(cfg.fs.as_dict(), pat.name, cfg.jobs, cfg.seed, pat.describe()).to_dict(),
                 extra=dict(cfg.extra or {}))
    rec = sampler = None
    result = LabResult(lab=lab.to_dict())
    bar = _Bar(console, cfg.progress)
    with ScratchFs(cfg.fs, scratch_dir=cfg.scratch_dir) as fs, contextlib.ExitStack() as more:
        # a second filesystem, made as the first on a paced device of its own, for the
        # tenants that work apart (not recorded: the recorder watches the first one's device)
        own_fs = more.enter_context(ScratchFs(cfg.fs, scratch_dir=cfg.scratch_dir)) if pat.own_filesystems else None
        pat.setup(fs, own_fs)
        roots = pat.roots(fs.mountpoint)
        for r in roots:
            os.mkdir(r)
        fs.sync()
        # the geometry read back (dumpe2fs for ext4, xfs_db for XFS), under the lab's key "dumpe2fs"
        lab.dumpe2fs = {k: v for k, v in fs.geometry().items() if k not in ("raw", "journal_raw")}
        lab.filesystem = fs.describe()
        if cfg.record:
            # bcc and pyarrow load only for a recorded run (--no-record runs without them)
            from jstall.probes.recorder import Recorder, RecordOptions

            # the lab samples its emulated devices itself (the lower loop devices)
            rec = Recorder(RecordOptions(output_dir=cfg.output_dir, devices=[fs.dev], min_ms=cfg.min_ms, quiet=True,
                                         calls=cfg.calls, device_interval_s=0))
            rec.start()
        progress = patterns.Progress(cfg.jobs)
        status = "interrupted"
        try:
            sampler = DeviceSampler(fs.emulated_devices(), cfg.device_interval_s).start()
            lab.start = {"monotonic_ns": time.monotonic_ns(), "wall": time.time()}
            for phase in pat.phases():
                _run_phase(cfg, lab, pat, phase, fs, roots, sampler, bar, progress, before_phase)
            if lab.census is None and cfg.census:
                lab.census = {**patterns.census(roots), "before_phase": None}
            lab.end = {"monotonic_ns": time.monotonic_ns(), "wall": time.time()}
            status = "complete"
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (scratchfs.Terminated)
            status = "interrupted"
            raise
        except BaseException as e:
            lab.error = str(e) if isinstance(e, JstallError) else f"{type(e).__name__}: {e}"
            status = "failed"
            raise
        finally:
            lab.status = status
            if lab.end is None:
                lab.end = {"monotonic_ns": time.monotonic_ns(), "wall": time.time()}
            lab.seconds, lab.returned_seconds = lab.totals()
            # A second Ctrl-C while the session is written waits until it is complete.
            with system.signals_deferred():
                _write_run(cfg, lab, result, rec, sampler, status)
    if out is not None:
        print_summary(result, out)
    return result


def _num(v, fmt="{:,.1f}"):
    return "-" if v is None else fmt.format(v)


def print_summary(result, out):
    lab = result.lab
    c, sb = lab["config"], lab.get("dumpe2fs") or {}
    fs_type = c.get("fs_type") or "ext4"
    kind = kinds.of_fs_type(fs_type)
    word = kind.noun
    jdesc = (f"external {word} {sb.get('journal_blocks')} blocks" if sb.get("external_journal")
             else f"{word} {sb.get('journal_blocks')} blocks")
    limits = lab.get("filesystem", {}).get("throttles") or {}
    lim = "; ".join(f"{d} " + ",".join(f"{k}={v}" for k, v in L.items() if v) for d, L in limits.items()) or "none"
    print(f"lab {lab['pattern']}: {', '.join(f'{k}={v}' for k, v in lab['params'].items())}; jobs={lab['jobs']} "
          f"seed={lab['seed']}", file=out)
    if kind is kinds.XFS:
        given = (("logbsize", c.get("log_buffer_size")), ("logbufs", c.get("log_buffers")))
        bufs = ", ".join(f"{k}={v}" for k, v in given if v is not None) or "default log buffers"
        mode = f"{sb.get('ag_count')} allocation groups, {bufs}"
    else:
        mode = f"data={c['data_mode']}{', fast_commit' if sb.get('fast_commit') else ''}"
    print(f"{fs_type} {c['fs_size']} on {lab.get('filesystem', {}).get('device')}: {sb.get('block_size')}-byte blocks, "
          f"{sb.get('inode_size')}-byte inodes, {jdesc} ({(sb.get('journal_bytes') or 0) >> 20} MiB), "
          f"{mode}; throttle ({lab.get('filesystem', {}).get('throttle_mode', 'direct')}, on the lower device): {lim}",
          file=out)
    print(f"{'PHASE':<12} {'DURABLE_S':>9} {'RETURNED_S':>10} {'OPS':>10} {'UNIT':<9} {'RATE/s':>11} {'KiB/s':>10} "
          f"{'DEV_WRITES':>10} {'DEV_READS':>9}", file=out)
    for p in lab["phases"]:
        rate = None if p["unit"] == "runs" else p.get("rate_per_s")  # a command's runs/s says nothing
        dv = p.get("device") or {}
        w = sum(d["write_ios"] + d["write_merges"] for d in dv.values()) if dv else None
        r = sum(d["read_ios"] + d["read_merges"] for d in dv.values()) if dv else None
        print(f"{p['name']:<12} {p['seconds']:>9.3f} {p.get('returned_s', p['seconds']):>10.3f} {p['ops']:>10,} "
              f"{p['unit']:<9} {_num(rate):>11} {_num(p.get('kib_per_s')):>10} {_num(w, '{:,}'):>10} "
              f"{_num(r, '{:,}'):>9}", file=out)
    print("(durable: until syncfs returned and the emulated device served every request; rates use it. "
          "DEV_*: requests the emulated devices served)", file=out)
    if lab.get("census"):
        cs = lab["census"]
        when = "before removal" if any(p["name"] == cs.get("before_phase") for p in lab["phases"]) else "at the end"
        print(f"census {when}: {cs['dirs']:,} dirs, {cs['files']:,} files, {cs['bytes']:,} bytes, "
              f"{cs['attrs']:,} attributes", file=out)
    if result.session_dir:
        lost = sum((result.events_lost or {}).values())
        print(f"session {result.session_dir}: {result.slow_calls:,} calls ≥ threshold, {lost} events lost "
              f"(explain it: jstall analyze {result.session_dir})", file=out)
    if lab["status"] != "complete":
        print(f"status: {lab['status']}" + (f" ({lab['error']})" if lab.get("error") else ""), file=out)
