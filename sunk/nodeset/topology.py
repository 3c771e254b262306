"""The topology writer: Slurm's topology file from the Node labels of every NodeSet's Slurm nodes.

One key (``TOPOLOGY_KEY``), level-based: whatever woke it (a Node's labels, a slurmd Pod
coming or going, a Slurm node registering or deleted), it renders the whole file from the
caches (``sunk.translate.nodeset.topology``) and writes it only when the text differs:

1. the ConfigMap ``--topology-configmap`` (key ``topology.yaml`` or ``topology.conf``), which
   the chart mounts into slurmctld like SUNK's SlurmCluster controller's;
2. ``--topology-file``, when slurmctld reads its files from a path this process can write
   (the dev cluster; a shared volume), written whole and renamed into place;
3. then, with ``--topology-reconfigure``, ``scontrol reconfigure`` through the Slurm backend
   (slurmrestd's ``GET /reconfigure/``, or libslurm's ``slurm_reconfigure``): slurmctld rereads
   its files without a restart and running jobs go on (topology.conf(5): changes "take effect
   upon ... scontrol reconfigure"). A mounted ConfigMap reaches slurmctld's file when the kubelet
   syncs it (up to a minute); a file written here is read at once.

Only Slurm nodes that slurmctld knows now are named (a topology naming a node it does not
know is refused); with none, nothing is written (the last file stays: an empty block
topology is no topology). While Slurm's node list is stale, nothing is written and the key
is retried.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import attrs
from kubernetes.client import ApiClient

from sunk.controller.runtime import Result
from sunk.kube import client as kc
from sunk.kube.resources import CONFIGMAPS
from sunk.kube.store import Store
from sunk.model.types import Obj
from sunk.translate.nodeset.topology import YAML, Placement, TopologySettings, build, render
from sunk.translate.objects import is_deleting
from sunk.translate.slurmd import k8s_node_name, slurm_node_name

from .reconciler import NodeCache

log = logging.getLogger(__name__)

TOPOLOGY_KEY = "topology"


def placements(pods: list[Obj], nodes: Store, known: Mapping[str, object]) -> list[Placement]:
    """Each live NodeSet Pod's Slurm node that Slurm knows, with its Node's labels."""
    out = []
    for pod in pods:
        node = k8s_node_name(pod)
        name = slurm_node_name(pod)
        if is_deleting(pod) or node is None or name not in known:
            continue
        obj = nodes.get(node)
        labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
        out.append(Placement(name, labels))
    return out


def write_atomically(path: Path, text: str) -> None:
    """The whole file or the old one: slurmctld never reads half a topology."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@attrs.define
class TopologyWriter:
    api: ApiClient
    settings: TopologySettings
    namespace: str
    pods: Store  # every NodeSet's Pods
    nodes: Store  # Nodes with labels
    slurm_nodes: NodeCache
    configmap: str = ""  # "" writes none
    file: Path | None = None
    reconfigure: Callable[[], None] | None = None
    stale_retry: float = 2.0
    # How long a changed ConfigMap takes to reach slurmctld's mounted file (the kubelet's sync period and
    # its cache): with no file of its own, the writer reconfigures only after that, else slurmctld would
    # re-read the old file and nothing would tell it again.
    configmap_sync: float = 90.0
    # At most one reconfigure per this many seconds; the files are written at once. Slurm 24.05+ restarts
    # slurmctld in place on a reconfigure (its RPCs and registrations wait meanwhile), and a rolling update
    # changes the topology twice per node: one per change made a 150-node update take 465 s, not 40
    # (docs/benchmarks.md, NodeSet). A node not yet in the file is only unplaced meanwhile, and one gone is
    # only a warning (block sizes are written). While changes keep coming the spacing doubles, up to
    # ``max_reconfigure_interval``: a kubelet may set its own Node's labels, so a compromised one flipping its
    # domain would otherwise restart slurmctld every 5 s for as long as it likes. A change after a quiet spell
    # (twice the spacing) is applied at once, and the spacing is back to the minimum.
    min_reconfigure_interval: float = 5.0
    max_reconfigure_interval: float = 60.0
    clock: Callable[[], float] = time.monotonic
    written: str | None = None  # the text last applied by this process
    reconfigure_due: bool = False  # a ConfigMap written, its reconfigure waiting for the kubelet's sync
    last_reconfigure: float | None = None
    reconfigure_interval: float | None = None  # the spacing now (None: the minimum)

    def reconcile(self, key: str) -> Result | None:
        if not self.slurm_nodes.fresh:
            return Result(requeue_after=self.stale_retry)
        topology = build(self.settings, placements(self.pods.list(), self.nodes, self.slurm_nodes.items()))
        for problem in topology.problems:
            log.warning("topology: %s", problem)
        # Empty (no labelled node registered): topology.yaml says flat; a topology.conf stays as it was (with
        # TopologyPlugin=topology/block, slurmctld exits on a file without blocks and on a missing one), and
        # is safe so: its BlockSizes are written (translate's block_sizes), so nodes it names that are gone
        # are only warnings.
        if topology.empty and self.settings.file_format != YAML:
            return None
        text = render(self.settings, topology)
        if text == self.written:
            if self.reconfigure_due and self.reconfigure is not None:
                return self._reconfigure_or_wait()
            return None
        configmap_changed = self._write_configmap(text)
        if self.file is not None and (not self.file.exists() or self.file.read_text(encoding="utf-8") != text):
            write_atomically(self.file, text)
        log.info("topology: wrote %s, %d Slurm nodes (%d problems)", self.settings.file_format,
                 sum(len(nodes) for _, nodes in (*topology.blocks, *topology.leaves)), len(topology.problems))
        self.written = text
        if self.reconfigure is None:
            return None
        self.reconfigure_due = True  # (until one succeeds: a failed one is tried again on the retry)
        if self.file is None and configmap_changed:  # (slurmctld reads the ConfigMap's file once it is synced)
            return Result(requeue_after=self.configmap_sync)
        return self._reconfigure_or_wait()  # (also after a restart of this process)

    def _reconfigure_or_wait(self) -> Result | None:
        """``scontrol reconfigure`` now, or once the spacing has passed since the last one; the spacing doubles
        when this one follows the last within twice it, and is the minimum again after a quiet spell."""
        assert self.reconfigure is not None
        spacing = self.min_reconfigure_interval
        if self.last_reconfigure is not None:
            current = self.reconfigure_interval or self.min_reconfigure_interval
            since = self.clock() - self.last_reconfigure
            if since < current:
                return Result(requeue_after=current - since)
            if since < 2 * current:
                spacing = min(2 * current, self.max_reconfigure_interval)
                if spacing > current:
                    log.info("topology: changes keep coming; reconfigures now at most every %.0f s", spacing)
        self.reconfigure()
        self.last_reconfigure = self.clock()
        self.reconfigure_interval = spacing
        self.reconfigure_due = False
        return None

    def _write_configmap(self, text: str) -> bool:
        if not self.configmap:
            return False
        data = {self.settings.file_format: text}
        try:
            current = kc.get(self.api, CONFIGMAPS, self.configmap, self.namespace)
        except kc.ApiError as exc:
            if not exc.not_found:
                raise
            kc.create(self.api, CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
                "name": self.configmap, "namespace": self.namespace,
                "labels": {"app.kubernetes.io/managed-by": "sunk-operator"}}, "data": data}, self.namespace)
            return True
        if (current.get("data") or {}).get(self.settings.file_format) == text:
            return False
        kc.patch(self.api, CONFIGMAPS, self.configmap, {"data": data}, self.namespace)
        return True
