"""Wiring of node locking onto the Syncer's shared caches: controller, triggers, hook service.

Kept apart from the plugin entry point so that tests and the benchmark can run the same
assembly on a ``SyncerContext`` of their own.
"""

from __future__ import annotations

import attrs
from flask import Blueprint

from sunk.controller.handlers import EnqueueHandler
from sunk.controller.runtime import Controller
from sunk.hooks.api import hooks_blueprint
from sunk.hooks.auth import TokenFile
from sunk.hooks.nodeauth import KubeTokenReviewer, NodeAuthenticator, PodTokenAuthenticator
from sunk.kube import client as kc
from sunk.kube.resources import PODS
from sunk.model.types import Obj
from sunk.syncer.context import SyncerContext, slurm_node_name
from sunk.translate import lock
from sunk.translate.identity import is_placeholder

from .batcher import AnnotationBatcher
from .config import LockConfig
from .controller import LockReconciler
from .evictions import EvictionLog
from .jobreads import SharedJobReads
from .jobs import JobsByNode
from .orphans import OrphanLockReconciler, former_node, holding_pod_gone, holds_to_check
from .service import LockService
from .waiter import ObjectWaiter
from .waitslots import WaitSlots


def taints_changed(old: Obj | None, new: Obj) -> bool:
    """Node heartbeats (status every few seconds) must not wake the lock; its taint and its holders may."""
    return (old is None or (old.get("spec") or {}).get("taints") != (new.get("spec") or {}).get("taints")
            or lock.lock_holders(old) != lock.lock_holders(new))


@attrs.frozen
class Locking:
    controller: Controller
    orphans: Controller
    service: LockService
    blueprint: Blueprint
    jobs: JobsByNode


def node_authenticator(ctx: SyncerContext, config: LockConfig) -> NodeAuthenticator:
    """Legacy HMAC node tokens (with a secret: without one, no HMAC token opens a node, so the secret is no
    master key), and (with an audience) the slurmd Pods' own ServiceAccount tokens,
    checked against the Syncer's slurmd informer: its namespace and selector say what a slurmd Pod is."""
    pod_tokens = None
    if config.token_audience:
        pod_tokens = PodTokenAuthenticator(KubeTokenReviewer(ctx.api), audience=config.token_audience,
                                           slurmd_namespace=ctx.config.watch_namespace, slurmd_pod=ctx.slurmd_pods.get)
    return NodeAuthenticator(TokenFile(config.token_file) if config.token_file else None, pod_tokens)


def assemble(ctx: SyncerContext, config: LockConfig) -> Locking:
    """Build and subscribe everything; the caller starts the caches and, while leading, the controller.

    Refuses a Syncer that may not write Nodes: a lock is a taint (the CLI says so at start-up, plugin.py).
    """
    if not ctx.config.node_permissions:
        raise ValueError("node locking needs --node-permissions-enabled: a lock is a taint on the Node")
    evictions = EvictionLog()
    jobs = JobsByNode(is_placeholder, lambda node: controller.enqueue(node))  # first called by subscribe(), below
    reconciler = LockReconciler(ctx=ctx, config=config, jobs_on=jobs.jobs_on, evictions=evictions)
    controller = Controller("node-lock", reconciler, workers=config.workers)

    def on_k8s_node(node: Obj) -> list[str]:
        return ctx.slurm_nodes_on(node["metadata"]["name"])

    def on_pod(pod: Obj) -> list[str]:
        node = (pod.get("spec") or {}).get("nodeName")
        return ctx.slurm_nodes_on(node) if node else []

    waiter = ObjectWaiter(ctx.slurmd_pods.get)
    ctx.slurmd_pods.add_handler(waiter)
    ctx.slurmd_pods.add_handler(EnqueueHandler(controller.queue, mapper=lambda pod: [slurm_node_name(pod)]))
    ctx.nodes.add_handler(EnqueueHandler(controller.queue, mapper=on_k8s_node, predicate=taints_changed))
    orphan_locks = OrphanLockReconciler(ctx)
    orphans = Controller("node-lock-orphans", orphan_locks, workers=1)

    def slurmd_pod_gone(pod: Obj) -> None:
        for node in former_node(pod):
            orphans.enqueue(node)

    ctx.slurmd_pods.add_handler(on_delete=slurmd_pod_gone)
    check_holds = holds_to_check(orphans.enqueue, orphan_locks.known_there)
    ctx.nodes.add_handler(on_add=lambda node: check_holds(None, node), on_update=check_holds)
    ctx.all_pods.add_handler(on_delete=holding_pod_gone(orphans.enqueue, ctx.nodes.get))
    ctx.all_pods.add_handler(EnqueueHandler(controller.queue, mapper=on_pod))
    ctx.slurm_nodes.add_handler(on_add=jobs.node_changed, on_update=lambda _old, new: jobs.node_changed(new),
                                on_delete=jobs.node_changed)
    ctx.slurm_jobs.add_handler(jobs)

    def nudge(slurm_node: str) -> None:
        controller.enqueue(slurm_node)
        ctx.nudge_slurm()

    def ready() -> bool:
        informers = (ctx.slurmd_pods, ctx.nodes, ctx.all_pods, ctx.slurm_nodes, ctx.slurm_jobs)
        return all(i.has_synced() for i in informers)

    def write_annotations(pod: Obj, annotations: dict[str, str | None]) -> None:
        # No comparison with the cached Pod first: the informer may not show our own last write yet.
        meta = pod["metadata"]
        kc.patch(ctx.api, PODS, meta["name"], {"metadata": {"annotations": annotations}}, meta["namespace"])

    service = LockService(ctx=ctx, config=config, waiter=waiter, batcher=AnnotationBatcher(write_annotations),
                          evictions=evictions, is_placeholder=is_placeholder, nudge=nudge, ready=ready,
                          job_reads=SharedJobReads(ctx.slurm.get_job),
                          wait_slots=WaitSlots(overall=config.max_waiters, per_node=config.max_waiters_per_node))
    blueprint = hooks_blueprint(service, node_authenticator(ctx, config))
    return Locking(controller=controller, orphans=orphans, service=service, blueprint=blueprint, jobs=jobs)
