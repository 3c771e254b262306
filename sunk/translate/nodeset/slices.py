"""NodeSlices: which Slurm nodes a NodeSet holds, each with its Pod, Node and address.

Why slices: the Syncer deletes a Slurm node from Slurm once its entry is gone (with
``slurmNodeCleanUp``), so the entries must be complete and current, and one object per
NodeSet would grow past what etcd takes (1.5 MiB) long before 5000 Nodes. Each NodeSlice
holds at most ``MAX_ENTRIES`` entries; an entry is at most ~500 bytes of JSON (names of 63
characters, a Node name of 253, an IPv6 address), so a full slice stays near 250 KB.

Why this assignment: an entry stays in the slice it is in for as long as it exists; new
entries fill the slices with room, lowest name first, and then new slices; a slice left
empty is deleted. So adding or removing one Node rewrites one slice, never all of them,
and a Slurm node is never briefly absent from every slice while it moves between two
(which the Syncer would read as "removed").

An entry exists from the moment a Node is assigned a Slurm node name until its slurmd Pod
is gone and the Node is no longer assigned. A rolling update keeps the entry (the Slurm
node keeps its name); a scale-in removes it once the Pod is deleted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from attrs import frozen

from sunk.model import names

from .pod import owner_reference
from .spec import NodeSetSpec

Obj = dict[str, Any]
MAX_ENTRIES = 500


@frozen(order=True)
class Entry:
    slurm_node: str
    pod: str
    node: str
    address: str = ""

    def wire(self) -> Obj:
        return {"slurmNode": self.slurm_node, "pod": self.pod, "node": self.node, "address": self.address}

    @classmethod
    def from_wire(cls, value: Mapping[str, Any]) -> Entry:
        return cls(str(value.get("slurmNode", "")), str(value.get("pod", "")), str(value.get("node", "")),
                   str(value.get("address", "")))


@frozen
class SlicePlan:
    """``write``: (slice name, its complete entries) to create or replace, in this order: slices that
    only gain entries first, so an entry never is in no slice at all between two writes;
    ``delete``: slices to remove, after the writes."""

    write: tuple[tuple[str, tuple[Entry, ...]], ...]
    delete: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not self.write and not self.delete


def slice_name(nodeset: str, index: int) -> str:
    return f"{nodeset}-{index}"


def entries_of(nodeslice: Mapping[str, Any]) -> tuple[Entry, ...]:
    raw = (nodeslice.get("spec") or {}).get("entries") or []
    return tuple(Entry.from_wire(e) for e in raw if isinstance(e, Mapping))


def assign(nodeset: str, current: Mapping[str, Sequence[Entry]], wanted: Iterable[Entry],
           max_entries: int = MAX_ENTRIES) -> SlicePlan:
    """The writes that make the slices hold exactly ``wanted`` (one entry per Slurm node), moving none."""
    want = {e.slurm_node: e for e in sorted(wanted)}
    layout: dict[str, list[Entry]] = {}
    placed: set[str] = set()
    for name in sorted(current, key=_slice_order):
        kept: list[Entry] = []
        for entry in current[name]:
            if entry.slurm_node in want and entry.slurm_node not in placed and len(kept) < max_entries:
                kept.append(want[entry.slurm_node])
                placed.add(entry.slurm_node)
        layout[name] = kept
    new = [e for key, e in want.items() if key not in placed]
    for name in sorted(layout, key=_slice_order):
        room = max_entries - len(layout[name])
        if room > 0 and new:
            layout[name].extend(new[:room])
            new = new[room:]
    index = 0
    while new:
        name = slice_name(nodeset, index)
        index += 1
        if name in layout:
            continue
        layout[name], new = new[:max_entries], new[max_entries:]
    write = []
    for name, entries in layout.items():
        final = tuple(sorted(entries))
        if entries and (name not in current or tuple(sorted(current[name])) != final):
            had = {e.slurm_node for e in current.get(name, ())}
            shrinks = bool(had - {e.slurm_node for e in final})
            write.append((shrinks, _slice_order(name), name, final))
    delete = tuple(sorted((n for n, entries in layout.items() if not entries and n in current), key=_slice_order))
    return SlicePlan(tuple((name, final) for _, _, name, final in sorted(write)), delete)


def _slice_order(name: str) -> tuple[int, str]:
    """Slices by their index (``ns-10`` after ``ns-9``), foreign names last."""
    head, _, tail = name.rpartition("-")
    return (int(tail), head) if tail.isdigit() else (1 << 30, name)


def slice_object(spec: NodeSetSpec, name: str, entries: Sequence[Entry]) -> Obj:
    """A NodeSlice as the operator writes it."""
    return {
        "apiVersion": names.NODESET_API_VERSION,
        "kind": "NodeSlice",
        "metadata": {"name": name, "namespace": spec.namespace, "labels": {names.LABEL_NODESET: spec.name},
                     "ownerReferences": [owner_reference(spec)]},
        "spec": {"nodeSet": spec.name, "entries": [e.wire() for e in entries]},
    }
