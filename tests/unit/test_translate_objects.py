"""sunk.translate.objects: the one copy of each wire-object reader, metadata diffs, condition merging."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategic_merge import merged_conditions

from sunk.translate import objects as o
from sunk.translate.objects import (
    conditions_patch,
    cordon_reason,
    has_taint,
    is_cordoned,
    merge_conditions,
    metadata_diff,
)

NOW = "2030-01-01T00:00:00Z"
THEN = "2020-01-01T00:00:00Z"


def test_metadata_diff_sets_changes_and_removes_only_what_differs():
    current = {"a": "1", "b": "2", "c": "3"}
    assert metadata_diff(current, {"a": "1", "b": "9", "c": None, "d": None, "e": "5"}) == {
        "b": "9",
        "c": None,
        "e": "5",
    }
    assert metadata_diff(current, {"a": "1", "zz": None}) == {}
    assert metadata_diff(None, {"x": "y"}) == {"x": "y"}


def test_merge_conditions_adds_new_type_with_transition_time():
    existing = [{"type": "Ready", "status": "True", "lastTransitionTime": THEN}]
    out = merge_conditions(existing, [{"type": "SlurmDrain", "status": "True", "message": "k8s: x"}], now=NOW)
    assert out == [
        existing[0],
        {"type": "SlurmDrain", "status": "True", "message": "k8s: x", "lastTransitionTime": NOW},
    ]


def test_merge_conditions_unchanged_returns_none():
    existing = [{"type": "SlurmDrain", "status": "True", "reason": "Drain", "message": "m", "lastTransitionTime": THEN}]
    assert (
        merge_conditions(
            existing, [{"type": "SlurmDrain", "status": "True", "reason": "Drain", "message": "m"}], now=NOW
        )
        is None
    )


def test_merge_conditions_message_change_keeps_transition_time_status_change_moves_it():
    existing = [{"type": "SlurmDrain", "status": "True", "message": "a", "lastTransitionTime": THEN}]
    out = merge_conditions(existing, [{"type": "SlurmDrain", "status": "True", "message": "b"}], now=NOW)
    assert out == [{"type": "SlurmDrain", "status": "True", "message": "b", "lastTransitionTime": THEN}]
    out = merge_conditions(existing, [{"type": "SlurmDrain", "status": "False"}], now=NOW)
    assert out == [{"type": "SlurmDrain", "status": "False", "lastTransitionTime": NOW}]


def test_merge_conditions_removes_duplicates_of_managed_types_only():
    existing = [
        {"type": "Ready", "status": "True"},
        {"type": "SlurmDrain", "status": "True", "lastTransitionTime": THEN},
        {"type": "Ready", "status": "True"},  # not ours: left alone
        {"type": "SlurmDrain", "status": "False", "lastTransitionTime": THEN},
    ]
    out = merge_conditions(existing, [{"type": "SlurmDrain", "status": "True"}], now=NOW)
    assert out is not None
    assert [c["type"] for c in out] == ["Ready", "SlurmDrain", "Ready"]
    assert out[1]["lastTransitionTime"] == THEN


def test_merge_conditions_remove():
    existing = [{"type": "Ready", "status": "True"}, {"type": "SlurmRunning", "status": "True"}]
    assert merge_conditions(existing, [], remove=["SlurmRunning"], now=NOW) == [{"type": "Ready", "status": "True"}]
    assert merge_conditions(existing, [], remove=["Absent"], now=NOW) is None


TYPES = st.sampled_from(["Ready", "SlurmDrain", "SlurmRunning", "SlurmNotResponding", "X"])
COND = st.fixed_dictionaries(
    {"type": TYPES, "status": st.sampled_from(["True", "False", "Unknown"])},
    optional={"message": st.sampled_from(["a", "b"]), "lastTransitionTime": st.just(THEN)},
)


@given(
    existing=st.lists(COND, max_size=8),
    wanted=st.lists(COND, max_size=4, unique_by=lambda c: c["type"]),
    remove=st.lists(TYPES, max_size=2),
)
def test_merge_conditions_properties(existing, wanted, remove):
    remove = [r for r in remove if r not in {w["type"] for w in wanted}]
    out = merge_conditions(existing, wanted, remove, now=NOW)
    result = existing if out is None else out
    managed = {w["type"] for w in wanted} | set(remove)
    types = [c["type"] for c in result]
    # every managed type at most once; wanted ones present with the wanted status and message
    for t in managed:
        assert types.count(t) <= 1
    for w in wanted:
        got = next(c for c in result if c["type"] == w["type"])
        assert got["status"] == w["status"] and got.get("message") == w.get("message")
    for t in remove:
        assert t not in types
    # conditions of other types are untouched and in their original order
    assert [c for c in result if c["type"] not in managed] == [c for c in existing if c["type"] not in managed]
    # idempotent: applying again changes nothing
    assert merge_conditions(result, wanted, remove, now="2099-01-01T00:00:00Z") is None


def by_type(conditions: list[dict]) -> list[dict]:
    return sorted(conditions, key=lambda c: (c["type"], str(sorted(c.items()))))


@given(
    existing=st.lists(COND, max_size=8),
    wanted=st.lists(COND, max_size=4, unique_by=lambda c: c["type"]),
    remove=st.lists(TYPES, max_size=2),
)
def test_conditions_patch_applied_by_the_apiserver_is_merge_conditions(existing, wanted, remove):
    """What the strategic merge makes of the patch is what ``merge_conditions`` would have written whole, and the
    patch computed from the managed types' entries alone (a trimmed store) is the same patch."""
    remove = [r for r in remove if r not in {w["type"] for w in wanted}]
    managed = {w["type"] for w in wanted} | set(remove)
    patch = conditions_patch(existing, wanted, remove, now=NOW)
    merged = merge_conditions(existing, wanted, remove, now=NOW)
    assert (patch is None) == (merged is None)
    assert patch == conditions_patch([c for c in existing if c["type"] in managed], wanted, remove, now=NOW)
    if patch is not None:
        assert {c["type"] for c in patch} <= managed
        assert by_type(merged_conditions(existing, patch)) == by_type(merged)


def test_conditions_patch_deletes_a_changed_type_whole_and_leaves_the_rest_unnamed():
    existing = [{"type": "Ready", "status": "True"},
                {"type": "PodScheduled", "status": "False", "reason": "Waiting", "message": "job 7 waits",
                 "lastTransitionTime": THEN},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": THEN}]
    patch = conditions_patch(existing, [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
                             now=NOW)
    assert patch == [{"$patch": "delete", "type": "PodScheduled"},
                     {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": THEN}]
    assert conditions_patch(existing, [], remove=["Absent"], now=NOW) is None
    assert conditions_patch(existing, [], remove=["Ready"], now=NOW) == [{"$patch": "delete", "type": "Ready"}]


def test_node_predicates():
    node = {
        "metadata": {"name": "n", "annotations": {"node.coreweave.cloud/cordonReason": "bad GPU"}},
        "spec": {"unschedulable": True, "taints": [{"key": "sunk.coreweave.com/lock", "effect": "NoExecute"}]},
    }
    assert is_cordoned(node) and cordon_reason(node) == "bad GPU"
    assert has_taint(node, "sunk.coreweave.com/lock") and has_taint(node, "sunk.coreweave.com/lock", "NoExecute")
    assert not has_taint(node, "sunk.coreweave.com/lock", "NoSchedule")
    bare = {"metadata": {"name": "n"}, "spec": {}}
    assert not is_cordoned(bare) and cordon_reason(bare) is None and not has_taint(bare, "x")


# ---- the readers: every field missing, null, or as the apiserver stores it ------------------------------
EMPTY_SHAPES = [{}, {"metadata": None, "spec": None, "status": None},
                {"metadata": {"annotations": None, "labels": None, "ownerReferences": None},
                 "spec": {"taints": None}, "status": {"conditions": None}}]


@pytest.mark.parametrize("obj", EMPTY_SHAPES, ids=["absent", "null", "null-inside"])
def test_a_missing_or_null_field_reads_as_empty(obj):
    assert (o.name_of(obj), o.namespace_of(obj), o.uid_of(obj), o.node_name_of(obj), o.phase_of(obj)) == ("",) * 5
    assert o.annotations_of(obj) == {} and o.labels_of(obj) == {}
    assert not o.is_deleting(obj) and not o.is_terminal(obj) and not o.pod_ready(obj) and not o.node_ready(obj)
    assert list(o.conditions_of(obj)) == [] and o.condition(obj, "Ready") is None
    assert o.taints_of(obj) == () and not o.has_taint(obj, "k") and o.controller_ref(obj, "Job", "batch") is None


def test_metadata_readers():
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1", "annotations": {"a": "1"}, "labels": {"l": "2"},
                        "deletionTimestamp": "2030-01-01T00:00:00Z"},
           "spec": {"nodeName": "w1"}, "status": {"phase": "Running"}}
    assert (o.name_of(pod), o.namespace_of(pod), o.uid_of(pod), o.node_name_of(pod), o.phase_of(pod)) == (
        "p", "ns", "u1", "w1", "Running")
    assert o.annotations_of(pod) == {"a": "1"} and o.labels_of(pod) == {"l": "2"} and o.is_deleting(pod)
    assert o.meta(pod) is pod["metadata"]


@pytest.mark.parametrize(("phase", "terminal"), [(None, False), ("Pending", False), ("Running", False),
                                                 ("Succeeded", True), ("Failed", True), ("Unknown", False)])
def test_a_finished_pod_holds_no_node(phase, terminal):
    assert o.is_terminal({"status": {"phase": phase}}) is terminal


JOB_REF = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "j1", "controller": True}


@pytest.mark.parametrize(("refs", "found"), [
    ([JOB_REF], JOB_REF),
    ([{**JOB_REF, "controller": False}], None),  # an owner, not the controller
    ([{**JOB_REF, "apiVersion": "example.com/v1"}], None),  # a Job of another group
    ([{**JOB_REF, "apiVersion": "batchx/v1"}], None),  # a group that only starts like it
    ([{**JOB_REF, "kind": "CronJob"}], None),
    ([{**JOB_REF, "kind": "CronJob"}, JOB_REF], JOB_REF),
], ids=["controller", "not-controller", "other-group", "prefix-group", "other-kind", "second"])
def test_controller_ref(refs, found):
    assert o.controller_ref({"metadata": {"ownerReferences": refs}}, "Job", "batch") == found


def cond(ctype, status, **more):
    return {"type": ctype, "status": status, **more}


def test_the_first_condition_of_a_type_is_the_one_read():
    obj = {"status": {"conditions": ["junk", None, cond("Ready", "False"), cond("Ready", "True")]}}
    assert [c["status"] for c in o.conditions_of(obj)] == ["False", "True"]  # what is not an object is passed over
    assert o.condition(obj, "Ready") == cond("Ready", "False") and not o.condition_true(obj, "Ready")
    assert o.condition(None, "Ready") is None and not o.condition_true(None, "Ready")


def test_get_condition_returns_a_copy():
    obj = {"status": {"conditions": [cond("Ready", "True")]}}
    copy = o.get_condition(obj, "Ready")
    assert copy == cond("Ready", "True")
    copy["status"] = "False"
    assert obj["status"]["conditions"][0]["status"] == "True"
    assert o.get_condition(obj, "Other") is None


@pytest.mark.parametrize(("node", "ready"), [
    ({"status": {"conditions": [cond("Ready", "True")]}}, True),
    ({"status": {"conditions": [cond("Ready", "False")]}}, False),
    ({"status": {"conditions": [cond("Ready", "Unknown")]}}, False),
    ({"status": {"conditions": [cond("MemoryPressure", "False")]}}, False),
    ({}, False),
    (None, False),
], ids=["ready", "notready", "unknown", "no-ready-condition", "no-status", "gone"])
def test_node_ready(node, ready):
    assert o.node_ready(node) is ready


@pytest.mark.parametrize(("pod", "ready"), [
    ({"status": {"conditions": [cond("Ready", "True")]}}, True),
    ({"status": {"conditions": [cond("Ready", "False")]}}, False),
    ({"metadata": {"deletionTimestamp": "2030-01-01T00:00:00Z"}, "status": {"conditions": [cond("Ready", "True")]}},
     False),
    ({"status": {"conditions": [cond("ContainersReady", "True")]}}, False),
], ids=["ready", "notready", "terminating", "no-ready-condition"])
def test_pod_ready_is_ready_and_not_terminating(pod, ready):
    assert o.pod_ready(pod) is ready


FULL_NODE = {
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": "w1", "uid": "n1", "resourceVersion": "7", "labels": {"a": "b"}, "annotations": {"x": "y"},
                 "deletionTimestamp": "2030-01-01T00:00:00Z", "managedFields": [{}]},
    "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}], "podCIDR": "10.0.0.0/24"},
    "status": {"conditions": [cond("MemoryPressure", "False"),
                              cond("Ready", "True", lastHeartbeatTime="t1", reason="KubeletReady"),
                              cond("Ready", "False")],
               "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}], "images": [{}]},
}
IDENTITY = {"name": "w1", "uid": "n1", "resourceVersion": "7"}


def test_slim_node_keeps_its_identity_and_only_the_parts_asked_for():
    assert o.slim_node(FULL_NODE) == {"apiVersion": "v1", "kind": "Node", "metadata": IDENTITY}
    assert o.slim_node(FULL_NODE, taints=True, ready=True) == {
        "apiVersion": "v1", "kind": "Node", "metadata": IDENTITY,
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}}  # the first Ready, its status only
    assert o.slim_node(FULL_NODE, labels=True, deletion=True, addresses=True) == {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {**IDENTITY, "labels": {"a": "b"}, "deletionTimestamp": "2030-01-01T00:00:00Z"},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}


def test_the_labels_of_nodes_kept_slim_share_one_copy_of_each_string():
    def node(name: str) -> dict:  # (each Node's strings made afresh, as the watch's JSON decoding makes them)
        return json.loads(json.dumps({"metadata": {"name": name, "labels": {
            "pool-of-this-node": "gpu-h100-a", "kubernetes.io/hostname": name}}}))
    raw = [next(iter(node(n)["metadata"]["labels"].items())) for n in ("w1", "w2")]
    assert raw[0][1] is not raw[1][1]  # (what the test would find without interning)
    first, second = (o.slim_node(node(n), labels=True)["metadata"]["labels"] for n in ("w1", "w2"))
    assert first == {"pool-of-this-node": "gpu-h100-a", "kubernetes.io/hostname": "w1"}
    (k1, v1), (k2, v2) = next(iter(first.items())), next(iter(second.items()))
    assert k1 is k2 and v1 is v2
    assert o.interned_labels({"a": 1}) == {"a": 1} and o.interned_labels(None) is None  # (not a map of strings)


def test_slim_node_of_a_bare_node():
    assert o.slim_node({"metadata": {"name": "w2"}}, taints=True, ready=True, addresses=True) == {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "w2"}, "spec": {"taints": []},
        "status": {"conditions": [], "addresses": []}}
