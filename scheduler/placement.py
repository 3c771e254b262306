"""The Slurm nodes a unit's Pods may not get, for their nodeSelector, required node affinity and the taints
they do not tolerate, and the units that wait for a Node to admit them.

The exclusion itself is pure (sunk/translate/placement.py); here it is kept per set of demands until a
Node's labels or taints or a slurmd Pod's placement change (Pods of one template ask alike: one walk for all
of them, not one per Pod). A demand that selects nothing is read against the tainted Nodes only, kept here
as the Node events come (``node_changed``): most Pods pay nothing for the Nodes that are not tainted. The
units no Node admits are woken by the Node or slurmd Pod that may now admit them, as kube-scheduler moves an
unschedulable Pod back on a Node event: never a timer, never a walk of every Pod.

Enough nodes left is judged in the job's partitions (``PartitionNodes``, read from Slurm only when something is
excluded and the job names a partition): Slurm fails a job whose partition has no node left, though other
partitions have some.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

from sunk.model.slurm import Partition
from sunk.slurm.errors import SlurmError
from sunk.translate.placement import (
    Demand,
    Exclusion,
    admits,
    blocking_taints,
    demand_of,
    in_partitions,
    key_of,
    node_exclusion,
    taint_exclusion,
)

log = logging.getLogger(__name__)
Obj = dict[str, Any]
CACHED_DEMAND_SETS = 256  # distinct sets of demands kept (a tenant may make as many as it likes)
# How old a list of partitions' nodes may be when no Node event says to read it again: what a partition holds
# changes in Slurm (scontrol, a reconfigure, a dynamic node registering) without a Kubernetes event. A unit
# judged to wait by it looks again after this long.
PARTITIONS_MAX_AGE = 30.0


class PartitionNodes:
    """Each Slurm partition's nodes, listed when asked for and older than the placement generation asked for
    (a Node or slurmd Pod changed since) or than ``max_age``. Concurrent askers share one list; a failed list
    leaves the last one (None before any): the judgement is then Slurm's."""

    def __init__(self, read: Callable[[], Sequence[Partition]], *, max_age: float = PARTITIONS_MAX_AGE,
                 clock: Callable[[], float] = time.monotonic):
        self._read, self._max_age, self._clock = read, max_age, clock
        self._lock = threading.Lock()
        self._nodes: Optional[Mapping[str, frozenset[str]]] = None
        self._generation = -1
        self._read_at = 0.0
        self.reads = 0

    def nodes(self, generation: int) -> Optional[Mapping[str, frozenset[str]]]:
        with self._lock:  # (held while listing: who asks meanwhile takes that list)
            if self._nodes is None or self._generation < generation or self.stale():
                try:
                    partitions = self._read()
                except SlurmError as exc:
                    log.warning("cannot list Slurm's partitions; placement left to Slurm meanwhile: %s", exc)
                    return self._nodes
                self.reads += 1
                self._nodes = {p.name: frozenset(p.nodes) for p in partitions}
                self._generation, self._read_at = generation, self._clock()
            return self._nodes

    def stale(self) -> bool:
        return self._clock() - self._read_at > self._max_age


class NodePlacement:
    """``exclusion(pods)``: what the unit's placeholder must exclude; ``wait``/``settle``: the units no Node
    admits; ``node_changed``: a Node came, changed or went; ``changed(node)``: what placement reads changed."""

    def __init__(self, mapping: Callable[[], Mapping[str, str]], node: Callable[[str], Optional[Obj]],
                 slurm_node_on: Callable[[str], Optional[str]] = lambda _node: None,
                 cache_size: int = CACHED_DEMAND_SETS, partitions: Optional[PartitionNodes] = None):
        """``mapping()``: Slurm node -> Kubernetes Node, through the slurmd Pods that serve and are Ready (a
        snapshot); ``node(name)``: a Node with its labels and taints (the Node informer's);
        ``slurm_node_on(name)``: the Slurm node a Ready slurmd Pod on that Node serves; ``partitions``: each
        partition's nodes (None: enough nodes judged among all of them)."""
        self._mapping, self._node, self._slurm_node_on = mapping, node, slurm_node_on
        self._partitions = partitions
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, Exclusion] = OrderedDict()
        self._generation = 0
        self._waiting: dict[str, tuple[tuple[Demand, ...], str]] = {}  # unit -> its members' demands, and why
        self._tainted: dict[str, Obj] = {}  # Node name -> the Node, for the Nodes with blocking taints

    def exclusion(self, pods: Sequence[Obj], partitions: Sequence[str] = ()) -> tuple[Exclusion, int]:
        """The exclusion for a job in ``partitions`` (none named: Slurm's default), and the generation it was
        computed at (for ``wait``)."""
        demands = [demand_of(pod) for pod in pods]
        selecting = any(d.selects for d in demands)
        with self._lock:
            generation = self._generation
            if not selecting and not self._tainted:
                return Exclusion(), generation
        key = f"{len(pods)}:{','.join(partitions)}:{key_of(demands)}"  # (outside the lock: a gang's take a while)
        with self._lock:
            generation = self._generation
            found = self._cache.get(key)
            if found is not None and not (found.partitions and self._partitions and self._partitions.stale()):
                self._cache.move_to_end(key)
                return found, generation
            tainted = list(self._tainted.items())
        hosted: Optional[Mapping[str, str]] = None

        def mapping() -> Mapping[str, str]:
            nonlocal hosted
            hosted = self._mapping() if hosted is None else hosted
            return hosted

        if selecting:
            found = node_exclusion(demands, mapping(), self._node, members=len(pods))
        else:
            found = taint_exclusion(demands, tainted, self._slurm_node_on, lambda: len(mapping()), members=len(pods))
        if found.excluded and not found.problem and partitions and self._partitions is not None:
            if (nodes_of := self._partitions.nodes(generation)) is not None:
                found = in_partitions(found, partitions, nodes_of, mapping(), members=len(pods))
        with self._lock:
            if generation == self._generation:  # (not if a change came meanwhile: the next ask computes it again)
                self._cache[key] = found
                self._cache.move_to_end(key)
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return found, generation

    def wait(self, unit: str, pods: Sequence[Obj], generation: int, why: str = "") -> bool:
        """No Node admits ``unit``'s Pods (as of ``generation``), for ``why``: wake it when one may (``changed``).
        False when something changed since that generation: the caller looks again now (the change's wake came
        too early)."""
        with self._lock:
            self._waiting[unit] = (tuple(demand_of(pod) for pod in pods), why)
            return generation == self._generation

    def why_waiting(self, unit: str) -> Optional[str]:
        """Why ``unit`` waits for a Node (the extender's answer while it does), or None."""
        with self._lock:
            found = self._waiting.get(unit)
        return found[1] if found is not None else None

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
        return [unit for unit, (demands, _why) in waiting if all(admits(d, node) for d in demands)]

    def waiting(self) -> int:
        with self._lock:
            return len(self._waiting)
