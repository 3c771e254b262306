"""The extender answers every verb, and garbage gets HTTP 400 with a JSON error, never a 500."""

from __future__ import annotations

import json

import pytest

from extender import protocol
from extender.app import create_app
from scheduler.decide import Bind, Invalid, Waiting

POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"}, "spec": {"containers": []}}


class FakePods:
    def __init__(self, pods):
        self.pods = {p["metadata"]["uid"]: p for p in pods}

    def by_uid(self, uid):
        return self.pods.get(uid)


class FakeScheduler:
    """Only what the app reads: placement(), pods.by_uid(), api."""

    def __init__(self, action, pods=(POD,)):
        self.action = action
        self.pods = FakePods(pods)
        self.api = None

    def placement(self, pod, uid):
        return self.action


@pytest.fixture
def enqueued():
    return []


def client_for(action, enqueued, pods=(POD,)):
    return create_app(FakeScheduler(action, pods), enqueued.append).test_client()


GARBAGE = [
    b"not json",
    b"[]",
    b"42",
    json.dumps({}).encode(),
    json.dumps({"Pod": "x", "NodeNames": []}).encode(),
    json.dumps({"Pod": {"metadata": {}}, "NodeNames": []}).encode(),
    json.dumps({"Pod": {"metadata": {"name": "p", "namespace": "ns", "uid": ""}}, "NodeNames": []}).encode(),
    json.dumps({"Pod": POD}).encode(),
    json.dumps({"Pod": POD, "NodeNames": "worker-1"}).encode(),
    json.dumps({"Pod": POD, "NodeNames": [1, 2]}).encode(),
    json.dumps({"Pod": POD, "Nodes": {"items": [{"metadata": {}}]}}).encode(),
    json.dumps({"Pod": POD, "Nodes": []}).encode(),
]


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
@pytest.mark.parametrize("body", GARBAGE, ids=range(len(GARBAGE)))
def test_filter_and_prioritize_reject_garbage_with_400_json(verb, body, enqueued):
    resp = client_for(Waiting(1, "x"), enqueued).post(f"/{verb}", data=body, content_type="application/json")
    assert resp.status_code == 400
    assert "bad request" in resp.get_json()["Error"]
    assert enqueued == []


@pytest.mark.parametrize("body", [b"nope", b"{}", json.dumps({"PodName": "p", "PodNamespace": "ns", "PodUID": "u"}),
                                  json.dumps({"PodName": 1, "PodNamespace": "ns", "PodUID": "u", "Node": "n"})])
def test_bind_rejects_garbage_with_400_json(body, enqueued):
    resp = client_for(Waiting(1, "x"), enqueued).post("/bind", data=body, content_type="application/json")
    assert resp.status_code == 400 and "Error" in resp.get_json()


def test_preempt_rejects_garbage_and_offers_no_victims(enqueued):
    app = client_for(Waiting(1, "x"), enqueued)
    assert app.post("/preempt", data=b"[]", content_type="application/json").status_code == 400
    resp = app.post("/preempt", json={"Pod": POD, "NodeNameToVictims": {}, "NodeNameToMetaVictims": {}})
    assert resp.status_code == 200 and resp.get_json() == {"NodeNameToMetaVictims": {}}


def test_unknown_verb_and_method_are_json(enqueued):
    app = client_for(Waiting(1, "x"), enqueued)
    assert app.post("/nope", json={}).get_json() == {"Error": "no such verb"}
    assert app.get("/filter").status_code == 405


def test_filter_fails_every_node_while_slurm_has_not_allocated(enqueued):
    names = [f"worker-{i}" for i in range(5)]
    resp = client_for(Waiting(42, "Priority"), enqueued).post("/filter", json={"Pod": POD, "NodeNames": names})
    result = resp.get_json()
    assert result["NodeNames"] == []
    assert set(result["FailedNodes"]) == set(names)
    assert result["FailedNodes"]["worker-0"] == "waiting for Slurm allocation of job 42 (Priority)"
    assert result["FailedAndUnresolvableNodes"] == {} and result["Error"] == ""
    assert enqueued == ["u-1"]


def test_filter_passes_only_the_allocated_node(enqueued):
    names = ["worker-1", "worker-2", "worker-3"]
    resp = client_for(Bind(7, "node2", "worker-2"), enqueued).post("/filter", json={"Pod": POD, "NodeNames": names})
    result = resp.get_json()
    assert result["NodeNames"] == ["worker-2"]
    assert set(result["FailedNodes"]) == {"worker-1", "worker-3"}


def test_filter_with_full_node_objects_returns_node_objects(enqueued):
    nodes = {"items": [{"metadata": {"name": n}} for n in ("worker-1", "worker-2")]}
    result = client_for(Bind(7, "node1", "worker-1"), enqueued).post(
        "/filter", json={"Pod": POD, "Nodes": nodes}).get_json()
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == ["worker-1"]


def test_an_invalid_pod_fails_every_node_for_good(enqueued):
    result = client_for(Invalid(("cpu request must be non-zero",)), enqueued).post(
        "/filter", json={"Pod": POD, "NodeNames": ["worker-1"]}).get_json()
    assert result["FailedAndUnresolvableNodes"] == {"worker-1": "sunk: cpu request must be non-zero"}
    assert result["FailedNodes"] == {}


def test_prioritize_scores_the_allocated_node_highest(enqueued):
    result = client_for(Bind(7, "node1", "worker-1"), enqueued).post(
        "/prioritize", json={"Pod": POD, "NodeNames": ["worker-1", "worker-2"]}).get_json()
    assert result == [{"Host": "worker-1", "Score": protocol.MAX_SCORE}, {"Host": "worker-2", "Score": 0}]


def test_bind_of_an_unknown_pod_returns_the_error_field(enqueued):
    resp = client_for(Bind(7, "node1", "worker-1"), enqueued, pods=()).post(
        "/bind", json={"PodName": "p", "PodNamespace": "ns", "PodUID": "u-1", "Node": "worker-1"})
    assert resp.status_code == 200
    assert resp.get_json()["Error"].startswith("unknown pod ns/p")


def test_bind_to_another_node_than_slurm_chose_is_refused(enqueued):
    resp = client_for(Bind(7, "node1", "worker-1"), enqueued).post(
        "/bind", json={"PodName": "p", "PodNamespace": "ns", "PodUID": "u-1", "Node": "worker-2"})
    assert "not worker-2" in resp.get_json()["Error"]


def test_bind_before_allocation_is_refused(enqueued):
    resp = client_for(Waiting(7, "Resources"), enqueued).post(
        "/bind", json={"PodName": "p", "PodNamespace": "ns", "PodUID": "u-1", "Node": "worker-1"})
    assert resp.get_json()["Error"].startswith("not bindable yet: waiting for Slurm allocation of job 7")
