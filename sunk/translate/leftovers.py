"""What sunk leaves on the machines, and which of it ``sunk-syncer release-nodes`` takes back at uninstall.

Why: the Syncer lifts its locks and drains once their jobs and Pods are gone, but a Syncer
uninstalled while a Node is locked or a Slurm node drained leaves them there, and nothing
else ever lifts them. The release, run once the Syncer is stopped (so that nothing locks or
drains again behind it), takes back exactly what sunk put there:

- the lock taint (``sunk.coreweave.com/lock``, any effect) its slurmd Pods hold (their names in the
  Node's ``sunk.coreweave.com/lock-holders``, wherever those Pods went), lifted once no other
  release's slurmd Pod holds it; a taint naming no holder (an older sunk's) on the Nodes of the
  slurmd Pods (``hosts``); on every Node only when asked, since another release's Syncer may lock
  other Nodes of the same Kubernetes cluster;
- the lock annotation (same key) and the pre-hooks' lock requests on the slurmd Pods;
- the drains of sunk's lock (``k8s: sunk-lock: ...``: the hook API was unreachable, a lock
  timed out), on the Slurm nodes of the slurmd Pods (``--all-nodes``: on every node), lifted
  with UNDRAIN (a DOWN node stays DOWN: ReturnToService decides). They exist only for the lock,
  which goes with sunk. sunk's other drains mirror a fact that outlives sunk (a cordoned Node,
  a slurmd Pod not Ready, a Pod that may still run on the node: placeholder and stuck-Pod
  drains) and stay, named in the log, for an operator or a reinstalled Syncer (which lifts
  each once its cause is gone): lifting them would let Slurm start jobs on a machine taken out
  of service or still in use. Never a person's or NHC's drain, nor the prolog's unprefixed
  ``sunk-lock:`` drain, which waits for an operator. The decision is taken from one node list
  and taken again from a fresh read of each node just before its undrain.

Pure: the I/O is ``sunk.syncer.release``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Optional

from sunk.model import names
from sunk.model.slurm import Node

from .drains import HookUnreachableDrain, LockTimeoutDrain, is_sunks, parse
from .lock import lock_holders
from .objects import annotations_of, has_taint, name_of

Obj = Mapping[str, Any]


def lock_tainted(node: Obj) -> bool:
    """The Node carries sunk's lock taint, with whatever effect (an earlier ``--lock-taint-effect``'s too)."""
    return has_taint(node, names.LOCK_KEY)


def hosts(pods: Iterable[Obj]) -> frozenset[str]:
    """The Nodes the slurmd Pods are bound to: where the Syncer locks."""
    return frozenset(name for pod in pods if (name := (pod.get("spec") or {}).get("nodeName")))


def holds_of(namespace: str, *, everyone: bool = False, mine: Collection[str] = (),
             live: Optional[Collection[str]] = None) -> Callable[[str], bool]:
    """Which lock holders (``lock.holder_of``) this release lets go: its slurmd Pods (``mine``), and those of its
    slurmd namespace whose Pod is gone (not among ``live``, every Pod of that namespace: another release's
    slurmd Pods may share it, and their holds are theirs); ``everyone``: all."""
    if everyone:
        return lambda _holder: True
    prefix, kept = f"{namespace}/", frozenset(mine)
    return lambda holder: holder in kept or (live is not None and holder.startswith(prefix) and holder not in live)


def nodes_to_unlock(nodes: Iterable[Obj], among: Optional[Collection[str]], ours: Callable[[str], bool],
                    *, unnamed: bool = True) -> list[str]:
    """The names of the Nodes whose lock this release lets go, sorted: those with the lock taint that one of
    ``ours`` holds (wherever: its slurmd Pod may be gone already), and, when ``unnamed``, those ``among`` (None:
    every Node) whose taint names no holder (an older sunk's)."""
    out = []
    for node in nodes:
        name = name_of(node)
        if not name or not lock_tainted(node):
            continue
        holders = lock_holders(node)
        if any(ours(h) for h in holders) or (unnamed and not holders and (among is None or name in among)):
            out.append(name)
    return sorted(out)


def lock_annotations(pod: Obj) -> list[str]:
    """The annotations of sunk's lock on a slurmd Pod (the lock state, the lock requests), sorted: to remove."""
    return sorted(key for key in annotations_of(pod)
                  if key == names.LOCK_KEY or key.startswith(names.LOCK_REQUEST_PREFIX))


def lifts(node: Optional[Node]) -> bool:
    """Whether this node's drain is lifted: it is drained, by sunk's lock."""
    return node is not None and node.drained and isinstance(parse(node.reason), (HookUnreachableDrain,
                                                                                  LockTimeoutDrain))


def keeps(node: Node) -> bool:
    """Whether this node is drained by sunk for a cause that outlives sunk (not lifted; named in the log)."""
    return node.drained and is_sunks(node.reason) and not lifts(node)


def in_scope(nodes: Iterable[Node], among: Optional[Collection[str]]) -> list[Node]:
    """The Slurm nodes ``among`` (None: every node), by name."""
    return sorted((node for node in nodes if among is None or node.name in among), key=lambda node: node.name)


def drains_to_lift(nodes: Iterable[Node], among: Optional[Collection[str]] = None) -> list[Node]:
    """The Slurm nodes ``among`` (None: every node) whose drain is lifted, by name."""
    return [node for node in in_scope(nodes, among) if lifts(node)]


def drains_kept(nodes: Iterable[Node], among: Optional[Collection[str]] = None) -> list[Node]:
    """The Slurm nodes ``among`` (None: every node) that sunk drained for a cause that outlives it, by name."""
    return [node for node in in_scope(nodes, among) if keeps(node)]
