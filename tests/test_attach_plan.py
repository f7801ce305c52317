"""The probes' attach plan per kernel, decided from what the kernel offers (no probes
loaded): handle-start tracepoints, calls the kernel lacks, headers, the oldest kernel."""

import os
import threading
import time

import pytest

from jstall.errors import JstallError
from jstall.probes import host, probeset, recorder


def fake_tracepoints(monkeypatch, present):
    monkeypatch.setattr(host, "tracepoint_exists", lambda cat, name: f"{cat}:{name}" in present)


def test_kernels_before_6_2_start_handles_at_ext4_journal_start(monkeypatch):
    fake_tracepoints(monkeypatch, {"ext4:ext4_journal_start"})
    assert probeset.handle_start_plan() == (("ext4_journal_start", "ext4_journal_start_sb"),)


def test_newer_kernels_use_the_sb_and_inode_tracepoints(monkeypatch):
    fake_tracepoints(monkeypatch, {"ext4:ext4_journal_start_sb", "ext4:ext4_journal_start_inode"})
    assert [tp for tp, _ in probeset.handle_start_plan()] == ["ext4_journal_start_sb", "ext4_journal_start_inode"]


def test_no_handle_tracepoint_plans_the_newest_and_reports_it_missing(monkeypatch):
    fake_tracepoints(monkeypatch, set())
    assert probeset.handle_start_plan() == probeset.HANDLE_START_PLANS[0]


def test_a_syscall_is_known_by_its_tracepoint(monkeypatch, tmp_path):
    (tmp_path / "events" / "syscalls" / "sys_enter_mkdir").mkdir(parents=True)
    monkeypatch.setattr(host, "TRACEFS", str(tmp_path))
    assert host.syscall_exists("mkdir") and not host.syscall_exists("setxattrat")
    monkeypatch.setattr(host, "TRACEFS", str(tmp_path / "none"))
    assert host.syscall_exists("setxattrat")   # no syscall tracepoints at all: nothing to tell by


@pytest.mark.parametrize("release, ok", [("6.1.0-56-amd64", True), ("6.12.117+deb12-amd64", True),
                                         ("5.11.0", True), ("5.10.0-30-amd64", False), ("4.19.0-27-amd64", False)])
def test_the_oldest_kernel_is_refused_in_one_line(monkeypatch, release, ok):
    monkeypatch.setattr(host, "btf_path_ok", lambda: True)
    if ok:
        host.require_kernel(release)
    else:
        with pytest.raises(JstallError, match=r"older than 5\.11, the oldest jstall supports") as e:
            host.require_kernel(release)
        assert "\n" not in str(e.value)


def test_a_kernel_without_btf_is_refused(monkeypatch):
    monkeypatch.setattr(host, "btf_path_ok", lambda: False)
    with pytest.raises(JstallError, match="CONFIG_DEBUG_INFO_BTF"):
        host.require_kernel("6.1.0")


@pytest.mark.parametrize("layout, own", [
    ({"build/include/linux/kconfig.h"}, True),                                  # one tree
    ({"build/include/generated/autoconf.h", "source/include/linux/kconfig.h"}, True),   # Debian's split
    ({"build/include/generated/autoconf.h"}, False),                            # generated files only
    (set(), False),
])
def test_the_kernels_own_headers_are_found_split_or_not(tmp_path, layout, own):
    for f in layout:
        path = tmp_path / "6.1.0-56-amd64" / f
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    assert host.own_headers("6.1.0-56-amd64", root=str(tmp_path)) is own


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_an_unknown_attach_mode_is_refused_in_one_line(tmp_path):
    with pytest.raises(JstallError, match=r"JSTALL_ATTACH=kprobe: unknown attach mode; use one of auto, fentry"):
        recorder.Recorder(recorder.RecordOptions(output_dir=str(tmp_path / "s"), attach="kprobe"))
    assert not (tmp_path / "s").exists()


class FakeBPF:
    """bcc's BPF object as close() sees it: its attached tracepoints and links, each
    detached by a call that blocks a while (the kernel's grace period) and may fail."""

    def __init__(self, tracepoints, links, failing=()):
        self.tracepoint_fds = {k: i for i, k in enumerate(tracepoints)}
        self.raw_tracepoint_fds = {k: 100 + i for i, k in enumerate(links)}
        self.failing, self.active, self.most, self.cleaned = set(failing), 0, 0, None
        self.lock = threading.Lock()

    def _detach(self, fds, k):
        with self.lock:
            self.active += 1
            self.most = max(self.most, self.active)
        time.sleep(0.05)
        with self.lock:
            self.active -= 1
        if k in self.failing:
            raise RuntimeError(f"cannot detach {k}")
        del fds[k]

    def detach_tracepoint(self, k):
        self._detach(self.tracepoint_fds, k)

    def detach_raw_tracepoint(self, k):
        self._detach(self.raw_tracepoint_fds, k)


def test_a_stop_detaches_every_program_together_and_leaves_failures_to_bccs_cleanup():
    tps = ([f"syscalls:sys_enter_{n}".encode() for n in range(24)]
           + [f"syscalls:sys_exit_{n}".encode() for n in range(24)])
    links = [b"sched_switch", b"jbd2_checkpoint"]
    b = FakeBPF(tps, links, failing={b"jbd2_checkpoint"})
    probeset.detach_together(b)
    # all at once, not one after another; the one that failed is still there for cleanup()
    assert b.most > 1 and b.active == 0
    assert b.tracepoint_fds == {} and list(b.raw_tracepoint_fds) == [b"jbd2_checkpoint"]
    # one program: nothing to overlap, left to cleanup()
    one = FakeBPF([b"syscalls:sys_enter_openat"], [])
    probeset.detach_together(one)
    assert list(one.tracepoint_fds) == [b"syscalls:sys_enter_openat"]
