"""Slurm's network topology from Node labels (SUNK's "automatic topology generation"): pure, deterministic.

One topology for the whole cluster, over every NodeSet's Slurm nodes (it is slurmctld's one
file, so it cannot be per NodeSet, as SUNK's docs say too):

- **block** (``topology/block``): each value of the block label (default
  ``ds.coreweave.com/nvlink.domain``, the label SUNK reads, one NVLink domain or rack each) is
  one block of the Slurm nodes whose Nodes carry it. Gangs then land inside one block when it
  has room.
- **tree** (``topology/tree``): the tree labels, outermost first (InfiniBand style:
  ``ib.coreweave.cloud/fabric``, ``.../superpod``, ``.../leafgroup``; or
  ``topology.kubernetes.io/region``, ``.../zone``), are switch levels: one switch per distinct
  path of values, leaf switches holding the nodes, and a ``root`` switch over the top level
  when there is more than one, so the tree is connected.

A Node's labels are its kubelet's to write too (NodeRestriction guards only labels under
``node-restriction.kubernetes.io/``), so a compromised node could name itself into another
block. With ``allowed_values`` set, a value of a label outside that prefix counts only if it is
listed; a label under the prefix is trusted as its administrator set it.

The planning base block size (``BlockSizes``' first value: Slurm plans a job in whole base
blocks and aggregates 2, 4, ... of them for larger jobs; a smaller block still runs the jobs it
fits, and is only left out of the fragmentation count) is ``block_size``
when set, else the labelled blocks' size that holds the most nodes (the larger on a tie), not
Slurm's own default of the first block's size, which one small block sorting first would make
1, so that every job of two nodes or more would spread over single-node blocks.

A Node without the label (or with a value that is not a safe Slurm name) is not left out:
Slurm schedules no job on a node outside the topology (tree: every node must hang off a
switch). Its Slurm node goes into the block, or under the leaf switch, ``unlabeled``
(``UNLABELED``), and the value is named in ``problems``.

Two renderings: ``topology.conf`` (``BlockName=... Nodes=...``, ``SwitchName=...``), which
every release reads, and ``topology.yaml`` (Slurm 25.05 and later read it first and ignore
``topology.conf`` then): one topology named ``sunk``, ``cluster_default: true``. Nodes are
written as sorted lists, blocks and switches sorted by name: the same Nodes give the same
text byte for byte, so the writer compares text to know whether to write at all.

The caller gives only Slurm nodes that slurmctld knows now (a topology naming a node it does
not know is refused, a crash a public peer hit); with none, there is nothing to write
(``Topology.empty``) and the caller keeps the file it has.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence

from attrs import field, frozen

from sunk.model.hostlist import compress

from .spec import KUBELET_PROOF_PREFIX

BLOCK = "block"
TREE = "tree"
KINDS = (BLOCK, TREE)
CONF = "topology.conf"
YAML = "topology.yaml"
FORMATS = (CONF, YAML)
DEFAULT_BLOCK_LABEL = "ds.coreweave.com/nvlink.domain"
UNLABELED = "unlabeled"
ROOT = "root"
TOPOLOGY_NAME = "sunk"
# A block or switch name: what a label value may hold, minus what a hostlist expression reads as syntax.
NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")
TRAILING_DIGITS = re.compile(r"[0-9]{10,}$")
MAX_SWITCH_NAME = 64  # Slurm refuses longer switch names in topology.conf (HOST_NAME_MAX): a fatal reconfigure
# Planning block sizes written out: the first block's node count b, then 2b .. 16b, which is what Slurm derives
# when none are written, but from the first block holding a node the *reading* daemon knows: a slurmd of a
# dynamic node knows only itself and slurm.conf's nodes, and exits ("Blocks do not contain any nodes and the
# BlockSizes are not set") when no block holds one of them.
BLOCK_LEVELS = 5
MAX_BLOCK_SIZE = 4096  # --topology-block-size: far above any NVLink domain, and BlockSizes stay small numbers
SLURM_NODE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def _strs(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


@frozen
class TopologySettings:
    """``--topology``: which kind (off when ""), from which labels, in which file."""

    kind: str = ""
    block_label: str = DEFAULT_BLOCK_LABEL
    tree_labels: tuple[str, ...] = field(converter=_strs, factory=tuple)
    file_format: str = YAML
    # The values a label outside KUBELET_PROOF_PREFIX may bring (empty: any); the base block size (0: derived).
    allowed_values: tuple[str, ...] = field(converter=_strs, factory=tuple)
    block_size: int = 0


@frozen
class Placement:
    """One Slurm node and the labels of its Node."""

    slurm_node: str
    labels: Mapping[str, str] = field(factory=dict)


@frozen
class Topology:
    """Groups of Slurm nodes: blocks, or switches (leaf: nodes; inner: switches)."""

    kind: str
    blocks: tuple[tuple[str, tuple[str, ...]], ...] = ()
    leaves: tuple[tuple[str, tuple[str, ...]], ...] = ()  # switch -> nodes
    inner: tuple[tuple[str, tuple[str, ...]], ...] = ()  # switch -> switches
    problems: tuple[str, ...] = field(converter=_strs, factory=tuple)
    base_block_size: int = 0  # blocks only: BlockSizes' first value, as the operator set it (0: derived)

    @property
    def empty(self) -> bool:
        return not self.blocks and not self.leaves


def usable_name(value: str) -> bool:
    """A block or switch name Slurm reads back as written (a name ending in ten digits or more overflows
    Slurm's hostlist parser: slurmctld exits at reconfigure)."""
    return bool(NAME.fullmatch(value)) and value not in (UNLABELED, ROOT) and not TRAILING_DIGITS.search(value)


def _value(labels: Mapping[str, str], key: str, node: str, problems: list[str],
           allowed: tuple[str, ...] = ()) -> str | None:
    value = labels.get(key)
    if value is None or value == "":
        return None
    if allowed and not key.startswith(KUBELET_PROOF_PREFIX) and value not in allowed:
        problems.append(f"{node}: label {key}={str(value)[:63]!r} is not among the allowed topology values: "
                        f"placed in {UNLABELED}")
        return None
    if not isinstance(value, str) or not usable_name(value):
        problems.append(f"{node}: label {key}={str(value)[:63]!r} is not a usable block or switch name: "
                        f"placed in {UNLABELED}")
        return None
    return value


def build(settings: TopologySettings, placements: Sequence[Placement]) -> Topology:
    """The topology of ``placements`` (module docstring); nodes that are not Slurm node names are skipped."""
    problems: list[str] = []
    nodes = sorted({p.slurm_node: p for p in placements if SLURM_NODE.fullmatch(p.slurm_node)}.values(),
                   key=lambda p: p.slurm_node)
    if settings.kind == BLOCK:
        groups: dict[str, list[str]] = {}
        for p in nodes:
            value = _value(p.labels, settings.block_label, p.slurm_node, problems, settings.allowed_values)
            groups.setdefault(value or UNLABELED, []).append(p.slurm_node)
        blocks = tuple((k, tuple(v)) for k, v in sorted(groups.items()))
        return Topology(BLOCK, blocks=blocks, problems=problems, base_block_size=settings.block_size)
    if settings.kind == TREE and settings.tree_labels:
        return _tree(settings.tree_labels, nodes, problems, settings.allowed_values)
    return Topology(settings.kind)


def _common_size(blocks: Sequence[tuple[str, tuple[str, ...]]]) -> int:
    """The block size holding the most nodes (the larger on a tie: a block smaller than the base still
    runs the jobs it fits, while a base of 1 spreads every job over single-node blocks). Weighed by
    nodes, not blocks, so that nodes labelling themselves into blocks of their own outweigh a size
    only when they outnumber its nodes. The ``unlabeled`` block counts only when it is the only one."""
    sizes = [len(nodes) for name, nodes in blocks if name != UNLABELED] or [len(nodes) for _, nodes in blocks]
    if not sizes:
        return 0
    return max(set(sizes), key=lambda size: (size * sizes.count(size), size))


def _tree(levels: tuple[str, ...], nodes: Sequence[Placement], problems: list[str],
          allowed: tuple[str, ...] = ()) -> Topology:
    paths: dict[tuple[str, ...], list[str]] = {}
    for p in nodes:
        values = [_value(p.labels, key, p.slurm_node, problems, allowed) for key in levels]
        path: tuple[str, ...] = (UNLABELED,) if any(v is None for v in values) else tuple(v or "" for v in values)
        paths.setdefault(path, []).append(p.slurm_node)
    every = sorted({path[:i] for path in paths for i in range(1, len(path) + 1)})
    names = _switch_names(every)
    children: dict[tuple[str, ...], set[str]] = {}
    for path in every:
        if len(path) > 1:
            children.setdefault(path[:-1], set()).add(names[path])
    leaves = tuple(sorted((names[path], tuple(sorted(ns))) for path, ns in paths.items()))
    inner = [(names[path], tuple(sorted(kids))) for path, kids in children.items()]
    tops = sorted(names[path] for path in every if len(path) == 1)
    if len(tops) > 1:
        inner.append((ROOT, tuple(tops)))
    return Topology(TREE, leaves=leaves, inner=tuple(sorted(inner)), problems=problems)


def _switch_names(paths: Sequence[tuple[str, ...]]) -> dict[tuple[str, ...], str]:
    """One switch name per path: its values joined by ``_``; a name two paths would share gets each
    a digest of its own path (``a_b``/``c`` and ``a``/``b_c``)."""
    plain = {path: "_".join(path) for path in paths}
    counts: dict[str, int] = {}
    for name in plain.values():
        counts[name] = counts.get(name, 0) + 1
    return {path: name if counts[name] == 1 and len(name) <= MAX_SWITCH_NAME else
            f"{name[:MAX_SWITCH_NAME - 9]}-{hashlib.sha256(chr(31).join(path).encode()).hexdigest()[:8]}"
            for path, name in plain.items()}


def _hostlist(nodes: Iterable[str]) -> str:
    """A hostlist expression (``g-3-[1-4]``): short lines however many nodes a block has."""
    return compress(nodes)


def block_sizes(topology: Topology) -> tuple[int, ...]:
    """The planning block sizes written with the blocks (``BLOCK_LEVELS``); none without a block."""
    if not topology.blocks:
        return ()
    base = max(1, topology.base_block_size or _common_size(topology.blocks))
    return tuple(base << level for level in range(BLOCK_LEVELS))


def render_conf(topology: Topology) -> str:
    """``topology.conf`` text."""
    lines = ["# Generated by sunk-operator from Node labels; edits are overwritten."]
    if sizes := block_sizes(topology):
        lines.append("BlockSizes=" + ",".join(str(size) for size in sizes))
    lines += [f"BlockName={name} Nodes={_hostlist(nodes)}" for name, nodes in topology.blocks]
    lines += [f"SwitchName={name} Nodes={_hostlist(nodes)}" for name, nodes in topology.leaves]
    lines += [f"SwitchName={name} Switches={_hostlist(kids)}" for name, kids in topology.inner]
    return "\n".join(lines) + "\n"


def render_yaml(topology: Topology) -> str:
    """``topology.yaml`` text (Slurm 25.05+): one topology, the cluster's default. Written by hand, not
    by a YAML library, so that the text is fixed (every name is a plain scalar: ``NAME`` and Slurm node names)."""
    lines = ["# Generated by sunk-operator from Node labels; edits are overwritten.",
             f"- topology: {TOPOLOGY_NAME}", "  cluster_default: true"]
    if topology.kind == BLOCK and topology.blocks:
        lines += ["  block:", "    block_sizes:", *(f"      - {size}" for size in block_sizes(topology)), "    blocks:"]
        for name, nodes in topology.blocks:
            lines += [f"      - block: {_quoted(name)}", f"        nodes: {_quoted(_hostlist(nodes))}"]
    elif topology.kind == TREE and topology.leaves:
        lines += ["  tree:", "    switches:"]
        for name, nodes in topology.leaves:
            lines += [f"      - switch: {_quoted(name)}", f"        nodes: {_quoted(_hostlist(nodes))}"]
        for name, kids in topology.inner:
            lines += [f"      - switch: {_quoted(name)}", f"        children: {_quoted(_hostlist(kids))}"]
    else:
        lines.append("  flat: true")
    return "\n".join(lines) + "\n"


def _quoted(name: str) -> str:
    """A name as a YAML string: quoted, so that ``1e3``, ``true`` or ``0x10`` stay strings."""
    return f'"{name}"'


def render(settings: TopologySettings, topology: Topology) -> str:
    return render_yaml(topology) if settings.file_format == YAML else render_conf(topology)
