"""Keeps a store in step with the apiserver by list-then-watch (client-go's Reflector).

Why our own: the wire-dict convention, and full control of resourceVersion, bookmarks,
410 Gone and reconnects, which is where informers lose events if done carelessly.

Guarantees:
- After ``has_synced()``, the store reflects the apiserver as of some resourceVersion, and
  every change after it reaches the sink, in order, exactly as add/update/delete.
- A 410 (expired resourceVersion, as HTTP status or as a watch ERROR event) or a
  too-large resourceVersion (apiserver restarted onto a fresh etcd) triggers a relist,
  and the relist is diffed against the store so that the sink still sees every
  add/update/delete that happened meanwhile. A delete seen only through a relist carries
  the last object the store held (client-go's DeletedFinalStateUnknown, unwrapped).
- Connection errors (apiserver restart) are retried with capped exponential backoff,
  resuming the watch from the last resourceVersion, so nothing is relisted needlessly.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import attrs
import urllib3
from kubernetes.client import ApiClient

from sunk.base.backoff import Backoff
from sunk.kube import client as kc
from sunk.kube.resources import Resource, object_key
from sunk.kube.store import ChangeHandler, ThreadSafeStore
from sunk.model.types import Obj

log = logging.getLogger(__name__)

DEFAULT_WATCH_TIMEOUT = 300  # seconds; the apiserver ends the watch, so connections recycle
# Watches that fail on the server side this many times in a row fall back to a relist.
_MAX_WATCH_FAILURES_BEFORE_RELIST = 3


# Receives changes to a store, in order: the reflector reports to one (the informer's fan-out), and the
# informer's handlers are the same shape, that of the Slurm informers' handlers too.
Handler = ChangeHandler[Obj]


@attrs.define
class ReflectorStats:
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


def resource_version(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def report_relist(old: Mapping[str, Obj], new: Mapping[str, Obj], sink: Handler) -> None:
    """Tell ``sink`` what a relist changed, as the watch events it stands in for.

    Adds and updates in list order (an update only when the resourceVersion moved, so an
    unchanged object is not reported), then deletes, each carrying the last known object.
    """
    for key, obj in new.items():
        prev = old.get(key)
        if prev is None:
            sink.on_add(obj)
        elif resource_version(prev) != resource_version(obj):
            sink.on_update(prev, obj)
    for key, prev in old.items():
        if key not in new:
            sink.on_delete(prev)


class Reflector:
    """Lists, then watches, one resource in one namespace (or cluster-wide) into ``store``,
    and reports each change to ``sink``.

    ``run()`` blocks until ``stop()``; the informer runs it on its own thread. ``transform``
    trims each object before it is stored (client-go's SetTransform).
    """

    def __init__(
        self,
        api_client: ApiClient,
        resource: Resource,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        *,
        store: ThreadSafeStore,
        sink: Handler,
        transform: Callable[[Obj], Obj] | None = None,
        watch_timeout_seconds: int = DEFAULT_WATCH_TIMEOUT,
        page_size: int = 500,
        backoff: Backoff | None = None,
        name: str | None = None,
    ):
        self.api = api_client
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.watch_timeout_seconds = watch_timeout_seconds
        self.page_size = page_size
        self.name = name or f"{resource.plural}@{namespace or '*'}"
        self.stats = ReflectorStats()
        # Held while a change is applied to the store and reported to the sink. Hold it to
        # see the store and the stream of changes consistently (the informer does, to
        # replay the store to a handler added late).
        self.lock = threading.RLock()
        self._store = store
        self._sink = sink
        self._trim = transform
        self._backoff = backoff or Backoff(0.5, 30.0)

        self._rv: str | None = None
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._resp: urllib3.BaseHTTPResponse | None = None
        self._resp_lock = threading.Lock()
        self._forced_rv: str | None = None
        self._reconnecting = False  # the last attempt could not reach the apiserver

    # ---- state ------------------------------------------------------------------------

    def has_synced(self) -> bool:
        """A complete list has reached the store (and the sink)."""
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    @property
    def resource_version(self) -> str | None:
        """The last resourceVersion seen (list, event or bookmark)."""
        return self._rv

    # ---- control (any thread) -----------------------------------------------------------

    def stop(self) -> None:
        """Ask ``run()`` to return, and end a blocked watch read at once; does not wait."""
        self._stop.set()
        self._interrupt()

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

    # ---- what the watch loop feeds into the store (tests feed them directly) ---------------

    def apply_list(self, items: Sequence[Obj], rv: str) -> None:
        """Make the store exactly ``items``, a complete list as of ``rv``, and report the difference."""
        new = {object_key(o): o for o in items}
        with self.lock:
            old = self._store.replace(new)
            self._rv = rv
            report_relist(old, new, self._sink)
            self._synced.set()

    def _transform(self, obj: Obj) -> Obj:
        """``obj`` through the store's transform; one the transform cannot take (what a tenant wrote, shaped as no
        reader expects) is kept whole and logged, never the watch stalled on it: the event would come again."""
        if self._trim is None:
            return obj
        try:
            return self._trim(obj)
        except Exception as exc:  # (any failure: the store must still see the object)
            meta = obj.get("metadata") if isinstance(obj, Mapping) else None
            log.warning("informer %s: %s/%s kept whole, its transform failed: %s: %s", self.name,
                        (meta or {}).get("namespace", ""), (meta or {}).get("name", "?"), type(exc).__name__,
                        str(exc)[:200])
            return obj

    def _kept_or_transformed(self, obj: Obj) -> Obj:
        """A relisted object as stored, when the store holds that very version (its key, uid and resourceVersion):
        a relist after a 410 lists mostly what did not change, and transforming it again cost a transform per
        object (seconds at 100k Pods) and made every stored object young again for the collector (``freeze_heap``
        froze the first ones). Otherwise ``obj`` through the transform."""
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        if isinstance(meta, Mapping) and meta.get("resourceVersion") and meta.get("name"):
            stored = self._store.get(object_key(obj))
            stored_meta = (stored or {}).get("metadata") or {}
            if (stored is not None and stored_meta.get("resourceVersion") == meta["resourceVersion"]
                    and stored_meta.get("uid") == meta.get("uid")):
                return stored
        return self._transform(obj)

    def apply_event(self, event: Obj) -> None:
        """Apply one watch event to the store and report it; an ERROR event raises (the loop handles it)."""
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
        with self.lock:
            old = self._store.delete(key) if etype == "DELETED" else self._store.update(key, obj)
            self._rv = resource_version(obj) or self._rv
            if etype == "DELETED":
                self._sink.on_delete(obj)
            elif old is None:
                self._sink.on_add(obj)
            else:
                self._sink.on_update(old, obj)

    # ---- the loop -------------------------------------------------------------------------

    def run(self) -> None:
        """List and watch until ``stop()``. Never raises: every error is retried."""
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
            items.extend(self._kept_or_transformed(obj) for obj in kc.fill_type(page, self.resource))
            meta = page.get("metadata") or {}
            rv = str(meta.get("resourceVersion") or "")
            cont = meta.get("continue")
            if not cont:
                break
        self.stats.lists += 1
        self.apply_list(items, rv)
        self._backoff.reset()

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
                    self.apply_event(event)
                    if events == 1:
                        self._backoff.reset()
                    if self._interrupted():
                        break
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            # ValueError: a line that is not JSON (or not UTF-8), as a read cut short by stop() can leave
            # behind; a broken stream like any other, resumed from the last resourceVersion.
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
                yield kc.decode_json(line)
    if buf.strip():
        try:
            event = kc.decode_json(buf)
        except (ValueError, RecursionError):  # (UnicodeDecodeError too) cut mid-event: stopped, or broken
            log.debug("watch stream ended inside an event (%d bytes); the watch resumes from the last "
                      "resourceVersion, so it comes again", len(buf))
            return
        yield event
