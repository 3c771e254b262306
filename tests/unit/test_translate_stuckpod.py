"""A Pod stuck terminating on a lost Node: the scheduler's drain for it, and whether to write it (issue 18, item 1).

The reason's grammar and when the Syncer lifts it are tests/unit/test_translate_drains.py's.
"""

from __future__ import annotations

import pytest

from sunk.model import names
from sunk.translate import drains
from sunk.translate.drains import (
    GangPlaceholderDrain,
    HookUnreachableDrain,
    LockTimeoutDrain,
    PlaceholderDrain,
    StuckPodDrain,
)
from sunk.translate.stuckpod import drain_for, grace_ends_at, should_drain

STUCK = StuckPodDrain("team-a", "trainer-0", "1f2e3d4c-0000-4000-8000-000000000001", "worker-3", 12)


def test_the_reason_is_one_of_sunks_drains_naming_the_pod_and_reads_back():
    reason = STUCK.reason()
    assert reason.startswith(names.K8S_DRAIN_PREFIX + " sunk-stuck: ")
    assert "team-a/trainer-0" in reason and STUCK.uid in reason and "worker-3" in reason and "12" in reason
    assert drains.parse(reason) == STUCK
    assert STUCK.reason() == reason  # the same text whoever writes it


def test_drain_for_a_pod_needs_it_bound():
    pod = {"metadata": {"namespace": "team-a", "name": "trainer-0", "uid": STUCK.uid}, "spec": {"nodeName": "worker-3"}}
    assert drain_for(pod, 12) == STUCK
    assert drain_for({"metadata": pod["metadata"], "spec": {}}, 12) is None


@pytest.mark.parametrize(("drained", "current", "expected"), [
    (False, "", True),
    (True, "k8s: slurmd pod slurm/node1 is not ready", True),  # the Syncer's: this one outlasts it
    (True, STUCK.reason(), False),  # already so
    (True, "bad GPU", False),  # a person's: theirs, and the node is out of Slurm's hands anyway
    (True, "NHC: verify-undrain ECC errors", False),
    # the placeholder's drain of this Pod (KillWait ran out first): this one says more, and holds longer
    (True, PlaceholderDrain("team-a", "trainer-0", 12).reason(), True),
    (True, StuckPodDrain("team-a", "trainer-0", STUCK.uid, "worker-3", 11).reason(), True),  # this Pod, another job
    # another Pod's or the prolog's drain: its own cause would no longer be waited for
    (True, PlaceholderDrain("team-a", "trainer-1", 12).reason(), False),
    (True, StuckPodDrain("team-a", "trainer-0", "another-uid", "worker-3", 11).reason(), False),
    (True, HookUnreachableDrain(9).reason(), False),
    (True, LockTimeoutDrain(9, 30, state="pending").reason(), False),
    # a gang's placeholder drained its job's every node: for the member stuck there, this one says more
    (True, GangPlaceholderDrain("team-a", "job/u", 12).reason(), True),
    (True, GangPlaceholderDrain("team-a", "job/u", 13).reason(), False),  # another job's
    (True, GangPlaceholderDrain("team-b", "job/u", 12).reason(), False),  # (not the Pod's namespace)
], ids=["idle", "syncer-drain", "same", "person", "nhc", "own-placeholder", "own-stuck", "other-placeholder",
        "other-stuck", "lock-outage", "lock-timeout", "own-gang", "other-gang-job", "other-gang-namespace"])
def test_the_scheduler_drains_over_a_condition_drain_or_its_own_pods_drain_only(drained, current, expected):
    assert should_drain(drained, current, STUCK) is expected


def test_the_grace_period_ends_at_the_deletion_timestamp():
    assert grace_ends_at({"metadata": {"deletionTimestamp": "2030-01-01T00:00:30Z"}}) == 1893456030.0
    assert grace_ends_at({"metadata": {}}) is None
    assert grace_ends_at({"metadata": {"deletionTimestamp": "soon"}}) is None
