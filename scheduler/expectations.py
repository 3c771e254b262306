"""What the scheduler expects of Slurm's jobs that its informer cannot show yet (controller-runtime's
``ControllerExpectations``, kube-scheduler's assume cache), per unit key (a Pod's UID or a gang's owner).

Why: the jobs informer is a poll interval behind the scheduler's own writes. Without a memory of them a
unit reconciled twice between two refreshes is submitted twice, a unit Slurm refused is submitted again at
its next update, and a unit whose submit answer was lost (Slurm may or may not have made the job) is
submitted again while its first job may exist. So, per key, one of:

- ``expect(key, job_id)``: submitted, Slurm answered with the job id; met once the informer shows the job
  (``observed``) or after ``ttl`` (the job ended and was purged unseen: the informer's view is the truth);
- ``refuse(key, message)``: Slurm refused the submission; no second one before ``ttl``;
- ``doubt(key)``: the answer was lost; no submission until the informer shows the unit's job
  (``observed``) or a list the informer *requested* ``doubt_margin`` *after* the doubt shows none
  (``listed``): the doubt is settled from the informer's own lists, never by an extra Slurm call per unit;
- ``settle(key)``: whatever was expected of the key is over (its Pods are gone).

A later call replaces an earlier one for the same key (a resubmission after a refusal expired, say).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Optional, Union

from attrs import frozen


@frozen
class Expected:
    """Submitted as ``job_id``; the informer has not shown that job yet."""

    job_id: int
    since: float


@frozen
class Refused:
    """Slurm refused the unit's submission, saying ``message``."""

    message: str
    since: float


@frozen
class Doubted:
    """A submission was sent at ``since`` and its answer lost."""

    since: float


Expectation = Union[Expected, Refused, Doubted]


class SubmitExpectations:
    """The scheduler's expectations of its jobs informer, by unit key (module notes). Thread-safe."""

    def __init__(self, ttl: float = 300.0, clock: Callable[[], float] = time.monotonic, doubt_margin: float = 10.0,
                 on_doubt: Optional[Callable[[str, Optional[Doubted]], None]] = None):
        """``ttl``: how long an expectation or a refusal is kept unmet; ``clock``: the informer's clock
        (a doubt is compared with the time the informer's lists were requested); ``doubt_margin``: how much
        later than the doubt a list must be requested to settle it. A client gives up after Slurm's
        MessageTimeout (10 s by default) while slurmctld may still be working on the submission: a list
        taken at once may not show a job made just after it. ``on_doubt(key, doubt)``: a key's doubt begins
        (the Doubted) or ends (None), under this object's lock: what the jobs lister must read meanwhile."""
        self._ttl = ttl
        self._on_doubt = on_doubt
        self._doubt_margin = doubt_margin
        self._clock = clock
        self._lock = threading.Lock()
        self._by_key: dict[str, Expectation] = {}
        self._key_of_job: dict[int, str] = {}  # expected job id -> its key

    def expect(self, key: str, job_id: int) -> None:
        with self._lock:
            self._set(key, Expected(job_id, self._clock()))

    def refuse(self, key: str, message: str) -> None:
        with self._lock:
            self._set(key, Refused(message, self._clock()))

    def doubt(self, key: str) -> None:
        with self._lock:
            self._set(key, Doubted(self._clock()))

    def settle(self, key: str) -> None:
        with self._lock:
            self._set(key, None)

    def get(self, key: str) -> Optional[Expectation]:
        """What is expected of ``key`` now; an expectation or refusal past its ``ttl`` is dropped here."""
        with self._lock:
            found = self._by_key.get(key)
            if isinstance(found, (Expected, Refused)) and self._clock() - found.since > self._ttl:
                self._set(key, None)
                return None
            return found

    def key_of(self, job_id: int) -> Optional[str]:
        """The key a submission answered with ``job_id`` was for, while it is expected."""
        with self._lock:
            return self._key_of_job.get(job_id)

    def observed(self, key: str, job_id: int) -> Optional[Expectation]:
        """The informer shows ``job_id`` as ``key``'s job: an expectation of it, or a doubt, is met (a
        refusal stands: the job Slurm recorded as it refused is not a submission that worked). Returns
        what was met, if anything."""
        with self._lock:
            found = self._by_key.get(key)
            if isinstance(found, Doubted) or (isinstance(found, Expected) and found.job_id == job_id):
                self._set(key, None)
                return found
            return None

    def listed(self, requested_at: float) -> list[str]:
        """The informer holds a whole list requested at ``requested_at`` (its clock): every doubt older than
        that list is settled (a job the lost submission made is in that list, and was ``observed``; none is
        there, so it made none). Returns the keys settled, to be reconciled again."""
        with self._lock:
            settled = [key for key, found in self._by_key.items()
                       if isinstance(found, Doubted) and found.since + self._doubt_margin < requested_at]
            for key in settled:
                self._set(key, None)
            return settled

    def _set(self, key: str, expectation: Optional[Expectation]) -> None:
        old = self._by_key.pop(key, None)
        if self._on_doubt is not None and (isinstance(old, Doubted) or isinstance(expectation, Doubted)):
            self._on_doubt(key, expectation if isinstance(expectation, Doubted) else None)
        if isinstance(old, Expected) and self._key_of_job.get(old.job_id) == key:
            del self._key_of_job[old.job_id]
        if expectation is not None:
            self._by_key[key] = expectation
            if isinstance(expectation, Expected):
                self._key_of_job[expectation.job_id] = key
