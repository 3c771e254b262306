"""Slurm node state <-> Kubernetes: Pod conditions and labels, the Node condition, drains.

Kubernetes -> Slurm drains (``desired_drain``):
- Drain, with a reason starting ``k8s:``, when the slurmd Pod is missing, being deleted,
  pending deletion (the NodeSet operator's annotation ``sunk.coreweave.com/pending-deletion``:
  it deletes the Pod once the node is drained and idle), not Ready, or its Node is cordoned
  (the Node's cordon reason is carried along), or its Node's device plugin offers fewer healthy GPUs
  than Slurm counts on the node (``gpu_shortfall``). The operator drains with the same reason
  (``pending_deletion_reason``), so the two never rewrite each other's.
- Only ``k8s:`` reasons are ever updated or removed. A reason set by a person or by NHC is
  never touched, even while a Kubernetes condition also holds.
- When the condition clears, undrain; if someone undrains in Slurm while it still holds,
  the next pass drains again (the rule is level-based).
- A deleted slurmd Pod sets its node DOWN once (``sunk.translate.poddown``); after that the
  missing Pod is a drain like the rest.
- A DOWN node is never drained or resumed: Slurm's ``ReturnToService=2`` resumes a DOWN node
  as soon as its slurmd talks again, and a DOWN node runs nothing anyway. Draining it would
  leave a drain behind that outlives the outage; resuming it would fight slurmctld's own
  judgement that the node is unreachable.
- NHC verify-undrain: a drain whose reason contains ``verify-undrain`` is removed once the
  Pod's ``HPCVerification`` condition is ``True`` with a ``lastTransitionTime`` later than
  the drain's own time, never before, and never while a Kubernetes condition holds.
- sunk's own drains (``sunk.translate.drains``: the placeholder's, the scheduler's for a Pod
  stuck terminating on a lost Node, the prolog's) are ``k8s:`` reasons too, but a cleared
  Kubernetes condition does not lift them, nor does a condition that holds rewrite them: each
  stays while its own cause is present, or cannot be told, and is lifted (or replaced by the
  condition's reason, if one holds) once that cause is gone.

Slurm -> Kubernetes: conditions SlurmDrain (message: the drain reason), SlurmRunning,
SlurmNotResponding and the matching labels on the slurmd Pod; and on the Node the
condition ``SlurmCordon``, True while Slurm itself (not a ``k8s:`` reason) has a node on it
drained, with "node: reason" as message. No taint: a drain keeps Slurm jobs off, and what
Kubernetes does about it is the operator's policy (docs/syncer.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional, Protocol

from attrs import frozen

from sunk.base.times import epoch
from sunk.model import names
from sunk.model.slurm import Node

from . import drains, poddown
from .objects import allocatable_gpus, condition, condition_true
from .views import PodView

Obj = Mapping[str, Any]
NONE, DRAIN, UNDRAIN = "none", "drain", "undrain"


class CordonFacts(Protocol):
    @property
    def cordoned(self) -> bool: ...

    @property
    def reason(self) -> Optional[str]: ...


class PodSide(drains.CauseFacts, Protocol):
    """What the Kubernetes side says about one Slurm node (the Syncer's KubeFacts)."""

    @property
    def slurm_node(self) -> str: ...

    @property
    def namespace(self) -> str: ...

    @property
    def pod(self) -> Optional[Obj]: ...

    @property
    def cordon(self) -> CordonFacts: ...


@frozen
class DrainAction:
    action: str = NONE  # NONE, DRAIN (set or update ``reason``) or UNDRAIN
    reason: Optional[str] = None
    why: str = ""


def kubernetes_drain_reason(facts: PodSide, slurm: Optional[Node] = None) -> Optional[str]:
    """The ``k8s:`` reason Kubernetes gives to keep Slurm jobs off this node (``slurm``, as Slurm shows it), or
    None."""
    if facts.pod is None:
        return poddown.missing_reason(facts.namespace, facts.slurm_node)
    pod = PodView(facts.pod)
    where = f"{pod.namespace or facts.namespace}/{pod.name or facts.slurm_node}"
    if pod.deleting:
        return f"{names.K8S_DRAIN_PREFIX} slurmd pod {where} is being deleted"
    pending = pod.annotations.get(names.ANN_PENDING_DELETION)
    if pending is not None:
        return pending_deletion_reason(where, str(pending))
    if facts.cordon.cordoned:
        node = pod.node_name or "its node"
        because = f": {facts.cordon.reason}" if facts.cordon.reason else ""
        return f"{names.K8S_DRAIN_PREFIX} node {node} is cordoned{because}"
    if not pod.condition_true("Ready"):
        return f"{names.K8S_DRAIN_PREFIX} slurmd pod {where} is not ready"
    return gpu_shortfall(facts, slurm) if slurm is not None else None


def gpu_shortfall(facts: PodSide, node: Node) -> Optional[str]:
    """Why Slurm must not place GPU work on ``node``: its Node's device plugin offers fewer healthy GPUs
    (``status.allocatable``) than Slurm counts on it (a GPU fell off the bus, the common failure). Slurm's
    count is static, so it would place a Pod there that the kubelet's admission rejects (OutOfnvidia.com/gpu),
    whose owner makes another, which Slurm places there again: a loop. And a batch job would get a GPU that
    is not there. None when the Node says nothing sure of whole GPUs (``allocatable_gpus``: none, 0, MIG
    slices). Compared per Slurm node: one slurmd Pod on a Node, as a NodeSet makes them. An operator who would
    run the node on the GPUs left (an RMA pending) lowers its count in Slurm (``scontrol update nodename=N
    gres=gpu:7``): the counts then agree and the drain is lifted."""
    offered = allocatable_gpus(facts.k8s_node)
    if node.gpus_total <= 0 or offered is None or offered >= node.gpus_total:
        return None
    name = ((facts.k8s_node or {}).get("metadata") or {}).get("name") or "its node"
    return (f"{names.K8S_DRAIN_PREFIX} node {name} offers {offered} of the {node.gpus_total} GPUs Slurm counts "
            f"({names.GPU_RESOURCE} allocatable)")


def pending_deletion_prefix(where: str) -> str:
    """What every pending-deletion reason of the slurmd Pod ``namespace/name`` starts with."""
    return f"{names.K8S_DRAIN_PREFIX} slurmd pod {where} is pending deletion"


def pending_deletion_reason(where: str, why: str) -> str:
    """The drain reason of a slurmd Pod (``namespace/name``) the NodeSet operator will delete, and why."""
    return f"{pending_deletion_prefix(where)}: {why}" if why else pending_deletion_prefix(where)


def verified_since_drain(pod: Optional[Obj], drained_at: Optional[int]) -> bool:
    cond = condition(pod, names.COND_HPC_VERIFICATION)
    if cond is None or cond.get("status") != "True" or drained_at is None:
        return False
    passed = epoch(cond.get("lastTransitionTime"))
    return passed is not None and passed > drained_at


def desired_drain(facts: PodSide, node: Node) -> DrainAction:
    if node.down:
        return DrainAction(NONE, why="node is DOWN: ReturnToService decides")
    wanted = kubernetes_drain_reason(facts, node)
    current = node.reason if node.drained else ""
    own = drains.parse(current) if node.drained else None
    if own is not None:
        cause = drains.cause(own, facts, node)
        if cause.present is not False:
            return DrainAction(NONE, why=f"sunk's drain stays: {cause.why}")
        if wanted is not None:
            return DrainAction(DRAIN, wanted, why=f"sunk's drain cause is gone ({cause.why}), but {wanted}")
        return DrainAction(UNDRAIN, why=f"the cause of sunk's drain is gone: {cause.why}")
    ours = current.startswith(names.K8S_DRAIN_PREFIX)
    if wanted is not None:
        if not node.drained:
            return DrainAction(DRAIN, wanted, why=wanted)
        if ours and current != wanted:
            return DrainAction(DRAIN, wanted, why="the Kubernetes reason changed")
        return DrainAction(NONE, why="already drained" if ours else "drained by someone else: left alone")
    if node.drained and ours:
        return DrainAction(UNDRAIN, why="the Kubernetes condition cleared")
    if node.drained and names.VERIFY_UNDRAIN in current and verified_since_drain(facts.pod, node.reason_time):
        return DrainAction(UNDRAIN, why="HPCVerification passed after the verify-undrain drain")
    return DrainAction(NONE)


def pod_conditions(node: Node) -> list[dict[str, str]]:
    def cond(ctype: str, on: bool, reason_on: str, reason_off: str, message: str = "") -> dict[str, str]:
        return {"type": ctype, "status": "True" if on else "False", "reason": reason_on if on else reason_off,
                "message": message}

    return [
        cond(names.COND_SLURM_DRAIN, node.drained, "SlurmDrained", "SlurmNotDrained",
             node.reason if node.drained else ""),
        cond(names.COND_SLURM_RUNNING, node.running_jobs, "SlurmJobsRunning", "SlurmNoJobs"),
        cond(names.COND_SLURM_NOT_RESPONDING, node.not_responding, "SlurmNotResponding", "SlurmResponding"),
    ]


def pod_labels(node: Node) -> dict[str, str]:
    flag = {True: "true", False: "false"}
    return {names.LABEL_RUNNING: flag[node.running_jobs], names.LABEL_DRAIN: flag[node.drained],
            names.LABEL_NOT_RESPONDING: flag[node.not_responding]}


def node_conditions(slurm_nodes: Sequence[Node]) -> list[dict[str, str]]:
    """The Node's SlurmCordon condition, from the Slurm nodes it hosts (usually one)."""
    drained = [n for n in slurm_nodes if n.drained and not n.reason.startswith(names.K8S_DRAIN_PREFIX)]
    if drained:
        message = "; ".join(f"{n.name}: {n.reason or 'no reason given'}" for n in drained)
        return [{"type": names.COND_SLURM_CORDON, "status": "True", "reason": "SlurmDrained", "message": message}]
    return [{"type": names.COND_SLURM_CORDON, "status": "False", "reason": "SlurmNotDrained", "message": ""}]


def extra_facts(facts: PodSide) -> dict[str, Any]:
    """The Syncer's keys in the node's Extra JSON: where the node runs, and what holds it back."""
    pod = facts.pod
    meta = (pod or {}).get("metadata") or {}
    return {
        "pod": meta.get("name"),
        "namespace": meta.get("namespace", facts.namespace) if pod else None,
        "node": ((pod or {}).get("spec") or {}).get("nodeName"),
        "ready": condition_true(pod, "Ready"),
        "deleting": bool(meta.get("deletionTimestamp")),
        "cordoned": bool(facts.cordon.cordoned),
        "cordon_reason": facts.cordon.reason,
        poddown.DELETED: False,  # this Pod is here: its deletion is news again (poddown)
    }

