"""The NodeSet reconciler: gather facts from the caches, ask the pure plan, carry it out.

One reconcile per NodeSet key (``namespace/name``), level-based. The decisions are all in
``sunk.translate.nodeset.plan`` (tested there as tables); this module does the I/O, in an
order that keeps every intermediate state safe:

1. the finalizer, before any Pod exists, so deleting the NodeSet always drains first;
2. Pods created (a name already taken by a Pod we cannot see is an Event, not a failure);
3. marks (the pending-deletion annotation) set or removed;
4. drains and undrains through ``SlurmClient``, each after a fresh read of that node: the
   plan's view of Slurm may be a second old, and a drain written over a person's drain would
   replace their reason, and an undrain of it would lift it (a node Slurm does not know is skipped);
5. deletions, each after one more read of that Slurm node (a failed read deletes nothing,
   Slinky's drain check failed open on an answer that carried errors), with the Pod's uid as
   precondition, so a successor with the same name is never deleted;
6. NodeSlices, growing ones first, then the status through the status subresource (guarded
   by resourceVersion), then the finalizer's removal.

A write whose answer says it is already done (404 on a delete, 409 on a create) is taken as
done. Anything else raises, and the controller retries the key with backoff. After a write
to Slurm the cache is nudged, so its next list (and the reconcile its events cause) comes
within a fraction of a second rather than a poll interval.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs
from kubernetes.client import ApiClient

from sunk.base.times import rfc3339
from sunk.controller.runtime import Result
from sunk.kube import client as kc
from sunk.kube import patch as kp
from sunk.kube.events import EventRecorder
from sunk.kube.resources import NODESETS, NODESLICES, PODS
from sunk.kube.store import Store
from sunk.model import names
from sunk.model.slurm import JOB_HOLDING_STATES, Node, NodeUpdate
from sunk.model.types import Obj
from sunk.slurm.client import SlurmClient
from sunk.slurm.errors import NotFound, SlurmError
from sunk.translate import nodestate, objects
from sunk.translate.nodeset.plan import (
    Facts,
    Plan,
    cancel_still_due,
    decide,
    drain_still_due,
    safe_to_delete,
    undrain_still_due,
)
from sunk.translate.nodeset.slices import slice_object
from sunk.translate.slurmd import slurm_node_name

log = logging.getLogger(__name__)

INDEX_NODESET = "nodeset"  # Pods and NodeSlices by "namespace/<their NodeSet>"
INDEX_CLUSTER_REF = "slurm-cluster-ref"  # NodeSets by "namespace/<the SlurmCluster they name>"


def nodeset_key(obj: Obj) -> list[str]:
    """Index function and key mapper: the NodeSet a Pod or NodeSlice belongs to, by its label."""
    meta = obj.get("metadata") or {}
    owner = (meta.get("labels") or {}).get(names.LABEL_NODESET)
    return [f"{meta.get('namespace')}/{owner}"] if owner else []


def cluster_ref_key(nodeset: Obj) -> list[str]:
    """Index function: the SlurmCluster a NodeSet names (``spec.slurmCluster``), as ``namespace/name``."""
    spec = nodeset.get("spec")
    ref = spec.get("slurmCluster") if isinstance(spec, Mapping) else None
    return [f"{(nodeset.get('metadata') or {}).get('namespace')}/{ref}"] if isinstance(ref, str) and ref else []


class NodeCache(Protocol):
    """What the reconciler reads of Slurm: its nodes, from memory (the Slurm nodes informer)."""

    def items(self) -> Mapping[str, Node]: ...
    @property
    def fresh(self) -> bool: ...
    def nudge(self) -> None: ...


@attrs.define
class NodeSetReconciler:
    api: ApiClient
    slurm: SlurmClient
    nodesets: Store
    nodes: Store  # every Kubernetes Node, trimmed
    pods: Store  # Pods labelled sunk.coreweave.com/nodeset, index INDEX_NODESET
    slices: Store  # NodeSlices, index INDEX_NODESET
    slurm_nodes: NodeCache
    recorder: EventRecorder
    stale_retry: float = 2.0
    gpu_types: Mapping[str, str] = attrs.field(factory=dict)  # --gpu-types
    gres_from_node: bool = False  # --gres-from-node
    clusters: Store | None = None  # the one SlurmCluster of --slurm-cluster (None: the operator watches none)
    watched_cluster: str = ""  # its name
    decide: Callable[[Facts], Plan] = decide

    def facts(self, nodeset: Obj) -> Facts:
        key = f"{nodeset['metadata']['namespace']}/{nodeset['metadata']['name']}"
        pods = self.pods.by_index(INDEX_NODESET, key)
        namespace = nodeset["metadata"]["namespace"]
        taken = {p["metadata"]["name"]: f"NodeSet {(p['metadata'].get('labels') or {}).get(names.LABEL_NODESET)}"
                 for p in self.pods.list()
                 if p["metadata"].get("namespace") == namespace and nodeset_key(p) != [key]}
        cache = self.slurm_nodes
        cluster, cluster_nodesets = None, []
        refs = cluster_ref_key(nodeset)
        if refs and self.clusters is not None:
            cluster = self.clusters.get(refs[0])
            if cluster is not None:  # what its partitions are checked against, as its own reconciler does
                cluster_nodesets = [str(n["metadata"]["name"]) for n in self.nodesets.list()
                                    if n["metadata"].get("namespace") == namespace]
        return Facts(nodeset=nodeset, nodes=self.nodes.list(), pods=pods, taken=taken,
                     slurm=cache.items() if cache.fresh else None,
                     slices=self.slices.by_index(INDEX_NODESET, key), gpu_types=self.gpu_types,
                     gres_from_node=self.gres_from_node, cluster=cluster, cluster_nodesets=cluster_nodesets,
                     watched_cluster=self.watched_cluster if self.clusters is not None else "")

    def reconcile(self, key: str) -> Result | None:
        nodeset = self.nodesets.get(key)
        if nodeset is None:
            return None  # gone: its Pods and NodeSlices are the garbage collector's (owner references)
        facts = self.facts(nodeset)
        plan = self.decide(facts)
        self.carry_out(nodeset, facts, plan)
        if facts.slurm is None and facts.pods:
            return Result(requeue_after=self.stale_retry)  # no Slurm event will say it is back
        return None

    # ---- carrying out --------------------------------------------------------------------------

    def carry_out(self, nodeset: Obj, facts: Facts, plan: Plan) -> None:
        namespace = nodeset["metadata"]["namespace"]
        if plan.add_finalizer:
            nodeset = self._finalizer(nodeset, add=True) or nodeset
        for note in plan.events:
            self.recorder.event(nodeset, "Warning" if note.type == "Warning" else "Normal", note.reason, note.message)
            if note.type == "Warning":  # (e.g. a Node label value left out of Slurm: issue 35)
                log.warning("nodeset %s: %s: %s", nodeset["metadata"]["name"], note.reason, note.message)
        for pod in plan.create:
            self._create(nodeset, dict(pod))
        pods: dict[str, Obj] = {p["metadata"]["name"]: dict(p) for p in facts.pods}
        for mark in plan.mark:
            current = pods.get(mark.pod)
            if current is not None and kp.set_annotations(self.api, current, {names.ANN_PENDING_DELETION: mark.why}):
                if mark.why is not None:
                    self.recorder.normal(nodeset, "MarkedPod", f"slurmd Pod {mark.pod} goes once its Slurm node is "
                                                               f"drained and idle: {mark.why}")
        wrote_slurm = False
        for drain in plan.drain:
            wrote_slurm |= self._update_node(nodeset, drain.slurm_node, NodeUpdate(state="DRAIN", reason=drain.reason),
                                             drain_still_due)
        pod_of = {slurm_node_name(p): p["metadata"]["name"] for p in facts.pods}
        for slurm_node in plan.undrain:
            ours = nodestate.pending_deletion_prefix(f"{namespace}/{pod_of.get(slurm_node, slurm_node)}")
            wrote_slurm |= self._update_node(nodeset, slurm_node, NodeUpdate(state="UNDRAIN"),
                                             functools.partial(undrain_still_due, our_prefix=ours))
        if plan.cancel_jobs_on:
            wrote_slurm |= self._cancel_jobs(nodeset, plan.cancel_jobs_on)
        for delete in plan.delete:
            self._delete(nodeset, namespace, delete.pod, delete.uid, delete.slurm_node, delete.why)
        if wrote_slurm:
            self.slurm_nodes.nudge()
        self._write_slices(nodeset, facts, plan)
        self._write_status(nodeset, plan)
        if plan.remove_finalizer:
            self._finalizer(nodeset, add=False)

    def _create(self, nodeset: Obj, pod: Obj) -> None:
        meta = pod["metadata"]
        try:
            kc.create(self.api, PODS, pod, meta["namespace"])
        except kc.ApiError as exc:
            if exc.status != 409:
                raise
            self.recorder.warning(nodeset, "NameTaken", f"a Pod named {meta['name']} exists already: {exc.message}")
            return
        log.info("nodeset %s: created slurmd Pod %s on %s", nodeset["metadata"]["name"], meta["name"],
                 pod["spec"]["nodeName"])
        self.recorder.normal(nodeset, "CreatedPod",
                             f"created slurmd Pod {meta['name']} on Node {pod['spec']['nodeName']}")

    def _update_node(self, nodeset: Obj, name: str, update: NodeUpdate,
                     still_due: Callable[[Node | None], bool]) -> bool:
        """Write ``update`` if a fresh read of the node still calls for it (a failed read raises: retried)."""
        fresh = self._fresh_node(name)
        if not still_due(fresh):
            log.info("nodeset %s: no %s of %s: Slurm now shows %s", nodeset["metadata"]["name"], update.state, name,
                     f"{'+'.join(sorted(fresh.state))} ({fresh.reason or 'no reason'})" if fresh else "no such node")
            return True  # (the cache was behind: have it list again)
        try:
            self.slurm.update_node(name, update)
        except NotFound:
            log.info("nodeset %s: Slurm node %s is gone; nothing to %s", nodeset["metadata"]["name"], name,
                     update.state)
            return False
        what = "DrainedSlurmNode" if update.state == "DRAIN" else "UndrainedSlurmNode"
        message = f"drained {name}: {update.reason}" if update.state == "DRAIN" else f"undrained {name} (our drain)"
        log.info("nodeset %s: %s", nodeset["metadata"]["name"], message)
        self.recorder.normal(nodeset, what, message)
        return True

    def _cancel_jobs(self, nodeset: Obj, slurm_nodes: tuple[str, ...]) -> bool:
        """Cancel every job running on ``slurm_nodes``, each node read again first (still drained, still busy: a
        person's resume since lets jobs start that no deletion meant to end), the jobs from one fresh list. A job
        of many nodes is cancelled whole (its Event names them all); a task of an array alone. A job that ended
        meanwhile is no failure; one Slurm refuses to cancel is a Warning, and the reconcile is retried."""
        on = frozenset(name for name in slurm_nodes if cancel_still_due(self._fresh_node(name)))
        if not on:
            return True  # (the cache was behind: have it list again)
        jobs = [j for j in self.slurm.list_jobs().items or () if j.state in JOB_HOLDING_STATES
                and not on.isdisjoint(j.node_list)]
        refused: SlurmError | None = None
        for job in jobs:
            task = job.array_task_id if job.array_job_id == job.id else None  # (this id alone names the array)
            ident = f"{job.id}" if task is None else f"{job.id}_{task}"
            try:
                self.slurm.cancel_job(job.id, array_task_id=task)
            except NotFound:
                continue
            except SlurmError as exc:
                refused = exc
                self.recorder.warning(nodeset, "CancelFailed", f"could not cancel job {ident} on {job.nodes}: {exc}")
                continue
            message = (f"cancelled job {ident} on {job.nodes}: the NodeSet is being deleted ({names.ANN_ON_DELETE}: "
                       f"{names.ON_DELETE_CANCEL_JOBS})")
            log.info("nodeset %s: %s", nodeset["metadata"]["name"], message)
            self.recorder.normal(nodeset, "CancelledJob", message)
        if refused is not None:
            raise refused
        return bool(jobs)

    def _fresh_node(self, name: str) -> Node | None:
        try:
            return self.slurm.get_node(name)
        except NotFound:
            return None

    def _delete(self, nodeset: Obj, namespace: str, pod: str, uid: str, slurm_node: str, why: str) -> None:
        try:
            fresh: Node | None = self.slurm.get_node(slurm_node)
        except NotFound:
            fresh = None
        except SlurmError as exc:
            log.warning("nodeset %s: not deleting %s: Slurm node %s could not be read: %s",
                        nodeset["metadata"]["name"], pod, slurm_node, exc)
            return
        if not safe_to_delete(fresh):
            log.info("nodeset %s: not deleting %s yet: Slurm now shows %s", nodeset["metadata"]["name"], pod,
                     "+".join(sorted(fresh.state)) if fresh else "nothing")
            return
        try:
            kc.delete(self.api, PODS, pod, namespace, uid=uid or None)
        except kc.ApiError as exc:
            if exc.status not in (404, 409):  # gone, or replaced by a Pod with another uid
                raise
            return
        log.info("nodeset %s: deleted slurmd Pod %s (%s)", nodeset["metadata"]["name"], pod, why)
        self.recorder.normal(nodeset, "DeletedPod", f"deleted slurmd Pod {pod}, its Slurm node {slurm_node} drained "
                                                    f"and idle: {why}")

    def _write_slices(self, nodeset: Obj, facts: Facts, plan: Plan) -> None:
        if plan.spec is None:
            return
        namespace = nodeset["metadata"]["namespace"]
        existing = {s["metadata"]["name"] for s in facts.slices}
        for name, entries in plan.slices.write:
            obj = slice_object(plan.spec, name, entries)
            if name in existing:
                kc.patch(self.api, NODESLICES, name, {"spec": obj["spec"]}, namespace)
                continue
            try:
                kc.create(self.api, NODESLICES, obj, namespace)
            except kc.ApiError as exc:
                if exc.status != 409:  # our cache had not seen it yet
                    raise
                kc.patch(self.api, NODESLICES, name, {"spec": obj["spec"]}, namespace)
        for name in plan.slices.delete:
            try:
                kc.delete(self.api, NODESLICES, name, namespace)
            except kc.ApiError as exc:
                if not exc.not_found:
                    raise

    def _write_status(self, nodeset: Obj, plan: Plan) -> None:
        now = rfc3339()

        def mutate(current: Obj) -> Obj | None:
            status = current.get("status") or {}
            existing = status.get("conditions") or []
            conditions = objects.merge_conditions(existing, plan.conditions, now=now)
            wanted: dict[str, Any] = {**plan.status, "conditions": existing if conditions is None else conditions}
            if all(status.get(k) == v for k, v in wanted.items()):
                return None
            return {"status": wanted}

        try:
            kp.update_with_retry(self.api, nodeset, mutate, resource=NODESETS, subresource="status")
        except kc.ApiError as exc:
            if not exc.not_found:
                raise

    def _finalizer(self, nodeset: Obj, *, add: bool) -> Obj | None:
        def mutate(current: Obj) -> Obj | None:
            finalizers = list(current["metadata"].get("finalizers") or [])
            if (names.FINALIZER_NODESET in finalizers) == add:
                return None
            if add:
                return {"metadata": {"finalizers": [*finalizers, names.FINALIZER_NODESET]}}
            return {"metadata": {"finalizers": [f for f in finalizers if f != names.FINALIZER_NODESET]}}

        try:
            result = kp.update_with_retry(self.api, nodeset, mutate, resource=NODESETS)
        except kc.ApiError as exc:
            if exc.not_found:
                return None
            raise
        if result.wrote and not add:
            log.info("nodeset %s: every slurmd Pod is gone; finalizer removed", nodeset["metadata"]["name"])
        return result.obj

