"""sunk-operator's wiring: which events wake which NodeSet (and which wake none), its flags, and
that it assembles without touching a cluster."""

from __future__ import annotations

import copy
import types

import pytest
from nodeset_fakes import node, nodeset, pod_for
from syncer_fakes import FakeInformer

from sunk.commands import operator as cli
from sunk.controller.daemon import DaemonConfig
from sunk.model import names
from sunk.model.slurm import Node
from sunk.nodeset.assembly import INDEX_SLURM_NODE, assemble, attach, operator_slim_node
from sunk.nodeset.config import OperatorConfig
from sunk.nodeset.reconciler import INDEX_NODESET, nodeset_key
from sunk.slurm.settings import SlurmSettings
from sunk.translate.slurmd import slurm_node_name


class Cache:
    """The Slurm nodes informer's handler registration."""

    def __init__(self) -> None:
        self.handlers: list = []

    def add_handler(self, handler=None, **funcs):
        from sunk.kube.store import FuncHandler

        self.handlers.append(handler or FuncHandler(funcs.get("on_add"), funcs.get("on_update"),
                                                    funcs.get("on_delete")))


def wired():
    keys: list[str] = []
    informers = types.SimpleNamespace(
        nodesets=FakeInformer(), nodes=FakeInformer(),
        pods=FakeInformer({INDEX_NODESET: nodeset_key, INDEX_SLURM_NODE: lambda p: [slurm_node_name(p)]}),
        slices=FakeInformer({INDEX_NODESET: nodeset_key}), cache=Cache())
    informers.nodesets.put(nodeset("gpu"))
    informers.nodesets.put(nodeset("cpu", prefix="c"))
    attach(keys.append, **vars(informers))
    keys.clear()
    return keys, informers


def test_nodes_wake_every_nodeset_but_not_for_heartbeats():
    keys, inf = wired()
    inf.nodes.put(node("worker-1", "10.0.3.1"))
    assert sorted(keys) == ["slurm/cpu", "slurm/gpu"]
    keys.clear()
    beat = copy.deepcopy(node("worker-1", "10.0.3.1"))
    beat["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": "now"}]
    inf.nodes.put(beat)
    assert keys == []
    inf.nodes.put(node("worker-1", "10.0.3.1", pool="cpu"))  # a label
    inf.nodes.put(node("worker-1", "10.0.4.1", pool="cpu"))  # an address
    assert sorted(keys) == ["slurm/cpu", "slurm/cpu", "slurm/gpu", "slurm/gpu"]
    keys.clear()
    inf.nodes.put(node("worker-1", "10.0.4.1", pool="cpu", gpus="4"))  # its GPUs (registered from the Node)
    assert sorted(keys) == ["slurm/cpu", "slurm/gpu"]


def test_a_pod_wakes_its_nodeset_when_what_the_plan_reads_changes():
    keys, inf = wired()
    ns = nodeset("gpu")
    pod = pod_for(ns, "worker-1", "g-3-1")
    inf.pods.put(pod)
    assert keys == ["slurm/gpu"]
    keys.clear()
    other = copy.deepcopy(pod)
    other["status"]["podIP"] = "10.9.9.9"  # the kubelet's other writes
    other["metadata"]["resourceVersion"] = "6"
    inf.pods.put(other)
    assert keys == []
    unready = copy.deepcopy(other)
    unready["status"]["conditions"][0]["status"] = "False"
    inf.pods.put(unready)
    marked = copy.deepcopy(unready)
    marked["metadata"]["annotations"][names.ANN_PENDING_DELETION] = "x"
    inf.pods.put(marked)
    assert keys == ["slurm/gpu", "slurm/gpu"]
    keys.clear()
    inf.pods.remove(marked)  # its name is free: every NodeSet of the namespace may want it
    assert sorted(set(keys)) == ["slurm/cpu", "slurm/gpu"]


def test_a_nodeset_wakes_itself_but_not_for_its_own_status():
    keys, inf = wired()
    ns = nodeset("gpu")
    ns["status"] = {"ready": 3}
    inf.nodesets.put(ns)
    assert keys == []
    changed = copy.deepcopy(ns)
    changed["spec"]["replicas"] = 2
    changed["metadata"]["generation"] = 4
    inf.nodesets.put(changed)
    assert keys == ["slurm/gpu"]


def test_slurm_state_and_reason_changes_wake_the_nodeset_of_that_node_only():
    keys, inf = wired()
    inf.pods.put(pod_for(nodeset("gpu"), "worker-1", "g-3-1"))
    keys.clear()
    (handler,) = inf.cache.handlers
    handler.on_update(Node("g-3-1", state="IDLE"), Node("g-3-1", state="IDLE", alloc_cpus=4))
    assert keys == []
    handler.on_update(Node("g-3-1", state="IDLE"), Node("g-3-1", state="IDLE+DRAIN", reason="x"))
    handler.on_add(Node("other"))
    assert keys == ["slurm/gpu"]
    keys.clear()
    handler.on_delete(Node("g-3-1", state="IDLE+DRAIN", reason="x"))  # a node gone: its NodeSet looks again
    assert keys == ["slurm/gpu"]


def test_slices_wake_their_nodeset():
    keys, inf = wired()
    inf.slices.put({"metadata": {"name": "gpu-0", "namespace": "slurm", "labels": {names.LABEL_NODESET: "gpu"}}})
    assert keys == ["slurm/gpu"]


def test_nodes_are_trimmed_to_what_the_plan_reads():
    full = node("worker-1", "10.0.3.1")
    full["status"].update(images=[{"names": ["x"] * 50}], conditions=[{"type": "Ready"}])
    full["spec"] = {"taints": []}
    slim = operator_slim_node(full)
    assert slim["status"] == {"addresses": full["status"]["addresses"]}
    assert slim["metadata"]["labels"] == {"pool": "gpu"} and "spec" not in slim
    with_gpus = node("worker-1", "10.0.3.1", gpus="4")
    assert operator_slim_node(with_gpus)["status"] == {"addresses": with_gpus["status"]["addresses"],
                                                       "allocatable": {"nvidia.com/gpu": "4"}}  # not its cpu


def test_flags_and_defaults(monkeypatch):
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    config, daemon, _ = cli.parse_args(["--slurm-auth-token", "t"])
    assert config == OperatorConfig(watch_namespace="slurm", stale_retry=2.0)
    assert daemon.name == "sunk-operator" and daemon.workers == 2
    election = daemon.leader_election
    assert election is not None and (election.lease_name, election.namespace) == ("sunk-operator", "slurm")
    assert (daemon.metrics_bind_address, daemon.health_bind_address) == (":8080", ":8081")
    config, daemon, _ = cli.parse_args(["--slurm-auth-token", "t", "--watch-namespace", "hpc", "--leader-elect=false",
                                        "--stale-retry", "5s"])
    assert config.watch_namespace == "hpc" and config.stale_retry == 5.0 and daemon.leader_election is None
    config, _, _ = cli.parse_args(["--slurm-auth-token", "t", "--gpu-types", "A100_NVLINK_80GB=a100,H100:h100"])
    assert config.gpu_types == (("A100_NVLINK_80GB", "a100"), ("H100", "h100"))
    with pytest.raises(SystemExit):
        cli.parse_args(["--slurm-auth-token", "t", "--gpu-types", "A100"])


def test_it_assembles_without_a_cluster():
    daemon = DaemonConfig(name="sunk-operator", slurm=SlurmSettings(token="t"))
    slurm = types.SimpleNamespace(list_nodes=None, list_jobs=None)
    config = OperatorConfig(gpu_types=(("A100", "a100"),))
    operator = assemble(config, daemon, api=object(), slurm=slurm)  # type: ignore[arg-type]
    assert operator.controller.name == "nodeset"
    assert operator.reconciler.facts(nodeset("gpu")).gpu_types == {"A100": "a100"}  # what the plan types GPUs by
    assert len(operator.manager.informers) == 5  # nodesets, nodeslices, pods, nodes, and Slurm's nodes
    operator.reconciler.recorder.stop(0.1)


def test_run_headless_checks_slurm_then_runs_the_manager_in_this_process(monkeypatch):
    from sunk.commands import runner

    checked: list[str] = []
    monkeypatch.setattr(runner, "check", lambda settings: checked.append("check") or "25.11.8")
    monkeypatch.setattr(runner, "load_api_client", lambda kubeconfig: "api")
    monkeypatch.setattr(SlurmSettings, "connect", lambda self: "slurm")
    built: list[tuple[str, str]] = []

    class Manager:
        def run(self) -> int:
            return 1  # a lost lease

    def build(api, slurm):
        built.append((api, slurm))
        return Manager()

    daemon = DaemonConfig(name="sunk-operator", slurm=SlurmSettings(token="t"))
    assert runner.run_headless(daemon, build) == 1
    assert checked == ["check"] and built == [("api", "slurm")]


def test_a_slurm_cluster_wakes_only_the_nodesets_naming_it_through_the_index():
    from slurmcluster_fakes import cluster

    from sunk.nodeset.assembly import attach_clusters
    from sunk.nodeset.reconciler import INDEX_CLUSTER_REF, cluster_ref_key

    keys: list[str] = []
    nodesets, clusters = FakeInformer({INDEX_CLUSTER_REF: cluster_ref_key}), FakeInformer()
    nodesets.put(nodeset("gpu", slurmCluster="sc"))
    nodesets.put(nodeset("cpu", prefix="c"))
    nodesets.put(nodeset("other", prefix="o", slurmCluster="elsewhere"))
    attach_clusters(keys.append, clusters=clusters, nodesets=nodesets)
    sc = cluster()
    clusters.put(sc)
    assert keys == ["slurm/gpu"]
    keys.clear()
    status_only = copy.deepcopy(sc)
    status_only["status"] = {"configHash": "x", "conditions": [{"type": "SpecValid", "status": "True"}]}
    clusters.put(status_only)
    assert keys == ["slurm/gpu"]  # SpecValid appeared (a NodeSet reads it)
    keys.clear()
    observed = copy.deepcopy(status_only)
    observed["status"]["observedGeneration"] = observed["metadata"]["generation"]
    clusters.put(observed)
    assert keys == ["slurm/gpu"]  # its reconciler applied the spec: a NodeSet waiting for that may go on
    keys.clear()
    rehashed = copy.deepcopy(observed)
    rehashed["status"]["configHash"] = "y"
    clusters.put(rehashed)
    assert keys == []  # nothing a NodeSet reads
    edited = copy.deepcopy(rehashed)
    edited["metadata"]["generation"] = 9
    clusters.put(edited)
    clusters.remove(edited)
    assert keys == ["slurm/gpu", "slurm/gpu"]


def test_the_reconciler_reads_the_cluster_a_nodeset_names():
    from slurmcluster_fakes import cluster

    daemon = DaemonConfig(name="sunk-operator", slurm=SlurmSettings(token="t"))
    slurm = types.SimpleNamespace(list_nodes=None, list_jobs=None)
    operator = assemble(OperatorConfig(slurm_cluster="sc"), daemon, api=object(), slurm=slurm)  # type: ignore[arg-type]
    reconciler = operator.reconciler
    assert reconciler.clusters is not None and reconciler.watched_cluster == "sc"
    sc, gpu = cluster(), nodeset("gpu", slurmCluster="sc")
    reconciler.clusters, reconciler.nodesets = FakeInformer(), FakeInformer()
    reconciler.clusters.put(sc)
    reconciler.nodesets.put(gpu)
    facts = reconciler.facts(gpu)
    assert facts.cluster == sc and facts.watched_cluster == "sc" and list(facts.cluster_nodesets) == ["gpu"]
    assert reconciler.facts(nodeset("gpu")).cluster is None
    reconciler.recorder.stop(0.1)
