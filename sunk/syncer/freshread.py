"""Reading Slurm's current node list before a write, shared by every worker that needs it.

Why: a write is decided from the Slurm cache, which may be a poll interval old; before
removing or replacing a drain (or rewriting Extra) the decision is taken again from a
list that *started after* the decision, so a person's change of a moment ago is seen.
slurmrestd 24.11 reads single nodes from the full list anyway (see sunk/slurm/rest.py).
Why shared: when many nodes change at once (a rack cordoned), every worker would list
all nodes for itself; ``sunk.slurm.freshread.FreshRead`` makes a burst of N writes cost
about two lists, not N.
"""

from __future__ import annotations

from collections.abc import Mapping

from sunk.slurm.client import SlurmClient
from sunk.slurm.freshread import FreshRead
from sunk.slurm.models import Node


class FreshNodes:
    def __init__(self, slurm: SlurmClient):
        self.slurm = slurm
        self._read: FreshRead[Mapping[str, Node]] = FreshRead(
            lambda: {n.name: n for n in self.slurm.list_nodes().items or ()})

    @property
    def lists(self) -> int:
        """List calls made, for metrics and tests."""
        return self._read.calls

    def nodes(self) -> Mapping[str, Node]:
        """Every node, from a list call that began after this call did. Raises what the list raised."""
        return self._read.read()

    def node(self, name: str) -> Node | None:
        return self.nodes().get(name)
