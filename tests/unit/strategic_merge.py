"""kube-apiserver's strategic merge of a list whose merge key is ``type`` (Pod conditions), for unit tests."""

from __future__ import annotations

from typing import Any


def merged_conditions(existing: list[dict[str, Any]], patch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """As apimachinery's ``mergeSlice`` (v0.34): every ``$patch: delete`` removes all entries of its type first;
    then each other entry merges into the first entry of its type, or is appended."""
    out = [dict(c) for c in existing]
    for entry in patch:
        if entry.get("$patch") == "delete":
            out = [c for c in out if c.get("type") != entry["type"]]
    for entry in patch:
        if "$patch" not in entry:
            same = next((c for c in out if c.get("type") == entry["type"]), None)
            if same is None:
                out.append(dict(entry))
            else:
                same.update(entry)
    return out
