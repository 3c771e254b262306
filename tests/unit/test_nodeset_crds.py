"""The NodeSet and NodeSlice CRDs: structural schemas (what the apiserver demands before it serves
a CRD), their subresources and columns, and the example in docs/nodeset.md valid against them.

A small validator of the schema subset the CRDs use (type, properties, required, enum,
minimum, maxLength, maxItems, pattern, items, additionalProperties, int-or-string,
preserve-unknown-fields): unknown fields are refused where they are not preserved, as the
apiserver's strict field validation would.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sunk.translate.nodeset.plan import Facts, decide
from sunk.translate.nodeset.slices import slice_object
from sunk.translate.nodeset.spec import read_spec

ROOT = Path(__file__).parents[2]
CRDS = ROOT / "manifests" / "chart" / "sunk" / "crds"
JUNCTORS = ("allOf", "anyOf", "oneOf", "not")
TYPES = {"object": dict, "array": list, "string": str, "boolean": bool}


def crd(plural: str) -> dict[str, Any]:
    return yaml.safe_load((CRDS / f"sunk.coreweave.com_{plural}.yaml").read_text())


def schema_of(doc: dict[str, Any]) -> dict[str, Any]:
    (version,) = doc["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def structural_problems(node: dict[str, Any], where: str, *, in_junctor: bool = False) -> Iterator[str]:
    """The apiserver's structural rules (apiextensions' NewStructural and validateStructuralInvariants)."""
    if not isinstance(node, dict):
        yield f"{where}: not a schema"
        return
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
    if in_junctor:
        for key in ("type", "description", "default", "additionalProperties", "nullable"):
            if key in node:
                yield f"{where}: {key} inside a junctor"
    elif not node.get("type") and not int_or_string and not preserve:
        yield f"{where}: no type"
    if int_or_string:
        if node.get("type"):
            yield f"{where}: int-or-string with a type"
        allowed = [{"type": "integer"}, {"type": "string"}]
        if "anyOf" in node and node["anyOf"] != allowed:
            yield f"{where}: int-or-string's anyOf must be exactly integer|string"
    if "properties" in node and "additionalProperties" in node:
        yield f"{where}: properties and additionalProperties together"
    if node.get("type") not in (None, "object") and ("properties" in node or "additionalProperties" in node):
        yield f"{where}: properties on a {node['type']}"
    if node.get("type") == "array" and "items" not in node:
        yield f"{where}: array without items"
    for name, sub in (node.get("properties") or {}).items():
        if where == "root" and name == "metadata" and sub != {"type": "object"}:
            yield "root.properties.metadata: only a bare object here (the apiserver owns metadata)"
        yield from structural_problems(sub, f"{where}.properties.{name}", in_junctor=in_junctor)
    if isinstance(node.get("additionalProperties"), dict):
        yield from structural_problems(node["additionalProperties"], f"{where}.additionalProperties",
                                       in_junctor=in_junctor)
    if "items" in node:
        yield from structural_problems(node["items"], f"{where}.items", in_junctor=in_junctor)
    for junctor in JUNCTORS:
        subs = node.get(junctor) or []
        for i, sub in enumerate(subs if isinstance(subs, list) else [subs]):
            if not (int_or_string and junctor == "anyOf"):
                yield from structural_problems(sub, f"{where}.{junctor}[{i}]", in_junctor=True)
    for key in ("x-kubernetes-list-map-keys",):
        for field in node.get(key) or []:
            item = node.get("items") or {}
            if field not in (item.get("required") or []):
                yield f"{where}: list-map key {field} is not required"


def validate(value: Any, node: dict[str, Any], where: str = "") -> Iterator[str]:
    if node.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            yield f"{where}: not an int or a string"
        elif isinstance(value, str) and "pattern" in node and not re.search(node["pattern"], value):
            yield f"{where}: {value!r} does not match {node['pattern']}"  # (the apiserver checks a string's)
        return
    kind = node.get("type")
    if kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            yield f"{where}: not an integer"
            return
    elif kind in TYPES and not isinstance(value, TYPES[kind]):
        yield f"{where}: not a {kind}"
        return
    if "enum" in node and value not in node["enum"]:
        yield f"{where}: {value!r} not in {node['enum']}"
    if "minimum" in node and value < node["minimum"]:
        yield f"{where}: below {node['minimum']}"
    if "maxLength" in node and len(value) > node["maxLength"]:
        yield f"{where}: longer than {node['maxLength']}"
    if "pattern" in node and not re.search(node["pattern"], value):
        yield f"{where}: {value!r} does not match {node['pattern']}"
    if kind == "array":
        if "maxItems" in node and len(value) > node["maxItems"]:
            yield f"{where}: more than {node['maxItems']} items"
        for i, item in enumerate(value):
            yield from validate(item, node["items"], f"{where}[{i}]")
    if kind == "object":  # (preserved unknown fields are kept, the known ones still checked)
        props = node.get("properties")
        for req in node.get("required") or []:
            if req not in value:
                yield f"{where}.{req}: required"
        for key, item in value.items():
            if props is not None and key in props:
                yield from validate(item, props[key], f"{where}.{key}")
            elif isinstance(node.get("additionalProperties"), dict):
                yield from validate(item, node["additionalProperties"], f"{where}.{key}")
            elif props is not None and not node.get("x-kubernetes-preserve-unknown-fields"):
                yield f"{where}.{key}: unknown field"


def docs_example() -> dict[str, Any]:
    text = (ROOT / "docs" / "nodeset.md").read_text()
    for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
        doc = yaml.safe_load(block)
        if isinstance(doc, dict) and doc.get("kind") == "NodeSet":
            return doc
    raise AssertionError("docs/nodeset.md has no NodeSet example")


@pytest.mark.parametrize("plural", ["nodesets", "nodeslices"])
def test_the_crd_is_structural_and_named_as_its_group_wants(plural):
    doc = crd(plural)
    assert doc["apiVersion"] == "apiextensions.k8s.io/v1" and doc["kind"] == "CustomResourceDefinition"
    assert doc["metadata"]["name"] == f"{plural}.sunk.coreweave.com"
    assert doc["spec"]["group"] == "sunk.coreweave.com" and doc["spec"]["names"]["plural"] == plural
    assert doc["spec"]["scope"] == "Namespaced"
    (version,) = doc["spec"]["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert list(structural_problems(schema_of(doc), "root")) == []
    for column in version["additionalPrinterColumns"]:
        path = column["jsonPath"].lstrip(".").split(".")
        node = schema_of(doc)
        if path[0] == "metadata":
            continue
        for part in path:
            node = node["properties"][part]
        assert node["type"] == column["type"] or (node["type"], column["type"]) == ("string", "date"), column


def test_the_structural_check_catches_what_the_apiserver_refuses():
    untyped = {"type": "object", "properties": {"a": {}}}
    assert list(structural_problems(untyped, "root")) == ["root.properties.a: no type"]
    assert list(structural_problems({"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}]}}}, "root"))
    assert list(structural_problems({"type": "array"}, "root")) == ["root: array without items"]


def test_the_nodeset_has_status_and_scale_subresources():
    (version,) = crd("nodesets")["spec"]["versions"]
    scale = version["subresources"]["scale"]
    assert "status" in version["subresources"]
    status = schema_of(crd("nodesets"))["properties"]["status"]["properties"]
    spec = schema_of(crd("nodesets"))["properties"]["spec"]["properties"]
    assert scale["specReplicasPath"] == ".spec.replicas" and spec["replicas"]["type"] == "integer"
    assert scale["statusReplicasPath"] == ".status.replicas" and status["replicas"]["type"] == "integer"
    assert scale["labelSelectorPath"] == ".status.selector" and status["selector"]["type"] == "string"
    for field in ("observedGeneration", "matching", "assigned", "ready", "updated", "slurmIdle", "slurmAllocated",
                  "slurmDrained", "slurmDown", "slurmNotResponding", "conditions"):
        assert field in status, field


def test_the_docs_example_is_valid_for_the_schema_and_for_the_operator():
    example = docs_example()
    assert list(validate(example, schema_of(crd("nodesets")))) == []
    assert read_spec({**example, "metadata": {**example["metadata"], "uid": "u"}}).problems == ()


@pytest.mark.parametrize(("change", "fragment"), [
    ({"replicas": -1}, "below 0"),
    ({"naming": {"scheme": "Random"}}, "not in"),
    ({"naming": {"prefix": "G"}}, "does not match"),
    ({"updateStrategy": {"type": "Recreate"}}, "not in"),
    ({"updateStrategy": {"rollingUpdate": {"maxUnavailable": 1.5}}}, "not an int or a string"),
    ({"nodeSelector": {"a": 1}}, "not a string"),
    ({"typo": 1}, "unknown field"),
])
def test_the_schema_refuses_what_it_can(change, fragment):
    example = docs_example()
    example["spec"].update(change)
    found = list(validate(example, schema_of(crd("nodesets"))))
    assert any(fragment in f for f in found), found


def test_what_the_operator_writes_is_valid():
    example = docs_example()
    example["metadata"].update(uid="u", generation=1)
    node = {"metadata": {"name": "w1", "labels": {"node.coreweave.cloud/class": "gpu",
                                                  "gpu.nvidia.com/model": "H100_NVLINK_80GB"}},
            "status": {"addresses": [{"type": "InternalIP", "address": "10.0.3.17"}]}}
    plan = decide(Facts(example, [node], [], slurm={}))
    status = {**plan.status, "conditions": [{**c, "lastTransitionTime": "2030-01-01T00:00:00Z"}
                                            for c in plan.conditions]}
    assert list(validate({**example, "status": status}, schema_of(crd("nodesets")))) == []
    spec = read_spec(example).spec
    for name, entries in plan.slices.write:
        assert list(validate(slice_object(spec, name, entries), schema_of(crd("nodeslices")))) == []
    assert [p["metadata"]["name"] for p in plan.create] == ["g-3-17"]
