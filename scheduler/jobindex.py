"""Placeholder jobs by Pod UID, kept from Slurm cache events (never a Slurm call per Pod).

It also remembers submissions the cache has not shown yet ("expectations", as
controller-runtime calls them), so a Pod reconciled twice between two cache refreshes
is never submitted twice; and submissions Slurm refused, so a refused Pod is not
resubmitted on its next update (the refusal expires after ``expectation_ttl``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Optional

from sunk.slurm.models import Job

# Extra text -> (pod uid, started) or None when the job is not a placeholder.
IdentityParser = Callable[[str], Optional[tuple[str, bool]]]


class JobIndex:
    def __init__(self, parse: IdentityParser, expectation_ttl: float = 300.0):
        self._parse = parse
        self._ttl = expectation_ttl
        self._lock = threading.Lock()
        self._by_uid: dict[str, dict[int, Job]] = {}
        self._uid_of: dict[int, str] = {}
        self._started: dict[int, bool] = {}
        self._expected: dict[str, tuple[int, float]] = {}
        self._refused: dict[str, tuple[str, float]] = {}

    def replace_all(self, jobs: Iterable[Job]) -> None:
        with self._lock:
            self._by_uid.clear()
            self._uid_of.clear()
            self._started.clear()
            for job in jobs:
                self._put(job)

    def upsert(self, job: Job) -> Optional[str]:
        """Record a job; returns the Pod UID it belongs to, if it is a placeholder."""
        with self._lock:
            self._drop(job.id)
            return self._put(job)

    def remove(self, job_id: int) -> Optional[str]:
        with self._lock:
            return self._drop(job_id)

    def jobs_for(self, uid: str) -> tuple[Job, ...]:
        with self._lock:
            return tuple(self._by_uid.get(uid, {}).values())

    def uids(self) -> set[str]:
        with self._lock:
            return set(self._by_uid)

    def uid_of(self, job_id: int) -> Optional[str]:
        with self._lock:
            return self._uid_of.get(job_id)

    def started(self, job_id: int) -> bool:
        with self._lock:
            return self._started.get(job_id, False)

    def expect(self, uid: str, job_id: int) -> None:
        with self._lock:
            self._expected[uid] = (job_id, time.monotonic())

    def expected(self, uid: str) -> Optional[int]:
        with self._lock:
            entry = self._expected.get(uid)
            if entry is None:
                return None
            job_id, since = entry
            if job_id in self._uid_of or time.monotonic() - since > self._ttl:
                del self._expected[uid]
                return None
            return job_id

    def refuse(self, uid: str, message: str) -> None:
        """Slurm refused this Pod's job: do not submit again before the refusal expires."""
        with self._lock:
            self._refused[uid] = (message, time.monotonic())

    def refused(self, uid: str) -> Optional[str]:
        with self._lock:
            entry = self._refused.get(uid)
            if entry is None:
                return None
            if time.monotonic() - entry[1] > self._ttl:
                del self._refused[uid]
                return None
            return entry[0]

    def forget(self, uid: str) -> None:
        with self._lock:
            self._expected.pop(uid, None)
            self._refused.pop(uid, None)

    def _put(self, job: Job) -> Optional[str]:
        parsed = self._parse(job.extra)
        if parsed is None:
            return None
        uid, started = parsed
        self._by_uid.setdefault(uid, {})[job.id] = job
        self._uid_of[job.id] = uid
        self._started[job.id] = started
        return uid

    def _drop(self, job_id: int) -> Optional[str]:
        uid = self._uid_of.pop(job_id, None)
        self._started.pop(job_id, None)
        if uid is not None:
            jobs = self._by_uid.get(uid, {})
            jobs.pop(job_id, None)
            if not jobs:
                self._by_uid.pop(uid, None)
        return uid
