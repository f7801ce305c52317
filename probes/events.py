"""Record layouts of the BPF events, parsed from the shared header jstall_events.h.

The header is the single definition of every event; this module turns its structs
into numpy dtypes (nested structs flattened into their fields) and its enums into
dicts, so a batch of raw records becomes columns with one numpy.frombuffer call.
"""

import os
import re

import numpy as np

HEADER = os.path.join(os.path.dirname(__file__), "jstall_events.h")

_SCALARS = {"__u32": "<u4", "__s32": "<i4", "__u64": "<u8", "__s64": "<i8"}
_STRUCT_RE = re.compile(r"struct\s+(\w+)\s*\{([^}]*)\};", re.S)
_ENUM_RE = re.compile(r"enum\s+(\w+)\s*\{([^}]*)\};", re.S)
_MEMBER_RE = re.compile(r"^\s*(struct\s+\w+|\w+)\s+(\w+)(?:\[(\w+)\])?\s*;\s*$")


def _strip_comments(text):
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def parse_header(path=HEADER):
    """Return (dtypes, enums, defines): struct name -> numpy dtype, enum name -> {NAME: value}."""
    text = _strip_comments(open(path).read())
    defines = {m.group(1): int(m.group(2)) for m in re.finditer(r"#define\s+(\w+)\s+(\d+)", text)}
    enums = {}
    for name, body in _ENUM_RE.findall(text):
        values, nxt = {}, 0
        for item in body.split(","):
            item = item.strip()
            if item:  # as in C: a name without a value is the previous one plus 1
                key, _, val = item.partition("=")
                values[key.strip()] = nxt = int(val.strip(), 0) if val.strip() else nxt
                nxt += 1
        enums[name] = values
    fields = {}
    for name, body in _STRUCT_RE.findall(text):
        out = []
        for line in body.splitlines():
            if not line.strip():
                continue
            m = _MEMBER_RE.match(line)
            if not m:
                raise ValueError(f"{path}: cannot parse member {line.strip()!r} of struct {name}")
            ctype, member, count = m.groups()
            if ctype.startswith("struct "):
                out.extend(fields[ctype.split()[1]])  # nested struct: its fields, flattened
            elif ctype == "char" and count:
                out.append((member, f"S{defines.get(count, count)}"))
            else:
                out.append((member, _SCALARS[ctype]))
        fields[name] = out
    dtypes = {}
    for name, members in fields.items():
        dt = np.dtype(members, align=True)
        if dt.itemsize % 8:
            raise ValueError(f"{path}: struct {name} is {dt.itemsize} bytes, not a multiple of 8")
        dtypes[name] = dt
    return dtypes, enums, defines


DTYPES, ENUMS, DEFINES = parse_header()
KINDS = ENUMS["jstall_kind"]
JBD2_EVENT_NAMES = {v: k[len("JBD2_"):].lower() for k, v in ENUMS["jstall_jbd2_event"].items()}
BUFFERS = ENUMS["jstall_buffer"]
OPS = ENUMS["jstall_op"]
#: operation code -> the name a session's ``syscall`` column stores (and the monitor's ``op`` label)
OP_NAMES = {OPS["OP_JOURNAL_START"]: "journal_start", OPS["OP_SYNC_FILE"]: "sync_file"}
CONTEXTS = ENUMS["jstall_context"]
#: task_struct.flags bits that say what a task is (include/linux/sched.h)
PF_IO_WORKER, PF_KTHREAD = 0x00000010, 0x00200000

#: kind value -> struct name
KIND_STRUCTS = {
    KINDS["KIND_CALL"]: "call_event",
    KINDS["KIND_OFFCPU"]: "offcpu_event",
    KINDS["KIND_JBD2"]: "jbd2_event",
    KINDS["KIND_RUN_STATS"]: "run_stats_event",
    KINDS["KIND_CHECKPOINT_STATS"]: "checkpoint_stats_event",
    KINDS["KIND_LOG_TAIL"]: "log_tail_event",
    KINDS["KIND_FILL"]: "fill_event",
    KINDS["KIND_XFS_WAIT"]: "xfs_wait_event",
    KINDS["KIND_WORKER_OFFCPU"]: "worker_offcpu_event",
}
XFS_HEADS = {v: k[len("XFS_HEAD_"):].lower() for k, v in ENUMS["jstall_xfs_head"].items()}


def decode(struct_name, chunks):
    """Decode a list of raw records (bytes) of one struct into a numpy record array."""
    dt = DTYPES[struct_name]
    if not chunks:
        return np.zeros(0, dtype=dt)
    buf = b"".join(chunks)
    return np.frombuffer(buf, dtype=dt)


def lost_counts(bpf):
    """The probes' loss counters (a per-CPU array), summed over CPUs: records a full ring
    buffer refused ('calls', 'offcpu', 'jbd2') and failed stack captures ('stacks', all of
    them; of those 'stacks_full': the stack map was full, 'stacks_collided': another stack
    held the hash bucket)."""
    table = bpf[b"counters"]
    c = [sum(int(v) for v in table.getvalue(table.Key(i))) for i in range(BUFFERS["NR_COUNTERS"])]
    full, collided = c[BUFFERS["STACKS_FULL"]], c[BUFFERS["STACKS_COLLIDED"]]
    return {"calls": c[BUFFERS["BUF_CALLS"]], "offcpu": c[BUFFERS["BUF_OFFCPU"]], "jbd2": c[BUFFERS["BUF_JBD2"]],
            "stacks": c[BUFFERS["STACKS_LOST"]] + full + collided, "stacks_full": full, "stacks_collided": collided,
            "home_writes": c[BUFFERS["HOME_WRITES_LOST"]], "writers": c[BUFFERS["WRITERS_LOST"]]}
