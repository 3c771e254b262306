"""Which Pod updates wake the scheduler: those that can change its decision, no others."""

from __future__ import annotations

import copy

from scheduler.assembly import changed_for_scheduling
from sunk import names


def pod() -> dict:
    return {"metadata": {"uid": "u1", "namespace": "ns", "name": "p", "resourceVersion": "1",
                         "annotations": {"sunk.coreweave.com/account": "ml"}},
            "spec": {"schedulerName": "sunk", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Pending"}}


def updated(change) -> tuple[dict, dict]:
    old = pod()
    new = copy.deepcopy(old)
    new["metadata"]["resourceVersion"] = "2"
    change(new)
    return old, new


def test_adds_and_deletes_always_count():
    assert changed_for_scheduling(None, pod())


def test_status_only_updates_do_not_count():
    def running(p):
        p["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    assert not changed_for_scheduling(*updated(running))


def test_the_schedulers_own_patch_does_not_count():
    def patched(p):
        p["metadata"]["annotations"][names.ANN_JOB_ID] = "42"
        p["spec"]["tolerations"] = [{"key": names.LOCK_KEY, "operator": "Exists"}]
    assert not changed_for_scheduling(*updated(patched))


def test_what_the_decision_reads_counts():
    def bound(p):
        p["spec"]["nodeName"] = "worker-1"

    def deleting(p):
        p["metadata"]["deletionTimestamp"] = "2026-11-23T00:00:00Z"

    def fixed_annotation(p):
        p["metadata"]["annotations"]["sunk.coreweave.com/account"] = "research"

    def new_grace(p):
        p["spec"]["terminationGracePeriodSeconds"] = 5

    for change in (bound, deleting, fixed_annotation, new_grace):
        assert changed_for_scheduling(*updated(change)), change.__name__
