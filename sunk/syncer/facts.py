"""Gathering, from memory, what the Kubernetes side says about one Slurm node.

The reconcilers read only caches (informers, the Slurm cache); this module is the one
place that turns "Slurm node name" into the Pod, the Node and the cordon marker, so the
pure rules get one value to decide from.
"""

from __future__ import annotations

import attrs

from sunk.translate.stuckpod import Holders, StuckPod, node_ready
from sunk.types import Obj

from .context import SyncerContext
from .podcordon import Cordon, pod_cordon


@attrs.frozen
class KubeFacts:
    """The Kubernetes side of one Slurm node. ``pod``/``k8s_node`` are cached objects: never mutate."""

    slurm_node: str
    namespace: str  # where this Syncer's slurmd Pods live
    pod: Obj | None
    k8s_node: Obj | None
    cordon: Cordon
    # For a drain held for a Pod stuck terminating (its reason names the Pod): whether that Pod
    # and its Node still hold it. None for any other reason.
    stuck_pod: Holders | None = None

    @property
    def pod_key(self) -> str | None:
        if self.pod is None:
            return None
        return f"{self.pod['metadata'].get('namespace')}/{self.pod['metadata']['name']}"


def gather(ctx: SyncerContext, slurm_node: str, drain_reason: str = "") -> KubeFacts:
    """``drain_reason``: the Slurm node's current drain reason, when the decision is about drains."""
    pod = ctx.pod_for(slurm_node)
    node_name = ((pod or {}).get("spec") or {}).get("nodeName")
    k8s_node = ctx.nodes.get(node_name) if node_name else None
    return KubeFacts(
        slurm_node=slurm_node,
        namespace=ctx.config.watch_namespace,
        pod=pod,
        k8s_node=k8s_node,
        cordon=pod_cordon(pod),
        stuck_pod=stuck_pod_holders(ctx, drain_reason),
    )


def stuck_pod_holders(ctx: SyncerContext, drain_reason: str) -> Holders | None:
    """What still holds a drain made for a Pod stuck terminating: the Pod (by UID), and its Node's Ready."""
    stuck = StuckPod.from_reason(drain_reason)
    if stuck is None:
        return None
    pod = ctx.all_pods.get(f"{stuck.namespace}/{stuck.name}")
    exists = pod is not None and (pod.get("metadata") or {}).get("uid") == stuck.uid
    return Holders(pod_exists=exists, node_ready=node_ready(ctx.nodes.get(stuck.node)))
