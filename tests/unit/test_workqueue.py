"""WorkQueue semantics: dedup, exclusive processing, delays, backoff, concurrency, shutdown."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from sunk.controller.workqueue import (
    BucketRateLimiter,
    ItemExponentialRateLimiter,
    MaxOfRateLimiter,
    WorkQueue,
)


def q(**kw) -> WorkQueue:
    return WorkQueue("test", rate_limiter=kw.pop("rate_limiter", ItemExponentialRateLimiter(0.001, 1.0)), **kw)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_dedup_key_added_twice_is_processed_once():
    wq = q()
    wq.add("a")
    wq.add("b")
    wq.add("a")
    assert len(wq) == 2
    assert wq.get(0) == "a"
    assert wq.get(0) == "b"
    assert wq.get(0.01) is None  # nothing left: the second "a" was a duplicate


def test_fifo_order():
    wq = q()
    for k in "cab":
        wq.add(k)
    assert [wq.get(0) for _ in range(3)] == ["c", "a", "b"]


def test_key_readded_while_processing_is_requeued_after_done_not_before():
    wq = q()
    wq.add("a")
    assert wq.get(0) == "a"
    wq.add("a")  # changed while a worker holds it
    assert len(wq) == 0, "must not be handed to a second worker while processing"
    assert wq.get(0.01) is None
    wq.add("a")  # still one pending re-run, not two
    wq.done("a")
    assert len(wq) == 1
    assert wq.get(0) == "a"
    wq.done("a")
    assert len(wq) == 0 and wq.processing() == 0


def test_done_without_readd_does_not_requeue():
    wq = q()
    wq.add("a")
    assert wq.get(0) == "a"
    wq.done("a")
    assert len(wq) == 0
    assert wq.get(0.01) is None


def test_add_after_orders_by_ready_time_not_insertion():
    clock = FakeClock()
    wq = q(clock=clock)
    wq.add_after("late", 3.0)
    wq.add_after("early", 1.0)
    wq.add_after("mid", 2.0)
    assert len(wq) == 0 and wq.waiting() == 3
    clock.now += 1.5
    assert len(wq) == 1
    clock.now += 2.0
    assert [wq.get(0) for _ in range(3)] == ["early", "mid", "late"]


def test_add_after_keeps_earliest_request_for_a_key():
    clock = FakeClock()
    wq = q(clock=clock)
    wq.add_after("a", 10.0)
    wq.add_after("a", 1.0)  # earlier wins
    wq.add_after("a", 5.0)  # later is ignored
    assert wq.waiting() == 1
    clock.now += 1.0
    assert wq.get(0) == "a"
    wq.done("a")
    clock.now += 10.0
    assert len(wq) == 0, "the superseded 10 s entry must not fire a second time"


def test_add_after_wakes_a_blocked_get_at_the_right_time():
    wq = q()
    got: list[tuple[str | None, float]] = []
    t0 = time.monotonic()

    def worker():
        key = wq.get(5.0)
        got.append((key, time.monotonic() - t0))

    th = threading.Thread(target=worker)
    th.start()
    time.sleep(0.02)  # let it block with nothing queued
    wq.add_after("x", 0.1)
    th.join(5)
    assert got and got[0][0] == "x"
    assert 0.09 <= got[0][1] < 1.0


def test_a_delayed_key_is_handed_out_on_time_while_the_other_workers_are_busy():
    """A delayed add wakes one waiter, and only for a new earliest deadline: with the others taken by keys that
    keep them busy, the delayed key still goes out on time, not when a busy worker is done."""
    wq = q()
    got: dict[str, float] = {}
    t0 = time.monotonic()

    def worker() -> None:
        while (key := wq.get()) is not None:
            got[key] = time.monotonic() - t0
            if key.startswith("slow"):
                time.sleep(1.0)
            wq.done(key)

    workers = [threading.Thread(target=worker) for _ in range(4)]
    for th in workers:
        th.start()
    time.sleep(0.05)  # all four blocked, nothing queued or delayed
    wq.add_after("late", 0.2)
    for i in range(3):
        wq.add(f"slow-{i}")
    deadline = time.monotonic() + 5
    while "late" not in got and time.monotonic() < deadline:
        time.sleep(0.01)
    wq.shutdown()
    for th in workers:
        th.join(5)
    assert 0.19 <= got.get("late", 99.0) < 0.8, got


def test_a_waiter_that_times_out_hands_the_timer_on():
    """The one waiter woken for a new earliest deadline may itself return at its own get() timeout first: the
    other waiter, asleep with no deadline, must then be woken for the delayed key."""
    wq = q()
    got: dict[str, float] = {}
    t0 = time.monotonic()
    first = threading.Thread(target=lambda: wq.get(timeout=0.3))
    first.start()
    time.sleep(0.05)

    def second() -> None:
        key = wq.get()
        if key is not None:
            got[key] = time.monotonic() - t0

    other = threading.Thread(target=second)
    other.start()
    time.sleep(0.05)
    wq.add_after("late", 0.4)  # the new earliest deadline wakes the longest waiter: the one that times out
    other.join(3)
    wq.shutdown()
    first.join(3)
    assert 0.45 <= got.get("late", 99.0) < 1.0, got


def test_blocked_get_wakes_on_add_without_polling():
    wq = q()
    got = []
    th = threading.Thread(target=lambda: got.append(wq.get()))
    th.start()
    time.sleep(0.02)
    wq.add("k")
    th.join(2)
    assert got == ["k"]


def test_add_rate_limited_backoff_grows_per_key_and_forget_resets():
    clock = FakeClock()
    wq = WorkQueue("t", rate_limiter=ItemExponentialRateLimiter(0.005, 300.0), clock=clock)
    delays = []
    for _ in range(5):
        before = clock.now
        wq.add_rate_limited("a")
        # find the ready time by advancing in small steps is unnecessary: read the limiter state
        delays.append(wq._waiting["a"] - before)
        clock.now = wq._waiting["a"]
        assert wq.get(0) == "a"
        wq.done("a")
    assert delays == pytest.approx([0.005, 0.01, 0.02, 0.04, 0.08])
    assert wq.num_requeues("a") == 5
    assert wq.num_requeues("b") == 0  # per key
    wq.forget("a")
    assert wq.num_requeues("a") == 0
    before = clock.now
    wq.add_rate_limited("a")
    assert wq._waiting["a"] - before == pytest.approx(0.005)


def test_exponential_limiter_caps():
    rl = ItemExponentialRateLimiter(0.005, 300.0)
    delays = [rl.when("k") for _ in range(80)]
    assert delays[0] == 0.005
    assert max(delays) == 300.0
    assert delays[-1] == 300.0
    assert all(a <= b for a, b in zip(delays, delays[1:], strict=False))


def test_bucket_limiter_allows_burst_then_paces():
    clock = FakeClock()
    rl = BucketRateLimiter(qps=10, burst=3, clock=clock)
    assert [rl.when("x") for _ in range(3)] == [0, 0, 0]
    assert rl.when("x") == pytest.approx(0.1)
    assert rl.when("y") == pytest.approx(0.2)
    clock.now += 10  # refills, but only up to burst
    assert [rl.when("z") for _ in range(3)] == [0, 0, 0]
    assert rl.when("z") > 0


def test_max_of_limiter():
    clock = FakeClock()
    rl = MaxOfRateLimiter(ItemExponentialRateLimiter(1.0, 100.0), BucketRateLimiter(qps=1, burst=1, clock=clock))
    assert rl.when("a") == 1.0  # exponential says 1 s, bucket says 0
    assert rl.when("a") == 2.0  # exponential 2 s beats bucket 1 s
    assert rl.num_requeues("a") == 2
    rl.forget("a")
    assert rl.num_requeues("a") == 0


def test_concurrent_workers_never_process_a_key_twice_at_once_and_lose_nothing():
    wq = q()
    keys = [f"k{i}" for i in range(20)]
    in_flight: set[str] = set()
    lock = threading.Lock()
    violations: list[str] = []
    processed: Counter[str] = Counter()
    last_seen_gen: dict[str, int] = {}
    generation: dict[str, int] = dict.fromkeys(keys, 0)

    def worker():
        while (key := wq.get()) is not None:
            with lock:
                if key in in_flight:
                    violations.append(key)
                in_flight.add(key)
                gen = generation[key]
            time.sleep(0.0005)
            with lock:
                in_flight.discard(key)
                processed[key] += 1
                last_seen_gen[key] = max(last_seen_gen.get(key, 0), gen)
            wq.done(key)

    workers = [threading.Thread(target=worker) for _ in range(6)]
    for w in workers:
        w.start()
    producers = []

    def produce(offset: int):
        for round_ in range(50):
            for k in keys[offset::3]:
                with lock:
                    generation[k] = round_ + 1
                wq.add(k)

    for i in range(3):
        p = threading.Thread(target=produce, args=(i,))
        producers.append(p)
        p.start()
    for p in producers:
        p.join()
    # Every key's final generation must be observed by a reconcile that started after it was set.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with lock:
            if all(last_seen_gen.get(k) == 50 for k in keys) and len(wq) == 0 and wq.processing() == 0:
                break
        time.sleep(0.005)
    assert wq.shutdown(drain=True, timeout=5)
    for w in workers:
        w.join(5)
    assert not violations, f"keys processed concurrently: {violations[:5]}"
    assert all(last_seen_gen[k] == 50 for k in keys), "a change made before the last add() was never processed"
    assert sum(processed.values()) < 20 * 50, "dedup should have collapsed some of the 1000 adds"


def test_shutdown_unblocks_getters_and_drops_pending():
    wq = q()
    results: list[str | None] = []
    getters = [threading.Thread(target=lambda: results.append(wq.get())) for _ in range(3)]
    for g in getters:
        g.start()
    time.sleep(0.02)
    wq.shutdown()
    for g in getters:
        g.join(2)
    assert results == [None, None, None]
    wq.add("after")
    wq.add_after("later", 0.001)
    assert len(wq) == 0 and wq.get(0) is None and wq.shutting_down


def test_shutdown_with_drain_waits_for_in_flight():
    wq = q()
    wq.add("a")
    assert wq.get(0) == "a"
    finished = threading.Event()

    def finish():
        time.sleep(0.05)
        finished.set()
        wq.done("a")

    threading.Thread(target=finish).start()
    assert wq.shutdown(drain=True, timeout=5)
    assert finished.is_set()


def test_shutdown_with_drain_times_out():
    wq = q()
    wq.add("a")
    assert wq.get(0) == "a"
    assert wq.shutdown(drain=True, timeout=0.02) is False
    wq.done("a")


def test_get_timeout_returns_none():
    wq = q()
    t0 = time.monotonic()
    assert wq.get(0.05) is None
    assert time.monotonic() - t0 >= 0.045
