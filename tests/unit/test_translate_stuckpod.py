"""A Pod stuck terminating on a lost Node: its drain reason, read back, and when the drain holds (issue 18, item 1)."""

from __future__ import annotations

import pytest

from sunk import names
from sunk.translate.stuckpod import Holders, StuckPod, grace_ends_at, held, node_ready, should_drain

STUCK = StuckPod("team-a", "trainer-0", "1f2e3d4c-0000-4000-8000-000000000001", "worker-3")


def test_the_reason_is_a_k8s_drain_naming_the_pod_and_reads_back():
    reason = STUCK.drain_reason([12])
    assert reason.startswith(names.K8S_DRAIN_PREFIX + " ")
    assert "team-a/trainer-0" in reason and STUCK.uid in reason and "worker-3" in reason and "12" in reason
    assert StuckPod.from_reason(reason) == STUCK
    assert STUCK.drain_reason([12]) == reason  # the same text whoever writes it


@pytest.mark.parametrize("reason", [
    "", "k8s: slurmd pod slurm/node1 is not ready", "sunk-scheduler: pod a/b outlived KillWait after job 3 ended",
    "bad GPU (a person)", "pod team-a/trainer-0 uid=x stuck terminating on Node w ",  # without the prefix
], ids=["none", "syncer", "killwait", "person", "no-prefix"])
def test_other_reasons_are_not_stuck_pod_drains(reason):
    assert StuckPod.from_reason(reason) is None


def test_of_a_pod_needs_it_bound():
    pod = {"metadata": {"namespace": "team-a", "name": "trainer-0", "uid": STUCK.uid}, "spec": {"nodeName": "worker-3"}}
    assert StuckPod.of(pod) == STUCK
    assert StuckPod.of({"metadata": pod["metadata"], "spec": {}}) is None


@pytest.mark.parametrize(("drained", "current", "expected"), [
    (False, "", True),
    (True, "k8s: slurmd pod slurm/node1 is not ready", True),  # the Syncer's: this one outlasts it
    (True, STUCK.drain_reason([12]), False),  # already so
    (True, "bad GPU", False),  # a person's: theirs, and the node is out of Slurm's hands anyway
    (True, "NHC: verify-undrain ECC errors", False),
], ids=["idle", "syncer-drain", "same", "person", "nhc"])
def test_the_scheduler_drains_over_nothing_but_a_k8s_drain(drained, current, expected):
    assert should_drain(drained, current, STUCK.drain_reason([12])) is expected


@pytest.mark.parametrize(("pod_exists", "ready", "holds"), [
    (True, False, True), (True, True, True), (False, False, True), (False, True, False),
], ids=["pod-and-node-down", "pod-left-node-ready", "pod-gone-node-down", "both-fine"])
def test_the_drain_holds_until_the_pod_is_gone_and_the_node_ready(pod_exists, ready, holds):
    assert held(Holders(pod_exists=pod_exists, node_ready=ready)) is holds


@pytest.mark.parametrize(("node", "ready"), [
    ({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, True),
    ({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}, False),
    ({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}, False),
    ({"status": {"conditions": [{"type": "MemoryPressure", "status": "False"}]}}, False),
    ({}, False),
    (None, False),
], ids=["ready", "notready", "unknown", "no-ready-condition", "no-status", "gone"])
def test_node_ready(node, ready):
    assert node_ready(node) is ready


def test_the_grace_period_ends_at_the_deletion_timestamp():
    assert grace_ends_at({"metadata": {"deletionTimestamp": "2030-01-01T00:00:30Z"}}) == 1893456030.0
    assert grace_ends_at({"metadata": {}}) is None
    assert grace_ends_at({"metadata": {"deletionTimestamp": "soon"}}) is None
