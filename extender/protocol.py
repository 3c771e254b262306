"""kube-scheduler's extender protocol (k8s.io/kube-scheduler/extender/v1), as plain values.

The Go types carry no json tags, so the keys are the Go field names ("Pod", "NodeNames",
"FailedNodes", ...), while the Pod and Nodes inside are ordinary camelCase API objects.
Parsing is strict: a body that is not what kube-scheduler sends is a ``BadRequest``,
answered with HTTP 400 and a JSON error, never an exception in the scheduler's call path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attrs import frozen

from sunk.types import Obj

MAX_SCORE = 10


class BadRequest(ValueError):
    """The request body does not have the extender protocol's shape."""


@frozen
class FilterArgs:
    pod: Obj
    node_names: tuple[str, ...]
    nodes: tuple[Obj, ...] | None  # full Node objects when nodeCacheCapable is false


@frozen
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


def _object(body: Any) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise BadRequest("the body must be a JSON object")
    return body


def _pod(body: Mapping[str, Any]) -> Obj:
    pod = body.get("Pod")
    if not isinstance(pod, Mapping) or not isinstance(pod.get("metadata"), Mapping):
        raise BadRequest("Pod must be a Pod object with metadata")
    meta = pod["metadata"]
    for key in ("name", "namespace", "uid"):
        if not isinstance(meta.get(key), str) or not meta[key]:
            raise BadRequest(f"Pod.metadata.{key} must be a non-empty string")
    if not isinstance(pod.get("spec", {}), Mapping):
        raise BadRequest("Pod.spec must be an object")
    return dict(pod)


def parse_filter_args(body: Any) -> FilterArgs:
    """ExtenderArgs{Pod, Nodes, NodeNames}: exactly one of Nodes or NodeNames."""
    body = _object(body)
    pod = _pod(body)
    names, nodes = body.get("NodeNames"), body.get("Nodes")
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise BadRequest("NodeNames must be a list of strings")
        return FilterArgs(pod=pod, node_names=tuple(names), nodes=None)
    if nodes is not None:
        items = nodes.get("items") if isinstance(nodes, Mapping) else None
        if not isinstance(items, list) or not all(
            isinstance(n, Mapping) and isinstance(n.get("metadata", {}).get("name"), str) for n in items
        ):
            raise BadRequest("Nodes must be a NodeList whose items have metadata.name")
        return FilterArgs(pod=pod, node_names=tuple(n["metadata"]["name"] for n in items),
                          nodes=tuple(dict(n) for n in items))
    raise BadRequest("one of NodeNames or Nodes is required")


def parse_binding_args(body: Any) -> BindingArgs:
    body = _object(body)
    fields = {key: body.get(key) for key in ("PodName", "PodNamespace", "PodUID", "Node")}
    for key, value in fields.items():
        if not isinstance(value, str) or not value:
            raise BadRequest(f"{key} must be a non-empty string")
    return BindingArgs(str(fields["PodName"]), str(fields["PodNamespace"]), str(fields["PodUID"]),
                       str(fields["Node"]))


def filter_result(args: FilterArgs, allowed: str | None, reason: str, *, unresolvable: bool = False) -> Obj:
    """Pass ``allowed`` (if it is a candidate); every other candidate fails with ``reason``."""
    failed = {name: reason for name in args.node_names if name != allowed}
    passing = [name for name in args.node_names if name == allowed]
    result: Obj = {
        "FailedNodes": {} if unresolvable else failed,
        "FailedAndUnresolvableNodes": failed if unresolvable else {},
        "Error": "",
    }
    if args.nodes is None:
        result["NodeNames"] = passing
    else:
        result["Nodes"] = {"apiVersion": "v1", "kind": "NodeList", "metadata": {},
                           "items": [n for n in args.nodes if n["metadata"]["name"] in passing]}
    return result


def filter_error(message: str) -> Obj:
    return {"NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": message}


def priorities(node_names: tuple[str, ...], preferred: str | None) -> list[Obj]:
    return [{"Host": name, "Score": MAX_SCORE if name == preferred else 0} for name in node_names]
