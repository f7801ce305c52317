"""The two BPF programs, recorder.bpf.c and monitor.bpf.c, built from the shared parts in
probes/*.bpf.h: what the inliner gives bcc, what an install carries, and (on this kernel,
as root) that each compiles with bcc and holds the programs and maps its owner attaches
and reads."""

import fnmatch
import glob
import os
import re
import tomllib

import pytest

from jstall.probes import probeset

PROBES = os.path.dirname(probeset.BPF_SOURCE)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOPS = (probeset.BPF_SOURCE, probeset.MONITOR_BPF_SOURCE)
INCLUDE = re.compile(r'^#include "(\w+\.bpf\.h)"', re.M)


def includes(path):
    with open(path) as f:
        return INCLUDE.findall(f.read())


def test_each_part_is_put_in_place_once_and_no_local_include_is_left():
    for top in TOPS:
        names = includes(top)
        assert names[0] == "common.bpf.h" and len(set(names)) == len(names)
        text = probeset.bpf_text(top)
        assert not INCLUDE.search(text), f"{os.path.basename(top)}: an include left for bcc"
        for name in names:
            with open(os.path.join(PROBES, name)) as f:
                assert text.count(f.read()) == 1, name


def test_every_header_is_a_part_of_a_program_and_installed():
    headers = {os.path.basename(p) for p in glob.glob(os.path.join(PROBES, "*.bpf.h"))}
    used = {n for top in TOPS for n in includes(top)}
    assert headers == used
    # the recorder's parts are the monitor's, but for the process tree and the files'
    # attributes (read from the syscalls' arguments, which the monitor does not trace)
    recorder, monitor = (set(includes(top)) for top in TOPS)
    assert recorder - monitor == {"forks.bpf.h", "xattrs.bpf.h"} and monitor <= recorder
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        patterns = tomllib.load(f)["tool"]["setuptools"]["package-data"]["jstall.probes"]
    for name in headers | {os.path.basename(t) for t in TOPS} | {"jstall_events.h"}:
        assert any(fnmatch.fnmatch(name, p) for p in patterns), f"{name} is not installed"


# ---- compiled by bcc on this kernel ----------------------------------------------------

def functions(b, names):
    """The names among ``names`` the compiled program holds."""
    held = set()
    for n in names:
        try:
            b.dump_func(n.encode())
        except Exception:   # bcc: "Unknown program"
            continue
        held.add(n)
    return held


def twins(names):
    return {f"{kind}_{n}" for n in names for kind in ("rtp", "btf")}


JBD2 = set(probeset.JBD2_RAW_TRACEPOINTS) - {"jbd2_lock_buffer_stall"}
HANDLE_PROGRAMS = {prog for plan in probeset.HANDLE_START_PLANS for _, prog in plan}
SHARED_MAPS = ("calls_rb", "offcpu_rb", "jbd2_rb", "counters", "traced_nr", "devices", "tgids",
               "used_devs", "stacks", "call_stats", "call_slots", "writers")
SYSCALL_ENTRIES = {"sc_enter", "sc_enter_at", "sc_enter_xattr", "sc_exit", "on_sys_enter", "on_sys_exit",
                   "fentry_call", "fexit_call"}
MONITOR_OPS = {"mon_ext4_journal_start_sb", "mon_ext4_journal_start_inode",
               "rtp_ext4_sync_file_enter", "rtp_ext4_sync_file_exit"}


@pytest.fixture
def compiled():
    made = []

    def compile_(probes):
        b = probes._compile()
        made.append(b)
        return b

    yield compile_
    for b in made:
        b.cleanup()


XFS = {f"tracepoint__xfs__{tp}"
       for tp in probeset.XFS_TRACEPOINTS + probeset.XFS_WRITER_TRACEPOINTS}
#: untyped programs of both owners: a stall event with no pointer, a handle wait's end, writers
RAW_ONLY = {"rtp_jbd2_lock_buffer_stall", "rtp_jbd2_handle_start", "rtp_jbd2_handle_stats"}
#: the recorder's alone: blocks going home, the process tree
RECORDER_ONLY = {"rtp_block_bio_queue", "rtp_sched_process_fork"}


def everything(b):
    """Every program either owner may load or attach that the compiled program holds."""
    return functions(b, SYSCALL_ENTRIES | MONITOR_OPS | XFS | RAW_ONLY | RECORDER_ONLY
                     | twins(JBD2 | HANDLE_PROGRAMS | {"sched_switch", "sched_waking"}))


def xfs(p):
    """The XFS programs bcc attached as it loaded them, when an XFS is traced."""
    return XFS if p.xfs_log else set()


@pytest.mark.kernel
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
@pytest.mark.parametrize("attach, entries", [
    ("syscalls", {"sc_enter", "sc_enter_at", "sc_enter_xattr", "sc_exit"}), ("raw", {"on_sys_enter", "on_sys_exit"})])
def test_the_recorder_compiles_with_what_record_attaches(compiled, attach, entries):
    p = probeset.ProbeSet(probeset.ProbeOptions(quiet=True, attach=attach))
    assert p.source == probeset.BPF_SOURCE
    b = compiled(p)
    expected = (entries | twins(JBD2 | HANDLE_PROGRAMS | {"sched_switch", "sched_waking"})
                | RAW_ONLY | RECORDER_ONLY | xfs(p))
    assert everything(b) == expected
    for name in SHARED_MAPS + ("home_writes", "offstart", "offstart_pending", "xattr_files"):
        assert b[name.encode()] is not None
    with pytest.raises(KeyError):
        b[b"mon_journals"]


@pytest.mark.kernel
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_the_monitor_compiles_with_what_it_attaches(compiled):
    from jstall.monitor.tracer import MONITOR_RAW_TRACEPOINTS, MonitorOptions, MonitorProbes

    p = MonitorProbes(MonitorOptions())
    assert p.source == probeset.MONITOR_BPF_SOURCE
    b = compiled(p)
    # its operations begin at the handle start and fsync's tracepoints, end at the others;
    # no syscall entry, no process tree, no waker, no blocks going home
    assert {n for _, n in MONITOR_RAW_TRACEPOINTS} == {"jbd2_handle_start", "ext4_sync_file_enter",
                                                      "ext4_sync_file_exit"}
    expected = MONITOR_OPS | twins(JBD2 | HANDLE_PROGRAMS | {"sched_switch"}) | RAW_ONLY | xfs(p)
    assert everything(b) == expected
    for name in SHARED_MAPS + ("mon_journals", "offstart"):
        assert b[name.encode()] is not None
    for name in ("home_writes", "xattr_files"):
        with pytest.raises(KeyError):
            b[name.encode()]


@pytest.mark.kernel
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_the_monitor_with_syscalls_compiles_the_recorder(compiled):
    from jstall.monitor.tracer import MonitorOptions, MonitorProbes

    p = MonitorProbes(MonitorOptions(syscalls=True))
    assert p.source == probeset.BPF_SOURCE
    b = compiled(p)
    held = everything(b)
    # the calls' entries as the kernel takes them: fentry on a stock kernel, else the syscall
    # tracepoints (this kernel's fentry is refused)
    entries = {"fentry_call", "fexit_call"} if p.attach_mode == "fentry" else {"sc_enter", "sc_exit"}
    assert entries | {"rtp_jbd2_handle_start"} <= held and not held & MONITOR_OPS, (p.attach_mode, held)


#: the -D switches that choose what a session does (not what the kernel has): bcc compiles
#: the program at each start, so they are its run-time configuration; each is compiled in
#: both of its modes here, so that no mode is left that no build compiles
BEHAVIOUR_SWITCHES = ("FILTER_TREE", "FILTER_DEV", "FILTER_CGROUP", "HANDLE_WAITS", "HOME_WRITES", "WAIT_CHAINS",
                      "WRITERS", "COMMIT_EVENTS", "XATTR_FILES")


@pytest.mark.kernel
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
@pytest.mark.parametrize("switch", BEHAVIOUR_SWITCHES)
def test_each_behaviour_switch_compiles_in_its_other_mode(compiled, switch):
    class Flipped(probeset.ProbeSet):
        def _cflags(self):
            flags = super()._cflags()
            (at,) = [i for i, f in enumerate(flags) if f.startswith(f"-D{switch}=")]
            was = flags[at].split("=", 1)[1]
            flags[at] = f"-D{switch}={0 if was != '0' else 1}"
            self.flipped = (was, flags[at])
            return flags

    p = Flipped(probeset.ProbeOptions(quiet=True, attach="syscalls"))
    b = compiled(p)
    # it compiled, and the calls' entries and exits are there in either mode
    assert {"sc_enter", "sc_exit"} <= everything(b), (switch, p.flipped)


@pytest.mark.kernel
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_a_programs_counters_read_as_bpftool_reads_them():
    """bpfsys.prog_info (what record's skipped runs and the monitor's BPF time read) against
    bpftool's own reading of the same program: its id, its runs with statistics on (between
    two readings of ours) and the runs the kernel skipped (none here: no BPF program runs
    inside another's on this kernel's syscall tracepoint)."""
    import json
    import subprocess

    from jstall.probes import bpfsys, host

    os.environ.update(host.kernel_headers_env())   # (the generic-header fallback, as record's)
    from bcc import BPF

    b = BPF(text=b'TRACEPOINT_PROBE(syscalls, sys_enter_getppid) { return 0; }')
    stats = bpfsys.enable_stats()
    try:
        assert stats is not None
        fd = b.funcs[b"tracepoint__syscalls__sys_enter_getppid"].fd
        for _ in range(1000):
            os.getppid()
        before = bpfsys.prog_info(fd)
        shown = json.loads(subprocess.run(["bpftool", "-j", "prog", "show", "id", str(before["id"])],
                                          capture_output=True, text=True, check=True).stdout)
        after = bpfsys.prog_info(fd)
    finally:
        os.close(stats)
        b.cleanup()
    assert shown["id"] == before["id"] == after["id"] and before["run_cnt"] >= 1000
    assert before["run_cnt"] <= shown["run_cnt"] <= after["run_cnt"]
    assert before["run_time_ns"] <= shown["run_time_ns"] <= after["run_time_ns"]
    assert shown.get("recursion_misses", 0) == before["recursion_misses"] == 0
