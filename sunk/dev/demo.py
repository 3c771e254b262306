"""``make demo``: the dev cluster, sunk's daemons, and Pods scheduled by Slurm end to end."""

from __future__ import annotations

import json
import time
from typing import Any

from .cluster import DEMO_NAMESPACE, DEMO_SCHEDULER, SLURM_NAMESPACE, DevCluster

JOB_ID = "sunk.coreweave.com/job-id"


def demo(cluster: DevCluster) -> int:
    with cluster.claimed("sunk-dev demo"):  # (a test session meanwhile would stop the demo's daemons)
        return _demo(cluster)


def _demo(cluster: DevCluster) -> int:
    cluster.with_sunk = True
    cluster.up()
    show_both_sides(cluster)
    print(f"\n== Pods scheduled through Slurm (schedulerName: {DEMO_SCHEDULER}) ==")
    cluster.kube_request("POST", "/api/v1/namespaces", {"metadata": {"name": DEMO_NAMESPACE}})
    pods = {"inference-cpu": {"cpu": "2", "memory": "4Gi"},
            "inference-gpu": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}}
    base = f"/api/v1/namespaces/{DEMO_NAMESPACE}/pods"
    for name in pods:
        cluster.kube_request("DELETE", f"{base}/{name}?gracePeriodSeconds=0")
    _wait(lambda: all(cluster.kube_request("GET", f"{base}/{n}").status_code == 404 for n in pods), 60)
    for name, requests in pods.items():
        limits = {k: v for k, v in requests.items() if k == "nvidia.com/gpu"}
        resp = cluster.kube_request("POST", base, {"metadata": {"name": name}, "spec": {
            "schedulerName": DEMO_SCHEDULER, "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "infinity"],
                            "resources": {"requests": requests, "limits": limits}}]}})
        if resp.status_code != 201:
            print(f"could not create {name}: {resp.status_code} {resp.text[:300]}")
            return 1
    # (a Pod whose job Slurm ended is deleted: it then has no spec, and the wait ends unbound)
    bound = _wait(lambda: all((_pod(cluster, n).get("spec") or {}).get("nodeName") for n in pods), 90)
    print(f"{'POD':<16} {'JOB':<6} {'SLURM NODE':<11} {'NODE':<10} {'PHASE':<8} JOB STATE")
    for name in pods:
        _row(cluster, name)
    if not bound:
        print("not every Pod was bound within 90 s; see `sunk-dev status`, `sunk-dev slurm sinfo -R` and "
              "run/logs/sunk-scheduler.log")
        return 1
    victim = "inference-cpu"
    job_id = _pod(cluster, victim)["metadata"]["annotations"][JOB_ID]
    print(f"\n== kubectl delete pod {victim}: its Slurm job {job_id} is cancelled ==")
    cluster.kube_request("DELETE", f"{base}/{victim}")
    _wait(lambda: _job_state(cluster, job_id) in ("CANCELLED", "COMPLETED"), 60)
    print(f"job {job_id}: {_job_state(cluster, job_id)}")
    print(f"\nsqueue:\n{cluster.slurm('squeue', '-o', '%.6i %.20j %.10T %.8N').stdout}")
    print('Try it: eval "$(sunk-dev env)"; sunk-dev slurm squeue; `sunk-dev down` stops everything.')
    return 0


def show_both_sides(cluster: DevCluster) -> None:
    print("\n== Slurm nodes (sinfo) ==")
    print(cluster.slurm("sinfo", "-N", "-o", "%10N %10T %10G %6c %8m %P").stdout, end="")
    print("\n== Kubernetes Nodes ==")
    print(f"{'NAME':<10} {'READY':<6} {'CPU':<4} {'MEMORY':<8} GPU")
    nodes = cluster.kube_request("GET", "/api/v1/nodes?labelSelector=sunk.dev%2Ffake-kubelet%3Dtrue").json()["items"]
    for node in nodes:
        status = node["status"]
        ready = next((c["status"] for c in status.get("conditions", []) if c["type"] == "Ready"), "?")
        cap = status["capacity"]
        gpus = cap.get("nvidia.com/gpu", 0)
        print(f"{node['metadata']['name']:<10} {ready:<6} {cap['cpu']:<4} {cap['memory']:<8} {gpus}")
    print("\n== slurmd Pods (Slurm node -> Pod -> Node) ==")
    print(f"{'SLURM NODE':<11} {'POD':<16} {'NODE':<10} PHASE")
    for name in cluster.slurm_nodes:
        pod = cluster.kube_request("GET", f"/api/v1/namespaces/{SLURM_NAMESPACE}/pods/{name}").json()
        print(f"{name:<11} {SLURM_NAMESPACE + '/' + name:<16} {pod['spec']['nodeName']:<10} {pod['status']['phase']}")


def _pod(cluster: DevCluster, name: str) -> dict[str, Any]:
    return cluster.kube_request("GET", f"/api/v1/namespaces/{DEMO_NAMESPACE}/pods/{name}").json()


def _job_state(cluster: DevCluster, job_id: str) -> str:
    out = cluster.slurm("scontrol", "--json", "show", "job", job_id, check=False).stdout
    try:
        return json.loads(out)["jobs"][0]["job_state"][0]
    except (ValueError, KeyError, IndexError):
        return "GONE"


def _row(cluster: DevCluster, name: str) -> None:
    pod = _pod(cluster, name)
    if "metadata" not in pod:
        print(f"{name:<16} (deleted: its Slurm job ended; see `sunk-dev slurm sinfo -R`)")
        return
    annotations = pod["metadata"].get("annotations") or {}
    job_id = annotations.get(JOB_ID, "-")
    print(f"{name:<16} {job_id:<6} {annotations.get('sunk.coreweave.com/slurm-node', '-'):<11} "
          f"{pod['spec'].get('nodeName') or '-':<10} {pod.get('status', {}).get('phase', '-'):<8} "
          f"{_job_state(cluster, job_id) if job_id != '-' else '-'}")


def _wait(check, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.5)
    return False
