"""Thread-safe store of one resource's objects by key, with secondary indexes (client-go's
ThreadSafeStore and Indexer), and the handler shape every informer calls.

Why its own module: the reflector is its only writer, while the scheduler and the Syncer
only read it, through ``Store``; their tests fake that read side with plain dicts. Generic
(``KeyedStore[K, V]``, ``ChangeHandler[V]``) because both worlds use it: the Kubernetes
informers hold wire objects by ``namespace/name`` (``ThreadSafeStore``), the Slurm informers
(``sunk/slurm/informer.py``) frozen ``Node``/``Job`` values by name or job id.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Generic, Protocol, TypeVar

import attrs

from sunk.model.types import Obj

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
V_contra = TypeVar("V_contra", contravariant=True)

IndexFunc = Callable[[Obj], Iterable[str]]
# Aliases: the classes below define a method named ``list``, which shadows the builtin there.
ObjList = list[Obj]
StrList = list[str]
_Values = list  # (``list[V]`` where the class's own ``list`` method shadows the builtin)
_Keys = list


class Store(Protocol):
    """The read side of a cache of objects keyed ``namespace/name`` (or ``name``): all that the
    scheduler and the Syncer read. Returned objects are shared: never mutate them."""

    def get(self, key: str) -> Obj | None: ...
    def list(self) -> ObjList: ...
    def by_index(self, index_name: str, value: str) -> ObjList: ...


class IndexedStore(Store, Protocol):
    """A ``Store`` its reader may add an index to (client-go's Indexer): an informer, or a test's fake."""

    def add_indexer(self, name: str, func: IndexFunc) -> None: ...


class ChangeHandler(Protocol[V_contra]):
    """Receives the changes to a store, in order (client-go's ResourceEventHandler): what every informer,
    Kubernetes' or Slurm's, calls."""

    def on_add(self, obj: V_contra) -> None: ...
    def on_update(self, old: V_contra, new: V_contra) -> None: ...
    def on_delete(self, obj: V_contra) -> None: ...


@attrs.define
class FuncHandler(Generic[V]):
    """A handler from up to three plain functions."""

    add: Callable[[V], None] | None = None
    update: Callable[[V, V], None] | None = None
    delete: Callable[[V], None] | None = None

    def on_add(self, obj: V) -> None:
        if self.add:
            self.add(obj)

    def on_update(self, old: V, new: V) -> None:
        if self.update:
            self.update(old, new)

    def on_delete(self, obj: V) -> None:
        if self.delete:
            self.delete(obj)


def pod_node_name(pod: Obj) -> list[str]:
    """Index function: pods by ``spec.nodeName`` (unbound pods are not indexed)."""
    node = (pod.get("spec") or {}).get("nodeName")
    return [node] if node else []


class KeyedStore(Generic[K, V]):
    """Objects by key, and for each named index, index value -> keys.

    Every method holds one lock briefly, so readers always see an object and its index
    entries consistently. An index function that raises on an object is logged and the
    object is left out of that index, never out of the store.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._items: dict[K, V] = {}
        self._indexers: dict[str, Callable[[V], Iterable[str]]] = {}
        self._indices: dict[str, dict[str, set[K]]] = {}

    # ---- read side ------------------------------------------------------------------

    def get(self, key: K) -> V | None:
        with self._lock:
            return self._items.get(key)

    def list(self) -> _Values[V]:
        with self._lock:
            return list(self._items.values())

    def keys(self) -> _Keys[K]:
        with self._lock:
            return list(self._items)

    def by_index(self, index_name: str, value: str) -> _Values[V]:
        """Objects whose ``index_name`` function yields ``value``; KeyError for an unknown index."""
        with self._lock:
            keys = self._indices[index_name].get(value, ())
            return [self._items[k] for k in keys]

    def index_keys(self, index_name: str, value: str) -> _Keys[K]:
        with self._lock:
            return sorted(self._indices[index_name].get(value, ()))  # type: ignore[type-var]

    def index_values(self, index_name: str) -> StrList:
        """Every value ``index_name`` holds some object under."""
        with self._lock:
            return list(self._indices[index_name])

    # ---- write side -----------------------------------------------------------------

    def add_indexer(self, name: str, func: Callable[[V], Iterable[str]]) -> None:
        """Add an index; objects already stored are indexed at once (here ``func`` may raise)."""
        with self._lock:
            if name in self._indexers:
                raise ValueError(f"indexer {name!r} already exists")
            self._indexers[name] = func
            index: dict[str, set[K]] = {}
            for key, obj in self._items.items():
                for value in func(obj):
                    index.setdefault(value, set()).add(key)
            self._indices[name] = index

    def add(self, key: K, obj: V) -> V | None:
        """Store ``obj`` under ``key``; returns the object it replaced, if any."""
        with self._lock:
            old = self._items.get(key)
            if old is not None:
                self._index_remove(key, old)
            self._items[key] = obj
            self._index_add(key, obj)
            return old

    # Adding and updating are one operation, as in client-go; both names read well at call sites.
    update = add

    def delete(self, key: K) -> V | None:
        """Remove ``key``; returns the object that was stored, if any."""
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._index_remove(key, old)
            return old

    def replace(self, items: Mapping[K, V]) -> dict[K, V]:
        """Make the store exactly ``items`` (key -> object), reindexed; returns what it held before."""
        with self._lock:
            old, self._items = self._items, dict(items)
            self._indices = {name: {} for name in self._indexers}
            for key, obj in self._items.items():
                self._index_add(key, obj)
            return old

    # ---- indices (callers hold the lock) -----------------------------------------------

    def _index_add(self, key: K, obj: V) -> None:
        for name, func in self._indexers.items():
            index = self._indices[name]
            for value in _safe_index(func, obj, name, key):
                index.setdefault(value, set()).add(key)

    def _index_remove(self, key: K, obj: V) -> None:
        for name, func in self._indexers.items():
            index = self._indices[name]
            for value in _safe_index(func, obj, name, key):
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]


class ThreadSafeStore(KeyedStore[str, Obj]):
    """The Kubernetes informers' store: wire objects by ``namespace/name`` (or ``name``)."""


def _safe_index(func: Callable[[V], Iterable[str]], obj: V, name: str, key: Hashable) -> StrList:
    try:
        return list(func(obj))
    except Exception:
        log.exception("indexer %s failed on %s", name, key)
        return []
