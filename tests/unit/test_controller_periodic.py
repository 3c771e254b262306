"""Periodic: the one "call this every interval until stopped" runnable (sweeper, resync, diag poller)."""

from __future__ import annotations

import threading
import time

from sunk.controller.periodic import Periodic


def test_it_calls_after_each_interval_and_at_once_only_when_asked():
    for at_start, expected_first in ((False, 0.2), (True, 0.0)):
        called = threading.Event()
        started = time.monotonic()
        periodic = Periodic("t", 0.2, called.set, at_start=at_start)
        periodic.start()
        try:
            assert called.wait(5)
        finally:
            periodic.stop()
        took = time.monotonic() - started
        assert took >= expected_first and (at_start is False or took < 0.15)


def test_a_stop_does_not_wait_out_the_interval():
    periodic = Periodic("t", 3600, lambda: None)
    periodic.start()
    assert periodic.running
    started = time.monotonic()
    periodic.stop()
    assert time.monotonic() - started < 1 and not periodic.running


def test_a_failing_call_is_logged_and_the_next_one_comes(caplog):
    calls: list[int] = []
    again = threading.Event()

    def flaky() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise KeyError("bad answer")
        again.set()

    periodic = Periodic("flaky", 0.01, flaky)
    periodic.start()
    try:
        assert again.wait(5)
    finally:
        periodic.stop()
    assert any("flaky: periodic call failed" in r.message for r in caplog.records)


def test_an_interval_of_zero_is_off():
    periodic = Periodic("off", 0, lambda: None)
    periodic.start()
    assert not periodic.running
    periodic.stop()
