"""What stands in for kube-proxy on the dev cluster's real Node: two DNATs to loopback, idempotent."""

from __future__ import annotations

from sunk.dev import kubeconf, realnode, slurmconf


def test_pods_reach_the_apiserver_as_the_kubernetes_service_and_slurmrestd_at_the_gateway():
    routes = realnode.service_routes(kubeconf.APISERVER_PORT, slurmconf.SLURMRESTD_PORT)
    assert [(r.address, r.port, r.target_port) for r in routes] == [
        ("10.96.0.1", 443, kubeconf.APISERVER_PORT),
        ("10.88.7.1", slurmconf.SLURMRESTD_PORT, slurmconf.SLURMRESTD_PORT)]
    # The kubernetes Service's address is the first of the apiserver's range, and its certificate names it.
    assert kubeconf.SERVICE_CIDR.startswith("10.96.0.") and "IP:10.96.0.1" in kubeconf.APISERVER_SANS
    assert realnode.POD_GATEWAY == "10.88.7.1" and realnode.POD_SUBNET.startswith("10.88.7.")


def test_the_rules_live_in_a_chain_of_their_own_flushed_and_refilled():
    routes = realnode.service_routes(6443, 6820)
    commands = realnode.service_nat_commands(routes)
    assert commands[0][-2:] == ["-N", realnode.SERVICE_CHAIN] and commands[1][-2:] == ["-F", realnode.SERVICE_CHAIN]
    dnats = [c for c in commands if "DNAT" in c]
    assert len(dnats) == 2
    for command, route in zip(dnats, routes, strict=True):
        assert command[command.index("-d") + 1] == f"{route.address}/32"
        assert command[command.index("--dport") + 1] == str(route.port)
        assert command[-1] == f"127.0.0.1:{route.target_port}"
        assert command[:4] == ["iptables", "-w", "-t", "nat"] and command[4] == "-A"


def test_loopback_is_reachable_from_the_bridge_only_through_the_routes():
    """route_localnet alone would let a Pod reach every loopback service (etcd, slurmctld, MariaDB)."""
    guard = realnode.localnet_guard_commands()
    drop = guard[-1]
    assert drop[drop.index("-i") + 1] == realnode.BRIDGE and drop[drop.index("-d") + 1] == "127.0.0.0/8"
    assert drop[drop.index("--ctstate") - 1] == "!" and drop[drop.index("--ctstate") + 1] == "DNAT"
    assert drop[-2:] == ["-j", "DROP"] and drop[:4] == ["iptables", "-w", "-t", "filter"]


def test_what_the_kubelet_mounted_under_its_root_is_unmounted_deepest_first():
    from pathlib import Path

    text = "\n".join([
        "/dev/vda / ext4 rw 0 0",
        "/dev/vda /c/kubelet-real ext4 rw 0 0",
        "tmpfs /c/kubelet-real/pods/u1/volumes/kubernetes.io~projected/kube-api-access-a tmpfs rw 0 0",
        "tmpfs /c/kubelet-real/pods/u2/volumes/my\\040vol tmpfs rw 0 0",
        "/dev/vda /c/kubelet-realm ext4 rw 0 0",  # (another directory that shares the prefix)
        "proc /c/chroot/proc proc rw 0 0",
    ])
    assert realnode.mounts_under(text, Path("/c/kubelet-real")) == [
        "/c/kubelet-real/pods/u1/volumes/kubernetes.io~projected/kube-api-access-a",
        "/c/kubelet-real/pods/u2/volumes/my vol",
        "/c/kubelet-real",
    ]
