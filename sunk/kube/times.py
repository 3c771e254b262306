"""Timestamps in the form the Kubernetes API writes them.

A leaf module: Events, patches (condition and taint times) and the Syncer all stamp
objects, and none of them should import another just for the clock format.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime


def rfc3339(ts: float | None = None) -> str:
    """Second-precision RFC 3339 in UTC (``2024-05-01T12:00:00Z``), as metav1.Time and core/v1
    Event timestamps are; ``ts`` defaults to now."""
    return datetime.fromtimestamp(time.time() if ts is None else ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
