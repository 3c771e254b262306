"""Drain rules, conditions and labels: every combination that matters."""

from __future__ import annotations

import itertools

import attrs
import pytest

from sunk.model import names
from sunk.model.slurm import Job, Node
from sunk.translate import nodestate
from sunk.translate.drains import StuckPodDrain
from sunk.translate.nodestate import (
    DRAIN,
    NONE,
    UNDRAIN,
    desired_drain,
    extra_facts,
    kubernetes_drain_reason,
    node_conditions,
    pod_conditions,
    pod_labels,
)


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
    k8s_node: dict | None = attrs.Factory(lambda: {"metadata": {"name": "worker-1"}, "spec": {}})
    pods: dict = attrs.Factory(dict)  # "ns/name" -> Node, for sunk's own drains
    jobs: tuple | None = ()
    uids: dict = attrs.Factory(dict)  # "ns/name" -> the Pod's UID
    nodes: dict = attrs.Factory(dict)  # Node name -> the Node, for a stuck-Pod drain
    scheduler_names: frozenset = frozenset({"sunk-scheduler"})

    def pod_node(self, key: str) -> str | None:
        return self.pods.get(key)

    def jobs_holding(self) -> tuple | None:
        return self.jobs

    def pods_on_node(self) -> tuple:
        return ()

    def pod_uid(self, key: str) -> str | None:
        return self.uids.get(key)

    def node_named(self, name: str) -> dict | None:
        return self.nodes.get(name)


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
                                  "deleting": False, "cordoned": True, "cordon_reason": "rma", "deleted": False}
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


# ---- sunk's own drains (sunk.translate.drains): lifted when their cause is gone, not when a condition clears ----

PLACEHOLDER = "k8s: sunk-placeholder: pod team-a/train-0 outlived KillWait after job 42"
UNREACHABLE = "k8s: sunk-lock: job 43: hook API unreachable (HTTP 000, 3 attempts)"
STUCK_REASON = StuckPodDrain("team-a", "trainer-0", "uid-t", "worker-1", 12).reason()


def worker(ready: str | None) -> dict:
    """Node worker-1 with its Ready condition (None: it reported none)."""
    conditions = [{"type": "Ready", "status": ready}] if ready else []
    return {"metadata": {"name": "worker-1"}, "spec": {}, "status": {"conditions": conditions}}


THERE = {"team-a/trainer-0": "uid-t"}
CAUSES = {  # facts under which each drain's cause is present, gone, or cannot be told
    PLACEHOLDER: {"present": {"pods": {"team-a/train-0": "worker-1"}}, "gone": {}, "unknown": {"jobs": None}},
    UNREACHABLE: {"present": {"jobs": (Job(id=43, state="RUNNING", nodes="node1"),)}, "gone": {},
                  "unknown": {"jobs": None}},
    # (a Node the cache does not have is not Ready: its kubelet may be gone with containers still running)
    STUCK_REASON: {"present": {"uids": THERE, "nodes": {"worker-1": worker("True")}},
                   "gone": {"nodes": {"worker-1": worker("True")}}, "unknown": {}},
}


def locked(pod: dict | None, state: str, facts: Facts) -> Facts:
    """The lock as the lock controller leaves it for ``state``: locked and tainted while jobs run."""
    if pod is None or not state.startswith("MIXED"):
        return facts
    pod["metadata"]["annotations"] = {names.LOCK_KEY: "locked"}
    taint = {"key": names.LOCK_KEY, "value": "true", "effect": "NoSchedule"}
    return attrs.evolve(facts, k8s_node={"metadata": {"name": "worker-1"}, "spec": {"taints": [taint]}})


@pytest.mark.parametrize("reason", list(CAUSES))
@pytest.mark.parametrize("cause", ["present", "gone", "unknown"])
@pytest.mark.parametrize("condition", [None, "not ready", "cordoned", "missing"])
@pytest.mark.parametrize("state", ["IDLE+DRAIN", "MIXED+DRAIN", "DOWN+DRAIN"])
def test_sunk_drains_stay_while_their_cause_holds_and_go_when_it_is_gone(reason, cause, condition, state):
    pod = None if condition == "missing" else slurmd_pod(ready=condition != "not ready")
    facts = locked(pod, state, Facts(pod=pod, cordon=Cordon(condition == "cordoned"), **CAUSES[reason][cause]))
    action = desired_drain(facts, node(state, reason))
    if condition == "missing" and reason != STUCK_REASON:
        assert action.action == NONE  # no slurmd Pod: no lock to read, no Pods on its Node to see; the drain stays
    elif state.startswith("DOWN") or cause != "gone":
        assert action.action == NONE  # present, or no evidence: the drain stays as it is
    elif condition is None:
        assert action.action == UNDRAIN and "gone" in action.why
    else:  # the cause is gone but a Kubernetes condition holds: its own reason replaces sunk's
        assert action.action == DRAIN and action.reason == kubernetes_drain_reason(facts)


def test_a_condition_that_clears_does_not_lift_a_sunk_drain_whose_cause_holds():
    facts = Facts(pod=slurmd_pod(), pods={"team-a/train-0": "worker-1"})
    assert desired_drain(facts, node("IDLE+DRAIN", PLACEHOLDER)).action == NONE
    assert desired_drain(Facts(pod=slurmd_pod()), node("IDLE+DRAIN", PLACEHOLDER)).action == UNDRAIN


@pytest.mark.parametrize("reason", [
    "sunk: pod team-a/train-0 outlived KillWait after job 42",  # sunk's old form
    "sunk-lock: job 43: cannot read the hook API token from '/etc/sunk/token'",  # a cause the Syncer cannot see
    "sunk placeholder drained this, see ticket 7",
    "checked by ops: k8s: sunk-placeholder: pod team-a/train-0 outlived KillWait after job 42",
])
def test_a_drain_that_only_looks_like_sunks_is_never_lifted(reason):
    for facts in (Facts(pod=slurmd_pod()), Facts(pod=None), Facts(pod=slurmd_pod(ready=False))):
        assert desired_drain(facts, node("IDLE+DRAIN", reason)).action == NONE


# ---- the NodeSet operator's pending deletion --------------------------------------------------------


def pending_pod(why: str, *, ready: bool = True) -> dict:
    pod = slurmd_pod(ready=ready)
    pod["metadata"]["annotations"] = {names.ANN_PENDING_DELETION: why}
    return pod


def test_a_pod_pending_deletion_is_drained_with_the_operators_own_reason():
    from sunk.translate.nodestate import pending_deletion_prefix, pending_deletion_reason

    reason = pending_deletion_reason("slurm/node1", "update: the NodeSet's template changed")
    assert reason == "k8s: slurmd pod slurm/node1 is pending deletion: update: the NodeSet's template changed"
    assert reason.startswith(pending_deletion_prefix("slurm/node1"))
    assert pending_deletion_reason("slurm/node1", "") == "k8s: slurmd pod slurm/node1 is pending deletion"
    # The Syncer agrees on the reason, so neither rewrites the other's drain and neither lifts it.
    assert desired_drain(Facts(pod=pending_pod("scale-in: x")), node()) == \
        desired_drain(Facts(pod=pending_pod("scale-in: x")), node())
    action = desired_drain(Facts(pod=pending_pod("scale-in: x")), node())
    assert (action.action, action.reason) == (DRAIN, pending_deletion_reason("slurm/node1", "scale-in: x"))
    kept = desired_drain(Facts(pod=pending_pod("scale-in: x", ready=False)),
                         node("IDLE+DRAIN", pending_deletion_reason("slurm/node1", "scale-in: x")))
    assert kept.action == NONE
    person = desired_drain(Facts(pod=pending_pod("scale-in: x")), node("IDLE+DRAIN", "bad DIMM"))
    assert person.action == NONE


def test_the_mark_removed_lifts_the_drain_once_the_pod_is_ready():
    from sunk.translate.nodestate import pending_deletion_reason

    drained = node("IDLE+DRAIN", pending_deletion_reason("slurm/node1", "scale-in: x"))
    assert desired_drain(Facts(pod=slurmd_pod()), drained).action == UNDRAIN
    assert desired_drain(Facts(pod=slurmd_pod(ready=False)), drained).action == DRAIN  # now "not ready"


# ---- the scheduler's drain for a Pod stuck terminating on a lost Node (issue 18, item 1) --------------------

@pytest.mark.parametrize(("slurmd", "uids", "nodes", "expected"), [
    # The Node's kubelet is gone: the Node controller marked the slurmd Pod not Ready. The drain
    # keeps naming the stuck Pod rather than turning into "slurmd pod is not ready".
    (slurmd_pod(ready=False), THERE, {"worker-1": worker("Unknown")}, NONE),
    # The kubelet is back (the slurmd Pod Ready), the stuck Pod not finished yet: still held.
    (slurmd_pod(), THERE, {"worker-1": worker("True")}, NONE),
    # The Pod was force-deleted while the Node is still NotReady: still held (the containers may run).
    (slurmd_pod(), {}, {"worker-1": worker("False")}, NONE),
    # ... or the Node is gone, or never said it is Ready.
    (slurmd_pod(), {}, {}, NONE),
    (slurmd_pod(), {}, {"worker-1": worker(None)}, NONE),
    # The Pod is gone and the Node Ready: lifted.
    (slurmd_pod(), {}, {"worker-1": worker("True")}, UNDRAIN),
    # A Pod of the same name with another UID (a StatefulSet's new one) is not the stuck Pod.
    (slurmd_pod(), {"team-a/trainer-0": "uid-new"}, {"worker-1": worker("True")}, UNDRAIN),
    # Gone and Ready, but another Kubernetes reason holds now: that reason replaces it.
    (slurmd_pod(ready=False), {}, {"worker-1": worker("True")}, DRAIN),
], ids=["pod-and-node-down", "pod-still-there", "node-still-down", "node-gone", "node-never-ready", "both-clear",
        "another-uid", "another-cause"])
def test_a_stuck_pod_drain_holds_until_the_pod_is_gone_and_its_node_ready(slurmd, uids, nodes, expected):
    facts = Facts(pod=slurmd, uids=uids, nodes=nodes)
    decision = desired_drain(facts, node(state="IDLE+DRAIN", reason=STUCK_REASON))
    assert decision.action == expected, decision
    if expected == DRAIN:
        assert decision.reason == kubernetes_drain_reason(facts)


def test_a_stuck_pod_drain_does_not_wait_for_slurms_job_list():
    """The job was let go: a stale job list neither holds nor lifts it."""
    facts = Facts(pod=slurmd_pod(), jobs=None, nodes={"worker-1": worker("True")})
    assert desired_drain(facts, node(state="IDLE+DRAIN", reason=STUCK_REASON)).action == UNDRAIN


def test_a_stuck_pod_drain_on_a_down_node_is_left_to_return_to_service():
    decision = desired_drain(Facts(pod=slurmd_pod(), nodes={"worker-1": worker("True")}),
                             node(state="DOWN+DRAIN", reason=STUCK_REASON))
    assert decision.action == NONE


# -- a Node offering fewer healthy GPUs than Slurm counts (its device plugin's allocatable) -----------------------
def gpu_node(allocatable, **others):
    status = {"allocatable": {**({names.GPU_RESOURCE: allocatable} if allocatable is not None else {}), **others}}
    return {"metadata": {"name": "worker-1"}, "spec": {}, "status": status}


SHORT = f"{K8S} node worker-1 offers 7 of the 8 GPUs Slurm counts (nvidia.com/gpu allocatable)"


@pytest.mark.parametrize(("gres", "allocatable", "expected"), [
    ("gpu:h100:8", "7", SHORT),  # (a GPU fell off the bus: the kubelet would reject a Pod asking for 8)
    ("gpu:h100:8", "0", None),  # (a kubelet restarting, a plugin restarting, GPUs moved to DRA or MIG: unsure)
    ("gpu:h100:8", "8", None),
    ("gpu:h100:8", "9", None),  # (more than Slurm counts: Slurm places less than the Node has, no loop)
    ("gpu:h100:8", None, None),  # (no device plugin: DRA's GPUs, or none)
    ("gpu:h100:8", "7.5", None),  # (not a count: nothing said)
    ("gpu:h100:8", " 7", None),
    ("gpu:h100:8", "٧", None),  # (a digit to str.isdigit, not to the kubelet)
    ("", "4", None),  # (Slurm counts no GPU there)
    ("gpu:a:4,gpu:b:4", "7", SHORT),  # (every type counted)
])
def test_a_node_offering_fewer_gpus_than_slurm_counts_is_drained(gres, allocatable, expected):
    """One GPU gone of several is what this catches (a GPU off the bus, the common failure): a count of 0 is what
    a kubelet or plugin restart shows for a moment, and a Node whose GPUs moved to DRA or MIG for good."""
    facts = Facts(slurmd_pod(), k8s_node=gpu_node(allocatable))
    slurm = Node(name="node1", state="IDLE", gres=gres)
    assert nodestate.kubernetes_drain_reason(facts, slurm) == expected
    assert nodestate.kubernetes_drain_reason(facts) is None  # (no Slurm node to count against)
    action = nodestate.desired_drain(facts, slurm)
    assert (action.action, action.reason) == ((DRAIN, expected) if expected else (NONE, None))


def test_the_gpu_drain_is_lifted_once_the_node_offers_them_all_again_and_a_persons_drain_is_kept():
    drained = Node(name="node1", state="IDLE+DRAIN", gres="gpu:8", reason=SHORT)
    assert nodestate.desired_drain(Facts(slurmd_pod(), k8s_node=gpu_node("8")), drained).action == UNDRAIN
    assert nodestate.desired_drain(Facts(slurmd_pod(), k8s_node=gpu_node("7")), drained).action == NONE
    fewer = nodestate.desired_drain(Facts(slurmd_pod(), k8s_node=gpu_node("6")), drained)
    assert (fewer.action, fewer.reason) == (DRAIN, SHORT.replace("offers 7", "offers 6"))  # (its reason kept true)
    person = Node(name="node1", state="IDLE+DRAIN", gres="gpu:8", reason="bad GPU, RMA")
    assert nodestate.desired_drain(Facts(slurmd_pod(), k8s_node=gpu_node("7")), person).action == NONE
    not_ready = nodestate.desired_drain(Facts(slurmd_pod(ready=False), k8s_node=gpu_node("7")), Node(
        name="node1", state="IDLE", gres="gpu:8"))
    assert "is not ready" in not_ready.reason  # (the Pod's readiness said first)


def test_a_node_offering_mig_slices_is_not_judged_by_its_whole_gpus():
    """The device plugin's mixed strategy: the whole GPUs are those not sliced, fewer than Slurm's count."""
    facts = Facts(slurmd_pod(), k8s_node=gpu_node("2", **{"nvidia.com/mig-1g.10gb": "42"}))
    assert nodestate.kubernetes_drain_reason(facts, Node(name="node1", state="IDLE", gres="gpu:8")) is None
