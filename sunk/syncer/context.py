"""What the Syncer shares with the code that runs inside it: its caches, clients and queue.

Why a context object: the Syncer's core (state sync) and its plugins (node locking with
the hook API) run in one process over the same informers, Kubernetes' and Slurm's, so a
plugin never lists Pods or Slurm nodes a second time. A plugin is told about the process
through ``SyncerContext`` and answers with ``PluginParts``; the CLI does the assembling.

Keys: everything in the Syncer is keyed by the Slurm node name. A slurmd Pod names its
Slurm node by ``spec.hostname`` (as slurmd registers with its hostname), or by its own
name when no hostname is set: the one mapping of ``sunk.translate.slurmd``, which the
scheduler, the extender and the NodeSet operator use too.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import attrs

from sunk.model import names
from sunk.model.types import Obj
from sunk.translate import slurmd
from sunk.translate.nodeset import slices

if TYPE_CHECKING:
    from flask import Blueprint
    from kubernetes.client import ApiClient

    from sunk.controller.manager import Manager, Runnable
    from sunk.controller.runtime import Controller
    from sunk.kube.events import EventRecorder
    from sunk.kube.informer import Informer
    from sunk.slurm.client import SlurmClient
    from sunk.slurm.informer import JobInformer, NodeInformer

    from .config import SyncerConfig


# Index names the Syncer registers; plugins may query them.
INDEX_SLURM_NODE = "slurm-node"  # slurmd Pods by Slurm node name
INDEX_NODE = "node"  # Pods by spec.nodeName, on both Pod informers


def slurm_node_name(pod: Obj) -> str:
    """The Slurm node a slurmd Pod runs: its hostname, else its name (``sunk.translate.slurmd``)."""
    return slurmd.slurm_node_name(pod)


def index_slurm_node(pod: Obj) -> list[str]:
    return [slurm_node_name(pod)]


def nodeslice_slurm_nodes(nodeslice: Obj) -> list[str]:
    """The Slurm nodes a NodeSlice lists (its INDEX_SLURM_NODE)."""
    return [entry.slurm_node for entry in slices.entries_of(nodeslice) if entry.slurm_node]


def nodeslice_nodeset(nodeslice: Obj) -> str:
    """The NodeSet a NodeSlice belongs to: ``spec.nodeSet``, else its label, else the slice's name."""
    meta = nodeslice.get("metadata") or {}
    return str((nodeslice.get("spec") or {}).get("nodeSet") or (meta.get("labels") or {}).get(names.LABEL_NODESET)
               or meta.get("name") or "")


@attrs.frozen
class SyncerContext:
    """The running Syncer, as its reconcilers and plugins see it. Read from caches; write through ``api``/``slurm``."""

    api: ApiClient
    slurm: SlurmClient
    slurm_nodes: NodeInformer  # Slurm's nodes, by name (``sunk.slurm.informer``): the sync decisions read these
    slurm_jobs: JobInformer  # Slurm's jobs, by id, on their own thread: a slow job list never delays node state
    slurmd_pods: Informer  # slurmd Pods: --watch-namespace + --slurmd-selector; index INDEX_SLURM_NODE, INDEX_NODE
    nodes: Informer  # Kubernetes Nodes, cluster-wide, trimmed: objects.syncer_slim_node says which fields stay
    all_pods: Informer  # every Pod cluster-wide, trimmed (podstores.syncer_slim_pod); index INDEX_NODE (spec.nodeName)
    recorder: EventRecorder
    config: SyncerConfig
    enqueue_node: Callable[[str], None]  # wake the Syncer's reconcilers for one Slurm node
    manager: Manager | None = None  # for add_ready_check / is_leader; None in unit tests
    # NodeSlices in --watch-namespace, index INDEX_SLURM_NODE; only with --slurm-node-clean-up (None without)
    nodeslices: Informer | None = None
    # With --dra-device-mapping (sunk.kube.dra, index INDEX_NODE): every ResourceClaim, and the driver's ResourceSlices
    dra_claims: Informer | None = None
    dra_slices: Informer | None = None

    def nudge_slurm(self) -> None:
        """Refresh both Slurm informers soon: a write to Slurm (a node update, a deletion) is expected to show."""
        self.slurm_nodes.nudge()
        self.slurm_jobs.nudge()

    # ---- lookups, all from memory -------------------------------------------------------

    def pod_for(self, slurm_node: str) -> Obj | None:
        """The slurmd Pod of ``slurm_node`` (the newest, if a replacement overlaps the old one)."""
        pods = self.slurmd_pods.by_index(INDEX_SLURM_NODE, slurm_node)
        if not pods:
            return None
        return max(pods, key=lambda p: str(p["metadata"].get("creationTimestamp") or ""))

    def k8s_node_for(self, slurm_node: str) -> Obj | None:
        """The Kubernetes Node the slurmd Pod of ``slurm_node`` is bound to."""
        pod = self.pod_for(slurm_node)
        node_name = (pod or {}).get("spec", {}).get("nodeName")
        return self.nodes.get(node_name) if node_name else None

    def slurm_nodes_on(self, k8s_node: str) -> list[str]:
        """Slurm node names whose slurmd Pods are bound to the Kubernetes Node ``k8s_node``."""
        return sorted({slurm_node_name(p) for p in self.slurmd_pods.by_index(INDEX_NODE, k8s_node)})

    def nodeset_of(self, slurm_node: str) -> str | None:
        """The NodeSet whose NodeSlice lists ``slurm_node`` (the first by slice name); None if none does,
        or if NodeSlices are not watched."""
        if self.nodeslices is None:
            return None
        found = sorted(self.nodeslices.by_index(INDEX_SLURM_NODE, slurm_node), key=lambda s: s["metadata"]["name"])
        return nodeslice_nodeset(found[0]) if found else None

    def is_leader(self) -> bool:
        return self.manager.is_leader() if self.manager is not None else True


@attrs.frozen
class PluginParts:
    """What a plugin adds to the Syncer process.

    - ``controllers`` run only on the leader, after every informer and the Slurm cache synced;
    - ``blueprint`` is mounted on the hook API app, served by every replica;
    - ``runnables`` start on every replica (``needs_leader=False``) or only the leader.
    """

    controllers: Sequence[Controller] = ()
    blueprint: Blueprint | None = None
    runnables: Sequence[tuple[Runnable, bool]] = ()  # (runnable, needs_leader)


class Plugin(Protocol):
    """A Syncer extension, found as ``PLUGIN`` in a module the CLI imports (e.g. ``sunk.locking.plugin``)."""

    name: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add the plugin's flags; called before parsing. A flag may redefine a core one."""
        ...

    def install(self, ctx: SyncerContext, args: argparse.Namespace) -> PluginParts:
        """Build the plugin's parts from the running Syncer; called once, in the serving worker.

        ``args`` are the parsed flags, the plugin's own among them: the plugin builds its typed
        settings from them here. The Syncer's core never reads them (it has ``ctx.config``).
        """
        ...


Installer = Callable[[SyncerContext], PluginParts]  # a plugin's install, its flags bound (plugins.installers)
