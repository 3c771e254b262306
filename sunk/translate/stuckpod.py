"""A Pod stuck terminating on a Node whose kubelet is gone: when its Slurm job is let go, and the drain.

A bound Pod's job is cancelled only once the Pod is gone, so that Slurm never gives the node to
another job while containers run (scheduler/decide.py). A kubelet that stopped (its Node
NotReady or Unknown), or a Node that was deleted, never finishes the Pod, and the job was held
for ever. The scheduler lets it go once the Pod's grace period (its ``deletionTimestamp``) plus
a margin has passed with the Node not Ready: it drains the Slurm node first, with a ``k8s:``
reason that names the Pod, then cancels the job. The containers may still run on a machine
Kubernetes cannot see: the drain keeps Slurm's jobs off it.

The Syncer lifts a ``k8s:`` drain once its cause is gone; for this one, the cause is the Pod
and its Node: the drain stays while a Pod with that UID exists or the Node it names is not
Ready (``held``), and then the usual rules decide (sunk/translate/nodestate.py). The reason
is the record: both components read it (``StuckPod.from_reason``), so it survives restarts.

Pure: timestamps are read, never taken from a clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Optional

from attrs import frozen

from sunk import names

Obj = Mapping[str, Any]

MARK = " stuck terminating on Node "  # in every such reason: a cheap test before a parse
_REASON = re.compile(
    re.escape(names.K8S_DRAIN_PREFIX)
    + r" pod (?P<namespace>[^/\s]+)/(?P<name>\S+) uid=(?P<uid>\S+)" + re.escape(MARK) + r"(?P<node>\S+) ")


@frozen
class StuckPod:
    """The Pod a stuck-Pod drain is for: its identity and the Node it was bound to."""

    namespace: str
    name: str
    uid: str
    node: str

    @classmethod
    def of(cls, pod: Obj) -> Optional[StuckPod]:
        """The Pod as one that may be stuck: it must be bound."""
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if not spec.get("nodeName"):
            return None
        return cls(meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", ""), spec["nodeName"])

    def drain_reason(self, job_ids: Iterable[int]) -> str:
        """The ``k8s:`` drain reason: the same text for the same Pod and jobs, whoever writes it."""
        jobs = ",".join(str(j) for j in sorted(job_ids)) or "none"
        return (f"{names.K8S_DRAIN_PREFIX} pod {self.namespace}/{self.name} uid={self.uid}{MARK}{self.node} "
                f"(NotReady or gone); its Slurm job {jobs} was cancelled, drained until the Pod is gone and the "
                f"Node Ready")

    @classmethod
    def from_reason(cls, reason: str) -> Optional[StuckPod]:
        """The Pod a drain reason is held for, or None for any other reason."""
        match = _REASON.match(reason or "")
        if match is None:
            return None
        return cls(match["namespace"], match["name"], match["uid"], match["node"])


@frozen
class Holders:
    """What Kubernetes says now of what a stuck-Pod drain names (the Syncer gathers it from its caches)."""

    pod_exists: bool  # a Pod with the drain's UID is still there
    node_ready: bool  # the Node the drain names exists and is Ready


def should_drain(drained: bool, current_reason: str, reason: str) -> bool:
    """Whether the scheduler writes its drain: not over a drain someone else set (a person's, NHC's:
    the node stays out of Slurm's hands anyway, and their reason is theirs), nor the same one again.
    A ``k8s:`` drain (the Syncer's "slurmd Pod not ready") gives way: this one outlasts it."""
    if not drained:
        return True
    return current_reason.startswith(names.K8S_DRAIN_PREFIX) and current_reason != reason


def held(holders: Holders) -> bool:
    """A stuck-Pod drain stays while its Pod exists or its Node is not Ready."""
    return holders.pod_exists or not holders.node_ready


def node_ready(node: Optional[Obj]) -> bool:
    """The Node exists and its Ready condition is True (False and Unknown: its kubelet is gone or failing)."""
    if node is None:
        return False
    for cond in (node.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False  # a Node that never reported Ready is not


def grace_ends_at(pod: Obj) -> Optional[float]:
    """When the Pod's grace period ends, as a Unix time: its ``deletionTimestamp`` (the apiserver sets it
    to the deletion's time plus the grace period). None when the Pod is not being deleted."""
    stamp = (pod.get("metadata") or {}).get("deletionTimestamp")
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
