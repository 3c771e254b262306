"""Fencing: no write leaves a replica that may no longer hold its Lease.

Why: leader election alone is timing. A leader that stops renewing gives up after the renew
deadline, but reconciles already running keep writing until they end, while the new leader
(which waits out the lease duration on its own clock) starts writing too. So every write a
leader-only controller makes asks its fence first: held means "renewed within the renew
deadline, as measured from the start of the last successful renewal". A monotonic-clock
comparison, cheap enough for every write.

The fence reaches the writers through the thread: the controller runtime sets it around each
reconcile (``fenced``), and the client seams (``sunk.kube.client``, ``sunk.slurm``) call
``check`` before each write. A thread without a fence (an informer, the elector itself, the
hook API) is not fenced. A leaf module: stdlib only, no I/O.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Fenced(Exception):
    """A write was refused because this replica may no longer hold its Lease."""


class LeaseFence:
    """Held from ``renewed(at)`` until ``at + renew_deadline``, or until ``revoke()``.

    The elector calls ``renewed`` with the monotonic time at which its successful acquire or
    renewal began (its start, not its answer: the record may have been stored, and a
    candidate's wait begun, any time after the request left), and ``revoke`` when it stops
    leading. Safe from any thread: one float read, one comparison.
    """

    def __init__(self, renew_deadline: float, clock: Callable[[], float] = time.monotonic):
        if renew_deadline <= 0:
            raise ValueError("renew_deadline must be > 0")
        self.renew_deadline = renew_deadline
        self._clock = clock
        self._until = float("-inf")  # monotonic time after which no write may leave

    def renewed(self, at: float) -> None:
        self._until = max(self._until, at + self.renew_deadline)

    def revoke(self) -> None:
        self._until = float("-inf")

    def held(self) -> bool:
        return self._clock() < self._until

    def check(self, what: str) -> None:
        """Raise ``Fenced`` unless the Lease is held now; ``what`` names the write, for the log."""
        if not self.held():
            raise Fenced(f"{what}: not sent, this replica no longer holds its Lease (or has not renewed it "
                         f"within the {self.renew_deadline:g}s renew deadline)")


_current = threading.local()


@contextmanager
def fenced(fence: LeaseFence | None) -> Iterator[None]:
    """Within the block, writes on this thread ask ``fence`` first (None: not fenced)."""
    previous = getattr(_current, "fence", None)
    _current.fence = fence
    try:
        yield
    finally:
        _current.fence = previous


def current() -> LeaseFence | None:
    """This thread's fence (None: unfenced): for work handed to another thread that must stay fenced,
    such as the Event a reconcile records and the recorder's thread sends."""
    return getattr(_current, "fence", None)


def check(what: str) -> None:
    """Before a write: raise ``Fenced`` if this thread's fence is no longer held. Free when unfenced."""
    fence: LeaseFence | None = getattr(_current, "fence", None)
    if fence is not None:
        fence.check(what)
