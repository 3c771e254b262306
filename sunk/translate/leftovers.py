"""What sunk leaves on the machines, and which of it ``sunk-syncer release-nodes`` takes back at uninstall.

Why: the Syncer lifts its locks and drains once their jobs and Pods are gone, but a Syncer
uninstalled while a Node is locked or a Slurm node drained leaves them there, and nothing
else ever lifts them. The release, run once the Syncer is stopped (so that nothing locks or
drains again behind it), takes back exactly what sunk put there:

- the lock taint (``sunk.coreweave.com/lock``, any effect) on the Nodes of the slurmd Pods,
  which are the Nodes the Syncer locks (``hosts``); on every Node only when asked, since
  another release's Syncer may lock other Nodes of the same Kubernetes cluster;
- the lock annotation (same key) and the pre-hooks' lock requests on the slurmd Pods;
- every Slurm drain whose reason is sunk's (``drains.is_sunks``: a ``k8s:`` reason), lifted
  with UNDRAIN (a DOWN node stays DOWN: ReturnToService decides). Never a person's or NHC's
  drain, nor the prolog's unprefixed ``sunk-lock:`` drain, which waits for an operator. The
  decision is taken from one node list and taken again from a fresh read of each node just
  before its undrain, so a person's drain written in between is never lifted.

Pure: the I/O is ``sunk.syncer.release``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any, Optional

from sunk import names
from sunk.slurm.models import Node

from .drains import is_sunks

Obj = Mapping[str, Any]


def lock_tainted(node: Obj) -> bool:
    """The Node carries sunk's lock taint, with whatever effect (an earlier ``--lock-taint-effect``'s too)."""
    return any(t.get("key") == names.LOCK_KEY for t in (node.get("spec") or {}).get("taints") or ())


def hosts(pods: Iterable[Obj]) -> frozenset[str]:
    """The Nodes the slurmd Pods are bound to: where the Syncer locks."""
    return frozenset(name for pod in pods if (name := (pod.get("spec") or {}).get("nodeName")))


def nodes_to_unlock(nodes: Iterable[Obj], among: Optional[Collection[str]]) -> list[str]:
    """The names of the Nodes whose lock taint goes, sorted: those ``among`` (None: every Node) that carry it."""
    names_ = ((node.get("metadata") or {}).get("name", "") for node in nodes if lock_tainted(node))
    return sorted(name for name in names_ if name and (among is None or name in among))


def lock_annotations(pod: Obj) -> list[str]:
    """The annotations of sunk's lock on a slurmd Pod (the lock state, the lock requests), sorted: to remove."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return sorted(key for key in annotations
                  if key == names.LOCK_KEY or key.startswith(names.LOCK_REQUEST_PREFIX))


def lifts(node: Optional[Node]) -> bool:
    """Whether this node's drain is lifted: it is drained, and its reason is sunk's."""
    return node is not None and node.drained and is_sunks(node.reason)


def drains_to_lift(nodes: Iterable[Node]) -> list[Node]:
    """The Slurm nodes whose drain is lifted, by name."""
    return sorted((node for node in nodes if lifts(node)), key=lambda node: node.name)
