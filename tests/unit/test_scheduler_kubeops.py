"""The scheduler's one Pod patch: what it writes, and when it writes nothing."""

from __future__ import annotations

import copy

import pytest

from scheduler import kubeops
from sunk.kube.client import ApiError
from sunk.model import names
from sunk.translate.lock import LOCK_TOLERATION


@pytest.fixture
def patches(monkeypatch):
    sent = []

    def patch(api, resource, name, body, namespace, **_kw):
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
    assert patches == [("ns", "p", {"metadata": {"annotations": {names.ANN_JOB_ID: "7"}, "uid": "u"},
                                    "spec": {"tolerations": [OTHER, LOCK_TOLERATION]}})]


def test_only_what_differs_is_written(patches):
    current = pod(annotations={names.ANN_JOB_ID: "7"})
    assert kubeops.record_job(None, current, {names.ANN_JOB_ID: "7", names.ANN_SLURM_NODE: "node1"})
    assert patches == [("ns", "p", {"metadata": {"annotations": {names.ANN_SLURM_NODE: "node1"}, "uid": "u"}})]


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


def test_a_toleration_alone_still_names_the_pod(patches):
    kubeops.record_job(None, pod(), {}, tolerate_lock=True)
    assert patches == [("ns", "p", {"metadata": {"uid": "u"}, "spec": {"tolerations": [LOCK_TOLERATION]}})]


class Apiserver:
    """Pods by name, as the apiserver keeps them: a merge patch that would change a uid is refused (422)."""

    def __init__(self, *pods):
        self.pods = {p["metadata"]["name"]: copy.deepcopy(p) for p in pods}

    def patch(self, api, resource, name, body, namespace=None, **_kw):
        live = self.pods.get(name)
        if live is None:
            raise ApiError(404, "NotFound", {"message": f"pods {name!r} not found"})
        uid = (body.get("metadata") or {}).get("uid")
        if uid is not None and uid != live["metadata"]["uid"]:
            raise ApiError(422, "Invalid", {"message": f"Pod {name!r} is invalid: metadata.uid: Invalid value: "
                                                       f"{uid!r}: field is immutable"})
        live["metadata"].setdefault("annotations", {}).update((body.get("metadata") or {}).get("annotations") or {})
        if "spec" in body:
            live["spec"].update(body["spec"])
        return copy.deepcopy(live)

    def guarded(self, monkeypatch) -> list:
        """Stand in for the apiserver's patches, each refused with a 409 unless its resourceVersion is the live
        one (the status writes' precondition); the bodies sent, in order."""
        sent: list = []

        def patch(api, resource, name, body, namespace=None, **_kw):
            sent.append(body)
            if body["metadata"].get("resourceVersion") != self.pods[name]["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", {"message": "the object has been modified"})
            return self.patch(api, resource, name, body, namespace)

        monkeypatch.setattr(kubeops.kube, "patch", patch)
        monkeypatch.setattr(kubeops.kube, "get", self.get)
        return sent

    def get(self, api, resource, name, namespace=None):
        if name not in self.pods:
            raise ApiError(404, "NotFound", {"message": f"pods {name!r} not found"})
        return copy.deepcopy(self.pods[name])


def test_a_pod_recreated_under_the_same_name_never_gets_the_old_pods_job(monkeypatch):
    """A StatefulSet's Pod p, deleted and made again: the scheduler's view of the old p is stale."""
    old = pod()
    new = pod()
    new["metadata"]["uid"] = "u2"
    apiserver = Apiserver(new)
    monkeypatch.setattr(kubeops.kube, "patch", apiserver.patch)
    monkeypatch.setattr(kubeops.kube, "get", apiserver.get)
    assert kubeops.record_job(None, old, {names.ANN_JOB_ID: "7"}, tolerate_lock=True) is False
    assert apiserver.pods["p"]["metadata"]["annotations"] == {}
    assert apiserver.pods["p"]["spec"]["tolerations"] == []
    assert kubeops.record_job(None, new, {names.ANN_JOB_ID: "8"}) is True  # the Pod itself is written
    assert apiserver.pods["p"]["metadata"]["annotations"] == {names.ANN_JOB_ID: "8"}


def test_another_refusal_of_the_pods_own_patch_is_raised(monkeypatch):
    def invalid(*_args, **_kw):
        raise ApiError(422, "Invalid", {"message": "spec.tolerations: Forbidden"})

    monkeypatch.setattr(kubeops.kube, "patch", invalid)
    monkeypatch.setattr(kubeops.kube, "get", Apiserver(pod()).get)
    with pytest.raises(ApiError):
        kubeops.record_job(None, pod(), {}, tolerate_lock=True)


def test_unschedulable_is_never_written_to_a_successor(monkeypatch):
    """The status write rereads after a conflict: a successor with the name is not the Pod it meant."""
    old = pod()
    old["metadata"]["resourceVersion"], old["status"] = "1", {}
    new = pod()
    new["metadata"].update(uid="u2", resourceVersion="9")
    new["status"] = {}
    apiserver = Apiserver(new)
    sent = apiserver.guarded(monkeypatch)
    assert kubeops.mark_unschedulable(None, old, "no") is False
    assert len(sent) == 1 and sent[0]["metadata"]["uid"] == "u"
    assert "conditions" not in apiserver.pods["p"]["status"]


def test_a_pod_already_gone_is_not_an_error(monkeypatch):
    def gone(*_args, **_kw):
        raise ApiError(404, "NotFound", {"message": "pods \"p\" not found"})

    monkeypatch.setattr(kubeops.kube, "patch", gone)
    assert kubeops.record_job(None, pod(), {names.ANN_JOB_ID: "7"}) is False


@pytest.mark.parametrize("write", [
    lambda pod: kubeops.mark_unschedulable(None, pod, "no"),
    lambda pod: kubeops.show_waiting(None, pod, {"type": "PodScheduled", "status": "False",
                                                 "reason": "WaitingForSlurm", "message": "job 7 waits"}),
], ids=["unschedulable", "waiting"])
def test_a_wait_is_never_written_onto_a_pod_bound_meanwhile(monkeypatch, write):
    """The condition was decided on the stored Pod; the extender's binding came first (a 409): the reread Pod is
    bound, and PodScheduled=False would contradict the binding's True."""
    stored = pod()
    stored["metadata"]["resourceVersion"], stored["status"] = "1", {}
    live = copy.deepcopy(stored)
    live["metadata"]["resourceVersion"] = "2"
    live["spec"]["nodeName"] = "worker-1"
    live["status"] = {"conditions": [{"type": "PodScheduled", "status": "True"}]}
    apiserver = Apiserver(live)
    sent = apiserver.guarded(monkeypatch)
    assert write(stored) is False
    assert len(sent) == 1, "one try on the stored Pod; after the reread, nothing"
    assert apiserver.pods["p"]["status"]["conditions"] == [{"type": "PodScheduled", "status": "True"}]
