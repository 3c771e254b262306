"""What the daemons' Pod stores keep of a Pod (client-go's SetTransform), each field kept named with its readers.

Why: a real Pod is 29-38 KB of JSON and 4-5 times that once decoded; at 100k Pods a store of whole Pods is
gigabytes (issue 37 goal 5). Each transform keeps what its daemon reads and shares the strings that repeat
from Pod to Pod (dict keys, namespaces, node names, phases, condition types, timestamps), and the parts a
template's Pods hold alike (labels, owner reference, tolerations, containers: ``subtrees.one_copy``, frozen),
so that a stored Pod costs what is its own, not a copy of every word and part. Here, not in ``objects``, because
the Syncer's keeps only the labels and annotations ``gang`` reads, and ``gang`` imports ``objects``.

Whatever a transform drops, no reader of its store may read: the unit tests (``tests/unit/test_syncer_slim.py``,
``tests/unit/test_scheduler_slim.py``) record every field the readers read of a whole Pod and fail on one
that the transform lost or changed. A new reader of a store reads only what its transform keeps, or keeps
more here.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import Any

from sunk.model import names

from . import gang
from .objects import LAST_APPLIED, Wire, meta
from .quantity import parse_quantity
from .resources import pod_requests
from .subtrees import FrozenDict, FrozenList, one_copy

# Metadata values unique to one Pod: sharing them through the interpreter's table would only add an entry.
_UNIQUE_METADATA = ("name", "uid", "resourceVersion")


SHARED_DEPTH = 32
"""How deep ``shared`` rebuilds: an API object's own fields are far shallower; what lies deeper is free-form JSON a
tenant wrote (a claim's opaque parameters, which the apiserver stores up to Go's 10,000 levels), kept as decoded
rather than walked by a recursion that such nesting would exhaust."""


def shared(value: Any, depth: int = SHARED_DEPTH) -> Any:
    """``value`` rebuilt with every dict key and every string ``sys.intern``ed: equal strings become one object.

    Interned strings are freed with their last reference (CPython keeps no interned string alive by itself);
    what is not a dict, a list or a string, a part shared already (``subtrees.one_copy``), and what lies deeper
    than ``depth``, is kept as it is."""
    if isinstance(value, str):
        return sys.intern(value)
    if depth <= 0 or isinstance(value, (FrozenDict, FrozenList)):  # (a shared part: shared already)
        return value
    if isinstance(value, Mapping):
        return {sys.intern(str(k)): shared(v, depth - 1) for k, v in value.items()}
    if isinstance(value, list):
        return [shared(v, depth - 1) for v in value]
    return value


def shared_metadata(metadata: Mapping[str, Any], alike: Iterable[str] = ()) -> dict[str, Any]:
    """``metadata`` with its keys and repeated values shared, the values unique to one object as they are, and
    the parts named in ``alike`` (those many objects hold alike: the labels and owner reference of one template's
    Pods) replaced by their one frozen copy (``subtrees.one_copy``)."""
    alike = frozenset(alike)
    return {sys.intern(k): (v if k in _UNIQUE_METADATA else one_copy(v) if k in alike else shared(v))
            for k, v in metadata.items()}


_ALIKE_METADATA = ("labels", "ownerReferences")
"""What a Pod of a template (a Job's, a ReplicaSet's, a LeaderWorkerSet's) holds alike with its siblings."""


def _alike_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A Pod's spec, each of its parts (tolerations, containers, affinity, ...) the one copy its template's Pods
    share; its scalars (the node's name) interned."""
    return {sys.intern(str(k)): one_copy(v) for k, v in spec.items()}


def _only(part: Any, keys: Iterable[str]) -> dict[str, Any]:
    """``keys`` of ``part``, those it has; a part that is not an object (a hostile or broken one) keeps none."""
    return {k: part[k] for k in keys if k in part} if isinstance(part, Mapping) else {}


# ---- the Syncer's cluster-wide Pod store (``all-pods``) ------------------------------------------------------

_SYNCER_POD_METADATA = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
                        "labels", "annotations", "ownerReferences")
_SYNCER_POD_SPEC = ("nodeName", "schedulerName", "hostname", "tolerations")

SYNCER_POD_ANNOTATIONS = (names.ANN_JOB_ID, names.ANN_SLURM_NODE, *gang.POD_ANNOTATIONS_READ)
"""The annotations the Syncer reads of any Pod: the job and Slurm node sunk wrote (``lock.Vouched``,
``drains.placed_job``, ``triggers.slurm_nodes_of``) and what ``gang.gang_of`` reads."""

SYNCER_POD_LABELS = gang.POD_LABELS_READ
"""The labels the Syncer reads of any Pod: what ``gang.gang_of`` reads (no label selector of the Syncer's
configuration is evaluated on this store: its slurmd Pods are a store of their own, listed by the apiserver)."""


def syncer_slim_pod(pod: Wire) -> dict[str, Any]:
    """What the Syncer's cluster-wide Pod store (``all-pods``) keeps of a Pod, its strings shared.

    Kept, and who reads it:
    - metadata: name, namespace (store key, ``object_key``, Events, evictions); uid (``drains`` and
      ``triggers``: which Pod a drain or a placeholder job names; the uid precondition of every write);
      resourceVersion (``kp.add_toleration``'s guarded write); creationTimestamp (``lock.bound_time``);
      deletionTimestamp (``lock.pods_to_evict``, ``pods_to_tolerate``); ownerReferences (``gang.gang_of``);
      of the labels and annotations only ``SYNCER_POD_LABELS`` and ``SYNCER_POD_ANNOTATIONS``;
    - spec: nodeName (the INDEX_NODE indexer, ``facts.pod_node``), schedulerName (``Vouched``,
      ``placed_job``), hostname (``slurm_node_name``, for a Pod of the watched namespace deleted), tolerations
      (``lock.tolerates_lock``; whole: ``kp.add_toleration`` merge-patches the list it read, with its
      resourceVersion, so a list cut short here would be written back cut short);
    - status: phase (``is_terminal``, ``lock.finished``); of the conditions only PodScheduled's type, status
      and lastTransitionTime (``lock.bound_time``). No sunk write sends these conditions back: the Syncer
      writes conditions only onto slurmd Pods, from their own store.

    No sunk write puts a stored Pod back whole (merge patches of named fields only)."""
    metadata = _only(meta(pod), _SYNCER_POD_METADATA)
    for part, keep in (("labels", SYNCER_POD_LABELS), ("annotations", SYNCER_POD_ANNOTATIONS)):
        if part in metadata:
            metadata[part] = _only(metadata[part], keep)
    slim: dict[str, Any] = {k: shared(pod[k]) for k in ("apiVersion", "kind") if k in pod}
    slim["metadata"] = shared_metadata(metadata, _ALIKE_METADATA)
    if spec := _only(pod.get("spec"), _SYNCER_POD_SPEC):
        slim["spec"] = _alike_spec(spec)
    status_in = pod.get("status")
    status: dict[str, Any] = _only(status_in, ("phase",))
    if isinstance(status_in, Mapping) and isinstance(conditions := status_in.get("conditions"), list):
        status["conditions"] = [_only(c, ("type", "status", "lastTransitionTime")) for c in conditions
                                if isinstance(c, Mapping) and c.get("type") == "PodScheduled"]
    if status:
        slim["status"] = shared(status)
    return slim


# ---- the scheduler's Pod store (its own Pods: ``spec.schedulerName``) -----------------------------------------

# What of a container the scheduler reads (``resources.pod_requests``: the requests and limits summed into the
# job's; ``restartPolicy``: an init container that is a sidecar); its name for the messages that name it.
_CONTAINER = ("name", "resources", "restartPolicy")
# The bulk of a Pod that nothing of the scheduler reads: volumes, and the kubelet's per-container statuses.
_SCHEDULER_SPEC_DROPPED = ("volumes",)
# Of the status, what the scheduler reads: the phase (``is_terminal``, the finished job), its conditions (below) and
# the names the ResourceClaim controller gave the Pod's claims (``dra.pod_claims``); not the kubelet's container
# statuses, IPs, start time or QoS class.
_SCHEDULER_STATUS = ("phase", "conditions", "resourceClaimStatuses")

SCHEDULER_POD_CONDITIONS = ("PodScheduled",)
"""The condition types sunk-scheduler reads of its Pods (``waiting.current_condition``) and writes
(``kubeops.mark_unschedulable``, ``show_waiting``): every entry of them kept whole, since ``set_pod_conditions``
computes its patch from them; the kubelet's (Ready, ContainersReady, Initialized, ...) are never read."""


# What ``resources.pod_requests`` sums a Pod's requests from: folded into one container at intake.
_FOLDED = ("containers", "initContainers", "ephemeralContainers", "overhead", "resources")


def _requests_folded(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with its containers, overhead and pod-level resources replaced by one container requesting what
    they add up to (``pod_requests`` of the result is that of ``spec``): a dict per container and per resource map
    was most of what a stored Pod still weighed (issue 37 goal 5). Quantities written plainly (``format(v, "f")``),
    which parse back to the same value."""
    try:
        requests = pod_requests({"spec": spec})
        written = {k: format(v, "f") for k, v in requests.items()}
        if any(parse_quantity(text) != requests[k] for k, text in written.items()):
            return spec  # (kept as written: the folded text would not read back as the same value)
    except (ValueError, TypeError, AttributeError):  # (a reader's to refuse, with the message it gives: a sum past
        return spec                                  # a quantity's range too, which no container wrote)
    first = spec.get("containers")
    name = first[0].get("name", "") if isinstance(first, list) and first and isinstance(first[0], Mapping) else ""
    folded = {k: v for k, v in spec.items() if k not in _FOLDED}
    folded["containers"] = [{"name": name, "resources": {"requests": written}}]
    return folded


def scheduler_slim_pod(pod: Wire) -> dict[str, Any]:
    """What sunk-scheduler's Pod store keeps of its own Pods, its strings shared.

    Unlike the Syncer's, by subtraction: the scheduler translates the whole Pod into a job (``podjob``: the
    annotations of the seeds' table, requests, affinity, grace period, tolerations, labels of its gang) and
    writes from the stored Pod (``record_job`` merge-patches the whole tolerations list it read, guarded by the
    stored resourceVersion), so every part is kept but:
    - metadata.managedFields and kubectl's last-applied annotation (who wrote what; nobody reads them);
    - the containers, init containers and ephemeral containers, with spec.overhead and the pod-level
      spec.resources: folded into one container holding the Pod's requests as ``resources.pod_requests`` counts
      them (what every reader of them reads; image, command, env, mounts are the kubelet's, not Slurm's). A Pod
      whose quantities do not parse keeps its containers' names, resources and restartPolicy, for the reader to
      refuse with its own message;
    - spec.volumes;
    - of the status all but ``_SCHEDULER_STATUS``, and of the conditions those of types other than
      ``SCHEDULER_POD_CONDITIONS`` (``set_pod_conditions`` patches by type, naming only the types it writes)."""
    metadata = {k: v for k, v in meta(pod).items() if k != "managedFields"}
    annotations = metadata.get("annotations")
    if isinstance(annotations, Mapping) and LAST_APPLIED in annotations:
        metadata["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
    slim: dict[str, Any] = {k: shared(v) for k, v in pod.items() if k not in ("metadata", "spec", "status")}
    slim["metadata"] = shared_metadata(metadata, _ALIKE_METADATA)
    spec_in = pod.get("spec")
    if isinstance(spec_in, Mapping):
        spec = {k: v for k, v in spec_in.items() if k not in _SCHEDULER_SPEC_DROPPED}
        for key in ("containers", "initContainers", "ephemeralContainers"):
            if isinstance(spec.get(key), list):
                spec[key] = [_only(c, _CONTAINER) if isinstance(c, Mapping) else c for c in spec[key]]
        slim["spec"] = _alike_spec(_requests_folded(spec))
    elif "spec" in pod:
        slim["spec"] = spec_in
    status_in = pod.get("status")
    if isinstance(status_in, Mapping):
        status = _only(status_in, _SCHEDULER_STATUS)
        if isinstance(conditions := status.get("conditions"), list):
            status["conditions"] = [c for c in conditions
                                    if not isinstance(c, Mapping) or c.get("type") in SCHEDULER_POD_CONDITIONS]
        slim["status"] = shared(status)
    elif "status" in pod:
        slim["status"] = status_in
    return slim
