"""The Slurm nodes a unit's Pods may not get, for their nodeSelector and required node affinity, and the units
that wait for a Node to match.

The exclusion itself is pure (sunk/translate/placement.py); here it is kept per set of selectors until a
Node's labels or a slurmd Pod's placement change (Pods of one template ask alike: one walk of the slurmd
Pods for all of them, not one per Pod), and the units no Node matches are woken by the Node or slurmd Pod
that may now match them, as kube-scheduler moves an unschedulable Pod back on a Node event: never a timer,
never a walk of every Pod.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

from sunk.translate.placement import Exclusion, admits, asks, key_of, node_exclusion

Obj = dict[str, Any]
CACHED_SELECTOR_SETS = 256  # distinct sets of selectors kept (a tenant may make as many as it likes)


class NodePlacement:
    """``exclusion(pods)``: what the unit's placeholder must exclude; ``wait``/``settle``: the units no Node
    matches; ``changed(node)``: a Node's labels or a slurmd Pod's placement changed."""

    def __init__(self, mapping: Callable[[], Mapping[str, str]], node: Callable[[str], Optional[Obj]],
                 cache_size: int = CACHED_SELECTOR_SETS):
        """``mapping()``: Slurm node -> Kubernetes Node, through the slurmd Pods that serve and are Ready (a
        snapshot); ``node(name)``: a Node with its labels (the Node informer's)."""
        self._mapping, self._node, self._cache_size = mapping, node, cache_size
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, Exclusion] = OrderedDict()
        self._generation = 0
        self._waiting: dict[str, tuple[tuple[Any, Any], ...]] = {}  # unit -> its members' selectors

    def exclusion(self, pods: Sequence[Obj]) -> tuple[Exclusion, int]:
        """The exclusion, and the generation it was computed at (for ``wait``)."""
        asked = [a for pod in pods if (a := asks(pod)) is not None]
        with self._lock:
            generation = self._generation
            if not asked:
                return Exclusion(), generation
            key = f"{len(pods)}:{key_of(asked)}"
            if (found := self._cache.get(key)) is not None:
                self._cache.move_to_end(key)
                return found, generation
        found = node_exclusion(asked, self._mapping(), self._node, members=len(pods))
        with self._lock:
            if generation == self._generation:  # (not if a change came meanwhile: the next ask computes it again)
                self._cache[key] = found
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return found, generation

    def wait(self, unit: str, pods: Sequence[Obj], generation: int) -> bool:
        """No Node matches ``unit``'s Pods (as of ``generation``): wake it when one may (``changed``). False when
        something changed since that generation: the caller looks again now (the change's wake came too early)."""
        with self._lock:
            self._waiting[unit] = tuple(a for pod in pods if (a := asks(pod)) is not None)
            return generation == self._generation

    def settle(self, unit: str) -> None:
        with self._lock:
            self._waiting.pop(unit, None)

    def changed(self, node: Optional[Obj] = None) -> list[str]:
        """A Node's labels, or which Node serves a Slurm node, changed: forget what was computed, and return
        the waiting units ``node`` (the Node that changed or now serves, if any) admits for every member."""
        with self._lock:
            self._generation += 1
            self._cache.clear()
            waiting = list(self._waiting.items())
        if node is None:
            return []
        return [unit for unit, asked in waiting if all(admits(a, node) for a in asked)]

    def waiting(self) -> int:
        with self._lock:
            return len(self._waiting)
