"""Which events wake which Slurm node keys: slurmd Pods, Kubernetes Nodes, Slurm cache, resync.

Level-based reconcilers only need to know *which* node to look at. Why the Node filter:
a kubelet rewrites its Node's status every few seconds (heartbeats); waking every Slurm
node on it for each heartbeat would cost nothing in writes but keep the queue busy for
no reason, so only changes the Syncer reads are let through.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from sunk import names
from sunk.controller.periodic import Periodic
from sunk.slurm.cache import NODE, CacheEvent
from sunk.translate.stuckpod import MARK, StuckPod
from sunk.types import Obj

from .context import SyncerContext, slurm_node_name

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
    )


class KeyHandler:
    """An informer handler that enqueues the Slurm node keys ``mapper`` finds, optionally filtered."""

    def __init__(
        self,
        enqueue: Enqueue,
        mapper: Callable[[Obj], Iterable[str]],
        changed: Callable[[Obj, Obj], bool] | None = None,
    ):
        self.enqueue, self.mapper, self.changed = enqueue, mapper, changed

    def on_add(self, obj: Obj) -> None:
        self._all(self.mapper(obj))

    def on_update(self, old: Obj, new: Obj) -> None:
        if self.changed is None or self.changed(old, new):
            self._all(set(self.mapper(old)) | set(self.mapper(new)))

    def on_delete(self, obj: Obj) -> None:
        self._all(self.mapper(obj))

    def _all(self, keys: Iterable[str]) -> None:
        for key in sorted(keys):
            self.enqueue(key)


def attach(ctx: SyncerContext, enqueue: Enqueue) -> None:
    """Subscribe ``enqueue`` to every source of change the Syncer reacts to."""
    ctx.slurmd_pods.add_handler(KeyHandler(enqueue, lambda pod: [slurm_node_name(pod)]))

    def pod_gone(pod: Obj) -> None:
        # A Pod outside the selector keeps its node out of scope while it exists (see
        # SlurmSideReconciler); when it goes, the node is judged again.
        if pod["metadata"].get("namespace") == ctx.config.watch_namespace:
            enqueue(slurm_node_name(pod))
        # A Pod stuck terminating holds the drain that names it; when it goes, the drain may go.
        uid = pod["metadata"].get("uid")
        for name in held_for(ctx, lambda stuck: stuck.uid == uid):
            enqueue(name)

    ctx.all_pods.add_handler(on_delete=pod_gone)

    def slurm_nodes_on(node: Obj) -> list[str]:
        name = node["metadata"]["name"]
        return [*ctx.slurm_nodes_on(name), *held_for(ctx, lambda stuck: stuck.node == name)]

    ctx.nodes.add_handler(KeyHandler(enqueue, slurm_nodes_on, lambda old, new: node_view(old) != node_view(new)))

    def on_slurm(event: CacheEvent) -> None:
        if event.kind == NODE:
            enqueue(str(event.key))

    ctx.slurm_cache.subscribe(on_slurm, kinds=[NODE])


def held_for(ctx: SyncerContext, matches: Callable[[StuckPod], bool]) -> list[str]:
    """Slurm nodes drained for a stuck Pod (sunk/translate/stuckpod.py) that ``matches``, from the cache.

    A string test first: a Pod deleted or a Node changed costs a look at each drained node's
    reason, and a parse only of those that name a stuck Pod.
    """
    found = []
    for name, node in ctx.slurm_cache.nodes().items():
        if node.drained and MARK in node.reason:
            stuck = StuckPod.from_reason(node.reason)
            if stuck is not None and matches(stuck):
                found.append(name)
    return found


def all_keys(ctx: SyncerContext) -> set[str]:
    """Every Slurm node the Syncer knows of, from either side."""
    keys = set(ctx.slurm_cache.nodes())
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
