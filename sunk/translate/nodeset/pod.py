"""The slurmd Pod a NodeSet wants on one Kubernetes Node, and the hash that says it is current.

The Pod is the template, plus what ties it to its Node and Slurm node:
- name and ``spec.hostname``: the Slurm node's name (slurmd registers under its hostname,
  and ``sunk.translate.slurmd`` maps back the same way for every component);
- ``spec.nodeName``: the Node, so the Pod is pinned there without a scheduler (a DaemonSet's
  Pod is too, in effect);
- the label ``sunk.coreweave.com/nodeset`` and an owner reference to the NodeSet (not
  blocking the owner's deletion: the operator's finalizer does that, and drains first);
- the annotation ``sunk.coreweave.com/template-hash``;
- tolerations: the lock taint (``sunk.coreweave.com/lock``, set on the Node while Slurm
  runs a job there: evicting slurmd then would kill the job), and NoExecute
  ``not-ready``/``unreachable`` without a limit, as DaemonSet Pods have: a Pod evicted
  from its Node would only come back to it;
- in the ``slurmd`` container, environment variables with the Slurm node's name, features,
  GRES and partitions, ``SUNK_SLURMD_CONF`` for ``slurmd -Z --conf`` and ``SUNK_GRES_CONF``
  (its ``gres.conf`` lines), all from the node's ``Registration``: the NodeSet's fields joined
  by what its Node says (GPUs, labels; ``registration.py``; docs/nodeset.md);
- the annotation ``sunk.coreweave.com/registration-hash``: a digest of that registration.
  It is per Node, so a Node whose GPUs or labels change has an outdated Pod, replaced as in a
  rolling update (drained, replaced once idle: no job is killed);
- the node's hook credential: a projected ServiceAccount token bound to the Pod, audience
  ``sunk-syncer``, one hour, rotated by the kubelet, mounted in the ``slurmd`` container at
  ``HOOKS_TOKEN_FILE`` (what the chart's hooks.env names). The prolog presents it to the
  Syncer's hook API, which asks the apiserver whose it is (``sunk.translate.podtoken``). A
  template that has a volume of that name, or a mount at that path, keeps its own;
- with ``spec.slurmCluster``, what that SlurmCluster lends (``sunk.translate.slurmcluster.mounts``):
  its configuration at ``/etc/slurm`` with the chart's prolog and epilog, ``SLURM_CONF``, a munged
  native sidecar (the cluster's slurmd image, never the template's) with its munge key, and hooks.env
  at ``/etc/sunk``; each part whole or not at all, the template's own mount or container of the same
  path or name winning (a template using one of the volume names the operator adds is refused by
  ``read_spec``, so none of them can point at the template's volume); and the feature
  ``nodeset-<name>`` in the registration, which the cluster's partitions select on.

The template hash covers everything the NodeSet puts into every Pod (template, features, GRES,
partitions, the labels it reads, memSpecLimit, CPU specialisation) and nothing per Node, so
one value says "current" for all its Pods. Kubernetes fills defaults into a created Pod;
comparing hashes instead of specs keeps those from looking like changes.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any

import attrs

from sunk.model import names

from ..objects import annotations_of
from ..podtoken import DEFAULT_AUDIENCE
from ..slurmcluster.mounts import NodeMounts, add_part, slurmd_parts
from .registration import Registration
from .spec import SLURMD_CONTAINER, NodeSetSpec

Obj = dict[str, Any]

HASH_LENGTH = 10
ENV_NODE_NAME = "SUNK_SLURM_NODE_NAME"
ENV_FEATURES = "SUNK_SLURM_FEATURES"
ENV_GRES = "SUNK_SLURM_GRES"
ENV_PARTITIONS = "SUNK_SLURM_PARTITIONS"
ENV_CONF = "SUNK_SLURMD_CONF"
ENV_GRES_CONF = "SUNK_GRES_CONF"
ENV_K8S_NODE = "SUNK_K8S_NODE_NAME"

HOOKS_TOKEN_VOLUME = "sunk-hooks-token"
HOOKS_TOKEN_DIR = "/var/run/secrets/sunk/hooks-token"
HOOKS_TOKEN_FILE = f"{HOOKS_TOKEN_DIR}/token"
HOOKS_TOKEN_SECONDS = 3600  # the kubelet renews it at 80% of this; the Syncer caches a review 5 min at most

TOLERATIONS: tuple[Obj, ...] = (
    {"key": names.LOCK_KEY, "operator": "Exists"},
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
)


def template_hash(spec: NodeSetSpec, mounts: NodeMounts | None = None) -> str:
    """A short digest of what every Pod of the NodeSet gets (not of the per-Node fields): with a
    SlurmCluster, the names of what it lends too, so a new munge Secret or ConfigMap rolls the Pods."""
    body: dict[str, Any] = {"template": spec.template, "features": list(spec.features), "gres": spec.gres,
                            "partitions": list(spec.partitions)}
    if mounts is not None:
        body["slurmCluster"] = attrs.asdict(mounts)
    # (added only when set, so the hashes of NodeSets that set none of them stay as they were)
    extra = {"featureLabels": list(spec.feature_labels), "partitionLabels": list(spec.partition_labels),
             "memSpecLimit": spec.mem_spec_limit, "cpuSpecList": spec.cpu_spec_list,
             "coreSpecCount": spec.core_spec_count}
    body.update({k: v for k, v in extra.items() if v not in (None, "", [])})
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_LENGTH]


def static_registration(spec: NodeSetSpec) -> Registration:
    """The registration of the NodeSet's own fields alone (what a Node adds is ``registration.registration``)."""
    return Registration(features=spec.own_features, gres=spec.gres, partitions=spec.partitions,
                        mem_spec_limit=spec.mem_spec_limit, cpu_spec_list=spec.cpu_spec_list,
                        core_spec_count=spec.core_spec_count)


def slurmd_conf(spec: NodeSetSpec) -> str:
    """``slurmd -Z --conf`` text of the NodeSet's own fields (CPUs and memory slurmd finds itself)."""
    return static_registration(spec).conf()


def _hashed_gres_conf(reg: Registration, slurm_node: str) -> str:
    """The gres.conf text the registration hash covers: the count-only lines operators before the GPUs'
    ``File=`` wrote. The lines are a function of the node's name and ``Gres=``, which the hash covers
    already; keeping their old form keeps every hash as it was, so an upgrade of the operator replaces
    (drains) no GPU node for a format change."""
    lines = []
    for item in filter(None, reg.gres.split(",")):
        name, *rest = item.split(":")
        gtype, count = (rest[0], rest[1]) if len(rest) == 2 else (None, rest[0] if rest else "1")
        typed = f" Type={gtype}" if gtype else ""
        lines.append(f"NodeName={slurm_node} Name={name}{typed} Count={count}")
    return "".join(line + "\n" for line in lines)


def registration_hash(reg: Registration, slurm_node: str) -> str:
    """A short digest of what the Slurm node registers with: a change means its Pod is outdated."""
    body = {"conf": reg.conf(), "partitions": list(reg.partitions), "gres": _hashed_gres_conf(reg, slurm_node)}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_LENGTH]


def _env(reg: Registration, slurm_node: str, k8s_node: str) -> list[Obj]:
    return [
        {"name": ENV_NODE_NAME, "value": slurm_node},
        {"name": ENV_K8S_NODE, "value": k8s_node},
        {"name": ENV_FEATURES, "value": ",".join(reg.features)},
        {"name": ENV_GRES, "value": reg.gres},
        {"name": ENV_PARTITIONS, "value": ",".join(reg.partitions)},
        {"name": ENV_CONF, "value": reg.conf()},
        {"name": ENV_GRES_CONF, "value": reg.gres_conf(slurm_node)},
    ]


def hooks_token_volume() -> Obj:
    return {"name": HOOKS_TOKEN_VOLUME, "projected": {"defaultMode": 0o400, "sources": [{"serviceAccountToken": {
        "audience": DEFAULT_AUDIENCE, "expirationSeconds": HOOKS_TOKEN_SECONDS, "path": "token"}}]}}


def _with_hooks_token(pod_spec: Obj, container: Obj) -> None:
    """The projected token volume and its mount, unless the template already has either."""
    volumes = list(pod_spec.get("volumes") or [])
    if not any(v.get("name") == HOOKS_TOKEN_VOLUME for v in volumes):
        pod_spec["volumes"] = [*volumes, hooks_token_volume()]
    mounts = list(container.get("volumeMounts") or [])
    if not any(m.get("mountPath") == HOOKS_TOKEN_DIR for m in mounts):
        container["volumeMounts"] = [*mounts, {"name": HOOKS_TOKEN_VOLUME, "mountPath": HOOKS_TOKEN_DIR,
                                               "readOnly": True}]


def owner_reference(spec: NodeSetSpec) -> Obj:
    return {"apiVersion": names.NODESET_API_VERSION, "kind": "NodeSet", "name": spec.name, "uid": spec.uid,
            "controller": True}


def desired_pod(spec: NodeSetSpec, k8s_node: str, slurm_node: str, digest: str,
                reg: Registration | None = None, mounts: NodeMounts | None = None) -> Obj:
    """The slurmd Pod for ``k8s_node`` as Slurm node ``slurm_node``, registering with ``reg`` (the
    NodeSet's own fields without one), with what its SlurmCluster lends (``mounts``; None: nothing,
    the template brings it); ``spec`` must have no problems."""
    reg = static_registration(spec) if reg is None else reg
    template = copy.deepcopy(dict(spec.template))
    meta = template.get("metadata") or {}
    pod_spec: Obj = template.get("spec") or {}
    labels = {**(meta.get("labels") or {}), names.LABEL_NODESET: spec.name}
    annotations = {**(meta.get("annotations") or {}), names.ANN_TEMPLATE_HASH: digest,
                   names.ANN_REGISTRATION_HASH: registration_hash(reg, slurm_node)}
    ours = {e["name"] for e in _env(reg, slurm_node, k8s_node)}
    for container in pod_spec.get("containers") or []:
        if container.get("name") == SLURMD_CONTAINER:
            kept = [e for e in container.get("env") or [] if e.get("name") not in ours]
            container["env"] = kept + _env(reg, slurm_node, k8s_node)
            _with_hooks_token(pod_spec, container)
            if mounts is not None:
                for part in slurmd_parts(mounts):
                    add_part(part, pod_spec, container)
    tolerations = list(pod_spec.get("tolerations") or [])
    tolerations.extend(t for t in TOLERATIONS if t not in tolerations)
    pod_spec.update(nodeName=k8s_node, hostname=slurm_node, tolerations=tolerations)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": slurm_node, "namespace": spec.namespace, "labels": labels, "annotations": annotations,
                     "ownerReferences": [owner_reference(spec)]},
        "spec": pod_spec,
    }


def pod_hash(pod: Mapping[str, Any]) -> str | None:
    return annotations_of(pod).get(names.ANN_TEMPLATE_HASH)


def pod_registration_hash(pod: Mapping[str, Any]) -> str | None:
    """The Pod's registration digest; None on a Pod made before the operator wrote one."""
    return annotations_of(pod).get(names.ANN_REGISTRATION_HASH)


def pending_deletion(pod: Mapping[str, Any]) -> str | None:
    """Why the operator will delete this Pod once its Slurm node is drained and idle (None: it will not)."""
    value = annotations_of(pod).get(names.ANN_PENDING_DELETION)
    return None if value is None else str(value)
