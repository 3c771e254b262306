"""The Binder: assume, bind, finish or forget; once per Pod; shared by sunk-scheduler and the extender's verb."""

from __future__ import annotations

import threading
import time

import pytest
from informer_fakes import ListInformer
from policy_fakes import TEST_POLICY

from extender.app import create_app
from scheduler import kubeops
from scheduler.binder import Binder
from scheduler.claims import ClaimsChanged, ClaimsNotReady
from scheduler.config import SchedulerConfig
from scheduler.decide import Bind
from scheduler.jobindex import JobIndex
from scheduler.reconciler import PodIndex, PodScheduler, SlurmdNodes
from sunk.kube.client import ApiError
from sunk.model import names
from sunk.model.slurm import Job
from sunk.translate.gang import has_started

BIND = Bind(job_id=7, slurm_node="node1", k8s_node="worker-1")
CREATED = "2026-01-01T00:00:00Z"


def pod(uid="uid-a", created=CREATED):
    meta = {"name": "p", "namespace": "ns", "uid": uid}
    if created:
        meta["creationTimestamp"] = created
    return {"metadata": meta, "spec": {}}


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class Api:
    """kubeops' two writes, recorded; ``fail`` is raised by the next binding."""

    def __init__(self):
        self.calls = []
        self.fail = None

    def bind(self, _api, obj, node, annotations):
        self.calls.append(("bind", obj["metadata"]["uid"], node, dict(annotations)))
        if self.fail is not None:
            failure, self.fail = self.fail, None
            raise failure

    def record_job(self, _api, obj, annotations, *, tolerate_lock=False):
        self.calls.append(("record", obj["metadata"]["uid"], dict(annotations), tolerate_lock))
        return True


@pytest.fixture
def api(monkeypatch):
    fake = Api()
    monkeypatch.setattr(kubeops, "bind", fake.bind)
    monkeypatch.setattr(kubeops, "record_job", fake.record_job)
    return fake


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def latencies():
    return []


@pytest.fixture
def binder(clock, latencies):
    return Binder(None, must_tolerate_lock=lambda node: False, observe_latency=latencies.append, clock=clock)


# -- assume, finish, forget -----------------------------------------------------------------------

def test_an_assumed_pod_is_bound_to_its_node_until_forgotten(binder):
    assert binder.assumed_node("uid-a") is None
    assert binder.assume("uid-a", "worker-1")
    assert not binder.assume("uid-a", "worker-2")  # once assumed, nowhere else
    assert binder.assumed_node("uid-a") == "worker-1"
    assert binder.assumed_node("uid-b") is None
    binder.forget("uid-a")
    assert binder.assumed_node("uid-a") is None
    binder.forget("uid-a")  # (twice is fine)
    assert binder.assume("uid-a", "worker-2")


def test_a_finished_binding_expires_unconfirmed_while_one_in_flight_never_does(binder, clock):
    binder.assume("uid-done", "worker-1")
    binder.finish_binding("uid-done")
    binder.assume("uid-in-flight", "worker-2")
    clock.now += binder.assumed_ttl - 1
    assert binder.assumed_node("uid-done") == "worker-1"
    clock.now += 1
    assert binder.assumed_node("uid-done") is None
    assert binder.assumed_node("uid-in-flight") == "worker-2"
    assert binder.assume("uid-done", "worker-3")  # expired entries make room


def test_finishing_a_forgotten_binding_does_not_bring_it_back(binder):
    binder.assume("uid-a", "worker-1")
    binder.forget("uid-a")  # e.g. the watch showed the Pod bound while the call was returning
    binder.finish_binding("uid-a")
    assert binder.assumed_node("uid-a") is None


def test_expired_entries_are_dropped_as_new_ones_come(binder, clock):
    for i in range(100):
        binder.assume(f"uid-{i}", "worker-1")
        binder.finish_binding(f"uid-{i}")
    clock.now += binder.assumed_ttl
    binder.assume("uid-new", "worker-1")
    assert list(binder._assumed) == ["uid-new"]


# -- bind -----------------------------------------------------------------------------------------

def test_a_binding_carries_the_job_and_slurm_node_and_is_assumed(binder, api, latencies):
    assert binder.bind(pod(), BIND) is True
    assert api.calls == [("bind", "uid-a", "worker-1", {names.ANN_JOB_ID: "7", names.ANN_SLURM_NODE: "node1"})]
    assert binder.assumed_node("uid-a") == "worker-1"
    created = time.mktime(time.strptime(CREATED, "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    assert len(latencies) == 1 and latencies[0] == pytest.approx(time.time() - created, abs=5)


def test_a_pod_without_a_creation_time_is_bound_unmeasured(binder, api, latencies):
    assert binder.bind(pod(created=None), BIND)
    assert latencies == []


@pytest.mark.parametrize("evicts", [True, False], ids=["noexecute-lock", "noschedule-lock"])
def test_the_lock_toleration_comes_first_only_where_the_lock_evicts(api, evicts):
    asked = []
    binder = Binder(None, must_tolerate_lock=lambda node: asked.append(node) or evicts,
                    observe_latency=lambda seconds: None)
    binder.bind(pod(), BIND)
    assert asked == ["worker-1"]
    assert [call[0] for call in api.calls] == (["record", "bind"] if evicts else ["bind"])
    if evicts:
        assert api.calls[0] == ("record", "uid-a", {}, True)


def test_a_failed_binding_is_forgotten_and_raised(binder, api, latencies):
    api.fail = ApiError(500, "InternalError")
    with pytest.raises(ApiError):
        binder.bind(pod(), BIND)
    assert binder.assumed_node("uid-a") is None and latencies == []
    assert binder.bind(pod(), BIND) is True  # the next attempt binds afresh
    assert [call[0] for call in api.calls] == ["bind", "bind"]


def test_a_failed_toleration_is_forgotten_and_nothing_is_bound(api, monkeypatch):
    def record_job(*_args, **_kwargs):
        raise ApiError(503, "ServiceUnavailable")

    monkeypatch.setattr(kubeops, "record_job", record_job)
    binder = Binder(None, observe_latency=lambda seconds: None)  # (no Node cache: always tolerate)
    with pytest.raises(ApiError):
        binder.bind(pod(), BIND)
    assert binder.assumed_node("uid-a") is None and api.calls == []


def test_a_conflict_means_bound_already_and_is_left_to_the_pod_watch(binder, api, latencies):
    api.fail = ApiError(409, "Conflict", {"message": "pod p is already assigned to node worker-1"})
    assert binder.bind(pod(), BIND) is False
    assert binder.assumed_node("uid-a") is None and latencies == []


def test_a_second_bind_of_the_same_pod_does_not_ask_the_apiserver_again(binder, api, latencies):
    assert binder.bind(pod(), BIND) is True
    assert binder.bind(pod(), BIND) is False
    assert binder.bind(pod(), Bind(8, "node2", "worker-2")) is False
    assert len(api.calls) == 1 and len(latencies) == 1
    assert binder.assumed_node("uid-a") == "worker-1"
    assert binder.bind(pod("uid-b"), BIND) is True  # another Pod is another binding


def test_concurrent_binds_of_one_pod_make_one_binding(binder, api, monkeypatch):
    entered, release = threading.Event(), threading.Event()
    bind = kubeops.bind

    def slow_bind(*args):
        entered.set()
        release.wait(5)
        bind(*args)

    monkeypatch.setattr(kubeops, "bind", slow_bind)
    results = []
    first = threading.Thread(target=lambda: results.append(binder.bind(pod(), BIND)))
    first.start()
    assert entered.wait(5)
    results.append(binder.bind(pod(), BIND))  # while the first call is in flight
    release.set()
    first.join(5)
    assert sorted(results) == [False, True] and len(api.calls) == 1


# -- the extender's /bind verb, over the real reconciler and Binder ---------------------------------

VALID_POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "uid-a"},
             "spec": {"terminationGracePeriodSeconds": 5,
                      "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}


def extender_over(binder, slurm=None, recorder=None):
    """The extender's app over a PodScheduler whose job 7 for uid-a runs on node1 (Node worker-1)."""
    jobs = JobIndex(lambda job: (job.admin_comment, has_started(job)) if job.admin_comment.startswith("uid-") else None)
    jobs.upsert(Job(id=7, state="RUNNING", nodes="node1", admin_comment="uid-a"))  # (its prolog ended)
    slurmd = [{"metadata": {"name": "node1"}, "spec": {"nodeName": "worker-1"}}]
    scheduler = PodScheduler(api=None, slurm=slurm, config=SchedulerConfig("s", b"x" * 16, "http://h",
                                                                           identity_policy=TEST_POLICY), jobs=jobs,
                             pods=PodIndex(ListInformer([VALID_POD])), slurmd=SlurmdNodes(ListInformer(slurmd)),
                             recorder=recorder, binder=binder)
    return create_app(scheduler, lambda uid: None).test_client()


@pytest.fixture
def extender(binder):
    return extender_over(binder)


def bind_to(client, node):
    return client.post("/bind", json={"PodName": "p", "PodNamespace": "ns", "PodUID": "uid-a", "Node": node}).get_json()


def test_the_bind_verb_refuses_a_node_other_than_the_allocated_one(extender, binder, api):
    answer = bind_to(extender, "worker-2")
    assert answer["Error"] == "Slurm allocated Node worker-1 (Slurm node node1) for job 7, not worker-2"
    assert api.calls == [] and binder.assumed_node("uid-a") is None


def test_the_bind_verb_binds_through_the_binder_once(extender, binder, api):
    assert bind_to(extender, "worker-1") == {"Error": ""}
    assert api.calls == [("bind", "uid-a", "worker-1", {names.ANN_JOB_ID: "7", names.ANN_SLURM_NODE: "node1"})]
    assert binder.assumed_node("uid-a") == "worker-1"
    # kube-scheduler asking again before the Pod watch shows the binding: the Pod counts as bound
    assert bind_to(extender, "worker-1")["Error"] == "not bindable yet: running"
    assert len(api.calls) == 1


def test_the_bind_verb_reports_a_failed_or_conflicting_binding(extender, binder, api):
    api.fail = ApiError(500, "InternalError")
    assert bind_to(extender, "worker-1")["Error"].startswith("binding failed: ")
    api.fail = ApiError(409, "Conflict", {"message": "pod p is already assigned to node worker-1"})
    assert bind_to(extender, "worker-1")["Error"] == "binding failed: pod ns/p is bound already"
    assert binder.assumed_node("uid-a") is None


class Claims:
    """A ClaimAllocator that fails as told."""

    def __init__(self, error: Exception):
        self.error = error

    def allocate(self, pod, job_id, slurm_node, k8s_node):
        raise self.error


class Slurm:
    def __init__(self):
        self.cancelled: list[int] = []

    def cancel_job(self, job_id):
        self.cancelled.append(job_id)


class Recorder:
    def __init__(self):
        self.events: list[tuple[str, str, str]] = []

    def event(self, obj, type_, reason, message):
        self.events.append((type_, reason, message))


def test_the_bind_verb_fills_claims_as_sunk_scheduler_does_and_says_why_it_did_not(clock, latencies, api):
    """The extender's /bind goes through the same claim handling as sunk-scheduler's binding (bind_placed):
    claims not ready are an Event and an error kube-scheduler retries; claims that changed since submission end
    the job, and the answer says so; nothing is bound either way."""
    slurm, recorder = Slurm(), Recorder()
    not_ready = Binder(None, must_tolerate_lock=lambda node: False, observe_latency=latencies.append, clock=clock,
                       claims=Claims(ClaimsNotReady("job 7's record has no GRES indices yet")))  # type: ignore[arg-type]
    answer = bind_to(extender_over(not_ready, slurm, recorder), "worker-1")
    assert answer["Error"] == "binding failed: job 7's record has no GRES indices yet"
    assert recorder.events == [("Normal", "WaitingForResourceClaims",
                                "not bound yet: job 7's record has no GRES indices yet")]
    assert slurm.cancelled == [] and api.calls == [] and not_ready.assumed_node("uid-a") is None

    recorder.events.clear()
    changed = Binder(None, must_tolerate_lock=lambda node: False, observe_latency=latencies.append, clock=clock,
                     claims=Claims(ClaimsChanged("claim gpus asks 2 GPUs, the job has 1")))  # type: ignore[arg-type]
    answer = bind_to(extender_over(changed, slurm, recorder), "worker-1")
    assert answer["Error"] == ("not bound: its ResourceClaims cannot be filled where Slurm placed job 7, which is "
                               "cancelled (the Pod's Events say why)")
    assert slurm.cancelled == [7] and api.calls == []
    assert [reason for _type, reason, _message in recorder.events] == ["ResourceClaimsChanged"]


def test_creation_time_is_read_as_utc_whatever_the_local_zone(monkeypatch):
    """mktime() - timezone was an hour off while the local zone kept daylight saving time."""
    import time as _time

    from scheduler.binder import _created_at

    monkeypatch.setenv("TZ", "Europe/Berlin")
    _time.tzset()
    try:
        summer = _created_at({"metadata": {"creationTimestamp": "2026-07-01T12:00:00Z"}})
        assert summer == 1782907200.0  # 2026-07-01T12:00:00Z
    finally:
        monkeypatch.delenv("TZ")
        _time.tzset()
