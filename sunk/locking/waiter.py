"""Blocking waits on the informer's view of one object, woken by its events.

Why not poll: a pre-hook holds a prolog (and so a Slurm job) until the lock is reached;
waking on the very watch event that carries the new annotation keeps that delay at the
watch's latency, and 100 waiting prologs cost nothing while they wait.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from sunk.kube.resources import object_key
from sunk.model.types import Obj

Lookup = Callable[[str], Obj | None]


class ObjectWaiter:
    """``wait(key, predicate, timeout)``; feed it the informer's events with ``notify``."""

    def __init__(self, lookup: Lookup):
        self._lookup = lookup
        self._lock = threading.Lock()
        self._conds: dict[str, threading.Condition] = {}

    def _cond(self, key: str) -> threading.Condition:
        with self._lock:
            cond = self._conds.get(key)
            if cond is None:
                cond = self._conds[key] = threading.Condition()
            return cond

    def notify(self, obj: Obj) -> None:
        self.wake(object_key(obj))

    def wake(self, key: str) -> None:
        """Wake every wait on ``key`` to look again (its predicate, and whether it was cancelled)."""
        with self._lock:
            cond = self._conds.get(key)
        if cond is not None:
            with cond:
                cond.notify_all()

    # Informer handler signatures.
    def on_add(self, obj: Obj) -> None:
        self.notify(obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        self.notify(new)

    def on_delete(self, obj: Obj) -> None:
        self.notify(obj)

    def wait(self, key: str, predicate: Callable[[Obj | None], bool], timeout: float,
             cancelled: Callable[[], bool] = lambda: False) -> tuple[bool, Obj | None]:
        """(whether ``predicate`` held before ``timeout``, the last object seen); ends early, False, once
        ``cancelled()`` (set it, then ``wake(key)``)."""
        deadline = time.monotonic() + timeout
        cond = self._cond(key)
        with cond:
            while True:
                obj = self._lookup(key)
                if predicate(obj):
                    return True, obj
                remaining = deadline - time.monotonic()
                if remaining <= 0 or cancelled():
                    return False, obj
                cond.wait(remaining)
