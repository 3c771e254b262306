"""Binding a Pod to the Node Slurm chose, and remembering it until the Pod watch shows it.

Shaped like kube-scheduler's scheduler cache: a Pod is *assumed* bound to its Node before
the binding call, *finishes binding* when the call succeeds, and is *forgotten* when the call
fails or once the Pod has moved on (the Pod informer shows it bound, or it is gone). In
between, the reconciler reads the assumed Node as the Pod's (``assumed_node``): a reconcile
that runs before the informer has caught up must not bind again (the apiserver would say
409), nor validate a Pod that is already placed.

Both front ends bind through one Binder: ``sunk-scheduler`` from its reconciler, the
extender from its ``/bind`` verb. The binding carries the job-id and slurm-node annotations
(the apiserver copies a Binding's annotations onto the Pod), so a Pod that binds at once
costs one write. An assumption whose binding finished expires after ``assumed_ttl`` even if
the watch never confirms it, so the bookkeeping cannot grow without bound; one whose
binding call is still in flight never expires.
"""

from __future__ import annotations

import calendar
import enum
import logging
import threading
import time
from collections.abc import Callable
from typing import Optional

import attrs
from kubernetes.client import ApiClient

from sunk.kube import client as kube
from sunk.model import names
from sunk.model.types import Obj

from . import kubeops
from .claims import ClaimAllocator
from .decide import Bind
from .metrics import BIND_LATENCY

log = logging.getLogger(__name__)

ASSUMED_TTL = 300.0  # seconds an assumption outlives its binding without the Pod watch confirming it


@attrs.frozen
class Assumed:
    node: str
    expires: Optional[float] = None  # None while the binding call is in flight
    slurm_node: str = ""  # the binding's Slurm node and job (a gang's members hold one node each)
    job_id: Optional[int] = None


class Binding(enum.Enum):
    """What a binding attempt came to (``PodScheduler.bind_placed``)."""

    BOUND = "bound"  # by this call
    ALREADY = "already bound"  # by this process (not yet in the watch) or by anyone (a 409)
    REFUSED = "refused"  # its ResourceClaims cannot be filled as Slurm placed it: the job ended, Events say why


@attrs.define
class Binder:
    """Binds Pods, at most once each while assumed, and measures how long they waited.

    ``must_tolerate_lock(node)`` says whether a Pod bound straight to that Node needs the lock
    toleration first (scheduler/locktaint.py); without a Node cache, always. A Pod that
    kube-scheduler binds through the extender has passed its taint filter, so it never does.
    ``claims`` fills a Pod's ResourceClaims first (scheduler/claims.py): the kubelet starts no Pod
    whose claims are not allocated to it.
    """

    api: ApiClient
    must_tolerate_lock: Callable[[str], bool] = lambda _node: True
    # With --dra-device-mapping: the Pod's ResourceClaims filled from its job's GRES before it is bound.
    claims: Optional[ClaimAllocator] = None
    observe_latency: Callable[[float], None] = BIND_LATENCY.observe  # seconds from Pod creation to binding
    assumed_ttl: float = ASSUMED_TTL
    clock: Callable[[], float] = time.monotonic
    _lock: threading.Lock = attrs.field(init=False, factory=threading.Lock)
    _assumed: dict[str, Assumed] = attrs.field(init=False, factory=dict)  # by Pod UID

    def bind(self, pod: Obj, bind: Bind) -> bool:
        """Bind the Pod where Slurm runs its job; True if this call bound it.

        False if it is bound already: by this process, not yet in the Pod watch (the apiserver
        is not asked again), or by anyone (a 409, left to the watch: the next reconcile judges
        the Pod as it is bound). Any other failure raises, with the assumption forgotten, so
        the next attempt starts afresh.
        """
        meta = pod["metadata"]
        uid, where = meta["uid"], f"{meta['namespace']}/{meta['name']}"
        if not self.assume(uid, bind.k8s_node, slurm_node=bind.slurm_node, job_id=bind.job_id):
            log.info("pod %s: not bound again: this process bound it to %s", where, self.assumed_node(uid))
            return False
        try:
            if self.claims is not None:
                self.claims.allocate(pod, bind.job_id, bind.slurm_node, bind.k8s_node)
            if self.must_tolerate_lock(bind.k8s_node):
                kubeops.record_job(self.api, pod, {}, tolerate_lock=True)
            kubeops.bind(self.api, pod, bind.k8s_node, {names.ANN_JOB_ID: str(bind.job_id),
                                                        names.ANN_SLURM_NODE: bind.slurm_node})
        except Exception as exc:
            self.forget(uid)
            if isinstance(exc, kube.ApiError) and exc.conflict:
                log.info("pod %s: not bound again: %s", where, exc.message)
                return False
            raise
        self.finish_binding(uid)
        created = _created_at(pod)
        if created:
            self.observe_latency(max(0.0, time.time() - created))
        log.info("pod %s: bound to %s (job %d on %s)", where, bind.k8s_node, bind.job_id, bind.slurm_node)
        return True

    def assume(self, uid: str, node: str, *, slurm_node: str = "", job_id: Optional[int] = None) -> bool:
        """Count the Pod as bound to ``node`` from now on; False if it already is assumed somewhere."""
        with self._lock:
            self._expire()
            if uid in self._assumed:
                return False
            self._assumed[uid] = Assumed(node, slurm_node=slurm_node, job_id=job_id)
            return True

    def finish_binding(self, uid: str) -> None:
        """The binding call succeeded: the assumption lasts until the watch confirms it, or expires."""
        with self._lock:
            if (entry := self._assumed.get(uid)) is not None:
                self._assumed[uid] = attrs.evolve(entry, expires=self.clock() + self.assumed_ttl)

    def forget(self, uid: str) -> None:
        """The binding failed, or the Pod moved on (the watch shows it bound, or it is gone)."""
        with self._lock:
            self._assumed.pop(uid, None)

    def assumed_node(self, uid: str) -> Optional[str]:
        """The Node this process bound (or is binding) the Pod to; a read, with no side effect."""
        entry = self.assumed(uid)
        return entry.node if entry is not None else None

    def assumed(self, uid: str) -> Optional[Assumed]:
        """The binding this process made (or is making) for the Pod, while assumed; a read."""
        with self._lock:
            entry = self._assumed.get(uid)
            return entry if entry is not None and not self._expired(entry, self.clock()) else None

    def _expire(self) -> None:
        now = self.clock()
        for uid in [uid for uid, entry in self._assumed.items() if self._expired(entry, now)]:
            del self._assumed[uid]

    @staticmethod
    def _expired(entry: Assumed, now: float) -> bool:
        return entry.expires is not None and now >= entry.expires


def _created_at(pod: Obj) -> float:
    """The Pod's creationTimestamp as a Unix time; 0.0 when it has none."""
    stamp = pod["metadata"].get("creationTimestamp")
    if not stamp:
        return 0.0
    # UTC ("Z"): calendar.timegm; mktime() - timezone was an hour off under daylight saving
    return float(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")))
