"""benchmarks/store_memory.py: its objects are the size it says, and it tells a trimmed store from a whole one."""

from __future__ import annotations

import json

from benchmarks import store_memory


def test_its_pods_and_nodes_weigh_what_real_ones_do_and_trim_to_what_the_syncer_reads() -> None:
    assert 20_000 < len(store_memory.pod_json(0, 10)) < 40_000  # (issue 37: real Pods are 29-38 KB)
    pod = json.loads(store_memory.pod_json(3, 10))
    assert pod["spec"]["nodeName"] == "worker-3" and pod["metadata"]["managedFields"]


def test_a_trimmed_store_holds_a_fraction_of_a_whole_one() -> None:
    pods, nodes = store_memory.measure(pods=30, nodes=10)
    assert (pods.kind, pods.count, nodes.kind, nodes.count) == ("pods", 30, "nodes", 10)
    assert 0 < pods.trimmed < pods.whole / 10
    assert 0 < nodes.trimmed < nodes.whole / 4
