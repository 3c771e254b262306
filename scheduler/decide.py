"""What to do next for one unit, given its placeholder job: a pure function.

A unit is what one placeholder job holds nodes for: a gang (sunk/translate/gang.py), or a lone Pod,
a gang of one keyed by its UID (``PodKey``). One ``decide``, one set of actions, each naming the
members it is for; where a lone Pod's rules differ from a gang's (below), ``UnitFacts.alone`` says
so. Both front ends share it: ``sunk-scheduler`` binds Pods itself, the extender lets
kube-scheduler bind (``share``: one member's part of its unit's decision). Keeping the decision
free of I/O makes every case a table row in tests/unit/test_scheduler_decide.py and
test_scheduler_decide_gang.py.

Rules worth stating:
- A bound Pod's job is cancelled only once the Pod is gone, never while it is still
  terminating: Slurm must not hand the node to another job while containers still run
  (a peer cancelled early, and another job landed on a busy node). Except when the Pod's
  Node is NotReady or gone: its kubelet will never finish the Pod, and the job would be held
  for ever. Once the grace period plus ``stuck_margin`` has passed, the job is let go
  (``ReleaseStuck``): its node drained first (``k8s: sunk-stuck: ...``, sunk/translate/drains.py
  and stuckpod.py), then cancelled.
- A job that ends for any reason deletes its Pods, bound or not, with the reason; except a
  job Slurm failed before any was bound (it cannot run as asked): those stay,
  marked Unschedulable, so their owner does not recreate them in a loop.
- Never two jobs for one unit: a submission is remembered (``expected_job_id``) until the
  Slurm cache shows it, and on restart the cache is complete before anything is decided. A
  submission whose answer was lost (``in_doubt``) may have made a job the cache does not show
  yet: the unit's job is looked up in Slurm (``FindJob``) before it is submitted again.

- A Pod with scheduling gates (``spec.schedulingGates``) is not ready to be scheduled, as kube-scheduler
  holds it: no job, no Event, no condition of sunk's (the apiserver's ``SchedulingGated`` stays); a
  gang counts such members as not there yet. The apiserver refuses a gated Pod's binding, and gates are
  only ever removed, so a Pod with a job is never gated.

Where a lone Pod differs: its jobs are all its own (its identity names its UID); a finished Pod's
job is released at once (``ReleaseJob``); it is left alone once someone else bound it; a job of
more than one node is cancelled; and a submitted job decides before the Pod's annotations are
judged (an edit since changes nothing of the job).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Optional, TypeAlias, Union

import attrs
from attrs import frozen

from sunk.model.slurm import Job
from sunk.translate.gang import missing
from sunk.translate.identity import identity_of, member_tag
from sunk.translate.keys import PodKey, UnitKey


@frozen
class Nothing:
    """Nothing to do until something changes (a watch or Slurm event requeues the unit), or until
    ``recheck_after`` seconds have passed, when time alone changes the decision."""

    why: str = ""
    recheck_after: Optional[float] = None


@frozen
class CancelJobs:
    job_ids: tuple[int, ...]
    message: str


@frozen
class FindJob:
    """A submission's answer was lost: look for the unit's job in a fresh read of Slurm before submitting again."""


@frozen
class Submit:
    """Create the unit's placeholder job, for these members (in member order): one node each."""

    members: tuple[str, ...]


@frozen
class Bind:
    """Where one member goes: its job's node, and the Kubernetes Node its slurmd Pod runs on."""

    job_id: int
    slurm_node: str
    k8s_node: str


@frozen
class BindMembers:
    """Bind these members, each to its own node of the job, in one pass."""

    job_id: int
    binds: tuple[tuple[str, Bind], ...]  # (member UID, where)


@frozen
class Waiting:
    """These members wait: for Slurm (``job_id``), or, with no job yet, for the rest of their gang (or a lone
    Pod for its ResourceClaims to be made: ``event`` names which).

    ``passing`` marks the steps every Pod goes through in a second or two (Slurm has not
    listed the job yet, or has not given a reason, or the prolog is running): worth an
    Event only if the Pod stays there, not for each of a few hundred Pods starting at once.
    ``Priority`` and ``Resources`` are among them: in a burst slurmctld gives one of them to
    every job that waits for its next scheduling pass, for well under a second.
    """

    job_id: Optional[int]
    reason: str
    passing: bool = False
    partition: str = ""  # the job's, as Slurm shows it ("" before Slurm lists the job)
    slurm_reason: str = ""  # Slurm's own pending reason ("" when Slurm gave none, or the wait is sunk's own step)
    members: tuple[str, ...] = ()
    recheck_after: Optional[float] = None  # time alone changes the decision then (a member stuck on a lost Node)
    event: str = "WaitingForGang"  # the Event's reason for a wait with no job yet


@frozen
class Invalid:
    """The unit cannot be submitted as written: each member is told why, no retry until a member changes."""

    problems: tuple[tuple[str, str], ...]  # (member UID, message)


@frozen
class Unschedulable:
    """Slurm will not run these members as written: say so on each, keep them, do not resubmit.

    kube-scheduler's convention (PodScheduled=False, reason Unschedulable): a Pod whose
    owner would recreate it must not be deleted in a loop.
    """

    members: tuple[str, ...]
    message: str


@frozen
class DeleteMembers:
    """Delete these members, with the reason (their job ended): their owner makes new ones."""

    members: tuple[str, ...]
    reason: str  # short CamelCase, for the Event
    message: str


@frozen
class ReleaseStuck:
    """A member is stuck terminating on a Node that is NotReady or gone, past its grace period and the margin:
    drain its Slurm node (``slurm_nodes``: all of the job's when its own is not known), then cancel the job.
    A gang's other members are deleted by the job's end; their controller makes them again, whole."""

    member: str  # its UID
    job_id: int
    slurm_nodes: tuple[str, ...]
    k8s_node: str


@frozen
class ReleaseJob:
    """A lone Pod finished (Succeeded, or Failed: a kubelet's rejection too): end its job, so the node is free at
    once; say so on the Pod. The Pod itself is left as it is, for its owner (a Job counts it)."""

    member: str
    job_id: int
    phase: str


# Every action decide() returns, as a closed union: a dispatcher that matches on them ends with
# typing.assert_never, so mypy names any action it forgets.
Action: TypeAlias = Union[Nothing, CancelJobs, FindJob, Submit, BindMembers, Waiting, Invalid, Unschedulable,
                          DeleteMembers, ReleaseStuck, ReleaseJob]


@frozen
class MemberFacts:
    """What the decision needs from one Pod of the unit, extracted by the caller."""

    uid: str
    name: str = ""  # namespace/name, for messages
    bound_node: Optional[str] = None  # spec.nodeName, or the Node this process is binding it to
    slurm_node: Optional[str] = None  # the Slurm node it holds (its slurm-node annotation, or its binding's)
    job_id: Optional[int] = None  # the job that placed it (its job-id annotation, or its binding's)
    deleting: bool = False
    finished: str = ""  # its phase once its containers are done: Succeeded, or Failed (a kubelet's rejection too)
    placed_by_us: bool = False  # carries our job-id annotation, or this process bound it
    problems: tuple[str, ...] = ()  # validation errors, already rendered (unbound members only)
    waiting_for: str = ""  # what it needs before its job is submitted (its ResourceClaims made), rendered
    gated: str = ""  # its scheduling gates, named (unbound members only): not to be scheduled while any is left
    grace_ends_at: Optional[float] = None  # Unix time its grace period ends (deletionTimestamp), when deleting
    node_lost: bool = False  # deleting or finished, and its bound Node is NotReady (Ready False or Unknown) or gone

    @property
    def live(self) -> bool:
        """Runs or waits to: not being deleted, not finished."""
        return not self.deleting and not self.finished


@frozen
class UnitFacts:
    """A unit as the caller sees it: its key, its members in member order, how many it expects, whether they
    agree. A lone Pod is a unit of one (or none, once it is gone) keyed by its ``PodKey``."""

    key: UnitKey
    describe: str = ""  # "Job ns/train", for messages
    members: tuple[MemberFacts, ...] = ()
    expected: Optional[int] = 1  # members the workload wants; None when not known (``why``)
    why: str = ""
    disagreements: tuple[str, ...] = ()  # the live members' (gang.disagreements), rendered
    problems: tuple[str, ...] = ()  # the gang's own (larger than one Slurm job can name), rendered

    @property
    def alone(self) -> bool:
        return isinstance(self.key, PodKey)


# Slurm's reasons that a job in a busy queue shows for a moment on its way to running; a
# limit, a hold, a dependency or an unavailable node says something that lasts.
TRANSIENT_REASONS = frozenset({"", "Priority", "Resources"})
STUCK_ALONE = ("Pod is terminating on a Node that is NotReady or gone; its job is let go if it is still there "
               "after its grace period and the margin")


def decide(
    unit: UnitFacts,
    jobs: tuple[Job, ...],
    *,
    expected_job_id: Optional[int] = None,
    refused: Optional[str] = None,
    node_of: Mapping[str, str] = {},
    started: Mapping[int, bool] = {},
    in_doubt: bool = False,
    now: float = 0.0,
    stuck_margin: float = 60.0,
) -> Action:
    """Next step for one unit. ``jobs`` are Slurm's jobs whose identity names the unit, any state.

    ``expected_job_id`` is a submission this process made that the cache may not show yet.
    ``refused`` is Slurm's answer to a submission it refused, while that is remembered.
    ``node_of`` maps Slurm node name -> Kubernetes Node (through the slurmd Pods).
    ``started[job_id]`` says whether Slurm shows the job started: running, its prolog (the lock) done.
    ``in_doubt``: a submission for this unit was sent and its answer lost.
    ``now`` (Unix time) and ``stuck_margin`` (seconds past the grace period) judge a member stuck
    terminating on a Node that is NotReady or gone.

    A gang's rules, beyond a lone Pod's:
    - The job is submitted once the members the workload expects all exist, for exactly those
      (the first ``expected`` live, unbound members that no job was submitted for): one node each.
    - While it runs, each unbound live member takes a node of the job no member holds, in member
      order and in Slurm's node order (the leader lands on the batch host first); all at once. A
      member deleted or finished frees its node once it is gone or done, never while it terminates,
      and the member its controller makes again takes it.
    - The job is cancelled once no member runs or waits any more (the workload was deleted, or every
      member finished): members terminating on its nodes keep it until they are gone.
    - A member stuck on a lost Node lets the job go whatever the other members do.
    - A job that ends deletes the members it was submitted for or bound, not those made after it ended.
    """
    active = tuple(j for j in jobs if j.active)
    if unit.alone and not unit.members:
        if active:
            return CancelJobs(tuple(j.id for j in active), "its Pod was deleted")
        return Nothing("Pod and job are both gone")
    if len(active) > 1:
        # Should never happen; if it does, keep the oldest and cancel the rest.
        keep = min(active, key=lambda j: j.id)
        return CancelJobs(tuple(j.id for j in active if j.id != keep.id), f"duplicate of job {keep.id}")
    job = active[0] if active else None
    job_of = _job_of(unit, jobs, job)

    stuck_due: Optional[float] = None  # the earliest a member stuck on a lost Node lets the job go
    if job is not None:
        for m in unit.members:
            if (m.deleting and m.bound_node and m.placed_by_us and m.node_lost and m.grace_ends_at is not None
                    and job_of(m) == job.id):
                due = m.grace_ends_at + stuck_margin
                if now >= due:
                    nodes = (m.slurm_node,) if m.slurm_node in job.node_list else job.node_list
                    return ReleaseStuck(m.uid, job.id, nodes, m.bound_node)
                stuck_due = due if stuck_due is None else min(stuck_due, due)
    if unit.alone:
        action = _alone(unit.members[0], jobs, job, expected_job_id=expected_job_id, refused=refused,
                        node_of=node_of, started=started, in_doubt=in_doubt)
    else:
        action = _gang(unit, jobs, job, job_of, expected_job_id=expected_job_id, refused=refused,
                       node_of=node_of, started=started, in_doubt=in_doubt)
    if stuck_due is not None and isinstance(action, (Nothing, Waiting)):
        recheck = min(stuck_due - now, action.recheck_after or stuck_due - now)
        if isinstance(action, Waiting):
            return attrs.evolve(action, recheck_after=recheck)
        if unit.alone:
            return Nothing(STUCK_ALONE, recheck_after=recheck)
        return Nothing(f"{action.why}; a member is terminating on a Node that is NotReady or gone: the job is let "
                       f"go if it is still there after its grace period and the margin", recheck_after=recheck)
    return action


def _job_of(unit: UnitFacts, jobs: tuple[Job, ...], job: Optional[Job]) -> Callable[[MemberFacts], Optional[int]]:
    """Which job placed a member, or was submitted for it: a lone Pod's active job is its own (its identity
    names its UID); a gang's member's is its annotation's, else the newest job whose identity lists its tag."""
    if unit.alone:
        return lambda member: job.id if job is not None else member.job_id
    submitted_for = {j.id: identity.members for j in jobs if (identity := identity_of(j))}

    def job_of(member: MemberFacts) -> Optional[int]:
        if member.job_id is not None:
            return member.job_id
        tag = member_tag(member.uid)
        return max((job_id for job_id, tags in submitted_for.items() if tag in tags), default=None)

    return job_of


def _alone(pod: MemberFacts, jobs: tuple[Job, ...], job: Optional[Job], *, expected_job_id: Optional[int],
           refused: Optional[str], node_of: Mapping[str, str], started: Mapping[int, bool],
           in_doubt: bool) -> Action:
    """``decide`` for a lone Pod that exists, past its duplicates and a stuck release."""
    me = (pod.uid,)
    if pod.finished and not pod.node_lost:
        # It holds nothing any more: its job, its strict lock and its GPUs are freed now, not when
        # somebody deletes the Pod. (What a Job or a user keeps the Pod for, its logs and its count,
        # stays.) Not on a Node that is NotReady or gone: a Pod marked Failed there (by the Pod
        # garbage collector) may still run, and is let go as a stuck one once deleted.
        if job is not None:
            return ReleaseJob(pod.uid, job.id, pod.finished)
        return Nothing(f"the Pod {pod.finished.lower()}; it holds no job")

    if pod.deleting:
        if job is not None and pod.bound_node is None:
            return CancelJobs((job.id,), "its Pod is being deleted before it was bound")
        return Nothing("Pod is terminating; its job is cancelled once it is gone")

    if pod.bound_node is not None:
        if not pod.placed_by_us:
            return Nothing("bound by someone else")
        if job is None:
            return DeleteMembers(me, *_ended(jobs, pod.job_id))
        if job.state == "PENDING":
            return DeleteMembers(me, "Preempted", f"Slurm requeued job {job.id} ({job.state_reason or 'preempted'})")
        return Nothing("running")

    # Not bound yet. A submitted job decides before the Pod's annotations are judged: they were read at
    # submission, and an edit since changes nothing of the job (the seeds' rule), so it is bound as Slurm
    # placed it, or ends with the Pod. Only a Pod about to be submitted is validated.
    if job is None:
        if expected_job_id is not None and not any(j.id == expected_job_id for j in jobs):
            return Waiting(expected_job_id, "submitted; waiting for Slurm to report the job", passing=True, members=me)
        if jobs and max(jobs, key=lambda j: j.id).state == "FAILED":
            last = max(jobs, key=lambda j: j.id)
            return Unschedulable(me, f"Slurm failed job {last.id} before it started: "
                                     f"{last.state_reason or 'no reason'}")
        if jobs or pod.job_id is not None:
            return DeleteMembers(me, *_ended(jobs, pod.job_id))
        if pod.gated:
            return Nothing(f"its scheduling gates are not all removed: {pod.gated}")
        if in_doubt:
            return FindJob()
        if pod.problems:
            return Invalid(((pod.uid, "; ".join(pod.problems)),))
        if refused is not None:
            return Unschedulable(me, refused)
        if pod.waiting_for:
            return Waiting(None, pod.waiting_for, passing=True, members=me, event="WaitingForResourceClaims")
        return Submit(me)
    if (waiting := _slurm_wait(job, started, me)) is not None:
        return waiting
    if len(job.node_list) != 1:
        return CancelJobs((job.id,), f"a Pod needs exactly one node; Slurm allocated {job.nodes or 'none'}")
    return _place(job, [pod], job.node_list, node_of, "")


def _gang(gang: UnitFacts, jobs: tuple[Job, ...], job: Optional[Job],
          job_of: Callable[[MemberFacts], Optional[int]], *, expected_job_id: Optional[int],
          refused: Optional[str], node_of: Mapping[str, str], started: Mapping[int, bool],
          in_doubt: bool) -> Action:
    """``decide`` for a gang, past a member stuck on a lost Node: ``job`` is the gang's active job, if any."""
    members = gang.members
    live = [m for m in members if m.live and not m.gated]  # (a gated member is not there yet: it holds no job)
    holding = [m for m in members if m.deleting and m.bound_node and m.placed_by_us]
    if job is not None and not live and not holding:
        why = ("is gone" if not members else "not yet ungated, or finished or being deleted"
               if any(m.live for m in members) else "has finished or is being deleted")
        return CancelJobs((job.id,), f"every member of {gang.describe} {why}")
    if not members:
        return Nothing("gang and job are both gone")

    # Members of jobs that have ended (newest first): deleted with the job's end, or kept Unschedulable.
    for ended in sorted((j for j in jobs if not j.active), key=lambda j: -j.id):
        theirs = [m for m in live if job_of(m) == ended.id]
        if not theirs:
            continue
        if ended.state == "FAILED" and not any(m.bound_node for m in members if job_of(m) == ended.id):
            return Unschedulable(_uids(theirs), f"Slurm failed job {ended.id} of {gang.describe} before it "
                                                f"started: {ended.state_reason or 'no reason'}")
        return DeleteMembers(_uids(theirs), *_ended((ended,), ended.id))
    known = {j.id for j in jobs}
    lost = [m for m in live if m.job_id is not None and m.job_id not in known and m.job_id != expected_job_id]
    if lost:
        return DeleteMembers(_uids(lost), *_ended((), lost[0].job_id))

    waiting = [m for m in live if m.bound_node is None]
    if job is not None:
        return _running_gang(gang, job, waiting, job_of, node_of, started)

    if expected_job_id is not None:
        return Waiting(expected_job_id, "submitted; waiting for Slurm to report the job", passing=True,
                       members=_uids(waiting))
    fresh = [m for m in waiting if job_of(m) is None]
    if not fresh:
        gated = [m for m in members if m.live and m.gated]
        return Nothing(f"{len(gated)} member(s) of {gang.describe} not yet ungated" if gated else
                       "no member waits for a job")
    if refused is not None:
        return Unschedulable(_uids(fresh), refused)
    if in_doubt:
        return FindJob()
    invalid = [m for m in fresh if m.problems]
    if invalid:
        named = ", ".join(m.name for m in invalid)
        return Invalid(tuple((m.uid, "; ".join(m.problems) if m.problems else
                              f"{gang.describe} cannot be submitted: {named} is not valid") for m in fresh))
    if gang.expected is None:
        return Waiting(None, f"{gang.describe}: {gang.why}", passing=True, members=_uids(fresh))
    if gang.expected == 0:
        return Nothing(f"{gang.describe} wants no Pod running now")
    if gang.problems:
        message = "; ".join(gang.problems)
        return Invalid(tuple((m.uid, message) for m in fresh))
    if len(fresh) < gang.expected:
        return Waiting(None, missing(gang.describe, len(fresh), gang.expected), passing=True, members=_uids(fresh))
    if claims_waiting := [m.waiting_for for m in fresh[:gang.expected] if m.waiting_for]:
        return Waiting(None, f"{gang.describe}: a member is {claims_waiting[0]}", passing=True, members=_uids(fresh),
                       event="WaitingForResourceClaims")
    if gang.disagreements:
        message = "; ".join(gang.disagreements)
        return Invalid(tuple((m.uid, message) for m in fresh))
    return Submit(_uids(fresh[:gang.expected]))


def _running_gang(gang: UnitFacts, job: Job, waiting: list[MemberFacts],
                  job_of: Callable[[MemberFacts], Optional[int]], node_of: Mapping[str, str],
                  started: Mapping[int, bool]) -> Action:
    """The gang's job is pending or running: bind whoever waits to the nodes no member holds."""
    members = gang.members
    bound = [m for m in members if m.live and m.bound_node and m.placed_by_us and job_of(m) == job.id]
    if job.state == "PENDING" and bound:
        return DeleteMembers(_uids(bound), "Preempted",
                             f"Slurm requeued job {job.id} ({job.state_reason or 'preempted'})")
    if not waiting:
        return Nothing("running")
    if (wait := _slurm_wait(job, started, _uids(waiting))) is not None:
        return wait
    # Nodes held: by members bound by this job that still run or terminate there (a finished one holds none).
    held = {m.slurm_node for m in members if m.bound_node and m.placed_by_us and not m.finished
            and job_of(m) == job.id}
    return _place(job, waiting, [node for node in job.node_list if node not in held], node_of, gang.describe)


def _slurm_wait(job: Job, started: Mapping[int, bool], members: tuple[str, ...]) -> Optional[Waiting]:
    """Why ``members`` still wait for Slurm's ``job`` (pending, or its prolog locking the nodes); None once it
    has started."""
    if job.state != "RUNNING":
        reason = job.state_reason if job.state_reason not in ("", "None") else ""
        return Waiting(job.id, reason or job.state, passing=reason in TRANSIENT_REASONS, partition=job.partition,
                       slurm_reason=reason, members=members)
    if not started.get(job.id, False):
        return Waiting(job.id, "prolog and node lock in progress", passing=True, partition=job.partition,
                       slurm_reason="Prolog", members=members)
    return None


def _place(job: Job, waiting: list[MemberFacts], free: list[str] | tuple[str, ...], node_of: Mapping[str, str],
           describe: str) -> Action:
    """Each waiting member to a free node of the started job, in order, where a slurmd Pod serves it."""
    binds = []
    unknown = []
    for member, node in zip(waiting, free, strict=False):  # (more waiting than free nodes, or fewer)
        k8s_node = node_of.get(node)
        if k8s_node is None:
            unknown.append(node)
        else:
            binds.append((member.uid, Bind(job.id, node, k8s_node)))
    if binds:
        return BindMembers(job.id, tuple(binds))
    if unknown:
        return Waiting(job.id, f"no slurmd Pod found for Slurm node {', '.join(unknown)}", partition=job.partition,
                       members=_uids(waiting))
    return Waiting(job.id, f"each of its {len(job.node_list)} nodes holds a member of {describe}; waiting for one "
                           f"to be freed", partition=job.partition, members=_uids(waiting))


def _ended(jobs: tuple[Job, ...], expected_job_id: Optional[int]) -> tuple[str, str]:
    if not jobs:
        which = f"job {expected_job_id}" if expected_job_id else "its job"
        return "JobGone", f"Slurm no longer knows {which}"
    last = max(jobs, key=lambda j: j.id)
    reason = {"PREEMPTED": "Preempted", "TIMEOUT": "TimeLimit", "NODE_FAIL": "NodeFail",
              "CANCELLED": "JobCancelled"}.get(last.state, "JobEnded")
    detail = f": {last.state_reason}" if last.state_reason and last.state_reason != "None" else ""
    return reason, f"Slurm job {last.id} ended in state {last.state}{detail}"


Share: TypeAlias = Union[Action, Bind]
"""One member's part of a decision: an action narrowed to it, or where it is bound now."""


def share(action: Action, uid: str) -> Share:
    """One member's part of its unit's decision: what the extender's verbs answer for it (its own ``Bind``, or
    why it waits). A wait for the rest of the gang is ``Nothing`` for it."""
    match action:
        case BindMembers(binds=binds):
            mine = next((bind for member, bind in binds if member == uid), None)
            return mine if mine is not None else Nothing("the gang's other members are being bound")
        case Waiting(members=members, job_id=job_id):
            if uid in members and job_id is not None:
                return attrs.evolve(action, members=(uid,))
            return Nothing(action.reason if uid in members else "")
        case Submit(members=members):
            return Submit((uid,)) if uid in members else Nothing("waiting for a node of the gang's job to be freed")
        case Invalid(problems=problems):
            mine_problems = tuple((member, message) for member, message in problems if member == uid)
            return Invalid(mine_problems) if mine_problems else Nothing("")
        case Unschedulable(members=members) | DeleteMembers(members=members):
            return attrs.evolve(action, members=(uid,)) if uid in members else Nothing("")
        case ReleaseStuck(member=member, job_id=job_id, k8s_node=k8s_node):
            return action if member == uid else Nothing(
                f"the gang's job {job_id} is let go: a member is stuck terminating on Node {k8s_node}")
        case ReleaseJob(member=member):
            return action if member == uid else Nothing("")
        case FindJob() | CancelJobs() | Nothing():
            return action
    raise AssertionError(f"unknown action {action!r}")  # (mypy: every Action is matched above)


def _uids(members: Iterable[MemberFacts]) -> tuple[str, ...]:
    return tuple(m.uid for m in members)
