"""Builders of NodeSets, Nodes and slurmd Pods in wire form, for the NodeSet tests (unit tests only)."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from sunk.kube import client as kc
from sunk.model import names
from sunk.model.slurm import Job, Node, NodeUpdate
from sunk.slurm.client import Snapshot
from sunk.slurm.errors import NotFound, SlurmError
from sunk.translate.nodeset import pod as podlib
from sunk.translate.nodeset.registration import Registration
from sunk.translate.nodeset.spec import read_spec

Obj = dict[str, Any]

TEMPLATE: Obj = {
    "metadata": {"labels": {"app.kubernetes.io/name": "slurmd"}},
    "spec": {"containers": [{"name": "slurmd", "image": "sunk/slurmd:25.11"}]},
}


def nodeset(name: str = "gpu", *, prefix: str = "g", selector: Mapping[str, str] | None = None,
            image: str = "sunk/slurmd:25.11", strategy: str | None = None, max_unavailable: Any = None,
            replicas: int | None = None, deleting: bool = False, finalizer: bool = True, generation: int = 3,
            conditions: Sequence[Obj] = (), spec: Any = None, **extra: Any) -> Obj:
    template = copy.deepcopy(TEMPLATE)
    template["spec"]["containers"][0]["image"] = image
    body: Obj = {"nodeSelector": dict(selector if selector is not None else {"pool": "gpu"}),
                 "naming": {"scheme": "IPv4Octets", "prefix": prefix}, "template": template,
                 "slurm": {"features": ["h100"], "gres": "gpu:h100:8", "partitions": ["gpu"]}}
    if strategy is not None or max_unavailable is not None:
        body["updateStrategy"] = {"type": strategy or "RollingUpdate"}
        if max_unavailable is not None:
            body["updateStrategy"]["rollingUpdate"] = {"maxUnavailable": max_unavailable}
    if replicas is not None:
        body["replicas"] = replicas
    body.update(extra)
    meta: Obj = {"name": name, "namespace": "slurm", "uid": f"uid-{name}", "generation": generation,
                 "resourceVersion": "10", "finalizers": [names.FINALIZER_NODESET] if finalizer else []}
    if deleting:
        meta["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    return {"apiVersion": names.NODESET_API_VERSION, "kind": "NodeSet", "metadata": meta,
            "spec": spec if spec is not None else body, "status": {"conditions": [dict(c) for c in conditions]}}


def node(name: str, ip: str | None, *, deleting: bool = False, gpus: Any = None, **labels: str) -> Obj:
    meta: Obj = {"name": name, "labels": dict(labels or {"pool": "gpu"})}
    if deleting:
        meta["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    addresses = [{"type": "Hostname", "address": name}]
    if ip is not None:
        addresses.insert(0, {"type": "InternalIP", "address": ip})
    status: Obj = {"addresses": addresses}
    if gpus is not None:
        status["allocatable"] = {"cpu": "64", "nvidia.com/gpu": gpus}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "status": status}


def pod_for(ns: Obj, k8s_node: str, slurm_node: str, *, ready: bool = True, pending: str | None = None,
            terminating: bool = False, digest: str | None = None, uid: str | None = None,
            reg: Registration | None = None) -> Obj:
    """The Pod the operator would have created from ``ns``, as the apiserver then shows it."""
    spec = read_spec(ns).spec
    pod = podlib.desired_pod(spec, k8s_node, slurm_node, digest or podlib.template_hash(spec), reg)
    meta = pod["metadata"]
    meta.update(uid=uid or f"uid-{slurm_node}", resourceVersion="5", creationTimestamp="2030-01-01T00:00:00Z")
    if pending is not None:
        meta["annotations"][names.ANN_PENDING_DELETION] = pending
    if terminating:
        meta["deletionTimestamp"] = "2030-01-01T00:00:01Z"
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    return pod


# ---- an apiserver, Slurm and an Event recorder in memory, for the reconciler ---------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


class FakeApiServer:
    """Objects by (plural, namespace, name); every write recorded as (verb, plural, name[, subresource]).

    Deleting a Pod makes it terminating (the kubelet's part: ``finish``); an object with
    finalizers is only marked deleted until they are gone.
    """

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str | None, str], Obj] = {}
        self.calls: list[tuple[str, ...]] = []
        self._rv = itertools.count(100)
        self.fail: dict[tuple[str, str], int] = {}  # (verb, name) -> HTTP status to answer once

    def install(self, monkeypatch: Any) -> FakeApiServer:
        for verb in ("create", "patch", "delete", "get"):
            monkeypatch.setattr(kc, verb, getattr(self, verb))
        return self

    def put(self, plural: str, obj: Obj) -> Obj:
        meta = obj["metadata"]
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta["resourceVersion"] = str(next(self._rv))
        self.objects[(plural, meta.get("namespace"), meta["name"])] = obj
        return obj

    def of(self, plural: str) -> list[Obj]:
        return [copy.deepcopy(o) for (p, _, _), o in sorted(self.objects.items()) if p == plural]

    def one(self, plural: str, name: str, namespace: str | None = "slurm") -> Obj | None:
        return self.objects.get((plural, namespace, name))

    def _check(self, verb: str, name: str, path: str) -> None:
        status = self.fail.pop((verb, name), None)
        if status is not None:
            raise kc.ApiError(status, "injected", {"message": f"injected {status}"}, verb.upper(), path)

    def create(self, api: Any, resource: Any, obj: Obj, namespace: str | None = None) -> Obj:
        name = obj["metadata"]["name"]
        self.calls.append(("create", resource.plural, name))
        self._check("create", name, resource.path(namespace))
        key = (resource.plural, namespace or obj["metadata"].get("namespace"), name)
        if key in self.objects:
            raise kc.ApiError(409, "Conflict", {"message": "already exists"}, "POST", resource.path(namespace))
        new = copy.deepcopy(obj)
        new["metadata"]["creationTimestamp"] = "2030-01-01T00:00:00Z"
        return copy.deepcopy(self.put(resource.plural, new))

    def get(self, api: Any, resource: Any, name: str, namespace: str | None = None, **_: Any) -> Obj:
        obj = self.objects.get((resource.plural, namespace, name))
        if obj is None:
            raise kc.ApiError(404, "NotFound", {}, "GET", resource.path(namespace, name))
        return copy.deepcopy(obj)

    def patch(self, api: Any, resource: Any, name: str, body: Any, namespace: str | None = None, *,
              subresource: str | None = None, **_: Any) -> Obj:
        self.calls.append(("patch", resource.plural, name, subresource or ""))
        self._check("patch", name, resource.path(namespace, name))
        key = (resource.plural, namespace, name)
        obj = self.objects.get(key)
        if obj is None:
            raise kc.ApiError(404, "NotFound", {}, "PATCH", resource.path(namespace, name))
        body = copy.deepcopy(body)
        uid = (body.get("metadata") or {}).get("uid")
        if uid is not None and uid != obj["metadata"].get("uid"):  # (sunk.kube.patch.with_uid's guard)
            raise kc.ApiError(422, "Invalid", {"message": f"{name!r} is invalid: metadata.uid: Invalid value: "
                                                          f"{uid!r}: field is immutable"}, "PATCH", "")
        want_rv = (body.get("metadata") or {}).pop("resourceVersion", None)
        if want_rv is not None and want_rv != obj["metadata"]["resourceVersion"]:
            raise kc.ApiError(409, "Conflict", {"message": "the object has been modified"}, "PATCH", "")
        if subresource == "status":
            body = {"status": body.get("status")}
        elif resource.plural in ("nodesets", "nodeslices"):
            body.pop("status", None)
        new = merge_patch(obj, body)
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and resource.plural != "pods":
            del self.objects[key]
            return copy.deepcopy(new)
        return copy.deepcopy(self.put(resource.plural, new))

    def delete(self, api: Any, resource: Any, name: str, namespace: str | None = None, *,
               uid: str | None = None, **_: Any) -> Obj:
        self.calls.append(("delete", resource.plural, name))
        self._check("delete", name, resource.path(namespace, name))
        key = (resource.plural, namespace, name)
        obj = self.objects.get(key)
        if obj is None:
            raise kc.ApiError(404, "NotFound", {}, "DELETE", resource.path(namespace, name))
        if uid and obj["metadata"].get("uid") != uid:
            raise kc.ApiError(409, "Conflict", {"message": "Precondition failed: UID"}, "DELETE", "")
        if resource.plural == "pods" or obj["metadata"].get("finalizers"):
            obj["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:09Z"
            self.put(resource.plural, obj)
        else:
            del self.objects[key]
        return {}

    def finish(self) -> None:
        """The kubelets: every terminating Pod is gone."""
        for key, obj in list(self.objects.items()):
            if key[0] == "pods" and obj["metadata"].get("deletionTimestamp"):
                del self.objects[key]

    def set_ready(self, ready: bool = True) -> None:
        """The kubelets: every live Pod is Running (Ready or not)."""
        for (plural, _, _), obj in list(self.objects.items()):
            if plural == "pods" and not obj["metadata"].get("deletionTimestamp"):
                obj["status"] = {"phase": "Running",
                                 "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
                self.put("pods", obj)


class FakeSlurm:
    """Slurm's own truth: nodes by name; every call recorded; DRAIN/UNDRAIN applied."""

    def __init__(self, *nodes: Node) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.jobs: dict[int, Job] = {}
        self.cancel_error: SlurmError | None = None
        self.calls: list[tuple[str, str, NodeUpdate | None]] = []
        self.read_error: SlurmError | None = None

    def list_jobs(self) -> Snapshot[Job]:
        self.calls.append(("list_jobs", "", None))
        return Snapshot(items=tuple(self.jobs.values()), last_update=0)

    def cancel_job(self, job_id: int, *, array_task_id: int | None = None) -> None:
        """A cancelled job ends at once (its epilog done): its record says CANCELLED; its nodes are the test's.
        By an array's id alone, every task of the array ends, as Slurm has it."""
        ident = str(job_id) if array_task_id is None else f"{job_id}_{array_task_id}"
        self.calls.append(("cancel", ident, None))
        if self.cancel_error is not None:
            raise self.cancel_error
        for key, job in list(self.jobs.items()):
            if key == job_id or (array_task_id is None and job.array_job_id == job_id):
                self.jobs[key] = attrs.evolve(job, state="CANCELLED")

    def get_node(self, name: str) -> Node:
        self.calls.append(("get", name, None))
        if self.read_error is not None:
            raise self.read_error
        if name not in self.nodes:
            raise NotFound(f"node {name}", code=2018)
        return self.nodes[name]

    def update_node(self, name: str, update: NodeUpdate) -> None:
        self.calls.append(("update", name, update))
        if name not in self.nodes:
            raise NotFound(f"node {name}", code=2018)
        node = self.nodes[name]
        state = set(node.state)
        if update.state == "DRAIN":
            state.add("DRAIN")
            self.nodes[name] = Node(name, state=frozenset(state), reason=update.reason or "")
        elif update.state == "UNDRAIN":
            state.discard("DRAIN")
            self.nodes[name] = Node(name, state=frozenset(state), reason="")

    def writes(self) -> list[tuple[str, str, NodeUpdate | None]]:
        return [c for c in self.calls if c[0] == "update"]


class NodeCacheFake:
    """The Slurm nodes informer: a copy of FakeSlurm's nodes taken at ``refresh``."""

    def __init__(self, slurm: FakeSlurm) -> None:
        self.slurm = slurm
        self.held: dict[str, Node] = dict(slurm.nodes)
        self.fresh = True
        self.synced = True
        self.nudges = 0

    def refresh(self) -> None:
        self.held = dict(self.slurm.nodes)

    def items(self) -> Mapping[str, Node]:
        return self.held

    def nudge(self) -> None:
        self.nudges += 1


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def event(self, obj: Obj, type: str, reason: str, message: str, **_: Any) -> None:
        self.events.append((type, reason, message))

    def normal(self, obj: Obj, reason: str, message: str, **_: Any) -> None:
        self.event(obj, "Normal", reason, message)

    def warning(self, obj: Obj, reason: str, message: str, **_: Any) -> None:
        self.event(obj, "Warning", reason, message)

    def reasons(self) -> list[str]:
        return [r for _, r, _ in self.events]
