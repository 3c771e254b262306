"""The Syncer's Slurm state: a slow job list must not hold back node changes."""

from __future__ import annotations

import threading
import time

from sunk.slurm.client import Snapshot
from sunk.slurm.models import Job, Node
from sunk.syncer.slurmstate import SplitSlurmCache


class SlowJobsSlurm:
    def __init__(self) -> None:
        self.node_state = "IDLE"
        self.job_seconds = 0.0

    def list_nodes(self, *, updated_since: int | None = None) -> Snapshot:
        return Snapshot(items=(Node("node1", state=self.node_state),), last_update=int(time.time()))

    def list_jobs(self, *, updated_since: int | None = None) -> Snapshot:
        time.sleep(self.job_seconds)
        return Snapshot(items=(Job(1, state="RUNNING", nodes="node1"),), last_update=int(time.time()))


def test_node_events_arrive_within_an_interval_while_job_lists_take_seconds():
    slurm = SlowJobsSlurm()
    cache = SplitSlurmCache(slurm, interval=0.1)  # type: ignore[arg-type]
    seen: dict[str, float] = {}
    got = threading.Event()

    def on_event(event) -> None:
        if event.kind == "node" and event.new is not None and event.new.drained:
            seen["at"] = time.monotonic()
            got.set()

    cache.subscribe(on_event)
    cache.start()
    try:
        assert cache.wait_for_sync(5) and cache.synced and cache.fresh
        assert cache.node("node1") is not None and cache.job(1) is not None
        time.sleep(1.0)  # (the first node list answered with every node: the node cache waits that second out)
        slurm.job_seconds = 2.0  # from now on every job list takes 2 s
        time.sleep(0.3)  # a slow job list is in progress
        changed = time.monotonic()
        slurm.node_state = "IDLE+DRAIN"
        assert got.wait(5)
        assert seen["at"] - changed < 0.8  # one node interval (+ slack), not the job list's 2 s
        assert cache.fresh  # node freshness is not dragged down by the slow job list
    finally:
        slurm.job_seconds = 0.0
        cache.stop(5)


def test_subscribe_by_kind_and_unsubscribe():
    slurm = SlowJobsSlurm()
    cache = SplitSlurmCache(slurm, interval=0.1)  # type: ignore[arg-type]
    cache.refresh()
    kinds: list[str] = []
    stop = cache.subscribe(lambda e: kinds.append(e.kind), kinds=["node"])
    assert kinds == ["node"]  # replay of what is held, nodes only
    stop()
    slurm.node_state = "DOWN"
    cache.refresh()
    assert kinds == ["node"]


def test_the_split_cache_waits_for_every_kind_with_or_without_a_timeout():
    cache = SplitSlurmCache(SlowJobsSlurm(), interval=0.1)  # type: ignore[arg-type]
    assert not cache.has_synced()
    cache.start()
    try:
        assert cache.wait_for_sync() and cache.has_synced() and cache.wait_for_sync(0)
    finally:
        cache.stop(5)


def test_each_kinds_recovery_is_reported():
    """The Syncer's Manager wakes what failed for an outage when either of its caches lists again."""
    from sunk.slurm.errors import SlurmUnavailable

    class Flaky(SlowJobsSlurm):
        down = False

        def list_nodes(self, *, updated_since: int | None = None) -> Snapshot:
            if self.down:
                raise SlurmUnavailable("list nodes: cannot reach slurmrestd")
            return super().list_nodes(updated_since=updated_since)

        def list_jobs(self, *, updated_since: int | None = None) -> Snapshot:
            if self.down:
                raise SlurmUnavailable("list jobs: cannot reach slurmrestd")
            return super().list_jobs(updated_since=updated_since)

    slurm = Flaky()
    cache = SplitSlurmCache(slurm, interval=60)  # type: ignore[arg-type]
    ended: list[bool] = []
    stop = cache.on_recovered(lambda: ended.append(True))
    cache.refresh()
    slurm.down = True
    cache.refresh()
    slurm.down = False
    cache.refresh()
    assert ended == [True, True]  # the node list's, then the job list's
    stop()
    slurm.down = True
    cache.refresh()
    slurm.down = False
    cache.refresh()
    assert ended == [True, True]
