"""When the scheduler's jobs lister, which reads no job but its own placeholders, reads every new job
(``scheduler.assembly.NewJobReads``): a placeholder made without a job id this process knows (by the
leader a standby takes over from, by a submission whose answer was lost) must still be found at once.

Against the in-process slurmrestd stand-in, with the lister's clock in the test's hands."""

from __future__ import annotations

import math

import pytest

from scheduler.assembly import LOST_SUBMISSION_LOOKBACK, NewJobReads, attach_job_feed, identity_parser
from scheduler.config import SchedulerConfig
from scheduler.jobindex import JobIndex
from sunk.slurm import connect
from sunk.slurm.informer import SlurmInformerFactory
from sunk_dev.fakeslurm import Fault

pytest_plugins = ("slurm_fakes",)  # its fixtures: slurm_clock, clock, fake


def ours(n: int) -> str:
    return f"sunk-pod=uid-{n} ns=default name=pod-{n} sched=s"


@pytest.fixture
def scheduler(fake, clock):
    """The scheduler's jobs informer, its job index and its NewJobReads, as ``assemble`` wires them (no
    ``update_time`` checks: a check that meets a change reads every job, which would hide what is tested)."""
    parse = identity_parser(SchedulerConfig("s", b"x" * 32, "http://h"))
    jobs = SlurmInformerFactory(connect("rest", url=fake.url, token="t"), keep_job=lambda job: parse(job) is not None,
                                clock=clock, job_full_every=3600, job_check_after=math.inf).jobs()
    reads = NewJobReads(jobs)
    index = JobIndex(parse, clock=clock, jobs=jobs, on_doubt=reads.doubt)
    attach_job_feed(jobs, index, lambda _unit: None)
    assert jobs.refresh().ok
    return jobs, reads, index


def later(fake, slurm_clock, clock, jobs, seconds=1.0):
    slurm_clock.t += 1
    clock.t += seconds
    assert jobs.refresh().ok


def test_a_standby_holds_the_leaders_new_placeholders(fake, slurm_clock, clock, scheduler):
    jobs, _reads, _index = scheduler
    fake.put_job(1, admin_comment=ours(1))  # the leader's: no request of this replica names it
    fake.put_job(2)  # another tenant's
    later(fake, slurm_clock, clock, jobs)
    assert jobs.get(1) is not None and jobs.get(2) is None


def test_a_replica_that_takes_over_still_reads_the_old_leaders_last_submissions(fake, slurm_clock, clock, scheduler):
    jobs, reads, _index = scheduler
    reads.leading()
    later(fake, slurm_clock, clock, jobs)  # its first list as the leader
    fake.put_job(3, admin_comment=ours(3))  # the old leader's submission, recorded late
    later(fake, slurm_clock, clock, jobs, seconds=LOST_SUBMISSION_LOOKBACK - 10)
    assert jobs.get(3) is not None
    later(fake, slurm_clock, clock, jobs, seconds=20)  # the first list requested after the lookback: it ends
    fake.put_job(4, admin_comment=ours(4))  # nobody's submission this process knows of: not read
    later(fake, slurm_clock, clock, jobs)
    assert jobs.get(4) is None


def test_a_lost_submissions_job_is_found_though_listed_before_the_doubt(fake, slurm_clock, clock, scheduler):
    jobs, reads, index = scheduler
    reads.leading()
    later(fake, slurm_clock, clock, jobs, seconds=LOST_SUBMISSION_LOOKBACK + 1)  # standing by is over
    fake.put_job(5, admin_comment=ours(5))  # made by the submission whose answer is about to be lost
    later(fake, slurm_clock, clock, jobs)
    assert jobs.get(5) is None  # listed, not read: nobody asked
    index.doubt("uid-5")
    later(fake, slurm_clock, clock, jobs)
    assert jobs.get(5) is not None  # read, and the doubt met by it
    assert index.expectations.get("uid-5") is None


def test_reads_go_on_after_a_doubt_ends_for_a_job_recorded_late(fake, slurm_clock, clock, scheduler):
    jobs, reads, index = scheduler
    reads.leading()
    later(fake, slurm_clock, clock, jobs, seconds=LOST_SUBMISSION_LOOKBACK + 1)
    index.doubt("uid-6")
    later(fake, slurm_clock, clock, jobs, seconds=11)  # a list requested past the doubt's margin settles it
    assert index.expectations.get("uid-6") is None
    later(fake, slurm_clock, clock, jobs, seconds=30)
    fake.put_job(6, admin_comment=ours(6))  # slurmctld records the lost submission after all
    later(fake, slurm_clock, clock, jobs)
    assert jobs.get(6) is not None  # seen at once: the scheduler cancels the younger of the unit's two jobs
    later(fake, slurm_clock, clock, jobs, seconds=LOST_SUBMISSION_LOOKBACK)
    fake.put_job(7, admin_comment=ours(7))
    later(fake, slurm_clock, clock, jobs)
    assert jobs.get(7) is None  # the reads for that doubt are over


@pytest.mark.parametrize(("refusals", "full_lists"), [(1, 0), (2, 1)])
def test_a_refused_read_loses_no_new_job(fake, slurm_clock, clock, scheduler, refusals, full_lists):
    """A new job whose read Slurm refused stays one to read: the next refresh lists states and reads it (no full
    list, which would find it whatever the failed refresh had recorded); after a second refusal in a row, a full
    list."""
    jobs, _reads, _index = scheduler
    fake.put_job(8, admin_comment=ours(8))
    fake.add_fault(Fault(method="GET", path="job/8", status=500, body={"errors": [{"error": "boom"}]},
                         times=refusals))
    for _ in range(refusals):
        slurm_clock.t += 1
        clock.t += 1
        assert not jobs.refresh().ok
    before = jobs.stats().job_full_lists
    later(fake, slurm_clock, clock, jobs)
    assert jobs.get(8) is not None
    assert jobs.stats().job_full_lists == before + full_lists
