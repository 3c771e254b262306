"""Drain rules, conditions and labels: every combination that matters."""

from __future__ import annotations

import itertools

import attrs
import pytest

from sunk import names
from sunk.slurm.models import Node
from sunk.translate.nodestate import (
    DRAIN,
    NONE,
    UNDRAIN,
    desired_drain,
    extra_facts,
    node_conditions,
    pod_conditions,
    pod_labels,
)
from sunk.translate.stuckpod import Holders, StuckPod


@attrs.frozen
class Cordon:
    cordoned: bool = False
    reason: str | None = None


@attrs.frozen
class Facts:
    pod: dict | None
    cordon: Cordon = Cordon()
    slurm_node: str = "node1"
    namespace: str = "slurm"
    k8s_node: dict | None = None
    stuck_pod: Holders | None = None


def slurmd_pod(ready=True, deleting=False, verified_at=None):
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if verified_at:
        conditions.append({"type": names.COND_HPC_VERIFICATION, "status": "True", "lastTransitionTime": verified_at})
    meta = {"name": "node1", "namespace": "slurm"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-23T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": "worker-1"}, "status": {"conditions": conditions}}


def node(state="IDLE", reason="", reason_time=None):
    return Node(name="node1", state=state, reason=reason, reason_time=reason_time)


K8S = names.K8S_DRAIN_PREFIX


@pytest.mark.parametrize(("facts", "reason_part"), [
    (Facts(pod=None), "does not exist"),
    (Facts(pod=slurmd_pod(deleting=True)), "is being deleted"),
    (Facts(pod=slurmd_pod(ready=False)), "is not ready"),
    (Facts(pod=slurmd_pod(), cordon=Cordon(True, "bad GPU")), "node worker-1 is cordoned: bad GPU"),
    (Facts(pod=slurmd_pod(), cordon=Cordon(True)), "node worker-1 is cordoned"),
])
def test_kubernetes_conditions_drain_with_a_k8s_reason(facts, reason_part):
    action = desired_drain(facts, node())
    assert action.action == DRAIN
    assert action.reason.startswith(K8S) and reason_part in action.reason


def test_a_healthy_pod_needs_nothing():
    assert desired_drain(Facts(pod=slurmd_pod()), node()).action == NONE


def test_a_k8s_drain_is_lifted_when_the_condition_clears():
    assert desired_drain(Facts(pod=slurmd_pod()), node("IDLE+DRAIN", f"{K8S} pod is not ready")).action == UNDRAIN


def test_a_k8s_drain_is_reapplied_after_someone_undrained_it():
    # Someone resumed the node in Slurm; the Pod is still not ready: drain again.
    action = desired_drain(Facts(pod=slurmd_pod(ready=False)), node("IDLE"))
    assert action.action == DRAIN


def test_a_changed_kubernetes_reason_updates_only_our_own_drain():
    facts = Facts(pod=slurmd_pod(), cordon=Cordon(True, "maintenance"))
    assert desired_drain(facts, node("IDLE+DRAIN", f"{K8S} slurmd pod slurm/node1 is not ready")).action == DRAIN
    assert desired_drain(facts, node("IDLE+DRAIN", "bad DIMM, ticket 42")).action == NONE


def test_a_human_or_nhc_drain_is_never_touched():
    for facts in (Facts(pod=slurmd_pod()), Facts(pod=None), Facts(pod=slurmd_pod(ready=False))):
        assert desired_drain(facts, node("IDLE+DRAIN", "NHC: nvidia-smi failed")).action == NONE


@pytest.mark.parametrize("state", ["DOWN", "DOWN+DRAIN", "DOWN+NOT_RESPONDING"])
@pytest.mark.parametrize("facts", [Facts(pod=None), Facts(pod=slurmd_pod()), Facts(pod=slurmd_pod(ready=False))])
def test_down_nodes_are_left_to_return_to_service(state, facts):
    assert desired_drain(facts, node(state, f"{K8S} x")).action == NONE


def test_verify_undrain_needs_a_verification_newer_than_the_drain():
    drained_at = 1_795_400_000  # 2026-11-23T02:13:20Z
    reason = "NHC: gpu check failed, verify-undrain"
    before = Facts(pod=slurmd_pod(verified_at="2026-11-23T02:00:00Z"))
    after = Facts(pod=slurmd_pod(verified_at="2026-11-23T03:00:00Z"))
    missing = Facts(pod=slurmd_pod())
    assert desired_drain(after, node("IDLE+DRAIN", reason, drained_at)).action == UNDRAIN
    assert desired_drain(before, node("IDLE+DRAIN", reason, drained_at)).action == NONE
    assert desired_drain(missing, node("IDLE+DRAIN", reason, drained_at)).action == NONE
    assert desired_drain(after, node("IDLE+DRAIN", "NHC: gpu check failed", drained_at)).action == NONE
    not_ready_after = Facts(pod=slurmd_pod(ready=False, verified_at="2026-11-23T03:00:00Z"))
    assert desired_drain(not_ready_after, node("IDLE+DRAIN", reason, drained_at)).action == NONE


STATES = ["IDLE", "MIXED", "ALLOCATED", "IDLE+DRAIN", "MIXED+DRAIN", "IDLE+NOT_RESPONDING", "DOWN+NOT_RESPONDING",
          "IDLE+COMPLETING"]


@pytest.mark.parametrize("state", STATES)
def test_conditions_and_labels_mirror_slurm_and_never_repeat_a_type(state):
    slurm = node(state, "maintenance" if "DRAIN" in state else "")
    conditions = pod_conditions(slurm)
    assert [c["type"] for c in conditions] == [names.COND_SLURM_DRAIN, names.COND_SLURM_RUNNING,
                                               names.COND_SLURM_NOT_RESPONDING]
    by_type = {c["type"]: c for c in conditions}
    assert (by_type[names.COND_SLURM_DRAIN]["status"] == "True") == ("DRAIN" in state)
    assert by_type[names.COND_SLURM_DRAIN]["message"] == ("maintenance" if "DRAIN" in state else "")
    running = state.startswith(("MIXED", "ALLOCATED")) or "COMPLETING" in state
    assert (by_type[names.COND_SLURM_RUNNING]["status"] == "True") == running
    assert (by_type[names.COND_SLURM_NOT_RESPONDING]["status"] == "True") == ("NOT_RESPONDING" in state)
    labels = pod_labels(slurm)
    assert labels == {names.LABEL_DRAIN: str("DRAIN" in state).lower(), names.LABEL_RUNNING: str(running).lower(),
                      names.LABEL_NOT_RESPONDING: str("NOT_RESPONDING" in state).lower()}


def test_the_node_shows_drains_made_in_slurm_but_not_our_own():
    assert node_conditions([node("IDLE+DRAIN", "bad fan")])[0] == {
        "type": names.COND_SLURM_CORDON, "status": "True", "reason": "SlurmDrained", "message": "node1: bad fan"}
    assert node_conditions([node("IDLE+DRAIN", f"{K8S} pod not ready")])[0]["status"] == "False"
    assert node_conditions([node()])[0]["status"] == "False"


def test_extra_facts_describe_the_kubernetes_side():
    facts = Facts(pod=slurmd_pod(), cordon=Cordon(True, "rma"))
    assert extra_facts(facts) == {"pod": "node1", "namespace": "slurm", "node": "worker-1", "ready": True,
                                  "deleting": False, "cordoned": True, "cordon_reason": "rma"}
    assert extra_facts(Facts(pod=None))["pod"] is None


def test_every_pod_state_gives_exactly_one_decision():
    """Exhaustive over the inputs the rules read: nothing crashes, DOWN never acts, human drains never change."""
    for present, ready, deleting, cordoned, state, reason in itertools.product(
            (True, False), (True, False), (True, False), (True, False),
            ("IDLE", "IDLE+DRAIN", "MIXED+DRAIN", "DOWN+DRAIN"), ("", f"{K8S} x", "human", "NHC verify-undrain")):
        facts = Facts(pod=slurmd_pod(ready, deleting) if present else None, cordon=Cordon(cordoned))
        action = desired_drain(facts, node(state, reason if "DRAIN" in state else "", 1))
        assert action.action in (NONE, DRAIN, UNDRAIN)
        if state.startswith("DOWN"):
            assert action.action == NONE
        if "DRAIN" in state and reason in ("human",):
            assert action.action == NONE
        if action.action == DRAIN:
            assert action.reason.startswith(K8S)


STUCK_REASON = StuckPod("team-a", "trainer-0", "uid-t", "worker-1").drain_reason([12])


@pytest.mark.parametrize(("slurmd", "holders", "expected"), [
    # The Node's kubelet is gone: the Node controller marked the slurmd Pod not Ready. The drain
    # keeps naming the stuck Pod rather than turning into "slurmd pod is not ready".
    (slurmd_pod(ready=False), Holders(pod_exists=True, node_ready=False), NONE),
    # The kubelet is back (the slurmd Pod Ready), the stuck Pod not finished yet: still held.
    (slurmd_pod(), Holders(pod_exists=True, node_ready=True), NONE),
    # The Pod was force-deleted while the Node is still NotReady: still held (the containers may run).
    (slurmd_pod(), Holders(pod_exists=False, node_ready=False), NONE),
    # The Pod is gone and the Node Ready: lifted.
    (slurmd_pod(), Holders(pod_exists=False, node_ready=True), UNDRAIN),
    # Gone and Ready, but another Kubernetes reason holds now: that reason replaces it.
    (slurmd_pod(ready=False), Holders(pod_exists=False, node_ready=True), DRAIN),
], ids=["pod-and-node-down", "pod-still-there", "node-still-down", "both-clear", "another-cause"])
def test_a_stuck_pod_drain_holds_until_the_pod_is_gone_and_its_node_ready(slurmd, holders, expected):
    decision = desired_drain(Facts(pod=slurmd, stuck_pod=holders), node(state="IDLE+DRAIN", reason=STUCK_REASON))
    assert decision.action == expected, decision


def test_a_stuck_pod_drain_on_a_down_node_is_left_to_return_to_service():
    decision = desired_drain(Facts(pod=slurmd_pod(), stuck_pod=Holders(pod_exists=False, node_ready=True)),
                             node(state="DOWN+DRAIN", reason=STUCK_REASON))
    assert decision.action == NONE
