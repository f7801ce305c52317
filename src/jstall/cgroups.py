"""Names a person knows for cgroup v2 paths: a systemd unit, a container, a Kubernetes pod.

A task's cgroup id (``bpf_get_current_cgroup_id()``) is the inode number of its directory in
the cgroup2 mount; ``paths_of`` finds the directories of the ids a session saw (read at
record time, kept in the session's metadata ``cgroups``), and ``name_of`` reads each path by
the conventions of the tool that made it:

- systemd: the innermost unit (``foo.service``, ``user@1000.service``, ``session-3.scope``);
- container runtimes under systemd: ``docker-<id>.scope``, ``cri-containerd-<id>.scope``,
  ``crio-<id>.scope``, ``libpod-<id>.scope`` (podman); with the cgroupfs driver
  ``/docker/<id>``;
- Kubernetes (kubelet): ``kubepods[.slice]``, then the QoS class (``besteffort``,
  ``burstable``; a guaranteed pod sits directly under kubepods), then ``pod<uid>`` (under
  systemd ``kubepods-<qos>-pod<uid with _ for ->.slice``), then the container's directory.

Pure functions and one reader; no pandas.

    >>> name_of("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1f2e_3d4c.slice/"
    ...         "cri-containerd-" + "0123456789abcdef" * 4 + ".scope")["name"]
    'pod 1f2e-3d4c (burstable) container 0123456789ab'
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

#: where the cgroup v2 hierarchy is mounted: alone at /sys/fs/cgroup, or beside the v1
#: controllers at /sys/fs/cgroup/unified (systemd's hybrid layout)
ROOTS = ("/sys/fs/cgroup/unified", "/sys/fs/cgroup")
#: container runtimes' scope prefixes under systemd (<prefix>-<id>.scope) -> runtime
SCOPE_RUNTIMES = (("cri-containerd", "containerd"), ("crio-conmon", "crio-conmon"),
                  ("crio", "crio"), ("docker", "docker"), ("libpod-conmon", "podman-conmon"),
                  ("libpod", "podman"))
QOS_CLASSES = ("besteffort", "burstable")
SYSTEMD_SUFFIXES = (".service", ".scope", ".slice", ".socket", ".mount", ".swap")
SHORT_ID = 12   # container ids shown as docker ps does

_HEX_ID = re.compile(r"^[0-9a-f]{32,64}$")
_POD = re.compile(r"^pod([0-9a-fA-F_-]+)$")
_SYSTEMD_POD = re.compile(
    r"^(?:kubelet-)?kubepods(?:-(besteffort|burstable))?-pod([0-9a-fA-F_]+)\.slice$")


def root() -> str | None:
    """The cgroup v2 mount point (ROOTS), or None when there is none."""
    for r in ROOTS:
        if os.path.exists(os.path.join(r, "cgroup.procs")) and _is_cgroup2(r):
            return r
    return None


def _is_cgroup2(path):
    try:
        with open("/proc/self/mounts") as f:
            return any(line.split()[1] == path and line.split()[2] == "cgroup2" for line in f)
    except OSError:
        return False


def paths_of(ids: Iterable[int], top: str | None = None) -> dict[str, str]:
    """{str(cgroup id): path under the cgroup v2 mount ('/' for its root)} for the ``ids``
    found (a cgroup removed since has none)."""
    top = top or root()
    want, found = {int(i) for i in ids}, {}
    if not want or top is None:
        return found
    for here, _, _ in os.walk(top):
        try:
            ino = os.stat(here).st_ino
        except OSError:
            continue
        if ino in want:
            found[str(ino)] = "/" if here == top else "/" + os.path.relpath(here, top)
            if len(found) == len(want):
                break
    return found


def _container(part):
    """(runtime, id) of one path component that names a container, else None."""
    if part.endswith(".scope"):
        stem = part[: -len(".scope")]
        for prefix, runtime in SCOPE_RUNTIMES:
            if stem.startswith(prefix + "-") and _HEX_ID.match(stem[len(prefix) + 1:]):
                return runtime, stem[len(prefix) + 1:]
    if _HEX_ID.match(part):
        return None, part
    return None


def name_of(path: str | None) -> dict:
    """What the cgroup at ``path`` (under the cgroup v2 mount) is: a dict with ``kind``
    ('root', 'pod', 'container', 'systemd' or 'cgroup'), ``name`` (one line a person reads),
    and where known ``unit`` (systemd), ``runtime`` and ``container`` (the full id),
    ``pod_uid`` and ``qos`` (Kubernetes: 'guaranteed', 'burstable' or 'besteffort').
    ``path`` None (a cgroup gone before it was read) gives kind 'unknown'."""
    if path is None:
        return {"kind": "unknown", "name": "?"}
    parts = [p for p in path.strip("/").split("/") if p]
    if not parts:
        return {"kind": "root", "name": "/"}
    out = {}
    # Kubernetes: kubepods[.slice] / [qos] / pod<uid> / container, at the top or nested (a
    # kubelet in a container: /docker/<id>/kubepods/..., kind's .../kubelet.slice/...)
    kube = [i for i, p in enumerate(parts)
            if p in ("kubepods", "kubepods.slice", "kubelet-kubepods.slice")]
    if kube:
        qos, uid, rest = "guaranteed", None, parts[kube[0] + 1:]
        for i, p in enumerate(rest):
            q = re.match(r"^(?:kubelet-)?kubepods-(besteffort|burstable)\.slice$", p)
            if p in QOS_CLASSES or q:
                qos = q.group(1) if q else p
                continue
            m = _POD.match(p) if not p.endswith(".slice") else None
            ms = _SYSTEMD_POD.match(p)
            if m or ms:
                uid = (m.group(1) if m else ms.group(2)).replace("_", "-")
                if ms and ms.group(1):
                    qos = ms.group(1)
                rest = rest[i + 1:]
                break
        if uid:
            out.update(kind="pod", pod_uid=uid, qos=qos)
            name = f"pod {uid} ({qos})"
            c = _container(rest[0]) if rest else None
            if c:
                out.update(runtime=c[0], container=c[1])
                name += f" container {c[1][:SHORT_ID]}"
            out["name"] = name
            return out
        name = "kubepods" + (f" ({qos})" if qos != "guaranteed" else "")
        out.update(kind="cgroup", name=name, qos=qos)
        return out
    # a container: a runtime's scope anywhere, or /docker/<id> (the cgroupfs driver)
    for i, p in enumerate(parts):
        c = _container(p)
        if c and (c[0] or (i > 0 and parts[i - 1] in ("docker", "lxc", "containerd"))):
            runtime = c[0] or parts[i - 1]
            return {"kind": "container", "runtime": runtime, "container": c[1],
                    "name": f"{runtime} {c[1][:SHORT_ID]}"}
    # systemd: the innermost unit
    for p in reversed(parts):
        if p.endswith(SYSTEMD_SUFFIXES) and (p.endswith(".slice") is False or p == parts[-1]):
            return {"kind": "systemd", "unit": p, "name": p}
    return {"kind": "cgroup", "name": path}


def names(paths: dict | None) -> dict[str, str]:
    """{cgroup id: name_of(path)['name']} of a session's metadata ``cgroups`` ({id: path})."""
    return {str(k): name_of(v)["name"] for k, v in (paths or {}).items()}
