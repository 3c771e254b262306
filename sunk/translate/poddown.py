"""A deleted slurmd Pod sets its Slurm node DOWN, once: the seeds' third route to a DOWN node.

The rule (``desired_down``), for a Slurm node the Syncer owns (its Extra names the Pod, in the
watched namespace, that the Syncer saw for it) whose slurmd Pod is now gone:

- Extra already says ``"deleted": true``: this deletion was handled; nothing more here (the
  level-triggered drain ``k8s: slurmd pod NS/NAME does not exist`` applies, ``nodestate``).
- Otherwise the deletion is recorded in Extra (``"deleted": true``) and, in the same write,
  the node is set DOWN with the reason ``k8s: slurmd pod NS/NAME deleted`` (the Pod named in
  Extra); except that only the mark is written when
  - the node is DOWN already (slurmctld's, a person's or ours): that DOWN and its reason stay;
  - it is drained with a reason that is not one of the Syncer's condition drains: a person's
    or NHC's (no ``k8s:``), or one of sunk's own (``drains.parse``), which wait for a cause of
    their own. Slurm keeps one reason per node, and those are never replaced;
  - it is drained with the Syncer's own "does not exist" reason: a Syncer without this rule saw
    the deletion, and the node has been out of service since; a DOWN now would only end jobs.

Why a mark, and why in Extra: with ``ReturnToService=2`` slurmctld returns a DOWN node to
service as soon as its slurmd answers, within seconds when that slurmd outlives its Pod (the dev
cluster's static nodes run slurmd on the host). Without a mark the next pass would read "Pod
gone, node up" and set it DOWN again, forever. With it, a deletion is one DOWN; the drain then
holds the node until a Pod is back. The mark lives in Slurm, beside the Pod it is about, so a
restarted Syncer neither repeats a DOWN nor misses one made while it was away. A new slurmd Pod
clears it (``extra_facts`` writes ``"deleted": false``), so its deletion is handled again.

The Syncer never resumes a DOWN node: slurmctld's ``ReturnToService`` does. Setting a node DOWN
ends the jobs still on it (Slurm fails them with NODE_FAIL, and requeues those that may be);
their slurmd went with the Pod, so they were lost anyway. A NodeSet deletes a Pod only once its
node is drained and idle (docs/nodeset.md), so there are none on that path.
"""

from __future__ import annotations

from typing import Optional

from attrs import frozen

from sunk.model import names
from sunk.model.slurm import Node

from . import drains
from .extra import merge_extra, parse_object

DELETED = "deleted"  # the Syncer's Extra key: the Pod named in Extra is gone, and that was handled
NONE, DOWN, MARK = "none", "down", "mark"


@frozen
class DownAction:
    """``action``: NONE, DOWN (with ``reason``) or MARK; ``extra``: the Extra to write (DOWN, MARK)."""

    action: str = NONE
    reason: Optional[str] = None
    extra: Optional[str] = None
    why: str = ""


def deleted_reason(pod: str) -> str:
    """The DOWN reason for the deleted slurmd Pod ``namespace/name``."""
    return f"{names.K8S_DRAIN_PREFIX} slurmd pod {pod} deleted"


def missing_reason(namespace: str, slurm_node: str) -> str:
    """The Syncer's drain reason while the slurmd Pod of ``slurm_node`` is missing."""
    return f"{names.K8S_DRAIN_PREFIX} slurmd pod {namespace}/{slurm_node} does not exist"


def desired_down(node: Node, *, namespace: str, pod_exists: bool) -> DownAction:
    """What the deletion of the slurmd Pod named in ``node.extra`` calls for; see the module docstring.

    The caller has checked that the node is this Syncer's (``sunk.translate.syncplan.owned``).
    """
    facts = parse_object(node.extra or "")
    pod = (facts or {}).get("pod")
    if pod_exists or facts is None or not isinstance(pod, str) or not pod:
        return DownAction(NONE)
    if facts.get(DELETED) is True:
        return DownAction(NONE, why="the Pod's deletion was handled")
    where = f"{facts.get('namespace') or namespace}/{pod}"
    extra = merge_extra(node.extra, {DELETED: True}).text
    if node.down:
        return DownAction(MARK, extra=extra, why="node is DOWN already: its DOWN stays")
    if node.drained:
        reason = node.reason or ""
        if not reason.startswith(names.K8S_DRAIN_PREFIX):
            return DownAction(MARK, extra=extra, why="drained by someone else: left alone")
        if drains.parse(reason) is not None:
            return DownAction(MARK, extra=extra, why="under one of sunk's own drains: left to its cause")
        if reason == missing_reason(namespace, node.name):
            return DownAction(MARK, extra=extra, why="drained for the missing Pod since before: no DOWN now")
    return DownAction(DOWN, deleted_reason(where), extra, why=f"slurmd pod {where} was deleted")
