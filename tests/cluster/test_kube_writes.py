"""sunk.kube.patch against the real apiserver: minimal writes, 409 retries, taints, eviction."""

from __future__ import annotations

import copy
import time
import uuid

import pytest
from kube_testns import create_namespace, purge_namespace

from sunk.kube import client as kc
from sunk.kube import patch as kp
from sunk.kube.resources import NODES, PDBS, PODS
from sunk.translate import objects
from sunk.translate.podstores import scheduler_slim_pod
from sunk_dev.cluster import k8s_node_for


@pytest.fixture
def namespace(kube_api):
    name = create_namespace(kube_api)
    yield name
    purge_namespace(kube_api, name)


@pytest.fixture
def node(kube_api):
    """A Node of our own (no kubelet), so shared dev Nodes are never tainted by these tests."""
    name = f"kube-test-{uuid.uuid4().hex[:8]}"
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    yield kc.create(kube_api, NODES, body)
    kc.delete(kube_api, NODES, name)


def make_pod(api, namespace: str, name: str, labels: dict[str, str] | None = None, node: str | None = None) -> dict:
    body: dict = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], "terminationGracePeriodSeconds": 0},
    }
    if node:
        body["spec"]["nodeName"] = node
    return kc.create(api, PODS, body, namespace)


def wait_running(api, namespace: str, name: str, timeout: float = 15.0) -> dict:
    """The dev cluster's fake kubelet marks bound Pods Running."""
    deadline = time.monotonic() + timeout
    while True:
        pod = kc.get(api, PODS, name, namespace)
        if pod.get("status", {}).get("phase") == "Running":
            return pod
        assert time.monotonic() < deadline, f"{name} never Running: {pod.get('status')}"
        time.sleep(0.1)


def conditions(pod: dict) -> list[dict]:
    return pod.get("status", {}).get("conditions") or []


def test_labels_and_annotations_write_only_differences(kube_api, namespace):
    pod = make_pod(kube_api, namespace, "p", labels={"keep": "1", "drop": "x"})
    res = kp.patch_metadata(
        kube_api, pod, labels={"sunk.coreweave.com/drain": "true", "drop": None}, annotations={"a": "b"}
    )
    assert res.wrote and bool(res) is True
    assert res.obj["metadata"]["labels"] == {"keep": "1", "sunk.coreweave.com/drain": "true"}
    assert res.obj["metadata"]["annotations"] == {"a": "b"}

    again = kp.set_labels(kube_api, res.obj, {"sunk.coreweave.com/drain": "true", "drop": None})
    assert not again.wrote and bool(again) is False
    server = kc.get(kube_api, PODS, "p", namespace)
    assert server["metadata"]["resourceVersion"] == res.obj["metadata"]["resourceVersion"], "no-op must not write"


def test_stale_resource_version_in_a_patch_is_a_real_409(kube_api, namespace):
    """The basis of the helpers below: the apiserver enforces resourceVersion in a merge patch."""
    pod = make_pod(kube_api, namespace, "p")
    kc.patch(kube_api, PODS, "p", {"metadata": {"labels": {"x": "1"}}}, namespace)
    with pytest.raises(kc.ApiError) as err:
        kc.patch(
            kube_api,
            PODS,
            "p",
            {"metadata": {"resourceVersion": pod["metadata"]["resourceVersion"]}, "status": {"conditions": []}},
            namespace,
            subresource="status",
        )
    assert err.value.conflict


def test_set_pod_conditions_retries_on_409_and_keeps_the_other_writers_condition(kube_api, namespace):
    pod = make_pod(kube_api, namespace, "slurmd")
    stale = copy.deepcopy(pod)
    # Another writer (think: kubelet) adds its condition after we read the Pod.
    other = kp.set_pod_conditions(kube_api, pod, [{"type": "Ready", "status": "False", "reason": "KubeletSays"}])
    assert other.wrote and other.conflicts == 0

    res = kp.set_pod_conditions(
        kube_api, stale, [{"type": "SlurmDrain", "status": "True", "reason": "Drained", "message": "k8s: not ready"}]
    )
    assert res.wrote and res.conflicts == 1, res
    server = kc.get(kube_api, PODS, "slurmd", namespace)
    by_type = {c["type"]: c for c in conditions(server)}
    assert by_type["Ready"]["reason"] == "KubeletSays", "the other writer's condition must survive"
    assert by_type["SlurmDrain"]["message"] == "k8s: not ready"
    assert [c["type"] for c in conditions(server)].count("SlurmDrain") == 1

    # Same desired state from the same stale view: a 409, a reread, and then nothing to write.
    noop = kp.set_pod_conditions(
        kube_api, stale, [{"type": "SlurmDrain", "status": "True", "reason": "Drained", "message": "k8s: not ready"}]
    )
    assert not noop.wrote and noop.conflicts == 1
    assert (
        kc.get(kube_api, PODS, "slurmd", namespace)["metadata"]["resourceVersion"]
        == server["metadata"]["resourceVersion"]
    )

    # A message change keeps lastTransitionTime; a status flip moves it (or keeps it within the same second).
    before = by_type["SlurmDrain"]["lastTransitionTime"]
    changed = kp.set_pod_conditions(kube_api, server, [{"type": "SlurmDrain", "status": "True", "message": "k8s: x"}])
    assert changed.wrote and objects.get_condition(changed.obj, "SlurmDrain")["lastTransitionTime"] == before
    removed = kp.set_pod_conditions(kube_api, changed.obj, [], remove=["SlurmDrain"])
    assert removed.wrote and objects.get_condition(removed.obj, "SlurmDrain") is None
    assert objects.get_condition(removed.obj, "Ready") is not None


def test_set_pod_conditions_repairs_duplicates(kube_api, namespace):
    pod = make_pod(kube_api, namespace, "dup")
    dup = [
        {"type": "SlurmDrain", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"},
        {"type": "SlurmDrain", "status": "False", "lastTransitionTime": "2024-01-01T00:00:00Z"},
    ]
    try:
        kc.patch(kube_api, PODS, "dup", {"status": {"conditions": dup}}, namespace, subresource="status")
    except kc.ApiError as exc:  # if the apiserver refused duplicates outright, there is nothing to repair
        pytest.fail(f"apiserver refused duplicate conditions ({exc}); adjust this test")
    pod = kc.get(kube_api, PODS, "dup", namespace)
    assert [c["type"] for c in conditions(pod)].count("SlurmDrain") == 2, "setup: duplicates stored"
    res = kp.set_pod_conditions(kube_api, pod, [{"type": "SlurmDrain", "status": "True"}])
    assert res.wrote
    after = conditions(kc.get(kube_api, PODS, "dup", namespace))
    assert [c["type"] for c in after] == ["SlurmDrain"] and after[0]["status"] == "True"


def test_set_pod_conditions_from_a_store_without_the_kubelets_conditions_keeps_them(kube_api, namespace):
    """sunk-scheduler's store keeps only PodScheduled of its Pods' conditions (``scheduler_slim_pod``): the
    strategic merge patch names that type alone, so the kubelet's conditions, absent from the view it was
    computed from, stay; the type's old entries go whole (no message of theirs survives), duplicates too."""
    make_pod(kube_api, namespace, "trimmed")
    kubelets = [{"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": "kubelet says"},
                {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady"}]
    waiting = {"type": "PodScheduled", "status": "False", "reason": "WaitingForSlurm", "message": "job 7 waits",
               "lastTransitionTime": "2024-01-01T00:00:00Z"}
    kc.patch(kube_api, PODS, "trimmed", {"status": {"conditions": [*kubelets, waiting, waiting]}}, namespace,
             subresource="status")
    stored = scheduler_slim_pod(kc.get(kube_api, PODS, "trimmed", namespace))
    assert [c["type"] for c in conditions(stored)] == ["PodScheduled", "PodScheduled"], "setup: the store's view"

    res = kp.set_pod_conditions(kube_api, stored, [{"type": "PodScheduled", "status": "False",
                                                    "reason": "Unschedulable"}])
    assert res.wrote and res.conflicts == 0
    after = {c["type"]: c for c in conditions(kc.get(kube_api, PODS, "trimmed", namespace))}
    assert len(conditions(res.obj)) == 3
    for kubelet in kubelets:
        assert {k: after[kubelet["type"]].get(k) for k in kubelet} == kubelet
    assert after["PodScheduled"] == {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                     "lastTransitionTime": "2024-01-01T00:00:00Z", "lastProbeTime": None}
    again = kp.set_pod_conditions(kube_api, scheduler_slim_pod(res.obj), [{"type": "PodScheduled", "status": "False",
                                                                          "reason": "Unschedulable"}])
    assert not again.wrote


def test_taints_add_idempotent_conflict_and_remove(kube_api, node):
    name = node["metadata"]["name"]
    lock = "sunk.coreweave.com/lock"
    res = kp.ensure_taint(kube_api, node, lock, "true", "NoExecute")
    assert res.wrote
    # (the apiserver's TaintNodesByCondition admission adds a not-ready taint to new Nodes)
    (taint,) = [t for t in res.obj["spec"]["taints"] if t["key"] == lock]
    assert taint["key"] == lock and taint["value"] == "true" and taint["effect"] == "NoExecute"
    assert taint.get("timeAdded")
    assert not kp.ensure_taint(kube_api, res.obj, lock, "true", "NoExecute").wrote

    # Someone else adds a taint; our stale view still converges, and theirs is kept.
    other = kp.ensure_taint(kube_api, res.obj, "example.com/other", None, "NoSchedule")
    assert other.wrote
    changed = kp.ensure_taint(kube_api, res.obj, lock, "false", "NoExecute")  # res.obj is stale now
    # (at least our own stale write's 409: kube-controller-manager's node lifecycle may write this Node's taints
    # too, a second one, as it did once after the apiserver restart of test_kube_errors.py)
    assert changed.wrote and changed.conflicts >= 1
    server = kc.get(kube_api, NODES, name)
    assert {(t["key"], t.get("value")) for t in server["spec"]["taints"]} >= {
        (lock, "false"),
        ("example.com/other", None),
    }
    assert [t["key"] for t in server["spec"]["taints"]].count(lock) == 1
    assert objects.has_taint(server, lock, "NoExecute")

    # Another effect replaces ours (an operator changed the lock's effect): still one taint of the key.
    switched = kp.ensure_taint(kube_api, server, lock, "true", "NoSchedule")
    assert switched.wrote
    assert [(t["key"], t["effect"]) for t in switched.obj["spec"]["taints"] if t["key"] == lock] == [
        (lock, "NoSchedule")]
    assert objects.has_taint(switched.obj, "example.com/other")
    server = switched.obj

    gone = kp.remove_taint(kube_api, server, lock)
    assert gone.wrote and not objects.has_taint(gone.obj, lock)
    assert objects.has_taint(gone.obj, "example.com/other")
    assert not kp.remove_taint(kube_api, gone.obj, lock).wrote


def test_cordon_round_trip(kube_api, node):
    assert not objects.is_cordoned(node)
    res = kp.set_unschedulable(kube_api, node, True)
    assert res.wrote and objects.is_cordoned(res.obj)
    assert objects.is_cordoned(kc.get(kube_api, NODES, node["metadata"]["name"]))
    assert not kp.set_unschedulable(kube_api, res.obj, True).wrote
    back = kp.set_unschedulable(kube_api, res.obj, False)
    assert back.wrote and not objects.is_cordoned(back.obj)


def test_evict_outcomes(kube_api, namespace):
    free = make_pod(kube_api, namespace, "free")
    res = kp.evict(kube_api, free, grace_period_seconds=0)
    assert res.evicted, res
    with pytest.raises(kc.ApiError) as err:
        kc.get(kube_api, PODS, "free", namespace)
    assert err.value.not_found
    assert kp.evict(kube_api, free).not_found

    # A PodDisruptionBudget that allows no disruption blocks the eviction of a Running Pod with 429.
    # (Pending Pods are evicted regardless of budgets, so the Pod is bound and left to run.)
    make_pod(kube_api, namespace, "guarded", labels={"app": "slurmd"}, node=k8s_node_for("node1"))
    guarded = wait_running(kube_api, namespace, "guarded")
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "slurmd"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "slurmd"}}},
    }
    kc.create(kube_api, PDBS, pdb, namespace)
    blocked = kp.evict(kube_api, guarded)
    assert blocked.blocked, blocked
    assert blocked.message
    assert kc.get(kube_api, PODS, "guarded", namespace)["metadata"]["uid"] == guarded["metadata"]["uid"]

    # A same-named successor is never evicted through a reference to its predecessor.
    old = make_pod(kube_api, namespace, "reborn")
    kc.delete(kube_api, PODS, "reborn", namespace, grace_period_seconds=0)
    new = make_pod(kube_api, namespace, "reborn")
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    started = time.monotonic()
    res = kp.evict(kube_api, old)
    assert res.not_found, res
    assert time.monotonic() - started < 2, "must not sit in the apiserver's 10 s conflict retry"
    assert kc.get(kube_api, PODS, "reborn", namespace)["metadata"]["uid"] == new["metadata"]["uid"]


def test_writes_meant_for_one_pod_never_reach_its_successor(kube_api, namespace):
    """A Pod deleted and made again under its name (a StatefulSet's): the patch carries the old
    uid, which the apiserver refuses to change, and nothing lands on the new Pod (issue 18, item 5)."""
    from scheduler import kubeops
    from sunk.model import names

    old = make_pod(kube_api, namespace, "same-name")
    kc.delete(kube_api, PODS, "same-name", namespace, grace_period_seconds=0)
    deadline = time.monotonic() + 30
    while True:
        try:
            kc.get(kube_api, PODS, "same-name", namespace)
        except kc.ApiError as exc:
            assert exc.not_found
            break
        assert time.monotonic() < deadline, "the old Pod never went"
        time.sleep(0.2)
    new = make_pod(kube_api, namespace, "same-name")
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert kubeops.record_job(kube_api, old, {names.ANN_JOB_ID: "7"}, tolerate_lock=True) is False
    assert kp.set_labels(kube_api, old, {"stale": "yes"}).wrote is False
    assert kubeops.mark_unschedulable(kube_api, old, "meant for the old Pod") is False
    now = kc.get(kube_api, PODS, "same-name", namespace)
    assert names.ANN_JOB_ID not in (now["metadata"].get("annotations") or {})
    assert "stale" not in (now["metadata"].get("labels") or {})
    assert not now["spec"].get("tolerations") or all(t.get("key") != names.LOCK_KEY for t in now["spec"]["tolerations"])
    assert not [c for c in conditions(now) if c.get("message") == "meant for the old Pod"]
    # The Pod's own view writes as before.
    assert kubeops.record_job(kube_api, now, {names.ANN_JOB_ID: "8"}) is True
    assert kc.get(kube_api, PODS, "same-name", namespace)["metadata"]["annotations"][names.ANN_JOB_ID] == "8"
