"""The Slurm nodes a unit's Pods may not get, for their nodeSelector, required node affinity and the taints
they do not tolerate, and the units that wait for a Node to admit them.

The exclusion itself is pure (sunk/translate/placement.py); here it is kept per set of demands until a
Node's labels or taints or a slurmd Pod's placement change (Pods of one template ask alike: one walk for all
of them, not one per Pod). A demand that selects nothing is read against the tainted Nodes only, kept here
as the Node events come (``node_changed``): most Pods pay nothing for the Nodes that are not tainted. The
units no Node admits are woken by the Node or slurmd Pod that may now admit them, as kube-scheduler moves an
unschedulable Pod back on a Node event: never a timer, never a walk of every Pod.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

from sunk.translate.placement import (
    Demand,
    Exclusion,
    admits,
    blocking_taints,
    demand_of,
    key_of,
    node_exclusion,
    taint_exclusion,
)

Obj = dict[str, Any]
CACHED_DEMAND_SETS = 256  # distinct sets of demands kept (a tenant may make as many as it likes)


class NodePlacement:
    """``exclusion(pods)``: what the unit's placeholder must exclude; ``wait``/``settle``: the units no Node
    admits; ``node_changed``: a Node came, changed or went; ``changed(node)``: what placement reads changed."""

    def __init__(self, mapping: Callable[[], Mapping[str, str]], node: Callable[[str], Optional[Obj]],
                 slurm_node_on: Callable[[str], Optional[str]] = lambda _node: None,
                 cache_size: int = CACHED_DEMAND_SETS):
        """``mapping()``: Slurm node -> Kubernetes Node, through the slurmd Pods that serve and are Ready (a
        snapshot); ``node(name)``: a Node with its labels and taints (the Node informer's);
        ``slurm_node_on(name)``: the Slurm node a Ready slurmd Pod on that Node serves."""
        self._mapping, self._node, self._slurm_node_on = mapping, node, slurm_node_on
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, Exclusion] = OrderedDict()
        self._generation = 0
        self._waiting: dict[str, tuple[Demand, ...]] = {}  # unit -> its members' demands
        self._tainted: dict[str, Obj] = {}  # Node name -> the Node, for the Nodes with blocking taints

    def exclusion(self, pods: Sequence[Obj]) -> tuple[Exclusion, int]:
        """The exclusion, and the generation it was computed at (for ``wait``)."""
        demands = [demand_of(pod) for pod in pods]
        selecting = any(d.selects for d in demands)
        with self._lock:
            generation = self._generation
            if not selecting and not self._tainted:
                return Exclusion(), generation
        key = f"{len(pods)}:{key_of(demands)}"  # (outside the lock: a gang's demands take a while to digest)
        with self._lock:
            generation = self._generation
            if (found := self._cache.get(key)) is not None:
                self._cache.move_to_end(key)
                return found, generation
            tainted = list(self._tainted.items())
        if selecting:
            found = node_exclusion(demands, self._mapping(), self._node, members=len(pods))
        else:
            found = taint_exclusion(demands, tainted, self._slurm_node_on, lambda: len(self._mapping()),
                                    members=len(pods))
        with self._lock:
            if generation == self._generation:  # (not if a change came meanwhile: the next ask computes it again)
                self._cache[key] = found
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return found, generation

    def wait(self, unit: str, pods: Sequence[Obj], generation: int) -> bool:
        """No Node admits ``unit``'s Pods (as of ``generation``): wake it when one may (``changed``). False when
        something changed since that generation: the caller looks again now (the change's wake came too early)."""
        with self._lock:
            self._waiting[unit] = tuple(demand_of(pod) for pod in pods)
            return generation == self._generation

    def settle(self, unit: str) -> None:
        with self._lock:
            self._waiting.pop(unit, None)

    def node_changed(self, old: Optional[Obj], new: Optional[Obj]) -> bool:
        """A Node came (``old`` None), changed, or went (``new`` None): keep the tainted ones. True when its
        blocking taints changed (what it admits changed)."""
        before = blocking_taints(old) if old is not None else ()
        after = blocking_taints(new) if new is not None else ()
        name = (new or old or {}).get("metadata", {}).get("name", "")
        with self._lock:
            if after and new is not None:
                self._tainted[name] = new
            else:
                self._tainted.pop(name, None)
        return before != after

    def changed(self, node: Optional[Obj] = None) -> list[str]:
        """A Node's labels or taints, or which Node serves a Slurm node, changed: forget what was computed, and
        return the waiting units ``node`` (the Node that changed or now serves, if any) admits for every
        member."""
        with self._lock:
            self._generation += 1
            self._cache.clear()
            waiting = list(self._waiting.items())
        if node is None:
            return []
        return [unit for unit, demands in waiting if all(admits(d, node) for d in demands)]

    def waiting(self) -> int:
        with self._lock:
            return len(self._waiting)
