"""The dev cluster's real kubelet Node (containerd, runc, bridge CNI): Pods placed there by Slurm
really run, and its slurmd really runs in a container (``sunk.dev.realnode``)."""

from __future__ import annotations

import time
import uuid

import pytest
import requests
from slurmtools import wait_for
from test_scheduler import SCHEDULER, end_pods, get_pod, gone, namespace, placed, scheduler  # noqa: F401 (fixtures)

from sunk import names
from sunk.dev import realnode
from sunk.kube import client as kc
from sunk.kube.resources import PODS

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
    """Slurm then stops hearing from the node (SlurmdTimeout); `up` makes the Pod again and it returns.

    First the node's jobs end (slurmd gone mid-epilog would leave a job COMPLETING until the node is
    set DOWN: the Syncer's route for a deleted slurmd Pod, not this test's subject)."""
    end_pods(kube_api, dev_cluster, namespace)
    pod = realnode.SLURM_NODE
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
