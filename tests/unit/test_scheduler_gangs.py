"""Gangs through the scheduler's reconciler, with its fakes: one job per gang, members bound in one pass,
replaced members, the end of the job, restarts, the hook API, and the job as slurmrestd receives it."""

from __future__ import annotations

import threading
import time

import attrs
import pytest
from informer_fakes import ListInformer
from policy_fakes import TEST_POLICY
from scheduler_hook_fakes import IndexedJobs, LookedUpPods

from scheduler import kubeops, reconciler
from scheduler.assembly import attach_workload_feed, changed_for_scheduling, identity_parser, slim_job
from scheduler.binder import Binder
from scheduler.config import SchedulerConfig
from scheduler.decide import Bind, Nothing, Waiting
from scheduler.gangs import Workloads
from scheduler.hooks import POD_UID_HEADER, HookPorts, PlaceholderHooks, PodGone, create_hooks_app
from scheduler.jobindex import JobIndex
from scheduler.reconciler import PodIndex, PodScheduler, SlurmdNodes
from scheduler.tokens import hook_token
from sunk import kube
from sunk.model import names
from sunk.model.slurm import Job, JobAllocation, Node
from sunk.slurm.client import Snapshot
from sunk.slurm.errors import AuthenticationFailed, NotFound, OutcomeUnknown
from sunk.translate import gang as g
from sunk.translate.drains import StuckPodDrain
from sunk.translate.drains import parse as parse_drain
from sunk.translate.identity import PlaceholderIdentity, member_tag
from sunk.translate.keys import GangKey, PodKey

NS = "team"
JOB_UID = "0c5a0000-0000-4000-8000-00000000c0de"
OWNER = f"gang:{NS}/job/{JOB_UID}"
CONFIG = SchedulerConfig("sched", b"s" * 32, "http://hooks:8000", namespaces=(NS,), default_partition="batch",
                         identity_policy=TEST_POLICY)


def member(i, *, cpu="40", memory="1Gi", annotations=None, labels=None, uid=None):
    return {"metadata": {"name": f"train-{i}", "namespace": NS, "uid": uid or f"uid-{i}",
                         "creationTimestamp": "2026-01-01T00:00:00Z",
                         "labels": {"batch.kubernetes.io/job-name": "train",
                                    "batch.kubernetes.io/controller-uid": JOB_UID,
                                    g.JOB_COMPLETION_INDEX: str(i), **(labels or {})},
                         "annotations": annotations or {}},
            "spec": {"schedulerName": "sched", "terminationGracePeriodSeconds": 5,
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
            "status": {"phase": "Pending"}}


def batch_job(parallelism=3, completions=None):
    spec = {"parallelism": parallelism, **({"completions": completions} if completions else {})}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": NS, "uid": JOB_UID}, "spec": spec, "status": {}}


class Recorder:
    def __init__(self):
        self.events: list[tuple[str, str, str]] = []

    def event(self, obj, type_, reason, message):
        self.events.append((obj["metadata"]["name"], reason, message))

    def reasons(self, name=None):
        return [reason for who, reason, _ in self.events if name is None or who == name]


class Slurm:
    """Accepts every submission (ids from 7 on), records cancellations."""

    def __init__(self):
        self.submitted = []
        self.cancelled = []

    def submit_job(self, request):
        self.submitted.append(request)
        return 6 + len(self.submitted)

    def cancel_job(self, job_id, signal=None):
        self.cancelled.append(job_id)


class World:
    def __init__(self, monkeypatch, *, slurm=None, jobs=None, pods=None, workloads=None):
        self.pods = pods if pods is not None else []
        self.k8s_jobs = [batch_job()]
        self.writes: list[tuple] = []
        self.binds: list[tuple[str, str, dict]] = []
        monkeypatch.setattr(kubeops, "bind", self._bind)
        monkeypatch.setattr(kubeops, "record_job", lambda api, pod, ann, *, tolerate_lock=False:
                            self.writes.append(("record", pod["metadata"]["name"], dict(ann))) or True)
        monkeypatch.setattr(kubeops, "delete_pod", lambda api, pod: self.writes.append(
            ("delete", pod["metadata"]["name"])) or True)
        monkeypatch.setattr(kubeops, "mark_unschedulable", lambda api, pod, message: self.writes.append(
            ("unschedulable", pod["metadata"]["name"], message)) or True)
        monkeypatch.setattr(kubeops, "show_waiting", self._show_waiting)
        self.slurmd = [{"metadata": {"name": f"node{i}"}, "spec": {"nodeName": f"worker-{i}"}} for i in range(1, 5)]
        self.recorder = Recorder()
        self.index = jobs or JobIndex(identity_parser(CONFIG))
        self.scheduler = PodScheduler(
            api=None, slurm=slurm or Slurm(), config=CONFIG, jobs=self.index, pods=PodIndex(ListInformer(self.pods)),
            slurmd=SlurmdNodes(ListInformer(self.slurmd)), recorder=self.recorder,
            binder=Binder(None, must_tolerate_lock=lambda node: False, observe_latency=lambda s: None),
            workloads=workloads or Workloads(ListInformer(self.k8s_jobs)))

    def _show_waiting(self, api, pod, condition):
        """Written, and shown at once by the (fake) watch."""
        self.writes.append(("waiting", pod["metadata"]["name"], condition["reason"], condition["message"]))
        pod.setdefault("status", {})["conditions"] = [condition]
        return True

    def _bind(self, api, pod, node, annotations):
        self.binds.append((pod["metadata"]["name"], node, dict(annotations)))

    def watch_shows_bindings(self):
        """The Pod informer catches up with every binding made (nodeName and the binding's annotations)."""
        for name, node, written in self.binds:
            pod = next(p for p in self.pods if p["metadata"]["name"] == name)
            pod["spec"]["nodeName"] = node
            pod["metadata"]["annotations"] = {**pod["metadata"]["annotations"], **written}

    @property
    def slurm(self):
        return self.scheduler.slurm


@pytest.fixture
def world(monkeypatch):
    return World(monkeypatch)


def running(job_id=7, nodes=("node1", "node2", "node3"), uids=("uid-0", "uid-1", "uid-2"), started=True,
            state="RUNNING"):
    """The gang's job as Slurm shows it, its identity in its AdminComment; running and ``started=False``:
    its prolog (which locks the nodes) still runs, so Slurm gives the reason Prolog."""
    identity = PlaceholderIdentity(GangKey(NS, f"job/{JOB_UID}"), NS, size=len(nodes),
                              members=tuple(member_tag(u) for u in uids), scheduler="sched").encode()
    return Job(id=job_id, state=state, state_reason="Prolog" if state == "RUNNING" and not started else "",
               nodes=",".join(nodes) if state == "RUNNING" else "",
               allocations=tuple(JobAllocation(node=n) for n in nodes) if state == "RUNNING" else (),
               admin_comment=identity)


def test_members_wait_unbound_until_all_exist_then_one_job_asks_for_one_node_each(world, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(reconciler.time, "monotonic", lambda: now[0])
    world.pods += [member(0), member(1)]
    result = world.scheduler.reconcile("uid-0")  # a member's UID is reconciled as its gang
    assert world.slurm.submitted == [] and world.binds == [] and world.writes == []
    assert result.requeue_after == pytest.approx(reconciler.PASSING_WAIT_GRACE)  # quiet for the usual grace
    now[0] += reconciler.PASSING_WAIT_GRACE
    world.scheduler.reconcile(OWNER)
    assert world.recorder.events == [("train-0", "WaitingForGang", "Job team/train: 2 of 3 members exist"),
                                     ("train-1", "WaitingForGang", "Job team/train: 2 of 3 members exist")]
    world.pods.append(member(2))
    world.scheduler.reconcile(OWNER)
    world.scheduler.reconcile("uid-1")  # again, before Slurm lists the job: never a second one
    (request,) = world.slurm.submitted
    assert (request.node_count, request.cpus_per_task, request.partition) == (3, 40, "batch")
    assert request.extra is None  # the job's user's: the identity is in the AdminComment
    identity = PlaceholderIdentity.parse(request.admin_comment)
    assert str(identity.unit) == OWNER and identity.size == 3
    assert all(identity.includes(f"uid-{i}") for i in range(3))
    env = dict(item.split("=", 1) for item in request.environment)
    assert env["SUNK_HOOK_TOKEN"] == hook_token(CONFIG.hook_secret, OWNER) and env["SUNK_POD_UID"] == OWNER
    assert world.index.view(OWNER).expected_job_id == 7
    # The submission names the job on every member at once, and nothing else.
    assert world.writes == [("record", f"train-{i}", {names.ANN_JOB_ID: "7"}) for i in range(3)]


def test_once_slurm_starts_the_job_every_member_is_bound_in_one_pass_to_its_own_node(world):
    world.pods += [member(2), member(0), member(1)]
    world.scheduler.reconcile(OWNER)
    world.index.upsert(running(nodes=("node2", "node3", "node4"), started=False), observed_at=1.0)
    world.scheduler.reconcile(OWNER)
    assert world.binds == []  # running, but the prolog has not locked every node yet
    configuring = attrs.evolve(running(nodes=("node2", "node3", "node4")), state_flags=("CONFIGURING",))
    world.index.upsert(configuring, observed_at=1.5)
    world.scheduler.reconcile(OWNER)
    assert world.binds == []  # nodes still booting, or PrologSlurmctld still running: not started either
    world.index.upsert(running(nodes=("node2", "node3", "node4")), observed_at=2.0)
    world.scheduler.reconcile("uid-2")
    assert sorted((name, node) for name, node, _ in world.binds) == [  # (bound at once: in any order)
        ("train-0", "worker-2"), ("train-1", "worker-3"), ("train-2", "worker-4")]  # leader on the batch host
    leader = next(written for name, _, written in world.binds if name == "train-0")
    assert leader == {names.ANN_JOB_ID: "7", names.ANN_SLURM_NODE: "node2"}
    assert world.recorder.reasons() == ["Scheduled"] * 3
    world.scheduler.reconcile(OWNER)  # before the watch shows them: not bound again
    assert len(world.binds) == 3
    world.watch_shows_bindings()
    assert world.scheduler.reconcile(OWNER).requeue_after is None and len(world.binds) == 3


def test_a_member_replaced_while_the_job_runs_takes_the_freed_node(world):
    world.pods += [member(i) for i in range(3)]
    world.index.upsert(running(), observed_at=1.0)
    world.scheduler.reconcile(OWNER)
    world.watch_shows_bindings()
    world.pods[1]["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"  # train-1 is being deleted
    world.pods.append(member(1, uid="uid-1b"))  # its controller makes it again
    world.scheduler.reconcile(OWNER)
    assert len(world.binds) == 3 and world.slurm.cancelled == []  # its node is held while it terminates
    del world.pods[1]  # gone
    world.scheduler.reconcile(OWNER)
    assert world.binds[-1][:2] == ("train-1", "worker-2") and world.slurm.cancelled == []
    assert len(world.slurm.submitted) == 0


def test_a_member_that_failed_frees_its_node_for_its_replacement(world):
    world.pods += [member(i) for i in range(3)]
    world.index.upsert(running(), observed_at=1.0)
    world.scheduler.reconcile(OWNER)
    world.watch_shows_bindings()
    world.pods[2]["status"]["phase"] = "Failed"
    world.pods.append(member(2, uid="uid-2b"))
    world.scheduler.reconcile(OWNER)
    assert world.binds[-1][:2] == ("train-2", "worker-3") and world.slurm.cancelled == []


def test_deleting_the_workload_cancels_the_job_once_every_member_is_gone(world):
    world.pods += [member(i) for i in range(3)]
    world.index.upsert(running(), observed_at=1.0)
    world.scheduler.reconcile(OWNER)
    world.watch_shows_bindings()
    for pod in world.pods:
        pod["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    world.scheduler.reconcile(OWNER)
    assert world.slurm.cancelled == []  # containers may still run on the nodes
    world.pods.clear()
    world.scheduler.reconcile(OWNER)
    assert world.slurm.cancelled == [7]


def test_a_pending_gang_whose_workload_is_deleted_is_cancelled_at_once(world):
    world.pods += [member(i) for i in range(3)]
    world.index.upsert(running(state="PENDING"), observed_at=1.0)
    for pod in world.pods:
        pod["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    world.scheduler.reconcile(OWNER)
    assert world.slurm.cancelled == [7]


def test_slurm_ending_the_job_deletes_every_member_naming_the_job(world):
    world.pods += [member(i) for i in range(3)]
    world.index.upsert(running(), observed_at=1.0)
    world.scheduler.reconcile(OWNER)
    world.watch_shows_bindings()
    world.index.upsert(running(state="CANCELLED"), observed_at=2.0)  # scancel
    world.scheduler.reconcile(OWNER)
    assert [w for w in world.writes if w[0] == "delete"] == [("delete", f"train-{i}") for i in range(3)]
    assert [e for e in world.recorder.events if e[1] != "Scheduled"] == [
        (f"train-{i}", "JobCancelled", "Slurm job 7 ended in state CANCELLED") for i in range(3)]
    assert world.slurm.submitted == []


def test_members_that_disagree_are_told_which_annotation_and_which_pods_and_get_no_job(world):
    world.pods += [member(0, annotations={names.ANN_QOS: "high"}), member(1), member(2)]
    world.scheduler.reconcile(OWNER)
    assert world.slurm.submitted == []
    message = ("sunk.coreweave.com/qos: the gang's Pods disagree: team/train-0 say 'high'; team/train-1, "
               "team/train-2 say nothing")
    assert world.recorder.events == [(f"train-{i}", "FailedValidation", message) for i in range(3)]
    assert [w[0] for w in world.writes] == ["unschedulable"] * 3


def test_the_job_size_comes_from_the_job_object_and_its_change_wakes_the_gang(world):
    world.k8s_jobs[0] = batch_job(parallelism=2)
    world.pods += [member(0), member(1)]
    world.scheduler.reconcile(OWNER)
    assert world.slurm.submitted[0].node_count == 2
    queued = []
    jobs = ListInformer(world.k8s_jobs)
    handlers = {}
    jobs.add_handler = lambda **kw: handlers.update(kw)  # (the informer fake has no handlers)
    attach_workload_feed(jobs, None, world.scheduler.pods, queued.append)
    handlers["on_update"](batch_job(2), batch_job(3))
    assert queued == [OWNER]


def test_a_job_status_the_job_controller_rewrites_wakes_no_gang(world):
    """Its counts of active and ready Pods change several times per Job as its Pods are made and start."""
    world.k8s_jobs[0] = batch_job(parallelism=2)
    world.pods += [member(0), member(1)]
    queued, handlers = [], {}
    jobs = ListInformer(world.k8s_jobs)
    jobs.add_handler = lambda **kw: handlers.update(kw)
    attach_workload_feed(jobs, None, world.scheduler.pods, queued.append)
    before = slim_job(batch_job(2))
    after = {**before, "metadata": {**before["metadata"], "resourceVersion": "99"}}
    full = {**batch_job(2), "status": {"active": 2, "ready": 1, "uncountedTerminatedPods": {}}}
    handlers["on_update"](before, after)
    handlers["on_update"](batch_job(2), full)
    assert queued == []
    handlers["on_update"](full, {**full, "status": {**full["status"], "succeeded": 1}})  # (sizes a Job of completions)
    handlers["on_update"](after, {**after, "spec": {**after["spec"], "suspend": True}})
    relabelled = {**after, "metadata": {**after["metadata"], "labels": {g.JOBSET_NAME: "js"}}}  # (a JobSet's child)
    handlers["on_update"](after, relabelled)
    assert queued == [OWNER, OWNER, OWNER]


def test_a_pod_group_status_wakes_no_gang_its_min_member_does():
    looked: list[str] = []

    class Pods:  # (attach_workload_feed asks the Pod index only for a workload's Pods)
        def of_workload(self, key: str) -> list:
            looked.append(key)
            return []

    handlers: dict = {}
    groups, jobs = ListInformer([]), ListInformer([])
    groups.add_handler = lambda **kw: handlers.update(kw)
    jobs.add_handler = lambda **kw: None
    attach_workload_feed(jobs, groups, Pods(), lambda key: None)
    pg = {"metadata": {"name": "pg", "namespace": NS, "labels": {}}, "spec": {"minMember": 3}}
    handlers["on_update"](pg, {**pg, "status": {"phase": "Running", "running": 3}})
    assert looked == []
    handlers["on_update"](pg, {**pg, "spec": {"minMember": 4}})
    assert len(looked) == 1


def test_a_job_not_known_yet_keeps_its_members_waiting(monkeypatch):
    world = World(monkeypatch, workloads=Workloads(ListInformer([])))
    world.pods += [member(i) for i in range(3)]
    world.scheduler.reconcile(OWNER)
    assert world.slurm.submitted == []


def test_a_restarted_scheduler_finds_the_gangs_job_and_binds_without_submitting(world, monkeypatch):
    world.pods += [member(i) for i in range(3)]
    world.scheduler.reconcile(OWNER)
    (request,) = world.slurm.submitted
    restarted = World(monkeypatch, pods=world.pods)
    # The cache's first list, before any reconcile: the job as Slurm keeps it (its AdminComment as submitted),
    # running past its prolog.
    restarted.index.upsert(Job(id=7, state="RUNNING", state_reason="None", nodes="node[1-3]",
                               admin_comment=request.admin_comment))
    restarted.scheduler.reconcile("uid-1")
    assert restarted.slurm.submitted == []
    assert sorted((n, node) for n, node, _ in restarted.binds) == [("train-0", "worker-1"), ("train-1", "worker-2"),
                                                             ("train-2", "worker-3")]


def test_a_pod_with_a_job_of_its_own_keeps_it(world):
    """A Job's Pod an older scheduler placed alone is not swept into a gang (its job would read as gone)."""
    world.pods += [member(0)]
    world.pods[0]["spec"]["nodeName"] = "worker-1"
    world.pods[0]["metadata"]["annotations"] = {names.ANN_JOB_ID: "5"}
    single = PlaceholderIdentity(PodKey("uid-0"), NS, name="train-0", scheduler="sched").encode()
    world.index.upsert(Job(id=5, state="RUNNING", nodes="node1", admin_comment=single))
    assert world.scheduler.gang_of(world.pods[0]) is None
    world.scheduler.reconcile(OWNER)
    world.scheduler.reconcile("uid-0")
    assert world.writes == [] and world.slurm.cancelled == [] and world.slurm.submitted == []


def test_the_extender_sees_each_members_share_of_the_gangs_decision(world):
    world.pods += [member(i) for i in range(3)]
    world.index.upsert(running(state="PENDING"), observed_at=1.0)
    pod = world.pods[1]
    assert world.scheduler.placement(pod, "uid-1") == Waiting(7, "PENDING", passing=True, members=("uid-1",))
    world.index.upsert(running(), observed_at=2.0)
    assert world.scheduler.placement(pod, "uid-1") == Bind(7, "node2", "worker-2")
    assert world.binds == []  # placement decides, never acts


def test_on_bind_takes_the_place_of_binding_for_every_member(monkeypatch):
    world = World(monkeypatch)
    heard = []
    world.scheduler.on_bind = lambda pod, bind: heard.append((pod["metadata"]["name"], bind.k8s_node))
    world.pods += [member(i) for i in range(3)]
    world.index.upsert(running(), observed_at=1.0)
    world.scheduler.reconcile(OWNER)
    assert sorted(heard) == [("train-0", "worker-1"), ("train-1", "worker-2"), ("train-2", "worker-3")]
    assert world.binds == []


def test_a_gangs_members_are_bound_at_once_not_one_after_the_other(monkeypatch):
    world = World(monkeypatch)
    together = threading.Barrier(3, timeout=5)  # each binding waits for the other two: one by one would break it
    monkeypatch.setattr(kubeops, "bind", lambda api, pod, node, annotations: (together.wait(), world._bind(
        api, pod, node, annotations)))
    world.pods += [member(i) for i in range(3)]
    world.index.upsert(running(), observed_at=1.0)
    world.scheduler.reconcile(OWNER)
    assert sorted((name, node) for name, node, _ in world.binds) == [
        ("train-0", "worker-1"), ("train-1", "worker-2"), ("train-2", "worker-3")]


def test_bindings_in_flight_never_exceed_the_process_wide_limit(monkeypatch):
    monkeypatch.setattr(reconciler, "GANG_BIND_CONCURRENCY", 2)
    world = World(monkeypatch)
    lock, in_flight, go = threading.Lock(), [0], threading.Event()

    def bind(api, pod, node, annotations):
        with lock:
            in_flight[0] += 1
        assert go.wait(5)  # held until the test has looked
        with lock:
            in_flight[0] -= 1
        world._bind(api, pod, node, annotations)

    monkeypatch.setattr(kubeops, "bind", bind)
    world.pods += [member(i) for i in range(3)]
    world.index.upsert(running(), observed_at=1.0)
    reconcile = threading.Thread(target=world.scheduler.reconcile, args=(OWNER,))
    reconcile.start()
    deadline = time.monotonic() + 5
    while in_flight[0] < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # a third binding, were the limit not kept, would have begun by now
    assert in_flight[0] == 2
    go.set()
    reconcile.join(5)
    assert len(world.binds) == 3


def test_a_failed_binding_leaves_the_others_bound_fails_the_reconcile_and_is_retried_alone(monkeypatch):
    world = World(monkeypatch)
    refuse = {"train-1"}

    def bind(api, pod, node, annotations):
        if pod["metadata"]["name"] in refuse:
            raise kube.ApiError(500, "Internal Server Error", method="POST", path="binding")
        world._bind(api, pod, node, annotations)

    monkeypatch.setattr(kubeops, "bind", bind)
    world.pods += [member(i) for i in range(3)]
    world.index.upsert(running(), observed_at=1.0)
    with pytest.raises(kube.ApiError):
        world.scheduler.reconcile(OWNER)
    assert sorted(name for name, _, _ in world.binds) == ["train-0", "train-2"]
    refuse.clear()
    world.scheduler.reconcile(OWNER)  # the controller's retry: the two bound are not bound again
    assert sorted((name, node) for name, node, _ in world.binds) == [
        ("train-0", "worker-1"), ("train-1", "worker-2"), ("train-2", "worker-3")]


def test_a_gang_whose_members_are_all_gone_is_forgotten(world):
    world.pods += [member(i) for i in range(3)]
    world.scheduler.reconcile(OWNER)
    world.pods.clear()
    world.index.remove(7)
    assert world.scheduler.reconcile(OWNER).requeue_after is None
    assert world.index.view(OWNER).expected_job_id is None


# -- the wiring ---------------------------------------------------------------------------------------------
def test_the_identity_parser_reads_a_gangs_job_in_scope_only():
    parse = identity_parser(CONFIG)
    text = PlaceholderIdentity(GangKey(NS, "podgroup/pg"), NS, size=2, members=("ab", "cd"), scheduler="sched").encode()
    owner = f"gang:{NS}/podgroup/pg"
    assert parse(Job(id=7, state="PENDING", state_reason="Priority", admin_comment=text)) == (owner, False)
    assert parse(Job(id=7, state="RUNNING", state_reason="None", admin_comment=text)) == (owner, True)
    other_ns = PlaceholderIdentity(GangKey("x", "podgroup/pg"), "x", size=2, members=("ab",),
                                   scheduler="sched").encode()
    other_scheduler = PlaceholderIdentity(GangKey(NS, "podgroup/pg"), NS, size=2, members=("ab",),
                                          scheduler="s2").encode()
    assert parse(Job(id=7, admin_comment=other_ns)) is None and parse(Job(id=7, admin_comment=other_scheduler)) is None


@pytest.mark.parametrize(("state", "flags", "reason", "started"), [
    ("RUNNING", (), "", True),
    ("RUNNING", (), "None", True),
    ("RUNNING", (), "Prolog", False),  # the prolog, which locks every node, still runs
    ("RUNNING", ("CONFIGURING",), "", False),  # nodes booting, or PrologSlurmctld: before the prolog
    ("PENDING", (), "Priority", False),
])
def test_the_identity_parser_takes_started_from_slurms_state_alone(state, flags, reason, started):
    """The job's user may write its Extra and Comment (and make the started call): none of it says started."""
    text = PlaceholderIdentity(GangKey(NS, "podgroup/pg"), NS, size=2, members=("ab", "cd"), scheduler="sched").encode()
    job = Job(id=7, state=state, state_flags=flags, state_reason=reason, admin_comment=text,
              extra=text + ": started", comment=": started")
    assert identity_parser(CONFIG)(job) == (f"gang:{NS}/podgroup/pg", started)


def test_the_identity_parser_never_reads_what_the_jobs_user_can_write():
    """A valid gang identity in the Extra or Comment of a job with no AdminComment names nothing: else a
    tenant could make the scheduler adopt, cancel or delete for another tenant's gang."""
    parse = identity_parser(CONFIG)
    text = PlaceholderIdentity(GangKey(NS, "podgroup/pg"), NS, size=2, members=("ab", "cd"), scheduler="sched").encode()
    assert parse(Job(id=7, state="RUNNING", extra=text)) is None
    assert parse(Job(id=7, state="RUNNING", comment=text)) is None
    assert parse(Job(id=7, state="RUNNING", extra=text, comment=text, admin_comment="")) is None


def test_a_job_whose_extra_names_the_gang_is_not_the_gangs(world):
    """The index keeps no forged job for the gang: its members get a job of their own, which names them where
    only Slurm's super users write."""
    world.pods += [member(i) for i in range(3)]
    forged = attrs.evolve(running(job_id=5), admin_comment="", extra=running().admin_comment)
    assert world.index.upsert(forged, observed_at=1.0) is None
    world.scheduler.reconcile(OWNER)
    assert world.binds == [] and world.slurm.cancelled == []
    (request,) = world.slurm.submitted
    assert str(PlaceholderIdentity.parse(request.admin_comment).unit) == OWNER


def test_a_member_finishing_wakes_its_gang_and_the_kubelets_other_status_does_not():
    before = member(0)
    running_pod = {**before, "status": {"phase": "Running", "podIP": "10.0.0.1"}}
    failed = {**before, "status": {"phase": "Failed"}}
    assert not changed_for_scheduling(before, running_pod)
    assert changed_for_scheduling(running_pod, failed)


def test_jobs_are_kept_slim():
    job = {**batch_job(4, 4), "spec": {"parallelism": 4, "completions": 4, "template": {"spec": {"x": "y" * 1000}}},
           "status": {"succeeded": 1, "conditions": [{"type": "x"}]}}
    job["metadata"]["labels"] = {g.JOBSET_NAME: "js"}
    slim = slim_job(job)
    assert "template" not in slim["spec"] and slim["status"] == {"succeeded": 1}
    assert g.job_size(slim) == g.job_size(job) == 3 and slim["metadata"]["labels"] == {g.JOBSET_NAME: "js"}


def test_podgroups_not_watched_or_not_synced_say_so():
    pg = g.Gang(g.KIND_POD_GROUP, NS, "pg", "podgroup/pg")
    assert "--gang-pod-groups" in Workloads(ListInformer([]), None).expected(pg, []).why

    class Unsynced(ListInformer):
        def has_synced(self):
            return False

    assert "sync" in Workloads(ListInformer([]), Unsynced([])).expected(pg, []).why

    class Synced(ListInformer):
        def has_synced(self):
            return True

    groups = Synced([{"metadata": {"name": "pg", "namespace": NS}, "spec": {"minMember": 3}}])
    assert Workloads(ListInformer([]), groups).expected(pg, []).size == 3


# -- the hook API, for a gang's job ------------------------------------------------------------------------
class HookSlurm:
    def __init__(self):
        self.jobs: dict[int, Job] = {}
        self.drained: list[tuple[str, str]] = []

    def get_job(self, job_id):
        if job_id not in self.jobs:
            raise NotFound(f"job {job_id}")
        return self.jobs[job_id]

    def get_node(self, name):
        return Node(name=name, state=frozenset({"ALLOCATED"}))  # (in service: sunk may drain it)

    read_node = get_node  # (the fresh single-node read: the same record here)

    def update_node(self, name, update):
        self.drained.append((name, update.reason))


@pytest.fixture
def hooks(world):
    world.pods += [member(i) for i in range(3)]
    job = running()
    world.index.upsert(job, observed_at=1.0)
    world.scheduler.reconcile(OWNER)
    world.watch_shows_bindings()
    slurm = HookSlurm()
    slurm.jobs[7] = job
    deleted: list[str] = []
    observed: list[Job] = []
    gone = world.gone = PodGone(world.scheduler.pods.by_uid)
    app = create_hooks_app(PlaceholderHooks(HookPorts(
        secret=CONFIG.hook_secret,
        jobs=IndexedJobs(world.index, identity_parser(CONFIG), observed=lambda job, at: observed.append(job)),
        pods=LookedUpPods(world.scheduler.pods.by_uid, deleted=lambda pod, why: deleted.append(pod["metadata"]["name"]),
                          gang=world.scheduler.gang_holders),
        slurm=slurm, gone=gone, ready=lambda: True)).blueprint())
    return app.test_client(), world, slurm, deleted, observed


GANG_AUTH = {"Authorization": f"Bearer {hook_token(CONFIG.hook_secret, OWNER)}", POD_UID_HEADER: OWNER}


def test_the_gangs_placeholder_reports_started_with_the_gangs_token(hooks):
    client, _, _, _, observed = hooks
    assert client.post("/api/v1/jobs/7/started", headers=GANG_AUTH).status_code == 200
    assert [j.id for j in observed] == [7]
    member_token = {"Authorization": f"Bearer {hook_token(CONFIG.hook_secret, 'uid-0')}", POD_UID_HEADER: "uid-0"}
    assert client.post("/api/v1/jobs/7/started", headers=member_token).status_code == 401  # not a member's


def test_as_the_job_ends_every_member_it_placed_is_deleted_and_waited_for(hooks):
    client, world, _, deleted, _ = hooks
    world.pods[2]["status"]["phase"] = "Succeeded"  # finished: holds nothing, left as it is
    response = client.post("/api/v1/jobs/7/terminating", headers=GANG_AUTH)
    assert response.status_code == 200 and response.get_json()["pods"] == ["team/train-0", "team/train-1"]
    assert deleted == ["train-0", "train-1"]
    assert client.get("/api/v1/jobs/7/pod?wait=0", headers=GANG_AUTH).status_code == 200
    del world.pods[0]
    assert client.get("/api/v1/jobs/7/pod?wait=0", headers=GANG_AUTH).status_code == 200  # train-1 still runs
    world.pods[0]["status"]["phase"] = "Failed"
    assert client.get("/api/v1/jobs/7/pod?wait=0", headers=GANG_AUTH).status_code == 404
    assert client.post("/api/v1/jobs/7/terminating", headers=GANG_AUTH).status_code == 404


def test_only_the_nodes_whose_member_outlived_killwait_are_drained(hooks):
    client, world, slurm, _, _ = hooks
    slurm.jobs[7] = Job(id=7, state="CANCELLED", nodes="node[1-3]", admin_comment=slurm.jobs[7].admin_comment)
    world.pods[1]["status"]["phase"] = "Succeeded"  # train-1 finished
    del world.pods[0]  # train-0 is gone; train-2 outlived KillWait
    response = client.post("/api/v1/jobs/7/drain", headers=GANG_AUTH)
    assert response.status_code == 200
    assert slurm.drained == [("node3", "k8s: sunk-placeholder: pod team/train-2 uid=uid-2 outlived KillWait after "
                                       "job 7")]


def test_a_long_poll_wakes_when_the_last_member_finishes(hooks):
    import threading

    client, world, _, _, _ = hooks
    world.pods[:] = world.pods[:1]
    answer = {}

    def poll():
        answer["status"] = client.get("/api/v1/jobs/7/pod?wait=5", headers=GANG_AUTH).status_code

    started = time.monotonic()
    thread = threading.Thread(target=poll)
    thread.start()
    time.sleep(0.2)
    world.pods[0]["status"]["phase"] = "Succeeded"
    world.gone.notify()  # (the Pod informer's update handler, scheduler/assembly.py)
    thread.join(10)
    assert answer["status"] == 404
    assert time.monotonic() - started < 2  # woken, not timed out


# -- through the in-process slurmrestd ----------------------------------------------------------------------------
def test_through_slurmrestd_one_job_of_three_nodes_then_three_bindings(monkeypatch):
    from sunk.slurm import connect
    from sunk_dev.fakeslurm import FakeSlurmrestd

    with FakeSlurmrestd(token="tok") as fake:
        slurm = connect("rest", url=fake.url, token="tok")
        world = World(monkeypatch, slurm=slurm)
        world.pods += [member(i) for i in range(3)]
        world.scheduler.reconcile(OWNER)
        (desc,) = fake.state.submitted
        assert (desc["minimum_nodes"], desc["maximum_nodes"], desc["tasks"], desc["cpus_per_task"]) == (3, 3, 3, 40)
        assert desc["name"] == "k8s:team/job/train" and desc["partition"] == "batch"
        job_id = world.index.view(OWNER).expected_job_id
        assert "extra" not in desc and str(PlaceholderIdentity.parse(desc["admin_comment"]).unit) == OWNER
        # Slurm allocates three nodes and runs the job past its prolog (its reason "None").
        fake.put_job(job_id, state=("RUNNING",), nodes="node[2-4]", admin_comment=desc["admin_comment"],
                     allocation=[(f"node{i}", 40, 1024) for i in (2, 3, 4)])
        job = slurm.get_job(job_id)
        assert world.index.upsert(job, observed_at=time.monotonic()) == OWNER
        world.scheduler.reconcile(OWNER)
        assert sorted((n, node) for n, node, _ in world.binds) == [("train-0", "worker-2"), ("train-1", "worker-3"),
                                                             ("train-2", "worker-4")]
        assert len(fake.state.submitted) == 1
        slurm.close()


def test_nothing_for_a_gang_with_no_member_and_no_job(world):
    assert world.scheduler.reconcile(OWNER).requeue_after is None
    assert isinstance(world.scheduler.unit_placement(GangKey.parse(OWNER))[1], Nothing)


def test_a_gang_too_large_for_one_jobs_identity_is_told_so_at_once(world):
    world.k8s_jobs[0] = batch_job(parallelism=500)
    world.pods += [member(0)]
    world.scheduler.reconcile(OWNER)
    ((name, reason, message),) = world.recorder.events
    assert (name, reason) == ("train-0", "FailedValidation")
    assert "a gang of 500 members does not fit one Slurm job's identity (1024 bytes" in message
    assert world.slurm.submitted == []


def test_the_schedulers_gpu_types_reach_the_request(monkeypatch):
    import attrs

    world = World(monkeypatch)
    world.scheduler.config = attrs.evolve(CONFIG, gpu_types=(("NVIDIA_L4", "l4"),))
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu.nvidia.com/class", "operator": "In", "values": ["NVIDIA_L4"]}]}]}}}
    for i in range(3):
        pod = member(i)
        pod["spec"]["affinity"] = affinity
        pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "2"
        world.pods.append(pod)
    world.scheduler.reconcile(OWNER)
    (request,) = world.slurm.submitted
    assert request.tres_per_node == "gres/gpu:l4:2" and request.constraints is None



def test_the_schedulers_gpu_types_reach_a_single_pods_request(monkeypatch):
    """Not only a gang's: a Pod of its own (here a Job's Pod that opted out) asks for the typed GRES
    too (the dev cluster's typed-GPU test found a single Pod's request still naming a feature)."""
    import attrs

    from sunk.model import names

    world = World(monkeypatch)
    world.scheduler.config = attrs.evolve(CONFIG, gpu_types=(("NVIDIA_L4", "l4"),))
    pod = member(0, annotations={names.ANN_GANG: "none"})
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu.nvidia.com/class", "operator": "In",
                                                     "values": ["NVIDIA_L4"]}]}]}}}
    pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
    world.pods.append(pod)
    world.scheduler.reconcile(pod["metadata"]["uid"])
    (request,) = world.slurm.submitted
    assert request.tres_per_node == "gres/gpu:l4:1" and request.constraints is None

# -- main's fault handling, for a gang's job ---------------------------------------------------------------------
class LosingSlurm(Slurm):
    """Each submission's answer is lost (OutcomeUnknown) while ``lose`` lasts; the job is made or not (``make``),
    and a fresh list shows it."""

    def __init__(self, *, lose=1, make=True):
        super().__init__()
        self.lose, self.make = lose, make
        self.made: list[Job] = []
        self.lists = 0

    def submit_job(self, request):
        job_id = super().submit_job(request)
        if self.make:
            self.made.append(Job(id=job_id, state="PENDING", state_reason="Priority",
                                 admin_comment=request.admin_comment))
        if self.lose > 0:
            self.lose -= 1
            raise OutcomeUnknown(f"submit job {request.name}: slurmrestd did not answer within 30s")
        return job_id

    def list_jobs(self, **_kw):
        self.lists += 1
        return Snapshot(items=tuple(self.made), last_update=1)


def losing_world(monkeypatch, slurm):
    world = World(monkeypatch, slurm=slurm)
    world.pods += [member(i) for i in range(3)]
    return world


def informed_losing_world(monkeypatch, slurm):
    """``losing_world`` whose job index is on a real jobs informer over ``slurm``, fed as the assembly feeds it."""
    from scheduler.assembly import attach_job_feed
    from sunk.slurm.informer import SlurmInformerFactory

    informer = SlurmInformerFactory(slurm, interval=1.0).jobs()
    index = JobIndex(identity_parser(CONFIG), clock=informer.clock, jobs=informer, doubt_margin=0.0)
    attach_job_feed(informer, index, lambda key: None)
    world = World(monkeypatch, slurm=slurm, jobs=index)
    world.pods += [member(i) for i in range(3)]
    return world, informer


def test_a_gangs_submission_whose_answer_was_lost_is_looked_up_by_the_gangs_identity_not_made_twice(monkeypatch):
    """OutcomeUnknown: Slurm may have made the gang's job. The retry submits nothing until the jobs informer's
    next list, which adopts the job whose AdminComment names the gang (its key, not any member's UID)."""
    world, informer = informed_losing_world(monkeypatch, LosingSlurm())
    assert world.scheduler.reconcile(OWNER).requeue_after == reconciler.LOST_ANSWER_SETTLE
    assert world.index.view(OWNER).in_doubt and world.recorder.events == []
    world.scheduler.reconcile("uid-1")  # the retry (any member's key is its gang's), before any list
    assert len(world.slurm.submitted) == 1, "a second job for the gang"
    assert world.slurm.lists == 0
    assert informer.refresh().ok
    view = world.index.view(OWNER)
    assert [j.id for j in view.jobs] == [7] and not view.in_doubt
    world.scheduler.reconcile("uid-1")
    assert len(world.slurm.submitted) == 1
    assert {e[1] for e in world.recorder.events} <= {"WaitingForSlurm"}


def test_a_gangs_lost_submission_that_made_no_job_is_submitted_again_once(monkeypatch):
    world, informer = informed_losing_world(monkeypatch, LosingSlurm(make=False))
    world.scheduler.reconcile(OWNER)
    assert informer.refresh().ok
    world.scheduler.reconcile(OWNER)
    assert len(world.slurm.submitted) == 2 and world.slurm.lists == 1
    assert world.index.view(OWNER).expected_job_id == 8 and not world.index.view(OWNER).in_doubt
    assert world.slurm.submitted[1].node_count == 3


def test_the_gangs_job_seen_by_the_cache_settles_the_doubt_without_a_lookup(monkeypatch):
    """Main's d90f8f7, for a gang: the cache's list shows the job first; no list of Slurm's jobs is needed."""
    world = losing_world(monkeypatch, LosingSlurm())
    world.scheduler.reconcile(OWNER)
    (made,) = world.slurm.made
    world.index.upsert(running(job_id=made.id), observed_at=1.0)
    assert not world.index.view(OWNER).in_doubt
    world.scheduler.reconcile(OWNER)
    assert world.slurm.lists == 0 and len(world.slurm.submitted) == 1 and len(world.binds) == 3


def test_slurm_refusing_the_token_tells_every_member_and_is_retried(monkeypatch):
    """AuthenticationFailed is an outage of ours: every member hears why it waits, none is marked unschedulable,
    and nothing is remembered as a refusal."""

    class Refusing(Slurm):
        def submit_job(self, request):
            raise AuthenticationFailed("slurmrestd: 401", http_status=401, token_source="/var/run/token")

    world = losing_world(monkeypatch, Refusing())
    with pytest.raises(AuthenticationFailed):
        world.scheduler.reconcile(OWNER)
    assert world.recorder.reasons() == ["SlurmAuthenticationFailed"] * 3
    assert world.writes == [] and world.index.view(OWNER).refused is None


class NodeSlurm(Slurm):
    """Records node reads and drains, and cancellations, in order."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple] = []

    def read_node(self, name):
        self.calls.append(("read_node", name))
        return Node(name, state="ALLOCATED")

    def update_node(self, name, update):
        self.calls.append(("drain", name, update.state, update.reason))

    def cancel_job(self, job_id, signal=None):
        self.calls.append(("cancel", job_id))
        super().cancel_job(job_id)


GRACE_END = 1893456030.0  # 2030-01-01T00:00:30Z


def test_a_member_stuck_on_a_lost_node_lets_the_gangs_job_go_after_grace_and_margin(monkeypatch):
    """Main's stuck-Pod margin, for a gang: the member's Slurm node is drained (k8s: sunk-stuck, naming it), then the
    gang's job cancelled; its end deletes the other members, and the gang is placed again, whole."""
    now = [GRACE_END + 10]
    ready = {"worker-1": True, "worker-2": False, "worker-3": True}
    world = World(monkeypatch, slurm=NodeSlurm())
    world.scheduler.clock = lambda: now[0]
    world.scheduler.node_ready = lambda node: ready.get(node, False)
    world.pods += [member(i) for i in range(3)]
    world.index.upsert(running(), observed_at=1.0)
    world.scheduler.reconcile(OWNER)
    world.watch_shows_bindings()
    world.pods[1]["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:30Z"  # on worker-2, whose kubelet is gone
    result = world.scheduler.reconcile(OWNER)
    assert world.slurm.calls == []  # within its grace period and the margin: held, as a single Pod's
    assert result.requeue_after == pytest.approx(50.0)  # looked at again when it is due
    world.pods.append(member(1, uid="uid-1b"))  # its controller makes it again: it waits for a freed node
    assert world.scheduler.reconcile(OWNER).requeue_after == pytest.approx(reconciler.WAITING_RESYNC)
    now[0] = GRACE_END + 55
    assert world.scheduler.reconcile(OWNER).requeue_after == pytest.approx(5.0)  # due before the next resync
    assert world.slurm.calls == []
    now[0] = GRACE_END + 60
    world.scheduler.reconcile(OWNER)
    (read, drain, cancel) = world.slurm.calls
    assert read == ("read_node", "node2") and cancel == ("cancel", 7)  # drained first: nothing starts there
    assert drain[:3] == ("drain", "node2", "DRAIN")
    assert parse_drain(drain[3]) == StuckPodDrain(NS, "train-1", "uid-1", "worker-2", 7)
    assert [e[:2] for e in world.recorder.events if e[1] not in ("Scheduled", "WaitingForSlurm")] == [
        ("train-1", "StuckTerminating")]
    world.index.upsert(running(state="CANCELLED"), observed_at=2.0)
    world.scheduler.reconcile(OWNER)
    assert [w for w in world.writes if w[0] == "delete"] == [("delete", "train-0"), ("delete", "train-2")]


def test_a_member_terminating_on_a_ready_node_keeps_the_gangs_job(monkeypatch):
    world = World(monkeypatch, slurm=NodeSlurm())
    world.scheduler.clock = lambda: GRACE_END + 3600
    world.pods += [member(i) for i in range(3)]
    world.index.upsert(running(), observed_at=1.0)
    world.scheduler.reconcile(OWNER)
    world.watch_shows_bindings()
    world.pods[1]["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:30Z"
    assert world.scheduler.reconcile(OWNER).requeue_after is None
    assert world.slurm.calls == []


def test_the_extender_sees_the_stuck_members_release_as_its_own_and_the_others_wait():
    from scheduler.decide import ReleaseStuck, share

    release = ReleaseStuck("uid-1", 7, ("node2",), "worker-2")
    assert share(release, "uid-1") == release
    assert isinstance(share(release, "uid-0"), Nothing)


def test_every_waiting_member_shows_the_gangs_job_its_partition_and_slurms_reason(world):
    world.pods += [member(i) for i in range(3)]
    job = attrs.evolve(running(state="PENDING"), state_reason="ReqNodeNotAvail", partition="batch")
    world.index.upsert(job, observed_at=1.0)
    world.scheduler.reconcile(OWNER)
    world.scheduler.reconcile(OWNER)  # a poll later: nothing new to say
    message = "Slurm job 7 (partition batch): ReqNodeNotAvail"
    assert [w for w in world.writes if w[0] == "waiting"] == [("waiting", f"train-{i}", "WaitingForSlurm", message)
                                                              for i in range(3)]
    assert world.recorder.reasons() == ["WaitingForSlurm"] * 3
    assert 'sunk_pods_waiting{reason="ReqNodeNotAvail"} 3' in world.scheduler.waiting_exposition()
    world.index.upsert(attrs.evolve(job, state_reason="JobHeldUser"), observed_at=2.0)
    world.scheduler.reconcile(OWNER)  # within the rate limit of the first write: held back, requeued
    assert len([w for w in world.writes if w[0] == "waiting"]) == 3
    assert 'sunk_pods_waiting{reason="JobHeldUser"} 3' in world.scheduler.waiting_exposition()
