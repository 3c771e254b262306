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
Keys wait per dependency (``Outage.dependency``: "slurm", "kubernetes"): the end of the
apiserver's outage wakes the keys that failed for it, not those waiting for Slurm. An outage
that says how long to wait (a 429's Retry-After) is retried after that long instead.

Two more, after controller-runtime:
- a ``TerminalError`` (RBAC refused a write, the object is invalid) -> logged once with what
  to fix, counted (``sunk_reconcile_terminal_errors_total``), key not requeued: retrying cannot
  mend it, and the next change to its object enqueues it again;
- with a Lease ``fence`` (a leader-only controller), each reconcile runs fenced
  (``sunk.base.fence``): a write after the renew deadline is never sent but raises ``Fenced``,
  logged in one line and retried with backoff (never sent while the fence is down: the Manager
  stops the process, or a late renewal lands and the retry goes through).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

import attrs

from sunk.base import fence as fencing
from sunk.base.fence import Fenced, LeaseFence
from sunk.controller import metrics
from sunk.controller.workqueue import RateLimiter, WorkQueue
from sunk.model.types import Outage, TerminalError

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
        self.fence: LeaseFence | None = None  # set by a Manager with leader election: writes ask it first
        self._outage_lock = threading.Lock()
        self._outage_keys: dict[str, set[str]] = {}  # by dependency: keys whose last reconcile failed for it
        self._outages_over = 0  # outage_over() calls so far: a reconcile that spans one retries at once
        self._duration = metrics.RECONCILE_DURATION.labels(controller=name)
        self._errors = metrics.RECONCILE_ERRORS.labels(controller=name)
        self._terminal = metrics.RECONCILE_TERMINAL_ERRORS.labels(controller=name)
        self._active = metrics.ACTIVE_WORKERS.labels(controller=name)
        self._results = {
            r: metrics.RECONCILE_TOTAL.labels(controller=name, result=r)
            for r in ("success", "error", "requeue", "requeue_after")
        }

    def enqueue(self, key: str) -> None:
        self.queue.add(key)

    def outage_over(self, dependency: str | None = None) -> int:
        """``dependency``'s outage is over (None: every one's): its keys are reconciled now, not after their backoff.

        Their failures are forgotten (they were the outage's, not the key's). Returns how many keys
        were woken. Safe from any thread; cheap (queue adds only).
        """
        with self._outage_lock:
            if dependency is None:
                waiting, self._outage_keys = self._outage_keys, {}
                keys = set().union(*waiting.values())
            else:
                keys = self._outage_keys.pop(dependency, set())
            self._outages_over += 1
        for key in keys:
            self.queue.forget(key)
            self.queue.add(key)
        if keys:
            log.info("controller %s: the %s outage is over; reconciling the %d keys that waited for it now",
                     self.name, dependency or "", len(keys))
        return len(keys)

    def waiting_for(self, dependency: str) -> int:
        """How many keys wait for ``dependency``'s outage to end (the Manager probes only while some do)."""
        with self._outage_lock:
            return len(self._outage_keys.get(dependency, ()))

    def _outage_failed(self, key: str, dependency: str, since: int) -> bool:
        """Note ``key`` as waiting for the outage; True when an outage ended while it was reconciled."""
        with self._outage_lock:
            if self._outages_over != since:
                return True
            for other in [d for d, keys in self._outage_keys.items() if d != dependency and key in keys]:
                self._outage_keys[other].discard(key)
                if not self._outage_keys[other]:
                    del self._outage_keys[other]
            self._outage_keys.setdefault(dependency, set()).add(key)
            return False

    def _not_waiting(self, key: str) -> None:
        if self._outage_keys:  # (read without the lock: the common case costs nothing)
            with self._outage_lock:
                for dependency in [d for d, keys in self._outage_keys.items() if key in keys]:
                    self._outage_keys[dependency].discard(key)
                    if not self._outage_keys[dependency]:
                        del self._outage_keys[dependency]

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

    def _failed(self, key: str, exc: Exception, since: int) -> None:
        """Log a failed reconcile as its kind asks, and decide when ``key`` is tried again."""
        retry = self.queue.num_requeues(key)
        if isinstance(exc, Fenced):
            # Not sent: the Lease was not renewed within its deadline. Either it is lost, and the Manager stops
            # us (the next leader takes over; a retry here is fenced again, never sent), or the renewal was only
            # late (an apiserver that hung through an etcd outage answered it after the deadline) and this
            # replica leads on: dropped, the key would never be reconciled again (a node left locked with no
            # job, the fault matrix's etcd row). So it is retried, with backoff, like any failure.
            self._not_waiting(key)
            log.warning("controller %s: reconcile %s stopped, retried once the Lease is renewed: %s",
                        self.name, key, exc)
            self.queue.add_rate_limited(key)
            return
        if isinstance(exc, TerminalError):
            self._not_waiting(key)
            self._terminal.inc()
            self.queue.forget(key)
            log.error("controller %s: reconcile %s failed, not retried until its object changes: %s%s",
                      self.name, key, exc, f" (to fix: {exc.fix})" if exc.fix else "")
            return
        if isinstance(exc, Outage):  # expected while a dependency is down: one line, no traceback
            if exc.retry_after is not None and exc.retry_after > 0:  # it said when: ask again then, not before
                self._not_waiting(key)
                log.warning("controller %s: reconcile %s retried in %gs as asked (retry %d): %s",
                            self.name, key, exc.retry_after, retry, exc)
                self.queue.add_after(key, exc.retry_after)
                return
            log.warning("controller %s: reconcile %s waits for an outage (retry %d): %s",
                        self.name, key, retry, exc)
            if self._outage_failed(key, exc.dependency, since):  # one ended meanwhile: no backoff to wait out
                self.queue.forget(key)
                self.queue.add(key)
                return
        else:
            self._not_waiting(key)
            log.exception("controller %s: reconcile %s failed (retry %d)", self.name, key, retry)
        self.queue.add_rate_limited(key)

    def process(self, key: str) -> None:
        """One reconcile of ``key`` and its requeue decision (the queue's done() is the caller's)."""
        started = time.perf_counter()
        since = self._outages_over
        self._active.inc()
        try:
            with fencing.fenced(self.fence):
                result = self.reconciler.reconcile(key) or Result()
        except Exception as exc:
            self._errors.inc()
            self._results["error"].inc()
            self._failed(key, exc, since)
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
