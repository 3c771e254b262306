"""`sunk-dev down` and release switches leave nothing of a Slurm behind (issue 36's acceptance).

A job step's slurmstepd detaches from its slurmd: it outlived `down` and release switches, running
in a chroot nothing else used any more.
"""

from __future__ import annotations

import pytest
from syncer_harness import wait_for

pytestmark = pytest.mark.every_release



def test_nothing_runs_in_another_releases_chroot(dev_cluster):
    """Every leg of `make test` switches releases: what the last one ran must be gone."""
    assert dev_cluster.stray_processes() == {}


def test_down_ends_every_job_step_and_up_comes_back_clean(dev_cluster):
    from sunk_dev import chroot

    job = dev_cluster.slurm("sbatch", "--parsable", "-N1", "--job-name=outlives-down", "--chdir=/tmp",
                            "--output=/dev/null", "--wrap", "srun sleep 3600").stdout.strip().split(";")[0]
    try:
        def job_steps() -> dict[int, str]:
            steps = {pid: cmd for pid, cmd in chroot.processes_in(dev_cluster.root).items()
                     if cmd.startswith("slurmstepd") and f"[{job}." in cmd}
            return steps if len(steps) >= 2 else {}  # (the batch step's and the srun step's)

        steps = wait_for(job_steps, 60, f"job {job}'s batch and srun slurmstepds")

        stopped = dev_cluster.down()

        left = {root.name: chroot.processes_in(root) for root in chroot.chroot_dirs(dev_cluster.home)}
        assert {name: pids for name, pids in left.items() if pids} == {}
        assert any(f"pid {pid}" in line for line in stopped for pid in steps), stopped
    finally:
        dev_cluster.up()
        # slurmctld kept the job as running (its state outlives `down`); its slurmd knows it no more. Cancelled
        # until gone: a later test needs every batch node idle.
        def gone() -> bool:
            dev_cluster.slurm("scancel", job, check=False)
            return not dev_cluster.slurm("squeue", "-h", "-j", job, "-o", "%i", check=False).stdout.strip()

        wait_for(gone, 60, f"job {job} gone after the restart", interval=1)
    assert dev_cluster.stray_processes() == {}
    assert [r.name for r in dev_cluster.status() if not r.healthy] == []
