"""Informer logic that needs no apiserver: what handlers see of relists and watch events, handler
registration, transforms, and the multi-namespace view.

The store and the reflector have their own tests (test_kube_store.py, test_kube_reflector.py).
"""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from sunk.kube.informer import Informer, MultiNamespaceInformer, pod_node_name


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
    inf.reflector.apply_list([pod("a", "1", "n1"), pod("b", "1"), pod("c", "1")], "10")
    assert inf.has_synced() and inf.resource_version == "10"
    assert sorted(log.calls) == [("add", "a"), ("add", "b"), ("add", "c")]
    log.calls.clear()
    inf.reflector.apply_list([pod("a", "5", "n2"), pod("c", "1"), pod("d", "6")], "20")
    assert sorted(log.calls) == [("add", "d"), ("delete", "b"), ("update", "1->5")]
    assert inf.index_keys("node", "n1") == [] and inf.index_keys("node", "n2") == ["ns/a"]
    assert sorted(inf.keys()) == ["ns/a", "ns/c", "ns/d"]


def test_watch_events_update_store_index_and_rv():
    inf, log = informer()
    inf.reflector.apply_list([], "1")
    inf.reflector.apply_event({"type": "ADDED", "object": pod("a", "2", "n1")})
    inf.reflector.apply_event({"type": "MODIFIED", "object": pod("a", "3", "n2")})
    assert inf.index_keys("node", "n1") == [] and inf.by_index("node", "n2")[0]["metadata"]["name"] == "a"
    inf.reflector.apply_event({"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "9"}}})
    assert inf.resource_version == "9" and inf.stats.bookmarks == 1
    inf.reflector.apply_event({"type": "DELETED", "object": pod("a", "10", "n2")})
    assert inf.get("ns/a") is None and inf.index_keys("node", "n2") == [] and inf.resource_version == "10"
    assert log.calls == [("add", "a"), ("update", "2->3"), ("delete", "a")]


def test_failing_handler_does_not_stop_others():
    inf, log = informer()

    def boom(obj):
        raise RuntimeError("handler bug")

    inf.add_handler(on_add=boom)
    inf.reflector.apply_list([pod("a", "1")], "1")
    assert ("add", "a") in log.calls


def test_transform_trims_what_is_stored_and_handed_to_handlers():
    def trim(obj):
        return {"kind": obj["kind"], "metadata": obj["metadata"]}

    inf = Informer(k8s.ApiClient(k8s.Configuration()), ("", "v1", "pods"), "ns", transform=trim)
    seen = []
    inf.add_handler(on_add=seen.append, on_update=lambda _old, new: seen.append(new))
    inf.reflector.apply_list([], "1")
    inf.reflector.apply_event({"type": "ADDED", "object": pod("a", "2", "n1")})
    inf.reflector.apply_event({"type": "MODIFIED", "object": pod("a", "3", "n2")})
    assert inf.get("ns/a") == {"kind": "Pod", "metadata": {"namespace": "ns", "name": "a", "resourceVersion": "3"}}
    assert [o.get("spec") for o in seen] == [None, None]


def test_a_late_handler_gets_the_cache_replayed_as_adds_then_events():
    inf, _ = informer()
    inf.reflector.apply_list([pod("a", "1"), pod("b", "1")], "1")
    late = Log()
    inf.add_handler(late)
    assert sorted(late.calls) == [("add", "a"), ("add", "b")]
    inf.reflector.apply_event({"type": "MODIFIED", "object": pod("a", "2")})
    assert late.calls[-1] == ("update", "1->2")


def test_func_handler_calls_only_what_it_was_given():
    inf, _ = informer()
    deleted: list[str] = []
    inf.add_handler(on_delete=lambda o: deleted.append(o["metadata"]["name"]))
    inf.reflector.apply_list([pod("a", "1")], "1")
    inf.reflector.apply_event({"type": "MODIFIED", "object": pod("a", "2")})
    inf.reflector.apply_event({"type": "DELETED", "object": pod("a", "3")})
    assert deleted == ["a"]


def test_start_twice_is_refused_and_stop_before_start_is_harmless():
    inf, _ = informer()
    inf.stop()  # harmless before start; and the reflector, already stopped, makes no request
    inf.start()
    try:
        with pytest.raises(RuntimeError, match="already started"):
            inf.start()
    finally:
        inf.stop()


def multi(namespaces: list[str] | None) -> MultiNamespaceInformer:
    return MultiNamespaceInformer(k8s.ApiClient(k8s.Configuration()), ("", "v1", "pods"), namespaces)


def ns_pod(namespace: str, name: str, node: str | None = None) -> dict:
    p = pod(name, "1", node)
    p["metadata"]["namespace"] = namespace
    return p


def test_multi_namespace_informer_routes_keys_and_merges_reads():
    m = multi(["a", "b", "a"])
    assert list(m.informers) == ["a", "b"]
    m.add_indexer("node", pod_node_name)
    log = Log()
    m.add_handler(log)
    m.informers["a"].reflector.apply_list([ns_pod("a", "x", "n1")], "1")
    assert not m.has_synced() and not m.wait_for_sync(0.01)
    m.informers["b"].reflector.apply_list([ns_pod("b", "y", "n1")], "1")
    assert m.has_synced() and m.wait_for_sync(0)
    assert m.get("a/x") is not None and m.get("b/y") is not None
    assert m.get("a/y") is None and m.get("c/x") is None  # a namespace not watched
    assert sorted(p["metadata"]["name"] for p in m.by_index("node", "n1")) == ["x", "y"]
    assert sorted(p["metadata"]["name"] for p in m.list()) == ["x", "y"]
    assert sorted(log.calls) == [("add", "x"), ("add", "y")]


def test_multi_namespace_informer_without_namespaces_is_one_cluster_wide_informer():
    m = multi(None)
    assert list(m.informers) == [None] and m.informers[None].namespace is None
    m.informers[None].reflector.apply_list([ns_pod("any", "x")], "1")
    assert m.get("any/x") is not None
