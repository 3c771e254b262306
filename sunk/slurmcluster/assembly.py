"""Wiring the SlurmCluster controller into sunk-operator (``--slurm-cluster NAME``).

One SlurmCluster per operator: the one named, in ``--watch-namespace`` (its informer selects it by
name). The operator's Slurm connection (``--slurm-*``) must reach that cluster's slurmrestd: it is
what ``scontrol reconfigure`` goes through.

What wakes it (by events, never by a timer):
- the SlurmCluster: a new generation (its spec) or its deletion; not its status (its own writing);
- one of its StatefulSets or Deployments (label ``sunk.coreweave.com/slurm-cluster``): its ready
  replicas make the conditions, and slurmctld's readiness lets a reconfigure go;
- a NodeSet added or deleted in its namespace: a partition may name it;
- a Slurm node coming, going or moving to another count of ``status.nodes``, at most once in
  ``NODE_COUNT_PERIOD`` (delayed), and the Slurm node list's recovery.
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes.client import ApiClient

from sunk.controller.handlers import EnqueueHandler, FuncEnqueuer
from sunk.controller.manager import Manager
from sunk.controller.runtime import Controller
from sunk.kube.events import EventRecorder
from sunk.kube.informer import Informer
from sunk.kube.resources import DEPLOYMENTS, SLURMCLUSTERS, STATEFULSETS
from sunk.model import names
from sunk.model.slurm import Node
from sunk.model.types import Obj
from sunk.slurm.client import Reconfigurable, SlurmClient
from sunk.translate.slurmcluster.plan import node_state_bucket

from .reconciler import INDEX_CLUSTER, SlurmClusterReconciler, cluster_key

log = logging.getLogger(__name__)


def cluster_view(cluster: Obj) -> tuple[Any, ...]:
    meta = cluster.get("metadata") or {}
    return meta.get("generation"), meta.get("deletionTimestamp")


def workload_view(workload: Obj) -> tuple[Any, ...]:
    status = workload.get("status") or {}
    return ((workload.get("metadata") or {}).get("generation"), status.get("observedGeneration"),
            status.get("readyReplicas"))


def add_slurm_cluster(manager: Manager, *, api: ApiClient, slurm: SlurmClient, namespace: str, name: str,
                      nodesets: Any, recorder: EventRecorder, workers: int = 1,
                      slurm_nodes: Any = None) -> SlurmClusterReconciler:
    """Build the controller of SlurmCluster ``namespace/name`` and add it, and its informers, to ``manager``.
    ``slurm_nodes``: the operator's Slurm node informer (not added here), for the status's nodes by state."""
    clusters = Informer(api, SLURMCLUSTERS, namespace, field_selector=f"metadata.name={name}", name="slurmclusters")
    selector = f"{names.LABEL_SLURM_CLUSTER}={name}"
    statefulsets = Informer(api, STATEFULSETS, namespace, label_selector=selector, name="slurmcluster-statefulsets")
    deployments = Informer(api, DEPLOYMENTS, namespace, label_selector=selector, name="slurmcluster-deployments")
    workloads = _Both(statefulsets, deployments)
    for informer in (statefulsets, deployments):
        informer.add_indexer(INDEX_CLUSTER, cluster_key)
    reconfigure = slurm.reconfigure if isinstance(slurm, Reconfigurable) else None
    if reconfigure is None:
        log.warning("slurmcluster: the %s Slurm backend cannot reconfigure slurmctld; a configuration change "
                    "takes effect at slurmctld's next restart", type(slurm).__name__)
    reconciler = SlurmClusterReconciler(api=api, clusters=clusters, nodesets=nodesets, workloads=workloads,
                                        recorder=recorder, reconfigure=reconfigure, slurm_nodes=slurm_nodes)
    controller = Controller("slurmcluster", reconciler, workers=workers)
    attach(controller.queue.add, key=f"{namespace}/{name}", clusters=clusters, workloads=(statefulsets, deployments),
           nodesets=nodesets, slurm_nodes=slurm_nodes,
           enqueue_for_nodes=lambda key: controller.queue.add_after(key, NODE_COUNT_PERIOD))
    for informer in (clusters, statefulsets, deployments):
        manager.add_informer(informer)
    manager.add_controller(controller)
    return reconciler


class _Both:
    """The StatefulSets and Deployments as one store, for the reconciler's one index lookup."""

    def __init__(self, *stores: Any):
        self.stores = stores

    def by_index(self, index: str, value: str) -> list[Obj]:
        return [obj for store in self.stores for obj in store.by_index(index, value)]


# How often, at most, Slurm node moves wake the SlurmCluster for its status's counts: a reconcile applies every
# object of the cluster again, and at 5000 nodes with jobs starting and ending some node moves at each poll.
NODE_COUNT_PERIOD = 15.0


def attach(enqueue: Any, *, key: str, clusters: Any, workloads: tuple[Any, ...], nodesets: Any,
           slurm_nodes: Any = None, enqueue_for_nodes: Any = None) -> None:
    """Subscribe ``enqueue`` to what the plan reads (module docstring); and ``enqueue_for_nodes`` (a delayed
    enqueue, which keeps the earliest deadline: one reconcile per period however many move) to a Slurm node
    coming, going or moving to another of the status's counts (``node_state_bucket``: not every state or reason
    change), and to the node list's recovery (a count skipped while it was stale is written then)."""
    namespace = key.partition("/")[0]
    clusters.add_handler(EnqueueHandler(FuncEnqueuer(enqueue), predicate=lambda old, new: old is None
                                        or cluster_view(old) != cluster_view(new)))
    for store in workloads:
        store.add_handler(EnqueueHandler(FuncEnqueuer(enqueue), mapper=cluster_key,
                                         predicate=lambda old, new: old is None
                                         or workload_view(old) != workload_view(new)))

    def nodeset_came_or_went(obj: Obj) -> None:
        if (obj.get("metadata") or {}).get("namespace") == namespace:
            enqueue(key)

    nodesets.add_handler(on_add=nodeset_came_or_went, on_delete=nodeset_came_or_went)
    if slurm_nodes is not None:
        wake = enqueue_for_nodes or enqueue

        def node_moved(old: Node, new: Node) -> None:
            if node_state_bucket(old) != node_state_bucket(new):
                wake(key)

        slurm_nodes.add_handler(on_add=lambda _: wake(key), on_update=node_moved, on_delete=lambda _: wake(key))
        slurm_nodes.on_recovered(lambda: wake(key))
