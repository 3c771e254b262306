"""Whose lock holds a Node's lock taint: each slurmd Pod names itself on the Node as it locks, and the taint goes
only with the last holder, so a Syncer never lifts a lock another release's slurmd Pod on the same Node holds
(sunk/translate/lock.py, sunk/kube/patch.py hold_lock and release_lock)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sunk.kube import client as kc
from sunk.kube import patch as kp
from sunk.model import names
from sunk.translate import lock

LOCK = {"key": names.LOCK_KEY, "value": "true", "effect": "NoSchedule"}
OTHER = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


def node(*taints: dict[str, Any], holders: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "worker-1", "uid": "u-1", "resourceVersion": "5"}
    if holders is not None:
        meta["annotations"] = {names.ANN_LOCK_HOLDERS: holders}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": {"taints": list(taints)}}


@pytest.fixture
def writes(monkeypatch) -> list[dict[str, Any]]:
    """Each patch body sent for the Node (none is refused)."""
    sent: list[dict[str, Any]] = []

    def patch(_api, _res, name, body, namespace=None, **_kw):
        sent.append(copy.deepcopy(body))
        return body

    monkeypatch.setattr(kc, "patch", patch)
    return sent


def test_a_slurmd_pod_is_named_by_namespace_and_name():
    assert lock.holder_of({"metadata": {"namespace": "slurm", "name": "node3"}}) == "slurm/node3"


@pytest.mark.parametrize("text, holders", [
    (None, set()), ("", set()), ("slurm/a", {"slurm/a"}), ("slurm/a, slurm-b/b ,", {"slurm/a", "slurm-b/b"}),
])
def test_the_holders_annotation_reads_as_a_set(text, holders):
    assert lock.lock_holders(node(holders=text)) == holders


def test_locking_writes_the_taint_and_the_holder_in_one_patch_and_nothing_when_both_are_there(writes):
    kp.hold_lock(None, node(OTHER), "slurm/a", "NoSchedule")
    (body,) = writes
    assert body["spec"]["taints"] == [OTHER, {"key": names.LOCK_KEY, "value": "true", "effect": "NoSchedule"}]
    assert body["metadata"]["annotations"] == {names.ANN_LOCK_HOLDERS: "slurm/a"}
    assert body["metadata"]["resourceVersion"] == "5"  # (guarded: a holder added meanwhile is not written over)
    assert not kp.hold_lock(None, node(OTHER, LOCK, holders="slurm/a"), "slurm/a", "NoSchedule").wrote
    assert len(writes) == 1


def test_a_second_releases_lock_adds_its_name_and_leaves_the_taint(writes):
    kp.hold_lock(None, node(LOCK, holders="slurm/a"), "slurm-b/a", "NoSchedule")
    (body,) = writes
    assert "spec" not in body and body["metadata"]["annotations"] == {names.ANN_LOCK_HOLDERS: "slurm-b/a,slurm/a"}


def test_the_last_holder_lifts_the_taint_and_its_name(writes):
    assert kp.release_lock(None, node(OTHER, LOCK, holders="slurm/a"), lambda h: h == "slurm/a") is True
    (body,) = writes
    assert body["spec"]["taints"] == [OTHER]
    assert body["metadata"]["annotations"] == {names.ANN_LOCK_HOLDERS: None}


def test_a_taint_another_holder_still_holds_stays(writes):
    assert kp.release_lock(None, node(LOCK, holders="slurm-b/a,slurm/a"), lambda h: h == "slurm/a") is False
    (body,) = writes
    assert "spec" not in body and body["metadata"]["annotations"] == {names.ANN_LOCK_HOLDERS: "slurm-b/a"}


def test_a_syncer_whose_pod_holds_nothing_writes_nothing_on_a_node_another_release_locked(writes):
    """The other release's Syncer had locked the Node; this one's slurmd Pod there runs no job: no write at all
    (before holders, this lifted the other's lock while its job ran)."""
    assert kp.release_lock(None, node(LOCK, holders="slurm-b/a"), lambda h: h == "slurm/a") is False
    assert writes == []


def test_a_taint_naming_no_holder_is_an_older_sunks_and_goes_as_it_always_did(writes):
    assert kp.release_lock(None, node(LOCK), lambda h: h == "slurm/a") is True
    (body,) = writes
    assert body["spec"]["taints"] is None and "annotations" not in body["metadata"]


def test_nothing_to_release_writes_nothing_and_unless_stops_the_write(writes):
    assert kp.release_lock(None, node(OTHER), lambda h: True) is False
    assert kp.release_lock(None, node(LOCK, holders="slurm/a"), lambda h: True, unless=lambda _n: True) is False
    assert writes == []


# ---- the pure patches the writes above send (sunk/translate/lock.py, sunk/translate/objects.py) ----


LOCK_NOEXECUTE = {**LOCK, "effect": "NoExecute", "timeAdded": "2030-01-01T00:00:00Z"}


def test_hold_patch_is_one_body_of_taint_and_holder_and_none_when_both_are_there():
    body = lock.hold_patch(node(OTHER), "slurm/a", "NoExecute")
    assert body is not None and body["metadata"] == {"annotations": {names.ANN_LOCK_HOLDERS: "slurm/a"}}
    (added,) = [t for t in body["spec"]["taints"] if t["key"] == names.LOCK_KEY]
    assert added["value"] == "true" and added["effect"] == "NoExecute" and added["timeAdded"]
    assert OTHER in body["spec"]["taints"]
    assert lock.hold_patch(node(OTHER, LOCK_NOEXECUTE, holders="slurm/a"), "slurm/a", "NoExecute") is None
    assert lock.hold_patch(node(LOCK_NOEXECUTE, holders="slurm/a"), "slurm/b", "NoExecute") == {
        "metadata": {"annotations": {names.ANN_LOCK_HOLDERS: "slurm/a,slurm/b"}}}


@pytest.mark.parametrize(("holders", "drop", "body", "lifted"), [
    ("slurm/a", {"slurm/a"}, {"spec": {"taints": [OTHER]},
                              "metadata": {"annotations": {names.ANN_LOCK_HOLDERS: None}}}, True),
    ("slurm/a,other/b", {"slurm/a"}, {"metadata": {"annotations": {names.ANN_LOCK_HOLDERS: "other/b"}}}, False),
    ("other/b", {"slurm/a"}, None, False),
    (None, {"slurm/a"}, {"spec": {"taints": [OTHER]}}, True),  # (an older sunk's taint, named by nobody)
])
def test_release_patch_lets_go_of_the_names_dropped_and_lifts_the_taint_with_the_last(holders, drop, body, lifted):
    assert lock.release_patch(node(OTHER, LOCK, holders=holders), drop.__contains__) == (body, lifted)


def test_the_last_taint_removed_clears_the_list():
    assert lock.release_patch(node(LOCK, holders="slurm/a"), {"slurm/a"}.__contains__) == (
        {"spec": {"taints": None}, "metadata": {"annotations": {names.ANN_LOCK_HOLDERS: None}}}, True)
