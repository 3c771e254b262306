"""The scheduler hook API's ports (scheduler/hooks.py ``HookJobs``, ``HookPods``) over what a test holds."""

from __future__ import annotations

from collections.abc import Callable

import attrs

from scheduler.jobindex import IdentityParser, JobIndex
from sunk.model.slurm import Job
from sunk.model.types import Obj
from sunk.translate.keys import GangKey, UnitKey, unit_key


@attrs.frozen
class IndexedJobs:
    """A JobIndex and an identity parser; ``observed`` hears each job the placeholder reported started."""

    index: JobIndex
    parse: IdentityParser
    observed: Callable[[Job, float], None] = lambda _job, _at: None

    def known_owner(self, job_id: int) -> UnitKey | None:
        owner = self.index.uid_of(job_id)
        return unit_key(owner) if owner is not None else None

    def owner_of(self, job: Job) -> UnitKey | None:
        parsed = self.parse(job)
        return unit_key(parsed[0]) if parsed is not None else None

    def observe(self, job: Job, requested_at: float) -> None:
        self.observed(job, requested_at)


@attrs.frozen
class LookedUpPods:
    """Pods found by ``lookup``; ``deleted`` hears each deletion. No Pod is stuck, no gang holds one, unless told."""

    lookup: Callable[[str], Obj | None]
    deleted: Callable[[Obj, str], None] = lambda _pod, _why: None
    stuck: Callable[[Obj, int], str | None] = lambda _pod, _job_id: None
    gang: Callable[[GangKey, int], list[Obj]] = lambda _gang, _job_id: []

    def by_uid(self, uid: str) -> Obj | None:
        return self.lookup(uid)

    def gang_holders(self, gang: GangKey, job_id: int) -> list[Obj]:
        return self.gang(gang, job_id)

    def stuck_reason(self, pod: Obj, job_id: int) -> str | None:
        return self.stuck(pod, job_id)

    def delete(self, pod: Obj, why: str) -> None:
        self.deleted(pod, why)
