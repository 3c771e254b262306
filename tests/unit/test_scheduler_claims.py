"""sunk-scheduler with --dra-device-mapping: a Pod's ResourceClaims ask its job for GPUs, wait to be made, and are
filled with the devices of the GRES indices Slurm gave the job before the Pod is bound; a disagreement between
Slurm and the driver drains the node, never binds."""

from __future__ import annotations

from typing import Any

import pytest
from informer_fakes import ListInformer, StoreInformer
from policy_fakes import TEST_POLICY

from scheduler import claims as claims_module
from scheduler import kubeops
from scheduler.assembly import identity_parser
from scheduler.binder import Binder
from scheduler.claims import DELETE_PROTECTION, ClaimAllocator, ClaimsView
from scheduler.config import SchedulerConfig
from scheduler.gangs import Workloads
from scheduler.jobindex import JobIndex
from scheduler.reconciler import PodIndex, PodScheduler, SlurmdNodes
from sunk.kube.dra import INDEX_NODE, slice_node
from sunk.model.slurm import GresGrant, Job, JobAllocation, Node
from sunk.translate import dra, gang
from sunk.translate.drains import DeviceMismatchDrain
from sunk.translate.drains import parse as parse_drain
from sunk.translate.gang import has_started
from sunk.translate.identity import PlaceholderIdentity, member_tag
from sunk.translate.keys import GangKey, unit_key

DRIVER = "gpu.example.com"
MAPPING = dra.DeviceMapping(DRIVER, frozenset({"gpu.example.com"}), attribute="index")


def parse(job: Job) -> tuple[str, bool] | None:
    uid = job.admin_comment
    return (uid, has_started(job)) if uid.startswith("uid-") else None


def pod(*claims: dict[str, Any], made: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "uid-a", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"terminationGracePeriodSeconds": 5, "resourceClaims": list(claims),
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                                                                "claims": [{"name": c["name"]} for c in claims]}}]},
            "status": {"resourceClaimStatuses": [{"name": k, "resourceClaimName": v} for k, v in (made or {}).items()]}}


def claim(name: str, count: int = 2, device_class: str = "gpu.example.com") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"claim-{name}", "resourceVersion": "1"},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": device_class,
                                                                           "count": count}}]}}}


def resource_slice(*indices: int) -> dict[str, Any]:
    return {"metadata": {"name": "worker-1-gpus"}, "spec": {
        "driver": DRIVER, "nodeName": "worker-1",
        "pool": {"name": "worker-1", "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}}} for i in indices]}}


class Slurm:
    """Submissions, one job's allocations, node reads and writes, cancellations: in order."""

    def __init__(self, indices: tuple[int, ...] = (1, 3)):
        self.calls: list[tuple[Any, ...]] = []
        self.submitted: list[Any] = []
        self.indices = indices

    def submit_job(self, request: Any) -> int:
        self.submitted.append(request)
        return 7

    def get_job_allocations(self, job_id: int) -> Job:
        self.calls.append(("read_job", job_id))
        grant = GresGrant("gpu", "h100", len(self.indices), self.indices)
        return Job(id=job_id, state="RUNNING", nodes="node1", admin_comment="uid-a",
                   allocations=(JobAllocation("node1", cpus=1, gpus=len(self.indices), gres=(grant,)),))

    def read_node(self, name: str) -> Node:
        self.calls.append(("read_node", name))
        return Node(name, state=("ALLOCATED",))

    def update_node(self, name: str, update: Any) -> None:
        self.calls.append(("drain", name, update.state, update.reason))

    def cancel_job(self, job_id: int, signal: Any = None) -> None:
        self.calls.append(("cancel", job_id))


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def event(self, obj: Any, type_: str, reason: str, message: str) -> None:
        self.events.append((reason, message))


@pytest.fixture
def world(monkeypatch):
    """A Pod of sunk-scheduler, uid-a, with the claims a test gives it; Slurm node node1 on Node worker-1."""
    writes: list[tuple[Any, ...]] = []

    def kube_patch(api, resource, name, body, namespace=None, **_kw):
        writes.append(("finalizer", name, tuple(body["metadata"]["finalizers"])))
        stored = dict(claims.get(f"{namespace}/{name}"))
        stored["metadata"] = {**stored["metadata"], "finalizers": body["metadata"]["finalizers"],
                              "resourceVersion": "2"}
        claims.put(stored)
        return stored

    def kube_replace(api, resource, obj, *, subresource=None):
        status = obj.get("status") or {}
        devices = [r["device"] for r in ((status.get("allocation") or {}).get("devices") or {}).get("results") or ()]
        writes.append(("status", obj["metadata"]["name"], tuple(devices),
                       tuple(r["uid"] for r in status.get("reservedFor") or ())))
        claims.put(obj)
        return obj

    monkeypatch.setattr(claims_module.kube, "patch", kube_patch)
    monkeypatch.setattr(claims_module.kube, "replace", kube_replace)
    monkeypatch.setattr(kubeops, "bind", lambda api, obj, node, annotations: writes.append(("bind", node)))
    monkeypatch.setattr(kubeops, "record_job", lambda api, obj, annotations, **_kw: True)
    monkeypatch.setattr(kubeops, "show_waiting", lambda api, obj, condition: True)
    monkeypatch.setattr(kubeops, "mark_unschedulable",
                        lambda api, obj, message: writes.append(("unschedulable", message)) or True)
    claims = StoreInformer()
    claims.add_indexer(INDEX_NODE, lambda c: [n] if (n := dra.allocated_on(c)) else [])
    slices = StoreInformer([resource_slice(0, 1, 2, 3)])
    slices.add_indexer(INDEX_NODE, slice_node)

    class World:
        def __init__(self) -> None:
            self.writes, self.claims, self.slices = writes, claims, slices
            self.pods: list[dict[str, Any]] = []
            self.ours: set[str] = set()  # UIDs of the scheduler's own other Pods
            self.ended: list[tuple[str, str]] = []  # (namespace, uid) of other Pods the apiserver shows ended
            self.asked: list[str] = []  # the consumers' UIDs ``ended`` was asked about
            self.now = 0.0
            self.slurm = Slurm()
            self.recorder = Recorder()
            self.jobs = JobIndex(parse)
            view = ClaimsView(MAPPING, claims)
            self.scheduler = PodScheduler(
                api=None, slurm=self.slurm, config=SchedulerConfig("s", b"x" * 16, "http://h",
                                                                   identity_policy=TEST_POLICY, dra=MAPPING),
                jobs=self.jobs, pods=PodIndex(ListInformer(self.pods)),
                slurmd=SlurmdNodes(ListInformer([{"metadata": {"name": "node1"}, "spec": {"nodeName": "worker-1"}}])),
                recorder=self.recorder, claims=view,
                binder=Binder(None, claims=ClaimAllocator(None, self.slurm, view, slices, ours=self.ours.__contains__,
                                                          ended=self._ended, clock=lambda: self.now),
                              must_tolerate_lock=lambda _node: False, observe_latency=lambda _s: None))

        def _ended(self, namespace: str, consumer: dict[str, Any]) -> bool:
            self.asked.append(consumer["uid"])
            return (namespace, consumer["uid"]) in self.ended

        def reconcile(self) -> Any:
            return self.scheduler.reconcile("uid-a")

        def start(self) -> None:
            """Slurm runs the job on node1, past its prolog."""
            self.jobs.upsert(Job(id=7, state="RUNNING", nodes="node1", admin_comment="uid-a"))

    return World()


def test_the_job_asks_slurm_for_as_many_gpus_as_the_claims_do(world):
    world.claims.put(claim("one", 1))
    world.claims.put(claim("made-x7", 2))
    world.pods.append(pod({"name": "a", "resourceClaimName": "one"}, {"name": "b", "resourceClaimTemplateName": "t"},
                          made={"b": "made-x7"}))
    world.reconcile()
    (request,) = world.slurm.submitted
    assert request.gpus_per_node == 3


def test_a_pod_waits_for_the_claim_its_template_makes_and_submits_once_it_is_seen(world):
    world.pods.append(pod({"name": "b", "resourceClaimTemplateName": "t"}))
    result = world.reconcile()
    assert world.slurm.submitted == [] and result.requeue_after is not None
    world.pods[0] = pod({"name": "b", "resourceClaimTemplateName": "t"}, made={"b": "p-b-1"})
    world.reconcile()
    assert world.slurm.submitted == []  # made, not seen yet
    world.claims.put(claim("p-b-1", 1))
    world.reconcile()
    assert [r.gpus_per_node for r in world.slurm.submitted] == [1]


def test_a_claim_sunk_cannot_fill_is_refused_on_the_pod_with_the_reason(world):
    world.claims.put(claim("one", 1, device_class="fpga.example.com"))
    world.pods.append(pod({"name": "a", "resourceClaimName": "one"}))
    world.reconcile()
    assert world.slurm.submitted == []
    (reason, message), = world.recorder.events
    assert reason == "FailedValidation" and "DeviceClass 'fpga.example.com' is not one Slurm allocates" in message


def test_the_claims_are_filled_with_the_devices_of_slurms_indices_then_the_pod_is_bound(world):
    world.claims.put(claim("one", 2))
    world.pods.append(pod({"name": "a", "resourceClaimName": "one"}))
    world.start()
    world.reconcile()
    assert world.writes == [("finalizer", "one", (DELETE_PROTECTION,)),
                            ("status", "one", ("gpu-1", "gpu-3"), ("uid-a",)), ("bind", "worker-1")]
    assert world.slurm.calls == [("read_job", 7)]
    stored = world.claims.get("ns/one")
    assert dra.allocated_on(stored) == "worker-1" and dra.same_allocation(
        stored, [{"request": "gpus", "driver": DRIVER, "pool": "worker-1", "device": f"gpu-{i}"} for i in (1, 3)],
        "worker-1")


def test_a_retried_binding_writes_no_claim_again(world, monkeypatch):
    world.claims.put(claim("one", 2))
    world.pods.append(pod({"name": "a", "resourceClaimName": "one"}))
    world.start()
    monkeypatch.setattr(kubeops, "bind", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("apiserver gone")))
    with pytest.raises(RuntimeError):
        world.reconcile()
    monkeypatch.setattr(kubeops, "bind", lambda api, obj, node, annotations: world.writes.append(("bind", node)))
    world.reconcile()
    assert [w[0] for w in world.writes] == ["finalizer", "status", "bind"]


def test_a_device_another_claim_holds_drains_the_node_and_cancels_the_job_never_binds(world):
    """kube-scheduler gave gpu-3 to a Pod sunk did not place: Slurm, which counts it free, gave index 3 again."""
    theirs = claim("theirs", 1)
    theirs["status"] = dra.claim_status([{"request": "gpus", "driver": DRIVER, "pool": "worker-1",
                                          "device": "gpu-3"}], "worker-1",
                                        {"metadata": {"name": "web", "uid": "uid-web"}})
    world.claims.put(theirs)
    world.claims.put(claim("one", 2))
    world.pods.append(pod({"name": "a", "resourceClaimName": "one"}))
    world.start()
    world.reconcile()
    assert not [w for w in world.writes if w[0] in ("bind", "status", "finalizer")]
    read_job, read_node, drain, cancel = world.slurm.calls
    assert (read_job, read_node, cancel) == (("read_job", 7), ("read_node", "node1"), ("cancel", 7))
    parsed = parse_drain(drain[3])
    assert drain[:3] == ("drain", "node1", "DRAIN") and isinstance(parsed, DeviceMismatchDrain)
    assert parsed.k8s_node == "worker-1" and "gpu-3, which another ResourceClaim holds" in parsed.detail
    assert "theirs" not in drain[3]  # (no other tenant's claim named in Slurm, where every user reads it)
    (reason, message), = world.recorder.events
    assert reason == "DeviceMismatch" and "theirs" not in message


def test_a_record_without_the_gres_detail_is_waited_for_not_guessed(world, monkeypatch):
    world.claims.put(claim("one", 2))
    world.pods.append(pod({"name": "a", "resourceClaimName": "one"}))
    world.start()
    monkeypatch.setattr(world.slurm, "get_job_allocations", lambda job_id: Job(
        id=job_id, state="RUNNING", nodes="node1", allocations=(JobAllocation("node1", gres_unread=True),)))
    with pytest.raises(claims_module.ClaimsNotReady, match="does not show which GPUs it holds on node1"):
        world.reconcile()
    assert not [w for w in world.writes if w[0] in ("bind", "status", "finalizer")]
    assert [reason for reason, _ in world.recorder.events] == ["WaitingForResourceClaims"]


def test_without_a_mapping_a_pod_with_claims_is_refused(world):
    world.scheduler.claims = None
    world.scheduler.config = SchedulerConfig("s", b"x" * 16, "http://h", identity_policy=TEST_POLICY)
    world.claims.put(claim("one", 1))
    world.pods.append(pod({"name": "a", "resourceClaimName": "one"}))
    world.reconcile()
    (reason, message), = world.recorder.events
    assert reason == "FailedValidation" and "not allocated by sunk's scheduler" in message


def test_a_claim_made_again_with_another_count_since_submission_ends_the_job_and_drains_nothing(world):
    """The Pod's author deleted its claim of 2 and made one of 3 once the job was submitted: the Pod's doing, not
    the node's (a drain here would let any tenant drain nodes)."""
    world.claims.put(claim("one", 2))
    world.pods.append(pod({"name": "a", "resourceClaimName": "one"}))
    world.reconcile()
    assert [r.gpus_per_node for r in world.slurm.submitted] == [2]
    world.claims.put(claim("one", 3))
    world.start()
    world.reconcile()
    assert world.slurm.calls == [("read_job", 7), ("cancel", 7)]  # no read_node, no drain
    assert not [w for w in world.writes if w[0] in ("bind", "status", "finalizer")]
    (reason, message), = [e for e in world.recorder.events if e[0] != "WaitingForSlurm"]
    assert reason == "ResourceClaimsChanged" and "ask for 3 device(s), but its Slurm job holds 2" in message


def test_a_claim_deleted_since_submission_ends_the_job(world):
    world.claims.put(claim("one", 2))
    world.pods.append(pod({"name": "a", "resourceClaimName": "one"}))
    world.reconcile()
    world.claims.remove(claim("one", 2))
    world.start()
    world.reconcile()
    assert world.slurm.calls == [("cancel", 7)]
    assert [e[0] for e in world.recorder.events if e[0] != "WaitingForSlurm"] == ["ResourceClaimsChanged"]


def held_by(name: str, device: str, consumer_uid: str | None, *, finalizer: bool = True) -> dict[str, Any]:
    held = claim(name, 1)
    held["metadata"]["finalizers"] = [DELETE_PROTECTION] if finalizer else []
    consumer = {"metadata": {"name": f"p-{name}", "uid": consumer_uid or ""}}
    held["status"] = dra.claim_status([{"request": "gpus", "driver": DRIVER, "pool": "worker-1", "device": device}],
                                      "worker-1", consumer)
    if consumer_uid is None:
        held["status"]["reservedFor"] = []
    return held


@pytest.mark.parametrize(("consumer", "finalizer"), [("uid-old", True), (None, True)],
                         ids=["sunk-pod-whose-job-ended", "unreserved-being-deallocated"])
def test_a_device_still_held_by_a_claim_on_its_way_out_is_waited_for_then_the_job_goes(world, consumer, finalizer):
    """Slurm gave gpu-3 again once the job of the Pod sunk filled it for ended, before kube-controller-manager
    deallocated that claim: not a mismatch (no drain), the binding waits; past the deadline the job goes."""
    world.ours.add("uid-old")
    world.claims.put(held_by("old", "gpu-3", consumer, finalizer=finalizer))
    world.claims.put(claim("one", 2))
    world.pods.append(pod({"name": "a", "resourceClaimName": "one"}))
    world.start()
    with pytest.raises(claims_module.ClaimsNotReady, match="still held by a ResourceClaim being released"):
        world.reconcile()
    assert ("drain" not in [c[0] for c in world.slurm.calls]) and not [w for w in world.writes if w[0] == "bind"]
    world.claims.remove(held_by("old", "gpu-3", consumer))  # deallocated: the retry binds
    world.reconcile()
    assert [w[0] for w in world.writes] == ["finalizer", "status", "bind"]


def test_a_device_held_for_a_pod_of_sunks_other_front_end_that_ended_is_waited_for_not_drained(world):
    """sunk-extender's Pod (not in sunk-scheduler's index) finished and its job ended; Slurm gave its GPU to this
    job before kube-controller-manager released the claim: the apiserver says that Pod ended, so the binding waits.
    Only then is the apiserver asked, and only about that claim's consumer."""
    world.claims.put(claim("idle", 1))  # (a claim on no device: never asked about)
    world.claims.put(held_by("extenders", "gpu-3", "uid-ext"))
    world.claims.put(claim("one", 2))
    world.pods.append(pod({"name": "a", "resourceClaimName": "one"}))
    world.start()
    world.ended.append(("ns", "uid-ext"))
    with pytest.raises(claims_module.ClaimsNotReady, match="still held by a ResourceClaim being released"):
        world.reconcile()
    assert world.asked == ["uid-ext"] and "drain" not in [c[0] for c in world.slurm.calls]
    # The same claim for a Pod that still runs: Slurm and Kubernetes disagree, the node is drained.
    world.ended.clear()
    world.reconcile()
    assert [c[0] for c in world.slurm.calls if c[0] in ("drain", "cancel")] == ["drain", "cancel"]


def test_no_device_held_means_no_apiserver_read(world):
    world.claims.put(held_by("extenders", "gpu-0", "uid-ext"))  # (index 0: not this job's)
    world.claims.put(claim("one", 2))
    world.pods.append(pod({"name": "a", "resourceClaimName": "one"}))
    world.start()
    world.reconcile()
    assert world.asked == [] and [w[0] for w in world.writes] == ["finalizer", "status", "bind"]


def test_a_binding_that_waits_past_the_deadline_ends_the_job(world):
    world.ours.add("uid-old")
    world.claims.put(held_by("old", "gpu-3", "uid-old"))
    world.claims.put(claim("one", 2))
    world.pods.append(pod({"name": "a", "resourceClaimName": "one"}))
    world.start()
    with pytest.raises(claims_module.ClaimsNotReady):
        world.reconcile()
    world.now = claims_module.CLAIMS_READY_DEADLINE + 1
    world.reconcile()
    assert world.slurm.calls[-1] == ("cancel", 7) and "drain" not in [c[0] for c in world.slurm.calls]
    assert world.recorder.events[-1][0] == "ResourceClaimsChanged" and "not ready within 60s" in \
        world.recorder.events[-1][1]


def test_a_claim_that_changes_as_it_is_written_is_read_again_not_taken_for_a_bound_pod(world, monkeypatch):
    """A 409 on the claim (its author edits it) is not the Binding's 409 ("bound already"): the binding is retried."""
    from sunk.kube.client import ApiError

    world.claims.put(claim("one", 2))
    world.pods.append(pod({"name": "a", "resourceClaimName": "one"}))
    world.start()
    real = claims_module.kube.patch

    def conflict(*_a, **_k):
        raise ApiError(409, "Conflict", {"message": "the object has been modified"})

    monkeypatch.setattr(claims_module.kube, "patch", conflict)
    with pytest.raises(claims_module.ClaimsNotReady, match="changed as it was written"):
        world.reconcile()
    monkeypatch.setattr(claims_module.kube, "patch", real)
    world.reconcile()
    assert [w[0] for w in world.writes] == ["finalizer", "status", "bind"]


def test_gpus_through_claims_and_as_nvidia_com_gpu_at_once_are_refused(world):
    world.claims.put(claim("one", 1))
    mixed = pod({"name": "a", "resourceClaimName": "one"})
    mixed["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    world.pods.append(mixed)
    world.reconcile()
    assert world.slurm.submitted == []
    (reason, message), = world.recorder.events
    assert reason == "FailedValidation" and "through ResourceClaims or as nvidia.com/gpu, not both" in message


# -- a gang's members with claims (a batch/v1 Job's Pods are a gang, even one of a single Pod) ------------------

JOB_UID = "0c5a0000-0000-4000-8000-00000000c0de"
GANG = f"gang:ns/job/{JOB_UID}"


def job_member(i: int, *claims: dict[str, Any], made: dict[str, str] | None = None,
               gpus: str | None = None) -> dict[str, Any]:
    member = pod(*claims, made=made)
    member["metadata"].update(name=f"train-{i}", uid=f"uid-{i}", labels={
        "batch.kubernetes.io/job-name": "train", "batch.kubernetes.io/controller-uid": JOB_UID,
        gang.JOB_COMPLETION_INDEX: str(i)})
    member["spec"]["schedulerName"] = "s"
    if gpus is not None:
        member["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": gpus}
    return member


def gang_world(world: Any, parallelism: int) -> PodScheduler:
    """The world's scheduler, with a batch/v1 Job ``train`` of ``parallelism`` Pods (its gang) and the scheduler's
    identity parser (the gang's job is known by its identity)."""
    config = SchedulerConfig("s", b"x" * 16, "http://h", identity_policy=TEST_POLICY, dra=MAPPING)
    k8s_job = {"apiVersion": "batch/v1", "kind": "Job", "status": {}, "spec": {"parallelism": parallelism},
               "metadata": {"name": "train", "namespace": "ns", "uid": JOB_UID}}
    world.jobs = JobIndex(identity_parser(config))
    old = world.scheduler
    world.scheduler = PodScheduler(api=None, slurm=world.slurm, config=config, jobs=world.jobs,
                                   pods=old.pods, slurmd=old.slurmd, recorder=world.recorder, claims=old.claims,
                                   binder=old.binder, workloads=Workloads(ListInformer([k8s_job])))
    return world.scheduler


def test_a_job_of_one_pod_with_a_claim_template_waits_for_its_claim_then_is_filled_and_bound(world):
    """A batch/v1 Job's Pod is a gang member: its claims are waited for, ask the gang's job for GPUs per node, and
    are filled with the devices of its node's GRES indices before the binding, as a lone Pod's."""
    scheduler = gang_world(world, 1)
    template = {"name": "gpus", "resourceClaimTemplateName": "two"}
    world.pods.append(job_member(0, template))
    result = scheduler.reconcile(GANG)
    assert world.slurm.submitted == [] and result.requeue_after is not None
    _members, waiting, _gang = scheduler.unit_placement(unit_key(GANG))
    assert waiting.event == "WaitingForResourceClaims", waiting
    assert "(the claim of gpus, not made yet)" in waiting.reason, waiting
    world.pods[0] = job_member(0, template, made={"gpus": "train-0-gpus-x1"})
    world.claims.put(claim("train-0-gpus-x1", 2))
    scheduler.reconcile(GANG)
    (request,) = world.slurm.submitted
    assert request.gpus_per_node == 2 and request.node_count == 1
    identity = PlaceholderIdentity(GangKey("ns", f"job/{JOB_UID}"), "ns", size=1, members=(member_tag("uid-0"),),
                                   scheduler="s").encode()
    world.jobs.upsert(Job(id=7, state="RUNNING", nodes="node1", admin_comment=identity))
    scheduler.reconcile(GANG)
    assert world.writes == [("finalizer", "train-0-gpus-x1", (DELETE_PROTECTION,)),
                            ("status", "train-0-gpus-x1", ("gpu-1", "gpu-3"), ("uid-0",)), ("bind", "worker-1")]


@pytest.mark.parametrize(("second", "per_node", "off"), [
    ({"claims": 1}, 2, "ns/train-1 (1)"),  # claims of another count
    ({"gpus": "4"}, 4, "ns/train-0 (2)"),  # a member asking more as nvidia.com/gpu: every node would hold 4
])
def test_gang_members_whose_claims_cannot_take_their_nodes_gpus_are_refused_before_submission(world, second, per_node,
                                                                                              off):
    scheduler = gang_world(world, 2)
    world.claims.put(claim("c0", 2))
    world.pods.append(job_member(0, {"name": "gpus", "resourceClaimName": "c0"}))
    if "claims" in second:
        world.claims.put(claim("c1", second["claims"]))
        world.pods.append(job_member(1, {"name": "gpus", "resourceClaimName": "c1"}))
    else:
        world.pods.append(job_member(1, gpus=second["gpus"]))
    scheduler.reconcile(GANG)
    assert world.slurm.submitted == []
    messages = {message for reason, message in world.recorder.events if reason == "FailedValidation"}
    assert messages and all(f"gets {per_node} GPU(s)" in m and f"the claims of {off} ask" in m for m in messages)


def test_gang_members_with_as_many_gpus_each_make_one_job_asking_that_many_per_node(world):
    scheduler = gang_world(world, 2)
    for i in (0, 1):
        world.claims.put(claim(f"c{i}", 2))
        world.pods.append(job_member(i, {"name": "gpus", "resourceClaimName": f"c{i}"}))
    scheduler.reconcile(GANG)
    (request,) = world.slurm.submitted
    assert request.gpus_per_node == 2 and request.node_count == 2


def test_gang_members_naming_one_claim_are_refused_before_submission(world):
    """A Job template naming a claim (not a template) gives every member the same claim: each member is filled with
    its own node's GPUs, so one claim cannot serve two; refused at once, not after a job that would be cancelled."""
    scheduler = gang_world(world, 2)
    world.claims.put(claim("shared", 2))
    for i in (0, 1):
        world.pods.append(job_member(i, {"name": "gpus", "resourceClaimName": "shared"}))
    scheduler.reconcile(GANG)
    assert world.slurm.submitted == []
    messages = {message for reason, message in world.recorder.events if reason == "FailedValidation"}
    assert messages == {"spec.resourceClaims: ResourceClaim ns/shared is named by 2 members (train-0, train-1); each "
                        "member is filled with its own node's GPUs, so each needs claims of its own (a "
                        "ResourceClaimTemplate makes them)"}


def test_a_gang_leader_without_claims_beside_members_with_them_makes_one_job(world):
    scheduler = gang_world(world, 2)
    world.pods.append(job_member(0))  # (no claims: a leader; its node has the GPUs all the same)
    world.claims.put(claim("c1", 2))
    world.pods.append(job_member(1, {"name": "gpus", "resourceClaimName": "c1"}))
    scheduler.reconcile(GANG)
    (request,) = world.slurm.submitted
    assert (request.gpus_per_node, request.node_count) == (2, 2)


TYPED = dra.DeviceMapping(DRIVER, frozenset({"gpu.example.com", "mig.example.com"}), attribute="index",
                          gres_types=[("mig.example.com", "1g.10gb")])


def test_claims_of_a_typed_device_class_make_a_typed_gres_request(world):
    world.scheduler.claims = ClaimsView(TYPED, world.claims)
    world.claims.put(claim("one", 2, device_class="mig.example.com"))
    world.pods.append(pod({"name": "a", "resourceClaimName": "one"}))
    world.reconcile()
    (request,) = world.slurm.submitted
    assert (request.gpus_per_node, request.gpu_type, request.tres_per_node) == (2, "1g.10gb", "gres/gpu:1g.10gb:2")


def test_a_typed_claim_beside_a_gpu_class_affinity_is_refused_on_the_pod(world):
    world.scheduler.claims = ClaimsView(TYPED, world.claims)
    world.claims.put(claim("one", 1, device_class="mig.example.com"))
    typed = pod({"name": "a", "resourceClaimName": "one"})
    typed["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu.nvidia.com/class", "operator": "In",
                                                     "values": ["H100"]}]}]}}}
    world.pods.append(typed)
    world.reconcile()
    assert world.slurm.submitted == []
    (reason, message), = world.recorder.events
    assert reason == "FailedValidation" and "the GPU type comes from the claims' DeviceClass (1g.10gb)" in message


@pytest.mark.parametrize(("found", "ended"), [
    (None, True),  # a 404
    ({"metadata": {"uid": "uid-other"}, "status": {"phase": "Running"}}, True),  # another Pod under that name
    ({"metadata": {"uid": "uid-ext"}, "status": {"phase": "Succeeded"}}, True),
    ({"metadata": {"uid": "uid-ext", "deletionTimestamp": "2026-01-01T00:00:00Z"}, "status": {"phase": "Running"}},
     True),
    ({"metadata": {"uid": "uid-ext"}, "status": {"phase": "Running"}}, False),
    ("forbidden", False),  # a failed read is no answer: the claim counts as held
], ids=["gone", "replaced", "finished", "deleting", "running", "read-refused"])
def test_pod_ended_reads_the_consumer_from_the_apiserver(monkeypatch, found, ended):
    from sunk.kube.client import ApiError

    reads: list[tuple[str, str]] = []

    def get(api, resource, name, namespace=None, **_kw):
        reads.append((namespace, name))
        if found is None:
            raise ApiError(404, "NotFound")
        if found == "forbidden":
            raise ApiError(403, "Forbidden")
        return found

    monkeypatch.setattr(claims_module.kube, "get", get)
    consumer = {"resource": "pods", "name": "ext-pod", "uid": "uid-ext"}
    assert claims_module.pod_ended(None)("team", consumer) is ended
    assert reads == [("team", "ext-pod")]
    assert claims_module.pod_ended(None)("team", {**consumer, "resource": "jobs"}) is False and len(reads) == 1


SHARING = dra.DeviceMapping(DRIVER, frozenset({"gpu.example.com"}), attribute="index",
                            shard_classes=frozenset({"shared.example.com"}))


def sharing_world(world: Any, shares: tuple[tuple[int, int], ...]) -> None:
    """The world with the shard class mapped, and Slurm's record giving the job ``shares`` (GPU index, shards)."""
    view = ClaimsView(SHARING, world.claims)
    world.scheduler.claims = view
    assert world.scheduler.binder.claims is not None
    world.scheduler.binder.claims.view = view
    count = sum(units for _index, units in shares)
    world.slurm.get_job_allocations = lambda job_id: (world.slurm.calls.append(("read_job", job_id)) or Job(
        id=job_id, state="RUNNING", nodes="node1", admin_comment="uid-a", allocations=(
            JobAllocation("node1", cpus=1, gres=(GresGrant("shard", "", count, shares=shares),)),)))


def test_a_shard_claim_asks_its_job_for_shards_and_is_filled_with_the_gpu_they_are_on(world):
    sharing_world(world, ((2, 3),))
    world.claims.put(claim("one", 3, device_class="shared.example.com"))
    world.pods.append(pod({"name": "a", "resourceClaimName": "one"}))
    world.reconcile()
    (request,) = world.slurm.submitted
    assert (request.gpus_per_node, request.shards_per_node, request.tres_per_node) == (0, 3, "gres/shard:3")
    world.start()
    world.reconcile()
    assert world.writes == [("finalizer", "one", (DELETE_PROTECTION,)), ("status", "one", ("gpu-2",), ("uid-a",)),
                            ("bind", "worker-1")]


def bind_a_shard_beside(world: Any, theirs_class: str) -> None:
    """Slurm gives the Pod's job one shard of gpu-2, which another tenant's running Pod holds through a claim of
    ``theirs_class``; the Pod's binding is tried."""
    sharing_world(world, ((2, 1),))
    theirs = claim("theirs", 1, device_class=theirs_class)
    theirs["status"] = dra.claim_status([{"request": "gpus", "driver": DRIVER, "pool": "worker-1",
                                          "device": "gpu-2"}], "worker-1",
                                        {"metadata": {"name": "web", "uid": "uid-web"}})
    world.claims.put(theirs)
    world.claims.put(claim("one", 1, device_class="shared.example.com"))
    world.pods.append(pod({"name": "a", "resourceClaimName": "one"}))
    world.start()
    world.reconcile()


def test_a_gpu_another_pods_shard_claim_holds_is_shared_not_a_mismatch(world):
    """Another tenant's Pod (not this scheduler's, still running) holds shards of gpu-2: Slurm counted them."""
    bind_a_shard_beside(world, "shared.example.com")
    assert ("status", "one", ("gpu-2",), ("uid-a",)) in world.writes and world.writes[-1] == ("bind", "worker-1")
    assert not [c for c in world.slurm.calls if c[0] in ("drain", "cancel")] and world.asked == []


def test_a_gpu_a_claim_holds_whole_is_not_shared_it_is_a_mismatch(world):
    bind_a_shard_beside(world, "gpu.example.com")
    assert not [w for w in world.writes if w[0] in ("bind", "status", "finalizer")]
    assert [c[0] for c in world.slurm.calls] == ["read_job", "read_node", "drain", "cancel"]


def test_gang_members_with_shard_claims_are_refused_before_submission(world):
    scheduler = gang_world(world, 2)
    view = ClaimsView(SHARING, world.claims)
    scheduler.claims = view
    for i in range(2):
        world.claims.put(claim(f"c{i}", 1, device_class="shared.example.com"))
        world.pods.append(job_member(i, {"name": "gpus", "resourceClaimName": f"c{i}"}))
    scheduler.reconcile(GANG)
    assert world.slurm.submitted == []
    messages = {message for reason, message in world.recorder.events if reason == "FailedValidation"}
    assert messages == {"spec.resourceClaims: the claims of train-0, train-1 ask for GPU shards; a gang's members ask "
                        "for whole GPUs (shards are for a lone Pod)"}


def test_the_device_classs_and_the_claims_config_are_written_into_the_allocation(world):
    """What a driver reads when it prepares the devices (a sharing strategy, a MIG layout): kube-scheduler copies
    it, and so does sunk."""
    class_config = {"opaque": {"driver": DRIVER, "parameters": {"sharing": "time-slicing"}}}
    assert world.scheduler.binder.claims is not None
    world.scheduler.binder.claims.classes = {"gpu.example.com": {"metadata": {"name": "gpu.example.com"},
                                                                 "spec": {"config": [class_config]}}}
    one = claim("one", 2)
    one["spec"]["devices"]["config"] = [{"opaque": {"driver": DRIVER, "parameters": {"a": "b"}}}]
    world.claims.put(one)
    world.pods.append(pod({"name": "a", "resourceClaimName": "one"}))
    world.start()
    world.reconcile()
    assert [w[0] for w in world.writes] == ["finalizer", "status", "bind"]
    written = world.claims.get("ns/one")["status"]["allocation"]["devices"]["config"]
    assert written == [{"source": "FromClass", "requests": ["gpus"], **class_config},
                       {"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {"a": "b"}}}]
    world.reconcile()  # (bound: a retried reconcile writes nothing again)
    assert [w[0] for w in world.writes] == ["finalizer", "status", "bind"]


def test_a_claim_made_again_under_its_name_after_the_plan_is_not_written_from_that_plan(world, monkeypatch):
    """The claims are planned and written from one reading: a claim swapped meanwhile (deleted, made again with
    another class) is a 409 on the version planned from, read and planned again; never the old plan's devices in
    the new claim, which would misstate who shares the GPU."""
    from sunk.kube.client import ApiError

    sharing_world(world, ((2, 1),))
    world.claims.put(claim("one", 1, device_class="shared.example.com"))
    world.pods.append(pod({"name": "a", "resourceClaimName": "one"}))
    world.start()
    written_versions: list[str] = []

    def patch(api, resource, name, body, namespace=None, **_kw):
        written_versions.append(body["metadata"]["resourceVersion"])
        swapped = claim("one", 1)  # (made again meanwhile: whole GPUs, another version)
        swapped["metadata"]["resourceVersion"] = "9"
        world.claims.put(swapped)
        raise ApiError(409, "Conflict", {"message": "the object has been modified"})

    monkeypatch.setattr(claims_module.kube, "patch", patch)
    with pytest.raises(claims_module.ClaimsNotReady, match="changed as it was written"):
        world.reconcile()
    assert written_versions == ["1"]  # (the version the plan was made from)
    world.reconcile()  # read again: whole GPUs now, but the job holds a shard: the job goes, nothing written
    assert not [w for w in world.writes if w[0] in ("bind", "status")]
    assert ("cancel", 7) in world.slurm.calls
    assert [reason for reason, _ in world.recorder.events][-1] == "ResourceClaimsChanged"


def test_a_device_class_not_seen_is_waited_for_as_kube_scheduler_does(world):
    assert world.scheduler.binder.claims is not None
    world.scheduler.binder.claims.classes = {}  # (the informer has not seen gpu.example.com)
    world.claims.put(claim("one", 2))
    world.pods.append(pod({"name": "a", "resourceClaimName": "one"}))
    world.start()
    with pytest.raises(claims_module.ClaimsNotReady, match="DeviceClass gpu.example.com is not seen"):
        world.reconcile()
    assert not [w for w in world.writes if w[0] in ("bind", "status", "finalizer")]


def test_an_allocation_the_apiserver_refuses_ends_the_job_not_the_scheduler(world, monkeypatch):
    """A 422 on the status write (its config over the apiserver's limit, say) would be refused again and again."""
    from sunk.kube.client import ApiError

    world.claims.put(claim("one", 2))
    world.pods.append(pod({"name": "a", "resourceClaimName": "one"}))
    world.start()

    def refuse(api, resource, obj, *, subresource=None):
        raise ApiError(422, "Unprocessable Entity", {"message": "status.allocation.devices.config: Too many"})

    monkeypatch.setattr(claims_module.kube, "replace", refuse)
    world.reconcile()
    assert ("cancel", 7) in world.slurm.calls and not [w for w in world.writes if w[0] == "bind"]
    reason, message = world.recorder.events[-1]
    assert reason == "ResourceClaimsChanged" and "the apiserver refused ResourceClaim ns/one's allocation" in message
