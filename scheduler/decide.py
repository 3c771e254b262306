"""What to do next for one Pod, given its placeholder job: a pure function.

Both front ends share it: ``sunk-scheduler`` binds Pods itself, the extender lets
kube-scheduler bind. Keeping the decision free of I/O makes every case a table row in
tests/unit/test_scheduler_decide.py.

Rules worth stating:
- A bound Pod's job is cancelled only once the Pod is gone, never while it is still
  terminating: Slurm must not hand the node to another job while containers still run
  (a peer cancelled early, and another job landed on a busy node). Except when the Pod's
  Node is NotReady or gone: its kubelet will never finish the Pod, and the job would be held
  for ever. Once the grace period plus ``stuck_margin`` has passed, the job is let go
  (``ReleaseStuckPod``): its node drained first (``k8s: sunk-stuck: ...``, sunk/translate/drains.py
  and stuckpod.py), then cancelled.
- A job that ends for any reason deletes its Pod, bound or not, with the reason; except a
  job Slurm failed before the Pod was ever bound (it cannot run as asked): that Pod stays,
  marked Unschedulable, so its owner does not recreate it in a loop.
- Never two jobs for one Pod: a submission is remembered (``expected_job_id``) until the
  Slurm cache shows it, and on restart the cache is complete before anything is decided. A
  submission whose answer was lost (``in_doubt``) may have made a job the cache does not show
  yet: the Pod's job is looked up in Slurm (``FindJob``) before it is submitted again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional, TypeAlias, Union

from attrs import frozen

from sunk.slurm.models import Job


@frozen
class Nothing:
    """Nothing to do until something changes (a watch or Slurm event requeues the Pod), or until
    ``recheck_after`` seconds have passed, when time alone changes the decision."""

    why: str = ""
    recheck_after: Optional[float] = None


@frozen
class Submit:
    """Create the placeholder job."""


@frozen
class FindJob:
    """A submission's answer was lost: look for the Pod's job in a fresh read of Slurm before submitting again."""


@frozen
class Invalid:
    """The Pod cannot be scheduled as written; record it, and do not retry until it changes."""

    problems: tuple[str, ...]


@frozen
class Bind:
    job_id: int
    slurm_node: str
    k8s_node: str


@frozen
class Waiting:
    """The job is queued or starting; report why, and wait for the next event.

    ``passing`` marks the steps every Pod goes through in a second or two (Slurm has not
    listed the job yet, or has not given a reason, or the prolog is running): worth an
    Event only if the Pod stays there, not for each of a few hundred Pods starting at once.
    ``Priority`` and ``Resources`` are among them: in a burst slurmctld gives one of them to
    every job that waits for its next scheduling pass, for well under a second.
    """

    job_id: int
    reason: str
    passing: bool = False


@frozen
class Unschedulable:
    """Slurm will not run this Pod as written: say so on the Pod, keep it, do not resubmit.

    kube-scheduler's convention (PodScheduled=False, reason Unschedulable): a Pod whose
    owner would recreate it must not be deleted in a loop.
    """

    message: str


@frozen
class DeletePod:
    reason: str  # short CamelCase, for the Event
    message: str


@frozen
class CancelJobs:
    job_ids: tuple[int, ...]
    message: str


@frozen
class ReleaseStuckPod:
    """The Pod is stuck terminating on a Node that is NotReady or gone: drain its job's nodes, then cancel it."""

    job_id: int
    slurm_nodes: tuple[str, ...]
    k8s_node: str


# Every action decide() returns, as closed unions: a dispatcher that matches on them ends with
# typing.assert_never, so mypy names any action it forgets.
PodAction: TypeAlias = Union[Submit, FindJob, Invalid, Bind, Waiting, Unschedulable, DeletePod, ReleaseStuckPod]
"""The actions on the Pod itself: decide() returns one only for a Pod that exists."""
Action: TypeAlias = Union[Nothing, CancelJobs, PodAction]


@frozen
class PodFacts:
    """What the decision needs from a Pod, extracted by the caller."""

    uid: str
    bound_node: Optional[str]  # spec.nodeName
    deleting: bool
    placed_by_us: bool  # carries our job-id annotation
    problems: tuple[str, ...] = ()  # validation errors, already rendered
    grace_ends_at: Optional[float] = None  # Unix time its grace period ends (deletionTimestamp), when deleting
    node_lost: bool = False  # its bound Node is NotReady (Ready False or Unknown) or gone


# Slurm's reasons that a job in a busy queue shows for a moment on its way to running; a
# limit, a hold, a dependency or an unavailable node says something that lasts.
TRANSIENT_REASONS = frozenset({"", "Priority", "Resources"})


def decide(
    pod: Optional[PodFacts],
    jobs: tuple[Job, ...],
    *,
    expected_job_id: Optional[int] = None,
    recorded_job_id: Optional[int] = None,
    refused: Optional[str] = None,
    node_of: Mapping[str, str] = {},
    started: Mapping[int, bool] = {},
    in_doubt: bool = False,
    now: float = 0.0,
    stuck_margin: float = 60.0,
) -> Action:
    """Next step for one Pod. ``jobs`` are Slurm's jobs carrying this Pod's UID, any state.

    ``expected_job_id`` is a submission this process made that the cache may not show yet;
    ``recorded_job_id`` is the job id annotated on the Pod (it survives restarts).
    ``refused`` is Slurm's answer to a submission it refused, while that is remembered.
    ``node_of`` maps Slurm node name -> Kubernetes Node (through the slurmd Pods).
    ``started[job_id]`` says whether the placeholder script has marked the job started.
    ``in_doubt``: a submission for this Pod was sent and its answer lost.
    ``now`` (Unix time) and ``stuck_margin`` (seconds past the grace period) judge a Pod stuck
    terminating on a Node that is NotReady or gone.
    """
    active = tuple(j for j in jobs if j.active)
    if pod is None:
        if active:
            return CancelJobs(tuple(j.id for j in active), "its Pod was deleted")
        return Nothing("Pod and job are both gone")

    if len(active) > 1:
        # Should never happen; if it does, keep the oldest and cancel the rest.
        keep = min(active, key=lambda j: j.id)
        return CancelJobs(tuple(j.id for j in active if j.id != keep.id), f"duplicate of job {keep.id}")
    job = active[0] if active else None

    if pod.deleting:
        if job is not None and pod.bound_node is None:
            return CancelJobs((job.id,), "its Pod is being deleted before it was bound")
        if (job is not None and pod.bound_node is not None and pod.placed_by_us and pod.node_lost
                and pod.grace_ends_at is not None):
            due = pod.grace_ends_at + stuck_margin
            if now >= due:
                return ReleaseStuckPod(job.id, job.node_list, pod.bound_node)
            return Nothing("Pod is terminating on a Node that is NotReady or gone; its job is let go if it "
                           "is still there after its grace period and the margin", recheck_after=due - now)
        return Nothing("Pod is terminating; its job is cancelled once it is gone")

    if pod.bound_node is not None:
        if not pod.placed_by_us:
            return Nothing("bound by someone else")
        if job is None:
            return DeletePod(*_ended(jobs, recorded_job_id))
        if job.state == "PENDING":
            return DeletePod("Preempted", f"Slurm requeued job {job.id} ({job.state_reason or 'preempted'})")
        return Nothing("running")

    # Not bound yet.
    if pod.problems:
        return Invalid(pod.problems)
    if job is None:
        if expected_job_id is not None and not any(j.id == expected_job_id for j in jobs):
            return Waiting(expected_job_id, "submitted; waiting for Slurm to report the job", passing=True)
        if jobs and max(jobs, key=lambda j: j.id).state == "FAILED":
            last = max(jobs, key=lambda j: j.id)
            return Unschedulable(f"Slurm failed job {last.id} before it started: {last.state_reason or 'no reason'}")
        if jobs or recorded_job_id is not None:
            return DeletePod(*_ended(jobs, recorded_job_id))
        if refused is not None:
            return Unschedulable(refused)
        if in_doubt:
            return FindJob()
        return Submit()
    if job.state != "RUNNING":
        reason = job.state_reason if job.state_reason not in ("", "None") else ""
        return Waiting(job.id, reason or job.state, passing=reason in TRANSIENT_REASONS)
    if not started.get(job.id, False):
        return Waiting(job.id, "prolog and node lock in progress", passing=True)
    nodes = job.node_list
    if len(nodes) != 1:
        return CancelJobs((job.id,), f"a Pod needs exactly one node; Slurm allocated {job.nodes or 'none'}")
    k8s_node = node_of.get(nodes[0])
    if k8s_node is None:
        return Waiting(job.id, f"no slurmd Pod found for Slurm node {nodes[0]}")
    return Bind(job.id, nodes[0], k8s_node)


def _ended(jobs: tuple[Job, ...], expected_job_id: Optional[int]) -> tuple[str, str]:
    if not jobs:
        which = f"job {expected_job_id}" if expected_job_id else "its job"
        return "JobGone", f"Slurm no longer knows {which}"
    last = max(jobs, key=lambda j: j.id)
    reason = {"PREEMPTED": "Preempted", "TIMEOUT": "TimeLimit", "NODE_FAIL": "NodeFail",
              "CANCELLED": "JobCancelled"}.get(last.state, "JobEnded")
    detail = f": {last.state_reason}" if last.state_reason and last.state_reason != "None" else ""
    return reason, f"Slurm job {last.id} ended in state {last.state}{detail}"
