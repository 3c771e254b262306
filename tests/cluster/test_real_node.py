"""The dev cluster's real kubelet Node (containerd, runc, bridge CNI): Pods placed there by Slurm
really run, and its slurmd really runs in a container (``sunk_dev.realnode``)."""

from __future__ import annotations

import time
import uuid

import pytest
import requests
from kube_testns import delete_jobs
from slurmtools import slurm_job, state, wait_for
from test_scheduler import (  # noqa: F401 (fixtures)
    SCHEDULER,
    end_pods,
    events_for,
    get_pod,
    gone,
    namespace,
    placed,
    scheduler,
)

from sunk.kube import client as kc
from sunk.kube.resources import JOBS, PODS
from sunk.model import names
from sunk_dev import realnode

pytestmark = pytest.mark.skipif(not realnode.enabled(), reason="SUNK_DEV_REAL_NODE=0: no real kubelet Node")


def web_pod(name: str, grace: int = 5, command: list[str] | None = None) -> dict:
    """busybox httpd, placed by Slurm on the real Node's partition."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": {names.ANN_PARTITION: realnode.SLURM_PARTITION}},
        "spec": {"schedulerName": SCHEDULER, "terminationGracePeriodSeconds": grace,
                 "containers": [{"name": "web", "image": realnode.BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                                 "command": command or ["/bin/httpd", "-f", "-p", "8080", "-h", "/www"],
                                 "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}]},
    }


def running_ip(api, namespace: str, name: str) -> str | None:
    status = get_pod(api, namespace, name).get("status") or {}
    ready = any(c.get("name") == "web" and (c.get("state") or {}).get("running")
                for c in status.get("containerStatuses") or [])
    return status.get("podIP") if ready else None


def test_a_pod_slurm_places_on_the_real_node_runs_a_container_that_answers(kube_api, dev_cluster, namespace,
                                                                            scheduler):
    name = f"web-{uuid.uuid4().hex[:6]}"
    kc.create(kube_api, PODS, web_pod(name), namespace)
    job_id, node = placed(kube_api, dev_cluster, namespace, name, timeout=60)
    assert node == realnode.NODE_NAME, f"job {job_id} placed on {node}"
    ip = wait_for(lambda: running_ip(kube_api, namespace, name), 60, "the container to run")
    answer = wait_for(lambda: _get(f"http://{ip}:8080/"), 20, "the container to answer on its Pod IP")
    assert "real kubelet Node" in answer


def test_deleting_the_pod_terminates_its_container_within_its_grace_period(kube_api, dev_cluster, namespace,
                                                                          scheduler):
    """A container that ignores SIGTERM is killed when its grace period ends: it is honoured, not skipped."""
    name = f"stubborn-{uuid.uuid4().hex[:6]}"
    kc.create(kube_api, PODS, web_pod(name, grace=4, command=["/bin/sh", "-c", "trap '' TERM; "
                                                                               "while true; do sleep 1; done"]),
              namespace)
    placed(kube_api, dev_cluster, namespace, name, timeout=60)
    wait_for(lambda: running_ip(kube_api, namespace, name), 60, "the container to run")
    began = time.monotonic()
    kc.delete(kube_api, PODS, name, namespace)
    wait_for(lambda: gone(kube_api, namespace, name), 60, "the Pod to be gone")
    took = time.monotonic() - began
    assert 4 <= took < 20, f"the Pod went {took:.1f}s after its deletion with a 4 s grace period"


def test_deleting_the_real_nodes_slurmd_pod_stops_slurmd(kube_api, dev_cluster, namespace, scheduler):
    """Slurm then stops hearing from the node (SlurmdTimeout); its NodeSet makes the Pod again and it returns.
    The operator is stopped meanwhile: it would make the Pod again at once.

    First the node's jobs end (slurmd gone mid-epilog would leave a job COMPLETING until the node is
    set DOWN: the Syncer's route for a deleted slurmd Pod, not this test's subject)."""
    end_pods(kube_api, dev_cluster, namespace)
    pod = realnode.SLURM_NODE
    dev_cluster.stop_component("sunk-operator")
    try:
        kc.delete(kube_api, PODS, pod, "slurm")
        wait_for(lambda: gone(kube_api, "slurm", pod), 30, "the slurmd Pod to be gone")
        wait_for(lambda: "*" in _sinfo_state(dev_cluster), 90, f"Slurm to find {pod} not responding")
    finally:
        dev_cluster.up()
    assert "*" not in _sinfo_state(dev_cluster)


def _sinfo_state(dev_cluster) -> str:
    return dev_cluster.slurm("sinfo", "-h", "-n", realnode.SLURM_NODE, "-o", "%t", check=False).stdout.strip()


def _get(url: str) -> str | None:
    try:
        return requests.get(url, timeout=2).text
    except requests.RequestException:
        return None


def _finished_at(api, namespace: str, name: str, phases=("Succeeded", "Failed")) -> float | None:
    pod = get_pod(api, namespace, name)
    return time.monotonic() if pod and (pod.get("status") or {}).get("phase") in phases else None


def _released(dev_cluster, job_id: int) -> bool:
    job = slurm_job(dev_cluster, job_id)
    return not job or (state(job) not in ("RUNNING", "PENDING") and "COMPLETING" not in job.get("job_state", []))


def test_pods_that_succeed_free_their_slurm_node_at_once(kube_api, dev_cluster, namespace, scheduler):
    """Issue 32: a finished Pod holds nothing. A Job of 2 Pods (each a Pod of its own: gang none) that exit 0 on the
    real kubelet Node: each Pod's Slurm job ends within 5 s of its Succeeding, realnode1 is idle once both have,
    and both Pods are kept (the Job counts them), each with an Event naming its job."""
    template = web_pod("x", command=["/bin/sh", "-c", "sleep 2"])
    template["metadata"]["annotations"][names.ANN_GANG] = "none"
    template["spec"]["restartPolicy"] = "Never"
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "two"},
           "spec": {"parallelism": 2, "completions": 2, "backoffLimit": 0,
                    "template": {"metadata": {"annotations": template["metadata"]["annotations"]},
                                 "spec": template["spec"]}}}
    kc.create(kube_api, JOBS, job, namespace)
    try:
        pods = wait_for(lambda: (p := [x["metadata"]["name"] for x in kc.list_objects(
            kube_api, PODS, namespace, label_selector="batch.kubernetes.io/job-name=two")]) and len(p) == 2 and p,
            30, "the Job's 2 Pods")
        jobs = {name: placed(kube_api, dev_cluster, namespace, name, timeout=60)[0] for name in pods}
        for name, job_id in jobs.items():
            finished = wait_for(lambda n=name: _finished_at(kube_api, namespace, n), 60, f"{name} to succeed",
                                interval=0.1)
            assert get_pod(kube_api, namespace, name)["status"]["phase"] == "Succeeded"
            wait_for(lambda j=job_id: _released(dev_cluster, j), 5, f"job {job_id} to end", interval=0.1)
            print(f"{name}: job {job_id} ended {time.monotonic() - finished:.1f}s after the Pod succeeded")
        wait_for(lambda: dev_cluster.slurm("sinfo", "-h", "-n", realnode.SLURM_NODE, "-o", "%T").stdout.strip()
                 == "idle", 5, f"{realnode.SLURM_NODE} to be idle", interval=0.1)
        for name, job_id in jobs.items():
            pod = get_pod(kube_api, namespace, name)
            assert pod is not None and not pod["metadata"].get("deletionTimestamp"), f"{name} was deleted"
            assert any(e["reason"] == "SlurmJobReleased" and f"job {job_id}" in e["message"]
                       for e in events_for(kube_api, namespace, name)), events_for(kube_api, namespace, name)
    finally:
        delete_jobs(kube_api, namespace)


def test_a_pod_its_kubelet_rejects_releases_its_job_at_once(kube_api, dev_cluster, namespace, scheduler):
    """Slurm's realnode1 has 4 CPUs, the real Node 2: a Pod asking 3 is placed by Slurm and refused by the kubelet
    (OutOfcpu, the risk the seeds name). It Failed: its job ends within 5 s, with an Event naming it."""
    name = f"big-{uuid.uuid4().hex[:6]}"
    pod = web_pod(name, command=["/bin/sh", "-c", "sleep 60"])
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "3"
    pod["spec"]["restartPolicy"] = "Never"
    kc.create(kube_api, PODS, pod, namespace)
    job_id, node = placed(kube_api, dev_cluster, namespace, name, timeout=60)
    assert node == realnode.NODE_NAME
    failed = wait_for(lambda: _finished_at(kube_api, namespace, name), 60, "the kubelet to reject the Pod",
                      interval=0.1)
    status = get_pod(kube_api, namespace, name)["status"]
    assert status["phase"] == "Failed" and status.get("reason") == "OutOfcpu", status
    wait_for(lambda: _released(dev_cluster, job_id), 5, f"job {job_id} to end", interval=0.1)
    print(f"job {job_id} ended {time.monotonic() - failed:.1f}s after the kubelet rejected the Pod")
    assert any(e["reason"] == "SlurmJobReleased" and f"job {job_id}" in e["message"]
               for e in events_for(kube_api, namespace, name))
