"""Whether a Pod bound straight to a Node must tolerate that Node's lock taint first.

The Syncer taints a Node `sunk.coreweave.com/lock` before a placeholder job starts there
(the strict lock), so a Pod always lands on a locked Node. Binding skips kube-scheduler's
taint filter, and the kubelet admits past every taint but NoExecute
(pkg/kubelet/lifecycle/predicate.go), so only a NoExecute lock (`--lock-taint-effect`)
needs the toleration: without it the kubelet rejects the Pod, or the taint manager evicts
it. Reading the taint on the Node, rather than a flag that must match the Syncer's, keeps
the two components from disagreeing.

Adding the toleration is a Pod patch: about 25 ms of apiserver, etcd and watcher CPU
(docs/benchmarks.md), worth skipping for the common NoSchedule lock.
"""

from __future__ import annotations

from sunk.kube.store import Store
from sunk.model import names
from sunk.model.types import Obj
from sunk.translate.objects import has_taint, node_ready, slim_node


def scheduler_slim_node(node: Obj) -> Obj:
    """What the scheduler's Node informer keeps: name, version, labels, taints and the Ready condition's status
    (what ``LockTaints``, ``NodeHealth`` and the placement at submission, scheduler/placement.py, read)."""
    return slim_node(node, labels=True, taints=True, ready=True)


class LockTaints:
    """Reads a (slim) Node informer."""

    def __init__(self, informer: Store):
        self.informer = informer

    def evicts(self, node_name: str) -> bool:
        """True when a Pod bound to the Node must tolerate the lock; an unknown Node counts as True."""
        node = self.informer.get(node_name)
        return node is None or has_taint(node, names.LOCK_KEY, "NoExecute")


class NodeHealth:
    """Whether a Node is Ready, from the same (slim) Node informer: a Pod terminating on a Node that
    is not (its kubelet gone) may be stuck there for good (sunk/translate/stuckpod.py)."""

    def __init__(self, informer: Store):
        self.informer = informer

    def ready(self, node_name: str) -> bool:
        """False for a Node that is NotReady, Unknown, or gone."""
        return node_ready(self.informer.get(node_name))
