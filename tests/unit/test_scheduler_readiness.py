"""The scheduler's readiness is the hook API's: Kubernetes synced, not Slurm reachable (issue 18, item 6)."""

from __future__ import annotations

import itertools

import pytest
from kubernetes.client import ApiClient
from policy_fakes import TEST_POLICY
from prometheus_client import REGISTRY

from scheduler.assembly import assemble
from scheduler.config import SchedulerConfig
from sunk.controller.daemon import DaemonConfig
from sunk.model.slurm import Job, JobState
from sunk.slurm.errors import SlurmUnavailable
from sunk.slurm.informer import SlurmInformer
from sunk.slurm.settings import SlurmSettings
from sunk.translate.identity import PlaceholderIdentity
from sunk.translate.keys import GangKey


class UnreachableSlurm:
    """slurmrestd down: every list fails."""

    def list_jobs(self, **_: object):
        raise SlurmUnavailable("list jobs: cannot reach slurmrestd")

    def list_nodes(self, **_: object):
        raise SlurmUnavailable("list nodes: cannot reach slurmrestd")

    def rpc_stats(self):
        return {}


@pytest.fixture
def assembly():
    daemon = DaemonConfig(name="sunk-scheduler-test", slurm=SlurmSettings(token="t"))
    built = assemble(daemon, SchedulerConfig("s", b"x" * 32, "http://h", identity_policy=TEST_POLICY), api=ApiClient(),
                     slurm=UnreachableSlurm())  # type: ignore[arg-type]
    yield built
    built.scheduler.recorder.stop()


def synced(assembly, monkeypatch, *, kubernetes: bool) -> SlurmInformer:
    """Mark every Kubernetes informer synced (or not); the Slurm cache has never listed."""
    (cache,) = [i for i in assembly.manager.informers if isinstance(i, SlurmInformer)]
    for informer in assembly.manager.informers:
        if informer is not cache:
            monkeypatch.setattr(informer, "has_synced", lambda: kubernetes)
    return cache


def test_ready_while_slurm_is_unreachable_once_kubernetes_is_synced(assembly, monkeypatch):
    cache = synced(assembly, monkeypatch, kubernetes=True)
    assert not cache.refresh().ok and not cache.synced and not cache.fresh
    assert assembly.manager.ready()
    assert assembly.hooks_ready()  # and the hook API answers


def test_not_ready_before_the_pod_cache_synced(assembly, monkeypatch):
    synced(assembly, monkeypatch, kubernetes=False)
    assert not assembly.manager.ready() and not assembly.hooks_ready()


def test_not_ready_while_stopping(assembly, monkeypatch):
    synced(assembly, monkeypatch, kubernetes=True)
    assembly.manager.stop()
    assembly.manager.wait(5)
    assert not assembly.manager.ready()


def test_slurm_staleness_shows_on_metrics(assembly, monkeypatch):
    cache = synced(assembly, monkeypatch, kubernetes=True)
    cache.refresh()
    assert REGISTRY.get_sample_value("sunk_scheduler_slurm_cache_fresh") == 0.0
    assert REGISTRY.get_sample_value("sunk_scheduler_slurm_cache_age_seconds") == float("inf")


OURS = "sunk-pod=u1 ns=default name=p sched=s"


OBSERVED_AT = itertools.count(1)  # each observation later than the one before


def request_after(assembly, job):
    """The read request the scheduler's job handler makes once the jobs informer holds ``job``."""
    assert assembly.slurm_jobs.observe(job, float(next(OBSERVED_AT)))
    return assembly.slurm_jobs.read_request(job.id)


def test_the_job_cache_rereads_placeholders_until_slurm_shows_them_started(assembly):
    """The prolog's end changes the job's reason, not its state: the job state list cannot show it."""
    from scheduler.config import STARTED_CALL_PATIENCE
    from sunk.slurm.readrequests import ReadRequest

    awaiting = ReadRequest(every=0.0, wait_up_to=STARTED_CALL_PATIENCE)  # at every refresh; its start may wait
    assert request_after(assembly, Job(id=1, state="RUNNING", state_reason="Prolog", admin_comment=OURS)) == awaiting
    assert request_after(assembly, Job(id=2, state="RUNNING", state_flags=("CONFIGURING",),
                                       admin_comment=OURS)) == awaiting  # nodes booting
    assert request_after(assembly, Job(id=1, state="RUNNING", admin_comment=OURS)) is None  # the prolog ended
    assert request_after(assembly, Job(id=3, state="RUNNING", state_reason="Prolog",
                                       admin_comment="sunk-pod=u1 ns=default name=p sched=another")) is None
    assert request_after(assembly, Job(id=4, state="RUNNING", state_reason="Prolog", extra=OURS)) is None  # Extra
    assert request_after(assembly, Job(id=5, state="RUNNING", state_reason="Prolog",
                                       admin_comment="an operator's note")) is None
    assert request_after(assembly, Job(id=2, state="COMPLETED", admin_comment=OURS)) is None  # ended: dropped
    assert assembly.slurm_jobs.lister.job_full_every == 300.0


def test_a_gangs_placeholder_is_reread_too_until_slurm_shows_it_started():
    """A gang's job (``sunk-gang=``) whose started call was lost binds its members at a refresh, not at the next
    full job list (it was never reread: its identity has no ``sunk-pod=``)."""
    from scheduler.assembly import PlaceholderReads, identity_parser
    from scheduler.config import SchedulerConfig

    config = SchedulerConfig(scheduler_name="s", hook_secret=b"x", hooks_url="http://h", identity_policy=TEST_POLICY)
    reads = PlaceholderReads(identity_parser(config))
    gang = PlaceholderIdentity(GangKey("ns", "job/abc"), "ns", size=2, members=("aa", "bb"), scheduler="s").encode()
    assert reads.request_for(Job(id=1, state="RUNNING", state_reason="Prolog", admin_comment=gang)).every == 0.0
    assert reads.request_for(Job(id=1, state="RUNNING", admin_comment=gang)) is None
    assert reads.request_for(Job(id=1, state="PENDING", state_reason="Priority", admin_comment=gang)).every == 10.0
    other = PlaceholderIdentity(GangKey("ns", "job/abc"), "ns", size=2, members=("aa", "bb"),
                                scheduler="another").encode()
    assert reads.request_for(Job(id=1, state="RUNNING", state_reason="Prolog", admin_comment=other)) is None
    assert reads.request_for(Job(id=1, state="RUNNING", state_reason="Prolog", extra=gang)) is None


def test_the_job_cache_waits_for_a_placeholders_started_call_only_on_its_way_to_it(assembly):
    """New jobs this process submitted, and its placeholders pending or in their prolog, may wait for the started
    call's read (SlurmCache.observe); the lister waits only for a start (ends, requeues are read at once);
    others' jobs and started ones are read at once."""
    from scheduler.config import STARTED_CALL_PATIENCE

    jobs = assembly.slurm_jobs
    pending, running = JobState("5"), JobState("5", "RUNNING")
    assembly.scheduler.jobs.expect("u1", 5)
    submitted = jobs.read_request(5)
    assert submitted.every is None and submitted.wait_up_to == STARTED_CALL_PATIENCE
    assert submitted.patience(None, pending) == STARTED_CALL_PATIENCE  # submitted by this process, not read yet
    assert submitted.patience(None, running) == STARTED_CALL_PATIENCE
    assert jobs.read_request(6) is None  # not this process's submission
    assert submitted.patience(None, JobState("5", "CANCELLED")) == 0.0
    held = Job(id=5, admin_comment=OURS)
    assert request_after(assembly, held).patience(held, running) == STARTED_CALL_PATIENCE  # its start
    prolog = Job(id=5, state="RUNNING", state_reason="Prolog", admin_comment=OURS)
    request = request_after(assembly, prolog)
    assert request.patience(prolog, running) == STARTED_CALL_PATIENCE  # its prolog's end (reread)
    assert request.patience(prolog, pending) == 0.0  # requeued
    assert request.patience(prolog, JobState("5", "COMPLETED")) == 0.0
    assert request_after(assembly, Job(id=5, state="RUNNING", admin_comment=OURS)) is None  # started
    assert request_after(assembly, Job(id=7, admin_comment="sunk-pod=u1 ns=default name=p sched=another")) is None
    assert request_after(assembly, Job(id=8, extra=OURS)) is None  # an identity in Extra is none
    assembly.scheduler.jobs.expect("u1", 5)  # (held already: its handler's request stands)
    assert jobs.read_request(5) is None


def test_no_patience_at_zero():
    """--started-call-patience=0s: the cache reads every job the state list asks for at once, as before (a
    submitted job's request says only that it is expected: read once listed, never waited for)."""
    from scheduler.assembly import PlaceholderReads
    from sunk.slurm.readrequests import ReadRequest

    reads = PlaceholderReads(lambda job: ("u1", False), started_call_patience=0.0)
    assert reads.submitted() == ReadRequest(expected=True) and not reads.submitted().empty
    assert reads.request_for(Job(id=1, state="RUNNING", state_reason="Prolog", admin_comment="ours")).wait_up_to == 0


@pytest.mark.parametrize("job, expected", [
    (Job(id=1, state="PENDING", state_reason="ReqNodeNotAvail", admin_comment="ours"), 10.0),
    (Job(id=1, state="PENDING", state_reason="None", admin_comment="ours"), 2.0),  # Slurm has not looked yet: sooner
    (Job(id=1, state="PENDING", state_reason="", admin_comment="ours"), 2.0),
    (Job(id=1, state="RUNNING", state_reason="Prolog", admin_comment="ours"), 0.0),  # awaiting its start
    (Job(id=1, state="PENDING", state_reason="Priority", admin_comment="theirs"), None),  # not this scheduler's
    (Job(id=1, state="PENDING", state_reason="Priority"), None),
])
def test_the_cache_rereads_this_schedulers_pending_placeholders_for_their_reason(job, expected):
    from scheduler.assembly import PlaceholderReads

    reads = PlaceholderReads(lambda j: ("u1", False) if j.admin_comment == "ours" else None, reason_every=10.0,
                             unreasoned_every=2.0)
    request = reads.request_for(job)
    assert (request.every if request is not None else None) == expected


def test_no_reason_rereads_when_turned_off():
    from scheduler.assembly import PlaceholderReads

    reads = PlaceholderReads(lambda j: ("u1", False), reason_every=0.0)
    request = reads.request_for(Job(id=1, state="PENDING", state_reason="Priority", admin_comment="ours"))
    assert request is not None and request.every is None  # (its start may still wait for its started call)


def test_a_reread_for_the_reason_does_not_wait_for_a_started_call():
    from scheduler.assembly import PlaceholderReads

    request = PlaceholderReads(lambda j: ("u1", False), started_call_patience=3.0).request_for(
        Job(id=1, state="PENDING", state_reason="Priority", admin_comment="ours"))
    held = Job(id=1, state="PENDING", state_reason="Priority", admin_comment="ours")
    assert request.patience(held, JobState("1", "PENDING", job_id=1)) == 0.0
    assert request.patience(held, JobState("1", "RUNNING", job_id=1)) == 3.0  # on its way to its started call


def test_the_jobs_informer_keeps_only_this_schedulers_placeholders(assembly):
    lister = assembly.slurm_jobs.lister
    assert lister.keep_job(Job(id=1, admin_comment=OURS))
    assert not lister.keep_job(Job(id=2, admin_comment="sunk-pod=u1 ns=default name=p sched=another"))
    assert not lister.keep_job(Job(id=3))  # another tenant's
    assert lister.read_workers == 1  # (docs/scheduler.md: eight at once read more of each placeholder)
