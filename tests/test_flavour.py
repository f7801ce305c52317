"""The kernel's flavour (jstall.flavour) from the sources a kernel gives, and the analyzer's
session line stating it and the attach mode (hand-built sessions)."""

from jstall.analyzer import analyze
from jstall.analyzer.session.load import load_session
from synthetic import metadata, write_session
from jstall.analyzer.render.text import session_summary
from jstall.flavour import attach_words, flavour, uncounted_skips


def test_flavour_of_debians_kernels_and_upstream_rt():
    assert flavour("6.1.0-56-rt-amd64") == "rt"                      # Debian 12's PREEMPT_RT
    assert flavour("6.12.117+deb12-cloud-amd64") == "cloud"          # Debian 12's cloud
    assert flavour("6.1.0-27-amd64") == "generic"
    assert flavour("6.6.0-rt15") == "rt"                              # upstream -rt patches
    assert flavour("6.18.44-fc-v782") == "generic"
    assert flavour("6.1.0-27-amd64", realtime="1\n") == "rt"          # /sys/kernel/realtime
    assert flavour("6.1.0-27-amd64", realtime="0\n") == "generic"
    assert flavour("6.8.0", version="#1 SMP PREEMPT_RT Thu") == "rt"  # uname -v
    assert flavour("5.10.0-trt-x") == "generic" and flavour(None) == "generic"
    assert attach_words("syscalls") == "syscall tracepoints" and attach_words("fentry") == "fentry"
    assert attach_words(None) is None


def test_skips_go_uncounted_only_on_rt_before_6_7_with_syscall_tracepoints():
    """trace_call_bpf() counts the runs it skips since 6.7; a PREEMPT_RT kernel skips them
    while another task's BPF map operation is preempted on the CPU; fentry counts its own."""
    assert uncounted_skips("rt", (6, 1), "syscalls")
    assert not uncounted_skips("rt", (6, 12), "syscalls") and not uncounted_skips("rt", (6, 7), "syscalls")
    assert not uncounted_skips("rt", (6, 1), "fentry") and not uncounted_skips("rt", (6, 1), "raw")
    assert not uncounted_skips("generic", (6, 1), "syscalls") and not uncounted_skips("rt", None, "syscalls")


def test_session_line_states_the_flavour_and_the_attach_mode(tmp_path):
    meta = metadata(kernel_release="6.1.0-56-rt-amd64", probes={"attached": [], "missing": [], "attach": "syscalls"})
    a = analyze(load_session(write_session(str(tmp_path / "rt"), meta=meta)))
    line = session_summary(a).splitlines()[0]
    assert "(kernel 6.1.0-56-rt-amd64 (rt), HZ 250; probes on syscall tracepoints)" in line, line
    assert a.summary.session.kernel_flavour == "rt" and a.summary.session.attach == "syscalls"
    # a recorder's own word wins over the release's suffix
    meta = metadata(kernel_release="6.12.0-custom", kernel_flavour="rt", probes={"attach": "fentry"})
    line = session_summary(analyze(load_session(write_session(str(tmp_path / "own"), meta=meta)))).splitlines()[0]
    assert "(kernel 6.12.0-custom (rt), HZ 250; probes on fentry)" in line, line
