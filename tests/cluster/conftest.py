"""Fixtures shared by the cluster tests."""

from __future__ import annotations

import pytest
from slurmtools import idle_node, slurm_job, state, wait_for

from sunk.kube import client as kc
from sunk.kube.patch import ensure_taint, remove_taint
from sunk.kube.resources import NODES
from sunk.model import names


@pytest.fixture
def busy_node(dev_cluster):
    """A node held by an exclusive batch job, so a Pod that requires it stays pending in Slurm."""
    node = idle_node(dev_cluster)
    job = dev_cluster.slurm("sbatch", "--parsable", "--chdir=/tmp", "-w", node, "--exclusive", "--qos=high",
                            "--wrap", "sleep 600").stdout.strip()
    wait_for(lambda: state(slurm_job(dev_cluster, int(job))) == "RUNNING", 30, "the blocking job to run")
    yield node
    dev_cluster.slurm("scancel", job)


@pytest.fixture
def lock_taint(kube_api, dev_cluster):
    """Taint an idle Slurm node's Kubernetes Node with the lock, as the Syncer's strict lock leaves it.

    Call it with the taint's effect; it returns (Slurm node, Node). The taint goes at teardown.
    """
    tainted = []

    def taint(effect: str) -> tuple[str, str]:
        slurm_node = idle_node(dev_cluster)
        k8s_node = dev_cluster.k8s_node_for(slurm_node)
        ensure_taint(kube_api, kc.get(kube_api, NODES, k8s_node), names.LOCK_KEY, "true", effect)
        tainted.append(k8s_node)
        return slurm_node, k8s_node

    yield taint
    for k8s_node in tainted:
        remove_taint(kube_api, kc.get(kube_api, NODES, k8s_node), names.LOCK_KEY)
