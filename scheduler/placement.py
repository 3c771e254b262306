"""The Slurm nodes a unit's Pods may not get, for their nodeSelector, required node affinity and the taints
they do not tolerate, and the units that wait for a Node to admit them.

The exclusion itself is pure (sunk/translate/placement.py); here it is kept per set of demands until a
Node's labels or taints or a slurmd Pod's placement change (Pods of one template ask alike: one walk for all
of them, not one per Pod). A demand that selects nothing is read against the tainted Nodes only, kept here
as the Node events come (``node_changed``): most Pods pay nothing for the Nodes that are not tainted. The
units no Node admits are woken by the Node or slurmd Pod that may now admit them, as kube-scheduler moves an
unschedulable Pod back on a Node event, never a walk of every Pod.

Enough nodes left is judged in the job's partitions (``PartitionNodes``, listed from Slurm only when something is
excluded and the job names a partition): Slurm fails a job whose partition has no node left, though other
partitions have some. What a partition holds changes in Slurm without a Kubernetes event: a unit judged to
wait so also looks again when the next list is due (30 s, or a second after a Node change), its one timer.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

from attrs import define, field, frozen

from sunk.model.slurm import Partition
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
JUDGED_PARTITION_SETS = 8  # per set of demands: the partitions its jobs named, each judged once per list
MAX_JUDGED_PARTITIONS = 16  # a job naming more (each a scan of its nodes) is left to Slurm's judgement
# What a partition holds changes in Slurm (scontrol, a reconfigure, a dynamic node registering) without a
# Kubernetes event: the list is read again when this old, and a unit judged to wait by it looks again then.
PARTITIONS_MAX_AGE = 30.0
PARTITIONS_MIN_INTERVAL = 1.0  # between lists that a Node's or slurmd Pod's change asks for
PARTITIONS_RETRY = 5.0  # after a failed list: meanwhile the last one is used, or the judgement is Slurm's


@frozen
class PartitionList:
    """Slurm's partitions and their nodes, as one list showed them (``version``: which list)."""

    version: int
    nodes: Mapping[str, frozenset[str]]


class PartitionNodes:
    """Slurm's partitions' nodes, listed when asked for and 30 s old, or (at most once a second) older than
    the placement generation asked for: a slurmd Pod that came may be a node that joined a partition. Askers
    meanwhile wait for that list and take it, or, if it failed, the last one; a failed list is not tried again
    for 5 s (slurmrestd down must not hold every worker for a timeout each)."""

    def __init__(self, read: Callable[[], Sequence[Partition]], *, max_age: float = PARTITIONS_MAX_AGE,
                 min_interval: float = PARTITIONS_MIN_INTERVAL, retry_after: float = PARTITIONS_RETRY,
                 clock: Callable[[], float] = time.monotonic):
        self._read, self._clock = read, clock
        self._max_age, self._min_interval, self._retry_after = max_age, min_interval, retry_after
        self._lock = threading.Lock()
        self._list: Optional[PartitionList] = None
        self._generation = -1
        self._read_at = self._failed_at = -math.inf

    def current(self, generation: int) -> Optional[PartitionList]:
        """The list, read again first if due (see the class); None until Slurm has answered once, and once the
        last answer is twice ``max_age`` old (lists failing since: too old to judge by)."""
        with self._lock:  # (held while listing: who asks meanwhile takes that list, or its failure)
            now = self._clock()
            due = (self._list is None or now - self._read_at > self._max_age
                   or (self._generation < generation and now - self._read_at >= self._min_interval))
            if due and now - self._failed_at >= self._retry_after:
                try:
                    partitions = self._read()
                    nodes = {p.name: frozenset(p.nodes) for p in partitions}
                except Exception as exc:  # (Slurm's error, or an answer its parser refused: Slurm judges)
                    # Timed from its end: a list that hung for its timeout is not asked again by the next asker.
                    self._failed_at = self._clock()
                    log.warning("cannot list Slurm's partitions; placement judged among every node meanwhile: %s",
                                exc)
                else:
                    self._list = PartitionList((self._list.version + 1) if self._list else 1, nodes)
                    self._generation, self._read_at = max(self._generation, generation), self._clock()
            if self._list is not None and self._clock() - self._read_at > 2 * self._max_age:
                return None
            return self._list

    def due_in(self, generation: int) -> float:
        """Seconds until a list that shows ``generation``'s changes (a new one, if this one is older) is due:
        when a unit judged to wait by this one looks again."""
        with self._lock:
            since = self._clock() - self._read_at
            wait = self._min_interval - since if self._generation < generation else self._max_age - since
            return max(wait, 0.0)


@define
class _Kept:
    """One set of demands' exclusion, and its judgement in the partitions jobs named (most recent last)."""

    exclusion: Exclusion
    judged: OrderedDict[tuple[str, ...], tuple[int, Exclusion]] = field(factory=OrderedDict)  # -> (list, verdict)


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
        self._cache: OrderedDict[str, _Kept] = OrderedDict()
        self._generation = 0
        self._waiting: dict[str, tuple[tuple[Demand, ...], str]] = {}  # unit -> its members' demands, and why
        self._tainted: dict[str, Obj] = {}  # Node name -> the Node, for the Nodes with blocking taints
        self._hosted: Optional[tuple[int, frozenset[str]]] = None  # (generation, the Slurm nodes that may be named)

    def exclusion(self, pods: Sequence[Obj], partitions: Sequence[str] = ()) -> tuple[Exclusion, int]:
        """The exclusion for a job in ``partitions`` (none named: Slurm's default, which slurmrestd does not
        show: judged among every node), and the generation it was computed at (for ``wait``)."""
        demands = [demand_of(pod) for pod in pods]
        selecting = any(d.selects for d in demands)
        with self._lock:
            generation = self._generation
            if not selecting and not self._tainted:
                return Exclusion(), generation
        key = f"{len(pods)}:{key_of(demands)}"  # (outside the lock: a gang's demands take a while to digest)
        with self._lock:
            generation = self._generation
            kept = self._cache.get(key)
            if kept is not None:
                self._cache.move_to_end(key)
            tainted = list(self._tainted.items()) if kept is None else []
        if kept is None:
            kept = self._compute(demands, tainted, len(pods))
            with self._lock:
                if generation == self._generation:  # (not if a change came meanwhile: the next ask computes again)
                    self._cache[key] = kept
                    while len(self._cache) > self._cache_size:
                        self._cache.popitem(last=False)
        if not partitions:
            return kept.exclusion, generation
        return self._in_partitions(kept, tuple(dict.fromkeys(partitions)), generation, len(pods)), generation

    def _compute(self, demands: Sequence[Demand], tainted: Sequence[tuple[str, Obj]], members: int) -> _Kept:
        if any(d.selects for d in demands):
            return _Kept(node_exclusion(demands, self._mapping(), self._node, members=members))
        return _Kept(taint_exclusion(demands, tainted, self._slurm_node_on, lambda: len(self._mapping()),
                                     members=members))

    def _in_partitions(self, kept: _Kept, partitions: tuple[str, ...], generation: int, members: int) -> Exclusion:
        """``kept``'s exclusion judged in ``partitions`` against the current list (each list judged once)."""
        if not kept.exclusion.excluded or kept.exclusion.problem or self._partitions is None:
            return kept.exclusion
        listed = self._partitions.current(generation)
        if listed is None or len(partitions) > MAX_JUDGED_PARTITIONS or any(p not in listed.nodes
                                                                            for p in partitions):
            return kept.exclusion  # (Slurm's to judge; nothing a tenant names is kept)
        with self._lock:
            found = kept.judged.get(partitions)
        if found is not None and found[0] == listed.version:
            return found[1]
        judged = in_partitions(kept.exclusion, partitions, listed.nodes, self._hosted_at(generation),
                               members=members)
        with self._lock:
            kept.judged[partitions] = (listed.version, judged)
            kept.judged.move_to_end(partitions)
            while len(kept.judged) > JUDGED_PARTITION_SETS:
                kept.judged.popitem(last=False)
        return judged

    def _hosted_at(self, generation: int) -> frozenset[str]:
        """The Slurm nodes that may be named, one set per generation (not one per set of demands)."""
        with self._lock:
            if self._hosted is not None and self._hosted[0] == generation:
                return self._hosted[1]
        hosted = frozenset(self._mapping())
        with self._lock:
            if generation == self._generation:
                self._hosted = (generation, hosted)
        return hosted

    def recheck_in(self, generation: int) -> float:
        """When a unit judged to wait in its partitions (as of ``generation``) looks again: when a list that
        shows that generation's changes, or a list 30 s newer, is due."""
        return self._partitions.due_in(generation) if self._partitions is not None else PARTITIONS_MAX_AGE

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
            self._hosted = None
            waiting = list(self._waiting.items())
        if node is None:
            return []
        return [unit for unit, (demands, _why) in waiting if all(admits(d, node) for d in demands)]

    def waiting(self) -> int:
        with self._lock:
            return len(self._waiting)
