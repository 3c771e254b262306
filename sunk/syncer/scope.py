"""Which Slurm nodes this Syncer owns: those with a slurmd Pod here, or that had one.

Why: the drain rules read "no slurmd Pod" as "the Pod was deleted: drain". That holds
only for nodes this Syncer manages. A Slurm cluster may also hold nodes with no Pod at
all (login or static nodes, another Syncer's namespace, a mistyped selector), and
draining all of those would be a wrong drain on a large scale.

A node is owned when a slurmd Pod in the watched set names it, or when its Extra carries
this Syncer's facts with a Pod in the watched namespace: the Syncer wrote them while the
Pod existed, so a missing Pod now means a deleted one. The facts live in Slurm, so the
answer survives restarts without any local state. For the same reason the Extra facts are
not rewritten while the Pod is missing (see ``extra_identity``): they are how the node is
still known as ours, so that a drain undone by hand is reapplied until a Pod returns.
"""

from __future__ import annotations

import json
from typing import Any

from sunk.slurm.models import Node

from .facts import KubeFacts


def extra_identity(extra: str) -> tuple[str, str] | None:
    """``(namespace, pod)`` from the Syncer's keys in Extra, if they are there and valid."""
    try:
        value: Any = json.loads(extra or "")
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    namespace, pod = value.get("namespace"), value.get("pod")
    if isinstance(namespace, str) and isinstance(pod, str) and namespace and pod:
        return namespace, pod
    return None


def owned(facts: KubeFacts, node: Node) -> bool:
    if facts.pod is not None:
        return True
    identity = extra_identity(node.extra)
    return identity is not None and identity[0] == facts.namespace
