"""A lock held by a slurmd Pod that is gone: its hold let go, the taint lifted with the last holder.

Why: the lock controller is keyed by Slurm node and finds the Kubernetes Node through the slurmd
Pod. When that Pod goes (a NodeSet scaled down, a slurmd Pod deleted by hand) while its Node is
locked, nothing maps the Node to a key any more, and the taint would keep Kubernetes Pods off a
machine where no Slurm job can run. A slurmd Pod deleted from the Syncer's cache names the Node it
was bound to; its hold on that Node goes, unless a slurmd Pod of that name is bound there again.

Only Nodes a deleted slurmd Pod of this Syncer names are touched, and there only that Pod's own hold
(``names.ANN_LOCK_HOLDERS``): another slurmd Pod of this Syncer or another release's may lock the same
Node with the same taint, and the taint goes with the last holder (``sunk.translate.leftovers``). A
slurmd Pod deleted while this Syncer was down leaves its hold to ``sunk-syncer release-nodes``.
"""

from __future__ import annotations

import logging

import attrs

from sunk.controller.runtime import Result
from sunk.kube import patch as kp
from sunk.model.types import Obj
from sunk.syncer.context import SyncerContext
from sunk.translate import lock
from sunk.translate.leftovers import lock_tainted

log = logging.getLogger(__name__)


def former_node(pod: Obj) -> list[str]:
    """The key of a deleted slurmd Pod's hold on the Node it was bound to: ``<Node> <holder>`` (none if it was
    never bound)."""
    node = (pod.get("spec") or {}).get("nodeName")
    return [f"{node} {lock.holder_of(pod)}"] if node else []


@attrs.define
class OrphanLockReconciler:
    """Keyed by ``<Node> <holder>``; enqueued only by slurmd Pod deletions (``former_node``)."""

    ctx: SyncerContext

    def reconcile(self, key: str) -> Result | None:
        if not self.ctx.slurmd_pods.has_synced():
            return Result(requeue_after=1.0)
        node_name, _, holder = key.partition(" ")
        node = self.ctx.nodes.get(node_name)

        def back(current: Obj) -> bool:
            """(asked of every read) The Pod is bound there again under its name: its lock controller decides.
            A taint naming no holder (an older sunk's) stays while any slurmd Pod of ours runs there."""
            again = self.ctx.slurmd_pods.get(holder)
            if again is not None and (again.get("spec") or {}).get("nodeName") == node_name:
                return True
            return not lock.lock_holders(current) and bool(self.ctx.slurm_nodes_on(node_name))

        if node is None or not lock_tainted(node):
            return None
        if kp.release_lock(self.ctx.api, node, lambda h: h == holder, unless=back):
            self.ctx.recorder.normal(node, "Unlocked", f"no slurmd Pod runs on Node {node_name} any more: "
                                                       "sunk's lock lifted")
            log.info("lock: Node %s runs no slurmd Pod that holds it any more; unlocked", node_name)
        return None
