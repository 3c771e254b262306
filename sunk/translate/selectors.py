"""Which Kubernetes Nodes a ``nodeSelector`` and a required node affinity select, as kube-scheduler reads them.

Why a matcher of our own: the NodeSet decides which Nodes get a slurmd Pod before any Pod
exists, so nothing in Kubernetes answers the question for it. The semantics are the
scheduler's (k8s.io/component-helpers/scheduling/corev1/nodeaffinity):

- ``nodeSelector``: every key present with exactly that value.
- ``nodeSelectorTerms``: ORed. Within a term, every ``matchExpressions`` and ``matchFields``
  requirement must hold; a term with neither matches no Node.
- Operators: ``In`` and ``NotIn`` (a missing label is "not in"), ``Exists``,
  ``DoesNotExist``, ``Gt`` and ``Lt`` (the label must be there and an integer).
  ``matchFields`` knows one field, ``metadata.name``, with ``In`` and ``NotIn``.

``problems`` says what is wrong with a selector in words for a status condition; ``matches``
expects one without problems (ValueError otherwise), so a bad selector selects nothing
rather than something unintended. ``label_selector_problems`` and ``toleration_problems`` check a
``nodeSelector`` and ``tolerations`` copied into a Pod template as the apiserver's validation does,
so a bad value is refused in a status, not by the apply that would carry it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

Obj = Mapping[str, Any]

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
FIELD_OPERATORS = ("In", "NotIn")
NAME_FIELD = "metadata.name"
TERMS_PATH = "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
# A Kubernetes label key (optional DNS-subdomain prefix, then a name of at most 63 characters) and value.
# (the prefix a DNS-1123 subdomain: dot-separated labels, each starting and ending with a letter or digit; at most
# 253 characters, which ``is_label_key`` checks)
LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                       r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
TOLERATION_OPERATORS = ("Equal", "Exists")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TOLERATION_FIELDS = frozenset({"key", "operator", "value", "effect", "tolerationSeconds"})
MAX_SELECTOR_LABELS = 32
MAX_TOLERATIONS = 32


_DECIMAL = re.compile(r"[+-]?[0-9]+")
_INT64 = 2 ** 63


def _integer(text: object) -> int | None:
    """As Go's ``strconv.ParseInt(text, 10, 64)``, which kube-scheduler and the kubelet use: decimal digits with
    an optional sign, within int64 (Python's ``int`` also takes ``5_0``, spaces and any size)."""
    if not isinstance(text, str) or not _DECIMAL.fullmatch(text):
        return None
    value = int(text)
    return value if -_INT64 <= value < _INT64 else None


def requirement_problems(req: object, where: str, *, field: bool = False) -> list[str]:
    """What is wrong with one ``matchExpressions``/``matchFields`` entry (empty: nothing)."""
    if not isinstance(req, Mapping):
        return [f"{where}: must be an object"]
    key, op, values = req.get("key"), req.get("operator"), req.get("values")
    problems: list[str] = []
    if not isinstance(key, str) or not key:
        problems.append(f"{where}.key: must be a non-empty string")
    elif field and key != NAME_FIELD:
        problems.append(f"{where}.key: only {NAME_FIELD} is supported, got {key!r}")
    allowed = FIELD_OPERATORS if field else OPERATORS
    if op not in allowed:
        problems.append(f"{where}.operator: must be one of {', '.join(allowed)}, got {op!r}")
        return problems
    if values is not None and (not isinstance(values, list) or not all(isinstance(v, str) for v in values)):
        return [*problems, f"{where}.values: must be a list of strings"]
    count = len(values or [])
    if op in ("In", "NotIn") and count == 0:
        problems.append(f"{where}.values: {op} needs at least one value")
    elif op in ("Exists", "DoesNotExist") and count:
        problems.append(f"{where}.values: {op} takes no values")
    elif op in ("Gt", "Lt") and (count != 1 or _integer((values or [""])[0]) is None):
        problems.append(f"{where}.values: {op} takes exactly one integer")
    return problems


def term_problems(term: object, where: str) -> list[str]:
    if not isinstance(term, Mapping):
        return [f"{where}: must be an object"]
    problems: list[str] = []
    for name, field in (("matchExpressions", False), ("matchFields", True)):
        reqs = term.get(name)
        if reqs is None:
            continue
        if not isinstance(reqs, list):
            problems.append(f"{where}.{name}: must be a list")
            continue
        for i, req in enumerate(reqs):
            problems.extend(requirement_problems(req, f"{where}.{name}[{i}]", field=field))
    return problems


def problems(node_selector: object, affinity: object) -> list[str]:
    """What is wrong with a NodeSet's ``nodeSelector`` and ``affinity`` (empty: both usable)."""
    found: list[str] = []
    if node_selector is not None:
        if not isinstance(node_selector, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in node_selector.items()):
            found.append("nodeSelector: must map label keys to string values")
    terms = required_terms(affinity)
    if terms is None:
        found.append(f"{TERMS_PATH}: must be a non-empty list")
        return found
    for i, term in enumerate(terms):
        found.extend(term_problems(term, f"{TERMS_PATH}[{i}]"))
    return found


def is_label_key(key: object) -> bool:
    """Whether ``key`` is a Kubernetes label (or taint) key: ``[prefix/]name``, prefix at most 253 characters."""
    return isinstance(key, str) and bool(LABEL_KEY.fullmatch(key)) and len(key.rpartition("/")[0]) <= 253


def label_selector_problems(node_selector: object, where: str) -> list[str]:
    """What the apiserver would refuse in a Pod's ``nodeSelector`` (empty: nothing)."""
    if node_selector is None:
        return []
    if not isinstance(node_selector, Mapping):
        return [f"{where}: must map label keys to values"]
    if len(node_selector) > MAX_SELECTOR_LABELS:
        return [f"{where}: at most {MAX_SELECTOR_LABELS} labels"]
    found = []
    for key, value in node_selector.items():
        if not is_label_key(key):
            found.append(f"{where}: {str(key)[:80]!r} is not a label key")
        elif not isinstance(value, str) or not LABEL_VALUE.fullmatch(value):
            found.append(f"{where}.{key}: {str(value)[:80]!r} is not a label value")
    return found


def toleration_problems(tolerations: object, where: str) -> list[str]:
    """What the apiserver would refuse in a Pod's ``tolerations`` (empty: nothing); no field it would drop."""
    if tolerations is None:
        return []
    if not isinstance(tolerations, list):
        return [f"{where}: must be a list"]
    if len(tolerations) > MAX_TOLERATIONS:
        return [f"{where}: at most {MAX_TOLERATIONS} tolerations"]
    found: list[str] = []
    for i, toleration in enumerate(tolerations):
        found.extend(_toleration_problems(toleration, f"{where}[{i}]"))
    return found


def _toleration_problems(toleration: object, where: str) -> list[str]:
    if not isinstance(toleration, Mapping):
        return [f"{where}: must be an object"]
    unknown = sorted(str(k)[:40] for k in toleration if k not in TOLERATION_FIELDS)
    if unknown:
        return [f"{where}: unknown field {', '.join(unknown)}"]
    fields = {name: toleration.get(name) for name in ("key", "operator", "value", "effect")}
    wrong = [name for name, value in fields.items() if value is not None and not isinstance(value, str)]
    if wrong:
        return [f"{where}.{name}: must be a string" for name in wrong]
    key, value = fields["key"] or "", fields["value"] or ""
    operator, effect = fields["operator"] or "Equal", fields["effect"] or ""
    seconds = toleration.get("tolerationSeconds")
    found: list[str] = []
    if key and not is_label_key(key):
        found.append(f"{where}.key: {key[:80]!r} is not a label key")
    if operator not in TOLERATION_OPERATORS:
        found.append(f"{where}.operator: must be one of {', '.join(TOLERATION_OPERATORS)}, got {operator[:20]!r}")
    elif operator == "Exists" and value:
        found.append(f"{where}.value: must be empty when operator is Exists")
    elif not key and operator != "Exists":
        found.append(f"{where}.operator: must be Exists when key is empty (every taint)")
    if not LABEL_VALUE.fullmatch(value):
        found.append(f"{where}.value: {value[:80]!r} is not a label value")
    if effect and effect not in TAINT_EFFECTS:
        found.append(f"{where}.effect: must be one of {', '.join(TAINT_EFFECTS)}, got {effect[:20]!r}")
    if seconds is not None:
        if isinstance(seconds, bool) or not isinstance(seconds, int):
            found.append(f"{where}.tolerationSeconds: must be a whole number")
        elif effect != "NoExecute":
            found.append(f"{where}.tolerationSeconds: only with effect NoExecute")
    return found


def required_terms(affinity: object) -> Sequence[Any] | None:
    """The required node affinity's terms: () when there is no required affinity, None when malformed."""
    if affinity is None:
        return ()
    if not isinstance(affinity, Mapping):
        return None
    node_affinity = affinity.get("nodeAffinity")
    if node_affinity is None:
        return ()
    if not isinstance(node_affinity, Mapping):
        return None
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return ()
    if not isinstance(required, Mapping):
        return None
    terms = required.get("nodeSelectorTerms")
    if not isinstance(terms, list) or not terms:
        return None
    return terms


def _requirement_holds(req: Obj, value: str | None) -> bool:
    op, values = req["operator"], req.get("values") or []
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    number, bound = _integer(value), _integer(values[0])
    if number is None or bound is None:
        return False
    return number > bound if op == "Gt" else number < bound


def _term_holds(term: Obj, name: str, labels: Mapping[str, str]) -> bool:
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    return (all(_requirement_holds(r, labels.get(r["key"])) for r in expressions)
            and all(_requirement_holds(r, name) for r in fields))


def matches(node: Obj, node_selector: Mapping[str, str] | None, affinity: object) -> bool:
    """Whether the Kubernetes Node ``node`` is selected; ValueError for a selector with ``problems``."""
    found = problems(node_selector, affinity)
    if found:
        raise ValueError("; ".join(found))
    return matches_checked(node, node_selector, affinity)


def matches_checked(node: Obj, node_selector: Mapping[str, str] | None, affinity: object) -> bool:
    """``matches`` for a selector already found without ``problems``: one check for many Nodes."""
    meta = node.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    if any(labels.get(k) != v for k, v in (node_selector or {}).items()):
        return False
    terms = required_terms(affinity) or ()
    return not terms or any(_term_holds(t, str(meta.get("name", "")), labels) for t in terms)
