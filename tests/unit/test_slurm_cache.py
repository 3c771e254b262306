import threading
import time

import pytest

from sunk.model.slurm import Job, Node
from sunk.slurm import SlurmCache, connect
from sunk.slurm.cache import diff, poll_wait
from sunk.slurm.client import Snapshot
from sunk.slurm.errors import SlurmUnavailable
from sunk_dev import listerlog
from sunk_dev.fakeslurm import FakeSlurmrestd
from sunk_dev.listerlog import ADDED, CHANGED, REMOVED, Written


class ScriptedSlurm:
    """Lists what the test put there, with Slurm's update_time rule; refuses per-item calls."""

    def __init__(self):
        self.nodes: dict[str, Node] = {}
        self.jobs: dict[int, Job] = {}
        self.now = 1000
        self.changed = {"node": 0, "job": 0}
        self.calls: list[tuple[str, object]] = []
        self.down = False

    def set_node(self, node):
        self.nodes[node.name] = node
        self.changed["node"] = self.now

    def set_job(self, job):
        self.jobs[job.id] = job
        self.changed["job"] = self.now

    def drop_job(self, job_id):
        del self.jobs[job_id]
        self.changed["job"] = self.now

    def _list(self, kind, items, updated_since):
        self.calls.append((kind, updated_since))
        if self.down:
            raise SlurmUnavailable("slurmrestd is down")
        if updated_since and updated_since - 1 >= self.changed[kind]:
            return Snapshot(items=None, last_update=updated_since)
        return Snapshot(items=tuple(items.values()), last_update=self.now)

    def list_nodes(self, *, updated_since=None):
        return self._list("node", self.nodes, updated_since)

    def list_jobs(self, *, updated_since=None):
        return self._list("job", self.jobs, updated_since)

    def __getattr__(self, name):  # get_node, get_job, ...: the cache must never need them
        raise AssertionError(f"the cache called {name}")


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


@pytest.fixture
def slurm():
    s = ScriptedSlurm()
    s.set_node(Node(name="node1", state="IDLE"))
    s.set_job(Job(id=1, state="PENDING"))
    s.now += 5
    return s


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def cache(slurm, clock):
    return SlurmCache(slurm, interval=1.0, clock=clock)


def record(cache, **kw):
    events = []
    listerlog.record(cache, events.append, **kw)
    return events


class Calls:
    """A sink that keeps the calls made to it, in order."""

    def __init__(self):
        self.calls = []

    def put(self, key, item, observed_at):
        self.calls.append(("put", key, item, observed_at))

    def drop(self, key, observed_at):
        self.calls.append(("drop", key, observed_at))

    def listed(self, keys, observed_at):
        self.calls.append(("listed", set(keys), observed_at))


def test_diff_writes_additions_then_changes_then_removals():
    a, b = Node(name="a"), Node(name="b", state="IDLE")
    b2 = Node(name="b", state="IDLE+DRAIN")
    sink = Calls()
    writes = diff({"a": a, "b": b}, {"b": b2, "c": a}, 7.0)
    writes.write_to(sink)
    assert sink.calls == [("put", "c", a, 7.0), ("put", "b", b2, 7.0), ("drop", "a", 7.0),
                          ("listed", {"b", "c"}, 7.0)]
    assert len(writes) == 3 and writes.items == {"b": b2, "c": a} and writes.removed == ["a"]
    unchanged = Calls()
    diff({"b": b}, {"b": Node(name="b", state="IDLE")}).write_to(unchanged)
    assert unchanged.calls == [("listed", {"b"}, 0.0)]


def test_first_refresh_lists_everything_and_emits_added(cache, slurm):
    events = record(cache)
    result = cache.refresh()
    assert result.ok and result.calls == 2 and result.events == 2
    assert [(e.kind, e.type, e.key) for e in events] == [("node", ADDED, "node1"), ("job", ADDED, 1)]
    assert slurm.calls == [("node", None), ("job", None)]
    assert cache.node("node1").state == {"IDLE"} and cache.job(1).state == "PENDING"
    assert cache.synced and cache.fresh


def test_unchanged_cluster_costs_one_call_per_kind_and_no_event(cache, slurm, clock):
    cache.refresh()
    events = record(cache, replay=False)
    slurm.calls.clear()
    for _ in range(5):
        clock.t += 1
        slurm.now += 1
        assert cache.refresh().events == 0
    assert events == []
    assert len(slurm.calls) == 10
    assert all(since == 1005 for _, since in slurm.calls)  # always update_time


def test_one_change_is_exactly_one_event(cache, slurm, clock):
    cache.refresh()
    events = record(cache, replay=False)
    slurm.now += 1
    clock.t += 1
    old = slurm.jobs[1]
    slurm.set_job(Job(id=1, state="RUNNING", nodes="node1"))
    cache.refresh()
    assert events == [Written("job", CHANGED, 1, old, slurm.jobs[1], observed_at=clock.t)]


def test_removed_job(cache, slurm, clock):
    cache.refresh()
    events = record(cache, replay=False)
    slurm.now += 1
    gone = slurm.jobs[1]
    slurm.drop_job(1)
    cache.refresh()
    assert events == [Written("job", REMOVED, 1, gone, None, observed_at=clock.t)]
    assert cache.job(1) is None


def test_events_carry_when_their_list_was_requested_and_replays_keep_it(cache, slurm, clock):
    """A reader that also learns of a job elsewhere orders the two by this time."""
    requested_at = clock.t
    lister = slurm.list_jobs

    def slow_list(**kw):  # the clock moves while Slurm renders the list
        clock.t += 5
        return lister(**kw)

    slurm.list_jobs = slow_list
    cache = SlurmCache(slurm, interval=1.0, clock=clock, kinds=("job",))
    live = record(cache, replay=False)
    cache.refresh()
    assert [e.observed_at for e in live] == [requested_at]
    clock.t += 30
    replayed = record(cache)
    assert [e.observed_at for e in replayed] == [requested_at]


def test_many_readers_make_no_calls(cache, slurm):
    cache.refresh()
    slurm.calls.clear()
    for _ in range(1000):
        assert cache.job(1) is not None and cache.node("node1") is not None
        assert len(cache.jobs()) == 1
    assert slurm.calls == []


def test_outage_keeps_the_snapshot_marks_stale_then_relists_in_full(cache, slurm, clock, caplog):
    cache.refresh()
    slurm.down = True
    clock.t += 1
    result = cache.refresh()
    assert not result.ok and "down" in result.error
    assert cache.job(1) is not None  # last snapshot kept
    assert not cache.fresh and cache.last_error
    clock.t += 1
    cache.refresh()
    assert sum("failed, keeping the last snapshot" in r.message for r in caplog.records) == 2  # once per kind
    slurm.down = False
    slurm.calls.clear()
    clock.t += 1
    assert cache.refresh().ok
    assert slurm.calls == [("node", None), ("job", None)]  # full relist after the outage
    assert cache.fresh


def test_stale_when_refreshes_stop(cache, clock):
    cache.refresh()
    assert cache.fresh and cache.age == 0
    clock.t += cache.stale_after + 1
    assert not cache.fresh


def test_a_controller_whose_clock_is_behind_is_followed(cache, slurm, clock, caplog):
    """After a failover to a controller with a slower clock, update_time must follow its clock."""
    cache.refresh()
    slurm.down = True
    clock.t += 1
    cache.refresh()
    slurm.down = False
    slurm.now -= 100  # the new controller's clock
    clock.t += 1
    cache.refresh()  # full relist after the outage; last_update went backwards
    assert any("went backwards" in r.message for r in caplog.records)
    slurm.now += 1
    slurm.set_job(Job(id=3))
    clock.t += 1
    cache.refresh()
    assert cache.job(3) is not None


def test_periodic_resync(slurm, clock):
    cache = SlurmCache(slurm, interval=1.0, resync_every=10, clock=clock)
    cache.refresh()
    slurm.calls.clear()
    clock.t += 5
    cache.refresh()
    clock.t += 6
    cache.refresh()
    assert slurm.calls == [("node", 1005), ("job", 1005), ("node", None), ("job", None)]


def test_a_sink_added_gets_the_current_items_and_can_be_detached(cache, slurm):
    cache.refresh()
    events = []
    detach = listerlog.record(cache, events.append, kinds=["job"])
    assert [(e.kind, e.type, e.key) for e in events] == [("job", ADDED, 1)]
    detach()
    slurm.now += 1
    slurm.set_job(Job(id=9))
    cache.refresh()
    assert len(events) == 1


def test_a_failing_sink_does_not_stop_the_others(cache):
    class Broken:
        def put(self, key, item, observed_at):
            raise RuntimeError("boom")

        drop = listed = put

    cache.add_sink("node", Broken())
    cache.add_sink("job", Broken())
    events = record(cache)
    assert cache.refresh().ok and len(events) == 2


def test_only_the_kinds_asked_for(slurm):
    cache = SlurmCache(slurm, kinds=["job"])
    cache.refresh()
    assert [k for k, _ in slurm.calls] == ["job"]
    with pytest.raises(KeyError):
        cache.nodes()


def test_background_thread_nudge_and_wait_for():
    slurm = ScriptedSlurm()
    cache = SlurmCache(slurm, interval=30.0, min_nudge_interval=0.01)
    cache.start()
    try:
        assert cache.wait_for_sync(5)
        calls = len(slurm.calls)
        slurm.now += 1
        slurm.set_job(Job(id=5))
        cache.nudge()
        assert cache.wait_for(lambda: cache.job(5) is not None, 5)
        assert len(slurm.calls) == calls + 2
    finally:
        cache.stop()
    assert not cache._thread.is_alive()


def test_a_burst_of_nudges_is_one_refresh():
    slurm = ScriptedSlurm()
    cache = SlurmCache(slurm, interval=30.0, min_nudge_interval=0.2)
    cache.start()
    try:
        assert cache.wait_for_sync(5)
        time.sleep(0.3)
        before = cache.stats().refreshes
        threads = [threading.Thread(target=cache.nudge) for _ in range(50)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        time.sleep(0.5)
        assert cache.stats().refreshes - before == 1
    finally:
        cache.stop()


def test_wait_for_refreshes_by_itself_when_not_started(slurm):
    cache = SlurmCache(slurm, interval=0.05)
    slurm.now += 1
    slurm.set_job(Job(id=3))
    assert cache.wait_for(lambda: cache.job(3) is not None, 2)
    assert not cache.wait_for(lambda: cache.job(4) is not None, 0.2)


def test_end_to_end_over_rest_one_change_one_event():
    clock = {"t": 1_800_000_000}
    with FakeSlurmrestd(token="t", clock=lambda: clock["t"]) as fake:
        fake.put_partition("batch", "node[1-2]", 2, 64)
        fake.put_node("node1")
        fake.put_node("node2")
        fake.put_job(1, name="a")
        clock["t"] += 5
        cache = SlurmCache(connect("rest", url=fake.url, token="t"), interval=1.0)
        assert cache.refresh().ok
        events = record(cache, replay=False)
        before = len(fake.state.requests)
        clock["t"] += 2
        assert cache.refresh().events == 0
        assert len(fake.state.requests) - before == 2  # one 304 + one job state list
        assert [path for _m, path, _q in fake.state.requests[before:]] == ["nodes/", "jobs/state/"]
        fake.put_job(1, name="a", state=("RUNNING",), nodes="node2", allocation=[("node2", 1, 100)])
        clock["t"] += 1
        cache.refresh()
        assert [(e.kind, e.type, e.key) for e in events] == [("job", CHANGED, 1)]
        assert events[0].new.node_list == ("node2",)
        fake.put_node("node2", state=("IDLE", "DRAIN"), reason="r")
        clock["t"] += 1
        cache.refresh()
        assert [(e.kind, e.type, e.key) for e in events[1:]] == [("node", CHANGED, "node2")]


def test_end_to_end_over_rest_in_full_lists_idle_costs_no_change_answers():
    clock = {"t": 1_800_000_000}
    with FakeSlurmrestd(token="t", clock=lambda: clock["t"]) as fake:
        fake.put_partition("batch", "node[1-2]", 2, 64)
        fake.put_node("node1")
        fake.put_job(1, name="a")
        clock["t"] += 5
        cache = SlurmCache(connect("rest", url=fake.url, token="t"), interval=1.0, job_states=False)
        assert cache.refresh().ok
        before = len(fake.state.requests)
        clock["t"] += 2
        assert cache.refresh().events == 0
        assert [(path, query) for _m, path, query in fake.state.requests[before:]] == [
            ("nodes/", f"update_time={clock['t'] - 2}"), ("jobs/", f"update_time={clock['t'] - 2}")]


def test_slow_lists_stretch_the_period_to_keep_slurm_half_idle():
    class Slow(ScriptedSlurm):
        def _list(self, kind, items, updated_since):
            time.sleep(0.2)
            return super()._list(kind, items, None)

    slurm = Slow()
    cache = SlurmCache(slurm, interval=0.01, max_busy=0.5)
    cache.start()
    try:
        time.sleep(2.0)
    finally:
        cache.stop()
    # each refresh takes >= 0.4 s (two lists), so starts are >= 0.8 s apart: 0, 0.8, 1.6
    assert 1 <= cache.stats().refreshes <= 3


def test_an_answer_that_cannot_be_mapped_makes_the_cache_stale_not_dead(cache, slurm, clock):
    cache.refresh()

    slurm.now += 1
    slurm.jobs[99] = "not a job"  # an answer the mapping cannot handle
    slurm.changed["job"] = slurm.now
    clock.t += 1
    result = cache.refresh()
    assert not result.ok and not cache.fresh and cache.job(1) is not None


def test_the_cache_is_what_a_manager_waits_for_as_an_informer():
    from sunk.controller.manager import Manager

    slurm = ScriptedSlurm()
    cache = SlurmCache(slurm, interval=30.0)
    manager = Manager("cache-as-informer")
    manager.add_informer(cache)  # start, stop, has_synced, wait_for_sync: no adapter
    assert not cache.has_synced() and not cache.wait_for_sync(0)
    manager.start()
    try:
        assert cache.wait_for_sync() and cache.has_synced()  # no timeout: until the first list
        assert manager.wait_leading(5)
    finally:
        manager.stop()
        manager.wait(5)
    assert not cache._thread.is_alive()


def test_the_end_of_an_outage_is_an_event_after_the_relists_own(cache, slurm, clock):
    """What waited for Slurm is woken by this, once per outage, with the cache already current."""
    seen = []
    listerlog.record(cache, lambda e: seen.append(("event", e.kind, e.type)), replay=False)
    stop = cache.on_recovered(lambda: seen.append(("recovered", cache.fresh, len(cache.jobs()))))
    cache.refresh()
    clock.t += 1
    cache.refresh()
    assert [s for s in seen if s[0] == "recovered"] == []  # no outage, nothing ends
    slurm.down = True
    for _ in range(3):
        clock.t += 1
        cache.refresh()
    slurm.down = False
    slurm.set_job(Job(id=2, state="PENDING"))  # made during the outage
    seen.clear()
    clock.t += 1
    assert cache.refresh().ok
    assert seen == [("event", "job", ADDED), ("recovered", True, 2)]
    clock.t += 1
    cache.refresh()
    assert seen[-1] == ("recovered", True, 2) and len(seen) == 2  # once per outage
    stop()
    slurm.down = True
    clock.t += 1
    cache.refresh()
    slurm.down = False
    clock.t += 1
    cache.refresh()
    assert len(seen) == 2


def test_the_outage_ends_only_when_every_kind_lists_again(cache, slurm, clock, monkeypatch):
    ended = []
    cache.on_recovered(lambda: ended.append(True))
    cache.on_recovered(lambda: 1 / 0)  # a broken listener is logged, the others still hear
    cache.on_recovered(lambda: ended.append(True))
    cache.refresh()
    slurm.down = True
    clock.t += 1
    cache.refresh()
    slurm.down = False
    real_list = slurm._list

    def jobs_still_down(kind, items, updated_since):
        if kind == "job":
            raise SlurmUnavailable("list jobs: slurmctld is still starting")
        return real_list(kind, items, updated_since)

    monkeypatch.setattr(slurm, "_list", jobs_still_down)
    clock.t += 1
    assert not cache.refresh().ok and cache.node("node1") is not None
    assert ended == []
    monkeypatch.setattr(slurm, "_list", real_list)
    clock.t += 1
    assert cache.refresh().ok
    assert ended == [True, True]



def test_after_an_answer_with_every_node_relists_take_at_most_a_fifth_of_the_time():
    """slurmctld answers update_time=T with every node until T - 1 >= its last change: polling every
    250 ms right after a change lists every node again each time. A cheap list keeps the pace (the
    next change is seen as fast); a costly one waits until the relists take a fifth of the time, at
    most the rest of the second; idle polls keep their pace; Slurm's half-idle rule still holds."""
    assert poll_wait(0.25, 0.01, 0.5, answered_with_nodes=False) == pytest.approx(0.24)
    assert poll_wait(0.25, 0.01, 0.5, answered_with_nodes=True) == pytest.approx(0.24)  # 200 nodes: the pace
    assert poll_wait(0.25, 0.1, 0.5, answered_with_nodes=True) == pytest.approx(0.4)  # 4 x the list's time
    assert poll_wait(0.25, 0.3, 0.5, answered_with_nodes=True) == pytest.approx(0.7)  # the rest of the second
    assert poll_wait(1.0, 0.01, 0.5, answered_with_nodes=True) == pytest.approx(0.99)  # (no change at 1 s)
    assert poll_wait(0.25, 0.8, 0.5, answered_with_nodes=True) == pytest.approx(0.8)  # a slow list: max_busy
    assert poll_wait(0.25, 1.5, 0.5, answered_with_nodes=False) == pytest.approx(1.5)


def test_the_loop_polls_nodes_fast_while_idle_and_waits_after_a_costly_change():
    """The background loop, on real time: a dozen no-change calls in 0.6 s while idle; after a
    change whose list took 0.25 s, no node call until the second is out."""

    class Costly(ScriptedSlurm):  # a list answered with every node takes 0.25 s
        def list_nodes(self, *, updated_since=None):
            snapshot = super().list_nodes(updated_since=updated_since)
            if snapshot.items is not None:
                time.sleep(0.25)
            return snapshot

    slurm = Costly()
    slurm.set_node(Node(name="node1", state="IDLE"))
    slurm.now += 5
    cache = SlurmCache(slurm, interval=0.05, kinds=("node",))
    cache.start()
    try:
        assert cache.wait_for_sync(2)
        time.sleep(1.1)  # (the first list answered with every node: the second after it waited out)
        idle_from = len(slurm.calls)
        time.sleep(0.6)
        assert len(slurm.calls) - idle_from >= 5  # 0.05 s polls, "no change" each
        slurm.now += 1  # a change in a later second than the last answer's
        slurm.set_node(Node(name="node1", state="IDLE+DRAIN"))
        assert cache.wait_for(lambda: cache.node("node1").drained, 2)
        answered = len(slurm.calls)
        time.sleep(0.5)
        assert len(slurm.calls) == answered  # within the second: no call (it would list every node again)
    finally:
        cache.stop(5)

