"""The placeholder job as submitted: the Pod's job (``podjob.pod_to_job``) with what its script reads.

Pure, like the rest of sunk/translate: the caller reads the script and computes the Pod's
hook token (HMAC of the scheduler's secret and the Pod UID, scheduler/tokens.py), so
nothing here touches a file or a secret. The environment is the placeholder script's
contract (sunk/scripts/placeholder.sh lists each variable): how it reaches the hook API,
which Pod it holds a place for, and how long Slurm's KillWait leaves it at the end.
"""

from __future__ import annotations

from typing import Optional

import attrs

from sunk.slurm.models import JobRequest

from .podjob import Obj, pod_to_job

# The script runs curl and date; the job's environment is only what the submission gives it.
PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def job_request(
    pod: Obj,
    *,
    script: str,
    kill_wait_seconds: int,
    scheduler: str,
    hooks_url: str,
    hook_token: str,
    hooks_ca_file: str = "",
    default_partition: Optional[str] = None,
) -> JobRequest:
    """The placeholder job for a *valid* Pod (ValueError otherwise, as ``pod_to_job``).

    ``default_partition`` applies only when the Pod names none. Never requeued: a preempted
    placeholder must end as PREEMPTED, so its Pod is deleted and its owner queues a new one.
    """
    meta = pod["metadata"]
    request = pod_to_job(pod, script=script, kill_wait_seconds=kill_wait_seconds, scheduler=scheduler)
    if request.partition is None and default_partition:
        request = attrs.evolve(request, partition=default_partition)
    environment = (
        PATH,
        f"SUNK_HOOKS_URL={hooks_url}",
        f"SUNK_HOOK_TOKEN={hook_token}",
        f"SUNK_POD_UID={meta['uid']}",
        f"SUNK_EXTRA={request.extra}",
        f"SUNK_KILL_WAIT={kill_wait_seconds}",
        f"SUNK_POD={meta['namespace']}/{meta['name']}",
    ) + ((f"SUNK_HOOKS_CA={hooks_ca_file}",) if hooks_ca_file else ())
    return attrs.evolve(request, environment=environment, requeue=False)
