"""One Slurm kind as an informer (client-go's SharedIndexInformer, for Slurm), and the per-process factory.

Why: the Kubernetes side has client-go's shape (``sunk/kube``: store, indexers, handlers); the Slurm
side had its own event type and a wrapper that split one cache back per kind. A ``SlurmInformer`` is the
same shape for one Slurm kind:

- its store is ``sunk.kube.store.KeyedStore`` (nodes by name, jobs by id), with indexers;
- its handlers have the Kubernetes informer's protocol (``ChangeHandler``: ``on_add``, ``on_update``,
  ``on_delete``), run in order on the refreshing thread, and a handler added late first gets an add for
  each item held (replayed under the refresh lock: nothing missed, nothing twice);
- ``has_synced``/``wait_for_sync``, ``start``/``stop`` and ``on_recovered`` are what a Manager asks of it;
- a jobs informer takes per-job read requests (``request_reads``: read this job every N seconds; wait up
  to P seconds for a read made elsewhere), as data its lister reads: it calls nobody back;
- its *lister* is a ``SlurmCache`` of that one kind: how the kind is read (a full list with
  ``update_time``; for jobs the state list plus reads of the jobs that changed, idle ``update_time``
  checks, the periodic full list) stays there, with its cost, and no reader sees it.

Each kind polls on its own thread: a full job list is the slow one (seconds at 10,000 jobs), and node
state must not wait for it. ``SlurmInformerFactory`` (client-go's SharedInformerFactory) makes one
informer per kind per process, so every reader in a process shares one read of each kind.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from typing import Any, Generic, Optional, TypeVar, cast

from sunk.kube.store import ChangeHandler, FuncHandler, KeyedStore
from sunk.model.slurm import Job, Node

from .cache import JOB, KINDS, NODE, CacheStats, RefreshResult, SlurmCache
from .client import SlurmClient
from .readrequests import ReadRequest, ReadRequests

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
_Values = list  # (``list[T]`` where the class's own ``list`` method shadows the builtin)


class ObservedStore(Generic[K, T]):
    """A ``KeyedStore`` that knows when each item's read was requested: the later observation wins.

    Why: an item is learnt two ways, from its lister's refreshes and from a reader that read it from Slurm
    itself (the scheduler's hook API reads a placeholder as its script calls, seconds before a list shows
    it). A list that left before the reader's read must not undo it (a bound Pod's RUNNING job turned back
    into PENDING reads as "requeued" and deletes the Pod); a removal is remembered for ``forget_after``
    seconds, so that a read that was slow to return does not bring a purged item back. The one such rule
    on the Slurm side: every reader of the informer sees the same order.
    """

    def __init__(self, forget_after: float = 300.0, clock: Callable[[], float] = time.monotonic):
        self._items: KeyedStore[K, T] = KeyedStore()
        self._lock = threading.RLock()
        self._seen_at: dict[K, float] = {}
        self._gone: dict[K, tuple[float, float]] = {}  # key -> (its removal's observation, clock then), oldest first
        self._forget_after = forget_after
        self._clock = clock

    def put(self, key: K, item: T, observed_at: float) -> Optional[tuple[Optional[T], T]]:
        """Hold ``item`` read at ``observed_at``: the change (old, new), or None when a later observation is
        held (it stays) or this same one (nothing new)."""
        with self._lock:
            if self._stale(key, observed_at):
                return None
            old = self._items.get(key)
            if old == item and self._seen_at.get(key) == observed_at:
                return None
            self._gone.pop(key, None)
            self._seen_at[key] = observed_at
            self._items.add(key, item)
            return old, item

    def drop(self, key: K, observed_at: float) -> Optional[T]:
        """The item is gone as of ``observed_at``: the item removed, or None (stale, or not held)."""
        with self._lock:
            if self._stale(key, observed_at):
                return None
            self._seen_at.pop(key, None)
            self._gone.pop(key, None)  # (re-inserted at the end: the dict stays in time order)
            self._gone[key] = (observed_at, self._clock())
            self._expire()
            return self._items.delete(key)

    def seen_at(self, key: K) -> Optional[float]:
        with self._lock:
            return self._seen_at.get(key)

    def get(self, key: K) -> Optional[T]:
        return self._items.get(key)

    def list(self) -> _Values[T]:
        return self._items.list()

    def keys(self) -> _Values[K]:
        return self._items.keys()

    def by_index(self, index_name: str, value: str) -> _Values[T]:
        return self._items.by_index(index_name, value)

    def index_keys(self, index_name: str, value: str) -> _Values[K]:
        return self._items.index_keys(index_name, value)

    def index_values(self, index_name: str) -> _Values[str]:
        """Every value of ``index_name`` some item has (its owners, say)."""
        return self._items.index_values(index_name)

    def add_indexer(self, name: str, func: Callable[[T], Any]) -> None:
        self._items.add_indexer(name, func)

    def _stale(self, key: K, observed_at: float) -> bool:
        if key in self._seen_at:
            return observed_at < self._seen_at[key]
        gone = self._gone.get(key)
        return gone is not None and observed_at < gone[0]

    def _expire(self) -> None:
        horizon = self._clock() - self._forget_after
        while self._gone:
            oldest = next(iter(self._gone))
            if self._gone[oldest][1] >= horizon:
                return
            del self._gone[oldest]


class SlurmInformer(Generic[K, T]):
    """One Slurm kind: a store with indexers, handlers, sync and outage events, over its lister."""

    outage_dependency = "slurm"  # its on_recovered wakes the keys that waited for Slurm (the Manager)

    def __init__(self, lister: SlurmCache, kind: str, key: Callable[[T], K], forget_after: float = 300.0):
        """``lister``: a ``SlurmCache`` of ``kind`` only (the factory builds it); ``key``: an item's key."""
        self.kind = kind
        self.lister = lister
        self._key = key
        self._store: ObservedStore[K, T] = ObservedStore(forget_after, clock=lister.clock)
        self._lock = threading.RLock()  # one change (store, then every handler) at a time
        self._handlers: list[ChangeHandler[T]] = []
        self._listed: list[Callable[[float], None]] = []
        self._delivering = threading.local()
        lister.add_sink(kind, _StoreWriter[K, T](self))  # (replays what the lister holds)
        lister.on_listed(self._whole_list)

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

    def index_values(self, index_name: str) -> _Values[str]:
        return self._store.index_values(index_name)

    def add_indexer(self, name: str, func: Callable[[T], Any]) -> None:
        """Add an index (``func(item)`` -> its index values); items held are indexed at once."""
        self._store.add_indexer(name, func)

    def observed_at(self) -> float:
        """Inside a handler: when the read behind the change being handled was requested (the lister's clock)."""
        return float(getattr(self._delivering, "at", 0.0))

    @property
    def clock(self) -> Callable[[], float]:
        """The clock observations are stamped with (``observe``'s ``requested_at``, ``on_listed``)."""
        return self.lister.clock

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

    def observe(self, item: T, requested_at: float) -> bool:
        """A record a reader read from Slurm itself, the read begun at ``requested_at`` (``clock``): the store
        takes it unless it holds a later observation, and the handlers hear of it at once, on the caller's
        thread; the jobs lister may take it for its own read of the job (``SlurmCache.observe``). True if
        the store took it."""
        if self.kind == JOB:
            self.lister.observe(item, requested_at)  # type: ignore[arg-type]
        return self._change(self._key(item), item, requested_at)

    # ---- read requests (jobs) ----------------------------------------------------------------------
    def request_reads(self, job_id: int, *, every: Optional[float] = None, wait_up_to: float = 0.0,
                      expected: bool = False) -> None:
        """Ask the jobs lister, for this one job: read it every ``every`` seconds though its state did not
        change (0: at every refresh; None: only when it changes), and let a read its change to RUNNING asks
        for (or its first, a new job PENDING or RUNNING) wait up to ``wait_up_to`` seconds for a record read
        elsewhere (``observe``); ``expected``: the caller made the job, read it as soon as it is listed even
        where the lister keeps only its readers' jobs. Replaces the job's earlier request; all unset cancel
        it. Data, not a callback: the lister reads it at its next refresh (``sunk/slurm/readrequests.py``)."""
        self._requests().request(job_id, ReadRequest(every, wait_up_to, expected), self.clock())

    def read_new_jobs(self, reason: str, since: Optional[float]) -> None:
        """Where the lister keeps only its readers' jobs: for ``reason``, read every job a state list requested
        at ``since`` or later first showed (``ReadRequests.read_new_jobs``); None: stop, for that reason."""
        self._requests().read_new_jobs(reason, since)

    def cancel_reads(self, job_id: int) -> None:
        self._requests().cancel(job_id)

    def read_request(self, job_id: int) -> Optional[ReadRequest]:
        """The job's request now, if any."""
        return self._requests().get(job_id)

    def _requests(self) -> ReadRequests:
        if self.kind != JOB:
            raise TypeError(f"read requests are for jobs, not {self.kind}s")
        return self.lister.read_requests

    # ---- handlers -----------------------------------------------------------------------------
    def add_handler(self, handler: Optional[ChangeHandler[T]] = None, *,
                    on_add: Optional[Callable[[T], None]] = None,
                    on_update: Optional[Callable[[T, T], None]] = None,
                    on_delete: Optional[Callable[[T], None]] = None) -> Callable[[], None]:
        """Register a handler; the items held now are replayed to it as adds first. Handlers run on the
        refreshing thread (or an ``observe``'s caller's), in order; keep them quick. One that raises is
        logged, the others go on. Returns a function that removes it."""
        h: ChangeHandler[T] = handler or FuncHandler(on_add, on_update, on_delete)
        with self._lock:  # no change in between: nothing missed, nothing twice
            self._handlers.append(h)
            for key in self._store.keys():
                item = self._store.get(key)
                if item is not None:
                    self._deliver([h], None, item, self._store.seen_at(key) or 0.0)

        def remove() -> None:
            with self._lock:
                if h in self._handlers:
                    self._handlers.remove(h)

        return remove

    def on_listed(self, callback: Callable[[float], None]) -> Callable[[], None]:
        """``callback(requested_at)`` after each refresh that worked, once its changes are out: the store then
        holds every item as of a read requested at ``requested_at`` (an item missing was missing then).
        Returns a function that removes it."""
        with self._lock:
            self._listed.append(callback)

        def remove() -> None:
            with self._lock:
                if callback in self._listed:
                    self._listed.remove(callback)

        return remove

    def on_recovered(self, callback: Callable[[], None]) -> Callable[[], None]:
        """``callback()`` whenever this kind's outage ends (after the relist's own changes are out)."""
        return self.lister.on_recovered(callback)

    def _change(self, key: K, new: Optional[T], at: float) -> bool:
        with self._lock:
            if new is None:
                gone = self._store.drop(key, at)
                if gone is None:
                    return False
                self._deliver(self._handlers, gone, None, at)
                return True
            change = self._store.put(key, new, at)
            if change is None:
                return False
            self._deliver(self._handlers, change[0], new, at)
            return True

    def _relisted(self, keys: Collection[Hashable], at: float) -> None:
        """A complete listing requested at ``at`` showed ``keys``: an item held that it does not show and that
        was observed before it is gone (a record only a reader read, ``observe``, of a job Slurm purged since,
        which the lister never held: it holds no record of a job whose read waits). One observed after the
        listing began stays: the listing may predate it."""
        with self._lock:
            for key in [key for key in self._store.keys() if key not in keys]:
                self._change(key, None, at)  # (the store turns it away if observed later than ``at``)

    def _deliver(self, handlers: Sequence[ChangeHandler[T]], old: Optional[T], new: Optional[T], at: float) -> None:
        self._delivering.at = at
        try:
            for h in list(handlers):
                try:
                    if old is None and new is not None:
                        h.on_add(new)
                    elif new is None and old is not None:
                        h.on_delete(old)
                    elif old is not None and new is not None:
                        h.on_update(old, new)
                except Exception:
                    log.exception("Slurm %s informer handler %r failed", self.kind, h)
        finally:
            self._delivering.at = 0.0

    def _whole_list(self, requested_at: float) -> None:
        with self._lock:
            for callback in list(self._listed):
                try:
                    callback(requested_at)
                except Exception:
                    log.exception("Slurm %s informer listed callback %r failed", self.kind, callback)

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


class _StoreWriter(Generic[K, T]):
    """What the lister writes into (its ``ListerSink``): the informer's store, then its handlers."""

    def __init__(self, informer: SlurmInformer[K, T]):
        self._informer = informer

    def put(self, key: Hashable, item: Any, observed_at: float) -> None:
        self._informer._change(cast(K, key), cast(T, item), observed_at)

    def drop(self, key: Hashable, observed_at: float) -> None:
        self._informer._change(cast(K, key), None, observed_at)

    def listed(self, keys: Collection[Hashable], observed_at: float) -> None:
        self._informer._relisted(keys, observed_at)


NodeInformer = SlurmInformer[str, Node]
JobInformer = SlurmInformer[int, Job]
_KEYS: dict[str, Callable[[Any], Hashable]] = {NODE: lambda node: node.name, JOB: lambda job: job.id}


class SlurmInformerFactory:
    """One informer per Slurm kind for one process (client-go's SharedInformerFactory): every reader of a
    kind in the process shares its one read of Slurm. ``intervals``: a kind's own period where it differs
    from ``interval`` (the Syncer polls nodes faster: an idle node poll is a few hundred bytes)."""

    def __init__(self, client: SlurmClient, *, interval: float = 1.0,
                 intervals: Optional[Mapping[str, float]] = None, job_full_every: float = 300.0,
                 keep_job: Optional[Callable[[Job], bool]] = None, **lister_options: Any):
        """``keep_job``: the jobs lister holds and reads only the jobs it accepts (``SlurmCache``'s; None: every
        job). ``lister_options``: passed to each kind's ``SlurmCache`` (tests: ``clock``, ``resync_every``, ...)."""
        self.client = client
        self.keep_job = keep_job
        self.interval = interval
        self.intervals = dict(intervals or {})
        self.job_full_every = job_full_every
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
                lister = SlurmCache(self.client, interval=self.intervals.get(kind, self.interval), kinds=(kind,),
                                    job_full_every=self.job_full_every, keep_job=self.keep_job if kind == JOB else None,
                                    **self.lister_options)
                informer = self._informers[kind] = SlurmInformer(lister, kind, _KEYS[kind])
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


__all__ = ["JOB", "NODE", "JobInformer", "NodeInformer", "ReadRequest", "ObservedStore", "SlurmInformer",
           "SlurmInformerFactory"]
