"""List-then-watch cache of one resource, with event handlers and indexes (client-go's informer).

Why our own: the wire-dict convention, and full control of resourceVersion, bookmarks,
410 Gone and reconnects, which is where informers lose events if done carelessly.

Guarantees:
- After ``has_synced()``, the store reflects the apiserver as of some resourceVersion, and
  every change after it reaches the handlers, in order, exactly as add/update/delete.
- A 410 (expired resourceVersion, as HTTP status or as a watch ERROR event) or a
  too-large resourceVersion (apiserver restarted onto a fresh etcd) triggers a relist,
  and the relist is diffed against the store so that handlers still see every
  add/update/delete that happened meanwhile. A delete seen only through a relist carries
  the last object the informer knew (client-go's DeletedFinalStateUnknown, unwrapped).
- Connection errors (apiserver restart) are retried with capped exponential backoff,
  resuming the watch from the last resourceVersion, so nothing is relisted needlessly.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

import attrs
import urllib3
from kubernetes.client import ApiClient

from sunk.backoff import Backoff
from sunk.kube import client as kc
from sunk.kube.resources import Resource, object_key
from sunk.types import Obj

log = logging.getLogger(__name__)

IndexFunc = Callable[[Obj], Iterable[str]]
AddFunc = Callable[[Obj], None]
UpdateFunc = Callable[[Obj, Obj], None]
DeleteFunc = Callable[[Obj], None]
# Aliases: the classes below define a method named ``list``, which shadows the builtin there.
ObjList = list[Obj]
StrList = list[str]

DEFAULT_WATCH_TIMEOUT = 300  # seconds; the apiserver ends the watch, so connections recycle
# Watches that fail on the server side this many times in a row fall back to a relist.
_MAX_WATCH_FAILURES_BEFORE_RELIST = 3


class Handler(Protocol):
    def on_add(self, obj: Obj) -> None: ...
    def on_update(self, old: Obj, new: Obj) -> None: ...
    def on_delete(self, obj: Obj) -> None: ...


@attrs.define
class FuncHandler:
    """A Handler from up to three plain functions."""

    add: AddFunc | None = None
    update: UpdateFunc | None = None
    delete: DeleteFunc | None = None

    def on_add(self, obj: Obj) -> None:
        if self.add:
            self.add(obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        if self.update:
            self.update(old, new)

    def on_delete(self, obj: Obj) -> None:
        if self.delete:
            self.delete(obj)


@attrs.define
class InformerStats:
    """Counters, for metrics and for tests that must prove which path ran."""

    lists: int = 0
    watches: int = 0
    events: int = 0
    bookmarks: int = 0
    relists_after_gone: int = 0
    relists_after_too_large: int = 0
    connection_errors: int = 0
    watch_errors: int = 0


class _Gone(Exception):
    """The resourceVersion we hold is no longer served: relist."""


class _TooLarge(Exception):
    """Our resourceVersion is ahead of the apiserver (its etcd was reset): relist."""


class _WatchFailed(Exception):
    """The server rejected or broke the watch; retry from the same resourceVersion."""


def pod_node_name(pod: Obj) -> list[str]:
    """Indexer: pods by ``spec.nodeName`` (unbound pods are not indexed)."""
    node = (pod.get("spec") or {}).get("nodeName")
    return [node] if node else []


def resource_version(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


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
        self.api = api_client
        self.resource = Resource.of(resource)
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.watch_timeout_seconds = watch_timeout_seconds
        self.page_size = page_size
        self.name = name or f"{self.resource.plural}@{namespace or '*'}"
        self.stats = InformerStats()
        self._transform = transform or (lambda obj: obj)
        self._backoff = Backoff(backoff_initial, backoff_cap)

        self._lock = threading.RLock()  # guards store and indices; held briefly
        self._dispatch_lock = threading.RLock()  # orders store changes with handler calls
        self._store: dict[str, Obj] = {}
        self._indexers: dict[str, IndexFunc] = {}
        self._indices: dict[str, dict[str, set[str]]] = {}
        self._handlers: list[Handler] = []

        self._rv: str | None = None
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._resp: urllib3.BaseHTTPResponse | None = None
        self._resp_lock = threading.Lock()
        self._forced_rv: str | None = None
        self._reconnecting = False  # the last attempt could not reach the apiserver
        self._thread: threading.Thread | None = None

    # ---- read side ------------------------------------------------------------------

    def get(self, key: str) -> Obj | None:
        """The cached object for ``namespace/name`` (or ``name``). Do not mutate it."""
        with self._lock:
            return self._store.get(key)

    def list(self) -> ObjList:
        with self._lock:
            return list(self._store.values())

    def keys(self) -> StrList:
        with self._lock:
            return list(self._store)

    def by_index(self, index_name: str, value: str) -> ObjList:
        with self._lock:
            keys = self._indices[index_name].get(value, ())
            return [self._store[k] for k in keys]

    def index_keys(self, index_name: str, value: str) -> StrList:
        with self._lock:
            return sorted(self._indices[index_name].get(value, ()))

    def has_synced(self) -> bool:
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    @property
    def resource_version(self) -> str | None:
        """The last resourceVersion seen (list, event or bookmark)."""
        return self._rv

    # ---- configuration ----------------------------------------------------------------

    def add_indexer(self, name: str, func: IndexFunc) -> None:
        """Add an index; existing objects are indexed at once."""
        with self._lock:
            if name in self._indexers:
                raise ValueError(f"indexer {name!r} already exists")
            self._indexers[name] = func
            index: dict[str, set[str]] = {}
            for key, obj in self._store.items():
                for value in func(obj):
                    index.setdefault(value, set()).add(key)
            self._indices[name] = index

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
        with self._dispatch_lock:
            self._handlers.append(h)
            for obj in self.list():
                self._call(h.on_add, obj)
        return h

    # ---- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"informer {self.name} already started")
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        self._stop.set()
        self._interrupt()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def restart_watch(self, resource_version: str | None = None) -> None:
        """Drop the current watch and resume from ``resource_version`` (default: the last seen).

        For operations and tests: resuming from an expired version exercises the real
        410 -> relist -> diff path against a real apiserver.
        """
        self._forced_rv = resource_version
        self._interrupt()

    def _interrupt(self) -> None:
        with self._resp_lock:
            resp = self._resp
        if resp is None:
            return
        try:
            resp.shutdown()  # wakes the blocked read; close() alone would not
        except (RuntimeError, ValueError, OSError):
            pass

    # ---- the loop -------------------------------------------------------------------------

    def _run(self) -> None:
        server_failures = 0
        while not self._stop.is_set():
            try:
                if self._rv is not None and self._reconnecting:
                    self._check_not_ahead()
                if self._rv is None:
                    self._relist()
                    server_failures = 0
                self._reconnecting = False
                self._watch()
                server_failures = 0
            except _Gone:
                self.stats.relists_after_gone += 1
                log.info("informer %s: resourceVersion %s expired (410); relisting", self.name, self._rv)
                self._rv = None
            except _TooLarge:
                self.stats.relists_after_too_large += 1
                log.warning("informer %s: resourceVersion %s is ahead of the apiserver; relisting", self.name, self._rv)
                self._rv = None
            except (_WatchFailed, kc.ApiError) as exc:
                self.stats.watch_errors += 1
                server_failures += 1
                if server_failures >= _MAX_WATCH_FAILURES_BEFORE_RELIST:
                    self._rv = None
                    server_failures = 0
                self._sleep_backoff(f"server error: {exc}")
            except kc.ConnectionFailed as exc:
                self.stats.connection_errors += 1
                self._reconnecting = True
                self._sleep_backoff(f"connection failed: {exc}")
            except Exception:  # never let the informer thread die
                self.stats.watch_errors += 1
                log.exception("informer %s: unexpected error", self.name)
                self._sleep_backoff("unexpected error")

    def _check_not_ahead(self) -> None:
        """After an outage, make sure the apiserver's store has not gone back in time.

        A watch from a resourceVersion the store has not reached yet is not refused: the
        apiserver silently holds it until the store catches up (measured on 1.34), and
        every change until then would be missed. That happens when etcd was restored or
        recreated while we were disconnected. One quick list of a single item tells us the
        current resourceVersion. If ours is ahead of it, we relist.
        """
        page = kc.request(
            self.api,
            "GET",
            self.resource.path(self.namespace),
            query={"limit": 1, "labelSelector": self.label_selector, "fieldSelector": self.field_selector},
        )
        current = str((page.get("metadata") or {}).get("resourceVersion") or "")
        try:
            ahead = self._rv is not None and int(self._rv) > int(current)
        except ValueError:  # resourceVersions are opaque; only etcd's integers can be compared
            return
        if ahead:
            raise _TooLarge(f"our resourceVersion {self._rv} is ahead of the apiserver's {current}")

    def _sleep_backoff(self, why: str) -> None:
        if self._stop.is_set():
            return
        delay = self._backoff.next()
        log.warning("informer %s: %s; retrying in %.2fs", self.name, why, delay)
        self._stop.wait(delay)

    def _relist(self) -> None:
        items: list[Obj] = []
        cont: str | None = None
        rv = ""
        while True:
            try:
                page = kc.request(
                    self.api,
                    "GET",
                    self.resource.path(self.namespace),
                    query={
                        "labelSelector": self.label_selector,
                        "fieldSelector": self.field_selector,
                        "limit": self.page_size,
                        "continue": cont,
                    },
                )
            except kc.ApiError as exc:
                if exc.gone and cont:  # continue token expired mid-list: start over
                    items, cont = [], None
                    continue
                raise
            items.extend(self._transform(obj) for obj in kc.fill_type(page, self.resource))
            meta = page.get("metadata") or {}
            rv = str(meta.get("resourceVersion") or "")
            cont = meta.get("continue")
            if not cont:
                break
        self.stats.lists += 1
        self._replace(items, rv)
        self._backoff.reset()

    def _replace(self, items: Sequence[Obj], rv: str) -> None:
        """Swap in a fresh list, and tell handlers the difference from what they saw."""
        with self._dispatch_lock:
            new = {object_key(o): o for o in items}
            with self._lock:
                old = self._store
                self._store = new
                self._indices = {n: {} for n in self._indexers}
                for key, obj in new.items():
                    self._index_add(key, obj)
            self._rv = rv
            for key, obj in new.items():
                prev = old.get(key)
                if prev is None:
                    self._dispatch_add(obj)
                elif resource_version(prev) != resource_version(obj):
                    self._dispatch_update(prev, obj)
            for key, prev in old.items():
                if key not in new:
                    self._dispatch_delete(prev)
            self._synced.set()

    def _watch(self) -> None:
        if self._stop.is_set():
            return
        rv, self._forced_rv = (self._forced_rv or self._rv), None
        started = time.monotonic()
        try:
            resp = self._open_watch(rv)
        except kc.ApiError as exc:  # 410 or "too large" may come as an HTTP status, not an event
            err = _status_error({**exc.body, "code": exc.status})
            if isinstance(err, _Gone | _TooLarge):
                raise err from exc
            raise
        with self._resp_lock:
            self._resp = resp
        self.stats.watches += 1
        events = 0
        try:
            if not self._interrupted():
                for event in _json_lines(resp):
                    events += 1
                    self._handle_event(event)
                    if events == 1:
                        self._backoff.reset()
                    if self._interrupted():
                        break
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if not self._interrupted():
                raise kc.ConnectionFailed(f"watch {self.name}: {exc}") from exc
        finally:
            with self._resp_lock:
                self._resp = None
            resp.close()
            resp.release_conn()
        # A clean end is normally the server-side timeout. An instant empty end is suspicious.
        if events == 0 and time.monotonic() - started < 1.0 and not self._interrupted():
            raise _WatchFailed("watch closed immediately without events")

    def _open_watch(self, rv: str | None) -> urllib3.BaseHTTPResponse:
        return kc.open_request(
            self.api,
            "GET",
            self.resource.path(self.namespace),
            query={
                "watch": True,
                "resourceVersion": rv,
                "allowWatchBookmarks": True,
                "timeoutSeconds": self.watch_timeout_seconds,
                "labelSelector": self.label_selector,
                "fieldSelector": self.field_selector,
            },
            # No read may block longer than the server-side timeout plus slack.
            timeout=(kc.DEFAULT_TIMEOUT[0], self.watch_timeout_seconds + 30),
        )

    def _interrupted(self) -> bool:
        """Stopped, or a restart_watch() is pending: end the current watch quietly."""
        return self._stop.is_set() or self._forced_rv is not None

    def _handle_event(self, event: Obj) -> None:
        etype = event.get("type")
        obj = event.get("object") or {}
        self.stats.events += 1
        if etype == "ERROR":
            raise _status_error(obj)
        if etype == "BOOKMARK":
            self.stats.bookmarks += 1
            self._rv = resource_version(obj) or self._rv
            return
        if etype not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("informer %s: unknown watch event type %r", self.name, etype)
            return
        obj = self._transform(obj)
        key = object_key(obj)
        with self._dispatch_lock:
            with self._lock:
                old = self._store.get(key)
                if old is not None:
                    self._index_remove(key, old)
                if etype == "DELETED":
                    self._store.pop(key, None)
                else:
                    self._store[key] = obj
                    self._index_add(key, obj)
            self._rv = resource_version(obj) or self._rv
            if etype == "DELETED":
                self._dispatch_delete(obj)
            elif old is None:
                self._dispatch_add(obj)
            else:
                self._dispatch_update(old, obj)

    # ---- indices and dispatch -------------------------------------------------------------

    def _index_add(self, key: str, obj: Obj) -> None:
        for name, func in self._indexers.items():
            index = self._indices[name]
            for value in _safe_index(func, obj, name):
                index.setdefault(value, set()).add(key)

    def _index_remove(self, key: str, obj: Obj) -> None:
        for name, func in self._indexers.items():
            index = self._indices[name]
            for value in _safe_index(func, obj, name):
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]

    def _dispatch_add(self, obj: Obj) -> None:
        for h in self._handlers:
            self._call(h.on_add, obj)

    def _dispatch_update(self, old: Obj, new: Obj) -> None:
        for h in self._handlers:
            self._call(h.on_update, old, new)

    def _dispatch_delete(self, obj: Obj) -> None:
        for h in self._handlers:
            self._call(h.on_delete, obj)

    def _call(self, func: Callable[..., None], *args: Obj) -> None:
        try:
            func(*args)
        except Exception:
            log.exception("informer %s: handler %r failed", self.name, func)


def _safe_index(func: IndexFunc, obj: Obj, name: str) -> StrList:
    try:
        return list(func(obj))
    except Exception:
        log.exception("indexer %s failed on %s", name, object_key(obj))
        return []


def _status_error(status: Obj) -> Exception:
    code = status.get("code")
    reason = status.get("reason")
    causes = (status.get("details") or {}).get("causes") or []
    if code == 410 or reason in ("Expired", "Gone"):
        return _Gone(status.get("message", "gone"))
    if any(c.get("reason") == "ResourceVersionTooLarge" for c in causes) or "Too large resource version" in str(
        status.get("message", "")
    ):
        return _TooLarge(status.get("message", "too large"))
    return _WatchFailed(f"watch ERROR event: {code} {reason}: {status.get('message')}")


def _json_lines(resp: urllib3.BaseHTTPResponse) -> Iterator[Obj]:
    """Watch events, one JSON object per line, yielded as soon as each line is complete."""
    buf = b""
    for chunk in resp.stream(amt=None):
        buf += chunk
        while True:
            line, sep, rest = buf.partition(b"\n")
            if not sep:
                break
            buf = rest
            if line.strip():
                yield json.loads(line)
    if buf.strip():
        yield json.loads(buf)


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
            inf._stop.set()
            inf._interrupt()
        for inf in self.informers.values():
            inf.stop(timeout)
