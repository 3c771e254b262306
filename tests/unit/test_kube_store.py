"""ThreadSafeStore: objects by key, indexes kept in step with every write."""

from __future__ import annotations

import logging

import pytest

from sunk.kube.store import ThreadSafeStore, pod_node_name


def pod(name: str, node: str | None = None, rv: str = "1") -> dict:
    spec = {"nodeName": node} if node else {}
    return {"kind": "Pod", "metadata": {"namespace": "ns", "name": name, "resourceVersion": rv}, "spec": spec}


def store() -> ThreadSafeStore:
    s = ThreadSafeStore()
    s.add_indexer("node", pod_node_name)
    return s


def test_add_update_delete_return_what_they_replaced_and_keep_the_index():
    s = store()
    assert s.add("ns/a", pod("a", "n1")) is None
    assert s.index_keys("node", "n1") == ["ns/a"]
    old = s.update("ns/a", pod("a", "n2", rv="2"))
    assert old is not None and old["spec"]["nodeName"] == "n1"
    assert s.index_keys("node", "n1") == [] and s.index_keys("node", "n2") == ["ns/a"]
    assert s.by_index("node", "n2") == [s.get("ns/a")]
    gone = s.delete("ns/a")
    assert gone is not None and gone["metadata"]["resourceVersion"] == "2"
    assert s.get("ns/a") is None and s.index_keys("node", "n2") == [] and s.list() == []
    assert s.delete("ns/a") is None  # deleting what is not there is fine


def test_replace_swaps_the_contents_reindexes_and_returns_the_old():
    s = store()
    s.add("ns/a", pod("a", "n1"))
    s.add("ns/b", pod("b", "n1"))
    new = {"ns/b": pod("b", "n2", rv="2"), "ns/c": pod("c")}
    old = s.replace(new)
    assert sorted(old) == ["ns/a", "ns/b"]
    assert sorted(s.keys()) == ["ns/b", "ns/c"]
    assert s.index_keys("node", "n1") == [] and s.index_keys("node", "n2") == ["ns/b"]
    new.clear()  # the store keeps its own mapping
    assert len(s.list()) == 2


def test_an_index_added_late_covers_what_is_already_stored():
    s = ThreadSafeStore()
    s.add("ns/a", pod("a", "n1"))
    s.add_indexer("node", pod_node_name)
    assert s.index_keys("node", "n1") == ["ns/a"]
    with pytest.raises(ValueError, match="already exists"):
        s.add_indexer("node", pod_node_name)


def test_unknown_index_is_a_key_error_and_unbound_pods_are_not_indexed():
    s = store()
    s.add("ns/a", pod("a"))
    assert s.index_keys("node", "") == [] and s.by_index("node", "n1") == []
    with pytest.raises(KeyError):
        s.by_index("nope", "x")


def test_a_failing_index_function_leaves_the_object_out_of_that_index_only(caplog):
    s = store()

    def picky(obj: dict) -> list[str]:
        if obj["metadata"]["name"] == "bad":
            raise KeyError("label")
        return ["ok"]

    s.add_indexer("picky", picky)
    with caplog.at_level(logging.ERROR, logger="sunk.kube.store"):
        s.add("ns/bad", pod("bad", "n1"))
        s.add("ns/good", pod("good", "n1"))
    assert s.index_keys("picky", "ok") == ["ns/good"]
    assert s.index_keys("node", "n1") == ["ns/bad", "ns/good"]
    assert s.get("ns/bad") is not None
    assert any("indexer picky failed on ns/bad" in r.getMessage() for r in caplog.records)
    assert s.delete("ns/bad") is not None and s.index_keys("node", "n1") == ["ns/good"]


def test_pod_node_name():
    assert pod_node_name(pod("a", "n1")) == ["n1"]
    assert pod_node_name(pod("a")) == [] and pod_node_name({}) == []
