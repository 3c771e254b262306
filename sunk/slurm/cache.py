"""One shared, polled picture of Slurm's nodes and jobs, with change events.

Everything that needs Slurm's state reads it from here, from memory. The cache makes one
list call per kind per interval, whatever the number of readers: a burst of pending
Pods never becomes a burst of Slurm calls (slurm-bridge listed every job on every
scheduling attempt, and starved). It never makes a per-item call.

- Each list passes ``updated_since`` (Slurm's ``update_time``), so an idle cluster costs
  two "no change" answers per interval. Any answer with items is a full list; it is
  diffed against the previous one, and subscribers get one event per added, changed or
  removed item (with the old and the new value).
- Slurm unreachable: the error is logged once per outage, the last snapshot is kept, the
  cache reports itself not ``fresh``, and the next interval tries again. After an outage,
  after ``last_update`` went backwards (a restarted or failed-over slurmctld whose clock
  is behind), and every ``resync_every`` seconds, it relists without ``updated_since``,
  so a missed "changed" answer can never leave it wrong for good.
- A refresh that takes long (a full list of 10,000 jobs takes slurmrestd seconds to
  render) stretches the period so that the cache keeps Slurm busy at most ``max_busy``
  of the time: at that size the refresh rate is Slurm's to set, not ours.
- Subscribers run on the refreshing thread, one refresh at a time, in order; they must be
  quick and must not block on the cache. An exception in one is logged and swallowed.
- The end of an outage is an event too (``on_recovered``): the first refresh in which every
  kind lists again, after one failed, calls its listeners once the relist's own events are
  out. A Manager wakes with it every reconcile that waits out a backoff for the outage,
  which otherwise grew through the outage to minutes (the fault matrix's slurmrestd row).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Optional, Union

from attrs import frozen

from .client import SlurmClient, Snapshot
from .errors import SlurmError
from .models import Job, Node

log = logging.getLogger(__name__)

NODE = "node"
JOB = "job"
ADDED, CHANGED, REMOVED = "added", "changed", "removed"

Item = Union[Node, Job]


@frozen
class CacheEvent:
    kind: str  # "node" or "job"
    type: str  # "added", "changed" or "removed"
    key: Hashable  # node name or job id
    old: Optional[Any]  # None when added
    new: Optional[Any]  # None when removed
    # The cache clock when the list this came from was requested. A reader that also learns
    # of an item another way (a job's own call to a hook) keeps whichever it saw later.
    observed_at: float = 0.0


@frozen
class RefreshResult:
    ok: bool
    calls: int  # list calls (one per kind); see the backend's rpc_stats() for HTTP requests
    events: int
    seconds: float
    error: Optional[str] = None


@frozen
class CacheStats:
    refreshes: int
    failures: int
    calls: int
    events: int
    last_refresh_seconds: float


Subscriber = Callable[[CacheEvent], None]


def diff(kind: str, old: Mapping[Hashable, Any], new: Mapping[Hashable, Any],
         observed_at: float = 0.0) -> list[CacheEvent]:
    """Events turning ``old`` into ``new``: added, then changed, then removed, each by key."""
    added = [CacheEvent(kind, ADDED, k, None, v, observed_at) for k, v in new.items() if k not in old]
    changed = [CacheEvent(kind, CHANGED, k, old[k], v, observed_at)
               for k, v in new.items() if k in old and old[k] != v]
    removed = [CacheEvent(kind, REMOVED, k, v, None, observed_at) for k, v in old.items() if k not in new]
    return added + changed + removed


class _Kind:
    """The state kept for one list (nodes or jobs)."""

    def __init__(self, name: str, lister: Callable[..., Snapshot[Any]], key: Callable[[Any], Hashable]):
        self.name, self.lister, self.key = name, lister, key
        self.items: Mapping[Hashable, Any] = MappingProxyType({})
        self.listed_at = 0.0  # clock when the list behind ``items`` was requested
        self.last_update = 0
        self.synced = False
        self.full_next = True
        self.last_full = -math.inf
        self.last_ok = -math.inf
        self.failing: Optional[str] = None
        self.error: Optional[Exception] = None  # what the failing list raised
        self.failing_since = 0.0  # clock when the current outage began


class SlurmCache:
    def __init__(self, client: SlurmClient, *, interval: float = 1.0, resync_every: float = 60.0,
                 stale_after: Optional[float] = None, kinds: Sequence[str] = (NODE, JOB),
                 min_nudge_interval: float = 0.1, max_busy: float = 0.5, clock: Callable[[], float] = time.monotonic):
        if interval <= 0 or not 0 < max_busy <= 1:
            raise ValueError("interval must be positive and max_busy in (0, 1]")
        self.client = client
        self.interval = interval
        self.max_busy = max_busy
        self.resync_every = resync_every
        self.stale_after = stale_after if stale_after is not None else max(5.0, 3 * interval)
        self.min_nudge_interval = min_nudge_interval
        self._clock = clock
        known = {NODE: _Kind(NODE, client.list_nodes, lambda n: n.name),
                 JOB: _Kind(JOB, client.list_jobs, lambda j: j.id)}
        self._kinds = [known[k] for k in kinds]
        self._refresh_lock = threading.RLock()  # one refresh (and its dispatch) at a time
        self._changed = threading.Condition()  # notified after every refresh
        self._subscribers: list[tuple[Subscriber, frozenset[str]]] = []
        self._recovered: list[Callable[[], None]] = []
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._refreshes = self._failures = self._calls = self._events = 0
        self._last_seconds = 0.0

    # -- readers --------------------------------------------------------------------------------
    def nodes(self) -> Mapping[str, Node]:
        return self._kind(NODE).items  # type: ignore[return-value]

    def jobs(self) -> Mapping[int, Job]:
        return self._kind(JOB).items  # type: ignore[return-value]

    def node(self, name: str) -> Optional[Node]:
        return self.nodes().get(name)

    def job(self, job_id: int) -> Optional[Job]:
        return self.jobs().get(job_id)

    @property
    def synced(self) -> bool:
        """Every kind has been listed at least once."""
        return all(k.synced for k in self._kinds)

    @property
    def age(self) -> float:
        """Seconds since the oldest kind was last refreshed successfully (inf before the first)."""
        return self._clock() - min(k.last_ok for k in self._kinds)

    @property
    def fresh(self) -> bool:
        """Synced, the last refresh of every kind worked, and none is older than ``stale_after``."""
        return self.synced and not any(k.failing for k in self._kinds) and self.age <= self.stale_after

    @property
    def jobs_fresh(self) -> bool:
        """As ``fresh``: one cache keeps its kinds equally current (``SplitSlurmCache`` tells them apart)."""
        return self.fresh

    @property
    def last_error(self) -> Optional[str]:
        return next((k.failing for k in self._kinds if k.failing), None)

    @property
    def last_failure(self) -> Optional[Exception]:
        """What the failing list raised, while one fails (a ``SlurmError``: ``AuthenticationFailed``
        says Slurm refused the token); None once every kind lists again."""
        return next((k.error for k in self._kinds if k.error is not None), None)

    @property
    def failing_for(self) -> float:
        """Seconds since the current outage began; 0 when every kind lists."""
        since = [k.failing_since for k in self._kinds if k.error is not None]
        return self._clock() - min(since) if since else 0.0

    def stats(self) -> CacheStats:
        with self._changed:
            return CacheStats(self._refreshes, self._failures, self._calls, self._events, self._last_seconds)

    # -- subscribers ----------------------------------------------------------------------------
    def subscribe(self, callback: Subscriber, *, kinds: Optional[Sequence[str]] = None,
                  replay: bool = True) -> Callable[[], None]:
        """Call ``callback`` for every event; with ``replay``, first an "added" for each item held now.

        Returns a function that unsubscribes.
        """
        wanted = frozenset(kinds or (k.name for k in self._kinds))
        entry = (callback, wanted)
        with self._refresh_lock:  # no refresh in between: nothing missed, nothing twice
            self._subscribers.append(entry)
            if replay:
                for kind in self._kinds:
                    if kind.name in wanted:
                        self._dispatch(diff(kind.name, {}, kind.items, kind.listed_at), only=entry)

        def unsubscribe() -> None:
            with self._refresh_lock:
                if entry in self._subscribers:
                    self._subscribers.remove(entry)

        return unsubscribe

    def on_recovered(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` whenever an outage ends: the first refresh in which every kind lists
        again after one failed (on the refreshing thread, after that refresh's events; quick, as a
        subscriber). Returns a function that unsubscribes."""
        with self._refresh_lock:
            self._recovered.append(callback)

        def unsubscribe() -> None:
            with self._refresh_lock:
                if callback in self._recovered:
                    self._recovered.remove(callback)

        return unsubscribe

    # -- refreshing -------------------------------------------------------------------------------
    def refresh(self) -> RefreshResult:
        """One list call per kind, diff, publish, notify. Never raises for Slurm errors."""
        with self._refresh_lock:
            started = self._clock()
            calls = events = 0
            errors = []
            in_outage = any(kind.error is not None for kind in self._kinds)
            for kind in self._kinds:
                calls += 1
                try:
                    found = self._refresh_kind(kind)
                except Exception as exc:  # SlurmError, or an answer we could not map: stale either way
                    if not isinstance(exc, SlurmError):
                        log.exception("Slurm %s list could not be used", kind.name)
                    errors.append(f"{kind.name}s: {exc}")
                    self._failed(kind, exc)
                    continue
                events += len(found)
                self._dispatch(found)
            seconds = self._clock() - started
            with self._changed:
                self._refreshes += 1
                self._failures += bool(errors)
                self._calls += calls
                self._events += events
                self._last_seconds = seconds
                self._changed.notify_all()
            if in_outage and not errors:
                self._outage_over()
            return RefreshResult(ok=not errors, calls=calls, events=events, seconds=seconds,
                                 error="; ".join(errors) or None)

    def _outage_over(self) -> None:
        for callback in list(self._recovered):
            try:
                callback()
            except Exception:
                log.exception("Slurm cache recovery listener %r failed", callback)

    def _refresh_kind(self, kind: _Kind) -> list[CacheEvent]:
        now = self._clock()
        full = kind.full_next or not kind.synced or now - kind.last_full >= self.resync_every
        snapshot = kind.lister(updated_since=None if full else kind.last_update or None)
        if kind.failing:
            log.info("Slurm %s list works again", kind.name)
        kind.failing = None
        kind.error = None
        kind.last_ok = self._clock()
        if snapshot.items is None:  # nothing changed since last_update
            return []
        new = {kind.key(item): item for item in snapshot.items}
        found = diff(kind.name, kind.items, new, now)
        kind.items = MappingProxyType(new)
        kind.listed_at = now
        if snapshot.last_update and snapshot.last_update < kind.last_update:
            log.warning("Slurm's %s last_update went backwards (%d < %d): relisting in full next time",
                        kind.name, snapshot.last_update, kind.last_update)
            kind.full_next = True
        else:
            kind.full_next = False
        kind.last_update = snapshot.last_update
        kind.synced = True
        if full:
            kind.last_full = now
        return found

    def _failed(self, kind: _Kind, exc: Exception) -> None:
        if kind.failing is None:
            log.warning("Slurm %s list failed, keeping the last snapshot (%d items): %s",
                        kind.name, len(kind.items), exc)
            kind.failing_since = self._clock()
        else:
            log.debug("Slurm %s list still failing: %s", kind.name, exc)
        kind.failing = str(exc)
        kind.error = exc
        kind.full_next = True  # whatever happened meanwhile, start again from a full list

    def _dispatch(self, events: list[CacheEvent],
                  only: Optional[tuple[Subscriber, frozenset[str]]] = None) -> None:
        for event in events:
            for callback, wanted in [only] if only else list(self._subscribers):
                if event.kind not in wanted:
                    continue
                try:
                    callback(event)
                except Exception:
                    log.exception("Slurm cache subscriber %r failed on %s %s %s", callback, event.kind,
                                  event.type, event.key)

    def _kind(self, name: str) -> _Kind:
        for kind in self._kinds:
            if kind.name == name:
                return kind
        raise KeyError(f"this cache does not hold {name}s")

    # -- background thread ---------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="slurm-cache", daemon=True)
        self._thread.start()

    def stop(self, timeout: Optional[float] = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread:
            self._thread.join(timeout)

    def nudge(self) -> None:
        """Refresh within ``min_nudge_interval`` instead of at the next interval.

        A burst of nudges within that window is one refresh; a nudge during a refresh
        gets another one after it, since the state may have changed meanwhile.
        """
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()  # nudges until now are served by this refresh
            started = self._clock()
            try:
                self.refresh()
            except Exception:  # a bug, not Slurm: keep polling anyway
                log.exception("Slurm cache refresh crashed")
            took = self._clock() - started
            rest = took / self.max_busy - took  # leave slurmctld and slurmrestd room
            nudged = self._wake.wait(max(self.interval - took, rest, 0.0))
            if nudged and not self._stop.is_set():
                # let the rest of a burst arrive, and still respect max_busy
                self._stop.wait(max(self.min_nudge_interval, started + took + rest - self._clock()))

    # -- waiting (with start and stop, what a Manager asks of an informer) ----------------------------
    def has_synced(self) -> bool:
        return self.synced

    def wait_for_sync(self, timeout: Optional[float] = None) -> bool:
        return self.wait_for(lambda: self.synced, timeout)

    def wait_for(self, predicate: Callable[[], bool], timeout: Optional[float] = None) -> bool:
        """Wait until ``predicate()`` holds after some refresh (``timeout`` None: for as long as it takes).

        Refreshes by itself if not started.
        """
        deadline = self._clock() + (math.inf if timeout is None else timeout)
        running = self._thread is not None and self._thread.is_alive()
        last_own = -math.inf
        while True:
            if predicate():
                return True
            remaining = deadline - self._clock()
            if remaining <= 0:
                return False
            if running:
                with self._changed:
                    self._changed.wait(min(remaining, self.interval))
                continue
            pause = min(remaining, self.interval - (self._clock() - last_own))
            if pause > 0:
                time.sleep(pause)
            last_own = self._clock()
            self.refresh()
