"""The dev cluster is real: Slurm through slurmrestd, Kubernetes through the apiserver."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import requests
from kube_testns import create_namespace, purge_namespace
from kubernetes import client

from sunk.kube import client as kc
from sunk.kube.resources import NODESLICES, PODS
from sunk.model import names
from sunk_dev import kubelet, realnode, slurmconf
from sunk_dev.cluster import SLURM_NAMESPACE, slurmd_pod


def _rest(slurm_rest, method, path, body=None):
    return requests.request(
        method, f"{slurm_rest.url}/slurm/v0.0.42/{path}", json=body, timeout=30,
        headers={"X-SLURM-USER-NAME": slurm_rest.user, "X-SLURM-USER-TOKEN": slurm_rest.token},
    )


def _scontrol_job(dev_cluster, job_id: int) -> dict[str, str]:
    out = dev_cluster.slurm("scontrol", "-o", "show", "job", str(job_id)).stdout
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_every_component_is_healthy(dev_cluster):
    rows = dev_cluster.status()
    assert {r.name for r in rows} >= {"munged", "slurmctld", "slurmrestd", "etcd", "kube-apiserver", "kubelet"}
    assert [r.name for r in rows if not r.healthy] == []


def test_up_is_idempotent(dev_cluster):
    before = {r.name: r.pid for r in dev_cluster.status()}
    dev_cluster.up()
    assert {r.name: r.pid for r in dev_cluster.status()} == before


def test_job_submitted_through_slurmrestd_is_read_back_from_slurm(dev_cluster, slurm_rest):
    name = f"foundation-{uuid.uuid4().hex[:8]}"
    resp = _rest(slurm_rest, "POST", "job/submit", {
        "script": "#!/bin/bash\nsleep 300\n",
        "job": {"name": name, "extra": "hello-extra", "comment": "hello-comment", "current_working_directory": "/tmp",
                "environment": ["PATH=/usr/bin:/bin"], "partition": "batch"},
    })
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["errors"] == []
    job_id = body["job_id"]
    try:
        fields = _scontrol_job(dev_cluster, job_id)
        assert fields["JobName"] == name
        assert fields["Extra"] == "hello-extra"
        assert fields["Comment"] == "hello-comment"
        got = _rest(slurm_rest, "GET", f"job/{job_id}").json()
        assert got["jobs"][0]["name"] == name
    finally:
        dev_cluster.slurm("scancel", str(job_id))


def test_gpu_gres_without_gpus(dev_cluster):
    """Fake GPU devices: Slurm hands out GRES and sets CUDA_VISIBLE_DEVICES."""
    out = dev_cluster.slurm("srun", "--chdir=/tmp", "--gres=gpu:2", "-N1", "bash", "-c", "echo $CUDA_VISIBLE_DEVICES",
                            timeout=60).stdout.strip()
    assert out == "0,1"


def test_qos_high_preempts_normal(dev_cluster):
    node = dev_cluster.slurm_nodes[-1]
    low = dev_cluster.slurm("sbatch", "--parsable", "--chdir=/tmp", "-w", node, "--exclusive", "--qos=normal",
                            "--wrap", "sleep 600").stdout.strip()
    try:
        _wait(lambda: _scontrol_job(dev_cluster, int(low))["JobState"] == "RUNNING", 30, "low job to run")
        high = dev_cluster.slurm("sbatch", "--parsable", "--chdir=/tmp", "-w", node, "--exclusive", "--qos=high",
                                 "--wrap", "sleep 600").stdout.strip()
        try:
            _wait(lambda: _scontrol_job(dev_cluster, int(high))["JobState"] == "RUNNING", 60, "high job to run")
            low_fields = _scontrol_job(dev_cluster, int(low))
            assert low_fields["JobState"] in ("PENDING", "PREEMPTED", "REQUEUED"), low_fields["JobState"]
            assert int(low_fields["Restarts"]) >= 1
        finally:
            dev_cluster.slurm("scancel", high)
    finally:
        dev_cluster.slurm("scancel", low)


@pytest.fixture
def ns(kube_api) -> Iterator[str]:
    """A namespace of the test's own, purged afterwards (its Pods would stay on the shared Nodes)."""
    name = create_namespace(kube_api)
    try:
        yield name
    finally:
        purge_namespace(kube_api, name)


def _pod(name: str, **spec) -> dict:
    return {"metadata": {"name": name, "annotations": spec.pop("annotations", {})},
            "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "busybox"}], **spec}}


def test_pod_bound_through_binding_subresource_is_seen_by_a_watch(dev_cluster, kube_api, ns):
    core = client.CoreV1Api(kube_api)
    pod = core.create_namespaced_pod(ns, _pod("bind-me"))
    assert pod.spec.node_name is None
    events: queue.Queue = queue.Queue()

    def watch():
        resp = core.list_namespaced_pod(ns, watch=True, resource_version=pod.metadata.resource_version,
                                        timeout_seconds=30, _preload_content=False)
        for line in resp:
            event = json.loads(line)
            events.put(event)
            if event["object"]["spec"].get("nodeName"):
                break
        resp.release_conn()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    node = dev_cluster.k8s_node_for(dev_cluster.slurm_nodes[0])
    core.create_namespaced_binding(
        ns, {"metadata": {"name": "bind-me"}, "target": {"apiVersion": "v1", "kind": "Node", "name": node}},
        _preload_content=False,
    )
    deadline = time.monotonic() + 20
    seen = None
    while time.monotonic() < deadline and seen is None:
        event = events.get(timeout=deadline - time.monotonic())
        if event["type"] == "MODIFIED" and event["object"]["spec"].get("nodeName") == node:
            seen = event
    assert seen is not None
    _wait(lambda: core.read_namespaced_pod("bind-me", ns).status.phase == "Running", 20, "kubelet to run the Pod")
    core.delete_namespaced_pod("bind-me", ns, grace_period_seconds=0)


def test_a_nodeset_slurmd_outlives_its_kubelet_pauses_for_a_test_and_ends_with_its_pod(dev_cluster, kube_api, ns):
    """The stand-in kubelet runs a NodeSet Pod's ``slurmd -Z``. Stopped and started again (the fault matrix's
    kubelet row), it leaves that slurmd running and takes it over, as a real kubelet leaves its containers;
    ``stop_slurmd`` keeps it stopped until ``start_slurmd``; the Pod deleted, the slurmd goes."""
    core = client.CoreV1Api(kube_api)
    node = f"kt{uuid.uuid4().hex[:8]}"
    state = dev_cluster.kubelet_state

    def live() -> list[int]:
        return [r.pid for r in state.records() if r.node == node and r.alive()]

    core.create_namespaced_pod(ns, {
        "metadata": {"name": node, "labels": {names.LABEL_NODESET: "kubelet-test"}},
        "spec": {"nodeName": dev_cluster.k8s_node_for(dev_cluster.slurm_nodes[0]), "hostname": node,
                 "containers": [{"name": "slurmd", "image": "busybox", "env": [
                     {"name": "SUNK_SLURM_NODE_NAME", "value": node},
                     {"name": "SUNK_SLURMD_CONF", "value": f"Features={slurmconf.DYNAMIC_FEATURE}"}]}]}})
    try:
        _wait(lambda: dev_cluster._slurmd_ok(node), 60, f"{node} registered and answering")
        (pid,) = live()
        dev_cluster.stop_component("kubelet")
        assert live() == [pid], "the slurmd went with its kubelet"
        dev_cluster.start_component("kubelet")
        log = dev_cluster.run_dir / "logs" / "kubelet.log"
        _wait(lambda: f"taking over slurmd of Slurm node {node}" in log.read_text(errors="replace"), 30,
              "the kubelet to take the slurmd over")
        time.sleep(2)  # (a second slurmd would have started by now)
        assert live() == [pid] and dev_cluster._slurmd_ok(node)
        dev_cluster.stop_slurmd(node)
        time.sleep(2)  # (the kubelet starts an exited slurmd again after 1 s: not a paused one)
        assert live() == []
        dev_cluster.start_slurmd(node)
        (again,) = live()
        assert again != pid
        core.delete_namespaced_pod(node, ns, grace_period_seconds=2)
        _wait(lambda: not live(), 30, "the slurmd to end with its Pod")
    finally:
        state.unpause(node)
        with contextlib.suppress(client.ApiException):
            core.delete_namespaced_pod(node, ns, grace_period_seconds=0)
        _wait(lambda: not live(), 30, "the slurmd to end")
        dev_cluster.slurm("scontrol", "delete", f"nodename={node}", check=False)


def test_kubelet_honours_grace_period_on_deletion(dev_cluster, kube_api, ns):
    core = client.CoreV1Api(kube_api)
    node = dev_cluster.k8s_node_for(dev_cluster.slurm_nodes[0])
    # Container "exits" 2s after SIGTERM, well within its 20s grace period.
    core.create_namespaced_pod(ns, _pod("quick", nodeName=node, terminationGracePeriodSeconds=20,
                                        annotations={"sunk.dev/termination-delay-seconds": "2"}))
    # Container ignores SIGTERM; only the 3s grace period ends it.
    core.create_namespaced_pod(ns, _pod("stubborn", nodeName=node, terminationGracePeriodSeconds=3,
                                        annotations={"sunk.dev/termination-delay-seconds": "600"}))
    for name in ("quick", "stubborn"):
        _wait(lambda name=name: core.read_namespaced_pod(name, ns).status.phase == "Running", 20, f"{name} running")

    def gone(name):
        try:
            core.read_namespaced_pod(name, ns)
            return False
        except client.ApiException as exc:
            return exc.status == 404

    for name, low, high in (("quick", 1.5, 8), ("stubborn", 2.5, 10)):
        began = time.monotonic()
        core.delete_namespaced_pod(name, ns)
        assert not gone(name), "a Pod on a Node must outlive its delete call until the kubelet confirms"
        _wait(lambda name=name: gone(name), high, f"{name} to be deleted")
        assert time.monotonic() - began >= low


def test_slurmd_pods_map_to_nodes(dev_cluster, kube_api):
    core = client.CoreV1Api(kube_api)
    for slurm_node in dev_cluster.slurm_nodes:
        pod = core.read_namespaced_pod(slurm_node, SLURM_NAMESPACE)
        assert pod.spec.node_name == dev_cluster.k8s_node_for(slurm_node)
        assert pod.status.phase == "Running"


def test_the_stand_in_slurmd_pods_are_their_nodesets_and_register_dynamically(dev_cluster, kube_api):
    """After ``up``, each stand-in slurmd Pod is a NodeSet's (one per GPU type), listed in its NodeSlice, and its
    Slurm node a dynamic one registered as the NodeSet says: its GPUs, the feature that puts it in batch."""
    pods = {p["metadata"]["name"]: p for p in kc.list_objects(kube_api, PODS, SLURM_NAMESPACE,
                                                              label_selector="app.kubernetes.io/name=slurmd")}
    listed = {e["slurmNode"]: (s["spec"]["nodeSet"], e["pod"], e["node"])
              for s in kc.list_objects(kube_api, NODESLICES, SLURM_NAMESPACE) for e in s["spec"].get("entries") or ()}
    for node in dev_cluster.layout.node_names:
        gpu, pod = slurmconf.gpu_type(node), pods[node]
        assert [(o["kind"], o["name"]) for o in pod["metadata"]["ownerReferences"]] == [("NodeSet", gpu)], node
        assert pod["metadata"]["labels"][names.LABEL_NODESET] == gpu and pod["spec"]["nodeName"] == node
        assert listed[node] == (gpu, node, node)
        shown = _scontrol_node(dev_cluster, node)
        assert "DYNAMIC_NORM" in shown["State"], shown
        assert (shown["Gres"], shown["ActiveFeatures"], shown["Partitions"]) == (
            slurmconf.gres(node), slurmconf.NODE_FEATURES, slurmconf.PARTITION), shown
    # every slurmd Pod, realnode1's on the real kubelet Node too: a NodeSet's, listed in its NodeSlice
    hand_made = [name for name, pod in pods.items()
                 if [o["kind"] for o in pod["metadata"].get("ownerReferences") or ()] != ["NodeSet"]]
    assert not hand_made and set(pods) <= set(listed), (hand_made, sorted(pods), sorted(listed))
    if realnode.enabled():
        assert listed[realnode.SLURM_NODE] == (realnode.REAL_NODESET, realnode.SLURM_NODE, realnode.NODE_NAME)
        shown = _scontrol_node(dev_cluster, realnode.SLURM_NODE)
        assert "DYNAMIC_NORM" in shown["State"] and realnode.SLURM_FEATURE in shown["ActiveFeatures"], shown


def _scontrol_node(dev_cluster, node: str) -> dict[str, str]:
    out = dev_cluster.slurm("scontrol", "-o", "show", "node", node).stdout
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


def test_up_prunes_the_slurmd_pods_and_nodes_of_a_larger_layout(dev_cluster, kube_api):
    """`up --nodes 8` then `up --nodes 4`: node5..8 have no slurmd and no kubelet, so they go."""
    core = client.CoreV1Api(kube_api)
    stray = "node99"
    k8s_node = dev_cluster.k8s_node_for(stray)
    core.create_node({"apiVersion": "v1", "kind": "Node",
                      "metadata": {"name": k8s_node, "labels": {kubelet.NODE_LABEL: "true"}}})
    core.create_namespaced_pod(SLURM_NAMESPACE, slurmd_pod(stray))
    dev_cluster.up()
    left = {p.metadata.name for p in core.list_namespaced_pod(SLURM_NAMESPACE,
                                                              label_selector="app.kubernetes.io/name=slurmd").items}
    assert left == set(dev_cluster.slurmd_nodes)
    nodes = {n.metadata.name for n in core.list_node(label_selector=f"{kubelet.NODE_LABEL}=true").items}
    assert nodes == {dev_cluster.k8s_node_for(n) for n in dev_cluster.slurm_nodes}


def test_the_demo_schedules_its_pods_through_slurm_and_the_tests_up_ends_them(dev_cluster, capsys):
    """`make demo`, the README's first command, end to end; then `up` without sunk's daemons (what
    every test session runs) deletes the demo's Pods while its scheduler still runs, so no
    placeholder job and no lock taint outlives the demo."""
    from sunk_dev.cluster import DevCluster
    from sunk_dev.demo import _demo  # (demo() would wait for this session's own claim)

    try:
        assert _demo(DevCluster(dev_cluster.home)) == 0, capsys.readouterr().out
        shown = capsys.readouterr().out
        assert "inference-gpu" in shown and "CANCELLED" in shown, shown
    finally:
        dev_cluster.up()
    assert dev_cluster._demo_jobs() == []
    assert dev_cluster.kube_request("GET", "/api/v1/namespaces/demo/pods").json()["items"] == []
    assert dev_cluster._locked_nodes() == []
    idle = dev_cluster.slurm("sinfo", "-h", "-N", "-o", "%N %T").stdout
    assert "drain" not in idle, idle


def test_up_ends_a_demo_whose_daemons_died_before_its_workloads(dev_cluster, capsys):
    """`make demo`, then its scheduler and Syncer killed (a reboot, a supervisor ending the command's
    processes): the tests' `up` starts them again just long enough to end the demo's Pods and jobs,
    so no demo job holds a node and no demo Pod meets the tests' Syncers."""
    from sunk_dev.cluster import DevCluster
    from sunk_dev.demo import _demo

    demo = DevCluster(dev_cluster.home)
    try:
        assert _demo(demo) == 0, capsys.readouterr().out
        for component in demo._sunk_components():
            pid = component.daemon.pid()
            assert pid is not None, component.daemon.name
            os.kill(pid, signal.SIGKILL)
        assert dev_cluster._demo_jobs(), "the demo's jobs should outlive its daemons"
    finally:
        dev_cluster.up()
    assert dev_cluster._demo_jobs() == []
    assert dev_cluster.kube_request("GET", "/api/v1/namespaces/demo/pods").json()["items"] == []
    assert dev_cluster._locked_nodes() == []
    assert all(c.daemon.pid() is None for c in dev_cluster._sunk_components())
    assert not list(dev_cluster.root.glob("etc/slurm/*.d/50-sunk-lock"))  # (no prolog calls a Syncer gone)
    idle = dev_cluster.slurm("sinfo", "-h", "-N", "-o", "%N %T").stdout
    assert "drain" not in idle, idle
