"""Manager without a cluster: start order, probes, metrics, sync timeout, SIGTERM."""

from __future__ import annotations

import os
import signal
import threading
import urllib.error
import urllib.request
import uuid

import pytest

from sunk.base.flags import parse_bind_address
from sunk.controller.manager import EXIT_OK, EXIT_SYNC_FAILED, Manager
from sunk.controller.runtime import Controller, Result


class FakeInformer:
    def __init__(self) -> None:
        self.started = threading.Event()
        self.stopped = threading.Event()
        self.synced = threading.Event()

    def start(self) -> None:
        self.started.set()

    def stop(self, timeout: float | None = None) -> None:
        self.stopped.set()

    def has_synced(self) -> bool:
        return self.synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self.synced.wait(timeout)


class Runnable:
    def __init__(self) -> None:
        self.started = threading.Event()
        self.stopped = threading.Event()

    def start(self) -> None:
        self.started.set()

    def stop(self) -> None:
        self.stopped.set()


class Rec:
    def __init__(self) -> None:
        self.seen: list[str] = []
        self.event = threading.Event()

    def reconcile(self, key: str) -> Result:
        self.seen.append(key)
        self.event.set()
        return Result()


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_parse_bind_address():
    assert parse_bind_address(":8081") == ("0.0.0.0", 8081)
    assert parse_bind_address("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_bind_address("[::1]:80") == ("::1", 80)
    for bad in ("8080", "host:http"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            parse_bind_address(bad)


def test_controllers_start_only_after_informers_sync_and_probes_follow():
    name = f"m-{uuid.uuid4().hex[:6]}"
    inf_a, inf_b = FakeInformer(), FakeInformer()
    rec = Rec()
    ctl = Controller(name, rec, workers=2)
    always, leader_only = Runnable(), Runnable()
    mgr = Manager(name, health_bind_address="127.0.0.1:0", metrics_bind_address="127.0.0.1:0")
    mgr.add_informer(inf_a)
    mgr.add_informer(inf_b)
    mgr.add_controller(ctl)
    mgr.add_runnable(always)
    mgr.add_runnable(leader_only, needs_leader=True)
    mgr.start()
    try:
        assert inf_a.started.wait(2) and inf_b.started.wait(2) and always.started.wait(2)
        ctl.enqueue("ns/pod")  # an informer handler would do this during the initial list
        assert get(mgr.health_port, "/healthz") == (200, "ok")
        code, body = get(mgr.health_port, "/readyz")
        assert code == 500 and "[-]informers failed" in body
        inf_a.synced.set()
        assert not rec.event.wait(0.15), "reconciled before every informer synced"
        assert not leader_only.started.is_set() and not mgr.is_leader()
        assert f'sunk_leader{{component="{name}"}} 0.0' in get(mgr.metrics_port, "/metrics")[1]
        inf_b.synced.set()
        assert rec.event.wait(2) and rec.seen == ["ns/pod"]
        assert leader_only.started.wait(2) and mgr.is_leader()
        assert get(mgr.health_port, "/readyz") == (200, "ok")
        code, body = get(mgr.health_port, "/readyz?verbose")
        assert code == 200 and "[+]informers ok" in body
        code, metrics = get(mgr.metrics_port, "/metrics")
        assert code == 200 and f'sunk_reconcile_total{{controller="{name}",result="success"}} 1.0' in metrics
        assert f'sunk_workqueue_depth{{name="{name}"}}' in metrics
        assert f'sunk_leader{{component="{name}"}} 1.0' in metrics  # leads: no election, controllers started
        assert get(mgr.health_port, "/nope")[0] == 404
    finally:
        mgr.stop()
        assert mgr.wait(5) == EXIT_OK
    assert inf_a.stopped.is_set() and inf_b.stopped.is_set()
    assert always.stopped.is_set() and leader_only.stopped.is_set()
    assert not ctl.running


def test_an_informer_not_waited_for_starts_but_holds_back_neither_the_controllers_nor_the_timeout():
    """sunk-operator with its own SlurmCluster: Slurm's node list comes only once its controllers made Slurm."""
    mgr = Manager(f"m-{uuid.uuid4().hex[:6]}", sync_timeout=1.0)
    waited, not_waited = FakeInformer(), FakeInformer()
    mgr.add_informer(waited)
    mgr.add_informer(not_waited, wait_for_sync=False)
    rec = Rec()
    ctl = mgr.add_controller(Controller(f"c-{uuid.uuid4().hex[:6]}", rec))
    mgr.start()
    try:
        assert not_waited.started.wait(2)
        ctl.enqueue("ns/cluster")
        waited.synced.set()
        assert rec.event.wait(2) and mgr.synced()  # (the other never synced)
        mgr.wait(1.5)  # (past the sync timeout: it did not count)
        assert not mgr.stopping() and mgr.exit_code == EXIT_OK
    finally:
        mgr.stop()
        assert mgr.wait(5) == EXIT_OK
    assert not_waited.stopped.is_set()


def test_sync_timeout_stops_with_exit_code():
    mgr = Manager("m-timeout", sync_timeout=0.2)
    inf = mgr.add_informer(FakeInformer())
    ctl = mgr.add_controller(Controller(f"t-{uuid.uuid4().hex[:6]}", Rec()))
    mgr.start()
    assert mgr.wait(5) == EXIT_SYNC_FAILED
    assert not ctl.running and inf.stopped.is_set()  # type: ignore[attr-defined]


def test_cannot_add_after_start():
    mgr = Manager("m-late")
    mgr.start()
    try:
        with pytest.raises(RuntimeError):
            mgr.add_informer(FakeInformer())
    finally:
        mgr.stop()
        mgr.wait(5)


def test_sigterm_stops_run_cleanly_and_restores_handlers():
    assert threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM)
    inf = FakeInformer()
    inf.synced.set()
    entered, release = threading.Event(), threading.Event()
    finished: list[str] = []

    class Slow:
        def reconcile(self, key):
            entered.set()
            release.wait(5)
            finished.append(key)

    mgr = Manager("m-sig")
    mgr.add_informer(inf)
    ctl = mgr.add_controller(Controller(f"s-{uuid.uuid4().hex[:6]}", Slow()))
    ctl.enqueue("k")

    def kill_when_busy():
        assert entered.wait(5)
        os.kill(os.getpid(), signal.SIGTERM)
        threading.Timer(0.1, release.set).start()

    threading.Thread(target=kill_when_busy, daemon=True).start()
    assert mgr.run() == EXIT_OK
    assert finished == ["k"], "the in-flight reconcile must finish before exit"
    assert signal.getsignal(signal.SIGTERM) is before


def test_checks_added_after_the_manager_was_built_are_served():
    """The scheduler and the Syncer add their checks once their assembly has the Manager."""
    inf = FakeInformer()
    inf.synced.set()
    mgr = Manager("m-late-checks", health_bind_address="127.0.0.1:0")
    mgr.add_informer(inf)
    mgr.add_ready_check("never", lambda: False)
    mgr.add_health_check("broken", lambda: False)
    mgr.start()
    try:
        assert mgr.wait_leading(2)
        code, body = get(mgr.health_port, "/readyz")
        assert code == 500 and "[-]never failed" in body
        code, body = get(mgr.health_port, "/healthz")
        assert code == 500 and "[-]broken failed" in body
    finally:
        mgr.stop()
        mgr.wait(5)


def test_readiness_can_be_what_the_service_needs_not_what_the_controllers_need():
    """An informer that never syncs (Slurm unreachable from the start) and no Lease campaign yet:
    the default readiness says no; a daemon that set its own says what it checks."""
    kube, slurm = FakeInformer(), FakeInformer()
    mgr = Manager("m-readiness", health_bind_address="127.0.0.1:0")
    mgr.add_informer(kube)
    mgr.add_informer(slurm)
    mgr.start()
    try:
        kube.synced.set()
        assert get(mgr.health_port, "/readyz")[0] == 500
        mgr.set_readiness({"kubernetes": kube.has_synced})
        code, body = get(mgr.health_port, "/readyz?verbose")
        assert code == 200 and "[+]kubernetes ok" in body and "informers" not in body
        assert not mgr.synced()  # the controllers still wait for every informer
    finally:
        mgr.stop()
        mgr.wait(5)


class RecoveringInformer(FakeInformer):
    """An informer that says when its source answers again, as the Slurm cache does."""

    def __init__(self) -> None:
        super().__init__()
        self.listeners: list = []

    def on_recovered(self, callback):
        self.listeners.append(callback)
        return lambda: self.listeners.remove(callback)

    def recovered(self) -> None:
        for callback in list(self.listeners):
            callback()


def test_the_end_of_an_outage_wakes_what_failed_for_it_in_every_controller():
    from sunk.controller.workqueue import ItemExponentialRateLimiter, WorkQueue
    from sunk.slurm.errors import SlurmUnavailable

    class Down:
        def __init__(self) -> None:
            self.down = True
            self.calls: list[str] = []
            self.cond = threading.Condition()

        def reconcile(self, key: str) -> Result:
            with self.cond:
                self.calls.append(key)
                self.cond.notify_all()
            if self.down:
                raise SlurmUnavailable("cannot reach slurmrestd")
            return Result()

        def wait_calls(self, n: int) -> bool:
            with self.cond:
                return self.cond.wait_for(lambda: len(self.calls) >= n, 2)

    name = f"m-{uuid.uuid4().hex[:6]}"
    informer = RecoveringInformer()
    informer.synced.set()
    recs = [Down(), Down()]
    mgr = Manager(name)
    mgr.add_informer(informer)
    controllers = [Controller(f"{name}-{i}", rec, queue=WorkQueue(f"{name}-{i}", ItemExponentialRateLimiter(30, 300)))
                   for i, rec in enumerate(recs)]
    for ctl in controllers:
        mgr.add_controller(ctl)
    mgr.start()
    try:
        assert mgr.wait_leading(2)
        for ctl, rec in zip(controllers, recs, strict=True):
            ctl.enqueue("key")
            assert rec.wait_calls(1)
        for rec in recs:
            rec.down = False
        informer.recovered()
        for rec in recs:
            assert rec.wait_calls(2), "still waiting out a 30 s backoff"
    finally:
        mgr.stop()
        assert mgr.wait(5) == EXIT_OK


def test_after_the_first_sync_the_hook_runs_once_before_any_reconcile_and_a_failing_one_stops_nothing():
    name = f"m-{uuid.uuid4().hex[:6]}"
    informer, rec = FakeInformer(), Rec()
    calls: list[list[str]] = []

    def hook() -> None:
        calls.append(list(rec.seen))  # what had been reconciled when it ran: nothing
        raise RuntimeError("an optimisation that failed")

    ctl = Controller(name, rec)
    mgr = Manager(name, after_first_sync=hook)
    mgr.add_informer(informer)
    mgr.add_controller(ctl)
    mgr.start()
    try:
        ctl.enqueue("ns/pod")
        assert not rec.event.wait(0.1) and calls == []
        informer.synced.set()
        assert rec.event.wait(2), "a failing hook kept the controllers from starting"
        assert calls == [[]]
    finally:
        mgr.stop()
        assert mgr.wait(5) == EXIT_OK


def test_the_daemons_freeze_the_heap_they_synced():
    import gc

    from sunk.controller.daemon import DaemonConfig
    from sunk.controller.manager import freeze_heap

    assert DaemonConfig("d", slurm=None).manager(None).after_first_sync is freeze_heap  # type: ignore[arg-type]
    kept = [["a store's object"] for _ in range(3)]  # (lists: always tracked by the collector)
    assert any(obj is kept[0] for obj in gc.get_objects())
    try:
        freeze_heap()
        # in the permanent generation: no later collection walks it
        assert not any(obj is kept[0] for obj in gc.get_objects()) and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
