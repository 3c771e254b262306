"""Group commit of annotation patches: concurrent hook calls for one Pod share one write.

Why: many jobs starting at once on one node (small jobs on a big machine) each send a
pre-hook, and each must record its lock request on the same slurmd Pod. One merge patch
per caller makes the apiserver serialise them on that object (measured: 100 concurrent
pre-hooks took 5 s at the median). Here the first caller writes whatever has queued up by
then, in one patch, and keeps writing until the queue is empty; the others wait for the
write that carried their keys. Each caller still returns only after its own keys landed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

import attrs

from sunk.kube.resources import object_key
from sunk.model.types import Obj

Annotations = Mapping[str, str | None]
Write = Callable[[Obj, dict[str, str | None]], None]


@attrs.define(eq=False)
class _Ticket:
    annotations: Annotations
    done: threading.Event = attrs.field(factory=threading.Event)
    error: BaseException | None = None


@attrs.define(eq=False)
class _Queue:
    obj: Obj
    tickets: list[_Ticket] = attrs.field(factory=list)


class AnnotationBatcher:
    def __init__(self, write: Write):
        self._write = write
        self._lock = threading.Lock()
        self._queues: dict[str, _Queue] = {}  # present while a writer drains it
        self.writes = 0  # for tests and the benchmark

    def patch(self, obj: Obj, annotations: Annotations) -> None:
        """Merge ``annotations`` (None removes a key) into ``obj``'s; raises what the write raised."""
        key = object_key(obj)
        ticket = _Ticket(annotations)
        with self._lock:
            queue = self._queues.get(key)
            lead = queue is None
            if queue is None:
                queue = self._queues[key] = _Queue(obj)
            queue.tickets.append(ticket)
        if lead:
            self._drain(key, queue)
        ticket.done.wait()
        if ticket.error is not None:
            raise ticket.error

    def _drain(self, key: str, queue: _Queue) -> None:
        while True:
            with self._lock:
                tickets, queue.tickets = queue.tickets, []
                if not tickets:
                    del self._queues[key]
                    return
            merged: dict[str, str | None] = {}
            for ticket in tickets:  # in arrival order: a later value for a key wins
                merged.update(ticket.annotations)
            try:
                self.writes += 1
                self._write(queue.obj, merged)
            except BaseException as exc:  # every caller of this batch learns why
                for ticket in tickets:
                    ticket.error = exc
            finally:
                for ticket in tickets:
                    ticket.done.set()
