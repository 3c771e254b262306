"""Informer handlers that turn object events into work-queue keys.

Level-based reconcilers only need to know *which* key to look at, never what changed.
On update both the old and the new object's keys are queued, so a change of mapping
(e.g. a Pod moving to another node) reconciles both the old and the new key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

import attrs

from sunk.kube.resources import object_key
from sunk.model.types import Obj

KeyMapper = Callable[[Obj], Iterable[str]]


class Enqueuer(Protocol):
    def add(self, key: str) -> None: ...


@attrs.frozen
class FuncEnqueuer:
    """An ``Enqueuer`` over a plain function (a daemon that fans one key out to several controllers)."""

    add: Callable[[str], None]


def own_key(obj: Obj) -> list[str]:
    """The object's own ``namespace/name`` key."""
    return [object_key(obj)]


@attrs.define
class EnqueueHandler:
    """An informer Handler that adds ``mapper(obj)`` keys to ``queue``."""

    queue: Enqueuer
    mapper: KeyMapper = own_key
    predicate: Callable[[Obj | None, Obj], bool] | None = None
    """Optional filter ``(old, new) -> bool``; ``old`` is None for adds and deletes."""

    def on_add(self, obj: Obj) -> None:
        if self.predicate is None or self.predicate(None, obj):
            self._enqueue(obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        if self.predicate is None or self.predicate(old, new):
            keys = set(self.mapper(old)) | set(self.mapper(new))
            for key in sorted(keys):
                self.queue.add(key)

    def on_delete(self, obj: Obj) -> None:
        if self.predicate is None or self.predicate(None, obj):
            self._enqueue(obj)

    def _enqueue(self, obj: Obj) -> None:
        for key in self.mapper(obj):
            self.queue.add(key)
