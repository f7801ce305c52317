"""BTF offset lookup: hand-built type graphs, and the running kernel's own BTF."""

import os

import pytest

from jstall.errors import JstallError
from jstall.probes import btf

# struct outer { int a; union { long b; struct { char c; int d; }; }; struct inner *p; }
TYPES = [
    {"id": 1, "kind": "INT", "name": "int", "size": 4},
    {"id": 2, "kind": "INT", "name": "long", "size": 8},
    {"id": 3, "kind": "INT", "name": "char", "size": 1},
    {"id": 4, "kind": "STRUCT", "name": "", "size": 8, "members": [
        {"name": "c", "type_id": 3, "bits_offset": 0},
        {"name": "d", "type_id": 7, "bits_offset": 32},
    ]},
    {"id": 5, "kind": "UNION", "name": "", "size": 8, "members": [
        {"name": "b", "type_id": 2, "bits_offset": 0},
        {"name": "", "type_id": 4, "bits_offset": 0},
    ]},
    {"id": 6, "kind": "STRUCT", "name": "outer", "size": 24, "members": [
        {"name": "a", "type_id": 1, "bits_offset": 0},
        {"name": "", "type_id": 5, "bits_offset": 64},
        {"name": "p", "type_id": 8, "bits_offset": 128},
        {"name": "bits", "type_id": 1, "bits_offset": 161},
    ]},
    {"id": 7, "kind": "TYPEDEF", "name": "s32", "type_id": 9},
    {"id": 8, "kind": "PTR", "name": "", "type_id": 6},
    {"id": 9, "kind": "VOLATILE", "name": "", "type_id": 1},
]


def test_members_through_anonymous_unions_typedefs_and_pointers():
    types = btf.BtfTypes(TYPES)
    assert types.member("outer", "a") == (0, 4)
    assert types.member("outer", "b") == (8, 8)
    assert types.member("outer", "c") == (8, 1)
    assert types.member("outer", "d") == (12, 4)  # s32 -> volatile int
    assert types.member("outer", "p") == (16, 8)


def test_missing_struct_member_and_bitfield_are_refused():
    types = btf.BtfTypes(TYPES)
    with pytest.raises(KeyError):
        types.member("nosuch", "a")
    with pytest.raises(KeyError):
        types.member("outer", "zz")
    with pytest.raises(KeyError):
        types.member("outer", "bits")
    with pytest.raises(JstallError, match="not supported"):
        btf.probe_defines(types, {"X": ("outer", "zz")})


def test_defines_carry_offset_and_size():
    d = btf.probe_defines(btf.BtfTypes(TYPES), {"OUTER_D": ("outer", "d")})
    assert d == {"OUTER_D_OFF": 12, "OUTER_D_SIZE": 4}


def test_missing_btf_file_names_the_fix(tmp_path):
    with pytest.raises(JstallError, match="CONFIG_DEBUG_INFO_BTF"):
        btf.BtfTypes.load(str(tmp_path / "vmlinux"))


@pytest.mark.skipif(not os.path.exists(btf.VMLINUX_BTF), reason="no kernel BTF")
def test_running_kernel_has_every_field_the_probes_read():
    types = btf.BtfTypes.load()
    d = btf.probe_defines(types)
    assert set(d) == {f"{n}_{s}" for n in btf.FIELDS for s in ("OFF", "SIZE")}
    # Pointers are 8 bytes; j_total_len and t_tid are 32-bit; j_free is unsigned long.
    assert d["J_FS_DEV_SIZE"] == d["J_RUNNING_SIZE"] == d["SB_FS_INFO_SIZE"] == 8
    assert d["J_TOTAL_LEN_SIZE"] == d["T_TID_SIZE"] == d["BDEV_DEV_SIZE"] == 4
    assert d["J_FREE_SIZE"] == 8
    # Members of one struct have distinct offsets inside it.
    journal = [d[f"{n}_OFF"] for n, (s, _) in btf.FIELDS.items() if s == "journal_s"]
    assert len(set(journal)) == len(journal)


# A module's split BTF: ids continue vmlinux's (here after 9); two modules' ids overlap.
EXT4 = [
    {"id": 10, "kind": "STRUCT", "name": "ext4_sb_info", "size": 16, "members": [
        {"name": "s_journal", "type_id": 11, "bits_offset": 64},
    ]},
    {"id": 11, "kind": "PTR", "name": "", "type_id": 6},       # a pointer to vmlinux's struct outer
    {"id": 12, "kind": "TYPEDEF", "name": "btf_trace_ext4_journal_start", "type_id": 11},
]
JBD2 = [
    {"id": 10, "kind": "STRUCT", "name": "journal_s", "size": 32, "members": [
        {"name": "j_free", "type_id": 2, "bits_offset": 192},   # vmlinux's long
    ]},
    {"id": 11, "kind": "TYPEDEF", "name": "btf_trace_jbd2_checkpoint", "type_id": 1},
]


def test_module_split_btf_resolves_in_its_own_types_then_vmlinux():
    types = btf.BtfTypes(TYPES, {"ext4": EXT4, "jbd2": JBD2})
    assert types.modules == ["ext4", "jbd2"]
    assert types.member("ext4_sb_info", "s_journal") == (8, 8)
    assert types.member("journal_s", "j_free") == (24, 8)   # id 2 is vmlinux's long, not a module's
    assert types.member("outer", "d") == (12, 4)
    ids = types.located_type_ids("TYPEDEF", ["btf_trace_ext4_journal_start", "btf_trace_jbd2_checkpoint", "s32"])
    assert ids == {"btf_trace_ext4_journal_start": (12, "ext4"), "btf_trace_jbd2_checkpoint": (11, "jbd2"),
                   "s32": (7, None)}
    assert types.type_ids("TYPEDEF", ["btf_trace_jbd2_checkpoint", "s32"]) == {"s32": 7}


def test_a_module_not_loaded_is_named_with_the_fix():
    types = btf.BtfTypes(TYPES)
    with pytest.raises(JstallError, match=r"module ext4 is not loaded .*modprobe ext4"):
        btf.probe_defines(types, {"X": ("ext4_sb_info", "s_journal")})


@pytest.mark.skipif(not os.path.exists(btf.VMLINUX_BTF), reason="no kernel BTF")
def test_load_reads_the_split_btf_of_the_modules_present(tmp_path):
    """A directory laid out as /sys/kernel/btf with vmlinux only: no module is read (this
    kernel has ext4 and jbd2 built in; the guest tests read real module BTF)."""
    os.symlink(btf.VMLINUX_BTF, tmp_path / "vmlinux")
    types = btf.BtfTypes.load(str(tmp_path / "vmlinux"))
    assert types.modules == [] and types.member("journal_s", "j_free")[1] == 8


def test_facts_are_read_once_per_btf_and_question(tmp_path, monkeypatch):
    """facts() reads the BTF (here: hand-built types behind a fake bpftool dump) the first
    time, answers the same question on the same bytes from its cache, and reads again when
    the BTF's bytes or the question change."""
    (tmp_path / "vmlinux").write_bytes(b"btf one")
    reads = []

    def load(path, modules, btf_dir):
        reads.append(open(path, "rb").read())
        return btf.BtfTypes(TYPES)

    monkeypatch.setattr(btf.BtfTypes, "load", staticmethod(load))
    kw = dict(fields={"OUTER_D": ("outer", "d")}, path=str(tmp_path / "vmlinux"), cache_dir=str(tmp_path / "cache"),
              machine="x86_64")
    first = btf.facts(["s32"], ["none"], **kw)
    assert first == {"defines": {"OUTER_D_OFF": 12, "OUTER_D_SIZE": 4, "SYSCALL_ARGS": 0, "ARG0_OFF": 0, "ARG1_OFF": 0,
                                 "ARG3_OFF": 0, "SYSCALL_NR_OFF": 0, "SYSCALL_CONTEXT": 0, "SYSCALL_RET_OFF": 0},
                     "typedefs": {"s32": [7, None]}, "funcs": {}}
    assert btf.facts(["s32"], ["none"], **kw) == first and len(reads) == 1
    btf.facts(["s32", "other"], ["none"], **kw)               # another question
    (tmp_path / "vmlinux").write_bytes(b"btf two")              # another kernel
    btf.facts(["s32"], ["none"], **kw)
    assert reads == [b"btf one", b"btf one", b"btf two"]
    # a missing struct is an error each time, never a cached answer
    bad = dict(kw, fields={"X": ("nosuch", "y")})
    for _ in range(2):
        with pytest.raises(JstallError, match="nosuch"):
            btf.facts([], [], **bad)
    assert len(reads) == 5


@pytest.mark.skipif(not os.path.exists(btf.VMLINUX_BTF), reason="no kernel BTF")
def test_facts_from_the_cache_equal_the_kernels_own(tmp_path):
    names = ["btf_trace_sched_switch", "btf_trace_jbd2_checkpoint"]
    read = btf.facts(names, ["__x64_sys_openat"], cache_dir=str(tmp_path))
    assert read == btf.facts(names, ["__x64_sys_openat"], cache_dir=str(tmp_path)) and len(os.listdir(tmp_path)) == 1
    types = btf.BtfTypes.load()
    assert read["defines"]["J_FREE_OFF"] == types.member("journal_s", "j_free")[0]
    located = types.located_type_ids("TYPEDEF", names)
    assert read["typedefs"]["btf_trace_sched_switch"] == list(located["btf_trace_sched_switch"])
