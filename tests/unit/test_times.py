"""Timestamps as the Kubernetes API writes them."""

from __future__ import annotations

import time

from sunk.base.times import epoch, rfc3339


def test_rfc3339_is_second_precision_utc_with_z():
    assert rfc3339(0) == "1970-01-01T00:00:00Z"
    assert rfc3339(1_700_000_000.9) == "2023-11-14T22:13:20Z"  # truncated, not rounded


def test_rfc3339_defaults_to_now():
    before = rfc3339(time.time())
    assert rfc3339() >= before


def test_epoch_reads_what_rfc3339_writes_and_the_apiservers_fractions():
    assert epoch(rfc3339(1_700_000_000)) == 1_700_000_000
    assert epoch("2023-11-14T22:13:20.250000Z") == 1_700_000_000.25
    assert epoch("2023-11-14T23:13:20+01:00") == 1_700_000_000


def test_epoch_is_none_for_anything_that_is_not_a_time():
    for stamp in (None, "", "yesterday", "2023-13-14T22:13:20Z", 1_700_000_000, ["2023-11-14T22:13:20Z"]):
        assert epoch(stamp) is None, stamp
