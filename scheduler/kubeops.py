"""The few Kubernetes writes the scheduler makes, each one call, each safe to repeat.

Each is meant for one Pod, and says which by its UID (a binding's, a deletion's precondition,
a patch's ``metadata.uid``): a Pod recreated under the same name is another Pod.
"""

from __future__ import annotations

from collections.abc import Mapping

from kubernetes.client import ApiClient

from sunk.kube import client as kube
from sunk.kube.patch import patch_object, set_pod_conditions
from sunk.kube.resources import PODS
from sunk.model.types import Obj
from sunk.translate.lock import LOCK_TOLERATION, tolerates_lock
from sunk.translate.objects import metadata_diff, node_name_of


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


def record_job(api: ApiClient, pod: Obj, annotations: Mapping[str, str], *, tolerate_lock: bool = False) -> bool:
    """Annotate the Pod with its job and, if asked, make it tolerate the lock taint: one patch, or none.

    Written at submission, so that the Pod names its job from the start (``kubectl describe``
    answers "which job?" at once; a patch per Pod, docs/benchmarks.md), and again where something
    else needs it: a binding that must tolerate a NoExecute lock (scheduler/locktaint.py),
    kube-scheduler's taint filter in extender mode. Adding a toleration
    to a live Pod is one of the few spec changes Kubernetes allows. False if nothing was
    written (already so, or the Pod is gone). The patch carries the Pod's UID
    (``sunk.kube.patch.patch_object``): a Pod recreated under the same name (a StatefulSet's)
    never gets this one's job id, which would read as "its job is gone" and delete it.
    """
    meta, spec = pod["metadata"], pod["spec"]
    body: Obj = {}
    if changed := metadata_diff(meta.get("annotations"), annotations):
        body["metadata"] = {"annotations": changed}
    if tolerate_lock and not tolerates_lock(pod):
        body["spec"] = {"tolerations": [*(spec.get("tolerations") or []), LOCK_TOLERATION]}
    if not body:
        return False
    return patch_object(api, pod, body, resource=PODS) is not None


def mark_unschedulable(api: ApiClient, pod: Obj, message: str) -> bool:
    """PodScheduled=False/Unschedulable with the reason, as kube-scheduler reports it; only on change, and never
    onto a Pod bound meanwhile (a write that met a conflict reads it again: the extender's binding, say)."""
    return bool(set_pod_conditions(api, pod, [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                               "message": message}], unless=_bound))


def show_waiting(api: ApiClient, pod: Obj, condition: Mapping[str, str]) -> bool:
    """PodScheduled=False with why the Pod waits (``scheduler/waiting.py``); only on change, never onto a Pod
    bound meanwhile."""
    return bool(set_pod_conditions(api, pod, [condition], unless=_bound))


def _bound(pod: Obj) -> bool:
    return bool(node_name_of(pod))


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
