"""``make demo``: the dev cluster, sunk's daemons, and Pods scheduled by Slurm end to end."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import requests as http

from sunk.kube import client as kc
from sunk.model import names

from . import images, realnode, slurmonk8s
from .cluster import DEMO_NAMESPACE, DEMO_SCHEDULER, SLURM_NAMESPACE, DevCluster

JOB_ID = "sunk.coreweave.com/job-id"


def demo(cluster: DevCluster) -> int:
    with cluster.claimed("sunk-dev demo"):  # (a test session meanwhile would stop the demo's daemons)
        return _demo(cluster)


DEPLOYMENTS = f"/apis/apps/v1/namespaces/{DEMO_NAMESPACE}/deployments"
PODS = f"/api/v1/namespaces/{DEMO_NAMESPACE}/pods"
# Inference as it arrives: Deployments. Two CPU replicas, and one replica with a GPU.
WORKLOADS = {"inference": (2, {"cpu": "2", "memory": "4Gi"}),
             "inference-gpu": (1, {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"})}


def _demo(cluster: DevCluster) -> int:
    cluster.with_sunk = True
    cluster.up()
    show_both_sides(cluster)
    print(f"\n== Deployments scheduled through Slurm (schedulerName: {DEMO_SCHEDULER}) ==")
    cluster.kube_request("POST", "/api/v1/namespaces", {"metadata": {"name": DEMO_NAMESPACE}})
    cluster.end_demo_workloads()  # (an earlier demo's)
    manifests = [deployment(name, replicas, requests) for name, (replicas, requests) in WORKLOADS.items()]
    if cluster.real_node:
        manifests.append(web_deployment())
    for manifest in manifests:
        resp = cluster.kube_request("POST", DEPLOYMENTS, manifest)
        if resp.status_code != 201:
            print(f"could not create Deployment {manifest['metadata']['name']}: {resp.status_code} {resp.text[:300]}")
            return 1
    replicas = sum(m["spec"]["replicas"] for m in manifests)
    if not _wait(lambda: _bound(cluster) == replicas, 90):
        _show(cluster)
        print("not every replica was bound within 90 s; see `sunk-dev status`, `sunk-dev slurm sinfo -R` and "
              "run/logs/sunk-scheduler.log")
        return 1
    _show(cluster)
    if cluster.real_node and not _reach_web(cluster):
        return 1

    print("\n== kubectl scale deployment inference --replicas=3: Slurm places the new replica ==")
    cluster.kube_request("PATCH", f"{DEPLOYMENTS}/inference/scale", {"spec": {"replicas": 3}},
                         content_type="application/merge-patch+json")
    replicas += 1
    if not _wait(lambda: _bound(cluster) == replicas, 60):
        print("the new replica was not bound within 60 s")
        return 1
    _show(cluster)

    victim = next(p for p in _pods(cluster) if p["metadata"]["name"].startswith("inference-")
                  and "gpu" not in p["metadata"]["name"])
    name, job_id = victim["metadata"]["name"], (victim["metadata"].get("annotations") or {})[JOB_ID]
    print(f"\n== kubectl delete pod {name}: its Slurm job {job_id} is cancelled, the ReplicaSet makes another ==")
    cluster.kube_request("DELETE", f"{PODS}/{name}")
    _wait(lambda: _job_state(cluster, job_id) in ("CANCELLED", "COMPLETED"), 60)
    print(f"job {job_id}: {_job_state(cluster, job_id)}")
    _wait(lambda: _bound(cluster) == replicas and name not in {p["metadata"]["name"] for p in _pods(cluster)}, 60)
    _show(cluster)
    if cluster.real_node and images.enabled() and not slurm_on_kubernetes(cluster):
        return 1
    # (`make demo` runs from a venv under the dev home: its activate script puts sunk-dev on PATH)
    enter = f". {sys.prefix}/bin/activate; " if sys.prefix != sys.base_prefix else ""
    print(f'\nTry it: {enter}eval "$(sunk-dev env)"; kubectl -n demo get pods -o wide; sunk-dev slurm squeue;\n'
          "kubectl -n demo scale deployment inference --replicas=1; `sunk-dev down` stops everything.")
    if cluster.slurm_on_kubernetes:
        print(f"Slurm on Kubernetes: kubectl -n {slurmonk8s.NAMESPACE} exec deploy/{slurmonk8s.CLUSTER}-login -c login "
              "-- sinfo (`sunk-dev up` without --slurm-on-kubernetes takes it down).")
    return 0


def slurm_on_kubernetes(cluster: DevCluster) -> bool:
    """The other install path: Slurm itself deployed by the chart (a SlurmCluster and a NodeSet) as Pods on two
    real kubelet Nodes, and a job of two nodes submitted in its login Pod."""
    # The web replica's placeholder job holds a lock on the real Node (sunk's node locking), which evicts every Pod that
    # does not tolerate it: the SlurmCluster's Pods among them. It ends first, and its lock with it.
    print(f"\n== kubectl delete deployment web: its Slurm job ends and {realnode.NODE_NAME} is unlocked ==")
    cluster.kube_request("DELETE", f"{DEPLOYMENTS}/web")
    if not _wait(lambda: not any(p["metadata"]["name"].startswith("web-") for p in _pods(cluster))
                 and not _locked(cluster, realnode.NODE_NAME), 90):
        print(f"the web replica or the lock on {realnode.NODE_NAME} was still there after 90 s")
        return False
    print("\n== Slurm on Kubernetes: helm install with a SlurmCluster, slurmd Pods on two real Nodes ==")
    cluster.slurm_on_kubernetes = True  # (kept up: `sunk-dev up` without --slurm-on-kubernetes takes it down)
    try:
        deployed = slurmonk8s.bring_up(cluster, print)
    except RuntimeError as exc:
        print(exc)
        return False
    namespace = deployed.namespace
    pods = cluster.kubectl("-n", namespace, "get", "pods", "-o", "wide", check=False)
    print(f"$ kubectl -n {namespace} get pods -o wide\n" + (pods.stdout or pods.stderr), end="")
    api = kc.load_api_client(str(cluster.kubeconfig))
    login = deployed.login_pod(api)
    for argv in (["sinfo"], ["sbatch", "--wait", "-N2", "-o", "/tmp/hostnames-%j.out", "--wrap", "srun hostname"],
                 ["sacct", "-X", "-o", "JobID,JobName,NodeList,State"]):
        done = cluster.kubectl("-n", namespace, "exec", login, "-c", "login", "--", *argv, check=False)
        print(f"$ kubectl -n {namespace} exec {login} -- {' '.join(argv)}\n{done.stdout}{done.stderr}", end="")
        if done.returncode != 0:
            return False
    return True


def _locked(cluster: DevCluster, node: str) -> bool:
    taints = cluster.kube_request("GET", f"/api/v1/nodes/{node}").json().get("spec", {}).get("taints") or []
    return any(t.get("key") == names.LOCK_KEY for t in taints)


def deployment(name: str, replicas: int, requests: dict[str, str]) -> dict[str, Any]:
    limits = {k: v for k, v in requests.items() if k == "nvidia.com/gpu"}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}, "spec": {
        "replicas": replicas, "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}}, "spec": {
            "schedulerName": DEMO_SCHEDULER, "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "infinity"],
                            "resources": {"requests": requests, "limits": limits}}]}}}}


def web_deployment() -> dict[str, Any]:
    """A web server Slurm places on the real kubelet Node (its partition), where it really runs."""
    manifest = deployment("web", 1, {"cpu": "1", "memory": "64Mi"})
    template = manifest["spec"]["template"]
    template["metadata"]["annotations"] = {"sunk.coreweave.com/partition": realnode.SLURM_PARTITION}
    template["spec"]["containers"][0].update(image=realnode.BUSYBOX_IMAGE, imagePullPolicy="Never",
                                             command=["/bin/httpd", "-f", "-p", "8080", "-h", "/www"])
    return manifest


def _reach_web(cluster: DevCluster) -> bool:
    """curl the web replica at its Pod IP: a container the real kubelet runs answers."""
    print(f"\n== the web replica runs in a container on {realnode.NODE_NAME}: curl its Pod IP ==")

    def ip() -> str | None:
        for pod in _pods(cluster):
            status = pod.get("status") or {}
            if pod["metadata"]["name"].startswith("web-") and any(
                    (c.get("state") or {}).get("running") for c in status.get("containerStatuses") or []):
                return status.get("podIP")
        return None

    if not _wait(lambda: ip() is not None, 60):
        print("the web replica's container did not start within 60 s; see run/logs/kubelet-real.log")
        return False
    url = f"http://{ip()}:8080/"
    if not _wait(lambda: _answer(url) is not None, 20):
        print(f"$ curl {url}\n(no answer within 20 s)")
        return False
    print(f"$ curl {url}\n{_answer(url)}")
    return True


def _answer(url: str) -> str | None:
    try:
        return http.get(url, timeout=2).text.strip()
    except http.RequestException:
        return None


def _pods(cluster: DevCluster) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.kube_request("GET", PODS).json().get("items") or []
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _bound(cluster: DevCluster) -> int:
    return sum(1 for p in _pods(cluster) if p["spec"].get("nodeName"))


def _show(cluster: DevCluster) -> None:
    """kubectl get pods -o wide beside squeue: the same workloads, seen from both sides."""
    kubectl = cluster.kubectl("-n", DEMO_NAMESPACE, "get", "pods", "-o", "wide", check=False)
    print("$ kubectl -n demo get pods -o wide\n" + (kubectl.stdout or kubectl.stderr), end="")
    print("$ squeue\n" + cluster.slurm("squeue", "-o", "%.6i %.24j %.10T %.8N").stdout, end="")
    print(f"{'POD':<28} {'JOB':<6} {'SLURM NODE':<11} {'NODE':<10} JOB STATE")
    for pod in sorted(_pods(cluster), key=lambda p: p["metadata"]["name"]):
        annotations = pod["metadata"].get("annotations") or {}
        job_id = annotations.get(JOB_ID, "-")
        print(f"{pod['metadata']['name']:<28} {job_id:<6} {annotations.get('sunk.coreweave.com/slurm-node', '-'):<11} "
              f"{pod['spec'].get('nodeName') or '-':<10} {_job_state(cluster, job_id) if job_id != '-' else '-'}")


def show_both_sides(cluster: DevCluster) -> None:
    print("\n== Slurm nodes (sinfo) ==")
    print(cluster.slurm("sinfo", "-N", "-o", "%10N %10T %10G %6c %8m %P").stdout, end="")
    print("\n== Kubernetes Nodes ==")
    print(f"{'NAME':<10} {'READY':<6} {'CPU':<4} {'MEMORY':<12} GPU")
    nodes = cluster.kube_request("GET", "/api/v1/nodes").json()["items"]
    for node in nodes:
        status = node.get("status") or {}
        if not (cap := status.get("capacity")):
            continue  # (a Node object no kubelet serves, e.g. one a test made)
        ready = next((c["status"] for c in status.get("conditions", []) if c["type"] == "Ready"), "?")
        gpus = cap.get("nvidia.com/gpu", 0)
        print(f"{node['metadata']['name']:<10} {ready:<6} {cap['cpu']:<4} {cap['memory']:<12} {gpus}")
    print("\n== slurmd Pods (Slurm node -> Pod -> Node) ==")
    print(f"{'SLURM NODE':<11} {'POD':<16} {'NODE':<10} PHASE")
    for name in cluster.slurmd_nodes:
        pod = cluster.kube_request("GET", f"/api/v1/namespaces/{SLURM_NAMESPACE}/pods/{name}").json()
        print(f"{name:<11} {SLURM_NAMESPACE + '/' + name:<16} {pod['spec']['nodeName']:<10} {pod['status']['phase']}")


def _job_state(cluster: DevCluster, job_id: str) -> str:
    out = cluster.slurm("scontrol", "--json", "show", "job", job_id, check=False).stdout
    try:
        return json.loads(out)["jobs"][0]["job_state"][0]
    except (ValueError, KeyError, IndexError):
        return "GONE"


def _wait(check, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.5)
    return False
