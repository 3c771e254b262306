"""API resources by (group, version, plural), and the REST paths that address them."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import attrs


@attrs.frozen
class Resource:
    """One REST resource, e.g. ``Resource("", "v1", "pods")``.

    ``kind`` is only used to label objects that arrive without one (list items do).
    ``namespaced`` matters for keys and for building paths of cluster-scoped objects.
    """

    group: str
    version: str
    plural: str
    kind: str = ""
    namespaced: bool = True

    @classmethod
    def of(cls, value: Resource | tuple[str, str, str]) -> Resource:
        """Accept a ``Resource`` or a bare ``(group, version, plural)`` tuple."""
        if isinstance(value, Resource):
            return value
        group, version, plural = value
        for known in KNOWN:
            if (known.group, known.version, known.plural) == (group, version, plural):
                return known
        return cls(group, version, plural)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """``/api/v1/namespaces/ns/pods/name/status``; no namespace means all namespaces."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace and self.namespaced:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base


PODS = Resource("", "v1", "pods", "Pod")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
EVENTS = Resource("", "v1", "events", "Event")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
NODESETS = Resource("sunk.coreweave.com", "v1alpha1", "nodesets", "NodeSet")
NODESLICES = Resource("sunk.coreweave.com", "v1alpha1", "nodeslices", "NodeSlice")
# What gangs are sized by (sunk/translate/gang.py): Jobs, and scheduler-plugins' coscheduling PodGroups.
JOBS = Resource("batch", "v1", "jobs", "Job")
PODGROUPS = Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup")
# Dynamic Resource Allocation (GA in Kubernetes 1.34): a Pod's claims, and the devices drivers publish per Node.
RESOURCECLAIMS = Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim")
RESOURCESLICES = Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", namespaced=False)
DEVICECLASSES = Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", namespaced=False)
# The Syncer's own Deployment: scaled to 0 (its scale subresource) before sunk-syncer release-nodes lifts its marks.
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
# The Syncer's hook API asks the apiserver who a slurmd Pod's ServiceAccount token belongs to (create only).
TOKENREVIEWS = Resource("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", namespaced=False)
# The chart's generated Secrets (sunk-syncer ensure-secrets: created when missing, never overwritten).
SECRETS = Resource("", "v1", "secrets", "Secret")

# A SlurmCluster's control plane (sunk/slurmcluster): applied by sunk-operator, owned by the SlurmCluster.
SLURMCLUSTERS = Resource("sunk.coreweave.com", "v1alpha1", "slurmclusters", "SlurmCluster")
STATEFULSETS = Resource("apps", "v1", "statefulsets", "StatefulSet")
SERVICES = Resource("", "v1", "services", "Service")
PVCS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")

KNOWN: tuple[Resource, ...] = (PODS, NODES, NAMESPACES, EVENTS, CONFIGMAPS, LEASES, PDBS, NODESETS, NODESLICES, JOBS,
                               PODGROUPS, DEPLOYMENTS, TOKENREVIEWS, SECRETS, SLURMCLUSTERS, STATEFULSETS, SERVICES,
                               PVCS, RESOURCECLAIMS, RESOURCESLICES, DEVICECLASSES)


def resource_for(obj: dict[str, Any]) -> Resource:
    """The resource of a wire object, from its ``apiVersion`` and ``kind``."""
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    for known in KNOWN:
        if known.kind == kind and known.api_version == api_version:
            return known
    raise ValueError(f"unknown resource for apiVersion={api_version!r} kind={kind!r}; pass it explicitly")


def object_key(obj: dict[str, Any]) -> str:
    """client-go's MetaNamespaceKey: ``namespace/name``, or ``name`` when cluster-scoped."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else str(meta["name"])


def split_key(key: str) -> tuple[str | None, str]:
    """Inverse of ``object_key``."""
    ns, sep, name = key.partition("/")
    return (ns, name) if sep else (None, ns)


def label_selector(selector: dict[str, Any]) -> str:
    """A LabelSelector (a Deployment's ``spec.selector``: ``matchLabels``, ``matchExpressions``) as the
    ``labelSelector`` query of a list, in the apiserver's own syntax (``a=b,c in (d,e),!f``).

    An empty selector is refused (ValueError): as a query it would list every object, where a
    Deployment's selects none.
    """
    terms = [f"{key}={value}" for key, value in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or ():
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or ()
        if operator == "In":
            terms.append(f"{key} in ({','.join(values)})")
        elif operator == "NotIn":
            terms.append(f"{key} notin ({','.join(values)})")
        elif operator == "Exists":
            terms.append(key)
        elif operator == "DoesNotExist":
            terms.append(f"!{key}")
        else:
            raise ValueError(f"unknown label selector operator {operator!r}")
    if not terms:
        raise ValueError("an empty label selector selects nothing here (as a query it would select everything)")
    return ",".join(terms)
