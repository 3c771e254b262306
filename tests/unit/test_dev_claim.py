"""The dev cluster claim: a second user waits, is told who holds it, and gets it once released."""

from __future__ import annotations

import io
import threading
import time

import pytest

from sunk_dev.claim import CLAIM_FILE, ClaimTimeout, claimed


def test_a_second_claim_waits_names_the_holder_and_times_out(tmp_path):
    log = io.StringIO()
    with claimed(tmp_path, "session A", log=log):
        assert "session A" in (tmp_path / CLAIM_FILE).read_text()
        with pytest.raises(ClaimTimeout, match="session A"):
            with claimed(tmp_path, "session B", timeout=0.6, log=log):
                pytest.fail("claimed twice")
    assert "waiting for session A" in log.getvalue()
    assert (tmp_path / CLAIM_FILE).read_text() == ""  # released: nobody named


def test_the_waiter_gets_the_cluster_when_the_holder_lets_go(tmp_path):
    got = threading.Event()
    release = threading.Event()

    def holder():
        with claimed(tmp_path, "session A", log=io.StringIO()):
            release.wait(5)

    thread = threading.Thread(target=holder)
    thread.start()
    time.sleep(0.2)

    def waiter():
        with claimed(tmp_path, "session B", timeout=5, log=io.StringIO()):
            got.set()

    second = threading.Thread(target=waiter)
    second.start()
    time.sleep(0.7)
    assert not got.is_set()
    release.set()
    second.join(5)
    thread.join(5)
    assert got.is_set()
