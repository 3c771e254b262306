"""How many pre-hooks may wait for a lock at once: per Slurm node and in all, one wait per (node, job).

Why: a waiting pre-hook holds one of the hook API's threads (``--hooks-api-threads``) until its
node is locked, up to its timeout (90 s by default). Without a bound, one node's token holder
calling in a loop, or a burst of slow evictions across many nodes, takes every thread, and the
post-hooks, reboots and quick pre-hooks of every other node wait behind them. Beyond a bound the
caller gets a retryable 429 at once (nothing recorded), and the prolog asks again.

A slot is a (node, job) wait, not a call: a repeated pre-hook for the same node and job (a prolog's
retry after its connection broke, while the server still waits for the first call; or a token
holder's loop) takes that wait over instead of taking another slot. The older call is told it is
superseded and ends at once; the newer one begins only once every older call for the pair has
given its slot back (so the older one's withdrawal of its request can never land after the newer
one's request). A node so holds at most ``per_node`` waits, whatever it sends, and each wait at
most one thread beyond its own (one newer call waiting its turn; a third supersedes that one).
"""

from __future__ import annotations

import threading
from collections import Counter

import attrs


@attrs.frozen(eq=False)
class Slot:
    """One call's hold on its (node, job) wait; compared by identity. ``took_over``: an older call held it."""

    node: str
    job_id: int
    took_over: bool


@attrs.define
class _Wait:
    latest: Slot  # the one call that may go on waiting; every older one is superseded
    calls: int  # calls holding this wait (the latest and superseded ones not yet given back)


class WaitSlots:
    """``take(node, job_id)``: a Slot, held until ``give_back(slot)``, or None when a bound is reached."""

    def __init__(self, *, overall: int, per_node: int):
        if overall < 1 or per_node < 1:
            raise ValueError("the bounds on waiting pre-hooks must be at least 1")
        self.overall = overall
        self.per_node = per_node
        self._changed = threading.Condition()
        self._waits: dict[tuple[str, int], _Wait] = {}
        self._held: Counter[str] = Counter()  # waits per node
        self._total = 0

    def take(self, node: str, job_id: int) -> Slot | None:
        """A slot for this call; a call for a (node, job) already waited for takes that wait over, whatever the
        bounds (it adds no wait); else None beyond either bound."""
        key = (node, job_id)
        with self._changed:
            wait = self._waits.get(key)
            if wait is not None:
                wait.latest = Slot(node, job_id, took_over=True)
                wait.calls += 1
                self._changed.notify_all()  # (an older call waiting its turn learns it is superseded)
                return wait.latest
            if self._total >= self.overall or self._held[node] >= self.per_node:
                return None
            slot = Slot(node, job_id, took_over=False)
            self._waits[key] = _Wait(latest=slot, calls=1)
            self._held[node] += 1
            self._total += 1
            return slot

    def superseded(self, slot: Slot) -> bool:
        """Whether a newer call for the slot's (node, job) took its wait over."""
        with self._changed:
            wait = self._waits.get((slot.node, slot.job_id))
            return wait is None or wait.latest is not slot

    def wait_turn(self, slot: Slot, timeout: float) -> bool:
        """Block until every older call for the slot's (node, job) has given its slot back: True; False when
        superseded meanwhile, or still not its turn after ``timeout`` seconds."""
        key = (slot.node, slot.job_id)

        def decided() -> bool:
            wait = self._waits.get(key)
            return wait is None or wait.latest is not slot or wait.calls == 1

        with self._changed:
            self._changed.wait_for(decided, timeout)
            wait = self._waits.get(key)
            return wait is not None and wait.latest is slot and wait.calls == 1

    def give_back(self, slot: Slot) -> None:
        key = (slot.node, slot.job_id)
        with self._changed:
            wait = self._waits.get(key)
            if wait is None or wait.calls <= 0:
                raise RuntimeError(f"no waiting slot held for job {slot.job_id} on node {slot.node}")
            wait.calls -= 1
            if not wait.calls:
                del self._waits[key]
                self._held[slot.node] -= 1
                if not self._held[slot.node]:
                    del self._held[slot.node]  # (a node nobody waits for costs no memory)
                self._total -= 1
            self._changed.notify_all()  # (a newer call may be waiting its turn)

    def waiting(self, node: str | None = None) -> int:
        """Waits (distinct (node, job) pairs) held, on ``node`` or in all."""
        with self._changed:
            return self._total if node is None else self._held.get(node, 0)

    def calls(self, node: str, job_id: int) -> int:
        """Calls holding the (node, job) wait: the latest and the superseded ones still running."""
        with self._changed:
            wait = self._waits.get((node, job_id))
            return wait.calls if wait is not None else 0
