"""One reconcile of a NodeSet, decided from facts: what to create, mark, drain, undrain and delete.

The rules (docs/nodeset.md says them for people):

- One slurmd Pod per assigned Node, named after its Slurm node. A Pod is created only on a
  Node that has no Pod of this NodeSet at all (a replaced or renamed Pod goes first), and
  only under a name that no other Pod holds.
- Nothing is deleted at once. A Pod to go is first *marked* (the annotation
  ``sunk.coreweave.com/pending-deletion`` says why), its Slurm node is drained with a
  ``k8s:`` reason (the Syncer, reading the same annotation, agrees on the reason), and the
  Pod is deleted only in a later reconcile, once Slurm shows the node drained (or down) with
  no job on it, or does not know the node at all. The reconciler reads that node from Slurm
  once more before the delete.
- Scale-in: a Pod whose Node no longer matches, lost its name to a collision, is past
  ``replicas``, or whose Slurm node name changed, is marked and goes as above.
- Each Slurm node registers with the NodeSet's fields joined by what its Node says (GPUs,
  labels: ``registration.py``). A Pod whose registration hash differs from its Node's now (the
  GPUs or a label changed) is outdated like one of an older template, and is replaced by the
  same rules (drained, replaced once idle: no job is killed). A Pod without that hash (made
  before the operator wrote it) is not replaced for it.
- Rolling update (``RollingUpdate``): a Pod with an older template hash is marked for update;
  then it goes as above and the normal "create" rule brings the new one. Never more than
  ``maxUnavailable`` assigned Nodes are unavailable (no Pod, terminating, not Ready, or
  marked) at once. Pods that are not Ready are marked first (they cost nothing), then those
  whose Slurm node is idle, then the busy ones, each by name. ``OnDelete``: nothing is
  marked for an update; a Pod deleted by someone comes back with the new template.
- Deleting the NodeSet: every Pod is marked and goes as above; the finalizer is removed once
  no Pod is left. With the annotation ``sunk.coreweave.com/on-delete: cancel-jobs`` (the chart's
  uninstall hook), the jobs on a marked Pod's node are cancelled once Slurm shows it drained, rather
  than waited for: an uninstall ends, and leaves no job behind.
- A mark no longer needed (the Node matches again, the template is back) is removed, and the
  node undrained if, and only if, its drain reason is the operator's own pending-deletion
  reason for that Pod. A drain a person (or NHC, or anything else) set is never lifted.
- Bad input freezes the NodeSet: with a problem in the spec nothing is created, marked,
  drained, undrained or deleted (only the deletion of the NodeSet itself still proceeds).
  A selector that matches no Node at all is taken for a mistake, not for "scale to zero"
  (``replicas: 0`` says that): nothing is marked, drained or deleted then. A Node without a
  usable name, or a name that collides, gets no Pod and a condition says why; no existing
  Pod is touched because of it (a Node that cannot be named for a moment keeps its Pod).
- A NodeSet naming a SlurmCluster (``spec.slurmCluster``) that the operator cannot use (not the one it
  watches, absent, being deleted, with problems, or whose current spec its reconciler has not applied:
  ``SpecValid=True`` and ``observedGeneration`` its generation) is frozen the same way, with ``ClusterFound=False``
  saying why: a Pod made without the cluster's configuration and munge key would never join it, and
  Pods that have them are not replaced by ones that do not. Once it is found, its names
  (``slurmcluster.mounts``) go into every Pod and into the template hash.
- Slurm unreadable (``slurm`` is None): Pods are still created, but nothing is marked,
  drained, undrained or deleted, and the Slurm counts in the status stay as they were.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from attrs import field, frozen

from sunk.model import names
from sunk.model.slurm import Node
from sunk.translate import nodestate, selectors
from sunk.translate.objects import controller_ref, is_deleting, pod_ready
from sunk.translate.slurmcluster.mounts import NodeMounts, lookup
from sunk.translate.slurmd import k8s_node_name, slurm_node_name

from . import naming, slices
from . import pod as podlib
from .registration import Registration, registration
from .slices import Entry, SlicePlan
from .spec import ON_DELETE, NodeSetSpec, max_unavailable, read_spec
from .status import (
    CLUSTER_FOUND,
    NAMES_VALID,
    NODE_INPUT_VALID,
    NODES_MATCHED,
    PROGRESSING,
    READY,
    SLURM_COUNTS,
    SLURM_REACHABLE,
    SPEC_VALID,
    Note,
    condition,
    events_for,
    slurm_counts,
)

Obj = Mapping[str, Any]

WHY_UPDATE = "update: the NodeSet's template changed"
WHY_REREGISTER = "update: the Node's GPUs or labels changed what its Slurm node registers with"
UPDATES = (WHY_UPDATE, WHY_REREGISTER)
WHY_DELETED = "the NodeSet is being deleted"


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value)


@frozen
class Facts:
    """Everything one reconcile reads, from caches. Objects are shared: never mutate them."""

    nodeset: Obj
    nodes: Sequence[Obj] = field(converter=_tuple, factory=tuple)  # every Kubernetes Node
    pods: Sequence[Obj] = field(converter=_tuple, factory=tuple)  # this NodeSet's Pods (by its label)
    taken: Mapping[str, str] = field(factory=dict)  # Pod names held by another owner -> who
    slurm: Mapping[str, Node] | None = None  # Slurm's nodes; None: Slurm cannot be read now
    slices: Sequence[Obj] = field(converter=_tuple, factory=tuple)  # this NodeSet's NodeSlices
    gpu_types: Mapping[str, str] = field(factory=dict)  # gpu.nvidia.com/class value -> GRES type (gpuTypes)
    gres_from_node: bool = False  # --gres-from-node: each Node's GPUs become its Slurm node's GRES
    cluster: Obj | None = None  # the SlurmCluster spec.slurmCluster names, from the cache (None: not there)
    cluster_nodesets: Sequence[str] = field(converter=_tuple, factory=tuple)  # NodeSet names of its namespace
    watched_cluster: str = ""  # the one SlurmCluster the operator watches (--slurm-cluster; "": none)


@frozen
class Mark:
    """Set (``why``) or remove (None) the pending-deletion annotation of Pod ``pod`` (uid ``uid``)."""

    pod: str
    uid: str
    why: str | None


@frozen
class Drain:
    slurm_node: str
    reason: str


@frozen
class Delete:
    pod: str
    uid: str
    slurm_node: str
    why: str


@frozen
class Plan:
    create: tuple[Obj, ...] = ()
    mark: tuple[Mark, ...] = ()
    drain: tuple[Drain, ...] = ()
    undrain: tuple[str, ...] = ()
    delete: tuple[Delete, ...] = ()
    # Slurm nodes whose jobs are cancelled: a deleted NodeSet's, drained, marked (names.ANN_ON_DELETE cancel-jobs).
    cancel_jobs_on: tuple[str, ...] = ()
    slices: SlicePlan = SlicePlan((), ())
    status: Mapping[str, Any] = field(factory=dict)  # the status without conditions
    conditions: tuple[Mapping[str, Any], ...] = ()
    events: tuple[Note, ...] = ()
    add_finalizer: bool = False
    remove_finalizer: bool = False
    spec: NodeSetSpec | None = None


def safe_to_delete(node: Node | None) -> bool:
    """A slurmd Pod may go: Slurm does not know its node, or shows it drained or down with no job on it."""
    if node is None:
        return True
    return not node.running_jobs and (node.drained or node.down)


def drain_still_due(fresh: Node | None) -> bool:
    """A planned drain, checked against a fresh read: the plan's view of Slurm may be a second old,
    and a drain written over a person's drain (or a DOWN) would replace their reason for good."""
    return fresh is not None and not fresh.drained and not fresh.down


def undrain_still_due(fresh: Node | None, our_prefix: str) -> bool:
    """A planned undrain, checked against a fresh read: only the operator's own drain is ever lifted."""
    return fresh is not None and fresh.drained and not fresh.down and fresh.reason.startswith(our_prefix)


def _where(spec: NodeSetSpec, pod_name: str) -> str:
    return f"{spec.namespace}/{pod_name}"


def _uid(pod: Obj) -> str:
    return str(pod["metadata"].get("uid") or "")


@frozen
class _Layout:
    """Which Node is which Slurm node, and why the others are not."""

    matching: tuple[str, ...]
    assigned: Mapping[str, str]  # Node -> Slurm node name
    unnamed: Mapping[str, str]  # Node -> why it has no name
    clashing: Mapping[str, tuple[str, ...]]  # name -> Nodes claiming it
    holders: Mapping[str, str]  # name -> the Node whose Pod carries it
    taken: Mapping[str, tuple[str, str]]  # Node -> (its name, who holds it: another NodeSet or Pod)
    capped: tuple[str, ...]  # named, but past spec.replicas


def _layout(spec: NodeSetSpec, facts: Facts, pods_on: Mapping[str, list[Obj]]) -> _Layout:
    matching = sorted(str(n["metadata"]["name"]) for n in facts.nodes
                      if not n["metadata"].get("deletionTimestamp")
                      and selectors.matches(n, spec.node_selector, spec.affinity))
    by_name = {str(n["metadata"]["name"]): n for n in facts.nodes}
    wanted: dict[str, str] = {}
    unnamed: dict[str, str] = {}
    for node in matching:
        got = naming.slurm_node_name(spec, by_name[node])
        if got.name is None:
            unnamed[node] = got.problem
        else:
            wanted[node] = got.name
    holders = {p["metadata"]["name"]: node for node, pods in pods_on.items() for p in pods}
    usable = naming.winners(wanted, holders)
    taken = {node: (name, facts.taken[name]) for node, name in usable.items() if name in facts.taken}
    usable = {node: name for node, name in usable.items() if node not in taken}
    for node in unnamed:  # a Node that cannot be named now (no InternalIP for a moment) keeps the Pod it has
        live = [p for p in pods_on.get(node, []) if not is_deleting(p)]
        if live:
            usable[node] = str(live[0]["metadata"]["name"])
    capped: list[str] = []
    if spec.replicas is not None and len(usable) > spec.replicas:
        def keep_first(node: str) -> tuple[int, int, int, str]:
            own = [p for p in pods_on.get(node, []) if p["metadata"]["name"] == usable[node]]
            scaled_in = any((podlib.pending_deletion(p) or "").startswith("scale-in") for p in own)
            slurm = (facts.slurm or {}).get(usable[node])
            idle = slurm is None or not slurm.running_jobs
            return (int(scaled_in), int(not own), int(idle), node)

        ranked = sorted(usable, key=keep_first)
        capped = sorted(ranked[spec.replicas:])
        usable = {node: usable[node] for node in ranked[:spec.replicas]}
    return _Layout(tuple(matching), usable, unnamed, naming.collisions(wanted), holders, taken, tuple(capped))


def _scale_in_why(node: str | None, pod_name: str, layout: _Layout) -> str:
    if node is None:
        return "scale-in: the Pod is on no Node"
    if node not in layout.matching:
        return f"scale-in: Node {node} no longer matches the NodeSet"
    if node in layout.capped:
        return "scale-in: past spec.replicas"
    if node in layout.assigned:
        return f"scale-in: the Slurm node of Node {node} is now {layout.assigned[node]}, not {pod_name}"
    return f"scale-in: Node {node} has no usable Slurm node name"


def decide(facts: Facts) -> Plan:
    """The plan of one reconcile of ``facts.nodeset`` (module docstring)."""
    read = read_spec(facts.nodeset)
    spec = read.spec
    pods = sorted(facts.pods, key=lambda p: str(p["metadata"]["name"]))
    pods_on: dict[str, list[Obj]] = {}
    for p in pods:
        pods_on.setdefault(k8s_node_name(p) or "", []).append(p)
    add_finalizer = not spec.deleting and not spec.has_finalizer
    if spec.deleting:
        return _deleting(spec, facts, pods)
    if read.problems:
        conds = [condition(SPEC_VALID, False, "InvalidSpec", "; ".join(read.problems))]
        return Plan(status=_status(spec, facts, pods, None, {}), conditions=tuple(conds),
                    events=tuple(events_for(facts.nodeset, conds)), add_finalizer=add_finalizer, spec=spec)
    mounts: NodeMounts | None = None
    if spec.slurm_cluster:
        found = lookup(spec.slurm_cluster, facts.cluster, facts.cluster_nodesets, facts.watched_cluster)
        if found.mounts is None:
            conds = [condition(SPEC_VALID, True, "Valid"),
                     condition(CLUSTER_FOUND, False, found.reason,
                               found.message + ": no slurmd Pod is created, marked or deleted until it is")]
            return Plan(status=_status(spec, facts, pods, None, {}), conditions=tuple(conds),
                        events=tuple(events_for(facts.nodeset, conds)), add_finalizer=add_finalizer, spec=spec)
        mounts = found.mounts

    layout = _layout(spec, facts, pods_on)
    digest = podlib.template_hash(spec, mounts)
    by_name = {str(n["metadata"]["name"]): n for n in facts.nodes}
    regs: dict[str, Registration] = {node: registration(spec, by_name.get(node) or {}, facts.gpu_types,
                                                               gres_from_node=facts.gres_from_node)
                                     for node in layout.assigned}
    slurm = facts.slurm
    final_mark: dict[str, str | None] = {}  # Pod name -> its pending-deletion reason after this plan

    # A selector that matches no Node at all is taken for a mistake, not for "scale to zero"
    # (spec.replicas: 0 says that): nothing is marked, drained or deleted because of it.
    hold = not layout.matching
    own: dict[str, Obj] = {}  # assigned Node -> its Pod (the one with its name)
    for p in pods:
        node, name = k8s_node_name(p), p["metadata"]["name"]
        final_mark[name] = podlib.pending_deletion(p)
        if is_deleting(p):
            continue
        if node is not None and layout.assigned.get(node) == name:
            own[node] = p
        elif not hold:
            final_mark[name] = _scale_in_why(node, name, layout)

    # Rolling update: within maxUnavailable, not-Ready Pods first, then idle Slurm nodes, then busy ones.
    # (A Node that cannot be named now is not updated: its Pod would go, and no new one could come.)
    why_outdated: dict[str, str] = {}
    for node, p in own.items():
        if node in layout.unnamed:
            continue
        if podlib.pod_hash(p) != digest:
            why_outdated[node] = WHY_UPDATE
        elif podlib.pod_registration_hash(p) not in (None, podlib.registration_hash(regs[node], layout.assigned[node])):
            why_outdated[node] = WHY_REREGISTER
    outdated = set(why_outdated)
    rolling = spec.strategy != ON_DELETE
    for node, p in own.items():
        name = p["metadata"]["name"]
        if not (rolling and node in outdated and final_mark[name] in UPDATES):
            final_mark[name] = None  # nothing to go for: the mark (if any) is removed
        elif final_mark[name] != why_outdated[node]:
            final_mark[name] = why_outdated[node]
    if rolling and slurm is not None:
        limit = max_unavailable(spec.max_unavailable, len(layout.assigned))

        def unavailable(node: str) -> bool:
            p = own.get(node)
            return p is None or not pod_ready(p) or final_mark.get(p["metadata"]["name"]) is not None

        down = sum(unavailable(node) for node in layout.assigned)

        def order(node: str) -> tuple[int, int, str]:
            p = own[node]
            busy = (sn := slurm.get(slurm_node_name(p))) is not None and sn.running_jobs
            return (int(pod_ready(p)), int(busy), node)

        for node in sorted((n for n in outdated if final_mark[own[n]["metadata"]["name"]] is None), key=order):
            p = own[node]
            if pod_ready(p):
                if down >= limit:
                    break
                down += 1
            final_mark[p["metadata"]["name"]] = why_outdated[node]

    marks = [Mark(p["metadata"]["name"], _uid(p), final_mark[p["metadata"]["name"]]) for p in pods
             if slurm is not None and not hold and not is_deleting(p)
             and final_mark[p["metadata"]["name"]] != podlib.pending_deletion(p)]
    drain, undrain, delete = _slurm_side(spec, pods, final_mark, None if hold else slurm)
    create = [podlib.desired_pod(spec, node, name, digest, regs[node], mounts) for node, name in layout.assigned.items()
              if not pods_on.get(node) and name not in layout.holders]

    conds = _conditions(spec, layout, pods, own, outdated, final_mark, slurm, len(create), regs)
    if mounts is not None:
        conds.insert(1, condition(CLUSTER_FOUND, True, "Found", f"SlurmCluster {mounts.cluster}"))
    return Plan(
        create=tuple(create), mark=tuple(marks), drain=tuple(drain), undrain=tuple(undrain), delete=tuple(delete),
        slices=_slices(spec, facts, pods, layout),
        status=_status(spec, facts, pods, layout, own, digest),
        conditions=tuple(conds), events=tuple(events_for(facts.nodeset, conds)), add_finalizer=add_finalizer,
        spec=spec,
    )


def _slurm_side(spec: NodeSetSpec, pods: Sequence[Obj], final_mark: Mapping[str, str | None],
                slurm: Mapping[str, Node] | None) -> tuple[list[Drain], list[str], list[Delete]]:
    """Drains for marked Pods, undrains of the operator's own drains no longer wanted, deletions now safe."""
    drain: list[Drain] = []
    undrain: list[str] = []
    delete: list[Delete] = []
    if slurm is None:
        return drain, undrain, delete
    for p in pods:
        name = p["metadata"]["name"]
        slurm_name = slurm_node_name(p)
        node = slurm.get(slurm_name)
        why = final_mark.get(name)
        if is_deleting(p):
            continue
        if why is not None:
            if node is not None and not node.drained and not node.down:
                drain.append(Drain(slurm_name, nodestate.pending_deletion_reason(_where(spec, name), why)))
            # Deleted only once the mark is on the Pod itself (an earlier reconcile), so the Syncer
            # reads it too; and only once Slurm shows the node with no job.
            if podlib.pending_deletion(p) is not None and safe_to_delete(node):
                delete.append(Delete(name, _uid(p), slurm_name, why))
        elif (node is not None and node.drained and not node.down and pod_ready(p)
              and node.reason.startswith(nodestate.pending_deletion_prefix(_where(spec, name)))):
            undrain.append(slurm_name)
    return drain, undrain, delete


def _deleting(spec: NodeSetSpec, facts: Facts, pods: Sequence[Obj]) -> Plan:
    """The NodeSet is being deleted: mark, drain and delete every Pod, then let it go."""
    marks = [Mark(p["metadata"]["name"], _uid(p), WHY_DELETED) for p in pods
             if not is_deleting(p) and podlib.pending_deletion(p) != WHY_DELETED and facts.slurm is not None]
    final = {p["metadata"]["name"]: WHY_DELETED for p in pods}
    drain, _, delete = _slurm_side(spec, pods, final, facts.slurm)
    cancel = _jobs_to_cancel(spec, pods, facts.slurm)
    left = len(pods)
    conds = [condition(PROGRESSING, left == 0, "Deleting",
                       f"{left} slurmd Pods left: each goes once its Slurm node is drained and idle"
                       + ("; their jobs are cancelled" if spec.cancel_jobs_on_delete else ""))]
    plan_slices = slices.assign(spec.name, _current_slices(facts), _entries(spec, facts, pods, None))
    return Plan(mark=tuple(marks), drain=tuple(drain), delete=tuple(delete), cancel_jobs_on=cancel,
                slices=plan_slices,
                status=_status(spec, facts, pods, None, {}), conditions=tuple(conds),
                remove_finalizer=spec.has_finalizer and not pods, spec=spec)


def _jobs_to_cancel(spec: NodeSetSpec, pods: Sequence[Obj], slurm: Mapping[str, Node] | None) -> tuple[str, ...]:
    """With ``cancel-jobs``, the Slurm nodes of a deleted NodeSet with a job running, each of a Pod this NodeSet
    controls (its uid in the owner reference: a Pod anyone labelled so names no node here) that carries the mark,
    and drained: no job starts there any more, so none is left once these are cancelled. A node only
    completing has nothing left to cancel."""
    if not spec.cancel_jobs_on_delete or slurm is None:
        return ()
    busy = []
    for p in pods:
        node = slurm.get(slurm_node_name(p))
        if (not is_deleting(p) and podlib.pending_deletion(p) == WHY_DELETED and _controlled_by(p, spec)
                and node is not None and cancel_still_due(node)):
            busy.append(node.name)
    return tuple(sorted(busy))


def cancel_still_due(node: Node | None) -> bool:
    """A planned cancel of a node's jobs, checked again against a fresh read: the node is still drained (a
    person's resume since lets jobs start there that no uninstall meant to end) and runs a job."""
    return node is not None and node.drained and node.base_state in ("ALLOCATED", "MIXED")


def _controlled_by(pod: Obj, spec: NodeSetSpec) -> bool:
    ref = controller_ref(pod, "NodeSet", names.DOMAIN)
    return ref is not None and bool(spec.uid) and ref.get("uid") == spec.uid


def _current_slices(facts: Facts) -> dict[str, tuple[Entry, ...]]:
    return {str(s["metadata"]["name"]): slices.entries_of(s) for s in facts.slices}


def _entries(spec: NodeSetSpec, facts: Facts, pods: Sequence[Obj], layout: _Layout | None) -> list[Entry]:
    """Every existing Pod's Slurm node, and every assigned Node's, Pod or not yet."""
    address = {str(n["metadata"]["name"]): naming.internal_address(n) for n in facts.nodes}
    out: dict[str, Entry] = {}
    for node, name in (layout.assigned.items() if layout is not None else ()):
        out[name] = Entry(name, name, node, address.get(node, ""))
    for p in pods:
        node = k8s_node_name(p) or ""
        name = slurm_node_name(p)
        out[name] = Entry(name, str(p["metadata"]["name"]), node, address.get(node, ""))
    return list(out.values())


def _slices(spec: NodeSetSpec, facts: Facts, pods: Sequence[Obj], layout: _Layout) -> SlicePlan:
    return slices.assign(spec.name, _current_slices(facts), _entries(spec, facts, pods, layout))


def _status(spec: NodeSetSpec, facts: Facts, pods: Sequence[Obj], layout: _Layout | None,
            own: Mapping[str, Obj], digest: str = "") -> dict[str, Any]:
    previous = facts.nodeset.get("status") or {}
    live = [p for p in pods if not is_deleting(p)]
    status: dict[str, Any] = {
        "observedGeneration": spec.generation,
        "selector": f"{names.LABEL_NODESET}={spec.name}",
        "replicas": len(live),
    }
    if layout is not None:
        status.update(
            matching=len(layout.matching),
            assigned=len(layout.assigned),
            ready=sum(pod_ready(p) for p in own.values()),
            updated=sum(podlib.pod_hash(p) == digest for p in own.values()),
        )
    else:  # a frozen or departing NodeSet: what is known without a usable spec
        status.update({k: previous.get(k, 0) for k in ("matching", "assigned")},
                      ready=sum(pod_ready(p) for p in live), updated=previous.get("updated", 0))
    if facts.slurm is not None:
        status.update(slurm_counts(facts.slurm.get(slurm_node_name(p)) for p in pods))
    else:
        status.update({k: previous.get(k, 0) for k in SLURM_COUNTS})
    return status


def _conditions(spec: NodeSetSpec, layout: _Layout, pods: Sequence[Obj], own: Mapping[str, Obj],
                outdated: set[str], final_mark: Mapping[str, str | None], slurm: Mapping[str, Node] | None,
                creating: int, regs: Mapping[str, Registration]) -> list[dict[str, Any]]:
    """The conditions of a NodeSet with a valid spec (status module)."""
    conds = [condition(SPEC_VALID, True, "Valid")]
    if layout.matching:
        conds.append(condition(NODES_MATCHED, True, "NodesMatched", f"{len(layout.matching)} Nodes match"))
    else:
        conds.append(condition(NODES_MATCHED, False, "NoMatchingNodes",
                               "no Node matches spec.nodeSelector and spec.affinity"))
    if layout.clashing:
        conds.append(condition(NAMES_VALID, False, "NameCollision", naming.describe(layout.clashing, layout.holders)))
    elif layout.taken:
        held = "; ".join(f"{name} (Node {node}) is held by {who}" for node, (name, who) in sorted(layout.taken.items()))
        conds.append(condition(NAMES_VALID, False, "NameTaken", f"Slurm node names taken by other Pods: {held}"))
    elif layout.unnamed:
        conds.append(condition(NAMES_VALID, False, "NodeUnnamed",
                               "; ".join(why for _, why in sorted(layout.unnamed.items()))))
    else:
        conds.append(condition(NAMES_VALID, True, "NamesUnique"))
    bad_input = [f"Node {node}: " + "; ".join(reg.problems) for node, reg in sorted(regs.items()) if reg.problems]
    if bad_input:
        conds.append(condition(NODE_INPUT_VALID, False, "BadNodeInput", "; ".join(bad_input)))
    else:
        conds.append(condition(NODE_INPUT_VALID, True, "NodeInputValid"))
    if slurm is None:
        conds.append(condition(SLURM_REACHABLE, False, "SlurmUnreachable",
                               "Slurm's node list is stale: nothing is drained, undrained or deleted until it is "
                               "read again"))
    else:
        conds.append(condition(SLURM_REACHABLE, True, "SlurmReachable"))
    going = sum(1 for p in pods if final_mark.get(p["metadata"]["name"]) is not None or is_deleting(p))
    if outdated and spec.strategy != ON_DELETE:
        conds.append(condition(PROGRESSING, True, "RollingUpdate",
                               f"{len(layout.assigned) - len(outdated)} of {len(layout.assigned)} Pods updated"))
    elif creating or len(own) < len(layout.assigned):
        conds.append(condition(PROGRESSING, True, "Creating",
                               f"{len(own)} of {len(layout.assigned)} assigned Nodes have a slurmd Pod"))
    elif going:
        conds.append(condition(PROGRESSING, True, "ScalingIn",
                               f"{going} slurmd Pods go once their Slurm nodes are drained and idle"))
    else:
        conds.append(condition(PROGRESSING, False, "Complete"))
    ready = sum(pod_ready(p) for p in own.values())
    total = len(layout.assigned)
    conds.append(condition(READY, total > 0 and ready == total, "AllReady" if total and ready == total else "NotReady",
                           f"{ready} of {total} assigned Nodes have a Ready slurmd Pod"))
    return conds
