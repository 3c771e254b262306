"""Controllers: N workers draining a work queue into a level-based reconciler.

controller-runtime's contract, so reconcilers written for it read the same here:
- an exception -> logged, counted, key re-added rate-limited (backoff grows per key);
- ``Result(requeue_after=s)`` -> failures forgotten, key re-added after ``s`` seconds;
- ``Result(requeue=True)`` -> key re-added rate-limited;
- otherwise -> failures forgotten.
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
        self._duration = metrics.RECONCILE_DURATION.labels(controller=name)
        self._errors = metrics.RECONCILE_ERRORS.labels(controller=name)
        self._active = metrics.ACTIVE_WORKERS.labels(controller=name)
        self._results = {
            r: metrics.RECONCILE_TOTAL.labels(controller=name, result=r)
            for r in ("success", "error", "requeue", "requeue_after")
        }

    def enqueue(self, key: str) -> None:
        self.queue.add(key)

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
            else:
                log.exception("controller %s: reconcile %s failed (retry %d)", self.name, key, retry)
            self.queue.add_rate_limited(key)
            return
        finally:
            self._active.dec()
            self._duration.observe(time.perf_counter() - started)
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
