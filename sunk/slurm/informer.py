"""One Slurm kind as an informer (client-go's SharedIndexInformer, for Slurm), and the per-process factory.

Why: the Kubernetes side has client-go's shape (``sunk/kube``: store, indexers, handlers); the Slurm
side had its own event type and a wrapper that split one cache back per kind. A ``SlurmInformer`` is the
same shape for one Slurm kind:

- its store is ``sunk.kube.store.KeyedStore`` (nodes by name, jobs by id), with indexers;
- its handlers have the Kubernetes informer's protocol (``ChangeHandler``: ``on_add``, ``on_update``,
  ``on_delete``), run in order on the refreshing thread, and a handler added late first gets an add for
  each item held (replayed under the refresh lock: nothing missed, nothing twice);
- ``has_synced``/``wait_for_sync``, ``start``/``stop`` and ``on_recovered`` are what a Manager asks of it;
- its *lister* is a ``SlurmCache`` of that one kind: how the kind is read (a full list with
  ``update_time``; for jobs the state list plus reads of the jobs that changed, idle ``update_time``
  checks, the periodic full list) stays there, with its cost, and no reader sees it.

Each kind polls on its own thread: a full job list is the slow one (seconds at 10,000 jobs), and node
state must not wait for it. ``SlurmInformerFactory`` (client-go's SharedInformerFactory) makes one
informer per kind per process, so every reader in a process shares one read of each kind.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Generic, Optional, TypeVar

from attrs import frozen

from sunk.kube.store import ChangeHandler, FuncHandler, KeyedStore

from .cache import JOB, KINDS, NODE, CacheEvent, CacheStats, Patience, RefreshResult, Reread, RereadAfter, SlurmCache
from .client import SlurmClient
from .models import Job, Node

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
_Values = list  # (``list[T]`` where the class's own ``list`` method shadows the builtin)


class SlurmInformer(Generic[K, T]):
    """One Slurm kind: a store with indexers, handlers, sync and outage events, over its lister."""

    outage_dependency = "slurm"  # its on_recovered wakes the keys that waited for Slurm (the Manager)

    def __init__(self, lister: SlurmCache, kind: str):
        """``lister``: a ``SlurmCache`` of ``kind`` only (the factory builds it)."""
        self.kind = kind
        self.lister = lister
        self._store: KeyedStore[K, T] = KeyedStore()
        self._delivering = threading.local()
        lister.subscribe(self._apply, kinds=[kind])  # first subscriber: the store leads every handler

    # ---- read side ----------------------------------------------------------------------------
    def get(self, key: K) -> Optional[T]:
        return self._store.get(key)

    def list(self) -> _Values[T]:
        return self._store.list()

    def keys(self) -> _Values[K]:
        return self._store.keys()

    def items(self) -> Mapping[K, T]:
        """Every item by key, as of the last refresh: an immutable mapping, no copy."""
        return self.lister.held(self.kind)  # type: ignore[return-value]

    def by_index(self, index_name: str, value: str) -> _Values[T]:
        return self._store.by_index(index_name, value)

    def index_keys(self, index_name: str, value: str) -> _Values[K]:
        return self._store.index_keys(index_name, value)

    def add_indexer(self, name: str, func: Callable[[T], Any]) -> None:
        """Add an index (``func(item)`` -> its index values); items held are indexed at once."""
        self._store.add_indexer(name, func)

    def observed_at(self) -> float:
        """Inside a handler: when the read behind the change being handled was requested (the lister's clock).
        A reader that also learns of an item another way (a placeholder's own started call) keeps whichever
        it saw later."""
        return float(getattr(self._delivering, "at", 0.0))

    @property
    def synced(self) -> bool:
        return self.lister.synced

    def has_synced(self) -> bool:
        return self.lister.synced

    @property
    def fresh(self) -> bool:
        """Listed within ``stale_after``, and the last list worked."""
        return self.lister.fresh

    @property
    def age(self) -> float:
        return self.lister.age

    @property
    def last_error(self) -> Optional[str]:
        return self.lister.last_error

    @property
    def last_failure(self) -> Optional[Exception]:
        return self.lister.last_failure

    @property
    def failing_for(self) -> float:
        return self.lister.failing_for

    @property
    def interval(self) -> float:
        return self.lister.interval

    def stats(self) -> CacheStats:
        return self.lister.stats()

    def observe(self, item: T, requested_at: float) -> None:
        """A record its reader read from Slurm itself, the read begun at ``requested_at`` (the lister's clock):
        the jobs lister takes it for its own read of the job when its state list agrees (``SlurmCache.observe``).
        Data handed down, never a call; ignored where the lister would not use it."""
        if self.kind == JOB:
            self.lister.observe(item, requested_at)  # type: ignore[arg-type]

    # ---- handlers -----------------------------------------------------------------------------
    def add_handler(self, handler: Optional[ChangeHandler[T]] = None, *,
                    on_add: Optional[Callable[[T], None]] = None,
                    on_update: Optional[Callable[[T, T], None]] = None,
                    on_delete: Optional[Callable[[T], None]] = None) -> Callable[[], None]:
        """Register a handler; the items held now are replayed to it as adds first. Handlers run on the
        refreshing thread, in order; keep them quick. One that raises is logged, the others go on.
        Returns a function that removes it."""
        h: ChangeHandler[T] = handler or FuncHandler(on_add, on_update, on_delete)

        def deliver(event: CacheEvent) -> None:
            self._delivering.at = event.observed_at
            try:
                old: Optional[T] = event.old
                new: Optional[T] = event.new
                if old is None and new is not None:
                    h.on_add(new)
                elif new is None and old is not None:
                    h.on_delete(old)
                elif old is not None and new is not None:
                    h.on_update(old, new)
            finally:
                self._delivering.at = 0.0

        return self.lister.subscribe(deliver, kinds=[self.kind], replay=True)

    def on_recovered(self, callback: Callable[[], None]) -> Callable[[], None]:
        """``callback()`` whenever this kind's outage ends (after the relist's own changes are out)."""
        return self.lister.on_recovered(callback)

    def _apply(self, event: CacheEvent) -> None:
        if event.new is None:
            self._store.delete(event.key)  # type: ignore[arg-type]
        else:
            self._store.add(event.key, event.new)  # type: ignore[arg-type]

    # ---- life cycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self.lister.start()

    def stop(self, timeout: Optional[float] = 5.0) -> None:
        self.lister.stop(timeout)

    def wait_for_sync(self, timeout: Optional[float] = None) -> bool:
        return self.lister.wait_for_sync(timeout)

    def wait_for(self, predicate: Callable[[], bool], timeout: Optional[float] = None) -> bool:
        return self.lister.wait_for(predicate, timeout)

    def nudge(self) -> None:
        """Refresh soon: the caller expects a change (it submitted, cancelled or updated something)."""
        self.lister.nudge()

    def refresh(self) -> RefreshResult:
        """One refresh on the caller's thread (tests, benchmarks, a process that does not start it)."""
        return self.lister.refresh()


NodeInformer = SlurmInformer[str, Node]
JobInformer = SlurmInformer[int, Job]


@frozen
class JobReadHints:
    """What a process tells its jobs lister about which jobs to read though their state did not change,
    and which reads may wait for a record read elsewhere (``SlurmCache``'s ``reread``, ``reread_after``,
    ``patience``; module notes of ``sunk/slurm/cache.py``). None: no such job."""

    reread: Optional[Reread] = None
    reread_after: Optional[RereadAfter] = None
    patience: Optional[Patience] = None


class SlurmInformerFactory:
    """One informer per Slurm kind for one process (client-go's SharedInformerFactory): every reader of a
    kind in the process shares its one read of Slurm. ``intervals``: a kind's own period where it differs
    from ``interval`` (the Syncer polls nodes faster: an idle node poll is a few hundred bytes)."""

    def __init__(self, client: SlurmClient, *, interval: float = 1.0,
                 intervals: Optional[Mapping[str, float]] = None, job_full_every: float = 300.0,
                 job_hints: JobReadHints = JobReadHints(), **lister_options: Any):
        """``lister_options``: passed to each kind's ``SlurmCache`` (tests: ``clock``, ``resync_every``, ...)."""
        self.client = client
        self.interval = interval
        self.intervals = dict(intervals or {})
        self.job_full_every = job_full_every
        self.job_hints = job_hints
        self.lister_options = lister_options
        self._lock = threading.Lock()
        self._informers: dict[str, SlurmInformer[Any, Any]] = {}

    def nodes(self) -> NodeInformer:
        return self._informer(NODE)

    def jobs(self) -> JobInformer:
        return self._informer(JOB)

    def informers(self) -> Sequence[SlurmInformer[Any, Any]]:
        """The informers asked for so far, nodes first (what a Manager starts and waits for)."""
        with self._lock:
            return [self._informers[kind] for kind in KINDS if kind in self._informers]

    def _informer(self, kind: str) -> SlurmInformer[Any, Any]:
        with self._lock:
            informer = self._informers.get(kind)
            if informer is None:
                options = dict(self.lister_options)
                if kind == JOB:
                    options.update(reread=self.job_hints.reread, reread_after=self.job_hints.reread_after,
                                   patience=self.job_hints.patience)
                lister = SlurmCache(self.client, interval=self.intervals.get(kind, self.interval), kinds=(kind,),
                                    job_full_every=self.job_full_every, **options)
                informer = self._informers[kind] = SlurmInformer(lister, kind)
            return informer

    # ---- life cycle, for every informer made ----------------------------------------------------
    def start(self) -> None:
        for informer in self.informers():
            informer.start()

    def stop(self, timeout: Optional[float] = 5.0) -> None:
        for informer in self.informers():
            informer.stop(timeout)

    def has_synced(self) -> bool:
        return all(informer.has_synced() for informer in self.informers())

    def refresh(self) -> None:
        """One refresh of every kind, on the caller's thread (tests, benchmarks)."""
        for informer in self.informers():
            informer.refresh()


__all__ = ["JOB", "NODE", "JobInformer", "JobReadHints", "NodeInformer", "SlurmInformer", "SlurmInformerFactory"]
