"""The lab's scratch directory and its run directories: the marker each run writes (what it
set up, for cleanup after a crash), the scratch directory's own marker, and the free-space check."""

import json
import os

from jstall.errors import JstallError

from jstall.units import format_size

DEFAULT_SCRATCH = "/var/tmp/jstall-lab"
MARKER = "jstall-lab.json"
SCRATCH_MARKER = ".jstall-lab-scratch"
#: space kept free beyond the images on the scratch directory's filesystem (bytes)
FREE_MARGIN = 64 << 20


def read_marker(run_dir):
    try:
        with open(os.path.join(run_dir, MARKER)) as f:
            m = json.load(f)
        return m if isinstance(m, dict) and m.get("format") == "jstall-lab-scratch" else None
    except (OSError, ValueError):
        return None


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def prepare_scratch(scratch_dir=None, create=True):
    """Create (or check) the scratch directory; refuse a directory holding files the lab did
    not make. With create=False only check (nothing is created)."""
    base = os.path.abspath(scratch_dir or DEFAULT_SCRATCH)
    if os.path.lexists(base):
        if not os.path.isdir(base):
            raise JstallError(f"--scratch {base}: not a directory; give a new or empty directory")
        entries = os.listdir(base)
        if entries and SCRATCH_MARKER not in entries:
            raise JstallError(f"--scratch {base}: holds files the lab did not create; give a new or empty directory")
    if not create:
        return base
    if not os.path.isdir(base):
        os.makedirs(base, exist_ok=True)
    marker = os.path.join(base, SCRATCH_MARKER)
    if not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write("jstall lab scratch directory: run directories with a jstall-lab.json marker\n")
    return base


def check_free_space(base, needed):
    """Refuse when the scratch directory's filesystem (that of its nearest existing parent,
    before it is created) has less than needed + margin bytes free."""
    where = base
    while not os.path.isdir(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    st = os.statvfs(where)
    free = st.f_bavail * st.f_frsize
    if free < needed + FREE_MARGIN:
        raise JstallError(f"{base} has {format_size(free // (1 << 20) << 20)} free; the images need "
                          f"{format_size(needed)} plus {format_size(FREE_MARGIN)} spare: free space there, choose "
                          "another --scratch, or give a smaller --fs-size/--journal-size")
