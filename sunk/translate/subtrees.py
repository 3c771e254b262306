"""One copy of each part that many stored objects hold alike: their tolerations, containers, owner references.

Why: at 100k Pods a store pays for each Pod's dicts (about 200 bytes each before their contents), and most of
them are the same for every Pod of one template: the tolerations the admission plugins add, the folded
requests, the owner reference of one Job's Pods. ``one_copy`` returns the one frozen copy every equal part
shares (as ``sys.intern`` does for strings), so a store holds each once.

Equal means equal in type too: ``{"x": 1}``, ``{"x": 1.0}`` and ``{"x": True}`` compare equal in Python and are
three parts here, so no object ever reads another's value back in a type its author did not write. The copies
are frozen (``FrozenDict``, ``FrozenList``: a write raises ``TypeError``): a reader that changed a stored part in
place would change it for every object holding it. They are a ``dict`` and a ``list`` to every reader, to
``json.dumps`` and to ``==``; ``copy`` and ``deepcopy`` give plain, writable ones.

The table holds its copies strongly and lets go of those no stored object holds any more whenever it has doubled
since it last did (amortized O(1) per part, no sweep per event)."""

from __future__ import annotations

import copy
import sys
import threading
from collections.abc import Hashable, Mapping
from typing import Any, NoReturn, Optional

MIN_SWEEP = 1024


def _refuse(self: object, *_args: Any, **_kwargs: Any) -> NoReturn:
    raise TypeError(f"a stored {type(self).__name__} is shared by every object equal to it: copy it to change it")


class FrozenDict(dict):  # type: ignore[type-arg]
    """A ``dict`` that refuses writes (``one_copy``'s parts)."""

    __slots__ = ()
    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse

    def __copy__(self) -> dict[Any, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[Any, Any]:
        return {k: copy.deepcopy(v, memo) for k, v in self.items()}

    def __reduce__(self) -> Any:
        return (dict, (dict(self),))


class FrozenList(list):  # type: ignore[type-arg]
    """A ``list`` that refuses writes (``one_copy``'s parts)."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = append = extend = insert = pop = remove = clear = sort = \
        reverse = _refuse

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return [copy.deepcopy(v, memo) for v in self]

    def __reduce__(self) -> Any:
        return (list, (list(self),))


MAX_DEPTH = 32
"""Parts nested deeper are kept as they are: API objects' own fields are far shallower."""


def _key(value: Any, depth: int = MAX_DEPTH) -> tuple[Any, ...]:
    """What tells parts apart, as one flat tuple per dict or list: its kind, then per entry (key,) type and value,
    a nested part's value its own key. Each value carries its type, so ``1``, ``1.0`` and ``True`` differ."""
    if depth <= 0:
        raise ValueError("nested too deep to share")
    if isinstance(value, dict):
        out: list[Any] = [dict]
        for k, v in value.items():
            out += (k, type(v), _key(v, depth - 1) if isinstance(v, (dict, list)) else v)
        return tuple(out)
    out = [list]
    for v in value:
        out += (type(v), _key(v, depth - 1) if isinstance(v, (dict, list)) else v)
    return tuple(out)


class SubtreeTable:
    """The one copy of each part, by ``_key``; thread-safe (the informers' threads share it)."""

    def __init__(self) -> None:
        self._copies: dict[Hashable, Any] = {}
        self._lock = threading.Lock()
        self._sweep_at = MIN_SWEEP

    def __len__(self) -> int:
        return len(self._copies)

    def one_copy(self, value: Any) -> Any:
        """The frozen copy of ``value`` (a dict or a list of JSON values, rebuilt frozen all through) that every
        part equal to it shares; strings interned; anything else, or a part nested deeper than ``MAX_DEPTH``, is
        returned as it is."""
        if isinstance(value, str):
            return sys.intern(value)
        if not isinstance(value, (dict, list)):
            return value
        try:
            key = _key(value)
            hash(key)
        except (ValueError, TypeError):  # (too deep; a value that is no JSON value)
            return value
        with self._lock:
            found = self._copies.get(key)
            if found is not None:
                return found
        frozen = _frozen(value)
        with self._lock:
            found = self._copies.setdefault(key, frozen)
            if len(self._copies) >= self._sweep_at:
                self._sweep()
        return found

    def _sweep(self) -> None:
        """Let go of the copies only the table holds (a reference count of 2: the table's and the call's)."""
        for key in [k for k in self._copies if sys.getrefcount(self._copies[k]) <= 2]:
            del self._copies[key]
        self._sweep_at = max(MIN_SWEEP, 2 * len(self._copies))


def _frozen(value: Any) -> Any:
    if isinstance(value, str):
        return sys.intern(value)
    if isinstance(value, dict):
        return FrozenDict((sys.intern(str(k)), _frozen(v)) for k, v in value.items())
    if isinstance(value, list):
        return FrozenList(_frozen(v) for v in value)
    return value


SUBTREES = SubtreeTable()
"""The process's one table (the Pod, claim and slice stores share it)."""


def one_copy(value: Any) -> Any:
    return SUBTREES.one_copy(value)


def one_copy_of(part: Optional[Mapping[str, Any]], keys: tuple[str, ...]) -> Optional[dict[str, Any]]:
    """``part`` with the values of ``keys`` replaced by their one copy (None: ``part`` is None)."""
    if part is None:
        return None
    return {k: (one_copy(v) if k in keys else v) for k, v in part.items()}
