"""What a Slurm lister wrote into its sinks, as its informer's handlers would hear it: for tests of the lister.

Why: a lister (``sunk.slurm.cache.SlurmCache``) writes ``put``/``drop`` into its informer's store and hands
out no events; a test of the lister alone attaches a ``ListerLog`` per kind instead of an informer, and
reads what changed as handler calls (added, changed with its old value, removed), each with the time its read
was requested.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Optional

from attrs import frozen

from sunk.slurm.cache import SlurmCache

ADDED, CHANGED, REMOVED = "added", "changed", "removed"


@frozen
class Written:
    """One change a sink was told of, as a handler hears it."""

    kind: str  # "node" or "job"
    type: str  # ADDED, CHANGED or REMOVED
    key: Hashable
    old: Optional[Any]  # None when added
    new: Optional[Any]  # None when removed
    observed_at: float = 0.0


class ListerLog:
    """A ``ListerSink`` for one kind: keeps what it was told (``held``) and appends each change to ``into``
    (a write of an equal item is none, as in the informer's store)."""

    def __init__(self, kind: str, into: Callable[[Written], None], held: Mapping[Hashable, Any] = MappingProxyType({})):
        self.kind = kind
        self.held: dict[Hashable, Any] = dict(held)
        self.listings: list[tuple[frozenset[Hashable], float]] = []  # the complete listings, in order
        self._into = into

    def put(self, key: Hashable, item: Any, observed_at: float) -> None:
        old = self.held.get(key)
        self.held[key] = item
        if old != item:
            self._into(Written(self.kind, ADDED if old is None else CHANGED, key, old, item, observed_at))

    def drop(self, key: Hashable, observed_at: float) -> None:
        old = self.held.pop(key, None)
        if old is not None:
            self._into(Written(self.kind, REMOVED, key, old, None, observed_at))

    def listed(self, keys: Collection[Hashable], observed_at: float) -> None:
        """As the informer's store: what the listing does not show is gone (this log holds only the lister's
        writes, so the lister has dropped it already, unless it lost track of it)."""
        self.listings.append((frozenset(keys), observed_at))
        for key in [key for key in self.held if key not in keys]:
            self.drop(key, observed_at)


def record(cache: SlurmCache, into: Callable[[Written], None], *, kinds: Optional[Iterable[str]] = None,
           replay: bool = True) -> Callable[[], None]:
    """Attach a ``ListerLog`` per kind (every kind the cache holds when None); without ``replay`` it starts
    from what the cache holds, so that a later change reads as one. Returns a function that detaches them."""
    detach = [cache.add_sink(kind, ListerLog(kind, into, {} if replay else cache.held(kind)), replay=replay)
              for kind in (kinds if kinds is not None else cache.kinds)]

    def detach_all() -> None:
        for one in detach:
            one()

    return detach_all
