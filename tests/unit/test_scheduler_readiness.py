"""The scheduler's readiness is the hook API's: Kubernetes synced, not Slurm reachable (issue 18, item 6)."""

from __future__ import annotations

import pytest
from kubernetes.client import ApiClient
from policy_fakes import TEST_POLICY
from prometheus_client import REGISTRY

from scheduler.assembly import assemble
from scheduler.config import SchedulerConfig
from sunk.controller.daemon import DaemonConfig
from sunk.slurm.errors import SlurmUnavailable
from sunk.slurm.informer import SlurmInformer
from sunk.slurm.models import Job, JobState
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


def test_the_job_cache_rereads_placeholders_until_slurm_shows_them_started(assembly):
    """The prolog's end changes the job's reason, not its state: the job state list cannot show it."""
    from scheduler.assembly import awaiting_start
    from sunk.slurm.models import Job

    (cache,) = [i for i in assembly.manager.informers if isinstance(i, SlurmInformer)]
    reread = cache.lister.reread
    ours = "sunk-pod=u1 ns=default name=p sched=s"
    assert reread(Job(id=1, state="RUNNING", state_reason="Prolog", admin_comment=ours))
    assert reread(Job(id=1, state="RUNNING", state_flags=("CONFIGURING",), admin_comment=ours))  # nodes booting
    assert not reread(Job(id=1, state="RUNNING", admin_comment=ours))  # the prolog ended: started
    assert not reread(Job(id=1, state="PENDING", admin_comment=ours))  # starting changes the state: seen anyway
    assert not reread(Job(id=1, state="RUNNING", state_reason="Prolog",
                          admin_comment="sunk-pod=u1 ns=default name=p sched=another"))
    assert not reread(Job(id=1, state="RUNNING", state_reason="Prolog", extra=ours))  # a user's Extra names no Pod
    assert not reread(Job(id=1, state="RUNNING", state_reason="Prolog", admin_comment="an operator's note"))
    assert cache.lister.job_full_every == 300.0
    assert awaiting_start(lambda job: ("u1", False))(Job(id=1, state="RUNNING", admin_comment="sunk-pod=x"))
    assert not awaiting_start(lambda job: ("u1", False))(Job(id=1, state="RUNNING", extra="sunk-pod=x"))


def test_a_gangs_placeholder_is_reread_too_until_slurm_shows_it_started():
    """A gang's job (``sunk-gang=``) whose started call was lost binds its members at a refresh, not at the next
    full job list (it was never reread: its identity has no ``sunk-pod=``)."""
    from scheduler.assembly import awaiting_start, identity_parser
    from scheduler.config import SchedulerConfig
    from sunk.slurm.models import Job


    config = SchedulerConfig(scheduler_name="s", hook_secret=b"x", hooks_url="http://h", identity_policy=TEST_POLICY)
    reread = awaiting_start(identity_parser(config))
    gang = PlaceholderIdentity(GangKey("ns", "job/abc"), "ns", size=2, members=("aa", "bb"), scheduler="s").encode()
    assert reread(Job(id=1, state="RUNNING", state_reason="Prolog", admin_comment=gang))
    assert not reread(Job(id=1, state="RUNNING", admin_comment=gang))
    assert not reread(Job(id=1, state="PENDING", admin_comment=gang))
    other = PlaceholderIdentity(GangKey("ns", "job/abc"), "ns", size=2, members=("aa", "bb"),
                                scheduler="another").encode()
    assert not reread(Job(id=1, state="RUNNING", state_reason="Prolog", admin_comment=other))
    assert not reread(Job(id=1, state="RUNNING", state_reason="Prolog", extra=gang))


def test_the_job_cache_waits_for_a_placeholders_started_call_only_on_its_way_to_it(assembly):
    """New jobs this process submitted, and its placeholders going from PENDING to RUNNING or still in their
    prolog, wait for the started call's read (SlurmCache.observe); ends, requeues, others' jobs and started ones
    are read at once."""
    from scheduler.config import STARTED_CALL_PATIENCE
    from sunk.slurm.models import Job, JobState

    (cache,) = [i for i in assembly.manager.informers if isinstance(i, SlurmInformer)]
    wait = cache.lister.patience
    ours = "sunk-pod=u1 ns=default name=p sched=s"
    pending, running = JobState("5"), JobState("5", "RUNNING")
    assembly.scheduler.jobs.expect("u1", 5)
    assert wait(5, None, pending) == STARTED_CALL_PATIENCE  # submitted by this process, not read yet
    assert wait(5, None, running) == STARTED_CALL_PATIENCE
    assert wait(6, None, pending) == 0.0  # not this process's submission
    assert wait(5, None, JobState("5", "CANCELLED")) == 0.0
    assert wait(5, Job(id=5, admin_comment=ours), running) == STARTED_CALL_PATIENCE  # its start
    prolog = Job(id=5, state="RUNNING", state_reason="Prolog", admin_comment=ours)
    assert wait(5, prolog, running) == STARTED_CALL_PATIENCE  # its prolog's end (reread)
    assert wait(5, Job(id=5, state="RUNNING", admin_comment=ours), running) == 0.0  # started
    assert wait(5, prolog, pending) == 0.0  # requeued
    assert wait(5, prolog, JobState("5", "COMPLETED")) == 0.0
    assert wait(5, Job(id=5, admin_comment="sunk-pod=u1 ns=default name=p sched=another"), running) == 0.0
    assert wait(5, Job(id=5, extra=ours), running) == 0.0  # an identity in Extra is none
    assert wait(5, Job(id=5, state="COMPLETED", admin_comment=ours), running) == 0.0


def test_no_patience_at_zero():
    """--started-call-patience=0s: the cache reads every job the state list asks for at once, as before."""
    from scheduler.assembly import awaiting_started_call

    assert awaiting_started_call(lambda job: ("u1", False), expected=lambda _job_id: True, patience=0.0) is None


@pytest.mark.parametrize("job, expected", [
    (Job(id=1, state="PENDING", state_reason="ReqNodeNotAvail", admin_comment="ours"), 10.0),
    (Job(id=1, state="PENDING", state_reason="None", admin_comment="ours"), 2.0),  # Slurm has not looked yet: sooner
    (Job(id=1, state="PENDING", state_reason="", admin_comment="ours"), 2.0),
    (Job(id=1, state="RUNNING", state_reason="Prolog", admin_comment="ours"), None),  # awaiting_start's
    (Job(id=1, state="PENDING", state_reason="Priority", admin_comment="theirs"), None),  # not this scheduler's
    (Job(id=1, state="PENDING", state_reason="Priority"), None),
])
def test_the_cache_rereads_this_schedulers_pending_placeholders_for_their_reason(job, expected):
    from scheduler.assembly import awaiting_reason

    after = awaiting_reason(lambda j: ("u1", False) if j.admin_comment == "ours" else None, every=10.0,
                            unreasoned_every=2.0)
    assert after is not None and after(job) == expected


def test_no_reason_rereads_when_turned_off():
    from scheduler.assembly import awaiting_reason

    assert awaiting_reason(lambda j: ("u1", False), every=0.0) is None


def test_a_reread_for_the_reason_does_not_wait_for_a_started_call():
    from scheduler.assembly import awaiting_started_call

    wait = awaiting_started_call(lambda j: ("u1", False), expected=lambda job_id: True, patience=3.0)
    held = Job(id=1, state="PENDING", state_reason="Priority", admin_comment="ours")
    assert wait(1, held, JobState("1", "PENDING", job_id=1)) == 0.0
    assert wait(1, held, JobState("1", "RUNNING", job_id=1)) == 3.0  # on its way to its started call
