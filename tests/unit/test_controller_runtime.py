"""Controller: requeue semantics, error retry with backoff, parallel workers, metrics, stop."""

from __future__ import annotations

import threading
import time
import uuid

from prometheus_client import REGISTRY

from sunk.controller.handlers import EnqueueHandler
from sunk.controller.runtime import Controller, Result
from sunk.controller.workqueue import ItemExponentialRateLimiter, WorkQueue


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class Script:
    """A reconciler whose per-call behaviour is scripted; records (key, monotonic time) calls."""

    def __init__(self, *steps):
        self.steps = list(steps)
        self.calls: list[tuple[str, float]] = []
        self.cond = threading.Condition()

    def reconcile(self, key: str):
        with self.cond:
            self.calls.append((key, time.monotonic()))
            step = self.steps.pop(0) if self.steps else Result()
            self.cond.notify_all()
        if isinstance(step, BaseException):
            raise step
        return step

    def wait_calls(self, n: int, timeout: float = 5.0) -> list[tuple[str, float]]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.calls) >= n, timeout), f"only {len(self.calls)} calls"
            return list(self.calls)


def controller(rec, name=None, workers=1, base=0.01) -> Controller:
    name = name or unique("ctl")
    return Controller(name, rec, workers=workers, queue=WorkQueue(name, ItemExponentialRateLimiter(base, 1.0)))


def sample(metric: str, **labels) -> float:
    value = REGISTRY.get_sample_value(metric, labels)
    return 0.0 if value is None else value


def test_success_processes_once_and_forgets():
    rec = Script(Result())
    ctl = controller(rec)
    ctl.start()
    try:
        ctl.enqueue("ns/a")
        rec.wait_calls(1)
        time.sleep(0.05)
        assert [k for k, _ in rec.calls] == ["ns/a"]
        assert ctl.queue.num_requeues("ns/a") == 0
        assert sample("sunk_reconcile_total", controller=ctl.name, result="success") == 1
    finally:
        assert ctl.stop(5)


def test_exception_retries_with_growing_backoff_then_forgets_on_success():
    boom = RuntimeError("slurmctld unreachable")
    rec = Script(boom, boom, boom, Result())
    ctl = controller(rec, base=0.02)
    ctl.start()
    try:
        ctl.enqueue("n1")
        calls = rec.wait_calls(4)
        gaps = [b[1] - a[1] for a, b in zip(calls, calls[1:], strict=False)]
        # backoff 20 ms, 40 ms, 80 ms: each gap at least its delay (a loaded machine only adds to a gap)
        assert gaps[0] >= 0.018 and gaps[1] >= 0.038 and gaps[2] >= 0.078, gaps
        deadline = time.monotonic() + 5  # the success is recorded after the call returns, on the worker's thread
        while ctl.queue.num_requeues("n1") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ctl.queue.num_requeues("n1") == 0, "success must forget the failure count"
        while sample("sunk_reconcile_duration_seconds_count", controller=ctl.name) != 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sample("sunk_reconcile_errors_total", controller=ctl.name) == 3
        assert sample("sunk_reconcile_duration_seconds_count", controller=ctl.name) == 4
    finally:
        assert ctl.stop(5)


def test_an_outage_is_retried_and_logged_in_one_line_without_a_traceback(caplog):
    """A token Slurm refuses, or slurmrestd down for an hour: a warning per retry, not a traceback
    at error level each time (an operator's log drowned in the same trace)."""
    from sunk.slurm.errors import AuthenticationFailed

    outage = AuthenticationFailed("Slurm refused the token", token_source="/etc/slurm/jwt")
    bug = KeyError("job_id")
    rec = Script(outage, bug, Result())
    ctl = controller(rec)
    ctl.start()
    try:
        with caplog.at_level("WARNING", logger="sunk.controller.runtime"):
            ctl.enqueue("ns/p")
            rec.wait_calls(3)
            time.sleep(0.05)
        records = [r for r in caplog.records if r.name == "sunk.controller.runtime"]
        first, second = records
        assert (first.levelname, first.exc_info) == ("WARNING", None)
        assert "waits for an outage (retry 0): Slurm refused the token" in first.getMessage()
        assert second.levelname == "ERROR" and second.exc_info is not None  # a bug keeps its traceback
        assert sample("sunk_reconcile_total", controller=ctl.name, result="error") == 2
    finally:
        assert ctl.stop(5)


def test_requeue_after_reruns_after_delay_and_resets_backoff():
    rec = Script(RuntimeError("x"), Result(requeue_after=0.1), Result())
    ctl = controller(rec, base=0.01)
    ctl.start()
    try:
        ctl.enqueue("k")
        calls = rec.wait_calls(3)
        assert calls[2][1] - calls[1][1] >= 0.095
        assert ctl.queue.num_requeues("k") == 0
        assert sample("sunk_reconcile_total", controller=ctl.name, result="requeue_after") == 1
    finally:
        assert ctl.stop(5)


def test_requeue_true_is_rate_limited():
    rec = Script(Result(requeue=True), Result(requeue=True), Result())
    ctl = controller(rec, base=0.03)
    ctl.start()
    try:
        ctl.enqueue("k")
        calls = rec.wait_calls(3)
        assert calls[1][1] - calls[0][1] >= 0.028
        assert calls[2][1] - calls[1][1] >= 0.058
    finally:
        assert ctl.stop(5)


def test_none_result_counts_as_success():
    rec = Script(None)
    ctl = controller(rec)
    ctl.start()
    try:
        ctl.enqueue("k")
        rec.wait_calls(1)
        time.sleep(0.03)
        assert len(rec.calls) == 1
    finally:
        assert ctl.stop(5)


def test_workers_run_in_parallel_on_distinct_keys():
    n = 4
    barrier = threading.Barrier(n, timeout=5)

    class Rec:
        def reconcile(self, key):
            barrier.wait()  # only passes if n reconciles are in flight at once
            return Result()

    ctl = Controller(unique("par"), Rec(), workers=n)
    ctl.start()
    try:
        for i in range(n):
            ctl.enqueue(f"k{i}")
        deadline = time.monotonic() + 5
        while sample("sunk_reconcile_total", controller=ctl.name, result="success") < n:
            assert time.monotonic() < deadline, "workers did not run concurrently"
            time.sleep(0.01)
        assert sample("sunk_reconcile_errors_total", controller=ctl.name) == 0
    finally:
        assert ctl.stop(5)


def test_stop_waits_for_in_flight_reconcile():
    entered, release = threading.Event(), threading.Event()
    finished = []

    class Rec:
        def reconcile(self, key):
            entered.set()
            release.wait(5)
            finished.append(key)

    ctl = Controller(unique("stop"), Rec(), workers=2)
    ctl.start()
    ctl.enqueue("k")
    assert entered.wait(5)
    threading.Timer(0.05, release.set).start()
    assert ctl.stop(5)
    assert finished == ["k"]
    assert not ctl.running


def test_stop_reports_timeout_of_stuck_reconcile():
    entered, release = threading.Event(), threading.Event()

    class Rec:
        def reconcile(self, key):
            entered.set()
            release.wait(5)

    ctl = Controller(unique("stuck"), Rec())
    ctl.start()
    ctl.enqueue("k")
    assert entered.wait(5)
    assert ctl.stop(0.05) is False
    release.set()


def test_enqueue_handler_maps_objects_and_update_queues_old_and_new():
    wq = WorkQueue(unique("h"))
    handler = EnqueueHandler(wq, mapper=lambda o: [o["spec"]["nodeName"]] if o["spec"].get("nodeName") else [])
    pod = {"metadata": {"namespace": "ns", "name": "p"}, "spec": {"nodeName": "n1"}}
    moved = {"metadata": {"namespace": "ns", "name": "p"}, "spec": {"nodeName": "n2"}}
    handler.on_add(pod)
    handler.on_update(pod, moved)
    handler.on_delete(moved)
    handler.on_add({"metadata": {"name": "x"}, "spec": {}})
    assert sorted(wq.get(0) for _ in range(2)) == ["n1", "n2"]
    assert wq.get(0.01) is None


def test_enqueue_handler_default_key_and_predicate():
    wq = WorkQueue(unique("h"))
    handler = EnqueueHandler(wq, predicate=lambda old, new: new["metadata"].get("labels", {}).get("app") == "slurmd")
    handler.on_add({"metadata": {"namespace": "ns", "name": "a", "labels": {"app": "slurmd"}}})
    handler.on_add({"metadata": {"namespace": "ns", "name": "b"}})
    handler.on_add({"metadata": {"name": "node-1", "labels": {"app": "slurmd"}}})
    assert [wq.get(0), wq.get(0), wq.get(0.01)] == ["ns/a", "node-1", None]


# ---- the end of an outage wakes what failed for it -------------------------------------------------------------
OUTAGE_BACKOFF = 30.0  # what 13 failed retries build up (5 ms * 2**13 = 41 s): far beyond any wait below


def slow_retries(rec) -> Controller:
    """A controller whose first retry of a key comes after OUTAGE_BACKOFF seconds."""
    name = unique("ctl")
    return Controller(name, rec, queue=WorkQueue(name, ItemExponentialRateLimiter(OUTAGE_BACKOFF, 300.0)))


def settles(condition, timeout: float = 2.0) -> bool:
    """Whether ``condition`` holds within ``timeout`` (a worker thread finishing its bookkeeping)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_when_the_outage_is_over_every_key_that_failed_for_it_is_reconciled_at_once():
    """The fault matrix's slurmrestd row: a deleted Pod's job could be cancelled only 34 s after slurmrestd was
    back, when its key's backoff (grown through the 40 s outage) ran out."""
    from sunk.slurm.errors import SlurmUnavailable

    outage = SlurmUnavailable("cancel job 7: cannot reach slurmrestd")
    rec = Script(outage, outage, Result())
    ctl = slow_retries(rec)
    ctl.start()
    try:
        ctl.enqueue("uid-a")
        rec.wait_calls(1)
        assert settles(lambda: ctl.queue.num_requeues("uid-a") == 1) and len(rec.calls) == 1  # waiting out 30 s
        assert ctl.outage_over() == 1
        rec.wait_calls(2, timeout=2)  # at once, not after 30 s
        # (wait_calls returns as the reconcile starts; the runtime records its failure just after)
        assert settles(lambda: ctl.queue.num_requeues("uid-a") == 1), "the outage's failures are forgotten"
        assert settles(lambda: ctl.outage_over() == 1)  # it failed for the outage again (a flap): woken again
        rec.wait_calls(3, timeout=2)
        assert settles(lambda: ctl.queue.num_requeues("uid-a") == 0)
        assert ctl.outage_over() == 0  # it succeeded: nothing left to wake
    finally:
        assert ctl.stop(5)


def test_a_key_that_failed_for_a_bug_keeps_its_backoff_when_an_outage_ends():
    rec = Script(KeyError("job_id"), Result())
    ctl = slow_retries(rec)
    ctl.start()
    try:
        ctl.enqueue("uid-b")
        rec.wait_calls(1)
        assert settles(lambda: ctl.queue.num_requeues("uid-b") == 1)  # its failure recorded, then the wake
        assert ctl.outage_over() == 0
        time.sleep(0.2)
        assert len(rec.calls) == 1 and ctl.queue.num_requeues("uid-b") == 1
    finally:
        assert ctl.stop(5)


def test_a_key_whose_reconcile_spans_the_end_of_the_outage_is_retried_at_once():
    """Its call failed before Slurm came back, its failure is handled after the wake: it must not be
    the one key left to wait out its backoff."""
    from sunk.slurm.errors import SlurmUnavailable

    entered, release = threading.Event(), threading.Event()

    class Spanning:
        def __init__(self):
            self.calls = 0

        def reconcile(self, key):
            self.calls += 1
            if self.calls == 1:
                entered.set()
                release.wait(5)
                raise SlurmUnavailable("submit job: cannot reach slurmrestd")
            return Result()

    rec = Spanning()
    ctl = slow_retries(rec)
    ctl.start()
    try:
        ctl.enqueue("uid-c")
        assert entered.wait(2)
        assert ctl.outage_over() == 0  # nothing had failed yet
        release.set()
        deadline = time.monotonic() + 2
        while rec.calls < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert rec.calls == 2
        time.sleep(0.05)
        assert ctl.queue.num_requeues("uid-c") == 0
    finally:
        release.set()
        assert ctl.stop(5)
