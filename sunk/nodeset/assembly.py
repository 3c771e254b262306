"""Wiring one sunk-operator process: informers, the Slurm node cache, what wakes which NodeSet.

Start-up and leadership come from the Manager: informers and the Slurm cache run on every
replica; the controller runs on the leader only, once every informer and Slurm's first node
list are in, so no Pod is created or deleted from an empty cache.

What wakes a NodeSet (by events, never by a timer):
- the NodeSet itself: a spec, deletion or finalizer change (its status is its own writing);
- a Node added or deleted, or whose labels, addresses, allocatable GPUs or deletion changed
  (not heartbeats):
  every NodeSet, since any may select it;
- one of its Pods: added, deleted, or its readiness, marks, hash or Node changed; a deleted
  Pod wakes every NodeSet of its namespace too (one may wait for the name);
- one of its NodeSlices;
- a Slurm node of one of its Pods changing state or drain reason.

With ``--slurm-cluster``, a controller of that one SlurmCluster (``sunk/slurmcluster/assembly.py``), whose
informer the NodeSet reconciler reads too: a NodeSet naming it (``spec.slurmCluster``) gets its configuration,
munge key and prolog/epilog mounted, and is woken when the cluster comes, goes, or its spec, ``SpecValid`` or
``observedGeneration`` changes (the NodeSets naming it, by an index: no walk of every NodeSet).

With ``--topology``, a second controller of one key writes Slurm's topology (``topology.py``),
woken by a Node's labels, a slurmd Pod coming, going or moving, a Slurm node added or deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import attrs
from kubernetes.client import ApiClient

from sunk.controller.daemon import DaemonConfig
from sunk.controller.handlers import EnqueueHandler, FuncEnqueuer
from sunk.controller.manager import Manager
from sunk.controller.runtime import Controller
from sunk.kube.events import EventRecorder
from sunk.kube.informer import Informer
from sunk.kube.resources import NODES, NODESETS, NODESLICES, PODS, object_key
from sunk.model import names
from sunk.model.slurm import Node
from sunk.model.types import Obj
from sunk.slurm.client import Reconfigurable, SlurmClient
from sunk.slurm.informer import NodeInformer, SlurmInformerFactory
from sunk.slurmcluster.assembly import add_slurm_cluster
from sunk.translate import objects
from sunk.translate.nodeset.pod import pending_deletion, pod_hash
from sunk.translate.nodeset.registration import GPU_RESOURCE
from sunk.translate.objects import pod_ready, slim_node
from sunk.translate.slurmcluster.plan import SLURMRESTD_READY
from sunk.translate.slurmd import slurm_node_name

from .config import NAME, OperatorConfig
from .reconciler import INDEX_CLUSTER_REF, INDEX_NODESET, NodeSetReconciler, cluster_ref_key, nodeset_key
from .topology import TOPOLOGY_KEY, TopologyWriter

log = logging.getLogger(__name__)

INDEX_SLURM_NODE = "slurm-node"  # the NodeSets' Pods by Slurm node name


@attrs.define
class Operator:
    manager: Manager
    controller: Controller
    reconciler: NodeSetReconciler
    topology: TopologyWriter | None = None


def operator_slim_node(node: Obj) -> Obj:
    """What the operator reads of a Node: its name, labels, deletion, addresses and allocatable GPUs."""
    slim = slim_node(node, labels=True, deletion=True, addresses=True)
    gpus = ((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE)
    if gpus is not None:
        slim["status"]["allocatable"] = {GPU_RESOURCE: gpus}
    return slim


def node_view(node: Obj) -> tuple[Any, ...]:
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    return (meta.get("labels") or {}, meta.get("deletionTimestamp"), status.get("addresses") or [],
            (status.get("allocatable") or {}).get(GPU_RESOURCE))


def pod_view(pod: Obj) -> tuple[Any, ...]:
    """What the plan reads of a Pod; the kubelet's other status writes change none of it."""
    meta = pod.get("metadata") or {}
    return (meta.get("deletionTimestamp"), pending_deletion(pod), pod_hash(pod), pod_ready(pod),
            (pod.get("spec") or {}).get("nodeName"), (meta.get("labels") or {}).get(names.LABEL_NODESET))


def nodeset_view(nodeset: Obj) -> tuple[Any, ...]:
    meta = nodeset.get("metadata") or {}
    return (meta.get("generation"), meta.get("deletionTimestamp"), tuple(meta.get("finalizers") or ()),
            nodeset.get("spec"))


def slurm_node_changed(old: Node, new: Node) -> bool:
    """What of a Slurm node the plan reads: its state and reason."""
    return (old.state, old.reason) != (new.state, new.reason)


def assemble(config: OperatorConfig, daemon: DaemonConfig, *, api: ApiClient, slurm: SlurmClient,
             slurm_nodes: NodeInformer | None = None) -> Operator:
    """Build (not start) the operator."""
    manager = daemon.manager(api)
    cache = slurm_nodes or SlurmInformerFactory(slurm, interval=daemon.slurm.poll_interval).nodes()
    nodesets = Informer(api, NODESETS, config.watch_namespace, name="nodesets")
    nodesets.add_indexer(INDEX_CLUSTER_REF, cluster_ref_key)
    slices = Informer(api, NODESLICES, config.watch_namespace, label_selector=names.LABEL_NODESET, name="nodeslices")
    slices.add_indexer(INDEX_NODESET, nodeset_key)
    pods = Informer(api, PODS, config.watch_namespace, label_selector=names.LABEL_NODESET, name="nodeset-pods")
    pods.add_indexer(INDEX_NODESET, nodeset_key)
    pods.add_indexer(INDEX_SLURM_NODE, lambda pod: [slurm_node_name(pod)])
    nodes = Informer(api, NODES, transform=operator_slim_node, name="nodes")
    recorder = EventRecorder(api, component=NAME)
    reconciler = NodeSetReconciler(api=api, slurm=slurm, nodesets=nodesets, nodes=nodes, pods=pods, slices=slices,
                                   slurm_nodes=cache, recorder=recorder, stale_retry=config.stale_retry,
                                   gpu_types=dict(config.gpu_types), gres_from_node=config.gres_from_node)
    controller = Controller("nodeset", reconciler, workers=daemon.workers)
    attach(controller.queue.add, nodesets=nodesets, nodes=nodes, pods=pods, slices=slices, cache=cache)
    for informer in (nodesets, slices, pods, nodes):
        manager.add_informer(informer)
    # No decision before Slurm's first node list; but a SlurmCluster's Slurm exists only once this operator made
    # it: then its first sync gates the start only once that Slurm runs (SlurmOnceItRuns, below).
    manager.add_informer(cache, wait_for_sync=not config.slurm_cluster)
    manager.add_ready_check("slurm-cache", lambda: cache.synced)
    manager.add_controller(controller)
    if config.slurm_cluster:
        clusters = add_slurm_cluster(manager, api=api, slurm=slurm, namespace=config.watch_namespace,
                                     name=config.slurm_cluster, nodesets=nodesets, recorder=recorder,
                                     slurm_nodes=cache).clusters
        reconciler.clusters, reconciler.watched_cluster = clusters, config.slurm_cluster
        attach_clusters(controller.queue.add, clusters=clusters, nodesets=nodesets)
        cluster_key = f"{config.watch_namespace}/{config.slurm_cluster}"
        manager.add_informer(SlurmOnceItRuns(cache, lambda: clusters.get(cluster_key)))  # (after the clusters')
    writer = None
    if config.topology.kind:
        reconfigure = None
        if config.topology_reconfigure:
            if isinstance(slurm, Reconfigurable):
                reconfigure = slurm.reconfigure
            else:
                log.warning("topology: the %s Slurm backend cannot reconfigure slurmctld; the topology takes "
                            "effect at its next reconfigure or restart", type(slurm).__name__)
        writer = TopologyWriter(api=api, settings=config.topology, namespace=config.watch_namespace, pods=pods,
                                nodes=nodes, slurm_nodes=cache, configmap=config.topology_configmap,
                                file=config.topology_file, reconfigure=reconfigure, stale_retry=config.stale_retry)
        topology = Controller("topology", writer, workers=1)
        attach_topology(topology.queue.add, nodes=nodes, pods=pods, cache=cache)
        manager.add_controller(topology)
    return Operator(manager=manager, controller=controller, reconciler=reconciler, topology=writer)


@attrs.frozen
class SlurmOnceItRuns:
    """The Slurm node cache's first sync as the start gate of an operator that runs its own SlurmCluster: awaited
    once that cluster's slurmrestd is Ready (a restart, a failover: no decision before Slurm's first node list,
    and no replica that cannot reach Slurm takes the Lease), not before (a fresh install: only this operator's
    controllers bring that Slurm up). Added after the SlurmCluster's informer, which the Manager awaits first."""

    cache: NodeInformer
    cluster: Callable[[], Obj | None]

    def _not_yet_running(self) -> bool:
        ready = objects.condition(self.cluster(), SLURMRESTD_READY)
        return ready is None or ready.get("status") != "True"

    def start(self) -> None:  # (the cache is an informer of the Manager's already)
        return None

    def stop(self, timeout: float | None = None) -> None:
        return None

    def has_synced(self) -> bool:
        return self.cache.has_synced() or self._not_yet_running()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self.cache.wait_for_sync(timeout) or self._not_yet_running()


def topology_view(pod: Obj) -> tuple[Any, ...]:
    """What the topology reads of a slurmd Pod: its Slurm node, its Node, whether it is going."""
    return (slurm_node_name(pod), (pod.get("spec") or {}).get("nodeName"),
            bool((pod.get("metadata") or {}).get("deletionTimestamp")))


def cluster_mount_view(cluster: Obj) -> tuple[Any, ...]:
    """What a NodeSet reads of its SlurmCluster: its spec (the names it lends), deletion, SpecValid and
    the generation its reconciler applied (the NodeSet waits for it to reach the spec's)."""
    meta, status = cluster.get("metadata") or {}, cluster.get("status") or {}
    valid = [c.get("status") for c in status.get("conditions") or []
             if isinstance(c, dict) and c.get("type") == "SpecValid"]
    return meta.get("generation"), meta.get("deletionTimestamp"), tuple(valid), status.get("observedGeneration")


def attach_clusters(enqueue: Callable[[str], None], *, clusters: Any, nodesets: Any) -> None:
    """The NodeSets naming a SlurmCluster, when it comes, goes or changes what they read of it."""

    def naming(cluster: Obj) -> None:
        for ns in nodesets.by_index(INDEX_CLUSTER_REF, object_key(cluster)):
            enqueue(object_key(ns))

    clusters.add_handler(on_add=naming, on_delete=naming,
                         on_update=lambda old, new: naming(new) if cluster_mount_view(old) != cluster_mount_view(new)
                         else None)


def attach_topology(enqueue: Callable[[str], None], *, nodes: Any, pods: Any, cache: Any) -> None:
    """The one topology key, on a Node's labels, a slurmd Pod coming, going or moving, a Slurm node
    registering or deleted (its state changes do not move it in the topology)."""

    def wake(*_: Any) -> None:
        enqueue(TOPOLOGY_KEY)

    def node_labels_changed(old: Obj, new: Obj) -> None:
        if (old.get("metadata") or {}).get("labels") != (new.get("metadata") or {}).get("labels"):
            wake()

    def pod_changed(old: Obj, new: Obj) -> None:
        if topology_view(old) != topology_view(new):
            wake()

    nodes.add_handler(on_add=wake, on_delete=wake, on_update=node_labels_changed)
    pods.add_handler(on_add=wake, on_delete=wake, on_update=pod_changed)

    cache.add_handler(on_add=wake, on_delete=wake)


def attach(enqueue: Callable[[str], None], *, nodesets: Any, nodes: Any, pods: Any, slices: Any, cache: Any) -> None:
    """Subscribe ``enqueue`` (NodeSet keys) to every change the plan reads (module docstring)."""

    def every_nodeset(_obj: Obj | None = None, _new: Obj | None = None) -> None:
        for ns in nodesets.list():
            enqueue(object_key(ns))

    def nodesets_of_namespace(pod: Obj) -> None:
        namespace = pod["metadata"].get("namespace")
        for ns in nodesets.list():
            if ns["metadata"].get("namespace") == namespace:
                enqueue(object_key(ns))

    nodesets.add_handler(EnqueueHandler(FuncEnqueuer(enqueue), predicate=lambda old, new: old is None
                                        or nodeset_view(old) != nodeset_view(new)))
    nodes.add_handler(on_add=every_nodeset, on_delete=every_nodeset,
                      on_update=lambda old, new: every_nodeset() if node_view(old) != node_view(new) else None)
    pods.add_handler(EnqueueHandler(FuncEnqueuer(enqueue), mapper=nodeset_key,
                                    predicate=lambda old, new: old is None or pod_view(old) != pod_view(new)))
    pods.add_handler(on_delete=nodesets_of_namespace)
    slices.add_handler(EnqueueHandler(FuncEnqueuer(enqueue), mapper=nodeset_key))

    def nodesets_of(node: Node) -> None:
        for pod in pods.by_index(INDEX_SLURM_NODE, node.name):
            for key in nodeset_key(pod):
                enqueue(key)

    cache.add_handler(on_add=nodesets_of, on_delete=nodesets_of,
                      on_update=lambda old, new: nodesets_of(new) if slurm_node_changed(old, new) else None)
