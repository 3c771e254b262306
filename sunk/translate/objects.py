"""Readers of Kubernetes objects in wire form, one copy each, and the pure halves of sunk's writes.

Why here: the clients (``sunk/kube/patch.py``), the reconcilers and the translation all read the
same few fields (metadata, conditions, taints, readiness); the pure layer may import none of
the others, so the one copy lives in it. Every reader takes whatever the apiserver stored,
including what a Pod author wrote: a missing or null field reads as empty, never raises.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Optional, cast

from sunk.base.times import rfc3339
from sunk.model import names
from sunk.model.types import Obj

Wire = Mapping[str, Any]
"""An API object (or one of its parts) as the apiserver's JSON, read only."""

TERMINAL_PHASES = ("Succeeded", "Failed")


# ---- metadata -------------------------------------------------------------------------------


def meta(obj: Wire) -> Wire:
    """``metadata``, or an empty mapping."""
    return obj.get("metadata") or {}


def name_of(obj: Wire) -> str:
    return str(meta(obj).get("name") or "")


def namespace_of(obj: Wire) -> str:
    return str(meta(obj).get("namespace") or "")


def uid_of(obj: Wire) -> str:
    return str(meta(obj).get("uid") or "")


def annotations_of(obj: Wire) -> Mapping[str, str]:
    return meta(obj).get("annotations") or {}


def labels_of(obj: Wire) -> Mapping[str, str]:
    return meta(obj).get("labels") or {}


def is_deleting(obj: Wire) -> bool:
    """A deletion was asked (``deletionTimestamp`` set); the object may still linger (finalizers, grace)."""
    return bool(meta(obj).get("deletionTimestamp"))


def controller_ref(obj: Wire, kind: str, api_group: str) -> Optional[Wire]:
    """The owner reference of the ``kind`` (of ``api_group``, any version) that controls ``obj``; None if none."""
    for ref in meta(obj).get("ownerReferences") or ():
        if (ref.get("kind") == kind and str(ref.get("apiVersion", "")).startswith(f"{api_group}/")
                and ref.get("controller")):
            return cast(Wire, ref)
    return None


# ---- status conditions ----------------------------------------------------------------------


def conditions_of(obj: Wire) -> Iterator[Wire]:
    """``status.conditions`` in order; entries that are not objects are passed over."""
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if isinstance(cond, Mapping):
            yield cond


def condition(obj: Optional[Wire], ctype: str) -> Optional[Wire]:
    """The first condition of type ``ctype`` (the one kubectl and the kubelet read), or None."""
    return next((c for c in conditions_of(obj or {}) if c.get("type") == ctype), None)


def get_condition(obj: Wire, ctype: str) -> Optional[dict[str, Any]]:
    """A copy of the first condition of type ``ctype``, or None."""
    cond = condition(obj, ctype)
    return None if cond is None else dict(cond)


def condition_true(obj: Optional[Wire], ctype: str) -> bool:
    """The first condition of type ``ctype`` says ``True`` (absent, ``False`` and ``Unknown`` do not)."""
    cond = condition(obj, ctype)
    return cond is not None and cond.get("status") == "True"


# ---- Pods -----------------------------------------------------------------------------------


def node_name_of(pod: Wire) -> str:
    """The Node the Pod is bound to (``spec.nodeName``); empty while it is not."""
    return str((pod.get("spec") or {}).get("nodeName") or "")


def scheduling_gates(pod: Wire) -> tuple[str, ...]:
    """The names of the Pod's ``spec.schedulingGates``: while any is left, no scheduler may place it (the
    apiserver refuses its binding); gates are only ever removed, never added after creation."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or ()
    return tuple(str(g.get("name") or "?") if isinstance(g, Mapping) else str(g) for g in gates)


def phase_of(pod: Wire) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def is_terminal(pod: Wire) -> bool:
    """Its containers are done (Succeeded or Failed): it holds no node any more."""
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def pod_ready(pod: Wire) -> bool:
    """Running, Ready and not terminating."""
    return not is_deleting(pod) and condition_true(pod, "Ready")


# ---- Nodes ----------------------------------------------------------------------------------


def node_ready(node: Optional[Wire]) -> bool:
    """The Node exists and its Ready condition is True (False and Unknown: its kubelet is gone or failing;
    a Node that never reported Ready is not)."""
    return node is not None and condition_true(node, "Ready")


def taints_of(node: Wire) -> Sequence[Wire]:
    return (node.get("spec") or {}).get("taints") or ()


def has_taint(node: Wire, key: str, effect: Optional[str] = None) -> bool:
    """A taint ``key`` (with ``effect``, if given) is on the Node."""
    return any(t.get("key") == key and (effect is None or t.get("effect") == effect) for t in taints_of(node))


def is_cordoned(node: Wire) -> bool:
    """``kubectl cordon`` sets spec.unschedulable."""
    return bool((node.get("spec") or {}).get("unschedulable"))


def cordon_reason(node: Wire) -> Optional[str]:
    """The operator's reason for the cordon, from SUNK's annotation, if any."""
    return annotations_of(node).get(names.ANN_CORDON_REASON) or None


def slim_node(node: Wire, *, labels: bool = False, deletion: bool = False, taints: bool = False,
              ready: bool = False, addresses: bool = False) -> dict[str, Any]:
    """A Node cut down to its identity and the parts asked for, for an informer's store.

    A Node is mostly status that changes with every heartbeat; a store keeps what its readers read.
    ``ready`` keeps the first Ready condition's status only (its times would only make copies); ``labels``
    are kept with their keys and values interned: the Nodes of a pool carry the same thirty-odd labels, one
    copy of each string for all of them (a third of the memory at 5000 Nodes).
    """
    metadata = meta(node)
    keep = ("name", "uid", "resourceVersion") + (("deletionTimestamp",) if deletion else ())
    slim: dict[str, Any] = {
        "apiVersion": node.get("apiVersion", "v1"), "kind": node.get("kind", "Node"),
        "metadata": {k: metadata[k] for k in keep if k in metadata},
    }
    if labels and "labels" in metadata:
        slim["metadata"]["labels"] = interned_labels(metadata["labels"])
    if taints:
        slim["spec"] = {"taints": list(taints_of(node))}
    status: dict[str, Any] = {}
    if ready:
        cond = condition(node, "Ready")
        status["conditions"] = [] if cond is None else [{"type": "Ready", "status": cond.get("status")}]
    if addresses:
        status["addresses"] = (node.get("status") or {}).get("addresses") or []
    if ready or addresses:
        slim["status"] = status
    return slim



# ---- the Syncer's stores (client-go's SetTransform) ----------------------------------------------

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
"""kubectl's copy of the whole object as last applied: a second object in an annotation, read by nobody in sunk."""

# What of a Node's metadata the Syncer's Node store keeps (its Pod store: ``podstores.syncer_slim_pod``).
# ``resourceVersion``: the guarded writes
# (``kp.update_with_retry``) send it as a precondition; apiVersion and kind go into Events.
_NODE_METADATA = ("name", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "labels",
                  "annotations")
_NODE_SPEC = ("unschedulable", "taints")
_NODE_STATUS = ("conditions",)


def _kept(part: Any, keys: Sequence[str]) -> dict[str, Any]:
    """``keys`` of ``part``, those it has; a part that is not an object (a hostile or broken one) keeps none."""
    return {k: part[k] for k in keys if k in part} if isinstance(part, Mapping) else {}


def _metadata(obj: Wire, keys: Sequence[str]) -> dict[str, Any]:
    kept = _kept(meta(obj), keys)
    annotations = kept.get("annotations")
    if isinstance(annotations, Mapping) and LAST_APPLIED in annotations:
        kept["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
    return kept


def _slim(obj: Wire, metadata: Sequence[str], spec: Sequence[str], status: Sequence[str]) -> dict[str, Any]:
    slim: dict[str, Any] = {k: obj[k] for k in ("apiVersion", "kind") if k in obj}
    slim["metadata"] = _metadata(obj, metadata)
    if kept_spec := _kept(obj.get("spec"), spec):
        slim["spec"] = kept_spec
    if kept_status := _kept(obj.get("status"), status):
        slim["status"] = kept_status
    return slim


def without_write_records(obj: Wire) -> dict[str, Any]:
    """The object without ``metadata.managedFields`` and kubectl's last-applied annotation: who wrote which
    field, often a third of a Pod, read by nobody in sunk and never part of a sunk write (every write is a
    merge patch of named fields). The Syncer's slurmd-Pod store: those Pods have many readers (the sync plan,
    locking, the hook API's node credentials, clean-up), so they keep every other field."""
    metadata = dict(meta(obj))
    metadata.pop("managedFields", None)
    annotations = metadata.get("annotations")
    if isinstance(annotations, Mapping) and LAST_APPLIED in annotations:
        metadata["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
    return {**obj, "metadata": metadata}


def interned_labels(labels: Any) -> Any:
    """``labels`` with each key and value one shared string (``sys.intern``: freed with its last holder);
    anything but a map of strings as it came."""
    if not isinstance(labels, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                  for k, v in labels.items()):
        return labels
    return {sys.intern(k): sys.intern(v) for k, v in labels.items()}


def syncer_slim_node(node: Wire) -> dict[str, Any]:
    """What the Syncer's Node store (``nodes``) keeps of a Node: its images, addresses, capacity and
    nodeInfo go (with managedFields, most of a Node; the images list alone is up to 50 entries).

    Kept, and who reads it:
    - metadata: name (store key, ``slurm_nodes_on``), uid and resourceVersion (the guarded writes' preconditions),
      deletionTimestamp and annotations but kubectl's last-applied copy (the cordon reason: ``podcordon``,
      ``triggers.node_view``); labels (small, and what a third-party plugin most likely reads);
    - spec: unschedulable (``podcordon``, ``node_view``), taints, whole (``has_taint``, the lock's
      ``taints_changed``; ``kp.ensure_taint`` and ``kp.remove_taint`` merge-patch the whole list they read);
    - status: conditions, whole with their times (``node_ready``, ``node_view``; the Node controller's
      ``merge_conditions`` and the reboot hook merge-patch the whole list they read through nodes/status:
      a condition dropped here, the kubelet's MemoryPressure say, would be deleted from the Node); of
      ``allocatable`` the whole GPUs only, as ``allocatable_gpus`` reads them (``nodestate.gpu_shortfall``,
      ``node_view``).

    Unlike ``slim_node`` (the scheduler's and the operator's stores) this store is written back from."""
    slim = _slim(node, _NODE_METADATA, _NODE_SPEC, _NODE_STATUS)
    if (gpus := allocatable_gpus(node)) is not None:  # (kept as that reader reads it: the same answer from both)
        slim.setdefault("status", {})["allocatable"] = {names.GPU_RESOURCE: str(gpus)}
    return slim


def allocatable_gpus(node: Optional[Wire]) -> Optional[int]:
    """The whole GPUs the Node's device plugin offers as healthy (``status.allocatable``), or None when that
    says nothing sure of them: no count, or not a whole number; 0 (the kubelet reports 0 after its restart until
    the plugin registers again, while a plugin restarts, and for good once a Node's GPUs move to DRA or to MIG
    slices); or MIG slices offered beside (``nvidia.com/mig-*``: the whole GPUs are then only some of them)."""
    status = (node or {}).get("status")
    allocatable = status.get("allocatable") if isinstance(status, Mapping) else None
    if not isinstance(allocatable, Mapping) or any(isinstance(k, str) and k.startswith(names.MIG_RESOURCE_PREFIX)
                                                   for k in allocatable):
        return None
    value = allocatable.get(names.GPU_RESOURCE)
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 6 and int(value) > 0:
        return int(value)
    return None

# ---- what a write changes ---------------------------------------------------------------------


def metadata_diff(current: Optional[Mapping[str, str]],
                  wanted: Mapping[str, Optional[str]]) -> dict[str, Optional[str]]:
    """The merge-patch map that turns ``current`` into ``current`` updated by ``wanted``.

    A value of None in ``wanted`` means "remove the key".
    """
    current = current or {}
    diff: dict[str, Optional[str]] = {}
    for key, value in wanted.items():
        if value is None:
            if key in current:
                diff[key] = None
        elif current.get(key) != value:
            diff[key] = value
    return diff


def merge_conditions(
    existing: Sequence[Wire], wanted: Sequence[Mapping[str, Any]], remove: Iterable[str] = (), *, now: str
) -> Optional[list[Wire]]:
    """The new conditions list, or None when ``existing`` already says what ``wanted`` says.

    ``wanted`` items need ``type`` and ``status``, and may carry ``reason`` and ``message``.
    ``lastTransitionTime`` moves only when ``status`` changes. Managed types (wanted or
    removed) end up at most once each (duplicates of them once wedged a public peer); other
    types are kept untouched and in order.
    """
    wanted_by_type = {c["type"]: c for c in wanted}
    managed = set(wanted_by_type) | set(remove)
    out: list[Wire] = []
    emitted: set[str] = set()
    for cond in existing:
        ctype = cond.get("type", "")
        if ctype not in managed:
            out.append(cond)
            continue
        if ctype in emitted or ctype not in wanted_by_type:
            continue  # a duplicate, or a removed type
        out.append(_condition(wanted_by_type[ctype], cond, now))
        emitted.add(ctype)
    for ctype, want in wanted_by_type.items():
        if ctype not in emitted:
            out.append(_condition(want, None, now))
    return None if out == list(existing) else out


def conditions_patch(
    existing: Sequence[Wire], wanted: Sequence[Mapping[str, Any]], remove: Iterable[str] = (), *, now: str
) -> Optional[list[Wire]]:
    """The strategic-merge-patch list (merge key ``type``) that makes ``existing`` say ``wanted`` and not
    ``remove``, or None when it already does.

    Only the managed types are named, so ``existing`` needs only their entries, but every one of them, whole (an
    entry cut short would read as changed, and its lastTransitionTime be lost): a writer whose store dropped the
    kubelet's conditions cannot delete them, and no other writer's condition is carried back. A managed
    type that changes is deleted (every entry of it: duplicates go too) and written whole, so no field of its
    old entry (a message) survives the merge. ``lastTransitionTime`` as in ``merge_conditions``."""
    remove = tuple(remove)
    merged = merge_conditions(existing, wanted, remove, now=now)
    if merged is None:
        return None
    patch: list[Wire] = []
    for ctype in dict.fromkeys([*(c["type"] for c in wanted), *remove]):
        old = [c for c in existing if c.get("type") == ctype]
        new = [c for c in merged if c.get("type") == ctype]
        if old == new:
            continue
        if old:
            patch.append({"$patch": "delete", "type": ctype})
        patch.extend(new)
    return patch or None


def _condition(want: Mapping[str, Any], old: Optional[Wire], now: str) -> Wire:
    cond: dict[str, Any] = {"type": want["type"], "status": want["status"]}
    for field in ("reason", "message"):
        if want.get(field):
            cond[field] = want[field]
    if old is None:
        cond["lastTransitionTime"] = now
        return cond
    if all(old.get(k) == cond.get(k) for k in ("type", "status", "reason", "message")):
        return old  # unchanged: keep the exact object, so the list compares equal
    same_status = old.get("status") == want["status"]
    cond["lastTransitionTime"] = old.get("lastTransitionTime") if same_status else now
    if not cond["lastTransitionTime"]:
        cond["lastTransitionTime"] = now
    if old.get("lastProbeTime"):
        cond["lastProbeTime"] = old["lastProbeTime"]
    return cond


# ---- Node taints ---------------------------------------------------------------------------------


def taint_patch(current: Obj, key: str, value: str | None = None, effect: str = "NoSchedule") -> Obj | None:
    """The merge patch that makes ``key=value:effect`` the one taint with ``key`` (None: it is already).

    A taint of ``key`` with another effect goes: the key is ours, and one left over from an
    earlier effect setting would outlive every unlock.
    """
    taints = list((current.get("spec") or {}).get("taints") or [])
    want: Obj = {"key": key, "effect": effect}
    if value is not None:
        want["value"] = value
    others = [t for t in taints if t.get("key") != key]
    same = [t for t in taints if t.get("key") == key and t.get("effect") == effect]
    if len(same) == 1 and len(others) == len(taints) - 1 and same[0].get("value") == value:
        return None
    if same:
        kept = {**same[0], **want}
        if value is None:
            kept.pop("value", None)
    else:
        kept = want
        if effect == "NoExecute":
            kept["timeAdded"] = rfc3339()  # what kubectl and the taint manager expect
    return {"spec": {"taints": [*others, kept]}}


def untaint_patch(current: Obj, key: str, effect: str | None = None) -> Obj | None:
    """The merge patch that removes taint ``key`` (only with ``effect``, if given); None: there is none."""
    taints = (current.get("spec") or {}).get("taints") or []
    kept = [t for t in taints if not (t.get("key") == key and (effect is None or t.get("effect") == effect))]
    if len(kept) == len(taints):
        return None
    return {"spec": {"taints": kept or None}}


def merged_patches(*patches: Optional[Mapping[str, Any]]) -> Optional[dict[str, Any]]:
    """Merge patches of disjoint top-level fields into one (None: none had anything to write)."""
    body: dict[str, Any] = {}
    for patch in patches:
        for key, value in (patch or {}).items():
            body[key] = {**body.get(key, {}), **value}
    return body or None
