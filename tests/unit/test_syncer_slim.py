"""The Syncer's store transforms (sunk/translate/objects.py): every decision its readers make from a trimmed
Pod or Node is the one they make from the whole object, the lists sunk merge-patches back stay whole, and a
trimmed object is a fraction of a real one's size."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from fat_objects import THEN, fat_node, fat_pod

from sunk.base.times import epoch
from sunk.kube.informer import pod_node_name
from sunk.kube.resources import object_key
from sunk.locking.assembly import taints_changed
from sunk.model import names
from sunk.model.slurm import Job
from sunk.model.types import Obj
from sunk.syncer.triggers import node_view
from sunk.translate import drains, gang, lock, objects, podcordon, slurmd
from sunk.translate.objects import LAST_APPLIED, syncer_slim_node, without_write_records
from sunk.translate.podstores import syncer_slim_pod

SCHEDULERS = frozenset({"sunk-scheduler"})
NOW = 1_900_000_000.0  # 2030-03-17, after every timestamp below


LOCK_TOLERATION = {"key": names.LOCK_KEY, "operator": "Exists"}

PODS = {
    "sunk-placed": fat_pod(annotations={names.ANN_JOB_ID: "42", names.ANN_SLURM_NODE: "node1"}),
    "sunk-placed, unvouched": fat_pod(annotations={names.ANN_JOB_ID: "77", names.ANN_SLURM_NODE: "node1"}),
    "sunk-placed, tolerates": fat_pod(annotations={names.ANN_JOB_ID: "42", names.ANN_SLURM_NODE: "node1"},
                                      tolerations=[LOCK_TOLERATION]),
    "another scheduler's, claims a job": fat_pod(annotations={names.ANN_JOB_ID: "42"}, scheduler="default"),
    "a DaemonSet's, tolerates": fat_pod("logger", scheduler="default-scheduler", tolerations=[LOCK_TOLERATION]),
    "tolerates NoSchedule only": fat_pod(scheduler="default-scheduler",
                                         tolerations=[{**LOCK_TOLERATION, "effect": "NoSchedule"}]),
    "plain": fat_pod("web", scheduler="default-scheduler"),
    "finished": fat_pod(phase="Succeeded", annotations={names.ANN_JOB_ID: "42", names.ANN_SLURM_NODE: "node1"}),
    "failed, plain": fat_pod("web", scheduler="default-scheduler", phase="Failed"),
    "terminating": fat_pod("web", scheduler="default-scheduler", deleting=True),
    "gang member of a Job": fat_pod(owner_job=True, labels={"batch.kubernetes.io/job-name": "train"},
                                    annotations={names.ANN_JOB_ID: "42", names.ANN_SLURM_NODE: "node1"}),
    "pod group member": fat_pod(labels={"scheduling.x-k8s.io/pod-group": "g"},
                                annotations={names.ANN_GANG: "pod-group"}),
    "a slurmd Pod": fat_pod("node1", namespace="slurm", hostname="node1", scheduler="default-scheduler"),
    "unbound": fat_pod(node=""),
    "LeaderWorkerSet worker": fat_pod(labels={gang.LWS_NAME: "lws", gang.LWS_GROUP_INDEX: "2",
                                             gang.LWS_WORKER_INDEX: "1"},
                                     annotations={gang.LWS_SIZE: "4", names.ANN_JOB_ID: "42"}),
    "JobSet member, one gang per Job": fat_pod(labels={gang.JOBSET_NAME: "js", gang.JOBSET_RESTART_ATTEMPT: "1",
                                                       gang.JOBSET_REPLICATED_JOB: "workers",
                                                       gang.JOBSET_JOB_INDEX: "3"},
                                               annotations={names.ANN_GANG: "job"}, owner_job=True),
    "JobSet member, one gang per replicated Job": fat_pod(labels={gang.JOBSET_NAME: "js",
                                                                  gang.JOBSET_RESTART_ATTEMPT: "2",
                                                                  gang.JOBSET_REPLICATED_JOB: "workers"},
                                                          annotations={names.ANN_GANG: "replicated-job"}),
    "Job member by its legacy labels": fat_pod(labels={"job-name": "train", "controller-uid": "job-uid"}),
    "opted out of gangs": fat_pod(owner_job=True, labels={"batch.kubernetes.io/job-name": "train"},
                                  annotations={names.ANN_GANG: "none"}),
    "unread labels and annotations": fat_pod(labels={f"team.example.com/l{i}": "x" * 60 for i in range(20)},
                                             annotations={names.ANN_COMMENT: "c" * 1000, "note": "n" * 4000,
                                                          names.ANN_JOB_ID: "42", names.ANN_SLURM_NODE: "node1"}),
}

NODES = {
    "plain": fat_node(),
    "cordoned with a reason": fat_node(cordoned=True, reason="disk swap"),
    "locked NoExecute": fat_node(taints=[{"key": names.LOCK_KEY, "value": "true", "effect": "NoExecute",
                                          "timeAdded": THEN}]),
    "locked, and another taint": fat_node(taints=[{"key": "gpu", "value": "bad", "effect": "NoSchedule"},
                                                  {"key": names.LOCK_KEY, "value": "true", "effect": "NoSchedule"}]),
    "NotReady": fat_node(ready="Unknown"),
    "being deleted": fat_node(deleting=True),
    "a GPU gone": {**fat_node(), "status": {**fat_node()["status"], "allocatable": {"cpu": "127", "memory": "2Ti",
                                                                                  "nvidia.com/gpu": "7"}}},
    "no GPUs": {**fat_node(), "status": {**fat_node()["status"], "allocatable": {"cpu": "127", "memory": "2Ti"}}},
    "MIG slices": {**fat_node(), "status": {**fat_node()["status"], "allocatable": {
        "cpu": "127", "nvidia.com/gpu": "2", "nvidia.com/mig-1g.10gb": "42"}}},
}


def pod_decisions(pod: Obj) -> tuple[Any, ...]:
    """What every reader of the all-pods store decides of one Pod (sunk/translate, locking, triggers)."""
    vouched = lock.Vouched(frozenset({42}), NOW, 30.0, scheduler_names=SCHEDULERS)
    young = lock.Vouched(frozenset(), epoch_of(THEN) + 10, 30.0, scheduler_names=SCHEDULERS)
    return (
        object_key(pod),
        objects.uid_of(pod), pod_node_name(pod), objects.is_terminal(pod), objects.is_deleting(pod),
        lock.finished(pod), lock.tolerates_lock(pod), lock.tolerates_lock(pod, "NoExecute"),
        lock.tolerates_lock(pod, "NoSchedule"), lock.bound_time(pod),
        vouched.placed_by_sunk(pod), vouched.believed_until(pod), young.placed_by_sunk(pod), young.believed_until(pod),
        [objects.uid_of(p) for p in lock.pods_to_evict([pod], strict=True, effect="NoExecute", vouched=vouched)],
        [objects.uid_of(p) for p in lock.pods_to_evict([pod], strict=False, effect="NoSchedule", vouched=vouched)],
        [objects.uid_of(p) for p in lock.pods_to_tolerate([pod], "NoExecute", vouched)],
        drains.placed_job(pod, "node1", SCHEDULERS), gang.gang_of(pod), slurmd.slurm_node_name(pod),
        objects.condition(pod, "PodScheduled"),
        (pod.get("spec") or {}).get("tolerations"),
    )


def epoch_of(stamp: str) -> float:
    value = epoch(stamp)
    assert value is not None
    return value


@pytest.mark.parametrize("case", sorted(PODS))
def test_a_trimmed_pod_decides_as_the_whole_one(case: str) -> None:
    pod = PODS[case]
    assert pod_decisions(syncer_slim_pod(pod)) == pod_decisions(pod)


def test_placeholder_drains_read_the_same_from_trimmed_pods() -> None:
    job = Job(id=42, state="RUNNING", nodes="node1", admin_comment="sunk-pod=uid-train-0 ns=team-a name=train-0")
    pods = list(PODS.values())
    found, slim_found = drains.outlived(job, pods), drains.outlived(job, [syncer_slim_pod(p) for p in pods])
    assert found is not None and slim_found is not None
    assert slim_found.drain == found.drain


@pytest.mark.parametrize("case", sorted(NODES))
def test_a_trimmed_node_decides_as_the_whole_one(case: str) -> None:
    node, slim = NODES[case], syncer_slim_node(NODES[case])
    slurmd_pod = PODS["a slurmd Pod"]
    for read in (node_view, objects.node_ready, objects.is_cordoned, objects.cordon_reason, objects.taints_of,
                 lambda n: objects.has_taint(n, names.LOCK_KEY), lambda n: objects.has_taint(n, names.LOCK_KEY,
                                                                                           "NoExecute"),
                 lambda n: podcordon.desired_condition(slurmd_pod, n), objects.is_deleting, objects.name_of,
                 objects.allocatable_gpus):
        assert read(slim) == read(node), read
    assert taints_changed(slim, syncer_slim_node(NODES["plain"])) == taints_changed(node, NODES["plain"])


@pytest.mark.parametrize("case", sorted(NODES))
def test_what_is_merge_patched_back_from_a_stored_node_stays_whole(case: str) -> None:
    """Node conditions (the Node controller, the reboot hook) and taints (the lock) are written as whole
    lists from the stored object: one cut short here would delete the kubelet's conditions or others' taints."""
    node, slim = NODES[case], syncer_slim_node(NODES[case])
    assert slim["status"]["conditions"] == node["status"]["conditions"]
    assert objects.taints_of(slim) == objects.taints_of(node)
    wanted = [{"type": names.COND_SLURM_CORDON, "status": "True", "reason": "Drain", "message": "m"}]
    assert objects.merge_conditions(slim["status"]["conditions"], wanted, now=THEN) == objects.merge_conditions(
        node["status"]["conditions"], wanted, now=THEN)
    assert {k: slim["metadata"][k] for k in ("name", "uid", "resourceVersion")} == {
        k: node["metadata"][k] for k in ("name", "uid", "resourceVersion")}


@pytest.mark.parametrize("case", sorted(PODS))
def test_what_is_merge_patched_back_from_a_stored_pod_stays_whole(case: str) -> None:
    """``kp.add_toleration`` writes the Pod's whole tolerations list, guarded by the stored resourceVersion."""
    pod, slim = PODS[case], syncer_slim_pod(PODS[case])
    assert slim["spec"]["tolerations"] == pod["spec"]["tolerations"]
    assert {k: slim["metadata"][k] for k in ("name", "namespace", "uid", "resourceVersion")} == {
        k: pod["metadata"][k] for k in ("name", "namespace", "uid", "resourceVersion")}
    assert (slim["apiVersion"], slim["kind"]) == ("v1", "Pod")  # (an Event's involvedObject)


def json_size(obj: Obj) -> int:
    return len(json.dumps(obj))


def test_trimmed_objects_are_a_fraction_of_real_ones() -> None:
    pod, node = PODS["sunk-placed"], NODES["locked NoExecute"]
    assert json_size(pod) > 20_000  # (about what a real Pod weighs: the figure below means something)
    assert json_size(syncer_slim_pod(pod)) < json_size(pod) / 10
    assert json_size(syncer_slim_node(node)) < json_size(node) / 4
    assert json_size(without_write_records(pod)) < json_size(pod) * 3 / 4


def test_the_write_records_go_and_nothing_else() -> None:
    pod = PODS["a slurmd Pod"]
    kept = without_write_records(pod)
    assert "managedFields" not in kept["metadata"] and LAST_APPLIED not in kept["metadata"]["annotations"]
    whole = copy.deepcopy(pod)
    del whole["metadata"]["managedFields"], whole["metadata"]["annotations"][LAST_APPLIED]
    assert kept == whole
    assert LAST_APPLIED in pod["metadata"]["annotations"]  # (the informer's object is not changed in place)


def test_kubectls_copy_goes_and_the_other_annotations_stay() -> None:
    pod = PODS["sunk-placed"]
    assert syncer_slim_pod(pod)["metadata"]["annotations"] == {
        names.ANN_JOB_ID: "42", names.ANN_SLURM_NODE: "node1"}
    assert syncer_slim_node(NODES["cordoned with a reason"])["metadata"]["annotations"] == {
        "node.alpha.kubernetes.io/ttl": "0", names.ANN_CORDON_REASON: "disk swap"}


@pytest.mark.parametrize("broken", [
    {"metadata": {"name": "p", "namespace": "n"}},
    {"metadata": {"name": "p", "namespace": "n", "annotations": None}, "spec": None, "status": "junk"},
    {"metadata": {"name": "p", "namespace": "n"}, "spec": ["not", "an", "object"]},
])
def test_a_bare_or_broken_object_trims_without_raising(broken: Obj) -> None:
    for trim in (syncer_slim_pod, syncer_slim_node, without_write_records):
        assert trim(broken)["metadata"]["name"] == "p"
    assert pod_decisions(syncer_slim_pod(broken)) == pod_decisions(
        {k: v for k, v in broken.items() if k == "metadata"})


def test_only_the_labels_and_annotations_read_stay() -> None:
    slim = syncer_slim_pod(PODS["unread labels and annotations"])
    assert slim["metadata"]["labels"] == {}
    assert slim["metadata"]["annotations"] == {names.ANN_JOB_ID: "42", names.ANN_SLURM_NODE: "node1"}
    member = syncer_slim_pod(PODS["LeaderWorkerSet worker"])["metadata"]
    assert member["labels"] == {gang.LWS_NAME: "lws", gang.LWS_GROUP_INDEX: "2", gang.LWS_WORKER_INDEX: "1"}
    assert member["annotations"] == {gang.LWS_SIZE: "4", names.ANN_JOB_ID: "42"}


def test_only_podscheduled_stays_of_the_conditions_with_what_bound_time_reads() -> None:
    assert syncer_slim_pod(PODS["sunk-placed"])["status"]["conditions"] == [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": THEN}]


def test_trimmed_pods_share_their_repeated_strings() -> None:
    """Two Pods decoded apart hold one copy of each key, namespace, node name and timestamp between them."""
    one, two = (syncer_slim_pod(json.loads(json.dumps(fat_pod(name)))) for name in ("a", "b"))
    assert next(iter(one["metadata"])) is next(iter(two["metadata"]))
    for read in (objects.namespace_of, objects.node_name_of, lambda p: p["spec"]["schedulerName"],
                 lambda p: p["status"]["conditions"][0]["lastTransitionTime"], objects.phase_of):
        assert read(one) is read(two), read
