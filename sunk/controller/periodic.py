"""``Periodic``: a callable run every ``interval`` seconds on a thread of its own (a Manager runnable).

The safety nets (the scheduler's sweep, the Syncer's resync) and the diag poller are all
"call this now and then until stopped". Waiting on the stop event, not sleeping, is what
lets a stop end the thread at once instead of after up to a whole interval; an exception
in the callable is logged and the next interval comes anyway, since a safety net that died
on one bad pass would be gone for good. An ``Outage`` (Slurm or the apiserver down) is one
warning line, not a traceback. A leader-only one writes behind the Manager's Lease ``fence``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from sunk.base import fence as fencing
from sunk.base.fence import Fenced, LeaseFence
from sunk.model.types import Outage

log = logging.getLogger(__name__)


def daemon_thread(name: str, target: Callable[[], None]) -> threading.Thread:
    """A runnable's own thread, started (a daemon: a Manager that stops by itself must not wait on it)."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


def stop_thread(stop: threading.Event, thread: threading.Thread | None, timeout: float) -> None:
    """Set ``stop`` and wait up to ``timeout`` seconds for ``thread`` to end, unless called on that thread
    (a runnable stopped from its own callable would wait for itself)."""
    stop.set()
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout)


class Periodic:
    """``fn()`` every ``interval`` seconds (first after one interval, or at once with ``at_start``).

    An ``interval`` of 0 or less never starts the thread: that periodic task is off.
    ``stop()`` returns once a call in progress ends, or after ``join_timeout`` seconds.
    """

    def __init__(self, name: str, interval: float, fn: Callable[[], object], *, at_start: bool = False,
                 join_timeout: float = 5.0):
        self.name, self.interval, self.fn = name, interval, fn
        self.at_start, self.join_timeout = at_start, join_timeout
        self.fence: LeaseFence | None = None  # set by a Manager for a leader-only one
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.interval <= 0 or self.running:
            return
        self._stop.clear()
        self._thread = daemon_thread(self.name, self._run)

    def stop(self) -> None:
        stop_thread(self._stop, self._thread, self.join_timeout)

    def _run(self) -> None:
        if self.at_start:
            self._call()
        while not self._stop.wait(self.interval):
            self._call()

    def _call(self) -> None:
        try:
            with fencing.fenced(self.fence):
                self.fn()
        except (Outage, Fenced) as exc:
            log.warning("%s: periodic call failed; trying again in %.0fs: %s", self.name, self.interval, exc)
        except Exception:
            log.exception("%s: periodic call failed; trying again in %.0fs", self.name, self.interval)
