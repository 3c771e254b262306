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


def node_of(pods: Iterable[Obj]) -> dict[str, str]:
    """Slurm node -> Kubernetes Node, over bound slurmd Pods that are not being deleted.

    Where two Pods claim one Slurm node (a replacement overlapping the old one), the newest
    by creation time wins, as the Syncer's lookup does.
    """
    chosen: dict[str, tuple[str, str]] = {}
    for pod in pods:
        meta = pod["metadata"]
        node = k8s_node_name(pod)
        if node is None or meta.get("deletionTimestamp"):
            continue
        name, created = slurm_node_name(pod), str(meta.get("creationTimestamp") or "")
        if name not in chosen or created >= chosen[name][0]:
            chosen[name] = (created, node)
    return {name: node for name, (_, node) in chosen.items()}
