"""Informer logic that needs no apiserver: relist diffing, watch-event application, error mapping."""

from __future__ import annotations

from kubernetes import client as k8s

from sunk.kube.informer import Informer, _Gone, _json_lines, _status_error, _TooLarge, _WatchFailed, pod_node_name


def pod(name: str, rv: str, node: str | None = None) -> dict:
    spec = {"nodeName": node} if node else {}
    return {"kind": "Pod", "metadata": {"namespace": "ns", "name": name, "resourceVersion": rv}, "spec": spec}


class Log:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def on_add(self, o):
        self.calls.append(("add", o["metadata"]["name"]))

    def on_update(self, old, new):
        self.calls.append(("update", f"{old['metadata']['resourceVersion']}->{new['metadata']['resourceVersion']}"))

    def on_delete(self, o):
        self.calls.append(("delete", o["metadata"]["name"]))


def informer() -> tuple[Informer, Log]:
    inf = Informer(k8s.ApiClient(k8s.Configuration()), ("", "v1", "pods"), "ns")  # never started
    inf.add_indexer("node", pod_node_name)
    log = Log()
    inf.add_handler(log)
    return inf, log


def test_relist_emits_exactly_the_difference():
    inf, log = informer()
    inf._replace([pod("a", "1", "n1"), pod("b", "1"), pod("c", "1")], "10")
    assert inf.has_synced() and inf.resource_version == "10"
    assert sorted(log.calls) == [("add", "a"), ("add", "b"), ("add", "c")]
    log.calls.clear()
    inf._replace([pod("a", "5", "n2"), pod("c", "1"), pod("d", "6")], "20")
    assert sorted(log.calls) == [("add", "d"), ("delete", "b"), ("update", "1->5")]
    assert inf.index_keys("node", "n1") == [] and inf.index_keys("node", "n2") == ["ns/a"]
    assert sorted(inf.keys()) == ["ns/a", "ns/c", "ns/d"]


def test_watch_events_update_store_index_and_rv():
    inf, log = informer()
    inf._replace([], "1")
    inf._handle_event({"type": "ADDED", "object": pod("a", "2", "n1")})
    inf._handle_event({"type": "MODIFIED", "object": pod("a", "3", "n2")})
    assert inf.index_keys("node", "n1") == [] and inf.by_index("node", "n2")[0]["metadata"]["name"] == "a"
    inf._handle_event({"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "9"}}})
    assert inf.resource_version == "9" and inf.stats.bookmarks == 1
    inf._handle_event({"type": "DELETED", "object": pod("a", "10", "n2")})
    assert inf.get("ns/a") is None and inf.index_keys("node", "n2") == [] and inf.resource_version == "10"
    assert log.calls == [("add", "a"), ("update", "2->3"), ("delete", "a")]


def test_failing_handler_does_not_stop_others():
    inf, log = informer()

    def boom(obj):
        raise RuntimeError("handler bug")

    inf.add_handler(on_add=boom)
    inf._replace([pod("a", "1")], "1")
    assert ("add", "a") in log.calls


def test_status_error_mapping():
    assert isinstance(_status_error({"code": 410, "reason": "Expired"}), _Gone)
    assert isinstance(_status_error({"code": 410}), _Gone)
    too_large = {"code": 504, "reason": "Timeout", "details": {"causes": [{"reason": "ResourceVersionTooLarge"}]}}
    assert isinstance(_status_error(too_large), _TooLarge)
    assert isinstance(_status_error({"code": 500, "message": "etcd down"}), _WatchFailed)


class FakeResp:
    def __init__(self, chunks: list[bytes]):
        self.chunks = chunks

    def stream(self, amt=None):
        yield from self.chunks


def test_json_lines_reassembles_events_split_across_chunks():
    chunks = [b'{"type":"ADDED","obj', b'ect":{}}\n{"type":"BOOK', b'MARK","object":{}}\n\n', b'{"type":"X"}']
    assert [e["type"] for e in _json_lines(FakeResp(chunks))] == ["ADDED", "BOOKMARK", "X"]  # type: ignore[arg-type]


def test_transform_trims_what_is_stored_and_handed_to_handlers():
    def trim(obj):
        return {"kind": obj["kind"], "metadata": obj["metadata"]}

    inf = Informer(k8s.ApiClient(k8s.Configuration()), ("", "v1", "pods"), "ns", transform=trim)
    seen = []
    inf.add_handler(on_add=seen.append, on_update=lambda _old, new: seen.append(new))
    inf._replace([], "1")
    inf._handle_event({"type": "ADDED", "object": pod("a", "2", "n1")})
    inf._handle_event({"type": "MODIFIED", "object": pod("a", "3", "n2")})
    assert inf.get("ns/a") == {"kind": "Pod", "metadata": {"namespace": "ns", "name": "a", "resourceVersion": "3"}}
    assert [o.get("spec") for o in seen] == [None, None]
