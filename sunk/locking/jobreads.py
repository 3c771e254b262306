"""One Slurm read of a job shared by every pre-hook that checks it at about the same time (single flight).

Why: Slurm runs the prolog on every node of a job at once, and each prolog's pre-hook must see
the job hold its node before it locks anything. The Slurm cache usually has not seen a job
allocated a moment ago, so each pre-hook would read the job, allocations of every node included:
a 64-node start read the same job 64 times (about 40 MB), a 1000-node one 1000 times. Here the
first caller reads and every caller for the same job within ``ttl`` takes that read: a job of N
nodes costs one read, not N.

What may be reused, and for how long:
- a job Slurm shows is kept ``ttl`` seconds (a positive answer a little old is safe: the job held
  the node when read, and a lock outlives its job only until the controller sees the job gone);
- an answer that refuses (no such job, ended, elsewhere, Slurm unreachable) is never taken from a
  read that began before the caller asked: ``fresh`` reads again, shared by the callers that ask
  meanwhile (a requeued job allocated anew must not be refused from its old record). Such answers
  leave the table when their read ends, so a flood of made-up job ids keeps nothing.
The table holds at most ``max_entries`` jobs, the oldest dropped first: its memory is bounded
whatever ids callers name. A caller that takes another's read waits for it at most its own
``timeout`` (what is left of its pre-hook's budget), then gets an error (a retryable 503): a Slurm
that hangs holds no thread longer than its caller would have waited anyway.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

import attrs

from sunk.model.slurm import Job
from sunk.slurm.errors import NotFound, SlurmError

DEFAULT_TTL = 5.0
DEFAULT_MAX_ENTRIES = 1024


@attrs.frozen
class JobRead:
    """One read's outcome: the job, or None when Slurm shows none, or the error; ``began`` on the reads' clock."""

    job_id: int
    began: float
    job: Job | None = None
    error: SlurmError | None = None


@attrs.define(eq=False)
class _Flight:
    began: float
    done: threading.Event = attrs.field(factory=threading.Event)
    result: JobRead | None = None


class SharedJobReads:
    """``recent(job_id)`` and ``fresh(job_id, asked_at)``: a JobRead, one Slurm read per burst of callers."""

    def __init__(self, read: Callable[[int], Job], *, ttl: float = DEFAULT_TTL,
                 max_entries: int = DEFAULT_MAX_ENTRIES, clock: Callable[[], float] = time.monotonic):
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._read = read
        self._ttl = ttl
        self._max_entries = max_entries
        self.clock = clock
        self._lock = threading.Lock()
        self._flights: OrderedDict[int, _Flight] = OrderedDict()  # by when their read began, oldest first
        self.reads = 0  # Slurm reads made, for tests and the benchmark

    def __len__(self) -> int:
        with self._lock:
            return len(self._flights)

    def recent(self, job_id: int, *, timeout: float) -> JobRead:
        """A read of the job begun within ``ttl`` (finished, or still running), else a new one."""
        now = self.clock()
        return self._join_or_read(job_id, lambda flight: flight.began >= now - self._ttl, now, timeout)

    def fresh(self, job_id: int, asked_at: float, *, timeout: float) -> JobRead:
        """A read of the job begun at or after ``asked_at`` (the caller's own clock reading, ``clock()``)."""
        return self._join_or_read(job_id, lambda flight: flight.began >= asked_at, self.clock(), timeout)

    def _join_or_read(self, job_id: int, usable: Callable[[_Flight], bool], now: float,
                      timeout: float) -> JobRead:
        with self._lock:
            flight = self._flights.get(job_id)
            mine = flight is None or not usable(flight)
            if mine:
                flight = _Flight(began=now)
                self._flights.pop(job_id, None)
                self._flights[job_id] = flight
                self._prune(now)
        assert flight is not None
        if not mine:
            if not flight.done.wait(max(timeout, 0.0)) or flight.result is None:
                return JobRead(job_id, flight.began, error=SlurmError(
                    f"the read of job {job_id} another pre-hook began did not end within {timeout:g}s"))
            return flight.result
        result = self._read_now(job_id, flight.began)
        with self._lock:
            self.reads += 1
            flight.result = result
            if result.job is None and self._flights.get(job_id) is flight:
                del self._flights[job_id]  # a refusal is kept by nobody but the callers that waited for it
        flight.done.set()
        return result

    def _read_now(self, job_id: int, began: float) -> JobRead:
        try:
            return JobRead(job_id, began, job=self._read(job_id))
        except NotFound:
            return JobRead(job_id, began)
        except SlurmError as exc:
            return JobRead(job_id, began, error=exc)
        except Exception as exc:  # (a bug: its waiters get an error too, never a hang)
            return JobRead(job_id, began, error=SlurmError(f"reading job {job_id} failed: {exc!r}"))

    def _prune(self, now: float) -> None:
        """Drop finished entries past their ``ttl``, and the oldest beyond ``max_entries`` (their waiters keep
        their own reference); called with the lock held."""
        while self._flights:
            oldest = next(iter(self._flights.values()))
            if len(self._flights) > self._max_entries or (oldest.done.is_set() and oldest.began < now - self._ttl):
                self._flights.popitem(last=False)
            else:
                break
