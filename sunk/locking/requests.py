"""Lock requests: what a pre-hook leaves on the slurmd Pod, so that every replica sees it.

Why on the Pod: the hook API is served by every Syncer replica, but only the leader runs
the lock controller. The pre-hook records ``lock.sunk.coreweave.com/job-<id>`` on the
slurmd Pod, which wakes the leader at once, before the Slurm cache has even seen the job.
One annotation per job means concurrent prologs write different keys: merge patches
that never conflict. The request also carries strictness, which the lock annotation's
``pending`` value cannot.

A request lives while its job is active on the node, or for a grace period after it was
made (the Slurm cache may not have seen the job yet). After that the controller removes
it; the epilog's post-hook and a timed-out pre-hook remove their own at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

import attrs

from sunk.model import names

REQUEST_PREFIX = names.LOCK_REQUEST_PREFIX


@attrs.frozen
class LockRequest:
    job_id: int
    strict: bool
    at: float  # Unix seconds, by the writer's clock

    @property
    def key(self) -> str:
        return request_key(self.job_id)

    def value(self) -> str:
        return json.dumps({"strict": self.strict, "at": round(self.at, 3)}, separators=(",", ":"))


@attrs.frozen
class Requests:
    """The requests found in a Pod's annotations; ``malformed`` keys are to be removed."""

    valid: tuple[LockRequest, ...] = ()
    malformed: tuple[str, ...] = ()


def request_key(job_id: int) -> str:
    return f"{REQUEST_PREFIX}{job_id}"


def parse_requests(annotations: Mapping[str, str] | None) -> Requests:
    valid: list[LockRequest] = []
    malformed: list[str] = []
    for key, value in (annotations or {}).items():
        if not key.startswith(REQUEST_PREFIX):
            continue
        request = _parse(key.removeprefix(REQUEST_PREFIX), value)
        if request is None:
            malformed.append(key)
        else:
            valid.append(request)
    valid.sort(key=lambda r: r.job_id)
    return Requests(tuple(valid), tuple(sorted(malformed)))


def _parse(job: str, value: str) -> LockRequest | None:
    if not job.isdigit():
        return None
    try:
        data = json.loads(value)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    strict, at = data.get("strict"), data.get("at")
    if not isinstance(strict, bool) or isinstance(at, bool) or not isinstance(at, int | float):
        return None
    return LockRequest(int(job), strict, float(at))


def expired(requests: Iterable[LockRequest], active_jobs: Iterable[int], now: float, grace: float) -> list[str]:
    """Keys of requests whose job is not active on the node and that are older than ``grace``."""
    active = set(active_jobs)
    return [r.key for r in requests if r.job_id not in active and now - r.at > grace]
