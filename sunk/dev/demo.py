"""``make demo``: bring the dev cluster up and show the Slurm side beside the Kubernetes side."""

from __future__ import annotations

from .cluster import SLURM_NAMESPACE, DevCluster


def demo(cluster: DevCluster) -> int:
    cluster.up()
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
    print('\nShell access: eval "$(sunk-dev env)"; sunk-dev slurm squeue')
    return 0
