"""The operator's topology writer (sunk/nodeset/topology.py) and what wakes it: the file follows the
Nodes' labels, names only Slurm nodes slurmctld knows, is written only when it changes, and slurmctld
is told to reread it."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml
from nodeset_fakes import FakeApiServer, FakeSlurm, NodeCacheFake, node, nodeset, pod_for
from syncer_fakes import FakeInformer

from sunk.commands import operator as cli
from sunk.kube.store import FuncHandler
from sunk.model.slurm import Node
from sunk.nodeset.assembly import attach_topology
from sunk.nodeset.topology import TOPOLOGY_KEY, TopologyWriter, write_atomically
from sunk.translate.nodeset.topology import BLOCK, CONF, DEFAULT_BLOCK_LABEL, TopologySettings

NV = DEFAULT_BLOCK_LABEL


def W(i: int, domain: str | None = None) -> dict[str, Any]:
    labels = {"pool": "gpu", **({NV: domain} if domain else {})}
    return node(f"worker-{i}", f"10.0.3.{i}", **labels)


class World:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, domains: dict[int, str | None],
                 registered: set[int] | None = None, file_format: str = "topology.yaml"):
        self.api = FakeApiServer().install(monkeypatch)
        self.nodes, self.pods = FakeInformer(), FakeInformer()
        ns = nodeset()
        for i, domain in domains.items():
            self.nodes.put(W(i, domain))
            self.pods.put(pod_for(ns, f"worker-{i}", f"g-3-{i}"))
        known = set(domains) if registered is None else registered
        self.slurm = FakeSlurm(*(Node(f"g-3-{i}", state="IDLE") for i in known))
        self.cache = NodeCacheFake(self.slurm)
        self.reconfigures = 0
        self.file = tmp_path / "etc" / file_format
        self.writer = TopologyWriter(
            api=None, settings=TopologySettings(kind=BLOCK, file_format=file_format),  # type: ignore[arg-type]
            namespace="slurm", pods=self.pods, nodes=self.nodes, slurm_nodes=self.cache,  # type: ignore[arg-type]
            configmap="sunk-topology", file=self.file, reconfigure=self.count, min_reconfigure_interval=0.0)

    def count(self) -> None:
        self.reconfigures += 1

    def configmap(self) -> dict[str, str]:
        cm = self.api.one("configmaps", "sunk-topology")
        return (cm or {}).get("data") or {}

    def blocks(self) -> dict[str, str]:
        doc = yaml.safe_load(self.file.read_text())
        return {b["block"]: b["nodes"] for b in doc[0]["block"]["blocks"]}


def test_two_domains_are_written_to_the_configmap_and_the_file_then_slurmctld_rereads(monkeypatch, tmp_path):
    w = World(monkeypatch, tmp_path, {1: "rack-a", 2: "rack-a", 3: "rack-b", 4: "rack-b"})
    assert w.writer.reconcile(TOPOLOGY_KEY) is None
    assert w.blocks() == {"rack-a": "g-3-[1-2]", "rack-b": "g-3-[3-4]"}
    assert w.configmap() == {"topology.yaml": w.file.read_text()}
    assert w.reconfigures == 1


def test_nothing_is_written_again_while_nothing_changed(monkeypatch, tmp_path):
    w = World(monkeypatch, tmp_path, {1: "rack-a"})
    w.writer.reconcile(TOPOLOGY_KEY)
    calls = list(w.api.calls)
    w.writer.reconcile(TOPOLOGY_KEY)
    assert w.api.calls == calls and w.reconfigures == 1


def test_a_relabelled_node_moves_block_and_the_configmap_is_patched(monkeypatch, tmp_path):
    w = World(monkeypatch, tmp_path, {1: "rack-a", 2: "rack-a"})
    w.writer.reconcile(TOPOLOGY_KEY)
    w.nodes.put(W(2, "rack-b"))
    w.writer.reconcile(TOPOLOGY_KEY)
    assert w.blocks() == {"rack-a": "g-3-1", "rack-b": "g-3-2"}
    assert ("patch", "configmaps", "sunk-topology", "") in w.api.calls
    assert "rack-b" in w.configmap()["topology.yaml"] and w.reconfigures == 2


def test_only_slurm_nodes_slurmctld_knows_are_named_and_none_is_flat_or_no_new_conf(monkeypatch, tmp_path):
    w = World(monkeypatch, tmp_path, {1: "rack-a", 2: "rack-a"}, registered={1})
    w.writer.reconcile(TOPOLOGY_KEY)
    assert w.blocks() == {"rack-a": "g-3-1"}
    empty = World(monkeypatch, tmp_path / "2", {1: "rack-a"}, registered=set())
    empty.writer.reconcile(TOPOLOGY_KEY)
    assert "flat: true" in empty.file.read_text() and empty.reconfigures == 1
    conf = World(monkeypatch, tmp_path / "3", {1: "rack-a"}, registered=set(), file_format=CONF)
    conf.writer.reconcile(TOPOLOGY_KEY)  # (no blocks: topology/block refuses such a topology.conf)
    assert not conf.file.exists() and conf.configmap() == {} and conf.reconfigures == 0


def test_a_terminating_pod_leaves_the_topology(monkeypatch, tmp_path):
    w = World(monkeypatch, tmp_path, {1: "rack-a", 2: "rack-b"})
    gone = pod_for(nodeset(), "worker-2", "g-3-2", terminating=True)
    w.pods.put(gone)
    w.writer.reconcile(TOPOLOGY_KEY)
    assert w.blocks() == {"rack-a": "g-3-1"}


def test_unlabelled_nodes_are_still_placed(monkeypatch, tmp_path):
    w = World(monkeypatch, tmp_path, {1: "rack-a", 2: None})
    w.writer.reconcile(TOPOLOGY_KEY)
    assert w.blocks() == {"rack-a": "g-3-1", "unlabeled": "g-3-2"}


def test_a_stale_slurm_cache_writes_nothing_and_retries(monkeypatch, tmp_path):
    w = World(monkeypatch, tmp_path, {1: "rack-a"})
    w.cache.fresh = False
    result = w.writer.reconcile(TOPOLOGY_KEY)
    assert result is not None and result.requeue_after == 2.0
    assert not w.file.exists() and w.reconfigures == 0


def test_a_failed_reconfigure_is_tried_again_next_time(monkeypatch, tmp_path):
    w = World(monkeypatch, tmp_path, {1: "rack-a"})

    def refused() -> None:
        raise RuntimeError("slurmrestd down")

    w.writer.reconfigure = refused
    with pytest.raises(RuntimeError):
        w.writer.reconcile(TOPOLOGY_KEY)
    w.writer.reconfigure = w.count
    w.writer.reconcile(TOPOLOGY_KEY)
    assert w.reconfigures == 1


def test_topology_conf_format(monkeypatch, tmp_path):
    w = World(monkeypatch, tmp_path, {1: "rack-a"}, file_format=CONF)
    w.writer.reconcile(TOPOLOGY_KEY)
    assert w.file.read_text().splitlines()[1:] == ["BlockSizes=1,2,4,8,16", "BlockName=rack-a Nodes=g-3-1"]
    assert list(w.configmap()) == ["topology.conf"]


def test_write_atomically_replaces_whole(tmp_path):
    path = tmp_path / "a" / "topology.conf"
    write_atomically(path, "one\n")
    write_atomically(path, "two\n")
    assert path.read_text() == "two\n" and sorted(p.name for p in path.parent.iterdir()) == ["topology.conf"]


# ---- what wakes it ------------------------------------------------------------------------------------


class HandlerRegistry:
    """The Slurm nodes informer's handler registration."""

    def __init__(self) -> None:
        self.handlers: list[FuncHandler] = []

    def add_handler(self, **funcs: Any) -> None:
        self.handlers.append(FuncHandler(funcs.get("on_add"), funcs.get("on_update"), funcs.get("on_delete")))


def test_labels_pods_and_slurm_nodes_coming_or_going_wake_it_not_heartbeats_or_state():
    keys: list[str] = []
    nodes, pods = FakeInformer(), FakeInformer()
    cache = HandlerRegistry()
    attach_topology(keys.append, nodes=nodes, pods=pods, cache=cache)
    nodes.put(W(1, "rack-a"))
    pods.put(pod_for(nodeset(), "worker-1", "g-3-1"))
    assert keys == [TOPOLOGY_KEY, TOPOLOGY_KEY]
    keys.clear()
    beat = W(1, "rack-a")
    beat["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    nodes.put(beat)
    pods.put(pod_for(nodeset(), "worker-1", "g-3-1", ready=False))
    (handler,) = cache.handlers
    handler.on_update(Node("g-3-1", state="IDLE"), Node("g-3-1", state="ALLOCATED"))
    assert keys == []
    nodes.put(W(1, "rack-b"))
    handler.on_add(Node("g-3-2", state="IDLE"))
    pods.put(pod_for(nodeset(), "worker-1", "g-3-1", terminating=True))
    assert keys == [TOPOLOGY_KEY] * 3


# ---- flags --------------------------------------------------------------------------------------------


def test_topology_flags():
    config, _, _ = cli.parse_args(["--slurm-auth-token", "t"])
    assert config.topology.kind == "" and config.topology_reconfigure
    config, _, _ = cli.parse_args(["--slurm-auth-token", "t", "--topology", "tree", "--topology-tree-labels",
                                   "topology.kubernetes.io/region, topology.kubernetes.io/zone",
                                   "--topology-format", "topology.conf", "--topology-configmap", "topo",
                                   "--topology-reconfigure=false"])
    assert config.topology == TopologySettings(kind="tree", tree_labels=("topology.kubernetes.io/region",
                                                                         "topology.kubernetes.io/zone"),
                                               file_format="topology.conf")
    assert (config.topology_configmap, config.topology_file, config.topology_reconfigure) == ("topo", None, False)
    config, _, _ = cli.parse_args(["--slurm-auth-token", "t", "--topology", "block", "--topology-configmap", "t",
                                   "--topology-allowed-values", "rack-a, rack-b", "--topology-block-size", "18"])
    assert (config.topology.allowed_values, config.topology.block_size) == (("rack-a", "rack-b"), 18)
    for bad in (["--topology", "tree", "--topology-configmap", "t"], ["--topology", "block"],
                ["--topology-allowed-values", "a b"], ["--topology-allowed-values", "unlabeled"],
                ["--topology-block-size", "-1"], ["--topology-block-size", "5000"],
                ["--topology", "ring", "--topology-configmap", "t"]):
        with pytest.raises(SystemExit):
            cli.parse_args(["--slurm-auth-token", "t", *bad])


def test_the_last_labelled_node_gone_makes_yaml_flat_and_leaves_conf_as_it_was(monkeypatch, tmp_path):
    """A block topology without blocks makes slurmctld exit, and so does a missing topology.conf under
    TopologyPlugin=topology/block: topology.yaml turns flat; topology.conf keeps its last blocks, which
    name gone nodes harmlessly now that BlockSizes is written."""
    w = World(monkeypatch, tmp_path, {1: "rack-a"})
    w.writer.reconcile(TOPOLOGY_KEY)
    assert "rack-a" in w.configmap()["topology.yaml"] and w.reconfigures == 1
    w.pods.put(pod_for(nodeset(), "worker-1", "g-3-1", terminating=True))
    w.writer.reconcile(TOPOLOGY_KEY)
    assert "flat: true" in w.file.read_text() and "flat: true" in w.configmap()["topology.yaml"]
    assert w.reconfigures == 2
    conf = World(monkeypatch, tmp_path / "c", {1: "rack-a"}, file_format=CONF)
    conf.writer.reconcile(TOPOLOGY_KEY)
    before = conf.file.read_text()
    conf.pods.put(pod_for(nodeset(), "worker-1", "g-3-1", terminating=True))
    conf.writer.reconcile(TOPOLOGY_KEY)
    assert conf.file.read_text() == before and "BlockSizes=1," in before and conf.reconfigures == 1


def test_with_only_a_configmap_the_reconfigure_waits_for_the_kubelets_sync(monkeypatch, tmp_path):
    """slurmctld reads the ConfigMap through its mount, which the kubelet updates up to a minute later: a
    reconfigure at once would re-read the old file, and nothing would tell slurmctld again."""
    w = World(monkeypatch, tmp_path, {1: "rack-a"})
    w.writer.file = None
    result = w.writer.reconcile(TOPOLOGY_KEY)
    assert "rack-a" in w.configmap()["topology.yaml"] and w.reconfigures == 0
    assert result is not None and result.requeue_after == w.writer.configmap_sync
    assert w.writer.reconcile(TOPOLOGY_KEY) is None and w.reconfigures == 1  # the requeue, after the sync
    assert w.writer.reconcile(TOPOLOGY_KEY) is None and w.reconfigures == 1  # and only once


def test_reconfigures_come_at_most_one_per_interval_and_the_last_change_is_never_lost(monkeypatch, tmp_path):
    """A rolling update changes the topology twice per node: the files follow at once, slurmctld (restarted in
    place by each reconfigure since 24.05) rereads them once per interval, after the last change too."""
    now = [100.0]
    w = World(monkeypatch, tmp_path, {1: "rack-a", 2: "rack-a"})
    w.writer.min_reconfigure_interval, w.writer.clock = 5.0, (lambda: now[0])
    assert w.writer.reconcile(TOPOLOGY_KEY) is None and w.reconfigures == 1
    now[0] += 1
    w.nodes.put(W(2, "rack-b"))
    result = w.writer.reconcile(TOPOLOGY_KEY)
    assert w.blocks() == {"rack-a": "g-3-1", "rack-b": "g-3-2"}  # (the file at once)
    assert w.reconfigures == 1 and result is not None and result.requeue_after == pytest.approx(4.0)
    now[0] += 2
    w.nodes.put(W(1, "rack-b"))
    result = w.writer.reconcile(TOPOLOGY_KEY)
    assert w.blocks() == {"rack-b": "g-3-[1-2]"} and w.reconfigures == 1
    assert result is not None and result.requeue_after == pytest.approx(2.0)
    now[0] += 2  # the interval passed: the requeued key reconfigures once, for both changes
    assert w.writer.reconcile(TOPOLOGY_KEY) is None and w.reconfigures == 2
    assert w.writer.reconcile(TOPOLOGY_KEY) is None and w.reconfigures == 2


def test_a_label_that_keeps_flipping_spaces_reconfigures_out_to_a_minute_and_a_quiet_change_is_at_once(
        monkeypatch, tmp_path):
    """A kubelet may set its own Node's labels: one flipping its domain every second for ten minutes costs a
    dozen reconfigures (the spacing doubling 5, 10, 20, 40, then 60 s), not 120; the last state is applied;
    after a quiet spell a change is applied at once and the spacing is 5 s again."""
    now = [1000.0]
    w = World(monkeypatch, tmp_path, {1: "rack-a", 2: "rack-a"})
    w.writer.min_reconfigure_interval, w.writer.clock = 5.0, (lambda: now[0])
    w.writer.reconcile(TOPOLOGY_KEY)
    times, due = [now[0]], None
    for second in range(1, 601):
        now[0] = 1000.0 + second
        w.nodes.put(W(2, "rack-b" if second % 2 else "rack-a"))
        before = w.reconfigures
        result = w.writer.reconcile(TOPOLOGY_KEY)  # the Node's event
        if due is not None and now[0] >= due:  # the requeued key, when due
            result = w.writer.reconcile(TOPOLOGY_KEY)
        if w.reconfigures > before:
            times.append(now[0])
        due = now[0] + result.requeue_after if result is not None else None
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps[:4] == [5.0, 10.0, 20.0, 40.0] and set(gaps[4:]) == {60.0}, gaps
    assert len(times) <= 15
    now[0] += 200  # quiet: the requeued key applies the last state, then a change is applied at once
    w.writer.reconcile(TOPOLOGY_KEY)
    applied = w.reconfigures
    now[0] += 200
    w.nodes.put(W(2, "rack-c"))
    assert w.writer.reconcile(TOPOLOGY_KEY) is None and w.reconfigures == applied + 1
    now[0] += 1
    w.nodes.put(W(2, "rack-d"))
    result = w.writer.reconcile(TOPOLOGY_KEY)
    assert result is not None and result.requeue_after == pytest.approx(4.0)  # the minimum spacing again
