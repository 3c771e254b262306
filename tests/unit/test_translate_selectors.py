"""Node selection as kube-scheduler reads nodeSelector and required node affinity (sunk/translate/selectors.py)."""

from __future__ import annotations

from typing import Any

import pytest

from sunk.translate import selectors


def node(name: str = "n1", **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": dict(labels)}}


def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": op}
    if values:
        out["values"] = list(values)
    return out


@pytest.mark.parametrize(("labels", "selector", "terms", "want"), [
    ({}, None, None, True),  # nothing asked: every Node
    ({"pool": "gpu"}, {"pool": "gpu"}, None, True),
    ({"pool": "cpu"}, {"pool": "gpu"}, None, False),
    ({}, {"pool": "gpu"}, None, False),
    ({"pool": "gpu"}, None, [{"matchExpressions": [expr("pool", "In", "gpu", "x")]}], True),
    ({"pool": "cpu"}, None, [{"matchExpressions": [expr("pool", "In", "gpu")]}], False),
    ({}, None, [{"matchExpressions": [expr("pool", "In", "gpu")]}], False),
    ({}, None, [{"matchExpressions": [expr("pool", "NotIn", "gpu")]}], True),  # missing label: not in
    ({"pool": "gpu"}, None, [{"matchExpressions": [expr("pool", "NotIn", "gpu")]}], False),
    ({"pool": "x"}, None, [{"matchExpressions": [expr("pool", "Exists")]}], True),
    ({}, None, [{"matchExpressions": [expr("pool", "Exists")]}], False),
    ({}, None, [{"matchExpressions": [expr("pool", "DoesNotExist")]}], True),
    ({"pool": ""}, None, [{"matchExpressions": [expr("pool", "DoesNotExist")]}], False),
    ({"gpus": "8"}, None, [{"matchExpressions": [expr("gpus", "Gt", "4")]}], True),
    ({"gpus": "4"}, None, [{"matchExpressions": [expr("gpus", "Gt", "4")]}], False),
    ({"gpus": "x"}, None, [{"matchExpressions": [expr("gpus", "Gt", "4")]}], False),
    ({}, None, [{"matchExpressions": [expr("gpus", "Lt", "4")]}], False),
    ({"gpus": "2"}, None, [{"matchExpressions": [expr("gpus", "Lt", "4")]}], True),
    # within a term: AND; terms: OR
    ({"a": "1"}, None, [{"matchExpressions": [expr("a", "Exists"), expr("b", "Exists")]}], False),
    ({"a": "1"}, None, [{"matchExpressions": [expr("b", "Exists")]}, {"matchExpressions": [expr("a", "Exists")]}],
     True),
    # an empty term matches nothing
    ({"a": "1"}, None, [{}], False),
    ({"a": "1"}, None, [{}, {"matchExpressions": [expr("a", "Exists")]}], True),
    # matchFields: metadata.name
    ({}, None, [{"matchFields": [expr("metadata.name", "In", "n1")]}], True),
    ({}, None, [{"matchFields": [expr("metadata.name", "NotIn", "n1")]}], False),
    # nodeSelector and affinity both hold
    ({"pool": "gpu"}, {"pool": "gpu"}, [{"matchExpressions": [expr("zone", "Exists")]}], False),
])
def test_matches(labels, selector, terms, want):
    aff = affinity(*terms) if terms is not None else None
    assert selectors.problems(selector, aff) == []
    assert selectors.matches(node("n1", **labels), selector, aff) is want


@pytest.mark.parametrize(("selector", "aff", "fragment"), [
    ({"pool": 1}, None, "nodeSelector: must map"),
    (None, "x", "nodeSelectorTerms: must be a non-empty list"),
    (None, affinity(), "nodeSelectorTerms: must be a non-empty list"),
    (None, affinity({"matchExpressions": [expr("a", "In")]}), "In needs at least one value"),
    (None, affinity({"matchExpressions": [expr("a", "Exists", "x")]}), "Exists takes no values"),
    (None, affinity({"matchExpressions": [expr("a", "Gt", "x")]}), "Gt takes exactly one integer"),
    (None, affinity({"matchExpressions": [expr("a", "Gt", "1", "2")]}), "Gt takes exactly one integer"),
    (None, affinity({"matchExpressions": [expr("a", "Like", "x")]}), "operator: must be one of"),
    (None, affinity({"matchExpressions": [expr("", "Exists")]}), "key: must be a non-empty string"),
    (None, affinity({"matchExpressions": ["a"]}), "must be an object"),
    (None, affinity({"matchExpressions": {"a": 1}}), "matchExpressions: must be a list"),
    (None, affinity({"matchFields": [expr("metadata.uid", "In", "x")]}), "only metadata.name"),
    (None, affinity({"matchFields": [expr("metadata.name", "Exists")]}), "operator: must be one of In, NotIn"),
    (None, affinity({"matchExpressions": [{"key": "a", "operator": "In", "values": [1]}]}), "list of strings"),
])
def test_problems_are_named_and_select_nothing(selector, aff, fragment):
    found = selectors.problems(selector, aff)
    assert any(fragment in p for p in found), found
    with pytest.raises(ValueError):
        selectors.matches(node(), selector, aff)


def test_affinity_without_required_terms_selects_every_node():
    preferred_only = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    assert selectors.problems(None, preferred_only) == []
    assert selectors.matches(node(), None, preferred_only)
    assert selectors.matches(node(), None, {"podAntiAffinity": {}})


@pytest.mark.parametrize("tolerations", [
    None, [], [{"operator": "Exists"}], [{"key": "a", "value": "b"}], [{"key": "a", "operator": "Equal", "value": ""}],
    [{"key": "example.com/gpu", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0}],
])
def test_tolerations_kubernetes_takes_have_no_problems(tolerations):
    assert selectors.toleration_problems(tolerations, "t") == []


@pytest.mark.parametrize("node_selector", [None, {}, {"kubernetes.io/hostname": "n1", "a": ""}])
def test_node_selectors_kubernetes_takes_have_no_problems(node_selector):
    assert selectors.label_selector_problems(node_selector, "s") == []


def test_a_label_key_longer_than_kubernetes_allows_is_refused():
    assert selectors.label_selector_problems({"a" * 64: "x"}, "s") == [f"s: {'a' * 64!r} is not a label key"]


@pytest.mark.parametrize("key", ["a..b/c", "a.-b/c", "a-.b/c", "-a/c", "A.b/c", f"{'a' * 254}/c", "a/", "/c"])
def test_a_key_whose_prefix_is_not_a_dns_subdomain_is_refused_as_the_apiserver_refuses_it(key):
    assert not selectors.is_label_key(key)
    assert selectors.label_selector_problems({key: "x"}, "s")
    assert selectors.toleration_problems([{"key": key, "operator": "Exists"}], "t")


@pytest.mark.parametrize("key", ["a", "example.com/gpu", "a-b.c-d/E_f.g", f"{'a' * 63}.{'b' * 63}/{'c' * 63}"])
def test_keys_kubernetes_takes(key):
    assert selectors.is_label_key(key)


@pytest.mark.parametrize("toleration, field", [
    ({"key": "a", "value": 0}, "value"), ({"key": 0, "operator": "Exists"}, "key"),
    ({"key": "a", "operator": False}, "operator"), ({"key": "a", "effect": 0}, "effect"),
])
def test_a_falsy_value_of_another_type_is_refused_not_read_as_the_default(toleration, field):
    assert selectors.toleration_problems([toleration], "t") == [f"t[0].{field}: must be a string"]
