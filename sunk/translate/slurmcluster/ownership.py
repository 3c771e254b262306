"""Whether an object already in the namespace is the SlurmCluster's to write, or to mount.

The operator writes by server-side apply with ``force``, and owns what it applies: an object of the
same name made by someone else (a ``<name>-login`` Deployment, a ConfigMap) would be taken over,
get the SlurmCluster's owner reference and be deleted with it. And it mounts key Secrets into root
Pods: a Secret pre-created under a generated key's name, or one of the namespace's Secrets a spec
names (``keys.*.existingSecret``, ``external.passwordSecret``), would be used silently. So an
existing object is the operator's only when it carries the operator's marks, and a Secret is
mounted only when whoever made it consented by labelling it for this SlurmCluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sunk.model import names

from .desired import MANAGER

MANAGED_BY = "app.kubernetes.io/managed-by"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def foreign_controller(obj: Mapping[str, Any], cluster_uid: str) -> str | None:
    """The controller owner of ``obj`` that is not the SlurmCluster, described, or None."""
    for ref in _meta(obj).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") and ref.get("uid") != cluster_uid:
            return f"{ref.get('kind')}/{ref.get('name')}"
    return None


def not_ours(obj: Mapping[str, Any], cluster: str, cluster_uid: str) -> str | None:
    """Why an existing object of a name the SlurmCluster wants is not the operator's to apply over,
    or None: it must carry ``managed-by: sunk-operator``, this cluster's label and no other controller."""
    meta = _meta(obj)
    what = f"{obj.get('kind') or 'object'} {meta.get('name')}"
    labels = meta.get("labels") or {}
    if labels.get(MANAGED_BY) != MANAGER or labels.get(names.LABEL_SLURM_CLUSTER) != cluster:
        return (f"{what} exists and was not made by sunk-operator for SlurmCluster {cluster} (labels "
                f"{MANAGED_BY}={MANAGER} and {names.LABEL_SLURM_CLUSTER}={cluster} missing): it is not taken "
                f"over; delete or rename it")
    owner = foreign_controller(obj, cluster_uid)
    if owner is not None:
        return f"{what} is controlled by {owner}: it is not taken over; delete or rename it"
    return None


def secret_refusal(secret: Mapping[str, Any], cluster: str) -> str | None:
    """Why a Secret may not be mounted into the SlurmCluster's Pods, or None: it must be labelled
    ``sunk.coreweave.com/slurm-cluster: <cluster>`` (by whoever made it: their consent)."""
    meta = _meta(secret)
    if (meta.get("labels") or {}).get(names.LABEL_SLURM_CLUSTER) != cluster:
        return (f"Secret {meta.get('name')} is not labelled {names.LABEL_SLURM_CLUSTER}={cluster}: it is not "
                f"mounted (label it to let SlurmCluster {cluster} use it)")
    return None
