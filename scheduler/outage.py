"""Telling the Pods that wait that Slurm cannot be used: once per Pod per outage.

Why: the reconcile path says so only on a Pod it tries to submit, and before Slurm's first job
list no reconcile runs at all. With a token Slurm refuses from the start, Pods waited with
nothing on them saying why (issue 18). An outage is not a verdict on the Pod: the Event is a
Warning, the Pod is never marked Unschedulable for it, and it is scheduled once Slurm answers.

Slurm refusing the token is reported at once (it does not pass by itself: someone must rotate
the token); any other outage once it has lasted ``grace`` (slurmrestd restarts in seconds).
Before the first job list no replica leads (campaigning waits for every cache), so each one
that reports then does so once per Pod; afterwards only the leader does.

When the outage ends, every waiting Pod is reconciled at once (``wake``): a submission retried
with backoff through a long outage would otherwise wait out its last delay (up to minutes).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Protocol

import attrs

from sunk.controller.periodic import Periodic
from sunk.model.types import Obj
from sunk.slurm.errors import AuthenticationFailed
from sunk.translate.objects import scheduling_gates

log = logging.getLogger(__name__)

CHECK_EVERY = 5.0  # seconds between looks at the Slurm cache
GRACE = 30.0  # an outage other than a refused token is news once it has lasted this long

Report = Callable[[Obj, str, str, str], None]  # (pod, type, reason, message), deduplicated per Pod


class Failures(Protocol):
    """What the Slurm jobs informer says of an outage (``SlurmInformer``)."""

    @property
    def last_failure(self) -> Exception | None: ...

    @property
    def failing_for(self) -> float: ...


def outage_event(error: Exception) -> tuple[str, str]:
    """The Event (reason, message) for Pods waiting through an outage; the same for every Pod and call,
    so that the reconcile path and this notice never say it twice."""
    if isinstance(error, AuthenticationFailed):
        source = error.token_source or "its configured source"
        return ("SlurmAuthenticationFailed",
                f"Slurm refuses the scheduler's token (from {source}): the Pod waits, and is scheduled once a "
                f"token Slurm accepts is in place; nothing is wrong with the Pod")
    return ("SlurmUnavailable",
            "Slurm cannot be reached: the Pod waits, and is scheduled once Slurm answers again")


def waiting(pods: Iterable[Obj]) -> Iterable[Obj]:
    """Pods not bound, not being deleted and not gated (a gated Pod waits for its gates, not for Slurm)."""
    return (p for p in pods if not p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
            and not scheduling_gates(p))


@attrs.define
class OutageNotice:
    cache: Failures
    pods: Callable[[], Iterable[Obj]]  # this scheduler's Pods that wait (PodIndex.unbound: an index, not a walk)
    report: Report
    may_report: Callable[[], bool]  # the leader, or anyone before the first sync
    wake: Callable[[str], None] = lambda _uid: None  # reconcile a Pod now (the controller's queue)
    grace: float = GRACE
    _told: set[str] = attrs.field(init=False, factory=set)  # Pod UIDs told during this outage
    _in_outage: bool = attrs.field(init=False, default=False)

    def check(self) -> None:
        error = self.cache.last_failure
        if error is None:
            if self._in_outage:  # over: what waited for Slurm goes now, not after its backoff
                for pod in waiting(self.pods()):
                    self.wake(pod["metadata"]["uid"])
            self._in_outage = False
            self._told.clear()  # the next outage is news again
            return
        self._in_outage = True
        if not isinstance(error, AuthenticationFailed) and self.cache.failing_for < self.grace:
            return
        if not self.may_report():
            return
        reason, message = outage_event(error)
        told = 0
        for pod in waiting(self.pods()):
            uid = pod["metadata"]["uid"]
            if uid in self._told:
                continue
            self._told.add(uid)
            self.report(pod, "Warning", reason, message)
            told += 1
        if told:
            log.warning("told %d waiting Pods: %s", told, message)

    def runnable(self, interval: float = CHECK_EVERY) -> Periodic:
        return Periodic("slurm-outage-notice", interval, self.check)
