"""Slurm -> Kubernetes: the slurmd Pod's conditions and labels, its cordon marker, and the Node.

One reconcile per Slurm node name, level-based: read the Slurm node from the Slurm cache
and the Pod and Node from the informers, ask ``sunk.translate.syncplan.pod_plan`` (and
``nodestate.node_conditions``) what they should say, and write only what differs. Three
writes at most, each skipped when nothing changed:
1. the Pod's conditions (SlurmDrain, SlurmRunning, SlurmNotResponding and the cordon
   marker) in one status patch, guarded by resourceVersion so the kubelet's Ready is never
   clobbered; each managed type appears exactly once;
2. the Pod's dashboard labels, as a merge patch of only the keys that differ;
3. the Node's condition for a drain made in Slurm (the Node controller), via nodes/status;
   only with ``--node-permissions-enabled`` (without it the Syncer writes no Node, and says so once
   at start, assembly.py).

When the Slurm cache is stale (slurmctld or slurmrestd unreachable), the Slurm-derived
conditions are left as they are: an outage is not news about the node. The cordon marker
needs only Kubernetes, so it is kept current even then.
"""

from __future__ import annotations

import logging

import attrs

from sunk.base.times import rfc3339
from sunk.controller.runtime import Result
from sunk.kube import patch as kp
from sunk.kube.resources import NODES
from sunk.model.slurm import Node
from sunk.model.types import Obj
from sunk.translate import nodestate, objects
from sunk.translate.syncplan import pod_plan

from . import metrics
from .context import SyncerContext
from .facts import gather

log = logging.getLogger(__name__)


@attrs.define
class KubeSideReconciler:
    ctx: SyncerContext

    def reconcile(self, key: str) -> Result | None:
        facts = gather(self.ctx, key)
        cache = self.ctx.slurm_nodes
        slurm = cache.get(key) if cache.fresh else None
        pod = facts.pod
        if pod is not None and not pod["metadata"].get("deletionTimestamp"):
            self._sync_pod(pod, facts.k8s_node, slurm)
        if facts.k8s_node is not None and cache.fresh and self.ctx.config.node_permissions:
            self._sync_node(facts.k8s_node)
        return None

    # ---- the slurmd Pod ---------------------------------------------------------------------

    def _sync_pod(self, pod: Obj, k8s_node: Obj | None, slurm: Node | None) -> None:
        plan = pod_plan(pod, k8s_node, slurm)
        wanted, labels = list(plan.conditions), dict(plan.labels)
        if wanted:  # set_pod_conditions compares with this cached copy first: no change, no call
            result = kp.set_pod_conditions(self.ctx.api, pod, wanted)
            if result.wrote:
                metrics.KUBE_WRITES.labels(kind="pod_conditions").inc()
                log.debug("pod %s/%s: conditions %s", pod["metadata"]["namespace"], pod["metadata"]["name"],
                          [f"{c['type']}={c['status']}" for c in wanted])
        if labels and objects.metadata_diff(pod["metadata"].get("labels"), labels):
            kp.set_labels(self.ctx.api, pod, labels)
            metrics.KUBE_WRITES.labels(kind="pod_labels").inc()

    # ---- the Kubernetes Node (Node controller) ------------------------------------------------------

    def _sync_node(self, k8s_node: Obj) -> None:
        """The Node shows drains made in Slurm, over every Slurm node whose slurmd Pod runs on it."""
        names = self.ctx.slurm_nodes_on(k8s_node["metadata"]["name"])
        slurm_nodes = [n for n in (self.ctx.slurm_nodes.get(name) for name in names) if n is not None]
        if len(slurm_nodes) != len(names):
            return  # one of them is unknown to Slurm right now: no evidence to write from
        wanted = nodestate.node_conditions(slurm_nodes)
        now = rfc3339()

        def mutate(current: Obj) -> Obj | None:
            existing = (current.get("status") or {}).get("conditions") or []
            new = objects.merge_conditions(existing, wanted, now=now)
            return None if new is None else {"status": {"conditions": new}}

        result = kp.update_with_retry(self.ctx.api, k8s_node, mutate, resource=NODES, subresource="status")
        if result.wrote:
            metrics.KUBE_WRITES.labels(kind="node_conditions").inc()
            log.info("node %s: %s", k8s_node["metadata"]["name"],
                     ", ".join(f"{c['type']}={c['status']}" for c in wanted))

