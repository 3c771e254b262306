"""Kubernetes Events (core/v1) for objects we act on, aggregated like client-go's recorder.

Why: operators read ``kubectl describe pod`` first. Why async and aggregated: a reconcile
must never wait on, or fail because of, an Event, and a condition that repeats every
sync must bump ``count`` on one Event rather than flood etcd with new ones.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from collections import OrderedDict
from typing import Literal

import attrs
from kubernetes.client import ApiClient

from sunk.base.fence import LeaseFence, fenced
from sunk.base.fence import current as current_fence
from sunk.base.times import rfc3339
from sunk.kube import client as kc
from sunk.kube.resources import EVENTS
from sunk.model.types import Obj

log = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]
NORMAL: EventType = "Normal"
WARNING: EventType = "Warning"
MAX_MESSAGE = 1024  # the events API's note limit; longer messages are truncated


@attrs.frozen
class _Pending:
    obj_ref: Obj
    type: EventType
    reason: str
    message: str
    action: str | None
    at: float
    fence: LeaseFence | None = None  # the recording thread's: a reconcile's Event is a leader's write too


@attrs.define
class _Seen:
    namespace: str
    name: str
    count: int


class EventRecorder:
    """Records Events in a background thread; ``event()`` never blocks on the API or raises.

    Repeats of the same (object, type, reason, message) patch ``count`` and
    ``lastTimestamp`` of the Event already written. The aggregation cache is an LRU of
    ``cache_size`` entries; the send queue holds ``queue_size`` events and drops (with a
    log line) when full, so memory is bounded however hard callers push.
    """

    def __init__(
        self,
        api_client: ApiClient,
        component: str,
        *,
        host: str | None = None,
        reporting_instance: str | None = None,
        cache_size: int = 4096,
        queue_size: int = 1000,
    ):
        self.api = api_client
        self.component = component
        self.host = host or socket.gethostname()
        self.reporting_instance = reporting_instance or f"{component}-{self.host}"
        self.cache_size = cache_size
        self.dropped = 0
        self.errors = 0
        self._cache: OrderedDict[tuple[str, ...], _Seen] = OrderedDict()
        self._queue: queue.Queue[_Pending | None] = queue.Queue(maxsize=queue_size)
        self._thread = threading.Thread(target=self._run, name=f"events-{component}", daemon=True)
        self._thread.start()

    # ---- callers ----------------------------------------------------------------------

    def event(self, obj: Obj, type: EventType, reason: str, message: str, *, action: str | None = None) -> None:
        try:
            pending = _Pending(_reference(obj), type, reason, message[:MAX_MESSAGE], action, time.time(),
                               current_fence())
            self._queue.put_nowait(pending)
        except queue.Full:
            self.dropped += 1
            log.warning("event recorder %s: queue full, dropped %s %s", self.component, reason, message[:80])
        except Exception:  # a malformed object must not break the caller's reconcile
            self.errors += 1
            log.exception("event recorder %s: could not record %s", self.component, reason)

    def normal(self, obj: Obj, reason: str, message: str, *, action: str | None = None) -> None:
        self.event(obj, NORMAL, reason, message, action=action)

    def warning(self, obj: Obj, reason: str, message: str, *, action: str | None = None) -> None:
        self.event(obj, WARNING, reason, message, action=action)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every event recorded so far has been sent (or failed). For tests and shutdown."""
        q = self._queue
        with q.all_tasks_done:
            return q.all_tasks_done.wait_for(lambda: q.unfinished_tasks == 0, timeout)

    def stop(self, timeout: float = 5.0) -> None:
        self.flush(timeout)
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass
        self._thread.join(timeout)

    # ---- sender thread ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            pending = self._queue.get()
            try:
                if pending is None:
                    return
                with fenced(pending.fence):  # (sent later, on this thread: a lost Lease still stops it)
                    self._send(pending)
            except Exception as exc:  # logged, never raised: events are best effort
                self.errors += 1
                reason = pending.reason if pending else ""
                log.warning("event recorder %s: event %s not recorded: %s", self.component, reason, exc)
            finally:
                self._queue.task_done()

    def _send(self, p: _Pending) -> None:
        ref = p.obj_ref
        key = (ref.get("uid") or "", ref.get("namespace") or "", ref["kind"], ref["name"], p.type, p.reason, p.message)
        seen = self._cache.get(key)
        if seen is not None:
            try:
                kc.patch(
                    self.api,
                    EVENTS,
                    seen.name,
                    {"count": seen.count + 1, "lastTimestamp": rfc3339(p.at)},
                    seen.namespace,
                )
                seen.count += 1
                self._cache.move_to_end(key)
                return
            except kc.ApiError as exc:
                if not exc.not_found:  # expired by the apiserver's event TTL: create anew
                    raise
                del self._cache[key]
        namespace = ref.get("namespace") or "default"  # cluster-scoped objects: client-go's choice
        name = f"{ref['name']}.{time.time_ns():x}"
        body: Obj = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": ref,
            "reason": p.reason,
            "message": p.message,
            "type": p.type,
            "source": {"component": self.component, "host": self.host},
            "firstTimestamp": rfc3339(p.at),
            "lastTimestamp": rfc3339(p.at),
            "count": 1,
            "reportingComponent": self.component,
            "reportingInstance": self.reporting_instance,
        }
        if p.action:
            body["action"] = p.action
        kc.create(self.api, EVENTS, body, namespace)
        self._cache[key] = _Seen(namespace, name, 1)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)


def _reference(obj: Obj) -> Obj:
    """An ObjectReference to a wire object (which must carry kind and apiVersion)."""
    meta = obj.get("metadata") or {}
    ref: Obj = {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"]}
    for src, dst in (("namespace", "namespace"), ("uid", "uid"), ("resourceVersion", "resourceVersion")):
        if meta.get(src):
            ref[dst] = meta[src]
    return ref
