"""Gathering, from memory, what the Kubernetes side says about one Slurm node.

The reconcilers read only caches (informers, the Slurm cache); this module is the one
place that turns "Slurm node name" into the Pod, the Node and the cordon marker, so the
pure plan (``sunk.translate.syncplan``) gets one value to decide from.
"""

from __future__ import annotations

import attrs

from sunk.kube.dra import INDEX_NODE as DRA_INDEX_NODE
from sunk.model.slurm import Job
from sunk.model.types import Obj
from sunk.translate import dra
from sunk.translate.drains import DeviceFacts
from sunk.translate.objects import uid_of
from sunk.translate.podcordon import Cordon, pod_cordon

from .context import INDEX_NODE, SyncerContext


@attrs.frozen
class KubeFacts:
    """The Kubernetes side of one Slurm node. ``pod``/``k8s_node`` are cached objects: never mutate.

    ``pod_node``, ``pod_uid``, ``node_named``, ``pods_on_node``, ``jobs_holding`` and ``outside_scope`` are
    looked up only when asked: the plan needs them only for a node under one of sunk's own drains
    (``sunk.translate.drains``) or without its Pod, and the job scan is not worth making for every node on
    every event.
    """

    slurm_node: str
    namespace: str  # where this Syncer's slurmd Pods live
    pod: Obj | None
    k8s_node: Obj | None
    cordon: Cordon
    ctx: SyncerContext = attrs.field(eq=False, repr=False)
    nodeset: str | None = None  # the NodeSet whose NodeSlice lists this node (only with --slurm-node-clean-up)

    @property
    def pod_key(self) -> str | None:
        if self.pod is None:
            return None
        return f"{self.pod['metadata'].get('namespace')}/{self.pod['metadata']['name']}"

    def pod_node(self, key: str) -> str | None:
        """Where the Pod ``namespace/name`` (any namespace) is bound, "" if nowhere; None if it does not exist."""
        pod = self.ctx.all_pods.get(key)
        if pod is None:
            return None
        return str((pod.get("spec") or {}).get("nodeName") or "")

    def pod_uid(self, key: str) -> str | None:
        """The UID of the Pod ``namespace/name`` (any namespace); None if it does not exist."""
        pod = self.ctx.all_pods.get(key)
        if pod is None:
            return None
        return uid_of(pod)

    def outside_scope(self, key: str) -> bool:
        """Whether the Pod ``namespace/name`` exists, but not among this Syncer's slurmd Pods (another selector)."""
        return self.ctx.all_pods.get(key) is not None and self.ctx.slurmd_pods.get(key) is None

    @property
    def scheduler_names(self) -> frozenset[str]:
        """The spec.schedulerName of sunk's scheduler and extender (--scheduler-names)."""
        return self.ctx.config.scheduler_names

    def node_named(self, name: str) -> Obj | None:
        """The Kubernetes Node of that name, from the Node informer; None if there is none."""
        return self.ctx.nodes.get(name)

    def pods_on_node(self) -> list[Obj]:
        """The Pods bound to the slurmd Pod's Node, from the all-Pods informer."""
        node = ((self.pod or {}).get("spec") or {}).get("nodeName")
        return self.ctx.all_pods.by_index(INDEX_NODE, node) if node else []

    def jobs_holding(self) -> tuple[Job, ...] | None:
        """The jobs holding this Slurm node in the Slurm cache; None while its job list is stale."""
        cache = self.ctx.slurm_jobs
        if not cache.fresh:
            return None
        return tuple(job for job in cache.items().values() if job.holds_nodes and self.slurm_node in job.node_list)

    def devices_on(self, k8s_node: str) -> DeviceFacts | None:
        """The DRA driver's devices on ``k8s_node`` and the devices claims hold there that no Pod of sunk's
        schedulers consumes; None without --dra-device-mapping, or before both informers synced."""
        mapping, claims, slices = self.ctx.config.dra, self.ctx.dra_claims, self.ctx.dra_slices
        if mapping is None or claims is None or slices is None or not (claims.has_synced() and slices.has_synced()):
            return None
        devices = dra.node_devices(slices.by_index(DRA_INDEX_NODE, k8s_node), k8s_node, mapping.driver)
        others = [c for c in claims.by_index(DRA_INDEX_NODE, k8s_node) if not self._consumed_by_sunk(c)]
        return DeviceFacts(mapping, devices, dra.held_devices(others, k8s_node, mapping.driver))

    def _consumed_by_sunk(self, claim: Obj) -> bool:
        """Reserved for a Pod of sunk's schedulers (that very Pod: its UID): a claim sunk filled from Slurm."""
        namespace = (claim.get("metadata") or {}).get("namespace", "")
        for consumer in (claim.get("status") or {}).get("reservedFor") or ():
            pod = self.ctx.all_pods.get(f"{namespace}/{consumer.get('name', '')}") \
                if consumer.get("resource") == "pods" else None
            if (pod is not None and uid_of(pod) == consumer.get("uid")
                    and (pod.get("spec") or {}).get("schedulerName") in self.scheduler_names):
                return True
        return False

    def jobs(self) -> tuple[Job, ...] | None:
        """Every job in the Slurm cache (finished ones too, while slurmctld keeps them); None while stale."""
        cache = self.ctx.slurm_jobs
        return tuple(cache.items().values()) if cache.fresh else None


def gather(ctx: SyncerContext, slurm_node: str) -> KubeFacts:
    pod = ctx.pod_for(slurm_node)
    node_name = ((pod or {}).get("spec") or {}).get("nodeName")
    k8s_node = ctx.nodes.get(node_name) if node_name else None
    return KubeFacts(
        slurm_node=slurm_node,
        namespace=ctx.config.watch_namespace,
        pod=pod,
        k8s_node=k8s_node,
        cordon=pod_cordon(pod),
        ctx=ctx,
        nodeset=ctx.nodeset_of(slurm_node),
    )
