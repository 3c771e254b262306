"""How many pre-hooks may wait for a lock at once: per Slurm node and in all.

Why: a waiting pre-hook holds one of the hook API's threads (``--hooks-api-threads``) until its
node is locked, up to its timeout (90 s by default). Without a bound, one node's token holder
calling in a loop, or a burst of slow evictions across many nodes, takes every thread, and the
post-hooks, reboots and quick pre-hooks of every other node wait behind them. Beyond a bound the
caller gets a retryable 429 at once (nothing recorded), and the prolog asks again.
"""

from __future__ import annotations

import threading
from collections import Counter


class WaitSlots:
    """``take(node)``: True and a slot held until ``give_back(node)``, or False when a bound is reached."""

    def __init__(self, *, overall: int, per_node: int):
        if overall < 1 or per_node < 1:
            raise ValueError("the bounds on waiting pre-hooks must be at least 1")
        self.overall = overall
        self.per_node = per_node
        self._lock = threading.Lock()
        self._held: Counter[str] = Counter()
        self._total = 0

    def take(self, node: str) -> bool:
        with self._lock:
            if self._total >= self.overall or self._held[node] >= self.per_node:
                return False
            self._held[node] += 1
            self._total += 1
            return True

    def give_back(self, node: str) -> None:
        with self._lock:
            if self._held[node] <= 0:
                raise RuntimeError(f"no waiting slot held for node {node}")
            self._held[node] -= 1
            if not self._held[node]:
                del self._held[node]  # (a node nobody waits for costs no memory)
            self._total -= 1

    def waiting(self, node: str | None = None) -> int:
        with self._lock:
            return self._total if node is None else self._held.get(node, 0)
