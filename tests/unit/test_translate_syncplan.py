"""The Syncer's plan for one Slurm node, table by table: facts in, writes out (sunk.translate.syncplan)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from typing import Any

import attrs
import pytest

from sunk.model import names
from sunk.model.slurm import Job, Node, NodeUpdate
from sunk.translate.drains import PlaceholderDrain, StuckPodDrain
from sunk.translate.podcordon import COND_POD_CORDONED, Cordon, pod_cordon
from sunk.translate.syncplan import (
    DOWN,
    DRAIN,
    NONE,
    UNDRAIN,
    SlurmPlan,
    extra_identity,
    merged_extra,
    owned,
    pod_plan,
    slurm_plan,
)

READY = {"type": "Ready", "status": "True"}
NOT_READY = {"type": "Ready", "status": "False"}
NOT_READY_REASON = "k8s: slurmd pod slurm/node1 is not ready"
MISSING_REASON = "k8s: slurmd pod slurm/node1 does not exist"
HAD_POD = '{"namespace":"slurm","pod":"node1","ready":true}'  # the Extra of a node whose Pod this Syncer saw
HANDLED = '{"deleted":true,"namespace":"slurm","pod":"node1","ready":true}'  # ... and whose deletion it handled


def slurmd(*conditions: Mapping[str, str], node: str = "worker-1", deleting: bool = False,
           annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "node1", "namespace": "slurm", "uid": "uid-node1",
                            "annotations": dict(annotations or {})}
    if deleting:
        meta["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node, "hostname": "node1"},
            "status": {"conditions": [dict(c) for c in conditions]}}


def k8s_node(name: str = "worker-1", *, cordoned: bool = False, reason: str = "", ready: str = "True") -> dict:
    annotations = {"node.coreweave.cloud/cordonReason": reason} if reason else {}
    return {"metadata": {"name": name, "annotations": annotations}, "spec": {"unschedulable": cordoned},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}}


@attrs.frozen
class Facts:
    """The SyncFacts a test states outright (the Syncer's KubeFacts reads the same from its caches)."""

    pod: dict[str, Any] | None
    slurm_node: str = "node1"
    namespace: str = "slurm"
    k8s_node: dict[str, Any] | None = attrs.Factory(k8s_node)
    nodeset: str | None = None
    elsewhere: frozenset[str] = frozenset()  # "ns/name" of Pods that exist outside this Syncer's selector
    pods: Mapping[str, str] = attrs.Factory(dict)  # "ns/name" -> the Node it is bound to
    uids: Mapping[str, str] = attrs.Factory(dict)  # "ns/name" -> its UID
    nodes: Mapping[str, dict[str, Any]] = attrs.Factory(dict)  # Node name -> the Node
    jobs: tuple[Job, ...] | None = ()
    scheduler_names: frozenset[str] = frozenset({"sunk-scheduler"})

    @property
    def cordon(self) -> Cordon:
        return pod_cordon(self.pod)

    def outside_scope(self, key: str) -> bool:
        return key in self.elsewhere

    def pod_node(self, key: str) -> str | None:
        return self.pods.get(key)

    def pod_uid(self, key: str) -> str | None:
        return self.uids.get(key)

    def node_named(self, name: str) -> dict[str, Any] | None:
        return self.nodes.get(name)

    def jobs_holding(self) -> tuple[Job, ...] | None:
        return self.jobs

    def pods_on_node(self) -> tuple[dict[str, Any], ...]:
        return ()


def kept(*, ready: bool = True, node: str = "worker-1", **more: Any) -> str:
    """The Extra the Syncer keeps for slurm/node1 on ``node``, byte for byte."""
    return json.dumps({"cordon_reason": None, "cordoned": False, "deleted": False, "deleting": False,
                       "namespace": "slurm", "node": node, "pod": "node1", "ready": ready, **more},
                      sort_keys=True, separators=(",", ":"))


def slurm(state: str = "IDLE", reason: str = "", extra: str = "", reason_time: int | None = None) -> Node:
    return Node("node1", state=state, reason=reason, extra=extra, reason_time=reason_time)


def outcome(plan: SlurmPlan) -> tuple[NodeUpdate | None, bool, str, bool]:
    """What a plan writes and says, without its ``why`` (for logs only)."""
    return plan.update, plan.ours, plan.action, plan.replaced_invalid_extra


STUCK = StuckPodDrain("team-a", "trainer-0", "uid-t", "worker-2", 12).reason()
PLACEHOLDER = PlaceholderDrain("team-a", "train-0", 42, "uid-p").reason()
VERIFY = f"NHC: {names.VERIFY_UNDRAIN} after GPU reset"
MARKED = json.loads(HAD_POD) | {"deleted": True}


# (case, facts, node, (update, ours, action, replaced_invalid_extra))
SLURM_CASES: list[tuple[str, Facts, Node, tuple[NodeUpdate | None, bool, str, bool]]] = [
    # ---- which nodes are this Syncer's
    ("no pod and no extra: never ours", Facts(None), slurm(), (None, False, NONE, False)),
    ("no pod, extra of another namespace", Facts(None), slurm(extra='{"namespace":"slurm-b","pod":"node1"}'),
     (None, False, NONE, False)),
    ("no pod, extra without a pod", Facts(None), slurm(extra='{"namespace":"slurm"}'), (None, False, NONE, False)),
    ("no pod, extra naming an empty pod", Facts(None), slurm(extra='{"namespace":"slurm","pod":""}'),
     (None, False, NONE, False)),
    ("no pod, extra not an object", Facts(None), slurm(extra='["slurm","node1"]'), (None, False, NONE, False)),
    ("no pod, extra not JSON", Facts(None), slurm(extra="{not json"), (None, False, NONE, False)),
    ("the pod named exists outside the selector: another Syncer's", Facts(None, elsewhere=frozenset({"slurm/node1"})),
     slurm(extra=HAD_POD), (None, False, NONE, False)),
    ("another Syncer's too with its deletion marked", Facts(None, elsewhere=frozenset({"slurm/node1"})),
     slurm(extra=HANDLED), (None, False, NONE, False)),
    ("a pod here: ours whatever extra names", Facts(slurmd(READY), elsewhere=frozenset({"slurm/other"})),
     slurm(extra=kept() .replace('"pod":"node1"', '"pod":"other"')),
     (NodeUpdate(extra=kept()), True, NONE, False)),
    # ---- a deleted slurmd Pod: DOWN once (poddown), then the drain for the missing Pod
    ("pod deleted: DOWN and the mark, one write", Facts(None), slurm(extra=HAD_POD),
     (NodeUpdate(state="DOWN", reason="k8s: slurmd pod slurm/node1 deleted", extra=json.dumps(
         MARKED, sort_keys=True, separators=(",", ":"))), True, DOWN, False)),
    ("pod deleted, node DOWN already: only the mark", Facts(None), slurm("DOWN", "Not responding", HAD_POD),
     (NodeUpdate(extra=HANDLED), True, NONE, False)),
    ("pod deleted, a person's drain: only the mark", Facts(None), slurm("IDLE+DRAIN", "bad DIMM", HAD_POD),
     (NodeUpdate(extra=HANDLED), True, NONE, False)),
    ("pod deleted, drained for it since before: only the mark", Facts(None),
     slurm("IDLE+DRAIN", MISSING_REASON, HAD_POD), (NodeUpdate(extra=HANDLED), True, NONE, False)),
    ("pod deleted under sunk's own drain: only the mark", Facts(None, jobs=None),
     slurm("IDLE+DRAIN", PLACEHOLDER, HAD_POD), (NodeUpdate(extra=HANDLED), True, NONE, False)),
    ("deletion handled: the drain for the missing Pod, Extra kept", Facts(None), slurm(extra=HANDLED),
     (NodeUpdate(state="DRAIN", reason=MISSING_REASON), True, DRAIN, False)),
    ("deletion handled, drained for it: nothing", Facts(None), slurm("IDLE+DRAIN", MISSING_REASON, HANDLED),
     (None, True, NONE, False)),
    ("deletion handled, a person's drain over it: nothing", Facts(None), slurm("IDLE+DRAIN", "bad PSU", HANDLED),
     (None, True, NONE, False)),
    ("deletion handled, node DOWN: nothing", Facts(None), slurm("DOWN", "", HANDLED), (None, True, NONE, False)),
    # ---- the Pod's state: drains with k8s: reasons, and Extra, in one write
    ("pod ready, Extra current: nothing", Facts(slurmd(READY)), slurm(extra=kept()), (None, True, NONE, False)),
    ("pod ready, no Extra yet", Facts(slurmd(READY)), slurm(), (NodeUpdate(extra=kept()), True, NONE, False)),
    ("a user's keys in Extra are kept", Facts(slurmd(READY)), slurm(extra='{"owner":"ml"}'),
     (NodeUpdate(extra=kept(owner="ml")), True, NONE, False)),
    ("the Syncer's keys win over a user's", Facts(slurmd(READY)), slurm(extra='{"ready":"maybe","pod":"x"}'),
     (NodeUpdate(extra=kept()), True, NONE, False)),
    ("Extra not JSON: replaced, and said", Facts(slurmd(READY)), slurm(extra="{not json"),
     (NodeUpdate(extra=kept()), True, NONE, True)),
    ("a new Pod clears the deletion mark", Facts(slurmd(READY)), slurm(extra=kept(deleted=True)),
     (NodeUpdate(extra=kept()), True, NONE, False)),
    ("a NodeSlice lists the node: the NodeSet mark", Facts(slurmd(READY), nodeset="gpu"), slurm(extra=kept()),
     (NodeUpdate(extra=kept(nodeset="gpu")), True, NONE, False)),
    ("pod not ready: drain and Extra together", Facts(slurmd(NOT_READY)), slurm(),
     (NodeUpdate(state="DRAIN", reason=NOT_READY_REASON, extra=kept(ready=False)), True, DRAIN, False)),
    ("pod not ready, drained for it: nothing", Facts(slurmd(NOT_READY)),
     slurm("IDLE+DRAIN", NOT_READY_REASON, kept(ready=False)), (None, True, NONE, False)),
    ("pod being deleted: drain", Facts(slurmd(READY, deleting=True)), slurm(extra=kept(deleting=True)),
     (NodeUpdate(state="DRAIN", reason="k8s: slurmd pod slurm/node1 is being deleted"), True, DRAIN, False)),
    ("pod pending deletion: the operator's reason",
     Facts(slurmd(READY, annotations={names.ANN_PENDING_DELETION: "scale down"})), slurm(extra=kept()),
     (NodeUpdate(state="DRAIN", reason="k8s: slurmd pod slurm/node1 is pending deletion: scale down"), True, DRAIN,
      False)),
    ("Node cordoned: drain with its reason",
     Facts(slurmd(READY, {"type": COND_POD_CORDONED, "status": "True", "message": "disk"})),
     slurm(extra=kept(cordoned=True, cordon_reason="disk")),
     (NodeUpdate(state="DRAIN", reason="k8s: node worker-1 is cordoned: disk"), True, DRAIN, False)),
    ("the k8s: reason changed: drain again with the new one", Facts(slurmd(NOT_READY)),
     slurm("IDLE+DRAIN", "k8s: node worker-1 is cordoned", kept(ready=False)),
     (NodeUpdate(state="DRAIN", reason=NOT_READY_REASON), True, DRAIN, False)),
    ("the condition cleared: undrain", Facts(slurmd(READY)), slurm("IDLE+DRAIN", NOT_READY_REASON, kept()),
     (NodeUpdate(state="UNDRAIN"), True, UNDRAIN, False)),
    ("undrain and Extra together", Facts(slurmd(READY)), slurm("IDLE+DRAIN", NOT_READY_REASON, kept(ready=False)),
     (NodeUpdate(state="UNDRAIN", extra=kept()), True, UNDRAIN, False)),
    ("a person's drain is never touched", Facts(slurmd(NOT_READY)), slurm("IDLE+DRAIN", "bad DIMM", kept()),
     (NodeUpdate(extra=kept(ready=False)), True, NONE, False)),
    ("a DOWN node is never drained", Facts(slurmd(NOT_READY)), slurm("DOWN", "", kept(ready=False)),
     (None, True, NONE, False)),
    ("a DOWN node is never resumed", Facts(slurmd(READY)), slurm("DOWN+DRAIN", NOT_READY_REASON, kept()),
     (None, True, NONE, False)),
    # ---- NHC's verify-undrain
    ("verify-undrain: passed after the drain", Facts(slurmd(READY, {
        "type": names.COND_HPC_VERIFICATION, "status": "True", "lastTransitionTime": "2030-01-01T00:01:00Z"})),
     slurm("IDLE+DRAIN", VERIFY, kept(), reason_time=1893456000),
     (NodeUpdate(state="UNDRAIN"), True, UNDRAIN, False)),
    ("verify-undrain: passed before the drain", Facts(slurmd(READY, {
        "type": names.COND_HPC_VERIFICATION, "status": "True", "lastTransitionTime": "2029-12-31T23:59:00Z"})),
     slurm("IDLE+DRAIN", VERIFY, kept(), reason_time=1893456000), (None, True, NONE, False)),
    ("verify-undrain: not while a condition holds", Facts(slurmd(NOT_READY, {
        "type": names.COND_HPC_VERIFICATION, "status": "True", "lastTransitionTime": "2030-01-01T00:01:00Z"})),
     slurm("IDLE+DRAIN", VERIFY, kept(ready=False), reason_time=1893456000), (None, True, NONE, False)),
    # ---- sunk's own drains: each stays while its cause holds
    ("stuck Pod drain, the Pod still there", Facts(slurmd(READY), uids={"team-a/trainer-0": "uid-t"},
                                                   nodes={"worker-2": k8s_node("worker-2")}),
     slurm("IDLE+DRAIN", STUCK, kept()), (None, True, NONE, False)),
    ("stuck Pod drain, its Node still lost", Facts(slurmd(READY), nodes={"worker-2": k8s_node("worker-2",
                                                                                              ready="Unknown")}),
     slurm("IDLE+DRAIN", STUCK, kept()), (None, True, NONE, False)),
    ("stuck Pod drain, cause gone: undrain", Facts(slurmd(READY), nodes={"worker-2": k8s_node("worker-2")}),
     slurm("IDLE+DRAIN", STUCK, kept()), (NodeUpdate(state="UNDRAIN"), True, UNDRAIN, False)),
    ("stuck Pod drain, cause gone, a condition holds: its reason",
     Facts(slurmd(NOT_READY), nodes={"worker-2": k8s_node("worker-2")}), slurm("IDLE+DRAIN", STUCK, kept(ready=False)),
     (NodeUpdate(state="DRAIN", reason=NOT_READY_REASON), True, DRAIN, False)),
    ("placeholder drain, the job list stale: stays", Facts(slurmd(READY), jobs=None),
     slurm("IDLE+DRAIN", PLACEHOLDER, kept()), (None, True, NONE, False)),
    ("placeholder drain, its job holds the node", Facts(slurmd(READY), jobs=(Job(42, state="RUNNING", nodes="node1"),)),
     slurm("IDLE+DRAIN", PLACEHOLDER, kept()), (None, True, NONE, False)),
    ("placeholder drain, its Pod gone, no job: undrain", Facts(slurmd(READY)),
     slurm("IDLE+DRAIN", PLACEHOLDER, kept()), (NodeUpdate(state="UNDRAIN"), True, UNDRAIN, False)),
    ("a reason that only looks like sunk's is a person's", Facts(slurmd(READY)),
     slurm("IDLE+DRAIN", "ops: " + PLACEHOLDER, kept()), (None, True, NONE, False)),
]


@pytest.mark.parametrize(("facts", "node", "expected"), [c[1:] for c in SLURM_CASES], ids=[c[0] for c in SLURM_CASES])
def test_slurm_plan(facts: Facts, node: Node, expected: tuple[NodeUpdate | None, bool, str, bool]):
    assert outcome(slurm_plan(facts, node)) == expected


def test_the_plan_says_why_for_every_write_and_which_keys_changed():
    plan = slurm_plan(Facts(slurmd(NOT_READY)), slurm(extra=kept(ready=False)))
    assert plan.reason == NOT_READY_REASON and plan.why == NOT_READY_REASON and not plan.extra_changed
    down = slurm_plan(Facts(None), slurm(extra=HAD_POD))
    assert down.reason == "k8s: slurmd pod slurm/node1 deleted" and "slurm/node1" in down.why and down.extra_changed


def test_a_written_plan_is_settled():
    """Level-based: once Slurm shows what a plan wrote, the same facts call for nothing more (no write loop)."""
    pods = [None, slurmd(READY), slurmd(NOT_READY), slurmd(READY, deleting=True),
            slurmd(READY, {"type": COND_POD_CORDONED, "status": "True", "message": "disk"})]
    states = [("IDLE", ""), ("IDLE+DRAIN", "bad DIMM"), ("IDLE+DRAIN", NOT_READY_REASON), ("DOWN", "")]
    extras = ["", HAD_POD, HANDLED, "{not json", '{"owner":"ml"}']
    for pod, (state, reason), extra, nodeset in itertools.product(pods, states, extras, [None, "gpu"]):
        facts = Facts(pod, nodeset=nodeset)
        node = slurm(state, reason, extra)
        for _ in range(3):  # DOWN, then the drain it leads to, then nothing
            plan = slurm_plan(facts, node)
            if plan.update is None:
                break
            update = plan.update
            if update.state == "DOWN":  # (then ReturnToService brings the node back)
                state, reason = "IDLE", ""
            elif update.state == "DRAIN":
                state, reason = node.base_state + "+DRAIN", update.reason or ""
            elif update.state == "UNDRAIN":
                state, reason = node.base_state, ""
            else:
                state, reason = "+".join(sorted(node.state)), node.reason
            node = slurm(state, reason, update.extra if update.extra is not None else node.extra)
        assert slurm_plan(facts, node).update is None, (pod, state, reason, extra, nodeset)


@pytest.mark.parametrize(("extra", "identity"), [
    (HAD_POD, ("slurm", "node1")), ("", None), ("{not json", None), ("[1]", None), ('{"pod":"node1"}', None),
    ('{"namespace":"slurm","pod":7}', None), ('{"namespace":"","pod":"node1"}', None),
])
def test_extra_identity(extra: str, identity: tuple[str, str] | None):
    assert extra_identity(extra) == identity


def test_owned_reads_the_pod_or_the_extra_identity_in_this_namespace():
    assert owned(Facts(slurmd(READY)), slurm())
    assert owned(Facts(None), slurm(extra=HAD_POD))
    assert not owned(Facts(None, namespace="slurm-b"), slurm(extra=HAD_POD))
    assert not owned(Facts(None, elsewhere=frozenset({"slurm/node1"})), slurm(extra=HAD_POD))


def test_merged_extra_is_unchanged_once_written():
    facts = Facts(slurmd(READY), nodeset="gpu")
    first = merged_extra(facts, slurm(extra='{"owner":"ml"}'))
    assert first.changed and not merged_extra(facts, slurm(extra=first.text)).changed


# ---- Slurm -> Kubernetes: the slurmd Pod -----------------------------------------------------------------------


def _conditions(plan_conditions: Any) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c.get("message", "")) for c in plan_conditions}


def test_pod_plan_from_a_drained_busy_node():
    plan = pod_plan(slurmd(READY), k8s_node(), Node("node1", state="MIXED+DRAIN", reason="bad DIMM"))
    assert _conditions(plan.conditions) == {"SlurmDrain": ("True", "bad DIMM"), "SlurmRunning": ("True", ""),
                                            "SlurmNotResponding": ("False", "")}
    assert plan.labels == {names.LABEL_RUNNING: "true", names.LABEL_DRAIN: "true",
                           names.LABEL_NOT_RESPONDING: "false"}


def test_pod_plan_from_an_idle_node_not_responding():
    plan = pod_plan(slurmd(READY), k8s_node(), Node("node1", state="IDLE+NOT_RESPONDING"))
    assert _conditions(plan.conditions)["SlurmNotResponding"] == ("True", "")
    assert plan.labels[names.LABEL_NOT_RESPONDING] == "true" and plan.labels[names.LABEL_RUNNING] == "false"


@pytest.mark.parametrize(("pod", "node", "slurm_node", "expected"), [
    # the Slurm cache stale: nothing from Slurm, the cordon marker all the same
    (slurmd(), k8s_node(), None, {}),
    (slurmd(), k8s_node(cordoned=True, reason="PSU"), None, {COND_POD_CORDONED: ("True", "PSU")}),
    (slurmd(), None, None, {}),  # an unknown Node: no word on the cordon either
    (slurmd({"type": COND_POD_CORDONED, "status": "True"}), k8s_node(), None, {COND_POD_CORDONED: ("False", "")}),
    (slurmd({"type": COND_POD_CORDONED, "status": "True"}), None, None, {}),
    # Slurm's word and the cordon's, in one list
    (slurmd(), k8s_node(cordoned=True), Node("node1", state="IDLE"),
     {"SlurmDrain": ("False", ""), "SlurmRunning": ("False", ""), "SlurmNotResponding": ("False", ""),
      COND_POD_CORDONED: ("True", "")}),
], ids=["stale", "stale-cordoned", "stale-unknown-node", "stale-uncordoned", "stale-unknown-node-marked",
        "fresh-cordoned"])
def test_pod_plan_conditions(pod: dict, node: dict | None, slurm_node: Node | None,
                             expected: dict[str, tuple[str, str]]):
    plan = pod_plan(pod, node, slurm_node)
    assert _conditions(plan.conditions) == expected
    assert len(plan.conditions) == len(expected)  # each type once
    assert bool(plan.labels) == (slurm_node is not None)


def test_a_deeply_nested_extra_has_no_identity_and_raises_nothing():
    from sunk.translate.syncplan import extra_identity

    assert extra_identity("[" * 100_000 + "]" * 100_000) is None
    assert extra_identity('{"namespace": "slurm", "pod": "n1"}') == ("slurm", "n1")
