"""The few Kubernetes writes the scheduler makes, each one call, each safe to repeat."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes.client import ApiClient

from sunk import names
from sunk.kube import client as kube
from sunk.kube.patch import set_pod_conditions
from sunk.kube.resources import Resource

PODS = Resource("", "v1", "pods", kind="Pod")
Obj = dict[str, Any]


def bind(api: ApiClient, pod: Obj, node: str, annotations: Mapping[str, str]) -> None:
    """POST pods/binding, as kube-scheduler does; the UID guards against a recreated Pod.

    The binding's annotations are copied onto the Pod by the apiserver, so the job id
    is recorded in the same call.
    """
    meta = pod["metadata"]
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
                     "annotations": dict(annotations)},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    kube.request(api, "POST", PODS.path(meta["namespace"], meta["name"], "binding"), body=body)


LOCK_TOLERATION = {"key": names.LOCK_KEY, "operator": "Exists"}


def record_submission(api: ApiClient, pod: Obj, annotations: Mapping[str, str]) -> None:
    """Annotate the job id and make the Pod tolerate the lock taint, in one patch.

    The strict lock of the Pod's own placeholder job taints its Node before the Pod is
    bound: without the toleration, kube-scheduler (extender mode) would filter that Node
    out, and a NoExecute lock would evict the Pod. Adding a toleration to a live Pod is
    one of the few spec changes Kubernetes allows.
    """
    meta, spec = pod["metadata"], pod["spec"]
    body: Obj = {"metadata": {"annotations": dict(annotations)}}
    tolerations = spec.get("tolerations") or []
    if not any(t.get("key") == names.LOCK_KEY and t.get("operator") == "Exists" for t in tolerations):
        body["spec"] = {"tolerations": [*tolerations, LOCK_TOLERATION]}
    kube.patch(api, PODS, meta["name"], body, meta["namespace"])


def mark_unschedulable(api: ApiClient, pod: Obj, message: str) -> bool:
    """PodScheduled=False/Unschedulable with the reason, as kube-scheduler reports it; only on change."""
    return bool(set_pod_conditions(api, pod, [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                               "message": message}]))


def delete_pod(api: ApiClient, pod: Obj) -> bool:
    """Delete with the Pod's own grace period; False if it was already gone or replaced."""
    meta = pod["metadata"]
    try:
        kube.request(api, "DELETE", PODS.path(meta["namespace"], meta["name"]),
                     body={"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": meta["uid"]}})
    except kube.ApiError as exc:
        if exc.not_found or exc.conflict:
            return False
        raise
    return True
