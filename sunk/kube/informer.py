"""Cache of one resource with event handlers and indexes (client-go's SharedIndexInformer).

The informer is the public face of three parts, as in client-go's tools/cache:
- ``store.ThreadSafeStore`` holds the objects and their indexes;
- ``reflector.Reflector`` lists and watches the apiserver into it (resourceVersions,
  410 Gone, relist diffs, reconnects with backoff; its docstring states the guarantees);
- the informer runs the reflector on a thread and hands every change to its handlers.

Handlers see exactly the changes the store goes through, in order: after ``has_synced()``,
the store reflects the apiserver as of some resourceVersion, and every change after it
reaches the handlers as add/update/delete, relists and reconnects included.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from kubernetes.client import ApiClient

from sunk.base.backoff import Backoff
from sunk.kube.reflector import DEFAULT_WATCH_TIMEOUT, Handler, Reflector, ReflectorStats
from sunk.kube.resources import Resource
from sunk.kube.store import FuncHandler, IndexFunc, ObjList, StrList, ThreadSafeStore, pod_node_name
from sunk.model.types import Obj

__all__ = [
    "DEFAULT_WATCH_TIMEOUT",
    "AddFunc",
    "DeleteFunc",
    "FuncHandler",
    "Handler",
    "IndexFunc",
    "Informer",
    "MultiNamespaceInformer",
    "UpdateFunc",
    "pod_node_name",
]

log = logging.getLogger(__name__)

AddFunc = Callable[[Obj], None]
UpdateFunc = Callable[[Obj, Obj], None]
DeleteFunc = Callable[[Obj], None]


class _Fanout:
    """The reflector's sink: every change to every handler, in registration order.

    A handler that raises is logged; the other handlers and the informer go on.
    """

    def __init__(self, name: str):
        self.name = name
        self.handlers: list[Handler] = []

    def on_add(self, obj: Obj) -> None:
        for h in self.handlers:
            self.call(h.on_add, obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        for h in self.handlers:
            self.call(h.on_update, old, new)

    def on_delete(self, obj: Obj) -> None:
        for h in self.handlers:
            self.call(h.on_delete, obj)

    def call(self, func: Callable[..., None], *args: Obj) -> None:
        try:
            func(*args)
        except Exception:
            log.exception("informer %s: handler %r failed", self.name, func)


class Informer:
    """Cache of one resource in one namespace (or cluster-wide), kept current by list+watch."""

    def __init__(
        self,
        api_client: ApiClient,
        resource: Resource | tuple[str, str, str],
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        *,
        watch_timeout_seconds: int = DEFAULT_WATCH_TIMEOUT,
        page_size: int = 500,
        backoff_initial: float = 0.5,
        backoff_cap: float = 30.0,
        name: str | None = None,
        transform: Callable[[Obj], Obj] | None = None,
    ):
        """``transform`` trims each object before it is stored (client-go's SetTransform): a
        cache of a thousand Nodes needs their taints, not their images and conditions."""
        self.resource = Resource.of(resource)
        self.namespace = namespace
        self.name = name or f"{self.resource.plural}@{namespace or '*'}"
        self._store = ThreadSafeStore()
        self._fanout = _Fanout(self.name)
        self.reflector = Reflector(
            api_client,
            self.resource,
            namespace,
            label_selector,
            field_selector,
            store=self._store,
            sink=self._fanout,
            transform=transform,
            watch_timeout_seconds=watch_timeout_seconds,
            page_size=page_size,
            backoff=Backoff(backoff_initial, backoff_cap),
            name=self.name,
        )
        self._thread: threading.Thread | None = None

    # ---- read side ------------------------------------------------------------------

    def get(self, key: str) -> Obj | None:
        """The cached object for ``namespace/name`` (or ``name``). Do not mutate it."""
        return self._store.get(key)

    def list(self) -> ObjList:
        return self._store.list()

    def keys(self) -> StrList:
        return self._store.keys()

    def by_index(self, index_name: str, value: str) -> ObjList:
        return self._store.by_index(index_name, value)

    def index_keys(self, index_name: str, value: str) -> StrList:
        return self._store.index_keys(index_name, value)

    def has_synced(self) -> bool:
        return self.reflector.has_synced()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self.reflector.wait_for_sync(timeout)

    @property
    def resource_version(self) -> str | None:
        """The last resourceVersion seen (list, event or bookmark)."""
        return self.reflector.resource_version

    @property
    def stats(self) -> ReflectorStats:
        return self.reflector.stats

    # ---- configuration ----------------------------------------------------------------

    def add_indexer(self, name: str, func: IndexFunc) -> None:
        """Add an index; existing objects are indexed at once."""
        self._store.add_indexer(name, func)

    def add_handler(
        self,
        handler: Handler | None = None,
        *,
        on_add: AddFunc | None = None,
        on_update: UpdateFunc | None = None,
        on_delete: DeleteFunc | None = None,
    ) -> Handler:
        """Register a handler. Objects already cached are replayed to it as adds, as client-go does.

        Handlers run on the informer thread, in event order; keep them quick (enqueue a key).
        An exception in a handler is logged and does not stop the informer.
        """
        h: Handler = handler or FuncHandler(on_add, on_update, on_delete)
        with self.reflector.lock:  # no change lands between the replay and the first event
            self._fanout.handlers.append(h)
            for obj in self.list():
                self._fanout.call(h.on_add, obj)
        return h

    # ---- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"informer {self.name} already started")
        self._thread = threading.Thread(target=self.reflector.run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        self.reflector.stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def restart_watch(self, resource_version: str | None = None) -> None:
        """Drop the current watch and resume from ``resource_version`` (default: the last seen).

        For operations and tests: resuming from an expired version exercises the real
        410 -> relist -> diff path against a real apiserver.
        """
        self.reflector.restart_watch(resource_version)


class MultiNamespaceInformer:
    """One informer per namespace behind the Informer read interface.

    The scheduler and Syncer watch a list of namespaces (``--watch-namespace``); RBAC may
    grant only those, so a cluster-wide watch is not always allowed. An empty list means
    cluster-wide, with a single informer.
    """

    def __init__(
        self,
        api_client: ApiClient,
        resource: Resource | tuple[str, str, str],
        namespaces: Sequence[str] | None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        **kwargs: Any,
    ):
        self.resource = Resource.of(resource)
        spaces: list[str | None] = list(dict.fromkeys(namespaces)) if namespaces else [None]
        self.informers: dict[str | None, Informer] = {
            ns: Informer(api_client, self.resource, ns, label_selector, field_selector, **kwargs) for ns in spaces
        }

    def _for_key(self, key: str) -> Informer | None:
        if None in self.informers:
            return self.informers[None]
        ns, _, _ = key.partition("/")
        return self.informers.get(ns)

    def get(self, key: str) -> Obj | None:
        inf = self._for_key(key)
        return inf.get(key) if inf else None

    def list(self) -> ObjList:
        return [o for inf in self.informers.values() for o in inf.list()]

    def keys(self) -> StrList:
        return [k for inf in self.informers.values() for k in inf.keys()]

    def by_index(self, index_name: str, value: str) -> ObjList:
        return [o for inf in self.informers.values() for o in inf.by_index(index_name, value)]

    def add_indexer(self, name: str, func: IndexFunc) -> None:
        for inf in self.informers.values():
            inf.add_indexer(name, func)

    def add_handler(
        self,
        handler: Handler | None = None,
        *,
        on_add: AddFunc | None = None,
        on_update: UpdateFunc | None = None,
        on_delete: DeleteFunc | None = None,
    ) -> Handler:
        h: Handler = handler or FuncHandler(on_add, on_update, on_delete)
        for inf in self.informers.values():
            inf.add_handler(h)
        return h

    def has_synced(self) -> bool:
        return all(inf.has_synced() for inf in self.informers.values())

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for inf in self.informers.values():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not inf.wait_for_sync(left):
                return False
        return True

    def start(self) -> None:
        for inf in self.informers.values():
            inf.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        for inf in self.informers.values():
            inf.reflector.stop()  # all at once, then wait for each
        for inf in self.informers.values():
            inf.stop(timeout)
