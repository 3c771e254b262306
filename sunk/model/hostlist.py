"""Slurm hostlist expressions (``node[1-3,07],login``) to names and back.

Slurm reports a job's and a partition's nodes as one compressed expression; code that
needs the names must expand it, and splitting on "," is wrong as soon as a range appears.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)$")


def split_top_level(expr: str, brackets: str = "[]") -> list[str]:
    """Split on commas that are not inside ``brackets`` (a hostlist's ``[]``; a GRES detail's ``()``)."""
    opening, closing = brackets[0], brackets[1]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(expr):
        if ch == opening:
            depth += 1
        elif ch == closing:
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced {closing!r} in {expr!r}")
        elif ch == "," and depth == 0:
            parts.append(expr[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced {opening!r} in {expr!r}")
    parts.append(expr[start:])
    return [p.strip() for p in parts if p.strip()]


def _expand_ranges(spec: str) -> list[str]:
    """``1-3,07`` -> ["1", "2", "3", "07"], keeping the zero padding of each range."""
    out: list[str] = []
    for item in spec.split(","):
        m = _RANGE.match(item.strip())
        if not m:
            raise ValueError(f"bad range {item!r} in hostlist")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        width = len(lo) if lo.startswith("0") else 0
        if int(hi) < int(lo):
            raise ValueError(f"descending range {item!r} in hostlist")
        out.extend(str(n).zfill(width) for n in range(int(lo), int(hi) + 1))
    return out


def _expand_one(host: str) -> list[str]:
    # "rack[1-2]-n[1-2]" is a product of its bracket groups, as in Slurm.
    pieces = re.split(r"\[([^\]]*)\]", host)
    choices = [[p] if i % 2 == 0 else _expand_ranges(p) for i, p in enumerate(pieces)]
    return ["".join(combo) for combo in itertools.product(*choices)]


def expand(expr: str | None) -> tuple[str, ...]:
    """All host names in ``expr``, in Slurm's order; duplicates kept, as Slurm keeps them."""
    if not expr or expr in ("(null)", "None"):
        return ()
    return tuple(name for part in split_top_level(expr) for name in _expand_one(part))


def compress(names: Iterable[str]) -> str:
    """A short expression for ``names``: one bracket group per prefix and zero-padding width.

    Duplicates are dropped and numbers sorted within a group; the groups keep first-seen order.
    """
    parsed: list[tuple[str, str] | str] = []
    padded: dict[str, set[int]] = {}
    for name in names:
        m = _TRAILING_NUMBER.match(name)
        if not m:
            parsed.append(name)
            continue
        prefix, digits = m.group(1), m.group(2)
        parsed.append((prefix, digits))
        if len(digits) > 1 and digits.startswith("0"):
            padded.setdefault(prefix, set()).add(len(digits))
    groups: dict[tuple[str, int], set[int]] = {}
    order: list[tuple[str, int] | str] = []
    for item in parsed:
        if isinstance(item, str):
            order.append(item)
            continue
        prefix, digits = item
        width = len(digits) if len(digits) in padded.get(prefix, ()) else 0
        key = (prefix, width)
        if key not in groups:
            groups[key] = set()
            order.append(key)
        groups[key].add(int(digits))
    return ",".join(item if isinstance(item, str) else _group(item[0], item[1], sorted(groups[item]))
                    for item in order)


def _group(prefix: str, width: int, numbers: list[int]) -> str:
    if len(numbers) == 1:
        return f"{prefix}{str(numbers[0]).zfill(width)}"
    spans = []
    start = prev = numbers[0]
    for number in [*numbers[1:], None]:
        if number is not None and number == prev + 1:
            prev = number
            continue
        lo, hi = str(start).zfill(width), str(prev).zfill(width)
        spans.append(lo if start == prev else f"{lo}-{hi}")
        if number is not None:
            start = prev = number
    return f"{prefix}[{','.join(spans)}]"
