"""Slurm's nodes and jobs for the Syncer process: one SlurmCache per kind, each on its own thread.

Why split: a full job list is the slow one (about 10 s for 10,000 jobs on slurmrestd 24.11,
docs/benchmarks.md), and one cache refreshes its kinds one after the other, stretching its
period to stay under ``max_busy``. Node state would then reach Kubernetes only after each
job list: tens of seconds on a busy cluster. With a cache per kind, node changes keep their
one-interval latency whatever the job count, and Slurm still gets one node list per node
interval (the Syncer's is shorter: ``--slurm-node-poll-interval``) and one job list per
interval. The node-locking plugin reads jobs from the same object.

It offers SlurmCache's reading interface. Differences, by design: events of different
kinds may be delivered on different threads (each kind's stay in order), and ``fresh``
speaks for the nodes, which is what the sync decisions read; ``jobs_fresh`` for the jobs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping, Sequence

from sunk.slurm.cache import JOB, NODE, SlurmCache, Subscriber
from sunk.slurm.client import SlurmClient
from sunk.slurm.models import Job, Node


class SplitSlurmCache:
    outage_dependency = "slurm"  # its on_recovered wakes the keys that waited for Slurm (the Manager)

    def __init__(self, client: SlurmClient, *, interval: float = 1.0, kinds: Sequence[str] = (NODE, JOB),
                 job_full_every: float = 300.0, intervals: Mapping[str, float] | None = None):
        """``intervals``: a kind's own period, where it differs from ``interval`` (the Syncer polls
        nodes faster: an idle node poll is a few hundred bytes, and it bounds drain latency)."""
        own = intervals or {}
        self.caches: dict[str, SlurmCache] = {kind: SlurmCache(client, interval=own.get(kind, interval), kinds=(kind,),
                                                               job_full_every=job_full_every)
                                              for kind in kinds}

    def _kind(self, kind: str) -> SlurmCache:
        try:
            return self.caches[kind]
        except KeyError:
            raise KeyError(f"this cache does not hold {kind}s") from None

    # -- readers ------------------------------------------------------------------------------------
    def nodes(self) -> Mapping[str, Node]:
        return self._kind(NODE).nodes()

    def node(self, name: str) -> Node | None:
        return self._kind(NODE).node(name)

    def jobs(self) -> Mapping[int, Job]:
        return self._kind(JOB).jobs()

    def job(self, job_id: int) -> Job | None:
        return self._kind(JOB).job(job_id)

    @property
    def synced(self) -> bool:
        return all(c.synced for c in self.caches.values())

    @property
    def fresh(self) -> bool:
        """The node picture is current (listed within ``stale_after``, last list worked)."""
        return self._kind(NODE).fresh

    @property
    def jobs_fresh(self) -> bool:
        return self._kind(JOB).fresh

    @property
    def last_error(self) -> str | None:
        return next((c.last_error for c in self.caches.values() if c.last_error), None)

    # -- subscribers ---------------------------------------------------------------------------------
    def subscribe(self, callback: Subscriber, *, kinds: Sequence[str] | None = None,
                  replay: bool = True) -> Callable[[], None]:
        wanted = list(kinds) if kinds else list(self.caches)
        stops = [self.caches[k].subscribe(callback, kinds=[k], replay=replay) for k in wanted if k in self.caches]

        def unsubscribe() -> None:
            for stop in stops:
                stop()

        return unsubscribe

    def on_recovered(self, callback: Callable[[], None]) -> Callable[[], None]:
        """``callback()`` whenever one kind's outage ends (``SlurmCache.on_recovered``), on that kind's thread."""
        stops = [cache.on_recovered(callback) for cache in self.caches.values()]

        def unsubscribe() -> None:
            for stop in stops:
                stop()

        return unsubscribe

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> None:
        for cache in self.caches.values():
            cache.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        for cache in self.caches.values():
            cache.stop(timeout)

    def nudge(self) -> None:
        for cache in self.caches.values():
            cache.nudge()

    def has_synced(self) -> bool:
        return self.synced

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        if timeout is None:
            return all(cache.wait_for_sync() for cache in self.caches.values())
        deadline = time.monotonic() + timeout
        return all(cache.wait_for_sync(max(0.0, deadline - time.monotonic())) for cache in self.caches.values())

    def refresh(self) -> None:
        """One refresh of every kind, on the caller's thread (tests, benchmarks)."""
        for cache in self.caches.values():
            cache.refresh()

    def calls(self) -> Mapping[Hashable, int]:
        return {kind: cache.stats().calls for kind, cache in self.caches.items()}
