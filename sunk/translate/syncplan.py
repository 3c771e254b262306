"""One Slurm node's sync plan: the writes the Syncer makes on each side, from the facts it gathered.

Why one pure module: the Syncer's two reconcilers (``sunk/syncer/slurmside.py``, ``kubeside.py``)
gather the facts of a node from memory, ask here, and carry out the answer, so every decision is
tested table by table without a cache or a client. The rules are stated where they live
(``nodestate``, ``poddown``, ``drains``, ``extra``, ``nodecleanup``, ``podcordon``); this module
puts them together into writes.

Kubernetes -> Slurm (``slurm_plan``): at most one ``NodeUpdate``, and only for a node this Syncer
owns (``owned``): a slurmd Pod it watches names it, or its Extra names a Pod in the watched
namespace (written while the Pod existed: a missing Pod now means a deleted one; the answer lives
in Slurm and survives restarts) that does not exist outside this Syncer's selector (another
Syncer's Pod in the same namespace, not a deleted one). Login and static nodes are never touched:
"no slurmd Pod" reads as "drain" only for nodes that had one. Then:

- its slurmd Pod is gone and the deletion is news: DOWN once, with the mark in Extra (``poddown``);
- else the drain (``nodestate.desired_drain``) and the Syncer's Extra facts (``nodestate.extra_facts``
  and the NodeSet mark, ``nodecleanup.extra_mark``) in one write. While the Pod is missing, Extra
  keeps its last facts (they are how the node is known as ours), the deletion mark aside.

Slurm -> Kubernetes (``pod_plan``): the slurmd Pod's conditions and labels from its Slurm node
(none while the Slurm cache is stale: an outage is not news about the node), and the cordon marker,
which needs only Kubernetes. The Node's condition is ``nodestate.node_conditions`` over every Slurm
node on it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Optional, Protocol

from attrs import field, frozen

from sunk.model.slurm import Node, NodeUpdate
from sunk.model.types import Obj

from . import nodecleanup, nodestate, podcordon, poddown
from .extra import MergeResult, merge_extra
from .nodestate import DRAIN, NONE, UNDRAIN
from .poddown import DOWN, MARK

__all__ = ["DOWN", "DRAIN", "NONE", "UNDRAIN", "PodPlan", "SlurmPlan", "SyncFacts", "extra_identity",
           "merged_extra", "owned", "pod_plan", "slurm_plan"]


class SyncFacts(nodestate.PodSide, Protocol):
    """What the Syncer knows of one Slurm node's Kubernetes side (its ``KubeFacts``)."""

    @property
    def nodeset(self) -> Optional[str]:
        """The NodeSet whose NodeSlice lists the node (only with ``--slurm-node-clean-up``)."""
        ...

    def outside_scope(self, key: str) -> bool:
        """Whether the Pod ``namespace/name`` exists but is not one of this Syncer's slurmd Pods."""
        ...


@frozen
class SlurmPlan:
    """One node's Slurm write (``update`` None: nothing to write) and what it means, for logs and Events.

    ``action``: NONE, DRAIN, UNDRAIN or DOWN; ``ours``: the node is this Syncer's (``owned``)."""

    update: Optional[NodeUpdate]
    ours: bool = False
    action: str = NONE
    reason: Optional[str] = None
    why: str = ""
    extra_changed: bool = False
    replaced_invalid_extra: bool = False


@frozen
class PodPlan:
    """The conditions (each once) and labels a slurmd Pod should carry; empty: nothing to say."""

    conditions: tuple[Mapping[str, str], ...] = ()
    labels: Mapping[str, str] = field(factory=dict)


def extra_identity(extra: str) -> Optional[tuple[str, str]]:
    """``(namespace, pod)`` from the Syncer's keys in Extra, if they are there and valid."""
    try:
        value: Any = json.loads(extra or "")
    except (ValueError, RecursionError):  # (deeply nested Extra: no identity, not a reconcile failing forever)
        return None
    if not isinstance(value, dict):
        return None
    namespace, pod = value.get("namespace"), value.get("pod")
    if isinstance(namespace, str) and isinstance(pod, str) and namespace and pod:
        return namespace, pod
    return None


def owned(facts: SyncFacts, node: Node) -> bool:
    """Whether the node is this Syncer's (see the module docstring).

    Extra says which Pod a node had, not which Syncer wrote it: a Pod that exists outside this
    Syncer's selector has not been deleted (if it is later, the cluster-wide Pod watch wakes the node).
    """
    if facts.pod is not None:
        return True
    identity = extra_identity(node.extra)
    return identity is not None and identity[0] == facts.namespace and not facts.outside_scope(
        f"{identity[0]}/{identity[1]}")


def slurm_plan(facts: SyncFacts, node: Node) -> SlurmPlan:
    """The Slurm write for ``node`` (as the cache or a fresh read shows it); see the module docstring."""
    if not owned(facts, node):
        return SlurmPlan(None)
    down = poddown.desired_down(node, namespace=facts.namespace, pod_exists=False) if facts.pod is None else None
    if down is not None and down.action == DOWN:
        return SlurmPlan(NodeUpdate(state="DOWN", reason=down.reason, extra=down.extra), True, DOWN, down.reason,
                         down.why, extra_changed=True)
    drain = nodestate.desired_drain(facts, node)
    extra_text, replaced_invalid = None, False
    if facts.pod is not None:
        merged = merged_extra(facts, node)
        extra_text, replaced_invalid = (merged.text if merged.changed else None), merged.replaced_invalid
    elif down is not None and down.action == MARK:
        extra_text = down.extra
    if drain.action == NONE and extra_text is None:
        return SlurmPlan(None, True)
    state = {DRAIN: "DRAIN", UNDRAIN: "UNDRAIN"}.get(drain.action)
    update = NodeUpdate(state=state, reason=drain.reason if drain.action == DRAIN else None, extra=extra_text)
    return SlurmPlan(update, True, drain.action, drain.reason, drain.why, extra_text is not None, replaced_invalid)


def merged_extra(facts: SyncFacts, node: Node) -> MergeResult:
    """The Extra the Syncer keeps on ``node`` while its slurmd Pod is there: its facts and the NodeSet mark
    over the users' keys (``MergeResult.changed``: a write is due)."""
    return merge_extra(node.extra, {**nodestate.extra_facts(facts), **nodecleanup.extra_mark(facts.nodeset)})


def pod_plan(pod: Obj, k8s_node: Optional[Obj], slurm: Optional[Node]) -> PodPlan:
    """What the slurmd Pod should say: ``slurm`` None while the Slurm cache is stale (or knows no such node)."""
    conditions: list[Mapping[str, str]] = []
    labels: dict[str, str] = {}
    if slurm is not None:
        conditions.extend(nodestate.pod_conditions(slurm))
        labels.update(nodestate.pod_labels(slurm))
    cordon = podcordon.desired_condition(pod, k8s_node)
    if cordon is not None:
        conditions.append(cordon)
    return PodPlan(tuple(conditions), labels)
