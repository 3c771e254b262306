"""What stands in for kube-proxy on the dev cluster's real Node: two DNATs to loopback, idempotent."""

from __future__ import annotations

import os

from sunk_dev import kubeconf, realnode, slurmconf


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


def test_mount_points_are_decoded_as_the_kernel_escapes_them_utf8_and_all():
    from pathlib import Path

    root = Path("/c/kubelet-real")
    text = "\n".join([
        "tmpfs /c/kubelet-real/pods/u1/volumes/caf\u00e9 tmpfs rw 0 0",  # (UTF-8 as is: the kernel leaves it)
        "tmpfs /c/kubelet-real/pods/u2/a\\040b\\011c\\134d tmpfs rw 0 0",
    ])
    assert realnode.mounts_under(text, root) == [
        "/c/kubelet-real/pods/u1/volumes/caf\u00e9",
        "/c/kubelet-real/pods/u2/a b\tc\\d",
    ]
    # Bytes that are not UTF-8 come back as the same bytes when the path is handed to the OS.
    odd = b"tmpfs /c/kubelet-real/x\xff tmpfs rw 0 0".decode("utf-8", "surrogateescape")
    assert [os.fsencode(p) for p in realnode.mounts_under(odd, root)] == [b"/c/kubelet-real/x\xff"]


def test_a_stacked_mount_is_unmounted_once_per_mount_the_later_first():
    from pathlib import Path

    text = "\n".join([
        "/dev/vda /c/kubelet-real ext4 rw 0 0",
        "tmpfs /c/kubelet-real/pods/u1/vol tmpfs rw 0 0",
        "/dev/vdb /c/kubelet-real/pods/u1/vol ext4 ro 0 0",
        "/dev/vda /c/kubelet-real ext4 rw 0 0",
    ])
    assert realnode.mounts_under(text, Path("/c/kubelet-real")) == [
        "/c/kubelet-real/pods/u1/vol", "/c/kubelet-real/pods/u1/vol", "/c/kubelet-real", "/c/kubelet-real"]


def test_a_sibling_that_shares_the_prefix_is_not_under_the_root():
    from pathlib import Path

    text = "\n".join(["/dev/vda /a/bc ext4 rw 0 0", "/dev/vda /a/b/c ext4 rw 0 0", "/dev/vda /a/b ext4 rw 0 0"])
    assert realnode.mounts_under(text, Path("/a/b")) == ["/a/b/c", "/a/b"]
    assert realnode.mounts_under(text, Path("/a/b/")) == ["/a/b/c", "/a/b"]


def test_the_kubelet_root_is_left_mounted_while_a_kubelet_runs_on_it():
    from pathlib import Path

    root = Path("/c/kubelet-real")
    others = [["/sbin/init"], ["containerd", "--config", "/c/run/realnode/containerd.toml"], []]
    kubelet = realnode.kubelet_argv(Path("/c/bin/kubelet"), realnode.Paths(Path("/c")), Path("/c/kubeconfig"))
    assert realnode.kubelet_uses_root([*others, kubelet], root)
    assert realnode.kubelet_uses_root([["kubelet", "--root-dir", "/c/kubelet-real/"]], root)
    assert not realnode.kubelet_uses_root(others, root)
    assert not realnode.kubelet_uses_root([["kubelet", "--root-dir=/c/kubelet-realm"]], root)
    assert not realnode.kubelet_uses_root([["kubelet", "--root-dir=/var/lib/kubelet"]], root)
    assert not realnode.kubelet_uses_root([["kubelet", "--root-dir"]], root)


def test_unmounting_the_kubelet_root_does_nothing_while_its_kubelet_runs(monkeypatch):
    from pathlib import Path

    paths = realnode.Paths(Path("/c"))
    unmounted: list[list[str]] = []
    monkeypatch.setattr(realnode.subprocess, "run", lambda argv, **kw: unmounted.append(argv))
    monkeypatch.setattr(realnode, "mounts_under", lambda text, root: [str(root)])
    monkeypatch.setattr(realnode, "process_cmdlines", lambda: [["kubelet", f"--root-dir={paths.kubelet_root}"]])
    realnode.unmount_kubelet_root(paths)
    assert unmounted == []
    monkeypatch.setattr(realnode, "process_cmdlines", lambda: [["kubelet", "--root-dir=/var/lib/kubelet"]])
    realnode.unmount_kubelet_root(paths)
    assert unmounted == [["umount", "-l", str(paths.kubelet_root)]]


def test_the_network_namespaces_of_removed_sandboxes_go_and_no_other(tmp_path):
    """A sandbox removed through ctr keeps its namespace and its Pod address (no CNI teardown); the next Pod
    given that address shared it with the dead one. Only namespaces holding an address of the Pod subnet go."""
    import subprocess
    import uuid

    pod_ns, other_ns = f"cni-test-{uuid.uuid4().hex[:8]}", f"other-test-{uuid.uuid4().hex[:8]}"
    try:
        for name, address in ((pod_ns, "10.88.7.250/24"), (other_ns, "10.99.0.1/24")):
            subprocess.run(["ip", "netns", "add", name], check=True)
            subprocess.run(["ip", "-n", name, "addr", "add", address, "dev", "lo"], check=True)
        removed = realnode.remove_pod_network_namespaces()
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
        assert pod_ns in removed and other_ns not in removed
        assert pod_ns not in listed and other_ns in listed
    finally:
        for name in (pod_ns, other_ns):
            subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)
