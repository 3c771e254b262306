"""Two Manager replicas against the real apiserver: one reconciles, failover, lost lease exits."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest
from kube_testns import create_namespace, purge_namespace

from sunk.controller import Controller, EnqueueHandler, Manager, Result
from sunk.controller.manager import EXIT_LOST_LEASE, EXIT_OK
from sunk.kube import client as kc
from sunk.kube.informer import Informer
from sunk.kube.leader import LeaderElectionConfig, micro_time
from sunk.kube.resources import LEASES, PODS


@pytest.fixture
def namespace(kube_api):
    name = create_namespace(kube_api)
    yield name
    purge_namespace(kube_api, name)


def make_pod(api, namespace: str, name: str) -> dict:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    return kc.create(api, PODS, body, namespace)


def probe(port: int | None, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return -1


class Replica:
    """One process's worth: informer -> queue -> controller, under a Manager with leader election."""

    def __init__(self, api, namespace: str, identity: str):
        self.identity = identity
        self.reconciled: list[str] = []
        self.cond = threading.Condition()
        self.inf = Informer(api, PODS, namespace=namespace)
        self.ctl = Controller(f"pods-{identity}-{uuid.uuid4().hex[:4]}", self, workers=2)
        self.inf.add_handler(EnqueueHandler(self.ctl.queue))
        self.mgr = Manager(
            f"test-{identity}",
            api_client=api,
            leader_election=LeaderElectionConfig(
                "sunk-manager-test", namespace, identity=identity, lease_duration=3, renew_deadline=2, retry_period=0.4
            ),
            health_bind_address="127.0.0.1:0",
        )
        self.mgr.add_informer(self.inf)
        self.mgr.add_controller(self.ctl)

    def reconcile(self, key: str) -> Result:
        with self.cond:
            self.reconciled.append(key)
            self.cond.notify_all()
        return Result()

    def wait_reconciled(self, keys: set[str], timeout: float = 10) -> None:
        with self.cond:
            ok = self.cond.wait_for(lambda: keys <= set(self.reconciled), timeout)
            assert ok, f"{self.identity} reconciled {self.reconciled}, wanted {keys}"


def wait_until(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_only_the_leader_reconciles_and_the_standby_takes_over_with_a_warm_cache(kube_api, namespace):
    for n in ("p1", "p2"):
        make_pod(kube_api, namespace, n)
    a = Replica(kube_api, namespace, "a")
    b = Replica(kube_api, namespace, "b")
    a.mgr.start()
    try:
        assert a.mgr.wait_leading(10)
        a.wait_reconciled({f"{namespace}/p1", f"{namespace}/p2"})
        b.mgr.start()
        wait_until(lambda: probe(b.mgr.health_port, "/readyz") == 200, 10, "standby never ready")
        assert probe(a.mgr.health_port, "/readyz") == 200 and probe(a.mgr.health_port, "/healthz") == 200

        make_pod(kube_api, namespace, "p3")
        a.wait_reconciled({f"{namespace}/p3"})
        wait_until(lambda: b.inf.get(f"{namespace}/p3") is not None, 5, "standby cache not warm")
        time.sleep(0.5)
        assert b.reconciled == [], "a standby must never reconcile"
        assert a.mgr.is_leader() and not b.mgr.is_leader()

        stopped = time.monotonic()
        a.mgr.stop()
        assert a.mgr.wait(10) == EXIT_OK
        b.wait_reconciled({f"{namespace}/p1", f"{namespace}/p2", f"{namespace}/p3"})
        assert time.monotonic() - stopped < 3, "released lease: failover should not wait out the lease"
        assert b.inf.stats.lists == 1, "failover must reuse the warm cache, not relist"
        assert kc.get(kube_api, LEASES, "sunk-manager-test", namespace)["spec"]["holderIdentity"] == "b"
    finally:
        a.mgr.stop()
        b.mgr.stop()
        a.mgr.wait(10)
        b.mgr.wait(10)


def test_lost_lease_stops_controllers_and_exits_nonzero(kube_api, namespace):
    make_pod(kube_api, namespace, "p1")
    r = Replica(kube_api, namespace, "solo")
    r.mgr.start()
    try:
        assert r.mgr.wait_leading(10)
        r.wait_reconciled({f"{namespace}/p1"})
        lease = kc.get(kube_api, LEASES, "sunk-manager-test", namespace)
        now = micro_time()
        lease["spec"].update(holderIdentity="someone-else", renewTime=now, acquireTime=now, leaseDurationSeconds=60)
        kc.replace(kube_api, LEASES, lease)
        taken = time.monotonic()
        assert r.mgr.wait(10) == EXIT_LOST_LEASE
        assert time.monotonic() - taken < 2 + 1.5, "must step down within the renew deadline"
        assert not r.ctl.running
        before = len(r.reconciled)
        make_pod(kube_api, namespace, "p2")
        time.sleep(0.5)
        assert len(r.reconciled) == before, "no reconcile after losing the lease"
        assert kc.get(kube_api, LEASES, "sunk-manager-test", namespace)["spec"]["holderIdentity"] == "someone-else"
    finally:
        r.mgr.stop()
        r.mgr.wait(10)
