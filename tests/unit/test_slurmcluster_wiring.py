"""sunk-operator's SlurmCluster wiring: its flag, what wakes the one SlurmCluster (and what does not), and
that the operator assembles it without touching a cluster."""

from __future__ import annotations

import copy
import types
from typing import Any

import pytest
from nodeset_fakes import nodeset
from slurmcluster_fakes import cluster
from syncer_fakes import FakeInformer

from sunk.commands import operator as cli
from sunk.controller.daemon import DaemonConfig
from sunk.model import names
from sunk.model.slurm import Node
from sunk.nodeset.assembly import SlurmOnceItRuns, assemble
from sunk.nodeset.config import OperatorConfig
from sunk.slurm.settings import SlurmSettings
from sunk.slurmcluster.assembly import attach
from sunk.slurmcluster.reconciler import INDEX_CLUSTER, cluster_key


def wired():
    keys: list[str] = []
    inf = types.SimpleNamespace(clusters=FakeInformer(), statefulsets=FakeInformer({INDEX_CLUSTER: cluster_key}),
                                deployments=FakeInformer({INDEX_CLUSTER: cluster_key}), nodesets=FakeInformer())
    attach(keys.append, key="slurm/sc", clusters=inf.clusters, workloads=(inf.statefulsets, inf.deployments),
           nodesets=inf.nodesets)
    return keys, inf


def test_the_cluster_wakes_for_its_spec_and_deletion_not_its_status():
    keys, inf = wired()
    obj = cluster()
    inf.clusters.put(obj)
    assert keys == ["slurm/sc"]
    keys.clear()
    written = copy.deepcopy(obj)
    written["status"] = {"configHash": "x"}
    inf.clusters.put(written)
    assert keys == []
    edited = copy.deepcopy(written)
    edited["metadata"]["generation"] = 3
    inf.clusters.put(edited)
    deleting = copy.deepcopy(edited)
    deleting["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    inf.clusters.put(deleting)
    assert keys == ["slurm/sc", "slurm/sc"]


def test_a_workload_wakes_its_cluster_when_its_readiness_or_rollout_moves():
    keys, inf = wired()
    sts = {"metadata": {"name": "sc-slurmctld", "namespace": "slurm", "generation": 1,
                        "labels": {names.LABEL_SLURM_CLUSTER: "sc"}}, "status": {"readyReplicas": 0}}
    inf.statefulsets.put(sts)
    assert keys == ["slurm/sc"]
    keys.clear()
    same = copy.deepcopy(sts)
    same["status"]["currentRevision"] = "r2"
    inf.statefulsets.put(same)
    assert keys == []
    ready = copy.deepcopy(same)
    ready["status"]["readyReplicas"] = 1
    inf.statefulsets.put(ready)
    assert keys == ["slurm/sc"]


def test_a_nodeset_of_its_namespace_coming_or_going_wakes_it():
    keys, inf = wired()
    inf.nodesets.put(nodeset("gpu"))
    other = nodeset("gpu")
    other["metadata"]["namespace"] = "elsewhere"
    inf.nodesets.put(other)
    inf.nodesets.remove(nodeset("gpu"))
    assert keys == ["slurm/sc", "slurm/sc"]


def test_the_flag():
    config, _, _ = cli.parse_args(["--slurm-cluster=sc", "--slurm-auth-token=t"])
    assert config.slurm_cluster == "sc"
    assert cli.parse_args(["--slurm-auth-token=t"])[0].slurm_cluster == ""
    with pytest.raises(SystemExit):
        cli.parse_args(["--slurm-cluster=Not_A_Name", "--slurm-auth-token=t"])


@pytest.mark.parametrize("reconfigurable", [True, False])
def test_the_operator_assembles_its_slurm_cluster_without_a_cluster(reconfigurable):
    daemon = DaemonConfig(name="sunk-operator", slurm=SlurmSettings(token="t"))
    calls: list[str] = []

    class Slurm:
        list_nodes = list_jobs = None

    class ReconfigurableSlurm(Slurm):
        def reconfigure(self) -> None:
            calls.append("reconfigure")

    slurm = ReconfigurableSlurm() if reconfigurable else Slurm()
    operator = assemble(OperatorConfig(slurm_cluster="sc"), daemon, api=object(), slurm=slurm)  # type: ignore[arg-type]
    assert [c.name for c in operator.manager.controllers] == ["nodeset", "slurmcluster"]
    # the NodeSet's five, the SlurmCluster, its StatefulSets, Deployments, and the start gate on Slurm's first list
    assert len(operator.manager.informers) == 9
    assert isinstance(operator.manager.informers[-1], SlurmOnceItRuns)
    reconciler = operator.manager.controllers[1].reconciler
    assert (reconciler.reconfigure is not None) == reconfigurable
    operator.reconciler.recorder.stop(0.1)
    plain = assemble(OperatorConfig(), daemon, api=object(), slurm=slurm)  # type: ignore[arg-type]
    assert [c.name for c in plain.manager.controllers] == ["nodeset"]
    plain.reconciler.recorder.stop(0.1)


class SlurmNodes:
    """The operator's Slurm node informer, as far as the SlurmCluster reads it."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.handlers: list[Any] = []
        self.recovered: list[Any] = []
        self.fresh = True

    def on_recovered(self, callback: Any) -> None:
        self.recovered.append(callback)

    def add_handler(self, *, on_add: Any, on_update: Any, on_delete: Any) -> None:
        self.handlers.append((on_add, on_update, on_delete))

    def items(self) -> dict[str, Node]:
        return dict(self.nodes)

    def put(self, node: Node) -> None:
        old = self.nodes.get(node.name)
        self.nodes[node.name] = node
        for on_add, on_update, _ in self.handlers:
            on_add(node) if old is None else on_update(old, node)

    def remove(self, name: str) -> None:
        node = self.nodes.pop(name)
        for _, _, on_delete in self.handlers:
            on_delete(node)


def test_a_slurm_node_wakes_the_cluster_later_when_it_comes_goes_or_moves_to_another_count():
    """Through the delayed enqueue (one reconcile per period however many nodes move: each reconcile applies every
    object again), never the immediate one; and when the node list recovers (a count skipped while stale)."""
    keys: list[str] = []
    later: list[str] = []
    nodes = SlurmNodes()
    attach(keys.append, key="slurm/sc", clusters=FakeInformer(), workloads=(), nodesets=FakeInformer(),
           slurm_nodes=nodes, enqueue_for_nodes=later.append)
    nodes.put(Node("gpu-1", "IDLE"))
    assert later == ["slurm/sc"]
    nodes.put(Node("gpu-1", "IDLE", reason="x", cpus=64))  # (the same count: idle)
    nodes.put(Node("gpu-1", "IDLE+DRAIN", reason="k8s: cordoned"))
    nodes.put(Node("gpu-1", "ALLOCATED+DRAIN", reason="k8s: cordoned"))  # (still drained)
    nodes.remove("gpu-1")
    assert later == ["slurm/sc"] * 3 and keys == []
    (recovered,) = nodes.recovered
    recovered()
    assert later == ["slurm/sc"] * 4


def test_nodes_by_state_counts_each_node_once_down_first():
    from sunk.translate.slurmcluster.plan import node_state_bucket, nodes_by_state

    found = nodes_by_state([Node("a", "IDLE"), Node("b", "MIXED"), Node("c", "ALLOCATED"), Node("d", "IDLE+COMPLETING"),
                            Node("e", "IDLE+DRAIN"), Node("f", "MIXED+DRAIN"), Node("g", "DOWN+DRAIN"),
                            Node("h", "DOWN+NOT_RESPONDING"), Node("i", "FUTURE"), Node("j", "UNKNOWN")])
    assert found == {"total": 10, "idle": 1, "allocated": 3, "drained": 2, "down": 2, "other": 2}
    assert nodes_by_state([]) == dict.fromkeys(("total", "idle", "allocated", "drained", "down", "other"), 0)
    assert [node_state_bucket(Node("x", s)) for s in ("IDLE", "MIXED", "IDLE+DRAIN", "DOWN", "FUTURE")] == [
        "idle", "allocated", "drained", "down", "other"]
