"""The scheduler's one Pod patch: what it writes, and when it writes nothing."""

from __future__ import annotations

import pytest

from scheduler import kubeops
from sunk import names
from sunk.kube.client import ApiError
from sunk.translate.lock import LOCK_TOLERATION


@pytest.fixture
def patches(monkeypatch):
    sent = []

    def patch(api, resource, name, body, namespace):
        sent.append((namespace, name, body))
        return body

    monkeypatch.setattr(kubeops.kube, "patch", patch)
    return sent


def pod(annotations=None, tolerations=None):
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "annotations": annotations or {}},
            "spec": {"tolerations": tolerations or []}}


OTHER = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}


def test_annotations_and_toleration_go_in_one_patch(patches):
    assert kubeops.record_job(None, pod(tolerations=[OTHER]), {names.ANN_JOB_ID: "7"}, tolerate_lock=True)
    assert patches == [("ns", "p", {"metadata": {"annotations": {names.ANN_JOB_ID: "7"}},
                                    "spec": {"tolerations": [OTHER, LOCK_TOLERATION]}})]


def test_only_what_differs_is_written(patches):
    current = pod(annotations={names.ANN_JOB_ID: "7"})
    assert kubeops.record_job(None, current, {names.ANN_JOB_ID: "7", names.ANN_SLURM_NODE: "node1"})
    assert patches == [("ns", "p", {"metadata": {"annotations": {names.ANN_SLURM_NODE: "node1"}}})]


@pytest.mark.parametrize("toleration", [
    {"key": names.LOCK_KEY, "operator": "Exists"},
    {"key": names.LOCK_KEY, "operator": "Equal", "value": "true"},
    {"operator": "Exists"},
], ids=["exists", "equal-true", "everything"])
def test_a_pod_that_tolerates_the_lock_is_not_written(patches, toleration):
    current = pod(annotations={names.ANN_JOB_ID: "7"}, tolerations=[toleration])
    assert not kubeops.record_job(None, current, {names.ANN_JOB_ID: "7"}, tolerate_lock=True)
    assert patches == []


def test_no_toleration_unless_asked(patches):
    kubeops.record_job(None, pod(), {names.ANN_JOB_ID: "7"})
    assert "spec" not in patches[0][2]


def test_a_pod_already_gone_is_not_an_error(monkeypatch):
    def gone(*_args):
        raise ApiError(404, "NotFound", {"message": "pods \"p\" not found"})

    monkeypatch.setattr(kubeops.kube, "patch", gone)
    assert kubeops.record_job(None, pod(), {names.ANN_JOB_ID: "7"}) is False
