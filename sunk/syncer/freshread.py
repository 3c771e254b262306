"""Reading one Slurm node's current word before a write: the node alone, or a list shared by a burst.

Why: a write is decided from the Slurm cache, which may be a poll interval old; before
removing or replacing a drain (or rewriting Extra, setting DOWN, deleting the node) the
decision is taken again from a read that *began after* the decision, so a person's change of
a moment ago is seen.

Which read: a lone write reads its node alone (``SlurmClient.read_node``, one call and one
node's bytes, about 2.5 KB), where a full list costs every node (12.6 MB and 0.76 s at 5005
nodes: docs/benchmarks.md "At scale"). What the decision reads of it is current in a single-node
read: the state word and its flags (DRAIN, DOWN, COMPLETING), the reason, Extra. Its allocation
is as of the last full list, so it may show a job that ended since as running (never hide one:
see ``SlurmClient.read_node``); every decision that reads it (a lock drain's cause, the
clean-up's "idle") errs towards waiting, and the Syncer looks again once its cache caught up.

When many writes wait at once (a rack cordoned on a small cluster), one list shared by all of
them (``sunk.slurm.freshread.FreshRead``: a burst costs about two lists) can cost less than a
read each; ``read_kind`` chooses, from how many wait and how many nodes a list holds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from sunk.model.slurm import Node
from sunk.slurm.client import SlurmClient
from sunk.slurm.errors import NotFound
from sunk.slurm.freshread import FreshRead

NODE = "node"  # the node alone: SlurmClient.read_node
LIST = "list"  # a full node list, shared by every caller waiting for one

# What a read costs slurmctld and slurmrestd, from docs/benchmarks.md "At scale" (real Slurm 24.11.5, this
# machine): a node poll answered "no change" (a round trip, no node) takes 3 to 7 ms; a full list of 5005
# nodes 0.76 s, so about 0.15 ms a node on top of its round trip.
CALL_SECONDS = 0.007
LIST_SECONDS_PER_NODE = 0.76 / 5005


def read_kind(waiting: int, node_count: int) -> str:
    """``NODE`` or ``LIST``: which read costs less for ``waiting`` callers (this one included) on a cluster
    of ``node_count`` Slurm nodes.

    Each caller reading its node alone costs ``waiting`` round trips of one node each; one list shared by
    them costs one round trip and every node. The list wins once
    ``waiting * (CALL + NODE) > CALL + node_count * NODE``: 2 callers at 5 nodes, 6 at 200, 23 at 1000,
    108 at 5000. The Syncer's 4 workers never make that many wait at 200 nodes or more, so there every
    write reads its node alone; a lone caller always does.
    """
    if waiting <= 1:
        return NODE
    single = CALL_SECONDS + LIST_SECONDS_PER_NODE
    listing = CALL_SECONDS + LIST_SECONDS_PER_NODE * max(node_count, 0)
    return LIST if waiting * single > listing else NODE


class FreshNodes:
    """``node(name)``: Slurm's word on one node from a read that began after the call did.

    ``node_count``: how many nodes a full list would hold now (the cache's size), for ``read_kind``.
    """

    def __init__(self, slurm: SlurmClient, node_count: Callable[[], int]):
        self.slurm = slurm
        self._node_count = node_count
        self._read: FreshRead[Mapping[str, Node]] = FreshRead(
            lambda: {n.name: n for n in self.slurm.list_nodes().items or ()})
        self._lock = threading.Lock()
        self._waiting = 0  # callers inside node(), this one included
        self.single_reads = 0  # read_node calls made, for metrics and tests

    @property
    def lists(self) -> int:
        """List calls made, for metrics and tests."""
        return self._read.calls

    @property
    def waiting_for_list(self) -> int:
        """Callers waiting for a list under way to end, for tests."""
        return self._read.waiting

    def nodes(self) -> Mapping[str, Node]:
        """Every node, from a list call that began after this call did. Raises what the list raised."""
        return self._read.read()

    def node(self, name: str) -> Node | None:
        """The node as Slurm shows it now (None: Slurm knows no such node). Raises what the read raised."""
        with self._lock:
            self._waiting += 1
            waiting = self._waiting
        try:
            if read_kind(waiting, self._node_count()) == LIST:
                return self.nodes().get(name)
            with self._lock:
                self.single_reads += 1
            try:
                return self.slurm.read_node(name)
            except NotFound:
                return None
        finally:
            with self._lock:
                self._waiting -= 1
