"""A second real kubelet Node on the same machine (``sunk_dev.realnode.Paths(home, node=2)``): nothing that one
kubelet or containerd would take for its own may be shared with the first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sunk_dev import dns, realnode

HOME = Path("/cache")


def _config(node: int) -> dict:
    return json.loads(realnode.kubelet_config(realnode.Paths(HOME, node)))


def _conflist(node: int) -> dict:
    return json.loads(realnode.cni_conflist(realnode.Paths(HOME, node)))["plugins"][0]


def test_the_first_node_is_what_it_always_was():
    first = realnode.Paths(HOME)
    assert (first.node_name, first.bridge, first.pod_subnet) == (realnode.NODE_NAME, realnode.BRIDGE,
                                                                 realnode.POD_SUBNET)
    assert (first.kubelet_port, first.healthz_port) == (realnode.KUBELET_PORT, realnode.KUBELET_HEALTHZ_PORT)
    assert first.base == HOME / "run" / "realnode" and first.kubelet_root == HOME / "kubelet-real"
    assert first.containerd_state == Path("/run/sunk-dev-containerd")
    config = _config(1)
    assert "cgroupRoot" not in config and "podLogsDir" not in config  # (its kubelet is not restarted by this)
    assert not any(a.startswith("--cert-dir") for a in realnode.kubelet_argv(Path("kubelet"), first, Path("k")))


def test_two_nodes_share_no_name_port_directory_socket_bridge_subnet_or_cgroup_root():
    first, second = realnode.Paths(HOME, 1), realnode.Paths(HOME, 2)
    for attribute in ("node_name", "base", "containerd_root", "containerd_state", "socket", "containerd_config",
                      "runc_wrapper", "cni_conf_dir", "kubelet_config", "kubelet_root", "bridge", "pod_subnet",
                      "kubelet_port", "healthz_port", "cgroup_root", "pod_logs_dir"):
        assert getattr(first, attribute) != getattr(second, attribute), attribute
    assert first.images_dir == second.images_dir  # (the archives made once serve both)
    config = _config(2)
    assert (config["port"], config["healthzPort"]) == (second.kubelet_port, second.healthz_port)
    assert config["cgroupRoot"] == "/sunk-real-2" and config["podLogsDir"] == str(second.pod_logs_dir)
    assert _conflist(2)["bridge"] == "sunkbr1"
    assert _conflist(2)["ipam"]["ranges"] == [[{"subnet": "10.88.8.0/24"}]]
    assert _conflist(2)["ipam"]["dataDir"] != _conflist(1)["ipam"]["dataDir"]
    argv = realnode.kubelet_argv(Path("kubelet"), second, Path("k"))
    assert "--hostname-override=realnode2" in argv and f"--cert-dir={second.kubelet_root / 'pki'}" in argv
    assert f"--root-dir={second.kubelet_root}" in argv
    assert str(second.socket) in realnode.containerd_config(second)
    assert str(first.socket) not in realnode.containerd_config(second)


def test_there_is_no_third_node():
    with pytest.raises(ValueError):
        realnode.Paths(HOME, 3)


def test_cluster_dns_answers_the_pods_of_both_nodes():
    text = dns.corefile("192.0.2.7", Path("/k"), " ".join(realnode.POD_SUBNETS))
    assert text.count("allow net 10.88.7.0/24 10.88.8.0/24 127.0.0.0/8") == 2


def _hierarchies(root: Path, names: tuple[str, ...]) -> None:
    for name in names:
        (root / name).mkdir(parents=True)
    (root / "cpuset" / "cpuset.cpus").write_text("0-1\n")
    (root / "cpuset" / "cpuset.mems").write_text("0\n")


def test_the_second_nodes_cgroup_root_is_made_in_every_v1_hierarchy_with_its_parents_cpuset(tmp_path):
    _hierarchies(tmp_path, ("cpuset", "memory", "pids", "systemd"))
    (tmp_path / "cpu").symlink_to(tmp_path / "memory")  # (cpu -> cpu,cpuacct: made through its target)
    # (the kernel makes a child's cpuset files, empty; here the test does)
    (tmp_path / "cpuset" / "sunk-real-2").mkdir()
    for setting in ("cpuset.cpus", "cpuset.mems"):
        (tmp_path / "cpuset" / "sunk-real-2" / setting).write_text("")
    realnode.ensure_cgroup_root(realnode.Paths(HOME, 2), tmp_path)
    for name in ("cpuset", "memory", "pids", "systemd"):
        assert (tmp_path / name / "sunk-real-2").is_dir(), name
    assert (tmp_path / "cpuset" / "sunk-real-2" / "cpuset.cpus").read_text() == "0-1\n"
    assert (tmp_path / "cpuset" / "sunk-real-2" / "cpuset.mems").read_text() == "0\n"
    realnode.ensure_cgroup_root(realnode.Paths(HOME, 2), tmp_path)  # (again: nothing changes, nothing fails)


def test_on_cgroup_v2_the_root_is_one_directory_and_the_first_node_needs_none(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    realnode.ensure_cgroup_root(realnode.Paths(HOME, 1), tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["cgroup.controllers"]
    realnode.ensure_cgroup_root(realnode.Paths(HOME, 2), tmp_path)
    assert (tmp_path / "sunk-real-2").is_dir()


def test_kube_proxy_opens_no_nodeport_masquerades_and_leaves_the_hosts_sysctls():
    argv = realnode.kube_proxy_argv(Path("/bin/kube-proxy"), Path("/k/admin.kubeconfig"))
    assert "--proxy-mode=iptables" in argv and "--masquerade-all" in argv
    assert f"--nodeport-addresses={realnode.NO_NODEPORT_ADDRESS}" in argv
    assert "--iptables-localhost-nodeports=false" in argv  # (else route_localnet on every interface)
    assert {"--conntrack-max-per-core=0", "--conntrack-min=0"} <= set(argv)
    assert all(a.split("=", 1)[1].startswith("127.0.0.1:") for a in argv if a.startswith(("--healthz", "--metrics")))
