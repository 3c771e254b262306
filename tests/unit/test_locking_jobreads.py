"""SharedJobReads: one Slurm read per job for a burst of pre-hooks; refusals only from reads begun after asking."""

from __future__ import annotations

import threading

import pytest

from sunk.locking.jobreads import SharedJobReads
from sunk.model.slurm import Job
from sunk.slurm.errors import NotFound, SlurmUnavailable


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Slurm:
    """get_job: jobs in ``jobs``, NotFound otherwise; ``gate`` holds every read until set."""

    def __init__(self) -> None:
        self.jobs: dict[int, Job] = {}
        self.reads: list[int] = []
        self.gate = threading.Event()
        self.gate.set()
        self.down = False
        self.lock = threading.Lock()

    def get_job(self, job_id: int) -> Job:
        with self.lock:
            self.reads.append(job_id)
        self.gate.wait(5)
        if self.down:
            raise SlurmUnavailable("connection refused")
        if job_id not in self.jobs:
            raise NotFound(f"job {job_id}")
        return self.jobs[job_id]


def in_threads(count: int, call) -> tuple[list[threading.Thread], list]:
    results: list = []
    lock = threading.Lock()

    def run() -> None:
        value = call()
        with lock:
            results.append(value)

    threads = [threading.Thread(target=run) for _ in range(count)]
    for t in threads:
        t.start()
    return threads, results


def test_concurrent_callers_for_one_job_share_one_read():
    slurm = Slurm()
    slurm.jobs[7] = Job(id=7, state="RUNNING", nodes="node[1-64]")
    slurm.gate.clear()
    reads = SharedJobReads(slurm.get_job)
    threads, results = in_threads(64, lambda: reads.recent(7, timeout=5))
    while not slurm.reads:  # (the first caller is reading; the others join it or come after)
        threading.Event().wait(0.001)
    slurm.gate.set()
    for t in threads:
        t.join()
    assert slurm.reads == [7] and reads.reads == 1
    assert len(results) == 64 and all(r.job is slurm.jobs[7] for r in results)


def test_a_job_read_is_reused_for_its_ttl_then_read_again():
    slurm, clock = Slurm(), Clock()
    slurm.jobs[7] = Job(id=7, state="RUNNING", nodes="node1")
    reads = SharedJobReads(slurm.get_job, ttl=5.0, clock=clock)
    first = reads.recent(7, timeout=5)
    clock.now += 4.9
    assert reads.recent(7, timeout=5) is first
    clock.now += 0.2
    assert reads.recent(7, timeout=5).began == clock.now and slurm.reads == [7, 7]


def test_fresh_never_answers_from_a_read_begun_before_it_was_asked():
    """A requeued job allocated anew must not be refused from its record of a moment ago."""
    slurm, clock = Slurm(), Clock()
    slurm.jobs[7] = Job(id=7, state="RUNNING", nodes="node1")
    reads = SharedJobReads(slurm.get_job, clock=clock)
    reads.recent(7, timeout=5)
    clock.now += 1
    asked_at = clock()
    slurm.jobs[7] = Job(id=7, state="RUNNING", nodes="node2")
    again = reads.fresh(7, asked_at, timeout=5)
    assert again.job is not None and again.job.nodes == "node2" and len(slurm.reads) == 2
    assert reads.fresh(7, asked_at, timeout=5) is again  # (begun at asked_at: it counts)
    assert reads.recent(7, timeout=5) is again


@pytest.mark.parametrize("down", [False, True], ids=["not-found", "slurm-down"])
def test_a_refusal_is_kept_by_nobody_but_the_callers_that_waited_for_it(down):
    slurm = Slurm()
    slurm.down = down
    reads = SharedJobReads(slurm.get_job)
    first = reads.recent(950, timeout=5)
    assert first.job is None and (first.error is not None) == down and len(reads) == 0
    assert reads.recent(950, timeout=5) is not first and len(slurm.reads) == 2


def test_a_flood_of_job_ids_keeps_at_most_max_entries():
    slurm = Slurm()
    for job_id in range(1, 101):
        slurm.jobs[job_id] = Job(id=job_id, state="RUNNING", nodes="node9")  # real jobs, on another node
    reads = SharedJobReads(slurm.get_job, max_entries=8)
    for job_id in range(1, 10_001):
        reads.recent(job_id, timeout=5)
        assert len(reads) <= 8
    assert reads.recent(100, timeout=5).job is not None and len(slurm.reads) == 10_000  # (the newest are still kept)


def test_old_entries_leave_when_their_ttl_is_past():
    slurm, clock = Slurm(), Clock()
    slurm.jobs.update({1: Job(id=1, state="RUNNING", nodes="n1"), 2: Job(id=2, state="RUNNING", nodes="n1")})
    reads = SharedJobReads(slurm.get_job, ttl=5.0, clock=clock)
    reads.recent(1, timeout=5)
    clock.now += 6
    reads.recent(2, timeout=5)
    assert len(reads) == 1


def test_a_bug_in_the_read_reaches_every_waiter_as_an_error():
    def broken(_job_id: int) -> Job:
        raise KeyError("x")

    reads = SharedJobReads(broken)
    assert reads.recent(3, timeout=5).error is not None and len(reads) == 0


def test_max_entries_must_be_positive():
    with pytest.raises(ValueError):
        SharedJobReads(Slurm().get_job, max_entries=0)


def test_a_caller_waits_for_anothers_hung_read_only_its_own_timeout():
    """Slurm hangs on the first caller's read: a caller taking that read gets a retryable error once its own
    budget is spent, and holds its thread no longer (the read itself still ends for whoever began it)."""
    slurm = Slurm()
    slurm.jobs[7] = Job(id=7, state="RUNNING", nodes="node1")
    slurm.gate.clear()
    reads = SharedJobReads(slurm.get_job)
    first, first_result = in_threads(1, lambda: reads.recent(7, timeout=5))
    while not slurm.reads:
        threading.Event().wait(0.001)
    joined = reads.recent(7, timeout=0.05)  # (returns: the test would hang here without the bound)
    assert joined.job is None and joined.error is not None and "did not end within 0.05s" in str(joined.error)
    assert slurm.reads == [7]  # it joined the read, began none
    slurm.gate.set()
    first[0].join()
    assert first_result[0].job is not None
