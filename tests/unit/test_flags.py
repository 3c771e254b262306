"""Go-style durations, as the entry points' flags take them."""

from __future__ import annotations

import argparse

import pytest

from sunk.base.flags import duration, non_negative_duration, positive_duration


@pytest.mark.parametrize(("text", "seconds"), [
    ("30s", 30), ("1m30s", 90), ("500ms", 0.5), ("1h", 3600), ("2.5s", 2.5), ("45", 45), (" 7 ", 7), ("0", 0),
    ("0s", 0), ("-1", -1),
])
def test_durations_read_as_go_writes_them_or_as_seconds(text, seconds):
    assert duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "1d", "s", "30s 1m", "1m-30s", "nan", "inf", "-inf", "1e999",
                                  "1" + "0" * 400 + "s"])
def test_anything_else_is_not_a_duration(text):
    with pytest.raises(ValueError):
        duration(text)


@pytest.mark.parametrize(("check", "text", "ok"), [
    (positive_duration, "1ms", True), (positive_duration, "0s", False), (positive_duration, "-1s", False),
    (positive_duration, "nan", False), (positive_duration, "inf", False),
    (non_negative_duration, "0s", True), (non_negative_duration, "0", True), (non_negative_duration, "3s", True),
    (non_negative_duration, "-1", False), (non_negative_duration, "nan", False), (non_negative_duration, "inf", False),
    (non_negative_duration, "later", False),
])
def test_the_flag_types_take_only_what_their_flags_can_use(check, text, ok):
    if ok:
        assert check(text) == duration(text)
    else:
        with pytest.raises(argparse.ArgumentTypeError):
            check(text)
