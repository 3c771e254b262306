"""The lock controller: one level-based reconcile per Slurm node.

It gathers the facts (the Slurm node's jobs from the Slurm cache, the lock requests and
lock annotation on the slurmd Pod, the Pods on the Kubernetes Node), asks the pure state
machine (``sunk.translate.lock``) what they mean, and carries it out:

- demand (a job holds the Slurm node, or a pre-hook asked): taint the Node first, so no
  new Pod lands (under ``NoExecute``, only once the Pods that stay have tolerated it for
  ``TOLERATION_SETTLE`` seconds: Pods may still land in those seconds, and non-tolerating
  ones are then evicted like any other); evict what the state machine says must go, through the Eviction API so
  PodDisruptionBudgets hold; write ``pending`` until those Pods are gone, then
  ``locked`` (or ``locked_strict``). A budget that refuses is retried every
  ``eviction_retry`` seconds until the demand ends.
- no demand: write ``false``, then remove the taint.

Why the annotation is written with a resourceVersion precondition: a pre-hook that sees
``locked`` must be able to trust it. Its request annotation changes the Pod; an unlock
decided from an older view of the Pod then fails with 409 instead of landing, and the
next reconcile sees the request. For the same reason the taint is removed only after the
``false`` annotation was accepted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import attrs
from kubernetes.client import ApiClient

from sunk.controller.runtime import Result
from sunk.kube import client as kc
from sunk.kube import patch as kp
from sunk.kube.resources import PODS, object_key
from sunk.model import names
from sunk.model.slurm import Node
from sunk.model.types import Obj
from sunk.syncer.context import INDEX_NODE, SyncerContext
from sunk.translate import lock as machine

from .config import LockConfig
from .evictions import EvictionLog
from .jobs import NodeJob
from .requests import LockRequest, expired, parse_requests

log = logging.getLogger(__name__)

# How long a toleration the lock gave a Pod is left to reach every watcher before the NoExecute
# taint lands. Kubernetes' taint-eviction controller judges a Pod from its own informer: a taint
# that lands first evicts the Pod at once, its new toleration unseen (measured on the dev
# cluster: the Pod deleted 4 ms after its toleration was written, the taint written between).
TOLERATION_SETTLE = 2.0


@attrs.frozen
class Facts:
    """Everything one reconcile decides from, gathered up front."""

    slurm_node: str
    pod: Obj
    k8s_node: Obj
    slurm: Node | None
    jobs: dict[int, NodeJob]
    pods_on_node: tuple[Obj, ...]
    now: float


def pods_on(ctx: SyncerContext, k8s_node: str, slurmd_pod: Obj | None) -> list[Obj]:
    """The Pods bound to ``k8s_node``, except the slurmd Pod itself."""
    own = object_key(slurmd_pod) if slurmd_pod else None
    return [p for p in ctx.all_pods.by_index(INDEX_NODE, k8s_node) if object_key(p) != own]


@attrs.define
class LockReconciler:
    ctx: SyncerContext
    config: LockConfig
    jobs_on: Callable[[str], dict[int, NodeJob]]
    evictions: EvictionLog
    clock: Callable[[], float] = time.time
    # When this process last gave a Pod on a Kubernetes Node the lock toleration (lost on a
    # restart, which takes longer than the settle anyway). Kept through an unlock on purpose: if
    # demand comes back within the settle, the toleration still has to reach the taint manager.
    _tolerated_at: dict[str, float] = attrs.field(factory=dict, init=False)

    @property
    def api(self) -> ApiClient:
        return self.ctx.api

    def reconcile(self, key: str) -> Result | None:
        if not (self.ctx.slurm_nodes.synced and self.ctx.slurm_jobs.synced):
            return Result(requeue_after=1.0)
        facts = self.gather(key)
        if facts is None:
            return None
        try:
            return self._act(facts)
        except kc.ApiError as exc:
            if exc.conflict:  # the Pod changed under us: decide again from the newer view
                log.debug("lock %s: conflict (%s); reconciling again", key, exc.message)
                return Result(requeue=True)
            raise

    # ---- facts --------------------------------------------------------------------------------

    def gather(self, slurm_node: str) -> Facts | None:
        pod = self.ctx.pod_for(slurm_node)
        k8s_node = self.ctx.k8s_node_for(slurm_node)
        if pod is None or k8s_node is None:
            return None  # no slurmd Pod bound to a Node: nothing to lock (the Syncer drains such nodes)
        on_node = tuple(pods_on(self.ctx, k8s_node["metadata"]["name"], pod))
        return Facts(slurm_node, pod, k8s_node, self.ctx.slurm_nodes.get(slurm_node), self.jobs_on(slurm_node),
                     on_node, self.clock())

    # ---- acting ---------------------------------------------------------------------------------

    def _act(self, f: Facts) -> Result | None:
        annotations = (f.pod["metadata"].get("annotations") or {})
        requests = parse_requests(annotations)
        stale = expired(requests.valid, f.jobs, f.now, self.config.request_grace) + list(requests.malformed)
        live = [r for r in requests.valid if r.key not in stale]
        busy = f.slurm is not None and f.slurm.running_jobs
        written = annotations.get(names.LOCK_KEY)
        current = machine.parse_state(written)
        strict = any(r.strict for r in live) or any(j.placeholder for j in f.jobs.values())
        # Held only by the node's state (a job's epilog, or a job the jobs cache has yet to show).
        unseen = bool(busy and not live and not f.jobs)
        if unseen:  # keep the level reached rather than weaken a strict lock for the last seconds
            strict = current is machine.LockState.LOCKED_STRICT
        wanted = bool(live or f.jobs or busy)
        cleanup: dict[str, str | None] = dict.fromkeys(stale)

        if not wanted:
            self._unlock(f, written not in (None, "false") or bool(cleanup), cleanup)
            return None

        # Only a job this node's facts name makes a job-id annotation believable (anybody who may
        # edit a Pod can write one, to keep it on a node Slurm needs).
        vouched = machine.Vouched(frozenset(f.jobs) | {r.job_id for r in live}, f.now, self.config.request_grace,
                                  scheduler_names=self.ctx.config.scheduler_names, jobs_unknown=unseen)
        self._keep_sunk_pods(f, vouched)
        node = _name(f.k8s_node)
        settled_at = self._tolerated_at.get(node, f.now - TOLERATION_SETTLE) + TOLERATION_SETTLE
        if settled_at > f.now:  # (capped: a wall clock stepped back must not hold the taint back longer)
            return Result(requeue_after=min(settled_at - f.now, TOLERATION_SETTLE))
        self._tolerated_at.pop(node, None)
        kp.hold_lock(self.api, f.k8s_node, machine.holder_of(f.pod), self.config.taint_effect)
        to_evict = machine.pods_to_evict(f.pods_on_node, strict=strict, effect=self.config.taint_effect,
                                         vouched=vouched)
        why = _jobs_text(live, f.jobs)
        for pod in to_evict:
            if not pod["metadata"].get("deletionTimestamp") and not self._refused_lately(pod, f.now):
                self._evict(f, pod, why)
        target = machine.next_state(strict=strict, blocking=bool(to_evict))
        if written != target.value or cleanup:  # (unknown text is rewritten too)
            self._write_state(f.pod, target, cleanup)
        if target != current:
            self._announce(f, current, target, to_evict, why)
        # A request whose job Slurm does not show expires at a known time, and nothing else may
        # happen on an idle node to reconcile it then (the resync is minutes away).
        waits = [max(r.at + self.config.request_grace - f.now, 0.0) + 1.0 for r in live if r.job_id not in f.jobs]
        # Likewise a Pod kept only because it was bound a moment ago (its job may not be cached yet):
        # once that grace is over, it is judged like any other Pod.
        waits += [until - f.now + 1.0 for pod in f.pods_on_node if (until := vouched.believed_until(pod)) is not None]
        if to_evict:
            waits.append(self.config.eviction_retry)
        return Result(requeue_after=min(waits)) if waits else None

    def _keep_sunk_pods(self, f: Facts, vouched: machine.Vouched) -> None:
        """Before a ``NoExecute`` lock taint lands, the Pods that must stay get to tolerate it.

        Each toleration written restarts the Node's settle (``TOLERATION_SETTLE``), at once: a
        later Pod's failure raises, and the retry must still find the earlier one settling."""
        for pod in machine.pods_to_tolerate(f.pods_on_node, self.config.taint_effect, vouched):
            try:
                if not kp.add_toleration(self.api, pod, machine.LOCK_TOLERATION):
                    continue  # it had it already (this cache is behind): nothing new to settle
            except kc.ApiError as exc:
                if not exc.not_found:
                    raise
                continue
            self._tolerated_at[_name(f.k8s_node)] = self.clock()
            log.info("lock %s: %s now tolerates the NoExecute lock taint; the taint waits %.0f s for it to settle",
                     f.slurm_node, object_key(pod), TOLERATION_SETTLE)

    def _unlock(self, f: Facts, write: bool, cleanup: dict[str, str | None]) -> None:
        if write:
            self._write_state(f.pod, machine.LockState.FALSE, cleanup)
        # Every effect: a lock taint left from an earlier --lock-taint-effect would never go otherwise. Only this
        # slurmd Pod's hold: a taint another release's slurmd Pod on the same Node holds stays.
        holder = machine.holder_of(f.pod)
        if kp.release_lock(self.api, f.k8s_node, lambda h: h == holder):
            self.ctx.recorder.normal(f.pod, "Unlocked",
                                     f"Slurm node {f.slurm_node} runs no job: Node {_name(f.k8s_node)} unlocked")
            log.info("lock %s: unlocked Node %s", f.slurm_node, _name(f.k8s_node))
        return None

    def _write_state(self, pod: Obj, state: machine.LockState, extra: dict[str, str | None]) -> None:
        """Merge-patch the lock annotation (and request clean-up) on the exact version decided from."""
        meta = pod["metadata"]
        body = {"metadata": {"resourceVersion": meta["resourceVersion"],
                             "annotations": {names.LOCK_KEY: state.value, **extra}}}
        kc.patch(self.api, PODS, meta["name"], body, meta["namespace"])

    def _refused_lately(self, pod: Obj, now: float) -> bool:
        """A budget said no less than ``eviction_retry`` ago: other events must not make us ask again already."""
        note = self.evictions.get(object_key(pod))
        return note is not None and note.outcome == "blocked" and now - note.at < self.config.eviction_retry

    def _evict(self, f: Facts, pod: Obj, why: str) -> None:
        key = object_key(pod)
        try:
            result = kp.evict(self.api, pod)
        except kc.ApiError as exc:
            self.evictions.record(key, "error", exc.message, f.now)
            log.warning("lock %s: evicting %s failed: %s", f.slurm_node, key, exc)
            return
        self.evictions.record(key, result.outcome.value, result.message, f.now)
        if result.evicted:
            self.ctx.recorder.normal(pod, "Evicted", f"evicted by sunk-syncer: Slurm node {f.slurm_node} is being "
                                                     f"locked for {why}", action="Evict")
            log.info("lock %s: evicted %s", f.slurm_node, key)
        elif result.blocked:
            self.ctx.recorder.warning(pod, "EvictionBlocked", f"Slurm node {f.slurm_node} is being locked for {why}, "
                                                              f"but the eviction was refused: {result.message}")
            log.info("lock %s: eviction of %s blocked: %s", f.slurm_node, key, result.message)

    def _announce(self, f: Facts, current: machine.LockState, target: machine.LockState,
                  to_evict: list[Obj], why: str) -> None:
        if target is machine.LockState.PENDING:
            pods = ", ".join(object_key(p) for p in to_evict)
            self.ctx.recorder.normal(f.pod, "LockPending", f"locking for {why}; waiting for {len(to_evict)} Pod(s) "
                                                           f"to leave Node {_name(f.k8s_node)}: {pods}")
        else:
            self.ctx.recorder.normal(f.pod, "Locked", f"Node {_name(f.k8s_node)} is {target.value} for {why}")
        log.info("lock %s: %s -> %s (%s)", f.slurm_node, current.value, target.value, why)


def _jobs_text(live: list[LockRequest], jobs: dict[int, NodeJob]) -> str:
    ids = sorted({r.job_id for r in live} | set(jobs))
    if not ids:
        return "Slurm jobs"
    shown = ", ".join(str(i) for i in ids[:5]) + (", ..." if len(ids) > 5 else "")
    return f"Slurm job{'s' if len(ids) > 1 else ''} {shown}"


def _name(obj: Obj) -> str:
    return str(obj["metadata"]["name"])
