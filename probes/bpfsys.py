"""The few bpf(2) commands bcc 0.26 does not wrap, through ctypes: loading bcc-compiled
instructions as BTF-typed tracing programs (tp_btf, fentry, fexit) on a vmlinux or a
module's BTF type, attaching them, finding a module's BTF object, reading a program's
counters and turning the kernel's run-time statistics on."""

import ctypes
import os
import struct

BPF_SYSCALL = {"x86_64": 321, "aarch64": 280}.get(os.uname().machine)
BPF_PROG_LOAD, BPF_OBJ_GET_INFO_BY_FD, BPF_BTF_GET_FD_BY_ID = 5, 15, 19
BPF_RAW_TRACEPOINT_OPEN, BPF_BTF_GET_NEXT_ID, BPF_ENABLE_STATS = 17, 23, 32
BPF_STATS_RUN_TIME = 0
BPF_PROG_TYPE_TRACING = 26
BPF_TRACE_RAW_TP, BPF_TRACE_FENTRY, BPF_TRACE_FEXIT = 23, 24, 25

#: r0 = 0; exit: a program that does nothing, to ask the kernel whether it takes a kind
EMPTY_PROGRAM = bytes([0xB7, 0, 0, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0])

_libc = ctypes.CDLL(None, use_errno=True)


def _bpf(cmd, attr):
    """bpf(cmd, attr): the result, or -1 with errno set."""
    return _libc.syscall(BPF_SYSCALL, cmd, attr, len(attr))


def load_tracing_program(insns, attach_type, btf_id, name, btf_obj_fd=0):
    """Load instructions as a BTF-typed tracing program (BPF_PROG_LOAD,
    BPF_PROG_TYPE_TRACING) of attach_type on the kernel BTF type btf_id (of the module BTF
    object btf_obj_fd, or vmlinux's when 0). Returns the program fd, or the reason (a
    string: the error, and the verifier's last words when it rejected the program) when
    the kernel refuses."""
    if BPF_SYSCALL is None:
        return "unknown bpf syscall number"
    code = ctypes.create_string_buffer(insns, len(insns))
    license = ctypes.create_string_buffer(b"GPL")
    attr = ctypes.create_string_buffer(144)   # union bpf_attr, BPF_PROG_LOAD's fields
    struct.pack_into("IIQQ", attr, 0, BPF_PROG_TYPE_TRACING, len(insns) // 8, ctypes.addressof(code),
                     ctypes.addressof(license))
    attr[48:48 + min(len(name), 15)] = name[:15]           # prog_name
    struct.pack_into("I", attr, 68, attach_type)           # expected_attach_type
    struct.pack_into("I", attr, 108, btf_id)               # attach_btf_id
    struct.pack_into("I", attr, 112, btf_obj_fd)           # attach_btf_obj_fd
    prog_fd = _bpf(BPF_PROG_LOAD, attr)
    if prog_fd >= 0:
        return prog_fd
    err = os.strerror(ctypes.get_errno())
    # again with the verifier's log, to say why (only when refused: logging slows a load)
    log = ctypes.create_string_buffer(1 << 20)
    struct.pack_into("IIQ", attr, 24, 1, len(log), ctypes.addressof(log))   # log_level, log_size, log_buf
    fd = _bpf(BPF_PROG_LOAD, attr)
    if fd >= 0:
        os.close(fd)
    lines = [ln for ln in log.value.decode(errors="replace").splitlines() if ln.strip()]
    tail = [ln for ln in lines if not ln.startswith(("processed ", "verification time"))][-2:]
    return f"{err}" + (f" ({'; '.join(tail)})" if tail else "")


def open_btf_link(prog_fd):
    """Attach a loaded BTF-typed program (BPF_RAW_TRACEPOINT_OPEN with no name: the
    program's attach_btf_id names the tracepoint or function). Returns the link fd (closing
    it detaches), or None (errno set) when the kernel refuses."""
    open_attr = ctypes.create_string_buffer(16)
    struct.pack_into("QI", open_attr, 0, 0, prog_fd)
    link_fd = _bpf(BPF_RAW_TRACEPOINT_OPEN, open_attr)
    return None if link_fd < 0 else link_fd


def load_and_attach(insns, attach_type, btf_id, name, module=None):
    """Load (load_tracing_program) and attach (open_btf_link) a BTF-typed program on type
    btf_id of vmlinux, or of ``module``'s split BTF. Returns (program fd, link fd), or
    (reason, None) when the kernel refuses."""
    obj_fd = 0
    if module:
        obj_fd = module_btf_fd(module)
        if obj_fd is None:
            return f"no BTF object for module {module}", None
    try:
        prog_fd = load_tracing_program(insns, attach_type, btf_id, name, obj_fd)
    finally:
        if obj_fd:
            os.close(obj_fd)
    if isinstance(prog_fd, str):
        return prog_fd, None
    link_fd = open_btf_link(prog_fd)
    if link_fd is None:
        err = os.strerror(ctypes.get_errno())
        os.close(prog_fd)
        return err, None
    return prog_fd, link_fd


def module_btf_fd(module):
    """An fd of the kernel BTF object named module (BPF_BTF_GET_NEXT_ID over the kernel's
    BTF objects, each asked its name), or None."""
    attr = ctypes.create_string_buffer(16)
    next_id = 0
    while True:
        struct.pack_into("II", attr, 0, next_id, 0)
        if _bpf(BPF_BTF_GET_NEXT_ID, attr) < 0:
            return None
        next_id = struct.unpack_from("I", attr, 4)[0]
        struct.pack_into("III", attr, 0, next_id, 0, 0)
        fd = _bpf(BPF_BTF_GET_FD_BY_ID, attr)
        if fd < 0:
            continue
        name = ctypes.create_string_buffer(64)
        info = ctypes.create_string_buffer(40)   # struct bpf_btf_info
        struct.pack_into("QIIQII", info, 0, 0, 0, 0, ctypes.addressof(name), len(name), 0)
        info_attr = ctypes.create_string_buffer(16)
        struct.pack_into("IIQ", info_attr, 0, fd, len(info), ctypes.addressof(info))
        if _bpf(BPF_OBJ_GET_INFO_BY_FD, info_attr) == 0 and name.value.decode() == module:
            return fd
        os.close(fd)


#: struct bpf_prog_info's members read here and their offsets (include/uapi/linux/bpf.h):
#: its id, the run count and time (with kernel.bpf_stats_enabled on), and recursion_misses,
#: the runs the kernel skipped because a BPF program was already active on the CPU (fentry
#: since 5.12, raw and BTF-typed tracepoints since 6.1, perf tracepoints and kprobes since 6.7:
#: trace_call_bpf)
_PROG_INFO = {"id": (4, "I"), "run_time_ns": (192, "Q"), "run_cnt": (200, "Q"), "recursion_misses": (208, "Q")}


def enable_stats():
    """A descriptor that keeps the kernel's run-time statistics of BPF programs on
    (BPF_ENABLE_STATS, BPF_STATS_RUN_TIME) for as long as it is open, or None where the
    kernel refuses (before 5.8)."""
    if BPF_SYSCALL is None:
        return None
    attr = ctypes.create_string_buffer(struct.pack("I", BPF_STATS_RUN_TIME), 8)
    fd = _bpf(BPF_ENABLE_STATS, attr)
    return fd if fd >= 0 else None


def prog_info(fd):
    """{'id', 'run_time_ns', 'run_cnt', 'recursion_misses'} of the loaded program fd
    (BPF_OBJ_GET_INFO_BY_FD); a member the kernel does not have reads 0. None when refused."""
    info = ctypes.create_string_buffer(256)   # struct bpf_prog_info (232 bytes in 6.x), zeroed
    attr = ctypes.create_string_buffer(16)
    struct.pack_into("IIQ", attr, 0, fd, len(info), ctypes.addressof(info))
    if _bpf(BPF_OBJ_GET_INFO_BY_FD, attr) != 0:
        return None
    return {k: struct.unpack_from(fmt, info, off)[0] for k, (off, fmt) in _PROG_INFO.items()}
