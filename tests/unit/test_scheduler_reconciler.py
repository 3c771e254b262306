"""PodScheduler's own bookkeeping around the pure decision: binding once, waiting quietly, writing little."""

from __future__ import annotations

import contextlib
import time

import pytest
from informer_fakes import ListInformer
from policy_fakes import TEST_POLICY

from scheduler import kubeops, reconciler, waiting
from scheduler.binder import Binder
from scheduler.config import SchedulerConfig
from scheduler.decide import DeleteMembers, Nothing, Submit
from scheduler.jobindex import JobIndex
from scheduler.reconciler import CANCEL_SETTLE, PodIndex, PodScheduler, SlurmdNodes
from scheduler.tokens import hook_token
from sunk.controller.runtime import Result
from sunk.kube.client import ApiError
from sunk.model import names
from sunk.model.slurm import Job
from sunk.slurm.client import Snapshot
from sunk.slurm.errors import OutcomeUnknown, SlurmUnavailable
from sunk.translate import placeholder
from sunk.translate.drains import StuckPodDrain
from sunk.translate.drains import parse as parse_drain
from sunk.translate.gang import has_started
from sunk.translate.identity import PlaceholderIdentity
from sunk.translate.keys import PodKey


class Recorder:
    def __init__(self):
        self.events = []

    def event(self, obj, type_, reason, message):
        self.events.append((reason, message))


def parse(job):
    """The owner from the AdminComment (a short stand-in for an identity), started from Slurm's state."""
    uid = job.admin_comment
    return (uid, has_started(job)) if uid.startswith("uid-") else None


def pod(uid="uid-a", node=None):
    return {"metadata": {"name": "p", "namespace": "ns", "uid": uid, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 5,
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}


class Slurm:
    """Accepts every submission."""

    def __init__(self):
        self.submitted = []

    def submit_job(self, request):
        self.submitted.append(request)
        return 7


@pytest.fixture
def writes():
    """(what, uid, detail) for every Pod write the scheduler makes, in order."""
    return []


@pytest.fixture
def build(monkeypatch, writes):
    """build(**settings) -> (scheduler, pods, jobs, recorder, binds): one Pod, uid-a; Slurm node node1 on worker-1.

    ``must_tolerate_lock`` goes to the scheduler's Binder, every other setting to PodScheduler.
    """
    binds = []

    def bind(api, obj, node, annotations):
        writes.append(("bind", obj["metadata"]["uid"], node))
        binds.append((obj["metadata"]["uid"], node))
        if len(binds) > 1:
            raise ApiError(409, "Conflict", {"message": f"pod p is already assigned to node {node!r}"})

    def record_job(api, obj, annotations, *, tolerate_lock=False):
        writes.append(("record", obj["metadata"]["uid"], (dict(annotations), tolerate_lock)))
        return True

    def show_waiting(api, obj, condition):
        """Written, and shown at once by the (fake) watch: the Pod in the informer is this object."""
        if (obj.get("status") or {}).get("conditions") == [condition]:
            return False
        writes.append(("condition", obj["metadata"]["uid"], condition["reason"], condition["message"]))
        obj.setdefault("status", {})["conditions"] = [condition]
        return True

    def mark_unschedulable(api, obj, message):
        writes.append(("unschedulable", obj["metadata"]["uid"], message))
        return True

    monkeypatch.setattr(kubeops, "bind", bind)
    monkeypatch.setattr(kubeops, "record_job", record_job)
    monkeypatch.setattr(kubeops, "show_waiting", show_waiting)
    monkeypatch.setattr(kubeops, "mark_unschedulable", mark_unschedulable)

    def make(must_tolerate_lock=lambda node: False, **settings):
        pods = [pod()]
        slurmd = settings.pop("slurmd", None) or \
            SlurmdNodes(ListInformer([{"metadata": {"name": "node1"}, "spec": {"nodeName": "worker-1"}}]))
        jobs = settings.pop("jobs", None) or JobIndex(parse)
        recorder = Recorder()
        binder = Binder(None, must_tolerate_lock=must_tolerate_lock, observe_latency=lambda seconds: None)
        settings = {"config": SchedulerConfig("s", b"x" * 16, "http://h",
                                              identity_policy=TEST_POLICY), "slurm": Slurm(), **settings}
        scheduler = PodScheduler(api=None, jobs=jobs, pods=PodIndex(ListInformer(pods)),
                                 slurmd=slurmd, recorder=recorder, binder=binder, **settings)
        return scheduler, pods, jobs, recorder, binds

    return make


@pytest.fixture
def world(build):
    return build()


def test_a_pod_bound_but_not_yet_seen_bound_is_not_bound_twice(world):
    scheduler, pods, jobs, recorder, binds = world
    jobs.upsert(Job(id=7, state="RUNNING", nodes="node1", admin_comment="uid-a"))
    scheduler.reconcile("uid-a")
    scheduler.reconcile("uid-a")  # a cache event, before the Pod watch shows the binding
    assert binds == [("uid-a", "worker-1")]
    assert [reason for reason, _ in recorder.events] == ["Scheduled"]
    pods[0] = pod(node="worker-1")  # the informer catches up
    pods[0]["metadata"]["annotations"] = {names.ANN_JOB_ID: "7"}
    scheduler.reconcile("uid-a")
    assert binds == [("uid-a", "worker-1")]


def test_a_conflict_on_binding_is_left_to_the_pod_watch(world):
    scheduler, _, jobs, recorder, binds = world
    binds.append(("someone", "else"))  # the next bind answers 409
    jobs.upsert(Job(id=7, state="RUNNING", nodes="node1", admin_comment="uid-a"))
    assert scheduler.reconcile("uid-a").requeue_after is None
    assert recorder.events == []  # no "Scheduled" for a binding that was not ours


def test_passing_waits_are_quiet_until_they_last(world, monkeypatch):
    scheduler, _, jobs, recorder, _ = world
    now = [1000.0]
    monkeypatch.setattr(reconciler.time, "monotonic", lambda: now[0])
    # Running, its prolog (the node's lock) still in progress
    jobs.upsert(Job(id=7, state="RUNNING", nodes="node1", state_reason="Prolog", admin_comment="uid-a"))
    result = scheduler.reconcile("uid-a")
    assert recorder.events == [] and result.requeue_after == pytest.approx(reconciler.PASSING_WAIT_GRACE)
    now[0] += reconciler.PASSING_WAIT_GRACE
    scheduler.reconcile("uid-a")
    assert recorder.events == [("WaitingForSlurm", "Slurm job 7: prolog and node lock in progress")]


def test_a_wait_that_ended_starts_its_grace_afresh_next_time(world, monkeypatch):
    scheduler, _, jobs, recorder, _ = world
    now = [1000.0]
    monkeypatch.setattr(reconciler.time, "monotonic", lambda: now[0])
    jobs.upsert(Job(id=7, state="PENDING", state_reason="None", admin_comment="uid-a"), observed_at=1.0)
    scheduler.reconcile("uid-a")  # a passing wait begins
    jobs.upsert(Job(id=7, state="PENDING", state_reason="ReqNodeNotAvail", admin_comment="uid-a"), observed_at=2.0)
    scheduler.reconcile("uid-a")  # a lasting reason: reported, the passing wait is over
    jobs.upsert(Job(id=7, state="PENDING", state_reason="None", admin_comment="uid-a"), observed_at=3.0)
    now[0] += reconciler.PASSING_WAIT_GRACE
    scheduler.reconcile("uid-a")  # passing again: a new grace, no Event yet
    assert [m for _, m in recorder.events] == ["Slurm job 7: ReqNodeNotAvail"]


def test_a_wait_that_changes_passing_reasons_is_reported_after_one_grace(world, monkeypatch):
    scheduler, _, jobs, recorder, _ = world
    now = [1000.0]
    monkeypatch.setattr(reconciler.time, "monotonic", lambda: now[0])
    for step, reason in enumerate(["Priority", "Resources", "Priority"]):
        jobs.upsert(Job(id=7, state="PENDING", state_reason=reason, admin_comment="uid-a"), observed_at=float(step))
        scheduler.reconcile("uid-a")
        now[0] += reconciler.PASSING_WAIT_GRACE / 2
    assert recorder.events == [("WaitingForSlurm", "Slurm job 7: Priority")]


def test_slurm_reasons_are_reported_at_once(world):
    scheduler, _, jobs, recorder, _ = world
    jobs.upsert(Job(id=7, state="PENDING", state_reason="QOSMaxCpuPerUserLimit", admin_comment="uid-a"))
    assert scheduler.reconcile("uid-a").requeue_after == reconciler.WAITING_RESYNC
    assert recorder.events == [("WaitingForSlurm", "Slurm job 7: QOSMaxCpuPerUserLimit")]


def test_a_submission_names_its_job_on_the_pod_at_once_and_nothing_else(world, writes):
    scheduler, _, jobs, recorder, _ = world
    scheduler.reconcile("uid-a")
    assert len(scheduler.slurm.submitted) == 1
    assert writes == [("record", "uid-a", ({names.ANN_JOB_ID: "7"}, False))] and recorder.events == []
    assert jobs.view("uid-a").expected_job_id == 7


def test_a_quick_binding_writes_the_job_id_and_the_binding_only(world, writes):
    scheduler, _, jobs, _, _ = world
    scheduler.reconcile("uid-a")
    jobs.upsert(Job(id=7, state="RUNNING", nodes="node1", admin_comment="uid-a"))
    scheduler.reconcile("uid-a")
    assert [w[0] for w in writes] == ["record", "bind"]


def test_a_reported_wait_shows_on_the_pod_after_the_grace(world, writes, monkeypatch):
    scheduler, _, jobs, recorder, _ = world
    now = [1000.0]
    monkeypatch.setattr(reconciler.time, "monotonic", lambda: now[0])
    jobs.upsert(Job(id=7, state="PENDING", state_reason="None", admin_comment="uid-a"))
    scheduler.reconcile("uid-a")  # passing: neither an Event nor a write yet
    assert writes == []
    now[0] += reconciler.PASSING_WAIT_GRACE
    scheduler.reconcile("uid-a")
    assert recorder.events == [("WaitingForSlurm", "Slurm job 7: PENDING")]
    assert writes == [("record", "uid-a", ({names.ANN_JOB_ID: "7"}, False)),
                      ("condition", "uid-a", "WaitingForSlurm", "Slurm job 7: PENDING")]


def test_a_slurm_reason_shows_on_the_pod_at_once_naming_job_partition_and_reason(world, writes):
    scheduler, pods, jobs, recorder, _ = world
    jobs.upsert(Job(id=7, state="PENDING", state_reason="ReqNodeNotAvail", partition="gpu", admin_comment="uid-a"))
    scheduler.reconcile("uid-a")
    message = "Slurm job 7 (partition gpu): ReqNodeNotAvail"
    assert writes == [("record", "uid-a", ({names.ANN_JOB_ID: "7"}, False)),
                      ("condition", "uid-a", "WaitingForSlurm", message)]
    assert pods[0]["status"]["conditions"] == [{"type": "PodScheduled", "status": "False",
                                                "reason": "WaitingForSlurm", "message": message}]
    assert recorder.events == [("WaitingForSlurm", message)]


def test_a_burst_waiting_for_the_next_scheduling_pass_writes_nothing(world, writes):
    scheduler, _, jobs, recorder, _ = world
    jobs.upsert(Job(id=7, state="PENDING", state_reason="Priority", admin_comment="uid-a"))
    assert scheduler.reconcile("uid-a").requeue_after == pytest.approx(reconciler.PASSING_WAIT_GRACE)
    assert writes == [] and recorder.events == []


@pytest.mark.parametrize("evicts", [True, False], ids=["noexecute-lock", "noschedule-lock"])
def test_the_lock_toleration_comes_before_the_binding_only_where_the_lock_evicts(build, writes, evicts):
    asked = []
    scheduler, _, jobs, _, _ = build(must_tolerate_lock=lambda node: asked.append(node) or evicts)
    jobs.upsert(Job(id=7, state="RUNNING", nodes="node1", admin_comment="uid-a"))
    scheduler.reconcile("uid-a")
    assert asked == ["worker-1"]
    expected = [("record", "uid-a", ({}, True))] if evicts else []
    assert writes == [*expected, ("bind", "uid-a", "worker-1")]


def test_the_front_end_hears_of_each_submission(build, writes):
    """The extender's hook: its patch is what re-queues the Pod in kube-scheduler."""
    heard = []
    scheduler, _, _, _, _ = build(on_submit=lambda pod, job_id: heard.append((pod["metadata"]["uid"], job_id)))
    scheduler.reconcile("uid-a")
    assert heard == [("uid-a", 7)] and writes == []


def test_an_action_on_a_pod_that_is_gone_is_an_error_not_an_assert(world, monkeypatch):
    """decide() never asks for one; if it did, the reconcile fails loudly (and is retried), under python -O too."""
    scheduler, pods, _, _, _ = world
    pods.clear()
    monkeypatch.setattr(reconciler, "decide", lambda *args, **kwargs: Submit(("uid-a",)))
    with pytest.raises(RuntimeError, match="for a Pod that is gone"):
        scheduler.reconcile("uid-a")
    assert scheduler.slurm.submitted == []


def test_the_submission_is_the_placeholder_job_with_this_schedulers_settings(build):
    config = SchedulerConfig("sched", b"y" * 32, "https://hooks:8000", hooks_ca_file="/etc/ca.pem",
                             kill_wait_seconds=60, default_partition="batch", identity_policy=TEST_POLICY)
    scheduler, pods, _, _, _ = build(config=config)
    scheduler.reconcile("uid-a")
    assert scheduler.slurm.submitted == [placeholder.job_request(
        pods[0], placeholder.Settings(script=reconciler.PLACEHOLDER_SCRIPT, kill_wait_seconds=config.kill_wait_seconds,
                                      scheduler=config.scheduler_name, hooks_url=config.hooks_url,
                                      hooks_ca_file=config.hooks_ca_file, default_partition=config.default_partition,
                                      policy=config.identity_policy),
        hook_token=hook_token(config.hook_secret, "uid-a"))]
    assert scheduler.slurm.submitted[0].partition == "batch"
    assert "SUNK_HOOKS_CA=/etc/ca.pem" in scheduler.slurm.submitted[0].environment


def test_placement_reads_without_forgetting_and_the_reconcile_forgets_once_the_watch_shows_the_binding(world):
    """The extender's verbs call placement() from their HTTP threads: it must change nothing."""
    scheduler, pods, jobs, _, binds = world
    jobs.upsert(Job(id=7, state="RUNNING", nodes="node1", admin_comment="uid-a"))
    scheduler.reconcile("uid-a")
    assert scheduler.binder.assumed_node("uid-a") == "worker-1"
    pods[0] = pod(node="worker-1")
    pods[0]["metadata"]["annotations"] = {names.ANN_JOB_ID: "7"}
    assert scheduler.placement(pods[0], "uid-a") == Nothing("running")
    assert scheduler.binder.assumed_node("uid-a") == "worker-1"  # a read, no side effect
    scheduler.reconcile("uid-a")
    assert scheduler.binder.assumed_node("uid-a") is None
    assert binds == [("uid-a", "worker-1")]


def test_a_pod_assumed_bound_is_judged_as_bound(world):
    """Between the binding and the watch, a requeued job is a preemption, not a Pod to validate or bind."""
    scheduler, pods, jobs, _, _ = world
    jobs.upsert(Job(id=7, state="RUNNING", nodes="node1", admin_comment="uid-a"), observed_at=1.0)
    scheduler.reconcile("uid-a")
    jobs.upsert(Job(id=7, state="PENDING", state_reason="BeginTime", admin_comment="uid-a"), observed_at=2.0)
    assert scheduler.placement(pods[0], "uid-a") == DeleteMembers(("uid-a",), "Preempted",
                                                                      "Slurm requeued job 7 (BeginTime)")


def test_a_failed_binding_is_tried_afresh(world, monkeypatch):
    scheduler, _, jobs, recorder, _ = world
    jobs.upsert(Job(id=7, state="RUNNING", nodes="node1", admin_comment="uid-a"))
    bind = kubeops.bind

    def fails(*_args):
        raise ApiError(500, "InternalError")

    monkeypatch.setattr(kubeops, "bind", fails)
    with pytest.raises(ApiError):
        scheduler.reconcile("uid-a")  # (the controller retries it with backoff)
    assert scheduler.binder.assumed_node("uid-a") is None and recorder.events == []
    monkeypatch.setattr(kubeops, "bind", bind)
    scheduler.reconcile("uid-a")
    assert scheduler.binder.assumed_node("uid-a") == "worker-1"
    assert [reason for reason, _ in recorder.events] == ["Scheduled"]


def test_a_pod_that_is_gone_is_forgotten(world):
    scheduler, pods, jobs, _, _ = world
    jobs.upsert(Job(id=7, state="RUNNING", nodes="node1", admin_comment="uid-a"), observed_at=1.0)
    scheduler.reconcile("uid-a")
    pods.clear()
    jobs.remove(7, observed_at=2.0)
    scheduler.reconcile("uid-a")  # Pod and job both gone
    assert scheduler.binder.assumed_node("uid-a") is None


class CancelRecorder(Slurm):
    """Accepts every submission and records every cancellation."""

    def __init__(self):
        super().__init__()
        self.cancelled = []

    def cancel_job(self, job_id, signal=None):
        self.cancelled.append(job_id)


def identity_parsed(config):
    """(the scheduler's own identity parser, uid-a's placeholder identity as it submits it)."""
    from scheduler.assembly import identity_parser


    text = PlaceholderIdentity(PodKey("uid-a"), "ns", name="p", scheduler=config.scheduler_name).encode()
    return identity_parser(config), text


@pytest.mark.parametrize("bound", [True, False], ids=["bound-pod", "pod-waiting-to-bind"])
def test_an_identity_forged_in_a_held_jobs_extra_is_ignored(build, writes, monkeypatch, bound):
    """A tenant copies a placeholder's Extra onto an older job of theirs, held: were it read, that job would be
    the Pod's oldest, the real placeholder cancelled as its duplicate and the Pod deleted as requeued. Extra is
    the job's user's; only AdminComment (written by Slurm's admins alone) names a Pod."""
    monkeypatch.setattr(kubeops, "delete_pod", lambda api, obj: writes.append(("delete", obj["metadata"]["uid"], None)))
    monkeypatch.setattr(kubeops, "mark_unschedulable",
                        lambda api, obj, message: writes.append(("unschedulable", obj["metadata"]["uid"], message)))
    config = SchedulerConfig("s", b"x" * 16, "http://h", identity_policy=TEST_POLICY)
    parse, identity = identity_parsed(config)
    scheduler, pods, jobs, recorder, binds = build(config=config, slurm=CancelRecorder(), jobs=JobIndex(parse))
    if bound:
        pods[0] = pod(node="worker-1")
        pods[0]["metadata"]["annotations"] = {names.ANN_JOB_ID: "7"}
    forged = Job(id=5, state="PENDING", state_reason="JobHeldUser", extra=identity)
    assert parse(Job(id=5, state="PENDING", admin_comment=identity)) == ("uid-a", False)  # (the same text, read)
    assert jobs.upsert(forged, observed_at=1.0) is None
    jobs.upsert(Job(id=7, state="RUNNING", nodes="node1", admin_comment=identity), observed_at=1.0)
    scheduler.reconcile("uid-a")
    assert [j.id for j in jobs.view("uid-a").jobs] == [7]
    assert scheduler.slurm.cancelled == [] and scheduler.slurm.submitted == []
    assert writes == ([] if bound else [("bind", "uid-a", "worker-1")])  # neither deleted nor marked
    assert [reason for reason, _ in recorder.events] == ([] if bound else ["Scheduled"])


def test_a_running_job_is_bound_only_once_slurm_ends_its_prolog(build, writes):
    """Running is not started: the prolog locks the node first. The job's reason says when it is over (Slurm's
    word, which the job's user cannot write), not a mark the placeholder left."""
    config = SchedulerConfig("s", b"x" * 16, "http://h", identity_policy=TEST_POLICY)
    parse, identity = identity_parsed(config)
    scheduler, _, jobs, _, binds = build(config=config, jobs=JobIndex(parse))
    prolog = Job(id=7, state="RUNNING", nodes="node1", state_reason="Prolog", admin_comment=identity,
                 extra=f"{identity}: started")  # (a mark in Extra is no evidence)
    assert jobs.upsert(prolog, observed_at=1.0) == "uid-a"
    scheduler.reconcile("uid-a")
    assert binds == [] and writes == [] and jobs.view("uid-a").started == {7: False}
    jobs.upsert(Job(id=7, state="RUNNING", nodes="node1", admin_comment=identity), observed_at=2.0)  # the prolog ended
    scheduler.reconcile("uid-a")
    assert binds == [("uid-a", "worker-1")]


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_finished_pod_releases_its_job_at_once_and_is_kept(build, writes, monkeypatch, phase):
    """Its containers are done: the job (its strict lock, its GPUs) ends now, not when somebody deletes the Pod;
    the Pod itself stays, for its owner (a Job counts it) and its logs. One Event names the job."""
    monkeypatch.setattr(kubeops, "delete_pod", lambda api, obj: writes.append(("delete", obj["metadata"]["uid"], None)))
    scheduler, pods, jobs, recorder, _ = build(slurm=CancelRecorder())
    pods[0] = pod(node="worker-1")
    pods[0]["metadata"]["annotations"] = {names.ANN_JOB_ID: "7"}
    pods[0]["status"] = {"phase": phase}
    jobs.upsert(Job(id=7, state="RUNNING", nodes="node1", admin_comment="uid-a"), observed_at=1.0)
    scheduler.reconcile("uid-a")
    scheduler.reconcile("uid-a")  # the cache has not shown the cancellation yet: Slurm accepted it, not again
    assert scheduler.slurm.cancelled == [7]
    assert recorder.events == [("SlurmJobReleased",
                                f"the Pod {phase.lower()}: Slurm job 7 ended, its node is free for the next job")]
    jobs.upsert(Job(id=7, state="CANCELLED", nodes="node1", admin_comment="uid-a"), observed_at=2.0)
    scheduler.reconcile("uid-a")
    assert scheduler.slurm.cancelled == [7] and writes == []  # the Pod is never deleted for its job's end


class RefusingOnce(CancelRecorder):
    """Slurm down for the first cancel: it raises, and nothing was accepted."""

    def cancel_job(self, job_id, signal=None):
        if not self.cancelled:
            self.cancelled.append(None)
            raise SlurmUnavailable("slurmctld is not responding")
        super().cancel_job(job_id, signal)


def test_a_deleted_pods_job_is_cancelled_once_while_the_cache_still_shows_it_running(build):
    """The jobs informer may show a cancelled job RUNNING for seconds (a burst's reads queue up): one cancel
    call, not one per reconcile in between. Past CANCEL_SETTLE a job still shown active is cancelled again."""
    now = [100.0]
    scheduler, pods, jobs, _, _ = build(slurm=CancelRecorder(), monotonic=lambda: now[0])
    pods.clear()  # the Pod is gone
    jobs.upsert(Job(id=7, state="RUNNING", nodes="node1", admin_comment="uid-a"), observed_at=1.0)
    for _ in range(3):
        scheduler.reconcile("uid-a")
        now[0] += CANCEL_SETTLE / 4
    assert scheduler.slurm.cancelled == [7]
    now[0] += CANCEL_SETTLE  # still shown running a minute on: Slurm did not end it after all
    scheduler.reconcile("uid-a")
    assert scheduler.slurm.cancelled == [7, 7]


def test_a_cancel_slurm_did_not_accept_is_sent_again(build):
    scheduler, pods, jobs, _, _ = build(slurm=RefusingOnce(), monotonic=lambda: 100.0)
    pods.clear()
    jobs.upsert(Job(id=7, state="RUNNING", nodes="node1", admin_comment="uid-a"), observed_at=1.0)
    with pytest.raises(SlurmUnavailable):
        scheduler.reconcile("uid-a")
    scheduler.reconcile("uid-a")
    assert scheduler.slurm.cancelled == [None, 7]


def test_a_pod_waiting_for_its_nodes_slurmd_pod_binds_once_one_appears(build, writes):
    """What walking every unbound Pod at each slurmd event was for, now through the job index's owners_on."""
    from informer_fakes import StoreInformer

    from scheduler.assembly import attach_slurmd_feed

    informer = StoreInformer()
    scheduler, _pods, jobs, _recorder, binds = build(slurmd=SlurmdNodes(informer))
    queue: list[str] = []
    attach_slurmd_feed(informer, jobs, queue.append)
    jobs.upsert(Job(id=7, state="RUNNING", nodes="node9", admin_comment="uid-a"))
    scheduler.reconcile("uid-a")
    assert binds == [] and [w[3] for w in writes if w[0] == "condition"] == \
        ["Slurm job 7: no slurmd Pod found for Slurm node node9"]
    informer.put({"metadata": {"name": "node9", "namespace": "slurm", "annotations": {names.LOCK_KEY: "locked"}},
                  "spec": {"nodeName": "worker-9"}})
    assert queue == ["uid-a"]
    for key in queue:
        scheduler.reconcile(key)
    assert binds == [("uid-a", "worker-9")]


def test_slurmd_nodes_map_by_hostname_as_the_syncer_does():
    """A NodeSet names the slurmd Pod and its hostname alike; a hand-made Pod may differ: the hostname wins."""
    from informer_fakes import ListInformer

    from scheduler.reconciler import SlurmdNodes
    from sunk.syncer.context import slurm_node_name

    pods = [{"metadata": {"name": "slurmd-abc"}, "spec": {"nodeName": "worker-1", "hostname": "g-3-17"}},
            {"metadata": {"name": "node2"}, "spec": {"nodeName": "worker-2"}},
            {"metadata": {"name": "node3", "deletionTimestamp": "x"}, "spec": {"nodeName": "worker-3"}}]
    assert SlurmdNodes(ListInformer(pods)).mapping() == {"g-3-17": "worker-1", "node2": "worker-2"}
    assert [slurm_node_name(p) for p in pods[:2]] == ["g-3-17", "node2"]


class LosingSlurm:
    """slurmctld makes the job, and the answer never reaches the scheduler (a read timeout)."""

    def __init__(self, lose: int = 1, make_job: bool = True):
        self.lose, self.make_job = lose, make_job
        self.submitted: list = []
        self.jobs: list[Job] = []
        self.lists = 0
        self.down = False

    def submit_job(self, request):
        self.submitted.append(request)
        job_id = 6 + len(self.submitted)
        if self.make_job or self.lose == 0:
            self.jobs.append(Job(id=job_id, state="PENDING", state_reason="Priority", admin_comment="uid-a"))
        if self.lose > 0:
            self.lose -= 1
            raise OutcomeUnknown(f"submit job {request.name}: slurmrestd did not answer within 30s")
        return job_id

    def list_jobs(self, **_kw):
        if self.down:
            raise SlurmUnavailable("list jobs: cannot reach slurmrestd")
        self.lists += 1
        return Snapshot(items=tuple(self.jobs), last_update=1)


def informed(build, slurm, parser=None, **settings):
    """A scheduler whose job index is on a real jobs informer over ``slurm`` (refreshed by the test), fed as
    the assembly feeds it; ``woken``: the keys its changes and lists queued."""
    from scheduler.assembly import attach_job_feed
    from sunk.slurm.informer import SlurmInformerFactory

    informer = SlurmInformerFactory(slurm, interval=1.0).jobs()
    jobs = JobIndex(parser or parse, clock=informer.clock, jobs=informer, doubt_margin=0.0)  # (lists at once)
    woken: list[str] = []
    attach_job_feed(informer, jobs, woken.append)
    scheduler, *_ = build(slurm=slurm, jobs=jobs, nudge=informer.nudge, **settings)
    return scheduler, jobs, informer, woken


def test_a_submission_whose_answer_was_lost_is_found_not_made_twice(build):
    """The job exists but no list has shown it yet: the retry submits nothing and calls Slurm for nothing of
    its own; the jobs informer's next list shows the job, which settles the doubt and wakes the Pod."""
    slurm = LosingSlurm()
    scheduler, jobs, informer, woken = informed(build, slurm)
    assert scheduler.reconcile("uid-a").requeue_after == reconciler.LOST_ANSWER_SETTLE
    assert jobs.view("uid-a").in_doubt
    assert scheduler.reconcile("uid-a").requeue_after == reconciler.LOST_ANSWER_SETTLE  # the retry, before a list
    assert len(slurm.submitted) == 1, "a second job for the Pod"
    assert slurm.lists == 0
    assert informer.refresh().ok and "uid-a" in woken
    view = jobs.view("uid-a")
    assert [j.id for j in view.jobs] == [7] and not view.in_doubt
    result = scheduler.reconcile("uid-a")
    assert len(slurm.submitted) == 1 and slurm.lists == 1
    assert result.requeue_after == pytest.approx(reconciler.PASSING_WAIT_GRACE)  # waiting for Slurm, as usual


def test_a_lost_submission_that_made_no_job_is_submitted_again(build):
    slurm = LosingSlurm(make_job=False)
    scheduler, jobs, informer, woken = informed(build, slurm)
    scheduler.reconcile("uid-a")
    assert informer.refresh().ok and woken == ["uid-a"]  # a list requested after the doubt shows no job
    scheduler.reconcile("uid-a")
    assert len(slurm.submitted) == 2 and slurm.lists == 1
    assert jobs.view("uid-a").expected_job_id == 8 and not jobs.view("uid-a").in_doubt


def test_a_list_that_fails_keeps_the_doubt(build):
    slurm = LosingSlurm()
    scheduler, jobs, informer, _ = informed(build, slurm)
    scheduler.reconcile("uid-a")
    slurm.down = True
    assert not informer.refresh().ok
    assert scheduler.reconcile("uid-a").requeue_after == reconciler.LOST_ANSWER_SETTLE
    assert jobs.view("uid-a").in_doubt and len(slurm.submitted) == 1


def test_a_list_requested_before_the_lost_answer_does_not_settle_it(build):
    slurm = LosingSlurm(make_job=False)
    scheduler, jobs, informer, _ = informed(build, slurm)
    before = informer.clock() - 1.0
    scheduler.reconcile("uid-a")
    assert jobs.listed(before) == [] and jobs.view("uid-a").in_doubt
    scheduler.reconcile("uid-a")
    assert len(slurm.submitted) == 1


@pytest.mark.parametrize("fault", [
    {"lose_answer": True},  # the connection closes after slurmctld made the job
    {"delay": 0.6},  # slurmrestd answers after the client's read timeout
], ids=["connection-closed-after-sending", "read-timeout"])
def test_through_slurmrestd_a_lost_answer_leaves_one_job(build, fault):
    from scheduler.assembly import identity_parser
    from sunk.slurm import connect
    from sunk_dev.fakeslurm import FakeSlurmrestd, Fault

    config = SchedulerConfig("s", b"x" * 16, "http://h", identity_policy=TEST_POLICY)
    with FakeSlurmrestd(token="tok") as fake:
        slurm = connect("rest", url=fake.url, token="tok", read_timeout=0.3)
        scheduler, _, informer, _ = informed(build, slurm, identity_parser(config), config=config)
        assert informer.refresh().ok
        fake.add_fault(Fault("POST", r"job/submit", **fault))
        with contextlib.suppress(SlurmUnavailable):  # (the controller would retry with backoff)
            scheduler.reconcile("uid-a")  # the answer is lost
        deadline = time.monotonic() + 5
        while not fake.state.jobs and time.monotonic() < deadline:  # (slurmctld, slower than the client)
            time.sleep(0.05)
        scheduler.reconcile("uid-a")  # the retry: waits for the informer
        assert informer.refresh().ok  # its next list shows the job: adopted
        scheduler.reconcile("uid-a")
        assert len(fake.state.submitted) == 1 and list(fake.state.jobs) == [1]
        assert [j.id for j in scheduler.jobs.view("uid-a").jobs] == [1]
        slurm.close()


def test_a_token_slurm_refuses_is_an_outage_not_a_verdict_on_the_pod(build, monkeypatch):
    """Before: the 401 was "Slurm refused the placeholder job", the Pod Unschedulable and not retried."""
    from sunk.slurm import connect
    from sunk_dev.fakeslurm import FakeSlurmrestd

    marked = []
    monkeypatch.setattr(kubeops, "mark_unschedulable", lambda api, pod, message: marked.append(message))
    with FakeSlurmrestd(token="rotated") as fake:
        slurm = connect("rest", url=fake.url, token="expired")
        scheduler, _, jobs, recorder, _ = build(slurm=slurm)
        for _ in range(2):  # retried by the controller, with backoff
            with pytest.raises(SlurmUnavailable):
                scheduler.reconcile("uid-a")
        assert marked == [] and jobs.view("uid-a").refused is None
        assert [reason for reason, _ in recorder.events] == ["SlurmAuthenticationFailed"]  # once
        assert "the fixed token given at start" in recorder.events[0][1]
        fake.token = "expired"  # a token Slurm accepts again
        scheduler.reconcile("uid-a")
        assert len(fake.state.submitted) == 1 and jobs.view("uid-a").expected_job_id == 1
        slurm.close()


class NodeSlurm:
    """Reads and writes of Slurm nodes, and cancellations, in the order they come."""

    def __init__(self, drained_by=""):
        from sunk.model.slurm import Node

        self.node = Node("node1", state=("ALLOCATED", "DRAIN") if drained_by else ("ALLOCATED",), reason=drained_by)
        self.calls: list[tuple] = []

    def read_node(self, name):
        self.calls.append(("read_node", name))
        return self.node

    def update_node(self, name, update):
        self.calls.append(("drain", name, update.state, update.reason))

    def cancel_job(self, job_id, signal=None):
        self.calls.append(("cancel", job_id))


def stuck_pod(deletion="2030-01-01T00:00:30Z"):
    p = pod(node="worker-1")
    p["metadata"]["annotations"] = {names.ANN_JOB_ID: "7"}
    p["metadata"]["deletionTimestamp"] = deletion
    return p


GRACE_END = 1893456030.0  # 2030-01-01T00:00:30Z


@pytest.fixture
def stuck(build):
    """uid-a bound to worker-1, deleted, its job 7 running on node1; worker-1's kubelet is gone."""
    now = [GRACE_END + 10]
    ready = {"worker-1": False}

    def make(**settings):
        scheduler, pods, jobs, recorder, _ = build(slurm=settings.pop("slurm", NodeSlurm()),
                                                   node_ready=lambda n: ready.get(n, False),
                                                   clock=lambda: now[0], **settings)
        pods[0] = stuck_pod()
        jobs.upsert(Job(id=7, state="RUNNING", nodes="node1", admin_comment="uid-a"))
        return scheduler, recorder

    return make, now, ready


def test_a_pod_stuck_on_a_lost_node_lets_its_job_go_after_grace_and_margin(stuck):
    make, now, _ = stuck
    scheduler, recorder = make()
    result = scheduler.reconcile("uid-a")
    assert scheduler.slurm.calls == [] and result.requeue_after == pytest.approx(50.0)  # grace + 60 s, less 10 s
    now[0] = GRACE_END + 60
    scheduler.reconcile("uid-a")
    (read, drain, cancel) = scheduler.slurm.calls
    assert read == ("read_node", "node1") and cancel == ("cancel", 7)  # drained first: nothing starts there
    assert drain[:3] == ("drain", "node1", "DRAIN")
    assert parse_drain(drain[3]) == StuckPodDrain("ns", "p", "uid-a", "worker-1", 7)  # one of sunk's drains
    assert [reason for reason, _ in recorder.events] == ["StuckTerminating"]


def test_the_margin_is_a_setting(stuck):
    make, now, _ = stuck
    scheduler, _ = make(config=SchedulerConfig("s", b"x" * 16, "http://h", stuck_pod_margin=5.0,
                                               identity_policy=TEST_POLICY))
    assert scheduler.reconcile("uid-a").requeue_after is None  # 10 s past the grace, 5 s of margin: let go
    assert ("cancel", 7) in scheduler.slurm.calls


def test_a_pod_terminating_on_a_ready_node_keeps_its_job(stuck):
    make, now, ready = stuck
    ready["worker-1"] = True
    scheduler, _ = make()
    now[0] = GRACE_END + 3600
    assert scheduler.reconcile("uid-a").requeue_after is None
    assert scheduler.slurm.calls == []


@pytest.mark.parametrize("drained_by", [
    "bad GPU",  # a person's
    "k8s: sunk-placeholder: pod ns/other outlived KillWait after job 6",  # another Pod's: its own cause
    "k8s: sunk-lock: job 6: hook API unreachable",  # the prolog's
])
def test_a_drain_someone_else_set_is_left_as_it_is(stuck, drained_by):
    make, now, _ = stuck
    scheduler, _ = make(slurm=NodeSlurm(drained_by=drained_by))
    now[0] = GRACE_END + 60
    scheduler.reconcile("uid-a")
    assert scheduler.slurm.calls == [("read_node", "node1"), ("cancel", 7)]


@pytest.mark.parametrize("drained_by", [
    "k8s: slurmd pod slurm/node1 is not ready",  # the Syncer's condition: put back once this one is lifted
    "k8s: sunk-placeholder: pod ns/p outlived KillWait after job 7",  # this Pod's, lifted sooner
])
def test_the_stuck_pod_drain_replaces_a_condition_drain_or_this_pods_placeholder_drain(stuck, drained_by):
    make, now, _ = stuck
    scheduler, _ = make(slurm=NodeSlurm(drained_by=drained_by))
    now[0] = GRACE_END + 60
    scheduler.reconcile("uid-a")
    reason = StuckPodDrain("ns", "p", "uid-a", "worker-1", 7).reason()
    assert scheduler.slurm.calls == [("read_node", "node1"), ("drain", "node1", "DRAIN", reason), ("cancel", 7)]


def test_the_hook_drain_of_a_stuck_pod_says_the_same(stuck):
    make, _, ready = stuck
    scheduler, _ = make()
    reason = scheduler.stuck_drain_reason(stuck_pod(), 7)
    assert reason == StuckPodDrain("ns", "p", "uid-a", "worker-1", 7).reason()  # what _release_stuck writes
    ready["worker-1"] = True
    assert scheduler.stuck_drain_reason(stuck_pod(), 7) is None


# -- what a waiting Pod shows (scheduler/waiting.py): PodScheduled=False, an Event per change, rate-limited ----
def pending(reason, at, partition="gpu"):
    return Job(id=7, state="PENDING", state_reason=reason, partition=partition, admin_comment="uid-a"), float(at)


def conditions_written(writes):
    return [w[3] for w in writes if w[0] == "condition"]


def test_the_condition_follows_slurms_reason_with_one_event_per_change_not_per_poll(world, writes, monkeypatch):
    scheduler, _, jobs, recorder, _ = world
    now = [1000.0]
    monkeypatch.setattr(reconciler.time, "monotonic", lambda: now[0])
    jobs.upsert(*pending("ReqNodeNotAvail", 1))
    for _ in range(3):  # a poll after another, the reason unchanged
        assert scheduler.reconcile("uid-a").requeue_after == reconciler.WAITING_RESYNC
    now[0] += 60
    jobs.upsert(*pending("JobHeldUser", 2))  # the node undrained, the job held
    scheduler.reconcile("uid-a")
    scheduler.reconcile("uid-a")
    expected = ["Slurm job 7 (partition gpu): ReqNodeNotAvail", "Slurm job 7 (partition gpu): JobHeldUser"]
    assert conditions_written(writes) == expected
    assert recorder.events == [("WaitingForSlurm", m) for m in expected]


def test_a_reason_that_flaps_writes_at_most_once_per_interval_and_the_last_reason_in_the_end(world, writes,
                                                                                               monkeypatch):
    scheduler, _, jobs, recorder, _ = world
    now = [1000.0]
    monkeypatch.setattr(reconciler.time, "monotonic", lambda: now[0])
    results = []
    for step, reason in enumerate(["ReqNodeNotAvail", "JobHeldUser", "ReqNodeNotAvail", "JobHeldUser"]):
        jobs.upsert(*pending(reason, step))
        results.append(scheduler.reconcile("uid-a").requeue_after)
        now[0] += 1.0  # one poll
    assert conditions_written(writes) == ["Slurm job 7 (partition gpu): ReqNodeNotAvail"]
    # held back, and looked at again when the interval is out
    # held back and looked at again when the interval is out; back to what the Pod shows: nothing to write
    assert results[1:] == [pytest.approx(waiting.CONDITION_MIN_INTERVAL - 1.0), reconciler.WAITING_RESYNC,
                           pytest.approx(waiting.CONDITION_MIN_INTERVAL - 3.0)]
    now[0] = 1000.0 + waiting.CONDITION_MIN_INTERVAL
    scheduler.reconcile("uid-a")  # the requeue: the reason as it is now
    assert conditions_written(writes) == ["Slurm job 7 (partition gpu): ReqNodeNotAvail",
                                          "Slurm job 7 (partition gpu): JobHeldUser"]
    assert len(recorder.events) == 2


def test_a_restarted_scheduler_writes_nothing_the_pod_already_shows(build, writes):
    scheduler, pods, jobs, recorder, _ = build()
    jobs.upsert(*pending("ReqNodeNotAvail", 1))
    scheduler.reconcile("uid-a")
    shown = pods[0]["status"]
    writes.clear()
    again, pods, jobs, recorder, _ = build()  # a new process: nothing in memory
    pods[0]["status"] = shown
    pods[0]["metadata"]["annotations"] = {names.ANN_JOB_ID: "7"}
    jobs.upsert(*pending("ReqNodeNotAvail", 1))
    again.reconcile("uid-a")
    assert [w for w in writes if w[0] == "condition"] == [] and recorder.events == []


def test_a_pod_copy_behind_its_own_write_is_not_written_again_within_the_interval(world, writes, monkeypatch):
    scheduler, pods, jobs, recorder, _ = world
    now = [1000.0]
    monkeypatch.setattr(reconciler.time, "monotonic", lambda: now[0])
    jobs.upsert(*pending("ReqNodeNotAvail", 1))
    scheduler.reconcile("uid-a")
    del pods[0]["status"]  # the informer has not shown the write yet
    assert scheduler.reconcile("uid-a").requeue_after == pytest.approx(waiting.CONDITION_MIN_INTERVAL)
    assert len(conditions_written(writes)) == 1 and len(recorder.events) == 1


def test_an_invalid_pod_shows_podscheduled_false_with_the_refusal(build, writes):
    scheduler, pods, _, recorder, _ = build()
    pods[0]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    scheduler.reconcile("uid-a")
    (write,) = writes
    assert write[0] == "unschedulable" and write[2].startswith("sunk: ")
    assert [reason for reason, _ in recorder.events] == ["FailedValidation"]
    assert scheduler.slurm.submitted == []


def test_sunk_pods_waiting_counts_the_waiting_pods_by_slurms_reason_until_they_bind(world):
    scheduler, pods, jobs, _, _ = world

    def count(reason):
        line = next((ln for ln in scheduler.waiting_exposition().splitlines()
                     if ln.startswith(f'sunk_pods_waiting{{reason="{reason}"}}')), None)
        return None if line is None else int(line.split()[-1])

    assert count("None") == 0
    jobs.upsert(*pending("ReqNodeNotAvail", 1))
    scheduler.reconcile("uid-a")
    assert count("ReqNodeNotAvail") == 1
    jobs.upsert(*pending("something a site patched in", 2))
    scheduler.reconcile("uid-a")
    assert count("ReqNodeNotAvail") is None and count("Other") == 1
    jobs.upsert(Job(id=7, state="RUNNING", nodes="node1", admin_comment="uid-a"), observed_at=3.0)
    scheduler.reconcile("uid-a")  # bound
    assert count("Other") is None and count("None") == 0


# -- nodeSelector and required node affinity: the kubelet's admission checks them (scheduler/placement.py) -------
def slurmd_pod(name, node, ready=True):
    return {"metadata": {"name": name, "namespace": "slurm"}, "spec": {"nodeName": node},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def placed_world(build, labels, partitions=None):
    """Slurm nodes node1..node3 on worker-1..worker-3, whose labels are ``labels`` (None: no Node); the one Pod
    asks ``pool: b``; ``partitions``: Slurm's partitions' nodes, if any. Returns (scheduler, pods, recorder,
    nodes, queue)."""
    from informer_fakes import StoreInformer

    from scheduler.assembly import attach_placement_feed, ready_slurm_nodes
    from scheduler.placement import NodePlacement, PartitionNodes
    from sunk.model.slurm import Partition

    slurmd_pods = StoreInformer([slurmd_pod(f"node{i}", f"worker-{i}") for i in (1, 2, 3)])
    nodes = StoreInformer([{"metadata": {"name": f"worker-{i}", "labels": dict(found)}}
                           for i, found in enumerate(labels, 1) if found is not None])
    slurmd = SlurmdNodes(slurmd_pods)
    listed = None if partitions is None else PartitionNodes(
        lambda: tuple(Partition(name, nodes) for name, nodes in partitions.items()))
    placement = NodePlacement(lambda: ready_slurm_nodes(slurmd_pods.list()), nodes.get, slurmd.ready_slurm_node_on,
                              partitions=listed)
    scheduler, pods, _jobs, recorder, _binds = build(slurmd=slurmd, node_placement=placement)
    pods[0]["spec"]["nodeSelector"] = {"pool": "b"}
    queue: list[str] = []
    attach_placement_feed(nodes, slurmd_pods, slurmd, placement, queue.append)
    return scheduler, pods, recorder, nodes, queue


def test_the_slurm_nodes_a_pods_node_selector_rules_out_are_excluded_from_its_job(build):
    scheduler, pods, _recorder, _nodes, _queue = placed_world(build, [{"pool": "a"}, {"pool": "b"}, None])
    pods[0]["metadata"]["annotations"] = {names.ANN_EXCLUDED_NODES: "node7"}
    scheduler.reconcile("uid-a")
    (request,) = scheduler.slurm.submitted
    # (worker-3: no Node known, nothing says it matches; sunk's part as one hostlist expression)
    assert request.excluded_nodes == ("node7", "node[1,3]")


def test_a_pod_no_node_matches_is_not_submitted_and_waits_for_a_node_that_does(build, writes):
    scheduler, pods, recorder, nodes, queue = placed_world(build, [{"pool": "a"}, {"pool": "a"}, {"pool": "c"}],
                                                           {"batch": ("node1", "node2", "node3")})
    assert scheduler.reconcile("uid-a") == Result()  # (woken by a Node only: no timer)
    message = ("0/3 Slurm nodes are available: the Nodes their slurmd Pods run on do not match the Pod's "
               "nodeSelector and required node affinity, or have taints it does not tolerate")
    assert scheduler.slurm.submitted == [] and writes == [("unschedulable", "uid-a", message)]
    assert recorder.events == [("Unschedulable", message)]
    assert scheduler.placement(pods[0], "uid-a") == Nothing(message)  # (what the extender answers, not "Submit")

    nodes.put({"metadata": {"name": "worker-1", "labels": {"pool": "a", "zone": "x"}}})  # (still not pool b)
    nodes.put({"metadata": {"name": "worker-2", "labels": {"pool": "a"}}})  # (labels unchanged: heartbeat)
    assert queue == []
    nodes.put({"metadata": {"name": "worker-3", "labels": {"pool": "b"}}})
    assert queue == ["uid-a"]
    scheduler.reconcile("uid-a")
    (request,) = scheduler.slurm.submitted
    assert request.excluded_nodes == ("node[1-2]",)
    assert scheduler.node_placement.waiting() == 0


def test_a_slurmd_pod_that_turns_ready_on_a_matching_node_wakes_the_waiting_pod(build):
    """Only a Ready slurmd Pod's Slurm node is excluded by name (Slurm refuses an exclusion naming a node it does
    not know yet): one on the Node the Pod asks for wakes it once it is Ready, not before."""
    scheduler, pods, _recorder, nodes, queue = placed_world(build, [{"pool": "a"}] * 3)
    slurmd_pods = scheduler.slurmd.informer
    nodes.put({"metadata": {"name": "worker-9", "labels": {"pool": "b"}}})  # (no slurmd Pod on it: no wake)
    scheduler.reconcile("uid-a")
    assert scheduler.slurm.submitted == [] and scheduler.node_placement.waiting() == 1 and queue == []
    slurmd_pods.put(slurmd_pod("node9", "worker-9", ready=False))
    assert queue == []
    slurmd_pods.put(slurmd_pod("node9", "worker-9"))
    assert queue == ["uid-a"]
    scheduler.reconcile("uid-a")
    assert [r.excluded_nodes for r in scheduler.slurm.submitted] == [("node[1-3]",)]


def test_slurm_refusing_an_exclusion_that_names_a_node_it_does_not_know_yet_is_asked_again(build, writes):
    from sunk.slurm.errors import SlurmError

    scheduler, _pods, recorder, _nodes, _queue = placed_world(build, [{"pool": "a"}, {"pool": "b"}, {"pool": "b"}])

    class Unregistered(Slurm):
        def submit_job(self, request):
            self.submitted.append(request)
            raise SlurmError("submit job: Invalid node name specified")

    scheduler.slurm = Unregistered()
    result = scheduler.reconcile("uid-a")
    assert result.requeue_after == reconciler.UNREGISTERED_NODE_RETRY
    assert recorder.events == [] and writes == [] and scheduler.jobs.view("uid-a").refused is None


def test_a_pod_whose_selector_the_matcher_cannot_read_is_refused_not_placed_anywhere(build, writes):
    scheduler, pods, recorder, _nodes, _queue = placed_world(build, [{"pool": "b"}] * 3)
    pods[0]["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "Sideways", "values": ["b"]}]}]}}}
    scheduler.reconcile("uid-a")
    assert scheduler.slurm.submitted == []
    assert [e[0] for e in recorder.events] == ["FailedValidation"]
    assert "spec.affinity.nodeAffinity" in recorder.events[0][1] and "'Sideways'" in recorder.events[0][1]


def test_a_deleted_waiting_pod_is_no_longer_woken(build):
    scheduler, pods, _recorder, nodes, queue = placed_world(build, [{"pool": "a"}] * 3)
    scheduler.reconcile("uid-a")
    assert scheduler.node_placement.waiting() == 1
    pods.clear()
    scheduler.reconcile("uid-a")
    nodes.put({"metadata": {"name": "worker-1", "labels": {"pool": "b"}}})
    assert queue == [] and scheduler.node_placement.waiting() == 0


def test_a_pod_keeps_off_a_node_whose_taint_it_does_not_tolerate_but_not_off_sunks_lock(build):
    """NoExecute: the kubelet's admission would reject it; NoSchedule: kube-scheduler's filter would keep it off.
    sunk's lock taint is the one it binds through (scheduler/locktaint.py)."""
    scheduler, pods, _recorder, nodes, _queue = placed_world(build, [{}, {}, {}])
    del pods[0]["spec"]["nodeSelector"]
    nodes.put({"metadata": {"name": "worker-1", "labels": {}}, "spec": {"taints": [
        {"key": names.LOCK_KEY, "value": "true", "effect": "NoExecute"}]}})
    nodes.put({"metadata": {"name": "worker-2", "labels": {}}, "spec": {"taints": [
        {"key": "example.com/maintenance", "effect": "NoExecute"}]}})
    scheduler.reconcile("uid-a")
    assert [r.excluded_nodes for r in scheduler.slurm.submitted] == [("node2",)]

    scheduler.jobs.forget("uid-a")
    nodes.put({"metadata": {"name": "worker-2", "labels": {}}, "spec": {"taints": []}})  # (lifted)
    scheduler.reconcile("uid-a")
    assert [r.excluded_nodes for r in scheduler.slurm.submitted] == [("node2",), ()]


def test_a_pod_waiting_because_its_nodes_are_tainted_is_woken_when_the_taint_goes(build, writes):
    scheduler, pods, _recorder, nodes, queue = placed_world(build, [{"pool": "a"}, {"pool": "a"}, {"pool": "b"}])
    nodes.put({"metadata": {"name": "worker-3", "labels": {"pool": "b"}}, "spec": {"taints": [
        {"key": "example.com/maintenance", "value": "x", "effect": "NoSchedule"}]}})
    scheduler.reconcile("uid-a")
    assert scheduler.slurm.submitted == [] and scheduler.node_placement.waiting() == 1
    assert queue == []
    nodes.put({"metadata": {"name": "worker-3", "labels": {"pool": "b"}}, "spec": {"taints": [
        {"key": names.LOCK_KEY, "value": "true", "effect": "NoSchedule"}]}})  # (the lock admits it)
    assert queue == ["uid-a"]
    scheduler.reconcile("uid-a")
    assert [r.excluded_nodes for r in scheduler.slurm.submitted] == [("node[1-2]",)]


def test_a_pod_every_node_of_which_is_tainted_against_it_waits_and_is_woken_when_one_is_lifted(build, writes):
    """Not submitted for Slurm to refuse (every node excluded; a refusal is kept for minutes): it waits, as a
    Pod whose nodeSelector nothing matches does."""
    scheduler, pods, recorder, nodes, queue = placed_world(build, [{}, {}, {}])
    del pods[0]["spec"]["nodeSelector"]
    maintenance = {"key": "example.com/maintenance", "effect": "NoSchedule"}
    for i in (1, 2, 3):
        nodes.put({"metadata": {"name": f"worker-{i}", "labels": {}}, "spec": {"taints": [maintenance]}})
    scheduler.reconcile("uid-a")
    assert scheduler.slurm.submitted == [] and recorder.events[0][0] == "Unschedulable"
    assert recorder.events[0][1].startswith("0/3 Slurm nodes are available")
    nodes.put({"metadata": {"name": "worker-2", "labels": {}}, "spec": {"taints": []}})
    assert queue == ["uid-a"]
    scheduler.reconcile("uid-a")
    assert [r.excluded_nodes for r in scheduler.slurm.submitted] == [("node[1,3]",)]


def test_a_pod_whose_partition_has_no_node_left_waits_where_slurm_would_fail_its_job(build, writes):
    """Nodes of another partition are left, but Slurm runs the job in its own (BadConstraints there, for good):
    the Pod waits, is woken by a Node, and looks again after a while for what Slurm's partitions hold."""
    from scheduler.placement import PARTITIONS_MAX_AGE

    scheduler, pods, recorder, nodes, queue = placed_world(build, [{"pool": "b"}, {"pool": "a"}, {"pool": "b"}],
                                                           {"batch": ("node1", "node2"), "real": ("node3",)})
    pods[0]["metadata"]["annotations"] = {names.ANN_PARTITION: "batch"}
    nodes.put({"metadata": {"name": "worker-1", "labels": {"pool": "b"}}, "spec": {"taints": [
        {"key": "example.com/maintenance", "effect": "NoSchedule"}]}})
    result = scheduler.reconcile("uid-a")
    message = ("0/2 Slurm nodes of partition batch are available: the Nodes their slurmd Pods run on do not match "
               "the Pod's nodeSelector and required node affinity, or have taints it does not tolerate")
    assert scheduler.slurm.submitted == [] and recorder.events == [("Unschedulable", message)]
    assert writes == [("unschedulable", "uid-a", message)]
    assert PARTITIONS_MAX_AGE - 1 < result.requeue_after <= PARTITIONS_MAX_AGE  # (when the list is next due)
    nodes.put({"metadata": {"name": "worker-1", "labels": {"pool": "b"}}, "spec": {"taints": []}})
    assert queue == ["uid-a"]
    scheduler.reconcile("uid-a")
    assert [(r.partition, r.excluded_nodes) for r in scheduler.slurm.submitted] == [("batch", ("node2",))]


def test_the_ready_slurm_node_on_a_node_is_read_among_ready_slurmd_pods_only():
    """A replacement not yet Ready elsewhere leaves the Ready one serving, as ready_slurm_nodes maps them."""
    from informer_fakes import StoreInformer

    from scheduler.assembly import ready_slurm_nodes

    old = slurmd_pod("node1", "worker-1")
    old["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    new = slurmd_pod("node1", "worker-5", ready=False)
    new["metadata"].update(name="node1-new", creationTimestamp="2026-01-02T00:00:00Z")
    new["spec"]["hostname"] = "node1"
    informer = StoreInformer([old, new])
    nodes = SlurmdNodes(informer)
    assert nodes.ready_slurm_node_on("worker-1") == "node1" and nodes.ready_slurm_node_on("worker-5") is None
    assert ready_slurm_nodes(informer.list()) == {"node1": "worker-1"}
    new["status"]["conditions"][0]["status"] = "True"
    informer.put(new)
    assert nodes.ready_slurm_node_on("worker-1") is None and nodes.ready_slurm_node_on("worker-5") == "node1"
