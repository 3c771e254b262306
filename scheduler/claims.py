"""The ResourceClaims of the Pods sunk-scheduler places (issue 38): what they ask Slurm for, and what waits.

With ``--dra-device-mapping`` a Pod may name ResourceClaims of the mapped DeviceClasses instead of asking for
``nvidia.com/gpu``: its placeholder job asks Slurm for as many GPUs as its claims do (``dra.claim_plan``), and
once Slurm has placed it the claims are filled with the devices of the GRES indices Slurm gave the job
(``ClaimAllocator``, at binding). Slurm stays the one accountant of the node's GPUs. A claim made from a
template does not exist when the Pod does (kube-controller-manager makes it): the Pod waits for it, not Slurm.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from sunk.kube import client as kube
from sunk.kube import protowire
from sunk.kube.dra import INDEX_NODE
from sunk.kube.resources import PODS, RESOURCECLAIMS
from sunk.model.types import Obj
from sunk.translate import dra
from sunk.translate.objects import is_terminal
from sunk.translate.podjob import GPU_RESOURCE, gpu_clauses
from sunk.translate.resources import pod_requests

log = logging.getLogger(__name__)

INDEX_CLAIMS = "resource-claims"  # PodIndex: namespace/name of each ResourceClaim a Pod names


def claim_keys(pod: Obj) -> list[str]:
    """The ``namespace/name`` of each claim the Pod names (a template's once made): its claims' informer keys."""
    namespace = pod["metadata"].get("namespace", "")
    return [f"{namespace}/{c.claim}" for c in dra.pod_claims(pod) if c.claim]


@attrs.frozen
class ClaimsView:
    """The claims as the scheduler's informer holds them, read for one Pod at a time."""

    mapping: dra.DeviceMapping
    claims: Any  # the ResourceClaims informer (its store: ``get(namespace/name)``)

    def seen(self, pod: Obj) -> dict[str, Obj]:
        """The Pod's claims the informer holds, by name."""
        namespace = pod["metadata"].get("namespace", "")
        seen = {}
        for entry in dra.pod_claims(pod):
            if entry.claim and (claim := self.claims.get(f"{namespace}/{entry.claim}")) is not None:
                seen[entry.claim] = claim
        return seen

    def plan(self, pod: Obj) -> dra.ClaimPlan:
        return dra.claim_plan(pod, self.seen(pod), self.mapping)

    def problems(self, pod: Obj) -> tuple[str, ...]:
        """Why the Pod's claims keep it from a placeholder job (for its Event and condition)."""
        if not dra.pod_claims(pod):
            return ()
        if _plugin_gpus(pod):
            return ("spec.resourceClaims: a Pod gets its GPUs through ResourceClaims or as nvidia.com/gpu, not both",)
        plan = self.plan(pod)
        if plan.refused:
            return (f"spec.resourceClaims: {plan.refused}",)
        if plan.gres_type and gpu_clauses(pod):
            return (f"spec.resourceClaims: the GPU type comes from the claims' DeviceClass ({plan.gres_type}); drop "
                    "the GPU class or model affinity",)
        return ()

    def gpus_per_node(self, members: Sequence[Obj]) -> int:
        """The GPUs a gang's job asks per node: the most any member asks, through claims or as nvidia.com/gpu."""
        return max((self.plan(pod).gpus + _plugin_gpus(pod) for pod in members), default=0)

    def gres_type(self, members: Sequence[Obj]) -> str:
        """The GRES type the gang's members' claims ask for ("": untyped, or none has claims)."""
        return next((t for pod in members if (t := self.plan(pod).gres_type)), "")

    def gang_disagreement(self, members: Sequence[Obj]) -> str:
        """Why the gang's job could not fill its members' claims ("" when it can: ``dra.gang_gpu_disagreement``,
        and one GRES type for all); members whose claims are not all seen yet wait instead, and are left out."""
        named_by: dict[str, list[str]] = {}
        for pod in members:
            for key in claim_keys(pod):
                named_by.setdefault(key, []).append(pod["metadata"].get("name", ""))
        if shared := sorted(key for key, names in named_by.items() if len(names) > 1):
            return (f"spec.resourceClaims: ResourceClaim {shared[0]} is named by {len(named_by[shared[0]])} members "
                    f"({', '.join(sorted(named_by[shared[0]]))}); each member is filled with its own node's GPUs, so "
                    "each needs claims of its own (a ResourceClaimTemplate makes them)")
        plans = [(pod, self.plan(pod)) for pod in members]  # (each member's plan once)
        if sharing := sorted(pod["metadata"].get("name", "") for pod, plan in plans if plan.shards):
            return (f"spec.resourceClaims: the claims of {', '.join(sharing)} ask for GPU shards; a gang's members ask "
                    "for whole GPUs (shards are for a lone Pod)")
        ready = {f"{pod['metadata'].get('namespace', '')}/{pod['metadata'].get('name', '')}": plan
                 for pod, plan in plans if plan.requests and not plan.waiting and not plan.refused}
        if len(types := {plan.gres_type for plan in ready.values()}) > 1:
            named = ", ".join(sorted(t or "untyped" for t in types))
            return (f"spec.resourceClaims: the members' claims ask for GPUs of more than one GRES type ({named}); a "
                    "gang's Slurm job asks for one")
        per_node = max((plan.gpus + _plugin_gpus(pod) for pod, plan in plans), default=0)
        claimed = {name: plan.gpus for name, plan in ready.items()}
        return dra.gang_gpu_disagreement(claimed, per_node) if claimed else ""

    def waiting_for(self, pod: Obj) -> str:
        """What the Pod waits for before its job is submitted ("": nothing): claims not made or not seen yet."""
        waiting = self.plan(pod).waiting if dra.pod_claims(pod) else ()
        return f"waiting for its ResourceClaims to be made: {', '.join(waiting)}" if waiting else ""


# kube-scheduler's finalizer on the claims it allocates: the claim is not deleted while the kubelet may use its
# devices; kube-controller-manager's resourceclaim controller removes it once the claim is deallocated.
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"


class ClaimsNotReady(Exception):
    """The claims cannot be filled yet (Slurm's record without the GRES detail): the binding waits and is retried."""


class ClaimsChanged(Exception):
    """The Pod's claims no longer fit its job (gone, refused, another count since it was submitted): its author's
    doing, so its job goes, and no node is drained for it."""


class DeviceMismatch(Exception):
    """Slurm's GRES and the driver's devices disagree on the Node: nothing is bound; the node must be drained."""

    def __init__(self, mismatch: dra.Mismatch):
        super().__init__(mismatch.message)
        self.mismatch = mismatch


# How long a binding may wait for claims that are not ready (a record without the GRES detail, a device still
# being released, a claim written to meanwhile) before the job goes: its GPUs must not be held for ever.
CLAIMS_READY_DEADLINE = 60.0


@attrs.define
class ClaimAllocator:
    """Fills a Pod's claims with the devices of the GRES indices Slurm gave its job on the node, just before the
    binding (``Binder.bind``), as kube-scheduler's DynamicResources plugin does at its own binding: the
    delete-protection finalizer first, then the claim's status (allocation and ``reservedFor`` the Pod), each on
    the version read. A retried binding writes nothing a claim shows already. ``ours(uid)``: a Pod of this
    scheduler's (a device its claim holds is on its way out: that Pod's job has ended, or Slurm would not have
    given the device again)."""

    api: Any
    slurm: Any  # SlurmClient: one read of the job with its allocations per binding of a Pod with claims
    view: ClaimsView
    slices: Any  # the mapped driver's ResourceSlices informer, indexed by INDEX_NODE
    classes: Any = None  # the DeviceClasses informer (``get(name)``): their config goes into the allocation
    ours: Callable[[str], bool] = lambda _uid: False
    # Whether a claim's consumer (``namespace``, its ``reservedFor`` entry) that is not ``ours`` has ended: a Pod of
    # sunk's other front end, finished, deleting or gone (the apiserver's word, asked only when a device Slurm gave
    # the job is held by such a claim: then it is on its way out, as a Pod of ours would be).
    ended: Callable[[str, Obj], bool] = lambda _namespace, _consumer: False
    clock: Callable[[], float] = time.monotonic
    deadline: float = CLAIMS_READY_DEADLINE
    _not_ready_since: dict[str, float] = attrs.field(init=False, factory=dict)  # Pod UID -> first wait
    _lock: threading.Lock = attrs.field(init=False, factory=threading.Lock)

    def allocate(self, pod: Obj, job_id: int, slurm_node: str, k8s_node: str) -> None:
        """ClaimsNotReady: retried, until ``deadline`` has passed since the first; then ClaimsChanged (the job goes)."""
        if not dra.pod_claims(pod):
            return
        uid = pod["metadata"]["uid"]
        try:
            self._allocate(pod, job_id, slurm_node, k8s_node)
        except ClaimsNotReady as exc:
            now = self.clock()
            with self._lock:
                since = self._not_ready_since.setdefault(uid, now)
                for stale in [u for u, t in self._not_ready_since.items() if now - t > 10 * self.deadline]:
                    del self._not_ready_since[stale]  # (Pods gone meanwhile)
            if now - since >= self.deadline:
                self._forget(uid)
                raise ClaimsChanged(f"its ResourceClaims were not ready within {self.deadline:.0f}s: {exc}") from exc
            raise
        except ClaimsChanged:
            self._forget(uid)
            raise
        self._forget(uid)

    def _forget(self, uid: str) -> None:
        with self._lock:
            self._not_ready_since.pop(uid, None)

    def _allocate(self, pod: Obj, job_id: int, slurm_node: str, k8s_node: str) -> None:
        # The claims as seen now, planned and written from the same objects: one changed (or made again under its
        # name) since is a 409 at the write, and is read and planned again, never written from another's plan.
        seen = self.view.seen(pod)
        plan = dra.claim_plan(pod, seen, self.view.mapping)  # (seen whole at submission: one missing now is gone)
        if plan.refused or plan.waiting:
            raise ClaimsChanged(plan.refused or f"its ResourceClaims {', '.join(plan.waiting)} are gone")
        mapping = self.view.mapping
        job = self.slurm.get_job_allocations(job_id)
        allocation = next((a for a in job.allocations if a.node == slurm_node), None)
        if allocation is None or allocation.gres_unread:
            raise ClaimsNotReady(f"Slurm's record of job {job_id} does not show which GPUs it holds on {slurm_node}")
        devices = dra.node_devices(self.slices.by_index(INDEX_NODE, k8s_node), k8s_node, mapping.driver)
        others = self.view.claims.by_index(INDEX_NODE, k8s_node)
        own = frozenset(claim_keys(pod))
        going = [c for c in others if self._releasing(c)]
        staying = [c for c in others if not self._releasing(c)]

        shared = mapping.shard_classes if plan.shards else frozenset()  # (a GPU's sharers are Slurm's to count)

        def results_with(staying: list[Obj], going: list[Obj]) -> Any:
            held = dra.held_devices(staying, k8s_node, mapping.driver, besides=own, shared=shared)
            releasing = dra.held_devices(going, k8s_node, mapping.driver, besides=own, shared=shared)
            return dra.allocation_results(plan.requests, allocation.gres, devices, mapping, k8s_node, held, releasing)

        results = results_with(staying, going)
        if isinstance(results, dra.Mismatch) and (ended := [c for c in staying if self._consumers_ended(c)]):
            results = results_with([c for c in staying if c not in ended], going + ended)
        if isinstance(results, dra.Mismatch):
            raise DeviceMismatch(results)
        if isinstance(results, dra.JobUnfit):
            raise ClaimsChanged(results.message)
        if isinstance(results, dra.Releasing):
            raise ClaimsNotReady(results.message)
        namespace = pod["metadata"]["namespace"]
        class_of = self.classes.get if self.classes is not None else lambda _name: {}
        if missing := sorted({r.device_class for r in plan.requests if class_of(r.device_class) is None}):
            # (kube-scheduler allocates no claim of a class it does not see: the class's config would be lost)
            raise ClaimsNotReady(f"DeviceClass {', '.join(missing)} is not seen")
        for name, chosen in results.items():
            claim = seen[name]
            config = dra.allocation_config(claim, class_of)
            if not (dra.same_allocation(claim, chosen, k8s_node, config) and _reserved_for(claim, pod)):
                try:
                    self._write(claim, dra.claim_status(chosen, k8s_node, pod, config))
                except protowire.WireError as exc:  # (the apiserver's protobuf not as expected: retried, the job goes)
                    raise ClaimsNotReady(f"ResourceClaim {namespace}/{name}: no finalizer written: {exc}") from exc
                except kube.ApiError as exc:
                    if exc.conflict:  # (not the Binding's 409: the claim changed under us; read again)
                        raise ClaimsNotReady(f"ResourceClaim {namespace}/{name} changed as it was written") from exc
                    if exc.not_found:
                        raise ClaimsChanged(f"its ResourceClaim {namespace}/{name} is gone") from exc
                    if exc.status == 422:  # (an allocation the apiserver refuses: its config too long, say)
                        raise ClaimsChanged(f"the apiserver refused ResourceClaim {namespace}/{name}'s allocation: "
                                            f"{exc.message[:300]}") from exc
                    raise
                log.info("ResourceClaim %s/%s: allocated %s on Node %s for Pod %s (job %d)", namespace, name,
                         ", ".join(r["device"] for r in chosen), k8s_node, pod["metadata"]["name"], job_id)

    def _write(self, claim: Obj, status: Obj) -> None:
        if DELETE_PROTECTION not in (claim["metadata"].get("finalizers") or ()):
            claim = kube.add_finalizer(self.api, RESOURCECLAIMS, claim, DELETE_PROTECTION)
        if (claim.get("status") or {}).get("allocation"):
            # Sunk's own earlier allocation for this Pod, of another job's devices (a binding that failed, the job
            # requeued): an allocation is replaced only through none.
            claim = kube.replace(self.api, RESOURCECLAIMS, {**claim, "status": {}}, subresource="status")
        kube.replace(self.api, RESOURCECLAIMS, {**claim, "status": status}, subresource="status")

    def _consumers_ended(self, claim: Obj) -> bool:
        """A claim reserved only for consumers that are ours or have ended (``ended``): on its way out too."""
        namespace = (claim.get("metadata") or {}).get("namespace", "")
        consumers = (claim.get("status") or {}).get("reservedFor") or ()
        return bool(consumers) and all(self.ours(str(c.get("uid", ""))) or self.ended(namespace, c)
                                       for c in consumers)

    def _releasing(self, claim: Obj) -> bool:
        """A claim on its way out: reserved only for Pods of this scheduler, or for none while it still carries the
        delete-protection finalizer (kube-controller-manager deallocates it then)."""
        consumers = (claim.get("status") or {}).get("reservedFor") or ()
        if not consumers:
            return DELETE_PROTECTION in ((claim.get("metadata") or {}).get("finalizers") or ())
        return all(c.get("resource") == "pods" and self.ours(str(c.get("uid", ""))) for c in consumers)


def pod_ended(api: Any) -> Callable[[str, Obj], bool]:
    """``ClaimAllocator.ended`` from the apiserver: the consumer is a Pod that is gone (or another under its name),
    finished, or being deleted. A failed read is no answer: the claim counts as held."""

    def ended(namespace: str, consumer: Obj) -> bool:
        if consumer.get("resource") != "pods":
            return False
        try:
            found = kube.get(api, PODS, str(consumer.get("name", "")), namespace)
        except kube.ApiError as exc:
            return exc.not_found
        return (found["metadata"].get("uid") != consumer.get("uid") or is_terminal(found)
                or bool(found["metadata"].get("deletionTimestamp")))

    return ended


def _plugin_gpus(pod: Obj) -> int:
    """The Pod's nvidia.com/gpu request (0 when malformed: validate_pod says so)."""
    try:
        return int(pod_requests(pod).get(GPU_RESOURCE) or 0)
    except ValueError:
        return 0


def _reserved_for(claim: Obj, pod: Obj) -> bool:
    uid = pod["metadata"]["uid"]
    return any(r.get("uid") == uid for r in (claim.get("status") or {}).get("reservedFor") or ())
