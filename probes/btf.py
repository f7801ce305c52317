"""Struct member offsets and tracepoint types from the running kernel's BTF.

The headers bcc compiles against may belong to another kernel version, so every
offset the probes use comes from the kernel's BTF (read with bpftool): vmlinux's
(/sys/kernel/btf/vmlinux) and, where ext4, jbd2 or xfs are modules (as in every
distribution's stock kernel), each loaded module's split BTF on top of it
(/sys/kernel/btf/<module>, whose type ids continue vmlinux's).
"""

import collections
import hashlib
import json
import os
import shutil
import subprocess
import tempfile

from jstall.errors import JstallError

BTF_DIR = "/sys/kernel/btf"
VMLINUX_BTF = f"{BTF_DIR}/vmlinux"
#: modules whose types and tracepoints the probes use, when they are not built in
MODULES = ("ext4", "jbd2", "xfs")

#: (struct, member) pairs the probes read, by the macro name they get in the BPF C.
FIELDS = {
    "TASK_PID": ("task_struct", "pid"),
    "TASK_FLAGS": ("task_struct", "flags"),
    # set while the task holds a journal handle: a nested handle never waits
    "TASK_JOURNAL_INFO": ("task_struct", "journal_info"),
    "TASK_COMM": ("task_struct", "comm"),
    "SB_DEV": ("super_block", "s_dev"),
    "SB_FS_INFO": ("super_block", "s_fs_info"),
    "EXT4_SB_JOURNAL": ("ext4_sb_info", "s_journal"),
    "INODE_SB": ("inode", "i_sb"),
    "BDEV_DEV": ("block_device", "bd_dev"),
    "J_FS_DEV": ("journal_s", "j_fs_dev"),
    "J_FREE": ("journal_s", "j_free"),
    "J_HEAD": ("journal_s", "j_head"),
    "J_TAIL": ("journal_s", "j_tail"),
    "J_FIRST": ("journal_s", "j_first"),
    "J_LAST": ("journal_s", "j_last"),
    "J_TOTAL_LEN": ("journal_s", "j_total_len"),
    "J_MAX_TX": ("journal_s", "j_max_transaction_buffers"),
    "J_RUNNING": ("journal_s", "j_running_transaction"),
    "J_COMMITTING": ("journal_s", "j_committing_transaction"),
    "J_TAIL_SEQ": ("journal_s", "j_tail_sequence"),
    "T_TID": ("transaction_s", "t_tid"),
    "T_OUTSTANDING_CREDITS": ("transaction_s", "t_outstanding_credits"),
    "RS_WAIT": ("transaction_run_stats_s", "rs_wait"),
    "RS_REQUEST_DELAY": ("transaction_run_stats_s", "rs_request_delay"),
    "RS_RUNNING": ("transaction_run_stats_s", "rs_running"),
    "RS_LOCKED": ("transaction_run_stats_s", "rs_locked"),
    "RS_FLUSHING": ("transaction_run_stats_s", "rs_flushing"),
    "RS_LOGGING": ("transaction_run_stats_s", "rs_logging"),
    "RS_HANDLE_COUNT": ("transaction_run_stats_s", "rs_handle_count"),
    "RS_BLOCKS": ("transaction_run_stats_s", "rs_blocks"),
    "RS_BLOCKS_LOGGED": ("transaction_run_stats_s", "rs_blocks_logged"),
    "CS_CHP_TIME": ("transaction_chp_stats_s", "cs_chp_time"),
    "CS_FORCED_TO_CLOSE": ("transaction_chp_stats_s", "cs_forced_to_close"),
    "CS_WRITTEN": ("transaction_chp_stats_s", "cs_written"),
    "CS_DROPPED": ("transaction_chp_stats_s", "cs_dropped"),
    # a file descriptor's filesystem and name: task->files->fdt->fd[fd]->f_inode->i_sb->s_dev
    # and ->f_path.dentry->d_name.name
    "TASK_TGID": ("task_struct", "tgid"),
    "TASK_FILES": ("task_struct", "files"),
    "FILES_FDT": ("files_struct", "fdt"),
    "FDT_FD": ("fdtable", "fd"),
    "FDT_MAX_FDS": ("fdtable", "max_fds"),
    "FILE_INODE": ("file", "f_inode"),
    "FILE_PATH": ("file", "f_path"),
    "PATH_DENTRY": ("path", "dentry"),
    "DENTRY_NAME": ("dentry", "d_name"),
    "QSTR_NAME": ("qstr", "name"),
    # a bio's operation, first sector and bytes (bio->bi_iter): the blocks checkpoints write home
    "BIO_OPF": ("bio", "bi_opf"),
    "BIO_ITER": ("bio", "bi_iter"),
    "ITER_SECTOR": ("bvec_iter", "bi_sector"),
    "ITER_SIZE": ("bvec_iter", "bi_size"),
    # a work item's function (workqueue_execute_start): which kernel workers' waits are kept
    "WORK_FUNC": ("work_struct", "func"),
}

#: The saved user registers holding a syscall's first two arguments, per architecture
#: (raw_syscalls:sys_enter/sys_exit pass struct pt_regs *). Optional: without them the
#: probes name no file and find no device by descriptor.
SYSCALL_ARGS = {
    "x86_64": (("pt_regs", "di"), ("pt_regs", "si"), ("pt_regs", "r10")),
}
#: Where struct pt_regs keeps the number a syscall was entered with (fentry mode).
SYSCALL_NR = {"x86_64": ("pt_regs", "orig_ax"), "aarch64": ("pt_regs", "syscallno")}
#: Where struct pt_regs keeps a syscall's return value, -ENOSYS while the syscall runs (x86_64's
#: entry code sets it so; an exception leaves the user's value): tells a syscall from a fault.
SYSCALL_RET = {"x86_64": ("pt_regs", "ax")}
#: The prefix of a syscall's function name (the fentry mode attaches to <prefix><call>).
SYSCALL_PREFIX = {"x86_64": "__x64_sys_", "aarch64": "__arm64_sys_"}

_QUALIFIERS = ("TYPEDEF", "VOLATILE", "CONST", "RESTRICT", "TYPE_TAG")


class BtfTypes:
    """The kernel's BTF types, as bpftool's JSON dump gives them: vmlinux's, and each
    module's split BTF (``modules``: {module: its types}), whose ids continue vmlinux's
    (two modules' ids overlap; each resolves in its own types, then vmlinux's)."""

    def __init__(self, types, modules=None):
        base = {t["id"]: t for t in types}
        #: (module or None, {id: type} it resolves ids in), vmlinux first
        self._layers = [(None, base)] + [(m, collections.ChainMap({t["id"]: t for t in mt}, base))
                                         for m, mt in (modules or {}).items()]
        self._structs = {}   # name -> (type, the layer's ids)
        for module, by_id in self._layers:
            own = by_id.maps[0] if module else by_id
            for t in own.values():
                if t.get("kind") in ("STRUCT", "UNION") and t.get("name"):
                    self._structs.setdefault(t["name"], (t, by_id))

    @property
    def modules(self):
        """The modules whose split BTF was read."""
        return [m for m, _ in self._layers if m]

    @classmethod
    def load(cls, path=VMLINUX_BTF, modules=MODULES, btf_dir=None):
        """vmlinux's BTF at path and the split BTF of those of ``modules`` that are
        loaded (``btf_dir``/<module>, by default next to path)."""
        if not os.path.exists(path):
            raise JstallError(f"{path} is missing: this kernel has no BTF; "
                              "use a kernel built with CONFIG_DEBUG_INFO_BTF=y")
        btf_dir = btf_dir or os.path.dirname(path)
        split = {m: os.path.join(btf_dir, m) for m in modules if os.path.exists(os.path.join(btf_dir, m))}
        return cls(_dump(path), {m: _dump(p, base=path) for m, p in split.items()})

    def _size(self, type_id, by_id):
        t = by_id.get(type_id)
        while t is not None and t["kind"] in _QUALIFIERS:
            t = by_id.get(t["type_id"])
        if t is None:
            return 0
        if t["kind"] == "PTR":
            return 8
        if t["kind"] == "ARRAY":
            return self._size(t["type_id"], by_id) * t["nr_elems"]
        return t.get("size", 0)

    def _find(self, struct, member, by_id, base_bits=0):
        for m in struct.get("members", ()):
            bits = base_bits + m["bits_offset"]
            if m["name"] == member:
                return bits, self._size(m["type_id"], by_id)
            if not m["name"] or m["name"] == "(anon)":  # anonymous struct or union (bpftool: "(anon)")
                inner = by_id.get(m["type_id"])
                while inner is not None and inner["kind"] in _QUALIFIERS:
                    inner = by_id.get(inner["type_id"])
                if inner is not None and inner["kind"] in ("STRUCT", "UNION"):
                    found = self._find(inner, member, by_id, bits)
                    if found:
                        return found
        return None

    def has_struct(self, struct_name):
        return struct_name in self._structs

    def member(self, struct_name, member):
        """(byte offset, size in bytes) of struct_name.member; KeyError if absent."""
        struct, by_id = self._structs.get(struct_name, (None, None))
        if struct is None:
            raise KeyError(f"struct {struct_name} is not in the kernel's BTF")
        found = self._find(struct, member, by_id)
        if found is None:
            raise KeyError(f"struct {struct_name} has no member {member} in the kernel's BTF")
        bits, size = found
        if bits % 8:
            raise KeyError(f"{struct_name}.{member} is a bit-field")
        return bits // 8, size

    def type_ids(self, kind, names):
        """{name: id} of the vmlinux types of this kind ('TYPEDEF', 'FUNC', ...) with these
        names (one pass over the types); a name the kernel lacks is left out."""
        return {n: i for n, (i, m) in self.located_type_ids(kind, names).items() if m is None}

    def located_type_ids(self, kind, names):
        """{name: (id, module or None)}: like type_ids, in vmlinux or a module's split BTF
        (a program attached to a module's tracepoint or function names the module's BTF
        object and the id in it)."""
        wanted, out = set(names), {}
        for module, by_id in self._layers:
            own = by_id.maps[0] if module else by_id
            for i, t in own.items():
                if t.get("kind") == kind and t.get("name") in wanted:
                    out.setdefault(t["name"], (i, module))
        return out


def _dump(path, base=None):
    """bpftool's JSON dump of the BTF at path (split BTF on top of base)."""
    bpftool = shutil.which("bpftool") or "/usr/sbin/bpftool"
    if not os.path.exists(bpftool):
        raise JstallError("bpftool not found; install it (apt install bpftool) or run 'make demo' to set up")
    cmd = [bpftool, "-j", "btf", "dump", "file", path] + (["-B", base] if base else [])
    try:
        out = subprocess.run(cmd, check=True, capture_output=True).stdout
    except subprocess.CalledProcessError as e:
        msg = e.stderr.decode(errors="replace").strip().splitlines()
        raise JstallError(f"bpftool cannot read {path}: {msg[-1] if msg else e}") from None
    return json.loads(out)["types"]


#: where facts() keeps its answers, each under a digest of the BTF it read and the question
CACHE_DIR = "/var/cache/jstall/btf"


def facts(typedefs=(), funcs=(), fields=FIELDS, path=VMLINUX_BTF, modules=MODULES, btf_dir=None,
          cache_dir=None, machine=None):
    """What the probes take from the kernel's BTF: ``defines`` (probe_defines and
    syscall_arg_defines), ``typedefs`` ({name: [id, module or None]}, located_type_ids of
    these TYPEDEFs) and ``funcs`` ({name: id} of these vmlinux FUNCs). Reading the BTF
    (bpftool's JSON, about 140 MiB) takes 0.6 s of every start, so the answer is kept in
    cache_dir under a digest of the BTF files read (vmlinux's and each loaded module's split
    BTF, byte for byte) and of the question: another kernel, or a module loaded or changed,
    is read again. A cache that cannot be read or written is passed by."""
    machine, cache_dir = machine or os.uname().machine, cache_dir or CACHE_DIR
    btf_dir = btf_dir or os.path.dirname(path)
    split = [m for m in modules if os.path.exists(os.path.join(btf_dir, m))]
    question = json.dumps([sorted(typedefs), sorted(funcs), fields, SYSCALL_ARGS, SYSCALL_NR, SYSCALL_RET, machine,
                           split], sort_keys=True)
    h, cached = hashlib.sha256(question.encode()), None
    try:
        for f in [path] + [os.path.join(btf_dir, m) for m in split]:
            with open(f, "rb") as fh:
                h.update(fh.read())
        cached = os.path.join(cache_dir, h.hexdigest() + ".json")
        with open(cached) as f:
            return json.load(f)
    except (OSError, ValueError):
        pass   # an unreadable BTF: BtfTypes.load names the fix
    out = _facts(BtfTypes.load(path, modules, btf_dir), typedefs, funcs, fields, machine)
    if cached is None:
        return out
    try:
        os.makedirs(cache_dir, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache_dir, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(out, f)
        os.replace(tmp, cached)
    except OSError:
        pass
    return out


def _facts(types, typedefs, funcs, fields, machine):
    defines = probe_defines(types, fields)
    defines.update(syscall_arg_defines(types, machine))
    return {"defines": defines,
            "typedefs": {n: list(v) for n, v in types.located_type_ids("TYPEDEF", typedefs).items()},
            "funcs": types.type_ids("FUNC", funcs)}


def probe_defines(types, fields=FIELDS):
    """C macros <NAME>_OFF and <NAME>_SIZE for every field the probes read."""
    defines = {}
    for name, (struct, member) in fields.items():
        try:
            off, size = types.member(struct, member)
        except KeyError as e:
            raise JstallError(f"{e.args[0]}{_missing_hint(types, struct)}") from None
        defines[f"{name}_OFF"] = off
        defines[f"{name}_SIZE"] = size
    return defines


#: the module that defines a struct the probes read, when it is not built in
STRUCT_MODULES = {"ext4_sb_info": "ext4", "journal_s": "jbd2", "transaction_s": "jbd2",
                  "transaction_run_stats_s": "jbd2", "transaction_chp_stats_s": "jbd2", "xlog": "xfs",
                  "xfs_mount": "xfs"}


def _missing_hint(types, struct):
    """Why a struct member may be missing, and the fix, in a few words."""
    module = STRUCT_MODULES.get(struct)
    if module and not types.has_struct(struct) and module not in types.modules:
        return (f" (module {module} is not loaded or has no BTF in {BTF_DIR}/{module}); "
                f"load it (modprobe {module}) or mount a filesystem of that kind first")
    return ": this kernel's jbd2/ext4 layout is not supported"


def syscall_arg_defines(types, machine=None):
    """SYSCALL_ARGS (1 when known) and ARG0_OFF/ARG1_OFF/ARG3_OFF: where struct pt_regs keeps
    a syscall's first two arguments and its fourth on this architecture."""
    machine_name = machine or os.uname().machine
    args = SYSCALL_ARGS.get(machine_name)
    try:
        offs = [types.member(*a)[0] for a in args] if args else None
    except KeyError:
        offs = None
    a0, a1, a3 = offs or (0, 0, 0)
    nr, ret = SYSCALL_NR.get(machine_name), SYSCALL_RET.get(machine_name)
    try:
        nr_off = types.member(*nr)[0] if nr else 0
        ret_off = types.member(*ret)[0] if ret else -1
    except KeyError:
        nr_off, ret_off = 0, -1
    return {"SYSCALL_ARGS": int(bool(offs)), "ARG0_OFF": a0, "ARG1_OFF": a1, "ARG3_OFF": a3, "SYSCALL_NR_OFF": nr_off,
            "SYSCALL_CONTEXT": int(ret_off >= 0), "SYSCALL_RET_OFF": max(ret_off, 0)}
