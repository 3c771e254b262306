"""The one mapping Slurm node -> slurmd Pod -> Node (sunk/translate/slurmd.py)."""

from __future__ import annotations

from sunk.translate.slurmd import k8s_node_name, node_of, slurm_node_name


def pod(name: str, node: str | None = "worker-1", *, hostname: str | None = None, deleting: bool = False,
        created: str = "2030-01-01T00:00:00Z") -> dict:
    meta: dict = {"name": name, "namespace": "slurm", "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = "2030-01-01T00:00:09Z"
    spec: dict = {}
    if node:
        spec["nodeName"] = node
    if hostname:
        spec["hostname"] = hostname
    return {"metadata": meta, "spec": spec}


def test_the_hostname_names_the_slurm_node_else_the_pod_name():
    assert slurm_node_name(pod("node1")) == "node1"
    assert slurm_node_name(pod("slurmd-abc", hostname="g-3-17")) == "g-3-17"
    assert k8s_node_name(pod("node1")) == "worker-1"
    assert k8s_node_name(pod("node1", None)) is None


def test_node_of_skips_unbound_and_deleting_pods_and_takes_the_newest():
    pods = [
        pod("node1", "worker-1"),
        pod("x", "worker-2", hostname="g-3-17"),
        pod("unbound", None),
        pod("gone", "worker-9", deleting=True),
        pod("old", "worker-3", hostname="g-4-1", created="2030-01-01T00:00:00Z"),
        pod("new", "worker-4", hostname="g-4-1", created="2030-01-02T00:00:00Z"),
    ]
    assert node_of(pods) == {"node1": "worker-1", "g-3-17": "worker-2", "g-4-1": "worker-4"}
    assert node_of(reversed(pods)) == node_of(pods)
