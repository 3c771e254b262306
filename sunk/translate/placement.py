"""Which Slurm nodes a Pod must not be placed on, for what the kubelet checks when it admits it.

Why: kube-scheduler never sees sunk's Pods, but the kubelet's admission runs its node-affinity
filter again (``scheduler.AdmissionCheck``: the required node affinity with ``spec.nodeSelector``).
A Pod bound to a Node its nodeSelector or required affinity rules out is rejected (``NodeAffinity``),
its job released, and its owner makes another: a loop. Only the GPU class and model ``In`` clauses
become a Slurm constraint (``podjob.gpu_clauses``); the whole selector is said to Slurm here, as the
nodes the job must not get (``excluded_nodes``), from the labels of the Node each Slurm node's slurmd
Pod runs on. A unit (a gang) excludes what any of its members rules out: one job holds them all.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Optional

from attrs import frozen

from . import selectors

Obj = Mapping[str, Any]


@frozen
class Exclusion:
    """``excluded``: the Slurm nodes (sorted) whose Node some Pod's selector rules out, or whose Node is not
    known; ``problem``: why no Slurm node may take the Pods (none of their Nodes matches), else ""."""

    excluded: tuple[str, ...] = ()
    problem: str = ""


def asks(pod: Obj) -> Optional[tuple[Any, Any]]:
    """The Pod's ``(nodeSelector, affinity)`` when it asks for some Nodes only, else None."""
    spec = pod.get("spec") or {}
    selector, affinity = spec.get("nodeSelector"), spec.get("affinity")
    if not selector and selectors.required_terms(affinity) == ():
        return None
    return selector, affinity


# What one Pod may ask (its nodeSelector's labels and every match expression and field of its terms; their
# values): each is read for every Slurm node's Node at submission, and a Pod is any tenant's to write.
MAX_REQUIREMENTS = 64
MAX_VALUES = 256


def selector_problems(pod: Obj) -> list[str]:
    """What is wrong with the Pod's nodeSelector or required node affinity, as the matcher reads them (the
    apiserver validates both; a selector this matcher cannot read is refused, never read as "anywhere"), and
    a selector larger than sunk reads (``MAX_REQUIREMENTS``, ``MAX_VALUES``)."""
    spec = pod.get("spec") or {}
    selector, affinity = spec.get("nodeSelector"), spec.get("affinity")
    found = [f"spec.{problem}" for problem in selectors.problems(selector, affinity)]
    if found:
        return found
    requirements = [r for term in selectors.required_terms(affinity) or ()
                    for r in (*(term.get("matchExpressions") or ()), *(term.get("matchFields") or ()))]
    values = sum(len(r.get("values") or ()) for r in requirements)
    if len(selector or {}) + len(requirements) > MAX_REQUIREMENTS or values > MAX_VALUES:
        return [f"spec.nodeSelector and {selectors.TERMS_PATH}: at most {MAX_REQUIREMENTS} labels and match "
                f"requirements, and {MAX_VALUES} values, in all (got {len(selector or {}) + len(requirements)} "
                f"and {values}): sunk matches them against the Node of every Slurm node"]
    return []


def key_of(asked: Iterable[tuple[Any, Any]]) -> str:
    """One short string for a set of selectors (order and repeats aside): what a cache of exclusions is keyed
    by (a digest: a tenant's selector may be long)."""
    text = json.dumps(sorted({json.dumps(a, sort_keys=True, separators=(",", ":")) for a in asked}))
    return hashlib.blake2b(text.encode(), digest_size=20).hexdigest()


def _usable(asked: tuple[Any, Any]) -> bool:
    return not selectors.problems(*asked)


def admits(asked: tuple[Any, Any], node: Obj) -> bool:
    """Whether the Node matches one Pod's ``asks``; a selector with problems admits nowhere."""
    return _usable(asked) and selectors.matches_checked(node, *asked)


def node_exclusion(asked: Iterable[tuple[Any, Any]], k8s_node_of: Mapping[str, str],
                   node: Callable[[str], Optional[Obj]], members: int = 1) -> Exclusion:
    """The Slurm nodes of ``k8s_node_of`` (Slurm node -> the Node its slurmd Pod runs on) that any of the
    ``asked`` selectors (each a Pod's ``asks``) rules out. A Slurm node whose Node is not known (``node(name)``
    None) is excluded: nothing says it matches. Fewer left than the unit's ``members`` (one node each): the
    problem says so, in kube-scheduler's words."""
    distinct = list({json.dumps(a, sort_keys=True): a for a in asked}.values())
    if not distinct:
        return Exclusion()
    usable = all(_usable(a) for a in distinct)  # (each checked once, not once per node)
    excluded = []
    for slurm_node, k8s_node in sorted(k8s_node_of.items()):
        known = node(k8s_node)
        if not usable or known is None or not all(selectors.matches_checked(known, *a) for a in distinct):
            excluded.append(slurm_node)
    left = len(k8s_node_of) - len(excluded)
    if left < members:
        whose = "the Pod's" if len(distinct) == 1 and members == 1 else "every member's"
        need = f"; the gang needs {members}, one each" if members > 1 else ""
        return Exclusion(tuple(excluded), f"{left}/{len(k8s_node_of)} Slurm nodes are available: the Nodes their "
                                          f"slurmd Pods run on do not match {whose} nodeSelector and required node "
                                          f"affinity{need}")
    return Exclusion(tuple(excluded))
