"""Controllers: N workers draining a work queue into a level-based reconciler.

controller-runtime's contract, so reconcilers written for it read the same here:
- an exception -> logged, counted, key re-added rate-limited (backoff grows per key);
- ``Result(requeue_after=s)`` -> failures forgotten, key re-added after ``s`` seconds;
- ``Result(requeue=True)`` -> key re-added rate-limited;
- otherwise -> failures forgotten.

One addition: a key whose reconcile failed for an ``Outage`` (Slurm unreachable, our token
refused) waits out its backoff only while the outage lasts. ``outage_over()`` (a Manager calls
it when its Slurm cache lists again) re-adds every such key at once, with its failures
forgotten: through a long outage the per-key backoff grows to minutes (5 ms doubling, 300 s
cap), and a job whose Pod was deleted meanwhile would stay uncancelled that long after Slurm
is back. The backoff retry stays scheduled too, for a process whose outage never ends in an event.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

import attrs

from sunk.controller import metrics
from sunk.controller.workqueue import RateLimiter, WorkQueue
from sunk.types import Outage

log = logging.getLogger(__name__)


@attrs.frozen
class Result:
    """What a reconcile asks for next."""

    requeue: bool = False
    requeue_after: float | None = None


class Reconciler(Protocol):
    def reconcile(self, key: str) -> Result | None:
        """Make the world match the desired state for ``key``; idempotent and level-based."""
        ...


class Controller:
    """Runs ``workers`` threads: get key -> reconcile -> requeue per the result -> done."""

    def __init__(
        self,
        name: str,
        reconciler: Reconciler,
        workers: int = 1,
        queue: WorkQueue | None = None,
        rate_limiter: RateLimiter | None = None,
    ):
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.name = name
        self.reconciler = reconciler
        self.workers = workers
        self.queue = queue if queue is not None else WorkQueue(name, rate_limiter)
        self._threads: list[threading.Thread] = []
        self._started = False
        self._outage_lock = threading.Lock()
        self._outage_keys: set[str] = set()  # keys whose last reconcile failed for an Outage
        self._outages_over = 0  # outage_over() calls so far: a reconcile that spans one retries at once
        self._duration = metrics.RECONCILE_DURATION.labels(controller=name)
        self._errors = metrics.RECONCILE_ERRORS.labels(controller=name)
        self._active = metrics.ACTIVE_WORKERS.labels(controller=name)
        self._results = {
            r: metrics.RECONCILE_TOTAL.labels(controller=name, result=r)
            for r in ("success", "error", "requeue", "requeue_after")
        }

    def enqueue(self, key: str) -> None:
        self.queue.add(key)

    def outage_over(self) -> int:
        """The outage is over: every key that failed for it is reconciled now, not after its backoff.

        Its failures are forgotten (they were the outage's, not the key's). Returns how many keys
        were woken. Safe from any thread; cheap (queue adds only).
        """
        with self._outage_lock:
            keys, self._outage_keys = self._outage_keys, set()
            self._outages_over += 1
        for key in keys:
            self.queue.forget(key)
            self.queue.add(key)
        if keys:
            log.info("controller %s: the outage is over; reconciling the %d keys that waited for it now",
                     self.name, len(keys))
        return len(keys)

    def _outage_failed(self, key: str, since: int) -> bool:
        """Note ``key`` as waiting for the outage; True when the outage ended while it was reconciled."""
        with self._outage_lock:
            if self._outages_over != since:
                return True
            self._outage_keys.add(key)
            return False

    def _not_waiting(self, key: str) -> None:
        if key in self._outage_keys:  # (read without the lock: the common case costs nothing)
            with self._outage_lock:
                self._outage_keys.discard(key)

    def start(self) -> None:
        if self._started:
            raise RuntimeError(f"controller {self.name} already started")
        self._started = True
        for i in range(self.workers):
            t = threading.Thread(target=self._worker, name=f"{self.name}-worker-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        log.info("controller %s: started %d workers", self.name, self.workers)

    def stop(self, timeout: float | None = 30.0) -> bool:
        """Stop handing out keys and wait for in-flight reconciles. False if they outlast ``timeout``."""
        drained = self.queue.shutdown(drain=True, timeout=timeout)
        for t in self._threads:
            t.join(0 if not drained else timeout)
        return drained and not any(t.is_alive() for t in self._threads)

    @property
    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def _worker(self) -> None:
        while (key := self.queue.get()) is not None:
            try:
                self.process(key)
            finally:
                self.queue.done(key)

    def process(self, key: str) -> None:
        """One reconcile of ``key`` and its requeue decision (the queue's done() is the caller's)."""
        started = time.perf_counter()
        since = self._outages_over
        self._active.inc()
        try:
            result = self.reconciler.reconcile(key) or Result()
        except Exception as exc:
            self._errors.inc()
            self._results["error"].inc()
            retry = self.queue.num_requeues(key)
            if isinstance(exc, Outage):  # expected while a dependency is down: one line, no traceback
                log.warning("controller %s: reconcile %s waits for an outage (retry %d): %s",
                            self.name, key, retry, exc)
                if self._outage_failed(key, since):  # it ended meanwhile: no backoff to wait out
                    self.queue.forget(key)
                    self.queue.add(key)
                    return
            else:
                self._not_waiting(key)
                log.exception("controller %s: reconcile %s failed (retry %d)", self.name, key, retry)
            self.queue.add_rate_limited(key)
            return
        finally:
            self._active.dec()
            self._duration.observe(time.perf_counter() - started)
        self._not_waiting(key)
        if result.requeue_after is not None and result.requeue_after > 0:
            self._results["requeue_after"].inc()
            self.queue.forget(key)
            self.queue.add_after(key, result.requeue_after)
        elif result.requeue:
            self._results["requeue"].inc()
            self.queue.add_rate_limited(key)
        else:
            self._results["success"].inc()
            self.queue.forget(key)
