"""Cgroup v2 paths turned into the names people use (jstall.cgroups.name_of), on paths written
by hand after each tool's conventions."""

import pytest

from jstall.cgroups import name_of, names

CID = "0123456789abcdef" * 4                      # a 64-hex container id
UID = "1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718"


@pytest.mark.parametrize("path, expected", [
    ("/", {"kind": "root", "name": "/"}),
    ("/system.slice/nginx.service", {"kind": "systemd", "unit": "nginx.service", "name": "nginx.service"}),
    ("/user.slice/user-1000.slice/user@1000.service", {"kind": "systemd", "unit": "user@1000.service"}),
    ("/user.slice/user-1000.slice/session-3.scope", {"kind": "systemd", "unit": "session-3.scope"}),
    ("/user.slice/user-1000.slice/user@1000.service/app.slice/foo.service", {"unit": "foo.service"}),
    ("/system.slice", {"kind": "systemd", "unit": "system.slice"}),
    (f"/system.slice/docker-{CID}.scope", {"kind": "container", "runtime": "docker", "container": CID,
                                             "name": "docker 0123456789ab"}),
    (f"/docker/{CID}", {"kind": "container", "runtime": "docker", "container": CID}),
    (f"/system.slice/cri-containerd-{CID}.scope", {"kind": "container", "runtime": "containerd"}),
    (f"/machine.slice/libpod-{CID}.scope", {"kind": "container", "runtime": "podman"}),
    (f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/"
     f"cri-containerd-{CID}.scope",
     {"kind": "pod", "pod_uid": UID, "qos": "burstable", "runtime": "containerd", "container": CID,
      "name": f"pod {UID} (burstable) container 0123456789ab"}),
    (f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID.replace('-', '_')}.slice/"
     f"crio-{CID}.scope", {"kind": "pod", "qos": "besteffort", "runtime": "crio"}),
    (f"/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/docker-{CID}.scope",
     {"kind": "pod", "qos": "guaranteed", "pod_uid": UID, "runtime": "docker"}),
    (f"/kubepods/besteffort/pod{UID}/{CID}", {"kind": "pod", "qos": "besteffort", "pod_uid": UID, "container": CID,
                                             "runtime": None}),
    (f"/kubepods/burstable/pod{UID}", {"kind": "pod", "qos": "burstable", "name": f"pod {UID} (burstable)"}),
    (f"/kubepods/pod{UID}/{CID}", {"kind": "pod", "qos": "guaranteed", "pod_uid": UID}),
    ("/kubepods.slice/kubepods-burstable.slice", {"kind": "cgroup", "name": "kubepods (burstable)"}),
    (f"/jstall-test/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/"
     f"cri-containerd-{CID}.scope", {"kind": "pod", "pod_uid": UID, "qos": "burstable", "container": CID}),
    (f"/docker/{CID}/kubepods/besteffort/pod{UID}/{CID}", {"kind": "pod", "qos": "besteffort", "pod_uid": UID}),
    ("/jstall-test/noisy", {"kind": "cgroup", "name": "/jstall-test/noisy"}),
    (None, {"kind": "unknown", "name": "?"}),
])
def test_each_runtimes_path_convention(path, expected):
    got = name_of(path)
    assert {k: got.get(k) for k in expected} == expected, got


def test_a_hex_directory_is_a_container_only_under_a_runtimes_directory():
    assert name_of(f"/build/{CID}")["kind"] == "cgroup"


def test_names_of_a_sessions_cgroups():
    assert names({"1": "/", "7": "/system.slice/app.service", "9": None}) == {
        "1": "/", "7": "app.service", "9": "?"}
