"""The last eviction outcome per Pod, so a timed-out pre-hook can say what blocked the lock.

In memory only: it explains, it decides nothing. A replica that is not leading has no
entries, and its answers then name the blocking Pods without the Eviction API's words.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import attrs


@attrs.frozen
class EvictionNote:
    outcome: str  # "evicted", "blocked", "not_found" or "error"
    message: str
    at: float


class EvictionLog:
    def __init__(self, size: int = 4096):
        self._size = size
        self._lock = threading.Lock()
        self._notes: OrderedDict[str, EvictionNote] = OrderedDict()

    def record(self, pod_key: str, outcome: str, message: str, at: float) -> None:
        with self._lock:
            self._notes[pod_key] = EvictionNote(outcome, message, at)
            self._notes.move_to_end(pod_key)
            while len(self._notes) > self._size:
                self._notes.popitem(last=False)

    def get(self, pod_key: str) -> EvictionNote | None:
        with self._lock:
            return self._notes.get(pod_key)
