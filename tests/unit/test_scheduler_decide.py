"""Every branch of a lone Pod's decision (a gang of one, keyed by its UID), as a table."""

from __future__ import annotations

import attrs
import pytest

from scheduler import decide as d
from scheduler.decide import Bind, CancelJobs, FindJob, MemberFacts, Nothing, UnitFacts
from sunk.model.slurm import Job, JobAllocation
from sunk.translate.keys import PodKey

UID = "uid-1"
NODE_OF = {"node1": "worker-1", "node2": "worker-2"}


def pod(bound=None, deleting=False, ours=False, problems=(), grace_ends_at=None, node_lost=False, finished="",
        gated=""):
    return MemberFacts(uid=UID, bound_node=bound, deleting=deleting, placed_by_us=ours, problems=tuple(problems),
                       grace_ends_at=grace_ends_at, node_lost=node_lost, finished=finished, gated=gated)


def decide(member, jobs, *, recorded_job_id=None, **kwargs):
    """The unified decision for the lone Pod ``member`` (None: gone), its job-id annotation ``recorded_job_id``."""
    if member is not None and recorded_job_id is not None:
        member = attrs.evolve(member, job_id=recorded_job_id)
    return d.decide(UnitFacts(PodKey(UID), members=(member,) if member is not None else ()), jobs, **kwargs)


# A lone Pod's actions in its own terms: each names the one member, UID.
def Submit():
    return d.Submit((UID,))


def Invalid(problems):
    return d.Invalid(tuple((UID, problem) for problem in problems))


def Waiting(job_id, reason, **kwargs):
    return d.Waiting(job_id, reason, members=(UID,), **kwargs)


def Unschedulable(message):
    return d.Unschedulable((UID,), message)


def DeletePod(reason, message):
    return d.DeleteMembers((UID,), reason, message)


def ReleaseStuckPod(job_id, slurm_nodes, k8s_node):
    return d.ReleaseStuck(UID, job_id, slurm_nodes, k8s_node)


def ReleaseJob(job_id, phase):
    return d.ReleaseJob(UID, job_id, phase)


def bound_to(job_id, slurm_node, k8s_node):
    return d.BindMembers(job_id, ((UID, Bind(job_id, slurm_node, k8s_node)),))


def stuck(node_lost=True, grace_ends_at=1000.0):
    """A bound Pod of ours, terminating; its grace period ends at t=1000."""
    return pod(bound="worker-1", ours=True, deleting=True, grace_ends_at=grace_ends_at, node_lost=node_lost)

TERMINATING_ON_LOST_NODE = ("Pod is terminating on a Node that is NotReady or gone; its job is let go if it is still "
                            "there after its grace period and the margin")


def job(id=7, state="RUNNING", node="node1", reason="", partition=""):
    allocations = (JobAllocation(node=node, cpus=1),) if node and state == "RUNNING" else ()
    return Job(id=id, state=state, nodes=node if state == "RUNNING" else "", allocations=allocations,
               state_reason=reason, partition=partition)


CASES = [
    # (description, pod, jobs, kwargs, expected)
    ("new pod, no job -> submit", pod(), (), {}, Submit()),
    ("invalid pod -> invalid, never submitted", pod(problems=["bad"]), (), {}, Invalid(("bad",))),
    ("gated pod -> nothing: no job, no condition of ours over the apiserver's SchedulingGated",
     pod(gated="kueue.x-k8s.io/admission"), (), {},
     Nothing("its scheduling gates are not all removed: kueue.x-k8s.io/admission")),
    ("gated and invalid -> still nothing until ungated (kube-scheduler does not look at it either)",
     pod(gated="g", problems=["bad"]), (), {"refused": "no"}, Nothing("its scheduling gates are not all removed: g")),
    ("submitted, not yet in cache -> wait, never resubmit", pod(), (), {"expected_job_id": 9},
     Waiting(9, "submitted; waiting for Slurm to report the job", passing=True)),
    ("pending job -> waiting with Slurm's reason", pod(), (job(state="PENDING", reason="QOSMaxCpuPerUserLimit"),),
     {}, Waiting(7, "QOSMaxCpuPerUserLimit", slurm_reason="QOSMaxCpuPerUserLimit")),
    ("pending behind the next scheduling pass -> a passing wait", pod(), (job(state="PENDING", reason="Priority"),),
     {}, Waiting(7, "Priority", passing=True, slurm_reason="Priority")),
    ("pending for resources -> a passing wait", pod(), (job(state="PENDING", reason="Resources"),), {},
     Waiting(7, "Resources", passing=True, slurm_reason="Resources")),
    ("held job -> reported at once", pod(), (job(state="PENDING", reason="JobHeldUser"),), {},
     Waiting(7, "JobHeldUser", slurm_reason="JobHeldUser")),
    ("pending job Slurm has not looked at yet -> a passing wait", pod(), (job(state="PENDING", reason="None"),), {},
     Waiting(7, "PENDING", passing=True)),
    # What the Pod's condition names: the job's partition and Slurm's own reason, apart from the message.
    ("pending behind a drained required node -> its partition and Slurm's reason, at once", pod(),
     (job(state="PENDING", reason="ReqNodeNotAvail", partition="gpu"),), {},
     Waiting(7, "ReqNodeNotAvail", partition="gpu", slurm_reason="ReqNodeNotAvail")),
    ("prolog running -> its partition too", pod(), (job(partition="gpu"),), {},
     Waiting(7, "prolog and node lock in progress", passing=True, partition="gpu", slurm_reason="Prolog")),
    ("no slurmd Pod for its node -> its partition, no Slurm reason", pod(), (job(node="node9", partition="gpu"),),
     {"started": {7: True}}, Waiting(7, "no slurmd Pod found for Slurm node node9", partition="gpu")),
    ("running but not started -> wait for prolog", pod(), (job(),), {},
     Waiting(7, "prolog and node lock in progress", passing=True, slurm_reason="Prolog")),
    ("running and started -> bind to the slurmd Pod's Node", pod(), (job(node="node2"),), {"started": {7: True}},
     bound_to(7, "node2", "worker-2")),
    ("started on a node without slurmd Pod -> wait", pod(), (job(node="node9"),), {"started": {7: True}},
     Waiting(7, "no slurmd Pod found for Slurm node node9")),
    ("job cancelled while pending -> delete pod", pod(), (job(state="CANCELLED"),), {},
     DeletePod("JobCancelled", "Slurm job 7 ended in state CANCELLED")),
    ("job failed by Slurm before binding -> unschedulable, pod kept", pod(),
     (job(state="FAILED", reason="BadConstraints"),), {},
     Unschedulable("Slurm failed job 7 before it started: BadConstraints")),
    ("a refused submission is not retried on the next update", pod(), (), {"refused": "no such QOS"},
     Unschedulable("no such QOS")),
    ("a submission whose answer was lost -> look for its job, never submit blindly", pod(), (),
     {"in_doubt": True}, FindJob()),
    ("a lost submission whose job the cache shows -> that job", pod(),
     (job(state="PENDING", reason="Priority"),), {"in_doubt": True},
     Waiting(7, "Priority", passing=True, slurm_reason="Priority")),
    ("bound pod, job running -> nothing", pod(bound="worker-1", ours=True), (job(),), {}, Nothing("running")),
    ("bound pod, job timed out -> delete", pod(bound="worker-1", ours=True), (job(state="TIMEOUT"),), {},
     DeletePod("TimeLimit", "Slurm job 7 ended in state TIMEOUT")),
    ("bound pod, job preempted -> delete", pod(bound="worker-1", ours=True), (job(state="PREEMPTED"),), {},
     DeletePod("Preempted", "Slurm job 7 ended in state PREEMPTED")),
    ("bound pod, job requeued -> delete", pod(bound="worker-1", ours=True),
     (job(state="PENDING", reason="BeginTime"),), {}, DeletePod("Preempted", "Slurm requeued job 7 (BeginTime)")),
    ("bound pod, job gone from Slurm -> delete", pod(bound="worker-1", ours=True), (), {"recorded_job_id": 7},
     DeletePod("JobGone", "Slurm no longer knows job 7")),
    ("unbound pod whose recorded job aged out of Slurm -> delete, never resubmit", pod(), (),
     {"recorded_job_id": 7}, DeletePod("JobGone", "Slurm no longer knows job 7")),
    ("submission in flight wins over the annotation written after it", pod(), (),
     {"expected_job_id": 7, "recorded_job_id": 7},
     Waiting(7, "submitted; waiting for Slurm to report the job", passing=True)),
    ("bound by someone else -> leave it", pod(bound="worker-1"), (), {}, Nothing("bound by someone else")),
    ("pod deleted -> cancel its active job", None, (job(), job(id=3, state="COMPLETED")), {},
     CancelJobs((7,), "its Pod was deleted")),
    ("pod deleted, job already over -> nothing", None, (job(state="CANCELLED"),), {},
     Nothing("Pod and job are both gone")),
    ("bound pod terminating -> job kept until the pod is gone", pod(bound="worker-1", ours=True, deleting=True),
     (job(),), {}, Nothing("Pod is terminating; its job is cancelled once it is gone")),
    ("terminating on a lost Node, within grace and margin -> wait, and look again when they end", stuck(),
     (job(),), {"now": 1010.0, "stuck_margin": 60.0}, Nothing(TERMINATING_ON_LOST_NODE, recheck_after=50.0)),
    ("terminating on a lost Node past grace and margin -> drain and cancel", stuck(), (job(),),
     {"now": 1060.0, "stuck_margin": 60.0}, ReleaseStuckPod(7, ("node1",), "worker-1")),
    ("terminating on a Ready Node, long past its grace -> its kubelet will finish it: wait",
     stuck(node_lost=False), (job(),), {"now": 9999.0},
     Nothing("Pod is terminating; its job is cancelled once it is gone")),
    ("stuck, its job already let go -> nothing", stuck(), (job(state="CANCELLED"),), {"now": 9999.0},
     Nothing("Pod is terminating; its job is cancelled once it is gone")),
    ("stuck, bound by someone else -> not ours", pod(bound="worker-1", deleting=True, grace_ends_at=1000.0,
                                                     node_lost=True), (job(),), {"now": 9999.0},
     Nothing("Pod is terminating; its job is cancelled once it is gone")),
    ("unbound pod terminating -> cancel", pod(deleting=True), (job(state="PENDING"),), {},
     CancelJobs((7,), "its Pod is being deleted before it was bound")),
    ("two active jobs -> cancel the newer", pod(), (job(id=7), job(id=8, state="PENDING")), {},
     CancelJobs((8,), "duplicate of job 7")),
    # A finished Pod holds nothing: its job ends at once, the Pod stays for its owner.
    ("bound pod succeeded -> its job released at once", pod(bound="worker-1", ours=True, finished="Succeeded"),
     (job(),), {}, ReleaseJob(7, "Succeeded")),
    ("bound pod failed (or rejected by its kubelet) -> its job released",
     pod(bound="worker-1", ours=True, finished="Failed"), (job(),), {}, ReleaseJob(7, "Failed")),
    ("finished pod being deleted -> its job released now, not when it is gone",
     pod(bound="worker-1", ours=True, deleting=True, finished="Succeeded"), (job(),), {},
     ReleaseJob(7, "Succeeded")),
    ("finished on a lost Node (the Pod GC marks it Failed) -> its job kept: it may still run there",
     pod(bound="worker-1", ours=True, finished="Failed", node_lost=True), (job(),), {}, Nothing("running")),
    ("finished on a lost Node, then deleted -> let go as a stuck Pod, with the drain",
     pod(bound="worker-1", ours=True, finished="Failed", node_lost=True, deleting=True, grace_ends_at=1000.0),
     (job(),), {"now": 1060.0, "stuck_margin": 60.0}, ReleaseStuckPod(7, ("node1",), "worker-1")),
    ("finished pod whose job ended -> kept, never deleted for the job's end",
     pod(bound="worker-1", ours=True, finished="Succeeded"), (job(state="CANCELLED"),), {},
     Nothing("the Pod succeeded; it holds no job")),
    ("finished pod, its job gone from Slurm -> kept", pod(bound="worker-1", ours=True, finished="Failed"), (),
     {"recorded_job_id": 7}, Nothing("the Pod failed; it holds no job")),
    # A submitted job decides before validation: an annotation edited since changes nothing of the job.
    ("made invalid while its job runs -> bound as Slurm placed it", pod(problems=["bad"]), (job(node="node2"),),
     {"started": {7: True}}, bound_to(7, "node2", "worker-2")),
    ("made invalid while its job waits -> keeps waiting", pod(problems=["bad"]),
     (job(state="PENDING", reason="Priority"),), {}, Waiting(7, "Priority", passing=True, slurm_reason="Priority")),
    ("made invalid while its submission is in flight -> waits for it", pod(problems=["bad"]), (),
     {"expected_job_id": 9}, Waiting(9, "submitted; waiting for Slurm to report the job", passing=True)),
    ("made invalid after a lost submission -> its job looked for first", pod(problems=["bad"]), (),
     {"in_doubt": True}, FindJob()),
    ("invalid pod whose job ended -> deleted for the job's end", pod(problems=["bad"]), (job(state="CANCELLED"),),
     {}, DeletePod("JobCancelled", "Slurm job 7 ended in state CANCELLED")),
    ("invalid and once refused -> invalid: the Pod as it is now", pod(problems=["bad"]), (),
     {"refused": "no such QOS"}, Invalid(("bad",))),
    ("multi-node allocation -> cancel", pod(), (Job(id=7, state="RUNNING", nodes="node[1-2]", allocations=(
        JobAllocation("node1"), JobAllocation("node2"))),), {"started": {7: True}},
     CancelJobs((7,), "a Pod needs exactly one node; Slurm allocated node[1-2]")),
]


@pytest.mark.parametrize(("description", "facts", "jobs", "kwargs", "expected"), CASES, ids=[c[0] for c in CASES])
def test_decide(description, facts, jobs, kwargs, expected):
    assert decide(facts, jobs, node_of=NODE_OF, **kwargs) == expected


def test_an_old_ended_job_does_not_block_a_new_submission_for_the_same_pod_forever():
    # A Pod whose only job ended is deleted, not resubmitted: Slurm's "end" is final for a Pod.
    action = decide(pod(), (job(state="COMPLETED"),), node_of=NODE_OF)
    assert isinstance(action, d.DeleteMembers)
