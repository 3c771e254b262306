"""Builders of NodeSets, Nodes and slurmd Pods in wire form, for the NodeSet tests (unit tests only)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from sunk import names
from sunk.translate.nodeset import pod as podlib
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


def node(name: str, ip: str | None, *, deleting: bool = False, **labels: str) -> Obj:
    meta: Obj = {"name": name, "labels": dict(labels or {"pool": "gpu"})}
    if deleting:
        meta["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    addresses = [{"type": "Hostname", "address": name}]
    if ip is not None:
        addresses.insert(0, {"type": "InternalIP", "address": ip})
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "status": {"addresses": addresses}}


def pod_for(ns: Obj, k8s_node: str, slurm_node: str, *, ready: bool = True, pending: str | None = None,
            terminating: bool = False, digest: str | None = None, uid: str | None = None) -> Obj:
    """The Pod the operator would have created from ``ns``, as the apiserver then shows it."""
    spec = read_spec(ns).spec
    pod = podlib.desired_pod(spec, k8s_node, slurm_node, digest or podlib.template_hash(spec))
    meta = pod["metadata"]
    meta.update(uid=uid or f"uid-{slurm_node}", resourceVersion="5", creationTimestamp="2030-01-01T00:00:00Z")
    if pending is not None:
        meta["annotations"][names.ANN_PENDING_DELETION] = pending
    if terminating:
        meta["deletionTimestamp"] = "2030-01-01T00:00:01Z"
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    return pod
