"""Timestamps as the Kubernetes API writes them."""

from __future__ import annotations

import time

from sunk.kube.times import rfc3339


def test_rfc3339_is_second_precision_utc_with_z():
    assert rfc3339(0) == "1970-01-01T00:00:00Z"
    assert rfc3339(1_700_000_000.9) == "2023-11-14T22:13:20Z"  # truncated, not rounded


def test_rfc3339_defaults_to_now():
    before = rfc3339(time.time())
    assert rfc3339() >= before
