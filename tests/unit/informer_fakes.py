"""An informer's read side over objects a test edits: what PodIndex and SlurmdNodes read."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from sunk.kube.store import ThreadSafeStore


class ListInformer:
    def __init__(self, objects: Iterable[dict[str, Any]]):
        self.objects = objects
        self.indexers: dict[str, Callable[[dict[str, Any]], list[str]]] = {}

    def add_indexer(self, name: str, fn: Callable[[dict[str, Any]], list[str]]) -> None:
        self.indexers[name] = fn

    def by_index(self, name: str, value: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if value in self.indexers[name](o)]

    def list(self) -> list[dict[str, Any]]:
        return list(self.objects)


class StoreInformer:
    """An informer over a real ThreadSafeStore (so its indexes are the ones the scheduler gets), whose
    ``put``/``remove`` store first and then call the handlers, as the reflector does. ``lists`` counts the
    walks of the whole store: what an index must spare its reader."""

    def __init__(self, objects: Iterable[dict[str, Any]] = ()):
        self.store = ThreadSafeStore()
        self.handlers: list[tuple[Any, Any, Any]] = []
        self.lists = 0
        for obj in objects:
            self.store.add(self._key(obj), obj)

    @staticmethod
    def _key(obj: dict[str, Any]) -> str:
        meta = obj["metadata"]  # (as the informer's: ``name`` alone for a cluster-scoped object)
        return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]

    def add_indexer(self, name: str, fn: Callable[[dict[str, Any]], list[str]]) -> None:
        self.store.add_indexer(name, fn)

    def add_handler(self, handler: Any = None, *, on_add: Any = None, on_update: Any = None,
                    on_delete: Any = None) -> None:
        """As the informer's: a ``ChangeHandler`` object, or its functions by name."""
        if handler is not None:
            on_add, on_update, on_delete = handler.on_add, handler.on_update, handler.on_delete
        self.handlers.append((on_add, on_update, on_delete))

    def get(self, key: str) -> Any:
        return self.store.get(key)

    def by_index(self, name: str, value: str) -> list[Any]:
        return self.store.by_index(name, value)

    def list(self) -> list[Any]:
        self.lists += 1
        return self.store.list()

    def put(self, obj: dict[str, Any]) -> None:
        old = self.store.add(self._key(obj), obj)
        for on_add, on_update, _ in self.handlers:
            if old is None and on_add is not None:
                on_add(obj)
            elif old is not None and on_update is not None:
                on_update(old, obj)

    def remove(self, obj: dict[str, Any]) -> None:
        old = self.store.delete(self._key(obj))
        for _, _, on_delete in self.handlers:
            if old is not None and on_delete is not None:
                on_delete(old)
