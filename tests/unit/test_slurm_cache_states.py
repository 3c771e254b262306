"""SlurmCache's job-state mode: one state list per refresh, full reads only of what changed.

Against the in-process slurmrestd stand-in (sunk_dev.fakeslurm), which serves ``GET /jobs/state``
in 24.11's shape and counts the bytes of every answer.
"""

import logging
import math
import threading

import pytest

from sunk.model.slurm import Job, JobState
from sunk.slurm import SlurmCache, connect
from sunk.slurm.cache import JobReads, plan_job_reads
from sunk.slurm.client import Snapshot
from sunk.slurm.errors import SlurmError
from sunk.slurm.readrequests import ReadRequest
from sunk.translate.gang import has_started
from sunk_dev import listerlog
from sunk_dev.fakeslurm import Fault
from sunk_dev.listerlog import ADDED, CHANGED, REMOVED

pytest_plugins = ("slurm_fakes",)  # its fixtures: slurm_clock, clock, fake


def rest(fake):
    return connect("rest", url=fake.url, token="t", read_timeout=60)


def record(cache):
    events = []
    listerlog.record(cache, events.append, replay=False)
    return events


def brief(events):
    return [(e.type, e.key, e.old, e.new) for e in events]


def calls_by_path(fake, since):
    out = {}
    for method, path, _query in fake.state.requests[since:]:
        kind = "job/ID" if path.startswith("job/") and path[4:].isdigit() else path
        out[(method, kind)] = out.get((method, kind), 0) + 1
    return out


# -- the cost of one change --------------------------------------------------------------------------------


def test_one_changed_job_among_10000_costs_one_state_list_and_one_read_under_2_mb(fake, slurm_clock, clock):
    fake.pretty = False  # (only to fill the cache quickly; slurmrestd pretty-prints, as below)
    for job_id in range(1, 10_001):
        fake.put_job(job_id, name=f"job-{job_id}", admin_comment=f"sunk-pod=uid-{job_id} ns=default name=pod-{job_id}")
    slurm_clock.tick()
    cache = SlurmCache(rest(fake), kinds=("job",), clock=clock)
    assert cache.job_states and cache.refresh().ok and len(cache.jobs()) == 10_000
    events = record(cache)
    fake.pretty = True

    fake.put_job(4242, name="job-4242", state=("RUNNING",), nodes="node1", allocation=[("node1", 1, 1000)],
                 admin_comment="sunk-pod=uid-4242 ns=default name=pod-4242")
    slurm_clock.tick()
    clock.tick()
    requests_before, sent_before = len(fake.state.requests), len(fake.state.sent)
    result = cache.refresh()

    assert result.ok and result.calls == 2 and result.events == 1
    assert calls_by_path(fake, requests_before) == {("GET", "jobs/state/"): 1, ("GET", "job/ID"): 1}
    sent = sum(size for _m, _p, size in fake.state.sent[sent_before:])
    assert sent < 2_000_000, sent
    (event,) = events
    assert (event.type, event.key, event.old.state, event.new.state) == (CHANGED, 4242, "PENDING", "RUNNING")
    assert event.new.node_list == ("node1",) and cache.job(4242) == event.new

    requests_before = len(fake.state.requests)
    clock.tick()
    assert cache.refresh().events == 0  # nothing changed: the state list only
    assert calls_by_path(fake, requests_before) == {("GET", "jobs/state/"): 1}
    assert cache.stats().job_reads == 1 and cache.stats().job_full_lists == 1


# -- events mean what they meant with full lists --------------------------------------------------------------


def placeholder_awaiting_start(job):
    """The scheduler's reread (scheduler.assembly.awaiting_start): a placeholder (its identity in AdminComment)
    that Slurm runs and has not shown started (its prolog still runs): the end changes no state."""
    return job.state == "RUNNING" and job.admin_comment.startswith("sunk-pod=") and not has_started(job)


def awaiting_start_reads(job):
    """Its read request: at every refresh."""
    return ReadRequest(every=0.0) if placeholder_awaiting_start(job) else None


def ask(cache, *policies):
    """What the scheduler's job handler does (``scheduler.assembly.PlaceholderReads``): each record held gets
    the request its policies make (merged), a job gone drops its own."""

    def put(event):
        if event.new is None:
            cache.read_requests.cancel(event.key)
            return
        found = [r for policy in policies if (r := policy(event.new)) is not None]
        every = min((r.every for r in found if r.every is not None), default=None)
        wait = max((r.wait_up_to for r in found), default=0.0)
        cache.read_requests.request(event.key, ReadRequest(every, wait), cache.clock())

    listerlog.record(cache, put)
    return cache


def test_events_are_those_of_full_lists_for_a_scripted_sequence(fake, slurm_clock, clock):
    """Two caches on one stand-in, one listing in full with update_time, one by state: same events."""
    by_state = ask(SlurmCache(rest(fake), kinds=("job",), clock=clock, job_states=True), awaiting_start_reads)
    in_full = SlurmCache(rest(fake), kinds=("job",), clock=clock, job_states=False, resync_every=3600)
    fake.put_job(1, admin_comment="sunk-pod=a ns=default name=a")
    fake.put_job(2)
    slurm_clock.tick()
    assert by_state.refresh().ok and in_full.refresh().ok
    seen_by_state, seen_in_full = record(by_state), record(in_full)
    identity_a = "sunk-pod=a ns=default name=a"
    steps = {
        "submit": lambda: fake.put_job(3, admin_comment="sunk-pod=c ns=default name=c"),
        "start, in its prolog": lambda: fake.put_job(1, state=("RUNNING",), state_reason="Prolog", nodes="node1",
                                                     allocation=[("node1", 1, 100)], admin_comment=identity_a),
        "the prolog ends (the reason only)": lambda: fake.put_job(
            1, state=("RUNNING",), nodes="node1", allocation=[("node1", 1, 100)], admin_comment=identity_a),
        "cancel": lambda: rest(fake).cancel_job(2),
        "complete, with COMPLETING": lambda: fake.put_job(1, state=("COMPLETED", "COMPLETING"), nodes="node1",
                                                          admin_comment=identity_a),
        "completed": lambda: fake.put_job(1, state=("COMPLETED",), nodes="node1", admin_comment=identity_a),
        "requeue of another": lambda: fake.put_job(3, state=("PENDING", "REQUEUED"),
                                                   admin_comment="sunk-pod=c ns=default name=c"),
        "purge": lambda: fake.remove_job(2),
        "two at once": lambda: (fake.put_job(4), fake.remove_job(1)),
    }
    for name, change in steps.items():
        change()
        slurm_clock.tick()
        clock.tick()
        assert by_state.refresh().ok and in_full.refresh().ok
        assert brief(seen_by_state) == brief(seen_in_full) and seen_in_full, name
        assert [e.observed_at for e in seen_by_state] == [clock.t] * len(seen_by_state)  # (no clock moves here)
        seen_by_state.clear()
        seen_in_full.clear()
    assert dict(by_state.jobs()) == dict(in_full.jobs())
    assert by_state.stats().job_full_lists == 1  # never one since the first


def test_a_field_change_without_a_state_change_waits_for_the_full_list(fake, slurm_clock, clock):
    """The trade-off: a held job's Extra (or comment, reason, priority) written without a state change
    is not in the state list; the periodic full list shows it, with the same event."""
    fake.put_job(5, extra="before")
    slurm_clock.tick()
    cache = SlurmCache(rest(fake), kinds=("job",), clock=clock, job_full_every=300)
    cache.refresh()
    events = record(cache)
    fake.put_job(5, extra="after", comment="c")
    slurm_clock.tick()
    for _ in range(3):
        clock.tick(60)
        cache.refresh()
    assert events == [] and cache.job(5).extra == "before"
    requests_before = len(fake.state.requests)
    clock.tick(120)  # 300 s since the last full list
    cache.refresh()
    assert calls_by_path(fake, requests_before) == {("GET", "jobs/"): 1}
    assert [(e.type, e.old.extra, e.new.extra, e.new.comment) for e in events] == [(CHANGED, "before", "after", "c")]


def test_reread_jobs_are_read_every_refresh(fake, slurm_clock, clock):
    fake.put_job(5, state=("RUNNING",), state_reason="Prolog", nodes="node1", admin_comment="sunk-pod=u ns=d name=p")
    # An identity in a job's Extra (its user's to write) names no Pod: not a placeholder's, never reread
    fake.put_job(6, state=("RUNNING",), state_reason="Prolog", nodes="node1", extra="sunk-pod=u ns=d name=p")
    slurm_clock.tick()
    cache = ask(SlurmCache(rest(fake), kinds=("job",), clock=clock), awaiting_start_reads)
    cache.refresh()
    events = record(cache)
    requests_before = len(fake.state.requests)
    clock.tick()
    cache.refresh()
    assert calls_by_path(fake, requests_before) == {("GET", "jobs/state/"): 1, ("GET", "job/ID"): 1}
    assert fake.state.requests[-1][:2] == ("GET", "job/5") and events == []  # read, and unchanged: no event
    fake.put_job(5, state=("RUNNING",), nodes="node1", admin_comment="sunk-pod=u ns=d name=p")  # the prolog ended
    slurm_clock.tick()
    clock.tick()
    cache.refresh()
    assert [(e.type, e.old.state_reason, e.new.state_reason) for e in events] == [(CHANGED, "Prolog", "")]
    requests_before = len(fake.state.requests)
    clock.tick()
    cache.refresh()
    assert calls_by_path(fake, requests_before) == {("GET", "jobs/state/"): 1}  # started: no longer read


def pending_placeholder_every(seconds):
    """Pending placeholders every ``seconds``, nothing else."""
    return lambda job: ReadRequest(every=seconds) if job.state == "PENDING" and job.admin_comment else None


def test_a_pending_reason_that_changes_alone_is_an_event_once_its_reread_is_due(fake, slurm_clock, clock):
    """The state list shows PENDING both times: the reason's change is seen by the job's read, due after
    ``reread_after`` seconds, one read of that job only (not of every job, not at every refresh)."""
    fake.put_job(5, state=("PENDING",), state_reason="ReqNodeNotAvail", admin_comment=PLACEHOLDER)
    fake.put_job(6, state=("PENDING",), state_reason="Priority")  # someone else's: never reread
    slurm_clock.tick()
    cache = ask(SlurmCache(rest(fake), kinds=("job",), clock=clock, job_check_after=math.inf),
                pending_placeholder_every(10.0))
    cache.refresh()
    events = record(cache)
    fake.put_job(5, state=("PENDING",), state_reason="JobHeldUser", admin_comment=PLACEHOLDER)
    slurm_clock.tick()
    clock.tick(4.0)
    requests_before = len(fake.state.requests)
    cache.refresh()  # 4 s since the full list: not due
    assert calls_by_path(fake, requests_before) == {("GET", "jobs/state/"): 1} and events == []
    clock.tick(6.0)
    requests_before = len(fake.state.requests)
    cache.refresh()  # 10 s: due
    assert calls_by_path(fake, requests_before) == {("GET", "jobs/state/"): 1, ("GET", "job/ID"): 1}
    assert fake.state.requests[-1][:2] == ("GET", "job/5")
    assert [(e.type, e.old.state_reason, e.new.state_reason) for e in events] == [
        (CHANGED, "ReqNodeNotAvail", "JobHeldUser")]
    clock.tick(4.0)
    requests_before = len(fake.state.requests)
    cache.refresh()  # read 4 s ago: not due again yet
    assert calls_by_path(fake, requests_before) == {("GET", "jobs/state/"): 1}


def test_a_due_reread_ends_update_time_checks(fake, slurm_clock, clock):
    fake.put_job(5, state=("PENDING",), state_reason="ReqNodeNotAvail", admin_comment=PLACEHOLDER)
    slurm_clock.tick()
    cache = ask(SlurmCache(rest(fake), kinds=("job",), clock=clock, job_check_after=1),
                pending_placeholder_every(10.0))
    cache.refresh()
    for _ in range(3):  # idle state lists, then checks
        slurm_clock.tick()
        clock.tick(1.0)
        cache.refresh()
    assert cache.stats().job_checks >= 1
    clock.tick(10.0)
    requests_before = len(fake.state.requests)
    cache.refresh()
    assert calls_by_path(fake, requests_before).get(("GET", "job/ID")) == 1


# -- a job that changes between the state list and its read ------------------------------------------------


class ChangesBeforeEachRead:
    """A client whose every read_jobs first lets Slurm change the job (what a slow read can meet)."""

    def __init__(self, client, change):
        self.client, self.change = client, change

    def __getattr__(self, name):
        return getattr(self.client, name)

    def read_jobs(self, job_ids):
        ids = list(job_ids)
        self.change(ids)
        return self.client.read_jobs(ids)


def test_a_job_that_changes_again_before_its_read_is_neither_lost_nor_stale(fake, slurm_clock, clock):
    fake.put_job(5)
    slurm_clock.tick()
    changes = []
    client = ChangesBeforeEachRead(rest(fake), lambda ids: [change() for change in changes])
    cache = SlurmCache(client, kinds=("job",), clock=clock, job_states=True)
    cache.refresh()
    events = record(cache)

    fake.put_job(5, state=("RUNNING",), nodes="node1")  # the state list shows RUNNING ...
    changes.append(lambda: fake.put_job(5, state=("COMPLETED",), nodes="node1"))  # ... the read COMPLETED
    slurm_clock.tick()
    clock.tick()
    cache.refresh()
    changes.clear()
    assert [(e.type, e.old.state, e.new.state) for e in events] == [(CHANGED, "PENDING", "COMPLETED")]
    assert cache.job(5).state == "COMPLETED"  # the newer record kept
    requests_before = len(fake.state.requests)
    clock.tick()
    cache.refresh()  # the state list now matches the record: nothing to read, no event
    assert len(events) == 1 and calls_by_path(fake, requests_before) == {("GET", "jobs/state/"): 1}

    # A change back to a state seen before (requeued): compared with the record, not an older list.
    fake.put_job(5, state=("PENDING", "REQUEUED"))
    slurm_clock.tick()
    clock.tick()
    cache.refresh()
    assert [(e.old.state, e.new.state, e.new.state_flags) for e in events[1:]] == [
        ("COMPLETED", "PENDING", frozenset({"REQUEUED"}))]


def test_a_job_purged_before_its_read_is_removed(fake, slurm_clock, clock):
    fake.put_job(5)
    slurm_clock.tick()
    changes = []
    client = ChangesBeforeEachRead(rest(fake), lambda ids: [change() for change in changes])
    cache = SlurmCache(client, kinds=("job",), clock=clock, job_states=True)
    cache.refresh()
    events = record(cache)
    fake.put_job(5, state=("CANCELLED",))
    fake.put_job(6)  # new, and purged before its read too: never held, so no event for it
    changes.extend([lambda: fake.state.jobs.pop(5, None), lambda: fake.state.jobs.pop(6, None)])
    slurm_clock.tick()
    clock.tick()
    cache.refresh()
    assert [(e.type, e.key, e.old.state) for e in events] == [(REMOVED, 5, "PENDING")]
    assert dict(cache.jobs()) == {}


def test_each_read_is_stamped_with_when_it_began(fake, slurm_clock, clock):
    """A reader that also learns of a job another way (the scheduler's started call) keeps the later."""
    fake.put_job(5)
    fake.put_job(6)
    slurm_clock.tick()
    client = ChangesBeforeEachRead(rest(fake), lambda ids: clock.tick(1))  # each read starts a second later
    cache = SlurmCache(client, kinds=("job",), clock=clock, job_states=True)
    cache.refresh()
    listed_at = clock.t
    events = record(cache)
    fake.put_job(5, state=("RUNNING",), nodes="node1")
    fake.remove_job(6)
    slurm_clock.tick()
    clock.tick(10)
    state_list_at = clock.t
    cache.refresh()
    assert [(e.type, e.key, e.observed_at) for e in events] == [(CHANGED, 5, state_list_at),
                                                                 (REMOVED, 6, state_list_at)]
    fake.put_job(5, state=("COMPLETED",), nodes="node1")
    fake.put_job(7)
    slurm_clock.tick()
    clock.tick(10)
    cache.refresh()
    read_5, read_7 = events[2].observed_at, events[3].observed_at
    assert [(e.type, e.key) for e in events[2:]] == [(ADDED, 7), (CHANGED, 5)] or \
        [(e.type, e.key) for e in events[2:]] == [(CHANGED, 5), (ADDED, 7)]
    assert read_5 != read_7
    replayed = []
    listerlog.record(cache, replayed.append)
    assert {e.key: e.observed_at for e in replayed} == {e.key: e.observed_at for e in events[2:]}
    assert listed_at < min(read_5, read_7)


# -- arrays ----------------------------------------------------------------------------------------------------


def test_array_tasks_are_followed_through_their_arrays_records(fake, slurm_clock, clock):
    by_state = SlurmCache(rest(fake), kinds=("job",), clock=clock, job_states=True)
    in_full = SlurmCache(rest(fake), kinds=("job",), clock=clock, job_states=False, resync_every=3600)
    fake.put_job(100, array_job_id=100, array_task_string="1-3")
    fake.put_job(7)
    slurm_clock.tick()
    by_state.refresh()
    in_full.refresh()
    seen_by_state, seen_in_full = record(by_state), record(in_full)
    steps = {
        "task 1 starts": lambda: (fake.put_job(100, array_job_id=100, array_task_string="2-3"),
                                  fake.put_job(101, array_job_id=100, array_task_id=1, state=("RUNNING",),
                                               nodes="node1")),
        "task 1 ends": lambda: fake.put_job(101, array_job_id=100, array_task_id=1, state=("COMPLETED",),
                                            nodes="node1"),
        "task 1 purged, task 2 starts": lambda: (
            fake.remove_job(101), fake.put_job(100, array_job_id=100, array_task_string="3"),
            fake.put_job(102, array_job_id=100, array_task_id=2, state=("RUNNING",), nodes="node2")),
        "the last task starts in the array's own record": lambda: (
            fake.put_job(100, array_job_id=100, array_task_id=3, state=("RUNNING",), nodes="node1")),
        "the array is purged": lambda: (fake.remove_job(100), fake.remove_job(102)),
    }
    for name, change in steps.items():
        change()
        slurm_clock.tick()
        clock.tick()
        requests_before = len(fake.state.requests)
        assert by_state.refresh().ok and in_full.refresh().ok
        assert brief(seen_by_state) == brief(seen_in_full) and seen_in_full, name
        paths = calls_by_path(fake, requests_before)
        assert paths.get(("GET", "job/ID"), 0) <= 1, name  # the array's records: one read
        seen_by_state.clear()
        seen_in_full.clear()
    assert dict(by_state.jobs()) == dict(in_full.jobs()) and set(by_state.jobs()) == {7}


# -- bounds and failures -----------------------------------------------------------------------------------------


def test_more_changes_than_max_job_reads_is_one_full_list(fake, slurm_clock, clock):
    for job_id in range(1, 11):
        fake.put_job(job_id)
    slurm_clock.tick()
    cache = SlurmCache(rest(fake), kinds=("job",), clock=clock, max_job_reads=3)
    cache.refresh()
    events = record(cache)
    for job_id in range(1, 5):
        fake.put_job(job_id, state=("CANCELLED",))
    slurm_clock.tick()
    clock.tick()
    requests_before = len(fake.state.requests)
    result = cache.refresh()
    assert calls_by_path(fake, requests_before) == {("GET", "jobs/state/"): 1, ("GET", "jobs/"): 1}
    assert result.calls == 2 and sorted(e.key for e in events) == [1, 2, 3, 4]
    fake.put_job(5, state=("CANCELLED",))
    slurm_clock.tick()
    clock.tick()
    requests_before = len(fake.state.requests)
    cache.refresh()
    assert calls_by_path(fake, requests_before) == {("GET", "jobs/state/"): 1, ("GET", "job/ID"): 1}


def test_by_default_up_to_64_reads_or_a_twentieth_of_the_jobs(fake, slurm_clock, clock):
    for job_id in range(1, 201):
        fake.put_job(job_id)
    slurm_clock.tick()
    cache = SlurmCache(rest(fake), kinds=("job",), clock=clock)
    cache.refresh()
    for count, full in ((64, False), (65, True)):
        for job_id in range(1, count + 1):
            fake.put_job(job_id, comment=str(count), state=("PENDING", "REQUEUED") if full else ("SUSPENDED",))
        slurm_clock.tick()
        clock.tick()
        lists_before = cache.stats().job_full_lists
        assert cache.refresh().events == count
        assert cache.stats().job_full_lists - lists_before == int(full)


def test_a_state_list_slurmrestd_refuses_falls_back_to_full_lists(fake, slurm_clock, clock, caplog):
    fake.put_job(5)
    slurm_clock.tick()
    cache = SlurmCache(rest(fake), kinds=("job",), clock=clock)
    cache.refresh()
    events = record(cache)
    fake.add_fault(Fault("GET", r"jobs/state/", status=404, times=2,
                         body={"errors": [{"description": "Unknown URL", "error_number": 9007,
                                           "error": "Unknown URL method", "source": "fake"}]}))
    fake.put_job(5, extra="seen anyway")
    slurm_clock.tick()
    with caplog.at_level(logging.INFO, logger="sunk.slurm.cache"):
        for _ in range(2):
            clock.tick()
            assert cache.refresh().ok and cache.fresh
        assert [e.new.extra for e in events] == ["seen anyway"]  # from the full list
        clock.tick()
        requests_before = len(fake.state.requests)
        assert cache.refresh().ok
    assert calls_by_path(fake, requests_before) == {("GET", "jobs/state/"): 1}
    messages = [r.getMessage() for r in caplog.records]
    assert sum("cannot be used" in m for m in messages) == 1 and any("works again" in m for m in messages)


def test_slurmrestd_down_keeps_the_snapshot_then_relists_in_full(fake, slurm_clock, clock):
    fake.put_job(5)
    slurm_clock.tick()
    cache = SlurmCache(connect("rest", url=fake.url, token="t", retries=0), kinds=("job",), clock=clock)
    cache.refresh()
    fake.add_fault(Fault("GET", r"jobs/state/", status=503))
    clock.tick()
    result = cache.refresh()
    assert not result.ok and not cache.fresh and cache.job(5) is not None
    clock.tick()
    requests_before = len(fake.state.requests)
    assert cache.refresh().ok and cache.fresh
    assert calls_by_path(fake, requests_before) == {("GET", "jobs/"): 1}  # whatever happened meanwhile


@pytest.mark.parametrize(("status", "failures", "next_calls"), [
    (503, 1, {("GET", "jobs/"): 1}),  # an outage: whatever happened meanwhile, a full list
    (500, 1, {("GET", "jobs/state/"): 1, ("GET", "job/ID"): 1}),  # a refusal: nothing held changed, read again
    (500, 2, {("GET", "jobs/"): 1}),  # the same refusal twice in a row may be the read's own fault: a full list
])
def test_a_read_that_fails_fails_the_refresh_keeps_the_snapshot_and_is_made_good_by_the_next(
        fake, slurm_clock, clock, status, failures, next_calls):
    fake.put_job(5)
    slurm_clock.tick()
    cache = SlurmCache(connect("rest", url=fake.url, token="t", retries=0), kinds=("job",), clock=clock)
    cache.refresh()
    events = record(cache)
    fake.put_job(5, state=("RUNNING",), nodes="node1")
    fake.add_fault(Fault("GET", r"job/5", status=status, times=failures,
                         body={"errors": [{"error": "boom"}]} if status == 500 else None))
    slurm_clock.tick()
    for _ in range(failures):
        clock.tick()
        result = cache.refresh()
        assert not result.ok and result.calls == 2 and events == [] and cache.job(5).state == "PENDING"
    clock.tick()
    requests_before = len(fake.state.requests)
    assert cache.refresh().ok and [e.new.state for e in events] == ["RUNNING"]
    assert calls_by_path(fake, requests_before) == next_calls


# -- while idle: update_time checks instead of state lists --------------------------------------------------


class Timed:
    """A client whose full job list takes ``full`` seconds of the test clock, a state list ``states``."""

    def __init__(self, client, clock, *, full: float, states: float = 0.25):
        self.client, self.clock, self.full, self.states = client, clock, full, states

    def __getattr__(self, name):
        return getattr(self.client, name)

    def list_jobs(self, **kw):
        self.clock.tick(self.full)
        return self.client.list_jobs(**kw)

    def list_job_states(self, *args):
        self.clock.tick(self.states)
        return self.client.list_job_states(*args)


def queries(fake, since):
    return [(method, path, query) for method, path, query in fake.state.requests[since:]]


def checking_cache(fake, slurm_clock, clock, **kw):
    """A job cache that has listed, found two idle state lists, read slurmctld's clock and now checks."""
    kw.setdefault("job_check_after", 2)
    cache = SlurmCache(rest(fake), kinds=("job",), clock=clock, **kw)
    assert cache.refresh().ok
    for _ in range(2):
        slurm_clock.tick()
        clock.tick()
        requests_before = len(fake.state.requests)
        assert cache.refresh().events == 0
        assert calls_by_path(fake, requests_before) == {("GET", "jobs/state/"): 1}
    slurm_clock.tick()
    clock.tick()
    requests_before = len(fake.state.requests)
    stamp = fake.now()
    result = cache.refresh()  # slurmctld's clock, then a state list that still finds nothing
    assert result.ok and result.calls == 2 and result.events == 0
    assert queries(fake, requests_before) == [("GET", "diag/", ""), ("GET", "jobs/state/", "")]
    return cache, stamp


def test_an_idle_refresh_is_one_update_time_check_and_no_state_list(fake, slurm_clock, clock):
    for job_id in range(1, 201):
        fake.put_job(job_id)
    slurm_clock.tick()
    cache, stamp = checking_cache(fake, slurm_clock, clock)
    for _ in range(3):
        slurm_clock.tick()
        clock.tick()
        requests_before, sent_before = len(fake.state.requests), len(fake.state.sent)
        result = cache.refresh()
        assert result.ok and result.calls == 1 and result.events == 0
        # slurmctld's clock as /diag gave it (not the cache's, which is 100-odd here)
        assert queries(fake, requests_before) == [("GET", "jobs/", f"update_time={stamp}")]
        assert sum(size for _m, _p, size in fake.state.sent[sent_before:]) < 2_000  # against 20 KB of states
    assert cache.stats().job_checks == 3 and cache.stats().job_full_lists == 1 and len(cache.jobs()) == 200
    assert cache.fresh


def test_a_change_met_by_a_check_is_seen_from_its_full_answer_then_states_are_listed_again(
        fake, slurm_clock, clock):
    fake.put_job(5)
    fake.put_job(6)
    slurm_clock.tick()
    cache, _stamp = checking_cache(fake, slurm_clock, clock)
    events = record(cache)
    fake.put_job(5, state=("RUNNING",), nodes="node1")
    slurm_clock.tick()
    clock.tick()
    requests_before = len(fake.state.requests)
    result = cache.refresh()
    # 24.11 answers update_time with every job when one changed: that answer is the full list
    assert result.ok and result.calls == 1 and calls_by_path(fake, requests_before) == {("GET", "jobs/"): 1}
    assert [(e.type, e.key, e.old.state, e.new.state) for e in events] == [(CHANGED, 5, "PENDING", "RUNNING")]
    assert cache.stats().job_full_lists == 2
    fake.put_job(6, state=("CANCELLED",))  # the next change: a state list and a read of that job alone
    slurm_clock.tick()
    clock.tick()
    requests_before = len(fake.state.requests)
    cache.refresh()
    assert queries(fake, requests_before) == [("GET", "jobs/state/", ""), ("GET", "job/6", "")]
    assert [(e.key, e.new.state) for e in events[1:]] == [(6, "CANCELLED")]


def test_a_nudged_refresh_lists_states_and_reads_only_the_changed_jobs(fake, slurm_clock, clock):
    for job_id in range(1, 11):
        fake.put_job(job_id)
    slurm_clock.tick()
    cache, stamp = checking_cache(fake, slurm_clock, clock)
    events = record(cache)
    fake.put_job(11, admin_comment="sunk-pod=u ns=d name=p")  # submitted by the caller, who nudges
    fake.put_job(3, state=("CANCELLED",))
    slurm_clock.tick()
    clock.tick()
    cache.nudge()
    requests_before = len(fake.state.requests)
    result = cache.refresh()
    assert result.ok and calls_by_path(fake, requests_before) == {("GET", "jobs/state/"): 1, ("GET", "job/ID"): 2}
    assert sorted(path for _m, path, _q in fake.state.requests[requests_before + 1:]) == ["job/11", "job/3"]
    assert sorted((e.type, e.key) for e in events) == [(ADDED, 11), (CHANGED, 3)]
    assert cache.stats().job_full_lists == 1  # no full list for them
    slurm_clock.tick()
    clock.tick()
    requests_before = len(fake.state.requests)
    cache.refresh()  # things moved: states are listed again (no check) until idle again
    assert calls_by_path(fake, requests_before) == {("GET", "jobs/state/"): 1}


def test_a_nudge_that_finds_nothing_keeps_checking_from_the_same_time(fake, slurm_clock, clock):
    fake.put_job(5)
    slurm_clock.tick()
    cache, stamp = checking_cache(fake, slurm_clock, clock)
    cache.nudge()
    slurm_clock.tick()
    clock.tick()
    requests_before = len(fake.state.requests)
    cache.refresh()
    assert calls_by_path(fake, requests_before) == {("GET", "jobs/state/"): 1}
    slurm_clock.tick()
    clock.tick()
    requests_before = len(fake.state.requests)
    cache.refresh()
    assert queries(fake, requests_before) == [("GET", "jobs/", f"update_time={stamp}")]


def test_a_job_purged_while_checking_is_removed(fake, slurm_clock, clock):
    fake.put_job(5, state=("COMPLETED",))
    fake.put_job(6)
    slurm_clock.tick()
    cache, _stamp = checking_cache(fake, slurm_clock, clock)
    events = record(cache)
    fake.remove_job(5)  # MinJobAge passed: slurmctld purges it (and moves last_job_update)
    slurm_clock.tick()
    clock.tick()
    requests_before = len(fake.state.requests)
    assert cache.refresh().ok
    assert calls_by_path(fake, requests_before) == {("GET", "jobs/"): 1}
    assert [(e.type, e.key, e.old.state) for e in events] == [(REMOVED, 5, "COMPLETED")]
    assert set(cache.jobs()) == {6}


def test_a_nudged_refresh_removes_a_purged_job_without_a_read(fake, slurm_clock, clock):
    fake.put_job(5, state=("COMPLETED",))
    fake.put_job(6)
    slurm_clock.tick()
    cache, _stamp = checking_cache(fake, slurm_clock, clock)
    events = record(cache)
    fake.remove_job(5)
    slurm_clock.tick()
    clock.tick()
    cache.nudge()
    requests_before = len(fake.state.requests)
    cache.refresh()
    assert calls_by_path(fake, requests_before) == {("GET", "jobs/state/"): 1}
    assert [(e.type, e.key) for e in events] == [(REMOVED, 5)] and set(cache.jobs()) == {6}


def test_a_change_in_the_second_of_the_clock_read_is_not_missed(fake, slurm_clock, clock):
    """slurmctld answers "no change" only for T - 1 >= last_job_update: a change in the very second it
    gave as T (before or after the state list) is a change. Here: an Extra the state list cannot show,
    written in that second before the state list, and a cancel after it."""
    fake.put_job(5, extra="before")
    fake.put_job(6)
    slurm_clock.tick()
    cache = SlurmCache(rest(fake), kinds=("job",), clock=clock, job_check_after=1)
    cache.refresh()
    slurm_clock.tick()
    clock.tick()
    cache.refresh()  # one idle state list
    slurm_clock.tick()
    clock.tick()
    events = record(cache)

    class ExtraBeforeTheStateList:
        def __init__(self, client):
            self.client = client

        def __getattr__(self, name):
            return getattr(self.client, name)

        def list_job_states(self, *args):
            fake.put_job(5, extra="after")  # the same (fake) second as the clock read just before
            return self.client.list_job_states(*args)

    cache.client = ExtraBeforeTheStateList(cache.client)
    requests_before = len(fake.state.requests)
    cache.refresh()
    assert queries(fake, requests_before)[0] == ("GET", "diag/", "") and events == []
    fake.put_job(6, state=("CANCELLED",))  # and one more in that second, after the state list
    clock.tick()  # (slurmctld's clock has not moved)
    requests_before = len(fake.state.requests)
    cache.refresh()
    assert calls_by_path(fake, requests_before) == {("GET", "jobs/"): 1}
    assert sorted((e.key, e.new.extra, e.new.state) for e in events) == [(5, "after", "PENDING"),
                                                                       (6, "", "CANCELLED")]


def test_checks_are_confirmed_by_a_state_list_every_resync_every(fake, slurm_clock, clock):
    fake.put_job(5)
    slurm_clock.tick()
    cache, stamp = checking_cache(fake, slurm_clock, clock, resync_every=10)
    for _ in range(4):
        slurm_clock.tick()
        clock.tick()  # 2 s each: 8 s since the state list that began the checks
        requests_before = len(fake.state.requests)
        cache.refresh()
        assert calls_by_path(fake, requests_before) == {("GET", "jobs/"): 1}
    fake.put_job(5, comment="no state change")  # after the last check: what a state list cannot show
    slurm_clock.tick()
    clock.tick()  # 10 s
    events = record(cache)
    requests_before = len(fake.state.requests)
    cache.refresh()
    assert queries(fake, requests_before) == [("GET", "diag/", ""), ("GET", "jobs/state/", "")]
    assert events == []
    slurm_clock.tick()
    clock.tick()
    requests_before = len(fake.state.requests)
    cache.refresh()  # the checks keep their time, so the comment is a change to them
    assert queries(fake, requests_before) == [("GET", "jobs/", f"update_time={stamp}")]
    assert [e.new.comment for e in events] == ["no state change"]


def test_slurmctlds_clock_going_backwards_means_a_full_list(fake, slurm_clock, clock, caplog):
    """A failover to a controller whose clock is behind could answer "no change" to a time it has not
    reached yet: the confirming clock read sees it, and the cache lists in full."""
    fake.put_job(5)
    slurm_clock.tick()
    cache, stamp = checking_cache(fake, slurm_clock, clock, resync_every=10)
    events = record(cache)
    slurm_clock.t -= 600  # the new controller's clock: ten minutes behind
    fake.put_job(5, state=("RUNNING",), nodes="node1")  # last_job_update on that clock: before ``stamp``
    clock.tick(10)
    requests_before = len(fake.state.requests)
    with caplog.at_level(logging.WARNING, logger="sunk.slurm.cache"):
        assert cache.refresh().ok
    assert queries(fake, requests_before) == [("GET", "diag/", ""), ("GET", "jobs/", "")]
    assert [(e.key, e.new.state) for e in events] == [(5, "RUNNING")]
    assert any("clock went backwards" in r.getMessage() for r in caplog.records)
    slurm_clock.tick()
    clock.tick()
    requests_before = len(fake.state.requests)
    cache.refresh()
    assert calls_by_path(fake, requests_before) == {("GET", "jobs/state/"): 1}


def test_without_slurms_clock_idle_refreshes_keep_listing_states(fake, slurm_clock, clock, caplog):
    fake.put_job(5)
    slurm_clock.tick()
    cache = SlurmCache(rest(fake), kinds=("job",), clock=clock, job_check_after=1)
    cache.refresh()
    fake.add_fault(Fault("GET", r"diag/", status=403, times=10, body={"errors": [
        {"description": "Access denied", "error_number": 2010, "error": "Access/permission denied",
         "source": "fake"}]}))
    with caplog.at_level(logging.DEBUG, logger="sunk.slurm.cache"):
        for _ in range(4):
            slurm_clock.tick()
            clock.tick()
            assert cache.refresh().ok
    assert fake.calls("GET", r"diag/") == 1 and fake.calls("GET", r"jobs/") == 1  # the first full list only
    assert fake.calls("GET", r"jobs/state/") == 4
    assert sum(r.levelno == logging.WARNING and "clock cannot be read" in r.getMessage()
               for r in caplog.records) == 1


def test_checks_begin_once_idle_state_lists_took_as_long_as_a_full_list(fake, slurm_clock, clock):
    """The default: rent state lists until they cost one full list, then check (a change met while
    checking costs one full list, so an idle stretch never costs more than twice what it must)."""

    fake.put_job(5)
    slurm_clock.tick()
    cache = SlurmCache(Timed(rest(fake), clock, full=1.0), kinds=("job",), clock=clock)
    cache.refresh()
    refreshes_before_the_first_check = 0
    while fake.calls("GET", r"diag/") == 0:
        slurm_clock.tick()
        clock.tick()
        cache.refresh()
        refreshes_before_the_first_check += 1
        assert refreshes_before_the_first_check < 20
    assert refreshes_before_the_first_check == 5  # 4 idle state lists (1 s), then the clock and a 5th
    slurm_clock.tick()
    clock.tick()
    requests_before = len(fake.state.requests)
    cache.refresh()
    assert calls_by_path(fake, requests_before) == {("GET", "jobs/"): 1} and cache.stats().job_checks == 1


def test_a_full_list_slower_than_the_interval_keeps_states_listed(fake, slurm_clock, clock):
    """A change met while checking costs a full list: where that takes longer than a refresh
    interval (seconds at 10,000 jobs), idle refreshes keep listing states, however long the idle."""

    fake.put_job(5)
    slurm_clock.tick()
    cache = SlurmCache(Timed(rest(fake), clock, full=1.5), kinds=("job",), clock=clock)  # (the interval: 1 s)
    cache.refresh()
    for _ in range(30):
        slurm_clock.tick()
        clock.tick()
        cache.refresh()
    assert fake.calls("GET", r"diag/") == 0 and cache.stats().job_checks == 0
    assert fake.calls("GET", r"jobs/state/") == 30
    # the bound is a setting: allowed 2 s, the same cache checks after its idle stretch
    cache = SlurmCache(Timed(rest(fake), clock, full=1.5), kinds=("job",), clock=clock, job_check_max_full=2.0)
    cache.refresh()
    for _ in range(12):
        slurm_clock.tick()
        clock.tick()
        cache.refresh()
    assert cache.stats().job_checks >= 1


def test_checks_end_when_a_periodic_full_list_grew_slower_than_the_interval(fake, slurm_clock, clock):
    client = Timed(rest(fake), clock, full=0.5)
    fake.put_job(5)
    slurm_clock.tick()
    cache = SlurmCache(client, kinds=("job",), clock=clock, resync_every=1e6)
    cache.refresh()
    for _ in range(8):
        slurm_clock.tick()
        clock.tick()
        cache.refresh()
    assert cache.stats().job_checks >= 1  # (checking)
    client.full = 3.0  # the cluster grew while the cache checked: its full list is slow now
    clock.tick(cache.job_full_every)  # the periodic full list, still no change
    cache.refresh()
    checks, states = cache.stats().job_checks, fake.calls("GET", r"jobs/state/")
    for _ in range(5):
        slurm_clock.tick()
        clock.tick()
        cache.refresh()
    assert cache.stats().job_checks == checks and fake.calls("GET", r"jobs/state/") == states + 5


def test_jobs_waiting_for_a_reread_keep_states_listed(fake, slurm_clock, clock):
    fake.put_job(5, state=("RUNNING",), state_reason="Prolog", nodes="node1", admin_comment="sunk-pod=u ns=d name=p")
    slurm_clock.tick()
    cache = ask(SlurmCache(rest(fake), kinds=("job",), clock=clock, job_check_after=1), awaiting_start_reads)
    cache.refresh()
    for _ in range(3):
        slurm_clock.tick()
        clock.tick()
        requests_before = len(fake.state.requests)
        cache.refresh()
        assert calls_by_path(fake, requests_before) == {("GET", "jobs/state/"): 1, ("GET", "job/ID"): 1}


# -- reads made elsewhere (observe) and reads that may wait (patience) ----------------------------------------

PLACEHOLDER = "sunk-pod=u ns=d name=p"


def placeholder_patience(seconds):
    """A placeholder on its way to its started call may wait (the lister waits only for a start: any end is
    read at once); a new one, by the request made as it was submitted (``submitted``)."""
    return lambda job: ReadRequest(wait_up_to=seconds) if job.state in ("PENDING", "RUNNING") and \
        not has_started(job) else None


def submitted(cache, job_id, seconds):
    """The request the scheduler makes for the job it just submitted, before any list shows it."""
    cache.read_requests.request(job_id, ReadRequest(wait_up_to=seconds), cache.clock())


def read_of(fake, job_id):
    """The record a reader outside the cache reads (what the scheduler's hook API does)."""
    return rest(fake).get_job(job_id)


def test_an_observed_record_stands_in_for_the_reads_of_a_new_and_a_starting_job(fake, slurm_clock, clock):
    cache = ask(SlurmCache(rest(fake), kinds=("job",), clock=clock), placeholder_patience(3.0),
                awaiting_start_reads)
    cache.refresh()
    events = record(cache)
    fake.put_job(7, admin_comment=PLACEHOLDER)
    submitted(cache, 7, 3.0)
    slurm_clock.tick()
    clock.tick(0.5)
    requests_before = len(fake.state.requests)
    assert cache.refresh().events == 0  # new, and patient: not read yet
    assert calls_by_path(fake, requests_before) == {("GET", "jobs/state/"): 1} and cache.job(7) is None
    fake.put_job(7, state=("RUNNING",), nodes="node1", admin_comment=PLACEHOLDER)  # its prolog ended
    slurm_clock.tick()
    clock.tick(0.5)
    observed_at = clock.t
    cache.observe(read_of(fake, 7), observed_at)
    clock.tick(0.5)
    requests_before = len(fake.state.requests)
    cache.refresh()
    assert calls_by_path(fake, requests_before) == {("GET", "jobs/state/"): 1}  # the observed record, not a read
    assert [(e.type, e.key, e.new.state, e.new.state_reason, e.new.admin_comment, e.observed_at) for e in events] == [
        (ADDED, 7, "RUNNING", "", PLACEHOLDER, observed_at)]
    assert cache.job(7).node_list == ("node1",)
    assert cache.stats().job_reads == 0 and cache.stats().job_reads_taken == 1
    clock.tick()
    requests_before = len(fake.state.requests)
    assert cache.refresh().events == 0  # held and started: nothing more to read
    assert calls_by_path(fake, requests_before) == {("GET", "jobs/state/"): 1}


def test_a_refused_read_loses_neither_another_jobs_observed_record_nor_a_spent_patience(fake, slurm_clock, clock):
    """One refresh: job 7's observed record stands in for its read, job 9's read (its patience spent) is refused.
    The refresh changes nothing; the next takes 7's record still (no read of 7) and reads 9 at once."""
    cache = ask(SlurmCache(rest(fake), kinds=("job",), clock=clock), placeholder_patience(3.0),
                awaiting_start_reads)
    cache.refresh()
    events = record(cache)
    fake.put_job(9, state=("RUNNING",), nodes="node1", admin_comment=PLACEHOLDER)
    submitted(cache, 9, 3.0)
    slurm_clock.tick()
    clock.tick(0.5)
    assert cache.refresh().events == 0  # 9 waits for its patience
    fake.put_job(7, state=("RUNNING",), nodes="node2", admin_comment=PLACEHOLDER)
    submitted(cache, 7, 3.0)
    slurm_clock.tick()
    clock.tick(3.5)  # (9's patience is out: read now)
    cache.observe(read_of(fake, 7), clock.t)
    clock.tick(0.1)
    fake.add_fault(Fault("GET", r"job/9", status=500, body={"errors": [{"error": "boom"}]}))
    assert not cache.refresh().ok and events == []
    clock.tick(0.5)
    requests_before = len(fake.state.requests)
    assert cache.refresh().ok
    assert calls_by_path(fake, requests_before) == {("GET", "jobs/state/"): 1, ("GET", "job/ID"): 1}  # 9's only
    assert sorted(e.key for e in events) == [7, 9]
    assert cache.stats().job_reads_taken == 1


def test_a_read_that_waits_keeps_states_listed_and_is_made_once_the_patience_is_out(fake, slurm_clock, clock):
    fake.put_job(8, state=("RUNNING",), state_reason="Prolog", nodes="node1", admin_comment=PLACEHOLDER)
    slurm_clock.tick()
    cache = ask(SlurmCache(rest(fake), kinds=("job",), clock=clock, job_check_after=1), placeholder_patience(3.0),
                awaiting_start_reads)
    cache.refresh()  # (the first refresh is a full list)
    events = record(cache)
    fake.put_job(8, state=("RUNNING",), nodes="node1", admin_comment=PLACEHOLDER)  # the prolog ends: no state change
    slurm_clock.tick()
    reads = []
    for _ in range(5):
        clock.tick(1.0)
        requests_before = len(fake.state.requests)
        cache.refresh()
        calls = calls_by_path(fake, requests_before)
        assert ("GET", "diag/") not in calls and ("GET", "jobs/") not in calls, calls  # never idle meanwhile
        reads.append(calls.get(("GET", "job/ID"), 0))
    assert reads == [0, 0, 0, 1, 0]  # first asked for at the first refresh, read 3 s later, then started
    assert [(e.type, e.old.state_reason, e.new.state_reason) for e in events] == [(CHANGED, "Prolog", "")]


def test_an_end_is_read_at_once_whatever_the_patience(fake, slurm_clock, clock):
    fake.put_job(9, state=("RUNNING",), nodes="node1", admin_comment=PLACEHOLDER)
    slurm_clock.tick()
    cache = ask(SlurmCache(rest(fake), kinds=("job",), clock=clock), placeholder_patience(3.0))
    cache.refresh()
    events = record(cache)
    fake.put_job(9, state=("CANCELLED",), nodes="node1", admin_comment=PLACEHOLDER)
    slurm_clock.tick()
    clock.tick()
    cache.refresh()
    assert [(e.type, e.new.state) for e in events] == [(CHANGED, "CANCELLED")]


def test_an_observed_record_that_the_state_list_contradicts_is_never_taken(fake, slurm_clock, clock):
    """Older than the state list: dropped (the job moved on); newer: kept for the next state list; older
    than the record held: ignored."""
    fake.put_job(10, admin_comment=PLACEHOLDER)
    slurm_clock.tick()
    cache = ask(SlurmCache(rest(fake), kinds=("job",), clock=clock), placeholder_patience(3.0))
    cache.refresh()
    events = record(cache)
    stale = read_of(fake, 10)  # PENDING
    fake.put_job(10, state=("RUNNING",), state_reason="Prolog", nodes="node1", admin_comment=PLACEHOLDER)
    slurm_clock.tick()
    cache.observe(stale, clock.t + 0.5)  # read after the held list, before this state list: contradicted
    clock.tick()
    cache.refresh()
    assert events == [] and cache.job(10).state == "PENDING"  # not taken; the start's read waits
    running = read_of(fake, 10)
    cache.observe(running, clock.t)
    clock.tick()
    cache.refresh()
    assert [(e.type, e.new.state, e.observed_at) for e in events] == [(CHANGED, "RUNNING", clock.t - 2.0)]
    events.clear()
    cache.observe(stale, clock.t - 1.0)  # older than the record held now
    clock.tick()
    cache.refresh()
    assert events == [] and cache.job(10).state == "RUNNING"


def test_an_observed_record_read_after_the_state_list_began_waits_for_the_next_one():
    """A state list already on its way when the record was read may show the older state, or not show the job
    at all (a job submitted since it began)."""
    listed = [state("11", "PENDING")]

    class Client:
        cheap_job_states = True

        def list_job_states(self):
            return list(listed)

        def list_jobs(self, updated_since=None):
            return Snapshot([Job(id=11, admin_comment=PLACEHOLDER)], 0)

        list_nodes = list_jobs

        def read_jobs(self, ids):
            raise AssertionError("never read here")

    from slurm_fakes import Clock  # (the plugin's module, imported once pytest has rewritten it)

    clock = Clock(100.0)
    cache = ask(SlurmCache(Client(), kinds=("job",), clock=clock, job_check_after=math.inf),
                placeholder_patience(3.0))
    submitted(cache, 12, 3.0)
    cache.refresh()
    events = record(cache)
    cache.observe(Job(id=11, state="RUNNING", admin_comment=PLACEHOLDER), clock.t + 0.5)  # later than the list
    cache.observe(Job(id=12, state="RUNNING", admin_comment=PLACEHOLDER), clock.t + 0.5)  # and not in it
    cache.refresh()  # (the clock stands still: this state list began before those reads)
    assert events == []
    listed[:] = [state("11", "RUNNING"), state("12", "RUNNING")]
    clock.tick()
    cache.refresh()
    assert [(e.type, e.key, e.new.state) for e in events] == [(ADDED, 12, "RUNNING"), (CHANGED, 11, "RUNNING")]


def test_an_observed_record_older_than_the_record_held_never_replaces_it(fake, slurm_clock, clock):
    """Same state, but read before the cache's own read: the held record (started) stays."""
    fake.put_job(13, state=("RUNNING",), state_reason="Prolog", nodes="node1", admin_comment=PLACEHOLDER)
    slurm_clock.tick()
    cache = ask(SlurmCache(rest(fake), kinds=("job",), clock=clock), placeholder_patience(3.0))
    in_prolog = read_of(fake, 13)
    read_at = clock.t - 1.0  # read before the full list below began
    fake.put_job(13, state=("RUNNING",), nodes="node1", admin_comment=PLACEHOLDER)  # the prolog ended
    slurm_clock.tick()
    cache.refresh()
    events = record(cache)
    cache.observe(in_prolog, read_at)
    clock.tick()
    cache.refresh()
    assert events == [] and has_started(cache.job(13))


def test_an_observed_record_older_than_a_state_list_that_contradicts_it_is_dropped(fake, slurm_clock, clock):
    """Not kept for a later list: a job requeued and started again elsewhere would be shown on its old node."""
    fake.put_job(14, admin_comment=PLACEHOLDER)
    slurm_clock.tick()
    cache = SlurmCache(rest(fake), kinds=("job",), clock=clock)
    cache.refresh()
    fake.put_job(14, state=("RUNNING",), nodes="node1", admin_comment=PLACEHOLDER)
    first_start = read_of(fake, 14)
    read_at = clock.t + 0.5
    fake.put_job(14, admin_comment=PLACEHOLDER)  # requeued before any state list saw it run
    slurm_clock.tick()
    clock.tick()
    cache.observe(first_start, read_at)  # older than the next state list, which shows PENDING
    cache.refresh()
    assert cache.job(14).state == "PENDING"
    fake.put_job(14, state=("RUNNING",), nodes="node2", admin_comment=PLACEHOLDER)  # started again, elsewhere
    slurm_clock.tick()
    clock.tick()
    cache.refresh()
    assert cache.job(14).node_list == ("node2",)  # read, not the first start's record


def test_observe_keeps_nothing_where_no_state_list_would_take_it(fake, slurm_clock, clock):
    """Jobs listed in full, or a state list Slurm refuses: observed records would only pile up."""
    fake.put_job(12, admin_comment=PLACEHOLDER)
    slurm_clock.tick()
    in_full = SlurmCache(rest(fake), kinds=("job",), clock=clock, job_states=False)
    in_full.refresh()
    in_full.observe(Job(id=12, state="RUNNING"), clock.t + 1)
    clock.tick()
    in_full.refresh()
    assert in_full.job(12).state == "PENDING" and in_full._observed == {}

    class NoStates:
        cheap_job_states = True

        def list_job_states(self):
            raise SlurmError("404 /jobs/state")

        def list_jobs(self, updated_since=None):
            return Snapshot([Job(id=12, admin_comment=PLACEHOLDER)], 0)

        list_nodes = list_jobs

    refused = SlurmCache(NoStates(), kinds=("job",), clock=clock)
    refused.refresh()  # (a full list)
    clock.tick()
    refused.refresh()  # the state list is refused: listed in full with update_time until it works
    for n in range(100):
        refused.observe(Job(id=1000 + n, state="RUNNING"), clock.t + 1)
    assert refused._observed == {}


def test_checks_can_be_turned_off(fake, slurm_clock, clock):
    fake.put_job(5)
    slurm_clock.tick()
    cache = SlurmCache(rest(fake), kinds=("job",), clock=clock, job_check_after=math.inf)
    cache.refresh()
    for _ in range(5):
        slurm_clock.tick()
        clock.tick()
        cache.refresh()
    assert fake.calls("GET", r"jobs/state/") == 5 and fake.calls("GET", r"diag/") == 0
    with pytest.raises(ValueError):
        SlurmCache(rest(fake), job_check_after=0)


# -- which mode ----------------------------------------------------------------------------------------------


def test_the_mode_follows_the_client_unless_told(fake):
    class Plain:  # a client that does not say its state list is cheap, nor has one
        def list_nodes(self, **_kw):
            raise AssertionError("not called here")

        list_jobs = list_nodes

        def __getattr__(self, name):
            raise AssertionError(f"asked for {name}")

    assert SlurmCache(rest(fake)).job_states
    assert not SlurmCache(rest(fake), job_states=False).job_states
    assert not SlurmCache(rest(fake), job_full_every=0).job_states
    assert not SlurmCache(Plain()).job_states
    with pytest.raises(ValueError):
        SlurmCache(rest(fake), max_job_reads=-1)


# -- the plan, on its own -------------------------------------------------------------------------------------------


def state(key, *words):
    from sunk.slurm.v0042 import parse_job_state

    return parse_job_state({"job_id": key, "state": list(words or ("PENDING",))})


def test_plan_reads_the_new_the_changed_and_the_reread_and_drops_the_gone():
    held = {1: Job(id=1), 2: Job(id=2, state="RUNNING"), 3: Job(id=3), 4: Job(id=4, state="RUNNING")}
    states = [state("1"), state("2", "COMPLETED"), state("4", "RUNNING"), state("5")]
    assert plan_job_reads(held, states) == JobReads(jobs=(2, 5), arrays=(), gone=(3,))
    assert plan_job_reads(held, states, reread=lambda j: j.id == 4) == JobReads(jobs=(2, 4, 5), gone=(3,))
    assert plan_job_reads(held, [state("1", "PENDING", "REQUEUED")] + states[1:]).jobs == (1, 2, 5)


def test_plan_follows_each_array_record_by_its_own_id():
    """As 24.11's slurmrestd lists an array: its own record (100) once per pending task, each task that started
    by its own id (``107_1``). Before, a started task's entry was taken for its array's and read as an array,
    whose read then kept nothing (the record is the task's, its array another id): every refresh read it again,
    and the cache never held it."""
    pending = Job(id=100, array_job_id=100)
    task = Job(id=107, state="RUNNING", array_job_id=100, array_task_id=1)
    held = {100: pending, 107: task}
    listed = [state("100_2"), state("100_3"), state("107_1", "RUNNING")]
    assert plan_job_reads(held, listed) == JobReads()
    assert plan_job_reads(held, [*listed[:2], state("107_1", "COMPLETED")]) == JobReads(jobs=(107,))  # a task alone
    assert plan_job_reads(held, listed[:2]) == JobReads(gone=(107,))  # a task's record purged: no read
    assert plan_job_reads(held, [*listed, state("108_4", "RUNNING")]) == JobReads(jobs=(108,))  # a task started
    last = [state("107_1", "RUNNING"), state("100_3", "RUNNING")]  # the last task starts in the array's own record
    assert plan_job_reads(held, last) == JobReads(arrays=(100,))  # (with every record of the array)
    assert plan_job_reads(held, [state("5")]) == JobReads(jobs=(5,), gone=(100, 107))  # the whole array went
    assert plan_job_reads({}, [state("200_1"), state("200_2")]) == JobReads(jobs=(200,))  # (one read of it)
    assert plan_job_reads(held, listed, reread=lambda j: j.id == 107) == JobReads(jobs=(107,))
    assert plan_job_reads(held, listed, reread=lambda j: j.id == 100) == JobReads(arrays=(100,))


def test_the_state_key_names_the_record_it_speaks_for():
    from sunk.model.slurm import job_state_key

    assert job_state_key("107_1") == (107, 107, 1)
    assert job_state_key("100_*") == job_state_key("100_[3-9]") == (100, 100, None)
    assert job_state_key("124+1") == (124, None, None) and job_state_key("5") == (5, None, None)


def test_a_job_state_is_only_ids_and_state():
    assert JobState(key="5", state="RUNNING", job_id=5).same_state(Job(id=5, state="RUNNING"))


def test_read_requests_of_jobs_gone_drop_out(fake, slurm_clock, clock):
    """The table stays bounded by the jobs held: a job purged takes its request along, and a full list drops
    the requests, made before it, of jobs it does not show (a submission never listed); later ones stay."""
    fake.put_job(5, state=("RUNNING",), state_reason="Prolog", nodes="node1", admin_comment=PLACEHOLDER)
    slurm_clock.tick()
    cache = SlurmCache(rest(fake), kinds=("job",), clock=clock, job_full_every=300)
    cache.refresh()
    cache.read_requests.request(5, ReadRequest(every=0.0), clock.t)
    cache.read_requests.request(99, ReadRequest(wait_up_to=3.0), clock.t)  # submitted, never listed
    fake.remove_job(5)
    slurm_clock.tick()
    clock.tick()
    cache.refresh()  # the state list: 5 is gone
    assert cache.job(5) is None and cache.read_requests.get(5) is None
    assert cache.read_requests.get(99) is not None  # (a state list may predate a submission)
    clock.tick(300)
    cache.read_requests.request(100, ReadRequest(wait_up_to=3.0), clock.t + 0.5)  # made as the list runs
    cache.refresh()  # the full list
    assert cache.read_requests.get(99) is None and cache.read_requests.get(100) is not None


# -- only its readers' jobs (keep_job: the scheduler's placeholders) ----------------------------------------------


def ours(job):
    return job.admin_comment == PLACEHOLDER


def own_cache(fake, clock, **kw):
    cache = SlurmCache(rest(fake), kinds=("job",), clock=clock, keep_job=ours, **kw)
    assert cache.refresh().ok
    return cache


def reads(fake, since):
    return sorted(int(path[4:]) for _m, path, _q in fake.state.requests[since:]
                  if path.startswith("job/") and path[4:].isdigit())


def step(fake, slurm_clock, clock, cache):
    """One refresh after Slurm's and the cache's clocks moved on: the jobs read, and whether it was idle."""
    slurm_clock.tick()
    clock.tick()
    before, idle_before = len(fake.state.requests), cache._idle_lists
    assert cache.refresh().ok
    return reads(fake, before), cache._idle_lists > idle_before


def test_another_tenants_jobs_are_never_held_nor_read_though_their_changes_count(fake, slurm_clock, clock):
    fake.put_job(1, admin_comment=PLACEHOLDER)
    fake.put_job(2)  # another tenant's
    slurm_clock.tick()
    cache = own_cache(fake, clock)
    assert set(cache.jobs()) == {1}  # the full list keeps ours only
    fake.put_job(3)  # new, theirs
    fake.put_job(2, state=("RUNNING",), nodes="node1")
    assert step(fake, slurm_clock, clock, cache) == ([], False)  # no read, and not idle: a job changed
    assert set(cache.jobs()) == {1}
    assert step(fake, slurm_clock, clock, cache) == ([], True)  # nothing changed since
    fake.put_job(1, state=("RUNNING",), nodes="node1", admin_comment=PLACEHOLDER)
    fake.remove_job(2)
    assert step(fake, slurm_clock, clock, cache) == ([1], False)  # ours is read as ever
    assert cache.job(1).node_list == ("node1",)
    assert cache.stats().job_reads == 1


def test_a_job_its_reader_submitted_is_read_once_listed(fake, slurm_clock, clock):
    cache = own_cache(fake, clock)
    fake.put_job(7, admin_comment=PLACEHOLDER)
    cache.read_requests.request(7, ReadRequest(expected=True), clock.t)
    fake.put_job(8)
    assert step(fake, slurm_clock, clock, cache)[0] == [7]
    assert set(cache.jobs()) == {7}


def test_while_new_jobs_are_asked_for_each_is_read_once_and_only_ours_kept(fake, slurm_clock, clock):
    cache = own_cache(fake, clock)
    cache.read_requests.read_new_jobs("standby", -math.inf)
    fake.put_job(4)
    fake.put_job(5, admin_comment=PLACEHOLDER)  # made by another replica: no request names it
    assert step(fake, slurm_clock, clock, cache)[0] == [4, 5]
    assert set(cache.jobs()) == {5}
    fake.put_job(4, state=("RUNNING",), nodes="node1")
    assert step(fake, slurm_clock, clock, cache)[0] == []  # read once: known to be another's
    cache.read_requests.read_new_jobs("standby", None)
    fake.put_job(6, admin_comment=PLACEHOLDER)
    assert step(fake, slurm_clock, clock, cache)[0] == []  # no longer asked for: not read
    assert cache.job(6) is None


def test_a_job_listed_before_new_jobs_were_asked_for_is_read_if_first_listed_since(fake, slurm_clock, clock):
    """A submission whose answer is lost: its job may be listed, unread, before the doubt asks for new jobs;
    the ask reaches back to the submission (``since``), not further."""
    fake.put_job(3)  # listed long before: not read
    cache = own_cache(fake, clock)
    slurm_clock.tick()
    clock.tick(60)
    sent = clock.t
    fake.put_job(9, admin_comment=PLACEHOLDER)  # the lost submission's job
    fake.put_job(10)  # another tenant's, in the same seconds
    assert step(fake, slurm_clock, clock, cache)[0] == []  # nobody asks yet
    fake.put_job(11)
    cache.read_requests.read_new_jobs("doubt:u", sent)
    assert step(fake, slurm_clock, clock, cache)[0] == [9, 10, 11]  # not 3, listed before ``sent``
    assert set(cache.jobs()) == {9}
    assert step(fake, slurm_clock, clock, cache)[0] == []


def test_another_tenants_running_array_is_read_once_and_the_standby_then_goes_idle(fake, slurm_clock, clock):
    """Asked for new jobs (the scheduler's standby), an array of someone else's with a task running under its own
    id is read once, known as another's, and not again: the cache goes idle."""
    cache = own_cache(fake, clock)
    cache.read_requests.read_new_jobs("standby", -math.inf)
    fake.put_job(100, array_job_id=100, array_task_string="2-3")
    fake.put_job(107, array_job_id=100, array_task_id=1, state=("RUNNING",), nodes="node1")
    assert step(fake, slurm_clock, clock, cache)[0] == [100, 107]
    assert step(fake, slurm_clock, clock, cache) == ([], True)
    assert step(fake, slurm_clock, clock, cache) == ([], True)
    assert cache.jobs() == {}


def test_a_full_list_knows_every_job_it_does_not_keep_as_read(fake, slurm_clock, clock):
    fake.put_job(2)
    fake.put_job(3, array_job_id=3, array_task_id=0)
    cache = own_cache(fake, clock, job_full_every=300)
    cache.read_requests.read_new_jobs("standby", -math.inf)
    assert step(fake, slurm_clock, clock, cache)[0] == []  # the full list read them: none is read again
    assert cache.jobs() == {}


def test_a_kept_job_that_the_cache_held_is_removed_when_a_read_shows_it_is_not_ours(fake, slurm_clock, clock):
    fake.put_job(1, admin_comment=PLACEHOLDER)
    cache = own_cache(fake, clock)
    fake.put_job(1, state=("RUNNING",), nodes="node1", admin_comment="")  # (an admin rewrote it)
    assert step(fake, slurm_clock, clock, cache)[0] == [1]
    assert cache.job(1) is None


# -- reads in parallel ------------------------------------------------------------------------------------------


class BarrierReads:
    """A client whose job reads each wait until ``parties`` of them run at once."""

    def __init__(self, client, parties):
        self.client = client
        self.barrier = threading.Barrier(parties, timeout=10)

    def __getattr__(self, name):
        return getattr(self.client, name)

    def read_jobs(self, job_ids):
        self.barrier.wait()
        return self.client.read_jobs(job_ids)


def test_the_reads_of_one_refresh_run_read_workers_at_a_time(fake, slurm_clock, clock):
    cache = SlurmCache(BarrierReads(rest(fake), 4), kinds=("job",), clock=clock, read_workers=4)
    assert cache.refresh().ok  # (the first full list: no job yet)
    for job_id in range(1, 9):
        fake.put_job(job_id)
    slurm_clock.tick()
    clock.tick()
    result = cache.refresh()  # 8 reads, four at a time: serial reads would break the barrier
    assert result.ok and result.calls == 9 and set(cache.jobs()) == set(range(1, 9))
    with pytest.raises(ValueError):
        SlurmCache(rest(fake), kinds=("job",), read_workers=0)


def test_the_reads_bound_counts_the_jobs_listed_not_only_those_kept(fake, slurm_clock, clock):
    """A standby reads other tenants' new jobs: at 2000 listed, 80 of them are reads, not a full list."""
    fake.pretty = False
    for job_id in range(1, 2001):
        fake.put_job(job_id)
    cache = own_cache(fake, clock)
    cache.read_requests.read_new_jobs("standby", -math.inf)
    for job_id in range(2001, 2081):
        fake.put_job(job_id)
    lists_before = cache.stats().job_full_lists
    assert len(step(fake, slurm_clock, clock, cache)[0]) == 80
    assert cache.stats().job_full_lists == lists_before
