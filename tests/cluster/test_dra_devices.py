"""Issue 38, the dev cluster's half: both sides name the same fake GPUs on the real Node.

The upstream DRA test driver (built from the Kubernetes module, ``sunk_dev.kubebuild``) runs as the real
kubelet's plugin and publishes four devices for the real Node; realnode1's slurmd has four GPUs whose gres.conf
``File=`` devices stand in for /dev/nvidiaN. A Slurm job holding two of them is what a Pod's placeholder job
is: its record names their indices, the job sees them as ``CUDA_VISIBLE_DEVICES``, and ``sunk.translate.dra``
turns that record into the allocation of a ResourceClaim, naming the driver's devices of the same indices.
Written to the claim, reserved for a Pod bound to the real Node, the real kubelet and the driver prepare it and the
Pod runs: the allocation's shape is the one the kubelet takes, from the job record alone. (The device names
follow from the mapping's rule, the driver's own naming; what is checked independently is that the record's
indices are the job's CUDA_VISIBLE_DEVICES, and that the kubelet prepared the claim as written.)
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from kube_testns import purge_namespace, wait_default_service_account
from slurmtools import wait_for

from scheduler.claims import DELETE_PROTECTION
from sunk.kube import client as kc
from sunk.kube.resources import NAMESPACES, PODS, Resource
from sunk.model.slurm import JobRequest
from sunk.slurm import connect
from sunk.translate import dra
from sunk_dev import realnode

pytestmark = pytest.mark.skipif(not realnode.enabled(), reason="SUNK_DEV_REAL_NODE=0: no real kubelet Node")

SLICES = Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", namespaced=False)
CLAIMS = Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim")
CLASSES = Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", namespaced=False)
MAPPING = dra.DeviceMapping(realnode.DRA_DRIVER, frozenset({realnode.DEVICE_CLASS}),
                            name_template=realnode.DEVICE_NAME)


@pytest.fixture
def namespace(kube_api):
    name = f"dra-{uuid.uuid4().hex[:6]}"
    kc.create(kube_api, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_default_service_account(kube_api, name)
    try:
        yield name
    finally:
        purge_namespace(kube_api, name)


@pytest.fixture
def slurm(slurm_rest):
    client = connect("rest", url=slurm_rest.url, token=slurm_rest.token, user=slurm_rest.user)
    try:
        yield client
    finally:
        client.close()


def test_the_driver_publishes_the_real_nodes_devices_and_slurm_has_as_many_gpus(kube_api, slurm):
    slices = kc.list_objects(kube_api, SLICES)
    devices = dra.node_devices(slices, realnode.NODE_NAME, realnode.DRA_DRIVER)
    names = [realnode.DEVICE_NAME.format(index=i) for i in range(realnode.DRA_DEVICES)]
    assert sorted(d.name for d in devices) == names
    assert kc.get(kube_api, CLASSES, realnode.DEVICE_CLASS)["spec"]["selectors"]
    (node,) = [n for n in slurm.list_nodes().items if n.name == realnode.SLURM_NODE]
    assert f"gpu:{realnode.GPU_TYPE}:{realnode.DRA_DEVICES}" in node.gres, node.gres


def _claim(name: str, count: int) -> dict[str, Any]:
    """With the finalizer a scheduler writes before it allocates (scheduler/claims.py): kube-controller-manager then
    deallocates the claim once its last consumer is gone. Without it the allocation stays, and holds the devices."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "finalizers": [DELETE_PROTECTION]},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": realnode.DEVICE_CLASS, "count": count}}]}}}


def _pod(name: str, claim: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "terminationGracePeriodSeconds": 1, "nodeSelector": {realnode.NODE_LABEL: "true"},
        "resourceClaims": [{"name": "gpus", "resourceClaimName": claim}],
        "containers": [{"name": "main", "image": realnode.BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                        "command": ["/bin/sleep", "3600"], "resources": {"claims": [{"name": "gpus"}]}}]}}


def _device_names(state: Any) -> list[str]:
    if isinstance(state, dict):
        return [str(v) for k, v in state.items() if k == "DeviceName"] + [
            name for k, v in state.items() if k != "DeviceName" for name in _device_names(v)]
    if isinstance(state, list):
        return [name for item in state for name in _device_names(item)]
    return []


def _kubelet_prepared_devices(home: Path, claim_uid: str) -> list[str]:
    """The devices the real kubelet's DRA manager holds prepared for a claim (its checkpoint file)."""
    checkpoint = json.loads((realnode.Paths(home).kubelet_root / "dra_manager_state").read_text())
    claims = json.loads(checkpoint["Data"]).get("ClaimInfoStateList") or []
    return sorted(name for c in claims if c.get("ClaimUID") == claim_uid
                  for name in _device_names(c.get("DriverState")))


def test_a_claim_gets_the_devices_of_the_indices_slurm_gave_a_job_and_the_kubelet_runs_its_pod(
        kube_api, dev_cluster, slurm, namespace):
    script = ("#!/bin/sh\nscontrol update JobId=$SLURM_JOB_ID Comment=\"cuda=$CUDA_VISIBLE_DEVICES\"\n"
              "sleep 120\n")
    job_id = slurm.submit_job(JobRequest(
        name=f"dra-{namespace}", script=script, partition=realnode.SLURM_PARTITION, gpus_per_node=2,
        gpu_type=realnode.GPU_TYPE, required_nodes=(realnode.SLURM_NODE,), memory_per_node=64, time_limit=5))
    try:
        job = wait_for(lambda: (j := slurm.get_job(job_id)).state == "RUNNING" and j.comment and j, 60,
                       f"job {job_id} RUNNING on {realnode.SLURM_NODE} with its CUDA_VISIBLE_DEVICES noted")
        (allocation,) = job.allocations
        indices = dra.granted_indices(allocation.gres, MAPPING)
        assert len(indices) == 2 and allocation.node == realnode.SLURM_NODE, allocation
        # (no device cgroup here: the job sees the node's own indices, the ones its record names)
        assert job.comment == "cuda=" + ",".join(map(str, indices)), job.comment

        claim = kc.create(kube_api, CLAIMS, _claim("gpus", 2), namespace)
        pod = kc.create(kube_api, PODS, _pod("uses-gpus", "gpus"), namespace)
        requests = dra.claim_requests(claim, MAPPING)
        devices = dra.node_devices(kc.list_objects(kube_api, SLICES), realnode.NODE_NAME, realnode.DRA_DRIVER)
        results = dra.allocation_results(requests, allocation.gres, devices, MAPPING, realnode.NODE_NAME)
        assert isinstance(results, dict), results
        assert [r["device"] for r in results["gpus"]] == [realnode.DEVICE_NAME.format(index=i) for i in indices]
        claim["status"] = dra.claim_status(results["gpus"], realnode.NODE_NAME, pod)
        written = kc.request(kube_api, "PUT", CLAIMS.path(namespace, "gpus", "status"), body=claim)
        assert dra.same_allocation(written, results["gpus"], realnode.NODE_NAME)
        kc.request(kube_api, "POST", PODS.path(namespace, "uses-gpus", "binding"), body={
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "uses-gpus", "uid": pod["metadata"]["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": realnode.NODE_NAME}})

        def running() -> bool:
            status = kc.get(kube_api, PODS, "uses-gpus", namespace).get("status") or {}
            return status.get("phase") == "Running"

        try:
            wait_for(running, 90, "the Pod Running on the real Node with its claim prepared by the driver", interval=1)
        except AssertionError:
            events = kc.list_objects(kube_api, Resource("", "v1", "events", "Event"), namespace)
            raise AssertionError([(e["reason"], e["message"]) for e in events]) from None
        # The kubelet had the driver prepare exactly those devices for the claim (its DRA checkpoint).
        prepared = _kubelet_prepared_devices(dev_cluster.home, claim["metadata"]["uid"])
        assert prepared == sorted(realnode.DEVICE_NAME.format(index=i) for i in indices), prepared

        kc.delete(kube_api, PODS, "uses-gpus", namespace)
        wait_for(lambda: not (kc.get(kube_api, CLAIMS, "gpus", namespace).get("status") or {}).get("allocation"),
                 60, "the claim no longer reserved nor allocated once its Pod is gone", interval=1)
        assert DELETE_PROTECTION not in (kc.get(kube_api, CLAIMS, "gpus", namespace)["metadata"].get("finalizers")
                                         or ())
    finally:
        slurm.cancel_job(job_id)
