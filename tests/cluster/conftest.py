"""Fixtures shared by the cluster tests."""

from __future__ import annotations

import pytest
from slurmtools import idle_node, slurm_job, state, wait_for


@pytest.fixture
def busy_node(dev_cluster):
    """A node held by an exclusive batch job, so a Pod that requires it stays pending in Slurm."""
    node = idle_node(dev_cluster)
    job = dev_cluster.slurm("sbatch", "--parsable", "--chdir=/tmp", "-w", node, "--exclusive", "--qos=high",
                            "--wrap", "sleep 600").stdout.strip()
    wait_for(lambda: state(slurm_job(dev_cluster, int(job))) == "RUNNING", 30, "the blocking job to run")
    yield node
    dev_cluster.slurm("scancel", job)
