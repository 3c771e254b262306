"""Issue 32 items 4 and 6 in the runtime: Kubernetes outages wait for the apiserver's return, terminal
errors are logged once and not requeued, and no write leaves after the Lease's renew deadline."""

from __future__ import annotations

import logging
import threading
import uuid

import pytest
from prometheus_client import REGISTRY

from sunk.base import fence
from sunk.base.fence import Fenced, LeaseFence
from sunk.controller.manager import KUBERNETES, Manager
from sunk.controller.periodic import Periodic
from sunk.controller.recovery import RecoveryProbe
from sunk.controller.runtime import Controller, Result
from sunk.controller.workqueue import ItemExponentialRateLimiter, WorkQueue
from sunk.kube import client as kc
from sunk.kube.leader import LeaderElectionConfig, LeaderElector
from sunk.slurm.errors import SlurmUnavailable


class Raises:
    """A reconciler that raises the next of ``errors`` (then succeeds), recording each key."""

    def __init__(self, *errors: Exception):
        self.errors = list(errors)
        self.keys: list[str] = []

    def reconcile(self, key: str) -> Result | None:
        self.keys.append(key)
        if self.errors:
            raise self.errors.pop(0)
        return None


def controller(rec) -> Controller:
    name = f"ctl-{uuid.uuid4().hex[:8]}"
    return Controller(name, rec, queue=WorkQueue(name, ItemExponentialRateLimiter(30.0, 300.0)))


def queued(ctl: Controller) -> int:
    """Keys ready now plus keys scheduled for later."""
    return len(ctl.queue) + ctl.queue.waiting()


def terminal_count(ctl: Controller) -> float:
    value = REGISTRY.get_sample_value("sunk_reconcile_terminal_errors_total", {"controller": ctl.name})
    return value or 0.0


FORBIDDEN = kc.api_error(403, "Forbidden", {"message": 'pods "p" is forbidden: User "system:serviceaccount:x:y" '
                                                       'cannot patch resource "pods"'}, "PATCH", "/api/v1/pods/p")


# ---- terminal errors ------------------------------------------------------------------------------


def test_a_terminal_error_is_logged_once_with_its_fix_counted_and_not_requeued(caplog):
    ctl = controller(Raises(FORBIDDEN))
    with caplog.at_level(logging.WARNING, logger="sunk.controller.runtime"):
        ctl.process("ns/p")
    assert queued(ctl) == 0 and ctl.queue.num_requeues("ns/p") == 0
    assert terminal_count(ctl) == 1
    (record,) = caplog.records
    assert record.levelno == logging.ERROR and record.exc_info is None
    assert "PATCH /api/v1/pods/p: 403" in record.getMessage() and "Role/ClusterRole" in record.getMessage()


def test_a_key_refused_for_good_is_reconciled_again_when_its_object_changes():
    rec = Raises(FORBIDDEN)
    ctl = controller(rec)
    ctl.process("ns/p")
    ctl.enqueue("ns/p")  # what an informer event does
    assert ctl.queue.get(0) == "ns/p"
    ctl.process("ns/p")
    ctl.queue.done("ns/p")
    assert rec.keys == ["ns/p", "ns/p"] and terminal_count(ctl) == 1 and queued(ctl) == 0


# ---- outages ---------------------------------------------------------------------------------------


def test_a_kubernetes_outage_is_one_warning_and_waits_for_the_apiserver_not_for_slurm(caplog):
    ctl = controller(Raises(kc.ConnectionFailed("PATCH /api/v1/pods/p: connection refused")))
    with caplog.at_level(logging.WARNING, logger="sunk.controller.runtime"):
        ctl.process("ns/p")
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert ctl.waiting_for(KUBERNETES) == 1 and ctl.waiting_for("slurm") == 0
    assert ctl.outage_over("slurm") == 0
    assert ctl.outage_over(KUBERNETES) == 1
    assert len(ctl.queue) == 1 and ctl.queue.num_requeues("ns/p") == 0  # now, its failures forgotten
    assert ctl.waiting_for(KUBERNETES) == 0


@pytest.mark.parametrize("status", [401, 500, 503, 504])
def test_an_apiserver_that_cannot_serve_now_is_an_outage(status):
    ctl = controller(Raises(kc.api_error(status, "x", None, "POST", "/api/v1/namespaces/ns/pods/p/binding")))
    ctl.process("ns/p")
    assert ctl.waiting_for(KUBERNETES) == 1 and terminal_count(ctl) == 0


def test_a_429_is_retried_after_its_retry_after_and_not_woken_by_a_recovery():
    ctl = controller(Raises(kc.api_error(429, "TooManyRequests", None, "PATCH", "/p", retry_after=7)))
    ctl.process("ns/p")
    assert ctl.waiting_for(KUBERNETES) == 0 and ctl.queue.waiting() == 1 and ctl.queue.num_requeues("ns/p") == 0
    assert ctl.outage_over(KUBERNETES) == 0


def test_a_key_waits_only_for_the_dependency_of_its_last_failure():
    ctl = controller(Raises(SlurmUnavailable("cannot reach slurmrestd"), kc.ConnectionFailed("refused")))
    ctl.process("k")
    assert (ctl.waiting_for("slurm"), ctl.waiting_for(KUBERNETES)) == (1, 0)
    ctl.process("k")
    assert (ctl.waiting_for("slurm"), ctl.waiting_for(KUBERNETES)) == (0, 1)
    ctl.process("k")  # succeeds
    assert (ctl.waiting_for("slurm"), ctl.waiting_for(KUBERNETES)) == (0, 0)


def test_an_outage_without_a_dependency_ending_wakes_every_waiting_key():
    ctl = controller(Raises(SlurmUnavailable("down"), kc.ConnectionFailed("refused")))
    ctl.process("a")
    ctl.process("b")
    assert ctl.outage_over() == 2


# ---- the recovery probe -----------------------------------------------------------------------------


class Probe:
    def __init__(self, *answers: bool | Exception):
        self.answers = list(answers)
        self.calls = 0

    def __call__(self) -> bool:
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def probe(answers: Probe, waiting: list[bool]) -> tuple[RecoveryProbe, list[int]]:
    woken: list[int] = []
    return RecoveryProbe("t", waiting=lambda: waiting[0], probe=answers, wake=lambda: woken.append(1)), woken


def test_the_probe_asks_nothing_while_no_key_waits():
    answers = Probe()
    rp, woken = probe(answers, [False])
    assert not rp.step() and answers.calls == 0 and not woken


def test_the_probe_wakes_the_waiting_keys_on_the_first_answer_after_a_failure_and_only_then():
    answers = Probe(False, kc.ConnectionFailed("refused"), True, True)
    rp, woken = probe(answers, [True])
    assert [rp.step() for _ in range(4)] == [False, False, True, False]
    assert len(woken) == 1


def test_an_apiserver_that_never_failed_the_probe_wakes_nothing():
    """Writes failing while /readyz answers (a webhook): their keys keep their backoff, not a 1 s loop."""
    rp, woken = probe(Probe(True, True), [True])
    assert not rp.step() and not rp.step() and not woken


def test_a_failure_seen_before_the_keys_stopped_waiting_is_forgotten():
    waiting = [True]
    rp, woken = probe(Probe(False, True), waiting)
    rp.step()
    waiting[0] = False
    rp.step()
    waiting[0] = True
    assert not rp.step() and not woken


# ---- the fence ------------------------------------------------------------------------------------


class Clock:
    def __init__(self, now: float = 100.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_fence_holds_until_the_renew_deadline_after_the_start_of_the_last_renewal():
    clock = Clock()
    f = LeaseFence(10.0, clock)
    assert not f.held()  # never renewed
    f.renewed(95.0)
    assert f.held()
    clock.now = 104.999
    assert f.held()
    clock.now = 105.0
    assert not f.held()
    with pytest.raises(Fenced, match="POST /x: not sent"):
        f.check("POST /x")


def test_a_late_report_of_an_older_renewal_does_not_shorten_the_fence_and_revoke_ends_it():
    clock = Clock()
    f = LeaseFence(10.0, clock)
    f.renewed(100.0)
    f.renewed(98.0)
    clock.now = 109.0
    assert f.held()
    f.revoke()
    assert not f.held()


def test_an_unfenced_thread_is_never_refused_and_fenced_blocks_nest():
    held, lost = LeaseFence(10.0, Clock()), LeaseFence(10.0, Clock())
    held.renewed(100.0)
    fence.check("PATCH /p")  # no fence on this thread
    with fence.fenced(held):
        fence.check("PATCH /p")
        with fence.fenced(lost), pytest.raises(Fenced):
            fence.check("PATCH /p")
        fence.check("PATCH /p")
    fence.check("PATCH /p")


def test_the_fence_is_per_thread():
    lost = LeaseFence(10.0, Clock())
    errors: list[BaseException] = []

    def other() -> None:
        try:
            fence.check("PUT /lease")  # the elector's thread is never fenced
        except BaseException as exc:
            errors.append(exc)

    with fence.fenced(lost):
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert not errors


def test_a_reconcile_of_a_fenced_controller_cannot_write_after_the_deadline_and_is_retried_once_renewed(caplog):
    """A renewal the apiserver answered only after the deadline (etcd down) leaves this replica leading: the key
    refused by the fence must come back, or its object is never reconciled again."""
    clock = Clock()
    lease = LeaseFence(10.0, clock)
    lease.renewed(100.0)
    written: list[str] = []

    class Writer:
        def reconcile(self, key: str) -> None:
            fence.check(f"PATCH {key}")
            written.append(key)

    ctl = controller(Writer())
    ctl.fence = lease
    ctl.process("a")
    clock.now = 110.0  # past the renew deadline: the Lease may be someone else's
    with caplog.at_level(logging.WARNING, logger="sunk.controller.runtime"):
        ctl.process("b")
    assert written == ["a"]
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and record.exc_info is None and "no longer holds" in record.getMessage()
    fence.check("PATCH c")  # the worker's fence does not outlive its reconcile
    assert ctl.queue.num_requeues("b") == 1  # retried with backoff, never sent while the fence is down
    lease.renewed(110.0)  # the late renewal landed: this replica leads on
    ctl.process("b")
    assert written == ["a", "b"]


def test_the_elector_renews_the_fence_from_the_start_of_each_renewal_and_revokes_it_when_it_ends():
    cfg = LeaderElectionConfig(lease_name="l", namespace="ns", lease_duration=0.6, renew_deadline=0.4,
                               retry_period=0.05)
    lease = LeaseFence(cfg.renew_deadline)
    elector = LeaderElector(object(), cfg, fence=lease)  # type: ignore[arg-type]
    elector._renewed(1000.0)
    assert lease._until == 1000.4
    succeed = [True]
    elector._try_acquire_or_renew = lambda timeout: succeed[0]  # type: ignore[method-assign]
    elector.start()
    assert elector.wait_for_leading(2) and lease.held()
    succeed[0] = False  # the apiserver stops answering: the elector gives up at the renew deadline
    assert elector.wait_done(5)
    assert elector.lost and not lease.held()


def test_the_manager_fences_its_controllers_and_leader_only_periodics_and_nothing_without_election():
    cfg = LeaderElectionConfig(lease_name="l", namespace="ns")
    elected = Manager("m", api_client=object(), leader_election=cfg)  # type: ignore[arg-type]
    ctl = elected.add_controller(controller(Raises()))
    sweep = Periodic("sweep", 1.0, lambda: None)
    everywhere = Periodic("diag", 1.0, lambda: None)
    elected.add_runnable(sweep, needs_leader=True)
    elected.add_runnable(everywhere)
    assert elected.fence is not None and elected.fence.renew_deadline == cfg.renew_deadline
    assert ctl.fence is elected.fence and sweep.fence is elected.fence and everywhere.fence is None
    alone = Manager("m")
    assert alone.add_controller(controller(Raises())).fence is None and alone.fence is None


# ---- periodic safety nets ----------------------------------------------------------------------------


def test_a_periodic_call_that_meets_an_outage_logs_one_line_without_a_traceback(caplog):
    def sweep() -> None:
        raise kc.ConnectionFailed("GET /api/v1/pods: connection refused")

    with caplog.at_level(logging.WARNING, logger="sunk.controller.periodic"):
        Periodic("sweep", 1.0, sweep)._call()
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and record.exc_info is None


def test_a_leader_only_periodic_writes_behind_the_fence():
    seen: list[BaseException] = []

    def sweep() -> None:
        try:
            fence.check("DELETE /p")
        except Fenced as exc:
            seen.append(exc)
            raise

    p = Periodic("sweep", 1.0, sweep)
    p.fence = LeaseFence(10.0, Clock())  # never renewed
    p._call()
    assert len(seen) == 1
