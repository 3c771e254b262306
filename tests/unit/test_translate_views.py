"""sunk.translate.views: typed read-only views over Pods and Nodes in wire form."""

from __future__ import annotations

import attrs
import pytest

from sunk.model import names
from sunk.translate.views import NodeView, ObjectView, PodView

POD = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "annotations": {"a": "1"}, "labels": {"l": "2"},
                 "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "controller": True}]},
    "spec": {"nodeName": "w1", "schedulerName": "sunk"},
    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"},
                                                  {"type": "PodScheduled", "status": "True"}]},
}
NODE = {
    "metadata": {"name": "w1", "uid": "n1", "annotations": {names.ANN_CORDON_REASON: "bad GPU"}},
    "spec": {"unschedulable": True, "taints": [{"key": names.LOCK_KEY, "effect": "NoExecute"}]},
    "status": {"conditions": [{"type": "Ready", "status": "True"}]},
}
NULLS = {"metadata": None, "spec": None, "status": None}


def test_a_pod_view_reads_the_wire_object():
    pod = PodView(POD)
    assert (pod.name, pod.namespace, pod.key, pod.uid) == ("p", "ns", "ns/p", "u1")
    assert pod.annotations == {"a": "1"} and pod.labels == {"l": "2"}
    assert (pod.node_name, pod.scheduler_name, pod.phase) == ("w1", "sunk", "Running")
    assert pod.ready and not pod.terminal and not pod.deleting
    assert [c["type"] for c in pod.conditions] == ["Ready", "PodScheduled"]
    assert pod.condition("PodScheduled") == {"type": "PodScheduled", "status": "True"}
    assert pod.condition_true("Ready") and not pod.condition_true("Initialized")
    assert pod.owner("Job", "batch") == POD["metadata"]["ownerReferences"][0] and pod.owner("JobSet", "batch") is None


def test_a_deleting_or_finished_pod():
    deleting = PodView({**POD, "metadata": {**POD["metadata"], "deletionTimestamp": "2030-01-01T00:00:00Z"}})
    assert deleting.deleting and not deleting.ready  # ready means ready and not terminating
    finished = PodView({**POD, "status": {"phase": "Succeeded"}})
    assert finished.terminal and not finished.ready


def test_a_node_view_reads_the_wire_object():
    node = NodeView(NODE)
    assert (node.name, node.namespace, node.key, node.uid) == ("w1", "", "w1", "n1")
    assert node.ready and node.cordoned and node.cordon_reason == "bad GPU"
    assert node.taints == [{"key": names.LOCK_KEY, "effect": "NoExecute"}]
    assert node.has_taint(names.LOCK_KEY) and node.has_taint(names.LOCK_KEY, "NoExecute")
    assert not node.has_taint(names.LOCK_KEY, "NoSchedule")


@pytest.mark.parametrize("wire", [{}, NULLS], ids=["absent", "null"])
def test_missing_or_null_fields_read_as_empty(wire):
    pod, node = PodView(wire), NodeView(wire)
    assert (pod.name, pod.namespace, pod.key, pod.uid, pod.node_name, pod.scheduler_name, pod.phase) == ("",) * 7
    assert pod.annotations == {} and pod.labels == {} and pod.conditions == () and pod.owner("Job", "batch") is None
    assert not (pod.ready or pod.terminal or pod.deleting or pod.condition_true("Ready"))
    assert pod.condition("Ready") is None
    assert not (node.ready or node.cordoned or node.has_taint("k")) and node.cordon_reason is None
    assert node.taints == ()


def test_a_view_is_a_window_not_a_copy():
    wire = {"metadata": {"name": "w2"}}
    node = NodeView(wire)
    wire["spec"] = {"unschedulable": True}  # a store's object changes under it: the view shows it
    assert node.cordoned and node.raw is wire


def test_a_view_is_frozen_and_compares_by_identity():
    pod = PodView(POD)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        pod.raw = {}  # type: ignore[misc]
    assert pod == pod and PodView(POD) != pod
    assert isinstance(pod, ObjectView) and isinstance(NodeView(NODE), ObjectView)
