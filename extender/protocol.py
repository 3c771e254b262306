"""kube-scheduler's extender protocol (k8s.io/kube-scheduler/extender/v1), as plain values.

The Go types carry no json tags, so the keys are the Go field names ("Pod", "NodeNames",
"FailedNodes", ...), while the Pod and Nodes inside are ordinary camelCase API objects.
Parsing is strict: a body that is not what kube-scheduler sends is a ``BadRequest``,
answered with HTTP 400 and a JSON error, never an exception in the scheduler's call path.

Every field the verbs read is checked here, types included, down to the parts of the Pod
that the shared placement (scheduler/reconciler.py ``placement``, and through it
sunk/translate/podjob.py ``validate_pod``) reads: that code trusts the API's shapes, as it
may for Pods from the informer, but the filter hands it the request's Pod when the
informer has not seen the Pod yet. Values of the right type but wrong content (a malformed
quantity, a bad annotation) are left to the Pod's validation, which answers "invalid Pod"
in the protocol's own terms; only what the placement's own parsing cannot survive (a Pod
without a spec, an integer annotation of thousands of digits, a quantity long enough to make
its parser crawl) is refused here. Messages name the field and the JSON type found, never a
value (at most a map key, quoted and cut), so they stay short and safe to log.
"""

from __future__ import annotations

from typing import Any

from attrs import frozen

from sunk.model import names
from sunk.model.types import Obj
from sunk.translate.podjob import INTEGER_ANNOTATIONS

MAX_SCORE = 10
# Annotations the placement reads as integers: it parses digits with int(), which refuses more
# than 4300 of them (ValueError, not a validation problem), and digits that are not ASCII.
MAX_JOB_ID_DIGITS = 20  # Slurm's job ids are 32-bit; this is only the sanity bound
MAX_INTEGER_ANNOTATION = 1000
# Real quantities are short ("9223372036854775807", "1500m"); the quantity parser's time grows
# with the square of a long malformed one (30,000 digits and a letter: half a minute).
MAX_QUANTITY_CHARS = 64
# Node objects are echoed back (nodeCacheCapable: false); a real Node nests about 15 levels
# (managedFields included). Deeper is refused before the answer's encoder could recurse too far.
MAX_NODE_DEPTH = 100


class BadRequest(ValueError):
    """The request body does not have the extender protocol's shape."""


@frozen
class FilterArgs:
    pod: Obj
    node_names: tuple[str, ...]
    nodes: tuple[Obj, ...] | None  # full Node objects when nodeCacheCapable is false

    @property
    def uid(self) -> str:
        return str(self.pod["metadata"]["uid"])


@frozen
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


@frozen
class PreemptionArgs:
    pod: Obj


# ---- shape checks: each raises BadRequest naming the field ---------------------------------------


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _wrong(field: str, expected: str, value: Any) -> BadRequest:
    return BadRequest(f"{field} must be {expected}, got {_kind(value)}")


def _object(value: Any, field: str) -> Obj:
    if not isinstance(value, dict):
        raise _wrong(field, "an object", value)
    return value


def _optional_object(value: Any, field: str) -> Obj:
    return {} if value is None else _object(value, field)


def _optional_list(value: Any, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _wrong(field, "a list", value)
    return value


def _name(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise _wrong(field, "a non-empty string", value)
    return value


def _optional_string(value: Any, field: str) -> None:
    if value is not None and not isinstance(value, str):
        raise _wrong(field, "a string", value)


def _string_map(value: Any, field: str) -> None:
    for key, item in _optional_object(value, field).items():
        if not isinstance(item, str):
            raise _wrong(f"{field}[{key[:64]!r}]", "a string", item)


def _quantities(value: Any, field: str) -> None:
    """A ResourceList: name -> quantity (a string; a plain number is tolerated)."""
    for key, item in _optional_object(value, field).items():
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise _wrong(f"{field}[{key[:64]!r}]", "a quantity", item)
        if isinstance(item, str) and len(item) > MAX_QUANTITY_CHARS:
            raise BadRequest(f"{field}[{key[:64]!r}] is longer than {MAX_QUANTITY_CHARS} characters")


def _numbers(annotations: Obj, field: str) -> None:
    """The annotations the placement turns into integers, where int() itself would fail.

    Anything else wrong with them (not a number, out of Slurm's range) is the Pod's
    validation's to report; a recorded job id that is not digits is ignored, as the reconciler does.
    """
    job_id = annotations.get(names.ANN_JOB_ID)
    if isinstance(job_id, str) and job_id.isdigit() and not (job_id.isascii() and len(job_id) <= MAX_JOB_ID_DIGITS):
        raise BadRequest(f"{field}[{names.ANN_JOB_ID!r}] must be a Slurm job id "
                         f"(at most {MAX_JOB_ID_DIGITS} ASCII digits)")
    for key in INTEGER_ANNOTATIONS:
        if len(annotations.get(key) or "") > MAX_INTEGER_ANNOTATION:
            raise BadRequest(f"{field}[{key!r}] is longer than {MAX_INTEGER_ANNOTATION} characters")


def _resources(value: Any, field: str) -> None:
    resources = _optional_object(value, field)
    _quantities(resources.get("limits"), f"{field}.limits")
    _quantities(resources.get("requests"), f"{field}.requests")


def _affinity(value: Any, field: str) -> None:
    """What podjob.gpu_clauses reads: the required node affinity's terms and expressions."""
    node = _optional_object(_optional_object(value, field).get("nodeAffinity"), f"{field}.nodeAffinity")
    field = f"{field}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    required = _optional_object(node.get("requiredDuringSchedulingIgnoredDuringExecution"), field)
    terms = _optional_list(required.get("nodeSelectorTerms"), f"{field}.nodeSelectorTerms")
    for i, term in enumerate(terms):
        where = f"{field}.nodeSelectorTerms[{i}]"
        expressions = _optional_list(_object(term, where).get("matchExpressions"), f"{where}.matchExpressions")
        for j, expression in enumerate(expressions):
            at = f"{where}.matchExpressions[{j}]"
            _object(expression, at)
            _optional_string(expression.get("key"), f"{at}.key")
            _optional_string(expression.get("operator"), f"{at}.operator")
            for k, item in enumerate(_optional_list(expression.get("values"), f"{at}.values")):
                if not isinstance(item, str):
                    raise _wrong(f"{at}.values[{k}]", "a string", item)


def _pod(value: Any, field: str = "Pod") -> Obj:
    """A Pod, as far as the verbs and the shared placement read it."""
    pod = _object(value, field)
    meta = _object(pod.get("metadata"), f"{field}.metadata")
    for key in ("name", "namespace", "uid"):
        _name(meta.get(key), f"{field}.metadata.{key}")
    _string_map(meta.get("annotations"), f"{field}.metadata.annotations")
    _numbers(meta.get("annotations") or {}, f"{field}.metadata.annotations")
    _optional_string(meta.get("deletionTimestamp"), f"{field}.metadata.deletionTimestamp")
    spec = _object(pod.get("spec"), f"{field}.spec")
    _optional_string(spec.get("nodeName"), f"{field}.spec.nodeName")
    for key in ("containers", "initContainers"):
        for i, container in enumerate(_optional_list(spec.get(key), f"{field}.spec.{key}")):
            where = f"{field}.spec.{key}[{i}]"
            _resources(_object(container, where).get("resources"), f"{where}.resources")
            _optional_string(container.get("restartPolicy"), f"{where}.restartPolicy")
    _resources(spec.get("resources"), f"{field}.spec.resources")
    _quantities(spec.get("overhead"), f"{field}.spec.overhead")
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is not None and (isinstance(grace, bool) or not isinstance(grace, int)):
        raise _wrong(f"{field}.spec.terminationGracePeriodSeconds", "an integer", grace)
    _affinity(spec.get("affinity"), f"{field}.spec.affinity")
    return dict(pod)


def _depth(value: Any) -> int:
    """How deeply a JSON value nests (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest


def _node(value: Any, field: str) -> Obj:
    node = _object(value, field)
    _name(_object(node.get("metadata"), f"{field}.metadata").get("name"), f"{field}.metadata.name")
    if _depth(node) > MAX_NODE_DEPTH:
        raise BadRequest(f"{field} nests deeper than {MAX_NODE_DEPTH} levels")
    return dict(node)


# ---- the verbs' arguments ----------------------------------------------------------------------


def parse_filter_args(body: Any) -> FilterArgs:
    """ExtenderArgs{Pod, Nodes, NodeNames}: NodeNames when set (nodeCacheCapable), else Nodes."""
    body = _object(body, "the body")
    pod = _pod(body.get("Pod"))
    names, nodes = body.get("NodeNames"), body.get("Nodes")
    if names is not None:
        if not isinstance(names, list):
            raise _wrong("NodeNames", "a list of Node names", names)
        for i, name in enumerate(names):
            _name(name, f"NodeNames[{i}]")
        return FilterArgs(pod=pod, node_names=tuple(names), nodes=None)
    if nodes is not None:
        items = _object(nodes, "Nodes").get("items")
        if not isinstance(items, list):
            raise _wrong("Nodes.items", "a list of Nodes", items)
        parsed = tuple(_node(item, f"Nodes.items[{i}]") for i, item in enumerate(items))
        return FilterArgs(pod=pod, node_names=tuple(n["metadata"]["name"] for n in parsed), nodes=parsed)
    raise BadRequest("one of NodeNames or Nodes is required")


def parse_binding_args(body: Any) -> BindingArgs:
    """ExtenderBindingArgs{PodName, PodNamespace, PodUID, Node}."""
    body = _object(body, "the body")
    return BindingArgs(*(_name(body.get(key), key) for key in ("PodName", "PodNamespace", "PodUID", "Node")))


def parse_preemption_args(body: Any) -> PreemptionArgs:
    """ExtenderPreemptionArgs{Pod, NodeNameToVictims, NodeNameToMetaVictims}: only the Pod is read."""
    body = _object(body, "the body")
    for key in ("NodeNameToVictims", "NodeNameToMetaVictims"):
        _optional_object(body.get(key), key)
    return PreemptionArgs(pod=_pod(body.get("Pod")))


# ---- answers -----------------------------------------------------------------------------------


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
                           "items": [n for n in args.nodes if n["metadata"]["name"] == allowed]}
    return result


def filter_error(message: str) -> Obj:
    return {"NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": message}


def priorities(node_names: tuple[str, ...], preferred: str | None) -> list[Obj]:
    return [{"Host": name, "Score": MAX_SCORE if name == preferred else 0} for name in node_names]
