"""Slurm node clean-up (``slurmNodeCleanUp``): which Slurm nodes to delete once their NodeSlice entry is gone.

The rule (``decide``):

- The Syncer marks a node as a NodeSet's while a NodeSlice lists it: ``"nodeset": NAME`` in its
  Extra (``extra_mark``). The mark is written only from a listing entry and never cleared by
  the Syncer (an entry that is gone is the very news the mark is kept for), so it survives
  restarts and says "this node was a NodeSet's" with no local state.
- A node without the mark is never deleted: it never was a NodeSet's (the static nodes of
  slurm.conf, login nodes, a hand-made Pod's node, another Syncer's).
- A marked node that a NodeSlice lists, or whose slurmd Pod still exists, is kept.
- A marked node whose Pod's deletion is not recorded yet (``poddown``'s ``"deleted": true``, which
  the Syncer writes before anything else once the Pod is gone, and resets when a new Pod comes)
  waits: the caches of NodeSlices and Pods may be behind a node re-listed with a new Pod a moment
  ago, and the fresh read of Slurm before the delete would not see that; Extra would.
- A marked node no NodeSlice lists and whose Pod is gone is deleted, once it is idle: not
  allocated, mixed or completing, and no job in slurmctld's job list names it (a finished job
  stays there for ``MinJobAge``; slurmctld must never be left with a job naming a node it no
  longer has). Until then it waits; the Syncer's drain for the missing Pod (``nodestate``) or
  the DOWN of its deletion (``poddown``) already keeps new jobs off it.
- A stale job list is no answer: wait.

Only dynamic nodes (``slurmd -Z``, ``scontrol create``) can be deleted; slurmctld refuses the
nodes of slurm.conf, and the caller logs the refusal and tries again later.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

from attrs import frozen

from sunk.model.slurm import Job, Node

from .extra import parse_object
from .poddown import DELETED

NODESET = "nodeset"  # the Syncer's Extra key: the NodeSet whose NodeSlice listed this node
NONE, WAIT, DELETE = "none", "wait", "delete"


@frozen
class CleanUpAction:
    action: str = NONE  # NONE (keep, nothing to wait for), WAIT (to be deleted once idle) or DELETE
    why: str = ""


def extra_mark(nodeset: Optional[str]) -> dict[str, Any]:
    """The Syncer's Extra keys for a node a NodeSlice of ``nodeset`` lists (none when none lists it)."""
    return {NODESET: nodeset} if nodeset else {}


def marked_nodeset(extra: str) -> Optional[str]:
    """The NodeSet named by the mark in ``extra``, if there is one."""
    value = (parse_object(extra or "") or {}).get(NODESET)
    return value if isinstance(value, str) and value else None


def decide(node: Node, *, listed: bool, pod_exists: bool, jobs: Optional[Iterable[Job]]) -> CleanUpAction:
    """Whether to delete ``node`` from Slurm; ``jobs``: slurmctld's job list, None while stale."""
    nodeset = marked_nodeset(node.extra)
    if nodeset is None:
        return CleanUpAction(NONE, "never a NodeSet's")
    if listed:
        return CleanUpAction(NONE, f"a NodeSlice lists it (NodeSet {nodeset})")
    if pod_exists:
        return CleanUpAction(NONE, "its slurmd Pod exists")
    if (parse_object(node.extra or "") or {}).get(DELETED) is not True:
        return CleanUpAction(WAIT, "its slurmd Pod's deletion is not recorded in Extra yet")
    if node.running_jobs:
        return CleanUpAction(WAIT, f"no NodeSlice of {nodeset} lists it, but it runs jobs ({node.base_state})")
    if jobs is None:
        return CleanUpAction(WAIT, "the job list is stale")
    naming = sorted(job.id for job in jobs if node.name in job.node_list)
    if naming:
        return CleanUpAction(WAIT, f"no NodeSlice of {nodeset} lists it, but job {naming[0]} names it")
    return CleanUpAction(DELETE, f"no NodeSlice of {nodeset} lists it, and it is idle")
