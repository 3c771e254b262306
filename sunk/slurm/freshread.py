"""A read of Slurm that began after the caller asked, shared by every caller waiting for one.

Why: some decisions must not be taken from the Slurm cache, which may be a poll interval old:
the Syncer removing a drain a person may have set a moment ago, the scheduler deciding whether
a submission whose answer was lost made a job. Those take the decision again from a list that
*started after* they asked. Why shared: such callers come in bursts (a rack cordoned, a
slurmrestd that timed out every submission at once), and a list per caller would be N full
lists. Callers that arrive while a list is running wait for the next one, and all of them share
it: a burst of N costs about two lists.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class FreshRead(Generic[T]):
    """``read()``: what ``fn()`` returned in a call that began after ``read()`` was called."""

    def __init__(self, fn: Callable[[], T], *, clock: Callable[[], float] = time.monotonic):
        self._fn = fn
        self._clock = clock
        self.calls = 0  # calls of fn made, for metrics and tests
        self._cond = threading.Condition()
        self._started = 0  # generation of the last call begun
        self._finished = 0  # generation of the last call ended
        self._running = False
        self._value: T | None = None
        self._requested_at = 0.0
        self._error: BaseException | None = None
        self._waiting = 0  # callers waiting for a call to end

    @property
    def waiting(self) -> int:
        """Callers waiting for a call of ``fn`` under way to end (to take its value, or to begin the next)."""
        with self._cond:
            return self._waiting

    def read(self) -> T:
        """The value of a call that began after this one did. Raises what that call raised."""
        return self.read_with_time()[0]

    def read_with_time(self) -> tuple[T, float]:
        """As ``read``, with the clock reading taken just before that call began (its observation time)."""
        with self._cond:
            target = self._started + 1
            while self._finished < target:
                if self._running:
                    self._waiting += 1
                    try:
                        self._cond.wait()
                    finally:
                        self._waiting -= 1
                    continue
                self._running = True
                self._started += 1
                generation = self._started
                self._cond.release()
                value: T | None = None
                error: BaseException | None = None
                requested_at = self._clock()
                try:
                    value = self._fn()
                except BaseException as exc:  # handed to every waiter of this generation
                    error = exc
                finally:
                    self._cond.acquire()
                self.calls += 1
                self._value, self._error, self._requested_at = value, error, requested_at
                self._finished = generation
                self._running = False
                self._cond.notify_all()
            if self._error is not None:
                raise self._error
            return self._value, self._requested_at  # type: ignore[return-value]
