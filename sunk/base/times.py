"""Timestamps in the form the Kubernetes API writes them, both ways.

A leaf module: Events, patches (condition and taint times), the Syncer's rules and the drain
reasons all read or write these, and none of them should import another just for the format.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime


def rfc3339(ts: float | None = None) -> str:
    """Second-precision RFC 3339 in UTC (``2024-05-01T12:00:00Z``), as metav1.Time and core/v1
    Event timestamps are; ``ts`` defaults to now."""
    return datetime.fromtimestamp(time.time() if ts is None else ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch(stamp: object) -> float | None:
    """The Unix time of a Kubernetes timestamp (``2024-05-01T12:00:00Z``, fractions too); None for
    anything else: a field that is missing or malformed is not a time."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
