"""Wiring one Syncer process: informers, Slurm cache, the two sync controllers, node locking and the
Slurm metrics (each composed in by its ``setup``, when on), third-party plugins, hook app.

With ``--slurm-node-clean-up`` a NodeSlice informer too (the clean-up is the Slurm-side
reconciler's, cleanup.py); without it NodeSlices are not read, and not granted (the chart).

Everything here runs inside the gunicorn worker (see sunk/commands/web.py), so the hook API and
the controllers share the same caches. Start-up order and leadership come from the
Manager: informers and the Slurm cache run on every replica; the controllers (ours and
the plugins') run only on the leader and only after both sides have been listed once,
so no decision is ever taken from an empty cache.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import attrs
from flask import Flask
from kubernetes.client import ApiClient

from sunk.controller.daemon import DaemonConfig
from sunk.controller.manager import Manager
from sunk.controller.runtime import Controller
from sunk.kube.dra import claims_informer, slices_informer
from sunk.kube.events import EventRecorder
from sunk.kube.informer import Informer, pod_node_name
from sunk.kube.resources import NODES, NODESLICES, PODS
from sunk.locking import setup as locking
from sunk.locking.config import LockConfig
from sunk.metrics import setup as slurm_metrics_table
from sunk.metrics.config import MetricsConfig
from sunk.slurm.client import SlurmClient
from sunk.slurm.informer import NODE, SlurmInformerFactory
from sunk.translate.objects import syncer_slim_node, without_write_records
from sunk.translate.podstores import syncer_slim_pod

from . import triggers
from .config import NAME, SyncerConfig
from .context import (
    INDEX_NODE,
    INDEX_SLURM_NODE,
    Installer,
    PluginParts,
    SyncerContext,
    index_slurm_node,
    nodeslice_slurm_nodes,
)
from .kubeside import KubeSideReconciler
from .slurmside import SlurmSideReconciler

log = logging.getLogger(__name__)


@attrs.define
class Syncer:
    manager: Manager
    ctx: SyncerContext
    slurm_side: Controller
    kube_side: Controller
    plugin_parts: list[PluginParts]

    def enqueue(self, slurm_node: str) -> None:
        self.slurm_side.enqueue(slurm_node)
        self.kube_side.enqueue(slurm_node)

    def app(self) -> Flask:
        """The hook API app: every plugin's Blueprint (served by every replica)."""
        from sunk.hooks.app import create_app

        return create_app(*(p.blueprint for p in self.plugin_parts if p.blueprint is not None), name=NAME)


def assemble(
    config: SyncerConfig,
    daemon: DaemonConfig,
    *,
    api: ApiClient,
    slurm: SlurmClient,
    node_locking: LockConfig | None = None,
    slurm_metrics: MetricsConfig | None = None,
    plugins: Sequence[Installer] = (),
    slurm_informers: SlurmInformerFactory | None = None,
) -> Syncer:
    """Build (not start) a Syncer: node locking and the Slurm metrics when given their config (None: off),
    then third-party ``plugins``, installers (plugins.installers binds their flags)."""
    manager = daemon.manager(api)
    # One informer per Slurm kind, each on its own thread: a slow job list never delays node state, and nodes
    # poll faster (``--slurm-node-poll-interval``: an idle node poll is a few hundred bytes; it bounds drain latency).
    factory = slurm_informers or SlurmInformerFactory(slurm, interval=daemon.slurm.poll_interval,
                                                      job_full_every=daemon.slurm.job_full_list_interval,
                                                      intervals={NODE: config.slurm_node_poll_interval})
    slurm_nodes, slurm_jobs = factory.nodes(), factory.jobs()
    # Each store keeps what its readers read (sunk/translate/objects.py says who reads what): at 100k Pods
    # whole objects would be gigabytes (issue 37). The slurmd Pods, few and read by everything, lose only
    # their write records; the cluster's Pods and Nodes keep the fields sunk reads and writes back.
    slurmd_pods = Informer(api, PODS, config.watch_namespace, label_selector=config.slurmd_selector,
                           transform=without_write_records, name="slurmd-pods")
    slurmd_pods.add_indexer(INDEX_SLURM_NODE, index_slurm_node)
    slurmd_pods.add_indexer(INDEX_NODE, pod_node_name)
    nodes = Informer(api, NODES, transform=syncer_slim_node, name="nodes")
    all_pods = Informer(api, PODS, transform=syncer_slim_pod, name="all-pods")
    all_pods.add_indexer(INDEX_NODE, pod_node_name)
    nodeslices = None
    if config.slurm_node_clean_up:
        # Every NodeSlice of the namespace, not only the operator's label: a slice missed is a node deleted.
        nodeslices = Informer(api, NODESLICES, config.watch_namespace, name="nodeslices")
        nodeslices.add_indexer(INDEX_SLURM_NODE, nodeslice_slurm_nodes)
    dra_claims = claims_informer(api) if config.dra is not None else None
    dra_slices = slices_informer(api, config.dra) if config.dra is not None else None
    recorder = EventRecorder(api, component=NAME)

    controllers: dict[str, Controller] = {}

    def enqueue(slurm_node: str) -> None:
        for c in controllers.values():
            c.enqueue(slurm_node)

    ctx = SyncerContext(
        api=api,
        slurm=slurm,
        slurm_nodes=slurm_nodes,
        slurm_jobs=slurm_jobs,
        slurmd_pods=slurmd_pods,
        nodes=nodes,
        all_pods=all_pods,
        recorder=recorder,
        config=config,
        enqueue_node=enqueue,
        manager=manager,
        nodeslices=nodeslices,
        dra_claims=dra_claims,
        dra_slices=dra_slices,
    )
    controllers["slurm"] = Controller("syncer-slurm", SlurmSideReconciler(ctx), workers=daemon.workers)
    controllers["kube"] = Controller("syncer-kube", KubeSideReconciler(ctx), workers=daemon.workers)
    if not config.node_permissions:
        log.info("--node-permissions-enabled=false: no Node is written (a drain made in Slurm shows on its "
                 "slurmd Pod only, not as a Node condition)")
    triggers.attach(ctx, enqueue)

    parts = [*([locking.setup(ctx, node_locking)] if node_locking is not None else []),
             *([slurm_metrics_table.setup(ctx, slurm_metrics)] if slurm_metrics is not None else []),
             *(install(ctx) for install in plugins)]

    if nodeslices is not None:
        log.info("--slurm-node-clean-up: Slurm nodes whose NodeSlice entry is gone are deleted from Slurm once idle")
    if config.dra is not None:
        log.info("--dra-device-mapping: sunk-dra drains are lifted once Slurm's GRES and driver %s agree",
                 config.dra.driver)
    optional = [i for i in (nodeslices, dra_claims, dra_slices) if i is not None]
    for informer in (slurmd_pods, nodes, all_pods, *optional):
        manager.add_informer(informer)
    # The controllers wait for Slurm's first list too: "no such node" from an empty cache is not an answer.
    for slurm_informer in factory.informers():
        manager.add_informer(slurm_informer)
    manager.add_ready_check("slurm-cache", factory.has_synced)
    for controller in controllers.values():
        manager.add_controller(controller)
    manager.add_runnable(triggers.resync(ctx, enqueue, config.resync_period), needs_leader=True)
    for part in parts:
        for controller in part.controllers:
            manager.add_controller(controller)
        for runnable, needs_leader in part.runnables:
            manager.add_runnable(runnable, needs_leader=needs_leader)
    return Syncer(manager=manager, ctx=ctx, slurm_side=controllers["slurm"], kube_side=controllers["kube"],
                  plugin_parts=parts)
