"""Throwaway namespaces for the kube cluster tests, purged completely afterwards.

The dev cluster runs no kube-controller-manager, so a deleted namespace would stay
Terminating for ever, with its objects. ``purge_namespace`` does the namespace
controller's job for the kinds these tests create, then finalizes the namespace.
"""

from __future__ import annotations

import uuid

from sunk.kube import client as kc
from sunk.kube.resources import CONFIGMAPS, EVENTS, LEASES, NAMESPACES, PDBS, PODS, Resource

KINDS: tuple[Resource, ...] = (PODS, PDBS, LEASES, EVENTS, CONFIGMAPS)


def create_namespace(api) -> str:
    name = f"kube-test-{uuid.uuid4().hex[:8]}"
    kc.create(api, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def purge_namespace(api, name: str) -> None:
    for resource in KINDS:
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
