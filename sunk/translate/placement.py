"""Which Slurm nodes a Pod must not be placed on, for what kube-scheduler's filters and the kubelet's
admission check.

Why: kube-scheduler never sees sunk's Pods, but the kubelet's admission runs its filters again
(``scheduler.AdmissionCheck``: the required node affinity with ``spec.nodeSelector``; and the
taints with effect NoExecute). A Pod bound to a Node its nodeSelector or required affinity rules out,
or whose NoExecute taint it does not tolerate, is rejected, its job released, and its owner makes
another: a loop. A NoSchedule taint the kubelet lets pass; kube-scheduler's filter does not, and an
operator taints a Node so to keep new Pods off it: sunk keeps its Pods off too. sunk's own lock taint is
the exception: the Pod scheduler binds through it (scheduler/locktaint.py). Only the GPU class and
model ``In`` clauses become a Slurm constraint (``podjob.gpu_clauses``); the rest is said to Slurm here,
as the nodes the job must not get (``excluded_nodes``), from the Node each Slurm node's slurmd Pod runs
on. A unit (a gang) excludes what any of its members rules out: one job holds them all.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Optional

from attrs import frozen

from sunk.model import names

from . import selectors

Obj = Mapping[str, Any]
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


@frozen
class Exclusion:
    """``excluded``: the Slurm nodes (sorted) whose Node some Pod's demand rules out, or whose Node is not
    known; ``problem``: why no Slurm node may take the Pods (too few of their Nodes admit them), else "";
    ``partitions``: the job's partitions the problem was judged in (none: every Slurm node)."""

    excluded: tuple[str, ...] = ()
    problem: str = ""
    partitions: tuple[str, ...] = ()


@frozen
class Demand:
    """What one Pod asks of a Node: its ``nodeSelector`` and required node affinity, and the taints it
    tolerates (its ``spec.tolerations`` as written)."""

    selector: Any = None
    affinity: Any = None
    tolerations: Any = ()

    @property
    def selects(self) -> bool:
        """It asks for some Nodes only (a nodeSelector or a required node affinity)."""
        return bool(self.selector) or selectors.required_terms(self.affinity) != ()

    def wire(self) -> tuple[Any, Any, Any]:
        return self.selector, self.affinity, self.tolerations


def demand_of(pod: Obj) -> Demand:
    spec = pod.get("spec") or {}
    return Demand(spec.get("nodeSelector"), spec.get("affinity"), spec.get("tolerations") or ())


# The taints Kubernetes writes for a Node's conditions (not-ready, unreachable, pressure, cordoned...): Slurm's
# to act on, through its own view of slurmd and the Syncer's drains, not read here. Read, a Node whose kubelet
# missed its heartbeats for a moment kept every Pod off it, and with every node of the job's partition so
# tainted (and nodes of another partition left), Slurm failed the placeholder for good (BadConstraints).
CONDITION_TAINT_PREFIX = "node.kubernetes.io/"


def blocking_taints(node: Obj) -> tuple[Obj, ...]:
    """The Node's taints that keep a Pod off it unless tolerated (NoSchedule, NoExecute): an operator's or a
    device plugin's; sunk's lock and the condition taints (``CONDITION_TAINT_PREFIX``) aside."""
    return tuple(t for t in (node.get("spec") or {}).get("taints") or ()
                 if isinstance(t, Mapping) and t.get("effect") in BLOCKING_EFFECTS and t.get("key") != names.LOCK_KEY
                 and not str(t.get("key") or "").startswith(CONDITION_TAINT_PREFIX))


def tolerates(toleration: object, taint: Obj) -> bool:
    """Kubernetes' ``Toleration.ToleratesTaint`` (k8s.io/api/core/v1/toleration.go)."""
    if not isinstance(toleration, Mapping):
        return False
    effect, key = toleration.get("effect") or "", toleration.get("key") or ""
    if effect and effect != taint.get("effect"):
        return False
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def _tolerated(demand: Demand, taints: Sequence[Obj]) -> bool:
    tolerations = demand.tolerations if isinstance(demand.tolerations, Sequence) else ()
    return all(any(tolerates(t, taint) for t in tolerations) for taint in taints)


class _Tolerance:
    """Whether every demand tolerates a Node's blocking taints, read once per distinct set of taints (the
    Nodes of a pool carry the same few): a walk of 5000 tainted Nodes is a few reads, not 5000 times each
    toleration."""

    def __init__(self, demands: Sequence[Demand]):
        self._demands = demands
        self._known: dict[str, bool] = {}

    def __call__(self, node: Obj) -> bool:
        taints = blocking_taints(node)
        if not taints:
            return True
        key = json.dumps(taints, sort_keys=True)
        if (found := self._known.get(key)) is None:
            found = self._known[key] = all(_tolerated(d, taints) for d in self._demands)
        return found


# What one Pod may ask (its nodeSelector's labels and every match expression and field of its terms; their
# values): each is read for every Slurm node's Node at submission, and a Pod is any tenant's to write.
MAX_REQUIREMENTS = 64
MAX_VALUES = 256
MAX_TOLERATIONS = 128  # each read against every taint of a tainted Node


def selector_problems(pod: Obj) -> list[str]:
    """What is wrong with the Pod's nodeSelector or required node affinity, as the matcher reads them (the
    apiserver validates both; a selector this matcher cannot read is refused, never read as "anywhere"), and
    a selector or tolerations larger than sunk reads (``MAX_REQUIREMENTS``, ``MAX_VALUES``, ``MAX_TOLERATIONS``)."""
    spec = pod.get("spec") or {}
    selector, affinity = spec.get("nodeSelector"), spec.get("affinity")
    found = [f"spec.{problem}" for problem in selectors.problems(selector, affinity)]
    if found:
        return found
    if len(spec.get("tolerations") or ()) > MAX_TOLERATIONS:
        return [f"spec.tolerations: at most {MAX_TOLERATIONS} (got {len(spec['tolerations'])}): sunk reads them "
                f"against the taints of every tainted Node"]
    requirements = [r for term in selectors.required_terms(affinity) or ()
                    for r in (*(term.get("matchExpressions") or ()), *(term.get("matchFields") or ()))]
    values = sum(len(r.get("values") or ()) for r in requirements)
    if len(selector or {}) + len(requirements) > MAX_REQUIREMENTS or values > MAX_VALUES:
        return [f"spec.nodeSelector and {selectors.TERMS_PATH}: at most {MAX_REQUIREMENTS} labels and match "
                f"requirements, and {MAX_VALUES} values, in all (got {len(selector or {}) + len(requirements)} "
                f"and {values}): sunk matches them against the Node of every Slurm node"]
    return []


def key_of(demands: Iterable[Demand]) -> str:
    """One short string for a set of demands (order and repeats aside): what a cache of exclusions is keyed
    by (a digest: a tenant's selector may be long)."""
    text = json.dumps(sorted({json.dumps(d.wire(), sort_keys=True, separators=(",", ":")) for d in demands}))
    return hashlib.blake2b(text.encode(), digest_size=20).hexdigest()


def _usable(demand: Demand) -> bool:
    return not demand.selects or not selectors.problems(demand.selector, demand.affinity)


def _selected(demand: Demand, node: Obj) -> bool:
    return not demand.selects or selectors.matches_checked(node, demand.selector, demand.affinity)


def _matches(demand: Demand, node: Obj) -> bool:
    """``admits`` for a demand already found ``_usable``."""
    return _selected(demand, node) and _tolerated(demand, blocking_taints(node))


def admits(demand: Demand, node: Obj) -> bool:
    """Whether the Node admits one Pod's demand; a selector with problems admits nowhere."""
    return _usable(demand) and _matches(demand, node)


def _distinct(demands: Iterable[Demand]) -> list[Demand]:
    return list({json.dumps(d.wire(), sort_keys=True): d for d in demands}.values())


def node_exclusion(demands: Iterable[Demand], k8s_node_of: Mapping[str, str],
                   node: Callable[[str], Optional[Obj]], members: int = 1) -> Exclusion:
    """The Slurm nodes of ``k8s_node_of`` (Slurm node -> the Node its slurmd Pod runs on) whose Node some of
    the ``demands`` (each a Pod's) rules out: a walk of every Slurm node, for demands that select. A Slurm
    node whose Node is not known (``node(name)`` None) is excluded: nothing says it matches. Fewer left than
    the unit's ``members`` (one node each): the problem says so, in kube-scheduler's words."""
    distinct = _distinct(demands)
    if not distinct:
        return Exclusion()
    usable = all(_usable(d) for d in distinct)  # (each checked once, not once per node)
    tolerated = _Tolerance(distinct)
    excluded = []
    for slurm_node, k8s_node in sorted(k8s_node_of.items()):
        known = node(k8s_node)
        if not usable or known is None or not all(_selected(d, known) for d in distinct) or not tolerated(known):
            excluded.append(slurm_node)
    return _judged(excluded, len(k8s_node_of), members)


def _judged(excluded: Sequence[str], total: int, members: int) -> Exclusion:
    """Fewer Slurm nodes left than the unit's members (one node each): the problem, in kube-scheduler's words."""
    left = total - len(excluded)
    if left < members:
        return Exclusion(tuple(excluded), f"{left}/{total} Slurm nodes are available: {_why(members)}")
    return Exclusion(tuple(excluded))


def _why(members: int) -> str:
    whose, need = ("the Pod's", "") if members == 1 else ("every member's", f"; the gang needs {members}, one each")
    return (f"the Nodes their slurmd Pods run on do not match {whose} nodeSelector and required node affinity, "
            f"or have taints it does not tolerate{need}")


def in_partitions(exclusion: Exclusion, partitions: Sequence[str], nodes_of: Mapping[str, Collection[str]],
                  hosted: Collection[str], members: int = 1) -> Exclusion:
    """``exclusion`` judged where Slurm looks: a job runs in one of its ``partitions`` (``nodes_of``: each
    partition's Slurm nodes, as Slurm lists them; ``hosted``: the Slurm nodes that may be named), so too few
    nodes left in each of them is the problem, though nodes of other partitions are left: Slurm would refuse
    the job, or fail it (BadConstraints), for good, where the Pods should wait for a Node. Left to Slurm's
    answer: a partition Slurm did not list, one none of whose nodes has a Ready slurmd Pod, and a job whose
    nodes sunk excludes none of."""
    if exclusion.problem or not exclusion.excluded or not partitions or any(p not in nodes_of for p in partitions):
        return exclusion
    excluded = set(exclusion.excluded)
    counts: list[str] = []
    for partition in dict.fromkeys(partitions):
        theirs = [node for node in nodes_of[partition] if node in hosted]
        left = sum(1 for node in theirs if node not in excluded)
        if left >= members or not theirs:
            return exclusion
        counts.append(f"{left}/{len(theirs)} {'Slurm nodes ' if not counts else ''}of partition {partition}")
    return Exclusion(exclusion.excluded, f"{', '.join(counts)} are available: {_why(members)}",
                     tuple(dict.fromkeys(partitions)))


def taint_exclusion(demands: Iterable[Demand], tainted: Iterable[tuple[str, Obj]],
                    slurm_node_on: Callable[[str], Optional[str]], total: Callable[[], int],
                    members: int = 1) -> Exclusion:
    """For demands that select nothing: the Slurm nodes on the ``tainted`` Nodes (name, Node: only those with
    ``blocking_taints``) some demand does not tolerate, found through ``slurm_node_on`` (a Node -> the Slurm
    node its slurmd Pod serves). O(the tainted Nodes), not a walk of every Slurm node; ``total()``, the Slurm
    nodes that may be named, is asked only when some are excluded, to judge whether enough are left."""
    distinct = _distinct(demands)
    tolerated = _Tolerance(distinct)
    excluded = sorted({slurm_node for name, node in tainted
                       if not tolerated(node) and (slurm_node := slurm_node_on(name)) is not None})
    return _judged(excluded, total(), members) if excluded else Exclusion()
