"""The scheduler's settings, from flags; one frozen value shared by every part."""

from __future__ import annotations

from typing import Optional

from attrs import field, frozen

from sunk.translate.dra import DeviceMapping
from sunk.translate.policy import BUILTIN, IdentityPolicy

# How long the Slurm cache waits for a placeholder's started call to bring its job's record (the hook API
# reads it), before it reads the job itself: a new placeholder, and one that Slurm starts. The call
# comes once the batch host's prolog has locked its node, 1 to 3 s after the start with 50 gangs
# starting at once on the dev cluster. A call that never comes (lost, or taken by another replica) delays
# the Pods' binding by up to this much.
STARTED_CALL_PATIENCE = 3.0
# How often the Slurm cache reads a pending placeholder again for its reason (Resources, ReqNodeNotAvail, ...),
# which Slurm's job state list does not show: the waiting Pod's PodScheduled condition names it. A job Slurm has
# given no reason yet (it has not looked at it) is read again sooner. One read of the job each time; many at
# once are one full job list instead (the cache's max_job_reads).
PENDING_REASON_INTERVAL = 10.0
UNREASONED_PENDING_INTERVAL = 2.0
# Keys the sweeper enqueues each resync_seconds (scheduler/sweep.py): its work per tick is bounded, a cycle
# over N Pods takes N / SWEEP_BATCH ticks.
SWEEP_BATCH = 500


@frozen
class SchedulerConfig:
    scheduler_name: str
    hook_secret: bytes = field(repr=False)
    hooks_url: str  # how placeholder jobs reach this scheduler's hook API
    hooks_ca_file: str = ""  # on the slurmd hosts: the CA bundle that verifies an https hooks_url
    kill_wait_seconds: int = 30
    namespaces: tuple[str, ...] = ()  # empty = whole cluster
    slurmd_namespace: str = "slurm"
    slurmd_selector: str = "app.kubernetes.io/name=slurmd"
    submit_concurrency: int = 16
    default_partition: Optional[str] = None
    resync_seconds: float = 60.0  # the sweeper's tick
    sweep_batch: int = SWEEP_BATCH  # keys per tick
    # Seconds past its grace period that a Pod terminating on a NotReady or gone Node keeps its job.
    stuck_pod_margin: float = 60.0
    # Seconds the Slurm cache waits for a placeholder's started call to bring its job's record (0: never).
    started_call_patience: float = STARTED_CALL_PATIENCE
    # Seconds between the Slurm cache's reads of a pending placeholder for its reason (0: only the full lists).
    pending_reason_interval: float = PENDING_REASON_INTERVAL
    # Watch scheduler-plugins' PodGroups (their CRD must be installed) to gang Pods labelled with one.
    gang_pod_groups: bool = False
    # --gpu-types: Node label value (gpu.nvidia.com/class or /model) -> Slurm GRES type, SUNK's gpuTypes.
    gpu_types: tuple[tuple[str, str], ...] = ()
    # --identity-policy: who each Pod's job may run as in Slurm; BUILTIN when the operator wrote none.
    identity_policy: IdentityPolicy = BUILTIN
    # --dra-device-mapping: the Pods' ResourceClaims of these DeviceClasses are filled from Slurm's GRES indices.
    dra: Optional[DeviceMapping] = None
