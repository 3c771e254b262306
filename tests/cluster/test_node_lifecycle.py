"""Node lifecycle is real in the dev cluster: kube-controller-manager marks a Node NotReady when its
kubelet stops renewing its Lease, taints it unreachable, and lifts both when the kubelet is back."""

from __future__ import annotations

import time

from slurmtools import wait_for

from sunk.kube import client as kc
from sunk.kube.resources import LEASES, NODES, PODS

UNREACHABLE = "node.kubernetes.io/unreachable"


def ready(node: dict) -> str | None:
    return next((c["status"] for c in node["status"].get("conditions", []) if c["type"] == "Ready"), None)


def unreachable(node: dict) -> bool:
    return any(t["key"] == UNREACHABLE for t in node["spec"].get("taints") or [])


def test_a_node_whose_kubelet_stops_turns_notready_and_recovers(kube_api, dev_cluster):
    name = dev_cluster.k8s_node_for(dev_cluster.slurm_nodes[0])
    lease = kc.get(kube_api, LEASES, name, "kube-node-lease")  # renewed by the stand-in kubelet
    assert lease["spec"]["holderIdentity"] == name
    dev_cluster.stop_component("kubelet")
    stopped = time.monotonic()
    try:
        # 40 s of --node-monitor-grace-period after the last renewal (every 10 s), plus the controller's period
        wait_for(lambda: ready(kc.get(kube_api, NODES, name)) == "Unknown", 90, f"{name} NotReady")
        assert time.monotonic() - stopped > 25, "NotReady before the grace period: the Lease was not renewed"
        wait_for(lambda: unreachable(kc.get(kube_api, NODES, name)), 30, f"{name} tainted unreachable")
        wait_for(lambda: ready(kc.get(kube_api, PODS, dev_cluster.slurm_nodes[0], "slurm")) == "False", 30,
                 "the controller to mark the Node's Pods not Ready")
    finally:
        dev_cluster.start_component("kubelet")
    wait_for(lambda: ready(kc.get(kube_api, NODES, name)) == "True", 60, f"{name} Ready again")
    wait_for(lambda: not unreachable(kc.get(kube_api, NODES, name)), 60, "the unreachable taints lifted")
    # The controller marked the Node's Pods not Ready; the kubelet, back, reports its own view again
    # (else every slurmd Pod would stay not Ready and a Syncer would drain its Slurm node).
    slurmd = dev_cluster.slurm_nodes[0]
    wait_for(lambda: ready(kc.get(kube_api, PODS, slurmd, "slurm")) == "True", 30, f"slurmd Pod {slurmd} Ready again")
