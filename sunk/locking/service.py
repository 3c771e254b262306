"""The hook API's work: pre-hook, post-hook and reboot, on any Syncer replica.

The pre-hook first looks the job up: a request counts only for a job that Slurm shows
holding that node (a token holder must not be able to taint a Node and evict its Pods by
naming any job id), and the job's AdminComment (which only Slurm's super users write), not the
caller, says whether it is a placeholder (strict). The Slurm cache answers when it shows the job
running there (that is Slurm's word, at most one poll old); anything else, typically a job
allocated since the last poll, is read from Slurm there and then, one read shared by the pre-hooks of
all the job's nodes (``jobreads.py``). A cache that has not seen a job never refuses it.

The pre-hook never locks anything itself. It records a lock request on the slurmd Pod (which
starts the leader's lock controller at once, wherever that runs), then waits on the Pod
informer until the lock annotation says the level is reached. It trusts only a view of the
Pod that already holds its own request: the controller's unlock is written on a
precondition, so such a view cannot show a lock that is about to be released.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import attrs

from sunk.hooks.protocol import Body, HookError, PostHook, PreHook, Reboot
from sunk.kube import client as kc
from sunk.kube.resources import object_key
from sunk.model import names
from sunk.model.slurm import Job, NodeUpdate
from sunk.model.types import Obj
from sunk.slurm.errors import NotFound, SlurmError
from sunk.syncer.context import SyncerContext
from sunk.translate import drains
from sunk.translate import lock as machine

from .batcher import AnnotationBatcher
from .config import LockConfig
from .controller import pods_on
from .evictions import EvictionLog
from .jobreads import JobRead, SharedJobReads
from .reboot import request_reboot
from .requests import LockRequest, request_key
from .waiter import ObjectWaiter
from .waitslots import WaitSlots

log = logging.getLogger(__name__)
RETRY_AFTER = 1  # seconds a pre-hook refused as busy (429) is told to wait before asking again
MAX_REASON = 230  # Slurm keeps drain reasons short; the prolog adds its own prefix


@attrs.define
class LockService:
    ctx: SyncerContext
    config: LockConfig
    waiter: ObjectWaiter
    batcher: AnnotationBatcher  # request writes, grouped per slurmd Pod
    evictions: EvictionLog
    is_placeholder: Callable[[Job], bool]
    nudge: Callable[[str], None]  # reconcile this Slurm node soon (and refresh the Slurm cache)
    ready: Callable[[], bool]
    job_reads: SharedJobReads  # the pre-hooks' reads of a job, one per job shared by all its nodes' prologs
    wait_slots: WaitSlots  # how many pre-hooks may wait at once, per node and in all
    clock: Callable[[], float] = time.time

    # ---- pre-hook ----------------------------------------------------------------------------

    def pre_hook(self, node: str, request: PreHook) -> Body:
        """Check the job, record the request, wait for the lock. A slot of ``wait_slots`` is held from before the
        job's read to the answer, so every thread a pre-hook holds counts against the bounds."""
        self._require_ready()
        pod = self._slurmd_pod(node)
        timeout = self.config.clamp_timeout(request.timeout)
        deadline = time.monotonic() + timeout
        slot = self.wait_slots.take(node, request.job_id)
        if slot is None:
            raise self._busy(node, request.job_id)
        try:
            if slot.took_over:  # the older call for this node and job stops waiting, and gives its slot back
                self.waiter.wake(object_key(pod))
            if not self.wait_slots.wait_turn(slot, timeout):
                raise self._superseded(node, request.job_id)
            job = self._job_holding(node, request.job_id, deadline)
            if self.wait_slots.superseded(slot):
                raise self._superseded(node, request.job_id)
            strict = request.strict or self.is_placeholder(job)
            return self._lock_and_wait(node, pod, request.job_id, strict, timeout, deadline,
                                       superseded=lambda: self.wait_slots.superseded(slot))
        finally:
            self.wait_slots.give_back(slot)

    def _busy(self, node: str, job_id: int) -> HookError:
        """The retryable refusal of a pre-hook beyond the bounds on waiters (``WaitSlots``): nothing recorded."""
        slots = self.wait_slots
        which = (f"{slots.waiting(node)} pre-hooks already wait for Slurm node {node}"
                 if slots.waiting(node) >= slots.per_node else f"{slots.waiting()} pre-hooks already wait")
        return HookError(429, f"too many pre-hooks waiting ({which}): ask again in {RETRY_AFTER}s",
                         reason="hook API busy", node=node, job_id=job_id, retry_after=RETRY_AFTER)

    def _superseded(self, node: str, job_id: int) -> HookError:
        """The answer of a call a newer pre-hook for the same node and job took over (its caller, a prolog that
        retried, is usually gone): retryable, and its request is left to the newer call."""
        return HookError(429, f"a newer pre-hook for job {job_id} on Slurm node {node} took this wait over, or "
                              f"an older one had not ended: ask again in {RETRY_AFTER}s",
                         reason="hook API busy", node=node, job_id=job_id, retry_after=RETRY_AFTER)

    def _lock_and_wait(self, node: str, pod: Obj, job_id: int, strict: bool, timeout: float, deadline: float,
                       superseded: Callable[[], bool]) -> Body:
        started = time.monotonic()
        lock_request = LockRequest(job_id, strict, self.clock())
        self._patch(pod, {lock_request.key: lock_request.value()})
        self.nudge(node)

        def reached(current: Obj | None) -> bool:
            if current is None:
                return False
            annotations = current["metadata"].get("annotations") or {}
            return lock_request.key in annotations and machine.satisfies(
                machine.parse_state(annotations.get(names.LOCK_KEY)), strict=strict)

        ok, last = self.waiter.wait(object_key(pod), reached, deadline - time.monotonic(), cancelled=superseded)
        waited = round(time.monotonic() - started, 3)
        level = "strict" if strict else "normal"
        if ok and last is not None:  # (reached() is false for None: ok implies a Pod)
            state = (last["metadata"].get("annotations") or {}).get(names.LOCK_KEY)
            return {"node": node, "job_id": job_id, "level": level, "state": state, "waited_seconds": waited}
        if superseded():  # (the request is the newer call's now: it waits its turn until this one has answered)
            raise self._superseded(node, job_id)
        self._withdraw(last or pod, lock_request.key)
        raise self._timed_out(node, job_id, strict, timeout, last)

    def _timed_out(self, node: str, job_id: int, strict: bool, timeout: float, pod: Obj | None) -> HookError:
        state = ((pod or {}).get("metadata", {}).get("annotations") or {}).get(names.LOCK_KEY, "false")
        k8s_node = ((pod or {}).get("spec") or {}).get("nodeName") or ""
        blocking = []
        # (which Pods to name, not which to evict: the controller decides that with its own facts)
        blockers = machine.pods_to_evict(pods_on(self.ctx, k8s_node, pod) if k8s_node else [], strict=strict,
                                         effect=self.config.taint_effect,
                                         vouched=machine.Vouched.everything(self.ctx.config.scheduler_names))
        for p in blockers:
            key = object_key(p)
            entry: dict[str, Any] = {"pod": key}
            if p["metadata"].get("deletionTimestamp"):
                entry["why"] = "still terminating"
            elif (note := self.evictions.get(key)) is not None and note.outcome == "blocked":
                entry["why"] = f"eviction refused: {note.message}"
            elif note is not None and note.outcome == "error":
                entry["why"] = f"eviction failed: {note.message}"
            blocking.append(entry)
        if blocking:
            first = blocking[0]
            detail = f"{len(blocking)} Pod(s) still on Node {k8s_node}: {first['pod']}"
            if "why" in first:
                detail += f" ({first['why']})"
        else:
            detail = f"lock state still {state}"
        level = "strict " if strict else ""
        error = f"Slurm node {node} not {level}locked for job {job_id} within {timeout:g}s"
        # The reason the prolog drains with, if it can name the whole cause: the Syncer lifts it once gone.
        drain_reason = drains.lock_timeout_reason(job_id, timeout, k8s_node, blockers, state, strict,
                                                  self.config.taint_effect)
        return HookError(504, error, reason=_one_line(f"{level}lock timeout after {timeout:g}s: {detail}"),
                         node=node, job_id=job_id, state=state, blocking_pods=blocking,
                         **({"drain_reason": drain_reason} if drain_reason else {}))

    def _job_holding(self, node: str, job_id: int, deadline: float) -> Job:
        """The job, if Slurm shows it holding ``node``: from the cache when it says so, else from a read shared
        with the other nodes' pre-hooks for the job (``SharedJobReads``, waited for until ``deadline`` on
        ``time.monotonic``); a refusal only from a read begun after this call."""
        cached = self.ctx.slurm_jobs.get(job_id)
        if cached is not None and cached.active and node in cached.node_list:
            return cached
        asked_at = self.job_reads.clock()
        read = self.job_reads.recent(job_id, timeout=deadline - time.monotonic())
        refusal = _refusal(node, read)
        if refusal is not None and read.began < asked_at:
            read = self.job_reads.fresh(job_id, asked_at, timeout=deadline - time.monotonic())
            refusal = _refusal(node, read)
        if refusal is not None:
            raise refusal
        assert read.job is not None  # (no refusal: a job Slurm shows)
        return read.job

    # ---- post-hook ---------------------------------------------------------------------------

    def post_hook(self, node: str, request: PostHook) -> Body:
        self._require_ready()
        pod = self._slurmd_pod(node)
        self._withdraw(pod, request_key(request.job_id))
        self.nudge(node)
        state = (pod["metadata"].get("annotations") or {}).get(names.LOCK_KEY, "false")
        body: Body = {"node": node, "job_id": request.job_id, "state": state,
                      "unlock": "as soon as Slurm reports no job on the node"}
        drained = self._drain_if_outlived(node, pod, request.job_id)
        if drained is not None:
            body["drained"] = drained
        return body

    def _drain_if_outlived(self, node: str, slurmd_pod: Obj, job_id: int) -> str | None:
        """Drain ``node`` if job ``job_id`` is a placeholder Slurm is ending while its Pod is still on the node's
        Kubernetes Node; the reason written, else None.

        Why here: the epilog runs as root on every node of the job once its processes are gone and before Slurm
        gives the node to another job, whoever the job ran as; the placeholder, which runs as its tenant, can
        only ask the scheduler. So a Pod that outlives its job never shares its node with the next Slurm job,
        even with the scheduler down. A call the Syncer cannot decide (Slurm unreachable) is a 503: the epilog
        then drains by itself. Cheap for every other job: the cache answers for a job that is no placeholder,
        or whose Pod is gone; only a Pod still there costs a read of that one job and of the node.
        """
        k8s_node = (slurmd_pod.get("spec") or {}).get("nodeName")
        if not k8s_node:
            return None  # (no Node: the Syncer's own condition drain keeps jobs off the node)
        pods = pods_on(self.ctx, k8s_node, slurmd_pod)
        cached = self.ctx.slurm_jobs.get(job_id)
        if cached is not None and drains.outlived(cached, pods) is None:
            return None  # no placeholder, or nothing of it left on the Node
        job = cached if cached is not None and drains.job_ending(cached) else self._read_job(job_id)
        found = drains.outlived(job, pods) if job is not None else None
        if job is None or found is None:
            return None
        if not drains.job_ending(job):  # (a token holder's call for a running job: only Slurm's end may drain)
            log.warning("post-hook for placeholder job %d on %s while Slurm shows it %s, not ending: no drain",
                        job_id, node, job.state)
            return None
        reason = found.drain.reason()
        try:
            current = self.ctx.slurm.read_node(node)  # (fresh: an operator's drain of a moment ago is theirs too)
            if not drains.may_drain_over(current, found.drain):
                log.info("%s not drained for job %d (%s): it stays %r", node, job_id, reason, current.reason)
                return None
            self.ctx.slurm.update_node(node, NodeUpdate(state="DRAIN", reason=reason))
        except NotFound:
            return None  # (a node gone from Slurm runs no next job)
        except SlurmError as exc:
            raise HookError(503, f"could not drain Slurm node {node} for Pod {found.drain.pod}, which outlived "
                                 f"job {job_id}: {exc}", reason="Slurm unavailable") from None
        log.warning("drained %s: %s", node, reason)
        self.ctx.recorder.warning(dict(found.pod), "PodOutlivedSlurmJob",
                                  f"Slurm ended job {job_id} while this Pod still ran on Slurm node {node} "
                                  f"(Node {k8s_node}): drained it until the Pod is gone ({reason})")
        return reason

    def _read_job(self, job_id: int) -> Job | None:
        """One job, read from Slurm now; None if Slurm no longer knows it (it holds no node then)."""
        try:
            return self.ctx.slurm.get_job(job_id)
        except NotFound:
            return None
        except SlurmError as exc:
            raise HookError(503, f"Slurm is unavailable, so whether job {job_id}'s Pod outlived it cannot be "
                                 f"checked: {exc}", reason="Slurm unavailable") from None

    # ---- reboot ------------------------------------------------------------------------------

    def reboot(self, node: str, request: Reboot) -> Body:
        # (no check of --node-permissions-enabled: node locking does not start without it, assembly.py)
        self._require_ready()
        pod = self._slurmd_pod(node)
        k8s_name = (pod.get("spec") or {}).get("nodeName")
        k8s_node = self.ctx.k8s_node_for(node)
        if k8s_node is None:
            raise HookError(404, f"Slurm node {node} has no Kubernetes Node (slurmd Pod {object_key(pod)} "
                                 f"is not bound to a known Node)")
        message = request.message or f"reboot requested through the sunk-syncer hook API for Slurm node {node}"
        try:
            condition = request_reboot(self.ctx.api, k8s_node, self.config.reboot_condition, self.config.reboot_reason,
                                       message)
        except kc.KubeError as exc:
            raise HookError(502, f"could not set the reboot condition on Node {k8s_name}: {exc}") from None
        self.ctx.recorder.normal(k8s_node, "RebootRequested", f"Slurm node {node}: {message}")
        log.info("reboot requested for Node %s (Slurm node %s): %s", k8s_name, node, message)
        return {"node": node, "k8s_node": k8s_name, "condition": condition}

    # ---- helpers -----------------------------------------------------------------------------

    def _require_ready(self) -> None:
        if not self.ready():
            raise HookError(503, "sunk-syncer is starting: its caches are not synced yet", reason="syncer not ready")

    def _slurmd_pod(self, node: str) -> Obj:
        pod = self.ctx.pod_for(node)
        if pod is None:
            raise HookError(404, f"unknown Slurm node {node}: no slurmd Pod runs it",
                            reason=f"unknown Slurm node {node} (no slurmd Pod)")
        return pod

    def _patch(self, pod: Obj, annotations: dict[str, str | None]) -> None:
        try:
            self.batcher.patch(pod, annotations)
        except kc.ApiError as exc:
            if exc.not_found:
                raise HookError(404, f"the slurmd Pod {object_key(pod)} is gone",
                                reason="slurmd Pod gone") from None
            raise HookError(502, f"could not record the lock request on {object_key(pod)}: {exc.message}",
                            reason="could not record the lock request") from None
        except kc.KubeError as exc:
            raise HookError(502, f"the Kubernetes API is unreachable: {exc}", reason="Kubernetes API unreachable") \
                from None

    def _withdraw(self, pod: Obj, key: str) -> None:
        """Drop a lock request; best effort (the controller expires it anyway)."""
        try:
            self._patch(pod, {key: None})
        except HookError as exc:
            log.warning("could not remove %s from %s: %s", key, object_key(pod), exc)


def _refusal(node: str, read: JobRead) -> HookError | None:
    """Why ``read`` does not let a pre-hook lock ``node``, or None when it shows the job active there."""
    job_id, job = read.job_id, read.job
    if read.error is not None:
        return HookError(503, f"Slurm is unavailable, so job {job_id} cannot be checked: {read.error}",
                         reason="Slurm unavailable")
    if job is None:
        return HookError(403, f"Slurm shows no job {job_id}: nothing to lock Slurm node {node} for",
                         reason=f"Slurm shows no job {job_id}")
    if not job.active:
        return HookError(409, f"Slurm job {job_id} has ended ({job.state}): nothing to lock",
                         reason=f"job {job_id} ended", ended=True)
    if node not in job.node_list:
        return HookError(403, f"Slurm job {job_id} does not hold Slurm node {node} (it holds "
                              f"{job.nodes or 'no node yet'})", reason=f"job {job_id} does not hold {node}")
    return None


def _one_line(text: str) -> str:
    """Printable ASCII without quotes or backslashes: safe in a JSON string a shell script greps."""
    cleaned = "".join(c if 32 <= ord(c) < 127 and c not in "\"\\" else " " for c in text)
    return cleaned[:MAX_REASON]
