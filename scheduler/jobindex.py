"""The scheduler's placeholder jobs, by unit: indexes on the Slurm jobs informer's store, plus what the
scheduler expects of it (``SubmitExpectations``). Never a Slurm call per Pod.

The jobs live in one store, the informer's (``sunk.slurm.informer.ObservedStore``): its lists and a
record a reader read itself (the placeholder's own "started" call, read back by the hook API seconds
before a list shows it) meet there, and the later observation wins (the store's notes say why). This
module adds only the scheduler's view of it: two indexes, a job's unit (a Pod's UID, or a gang's owner)
and the Slurm nodes of a unit's job, both computed by this scheduler's identity parser from the job's
AdminComment alone (``sunk.translate.identity``: a job whose Extra, Comment or name claims a Pod is no
placeholder, since its user writes those), and the expectations of the units it submitted for.

Readers take one ``view`` of a unit: the expectation is read before the jobs. The informer settles an
expectation only after its store holds the job, so a view never shows neither (a unit seen with no job
and nothing expected is deleted as "its job is gone").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Optional, Protocol

from attrs import field, frozen

from sunk.model.slurm import Job
from sunk.slurm.informer import ObservedStore

from .expectations import Doubted, Expected, Refused, SubmitExpectations
from .metrics import PLACEHOLDER_SUBMISSIONS

log = logging.getLogger(__name__)

# A job -> (its Pod UID or gang owner, started) from its AdminComment and Slurm's state; None when the
# job is not one of this scheduler's placeholders.
IdentityParser = Callable[[Job], Optional[tuple[str, bool]]]

BY_UNIT = "sunk-unit"  # index: a placeholder job -> its unit's key
BY_NODE = "sunk-unit-node"  # index: a placeholder job -> the Slurm nodes it was placed on


class JobStore(Protocol):
    """What the index reads of the jobs informer (``SlurmInformer``) and adds to it."""

    def get(self, key: int) -> Optional[Job]: ...
    def by_index(self, index_name: str, value: str) -> list[Job]: ...
    def index_values(self, index_name: str) -> list[str]: ...
    def add_indexer(self, name: str, func: Callable[[Job], Any]) -> None: ...
    def observe(self, item: Job, requested_at: float) -> bool: ...


@frozen
class PodJobs:
    """What the index knows of one unit, as of one moment."""

    jobs: tuple[Job, ...] = ()  # every job carrying the unit's identity, any state
    expected_job_id: Optional[int] = None  # submitted, not listed yet
    refused: Optional[str] = None  # Slurm's answer to a refused submission, while remembered
    started: Mapping[int, bool] = field(factory=dict)  # job id -> Slurm shows it started (gang.has_started)
    in_doubt: bool = False  # a submission's answer was lost and no list since has settled it


class _OwnStore:
    """A store of the index's own, for a process without a jobs informer (tests, benchmarks): the
    informer's ``ObservedStore``, whose ``observe`` is its ``put``."""

    def __init__(self, forget_after: float, clock: Callable[[], float]):
        self.store: ObservedStore[int, Job] = ObservedStore(forget_after, clock)

    def get(self, key: int) -> Optional[Job]:
        return self.store.get(key)

    def by_index(self, index_name: str, value: str) -> list[Job]:
        return self.store.by_index(index_name, value)

    def index_values(self, index_name: str) -> list[str]:
        return self.store.index_values(index_name)

    def add_indexer(self, name: str, func: Callable[[Job], Any]) -> None:
        self.store.add_indexer(name, func)

    def observe(self, item: Job, requested_at: float) -> bool:
        return self.store.put(item.id, item, requested_at) is not None


class JobIndex:
    def __init__(self, parse: IdentityParser, expectation_ttl: float = 300.0,
                 clock: Callable[[], float] = time.monotonic, jobs: Optional[JobStore] = None,
                 doubt_margin: float = 10.0, on_expect: Optional[Callable[[int], None]] = None,
                 on_doubt: Optional[Callable[[str, Optional[Doubted]], None]] = None):
        """``jobs``: the Slurm jobs informer (its store gets the indexes); None: a store of the index's own,
        fed by ``upsert``/``remove``. ``clock``: the informer's (expectations are compared with its lists).
        ``doubt_margin``: SubmitExpectations'. ``on_expect(job_id)``: a job was submitted (the assembly's read
        request for it, ``PlaceholderReads``); ``on_doubt``: SubmitExpectations' (what to read while a lost
        submission's job is looked for, ``NewJobReads``)."""
        self._parse = parse
        self._own = _OwnStore(expectation_ttl, clock) if jobs is None else None
        self._jobs: JobStore = jobs if jobs is not None else self._own  # type: ignore[assignment]
        self.expectations = SubmitExpectations(expectation_ttl, clock, doubt_margin, on_doubt)
        self._on_expect = on_expect
        self._jobs.add_indexer(BY_UNIT, self._unit_index)
        self._jobs.add_indexer(BY_NODE, lambda job: list(job.node_list) if self._parse(job) is not None else [])

    def _unit_index(self, job: Job) -> list[str]:
        parsed = self._parse(job)
        return [parsed[0]] if parsed is not None else []

    # -- what the informer shows -------------------------------------------------------------
    def seen(self, job: Job) -> Optional[str]:
        """The informer holds ``job`` (added or changed): its unit's key if it is a placeholder, whose
        expectation of it (or doubt) is then met."""
        return self.seen_meeting(job)[0]

    def seen_meeting(self, job: Job) -> tuple[Optional[str], bool]:
        """As ``seen``, and whether the job met an expectation or a doubt (its unit must look again, whatever
        else of the job changed)."""
        parsed = self._parse(job)
        if parsed is None:
            return None, False
        met = self.expectations.observed(parsed[0], job.id)
        if isinstance(met, Doubted):
            PLACEHOLDER_SUBMISSIONS.labels("adopted").inc()
            log.info("%s: job %d, made by a submission whose answer was lost, is listed: adopted it", parsed[0], job.id)
        return parsed[0], met is not None

    def gone(self, job: Job) -> Optional[str]:
        """The informer no longer holds ``job``: its unit's key if it was a placeholder."""
        parsed = self._parse(job)
        return parsed[0] if parsed is not None else None

    def listed(self, requested_at: float) -> list[str]:
        """The informer holds a whole list requested at ``requested_at``: the doubts older than it are
        settled (``SubmitExpectations.listed``); returns their keys."""
        return self.expectations.listed(requested_at)

    def upsert(self, job: Job, observed_at: float = 0.0) -> Optional[str]:
        """A job a reader read from Slurm itself at ``observed_at`` (the hook API's read-back), handed to the
        informer's store; its unit's key if the store took it (not when it holds a later or this same
        observation) and it is a placeholder."""
        return self.seen(job) if self._jobs.observe(job, observed_at) else None

    def remove(self, job_id: int, observed_at: float = 0.0) -> Optional[str]:
        """A job gone as of ``observed_at``, in the index's own store (the informer removes its own)."""
        if self._own is None:
            raise TypeError("the jobs informer removes its jobs itself")
        gone = self._own.store.drop(job_id, observed_at)
        return self.gone(gone) if gone is not None else None

    # -- readers -----------------------------------------------------------------------------
    def view(self, uid: str) -> PodJobs:
        expectation = self.expectations.get(uid)  # (first: see the module notes)
        jobs = tuple(sorted(self._jobs.by_index(BY_UNIT, uid), key=lambda j: j.id))
        started = {j.id: bool((self._parse(j) or ("", False))[1]) for j in jobs}
        expected = refused = None
        if isinstance(expectation, Expected):
            if any(j.id == expectation.job_id for j in jobs):
                self.expectations.observed(uid, expectation.job_id)  # met
            else:
                expected = expectation.job_id
        elif isinstance(expectation, Refused):
            refused = expectation.message
        return PodJobs(jobs, expected, refused, started, isinstance(expectation, Doubted) and not jobs)

    def uids(self) -> set[str]:
        return set(self._jobs.index_values(BY_UNIT))

    def owners_on(self, slurm_node: str) -> set[str]:
        """The Pods (UIDs) and gangs (owners) whose known jobs Slurm placed on ``slurm_node``: those a change
        of that node's slurmd Pod may concern. O(the jobs on that node), whatever the number of Pods."""
        return {owner for job in self._jobs.by_index(BY_NODE, slurm_node) if (owner := self.gone(job))}

    def uid_of(self, job_id: int) -> Optional[str]:
        """The unit of a known placeholder job, or of one this process submitted that no list has shown yet."""
        job = self._jobs.get(job_id)
        parsed = self._parse(job) if job is not None else None
        return parsed[0] if parsed is not None else self.expectations.key_of(job_id)

    # -- expectations ------------------------------------------------------------------------
    def expect(self, uid: str, job_id: int) -> None:
        self.expectations.expect(uid, job_id)
        if self._on_expect is not None:
            self._on_expect(job_id)

    def refuse(self, uid: str, message: str) -> None:
        """Slurm refused this unit's job: do not submit again before the refusal expires."""
        self.expectations.refuse(uid, message)

    def doubt(self, uid: str) -> None:
        """A submission for this unit was sent and its answer lost: Slurm may have made the job."""
        self.expectations.doubt(uid)

    def forget(self, uid: str) -> None:
        self.expectations.settle(uid)

