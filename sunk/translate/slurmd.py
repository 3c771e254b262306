"""The one mapping from a Slurm node to its slurmd Pod and that Pod's Kubernetes Node.

Why one: the Syncer, the scheduler, the extender and the NodeSet operator all ask "which
Pod is Slurm node X, and where does it run". slurmd registers under its hostname, so a
slurmd Pod's Slurm node is its ``spec.hostname``, or its name when it sets none (the name
is then the hostname the kubelet gives it). A NodeSet sets both to the Slurm node's name;
the dev cluster's hand-made Pods did too. Keying by the Pod's name alone (the scheduler,
before) disagreed with the Syncer as soon as the two differ, and Pods then waited forever.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

Obj = Mapping[str, Any]


def slurm_node_name(pod: Obj) -> str:
    """The Slurm node a slurmd Pod runs: its hostname, else its name."""
    return str((pod.get("spec") or {}).get("hostname") or pod["metadata"]["name"])


def k8s_node_name(pod: Obj) -> str | None:
    """The Kubernetes Node the slurmd Pod is bound to, if any."""
    return (pod.get("spec") or {}).get("nodeName") or None


def serving(pod: Obj) -> list[str]:
    """Index function: the Slurm node a slurmd Pod may serve, if it is bound and not being deleted.

    Only such Pods can be a Slurm node's, so an index of them (client-go style, kept by the
    informer) answers "which Node is Slurm node X on" from the few Pods claiming X, never all.
    """
    if k8s_node_name(pod) is None or pod["metadata"].get("deletionTimestamp"):
        return []
    return [slurm_node_name(pod)]


def hosting(pod: Obj) -> list[str]:
    """Index function: the Kubernetes Node of a slurmd Pod that may serve a Slurm node (``serving``)."""
    return [node] if serving(pod) and (node := k8s_node_name(pod)) is not None else []


def chosen(claimants: Iterable[Obj]) -> Obj | None:
    """Of the slurmd Pods claiming one Slurm node (``serving``), the one that serves it: the newest
    by creation time (a replacement overlapping the old one), as the Syncer's lookup does; ties
    go to the later Kubernetes Node name, so that every caller picks the same Pod."""
    return max(claimants, default=None,
               key=lambda pod: (str(pod["metadata"].get("creationTimestamp") or ""), k8s_node_name(pod) or ""))


def placement_view(pod: Obj) -> tuple[str, str | None, bool, str]:
    """All the scheduler reads of a slurmd Pod: which Slurm node, on which Node, whether it is
    being deleted, and its age (``chosen``). Its lock annotations, conditions and status do not
    move a Pod's binding, so an update that leaves this alone wakes no Pod."""
    meta = pod["metadata"]
    return (slurm_node_name(pod), k8s_node_name(pod), bool(meta.get("deletionTimestamp")),
            str(meta.get("creationTimestamp") or ""))


def node_of(pods: Iterable[Obj]) -> dict[str, str]:
    """Slurm node -> Kubernetes Node, over bound slurmd Pods that are not being deleted.

    Where two Pods claim one Slurm node, ``chosen`` picks. (A walk of all Pods: for a whole
    picture; the scheduler's per-event lookups use the ``serving`` index instead.)
    """
    claims: dict[str, list[Obj]] = {}
    for pod in pods:
        for name in serving(pod):
            claims.setdefault(name, []).append(pod)
    serving_pods = {name: chosen(group) for name, group in claims.items()}
    return {name: str(k8s_node_name(pod)) for name, pod in serving_pods.items() if pod is not None}
