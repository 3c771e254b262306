"""The Slurm node's Extra field: the Syncer's JSON facts merged with whatever users keep there.

Users may add keys; they survive. On a conflict the Syncer's keys win. Text that is not a
JSON object is replaced (and the caller logs a warning): the field must stay machine
readable for everything that parses it. The output is canonical (sorted keys, compact),
so "changed" is exact and the Syncer writes only on a real change.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from attrs import frozen

JSONValue = Any


@frozen
class MergeResult:
    text: str
    changed: bool
    replaced_invalid: bool


def canonical(value: Mapping[str, JSONValue]) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def merge_extra(current: str, syncer_facts: Mapping[str, JSONValue]) -> MergeResult:
    current = current or ""
    replaced_invalid = False
    user: dict[str, JSONValue] = {}
    if current.strip():
        try:
            parsed = json.loads(current)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            user = parsed
        else:
            replaced_invalid = True
    text = canonical({**user, **syncer_facts})
    return MergeResult(text=text, changed=text != current, replaced_invalid=replaced_invalid)
