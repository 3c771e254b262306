"""The Slurm token of a daemon on ``/metrics``: when it expires, and how often Slurm refused it.

Every daemon talks to Slurm with one client; ``watch`` points these metrics at it (the
runner does, for each). Read at scrape time from the client's ``auth_status()``; a client
without one (pyslurm: munge) shows no series.

- ``sunk_slurm_token_expiry_seconds{source}``: seconds until the current JWT's ``exp``,
  when it has a readable one (negative once it has passed). Alert well before 0.
- ``sunk_slurm_auth_failures_total{source}``: requests Slurm refused for their credentials.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from sunk.slurm.auth import AuthStatus


def _none() -> AuthStatus | None:
    return None


_status: Callable[[], AuthStatus | None] = _none


def watch(client: Any) -> None:
    """Serve ``client``'s auth status (a RestClient's ``auth_status``); nothing for a client without one."""
    global _status
    status = getattr(client, "auth_status", None)
    _status = status if callable(status) else _none


class _SlurmAuth:
    def __init__(self, clock: Callable[[], float] = time.time):
        self.clock = clock

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        status = _status()
        if status is None:
            return
        expiry = GaugeMetricFamily("sunk_slurm_token_expiry_seconds",
                                   "Seconds until the Slurm JWT this process uses expires (its exp claim).",
                                   labels=["source"])
        if status.expires_at is not None:
            expiry.add_metric([status.source], status.expires_at - self.clock())
        yield expiry
        failures = CounterMetricFamily("sunk_slurm_auth_failures",
                                       "Requests to Slurm refused for their credentials (an expired, rotated or "
                                       "wrong token): an outage, retried.", labels=["source"])
        failures.add_metric([status.source], status.failures)
        yield failures


REGISTRY.register(_SlurmAuth())
