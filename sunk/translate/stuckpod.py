"""A Pod stuck terminating on a Node whose kubelet is gone: when the scheduler lets its Slurm job go.

A bound Pod's job is cancelled only once the Pod is gone, so that Slurm never gives the node to
another job while containers run (scheduler/decide.py). A kubelet that stopped (its Node
NotReady or Unknown), or a Node that was deleted, never finishes the Pod, and the job was held
for ever. The scheduler lets it go once the Pod's grace period (its ``deletionTimestamp``) plus
a margin has passed with the Node not Ready: it drains the Slurm node first, with sunk's
``k8s: sunk-stuck: ...`` reason naming the Pod, its UID and its Node, then cancels the job. The
containers may still run on a machine Kubernetes cannot see: the drain keeps Slurm's jobs off it.

The reason and when the Syncer lifts it (no Pod with that UID, the Node Ready) are
``sunk.translate.drains`` (``StuckPodDrain``), with sunk's other drains: the reason is the
record, both components read it, so it survives restarts. What is here is the scheduler's
side: the drain for a Pod, whether to write it over what the node has, the grace period.

Pure: timestamps are read, never taken from a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from sunk.base.times import epoch
from sunk.model import names

from . import drains
from .drains import StuckPodDrain

Obj = Mapping[str, Any]

__all__ = ["drain_for", "grace_ends_at", "should_drain"]


def drain_for(pod: Obj, job_id: int) -> Optional[StuckPodDrain]:
    """The stuck-Pod drain for this Pod and its job: the same reason whoever writes it. None for a Pod
    that is not bound (nothing of it runs anywhere)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if not spec.get("nodeName"):
        return None
    return StuckPodDrain(str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("uid", "")),
                         str(spec["nodeName"]), job_id)


def should_drain(drained: bool, current_reason: str, drain: StuckPodDrain) -> bool:
    """Whether the scheduler writes its stuck-Pod drain over what the node has (Slurm keeps one reason).

    - not drained: yes;
    - the same reason: no;
    - a person's or NHC's drain (no ``k8s:``): no, theirs is theirs, and it keeps Slurm's jobs off
      the node anyway;
    - the Syncer's condition drain ("slurmd pod ... is not ready"): yes, this one outlasts it (the
      Syncer puts its own back, if the condition still holds, once this one is lifted);
    - sunk's placeholder drain, or an earlier stuck-Pod drain, of this same Pod: yes, this one says
      more (the Pod's UID, its Node's readiness) and is lifted only later; so for the drain a gang's
      placeholder wrote for the same job (in the Pod's namespace): the Pod is the member it was about;
    - any other of sunk's drains (another Pod's, the prolog's): no, replacing it would lift it with
      this one's cause, while its own may still be there. The node is drained anyway.
    """
    reason = drain.reason()
    if not drained:
        return True
    if current_reason == reason or not current_reason.startswith(names.K8S_DRAIN_PREFIX):
        return False
    current = drains.parse(current_reason)
    if current is None:
        return True
    if isinstance(current, drains.StuckPodDrain):
        return current.uid == drain.uid
    if isinstance(current, drains.PlaceholderDrain):
        return current.pod == drain.pod
    if isinstance(current, drains.GangPlaceholderDrain):
        return (current.namespace, current.job_id) == (drain.namespace, drain.job_id)
    return False


def grace_ends_at(pod: Obj) -> Optional[float]:
    """When the Pod's grace period ends, as a Unix time: its ``deletionTimestamp`` (the apiserver sets it
    to the deletion's time plus the grace period). None when the Pod is not being deleted."""
    return epoch((pod.get("metadata") or {}).get("deletionTimestamp"))
