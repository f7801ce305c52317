"""The kernel's run-time statistics of BPF programs, for the monitor's own cost.

``BPF_ENABLE_STATS`` turns on run_time_ns/run_cnt accounting for as long as the returned
file descriptor is open (nothing persists after the monitor exits, unlike the
kernel.bpf_stats_enabled sysctl); ``BPF_OBJ_GET_INFO_BY_FD`` reads a program's totals.
"""

import ctypes
import os
import platform

_NR_BPF = {"x86_64": 321, "aarch64": 280}.get(platform.machine())
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_ENABLE_STATS = 32
BPF_STATS_RUN_TIME = 0
#: struct bpf_prog_info: offsets of run_time_ns and run_cnt (uapi linux/bpf.h, since 5.1)
RUN_TIME_OFF, RUN_CNT_OFF, PROG_INFO_SIZE = 192, 200, 232

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _bpf(cmd, attr):
    return _libc.syscall(ctypes.c_long(_NR_BPF), ctypes.c_int(cmd), ctypes.byref(attr), ctypes.c_uint(ctypes.sizeof(attr)))


def enable():
    """A descriptor that keeps BPF run-time statistics on, or None where unsupported."""
    if _NR_BPF is None:
        return None
    attr = (ctypes.c_uint32 * 2)(BPF_STATS_RUN_TIME, 0)
    fd = _bpf(BPF_ENABLE_STATS, attr)
    return fd if fd >= 0 else None


def disable(fd):
    if fd is not None:
        os.close(fd)


def prog_run(prog_fd):
    """(run seconds, runs) of a loaded program, or None."""
    info = ctypes.create_string_buffer(PROG_INFO_SIZE)

    class Attr(ctypes.Structure):
        _fields_ = [("bpf_fd", ctypes.c_uint32), ("info_len", ctypes.c_uint32), ("info", ctypes.c_uint64)]

    attr = Attr(prog_fd, PROG_INFO_SIZE, ctypes.addressof(info))
    if _bpf(BPF_OBJ_GET_INFO_BY_FD, attr) != 0:
        return None
    run_ns = int.from_bytes(info.raw[RUN_TIME_OFF:RUN_TIME_OFF + 8], "little")
    runs = int.from_bytes(info.raw[RUN_CNT_OFF:RUN_CNT_OFF + 8], "little")
    return run_ns / 1e9, runs
