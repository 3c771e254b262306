"""Informer against the real kube-apiserver: events, indexes, 410 relist diff, reconnects."""

from __future__ import annotations

import copy
import socket
import threading
import time
from collections.abc import Callable

import pytest
from kube_testns import create_namespace, purge_namespace
from kubernetes import client as k8s

from sunk.kube import client as kc
from sunk.kube.informer import Informer, MultiNamespaceInformer, pod_node_name
from sunk.kube.resources import PODS
from sunk_dev.cluster import k8s_node_for

WORKER1, WORKER2 = k8s_node_for("node1"), k8s_node_for("node2")  # two stand-in Nodes

WAIT = 15.0


@pytest.fixture
def namespace(kube_api):
    name = create_namespace(kube_api)
    yield name
    purge_namespace(kube_api, name)


def pod(name: str, node: str | None = None, labels: dict[str, str] | None = None) -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "busybox"}], "terminationGracePeriodSeconds": 0}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


class Recorder:
    """Collects handler calls as (kind, name, obj...) and lets a test wait for one."""

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.cond = threading.Condition()
        self.gate: threading.Event | None = None
        self.gate_on: Callable[[tuple], bool] | None = None

    def _rec(self, item: tuple) -> None:
        with self.cond:
            self.events.append(item)
            self.cond.notify_all()
        if self.gate is not None and self.gate_on and self.gate_on(item):
            self.gate.wait(WAIT)

    def on_add(self, obj):
        self._rec(("add", obj["metadata"]["name"], obj))

    def on_update(self, old, new):
        self._rec(("update", new["metadata"]["name"], old, new))

    def on_delete(self, obj):
        self._rec(("delete", obj["metadata"]["name"], obj))

    def wait_for(self, pred: Callable[[tuple], bool], timeout: float = WAIT) -> tuple:
        with self.cond:
            ok = self.cond.wait_for(lambda: any(pred(e) for e in self.events), timeout)
            assert ok, f"event not seen; got {[(e[0], e[1]) for e in self.events]}"
            return next(e for e in self.events if pred(e))

    def names(self, kind: str) -> list[str]:
        with self.cond:
            return [e[1] for e in self.events if e[0] == kind]


def assert_store_matches_server(api, informer: Informer, namespace: str) -> None:
    server = {
        f"{namespace}/{p['metadata']['name']}": p["metadata"]["resourceVersion"]
        for p in kc.list_objects(api, PODS, namespace)
    }
    cached = {f"{namespace}/{p['metadata']['name']}": p["metadata"]["resourceVersion"] for p in informer.list()}
    assert cached == server


def test_informer_sees_add_update_delete_and_indexes_by_node(kube_api, namespace):
    kc.create(kube_api, PODS, pod("pre"), namespace)
    inf = Informer(kube_api, ("", "v1", "pods"), namespace=namespace)
    inf.add_indexer("nodeName", pod_node_name)
    rec = Recorder()
    inf.add_handler(rec)
    inf.start()
    try:
        assert inf.wait_for_sync(WAIT)
        assert rec.names("add") == ["pre"], "the initial list must reach handlers as adds"
        assert inf.get(f"{namespace}/pre")["kind"] == "Pod", "list items get kind filled in"

        kc.create(kube_api, PODS, pod("p1"), namespace)
        rec.wait_for(lambda e: e[:2] == ("add", "p1"))

        kc.patch(kube_api, PODS, "p1", {"metadata": {"labels": {"touched": "yes"}}}, namespace)
        _, _, old, new = rec.wait_for(lambda e: e[:2] == ("update", "p1"))
        assert "touched" not in (old["metadata"].get("labels") or {})
        assert new["metadata"]["labels"]["touched"] == "yes"
        assert inf.get(f"{namespace}/p1")["metadata"]["labels"]["touched"] == "yes"

        # Bound to a dev Node: the fake kubelet marks it Running, which we must see as an update.
        kc.create(kube_api, PODS, pod("p2", node=WORKER1), namespace)
        rec.wait_for(lambda e: e[0] == "update" and e[1] == "p2" and e[3]["status"].get("phase") == "Running")
        assert f"{namespace}/p2" in inf.index_keys("nodeName", WORKER1)
        assert f"{namespace}/p1" not in [k for v in (WORKER1, WORKER2) for k in inf.index_keys("nodeName", v)]

        kc.delete(kube_api, PODS, "p1", namespace, grace_period_seconds=0)
        _, _, gone = rec.wait_for(lambda e: e[:2] == ("delete", "p1"))
        assert gone["metadata"]["name"] == "p1"
        assert inf.get(f"{namespace}/p1") is None

        kc.delete(kube_api, PODS, "p2", namespace, grace_period_seconds=0)
        rec.wait_for(lambda e: e[:2] == ("delete", "p2"))
        assert inf.index_keys("nodeName", WORKER1) == [] or f"{namespace}/p2" not in inf.index_keys(
            "nodeName", WORKER1
        )
        assert_store_matches_server(kube_api, inf, namespace)
        assert inf.stats.lists == 1 and inf.stats.relists_after_gone == 0
    finally:
        inf.stop()


def test_handler_added_late_gets_replayed_adds(kube_api, namespace):
    for n in ("a", "b"):
        kc.create(kube_api, PODS, pod(n), namespace)
    inf = Informer(kube_api, PODS, namespace=namespace)
    inf.start()
    try:
        assert inf.wait_for_sync(WAIT)
        rec = Recorder()
        inf.add_handler(rec)
        assert sorted(rec.names("add")) == ["a", "b"]
    finally:
        inf.stop()


def test_informer_recovers_from_410_with_relist_diff(kube_api, namespace):
    """A watch resumed from an expired resourceVersion gets a real 410 from the apiserver.

    How the expiry is made real: the informer's handler is held on one event while, behind
    its back, Pods are deleted, changed and created. Then the watch is restarted from
    resourceVersion "1", which predates the apiserver's watch-cache window, exactly like a
    client that was away across a compaction. The apiserver answers 410 Gone; the
    informer must relist and hand the handlers the missed delete/update/add, and nothing
    for the Pod that did not change.
    """
    for n in ("keep", "change", "remove"):
        kc.create(kube_api, PODS, pod(n), namespace)
    inf = Informer(kube_api, PODS, namespace=namespace)
    rec = Recorder()
    inf.add_handler(rec)
    inf.start()
    try:
        assert inf.wait_for_sync(WAIT)
        rec.gate = threading.Event()
        rec.gate_on = lambda e: e[:2] == ("add", "trigger")
        kc.create(kube_api, PODS, pod("trigger"), namespace)
        rec.wait_for(lambda e: e[:2] == ("add", "trigger"))  # informer thread now held inside the handler

        kc.delete(kube_api, PODS, "remove", namespace, grace_period_seconds=0)
        kc.patch(kube_api, PODS, "change", {"metadata": {"labels": {"v": "2"}}}, namespace)
        kc.create(kube_api, PODS, pod("new"), namespace)
        before = len(rec.events)
        inf.restart_watch("1")
        rec.gate.set()

        rec.wait_for(lambda e: e[:2] == ("add", "new"))
        rec.wait_for(lambda e: e[:2] == ("delete", "remove"))
        _, _, old, new = rec.wait_for(lambda e: e[:2] == ("update", "change"))
        assert new["metadata"]["labels"] == {"v": "2"} and not old["metadata"].get("labels")
        assert inf.stats.relists_after_gone == 1, inf.stats
        assert inf.stats.lists == 2
        after = [(e[0], e[1]) for e in rec.events[before:]]
        assert ("update", "keep") not in after and ("add", "keep") not in after, after
        assert sorted(after) == [("add", "new"), ("delete", "remove"), ("update", "change")]
        assert_store_matches_server(kube_api, inf, namespace)

        # and it keeps watching normally afterwards
        kc.create(kube_api, PODS, pod("later"), namespace)
        rec.wait_for(lambda e: e[:2] == ("add", "later"))
    finally:
        rec.gate.set() if rec.gate else None
        inf.stop()


class TcpProxy:
    """A localhost TCP forwarder we can cut: stands in for an apiserver that goes away."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None

    def start(self) -> None:
        lst = socket.socket()
        lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lst.bind(("127.0.0.1", self.port))
        lst.listen(16)
        self._listener = lst
        threading.Thread(target=self._accept, args=(lst,), daemon=True).start()

    def _accept(self, lst: socket.socket) -> None:
        while True:
            try:
                conn, _ = lst.accept()
            except OSError:
                return
            up = socket.create_connection(self.target)
            with self._lock:
                self._socks += [conn, up]
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        """Refuse new connections and break every open one."""
        if self._listener:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
            except OSError:
                pass
            self._listener.close()
            self._listener = None
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass


def test_informer_survives_apiserver_outage_and_resumes_without_relist(kube_api, namespace):
    host = kube_api.configuration.host  # https://127.0.0.1:PORT
    hostport = host.split("://", 1)[1]
    proxy = TcpProxy((hostport.rsplit(":", 1)[0], int(hostport.rsplit(":", 1)[1])))
    proxy.start()
    cfg = copy.copy(kube_api.configuration)
    cfg.host = f"https://127.0.0.1:{proxy.port}"
    # The kubeconfig loader's token-refresh hook rewrites host back to the kubeconfig's server.
    cfg.refresh_api_key_hook = None
    via_proxy = k8s.ApiClient(cfg)
    inf = Informer(via_proxy, PODS, namespace=namespace, backoff_initial=0.1, backoff_cap=0.5)
    rec = Recorder()
    inf.add_handler(rec)
    inf.start()
    try:
        assert inf.wait_for_sync(WAIT)
        kc.create(kube_api, PODS, pod("before"), namespace)
        rec.wait_for(lambda e: e[:2] == ("add", "before"))

        proxy.cut()
        deadline = time.monotonic() + WAIT
        while inf.stats.connection_errors < 2:  # it is retrying, and failing, with backoff
            assert time.monotonic() < deadline, inf.stats
            time.sleep(0.05)
        kc.create(kube_api, PODS, pod("during"), namespace)
        kc.delete(kube_api, PODS, "before", namespace, grace_period_seconds=0)
        time.sleep(0.3)
        assert inf.get(f"{namespace}/during") is None, "cannot have seen it through a cut connection"

        proxy.start()
        rec.wait_for(lambda e: e[:2] == ("add", "during"))
        rec.wait_for(lambda e: e[:2] == ("delete", "before"))
        assert inf.stats.lists == 1, "a reconnect with a still-valid resourceVersion must resume, not relist"
        assert inf.stats.relists_after_gone == 0
        assert_store_matches_server(kube_api, inf, namespace)
    finally:
        inf.stop()
        proxy.cut()
        via_proxy.close()


def test_multi_namespace_informer(kube_api, namespace):
    other = create_namespace(kube_api)
    third = create_namespace(kube_api)
    try:
        kc.create(kube_api, PODS, pod("x"), namespace)
        kc.create(kube_api, PODS, pod("y"), other)
        kc.create(kube_api, PODS, pod("z"), third)  # not watched
        multi = MultiNamespaceInformer(kube_api, PODS, [namespace, other, namespace])
        assert len(multi.informers) == 2
        rec = Recorder()
        multi.add_handler(rec)
        multi.start()
        try:
            assert multi.wait_for_sync(WAIT)
            assert sorted(rec.names("add")) == ["x", "y"]
            assert multi.get(f"{namespace}/x")["metadata"]["name"] == "x"
            assert multi.get(f"{other}/y") is not None
            assert multi.get(f"{third}/z") is None
            kc.create(kube_api, PODS, pod("y2"), other)
            rec.wait_for(lambda e: e[:2] == ("add", "y2"))
            assert sorted(p["metadata"]["name"] for p in multi.list()) == ["x", "y", "y2"]
        finally:
            multi.stop()
    finally:
        purge_namespace(kube_api, other)
        purge_namespace(kube_api, third)


def test_cluster_wide_node_informer_keys_by_name(kube_api):
    inf = Informer(kube_api, ("", "v1", "nodes"))
    inf.start()
    try:
        assert inf.wait_for_sync(WAIT)
        assert inf.get(WORKER1) is not None, "cluster-scoped objects are keyed by bare name"
        assert inf.get(WORKER1)["kind"] == "Node"
    finally:
        inf.stop()


def test_informer_relists_when_the_apiserver_store_went_back_in_time(kube_api, namespace):
    """etcd restored or recreated during an outage: our resourceVersion is now in the future.

    The apiserver does not refuse such a watch; it silently holds it until its store
    catches up, so every change until then would be lost. The informer checks the current
    resourceVersion after reconnecting and relists instead.
    """
    hostport = kube_api.configuration.host.split("://", 1)[1]
    proxy = TcpProxy((hostport.rsplit(":", 1)[0], int(hostport.rsplit(":", 1)[1])))
    proxy.start()
    cfg = copy.copy(kube_api.configuration)
    cfg.host = f"https://127.0.0.1:{proxy.port}"
    cfg.refresh_api_key_hook = None
    via_proxy = k8s.ApiClient(cfg)
    inf = Informer(via_proxy, PODS, namespace=namespace, backoff_initial=0.1, backoff_cap=0.5)
    rec = Recorder()
    inf.add_handler(rec)
    inf.start()
    try:
        assert inf.wait_for_sync(WAIT)
        proxy.cut()
        deadline = time.monotonic() + WAIT
        while inf.stats.connection_errors < 1:
            assert time.monotonic() < deadline, inf.stats
            time.sleep(0.05)
        # What the informer would hold had etcd been reset to a lower revision meanwhile.
        inf.reflector._rv = str(10**12)
        kc.create(kube_api, PODS, pod("during"), namespace)
        proxy.start()
        rec.wait_for(lambda e: e[:2] == ("add", "during"))
        assert inf.stats.relists_after_too_large == 1 and inf.stats.lists == 2, inf.stats
        assert_store_matches_server(kube_api, inf, namespace)
    finally:
        inf.stop()
        proxy.cut()
        via_proxy.close()
