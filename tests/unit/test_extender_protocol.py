"""The extender answers every verb, and garbage gets HTTP 400 with a JSON error, never a 500."""

from __future__ import annotations

import json

import pytest
from informer_fakes import ListInformer
from policy_fakes import TEST_POLICY

from extender import protocol
from extender.app import create_app
from scheduler.binder import Binder, Binding
from scheduler.decide import Bind, Invalid, Waiting

POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"}, "spec": {"containers": []}}


class FakePods:
    def __init__(self, pods):
        self.pods = {p["metadata"]["uid"]: p for p in pods}

    def by_uid(self, uid):
        return self.pods.get(uid)


class FakeScheduler:
    """Only what the app reads: placement(), pods.by_uid(), bind_placed()."""

    def __init__(self, action, pods=(POD,)):
        self.action = action
        self.pods = FakePods(pods)
        self.binder = Binder(None, must_tolerate_lock=lambda node: False)

    def bind_placed(self, pod, bind):  # (PodScheduler's, without claims)
        return Binding.BOUND if self.binder.bind(pod, bind) else Binding.ALREADY

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
    result = client_for(Invalid((("uid", "cpu request must be non-zero"),)), enqueued).post(
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


# ---- every field read is checked; each of these was a 500 (an HTML page) or worse ----------------

META = {"name": "p", "namespace": "ns", "uid": "u-2"}  # a Pod the informer has not seen: its own copy is read


@pytest.mark.parametrize(("body", "field"), [
    ({"Pod": {"metadata": META}, "NodeNames": ["w"]}, "Pod.spec must be an object, got null"),
    ({"Pod": {"metadata": META, "spec": []}, "NodeNames": ["w"]}, "Pod.spec must be an object, got a list"),
    ({"Pod": {"metadata": "x", "spec": {}}, "NodeNames": ["w"]}, "Pod.metadata must be an object"),
    ({"Pod": {"metadata": {**META, "uid": 7}, "spec": {}}, "NodeNames": ["w"]}, "Pod.metadata.uid must be"),
    ({"Pod": POD, "Nodes": {"items": [{"metadata": None}]}}, "Nodes.items[0].metadata must be an object"),
    ({"Pod": POD, "Nodes": {"items": [{"metadata": "x"}]}}, "Nodes.items[0].metadata must be an object"),
    ({"Pod": POD, "Nodes": {"items": ["worker-1"]}}, "Nodes.items[0] must be an object"),
    ({"Pod": POD, "Nodes": {"items": None}}, "Nodes.items must be a list"),
    ({"Pod": POD, "NodeNames": ["worker-1", None]}, "NodeNames[1] must be a non-empty string"),
    ({"Pod": POD, "NodeNames": ["worker-1", ""]}, "NodeNames[1] must be a non-empty string"),
    ({"Pod": {"metadata": {**META, "annotations": ["a"]}, "spec": {}}, "NodeNames": ["w"]},
     "Pod.metadata.annotations must be an object"),
    ({"Pod": {"metadata": {**META, "annotations": {"sunk.coreweave.com/exclusive": 1}}, "spec": {}},
      "NodeNames": ["w"]}, "Pod.metadata.annotations['sunk.coreweave.com/exclusive'] must be a string"),
    ({"Pod": {"metadata": {**META, "annotations": {"sunk.coreweave.com/job-id": "²"}}, "spec": {}},
      "NodeNames": ["w"]}, "must be a Slurm job id"),
    ({"Pod": {"metadata": {**META, "annotations": {"sunk.coreweave.com/priority": "7" * 5000}}, "spec": {}},
      "NodeNames": ["w"]}, "is longer than 1000 characters"),
    ({"Pod": {"metadata": META, "spec": {"nodeName": 3}}, "NodeNames": ["w"]}, "Pod.spec.nodeName must be a string"),
    ({"Pod": {"metadata": META, "spec": {"containers": [1]}}, "NodeNames": ["w"]},
     "Pod.spec.containers[0] must be an object"),
    ({"Pod": {"metadata": META, "spec": {"containers": "ab"}}, "NodeNames": ["w"]},
     "Pod.spec.containers must be a list"),
    ({"Pod": {"metadata": META, "spec": {"initContainers": [{"resources": {"limits": ["1"]}}]}}, "NodeNames": ["w"]},
     "Pod.spec.initContainers[0].resources.limits must be an object"),
    ({"Pod": {"metadata": META, "spec": {"containers": [{"resources": {"requests": {"cpu": {}}}}]}},
      "NodeNames": ["w"]}, "Pod.spec.containers[0].resources.requests['cpu'] must be a quantity"),
    ({"Pod": {"metadata": META, "spec": {"overhead": {"cpu": "1" * 30_000 + "x"}}}, "NodeNames": ["w"]},
     "Pod.spec.overhead['cpu'] is longer than 64 characters"),
    ({"Pod": {"metadata": META, "spec": {"terminationGracePeriodSeconds": "30"}}, "NodeNames": ["w"]},
     "Pod.spec.terminationGracePeriodSeconds must be an integer"),
    ({"Pod": {"metadata": META, "spec": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": "a"}}}}}, "NodeNames": ["w"]},
     "nodeSelectorTerms must be a list"),
    ({"Pod": {"metadata": META, "spec": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "gpu.nvidia.com/class", "operator": "In", "values": [1]}]}]}}}}},
      "NodeNames": ["w"]}, "matchExpressions[0].values[0] must be a string"),
], ids=lambda v: None if isinstance(v, dict) else v[:40])
def test_every_field_the_placement_reads_is_checked_with_its_name(body, field, enqueued, caplog):
    from scheduler.config import SchedulerConfig
    from scheduler.jobindex import JobIndex
    from scheduler.reconciler import PodIndex, PodScheduler, SlurmdNodes

    real = PodScheduler(api=None, slurm=None, config=SchedulerConfig("s", b"x" * 16, "http://h",
                                                                     identity_policy=TEST_POLICY),
                        jobs=JobIndex(lambda extra: None), pods=PodIndex(ListInformer([])),
                        slurmd=SlurmdNodes(ListInformer([])), recorder=None)
    client = create_app(real, enqueued.append).test_client()
    for verb in ("filter", "prioritize"):
        with caplog.at_level("WARNING", logger="extender.app"):
            resp = client.post(f"/{verb}", json=body)
        assert resp.status_code == 400, resp.get_data()
        assert field in resp.get_json()["Error"]
        assert f"/{verb}" in caplog.text and field[:30] in caplog.text  # the log line: verb and message
    assert enqueued == []


@pytest.mark.parametrize("body", [b"[" * 100_000, b'{"Pod": NaN}', b'{"Pod": 1e999}', b'{"x": ' + b"9" * 5000 + b"}",
                                  b'\xff{"Pod": {}}', "{}".encode("utf-16")],
                         ids=["nested", "nan", "infinity", "huge-int", "not-utf8", "utf16"])
def test_bodies_that_are_not_strict_json_are_400(body, enqueued):
    resp = client_for(Waiting(1, "x"), enqueued).post("/filter", data=body, content_type="application/json")
    assert resp.status_code == 400
    assert resp.get_json()["Error"].startswith("bad request: the body is not valid JSON")


def test_node_objects_echoed_back_are_strict_json(enqueued):
    deep: dict = {}
    for _ in range(protocol.MAX_NODE_DEPTH + 1):
        deep = {"x": deep}
    nodes = {"items": [{"metadata": {"name": "worker-1"}, "status": deep}]}
    resp = client_for(Bind(7, "node1", "worker-1"), enqueued).post("/filter", json={"Pod": POD, "Nodes": nodes})
    assert resp.status_code == 400 and "nests deeper than" in resp.get_json()["Error"]


def test_many_copies_of_the_allocated_node_are_answered_in_linear_time(enqueued):
    nodes = {"items": [{"metadata": {"name": "worker-1"}}] * 50_000}
    resp = client_for(Bind(7, "node1", "worker-1"), enqueued).post("/filter", json={"Pod": POD, "Nodes": nodes})
    assert resp.status_code == 200 and len(resp.get_json()["Nodes"]["items"]) == 50_000


def test_preempt_checks_the_pod_and_the_victim_maps(enqueued):
    app = client_for(Waiting(1, "x"), enqueued)
    for body, field in [({"Pod": {"metadata": {}}}, "Pod.metadata.name"),
                        ({"Pod": POD, "NodeNameToMetaVictims": []}, "NodeNameToMetaVictims must be an object"),
                        ({"Pod": POD, "NodeNameToVictims": "x"}, "NodeNameToVictims must be an object")]:
        resp = app.post("/preempt", json=body)
        assert resp.status_code == 400 and field in resp.get_json()["Error"]
    resp = app.post("/preempt", json={"Pod": POD, "NodeNameToVictims": None, "NodeNameToMetaVictims": {"w": {}}})
    assert resp.status_code == 200


def test_werkzeug_errors_are_json_and_keep_their_headers(enqueued):
    app = client_for(Waiting(1, "x"), enqueued)
    resp = app.open("/filter", method="OPTIONS")
    assert resp.status_code == 405 and resp.headers["Allow"] == "POST" and resp.is_json
    resp = app.post("/healthz")
    assert resp.status_code == 405 and resp.get_json() == {"Error": "this path takes GET, HEAD"}
    resp = app.post("/filter", data=b" " * (8 * 1024 * 1024 + 1), content_type="application/json")
    assert resp.status_code == 413 and resp.get_json() == {"Error": "the body is larger than 8 MiB"}
    resp = app.post("/filter", data=b"{}", content_type="text/plain")
    assert resp.status_code == 400 and "Content-Type: application/json" in resp.get_json()["Error"]
