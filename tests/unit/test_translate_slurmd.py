"""The one mapping Slurm node -> slurmd Pod -> Node (sunk/translate/slurmd.py)."""

from __future__ import annotations

from sunk.translate.slurmd import chosen, hosting, k8s_node_name, node_of, placement_view, serving, slurm_node_name


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


def test_only_a_bound_pod_not_being_deleted_serves_and_is_indexed():
    assert serving(pod("x", "worker-2", hostname="g-3-17")) == ["g-3-17"]
    assert hosting(pod("x", "worker-2", hostname="g-3-17")) == ["worker-2"]
    for unusable in (pod("unbound", None), pod("gone", "worker-9", deleting=True)):
        assert serving(unusable) == [] and hosting(unusable) == []


def test_chosen_is_the_newest_then_the_later_node_whatever_the_order():
    old = pod("old", "worker-3", created="2030-01-01T00:00:00Z")
    new = pod("new", "worker-4", created="2030-01-02T00:00:00Z")
    tie_a, tie_b = pod("a", "worker-5"), pod("b", "worker-6")
    assert chosen([old, new]) is new and chosen([new, old]) is new
    assert chosen([tie_a, tie_b]) is tie_b and chosen([tie_b, tie_a]) is tie_b
    assert chosen([]) is None


def test_the_placement_view_ignores_annotations_labels_and_status():
    before = pod("x", "worker-1", hostname="g-1")
    after = {**before, "metadata": {**before["metadata"], "annotations": {"sunk.coreweave.com/lock": "locked"},
                                    "labels": {"a": "b"}}, "status": {"phase": "Running"}}
    assert placement_view(after) == placement_view(before)
    assert placement_view(pod("x", "worker-2", hostname="g-1")) != placement_view(before)
    assert placement_view(pod("x", "worker-1", hostname="g-2")) != placement_view(before)
    assert placement_view(pod("x", "worker-1", hostname="g-1", deleting=True)) != placement_view(before)
    assert placement_view(pod("x", None, hostname="g-1")) != placement_view(before)
