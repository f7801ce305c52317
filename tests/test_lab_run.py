"""`jstall lab run` on real loop devices: each pattern does exactly the work it reports
(checked by walking the filesystem before its removal phases), throttles take effect and
are removed, SIGINT and `lab cleanup` leave nothing behind. Tiny configurations."""

import json
import os
import signal
import stat
import subprocess
import sys
import time

import pandas as pd
import pytest

from conftest import leftovers, throttle_rules
from jstall.analyzer import load_session
from jstall.cli import build_parser
from jstall.workloads import lab_cmd, scratch, throttle
from jstall.workloads.lab import LabConfig, run_lab
from jstall.workloads.scratch import FsConfig

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]

JSTALL = os.path.join(os.path.dirname(sys.executable), "jstall")
TINY = dict(fs_size="32M", journal_size="4M", block_size=1024)


def walk(mountpoint):
    """Independent census of the job directories: dirs, files, bytes, user.* attributes."""
    out = {"dirs": 0, "files": 0, "bytes": 0, "attrs": 0, "values": [], "blocks": [], "owners": set(),
           "modes": set()}
    for job in sorted(os.listdir(mountpoint)):
        if not job.startswith("job"):
            continue
        for top, dirs, files in os.walk(os.path.join(mountpoint, job)):
            out["dirs"] += len(dirs)
            for name in files:
                path = os.path.join(top, name)
                st = os.lstat(path)
                out["files"] += 1
                out["bytes"] += st.st_size
                out["blocks"].append(st.st_blocks)
                out["owners"].add((st.st_uid, st.st_gid))
                out["modes"].add(stat.S_IMODE(st.st_mode))
                for a in os.listxattr(path):
                    if a.startswith("user."):
                        out["attrs"] += 1
                        out["values"].append(os.getxattr(path, a))
    return out


def phase(lab, name):
    (p,) = [p for p in lab["phases"] if p["name"] == name]
    return p


def cli_config(argv, scratch_dir, **kw):
    """The LabConfig `jstall lab run ARGV` builds (the command's own parsing)."""
    args = build_parser("lab").parse_args(["lab", "run", *argv])
    return lab_cmd.config_from(lab_cmd._values(args, sweep=False), args.pattern, scratch_dir=scratch_dir, **kw)


def read_back(fs):
    """dumpe2fs -h of the filesystem (and its journal device) and the /proc/mounts entry, read
    independently of the lab."""
    def dump(dev):
        text = subprocess.run(["dumpe2fs", "-h", dev], capture_output=True, text=True, check=True).stdout
        return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in text.splitlines()) if v}

    with open("/proc/mounts") as f:
        (opts,) = [line.split()[3].split(",") for line in f if line.split()[1] == fs.mountpoint]
    return dump(fs.device), dump(fs.journal_device) if fs.journal_device else None, opts


@pytest.mark.parametrize("argv, check", [
    (["--fs-size", "64M", "--journal-size", "8M", "--inode-size", "128", "--block-size", "1024",
      "--data-mode", "journal", "--commit-interval", "7", "--mount-options", "noatime,nodelalloc",
      "--mkfs-options=-L jstlab -O ^metadata_csum -N 4096", "--write-iops", "5000"], "internal"),
    (["--fs-size", "32M", "--journal-size", "6M", "--inode-size", "512", "--journal-device", "--fast-commit",
      "--data-mode", "writeback", "--no-barrier", "--journal-device-profile", "ssd", "--device-profile", "hdd",
      "--read-iops", "0"], "external"),
])
def test_cli_options_take_effect(scratch_dir, argv, check):
    """The options of `jstall lab run`, parsed as the command parses them, show in dumpe2fs
    and /proc/mounts (read here, independently), in the blkio rules, and the lab metadata
    holds the same values."""
    seen = {}

    def hook(name, fs):
        if not seen:
            seen["sb"], seen["jsb"], seen["opts"] = read_back(fs)
            # the rules sit on the lower loop devices, which serve every request
            seen["rules"] = {k: v for k, v in throttle_rules().items() if k[1] in (fs.lower_dev, fs.journal_lower_dev)}
            seen["fs"] = (fs.lower_dev, fs.journal_lower_dev, fs.journal_device, fs.journal_dev)

    cfg = cli_config(["xattr", *argv, "--files", "20", "--updates", "10", "--no-record"], scratch_dir, record=False)
    lab = run_lab(cfg, before_phase=hook).lab
    sb, jsb, opts = seen["sb"], seen["jsb"], seen["opts"]
    dev, jdev, jdevice, jupper = seen["fs"]
    feats = sb["Filesystem features"].split()
    if check == "internal":
        assert (sb["Block size"], sb["Inode size"], sb["Total journal blocks"]) == ("1024", "128", "8192")
        assert sb["Filesystem volume name"] == "jstlab" and "metadata_csum" not in feats
        assert int(sb["Inode count"]) == 4096 and jsb is None and "fast_commit" not in feats
        assert {"data=journal", "commit=7", "noatime", "nodelalloc"} <= set(opts)
        assert seen["rules"] == {("write_iops", dev): 5000}
        assert lab["dumpe2fs"]["journal_blocks"] == 8192 and not lab["dumpe2fs"]["external_journal"]
    else:
        assert (sb["Block size"], sb["Inode size"]) == ("4096", "512") and "fast_commit" in feats
        st = os.stat(jdevice)
        assert int(sb["Journal device"], 16) == os.major(st.st_rdev) << 8 | os.minor(st.st_rdev)
        assert "journal_dev" in jsb["Filesystem features"].split()
        assert int(jsb["Block count"]) * 4096 == (6 << 20) + 4096 + 256 * 4096  # superblock, fast-commit area
        assert jsb["Filesystem UUID"] == sb["Journal UUID"] and jsb["Journal users"] == sb["Filesystem UUID"]
        assert lab["dumpe2fs"]["journal_blocks"] == int(jsb["Block count"]) and lab["dumpe2fs"]["external_journal"]
        assert lab["dumpe2fs"]["fast_commit"] and lab["filesystem"]["journal_dev"] == jupper
        assert {"data=writeback", "nobarrier"} <= set(opts)
        hdd, ssd = throttle.PROFILES["hdd"], throttle.PROFILES["ssd"]
        assert seen["rules"] == {("write_iops", dev): hdd.write_iops, ("read_bps", dev): hdd.read_bps,
                                 ("write_bps", dev): hdd.write_bps,  # --read-iops 0: unlimited
                                 ("read_iops", jdev): ssd.read_iops, ("write_iops", jdev): ssd.write_iops,
                                 ("read_bps", jdev): ssd.read_bps, ("write_bps", jdev): ssd.write_bps}
    assert lab["dumpe2fs"]["inode_size"] == int(sb["Inode size"])
    assert lab["dumpe2fs"]["block_size"] == int(sb["Block size"])
    assert lab["filesystem"]["mount_options"].split(",") == opts
    assert lab["config"]["journal_device"] == (check == "external")
    assert not [k for k in throttle_rules() if k[1] in (dev, jdev)]  # removed afterwards


def test_xattr_does_the_work_it_reports(scratch_dir, tmp_path):
    seen = {}
    cfg = LabConfig(fs=FsConfig(inode_size=128, **TINY), pattern="xattr", jobs=2, seed=7, record=False,
                    params={"files": 301, "attrs": 3, "attr_size": 20, "updates": 500, "remove": True},
                    output_dir=str(tmp_path / "o"), scratch_dir=scratch_dir)
    res = run_lab(cfg, before_phase=lambda name, fs: seen.setdefault(name, walk(fs.mountpoint)))
    lab = res.lab
    assert lab["status"] == "complete" and [p["name"] for p in lab["phases"]] == ["create", "update", "remove"]
    before_remove = seen["remove"]
    assert (before_remove["files"], before_remove["attrs"], before_remove["dirs"]) == (301, 903, 0)
    assert all(len(v) == 20 for v in before_remove["values"])
    assert len(set(before_remove["values"])) == 903          # unique: no shared attribute blocks
    assert set(before_remove["blocks"]) == {2}               # one 1 KiB external attribute block per file
    create, update, remove = (phase(lab, n) for n in ("create", "update", "remove"))
    assert (create["ops"], create["files"], create["attrs"], create["bytes"]) == (301, 301, 903, 903 * 20)
    assert (update["ops"], update["attrs"], update["bytes"]) == (500, 500, 500 * 20)
    assert (remove["files"], remove["attrs"]) == (301, 903)
    assert sorted(create["per_job_ops"]) == [150, 151] and sum(update["per_job_ops"]) == 500
    census = lab["census"]
    assert (census["files"], census["attrs"], census["attr_bytes"]) == (301, 903, 903 * 20)
    for p in lab["phases"]:
        assert p["end_ns"] > p["start_ns"] and p["seconds"] == pytest.approx((p["end_ns"] - p["start_ns"]) / 1e9)
        assert p["rate_per_s"] == pytest.approx(p["ops"] / p["seconds"])
    assert seen["create"]["files"] == 0 and seen["update"]["files"] == 301
    assert json.load(open(tmp_path / "o" / "lab.json"))["phases"] == lab["phases"]


def test_xattr_is_deterministic_with_the_seed(scratch_dir, tmp_path):
    values = []
    for k in range(2):
        seen = {}
        cfg = LabConfig(fs=FsConfig(**TINY), pattern="xattr", seed=3, record=False,
                        params={"files": 20, "attrs": 1, "attr_size": 16, "updates": 30},
                        scratch_dir=scratch_dir)
        run_lab(cfg, before_phase=lambda name, fs: seen.setdefault(name, walk(fs.mountpoint)))
        values.append(sorted(seen["update"]["values"]))
    assert values[0] == values[1]


@pytest.mark.parametrize("shape, params, dirs, files", [
    ("shallow", {"levels": 1, "fanout": 6, "files_per_dir": 4, "file_size": "4K"}, 6, 24),
    ("deep", {"levels": 3, "fanout": 2, "files_per_dir": 3, "file_size": "5000"}, 14, 42),
])
def test_fdtree_does_the_work_it_reports(scratch_dir, shape, params, dirs, files):
    seen = {}
    cfg = LabConfig(fs=FsConfig(**TINY), pattern="fdtree", jobs=2, record=False,
                    params={"shape": shape, **params}, scratch_dir=scratch_dir)
    lab = run_lab(cfg, before_phase=lambda name, fs: seen.setdefault(name, walk(fs.mountpoint))).lab
    size = 4096 if params["file_size"] == "4K" else 5000
    w = seen["file_remove"]
    assert (w["dirs"], w["files"], w["bytes"]) == (2 * dirs, 2 * files, 2 * files * size)
    assert (seen["dir_remove"]["dirs"], seen["dir_remove"]["files"]) == (2 * dirs, 0)
    assert phase(lab, "dir_create")["dirs"] == phase(lab, "dir_remove")["dirs"] == 2 * dirs
    fc = phase(lab, "file_create")
    assert (fc["files"], fc["bytes"]) == (2 * files, 2 * files * size)
    assert fc["kib_per_s"] == pytest.approx(fc["bytes"] / 1024 / fc["seconds"])
    assert phase(lab, "file_remove")["files"] == 2 * files
    assert phase(lab, "dir_create")["dirs_per_s"] == pytest.approx(2 * dirs / phase(lab, "dir_create")["seconds"])
    assert lab["census"]["dirs"] == 2 * dirs and lab["census"]["files"] == 2 * files


def test_smallfile_does_the_work_it_reports(scratch_dir):
    seen = {}
    cfg = LabConfig(fs=FsConfig(**TINY), pattern="smallfile", jobs=2, record=False,
                    params={"files": 25, "file_size": "8K", "files_per_dir": 10}, scratch_dir=scratch_dir)
    lab = run_lab(cfg, before_phase=lambda name, fs: seen.setdefault(name, walk(fs.mountpoint))).lab
    assert [p["name"] for p in lab["phases"]] == ["write", "rewrite", "read", "stat", "unlink"]
    w = seen["unlink"]
    write = phase(lab, "write")
    assert (w["files"], w["dirs"]) == (50, 6) and (write["files"], write["dirs"]) == (50, 6)
    assert w["bytes"] == write["bytes"] == phase(lab, "read")["bytes"] == phase(lab, "rewrite")["bytes"]
    assert 50 * 4096 <= w["bytes"] <= 50 * 12288
    assert w["owners"] == {(65534, 65534)} and w["modes"] == {0o640}
    assert phase(lab, "stat")["files"] == phase(lab, "unlink")["files"] == 50
    assert phase(lab, "unlink")["dirs"] == 6
    census = lab["census"]
    assert (census["dirs"], census["files"], census["bytes"], census["before_phase"]) == (6, 50, w["bytes"], "unlink")


RECORDED = {
    "xattr": ({"files": 120, "attrs": 2, "attr_size": 16, "updates": 200, "remove": True},
              lambda ph: {"create": {"openat": ph["create"]["files"], "setxattr": ph["create"]["attrs"]},
                          "update": {"setxattr": ph["update"]["attrs"]},
                          "remove": {"removexattr": ph["remove"]["attrs"], "unlink": ph["remove"]["files"]}}),
    "fdtree": ({"shape": "deep", "levels": 3, "fanout": 3, "files_per_dir": 2, "file_size": "1K"},
               lambda ph: {"dir_create": {"mkdir": ph["dir_create"]["dirs"]},
                           "file_create": {"openat": ph["file_create"]["files"]},
                           "file_remove": {"unlink": ph["file_remove"]["files"]},
                           "dir_remove": {"rmdir": ph["dir_remove"]["dirs"]}}),
    "smallfile": ({"files": 40, "file_size": "2K", "files_per_dir": 15},
                  lambda ph: {"write": {"mkdir": ph["write"]["dirs"], "openat": ph["write"]["files"]},
                              "unlink": {"unlink": ph["unlink"]["files"], "rmdir": ph["unlink"]["dirs"]}}),
}


@pytest.mark.parametrize("pattern", sorted(RECORDED))
def test_recording_shows_exactly_each_phases_work(scratch_dir, tmp_path, pattern):
    """Recorded with every call kept (--min-ms 0): the calls that changed the filesystem
    inside each phase's [start_ns, end_ns) are the phase's own work, made by the pattern's
    jobs under the name lab-PATTERN, and their counts are the counts the phase reports;
    no job made a call outside its phases."""
    params, expected = RECORDED[pattern]
    cfg = LabConfig(fs=FsConfig(**TINY), pattern=pattern, jobs=2, params=params, min_ms=0,
                    output_dir=str(tmp_path / "s"), scratch_dir=scratch_dir)
    res = run_lab(cfg)
    s = load_session(res.session_dir)
    assert s.meta["events_lost"] == {"calls": 0, "offcpu": 0, "jbd2": 0, "home_writes": 0, "writers": 0, "skipped": 0}
    lab = s.meta["lab"]
    assert lab == json.loads(json.dumps(res.lab))
    # the syscalls (journal handle waits outside them, journal_start, are any task's)
    calls = s.calls[s.calls.syscall != "journal_start"]
    dev = lab["filesystem"]["dev"]
    assert set(calls.dev) == {dev} and (calls.ret >= 0).all()
    assert set(calls.comm) == {f"lab-{pattern}"}
    phases = {p["name"]: p for p in lab["phases"]}
    inside = pd.Series(False, index=calls.index)
    for name, want in expected(phases).items():
        p = phases[name]
        mine = (calls.ts_ns >= p["start_ns"]) & (calls.ts_ns < p["end_ns"])
        inside |= mine
        got = calls[mine].syscall.value_counts().to_dict()
        assert {k: got.get(k, 0) for k in want} == want, (name, got)
        assert calls[mine].pid.nunique() == 2                # both jobs, forked for this phase
    for name in set(phases) - set(expected(phases)):
        p = phases[name]
        inside |= (calls.ts_ns >= p["start_ns"]) & (calls.ts_ns < p["end_ns"])
    assert inside.all()                                      # every call inside some phase
    totals = s.call_totals[s.call_totals.syscall != "journal_start"].groupby("syscall")["count"].sum().to_dict()
    assert totals == calls.syscall.value_counts().to_dict()  # the exact totals agree


def test_command_runs_in_each_jobs_directory(scratch_dir):
    cmd = "sh -c 'mkdir sub && head -c 1000 /dev/zero > sub/f$JSTALL_LAB_JOB && exit 3'"
    cfg = LabConfig(fs=FsConfig(**TINY), pattern="command", jobs=2, record=False,
                    params={"command": cmd}, scratch_dir=scratch_dir)
    res = run_lab(cfg)
    assert res.lab["command_exit_statuses"] == [3, 3] and res.exit_status == 3
    assert res.lab["census"]["dirs"] == 2 and res.lab["census"]["files"] == 2 and res.lab["census"]["bytes"] == 2000


def test_command_via_the_cli_prints_json_and_exits_1_when_it_fails(scratch_dir):
    p = subprocess.run([JSTALL, "lab", "run", "command", "--command", "sh -c 'touch x; exit 3'", "--fs-size", "32M",
                        "--journal-size", "4M", "--jobs", "2", "--no-record", "--json", "--scratch", scratch_dir],
                       capture_output=True, text=True)
    assert p.returncode == 1 and "exited with status 3" in p.stderr
    lab = json.loads(p.stdout)
    assert lab["status"] == "complete" and lab["command_exit_statuses"] == [3, 3]
    assert lab["census"]["files"] == 2 and phase(lab, "command")["jobs"] == 2


def test_calls_choose_what_the_recording_traces(scratch_dir, tmp_path):
    """lab run --calls: the write group traced too, so the command's writes are counted; an
    unknown group is one line, exit 2, before anything is made."""
    from jstall.analyzer.session.load import load_session

    out = str(tmp_path / "s")
    p = subprocess.run([JSTALL, "lab", "run", "command", "--command", "dd if=/dev/zero of=f bs=4k count=50 status=none",
                        "--fs-size", "32M", "--journal-size", "4M", "--calls", "metadata,fsync,write", "-o", out,
                        "--scratch", scratch_dir, "--no-progress"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    s = load_session(out)
    assert "write" in s.meta["traced_calls"] and "fsync" in s.meta["traced_calls"]
    totals = s.call_totals.groupby("syscall")["count"].sum()
    assert totals.get("write", 0) >= 50
    bad = subprocess.run([JSTALL, "lab", "run", "command", "--command", "true", "--calls", "wrte", "-o",
                          str(tmp_path / "b"), "--scratch", scratch_dir], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--calls" in bad.stderr
    assert not (tmp_path / "b").exists()


def test_throttle_slows_the_run_and_is_removed(scratch_dir):
    """The same smallfile run (page cache dropped before the read phase) with the device limited to
    50 read IOPS reads measurably slower (50: the stacked device counts requests after its queue
    merged adjacent reads, fewer than the single loop device counted); the rule exists only during
    the run."""
    rules_seen, devs_seen = [], set()

    def hook(read_iops, fs):
        rules_seen.append((read_iops, throttle_rules().get(("read_iops", fs.lower_dev))))
        devs_seen.add((read_iops, fs.lower_dev))

    def run(read_iops):
        cfg = LabConfig(fs=FsConfig(read_iops=read_iops, **TINY), pattern="smallfile", record=False,
                        params={"files": 60, "file_size": "4K", "files_per_dir": 60}, scratch_dir=scratch_dir)
        # the reads themselves: a phase's seconds are now durable and add a syncfs unrelated to reads
        return phase(run_lab(cfg, before_phase=lambda name, fs: hook(read_iops, fs)).lab, "read")["returned_s"]

    fast, slow = run(None), run(50)
    assert slow > 0.3 and slow > 5 * fast, (fast, slow)
    assert {v for k, v in rules_seen if k == 50} == {50}
    assert {v for k, v in rules_seen if k is None} == {None}
    (dev,) = [d for k, d in devs_seen if k == 50]
    assert ("read_iops", dev) not in throttle_rules()


@pytest.mark.timed   # two runs' times compared: before the guests boot beside the tests
def test_write_throttle_slows_a_synced_pattern_and_is_removed(scratch_dir, tmp_path):
    """A command pattern that writes and fsyncs 40 small files, each fsync a data write plus
    a journal commit: with the device limited to 50 write IOPS it takes measurably longer;
    the rule is there during the run and gone after it."""
    cmd = ("python3 -c \"import os\n"
           "for i in range(20):\n"
           " fd = os.open(f'f{i}', os.O_CREAT | os.O_WRONLY, 0o644); os.write(fd, b'x' * 4096); os.fsync(fd); "
           "os.close(fd)\"")
    seen = {}

    def run(write_iops):
        cfg = LabConfig(fs=FsConfig(write_iops=write_iops, **TINY), pattern="command", record=False,
                        params={"command": cmd}, scratch_dir=scratch_dir)
        lab = run_lab(cfg, before_phase=lambda name, fs: seen.update(
            {write_iops: (fs.lower_dev, throttle_rules().get(("write_iops", fs.lower_dev)))})).lab
        assert lab["command_exit_statuses"] == [0] and lab["census"]["files"] == 20
        return phase(lab, "command")["seconds"]

    fast, slow = run(None), run(50)
    assert slow > 0.5 and slow > 3 * fast, (fast, slow)
    assert seen[50][1] == 50 and seen[None][1] is None
    assert ("write_iops", seen[50][0]) not in throttle_rules()


def attached_loops():
    """{'/dev/loopN': backing file} of every attached loop device on the machine."""
    return scratch.loop_backing_files()


def new_loops(before, *dirs):
    """Loop devices attached since `before` whose backing file is under one of dirs (other
    tests on the machine may attach their own meanwhile)."""
    prefixes = tuple(str(d).rstrip("/") + "/" for d in dirs)
    return {lp: f for lp, f in attached_loops().items() if before.get(lp) != f and f.startswith(prefixes)}


def images_under(directory):
    return [os.path.join(top, f) for top, _, files in os.walk(directory) for f in files if f.endswith(".img")]


@pytest.mark.parametrize("how", ["sigint-to-group", "sigterm-to-lab"])
def test_interrupted_run_leaves_nothing_and_a_loadable_session(scratch_dir, tmp_path, how):
    """Ctrl-C as a terminal sends it (to the lab and its pattern jobs at once), or SIGTERM to
    the lab alone, in the middle of the update phase: no loop device, mount, throttle rule or
    image is left, and the session recorded so far loads, its calls made by lab-xattr."""
    out = tmp_path / "s"
    proc = subprocess.Popen(
        [JSTALL, "lab", "run", "xattr", "--fs-size", "64M", "--journal-size", "4M", "--inode-size", "128",
         "--block-size", "1024", "--files", "3000", "--updates", "100000", "--write-iops", "500",
         "--scratch", scratch_dir, "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    # Wait for the update phase: each phase forks its own job, so the update's is a job that
    # runs once all 3,000 files exist and that was not seen while the create phase made them.
    deadline = time.monotonic() + 180
    create_jobs, update_job = set(), None
    while time.monotonic() < deadline and update_job is None:
        assert proc.poll() is None, proc.communicate()
        jobs = set(subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True,
                                  text=True).stdout.split()) - {str(proc.pid)}
        # inodes in use, by statfs (a traced call such as getdents64 would stall with the lab's
        # and be recorded): ext4's 11 reserved ones (lost+found the last), job0, its 3,000 files
        made = [st.f_files - st.f_ffree - 12 for st in map(os.statvfs, leftovers(scratch_dir)[1])]
        if not made or max(made) < 3000:
            create_jobs |= jobs
        elif jobs - create_jobs and (out / "calls.parquet").exists():
            update_job = (jobs - create_jobs).pop()
        time.sleep(0.2)
    assert update_job, "the update phase did not start in time"
    time.sleep(1)
    loops, mounts = leftovers(scratch_dir)
    assert loops and mounts                                  # it was running
    (run_dir,) = [os.path.join(scratch_dir, r) for r in os.listdir(scratch_dir) if r.startswith("run-")]
    marker = json.load(open(os.path.join(run_dir, scratch.MARKER)))
    (dev,) = marker["throttles"]
    assert throttle_rules()[("write_iops", dev)] == 500
    jobs = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert len(jobs) >= 2                                    # the lab and its pattern job
    if how == "sigint-to-group":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == (130 if how == "sigint-to-group" else 143), err
    assert "interrupted" in err and str(out) in err and "Traceback" not in err
    assert leftovers(scratch_dir) == ([], [])
    assert ("write_iops", dev) not in throttle_rules()
    assert os.listdir(scratch_dir) == [scratch.SCRATCH_MARKER] and not images_under(scratch_dir)
    assert not subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True).stdout  # no job left running
    s = load_session(str(out))
    assert s.meta["status"] == "interrupted" and s.meta["lab"]["status"] == "interrupted"
    assert [p["name"] for p in s.meta["lab"]["phases"]] == ["create"]  # update never finished
    assert (s.calls.syscall == "setxattr").any() and set(s.calls.comm) == {"lab-xattr"}


def test_cleanup_command_removes_an_abandoned_setup(scratch_dir):
    """A process that set up a scratch filesystem (throttled, external journal) and was
    SIGKILLed: `lab cleanup --dry-run` lists it and changes nothing; `lab cleanup` removes it."""
    code = ("import os, sys; from jstall.workloads.scratch import FsConfig, ScratchFs;"
            "fs = ScratchFs(FsConfig(fs_size='32M', journal_device=True, write_iops=1000, journal_write_iops=900),"
            " scratch_dir=sys.argv[1]).__enter__();"
            "print(fs.mountpoint, fs.lower_dev, fs.journal_lower_dev, flush=True); os.kill(os.getpid(), 9)")
    p = subprocess.run([sys.executable, "-c", code, scratch_dir], capture_output=True, text=True)
    mountpoint, dev, jdev = p.stdout.split()
    loops = leftovers(scratch_dir)[0]
    assert len(loops) == 4 and leftovers(scratch_dir)[1] == [mountpoint]  # two stacked loops per image
    assert throttle_rules().get(("write_iops", dev)) == 1000 and throttle_rules().get(("write_iops", jdev)) == 900
    state = (leftovers(scratch_dir), throttle_rules(), sorted(images_under(scratch_dir)))
    dry = subprocess.run([JSTALL, "lab", "cleanup", "--scratch", scratch_dir, "--dry-run"],
                         capture_output=True, text=True, check=True)
    assert mountpoint in dry.stdout and all(f"would detach /dev/{lp}" in dry.stdout for lp in loops)
    assert f"would remove throttle {dev}" in dry.stdout and "fs.img" in dry.stdout and "journal.img" in dry.stdout
    assert (leftovers(scratch_dir), throttle_rules(), sorted(images_under(scratch_dir))) == state
    done = subprocess.run([JSTALL, "lab", "cleanup", "--scratch", scratch_dir], capture_output=True, text=True,
                          check=True)
    assert "unmounted" in done.stdout and done.stdout.count("detached") == 4
    assert leftovers(scratch_dir) == ([], []) and not images_under(scratch_dir)
    assert ("write_iops", dev) not in throttle_rules() and ("write_iops", jdev) not in throttle_rules()
    assert os.listdir(scratch_dir) == [scratch.SCRATCH_MARKER]
    again = subprocess.run([JSTALL, "lab", "cleanup", "--scratch", scratch_dir], capture_output=True, text=True)
    assert again.stdout.strip() == "nothing to clean up"


def test_cleanup_touches_nothing_the_lab_did_not_make(scratch_dir, tmp_path):
    """A marker that names a loop device and a throttle rule the lab did not make (the loop
    is backed by a file outside the run directory): cleanup removes the run directory and
    leaves the device, its throttle rule and its file alone. A directory without the
    scratch marker is refused."""
    image = tmp_path / "not-the-labs.img"
    with open(image, "wb") as f:
        f.truncate(8 << 20)
    loop = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True, text=True,
                          check=True).stdout.strip()
    dev = scratch.dev_of(loop)
    try:
        with open("/sys/fs/cgroup/blkio/blkio.throttle.write_iops_device", "w") as f:
            f.write(f"{dev} 777")
        scratch.prepare_scratch(scratch_dir)
        run_dir = os.path.join(scratch_dir, "run-1-deadbeef")
        os.mkdir(run_dir)
        with open(os.path.join(run_dir, scratch.MARKER), "w") as f:
            json.dump({"format": "jstall-lab-scratch", "pid": 2 ** 22 + 1, "pid_start": 1, "run_dir": run_dir,
                       "loops": [loop], "throttles": {dev: ["write_iops"]}, "mountpoint": os.path.join(run_dir, "mnt")},
                      f)
        done = subprocess.run([JSTALL, "lab", "cleanup", "--scratch", scratch_dir], capture_output=True, text=True,
                              check=True)
        assert "detached" not in done.stdout and "throttle" not in done.stdout, done.stdout
        assert attached_loops().get(loop) == str(image) and throttle_rules()[("write_iops", dev)] == 777
        assert not os.path.exists(run_dir) and image.exists()
        # a directory the lab did not make: refused, untouched
        foreign = tmp_path / "foreign"
        foreign.mkdir()
        (foreign / "run-1-x").mkdir()
        p = subprocess.run([JSTALL, "lab", "cleanup", "--scratch", str(foreign)], capture_output=True, text=True)
        assert p.returncode == 2 and "not a lab scratch directory" in p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and os.listdir(foreign) == ["run-1-x"]
    finally:
        with open("/sys/fs/cgroup/blkio/blkio.throttle.write_iops_device", "w") as f:
            f.write(f"{dev} 0")
        subprocess.run(["losetup", "-d", loop], check=True)


def _beyond_free_space():
    """A filesystem size beyond what the scratch directory's disk has free."""
    st = os.statvfs("/var/tmp")
    return scratch.format_size(((st.f_bavail * st.f_frsize) >> 30 << 30) + (16 << 30))


REFUSALS = [
    (["--journal-size", "64M", "--fs-size", "32M"], "does not fit in --fs-size"),
    (["--journal-size", "2G", "--fs-size", "1G"], "does not fit in --fs-size"),
    (["--journal-size", "4500K"], "whole MiB"),
    (["--inode-size", "200"], "power of two"),
    (["--inode-size", "2048", "--block-size", "1024"], "power of two from 128 to the block size"),
    (["--fs-size", "FREE+16G", "--journal-size", "32M"], "free"),
    (["--mkfs-options=-F"], "-F"),
    (["--mkfs-options=-O ^has_journal"], "journals"),
    (["--mkfs-options=-E lazy_itable_init=1"], "lazy"),
    (["--mkfs-options=-Z 3"], "not accepted"),
    (["--mkfs-options=-O 'unterminated"], "quote"),
    (["--mount-options=data=journal"], "--data-mode"),
    (["--mount-options=noload"], "journals"),
    (["--mount-options=a b;c"], "not a mount option"),
    (["--files", "0"], "--files"),
    (["--files", "1", "--jobs", "2"], "fewer than --jobs"),
    (["--shape", "deep"], "does not apply to the xattr pattern"),
    (["--journal-write-iops", "100"], "--journal-device"),
    (["--fast-commit", "--data-mode", "journal"], "--fast-commit"),
]


@pytest.mark.parametrize("args, message", REFUSALS, ids=[" ".join(a) for a, _ in REFUSALS])
@pytest.mark.parametrize("scratch_state", ["new", "used"])
def test_refusals_are_one_line_and_change_nothing(scratch_dir, tmp_path, args, message, scratch_state):
    """Each refusal: exit status 2, one line naming the problem, no loop device attached, no
    file in the scratch directory (nor the directory itself when it was new), no session."""
    if scratch_state == "used":
        scratch.prepare_scratch(scratch_dir)
    before_scratch = sorted(os.listdir(scratch_dir)) if os.path.exists(scratch_dir) else None
    args = [a.replace("FREE+16G", _beyond_free_space()) for a in args]
    before = attached_loops()
    p = subprocess.run([JSTALL, "lab", "run", "xattr", "--scratch", scratch_dir, "-o", str(tmp_path / "o"), *args],
                       capture_output=True, text=True)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert message in p.stderr and p.stderr.startswith("jstall lab: "), p.stderr
    assert not new_loops(before, scratch_dir, tmp_path) and not (tmp_path / "o").exists()
    after_scratch = sorted(os.listdir(scratch_dir)) if os.path.exists(scratch_dir) else None
    assert after_scratch == before_scratch


COMMAND_REFUSALS = [
    ("dbench -D . -t 10 4 > /dev/null", "give --command \"sh -c 'dbench -D . -t 10 4 > /dev/null'\""),
    ("fs_mark -d . -n 100 2>&1", "so '2>&1' would be one of its arguments"),
    ("true | cat", "so '|' would be one of its arguments"),
    ("no-such-program -x", "program 'no-such-program' not found"),
]


@pytest.mark.parametrize("command, message", COMMAND_REFUSALS, ids=[c for c, _ in COMMAND_REFUSALS])
def test_command_refusals_name_the_fix(scratch_dir, tmp_path, command, message):
    """A command the lab would not run as its user meant (a shell's redirection or pipe given
    to a program run without one, a program that is not there): exit status 2, one line
    naming the fix, nothing attached or written."""
    before = attached_loops()
    p = subprocess.run([JSTALL, "lab", "run", "command", "--command", command, "--scratch", scratch_dir,
                        "-o", str(tmp_path / "o")], capture_output=True, text=True)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert message in p.stderr, p.stderr
    assert not new_loops(before, scratch_dir, tmp_path) and not (tmp_path / "o").exists()


def test_refuses_a_scratch_directory_or_output_it_did_not_make(scratch_dir, tmp_path):
    before = attached_loops()
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "data").write_text("mine")
    p = subprocess.run([JSTALL, "lab", "run", "xattr", "--scratch", str(precious), "--no-record"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "did not create" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert os.listdir(precious) == ["data"]
    afile = tmp_path / "afile"
    afile.write_text("x")
    p = subprocess.run([JSTALL, "lab", "run", "xattr", "--scratch", str(afile), "--no-record"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "not a directory" in p.stderr and afile.read_text() == "x"
    # an output directory that already holds a session
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "metadata.json").write_text("{}")
    p = subprocess.run([JSTALL, "lab", "run", "xattr", "--scratch", scratch_dir, "-o", str(tmp_path / "s")],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "already holds a session" in p.stderr
    assert os.listdir(tmp_path / "s") == ["metadata.json"] and not os.path.exists(scratch_dir)
    assert not new_loops(before, scratch_dir, tmp_path)


def test_inode_size_equal_to_the_block_size_is_accepted(scratch_dir):
    cfg = LabConfig(fs=FsConfig(fs_size="32M", journal_size="4M", inode_size=1024, block_size=1024),
                    pattern="xattr", record=False, params={"files": 10, "updates": 0}, scratch_dir=scratch_dir)
    assert run_lab(cfg).lab["dumpe2fs"]["inode_size"] == 1024


def test_not_root_is_refused(scratch_dir, tmp_path):
    """As nobody, with a scratch directory and an output it could create (under the
    world-writable /var/tmp): refused in one line, nothing made."""
    out = scratch_dir + "-out"
    before = attached_loops()
    for action in (["run", "xattr", "-o", out], ["run", "xattr", "--no-record"],
                   ["sweep", "xattr", "--journal-size", "4M,8M", "--fs-size", "32M", "-o", out]):
        p = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", JSTALL, "lab",
                            *action, "--files", "10", "--updates", "0", "--scratch", scratch_dir],
                           capture_output=True, text=True, cwd="/var/tmp")
        assert p.returncode == 2 and "root" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert not os.path.exists(scratch_dir) and not os.path.exists(out)
    p = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", JSTALL, "lab", "cleanup",
                        "--scratch", scratch_dir], capture_output=True, text=True)
    assert p.returncode == 2 and "root" in p.stderr and "--dry-run" in p.stderr
    assert not new_loops(before, scratch_dir, "/var/tmp")
