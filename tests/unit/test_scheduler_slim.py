"""sunk-scheduler's Pod store transform (sunk/translate/podstores.py): every reading of a trimmed Pod the
scheduler makes (its job, its validation, its gang, its member facts, its waiting condition) is the one it
makes of the whole Pod; what it writes back from a stored Pod (conditions, tolerations) stays whole."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fat_objects import THEN, fat_pod

from scheduler.binder import _created_at
from scheduler.waiting import current_condition, wait_condition
from sunk.kube.resources import object_key
from sunk.model import names
from sunk.model.types import Obj
from sunk.translate import dra, gang, objects, podjob, resources, stuckpod
from sunk.translate.lock import tolerates_lock
from sunk.translate.objects import LAST_APPLIED, conditions_patch
from sunk.translate.podstores import scheduler_slim_pod

GPU_AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "gpu.nvidia.com/class", "operator": "In", "values": ["H100", "A100"]}]}]}}}


def scheduled(pod: Obj, **spec: Any) -> Obj:
    """``pod``, unbound and waiting, with more of a spec (affinity, init containers, overhead, grace)."""
    pod["spec"]["nodeName"] = ""
    pod["spec"].update(spec)
    pod["status"] = {**pod["status"], "phase": "Pending",
                     "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Waiting",
                                     "message": "job 42 waits for resources", "lastTransitionTime": THEN,
                                     "lastProbeTime": None}]}
    return pod


TABLE = {names.ANN_PARTITION: "gpu", names.ANN_QOS: "high", names.ANN_TIMEOUT: "3600", names.ANN_COMMENT: "c",
         names.ANN_CONSTRAINTS: "ib", names.ANN_EXCLUSIVE: "user", names.ANN_PRIORITY: "7",
         names.ANN_EXCLUDED_NODES: "node[1-2]", names.ANN_REQUIRED_NODES: "node3",
         names.ANN_CURRENT_WORKING_DIR: "/home/u"}
SIDECAR = {"name": "proxy", "image": "proxy:1", "restartPolicy": "Always", "env": [{"name": "A", "value": "b"}],
           "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}
INIT = {"name": "fetch", "image": "fetch:1", "resources": {"requests": {"cpu": "64", "memory": "512Gi"}}}

PODS: dict[str, Obj] = {
    "waiting, the seeds' annotations": scheduled(fat_pod(annotations=TABLE)),
    "waiting, GPU class affinity": scheduled(fat_pod(), affinity=GPU_AFFINITY),
    "waiting, a sidecar and an init container": scheduled(fat_pod(), initContainers=[SIDECAR, INIT],
                                                         overhead={"cpu": "250m", "memory": "120Mi"}),
    "waiting, its grace too long": scheduled(fat_pod(), terminationGracePeriodSeconds=100_000),
    "waiting, a bad annotation": scheduled(fat_pod(annotations={names.ANN_PRIORITY: "high"})),
    "bound, placed": fat_pod(annotations={names.ANN_JOB_ID: "42", names.ANN_SLURM_NODE: "node1"}),
    "bound, tolerates the lock": fat_pod(annotations={names.ANN_JOB_ID: "42"},
                                         tolerations=[{"key": names.LOCK_KEY, "operator": "Exists"}]),
    "terminating": fat_pod(deleting=True, annotations={names.ANN_JOB_ID: "42"}),
    "finished": fat_pod(phase="Succeeded", annotations={names.ANN_JOB_ID: "42"}),
    "gang member of a Job": scheduled(fat_pod(owner_job=True, labels={"batch.kubernetes.io/job-name": "train",
                                                                      gang.JOB_COMPLETION_INDEX: "3"})),
    "waiting, GPUs through a claim from a template": scheduled(
        fat_pod(), resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "two-gpus"},
                                   {"name": "shared", "resourceClaimName": "team-gpus"}]),
    "LeaderWorkerSet worker": scheduled(fat_pod(labels={gang.LWS_NAME: "lws", gang.LWS_GROUP_INDEX: "0",
                                                        gang.LWS_WORKER_INDEX: "2"},
                                                annotations={gang.LWS_SIZE: "4", **TABLE})),
}


PODS["waiting, GPUs through a claim from a template"]["status"]["resourceClaimStatuses"] = [
    {"name": "gpus", "resourceClaimName": "p-gpus-x7k2q"}]


def job_or_problem(pod: Obj) -> Any:
    try:
        return podjob.pod_to_job(pod, identity=podjob.Identity(1001, 1001, "acct"), script="#!/bin/bash\n",
                                 kill_wait_seconds=30.0, scheduler="sunk-scheduler",
                                 gpu_types={"H100": "h100"})
    except ValueError as exc:
        return str(exc)


def readings(pod: Obj) -> tuple[Any, ...]:
    """What the scheduler reads of one of its Pods (scheduler/reconciler.py's member facts and problems,
    its job, its gang, the binder, the waiting condition, the outage notice's filter)."""
    meta = pod["metadata"]
    found = gang.gang_of(pod)
    return (
        object_key(pod), meta["uid"], meta["namespace"], meta["name"], objects.node_name_of(pod),
        {k: v for k, v in objects.annotations_of(pod).items() if k != LAST_APPLIED},  # (kubectl's: read by nobody)
        objects.labels_of(pod),
        objects.is_deleting(pod), objects.is_terminal(pod), objects.phase_of(pod), stuckpod.grace_ends_at(pod),
        [str(p) for p in podjob.validate_pod(pod, 30.0)], job_or_problem(pod), podjob.job_name(pod),
        podjob.grace_seconds(pod), resources.pod_requests(pod),
        found, gang.owner_of(pod), gang.member_order(pod), gang.disagreements([pod, PODS["bound, placed"]]),
        gang.expected(found, [pod]) if found is not None else None,
        tolerates_lock(pod), tolerates_lock(pod, "NoExecute"), current_condition(pod), _created_at(pod),
        objects.controller_ref(pod, "Job", "batch"), dra.pod_claims(pod),
    )


@pytest.mark.parametrize("case", sorted(PODS))
def test_a_trimmed_pod_reads_as_the_whole_one(case: str) -> None:
    pod = PODS[case]
    assert readings(scheduler_slim_pod(pod)) == readings(pod)


WRITES = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no node has 9 GPUs"},
          wait_condition(42, "gpu", "Resources").as_condition(),
          wait_condition(42, "gpu", "Priority").as_condition(), {"type": "PodScheduled", "status": "True"}]


@pytest.mark.parametrize("case", sorted(PODS))
def test_what_is_written_back_from_a_stored_pod_is_what_the_whole_pod_gives(case: str) -> None:
    """``record_job`` merge-patches the whole tolerations list it read, guarded by the stored resourceVersion (one
    cut short would be written so); ``set_pod_conditions`` patches by type from the entries of the types it writes,
    every one of which is kept whole, and the kubelet's are not kept at all."""
    pod, slim = PODS[case], scheduler_slim_pod(PODS[case])
    assert slim["status"]["conditions"] == [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    for write in WRITES:
        assert conditions_patch(slim["status"]["conditions"], [write], now=THEN) == conditions_patch(
            pod["status"]["conditions"], [write], now=THEN)
    assert slim["spec"]["tolerations"] == pod["spec"]["tolerations"]
    assert {k: slim["metadata"][k] for k in ("name", "namespace", "uid", "resourceVersion")} == {
        k: pod["metadata"][k] for k in ("name", "namespace", "uid", "resourceVersion")}
    assert (slim["apiVersion"], slim["kind"]) == ("v1", "Pod")


def test_what_goes_is_what_the_scheduler_never_reads() -> None:
    pod = PODS["waiting, a sidecar and an init container"]
    slim = scheduler_slim_pod(pod)
    assert "managedFields" not in slim["metadata"] and LAST_APPLIED not in slim["metadata"]["annotations"]
    # Three containers of 8 CPUs, 64Gi and 8 GPUs; a sidecar of 2 CPUs and 1Gi; an init step of 64 CPUs and 512Gi
    # (with the sidecar: 66 and 513Gi, more than the 26 and 193Gi that run after it); overhead 250m and 120Mi.
    assert slim["spec"]["containers"] == [{"name": "c0", "resources": {"requests": {
        "cpu": "66.250", "memory": str(513 * 2**30 + 120 * 2**20), "nvidia.com/gpu": "24"}}}]
    assert resources.pod_requests(slim) == resources.pod_requests(pod)
    assert not {"initContainers", "overhead", "volumes"} & set(slim["spec"])
    assert "containerStatuses" not in slim["status"]
    kept = {k: v for k, v in pod["metadata"].items() if k != "managedFields"}
    kept["annotations"] = {k: v for k, v in kept["annotations"].items() if k != LAST_APPLIED}
    assert slim["metadata"] == kept
    assert len(json.dumps(slim)) < len(json.dumps(pod)) / 5
    assert LAST_APPLIED in pod["metadata"]["annotations"]  # (the informer's object is not changed in place)


@pytest.mark.parametrize("broken", [
    {"metadata": {"name": "p", "namespace": "n"}},
    {"metadata": {"name": "p", "namespace": "n", "annotations": None}, "spec": None, "status": "junk"},
    {"metadata": {"name": "p", "namespace": "n"}, "spec": {"containers": ["junk", None], "initContainers": 3}},
])
def test_a_bare_or_broken_pod_trims_to_itself(broken: Obj) -> None:
    assert scheduler_slim_pod(broken) == broken


def test_a_pod_whose_quantities_do_not_parse_keeps_its_containers_for_the_reader_to_refuse() -> None:
    pod = scheduled(fat_pod(), initContainers=[{**INIT, "resources": {"requests": {"cpu": "lots"}}}])
    slim = scheduler_slim_pod(pod)
    assert [c["name"] for c in slim["spec"]["containers"]] == ["c0", "c1", "c2"]
    assert slim["spec"]["initContainers"] == [{"name": "fetch", "resources": {"requests": {"cpu": "lots"}}}]
    assert job_or_problem(slim) == job_or_problem(pod) and "lots" in str(job_or_problem(pod))


def test_a_pod_whose_requests_add_up_past_a_quantitys_range_keeps_its_containers() -> None:
    """Two containers of 7Ei each are each a valid quantity; their sum is not one. Folded, the stored Pod would be
    refused for a number its author never wrote; kept, every reading is the whole Pod's."""
    pod = scheduled(fat_pod())
    for container in pod["spec"]["containers"][:2]:
        container["resources"] = {"requests": {"memory": "7Ei"}}
    slim = scheduler_slim_pod(pod)
    assert len(slim["spec"]["containers"]) == 3
    assert job_or_problem(slim) == job_or_problem(pod) and readings(slim) == readings(pod)


@pytest.mark.parametrize("quantity", ["1", "250m", "0.5", "1e3", "1.5Gi", "100Ki", "8E", "7n", "0"])
def test_each_folded_quantity_reads_back_as_the_same_value(quantity: str) -> None:
    pod = scheduled(fat_pod(), overhead={"example.com/thing": quantity})
    assert resources.pod_requests(scheduler_slim_pod(pod)) == resources.pod_requests(pod)
