"""A rate-limited work queue of string keys, with client-go's workqueue semantics.

Why these semantics: reconciles are level-based, so a key queued many times needs
processing once (dedup); a key must never be reconciled by two workers at once, yet a
change that arrives while it is being reconciled must not be lost (dirty/processing);
failures back off per key so one bad object cannot hot-loop while others proceed.

Workers wait on one condition variable: no polling. Delayed keys live in a heap that
``get`` promotes when due, sleeping exactly until the earliest one. A change wakes one waiter,
never all: every reconcile that asks to be looked at again adds a delayed key, and waking every
idle worker for each (16 threads to find nothing and sleep again) was, with the wake-ups of an
idle queue, a tenth of the scheduler's CPU in a burst of gangs. A worker that goes to sleep while
a delayed key heads the heap sleeps until its deadline; a new earliest deadline wakes one waiter,
and a worker that slept on a deadline hands it on to another waiter when it takes a key or times
out. ``shutdown(drain=True)`` waits on a condition of its own.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from sunk.controller import metrics


class RateLimiter(Protocol):
    """How long a key should wait before its next retry."""

    def when(self, key: str) -> float: ...
    def forget(self, key: str) -> None: ...
    def num_requeues(self, key: str) -> int: ...


class ItemExponentialRateLimiter:
    """Per key: ``base * 2**failures``, capped. ``forget`` resets the key."""

    def __init__(self, base: float = 0.005, cap: float = 300.0):
        if base <= 0 or cap < base:
            raise ValueError("need 0 < base <= cap")
        self.base, self.cap = base, cap
        self._failures: dict[str, int] = {}
        self._lock = threading.Lock()

    def when(self, key: str) -> float:
        with self._lock:
            n = self._failures.get(key, 0)
            self._failures[key] = n + 1
        if n >= 62:  # 2**62 * any base is past any cap; avoid float overflow
            return self.cap
        return min(self.cap, self.base * (2**n))

    def forget(self, key: str) -> None:
        with self._lock:
            self._failures.pop(key, None)

    def num_requeues(self, key: str) -> int:
        with self._lock:
            return self._failures.get(key, 0)


class BucketRateLimiter:
    """An overall token bucket (qps, burst): caps the total retry rate when everything fails.

    Reservation style: each call takes a token now or books the next free one, and returns
    how long to wait for it.
    """

    def __init__(self, qps: float = 10.0, burst: int = 100, clock: Callable[[], float] = time.monotonic):
        if qps <= 0 or burst < 1:
            raise ValueError("need qps > 0 and burst >= 1")
        self.qps, self.burst, self._clock = qps, burst, clock
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def when(self, key: str) -> float:
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def forget(self, key: str) -> None:
        pass

    def num_requeues(self, key: str) -> int:
        return 0


class MaxOfRateLimiter:
    """The longest wait any of the limiters asks for."""

    def __init__(self, *limiters: RateLimiter):
        if not limiters:
            raise ValueError("need at least one limiter")
        self.limiters = limiters

    def when(self, key: str) -> float:
        return max(limiter.when(key) for limiter in self.limiters)

    def forget(self, key: str) -> None:
        for limiter in self.limiters:
            limiter.forget(key)

    def num_requeues(self, key: str) -> int:
        return max(limiter.num_requeues(key) for limiter in self.limiters)


def default_rate_limiter() -> RateLimiter:
    """client-go's controller default: per key 5 ms doubling to a 5 min cap, and at most
    10 retries/s overall (burst 100), so a dead slurmctld is not hammered by 5000 keys."""
    return MaxOfRateLimiter(ItemExponentialRateLimiter(0.005, 300.0), BucketRateLimiter(10.0, 100))


class WorkQueue:
    """Dedup + exclusive processing + delays + per-key rate limiting.

    - ``add(k)`` twice before a worker takes ``k``: processed once.
    - ``add(k)`` while ``k`` is being processed: ``k`` is queued again when ``done(k)``
      is called, never handed to a second worker concurrently.
    - ``add_after(k, d)``: ``k`` becomes ready after ``d`` seconds (earliest request wins).
    - ``add_rate_limited(k)``: ``add_after(k, limiter.when(k))``; ``forget(k)`` resets it.
    - ``shutdown()``: ``get`` returns None at once; queued and delayed keys are dropped
      (state lives in Kubernetes and Slurm; the next process relists and requeues).
    """

    def __init__(
        self,
        name: str = "",
        rate_limiter: RateLimiter | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.name = name
        self.rate_limiter = rate_limiter if rate_limiter is not None else default_rate_limiter()
        self._clock = clock
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # workers: a key to hand out, or an earlier deadline
        self._drained = threading.Condition(self._lock)  # shutdown(drain=True): nothing in processing
        self._queue: deque[str] = deque()
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._waiting: dict[str, float] = {}  # key -> ready time (earliest requested)
        self._heap: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._enqueued_at: dict[str, float] = {}
        self._shutting_down = False
        self._depth = metrics.WORKQUEUE_DEPTH.labels(name=name)
        self._adds = metrics.WORKQUEUE_ADDS.labels(name=name)
        self._retries = metrics.WORKQUEUE_RETRIES.labels(name=name)
        self._latency = metrics.WORKQUEUE_QUEUE_DURATION.labels(name=name)

    # ---- producers ----------------------------------------------------------------------

    def add(self, key: str) -> None:
        with self._cond:
            self._add_locked(key)

    def add_after(self, key: str, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shutting_down:
                return
            ready = self._clock() + delay
            current = self._waiting.get(key)
            if current is not None and current <= ready:
                return
            self._waiting[key] = ready
            seq = next(self._seq)
            heapq.heappush(self._heap, (ready, seq, key))
            if self._heap[0][1] == seq:  # the new earliest deadline: a sleeping get() must wake for it
                self._cond.notify()

    def add_rate_limited(self, key: str) -> None:
        self._retries.inc()
        self.add_after(key, self.rate_limiter.when(key))

    def forget(self, key: str) -> None:
        """Stop tracking the key's failures (call after a successful reconcile)."""
        self.rate_limiter.forget(key)

    def num_requeues(self, key: str) -> int:
        return self.rate_limiter.num_requeues(key)

    # ---- consumers ----------------------------------------------------------------------

    def get(self, timeout: float | None = None) -> str | None:
        """Block for the next key and mark it processing; None on shutdown (or timeout).

        Every key returned must be passed to ``done`` afterwards.
        """
        deadline = None if timeout is None else self._clock() + timeout
        timed = False  # this worker slept until a delayed key's deadline: it may keep the earliest timer
        with self._cond:
            while True:
                if self._shutting_down:
                    return None
                now = self._clock()
                self._promote_due(now)
                if self._queue:
                    break
                wait = self._heap[0][0] - now if self._heap else None
                timed = wait is not None
                if deadline is not None:
                    if now >= deadline:
                        if timed:
                            self._cond.notify()  # the timer passes to another waiter
                        return None
                    wait = deadline - now if wait is None else min(wait, deadline - now)
                self._cond.wait(wait)
            key = self._queue.popleft()
            if timed and self._heap:
                self._cond.notify()  # this worker goes to work: the timer passes to another waiter
            self._processing.add(key)
            self._dirty.discard(key)
            self._depth.set(len(self._queue))
            started = self._enqueued_at.pop(key, None)
        if started is not None:
            self._latency.observe(max(0.0, self._clock() - started))
        return key

    def done(self, key: str) -> None:
        """The worker finished ``key``; if it was re-added meanwhile, queue it now."""
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty and not self._shutting_down:
                self._queue.append(key)
                self._enqueued_at.setdefault(key, self._clock())
                self._depth.set(len(self._queue))
                self._cond.notify()
            if not self._processing:
                self._drained.notify_all()

    # ---- lifecycle and introspection ------------------------------------------------------

    def shutdown(self, drain: bool = False, timeout: float | None = None) -> bool:
        """Stop handing out keys. With ``drain``, wait until in-flight keys are done.

        Returns False only if draining timed out.
        """
        with self._cond:
            self._shutting_down = True
            self._queue.clear()
            self._dirty.clear()
            self._waiting.clear()
            self._heap.clear()
            self._depth.set(0)
            self._cond.notify_all()
            if drain:
                return self._drained.wait_for(lambda: not self._processing, timeout)
        return True

    @property
    def shutting_down(self) -> bool:
        with self._cond:
            return self._shutting_down

    def __len__(self) -> int:
        """Keys ready to be handed out (delayed keys count once they are due)."""
        with self._cond:
            self._promote_due(self._clock())
            return len(self._queue)

    def waiting(self) -> int:
        """Keys scheduled for later (add_after / add_rate_limited) and not yet due."""
        with self._cond:
            return len(self._waiting)

    def processing(self) -> int:
        with self._cond:
            return len(self._processing)

    # ---- internals (lock held) ------------------------------------------------------------

    def _add_locked(self, key: str) -> None:
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        self._adds.inc()
        self._enqueued_at.setdefault(key, self._clock())
        if key in self._processing:
            return  # queued again by done()
        self._queue.append(key)
        self._depth.set(len(self._queue))
        self._cond.notify()

    def _promote_due(self, now: float) -> None:
        while self._heap and self._heap[0][0] <= now:
            ready, _, key = heapq.heappop(self._heap)
            if self._waiting.get(key) == ready:  # else superseded by an earlier request
                del self._waiting[key]
                self._add_locked(key)
