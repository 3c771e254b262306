"""Issue 38: GPUs through ResourceClaims, on the real Node (real slurmd, kubelet, containerd and the upstream DRA
test driver), with sunk-scheduler as deployed (the chart's RBAC for ``scheduler.draDeviceMapping``).

Slurm stays the one accountant of realnode1's four GPUs: a batch job and Pods share the node at once, each on the
GPUs Slurm gave it; a Pod's claim names exactly the devices of the GRES indices its placeholder's record names
(checked against the kubelet's own record of what the driver prepared), a Pod that does not fit waits in Slurm and
then gets the device freed, and a Pod deleted releases its claim and its job.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kube_testns import create_namespace, purge_namespace
from rbac_harness import as_service_account, assert_never_forbidden
from slurmtools import slurm_job, state, wait_for
from syncer_harness import free_port
from test_dra_devices import _kubelet_prepared_devices
from test_scheduler import SCHEDULER, events_for, get_pod, job_id_of, scheduler_process, serving

from sunk.kube import client as kc
from sunk.kube.resources import PODS, RESOURCECLAIMS, Resource
from sunk.model import names
from sunk.model.slurm import JobRequest
from sunk.slurm import connect
from sunk.translate import dra
from sunk_dev import realnode

pytestmark = pytest.mark.skipif(not realnode.enabled(), reason="SUNK_DEV_REAL_NODE=0: no real kubelet Node")

TEMPLATES = Resource("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate")
MAPPING_FLAG = f"driver={realnode.DRA_DRIVER},device-class={realnode.DEVICE_CLASS},name={realnode.DEVICE_NAME}"
MAPPING = dra.DeviceMapping.parse(MAPPING_FLAG)


@pytest.fixture(scope="module")
def namespace(kube_api):
    ns = create_namespace(kube_api)
    yield ns
    purge_namespace(kube_api, ns)


@pytest.fixture(scope="module")
def scheduler(kube_api, dev_cluster, namespace, tmp_path_factory):
    """sunk-scheduler with --dra-device-mapping as the chart passes it, as its ServiceAccount with the chart's RBAC
    for scheduler.draDeviceMapping: every claim write and read runs as it, and a 403 fails the module."""
    tmp = tmp_path_factory.mktemp("dra-scheduler")
    lease = f"sunk-scheduler-dra-{uuid.uuid4().hex[:6]}"
    account, kubeconfig = as_service_account(kube_api, dev_cluster, "scheduler-rbac.yaml", tmp, leases=[lease],
                                             values={"scheduler": {"draDeviceMapping": MAPPING_FLAG}})
    ports = {"hooks": free_port(), "metrics": free_port(), "probes": free_port()}
    proc = scheduler_process(dev_cluster, namespace, tmp, name="sunk-scheduler-dra", ports=ports, extra_args=(
        f"--kubeconfig={kubeconfig}", f"--leader-election-namespace={account['namespace']}",
        f"--leader-election-id={lease}", f"--dra-device-mapping={MAPPING_FLAG}"))
    with serving(kube_api, dev_cluster, proc, namespace, purge=False):
        yield proc
    assert_never_forbidden(proc.log)


@pytest.fixture
def slurm(slurm_rest):
    client = connect("rest", url=slurm_rest.url, token=slurm_rest.token, user=slurm_rest.user)
    try:
        yield client
    finally:
        client.close()


def claim(name: str, count: int) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": realnode.DEVICE_CLASS, "count": count}}]}}}


def template(name: str, count: int) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": claim(name, count)["spec"]}}


def gpu_pod(name: str, source: dict[str, str]) -> dict[str, Any]:
    """A Pod of sunk-scheduler on the real Node's partition, its GPUs from one claim (named, or a template's)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {names.ANN_PARTITION: realnode.SLURM_PARTITION}},
            "spec": {"schedulerName": SCHEDULER, "terminationGracePeriodSeconds": 2,
                     "resourceClaims": [{"name": "gpus", **source}],
                     "containers": [{"name": "main", "image": realnode.BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                                     "command": ["/bin/sleep", "3600"],
                                     "resources": {"requests": {"cpu": "1", "memory": "64Mi"},
                                                   "claims": [{"name": "gpus"}]}}]}}


def devices_of(claim_obj: dict[str, Any]) -> list[str]:
    results = (((claim_obj.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or ()
    return sorted(r["device"] for r in results)


def names_of(indices: tuple[int, ...] | list[int]) -> list[str]:
    return sorted(realnode.DEVICE_NAME.format(index=i) for i in indices)


def claim_of(api, namespace: str, pod_name: str) -> dict[str, Any]:
    """The Pod's one claim (a template's, once kube-controller-manager made it)."""
    pod = get_pod(api, namespace, pod_name)
    (entry,) = dra.pod_claims(pod)
    assert entry.claim, f"{pod_name}'s claim is not made yet"
    return kc.get(api, RESOURCECLAIMS, entry.claim, namespace)


def running(api, namespace: str, name: str) -> bool:
    return ((get_pod(api, namespace, name) or {}).get("status") or {}).get("phase") == "Running"


def batch_job(slurm, gpus: int, tag: str) -> int:
    """A Slurm batch job on realnode1 holding ``gpus`` GPUs; it notes its CUDA_VISIBLE_DEVICES in its Comment."""
    script = "#!/bin/sh\nscontrol update JobId=$SLURM_JOB_ID Comment=\"cuda=$CUDA_VISIBLE_DEVICES\"\nsleep 300\n"
    return slurm.submit_job(JobRequest(
        name=f"dra-batch-{tag}", script=script, partition=realnode.SLURM_PARTITION, gpus_per_node=gpus,
        gpu_type=realnode.GPU_TYPE, required_nodes=(realnode.SLURM_NODE,), memory_per_node=64, time_limit=10))


def held_indices(slurm, job_id: int) -> list[int]:
    (allocation,) = slurm.get_job_allocations(job_id).allocations
    assert allocation.node == realnode.SLURM_NODE, allocation
    return list(dra.granted_indices(allocation.gres, MAPPING))


def test_a_batch_job_and_pods_share_the_node_each_on_the_gpus_slurm_gave_it(kube_api, dev_cluster, namespace,
                                                                             scheduler, slurm):
    tag = uuid.uuid4().hex[:6]
    batch = batch_job(slurm, 1, tag)
    try:
        job = wait_for(lambda: (j := slurm.get_job(batch)).state == "RUNNING" and j.comment and j, 60,
                       f"batch job {batch} RUNNING with its CUDA_VISIBLE_DEVICES noted")
        (freed,) = held_indices(slurm, batch)
        assert job.comment == f"cuda={freed}"

        # A Pod claiming 3: the rest of the node. Its claim names exactly its placeholder's GRES indices.
        kc.create(kube_api, RESOURCECLAIMS, claim(f"three-{tag}", 3), namespace)
        kc.create(kube_api, PODS, gpu_pod(f"three-{tag}", {"resourceClaimName": f"three-{tag}"}), namespace)
        three_job = job_id_of(kube_api, dev_cluster, namespace, f"three-{tag}")
        wait_for(lambda: running(kube_api, namespace, f"three-{tag}"), 90, "the 3-GPU Pod Running on the real Node")
        three = held_indices(slurm, three_job)
        assert len(three) == 3 and freed not in three, (three, freed)
        allocated = claim_of(kube_api, namespace, f"three-{tag}")
        assert devices_of(allocated) == names_of(three)
        assert dra.allocated_on(allocated) == realnode.NODE_NAME
        assert "resource.kubernetes.io/delete-protection" in allocated["metadata"]["finalizers"]
        assert _kubelet_prepared_devices(dev_cluster.home, allocated["metadata"]["uid"]) == names_of(three)
        assert slurm.get_job(batch).state == "RUNNING"  # both at once

        # A Pod claiming 1, from a template: Slurm has no GPU left on the node, so it waits there...
        kc.create(kube_api, TEMPLATES, template(f"one-{tag}", 1), namespace)
        kc.create(kube_api, PODS, gpu_pod(f"one-{tag}", {"resourceClaimTemplateName": f"one-{tag}"}), namespace)
        one_job = job_id_of(kube_api, dev_cluster, namespace, f"one-{tag}")
        wait_for(lambda: state(slurm_job(dev_cluster, one_job)) == "PENDING"
                 and slurm_job(dev_cluster, one_job).get("state_reason") == "Resources", 30,
                 "the 1-GPU Pod's job pending on Resources")
        assert not (get_pod(kube_api, namespace, f"one-{tag}")["spec"].get("nodeName"))
        # ... until the batch job ends: it gets exactly the GPU the batch job held.
        slurm.cancel_job(batch)
        wait_for(lambda: running(kube_api, namespace, f"one-{tag}"), 90, "the 1-GPU Pod Running once the GPU is free")
        assert held_indices(slurm, one_job) == [freed]
        one = claim_of(kube_api, namespace, f"one-{tag}")
        assert devices_of(one) == names_of([freed])
        assert _kubelet_prepared_devices(dev_cluster.home, one["metadata"]["uid"]) == names_of([freed])

        # A Pod deleted: its claim is released (deallocated by kube-controller-manager: the finalizer sunk wrote
        # tells it the allocation is a scheduler's) and its Slurm job ends.
        kc.delete(kube_api, PODS, f"three-{tag}", namespace)
        wait_for(lambda: not (kc.get(kube_api, RESOURCECLAIMS, f"three-{tag}", namespace).get("status") or {}).get(
            "allocation"), 60, "the 3-GPU claim deallocated once its Pod is gone")
        wait_for(lambda: state(slurm_job(dev_cluster, three_job)) in ("CANCELLED", "COMPLETED", None), 60,
                 "the 3-GPU Pod's job ended")
        assert not [e for e in events_for(kube_api, namespace, f"three-{tag}") if e["type"] == "Warning"]
    finally:
        slurm.cancel_job(batch)


def test_a_claim_of_a_class_slurm_does_not_fill_is_refused_on_the_pod(kube_api, dev_cluster, namespace, scheduler):
    tag = uuid.uuid4().hex[:6]
    other = claim(f"other-{tag}", 1)
    other["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "not-slurms.example.com"
    kc.create(kube_api, RESOURCECLAIMS, other, namespace)
    kc.create(kube_api, PODS, gpu_pod(f"other-{tag}", {"resourceClaimName": f"other-{tag}"}), namespace)
    event = wait_for(lambda: next((e for e in events_for(kube_api, namespace, f"other-{tag}")
                                   if e["reason"] == "FailedValidation"), None), 30, "a FailedValidation Event")
    assert "DeviceClass 'not-slurms.example.com' is not one Slurm allocates" in event["message"]
    conditions = get_pod(kube_api, namespace, f"other-{tag}")["status"].get("conditions") or []
    assert any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conditions)
