"""The scheduler's safety net, spread out: every key looked at again, a bounded batch at a time.

Why it stays: every change the decision reads comes as an event (a Pod's from its informer, with
``changed_for_scheduling``; a job's from the Slurm cache, whose full job list every 5 minutes turns
a change its cheaper reads missed into an event; a slurmd Pod's through the job index,
``attach_slurmd_feed``; a Node's Ready for the Pods terminating there), and a reconcile that fails
is retried with backoff. What no event covers is a predicate or a mapping that drops an event it
should not (a bug: the sweep turns it into a delay instead of a Pod that waits for good), and an
orphan either way (a job whose Pod is gone, a bound Pod whose job is gone) whose event such a bug
lost. The sweep finds those from memory, without a call, so it stays; only its pace changes.

Why spread: looking at every Pod every 60 s was 1,667 reconciles a second at 100k Pods, whatever
happened. Now each tick enqueues at most ``batch`` keys from a snapshot taken when the previous
cycle ended; a cycle over N keys takes ``ceil(N / batch)`` ticks (at the defaults, 500 keys a
minute: 2 minutes at 1000 Pods, 200 at 100k). The snapshot is one copy of the names' references per
cycle, so each key costs O(1) whatever the size, and a tick's work is bounded.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item", bound=Hashable)

# One kind of name the sweep visits: how to list them all (each once), and what to do with one at its turn.
Source = tuple[Callable[[], Iterable[Item]], Callable[[Item], None]]


class RollingSweep(Generic[Item]):
    """Each ``tick()`` visits the next ``batch`` names of the current cycle (a new snapshot of every source
    once the last one is used up); returns how many it visited.

    A source lists each name once (the scheduler's: the Pod store's keys, the job index's owners), and its
    snapshot copies references to names, never reading one: a copy of 100k names is a copy of pointers, where
    a dedup or a tuple per name read each of them, and cost 2.5 times more a name at 100k Pods than at 10k (a
    heap past the caches). ``visit`` reads each object only when its turn comes.
    """

    def __init__(self, items: Callable[[], Iterable[Item]], visit: Callable[[Item], None], batch: int,
                 *more: Source[Item]):
        if batch < 1:
            raise ValueError(f"a sweep batch must be at least 1, not {batch}")
        self._sources: Sequence[Source[Item]] = ((items, visit), *more)
        self.batch = batch
        self._cycle: deque[tuple[Callable[[Item], None], deque[Item]]] = deque()
        self.cycles = 0  # snapshots taken: a cycle's start

    def tick(self) -> int:
        if not self._cycle:
            self._cycle.extend((visit, deque(items())) for items, visit in self._sources)
            self.cycles += 1
        count = 0
        while count < self.batch and self._cycle:
            visit, names = self._cycle[0]
            for _ in range(min(self.batch - count, len(names))):
                visit(names.popleft())
                count += 1
            if not names:
                self._cycle.popleft()
        return count
