"""``make demo``: bring the dev cluster up and show the Slurm side beside the Kubernetes side."""

from __future__ import annotations

from kubernetes import client, config

from .cluster import DevCluster


def demo(cluster: DevCluster) -> int:
    cluster.up()
    print("\n== Slurm nodes (sinfo) ==")
    print(cluster.slurm("sinfo", "-N", "-o", "%10N %10T %10G %6c %8m %P").stdout, end="")
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=cfg)
    with client.ApiClient(cfg) as api:
        core = client.CoreV1Api(api)
        print("\n== Kubernetes Nodes ==")
        print(f"{'NAME':<10} {'READY':<6} {'CPU':<4} {'MEMORY':<8} GPU")
        for node in core.list_node(label_selector="sunk.dev/fake-kubelet=true").items:
            ready = next((c.status for c in node.status.conditions or [] if c.type == "Ready"), "?")
            cap = node.status.capacity
            print(f"{node.metadata.name:<10} {ready:<6} {cap['cpu']:<4} {cap['memory']:<8} {cap.get('nvidia.com/gpu', 0)}")
        print("\n== slurmd Pods (Slurm node -> Pod -> Node) ==")
        print(f"{'SLURM NODE':<11} {'POD':<16} {'NODE':<10} PHASE")
        for name in cluster.slurm_nodes:
            pod = core.read_namespaced_pod(name, "slurm")
            print(f"{name:<11} {'slurm/' + name:<16} {pod.spec.node_name:<10} {pod.status.phase}")
    print("\nShell access: eval \"$(sunk-dev env)\"; sunk-dev slurm squeue")
    return 0
