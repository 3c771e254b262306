"""The SlurmCluster reconciler: facts from the caches, the pure plan, then the writes.

One key (``namespace/name``), level-based, in this order:

1. a spec with problems: only the status (``SpecValid=False`` naming each problem); nothing else is
   written, so the objects applied last, and the slurmctld reading them, stay as they were;
2. the key Secrets that are absent, created once (a 409 is a Secret already there, never replaced,
   used only when the operator made it); a Secret the spec names, mounted only when labelled for
   this cluster (``SpecValid=False`` otherwise); every desired object created when absent, and one
   already there checked to be the operator's (``ObjectsOwned=False`` naming it otherwise, and
   nothing applied: translate/slurmcluster/ownership.py);
3. every desired object by server-side apply (field manager ``sunk-operator``, forced: the
   operator owns what it applies, and step 2 made sure it is its own);
4. the configuration: the SlurmCluster's status remembers the hash of the files its ConfigMap holds
   (``configHash``) and the hash slurmctld was last told to reread (``reconfiguredConfigHash``).
   When they differ, ``scontrol reconfigure`` (``Reconfigurable``, slurmrestd's ``GET
   /reconfigure/``) runs once slurmctld is ready and the kubelet has had time to bring the new file
   into its Pod (``configmap_sync``, counted from the write this process saw, or from its start);
   running jobs go on. Without a backend that can reconfigure, ``ConfigApplied`` says so.
   ``scontrol reconfigure`` makes slurmctld and every slurmd execute themselves anew (Slurm 23.11+), so
   every key of slurm.conf and cgroup.conf an author may set is applied by it (the keys only a restart
   applies, such as ports and AuthType, are sunk's own). slurmdbd.conf reaches slurmdbd by a roll of
   its Pod (its template carries the file's hash: ``desired.slurmdbd_template``);
5. the status: conditions per component, the Slurm release, the hashes, and the ClusterName applied
   (``clusterName``: once written, a spec naming another is refused, ``plan.cluster_name_change``)
   (status subresource, guarded by resourceVersion).

Deleting the SlurmCluster needs nothing here: its objects are the garbage collector's (owner
references); the volumes and key Secrets stay.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs
from kubernetes.client import ApiClient

from sunk.base.times import rfc3339
from sunk.controller.runtime import Result
from sunk.kube import client as kc
from sunk.kube import patch as kp
from sunk.kube.events import EventRecorder
from sunk.kube.resources import SECRETS, SLURMCLUSTERS, resource_for
from sunk.kube.store import Store
from sunk.model import names
from sunk.model.types import Obj
from sunk.translate import objects as wire
from sunk.translate.slurmcluster import desired, ownership
from sunk.translate.slurmcluster.plan import (
    CONFIG_APPLIED,
    OBJECTS_OWNED,
    SLURMCTLD_READY,
    SPEC_VALID,
    Facts,
    Plan,
    condition,
    decide,
    nodes_by_state,
)

log = logging.getLogger(__name__)

INDEX_CLUSTER = "slurm-cluster"  # workloads by "namespace/<their SlurmCluster>"


def same_cluster_name(cluster: Obj, name: str) -> bool:
    """Whether ``cluster``'s spec names ``name`` as its ClusterName (its own name by default), as Slurm reads it."""
    spec_name = ((cluster.get("spec") or {}).get("slurm") or {}).get("clusterName")
    effective = spec_name if isinstance(spec_name, str) and spec_name else cluster["metadata"]["name"]
    return str(effective).lower() == name.lower()


def cluster_key(obj: Obj) -> list[str]:
    """Index function and key mapper: the SlurmCluster an object belongs to, by its label."""
    meta = obj.get("metadata") or {}
    owner = (meta.get("labels") or {}).get(names.LABEL_SLURM_CLUSTER)
    return [f"{meta.get('namespace')}/{owner}"] if owner else []


class Indexed(Protocol):
    """A store's index lookup: all the reconciler reads of the workloads."""

    def by_index(self, name: str, value: str) -> list[Obj]: ...


@attrs.define
class SlurmClusterReconciler:
    api: ApiClient
    clusters: Store
    nodesets: Store
    workloads: Indexed  # the SlurmClusters' StatefulSets and Deployments, index INDEX_CLUSTER
    recorder: EventRecorder
    reconfigure: Callable[[], None] | None = None  # None: the Slurm backend cannot
    slurm_nodes: Any = None  # the operator's Slurm node informer (items, fresh): the status's nodes by state
    random_bytes: Callable[[int], bytes] = secrets.token_bytes
    clock: Callable[[], float] = time.monotonic
    # How long a changed ConfigMap takes to reach a Pod's mounted file (the kubelet's sync period and
    # cache); a reconfigure before that would reread the old file and nothing would say so.
    configmap_sync: float = 90.0
    written_at: dict[str, tuple[str, float]] = attrs.field(factory=dict)  # key -> (hash, when seen written)
    # (kind, namespace, name) this process created or found to be the operator's: not read again.
    verified: set[tuple[str, str, str]] = attrs.field(factory=set)
    decide: Callable[[Facts], Plan] = decide

    def facts(self, cluster: Obj) -> Facts:
        namespace = cluster["metadata"]["namespace"]
        key = f"{namespace}/{cluster['metadata']['name']}"
        nodesets = [n["metadata"]["name"] for n in self.nodesets.list() if n["metadata"].get("namespace") == namespace]
        workloads = {w["metadata"]["name"]: w for w in self.workloads.by_index(INDEX_CLUSTER, key)}
        return Facts(cluster=cluster, nodesets=nodesets, workloads=workloads)

    def reconcile(self, key: str) -> Result | None:
        cluster = self.clusters.get(key)
        if cluster is None or wire.is_deleting(cluster):
            self.written_at.pop(key, None)
            return None  # its objects are the garbage collector's
        plan = self.decide(self.facts(cluster))
        status = dict(cluster.get("status") or {})
        if plan.spec is None or plan.config is None:
            log.warning("slurmcluster %s: not applied: %s", key, "; ".join(plan.problems))
            self._write_status(cluster, plan.conditions, {})
            return None
        spec_problems, takeovers = self._claim(cluster, plan)
        if spec_problems or takeovers:
            log.warning("slurmcluster %s: not applied: %s", key, "; ".join([*spec_problems, *takeovers]))
            conditions = [c for c in plan.conditions if c["type"] != SPEC_VALID]
            valid = condition(SPEC_VALID, False, "SecretNotLabelled", "nothing is applied until the spec is "
                              "mended: " + "; ".join(spec_problems)) if spec_problems else condition(SPEC_VALID, True,
                                                                                                    "Valid")
            owned = condition(OBJECTS_OWNED, not takeovers, "NotOurs" if takeovers else "Owned",
                              "; ".join(takeovers))
            # (what _claim created, with no spec problem, names it already: a slurmctld may run under it)
            recorded = {} if spec_problems else {"clusterName": plan.spec.cluster_name}
            self._write_status(cluster, [valid, owned, *conditions], recorded)
            return None
        for obj in plan.objects:
            if obj["kind"] != "PersistentVolumeClaim":  # (created once by _claim: a kept claim's spec stays its own)
                self._apply(obj)
        config_hash = plan.config.hash
        if self.written_at.get(key, ("",))[0] != config_hash:  # (new here, or after this process started)
            self.written_at[key] = (config_hash, self.clock())
        applied, again, reconfigured = self._reconfigure(cluster, key, plan, status.get("reconfiguredConfigHash"),
                                                         config_hash)
        plan_conditions = [*plan.conditions, condition(OBJECTS_OWNED, True, "Owned")]
        fields = {"slurmRelease": plan.spec.release, "clusterName": plan.spec.cluster_name, "configHash": config_hash,
                  "reconfiguredConfigHash": reconfigured, "observedGeneration": cluster["metadata"].get("generation")}
        if self.slurm_nodes is not None and self.slurm_nodes.fresh:  # (a stale count is left as it was)
            fields["nodes"] = nodes_by_state(self.slurm_nodes.items().values())
        self._write_status(cluster, [*plan_conditions, applied], fields)
        return again

    # ---- the configuration -------------------------------------------------------------------------------

    def _reconfigure(self, cluster: Obj, key: str, plan: Plan, reconfigured: Any,
                     config_hash: str) -> tuple[Mapping[str, Any], Result | None, Any]:
        """ConfigApplied, when to look again, and the hash slurmctld has now been told to read."""
        done = condition(CONFIG_APPLIED, True, "Reconfigured", f"slurmctld reads configuration {config_hash}")
        if reconfigured == config_hash:
            return done, None, reconfigured
        if self.reconfigure is None:
            return condition(CONFIG_APPLIED, False, "CannotReconfigure",
                             f"configuration {config_hash} is written; this Slurm backend cannot run scontrol "
                             f"reconfigure: slurmctld reads it at its next restart"), None, reconfigured
        ctld = next((c for c in plan.conditions if c["type"] == SLURMCTLD_READY), None)
        if ctld is None or ctld["status"] != "True":  # (its StatefulSet's change wakes this key)
            return condition(CONFIG_APPLIED, False, "WaitingForSlurmctld",
                             f"configuration {config_hash} is written; slurmctld is not ready to reread it"), \
                None, reconfigured
        waited = self.clock() - self.written_at[key][1]
        if waited < self.configmap_sync:
            return condition(CONFIG_APPLIED, False, "WaitingForKubelet",
                             f"configuration {config_hash} is written; slurmctld rereads it once the kubelet has "
                             f"brought it into its Pod"), Result(requeue_after=self.configmap_sync - waited), \
                reconfigured
        self.reconfigure()  # (a failure raises: the key is retried with backoff)
        log.info("slurmcluster %s: slurmctld reconfigured for configuration %s", key, config_hash)
        self.recorder.normal(cluster, "Reconfigured", f"scontrol reconfigure: slurmctld rereads configuration "
                                                      f"{config_hash}")
        return done, None, config_hash

    # ---- writes --------------------------------------------------------------------------------------------

    def _claim(self, cluster: Obj, plan: Plan) -> tuple[list[str], list[str]]:
        """Before any apply: the key Secrets made when absent, and every object and Secret already there
        checked to be the operator's (ownership.py). Returns the spec's problems (a Secret it names, not
        labelled for this cluster) and the objects that would be taken over. What this process checked
        once is not read again (``verified``): no GET per object per reconcile."""
        assert plan.spec is not None
        spec, uid = plan.spec, cluster["metadata"]["uid"]
        spec_problems: list[str] = []
        takeovers: list[str] = []
        generated = {wanted.name for wanted in plan.secrets}
        for wanted in plan.secrets:
            problem = self._create_secret(cluster, plan, wanted)
            if problem:
                takeovers.append(problem)
        for name in desired.mounted_secrets(spec):
            if name not in generated:
                problem = self._check_named_secret(spec, name)
                if problem:
                    spec_problems.append(problem)
        if spec_problems:  # (no object made that would mount a Secret its owner did not label for this cluster)
            return spec_problems, takeovers
        cached = {(w.get("kind"), w["metadata"]["name"]): w for w in self.facts(cluster).workloads.values()}
        for obj in plan.objects:
            meta = obj["metadata"]
            mark = (str(obj["kind"]), meta["namespace"], meta["name"])
            if mark in self.verified:
                continue
            existing = cached.get((obj["kind"], meta["name"]))
            problem = (ownership.not_ours(existing, spec.name, uid) if existing is not None
                       else self._create_or_check(obj, spec.name, uid))
            if problem:
                takeovers.append(problem)
            else:
                self.verified.add(mark)
        return spec_problems, takeovers

    def _create_or_check(self, obj: Mapping[str, Any], cluster: str, uid: str) -> str | None:
        """Create ``obj``; when one of its name is there already (409), why it is not ours, or None."""
        resource, meta = resource_for(dict(obj)), obj["metadata"]
        try:
            kc.create(self.api, resource, dict(obj), meta["namespace"])
            return None
        except kc.ApiError as exc:
            if exc.status != 409:
                raise
        existing = kc.get(self.api, resource, meta["name"], meta["namespace"])
        existing.setdefault("kind", obj["kind"])
        return ownership.not_ours(existing, cluster, uid)

    def _check_named_secret(self, spec: Any, name: str) -> str | None:
        """A Secret the spec names: mounted only when labelled for this cluster."""
        mark = ("Secret", spec.namespace, name)
        if mark in self.verified:
            return None
        try:
            secret = kc.get(self.api, SECRETS, name, spec.namespace)
        except kc.ApiError as exc:
            if exc.status == 404:
                return f"Secret {name} does not exist"
            if exc.status == 403:
                return (f"Secret {name}: the operator may not read it to check its label {names.LABEL_SLURM_CLUSTER}"
                        f"={spec.name} (its RBAC names the Secrets of the chart's slurmCluster values only)")
            raise
        problem = ownership.secret_refusal(secret, spec.name)
        if problem is None:
            self.verified.add(mark)
        return problem

    def _create_secret(self, cluster: Obj, plan: Plan, wanted: desired.WantedSecret) -> str | None:
        """Create a generated key when absent; one already there is used only when the operator made it."""
        assert plan.spec is not None
        mark = ("Secret", plan.spec.namespace, wanted.name)
        if mark in self.verified:
            return None
        obj = desired.secret_object(plan.spec, wanted, self.random_bytes(desired.material_size(wanted)))
        try:
            kc.create(self.api, SECRETS, obj, plan.spec.namespace)
        except kc.ApiError as exc:
            if exc.status != 409:
                raise
            # there already: never replaced, and used only when it is the operator's
            existing = kc.get(self.api, SECRETS, wanted.name, plan.spec.namespace)
            existing.setdefault("kind", "Secret")
            problem = ownership.not_ours(existing, plan.spec.name, "")
            if problem is None:
                self.verified.add(mark)
            return problem
        self.verified.add(mark)
        log.info("slurmcluster %s: generated Secret %s", cluster["metadata"]["name"], wanted.name)
        self.recorder.normal(cluster, "GeneratedKey", f"generated Secret {wanted.name} (key {wanted.key}); it is "
                                                      f"kept, also after the SlurmCluster is deleted")
        return None

    def _apply(self, obj: Mapping[str, Any]) -> None:
        meta = obj["metadata"]
        kc.patch(self.api, resource_for(dict(obj)), meta["name"], obj, meta["namespace"], patch_type="apply",
                 field_manager=desired.MANAGER, force=True)

    def _write_status(self, cluster: Obj, conditions: Sequence[Mapping[str, Any]], fields: dict[str, Any]) -> None:
        now = rfc3339()

        def mutate(current: Obj) -> Obj | None:
            status = current.get("status") or {}
            existing = status.get("conditions") or []
            merged = wire.merge_conditions(existing, conditions, now=now)
            wanted: dict[str, Any] = {**fields, "conditions": existing if merged is None else merged}
            if "clusterName" in wanted and not same_cluster_name(current, wanted["clusterName"]):
                # (a conflict's reread shows a spec renamed meanwhile: its name was never applied)
                del wanted["clusterName"]
            if all(status.get(k) == v for k, v in wanted.items()):
                return None
            return {"status": wanted}

        try:
            kp.update_with_retry(self.api, cluster, mutate, resource=SLURMCLUSTERS, subresource="status")
        except kc.ApiError as exc:
            if not exc.not_found:
                raise
