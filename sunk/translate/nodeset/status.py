"""A NodeSet's status: counts on the Kubernetes side, counts on the Slurm side, and conditions.

Kubernetes side: ``matching`` Nodes (the selector), ``assigned`` (those given a Slurm node
name: matching, named without collision, within ``replicas``), ``replicas`` (slurmd Pods
that exist and are not terminating: the scale subresource's count), ``ready`` and
``updated`` (assigned Nodes whose Pod is Ready, and whose Pod has the current template).

Slurm side, over the Slurm nodes of the NodeSet's Pods, each counted in every column whose
flag it has: ``slurmIdle`` (no job, not drained, not down), ``slurmAllocated`` (running
jobs: allocated, mixed or completing, drained or not), ``slurmDrained`` (the DRAIN flag,
draining or drained), ``slurmDown`` and ``slurmNotResponding``. While Slurm cannot be read,
the last counts stay and ``SlurmReachable`` is False.

Conditions (``type``/``status``/``reason``/``message``; the writer adds the times):
``SpecValid``, ``ClusterFound`` (only for a NodeSet naming a SlurmCluster), ``NodesMatched``,
``NamesValid``, ``NodeInputValid`` (a Node's GPUs or labels
that could not be used in its registration), ``SlurmReachable``, ``Progressing`` and
``Ready``. Events are due when a problem condition appears or says something new.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from attrs import frozen

from sunk.model.slurm import Node

Obj = dict[str, Any]

SPEC_VALID = "SpecValid"
NODES_MATCHED = "NodesMatched"
NAMES_VALID = "NamesValid"
NODE_INPUT_VALID = "NodeInputValid"
SLURM_REACHABLE = "SlurmReachable"
PROGRESSING = "Progressing"
READY = "Ready"
CLUSTER_FOUND = "ClusterFound"
CONDITION_TYPES = (SPEC_VALID, CLUSTER_FOUND, NODES_MATCHED, NAMES_VALID, NODE_INPUT_VALID, SLURM_REACHABLE,
                   PROGRESSING, READY)
# A False one of these is a problem: an Event says so when it appears or changes.
PROBLEMS = (SPEC_VALID, CLUSTER_FOUND, NODES_MATCHED, NAMES_VALID, NODE_INPUT_VALID, SLURM_REACHABLE)
SLURM_COUNTS = ("slurmIdle", "slurmAllocated", "slurmDrained", "slurmDown", "slurmNotResponding")
MAX_MESSAGE = 1000


@frozen
class Note:
    """An Event on the NodeSet."""

    type: str  # Normal or Warning
    reason: str
    message: str


def condition(ctype: str, ok: bool, reason: str, message: str = "") -> Obj:
    if len(message) > MAX_MESSAGE:
        message = message[:MAX_MESSAGE - 3] + "..."
    return {"type": ctype, "status": "True" if ok else "False", "reason": reason, "message": message}


def slurm_counts(nodes: Iterable[Node | None]) -> dict[str, int]:
    counts = dict.fromkeys(SLURM_COUNTS, 0)
    for node in nodes:
        if node is None:
            continue
        counts["slurmIdle"] += not (node.running_jobs or node.drained or node.down)
        counts["slurmAllocated"] += node.running_jobs
        counts["slurmDrained"] += node.drained
        counts["slurmDown"] += node.down
        counts["slurmNotResponding"] += node.not_responding
    return counts


def current_conditions(nodeset: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c.get("type", ""): c for c in (nodeset.get("status") or {}).get("conditions") or []}


def events_for(nodeset: Mapping[str, Any], wanted: Sequence[Mapping[str, Any]]) -> list[Note]:
    """A Warning for each problem condition that is new or says something new; a Normal when one clears."""
    now = current_conditions(nodeset)
    notes = []
    for cond in wanted:
        if cond["type"] not in PROBLEMS:
            continue
        old = now.get(cond["type"])
        same = old is not None and all(old.get(k) == cond.get(k) for k in ("status", "reason", "message"))
        if same:
            continue
        if cond["status"] == "False":
            notes.append(Note("Warning", cond["reason"], cond["message"]))
        elif old is not None and old.get("status") == "False":
            notes.append(Note("Normal", cond["reason"], cond["message"] or f"{cond['type']} again"))
    return notes
