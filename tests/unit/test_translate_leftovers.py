"""What sunk-syncer release-nodes takes back at uninstall: which drains, which taints, which annotations."""

from __future__ import annotations

from typing import Any

import pytest

from sunk.model import names
from sunk.model.slurm import Node
from sunk.translate import drains, nodestate, poddown
from sunk.translate.leftovers import (
    drains_kept,
    drains_to_lift,
    holds_of,
    hosts,
    keeps,
    lifts,
    lock_annotations,
    lock_tainted,
    nodes_to_unlock,
)

# The drains of sunk's lock: they exist only for the lock, which goes with sunk.
LOCKS = [
    drains.HookUnreachableDrain(43, "HTTP 000, 44 attempts").reason(),
    drains.LockTimeoutDrain(44, 90, "worker-1", ("apps/guarded",), strict=True).reason(),
    drains.LockTimeoutDrain(45, 30, "", (), state="pending").reason(),
]
# sunk's drains whose cause outlives it: a Pod that may still run on the node, a Node taken out of
# service, a slurmd Pod not Ready or gone, a node pending deletion. They stand.
STANDING = [
    drains.PlaceholderDrain("team-a", "train-0", 42).reason(),
    drains.GangPlaceholderDrain("team-a", "job/0f1e2d3c-0000-4000-8000-00000000000a", 47).reason(),
    drains.StuckPodDrain("team-a", "train-0", "1f2e3d4c-0000-4000-8000-000000000001", "worker-1", 46).reason(),
    poddown.missing_reason("slurm", "node1"),
    nodestate.pending_deletion_reason("slurm/node1", "scale down"),
    "k8s: node worker-1 is cordoned: disk",
    "k8s: slurmd pod slurm/node1 is not ready",
]
# What sunk never lifts: a person's, NHC's, the prolog's unprefixed refusal (an operator resumes it), and
# reasons that merely contain the prefix.
OTHERS = [
    "bad gpu",
    "NHC: check_hw_ib failed",
    "verify-undrain: NHC",
    "sunk-lock: job 7: the hook API refused: 403 token",
    "maintenance k8s: later",
    " k8s: leading space",
    "K8S: upper case",
    "",
]


def slurm_node(name: str = "node1", state: str = "IDLE+DRAIN", reason: str = "") -> Node:
    return Node(name, state=state, reason=reason)


@pytest.mark.parametrize("reason", LOCKS)
def test_the_drains_of_sunks_lock_are_lifted(reason):
    assert drains.is_sunks(reason)
    assert lifts(slurm_node(reason=reason)) and not keeps(slurm_node(reason=reason))
    assert lifts(slurm_node(state="ALLOCATED+DRAIN", reason=reason))  # draining: the running job keeps running
    assert lifts(slurm_node(state="DOWN+DRAIN", reason=reason))  # UNDRAIN: DOWN stays, ReturnToService decides


@pytest.mark.parametrize("reason", STANDING)
def test_sunks_drains_whose_cause_outlives_it_stand(reason):
    """Lifting them would let Slurm start jobs on a machine taken out of service or still in use."""
    assert drains.is_sunks(reason)
    assert not lifts(slurm_node(reason=reason)) and keeps(slurm_node(reason=reason))


@pytest.mark.parametrize("reason", OTHERS)
def test_a_reason_sunk_did_not_write_is_never_lifted(reason):
    assert not drains.is_sunks(reason)
    assert not lifts(slurm_node(reason=reason)) and not keeps(slurm_node(reason=reason))


@pytest.mark.parametrize("state", ["IDLE", "DOWN", "ALLOCATED", "DOWN+NOT_RESPONDING"])
def test_a_node_that_is_not_drained_has_no_drain_to_lift(state):
    """A DOWN node keeps the reason it was set DOWN with (``k8s: slurmd pod ... deleted``): that is no drain,
    and Slurm's ReturnToService resumes it when its slurmd talks again."""
    assert not lifts(slurm_node(state=state, reason=poddown.missing_reason("slurm", "node1")))
    assert not lifts(None)  # gone since the decision


def test_the_drains_to_lift_come_from_one_list_by_name_among_the_releases_nodes():
    nodes = [slurm_node("node3", reason=LOCKS[0]), slurm_node("node1", reason="bad gpu"),
             slurm_node("node2", reason=LOCKS[-1]), slurm_node("node4", "IDLE", ""),
             slurm_node("node5", reason="sunk-lock: job 7: refused"), slurm_node("node6", reason=STANDING[0])]
    assert [n.name for n in drains_to_lift(nodes)] == ["node2", "node3"]
    assert [n.name for n in drains_to_lift(nodes, among={"node3", "node6"})] == ["node3"]
    assert [n.name for n in drains_kept(nodes)] == ["node6"]
    assert drains_kept(nodes, among={"node3"}) == [] and drains_to_lift([]) == []


# ---- Kubernetes ------------------------------------------------------------------------------------


def k8s_node(name: str, *taints: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"taints": list(taints)}}


LOCK = {"key": names.LOCK_KEY, "value": "true", "effect": "NoSchedule"}
LOCK_NOEXECUTE = {"key": names.LOCK_KEY, "value": "true", "effect": "NoExecute"}
OTHER = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


def test_the_lock_taint_with_any_effect_and_nothing_else():
    assert lock_tainted(k8s_node("a", LOCK)) and lock_tainted(k8s_node("a", OTHER, LOCK_NOEXECUTE))
    assert lock_tainted({"spec": {"taints": [{"key": names.LOCK_KEY}]}})
    assert not lock_tainted(k8s_node("a", OTHER)) and not lock_tainted(k8s_node("a")) and not lock_tainted({})


def test_only_the_nodes_of_the_slurmd_pods_are_unlocked_unless_every_node_is_asked_for():
    """Another release (another Slurm cluster) may lock other Nodes of the same Kubernetes cluster: by
    default only the Nodes this release's slurmd Pods run on, where its Syncer locks."""
    nodes = [k8s_node("worker-2", LOCK), k8s_node("worker-1", OTHER, LOCK_NOEXECUTE), k8s_node("worker-3", OTHER),
             k8s_node("other-cluster-1", LOCK)]
    pods = [{"spec": {"nodeName": "worker-1"}}, {"spec": {"nodeName": "worker-2"}}, {"spec": {"nodeName": "worker-3"}},
            {"spec": {}}]  # (a slurmd Pod not bound yet)
    assert hosts(pods) == {"worker-1", "worker-2", "worker-3"}
    ours = holds_of("slurm")
    assert nodes_to_unlock(nodes, hosts(pods), ours) == ["worker-1", "worker-2"]
    assert nodes_to_unlock(nodes, None, holds_of("slurm", everyone=True)) == ["other-cluster-1", "worker-1",
                                                                             "worker-2"]
    assert nodes_to_unlock(nodes, frozenset(), ours) == []


def held(name: str, holders: str, *taints: dict) -> dict:
    node = k8s_node(name, *taints)
    node["metadata"]["annotations"] = {names.ANN_LOCK_HOLDERS: holders}
    return node


def test_a_taint_naming_its_holders_is_this_releases_only_when_one_of_its_slurmd_pods_holds_it():
    """Wherever that slurmd Pod went (the uninstall deleted it already), and whatever Node: the holders say whose
    lock it is; a Node another release's slurmd Pod alone holds is never touched, even where ours run."""
    nodes = [held("worker-1", "slurm/worker-1", LOCK), held("worker-2", "slurm-b/worker-2", LOCK),
             held("worker-3", "slurm-b/x,slurm/worker-3", LOCK), held("worker-4", "slurm/worker-4"),
             k8s_node("worker-5", LOCK)]
    ours = holds_of("slurm", live=frozenset({"slurm/other-release"}))  # (every slurmd Pod of ours gone)
    assert ours("slurm/worker-1") and not ours("slurm-b/worker-1") and not ours("slurmx/worker-1")
    assert not ours("slurm/other-release")  # (another release's slurmd Pod in the same namespace, alive)
    mine = holds_of("slurm", mine={"slurm/worker-1"}, live=frozenset({"slurm/worker-1", "slurm/worker-3"}))
    assert mine("slurm/worker-1") and not mine("slurm/worker-3")
    assert not holds_of("slurm", live=None)("slurm/gone")  # (who lives there unknown: only our Pods' holds)
    assert nodes_to_unlock(nodes, frozenset(), ours) == ["worker-1", "worker-3"]
    assert nodes_to_unlock(nodes, {"worker-2", "worker-5"}, ours) == ["worker-1", "worker-3", "worker-5"]
    assert nodes_to_unlock(nodes, {"worker-5"}, ours, unnamed=False) == ["worker-1", "worker-3"]


def test_the_lock_annotation_and_the_lock_requests_and_nothing_else():
    pod = {"metadata": {"annotations": {
        names.LOCK_KEY: "locked_strict",
        f"{names.LOCK_REQUEST_PREFIX}42": '{"strict":true,"at":1.0}',
        f"{names.LOCK_REQUEST_PREFIX}x": "malformed, still sunk's",
        names.ANN_PENDING_DELETION: "scale down",  # the operator's, not the lock's
        "example.com/lock": "mine",
    }}}
    assert lock_annotations(pod) == [f"{names.LOCK_REQUEST_PREFIX}42", f"{names.LOCK_REQUEST_PREFIX}x", names.LOCK_KEY]
    assert lock_annotations({"metadata": {"annotations": {names.LOCK_KEY: "false"}}}) == [names.LOCK_KEY]
    assert lock_annotations({"metadata": {}}) == [] and lock_annotations({}) == []


def test_the_lock_request_prefix_is_the_lock_services():
    from sunk.locking.requests import REQUEST_PREFIX, request_key

    assert REQUEST_PREFIX == names.LOCK_REQUEST_PREFIX
    assert lock_annotations({"metadata": {"annotations": {request_key(7): "{}"}}}) == [request_key(7)]
