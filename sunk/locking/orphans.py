"""A lock held by a slurmd Pod that is gone: its hold let go, the taint lifted with the last holder.

Why: the lock controller is keyed by Slurm node and finds the Kubernetes Node through the slurmd
Pod. When that Pod goes (a NodeSet scaled down, a slurmd Pod deleted by hand) while its Node is
locked, nothing maps the Node to a key any more, and the taint would keep Kubernetes Pods off a
machine where no Slurm job can run. A slurmd Pod deleted from the Syncer's cache names the Node it
was bound to; its hold on that Node goes, unless a slurmd Pod of that name is bound there again.

Two ways in, one rule: a hold goes only once no Pod of its name is bound to that Node, in this Syncer's caches
and then in the apiserver's answer (a cache may lag the Pod another release's Syncer has just locked for).
- A slurmd Pod of this Syncer deleted: its own hold (``former_node``).
- A locked Node seen (every Node at start-up, and a Node whose holders change): each hold whose Pod no cache
  shows bound there (``unseen_holds``). So a slurmd Pod deleted while this Syncer was down (a crash, a
  rollout) no longer leaves its Node locked until an uninstall, nor does a release uninstalled without its
  hooks leave a hold on a Node another release still uses.
A hold is let go by its name alone (``names.ANN_LOCK_HOLDERS``): another slurmd Pod of this Syncer or another
release's may lock the same Node with the same taint, and the taint goes with the last holder
(``sunk.translate.leftovers``). A holder that can name no Pod (a Node's kubelet may write its annotations) is
nobody's, and goes without a read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import attrs

from sunk.controller.runtime import Result
from sunk.kube import client as kc
from sunk.kube import patch as kp
from sunk.kube.resources import PODS
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


# A Node runs a few slurmd Pods. Its kubelet may write the holders annotation: a Node naming more is left alone by
# the sweep (a read and a write per name would make one such write thousands of calls), and said.
MAX_HOLDS_PER_NODE = 32


def unseen_holds(node: Obj, known_there: Callable[[str, str], bool]) -> list[str]:
    """Keys of a locked Node's holds whose Pod ``known_there(holder, node)`` does not show bound to it."""
    name = node["metadata"]["name"]
    if not lock_tainted(node):
        return []
    holders = lock.lock_holders(node)
    if len(holders) > MAX_HOLDS_PER_NODE:
        log.warning("lock: Node %s names %d lock holders, more than %d slurmd Pods would: none is looked at (its "
                    "kubelet may write that annotation; see docs/node-locking.md)", name, len(holders),
                    MAX_HOLDS_PER_NODE)
        return []
    return [f"{name} {holder}" for holder in sorted(holders) if not known_there(holder, name)]


def holds_to_check(enqueue: Callable[[str], None], known_there: Callable[[str, str], bool],
                   ) -> Callable[[Obj | None, Obj], None]:
    """The Node handler: a Node added (every Node at start-up) or whose taints or holders changed, its new
    state alone (the name a release just dropped is not looked at again)."""

    def handle(old: Obj | None, new: Obj) -> None:
        if old is None or lock.lock_holders(old) != lock.lock_holders(new) or lock_tainted(old) != lock_tainted(new):
            for key in unseen_holds(new, known_there):
                enqueue(key)

    return handle


def holding_pod_gone(enqueue: Callable[[str], None], node_of: Callable[[str], Obj | None]) -> Callable[[Obj], None]:
    """The every-Pod deletion handler: the key of the Pod's hold, when its Node's holders name it. The two Pod
    caches learn of a deletion at their own pace, and a hold is let go only once neither shows its Pod, so the
    later one must look again; a Pod whose Node no hold of its name locks costs a lookup."""

    def handle(pod: Obj) -> None:
        for key in former_node(pod):
            node = node_of(key.partition(" ")[0])
            if node is not None and lock.holder_of(pod) in lock.lock_holders(node):
                enqueue(key)

    return handle


def _bound_to(pod: Obj | None, node_name: str) -> bool:
    return pod is not None and (pod.get("spec") or {}).get("nodeName") == node_name


@attrs.define
class OrphanLockReconciler:
    """Keyed by ``<Node> <holder>``; enqueued by slurmd Pod deletions (``former_node``), any Pod's deletion that a
    hold names (``holding_pod_gone``) and locked Nodes (``holds_to_check``)."""

    ctx: SyncerContext

    def known_there(self, holder: str, node_name: str) -> bool:
        """A Pod of that name bound to that Node, in this Syncer's slurmd Pods or every Pod it sees."""
        return any(_bound_to(store.get(holder), node_name) for store in (self.ctx.slurmd_pods, self.ctx.all_pods))

    def reconcile(self, key: str) -> Result | None:
        if not (self.ctx.slurmd_pods.has_synced() and self.ctx.all_pods.has_synced()):
            return Result(requeue_after=1.0)
        node_name, _, holder = key.partition(" ")
        node = self.ctx.nodes.get(node_name)

        def back(current: Obj) -> bool:
            """(asked of every read) The Pod is bound there again under its name: its lock controller decides.
            A taint naming no holder (an older sunk's) stays while any slurmd Pod of ours runs there."""
            if self.known_there(holder, node_name):
                return True
            return not lock.lock_holders(current) and bool(self.ctx.slurm_nodes_on(node_name))

        if node is None or not lock_tainted(node):
            return None
        if lock.lock_holders(node) and holder not in lock.lock_holders(node):
            return None  # (let go already; a Node naming no holder has an older sunk's taint: as before)
        if self._still_there(holder, node_name):
            return None
        if kp.release_lock(self.ctx.api, node, lambda h: h == holder, unless=back):
            self.ctx.recorder.normal(node, "Unlocked", f"no slurmd Pod runs on Node {node_name} any more: "
                                                       "sunk's lock lifted")
            log.info("lock: Node %s runs no slurmd Pod that holds it any more; unlocked", node_name)
        return None

    def _still_there(self, holder: str, node_name: str) -> bool:
        """The caches first, then the apiserver: a Pod of that name bound to the Node (a lock is taken only for a
        bound Pod, and a Pod's Node never changes: one of that name unbound or elsewhere is another Pod). A read
        that fails raises: the key is tried again, nothing is let go meanwhile."""
        if self.known_there(holder, node_name):
            return True
        named = lock.holder_pod(holder)
        if named is None:
            return False
        namespace, name = named
        try:
            pod = kc.get(self.ctx.api, PODS, name, namespace)
        except kc.ApiError as exc:
            if exc.not_found:
                return False
            raise
        return _bound_to(pod, node_name)
