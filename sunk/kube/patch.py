"""Small write helpers that change only what differs, safely under concurrency.

Why each shape:
- Labels/annotations: a JSON merge patch of just the keys that differ. Other writers'
  keys are untouched, so no resourceVersion is needed.
- Lists (Node taints and conditions): a merge patch replaces the whole list, so it
  carries ``metadata.resourceVersion`` as a precondition. A stale view gets 409 Conflict
  instead of clobbering, for example, the kubelet's Ready condition. The helper then
  rereads and recomputes. Pod conditions go as a strategic merge patch naming only the
  types sunk manages (so a store may drop the others), under the same precondition.
  Condition types we manage are written exactly once each, and any duplicates of them are
  removed. Duplicate conditions once wedged a public peer.
- Every helper compares with the current object first and writes nothing when it already
  matches. The result is falsy then, so reconciles stay cheap and idempotent.

What differs (``metadata_diff``, ``conditions_patch``, ``taint_patch``; the lock's ``hold_patch`` and
``release_patch`` in ``sunk/translate/lock.py``) and every reader of the objects (conditions, taints,
cordon) are pure: they live in ``sunk/translate``.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
from kubernetes.client import ApiClient

from sunk.base.times import rfc3339
from sunk.kube import client as kc
from sunk.kube.resources import NODES, PODS, Resource, resource_for
from sunk.model.types import Obj
from sunk.translate import lock
from sunk.translate.objects import conditions_patch, is_cordoned, metadata_diff, taint_patch, untaint_patch
from sunk.translate.objects import meta as _meta

log = logging.getLogger(__name__)

DEFAULT_MAX_CONFLICTS = 5


@attrs.frozen
class PatchResult:
    """``wrote`` is whether anything was sent and accepted; ``obj`` is the object afterwards."""

    wrote: bool
    obj: Obj | None = None
    conflicts: int = 0

    def __bool__(self) -> bool:
        return self.wrote


# ---- labels and annotations ---------------------------------------------------------------


def patch_metadata(
    api: ApiClient,
    obj: Obj,
    *,
    labels: Mapping[str, str | None] | None = None,
    annotations: Mapping[str, str | None] | None = None,
    resource: Resource | None = None,
) -> PatchResult:
    """Set (value) or remove (None) labels and annotations; writes only the keys that differ."""
    meta = _meta(obj)
    patch: Obj = {}
    if labels:
        if diff := metadata_diff(meta.get("labels"), labels):
            patch["labels"] = diff
    if annotations:
        if diff := metadata_diff(meta.get("annotations"), annotations):
            patch["annotations"] = diff
    if not patch:
        return PatchResult(False, obj)
    new = patch_object(api, obj, {"metadata": patch}, resource=resource)
    return PatchResult(new is not None, new)


def set_labels(api: ApiClient, obj: Obj, labels: Mapping[str, str | None]) -> PatchResult:
    return patch_metadata(api, obj, labels=labels)


def set_annotations(api: ApiClient, obj: Obj, annotations: Mapping[str, str | None]) -> PatchResult:
    return patch_metadata(api, obj, annotations=annotations)


# ---- writes meant for one object ------------------------------------------------------------------


def with_uid(obj: Obj, body: Obj) -> Obj:
    """``body`` carrying ``obj``'s ``metadata.uid``, when it has one.

    Why: a write by name lands on whatever holds the name now, and a StatefulSet recreates a
    Pod under the same name. An object's uid is immutable, so the apiserver refuses a patch that
    would change it (422): the patch applies to ``obj`` itself or to nothing. The kubelet guards
    its Pod status patches the same way (kubernetes#86320).
    """
    uid = _meta(obj).get("uid")
    if not uid:
        return body
    return {**body, "metadata": {**(body.get("metadata") or {}), "uid": uid}}


def replaced(api: ApiClient, obj: Obj, resource: Resource | None = None) -> bool:
    """After a write to ``obj`` failed: True when it is gone, or another object now holds its name."""
    meta = _meta(obj)
    try:
        live = kc.get(api, resource or resource_for(obj), meta["name"], meta.get("namespace"))
    except kc.ApiError as exc:
        if exc.not_found:
            return True
        raise
    return bool(meta.get("uid")) and _meta(live).get("uid") != meta["uid"]


def patch_object(api: ApiClient, obj: Obj, body: Obj, *, resource: Resource | None = None,
                 subresource: str | None = None) -> Obj | None:
    """Merge-patch ``obj`` itself, never a successor with its name (``with_uid``).

    Returns the patched object, or None when ``obj`` is gone or was replaced (nothing written).
    """
    res = resource or resource_for(obj)
    meta = _meta(obj)
    try:
        return kc.patch(api, res, meta["name"], with_uid(obj, body), meta.get("namespace"), subresource=subresource)
    except kc.ApiError as exc:
        if exc.not_found:
            return None
        if meta.get("uid") and exc.status in (409, 422) and replaced(api, obj, res):
            log.debug("%s %s/%s was replaced by a newer object of that name: not written",
                      res.plural, meta.get("namespace"), meta["name"])
            return None
        raise


# ---- optimistic read-modify-write ------------------------------------------------------------


def update_with_retry(
    api: ApiClient,
    obj: Obj,
    mutate: Callable[[Obj], Obj | None],
    *,
    resource: Resource | None = None,
    subresource: str | None = None,
    max_conflicts: int = DEFAULT_MAX_CONFLICTS,
    patch_type: kc.PatchType = "merge",
) -> PatchResult:
    """Apply ``mutate(current) -> patch | None`` (a ``patch_type`` patch) with resourceVersion as precondition.

    On 409 Conflict the object is reread and ``mutate`` asked again, up to ``max_conflicts``
    times, then the ApiError is raised. ``mutate`` returning None means "nothing to do".
    The write is meant for ``obj`` itself: the patch carries its uid too, and when the reread
    finds it gone or replaced by a newer object of the same name, nothing is written.
    """
    res = resource or resource_for(obj)
    meta = _meta(obj)
    name, namespace = meta["name"], meta.get("namespace")
    current = obj
    conflicts = 0
    while True:
        body = mutate(current)
        if body is None:
            return PatchResult(False, current, conflicts)
        body = with_uid(obj, dict(body))
        body["metadata"] = {**(body.get("metadata") or {}), "resourceVersion": _meta(current)["resourceVersion"]}
        try:
            new = kc.patch(api, res, name, body, namespace, subresource=subresource, patch_type=patch_type)
            return PatchResult(True, new, conflicts)
        except kc.ApiError as exc:
            if not exc.conflict or conflicts >= max_conflicts:
                raise
            conflicts += 1
            log.debug("conflict writing %s %s/%s (attempt %d); rereading", res.plural, namespace, name, conflicts)
            try:
                current = kc.get(api, res, name, namespace)
            except kc.ApiError as gone:
                if gone.not_found:
                    return PatchResult(False, None, conflicts)
                raise
            if _meta(obj).get("uid") and _meta(current).get("uid") != _meta(obj)["uid"]:
                log.debug("%s %s/%s was replaced by a newer object of that name: not written", res.plural,
                          namespace, name)
                return PatchResult(False, None, conflicts)


# ---- Pod conditions -----------------------------------------------------------------------


def set_pod_conditions(
    api: ApiClient,
    pod: Obj,
    conditions: Sequence[Mapping[str, Any]],
    *,
    remove: Iterable[str] = (),
    max_conflicts: int = DEFAULT_MAX_CONFLICTS,
    unless: Callable[[Obj], bool] | None = None,
) -> PatchResult:
    """Make the Pod's ``status.conditions`` carry ``conditions`` (and not ``remove``), via pods/status.

    Of ``pod``'s conditions only those of the types named are read (``conditions_patch``): a stored Pod may
    keep those alone. ``unless(pod)``, asked again of each read (a conflict rereads), True: nothing is written
    (what the Pod became meanwhile, bound say, makes the condition wrong)."""
    remove = tuple(remove)
    now = rfc3339()

    def mutate(current: Obj) -> Obj | None:
        if unless is not None and unless(current):
            return None
        patch = conditions_patch((current.get("status") or {}).get("conditions") or [], conditions, remove, now=now)
        return None if patch is None else {"status": {"conditions": patch}}

    return update_with_retry(api, pod, mutate, resource=PODS, subresource="status", max_conflicts=max_conflicts,
                             patch_type="strategic")


# ---- Node taints and cordon ------------------------------------------------------------------


def ensure_taint(
    api: ApiClient, node: Obj, key: str, value: str | None = None, effect: str = "NoSchedule"
) -> PatchResult:
    """Make ``key=value:effect`` the one taint with ``key``; other keys' taints are kept (``taint_patch``)."""
    return update_with_retry(api, node, lambda current: taint_patch(current, key, value, effect), resource=NODES)


def add_toleration(api: ApiClient, pod: Obj, toleration: Obj) -> PatchResult:
    """Append ``toleration`` to a live Pod (one of the few spec changes Kubernetes allows)."""

    def mutate(current: Obj) -> Obj | None:
        tolerations = list((current.get("spec") or {}).get("tolerations") or [])
        if toleration in tolerations:
            return None
        return {"spec": {"tolerations": [*tolerations, toleration]}}

    return update_with_retry(api, pod, mutate, resource=PODS)


def remove_taint(api: ApiClient, node: Obj, key: str, effect: str | None = None, *,
                 unless: Callable[[Obj], bool] | None = None) -> PatchResult:
    """Remove taint ``key`` (only with ``effect``, if given). ``unless(node)`` is asked again of each read of
    the Node (a conflict rereads it): True leaves the taint, for a reason that may have come meanwhile."""

    def mutate(current: Obj) -> Obj | None:
        if unless is not None and unless(current):
            return None
        return untaint_patch(current, key, effect)

    return update_with_retry(api, node, mutate, resource=NODES)


def hold_lock(api: ApiClient, node: Obj, holder: str, effect: str) -> PatchResult:
    """sunk's lock taint on the Node, held by ``holder`` (``lock.holder_of`` a slurmd Pod): one write of both."""

    return update_with_retry(api, node, lambda current: lock.hold_patch(current, holder, effect), resource=NODES)


def release_lock(api: ApiClient, node: Obj, drop: Callable[[str], bool], *,
                 unless: Callable[[Obj], bool] | None = None) -> bool:
    """The holders ``drop`` names let go of the Node's lock; the taint goes once no holder is left (or none was
    ever named: an older sunk's taint). Whether the taint was removed. ``unless(node)``, asked again of each read
    (a conflict rereads), True: nothing is written."""
    lifted = False

    def mutate(current: Obj) -> Obj | None:
        nonlocal lifted
        lifted = False
        if unless is not None and unless(current):
            return None
        body, lifted = lock.release_patch(current, drop)
        return body

    return update_with_retry(api, node, mutate, resource=NODES).wrote and lifted


def set_unschedulable(api: ApiClient, node: Obj, unschedulable: bool = True) -> PatchResult:
    """Cordon (True) or uncordon (False) a Node."""
    if is_cordoned(node) == unschedulable:
        return PatchResult(False, node)
    body = {"spec": {"unschedulable": True if unschedulable else None}}
    return PatchResult(True, kc.patch(api, NODES, _meta(node)["name"], body))


# ---- eviction ---------------------------------------------------------------------------------


class EvictionOutcome(enum.Enum):
    EVICTED = "evicted"
    BLOCKED = "blocked"  # 429: a PodDisruptionBudget forbids it now; retry later
    NOT_FOUND = "not_found"  # the Pod (or this incarnation of it) is already gone


@attrs.frozen
class EvictionResult:
    outcome: EvictionOutcome
    message: str = ""

    @property
    def evicted(self) -> bool:
        return self.outcome is EvictionOutcome.EVICTED

    @property
    def blocked(self) -> bool:
        return self.outcome is EvictionOutcome.BLOCKED

    @property
    def not_found(self) -> bool:
        return self.outcome is EvictionOutcome.NOT_FOUND


def evict(
    api: ApiClient, pod: Obj, *, grace_period_seconds: int | None = None, dry_run: bool = False
) -> EvictionResult:
    """Evict through policy/v1 Eviction, so PodDisruptionBudgets are honoured.

    The Pod's uid is checked and sent as a precondition: a newer Pod with the same name is
    never evicted by mistake (that case reports NOT_FOUND). Other API errors raise ``ApiError``.
    """
    meta = _meta(pod)
    delete_options: Obj = {}
    if grace_period_seconds is not None:
        delete_options["gracePeriodSeconds"] = grace_period_seconds
    if meta.get("uid"):
        delete_options["preconditions"] = {"uid": meta["uid"]}
    if dry_run:
        delete_options["dryRun"] = ["All"]
    body: Obj = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "deleteOptions": delete_options,
    }
    if meta.get("uid"):
        # Check first: on a uid mismatch the apiserver retries the eviction internally for
        # ~10 s before answering 409 (measured on 1.34), which would stall a worker.
        try:
            live = kc.get(api, PODS, meta["name"], meta["namespace"])
        except kc.ApiError as exc:
            if exc.not_found:
                return EvictionResult(EvictionOutcome.NOT_FOUND, exc.message)
            raise
        if _meta(live).get("uid") != meta["uid"]:
            return EvictionResult(EvictionOutcome.NOT_FOUND, "the Pod was replaced by a newer one with the same name")
    try:
        kc.request(api, "POST", PODS.path(meta["namespace"], meta["name"], "eviction"), body=body)
    except kc.ApiError as exc:
        if exc.too_many_requests:
            return EvictionResult(EvictionOutcome.BLOCKED, exc.message)
        if exc.not_found:
            return EvictionResult(EvictionOutcome.NOT_FOUND, exc.message)
        if exc.conflict and "precondition" in exc.message.lower():
            return EvictionResult(EvictionOutcome.NOT_FOUND, exc.message)
        raise
    return EvictionResult(EvictionOutcome.EVICTED)
