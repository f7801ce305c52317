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

import pytest

from conftest import leftovers, throttle_rules
from jstall.analyzer import load_session
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


def test_command_runs_in_each_jobs_directory(scratch_dir):
    cmd = "sh -c 'mkdir sub && head -c 1000 /dev/zero > sub/f$JSTALL_LAB_JOB && exit 3'"
    cfg = LabConfig(fs=FsConfig(**TINY), pattern="command", jobs=2, record=False,
                    params={"command": cmd}, scratch_dir=scratch_dir)
    res = run_lab(cfg)
    assert res.lab["command_exit_statuses"] == [3, 3] and res.exit_status == 3
    assert res.lab["census"]["dirs"] == 2 and res.lab["census"]["files"] == 2 and res.lab["census"]["bytes"] == 2000


def test_throttle_slows_the_run_and_is_removed(scratch_dir):
    """The same smallfile run (page cache dropped before the read phase) with the device
    limited to 100 read IOPS reads measurably slower; the rule exists only during the run."""
    rules_seen = []

    def run(read_iops):
        cfg = LabConfig(fs=FsConfig(read_iops=read_iops, **TINY), pattern="smallfile", record=False,
                        params={"files": 60, "file_size": "4K", "files_per_dir": 60}, scratch_dir=scratch_dir)
        return phase(run_lab(cfg, before_phase=lambda name, fs: rules_seen.append(
            (read_iops, throttle_rules().get(("read_iops", fs.dev))))).lab, "read")["seconds"]

    fast, slow = run(None), run(100)
    assert slow > 0.3 and slow > 5 * fast, (fast, slow)
    assert {v for k, v in rules_seen if k == 100} == {100}
    assert {v for k, v in rules_seen if k is None} == {None}


def test_sigint_mid_run_leaves_nothing_and_a_loadable_session(scratch_dir, tmp_path):
    out = tmp_path / "s"
    proc = subprocess.Popen(
        [JSTALL, "lab", "run", "xattr", "--fs-size", "64M", "--journal-size", "4M", "--inode-size", "128",
         "--block-size", "1024", "--files", "3000", "--updates", "100000", "--write-iops", "500",
         "--scratch", scratch_dir, "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out / "calls.parquet").exists():
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    time.sleep(2)
    loops, mounts = leftovers(scratch_dir)
    assert loops and mounts                                  # it was running
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert leftovers(scratch_dir) == ([], [])
    assert not [r for r in os.listdir(scratch_dir) if r.startswith("run-")]
    s = load_session(str(out))
    assert s.meta["status"] == "interrupted" and s.meta["lab"]["status"] == "interrupted"
    assert len(s.calls) > 0 and "Traceback" not in err


def test_cleanup_command_removes_an_abandoned_setup(scratch_dir):
    code = ("import os, sys; from jstall.workloads.scratch import FsConfig, ScratchFs;"
            "fs = ScratchFs(FsConfig(fs_size='32M', write_iops=1000), scratch_dir=sys.argv[1]).__enter__();"
            "print(fs.mountpoint, fs.dev, flush=True); os.kill(os.getpid(), 9)")
    p = subprocess.run([sys.executable, "-c", code, scratch_dir], capture_output=True, text=True)
    mountpoint, dev = p.stdout.split()
    assert leftovers(scratch_dir)[1] == [mountpoint] and throttle_rules().get(("write_iops", dev)) == 1000
    dry = subprocess.run([JSTALL, "lab", "cleanup", "--scratch", scratch_dir, "--dry-run"],
                         capture_output=True, text=True, check=True)
    assert mountpoint in dry.stdout and leftovers(scratch_dir)[1] == [mountpoint]
    done = subprocess.run([JSTALL, "lab", "cleanup", "--scratch", scratch_dir], capture_output=True, text=True,
                          check=True)
    assert "unmounted" in done.stdout and "detached" in done.stdout
    assert leftovers(scratch_dir) == ([], []) and ("write_iops", dev) not in throttle_rules()
    again = subprocess.run([JSTALL, "lab", "cleanup", "--scratch", scratch_dir], capture_output=True, text=True)
    assert again.stdout.strip() == "nothing to clean up"


@pytest.mark.parametrize("args, message", [
    (["--journal-size", "64M", "--fs-size", "32M"], "journal"),
    (["--inode-size", "200"], "power of two"),
    (["--mkfs-options=-F"], "-F"),
    (["--mount-options=data=journal"], "data"),
    (["--files", "0"], "--files"),
])
def test_refusals_are_one_line_and_change_nothing(scratch_dir, tmp_path, args, message):
    before = set(os.listdir("/sys/block"))
    p = subprocess.run([JSTALL, "lab", "run", "xattr", "--scratch", scratch_dir, "-o", str(tmp_path / "o"), *args],
                       capture_output=True, text=True)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert message in p.stderr and p.stderr.startswith("jstall lab: ")
    assert set(os.listdir("/sys/block")) == before and not (tmp_path / "o").exists()
    assert not os.path.exists(scratch_dir) or not [r for r in os.listdir(scratch_dir) if r.startswith("run-")]


def test_not_root_is_refused(tmp_path):
    p = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", JSTALL, "lab", "run",
                        "xattr", "--files", "10", "--updates", "0", "--no-record", "--scratch", str(tmp_path / "x")],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "root" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()
