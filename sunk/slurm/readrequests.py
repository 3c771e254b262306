"""Per-job read requests: what a reader asks of the jobs lister, as data (``SlurmInformer.request_reads``).

Why: a job state list cannot show a change of a job's fields while its state stays the same (a
placeholder's prolog ending, a pending job's reason), and some reads are better made by someone else (the
scheduler's hook API reads a placeholder as its started call comes, seconds before a state list shows it).
The lister used to ask the scheduler about each job during its refresh (callbacks into the layer above);
now the scheduler's job handler writes, per job, "read it every N seconds" and "wait up to P seconds for a
read made elsewhere", and the lister reads this table. The clients layer holds the requests and knows
nothing of why they were made.

The table is bounded: a job removed from the lister's store drops out, a full list drops the requests of
jobs it does not show (made before the list was requested), and past ``limit`` the oldest request goes (its
job is then read as any other: at once, and only when its state changes).

A lister that keeps only its readers' jobs (``SlurmCache(keep_job=...)``: the scheduler's placeholders)
reads a job it does not hold only when a request names it (``ReadRequest.expected``: just submitted) or
while some reader asks for every new job (``read_new_jobs``: a submission whose answer was lost, a
replica standing by), so the other tenants' jobs cost it no read.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Mapping
from typing import Optional

from attrs import frozen

from sunk.model.slurm import Job, JobState

log = logging.getLogger(__name__)

WAITING_STATES = ("PENDING", "RUNNING")  # a job on its way to, or in, its start


@frozen
class ReadRequest:
    """What a reader asks of the jobs lister for one job."""

    # Seconds after its last read that the job is read again though its state did not change; 0: at every
    # refresh; None: only when its state changes.
    every: Optional[float] = None
    # Seconds a read its state change asks for may wait for a record read elsewhere (``observe``): only for a
    # change to RUNNING (from PENDING or RUNNING), or a new job PENDING or RUNNING; an end or a requeue is
    # read at once.
    wait_up_to: float = 0.0
    # The reader made this job (it submitted it): read it when a state list first shows it, even in a lister
    # that reads only the jobs it holds (``SlurmCache(keep_job=...)``).
    expected: bool = False

    @property
    def empty(self) -> bool:
        return self.every is None and self.wait_up_to <= 0 and not self.expected

    def due(self, now: float, last_read: float) -> bool:
        """Its periodic read is due, the job last read at ``last_read``."""
        return self.every is not None and now - last_read >= self.every

    def patience(self, held: Optional[Job], listed: JobState) -> float:
        """Seconds the read of a job listed as ``listed``, held as ``held`` (None: new), may wait."""
        if self.wait_up_to <= 0 or listed.state not in WAITING_STATES:
            return 0.0
        if held is None:
            return self.wait_up_to
        return self.wait_up_to if listed.state == "RUNNING" and held.state in WAITING_STATES else 0.0


class ReadRequests:
    """job id -> ``ReadRequest``, bounded; written by any thread, read by the lister once per refresh."""

    def __init__(self, limit: int = 65536):
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = limit
        self._lock = threading.Lock()
        self._requests: dict[int, tuple[ReadRequest, float]] = {}  # -> (request, when made), oldest first
        self._warned = False
        self._new_jobs_since: dict[str, float] = {}  # reason -> since when every new job is to be read

    def request(self, job_id: int, request: Optional[ReadRequest], at: float) -> None:
        """Set ``job_id``'s request (made at ``at``, the lister's clock); None or an empty one cancels it."""
        with self._lock:
            self._requests.pop(job_id, None)  # (re-inserted at the end: the dict stays oldest first)
            if request is None or request.empty:
                return
            self._requests[job_id] = (request, at)
            while len(self._requests) > self.limit:
                oldest = next(iter(self._requests))
                del self._requests[oldest]
                if not self._warned:
                    log.warning("more than %d Slurm job read requests: dropping the oldest (job %d is read as any "
                                "other)", self.limit, oldest)
                    self._warned = True

    def cancel(self, job_id: int) -> None:
        with self._lock:
            self._requests.pop(job_id, None)

    def get(self, job_id: int) -> Optional[ReadRequest]:
        with self._lock:
            found = self._requests.get(job_id)
        return found[0] if found is not None else None

    def snapshot(self) -> Mapping[int, ReadRequest]:
        """Every request now (a copy: one refresh reads one table)."""
        with self._lock:
            return {job_id: request for job_id, (request, _at) in self._requests.items()}

    def forget(self, job_ids: Collection[int]) -> None:
        """These jobs are gone from the lister's store: their requests go with them."""
        if not job_ids:
            return
        with self._lock:
            for job_id in job_ids:
                self._requests.pop(job_id, None)

    def keep_only(self, listed: Collection[int], requested_at: float) -> None:
        """A full list requested at ``requested_at`` shows only ``listed``: a request for a job it does not show,
        made before it, is for a job that ended (or was never made)."""
        with self._lock:
            self._requests = {job_id: entry for job_id, entry in self._requests.items()
                              if job_id in listed or entry[1] > requested_at}

    def read_new_jobs(self, reason: str, since: Optional[float]) -> None:
        """For ``reason``, ask that a lister keeping only its readers' jobs read every job it does not hold
        that a state list requested at ``since`` or later first showed (one read each: a job it then finds
        not to keep is not read again); None: stop asking for ``reason``. ``since`` is the lister's clock;
        ``-math.inf``: every job it has not read yet."""
        with self._lock:
            if since is None:
                self._new_jobs_since.pop(reason, None)
            else:
                self._new_jobs_since[reason] = since

    @property
    def new_jobs_since(self) -> Optional[float]:
        """The earliest ``since`` asked for (``read_new_jobs``); None: read only the jobs held or requested."""
        with self._lock:
            return min(self._new_jobs_since.values(), default=None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._requests)


__all__ = ["ReadRequest", "ReadRequests"]
