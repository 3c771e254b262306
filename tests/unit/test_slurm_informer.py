"""Slurm informers: one per kind, client-go's shape (store, indexers, handlers, sync, outages), one per process."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from sunk.model.slurm import Job, JobState, Node
from sunk.slurm.client import Snapshot
from sunk.slurm.errors import SlurmUnavailable
from sunk.slurm.informer import SlurmInformerFactory
from sunk.slurm.readrequests import ReadRequest


class SlowJobsSlurm:
    def __init__(self) -> None:
        self.node_state = "IDLE"
        self.job_seconds = 0.0
        self.jobs = [Job(1, state="RUNNING", nodes="node1")]
        self.down = False

    def list_nodes(self, *, updated_since: int | None = None) -> Snapshot:
        if self.down:
            raise SlurmUnavailable("list nodes: cannot reach slurmrestd")
        return Snapshot(items=(Node("node1", state=self.node_state),), last_update=int(time.time()))

    def list_jobs(self, *, updated_since: int | None = None) -> Snapshot:
        if self.down:
            raise SlurmUnavailable("list jobs: cannot reach slurmrestd")
        time.sleep(self.job_seconds)
        return Snapshot(items=tuple(self.jobs), last_update=int(time.time()))


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any, Any]] = []

    def on_add(self, obj: Any) -> None:
        self.seen.append(("add", None, obj))

    def on_update(self, old: Any, new: Any) -> None:
        self.seen.append(("update", old, new))

    def on_delete(self, obj: Any) -> None:
        self.seen.append(("delete", obj, None))


def test_node_changes_arrive_within_an_interval_while_job_lists_take_seconds():
    slurm = SlowJobsSlurm()
    factory = SlurmInformerFactory(slurm, interval=0.1)  # type: ignore[arg-type]
    nodes, jobs = factory.nodes(), factory.jobs()
    seen: dict[str, float] = {}
    got = threading.Event()

    def on_update(_old: Node, new: Node) -> None:
        if new.drained:
            seen["at"] = time.monotonic()
            got.set()

    nodes.add_handler(on_update=on_update)
    factory.start()
    try:
        assert nodes.wait_for_sync(5) and jobs.wait_for_sync(5) and factory.has_synced() and nodes.fresh
        assert nodes.get("node1") is not None and jobs.get(1) is not None
        time.sleep(1.0)  # (the first node list answered with every node: the node informer waits that second out)
        slurm.job_seconds = 2.0  # from now on every job list takes 2 s
        time.sleep(0.3)  # a slow job list is in progress
        changed = time.monotonic()
        slurm.node_state = "IDLE+DRAIN"
        assert got.wait(5)
        assert seen["at"] - changed < 0.8  # one node interval (+ slack), not the job list's 2 s
        assert nodes.fresh  # node freshness is not dragged down by the slow job list
    finally:
        slurm.job_seconds = 0.0
        factory.stop(5)


def test_one_informer_per_kind_per_process_each_with_its_own_interval_and_only_jobs_take_read_requests():
    slurm = SlowJobsSlurm()
    factory = SlurmInformerFactory(slurm, interval=2.0, intervals={"node": 0.25})  # type: ignore[arg-type]
    assert factory.informers() == []
    jobs = factory.jobs()
    assert factory.jobs() is jobs and factory.informers() == [jobs]  # shared, and only what was asked for
    nodes = factory.nodes()
    assert factory.informers() == [nodes, jobs]
    assert (nodes.interval, jobs.interval) == (0.25, 2.0)
    jobs.request_reads(5, every=0.0, wait_up_to=3.0)
    assert jobs.read_request(5) == ReadRequest(every=0.0, wait_up_to=3.0)
    assert jobs.lister.read_requests.get(5) == ReadRequest(every=0.0, wait_up_to=3.0)  # what its lister reads
    jobs.request_reads(5, every=10.0)  # replaces the earlier request
    assert jobs.read_request(5) == ReadRequest(every=10.0)
    jobs.request_reads(5)  # nothing asked: cancelled
    assert jobs.read_request(5) is None
    jobs.request_reads(6, wait_up_to=1.0)
    jobs.cancel_reads(6)
    assert jobs.read_request(6) is None
    with pytest.raises(TypeError):
        nodes.request_reads(5, every=1.0)


def test_handlers_see_adds_updates_and_deletes_in_order_after_the_store_and_a_late_one_gets_a_replay():
    slurm = SlowJobsSlurm()
    jobs = SlurmInformerFactory(slurm, interval=60).jobs()  # type: ignore[arg-type]
    early = Recorder()
    jobs.add_handler(early)
    held_when_handled: list[Job | None] = []
    jobs.add_handler(on_update=lambda _old, new: held_when_handled.append(jobs.get(new.id)))
    jobs.refresh()
    assert early.seen == [("add", None, Job(1, state="RUNNING", nodes="node1"))]

    slurm.jobs = [Job(1, state="COMPLETING", nodes="node1"), Job(2, state="PENDING")]
    jobs.refresh()
    running, completing = Job(1, state="RUNNING", nodes="node1"), Job(1, state="COMPLETING", nodes="node1")
    assert early.seen[1:] == [("add", None, Job(2, state="PENDING")), ("update", running, completing)]
    assert held_when_handled == [Job(1, state="COMPLETING", nodes="node1")]  # the store leads every handler

    late = Recorder()
    remove = jobs.add_handler(late)
    assert sorted(event[2].id for event in late.seen) == [1, 2] and {e[0] for e in late.seen} == {"add"}
    remove()
    slurm.jobs = [Job(2, state="PENDING")]
    jobs.refresh()
    assert early.seen[-1] == ("delete", Job(1, state="COMPLETING", nodes="node1"), None)
    assert len(late.seen) == 2  # removed: nothing more
    assert jobs.get(1) is None and jobs.keys() == [2] and dict(jobs.items()) == {2: Job(2, state="PENDING")}


def test_an_index_follows_every_change():
    slurm = SlowJobsSlurm()
    jobs = SlurmInformerFactory(slurm, interval=60).jobs()  # type: ignore[arg-type]
    jobs.refresh()
    jobs.add_indexer("node", lambda job: job.node_list)  # existing items are indexed at once
    assert [job.id for job in jobs.by_index("node", "node1")] == [1]
    slurm.jobs = [Job(1, state="RUNNING", nodes="node2"), Job(3, state="RUNNING", nodes="node[1-2]")]
    jobs.refresh()
    assert jobs.index_keys("node", "node1") == [3] and jobs.index_keys("node", "node2") == [1, 3]
    slurm.jobs = []
    jobs.refresh()
    assert jobs.by_index("node", "node2") == []


def test_a_handler_reads_when_the_list_behind_its_change_was_requested():
    slurm = SlowJobsSlurm()
    now = [100.0]
    jobs = SlurmInformerFactory(slurm, interval=60, clock=lambda: now[0]).jobs()  # type: ignore[arg-type]
    stamps: list[float] = []
    jobs.add_handler(on_add=lambda _job: stamps.append(jobs.observed_at()),
                     on_delete=lambda _job: stamps.append(jobs.observed_at()))
    jobs.refresh()
    now[0] = 160.0
    slurm.jobs = []
    jobs.refresh()
    assert stamps == [100.0, 160.0] and jobs.observed_at() == 0.0  # (outside a handler: none)


def test_each_kinds_recovery_is_reported():
    """The Syncer's Manager wakes what failed for an outage when either kind lists again."""
    slurm = SlowJobsSlurm()
    factory = SlurmInformerFactory(slurm, interval=60)  # type: ignore[arg-type]
    ended: list[str] = []
    stops = [informer.on_recovered(lambda kind=kind: ended.append(kind))
             for kind, informer in (("node", factory.nodes()), ("job", factory.jobs()))]
    factory.refresh()
    slurm.down = True
    factory.refresh()
    assert not factory.nodes().fresh and factory.nodes().last_error is not None
    slurm.down = False
    factory.refresh()
    assert ended == ["node", "job"]
    for stop in stops:
        stop()
    slurm.down = True
    factory.refresh()
    slurm.down = False
    factory.refresh()
    assert ended == ["node", "job"]


def test_an_informer_waits_for_its_first_list_with_or_without_a_timeout():
    factory = SlurmInformerFactory(SlowJobsSlurm(), interval=0.1)  # type: ignore[arg-type]
    nodes = factory.nodes()
    assert not nodes.has_synced() and not factory.has_synced()
    factory.start()
    try:
        assert nodes.wait_for_sync() and nodes.has_synced() and nodes.wait_for_sync(0)
    finally:
        factory.stop(5)


def test_the_store_keeps_the_later_observation_and_remembers_removals_for_a_while():
    """ObservedStore: a list that left before a reader's own read does not undo it; a removal turns older reads
    away until ``forget_after`` has passed."""
    from sunk.slurm.informer import ObservedStore

    now = [0.0]
    store: ObservedStore[int, Job] = ObservedStore(forget_after=60.0, clock=lambda: now[0])
    running, pending = Job(7, state="RUNNING"), Job(7, state="PENDING")
    assert store.put(7, running, 20.0) == (None, running)
    assert store.put(7, pending, 15.0) is None and store.get(7) == running  # older: ignored
    assert store.put(7, running, 20.0) is None  # the same observation again: nothing new
    assert store.put(7, pending, 20.0) == (running, pending)  # same time, changed: taken
    assert store.drop(7, 19.0) is None and store.get(7) == pending
    assert store.drop(7, 25.0) == pending and store.get(7) is None
    assert store.put(7, running, 24.0) is None  # read before the removal: does not bring it back
    now[0] = 61.0
    store.drop(8, 30.0)  # (a removal is when old ones expire)
    assert store.put(7, running, 24.0) == (None, running)  # forgotten: taken again


def test_an_observed_job_reaches_the_handlers_at_once_and_the_lists_own_older_view_does_not():
    slurm = SlowJobsSlurm()
    slurm.jobs = [Job(1, state="PENDING")]
    jobs = SlurmInformerFactory(slurm, interval=1.0).jobs()  # type: ignore[arg-type]
    recorder = Recorder()
    listed: list[float] = []
    jobs.add_handler(recorder)
    jobs.on_listed(listed.append)
    before = jobs.clock()
    assert jobs.refresh().ok and listed and listed[0] >= before
    started = Job(1, state="RUNNING", nodes="node1")
    assert jobs.observe(started, jobs.clock())
    assert recorder.seen[-1] == ("update", Job(1, state="PENDING"), started) and jobs.get(1) == started
    jobs._change(1, Job(1, state="PENDING"), before)  # (a list requested before the read lands late)
    assert jobs.get(1) == started and len(recorder.seen) == 2


# -- a record only a reader observed: the next complete listing begun after it decides ---------------------


class StatesSlurm:
    """Jobs by state list (``cheap_job_states``) on a clock the test moves; ``during_list`` runs inside each
    state list (a reader's read arriving meanwhile); ``reads_fail`` makes a job's read fail (a partial refresh)."""

    cheap_job_states = True

    def __init__(self, now: list[float]) -> None:
        self.now = now
        self.jobs: dict[int, Job] = {1: Job(1, state="RUNNING", nodes="node1")}
        self.during_list: Any = None
        self.reads_fail = False
        self.down = False

    def list_nodes(self, *, updated_since: int | None = None) -> Snapshot:
        return Snapshot(items=(), last_update=1)

    def list_jobs(self, *, updated_since: int | None = None) -> Snapshot:
        if self.down:
            raise SlurmUnavailable("list jobs: cannot reach slurmrestd")
        return Snapshot(items=tuple(self.jobs.values()), last_update=1)

    def list_job_states(self) -> list[JobState]:
        if self.down:
            raise SlurmUnavailable("job states: cannot reach slurmrestd")
        if self.during_list is not None:
            self.during_list()
        return [JobState(str(job.id), job.state, job.state_flags, job_id=job.id) for job in self.jobs.values()]

    def read_jobs(self, job_ids: list[int]) -> list[Job]:
        if self.reads_fail:
            raise SlurmUnavailable("read job: cannot reach slurmrestd")
        return [self.jobs[job_id] for job_id in job_ids if job_id in self.jobs]


def states_informer(slurm: StatesSlurm, now: list[float]) -> tuple[Any, Recorder]:
    jobs = SlurmInformerFactory(slurm, interval=1.0, clock=lambda: now[0],  # type: ignore[arg-type]
                                job_check_after=float("inf")).jobs()
    recorder = Recorder()
    jobs.add_handler(recorder)
    assert jobs.refresh().ok and jobs.keys() == [1]  # (the first refresh: a full list)
    return jobs, recorder


def deletes(recorder: Recorder) -> list[Any]:
    return [old for kind, old, _new in recorder.seen if kind == "delete"]


def test_a_job_only_observed_and_purged_before_any_listing_showed_it_is_deleted_by_the_next_full_list():
    """The scheduler read back its just-submitted job; Slurm purged it (MinJobAge) before any list showed it."""
    now = [0.0]
    slurm = SlowJobsSlurm()
    jobs = SlurmInformerFactory(slurm, interval=1.0, clock=lambda: now[0]).jobs()  # type: ignore[arg-type]
    recorder = Recorder()
    jobs.add_handler(recorder)
    assert jobs.refresh().ok
    purged = Job(2, state="COMPLETED")
    now[0] = 1.0
    assert jobs.observe(purged, 1.0) and jobs.get(2) == purged
    now[0] = 2.0
    assert jobs.refresh().ok
    assert jobs.get(2) is None and deletes(recorder) == [purged]
    now[0] = 3.0
    assert jobs.refresh().ok and deletes(recorder) == [purged]  # once
    assert jobs.get(1) == slurm.jobs[0]  # (what the list shows stays)


def test_a_deferred_read_keeps_the_observed_record_while_listed_and_its_purge_deletes_it():
    """The lister holds no record of a job whose read waits for a reader's (``wait_up_to``): the store keeps the
    reader's record while the state list shows the job, and drops it at the first state list that does not."""
    now = [0.0]
    slurm = StatesSlurm(now)
    jobs, recorder = states_informer(slurm, now)
    pending = Job(2, state="PENDING")
    jobs.request_reads(2, wait_up_to=60.0)
    now[0] = 1.0
    assert jobs.observe(pending, 1.0)  # (the reader's read-back, just after its submission)
    slurm.jobs[2] = Job(2, state="RUNNING", nodes="node1")  # started: the state list disagrees, the read waits
    now[0] = 2.0
    assert jobs.refresh().ok
    assert jobs.lister.jobs().get(2) is None and jobs.get(2) == pending  # listed, not read yet: kept
    del slurm.jobs[2]  # ended and purged before anyone read it again
    now[0] = 3.0
    assert jobs.refresh().ok
    assert jobs.get(2) is None and deletes(recorder) == [pending]
    now[0] = 4.0
    assert jobs.refresh().ok and deletes(recorder) == [pending]  # once


def test_a_job_observed_after_the_listing_began_is_kept_until_a_listing_begun_after_it():
    now = [0.0]
    slurm = StatesSlurm(now)
    jobs, recorder = states_informer(slurm, now)
    submitted = Job(2, state="COMPLETED")

    def reader_reads_meanwhile() -> None:
        now[0] += 1.0
        jobs.observe(submitted, now[0])  # (the job is younger than the list Slurm is rendering)

    slurm.during_list = reader_reads_meanwhile
    now[0] = 2.0
    assert jobs.refresh().ok
    assert jobs.get(2) == submitted and deletes(recorder) == []
    slurm.during_list = None
    now[0] = 5.0
    assert jobs.refresh().ok
    assert jobs.get(2) is None and deletes(recorder) == [submitted]


@pytest.mark.parametrize("failure", ["slurm down", "a read fails"])
def test_a_listing_that_failed_or_stopped_half_way_drops_nothing(failure: str):
    now = [0.0]
    slurm = StatesSlurm(now)
    jobs, recorder = states_informer(slurm, now)
    observed = Job(2, state="PENDING")
    now[0] = 1.0
    jobs.observe(observed, 1.0)
    if failure == "slurm down":
        slurm.down = True
    else:
        slurm.jobs[3] = Job(3, state="PENDING")  # (a new job to read; its read fails)
        slurm.reads_fail = True
    now[0] = 2.0
    assert not jobs.refresh().ok
    assert jobs.get(2) == observed and deletes(recorder) == []
