"""Placeholder jobs by Pod UID, kept from Slurm cache events (never a Slurm call per Pod).

It also remembers submissions the cache has not shown yet ("expectations", as
controller-runtime calls them), so a Pod reconciled twice between two cache refreshes
is never submitted twice; and submissions Slurm refused, so a refused Pod is not
resubmitted on its next update (the refusal expires after ``expectation_ttl``). And
submissions whose answer was lost ("in doubt": Slurm may or may not have made the job), so
that the Pod's job is looked up in Slurm before it is submitted again (``settle``).

A job is learnt two ways: from the Slurm cache's lists, and from the placeholder's own
"started" call (one ``get_job``, seconds before the next job list shows it). Each record
keeps the time its observation was requested, and an older one never replaces a newer
one: a list that left before the job started must not turn a bound Pod's RUNNING job back
into PENDING, which reads as "requeued by preemption" and deletes the Pod. A removal keeps
its time too, for ``expectation_ttl``: an observation older than the removal (a "started"
read-back that was slow to return) must not bring a purged job back.

Readers take one ``view`` of a Pod, in one step: reading the jobs and then the
expectation separately let a "started" call land in between (the job not in the first
read, the expectation already met in the second), and the Pod was deleted as "its job is
gone" while the job ran.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Optional

from attrs import field, frozen

from sunk.slurm.models import Job

# A job -> (its Pod UID or gang owner, started) from its AdminComment and Slurm's state; None when the
# job is not one of this scheduler's placeholders.
IdentityParser = Callable[[Job], Optional[tuple[str, bool]]]


@frozen
class PodJobs:
    """What the index knows of one Pod, as of one moment."""

    jobs: tuple[Job, ...] = ()  # every job carrying the Pod's UID, any state
    expected_job_id: Optional[int] = None  # submitted, not listed yet
    refused: Optional[str] = None  # Slurm's answer to a refused submission, while remembered
    started: Mapping[int, bool] = field(factory=dict)  # job id -> Slurm shows it started (gang.has_started)
    in_doubt: bool = False  # a submission's answer was lost: look the job up before submitting again


class JobIndex:
    def __init__(self, parse: IdentityParser, expectation_ttl: float = 300.0,
                 clock: Callable[[], float] = time.monotonic):
        self._parse = parse
        self._ttl = expectation_ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._by_uid: dict[str, dict[int, Job]] = {}
        self._uid_of: dict[int, str] = {}
        self._started: dict[int, bool] = {}
        self._observed_at: dict[int, float] = {}
        self._expected: dict[str, tuple[int, float]] = {}
        self._expected_uid: dict[int, str] = {}  # job id -> uid, for expectations
        self._refused: dict[str, tuple[str, float]] = {}
        self._doubted: set[str] = set()  # Pod UIDs whose last submission's outcome is unknown
        # job id -> (observed_at of its removal, monotonic time of it), oldest first
        self._removed: dict[int, tuple[float, float]] = {}
        self._on_node: dict[str, set[int]] = {}  # Slurm node -> ids of the known jobs Slurm placed there

    def upsert(self, job: Job, observed_at: float = 0.0) -> Optional[str]:
        """Record a job seen at ``observed_at``; returns its Pod UID if it is a placeholder.

        None, too, when a later observation of the job is already held (it is kept), or this same one (the
        Slurm cache's event for a record the hook API read and gave it: nothing new to reconcile).
        """
        with self._lock:
            if self._stale(job.id, observed_at) or self._holds(job, observed_at):
                return None
            self._drop(job.id)
            uid = self._put(job, observed_at)
            if uid is not None:
                self._doubted.discard(uid)  # the Pod's job is seen: a lost answer is settled
            return uid

    def remove(self, job_id: int, observed_at: float = 0.0) -> Optional[str]:
        with self._lock:
            if self._stale(job_id, observed_at):
                return None
            uid = self._drop(job_id)
            self._removed.pop(job_id, None)  # (re-inserted at the end: the dict stays in time order)
            self._removed[job_id] = (observed_at, self._clock())
            self._expire_removals()
            return uid

    def view(self, uid: str) -> PodJobs:
        with self._lock:
            jobs = tuple(self._by_uid.get(uid, {}).values())
            return PodJobs(jobs, self._expected_job(uid), self._refusal(uid),
                           {j.id: self._started.get(j.id, False) for j in jobs}, uid in self._doubted)

    def uids(self) -> set[str]:
        with self._lock:
            return set(self._by_uid)

    def owners_on(self, slurm_node: str) -> set[str]:
        """The Pods (UIDs) and gangs (owners) whose known jobs Slurm placed on ``slurm_node``: those a change
        of that node's slurmd Pod may concern (which Node they bind to, or whether they can bind at all).
        O(the jobs on that node), whatever the number of Pods."""
        with self._lock:
            return {self._uid_of[job_id] for job_id in self._on_node.get(slurm_node, ())}

    def uid_of(self, job_id: int) -> Optional[str]:
        """The Pod UID of a known job, or of one this process submitted that no list has shown yet."""
        with self._lock:
            return self._uid_of.get(job_id) or self._expected_uid.get(job_id)

    def expect(self, uid: str, job_id: int) -> None:
        with self._lock:
            self._unexpect(uid)
            self._expected[uid] = (job_id, self._clock())
            self._expected_uid[job_id] = uid

    def _expected_job(self, uid: str) -> Optional[int]:
        entry = self._expected.get(uid)
        if entry is None:
            return None
        job_id, since = entry
        if job_id in self._uid_of or self._clock() - since > self._ttl:
            self._unexpect(uid)  # met (the job is listed) or expired
            return None
        return job_id

    def refuse(self, uid: str, message: str) -> None:
        """Slurm refused this Pod's job: do not submit again before the refusal expires."""
        with self._lock:
            self._refused[uid] = (message, self._clock())

    def _refusal(self, uid: str) -> Optional[str]:
        entry = self._refused.get(uid)
        if entry is None:
            return None
        if self._clock() - entry[1] > self._ttl:
            del self._refused[uid]
            return None
        return entry[0]

    def doubt(self, uid: str) -> None:
        """A submission for this Pod was sent and its answer lost: Slurm may have made the job."""
        with self._lock:
            self._doubted.add(uid)

    def settle(self, uid: str, jobs: Iterable[Job], observed_at: float) -> tuple[int, ...]:
        """Settle a doubt from a fresh read of Slurm's jobs (requested at ``observed_at``, after the
        lost answer): the Pod's jobs found there are recorded, and their ids returned. None found
        means the submission made no job, and the Pod may be submitted again."""
        found = []
        with self._lock:
            self._doubted.discard(uid)
            for job in jobs:
                parsed = self._parse(job)
                if parsed is None or parsed[0] != uid:
                    continue
                if not self._stale(job.id, observed_at):  # (else a later observation is held already)
                    self._drop(job.id)
                    self._put(job, observed_at)
                found.append(job.id)
        return tuple(found)

    def forget(self, uid: str) -> None:
        with self._lock:
            self._unexpect(uid)
            self._refused.pop(uid, None)
            self._doubted.discard(uid)

    def _unexpect(self, uid: str) -> None:
        entry = self._expected.pop(uid, None)
        if entry is not None:
            self._expected_uid.pop(entry[0], None)

    def _stale(self, job_id: int, observed_at: float) -> bool:
        if job_id in self._observed_at:
            return observed_at < self._observed_at[job_id]
        removed = self._removed.get(job_id)
        return removed is not None and observed_at < removed[0]

    def _holds(self, job: Job, observed_at: float) -> bool:
        uid = self._uid_of.get(job.id)
        return uid is not None and self._observed_at.get(job.id) == observed_at and \
            self._by_uid.get(uid, {}).get(job.id) == job

    def _expire_removals(self) -> None:
        horizon = self._clock() - self._ttl
        while self._removed:
            oldest = next(iter(self._removed))
            if self._removed[oldest][1] >= horizon:
                return
            del self._removed[oldest]

    def _put(self, job: Job, observed_at: float) -> Optional[str]:
        parsed = self._parse(job)
        if parsed is None:
            return None
        uid, started = parsed
        self._removed.pop(job.id, None)
        self._doubted.discard(uid)  # a job of this Pod is known: nothing left to look for
        self._by_uid.setdefault(uid, {})[job.id] = job
        self._uid_of[job.id] = uid
        self._started[job.id] = started
        self._observed_at[job.id] = observed_at
        for node in job.node_list:
            self._on_node.setdefault(node, set()).add(job.id)
        return uid

    def _drop(self, job_id: int) -> Optional[str]:
        uid = self._uid_of.pop(job_id, None)
        self._started.pop(job_id, None)
        self._observed_at.pop(job_id, None)
        if uid is not None:
            jobs = self._by_uid.get(uid, {})
            job = jobs.pop(job_id, None)
            for node in job.node_list if job is not None else ():
                placed = self._on_node.get(node)
                if placed is not None:
                    placed.discard(job_id)
                    if not placed:
                        del self._on_node[node]
            if not jobs:
                self._by_uid.pop(uid, None)
        return uid
