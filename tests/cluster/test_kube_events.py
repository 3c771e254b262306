"""EventRecorder against the real apiserver: real Event objects, aggregation by count."""

from __future__ import annotations

import uuid

import pytest
from kube_testns import create_namespace, purge_namespace

from sunk.kube import client as kc
from sunk.kube.events import EventRecorder
from sunk.kube.resources import EVENTS, NODES, PODS
from sunk_dev.cluster import k8s_node_for


@pytest.fixture
def namespace(kube_api):
    name = create_namespace(kube_api)
    yield name
    purge_namespace(kube_api, name)


def make_pod(api, namespace: str, name: str) -> dict:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    return kc.create(api, PODS, body, namespace)


def events_for(api, namespace: str, name: str) -> list[dict]:
    return kc.list_objects(api, EVENTS, namespace, field_selector=f"involvedObject.name={name}")


def test_repeated_event_increments_count_on_one_real_event(kube_api, namespace):
    pod = make_pod(kube_api, namespace, "slurmd-0")
    rec = EventRecorder(kube_api, "sunk-syncer-test")
    try:
        for _ in range(3):
            rec.warning(pod, "SlurmDrain", "k8s: Pod is not ready")
        rec.normal(pod, "SlurmUndrain", "k8s: Pod is ready again")
        assert rec.flush(10)
        evs = events_for(kube_api, namespace, "slurmd-0")
        by_reason = {e["reason"]: e for e in evs}
        assert len(evs) == 2, [(e["reason"], e.get("count")) for e in evs]
        drain = by_reason["SlurmDrain"]
        assert drain["count"] == 3
        assert drain["type"] == "Warning" and drain["message"] == "k8s: Pod is not ready"
        assert drain["involvedObject"]["kind"] == "Pod"
        assert drain["involvedObject"]["uid"] == pod["metadata"]["uid"]
        assert drain["source"]["component"] == "sunk-syncer-test"
        assert drain["reportingComponent"] == "sunk-syncer-test"
        assert drain["lastTimestamp"] >= drain["firstTimestamp"]
        assert by_reason["SlurmUndrain"]["count"] == 1 and by_reason["SlurmUndrain"]["type"] == "Normal"

        # A different message is a different Event.
        rec.warning(pod, "SlurmDrain", "k8s: Pod is being deleted")
        assert rec.flush(10)
        assert len(events_for(kube_api, namespace, "slurmd-0")) == 3
        assert rec.errors == 0 and rec.dropped == 0
    finally:
        rec.stop()


def test_expired_event_is_recreated(kube_api, namespace):
    """If the Event we aggregate into is gone (the apiserver's TTL), the next repeat creates a new one."""
    pod = make_pod(kube_api, namespace, "p")
    rec = EventRecorder(kube_api, "sunk-test")
    try:
        rec.normal(pod, "Synced", "ok")
        assert rec.flush(10)
        (ev,) = events_for(kube_api, namespace, "p")
        kc.delete(kube_api, EVENTS, ev["metadata"]["name"], namespace)
        rec.normal(pod, "Synced", "ok")
        assert rec.flush(10)
        (again,) = events_for(kube_api, namespace, "p")
        assert again["metadata"]["name"] != ev["metadata"]["name"] and again["count"] == 1
        assert rec.errors == 0
    finally:
        rec.stop()


def test_cache_is_bounded(kube_api, namespace):
    pod = make_pod(kube_api, namespace, "p")
    rec = EventRecorder(kube_api, "sunk-test", cache_size=2)
    try:
        for i in range(4):
            rec.normal(pod, "R", f"m{i}")
        assert rec.flush(10)
        assert len(rec._cache) == 2
        rec.normal(pod, "R", "m0")  # evicted from the cache: a new Event, not a count bump
        assert rec.flush(10)
        evs = [e for e in events_for(kube_api, namespace, "p") if e["message"] == "m0"]
        assert sorted(e["count"] for e in evs) == [1, 1]
    finally:
        rec.stop()


def test_node_events_go_to_default_namespace(kube_api):
    node = kc.get(kube_api, NODES, k8s_node_for("node2"))
    node.setdefault("kind", "Node")
    node.setdefault("apiVersion", "v1")
    reason = f"Test{uuid.uuid4().hex[:6]}"
    rec = EventRecorder(kube_api, "sunk-test")
    try:
        rec.normal(node, reason, "node event")
        assert rec.flush(10)
        evs = [e for e in kc.list_objects(kube_api, EVENTS, "default") if e["reason"] == reason]
        assert len(evs) == 1 and evs[0]["involvedObject"]["name"] == k8s_node_for("node2")
        kc.delete(kube_api, EVENTS, evs[0]["metadata"]["name"], "default")
    finally:
        rec.stop()
