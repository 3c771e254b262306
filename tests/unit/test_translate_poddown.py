"""A deleted slurmd Pod sets its node DOWN once (sunk.translate.poddown): every state a node can be in."""

from __future__ import annotations

import itertools
import json

import pytest

from sunk.model.slurm import Node
from sunk.translate.drains import PlaceholderDrain
from sunk.translate.poddown import (
    DELETED,
    DOWN,
    MARK,
    NONE,
    deleted_reason,
    desired_down,
    missing_reason,
)

OURS = '{"namespace":"slurm","pod":"g-3-17","ready":true}'
BASES = ["IDLE", "ALLOCATED", "MIXED", "DOWN"]
REASONS = {
    "none": "",
    "person": "bad DIMM, ticket 42",
    "condition": "k8s: slurmd pod slurm/g-3-17 is being deleted",
    "missing": missing_reason("slurm", "g-3-17"),
    "sunk": PlaceholderDrain("team", "p", 7).reason(),
}


def marked(extra: str) -> bool:
    return json.loads(extra).get(DELETED) is True


@pytest.mark.parametrize(("base", "drained", "why"), [
    (base, drained, why) for base, drained, why in itertools.product(BASES, [False, True], REASONS)
    if drained or base == "DOWN" or why == "none"])  # a reason comes with a drain or a DOWN
def test_every_state_of_a_node_whose_pod_is_gone(base, drained, why):
    reason = REASONS[why]
    state = base + ("+DRAIN" if drained else "")
    node = Node("g-3-17", state=state, reason=reason, extra=OURS)
    action = desired_down(node, namespace="slurm", pod_exists=False)
    assert action.extra is not None and marked(action.extra)  # the deletion is recorded whatever is done
    assert json.loads(action.extra)["pod"] == "g-3-17"  # and the identity kept: still ours
    # A drain without a reason is not the Syncer's either: someone else's, left alone.
    left_alone = base == "DOWN" or (drained and why in ("none", "person", "sunk", "missing"))
    if left_alone:
        assert action.action == MARK and action.reason is None
    else:
        assert action.action == DOWN
        assert action.reason == deleted_reason("slurm/g-3-17") == "k8s: slurmd pod slurm/g-3-17 deleted"


@pytest.mark.parametrize("state", ["IDLE", "DOWN", "IDLE+DRAIN", "ALLOCATED"])
def test_once_marked_the_deletion_is_never_acted_on_again(state):
    """ReturnToService=2 brings a DOWN node whose slurmd answers back to IDLE: no second DOWN."""
    extra = json.dumps({"namespace": "slurm", "pod": "g-3-17", DELETED: True})
    assert desired_down(Node("g-3-17", state=state, extra=extra), namespace="slurm", pod_exists=False).action == NONE


@pytest.mark.parametrize("extra", [OURS, json.dumps({"namespace": "slurm", "pod": "g-3-17", DELETED: True})])
def test_a_pod_that_exists_is_no_deletion(extra):
    assert desired_down(Node("g-3-17", state="IDLE", extra=extra), namespace="slurm", pod_exists=True).action == NONE


@pytest.mark.parametrize("extra", ["", "not json", "[]", '{"namespace":"slurm"}', '{"pod":""}',
                                   '{"owner":"ml"}'])
def test_no_pod_named_in_extra_is_no_deletion_seen(extra):
    assert desired_down(Node("g-3-17", state="IDLE", extra=extra), namespace="slurm", pod_exists=False).action == NONE


def test_a_deleted_false_left_by_a_live_pod_is_news_again():
    """``"deleted": false`` is what a live Pod's Extra says (extra_facts): its deletion is handled anew."""
    extra = json.dumps({"namespace": "slurm", "pod": "g-3-17", DELETED: False, "owner": "ml"})
    action = desired_down(Node("g-3-17", state="IDLE", extra=extra), namespace="slurm", pod_exists=False)
    assert action.action == DOWN
    assert json.loads(action.extra or "") == {"namespace": "slurm", "pod": "g-3-17", DELETED: True, "owner": "ml"}


def test_the_reason_names_the_pod_of_extra_in_its_namespace():
    extra = json.dumps({"namespace": "other", "pod": "slurmd-x"})
    action = desired_down(Node("node1", state="IDLE", extra=extra), namespace="slurm", pod_exists=False)
    assert action.reason == "k8s: slurmd pod other/slurmd-x deleted"
