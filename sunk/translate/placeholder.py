"""The placeholder job as submitted: the Pod's job (``podjob.pod_to_job``), or a gang's
(``gang_job_request``), with what its script reads.

Pure, like the rest of sunk/translate: the caller reads the script and computes the Pod's
hook token (HMAC of the scheduler's secret and the Pod UID, scheduler/tokens.py), so
nothing here touches a file or a secret. The environment is the placeholder script's
contract (sunk/scripts/placeholder.sh lists each variable): how it reaches the hook API,
which Pod it holds a place for, and how long Slurm's KillWait leaves it at the end.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Optional

import attrs

from sunk.model import names
from sunk.model.slurm import JobRequest

from .gang import Gang, disagreements, per_node
from .identity import PlaceholderIdentity, member_tag
from .objects import annotations_of
from .podjob import Obj, _text, constraint, gpu_clauses, gpu_type, pod_to_job
from .policy import IdentityPolicy

# The script runs curl and date; the job's environment is only what the submission gives it.
PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@attrs.frozen
class Settings:
    """What one scheduler puts in every placeholder job it submits, a single Pod's and a gang's alike.

    One value for both request functions: a setting added to one of them and not the other is
    how ``--gpu-types`` once reached gangs' jobs only. ``gpu_types`` maps Node label values to
    GRES types (``--gpu-types``); ``default_partition`` applies only when the Pod names none;
    ``policy`` decides who each job runs as (``--identity-policy``).
    """

    script: str
    kill_wait_seconds: int
    scheduler: str
    hooks_url: str
    hooks_ca_file: str = ""
    default_partition: Optional[str] = None
    gpu_types: Mapping[str, str] = attrs.field(factory=dict, hash=False)  # (a dict: equal, not hashed)
    policy: IdentityPolicy = attrs.field(kw_only=True)


def job_request(pod: Obj, settings: Settings, *, hook_token: str, claimed_gpus: Optional[int] = None,
                claimed_type: str = "", claimed_shards: int = 0) -> JobRequest:
    """The placeholder job for a *valid* Pod its namespace's identity policy allows (ValueError otherwise,
    as ``pod_to_job``); ``claimed_gpus``, ``claimed_type``: as ``pod_to_job``'s; ``claimed_shards`` the Slurm
    shards its ResourceClaims ask for (``dra.ClaimPlan.shards``).

    Never requeued: a preempted placeholder must end as PREEMPTED, so its Pod is deleted and
    its owner queues a new one.
    """
    meta = pod["metadata"]
    request = pod_to_job(pod, identity=settings.policy.identity(pod), script=settings.script,
                         kill_wait_seconds=settings.kill_wait_seconds,
                         scheduler=settings.scheduler, gpu_types=settings.gpu_types, claimed_gpus=claimed_gpus,
                         claimed_type=claimed_type)
    if request.partition is None and settings.default_partition:
        request = attrs.evolve(request, partition=settings.default_partition)
    environment = (
        PATH,
        f"SUNK_HOOKS_URL={settings.hooks_url}",
        f"SUNK_HOOK_TOKEN={hook_token}",
        f"SUNK_POD_UID={meta['uid']}",
        f"SUNK_KILL_WAIT={settings.kill_wait_seconds}",
        f"SUNK_POD={meta['namespace']}/{meta['name']}",
    ) + ((f"SUNK_HOOKS_CA={settings.hooks_ca_file}",) if settings.hooks_ca_file else ())
    return attrs.evolve(request, environment=environment, requeue=False, shards_per_node=claimed_shards)


def gang_job_request(gang: Gang, members: Sequence[Obj], settings: Settings, *, size: int,
                     hook_token: str, gpus_per_node: Optional[int] = None, claimed_type: str = "") -> JobRequest:
    """The one placeholder job of a gang: ``size`` nodes, one per member, each with room for any member.

    ``members`` are the Pods it is submitted for, in member order (sunk/translate/gang.py), each valid;
    they must agree on every annotation of the seeds' table and on the GPU affinity (ValueError naming
    the disagreement otherwise, as ``pod_to_job`` for an invalid Pod). The first member's Pod gives
    those settings; per node the job asks each resource's largest request over the members
    (``gang.per_node``). ``hook_token`` is the gang's (HMAC of the secret and ``gang.owner``): the
    placeholder acts for every member. ``gpus_per_node``: with a scheduler that fills ResourceClaims, the GPUs
    each node must have, the most any member asks through claims or as nvidia.com/gpu (``ClaimsView.gpus_per_node``);
    None when it fills none (a member with claims is then invalid); ``claimed_type`` the GRES type of the
    members' claims (they agree: ``ClaimsView.gang_disagreement``).
    """
    if not members:
        raise ValueError(f"{gang.describe()}: a gang's job needs members")
    if size < len(members):
        raise ValueError(f"{gang.describe()}: {len(members)} members for a job of {size} nodes")
    found = disagreements(members)
    if found:
        raise ValueError("; ".join(map(str, found)))
    claims = 0 if gpus_per_node is not None else None  # (claims allowed; their GPUs are in gpus_per_node)
    request = job_request(members[0], settings, hook_token=hook_token, claimed_gpus=claims)
    for pod in members[1:]:
        pod_to_job(pod, identity=settings.policy.identity(pod), script=settings.script,
                   kill_wait_seconds=settings.kill_wait_seconds, claimed_gpus=claims)  # (ValueError if invalid)
    share = per_node(members)
    if gpus_per_node is not None:
        share = attrs.evolve(share, gpus=max(share.gpus, gpus_per_node))
    identity = PlaceholderIdentity(gang.unit, gang.namespace, size=size,
                                   members=tuple(member_tag(p["metadata"]["uid"]) for p in members),
                                   scheduler=settings.scheduler).encode()
    environment = tuple(
        f"SUNK_POD_UID={gang.owner}" if item.startswith("SUNK_POD_UID=")
        else f"SUNK_POD={gang.describe()}" if item.startswith("SUNK_POD=")
        else item
        for item in request.environment) + (f"SUNK_GANG={size}",)
    # The GPU affinity is every member's (they agree); a typed GRES request once any member asks for GPUs,
    # even when the first (a leader without GPUs) does not.
    clauses = gpu_clauses(members[0])
    typed, clauses = gpu_type(clauses, settings.gpu_types) if share.gpus else (None, clauses)
    if claimed_type:
        if typed not in (None, claimed_type) or clauses:
            raise ValueError(f"{gang.describe()}: the GPU type comes from the claims' DeviceClass ({claimed_type}); "
                             "a GPU class or model affinity may not ask for another")
        typed = claimed_type
    constraints = constraint(_text(annotations_of(members[0]), names.ANN_CONSTRAINTS), clauses)
    return attrs.evolve(request, name=gang.job_name(), admin_comment=identity, node_count=size,
                        cpus_per_task=share.cpus, memory_per_node=share.memory_mb, gpus_per_node=share.gpus,
                        gpu_type=typed, constraints=constraints, environment=environment)
