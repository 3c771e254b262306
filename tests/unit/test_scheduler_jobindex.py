"""JobIndex: placeholder jobs by unit, indexes on the jobs informer's store (its lists and the "started" hook's
reads meet there, the later wins), and the expectations of the units submitted for."""

from __future__ import annotations

from policy_fakes import TEST_POLICY

from scheduler.jobindex import JobIndex
from sunk.model.slurm import Job
from sunk.translate.gang import has_started
from sunk.translate.identity import PlaceholderIdentity
from sunk.translate.keys import PodKey


def parse(job: Job):
    """The owner from the AdminComment (a short stand-in for an identity), started from Slurm's state."""
    uid = job.admin_comment
    return (uid, has_started(job)) if uid.startswith("uid-") else None


def job(state="RUNNING", started=False, id=7, uid="uid-a"):
    """A RUNNING job not started yet is still in its prolog."""
    return Job(id=id, state=state, nodes="node1" if state == "RUNNING" else "", admin_comment=uid,
               state_reason="Prolog" if state == "RUNNING" and not started else "")


def test_a_list_requested_before_the_hook_does_not_undo_what_the_hook_saw():
    index = JobIndex(parse)
    assert index.upsert(job(started=True), observed_at=20.0) == "uid-a"
    # The cache's list left at t=15, before Slurm started the job, and lands now.
    assert index.upsert(job(state="PENDING"), observed_at=15.0) is None
    assert [j.state for j in index.view("uid-a").jobs] == ["RUNNING"]
    assert index.view("uid-a").started[7]


def test_a_later_list_replaces_the_hook_observation():
    index = JobIndex(parse)
    index.upsert(job(started=True), observed_at=20.0)
    assert index.upsert(job(state="COMPLETED", started=True), observed_at=21.0) == "uid-a"
    assert [j.state for j in index.view("uid-a").jobs] == ["COMPLETED"]


def test_a_same_time_observation_replaces():
    index = JobIndex(parse)
    index.upsert(job(state="PENDING"), observed_at=20.0)
    assert index.upsert(job(started=True), observed_at=20.0) == "uid-a"
    assert index.view("uid-a").started[7]


def test_the_same_observation_again_is_nothing_new():
    """The Slurm cache's event for the record the started hook read and handed it (SlurmCache.observe): the
    Pod was reconciled for it already."""
    index = JobIndex(parse)
    assert index.upsert(job(started=True), observed_at=20.0) == "uid-a"
    assert index.upsert(job(started=True), observed_at=20.0) is None
    assert index.upsert(job(state="COMPLETED", started=True), observed_at=20.0) == "uid-a"  # (same time, changed)


def test_removal_from_an_older_list_is_ignored_and_from_a_newer_one_applies():
    index = JobIndex(parse)
    index.upsert(job(started=True), observed_at=20.0)
    assert index.remove(7, observed_at=19.0) is None
    assert index.uid_of(7) == "uid-a"
    assert index.remove(7, observed_at=25.0) == "uid-a"
    assert index.uid_of(7) is None and index.view("uid-a").jobs == ()
    # An observation older than the removal does not bring the job back; a newer one does.
    assert index.upsert(job(started=True), observed_at=24.0) is None
    assert index.uid_of(7) is None
    assert index.upsert(job(), observed_at=26.0) == "uid-a"


def test_removals_are_remembered_for_the_ttl_only():
    now = [1000.0]
    index = JobIndex(parse, expectation_ttl=60.0, clock=lambda: now[0])
    for job_id in (7, 8):
        index.upsert(job(id=job_id), observed_at=20.0)
        index.remove(job_id, observed_at=25.0)
        now[0] += 40.0
    assert index.upsert(job(id=8), observed_at=24.0) is None  # 40 s after its removal: still refused
    index.remove(9, observed_at=30.0)  # (a removal is when old ones expire)
    assert index.upsert(job(id=7), observed_at=24.0) == "uid-a"  # removed 80 s ago: forgotten, accepted again


def test_jobs_that_are_not_placeholders_are_not_indexed():
    index = JobIndex(parse)
    assert index.upsert(Job(id=3, admin_comment="someone else's"), observed_at=1.0) is None
    assert index.uid_of(3) is None and index.uids() == set()


def test_a_submission_is_known_by_job_id_before_any_list_shows_it():
    """The placeholder may call its hook before the cache lists the job: it must be recognised."""
    index = JobIndex(parse)
    index.expect("uid-a", 7)
    assert index.uid_of(7) == "uid-a" and index.view("uid-a").expected_job_id == 7
    index.expect("uid-a", 8)  # a newer expectation replaces the old one, both ways
    assert index.uid_of(7) is None and index.uid_of(8) == "uid-a"
    index.upsert(job(id=8), observed_at=1.0)
    assert index.view("uid-a").expected_job_id is None  # the list shows it: the expectation is met
    assert index.uid_of(8) == "uid-a"
    index.expect("uid-b", 9)
    index.forget("uid-b")
    assert index.uid_of(9) is None and index.view("uid-b").expected_job_id is None


def test_expectations_and_refusals_expire():
    index = JobIndex(parse, expectation_ttl=0.0)
    index.expect("uid-a", 7)
    index.refuse("uid-b", "no such QOS")
    assert index.view("uid-a").expected_job_id is None and index.uid_of(7) is None
    assert index.view("uid-b").refused is None


def test_a_view_is_one_moment_even_when_the_hook_lands_while_it_is_read():
    """Jobs and expectation read apart let a Pod look jobless: it was deleted while its job ran."""
    index = JobIndex(parse)
    index.expect("uid-a", 7)
    before = index.view("uid-a")
    assert before.jobs == () and before.expected_job_id == 7
    index.upsert(job(started=True), observed_at=1.0)  # the started call
    after = index.view("uid-a")
    assert [j.id for j in after.jobs] == [7] and after.expected_job_id is None and after.started == {7: True}


def test_a_lost_submission_is_in_doubt_until_a_list_requested_after_it_shows_the_pods_job():
    index = JobIndex(parse, clock=lambda: 5.0)
    index.doubt("uid-a")  # (at 5.0)
    assert index.view("uid-a").in_doubt
    index.upsert(job(id=3, uid="uid-b"), observed_at=6.0)  # another Pod's job settles nothing
    assert index.view("uid-a").in_doubt
    assert index.upsert(job(state="PENDING", id=9), observed_at=6.0) == "uid-a"
    assert not index.view("uid-a").in_doubt and [j.id for j in index.view("uid-a").jobs] == [9]
    assert index.listed(7.0) == []  # nothing left to settle


def test_a_list_requested_after_the_doubt_without_the_pods_job_settles_it_too():
    index = JobIndex(parse, clock=lambda: 5.0)
    index.doubt("uid-a")
    assert index.listed(5.0) == [] and index.view("uid-a").in_doubt  # requested as the doubt began: not after
    assert index.listed(14.0) == [] and index.view("uid-a").in_doubt  # within slurmctld's MessageTimeout
    assert index.listed(15.5) == ["uid-a"]
    assert not index.view("uid-a").in_doubt and index.view("uid-a").jobs == ()


def test_a_doubt_beside_a_job_of_the_pod_is_no_doubt():
    """The view never says "look it up" for a unit whose job it shows."""
    index = JobIndex(parse)
    index.upsert(job(started=True), observed_at=20.0)
    index.doubt("uid-a")
    assert not index.view("uid-a").in_doubt


def test_an_informer_s_store_is_indexed_and_its_changes_settle_what_was_expected():
    """Over a real jobs informer: the index is the informer's (no second store); its changes reach the
    expectations through the assembly's feed; the hook's read goes into the informer's store."""
    from scheduler.assembly import attach_job_feed
    from sunk.slurm.client import Snapshot
    from sunk.slurm.informer import SlurmInformerFactory

    class Slurm:
        jobs: tuple[Job, ...] = ()

        def list_jobs(self, *, updated_since=None):
            return Snapshot(items=self.jobs, last_update=1)

    slurm = Slurm()
    informer = SlurmInformerFactory(slurm, interval=1.0).jobs()  # type: ignore[arg-type]
    index = JobIndex(parse, clock=informer.clock, jobs=informer)
    woken: list[str] = []
    attach_job_feed(informer, index, woken.append)
    index.expect("uid-a", 7)
    slurm.jobs = (job(state="PENDING"), Job(id=3, admin_comment="not ours"))
    assert informer.refresh().ok
    assert informer.get(3) is not None and index.uids() == {"uid-a"}  # one store; only placeholders indexed
    assert woken == ["uid-a"] and index.view("uid-a").expected_job_id is None
    assert index.upsert(job(started=True), observed_at=informer.clock())  # the hook's read, into the store
    assert informer.get(7).state == "RUNNING" and index.owners_on("node1") == {"uid-a"}
    slurm.jobs = ()
    assert informer.refresh().ok
    assert index.view("uid-a").jobs == () and index.owners_on("node1") == set() and woken[-1] == "uid-a"


# -- with the scheduler's own parser (scheduler.assembly.identity_parser) -------------------------------------

def real_index():
    from scheduler.assembly import identity_parser
    from scheduler.config import SchedulerConfig

    return JobIndex(identity_parser(SchedulerConfig("s", b"x" * 16, "http://h", identity_policy=TEST_POLICY)))


def identity(uid="uid-a"):


    return PlaceholderIdentity(PodKey(uid), "ns", name="p", scheduler="s").encode()


def test_an_identity_in_a_jobs_extra_is_no_identity():
    """A tenant who copies a placeholder's Extra onto an older held job of theirs must not make it a second job
    of the Pod (the scheduler would cancel the real one as a duplicate, or delete the Pod): Extra is the
    job's user's to write, only AdminComment is read."""
    index = real_index()
    forged = Job(id=5, state="PENDING", state_reason="JobHeldUser", extra=identity())
    assert index.upsert(forged, observed_at=1.0) is None
    assert index.uid_of(5) is None and index.uids() == set()
    index.doubt("uid-a")
    assert index.view("uid-a").in_doubt  # the forged job settles no doubt either
    assert index.upsert(Job(id=7, state="PENDING", admin_comment=identity()), observed_at=3.0) == "uid-a"
    assert [j.id for j in index.view("uid-a").jobs] == [7]


def test_started_is_slurms_word_not_the_jobs():
    """Running is not started while the prolog (which locks the node) runs, whatever the job's Extra says."""
    index = real_index()
    steps = [
        (Job(id=7, state="RUNNING", state_flags=("CONFIGURING",), admin_comment=identity()), False),
        (Job(id=7, state="RUNNING", state_reason="Prolog", admin_comment=identity(), extra=": started"), False),
        (Job(id=7, state="RUNNING", admin_comment=identity()), True),  # the prolog ended
    ]
    for observed_at, (running, started) in enumerate(steps, start=1):
        assert index.upsert(running, observed_at=float(observed_at)) == "uid-a"
        assert index.view("uid-a").started == {7: started}, running
