"""Which events wake which Slurm node keys: slurmd Pods, Kubernetes Nodes, Slurm nodes and jobs, NodeSlices, resync.

Level-based reconcilers only need to know *which* node to look at. Why the Node filter:
a kubelet rewrites its Node's status every few seconds (heartbeats); waking every Slurm
node on it for each heartbeat would cost nothing in writes but keep the queue busy for
no reason, so only changes the Syncer reads are let through.

sunk's own drains (``sunk.translate.drains``) end with events nothing else here watches: a
Pod deleted in any namespace (the placeholder's Pod, a Pod that blocked a lock, a Pod stuck
terminating), a Pod that finished (a gang's member, which its Job keeps) and a job that leaves
the node. Those wake only the nodes under such a drain,
so the cluster's job and Pod churn costs one cache lookup per node it touches, and no
reconcile. A stuck-Pod drain names its Pod's UID and Node, which may no longer map to the
drained Slurm node (the slurmd Pod gone with its Node): the Pod's deletion and that Node's
changes also wake every node drained for it, found by a string test on each drained
node's reason in the cache.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from sunk.controller.handlers import EnqueueHandler, FuncEnqueuer, KeyMapper
from sunk.controller.periodic import Periodic
from sunk.kube.dra import slice_node
from sunk.model import names
from sunk.model.slurm import Job, Node
from sunk.model.types import Obj
from sunk.translate import drains
from sunk.translate.dra import allocated_on
from sunk.translate.objects import allocatable_gpus, is_terminal

from .context import SyncerContext, nodeslice_slurm_nodes, slurm_node_name

log = logging.getLogger(__name__)

Enqueue = Callable[[str], None]

# Node conditions whose status the Syncer reads or writes (kubelet heartbeats only touch timestamps).
_WATCHED_NODE_CONDITIONS = frozenset({"Ready", names.COND_SLURM_CORDON})


def node_view(node: Obj | None) -> tuple[Any, ...]:
    """The parts of a Kubernetes Node the Syncer's decisions depend on."""
    if node is None:
        return ()
    meta, spec = node.get("metadata") or {}, node.get("spec") or {}
    conditions = tuple(
        sorted(
            (c.get("type", ""), c.get("status", ""), c.get("reason", ""), c.get("message", ""))
            for c in (node.get("status") or {}).get("conditions") or ()
            if c.get("type") in _WATCHED_NODE_CONDITIONS
        )
    )
    return (
        bool(spec.get("unschedulable")),
        (meta.get("annotations") or {}).get(names.ANN_CORDON_REASON),
        tuple(sorted((t.get("key", ""), t.get("effect", "")) for t in spec.get("taints") or ())),
        conditions,
        meta.get("deletionTimestamp"),
        allocatable_gpus(node),
    )


def attach(ctx: SyncerContext, enqueue: Enqueue) -> None:
    """Subscribe ``enqueue`` to every source of change the Syncer reacts to."""
    queue = FuncEnqueuer(enqueue)

    def keys_of(mapper: KeyMapper, changed: Callable[[Obj, Obj], bool] | None = None) -> EnqueueHandler:
        """Adds and deletes enqueue ``mapper``'s keys; updates, when ``changed`` says so, the old and new ones."""
        return EnqueueHandler(queue, mapper, None if changed is None else
                              lambda old, new: old is None or changed(old, new))

    ctx.slurmd_pods.add_handler(keys_of(lambda pod: [slurm_node_name(pod)]))

    def wake_sunk_drained(keys: Iterable[str]) -> None:
        for key in sorted(set(keys)):
            if sunk_drained(ctx, key):
                enqueue(key)

    def pod_gone(pod: Obj) -> None:
        # A Pod outside the selector keeps its node out of scope while it exists (see
        # SlurmSideReconciler); when it goes, the node is judged again.
        if pod["metadata"].get("namespace") == ctx.config.watch_namespace:
            enqueue(slurm_node_name(pod))
        uid = pod["metadata"].get("uid")
        wake_sunk_drained([*slurm_nodes_of(ctx, pod), *stuck_drained(ctx, lambda stuck: stuck.uid == uid)])

    def pod_finished(old: Obj, new: Obj) -> None:
        # A Pod whose containers are done (Succeeded, Failed) runs nothing on its node any more, though its
        # object stays (a Job keeps its finished Pods): a cause of sunk's placeholder drains that is gone.
        if is_terminal(new) and not is_terminal(old):
            wake_sunk_drained(slurm_nodes_of(ctx, new))

    ctx.all_pods.add_handler(on_update=pod_finished, on_delete=pod_gone)

    def slurm_nodes_on(node: Obj) -> list[str]:
        name = node["metadata"]["name"]
        return [*ctx.slurm_nodes_on(name), *stuck_drained(ctx, lambda stuck: stuck.k8s_node == name)]

    ctx.nodes.add_handler(keys_of(slurm_nodes_on, lambda old, new: node_view(old) != node_view(new)))

    def slurm_node(node: Node) -> None:
        enqueue(node.name)

    ctx.slurm_nodes.add_handler(on_add=slurm_node, on_update=lambda _old, new: slurm_node(new), on_delete=slurm_node)

    def job_left(*jobs: Job) -> None:  # a job that leaves a node may be the last of a drain's cause
        wake_sunk_drained(name for job in jobs for name in job.node_list)

    ctx.slurm_jobs.add_handler(on_add=job_left, on_update=job_left, on_delete=job_left)

    # --dra-device-mapping: a drain sunk made because Slurm's GRES and the driver disagreed is judged again when the
    # Node's devices or the claims holding them change.
    def devices_changed(*objs: Obj) -> None:
        wake_sunk_drained(name for obj in objs for node in slice_node(obj) + claim_node(obj)
                          for name in ctx.slurm_nodes_on(node))

    for informer in (ctx.dra_slices, ctx.dra_claims):
        if informer is not None:
            informer.add_handler(on_add=devices_changed, on_update=devices_changed, on_delete=devices_changed)

    if ctx.nodeslices is not None:  # --slurm-node-clean-up: an entry added (mark) or gone (delete)
        ctx.nodeslices.add_handler(keys_of(nodeslice_slurm_nodes))


def claim_node(obj: Obj) -> list[str]:
    return [node] if (node := allocated_on(obj)) else []


def sunk_drained(ctx: SyncerContext, key: str) -> bool:
    """The Slurm node is drained (as the cache shows it) by one of sunk's own drains."""
    node = ctx.slurm_nodes.get(key)
    return node is not None and node.drained and drains.parse(node.reason) is not None


def slurm_nodes_of(ctx: SyncerContext, pod: Obj) -> list[str]:
    """The Slurm nodes a Pod ran beside: those on its Node, and the one sunk's scheduler placed it on."""
    keys = ctx.slurm_nodes_on(node) if (node := (pod.get("spec") or {}).get("nodeName")) else []
    placed = ((pod.get("metadata") or {}).get("annotations") or {}).get(names.ANN_SLURM_NODE)
    return keys + [placed] if placed else keys


def stuck_drained(ctx: SyncerContext, matches: Callable[[drains.StuckPodDrain], bool]) -> list[str]:
    """Slurm nodes under a stuck-Pod drain that ``matches``, from the cache: a string test on each
    drained node's reason first, a parse only of those that may be one."""
    found = []
    for name, node in ctx.slurm_nodes.items().items():
        if node.drained and node.reason.startswith(drains.STUCK_MARK):
            stuck = drains.parse(node.reason)
            if isinstance(stuck, drains.StuckPodDrain) and matches(stuck):
                found.append(name)
    return found


def all_keys(ctx: SyncerContext) -> set[str]:
    """Every Slurm node the Syncer knows of, from either side."""
    keys = set(ctx.slurm_nodes.keys())
    keys.update(slurm_node_name(p) for p in ctx.slurmd_pods.list())
    return keys


def resync(ctx: SyncerContext, enqueue: Enqueue, interval: float) -> Periodic:
    """The slow safety net: every ``interval`` seconds, every key once. Events do the real work."""

    def every_key() -> None:
        keys = all_keys(ctx)
        log.debug("resync: %d Slurm nodes", len(keys))
        for key in sorted(keys):
            enqueue(key)

    return Periodic("syncer-resync", interval, every_key)
