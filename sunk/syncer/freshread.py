"""Reading Slurm's current node list before a write, shared by every worker that needs it.

Why: a write is decided from the Slurm cache, which may be a poll interval old; before
removing or replacing a drain (or rewriting Extra) the decision is taken again from a
list that *started after* the decision, so a person's change of a moment ago is seen.
slurmrestd 24.11 reads single nodes from the full list anyway (see sunk/slurm/rest.py).
Why shared: when many nodes change at once (a rack cordoned), every worker would list
all nodes for itself. Here callers that arrive while a list is running wait for the next
one, and all of them share it: a burst of N writes costs about two lists, not N.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from sunk.slurm.client import SlurmClient
from sunk.slurm.models import Node


class FreshNodes:
    def __init__(self, slurm: SlurmClient):
        self.slurm = slurm
        self.lists = 0  # list calls made, for metrics and tests
        self._cond = threading.Condition()
        self._started = 0  # generation of the last list begun
        self._finished = 0  # generation of the last list ended
        self._running = False
        self._nodes: Mapping[str, Node] = {}
        self._error: BaseException | None = None

    def nodes(self) -> Mapping[str, Node]:
        """Every node, from a list call that began after this call did. Raises what the list raised."""
        with self._cond:
            target = self._started + 1
            while self._finished < target:
                if self._running:
                    self._cond.wait()
                    continue
                self._running = True
                self._started += 1
                generation = self._started
                self._cond.release()
                nodes: Mapping[str, Node] = {}
                error: BaseException | None = None
                try:
                    nodes = {n.name: n for n in self.slurm.list_nodes().items or ()}
                except BaseException as exc:  # handed to every waiter of this generation
                    error = exc
                finally:
                    self._cond.acquire()
                self.lists += 1
                self._nodes, self._error = nodes, error
                self._finished = generation
                self._running = False
                self._cond.notify_all()
            if self._error is not None:
                raise self._error
            return self._nodes

    def node(self, name: str) -> Node | None:
        return self.nodes().get(name)
