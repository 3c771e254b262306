"""Every branch of a gang's decision, as a table: wait for all, one job, bind all, free and refill, end together."""

from __future__ import annotations

import pytest

from scheduler.decide import (
    Bind,
    BindMembers,
    CancelJobs,
    DeleteMembers,
    FindJob,
    Invalid,
    MemberFacts,
    Nothing,
    ReleaseStuck,
    Submit,
    UnitFacts,
    Unschedulable,
    Waiting,
    decide,
)
from sunk.model.slurm import Job, JobAllocation
from sunk.translate.identity import PlaceholderIdentity, member_tag
from sunk.translate.keys import GangKey

KEY = GangKey("team", "job/u")
DESCRIBE = "Job team/train"
NODE_OF = {f"node{i}": f"worker-{i}" for i in range(1, 5)}


def m(i, *, bound=None, slurm=None, job_id=None, deleting=False, terminal=False, ours=None, problems=(),
      grace_ends_at=None, node_lost=False, waiting_for="", gated=""):
    """Member train-<i> (uid-<i>); ``bound`` a Node, ``slurm`` the Slurm node it holds."""
    if ours is None:
        ours = bound is not None
    return MemberFacts(uid=f"uid-{i}", name=f"team/train-{i}", bound_node=bound, slurm_node=slurm, job_id=job_id,
                       deleting=deleting, finished="Succeeded" if terminal else "", placed_by_us=ours,
                       problems=tuple(problems), grace_ends_at=grace_ends_at, node_lost=node_lost,
                       waiting_for=waiting_for, gated=gated)


def facts(*members, expected=3, why="", disagreements=(), problems=()):
    return UnitFacts(KEY, describe=DESCRIBE, members=tuple(members), expected=expected, why=why,
                     disagreements=tuple(disagreements),
                     problems=tuple(problems))


def job(id=7, state="RUNNING", nodes=("node1", "node2", "node3"), reason="", members=(0, 1, 2),
        field="admin_comment"):
    """The gang's job, its identity in ``field`` (the AdminComment, where sunk puts it, unless told)."""
    running = state == "RUNNING"
    identity = PlaceholderIdentity(GangKey("team", "job/u"), "team", size=len(nodes),
                            members=tuple(member_tag(f"uid-{i}") for i in members), scheduler="s").encode()
    return Job(id=id, state=state, state_reason=reason, **{field: identity},
               nodes=",".join(nodes) if running else "",
               allocations=tuple(JobAllocation(node=n) for n in nodes) if running else ())


def uids(*indexes):
    return tuple(f"uid-{i}" for i in indexes)


def bind(i, node, job_id=7):
    return (f"uid-{i}", Bind(job_id, f"node{node}", f"worker-{node}"))


ALL_BOUND = (m(0, bound="worker-1", slurm="node1", job_id=7), m(1, bound="worker-2", slurm="node2", job_id=7),
             m(2, bound="worker-3", slurm="node3", job_id=7))
STARTED = {"started": {7: True}}

CASES = [
    # (description, gang facts, jobs, kwargs, expected)
    # -- forming: all or nothing ---------------------------------------------------------------------------
    ("no member yet, no job", facts(), (), {}, Nothing("gang and job are both gone")),
    ("1 of 3 members -> the gang waits, the wait says how many exist", facts(m(0)), (), {},
     Waiting(None, "Job team/train: 1 of 3 members exist", passing=True, members=uids(0))),
    ("2 of 3", facts(m(0), m(1)), (), {},
     Waiting(None, "Job team/train: 2 of 3 members exist", passing=True, members=uids(0, 1))),
    ("all 3 -> one job for the 3", facts(m(0), m(1), m(2)), (), {}, Submit(uids(0, 1, 2))),
    ("a gang of one", facts(m(0), expected=1), (), {}, Submit(uids(0))),
    ("more than expected -> the first ones, in member order; the rest wait for a freed node",
     facts(m(0), m(1), m(2), m(3)), (), {}, Submit(uids(0, 1, 2))),
    ("a member being deleted does not count", facts(m(0), m(1), m(2, deleting=True)), (), {},
     Waiting(None, "Job team/train: 2 of 3 members exist", passing=True, members=uids(0, 1))),
    ("a finished member does not count", facts(m(0), m(1), m(2, terminal=True)), (), {},
     Waiting(None, "Job team/train: 2 of 3 members exist", passing=True, members=uids(0, 1))),
    ("size not known yet (the Job not in the cache) -> a passing wait, saying why",
     facts(m(0), m(1), m(2), expected=None, why="waiting for Job team/train to be known"), (), {},
     Waiting(None, "Job team/train: waiting for Job team/train to be known", passing=True, members=uids(0, 1, 2))),
    ("the workload wants none running (suspended, complete)", facts(m(0), expected=0), (), {},
     Nothing("Job team/train wants no Pod running now")),
    ("an invalid member -> every member is told, no job", facts(m(0), m(1, problems=["cpu: zero"]), m(2)), (), {},
     Invalid((("uid-0", "Job team/train cannot be submitted: team/train-1 is not valid"),
                  ("uid-1", "cpu: zero"),
                  ("uid-2", "Job team/train cannot be submitted: team/train-1 is not valid")))),
    ("an invalid member before the gang fills -> said at once", facts(m(0, problems=["bad"])), (), {},
     Invalid((("uid-0", "bad"),))),
    ("a member whose claims are not made yet -> the gang waits for them, no job",
     facts(m(0), m(1, waiting_for="waiting for its ResourceClaims to be made: c1"), m(2)), (), {},
     Waiting(None, "Job team/train: a member is waiting for its ResourceClaims to be made: c1", passing=True,
             members=uids(0, 1, 2), event="WaitingForResourceClaims")),
    ("a gated member does not count until ungated; the others wait for it",
     facts(m(0), m(1, gated="kueue"), m(2)), (), {},
     Waiting(None, "Job team/train: 2 of 3 members exist", passing=True, members=uids(0, 2))),
    ("every member gated (Kueue gates a Job's Pods at creation) -> nothing, no job, no condition",
     facts(m(0, gated="kueue"), m(1, gated="kueue"), m(2, gated="kueue")), (), {},
     Nothing("3 member(s) of Job team/train not yet ungated")),
    ("a gated replacement while the job runs is never bound (the apiserver would refuse it); the others are",
     facts(m(0, bound="worker-1", slurm="node1", job_id=7), m(1, gated="g"), m(2)), (job(state="RUNNING"),), STARTED,
     BindMembers(7, (bind(2, 2),))),
    ("the gang's bound members gone, one gated left -> its job is cancelled (a gated Pod holds no job)",
     facts(m(3, gated="kueue")), (job(state="RUNNING"),), STARTED,
     CancelJobs((7,), "every member of Job team/train not yet ungated, or finished or being deleted")),
    ("pending, only a gated member left -> cancelled too", facts(m(3, gated="kueue")),
     (job(state="PENDING", reason="Resources"),), {},
     CancelJobs((7,), "every member of Job team/train not yet ungated, or finished or being deleted")),
    ("members disagree -> an Event naming the annotation and Pods, no job",
     facts(m(0), m(1), m(2), disagreements=["sunk.coreweave.com/qos: the gang's Pods disagree: ..."]), (), {},
     Invalid(tuple((u, "sunk.coreweave.com/qos: the gang's Pods disagree: ...") for u in uids(0, 1, 2)))),
    ("a gang larger than one job's Extra can name -> said at once, no job",
     facts(m(0), expected=500, problems=["Job team/train: a gang of 500 members does not fit"]), (), {},
     Invalid((("uid-0", "Job team/train: a gang of 500 members does not fit"),))),
    ("submitted, not listed yet -> wait, never submit again", facts(m(0), m(1), m(2)), (), {"expected_job_id": 9},
     Waiting(9, "submitted; waiting for Slurm to report the job", passing=True, members=uids(0, 1, 2))),
    ("Slurm refused the job -> Unschedulable, not resubmitted", facts(m(0), m(1), m(2)), (),
     {"refused": "Slurm refused the placeholder job: Invalid qos"},
     Unschedulable(uids(0, 1, 2), "Slurm refused the placeholder job: Invalid qos")),
    ("the answer to the submission was lost -> look first", facts(m(0), m(1), m(2)), (), {"in_doubt": True},
     FindJob()),
    # -- waiting for Slurm, whole -----------------------------------------------------------------------------
    ("pending with a lasting reason -> reported at once", facts(m(0), m(1), m(2)),
     (job(state="PENDING", reason="QOSMaxNodePerUserLimit"),), {},
     Waiting(7, "QOSMaxNodePerUserLimit", slurm_reason="QOSMaxNodePerUserLimit", members=uids(0, 1, 2))),
    ("pending for resources -> a passing wait, nothing bound", facts(m(0), m(1), m(2)),
     (job(state="PENDING", reason="Resources"),), {},
     Waiting(7, "Resources", passing=True, slurm_reason="Resources", members=uids(0, 1, 2))),
    ("running, prolog still locking the nodes -> wait", facts(m(0), m(1), m(2)), (job(),), {},
     Waiting(7, "prolog and node lock in progress", passing=True, slurm_reason="Prolog", members=uids(0, 1, 2))),
    # -- bound, all at once ---------------------------------------------------------------------------------------
    ("started -> every member to its own node, leader on the first (the batch host)", facts(m(0), m(1), m(2)),
     (job(),), STARTED, BindMembers(7, (bind(0, 1), bind(1, 2), bind(2, 3)))),
    ("Slurm's node order, not the members' names", facts(m(0), m(1), m(2)),
     (job(nodes=("node2", "node3", "node4")),), STARTED, BindMembers(7, (bind(0, 2), bind(1, 3), bind(2, 4)))),
    ("one member bound already (an earlier pass) -> the others to the other nodes",
     facts(m(0, bound="worker-1", slurm="node1", job_id=7), m(1), m(2)), (job(),), STARTED,
     BindMembers(7, (bind(1, 2), bind(2, 3)))),
    ("a node without a slurmd Pod -> the others are bound, that one waits",
     facts(m(0), m(1), m(2)), (job(nodes=("node1", "node2", "node9")),), STARTED,
     BindMembers(7, (bind(0, 1), bind(1, 2)))),
    ("only that node left -> wait, saying which", facts(m(0, bound="worker-1", slurm="node1", job_id=7), m(1)),
     (job(nodes=("node1", "node9")),), STARTED,
     Waiting(7, "no slurmd Pod found for Slurm node node9", members=uids(1))),
    ("all bound -> nothing", facts(*ALL_BOUND), (job(),), STARTED, Nothing("running")),
    # -- members replaced while the job runs ------------------------------------------------------------------------
    ("a member terminating still holds its node: its replacement waits",
     facts(ALL_BOUND[0], ALL_BOUND[1], m(2, bound="worker-3", slurm="node3", job_id=7, deleting=True), m(3)),
     (job(),), STARTED,
     Waiting(7, "each of its 3 nodes holds a member of Job team/train; waiting for one to be freed", members=uids(3))),
    ("a member gone -> its replacement takes the freed node", facts(ALL_BOUND[0], ALL_BOUND[1], m(3)), (job(),),
     STARTED, BindMembers(7, (bind(3, 3),))),
    ("a member failed -> its replacement takes its node", facts(*ALL_BOUND[:2], m(2, bound="worker-3", slurm="node3",
                                                                                job_id=7, terminal=True), m(3)),
     (job(),), STARTED, BindMembers(7, (bind(3, 3),))),
    ("an extra member beyond the job's nodes waits for a freed one", facts(*ALL_BOUND, m(3)), (job(),), STARTED,
     Waiting(7, "each of its 3 nodes holds a member of Job team/train; waiting for one to be freed", members=uids(3))),
    ("a replacement while the job is pending waits with the others", facts(m(0), m(1), m(3)),
     (job(state="PENDING", reason="Priority"),), {},
     Waiting(7, "Priority", passing=True, slurm_reason="Priority", members=uids(0, 1, 3))),
    # -- the end --------------------------------------------------------------------------------------------------
    ("every member gone (the workload deleted) -> the job is cancelled", facts(), (job(),), {},
     CancelJobs((7,), "every member of Job team/train is gone")),
    ("every member being deleted before it was bound -> cancelled at once",
     facts(m(0, deleting=True), m(1, deleting=True), m(2, deleting=True)), (job(state="PENDING"),), {},
     CancelJobs((7,), "every member of Job team/train has finished or is being deleted")),
    ("bound members terminating keep the job until they are gone",
     facts(*(m(i, bound=f"worker-{i + 1}", slurm=f"node{i + 1}", job_id=7, deleting=True) for i in range(3))),
     (job(),), STARTED, Nothing("running")),
    ("every member finished -> the job is cancelled",
     facts(*(m(i, bound=f"worker-{i + 1}", slurm=f"node{i + 1}", job_id=7, terminal=True) for i in range(3))),
     (job(),), STARTED, CancelJobs((7,), "every member of Job team/train has finished or is being deleted")),
    ("Slurm ended the job -> every member it placed is deleted, naming the job",
     facts(*ALL_BOUND), (job(state="CANCELLED"),), {},
     DeleteMembers(uids(0, 1, 2), "JobCancelled", "Slurm job 7 ended in state CANCELLED")),
    ("preempted -> deleted as preempted", facts(*ALL_BOUND), (job(state="PREEMPTED"),), {},
     DeleteMembers(uids(0, 1, 2), "Preempted", "Slurm job 7 ended in state PREEMPTED")),
    ("scancel while pending -> the members it was submitted for are deleted",
     facts(m(0), m(1), m(2)), (job(state="CANCELLED"),), {},
     DeleteMembers(uids(0, 1, 2), "JobCancelled", "Slurm job 7 ended in state CANCELLED")),
    ("an identity in the job's Extra (its user's to write) names no member: they form the next gang",
     facts(m(0), m(1), m(2)), (job(state="CANCELLED", field="extra"),), {}, Submit(uids(0, 1, 2))),
    ("members made after the job ended are not its: they form the next gang",
     facts(m(3), m(4), m(5)), (job(state="CANCELLED"),), {}, Submit(uids(3, 4, 5))),
    ("a replacement bound to the ended job is deleted too",
     facts(*ALL_BOUND[:2], m(3, bound="worker-3", slurm="node3", job_id=7)), (job(state="TIMEOUT"),), {},
     DeleteMembers(uids(0, 1, 3), "TimeLimit", "Slurm job 7 ended in state TIMEOUT")),
    ("finished members of an ended job are left as they are",
     facts(*(m(i, bound=f"worker-{i + 1}", slurm=f"node{i + 1}", job_id=7, terminal=True) for i in range(3))),
     (job(state="CANCELLED"),), {}, Nothing("no member waits for a job")),
    ("the ended job's members go first, then the next gang forms", facts(m(0), m(3), m(4)),
     (job(state="CANCELLED"),), {}, DeleteMembers(uids(0), "JobCancelled", "Slurm job 7 ended in state CANCELLED")),
    ("Slurm failed the job before any member was bound -> kept, Unschedulable, not resubmitted",
     facts(m(0), m(1), m(2)), (job(state="FAILED", reason="BadConstraints"),), {},
     Unschedulable(uids(0, 1, 2), "Slurm failed job 7 of Job team/train before it started: BadConstraints")),
    ("requeued (preemption with requeue) while bound -> the bound members are deleted",
     facts(*ALL_BOUND), (job(state="PENDING", reason="BeginTime"),), {},
     DeleteMembers(uids(0, 1, 2), "Preempted", "Slurm requeued job 7 (BeginTime)")),
    ("a member whose recorded job Slurm no longer knows is deleted, never resubmitted",
     facts(m(0, job_id=5), m(1), m(2)), (), {},
     DeleteMembers(uids(0), "JobGone", "Slurm no longer knows job 5")),
    # -- a member stuck terminating on a Node that is NotReady or gone (decide's ReleaseStuckPod, for a gang) ------
    ("a member terminating on a lost Node, within its grace and the margin -> wait, rechecked when it is due",
     facts(*ALL_BOUND[:2], m(2, bound="worker-3", slurm="node3", job_id=7, deleting=True, grace_ends_at=1000.0,
                             node_lost=True)), (job(),), {**STARTED, "now": 1030.0, "stuck_margin": 60.0},
     Nothing("running; a member is terminating on a Node that is NotReady or gone: the job is let go if it is still "
             "there after its grace period and the margin", recheck_after=30.0)),
    ("... its replacement waiting for a node meanwhile -> the wait, rechecked when it is due",
     facts(*ALL_BOUND[:2], m(2, bound="worker-3", slurm="node3", job_id=7, deleting=True, grace_ends_at=1000.0,
                             node_lost=True), m(3)), (job(),), {**STARTED, "now": 1030.0, "stuck_margin": 60.0},
     Waiting(7, "each of its 3 nodes holds a member of Job team/train; waiting for one to be freed",
             recheck_after=30.0, members=uids(3))),
    ("past its grace and the margin -> its node drained and the gang's job let go, the others still running",
     facts(*ALL_BOUND[:2], m(2, bound="worker-3", slurm="node3", job_id=7, deleting=True, grace_ends_at=1000.0,
                             node_lost=True), m(3)), (job(),), {**STARTED, "now": 1060.0, "stuck_margin": 60.0},
     ReleaseStuck("uid-2", 7, ("node3",), "worker-3")),
    ("the workload deleted, one member stuck on a lost Node -> the job is let go all the same",
     facts(m(0, bound="worker-1", slurm="node1", job_id=7, deleting=True, grace_ends_at=1000.0, node_lost=True)),
     (job(),), {**STARTED, "now": 2000.0}, ReleaseStuck("uid-0", 7, ("node1",), "worker-1")),
    ("its Slurm node not known -> every node of the job is drained",
     facts(*ALL_BOUND[:2], m(2, bound="worker-3", job_id=7, deleting=True, grace_ends_at=1000.0, node_lost=True)),
     (job(),), {**STARTED, "now": 2000.0}, ReleaseStuck("uid-2", 7, ("node1", "node2", "node3"), "worker-3")),
    ("a member terminating on a Ready Node keeps the job, however long",
     facts(*ALL_BOUND[:2], m(2, bound="worker-3", slurm="node3", job_id=7, deleting=True, grace_ends_at=1000.0)),
     (job(),), {**STARTED, "now": 9000.0}, Nothing("running")),
    ("a stuck member placed by an earlier job of the gang: not this job's to let go",
     facts(*ALL_BOUND[:2], m(2, bound="worker-3", slurm="node3", job_id=5, deleting=True, grace_ends_at=1000.0,
                             node_lost=True)), (job(),), {**STARTED, "now": 9000.0}, Nothing("running")),
    ("a stuck member someone else bound: not ours",
     facts(*ALL_BOUND[:2], m(2, bound="worker-3", slurm="node3", job_id=7, deleting=True, grace_ends_at=1000.0,
                             node_lost=True, ours=False)), (job(),), {**STARTED, "now": 9000.0}, Nothing("running")),
    ("two active jobs (never made, but if) -> keep the oldest",
     facts(m(0), m(1), m(2)), (job(id=8, state="PENDING"), job(id=7, state="PENDING")), {},
     CancelJobs((8,), "duplicate of job 7")),
]


@pytest.mark.parametrize(("description", "gang", "jobs", "kwargs", "expected"), CASES, ids=[c[0] for c in CASES])
def test_decide(description, gang, jobs, kwargs, expected):
    assert decide(gang, jobs, **{"node_of": NODE_OF, **kwargs}) == expected


def test_members_are_bound_once_each_to_distinct_nodes_whatever_the_order_of_arrival():
    """However many passes it takes, the gang ends on N distinct nodes of the job."""
    members = [m(i) for i in range(3)]
    the_job = job()
    for _ in range(4):
        action = decide(facts(*members), (the_job,), node_of=NODE_OF, started={7: True})
        if not isinstance(action, BindMembers):
            break
        first_uid, where = action.binds[0]  # one bind lands per pass, the worst case
        i = int(first_uid.split("-")[1])
        members[i] = m(i, bound=where.k8s_node, slurm=where.slurm_node, job_id=7)
    assert sorted(x.slurm_node for x in members) == ["node1", "node2", "node3"]
    assert decide(facts(*members), (the_job,), node_of=NODE_OF, started={7: True}) == Nothing("running")
