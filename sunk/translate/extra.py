"""The Slurm node's Extra field: the Syncer's JSON facts merged with whatever users keep there.

Why these rules:
- Users may add keys; they survive. On a conflict the Syncer's keys win, so what the field
  says about Kubernetes is always the Syncer's current view.
- Text that is not a JSON object (garbage, a JSON list, a bare string, or JSON that only
  Python reads, such as ``NaN`` or ``Infinity``) is replaced whole and flagged, so the caller
  logs a warning: the field must stay machine-readable for every tool that parses it.
  Empty (or blank) Extra is simply empty, not invalid.
- The output is canonical: sorted keys, compact separators, UTF-8 kept as is (escaped only
  when the text holds a lone surrogate that UTF-8 cannot carry). So ``changed`` means the
  text really differs, the Syncer writes only then, and merging twice equals merging once.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Optional

from attrs import frozen

JSONValue = Any


@frozen
class MergeResult:
    """``text`` to store; ``changed``: it differs from the current text; ``replaced_invalid``: warn."""

    text: str
    changed: bool
    replaced_invalid: bool


def canonical(value: Mapping[str, JSONValue]) -> str:
    """One text per JSON object: sorted keys, no spaces; ValueError for NaN/Infinity (not JSON)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from a \ud800 escape: keep it escaped
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return text


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} does not fit a float")
    return value


def parse_object(text: str) -> Optional[dict[str, JSONValue]]:
    """The JSON object in ``text``, or None when it is not one (strict JSON only)."""
    try:
        parsed = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except (ValueError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else None


def merge_extra(current: str, syncer_facts: Mapping[str, JSONValue]) -> MergeResult:
    """The Extra to store: ``current``'s keys, overwritten by ``syncer_facts``; see the module docstring."""
    current = current or ""
    user: dict[str, JSONValue] = {}
    replaced_invalid = False
    if current.strip():
        parsed = parse_object(current)
        if parsed is None:
            replaced_invalid = True
        else:
            user = parsed
    text = canonical({**user, **syncer_facts})
    return MergeResult(text=text, changed=text != current, replaced_invalid=replaced_invalid)
