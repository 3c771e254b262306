"""The sweeper: every Pod and every placeholder job looked at again, whatever events were missed."""

from __future__ import annotations

import threading

from scheduler.assembly import sweeper as make_sweeper
from scheduler.jobindex import JobIndex
from scheduler.reconciler import PodIndex
from sunk.model.slurm import Job


class Pods:
    """The Pod informer's read side, as PodIndex uses it."""

    def __init__(self, *uids: str):
        self.objs = [{"metadata": {"uid": uid, "namespace": "ns", "name": uid}} for uid in uids]

    def add_indexer(self, *_: object) -> None:
        pass

    def list(self) -> list[dict]:
        return list(self.objs)

    def keys(self) -> list[str]:
        return [f"ns/{o['metadata']['name']}" for o in self.objs]

    def get(self, key: str) -> dict | None:
        return next((o for o in self.objs if f"ns/{o['metadata']['name']}" == key), None)


def parse(job: Job):
    """The owner from the AdminComment (a short stand-in for an identity)."""
    return (job.admin_comment, False) if job.admin_comment.startswith("uid-") else None


def test_each_sweep_enqueues_every_pod_and_every_job_owner_including_orphans():
    jobs = JobIndex(parse)
    jobs.upsert(Job(id=1, state="RUNNING", admin_comment="uid-bound"), observed_at=1.0)
    jobs.upsert(Job(id=2, state="RUNNING", admin_comment="uid-orphan-job"), observed_at=1.0)  # its Pod is gone
    jobs.upsert(Job(id=3, state="RUNNING", admin_comment="not ours"), observed_at=1.0)
    pods = PodIndex(Pods("uid-bound", "uid-orphan-pod"))  # the second one's job is gone
    sweeps: list[set[str]] = []
    seen: set[str] = set()
    swept = threading.Event()
    wanted = {"uid-bound", "uid-orphan-job", "uid-orphan-pod"}

    def enqueue(uid: str) -> None:
        seen.add(uid)
        if seen >= wanted:
            sweeps.append(set(seen))
            seen.clear()
            if len(sweeps) == 2:
                swept.set()

    sweeper = make_sweeper(pods, jobs, enqueue, interval=0.01)
    sweeper.start()
    try:
        assert swept.wait(5), "two sweeps did not happen in 5 s"
    finally:
        sweeper.stop()
    assert sweeps == [wanted, wanted]  # again and again, not once


def test_a_stopped_sweeper_enqueues_nothing_more():
    pods = PodIndex(Pods("uid-a"))
    calls: list[str] = []
    sweeper = make_sweeper(pods, JobIndex(parse), calls.append, interval=0.01)
    sweeper.start()
    sweeper.stop()
    assert not sweeper.running
    count = len(calls)
    threading.Event().wait(0.05)
    assert len(calls) == count
