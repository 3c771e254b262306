"""A lock taint whose slurmd Pod is gone: lifted once the Node runs no slurmd Pod of this Syncer.

Why: the lock controller is keyed by Slurm node and finds the Kubernetes Node through the slurmd
Pod. When that Pod goes (a NodeSet scaled down, a slurmd Pod deleted by hand) while its Node is
locked, nothing maps the Node to a key any more, and the taint would keep Kubernetes Pods off a
machine where no Slurm job can run. A slurmd Pod deleted from the Syncer's cache names the Node it
was bound to; that Node's lock goes if no other slurmd Pod of this Syncer is bound there.

Only Nodes a deleted slurmd Pod of this Syncer names are touched, and there only the holds of this
Syncer's slurmd Pods (``names.ANN_LOCK_HOLDERS``): another release's Syncer may lock the same Node
with the same taint (``sunk.translate.leftovers``). A slurmd Pod deleted while this Syncer was down
leaves its Node's lock to ``sunk-syncer release-nodes``.
"""

from __future__ import annotations

import logging

import attrs

from sunk.controller.runtime import Result
from sunk.kube import patch as kp
from sunk.model.types import Obj
from sunk.syncer.context import SyncerContext
from sunk.translate.leftovers import lock_tainted

log = logging.getLogger(__name__)


def former_node(pod: Obj) -> list[str]:
    """The Node a deleted slurmd Pod was bound to, as a key (none if it was never bound)."""
    node = (pod.get("spec") or {}).get("nodeName")
    return [node] if node else []


@attrs.define
class OrphanLockReconciler:
    """Keyed by Kubernetes Node name; enqueued only by slurmd Pod deletions (``former_node``)."""

    ctx: SyncerContext

    def reconcile(self, node_name: str) -> Result | None:
        if not self.ctx.slurmd_pods.has_synced():
            return Result(requeue_after=1.0)
        node = self.ctx.nodes.get(node_name)

        def slurmd_back(_node: Obj) -> bool:  # (a slurmd Pod bound there again: the lock controller decides)
            return bool(self.ctx.slurm_nodes_on(node_name))

        if node is None or not lock_tainted(node):
            return None
        ours = f"{self.ctx.config.watch_namespace}/"
        if kp.release_lock(self.ctx.api, node, lambda h: h.startswith(ours), unless=slurmd_back):  # (each read)
            self.ctx.recorder.normal(node, "Unlocked", f"no slurmd Pod runs on Node {node_name} any more: "
                                                       "sunk's lock lifted")
            log.info("lock: Node %s runs no slurmd Pod any more; unlocked", node_name)
        return None
