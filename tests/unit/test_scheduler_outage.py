"""Pods that wait through a Slurm outage are told why, once; a refused token is an outage (issue 18, item 3)."""

from __future__ import annotations

import threading
import time
import types

import attrs
import pytest
from kubernetes.client import ApiClient
from policy_fakes import TEST_POLICY

from scheduler.outage import GRACE, OutageNotice, outage_event
from sunk.slurm.errors import AuthenticationFailed, SlurmUnavailable

REFUSED = AuthenticationFailed("list jobs: Protocol authentication error", code=1007,
                               token_source="token file /var/run/sunk/slurm/token")


@attrs.define
class Cache:
    last_failure: Exception | None = None
    failing_for: float = 0.0


def pod(uid, node=None, deleting=False, gated=False):
    meta = {"name": uid, "namespace": "ns", "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    spec = {"nodeName": node, **({"schedulingGates": [{"name": "kueue"}]} if gated else {})}
    return {"metadata": meta, "spec": spec}


@pytest.fixture
def world():
    cache = Cache()
    pods = [pod("waiting-1"), pod("waiting-2"), pod("bound", node="worker-1"), pod("going", deleting=True),
            pod("gated", gated=True)]
    told: list[tuple[str, str, str, str]] = []
    leader = [True]
    notice = OutageNotice(cache, lambda: pods, lambda p, t, r, m: told.append((p["metadata"]["uid"], t, r, m)),
                          may_report=lambda: leader[0], wake=WOKEN.append)
    WOKEN.clear()
    return notice, cache, pods, told, leader


WOKEN: list[str] = []


def test_a_refused_token_is_told_at_once_to_every_waiting_pod_once(world):
    notice, cache, pods, told, _ = world
    cache.last_failure = REFUSED
    notice.check()
    notice.check()
    assert [(uid, type_, reason) for uid, type_, reason, _ in told] == [
        ("waiting-1", "Warning", "SlurmAuthenticationFailed"), ("waiting-2", "Warning", "SlurmAuthenticationFailed")]
    assert "token file /var/run/sunk/slurm/token" in told[0][3]
    pods.append(pod("new"))
    notice.check()
    assert [uid for uid, *_ in told] == ["waiting-1", "waiting-2", "new"]


def test_a_new_outage_is_news_again(world):
    notice, cache, _, told, _ = world
    cache.last_failure = REFUSED
    notice.check()
    cache.last_failure = None
    notice.check()
    cache.last_failure = REFUSED
    notice.check()
    assert len(told) == 4


def test_slurm_unreachable_is_told_only_once_it_lasts(world):
    notice, cache, _, told, _ = world
    cache.last_failure, cache.failing_for = SlurmUnavailable("list jobs: cannot reach slurmrestd"), GRACE / 2
    notice.check()
    assert told == []
    cache.failing_for = GRACE
    notice.check()
    assert {reason for _, _, reason, _ in told} == {"SlurmUnavailable"}


def test_when_the_outage_ends_every_waiting_pod_is_reconciled_at_once(world):
    """Not after the backoff its failed submissions built up (minutes, in a long outage)."""
    notice, cache, _, _, _ = world
    notice.check()
    assert WOKEN == []  # no outage, nothing to wake
    cache.last_failure = REFUSED
    notice.check()
    cache.last_failure = None
    notice.check()
    notice.check()
    assert WOKEN == ["waiting-1", "waiting-2"]


def test_only_a_replica_that_may_report_does(world):
    notice, cache, _, told, leader = world
    leader[0] = False
    cache.last_failure = REFUSED
    notice.check()
    assert told == []


def test_the_event_is_the_same_for_every_call():
    assert outage_event(REFUSED) == outage_event(AuthenticationFailed("submit job p: HTTP 401", http_status=401,
                                                                      token_source=REFUSED.token_source))


def test_every_replica_runs_the_notice_before_anyone_leads():
    from scheduler.assembly import assemble
    from scheduler.config import SchedulerConfig
    from sunk.controller.daemon import DaemonConfig
    from sunk.slurm.settings import SlurmSettings

    slurm = types.SimpleNamespace(list_jobs=None, list_nodes=None, rpc_stats=dict)
    built = assemble(DaemonConfig(name="s", slurm=SlurmSettings(token="t")), SchedulerConfig("s", b"x" * 32, "http://h",
                                                                                             identity_policy=TEST_POLICY),
                     api=ApiClient(), slurm=slurm)  # type: ignore[arg-type]
    try:
        runnables = {getattr(r, "name", ""): leader for r, leader in built.manager._runnables}
        assert runnables["slurm-outage-notice"] is False
    finally:
        built.scheduler.recorder.stop()


class CancelSlurm:
    """Slurm holding job 7 for Pod uid-gone, which was deleted while slurmrestd was down."""

    def __init__(self) -> None:
        from sunk.model.slurm import Job

        self.down = False
        self.job = Job(id=7, state="RUNNING", nodes="node1", admin_comment="uid-gone")
        self.cancelled = threading.Event()

    def _reachable(self, what: str) -> None:
        if self.down:
            raise SlurmUnavailable(f"{what}: cannot reach slurmrestd")

    def list_jobs(self, *, updated_since=None):
        from sunk.slurm.client import Snapshot

        self._reachable("list jobs")
        return Snapshot(items=(self.job,), last_update=1000)

    def list_nodes(self, *, updated_since=None):  # (the scheduler's cache lists jobs only)
        raise AssertionError("the scheduler's cache listed nodes")

    def cancel_job(self, job_id, signal=None):
        self._reachable(f"cancel job {job_id}")
        self.cancelled.set()


def test_a_job_whose_pod_was_deleted_during_the_outage_is_cancelled_as_soon_as_slurm_answers():
    """The fault matrix's slurmrestd row took 34 s, not 14, to recover: the cancellation of a deleted Pod's job
    waited out its key's backoff, grown through the 40 s outage, since only waiting Pods were woken, and Slurm's
    relist brings no event for a job that did not change. Here that backoff is 30 s from the first failure."""
    from informer_fakes import ListInformer

    from scheduler.assembly import attach_job_feed
    from scheduler.binder import Binder
    from scheduler.config import SchedulerConfig
    from scheduler.jobindex import JobIndex
    from scheduler.reconciler import PodIndex, PodScheduler, SlurmdNodes
    from sunk.controller.manager import Manager
    from sunk.controller.runtime import Controller
    from sunk.controller.workqueue import ItemExponentialRateLimiter, WorkQueue
    from sunk.slurm.informer import SlurmInformerFactory
    from sunk.translate.gang import has_started

    def parse(job):  # (the AdminComment a short stand-in for an identity)
        return job.admin_comment, has_started(job)

    slurm = CancelSlurm()
    cache = SlurmInformerFactory(slurm, interval=0.05).jobs()  # type: ignore[arg-type]
    index = JobIndex(parse, clock=cache.clock, jobs=cache)
    scheduler = PodScheduler(api=None, slurm=slurm, config=SchedulerConfig("s", b"x" * 32, "http://h",
                                                                           identity_policy=TEST_POLICY),  # type: ignore[arg-type]
                             jobs=index, pods=PodIndex(ListInformer([])), slurmd=SlurmdNodes(ListInformer([])),
                             recorder=types.SimpleNamespace(event=lambda *a: None),  # type: ignore[arg-type]
                             binder=Binder(None, must_tolerate_lock=lambda n: False, observe_latency=lambda s: None))  # type: ignore[arg-type]
    controller = Controller("outage-cancel", scheduler,
                            queue=WorkQueue("outage-cancel", ItemExponentialRateLimiter(30.0, 300.0)))
    attach_job_feed(cache, index, controller.queue.add)
    manager = Manager("outage-cancel")
    manager.add_informer(cache)
    manager.add_controller(controller)
    assert cache.refresh().ok  # Slurm's jobs, as listed just before slurmrestd went down
    slurm.down = True
    manager.start()
    try:
        assert manager.wait_leading(2)
        deadline = time.monotonic() + 2
        while controller.queue.num_requeues("uid-gone") < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert controller.queue.num_requeues("uid-gone") == 1  # its cancellation failed: 30 s to wait
        assert not slurm.cancelled.is_set()
        slurm.down = False  # slurmrestd is back
        assert slurm.cancelled.wait(2), "the job of a deleted Pod stayed active after Slurm answered again"
    finally:
        manager.stop()
        manager.wait(5)
