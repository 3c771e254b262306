"""The lock state machine, over every combination of the inputs it reads."""

from __future__ import annotations

import itertools

import attrs
import pytest

from sunk.model import names
from sunk.translate.lock import (
    LOCK_TOLERATION,
    LockState,
    Vouched,
    next_state,
    parse_state,
    pods_to_evict,
    pods_to_tolerate,
    satisfies,
    tolerates_lock,
)


def pod(name="p", tolerate=None, sunk=False, deleting=False, phase="Running"):
    meta = {"name": name, "annotations": {names.ANN_JOB_ID: "7"} if sunk else {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-23T00:00:00Z"
    return {"metadata": meta, "spec": {"tolerations": [tolerate] if tolerate else []}, "status": {"phase": phase}}


TOLERATIONS = {
    "none": None,
    "exists": {"key": names.LOCK_KEY, "operator": "Exists"},
    "equal-true": {"key": names.LOCK_KEY, "operator": "Equal", "value": "true", "effect": "NoSchedule"},
    "equal-false": {"key": names.LOCK_KEY, "operator": "Equal", "value": "false"},
    "everything": {"operator": "Exists"},
    "other-key": {"key": "example.com/other", "operator": "Exists"},
    "exists-noexecute": {"key": names.LOCK_KEY, "operator": "Exists", "effect": "NoExecute"},
    "everything-noschedule": {"operator": "Exists", "effect": "NoSchedule"},
}
# Which effects of the lock taint each toleration covers (Kubernetes' ToleratesTaint).
COVERS = {
    "none": set(), "exists": {"NoSchedule", "PreferNoSchedule", "NoExecute"}, "equal-true": {"NoSchedule"},
    "equal-false": set(), "everything": {"NoSchedule", "PreferNoSchedule", "NoExecute"}, "other-key": set(),
    "exists-noexecute": {"NoExecute"}, "everything-noschedule": {"NoSchedule"},
}
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
JOB_7 = Vouched(frozenset({7}))  # the node's facts name job 7, the job-id of pod(sunk=True)


@pytest.mark.parametrize(("name", "effect"), list(itertools.product(TOLERATIONS, EFFECTS)))
def test_toleration_matching_per_effect(name, effect):
    assert tolerates_lock(pod(tolerate=TOLERATIONS[name]), effect) is (effect in COVERS[name])


@pytest.mark.parametrize("name", TOLERATIONS)
def test_tolerating_every_effect_needs_a_toleration_without_one(name):
    assert tolerates_lock(pod(tolerate=TOLERATIONS[name])) is (COVERS[name] == set(EFFECTS))


@pytest.mark.parametrize(("tolerate", "sunk", "deleting", "phase", "strict", "effect"), list(itertools.product(
    TOLERATIONS, (False, True), (False, True), ("Running", "Pending", "Succeeded", "Failed"), (False, True),
    ("NoSchedule", "NoExecute"))))
def test_which_pods_block_the_lock(tolerate, sunk, deleting, phase, strict, effect):
    candidate = pod(tolerate=TOLERATIONS[tolerate], sunk=sunk, deleting=deleting, phase=phase)
    tolerated = effect in COVERS[tolerate]
    expected = not tolerated and not sunk and phase not in ("Succeeded", "Failed") and (strict or not deleting)
    assert (pods_to_evict([candidate], strict=strict, effect=effect, vouched=JOB_7) == [candidate]) is expected


@pytest.mark.parametrize(("tolerate", "sunk", "deleting", "phase", "effect"), list(itertools.product(
    TOLERATIONS, (False, True), (False, True), ("Running", "Pending", "Succeeded"), EFFECTS)))
def test_which_pods_must_tolerate_the_lock_before_it_lands(tolerate, sunk, deleting, phase, effect):
    candidate = pod(tolerate=TOLERATIONS[tolerate], sunk=sunk, deleting=deleting, phase=phase)
    expected = (effect == "NoExecute" and sunk and "NoExecute" not in COVERS[tolerate] and not deleting
                and phase != "Succeeded")
    assert (pods_to_tolerate([candidate], effect, JOB_7) == [candidate]) is expected


def test_the_toleration_sunk_adds_covers_every_effect():
    assert tolerates_lock(pod(tolerate=LOCK_TOLERATION))
    assert all(tolerates_lock(pod(tolerate=LOCK_TOLERATION), effect) for effect in EFFECTS)


def test_strict_waits_for_terminating_pods_normal_does_not():
    leaving = pod(deleting=True)
    assert pods_to_evict([leaving], strict=False, effect="NoSchedule", vouched=JOB_7) == []
    assert pods_to_evict([leaving], strict=True, effect="NoSchedule", vouched=JOB_7) == [leaving]


NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def stamped(job_id: str, bound_seconds_ago: float | None = None, created_seconds_ago: float = 3600) -> dict:
    from sunk.base.times import rfc3339

    candidate = pod(sunk=True)
    candidate["metadata"]["annotations"][names.ANN_JOB_ID] = job_id
    candidate["metadata"]["creationTimestamp"] = rfc3339(NOW - created_seconds_ago)
    if bound_seconds_ago is not None:
        candidate["status"]["conditions"] = [{"type": "PodScheduled", "status": "True",
                                              "lastTransitionTime": rfc3339(NOW - bound_seconds_ago)}]
    return candidate


@pytest.mark.parametrize(("job_id", "bound_ago", "created_ago", "kept"), [
    ("7", 3600, 3600, True),  # a job of this node (or of a live lock request)
    ("8", 3600, 3600, False),  # written by hand: another job, long bound
    ("8", 10, 3600, True),  # bound 10 s ago: the Slurm cache may not show its job yet
    ("8", None, 10, True),  # unbound conditions, created 10 s ago
    ("8", None, 3600, False),
    ("seven", 3600, 3600, False),
    ("7" * 30, 10_000, 10_000, False),
], ids=["named", "other-job", "fresh-binding", "fresh-pod", "old-pod", "not-a-number", "absurd"])
def test_a_job_id_annotation_keeps_a_pod_only_when_the_node_vouches_for_it(job_id, bound_ago, created_ago, kept):
    candidate = stamped(job_id, bound_ago, created_ago)
    vouched = Vouched(frozenset({7}), NOW, grace=60)
    assert (pods_to_evict([candidate], strict=True, effect="NoSchedule", vouched=vouched) == []) is kept
    assert (pods_to_tolerate([candidate], "NoExecute", vouched) == [candidate]) is kept


@pytest.mark.parametrize("effect", ["NoSchedule", "NoExecute"])
def test_a_toleration_keeps_nothing_for_a_pod_whose_job_claim_is_not_believed(effect):
    """Under NoExecute sunk gives its Pods the toleration, also to one believed for a fresh binding; once
    the grace is over and no fact of the node names its job, that toleration keeps it no more."""
    squatter = stamped("8", bound_seconds_ago=3600)
    squatter["spec"]["tolerations"] = [LOCK_TOLERATION]
    vouched = Vouched(frozenset({7}), NOW, grace=60)
    assert pods_to_evict([squatter], strict=False, effect=effect, vouched=vouched) == [squatter]
    assert vouched.believed_until(squatter) is None
    fresh = stamped("8", bound_seconds_ago=10)
    fresh["spec"]["tolerations"] = [LOCK_TOLERATION]
    assert pods_to_evict([fresh], strict=False, effect=effect, vouched=vouched) == []
    assert vouched.believed_until(fresh) == NOW + 50
    agent = pod(tolerate=LOCK_TOLERATION)  # claims no job: its own toleration is its own
    assert pods_to_evict([agent], strict=True, effect=effect, vouched=vouched) == []


@pytest.mark.parametrize("scheduler", ["sunk-scheduler", "default-scheduler"])
def test_while_the_nodes_jobs_are_unknown_a_claim_is_believed_until_they_are(scheduler):
    """Slurm shows the node busy before the jobs cache shows its job (the two are listed apart): a claim
    cannot be judged yet, and an eviction would not be undone. Only on a Pod of sunk's schedulers, when they
    are named; a malformed claim is never believed; and nothing times out, the jobs' arrival decides."""
    unseen = Vouched(frozenset(), NOW, grace=60, scheduler_names=frozenset({"sunk-scheduler"}), jobs_unknown=True)
    claim = stamped("8", bound_seconds_ago=3600)
    claim["spec"]["schedulerName"] = scheduler
    kept = scheduler == "sunk-scheduler"
    assert (pods_to_evict([claim], strict=True, effect="NoSchedule", vouched=unseen) == []) is kept
    assert (pods_to_tolerate([claim], "NoExecute", unseen) == [claim]) is kept
    assert unseen.believed_until(claim) is None
    garbled = stamped("eight", bound_seconds_ago=3600)
    garbled["spec"]["schedulerName"] = "sunk-scheduler"
    assert pods_to_evict([garbled], strict=True, effect="NoSchedule", vouched=unseen) == [garbled]
    known = attrs.evolve(unseen, job_ids=frozenset({7}), jobs_unknown=False)
    assert pods_to_evict([claim], strict=True, effect="NoSchedule", vouched=known) == [claim]


@pytest.mark.parametrize(("strict", "blocking", "state"), [
    (False, True, LockState.PENDING), (True, True, LockState.PENDING),
    (False, False, LockState.LOCKED), (True, False, LockState.LOCKED_STRICT)])
def test_next_state(strict, blocking, state):
    assert next_state(strict=strict, blocking=blocking) is state


@pytest.mark.parametrize(("state", "strict", "ok"), [
    (LockState.FALSE, False, False), (LockState.PENDING, False, False), (LockState.LOCKED, False, True),
    (LockState.LOCKED_STRICT, False, True), (LockState.FALSE, True, False), (LockState.PENDING, True, False),
    (LockState.LOCKED, True, False), (LockState.LOCKED_STRICT, True, True)])
def test_a_strict_lock_serves_normal_jobs_but_not_the_reverse(state, strict, ok):
    assert satisfies(state, strict=strict) is ok


@pytest.mark.parametrize(("text", "state"), [(None, LockState.FALSE), ("", LockState.FALSE), ("false", LockState.FALSE),
                                             ("pending", LockState.PENDING), ("locked", LockState.LOCKED),
                                             ("locked_strict", LockState.LOCKED_STRICT),
                                             (" Locked ", LockState.LOCKED), ("garbage", LockState.FALSE)])
def test_annotation_values(text, state):
    assert parse_state(text) is state


@pytest.mark.parametrize("vouched", [Vouched(frozenset({7}), scheduler_names=frozenset({"sunk-scheduler"})),
                                     Vouched.everything(frozenset({"sunk-scheduler"}))],
                         ids=["node-jobs", "everything"])
def test_a_job_id_is_sunks_word_only_on_a_pod_of_sunks_schedulers(vouched):
    """With the schedulers named, a Pod of any other (made with spec.nodeName, say) carrying the node's job id is
    not one sunk placed, whether the caller believes only the node's jobs or every annotation (the prolog's timeout
    message and the lock-timeout drain's cause must name it as a blocker, as the lock evicts it)."""
    placed = {"metadata": {"annotations": {names.ANN_JOB_ID: "7"}}, "spec": {"schedulerName": "sunk-scheduler"}}
    copycat = {"metadata": {"annotations": {names.ANN_JOB_ID: "7"}}, "spec": {"schedulerName": "default-scheduler"}}
    assert vouched.placed_by_sunk(placed) and not vouched.placed_by_sunk(copycat)
    assert pods_to_evict([placed, copycat], strict=True, effect="NoSchedule", vouched=vouched) == [copycat]
    assert Vouched.everything().placed_by_sunk(copycat)  # (no schedulers named: every annotation, as before)
