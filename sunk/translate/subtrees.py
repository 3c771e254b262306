"""One copy of each part that many stored objects hold alike: their tolerations, containers, owner references.

Why: at 100k Pods a store pays for each Pod's dicts (about 200 bytes each before their contents), and most of
them are the same for every Pod of one template: the tolerations the admission plugins add, the folded
requests, the owner reference of one Job's Pods. ``one_copy`` returns the one frozen copy every equal part
shares (as ``sys.intern`` does for strings), so a store holds each once.

Equal means the same JSON text: ``{"x": 1}``, ``{"x": 1.0}``, ``{"x": true}`` and ``-0.0`` beside ``0.0``, which
Python compares equal, are different parts here, so no object ever reads another's value back in a form its
author did not write. A part is found by a keyed digest of that text (a hash no tenant can aim at: Python's
integers hash alike on purpose, ``hash(-1) == hash(-2)``, and parts made to collide would make every lookup
walk them all). The copies are frozen (``FrozenDict``, ``FrozenList``: a write raises ``TypeError``): a reader
that changed a stored part in place would change it for every object holding it. They are a ``dict`` and a
``list`` to every reader, to ``json.dumps`` and to ``==``; ``copy`` and ``deepcopy`` give plain, writable ones.

The table holds its copies weakly: a part no stored object holds any more (an edited Pod's old labels) is freed
with its last holder, whatever its size."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import sys
import threading
import weakref
from typing import Any, NoReturn, Optional


def _refuse(self: object, *_args: Any, **_kwargs: Any) -> NoReturn:
    raise TypeError(f"a stored {type(self).__name__} is shared by every object equal to it: copy it to change it")


class FrozenDict(dict):  # type: ignore[type-arg]
    """A ``dict`` that refuses writes (``one_copy``'s parts)."""

    __slots__ = ("__weakref__",)
    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse

    def __copy__(self) -> dict[Any, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[Any, Any]:
        return {k: copy.deepcopy(v, memo) for k, v in self.items()}

    def __reduce__(self) -> Any:
        return (dict, (dict(self),))


class FrozenList(list):  # type: ignore[type-arg]
    """A ``list`` that refuses writes (``one_copy``'s parts)."""

    __slots__ = ("__weakref__",)
    __setitem__ = __delitem__ = __iadd__ = __imul__ = append = extend = insert = pop = remove = clear = sort = \
        reverse = _refuse

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return [copy.deepcopy(v, memo) for v in self]

    def __reduce__(self) -> Any:
        return (list, (list(self),))


MAX_DEPTH = 32
"""Parts nested deeper are kept as they are, unshared: API objects' own fields are far shallower."""


def _nested_within(value: Any, depth: int) -> bool:
    if isinstance(value, dict):
        return depth > 0 and all(_nested_within(v, depth - 1) for v in value.values())
    if isinstance(value, list):
        return depth > 0 and all(_nested_within(v, depth - 1) for v in value)
    return True


class SubtreeTable:
    """The one copy of each part, by a keyed digest of its JSON text, held weakly; thread-safe (the informers'
    threads share it)."""

    def __init__(self) -> None:
        self._copies: weakref.WeakValueDictionary[bytes, Any] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()
        self._secret = os.urandom(16)

    def __len__(self) -> int:
        return len(self._copies)

    def key(self, value: Any) -> Optional[bytes]:
        """What finds ``value``'s copy: a keyed digest of its JSON text (None: no part to share)."""
        if not isinstance(value, (dict, list)) or not _nested_within(value, MAX_DEPTH):
            return None
        try:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), check_circular=False)
        except (TypeError, ValueError):  # (what is no JSON value)
            return None
        return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16, key=self._secret).digest()

    def one_copy(self, value: Any) -> Any:
        """The frozen copy of ``value`` (a dict or a list of JSON values, rebuilt frozen all through) that every
        part of the same JSON text shares; strings interned; anything else, or a part nested deeper than
        ``MAX_DEPTH`` or holding what is no JSON value, is returned as it is."""
        if isinstance(value, str):
            return sys.intern(value)
        if (key := self.key(value)) is None:
            return value
        with self._lock:
            found = self._copies.get(key)
        if found is not None:
            return found
        frozen = _frozen(value)
        with self._lock:
            return self._copies.setdefault(key, frozen)


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
