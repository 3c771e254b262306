"""When a directly bound Pod must tolerate the lock taint: read from the Node's own taints."""

from __future__ import annotations

import pytest

from scheduler.locktaint import LockTaints, NodeHealth, scheduler_slim_node
from sunk.model import names


class Nodes:
    def __init__(self, *nodes):
        self.nodes = {n["metadata"]["name"]: n for n in nodes}

    def get(self, name):
        return self.nodes.get(name)


def node(name, *taints):
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": "u", "resourceVersion": "5", "labels": {"a": "b"}},
            "spec": {"taints": [{"key": k, "effect": e} for k, e in taints], "podCIDR": "10.0.0.0/24"},
            "status": {"images": [{"names": ["x"] * 50}], "conditions": [{"type": "Ready"}]}}


@pytest.mark.parametrize(("taints", "evicts"), [
    ((), False),
    (((names.LOCK_KEY, "NoSchedule"),), False),
    (((names.LOCK_KEY, "PreferNoSchedule"),), False),
    (((names.LOCK_KEY, "NoExecute"),), True),
    ((("other", "NoExecute"),), False),
    ((("other", "NoExecute"), (names.LOCK_KEY, "NoExecute")), True),
], ids=["untainted", "noschedule", "prefer", "noexecute", "another-key", "among-others"])
def test_only_a_noexecute_lock_needs_the_toleration(taints, evicts):
    assert LockTaints(Nodes(node("w1", *taints))).evicts("w1") is evicts


def test_an_unknown_node_counts_as_evicting():
    """Not in the cache (yet): the toleration costs a patch, a rejected Pod costs its job."""
    assert LockTaints(Nodes()).evicts("w9") is True


def test_scheduler_slim_node_keeps_what_the_decision_and_the_informer_read():
    slim = scheduler_slim_node(node("w1", (names.LOCK_KEY, "NoExecute")))
    assert slim == {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "w1", "uid": "u", "resourceVersion": "5",
                                                                     "labels": {"a": "b"}},  # (nodeSelector's)
                    "spec": {"taints": [{"key": names.LOCK_KEY, "effect": "NoExecute"}]},
                    "status": {"conditions": [{"type": "Ready", "status": None}]}}
    assert scheduler_slim_node({"metadata": {"name": "w2"}})["spec"] == {"taints": []}


def ready(name, status, heartbeat="t1"):
    n = node(name)
    n["status"]["conditions"] = [{"type": "MemoryPressure", "status": "False"},
                                 {"type": "Ready", "status": status, "lastHeartbeatTime": heartbeat}]
    return n


def test_scheduler_slim_node_keeps_the_ready_status_but_not_its_heartbeats():
    assert scheduler_slim_node(ready("w1", "True", "t1")) == scheduler_slim_node(ready("w1", "True", "t2"))
    assert scheduler_slim_node(ready("w1", "Unknown"))["status"] == {
        "conditions": [{"type": "Ready", "status": "Unknown"}]}


@pytest.mark.parametrize(("nodes", "expected"), [
    ((ready("w1", "True"),), True),
    ((ready("w1", "False"),), False),
    ((ready("w1", "Unknown"),), False),  # the kubelet stopped heartbeating
    ((), False),  # the Node is gone
    ((node("w1"),), False),  # never reported Ready
], ids=["ready", "notready", "unknown", "gone", "no-status"])
def test_a_node_is_ready_only_when_it_says_so(nodes, expected):
    assert NodeHealth(Nodes(*(scheduler_slim_node(n) for n in nodes))).ready("w1") is expected
