"""Reflector without an apiserver: relist diffs, watch events, error mapping, and the list/watch
loop driven through a scripted fake of the two requests it makes.

The same paths against the real apiserver: tests/cluster/test_kube_informer.py.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import urllib3
from kubernetes import client as k8s

from sunk.base.backoff import Backoff
from sunk.kube import client as kc
from sunk.kube.reflector import (
    Reflector,
    _Gone,
    _json_lines,
    _status_error,
    _TooLarge,
    _WatchFailed,
    report_relist,
)
from sunk.kube.resources import PODS
from sunk.kube.store import ThreadSafeStore, pod_node_name

WAIT = 5.0


def pod(name: str, rv: str, node: str | None = None) -> dict:
    spec = {"nodeName": node} if node else {}
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": rv}, "spec": spec}


def event(etype: str, obj: dict) -> dict:
    return {"type": etype, "object": {"kind": "Pod", "apiVersion": "v1", **obj}}


def bookmark(rv: str) -> dict:
    return {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": rv}}}


def page(rv: str, items: list[dict], cont: str | None = None) -> dict:
    meta: dict[str, Any] = {"resourceVersion": rv}
    if cont:
        meta["continue"] = cont
    return {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": items}


class Recorder:
    """A sink that records ("add", name), ("update", name, "old->new" resourceVersions), ("delete", name)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def on_add(self, obj: dict) -> None:
        self.calls.append(("add", obj["metadata"]["name"]))

    def on_update(self, old: dict, new: dict) -> None:
        rvs = f"{old['metadata']['resourceVersion']}->{new['metadata']['resourceVersion']}"
        self.calls.append(("update", new["metadata"]["name"], rvs))

    def on_delete(self, obj: dict) -> None:
        self.calls.append(("delete", obj["metadata"]["name"]))


def reflector(transform: Callable[[dict], dict] | None = None) -> tuple[Reflector, ThreadSafeStore, Recorder]:
    store, sink = ThreadSafeStore(), Recorder()
    store.add_indexer("node", pod_node_name)
    r = Reflector(k8s.ApiClient(k8s.Configuration()), PODS, "ns", None, None, store=store, sink=sink,
                  transform=transform, backoff=Backoff(0.001, 0.002), name="test")
    return r, store, sink


# ---- the pure parts ----------------------------------------------------------------------------


def test_report_relist_reports_adds_and_moved_updates_in_list_order_then_deletes():
    old = {"ns/a": pod("a", "1"), "ns/b": pod("b", "1"), "ns/c": pod("c", "1")}
    new = {"ns/d": pod("d", "4"), "ns/a": pod("a", "5"), "ns/c": pod("c", "1")}
    sink = Recorder()
    report_relist(old, new, sink)
    assert sink.calls == [("add", "d"), ("update", "a", "1->5"), ("delete", "b")]


def test_a_delete_seen_only_through_a_relist_carries_the_last_known_object():
    last = pod("b", "7", node="n1")
    seen: list[dict] = []
    sink = Recorder()
    sink.on_delete = seen.append  # type: ignore[method-assign]
    report_relist({"ns/b": last}, {}, sink)
    assert seen == [last]


def test_apply_list_replaces_the_store_and_marks_synced():
    r, store, sink = reflector()
    assert not r.has_synced() and not r.wait_for_sync(0.01)
    r.apply_list([pod("a", "1", "n1")], "10")
    assert r.has_synced() and r.resource_version == "10"
    assert store.index_keys("node", "n1") == ["ns/a"] and sink.calls == [("add", "a")]


def test_apply_event_updates_store_rv_and_sink():
    r, store, sink = reflector()
    r.apply_list([], "1")
    r.apply_event(event("ADDED", pod("a", "2", "n1")))
    r.apply_event(event("MODIFIED", pod("a", "3", "n2")))
    r.apply_event(bookmark("9"))
    assert r.resource_version == "9" and r.stats.bookmarks == 1 and r.stats.events == 3
    r.apply_event({"type": "SURPRISE", "object": {}})  # logged and skipped
    r.apply_event(event("DELETED", pod("a", "10", "n2")))
    assert store.get("ns/a") is None and store.index_keys("node", "n2") == [] and r.resource_version == "10"
    assert sink.calls == [("add", "a"), ("update", "a", "2->3"), ("delete", "a")]
    with pytest.raises(_Gone):
        r.apply_event({"type": "ERROR", "object": {"code": 410, "reason": "Expired"}})


def test_status_error_mapping():
    assert isinstance(_status_error({"code": 410, "reason": "Expired"}), _Gone)
    assert isinstance(_status_error({"code": 410}), _Gone)
    too_large = {"code": 504, "reason": "Timeout", "details": {"causes": [{"reason": "ResourceVersionTooLarge"}]}}
    assert isinstance(_status_error(too_large), _TooLarge)
    assert isinstance(_status_error({"code": 500, "message": "Too large resource version: 5"}), _TooLarge)
    assert isinstance(_status_error({"code": 500, "message": "etcd down"}), _WatchFailed)


class ChunkResp:
    def __init__(self, chunks: list[bytes]):
        self.chunks = chunks

    def stream(self, amt=None):
        yield from self.chunks


def test_json_lines_reassembles_events_split_across_chunks():
    chunks = [b'{"type":"ADDED","obj', b'ect":{}}\n{"type":"BOOK', b'MARK","object":{}}\n\n', b'{"type":"X"}']
    assert [e["type"] for e in _json_lines(ChunkResp(chunks))] == ["ADDED", "BOOKMARK", "X"]  # type: ignore[arg-type]


def test_json_lines_drops_an_event_the_stream_ended_inside():
    """A read woken by stop() (or a broken connection) ends the stream mid-event, even mid-character: no error,
    the complete events before it, and the watch resumes from the last resourceVersion, so it comes again."""
    event = '{"type":"MODIFIED","object":{"metadata":{"name":"pé"}}}'.encode()
    cut = event.index(b"\xc3") + 1  # inside the two bytes of the accented letter
    for tail in (event[:cut], event[:-5], b'{"type":'):
        chunks = [b'{"type":"ADDED","object":{}}\n', tail]
        assert [e["type"] for e in _json_lines(ChunkResp(chunks))] == ["ADDED"]  # type: ignore[arg-type]


# ---- the loop, against a scripted apiserver ---------------------------------------------------------


class WatchResp:
    """A watch stream: the scripted events, then, if ``hold``, a read that blocks until shutdown()."""

    def __init__(self, events: list[dict | bytes], hold: bool = False):
        self.lines = [e if isinstance(e, bytes) else json.dumps(e).encode() + b"\n" for e in events]  # bytes: as is
        self.hold = hold
        self._shut = threading.Event()

    def stream(self, amt=None) -> Iterator[bytes]:
        yield from self.lines
        if self.hold:
            self._shut.wait(WAIT)
            raise urllib3.exceptions.ProtocolError("connection shut down")

    def shutdown(self) -> None:
        self._shut.set()

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class FakeApiserver:
    """Answers the reflector's list pages, resourceVersion checks and watches from scripts.

    When the watch script runs out, the watch it opens holds (like a quiet apiserver) and
    ``idle`` is set: the test can look at the outcome.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.pages: list[dict | Exception] = []
        self.watches: list[list[dict | bytes] | Exception] = []
        self.current_rv = ""  # what the resourceVersion check after an outage answers
        self.list_continues: list[str | None] = []
        self.checks = 0
        self.watch_rvs: list[str | None] = []
        self.idle = threading.Event()
        monkeypatch.setattr(kc, "request", self.request)
        monkeypatch.setattr(kc, "open_request", self.open_request)

    def request(self, api: Any, method: str, path: str, *, query: dict, **_: Any) -> dict:
        assert (method, path) == ("GET", "/api/v1/namespaces/ns/pods")
        if "continue" not in query:  # limit=1: the resourceVersion check after an outage
            self.checks += 1
            return {"metadata": {"resourceVersion": self.current_rv}, "items": []}
        self.list_continues.append(query["continue"])
        answer = self.pages.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return copy.deepcopy(answer)

    def open_request(self, api: Any, method: str, path: str, *, query: dict, **_: Any) -> WatchResp:
        assert query["watch"] is True and query["allowWatchBookmarks"] is True
        self.watch_rvs.append(query["resourceVersion"])
        if not self.watches:
            self.idle.set()
            return WatchResp([], hold=True)
        answer = self.watches.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return WatchResp(answer)


@pytest.fixture
def apiserver(monkeypatch: pytest.MonkeyPatch) -> FakeApiserver:
    return FakeApiserver(monkeypatch)


@contextmanager
def running(r: Reflector, apiserver: FakeApiserver) -> Iterator[None]:
    """Run the loop until the scripts are used up, then stop it (and prove it stops)."""
    thread = threading.Thread(target=r.run, daemon=True)
    thread.start()
    try:
        assert apiserver.idle.wait(WAIT), "the reflector did not get through the script"
        yield
    finally:
        r.stop()
        thread.join(WAIT)
        assert not thread.is_alive()


def gone() -> kc.ApiError:
    return kc.ApiError(410, "Gone", {"kind": "Status", "code": 410, "reason": "Expired"})


def test_lists_then_watches_from_the_lists_resource_version(apiserver):
    apiserver.pages = [page("10", [pod("a", "5")])]
    apiserver.watches = [[event("ADDED", pod("b", "11")), event("MODIFIED", pod("a", "12")), bookmark("15")]]
    r, store, sink = reflector()
    with running(r, apiserver):
        assert sink.calls == [("add", "a"), ("add", "b"), ("update", "a", "5->12")]
        assert apiserver.watch_rvs == ["10", "15"], "resumes from the bookmark after a clean end"
        assert store.get("ns/a")["kind"] == "Pod", "list items get kind filled in"  # type: ignore[index]
        assert r.stats.lists == 1 and r.stats.bookmarks == 1 and r.resource_version == "15"


def test_a_410_on_opening_the_watch_relists_and_reports_only_the_difference(apiserver):
    apiserver.pages = [page("10", [pod("a", "1"), pod("b", "1"), pod("c", "1")]),
                       page("20", [pod("a", "1"), pod("b", "2"), pod("d", "3")])]
    apiserver.watches = [gone()]
    r, _, sink = reflector()
    with running(r, apiserver):
        assert sink.calls[3:] == [("update", "b", "1->2"), ("add", "d"), ("delete", "c")]
        assert r.stats.relists_after_gone == 1 and r.stats.lists == 2
        assert apiserver.watch_rvs == ["10", "20"]


def test_a_410_error_event_in_the_stream_relists_too(apiserver):
    apiserver.pages = [page("10", [pod("a", "1")]), page("20", [])]
    apiserver.watches = [[{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}]]
    r, _, sink = reflector()
    with running(r, apiserver):
        assert sink.calls == [("add", "a"), ("delete", "a")]
        assert r.stats.relists_after_gone == 1 and apiserver.watch_rvs == ["10", "20"]


def test_a_lost_connection_resumes_the_watch_without_relisting(apiserver):
    apiserver.pages = [page("10", [pod("a", "1")])]
    apiserver.current_rv = "12"
    apiserver.watches = [kc.ConnectionFailed("refused"), kc.ConnectionFailed("refused"),
                         [event("ADDED", pod("b", "11"))]]
    r, _, sink = reflector()
    with running(r, apiserver):
        assert r.stats.connection_errors == 2 and r.stats.lists == 1
        assert apiserver.checks == 2, "each reconnect checks the apiserver has not gone back in time"
        assert apiserver.watch_rvs == ["10", "10", "10", "11"]
        assert sink.calls == [("add", "a"), ("add", "b")]


def test_a_garbled_line_in_the_stream_is_a_broken_connection_resumed_from_the_last_version(apiserver):
    """Bytes that are not JSON (or not UTF-8) in a watch stream: the events before them count, and the watch
    resumes from the last resourceVersion like after any broken connection, with no relist."""
    apiserver.pages = [page("10", [pod("a", "1")])]
    apiserver.current_rv = "12"
    apiserver.watches = [[event("ADDED", pod("b", "11")), b'{"type":"MODIFIED","object":{"x":"\xbe\xef"}}\n',
                          event("ADDED", pod("never", "13"))],
                         [event("ADDED", pod("c", "12"))]]
    r, _, sink = reflector()
    with running(r, apiserver):
        assert sink.calls == [("add", "a"), ("add", "b"), ("add", "c")]
        assert r.stats.connection_errors == 1 and r.stats.lists == 1 and r.stats.watch_errors == 0
        assert apiserver.watch_rvs == ["10", "11", "12"]


def test_a_resource_version_ahead_of_the_apiserver_relists(apiserver):
    apiserver.pages = [page("100", [pod("a", "100")]), page("7", [pod("a", "5")])]
    apiserver.current_rv = "7"  # etcd was restored to an older revision while we were away
    apiserver.watches = [kc.ConnectionFailed("refused")]
    r, _, sink = reflector()
    with running(r, apiserver):
        assert r.stats.relists_after_too_large == 1 and r.stats.lists == 2
        assert apiserver.watch_rvs == ["100", "7"]
        assert sink.calls == [("add", "a"), ("update", "a", "100->5")]


def test_repeated_server_side_watch_failures_fall_back_to_a_relist(apiserver):
    apiserver.pages = [page("10", [pod("a", "1")]), page("30", [pod("a", "1")])]
    apiserver.watches = [[], kc.ApiError(500, "Internal Server Error"), kc.ApiError(503, "Unavailable")]
    r, _, sink = reflector()
    with running(r, apiserver):
        assert r.stats.watch_errors == 3 and r.stats.lists == 2 and r.stats.relists_after_gone == 0
        assert apiserver.watch_rvs == ["10", "10", "10", "30"]
        assert sink.calls == [("add", "a")], "an unchanged object is not reported again"


def test_a_paged_list_whose_continue_token_expires_starts_over(apiserver):
    apiserver.pages = [page("5", [pod("a", "1")], cont="c1"), gone(),
                       page("9", [pod("a", "1"), pod("b", "2")], cont="c2"), page("9", [pod("c", "3")])]
    r, store, sink = reflector()
    with running(r, apiserver):
        assert apiserver.list_continues == [None, "c1", None, "c2"]
        assert sorted(store.keys()) == ["ns/a", "ns/b", "ns/c"] and r.stats.lists == 1
        assert r.stats.watch_errors == 0, "started over at once, not as a failure with backoff"
        assert sink.calls == [("add", "a"), ("add", "b"), ("add", "c")]
        assert apiserver.watch_rvs == ["9"]


def test_transform_applies_to_listed_and_watched_objects(apiserver):
    apiserver.pages = [page("10", [pod("a", "1", "n1")])]
    apiserver.watches = [[event("ADDED", pod("b", "11", "n1"))]]
    r, store, _ = reflector(transform=lambda obj: {"kind": obj["kind"], "metadata": obj["metadata"]})
    with running(r, apiserver):
        assert [o.get("spec") for o in store.list()] == [None, None]
        assert store.index_keys("node", "n1") == []


def test_a_relist_keeps_each_stored_object_whose_version_it_lists_and_transforms_only_the_rest(apiserver):
    """After a 410 the list is mostly what did not change: those stay the very objects stored (not transformed
    again, not young again for the collector); a changed version, or another object under the name (a new
    uid), goes through the transform."""
    def uid(p: dict, u: str) -> dict:
        p["metadata"]["uid"] = u
        return p

    apiserver.pages = [page("10", [uid(pod("a", "1"), "ua"), uid(pod("b", "1"), "ub"), uid(pod("c", "1"), "uc")]),
                       page("20", [uid(pod("a", "1"), "ua"), uid(pod("b", "2"), "ub"), uid(pod("c", "1"), "uc2")])]
    apiserver.watches = [gone()]
    transformed: list[str] = []

    def transform(obj: dict) -> dict:
        transformed.append(f"{obj['metadata']['name']}@{obj['metadata']['resourceVersion']}")
        return {**obj, "transformed": len(transformed)}

    r, store, sink = reflector(transform=transform)
    first: dict[str, Any] = {}
    original_apply = r.apply_list

    def remember(items: Any, rv: str) -> None:
        if not first:
            first.update({o["metadata"]["name"]: o for o in items})
        original_apply(items, rv)

    r.apply_list = remember  # type: ignore[method-assign]
    with running(r, apiserver):
        assert transformed == ["a@1", "b@1", "c@1", "b@2", "c@1"]
        assert store.get("ns/a") is first["a"], "the same version: the stored object itself"
        assert store.get("ns/b")["metadata"]["resourceVersion"] == "2"  # type: ignore[index]
        assert store.get("ns/c")["metadata"]["uid"] == "uc2"  # type: ignore[index]
        assert sink.calls[3:] == [("update", "b", "1->2")]


def test_restart_watch_resumes_from_the_version_asked_for(apiserver):
    apiserver.pages = [page("10", [])]
    r, _, _ = reflector()
    with running(r, apiserver):
        r.restart_watch("3")
        deadline = time.monotonic() + WAIT
        while len(apiserver.watch_rvs) < 2:
            assert time.monotonic() < deadline, apiserver.watch_rvs
            time.sleep(0.01)
        assert apiserver.watch_rvs == ["10", "3"] and r.stats.watch_errors == 0


def test_an_object_its_transform_cannot_take_is_stored_whole_and_the_stream_goes_on():
    """A transform that raises on one object (what a tenant wrote, shaped as no reader expects) must not stall the
    watch: the event would come again from the same resourceVersion, for good. The object is kept whole."""
    def trim(obj: dict) -> dict:
        if obj["metadata"]["name"] == "odd":
            raise TypeError("not what a trimmed Pod looks like")
        return {"metadata": obj["metadata"], "trimmed": True}

    r, store, sink = reflector(trim)
    r.apply_list([], "1")
    r.apply_event(event("ADDED", pod("odd", "2")))
    r.apply_event(event("ADDED", pod("fine", "3")))
    assert store.get("ns/odd")["kind"] == "Pod" and "trimmed" not in store.get("ns/odd")
    assert store.get("ns/fine")["trimmed"] and r.resource_version == "3"
    assert sink.calls == [("add", "odd"), ("add", "fine")]


def test_an_object_nested_as_deep_as_the_apiserver_stores_decodes_from_the_watch_stream():
    """Go's decoder, the apiserver's, accepts 10,000 levels of free-form JSON (a claim's opaque parameters);
    Python's stops at the recursion limit (1,000 by default) with a RecursionError, which left the informer
    replaying that event for good. ``kc.decode_json`` raises the limit for its process."""
    r, store, _ = reflector()
    deep = b"[" * 9_000 + b"]" * 9_000
    line = (b'{"type":"ADDED","object":{"kind":"Pod","metadata":{"namespace":"ns","name":"deep",'
            b'"resourceVersion":"5"},"spec":{"x":' + deep + b"}}}\n")
    (decoded,) = _json_lines(ChunkResp([line]))  # type: ignore[arg-type]
    r.apply_list([], "1")
    r.apply_event(decoded)
    assert store.get("ns/deep") is not None and r.resource_version == "5"
    assert json.dumps(store.get("ns/deep")["spec"]).count("[") == 9_000  # (and written back whole)
