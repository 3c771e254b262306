"""Leader election with two electors against the real apiserver's Lease."""

from __future__ import annotations

import threading
import time

import pytest
from kube_testns import create_namespace, purge_namespace

from sunk.kube import client as kc
from sunk.kube.leader import LeaderElectionConfig, LeaderElector, micro_time
from sunk.kube.resources import LEASES

# Short timings keep the tests quick; the ratios are client-go's (15/10/2).
LEASE, RENEW, RETRY = 3.0, 2.0, 0.4


@pytest.fixture
def namespace(kube_api):
    name = create_namespace(kube_api)
    yield name
    purge_namespace(kube_api, name)


class Tracker:
    """Callbacks that record when each elector started and stopped leading."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self.stopped: dict[str, float] = {}
        self.new_leaders: list[str] = []
        self.lock = threading.Lock()

    def elector(self, api, namespace: str, identity: str, **kw) -> LeaderElector:
        cfg = LeaderElectionConfig(
            "sunk-test",
            namespace,
            identity=identity,
            lease_duration=LEASE,
            renew_deadline=RENEW,
            retry_period=RETRY,
            **kw,
        )
        return LeaderElector(
            api,
            cfg,
            on_started_leading=lambda: self._mark(self.started, identity),
            on_stopped_leading=lambda: self._mark(self.stopped, identity),
            on_new_leader=self.new_leaders.append,
        )

    def _mark(self, d: dict[str, float], identity: str) -> None:
        with self.lock:
            d[identity] = time.monotonic()


def lease_spec(api, namespace: str) -> dict:
    return kc.get(api, LEASES, "sunk-test", namespace)["spec"]


def wait(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_only_one_leads_and_standby_takes_over_after_leader_stops_renewing(kube_api, namespace):
    t = Tracker()
    a = t.elector(kube_api, namespace, "a")
    b = t.elector(kube_api, namespace, "b")
    a.start()
    try:
        assert a.wait_for_leading(5)
        b.start()
        # Several retry periods: b keeps trying, and must never lead while a renews.
        deadline = time.monotonic() + 3 * RETRY + LEASE
        while time.monotonic() < deadline:
            assert not (a.is_leader() and b.is_leader()), "two leaders"
            assert not b.is_leader()
            time.sleep(0.05)
        spec = lease_spec(kube_api, namespace)
        assert spec["holderIdentity"] == "a"
        assert spec["leaseDurationSeconds"] == 3 and spec["leaseTransitions"] == 0
        assert b.leader == "a"

        # a "crashes": stops renewing without releasing.
        a.stop(release=False)
        crashed_at = time.monotonic()
        last_renew = lease_spec(kube_api, namespace)["renewTime"]
        assert b.wait_for_leading(LEASE + 2 * RETRY + 2), "standby did not take over"
        took = time.monotonic() - crashed_at
        # It must wait out the lease on its own clock: a's last renewal was at most one retry
        # period before the crash, and b may only take over LEASE after it saw that renewal...
        assert took >= LEASE - RETRY - 0.2, took
        # ...and take over within lease duration plus a retry period or two.
        assert took <= LEASE + 2 * RETRY + 1.5, took
        spec = lease_spec(kube_api, namespace)
        assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
        assert spec["renewTime"] > last_renew
        assert not a.is_leader()
        assert "a" in t.stopped, "a's on_stopped_leading must have run"
        assert set(t.started) == {"a", "b"}
        assert t.new_leaders[-1] == "b"

        # b keeps renewing.
        first = lease_spec(kube_api, namespace)["renewTime"]
        time.sleep(2 * RETRY + 0.2)
        assert lease_spec(kube_api, namespace)["renewTime"] > first
    finally:
        a.stop()
        b.stop()


def test_release_on_stop_lets_the_standby_take_over_at_once(kube_api, namespace):
    t = Tracker()
    a = t.elector(kube_api, namespace, "a")
    b = t.elector(kube_api, namespace, "b")
    a.start()
    try:
        assert a.wait_for_leading(5)
        b.start()
        time.sleep(RETRY * 2)
        assert not b.is_leader()
        stopped = time.monotonic()
        a.stop()  # releases: holderIdentity "" and a 1 s lease
        assert lease_spec(kube_api, namespace)["holderIdentity"] in ("", "b")
        assert b.wait_for_leading(LEASE)
        assert time.monotonic() - stopped < LEASE - 0.5, "release should beat waiting out the lease"
        assert a.wait_done(1) and not a.lost
    finally:
        a.stop()
        b.stop()


def test_leader_that_cannot_renew_steps_down_before_anyone_else_may_lead(kube_api, namespace):
    """Someone overwrites the Lease (as a newer leader would): the old leader must stop leading."""
    t = Tracker()
    a = t.elector(kube_api, namespace, "a")
    a.start()
    try:
        assert a.wait_for_leading(5)
        lease = kc.get(kube_api, LEASES, "sunk-test", namespace)
        now = micro_time()
        lease["spec"].update(holderIdentity="intruder", renewTime=now, acquireTime=now, leaseDurationSeconds=60)
        kc.replace(kube_api, LEASES, lease)
        taken = time.monotonic()
        assert a.wait_done(RENEW + 3 * RETRY + 2), "leader kept leading after losing the lease"
        assert not a.is_leader() and a.lost
        assert "a" in t.stopped
        assert t.stopped["a"] - taken <= RENEW + 2 * RETRY + 1.0
        assert lease_spec(kube_api, namespace)["holderIdentity"] == "intruder", "a must not take it back"
    finally:
        a.stop()


def test_two_candidates_racing_for_a_fresh_lease_yield_one_leader(kube_api, namespace):
    t = Tracker()
    electors = [t.elector(kube_api, namespace, f"c{i}") for i in range(4)]
    for e in electors:
        e.start()
    try:
        wait(lambda: any(e.is_leader() for e in electors), 5, "nobody leads")
        time.sleep(3 * RETRY)
        leaders = [e.identity for e in electors if e.is_leader()]
        assert len(leaders) == 1, leaders
        assert lease_spec(kube_api, namespace)["holderIdentity"] == leaders[0]
    finally:
        for e in electors:
            e.stop()
