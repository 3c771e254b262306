"""Noticing that the apiserver answers again, so that the keys that waited for it go at once.

Why: the Slurm side has an event for the end of its outage (the Slurm cache lists again,
``on_recovered``); the Kubernetes side had none, so after a kube-apiserver restart each key
waited out the backoff its failures had built (up to 5 minutes). The informers' reconnects
are no such event: they back off up to 30 s and resume their watches without a change to
report. So while some key waits for Kubernetes, one cheap request (``GET /readyz``, which
every authenticated client may read and which fails while etcd does) is sent each
``interval``; the first success after a failure wakes the waiting keys.

A success with no failure before it wakes nothing: the apiserver answers while some writes
fail (a failing webhook, an overloaded etcd it does not report), and waking the same keys
every interval would turn their backoff into a one-second loop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from .periodic import daemon_thread, stop_thread

log = logging.getLogger(__name__)

PROBE_INTERVAL = 1.0  # seconds between probes while keys wait: the bound on how late they wake


class RecoveryProbe:
    """While ``waiting()``, ``probe()`` every ``interval``; ``wake()`` on its first success after a failure."""

    def __init__(self, name: str, *, waiting: Callable[[], bool], probe: Callable[[], bool],
                 wake: Callable[[], object], interval: float = PROBE_INTERVAL):
        self.name, self.interval = name, interval
        self._waiting, self._probe, self._wake = waiting, probe, wake
        self._failed = False  # the probe failed since keys began to wait
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def step(self) -> bool:
        """One round: True when it woke the waiting keys."""
        if not self._waiting():
            self._failed = False
            return False
        try:
            ok = self._probe()
        except Exception as exc:  # a probe that raises is a failed probe, never a dead thread
            log.debug("%s: probe raised: %s", self.name, exc)
            ok = False
        if not ok:
            if not self._failed:
                log.info("%s: not answering; its waiting keys go as soon as it does", self.name)
            self._failed = True
            return False
        if not self._failed:
            return False
        self._failed = False
        log.info("%s: answering again", self.name)
        self._wake()
        return True

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = daemon_thread(self.name, self._run)

    def stop(self) -> None:
        stop_thread(self._stop, self._thread, self.interval + 5.0)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.step()
