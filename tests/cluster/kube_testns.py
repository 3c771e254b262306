"""Throwaway namespaces for the kube cluster tests, purged completely afterwards.

``purge_namespace`` deletes the kinds these tests create at once and finalizes the
namespace, rather than wait for kube-controller-manager's namespace controller. The Pods'
controllers go first: a ReplicaSet left running would make its Pods again, and a namespace
finalized around them leaves them in etcd for ever (listed, Pending, under no namespace).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sunk.kube import client as kc
from sunk.kube.resources import CONFIGMAPS, EVENTS, JOBS, LEASES, NAMESPACES, PDBS, PODS, RESOURCECLAIMS, Resource
from sunk_dev.pool import wait_default_service_account

DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
REPLICASETS = Resource("apps", "v1", "replicasets", "ReplicaSet")
STATEFULSETS = Resource("apps", "v1", "statefulsets", "StatefulSet")
CLAIM_TEMPLATES = Resource("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate")
SERVICES = Resource("", "v1", "services", "Service")
POLICIES = Resource("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy")
BINDINGS = Resource("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings",
                    "ValidatingAdmissionPolicyBinding")
CONTROLLERS: tuple[Resource, ...] = (DEPLOYMENTS, REPLICASETS, STATEFULSETS)
# (A ResourceClaim left allocated in a finalized namespace would hold its devices for ever: sunk-scheduler, which
# never gives a device any claim holds, would drain the real Node for it.)
KINDS: tuple[Resource, ...] = (PODS, PDBS, LEASES, EVENTS, CONFIGMAPS, SERVICES, RESOURCECLAIMS, CLAIM_TEMPLATES)


def create_namespace(api) -> str:
    name = f"kube-test-{uuid.uuid4().hex[:8]}"
    kc.create(api, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_default_service_account(api, name)
    return name


def delete_jobs(api, namespace: str, timeout: float = 60) -> None:
    """Delete the namespace's batch/v1 Jobs (their Pods left to the garbage collector) and wait until they
    are gone: do it before deleting their Pods, or the Job controller makes them again."""
    for job in kc.list_objects(api, JOBS, namespace):
        try:
            kc.request(api, "DELETE", JOBS.path(namespace, job["metadata"]["name"]),
                       body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"})
        except kc.ApiError as exc:
            if not exc.not_found:
                raise
    deadline = time.monotonic() + timeout
    while kc.list_objects(api, JOBS, namespace):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the Jobs of {namespace} are still there {timeout:.0f} s after their deletion")
        time.sleep(1)


def purge_namespace(api, name: str, workloads: tuple[Resource, ...] = ()) -> None:
    """``workloads``: custom resources that make the controllers' objects (LeaderWorkerSets, JobSets, NodeSets),
    deleted first, their finalizers lifted (the controller that would lift them may be gone: a NodeSet's
    operator stopped, uninstalled); a kind whose CRD is gone is skipped."""
    for resource in workloads:
        try:
            objs = kc.list_objects(api, resource, name)
        except kc.ApiError as exc:
            if not exc.not_found:
                raise
            continue
        for obj in objs:
            try:
                kc.delete(api, resource, obj["metadata"]["name"], name)
                if obj["metadata"].get("finalizers"):
                    kc.patch(api, resource, obj["metadata"]["name"], {"metadata": {"finalizers": None}}, name)
            except kc.ApiError as exc:
                if not exc.not_found:
                    raise
    delete_jobs(api, name)
    for resource in (*CONTROLLERS, *KINDS):
        for obj in kc.list_objects(api, resource, name):
            try:
                kc.delete(api, resource, obj["metadata"]["name"], name, grace_period_seconds=0)
            except kc.ApiError as exc:
                if not exc.not_found:
                    raise
    try:
        kc.delete(api, NAMESPACES, name)
        ns = kc.get(api, NAMESPACES, name)
        ns["spec"]["finalizers"] = []
        kc.request(api, "PUT", NAMESPACES.path(name=name, subresource="finalize"), body=ns)
    except kc.ApiError as exc:
        if not exc.not_found:
            raise


@contextmanager
def applied_admission_policy(api, docs: list[dict[str, Any]], name_ends: str) -> Iterator[None]:
    """The rendered ValidatingAdmissionPolicy whose name ends with ``name_ends`` and its binding, created under
    names of their own (cluster-scoped: another test's copy must not collide), deleted afterwards."""
    suffix = uuid.uuid4().hex[:6]
    made = []
    try:
        for resource in (POLICIES, BINDINGS):
            doc = next(d for d in docs if d["kind"] == resource.kind and d["metadata"]["name"].endswith(name_ends))
            doc["metadata"]["name"] += f"-{suffix}"
            if resource is BINDINGS:
                doc["spec"]["policyName"] += f"-{suffix}"
            made.append((resource, kc.create(api, resource, doc)["metadata"]["name"]))
        yield
    finally:
        for resource, name in reversed(made):
            kc.delete(api, resource, name)
