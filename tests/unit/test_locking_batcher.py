"""Group commit of annotation writes: shared writes, every caller waits for its own keys, errors reach all."""

from __future__ import annotations

import threading
import time

import pytest

from sunk.locking.batcher import AnnotationBatcher

POD = {"metadata": {"name": "node3", "namespace": "slurm"}}


def test_concurrent_callers_share_writes_and_return_only_after_their_keys_landed():
    written: list[dict] = []
    landed: dict[str, str | None] = {}
    gate = threading.Event()

    def write(_obj, annotations):
        gate.wait(2)
        time.sleep(0.01)
        written.append(dict(annotations))
        landed.update(annotations)

    batcher = AnnotationBatcher(write)
    seen_after: dict[int, bool] = {}

    def caller(i: int) -> None:
        batcher.patch(POD, {f"k{i}": str(i)})
        seen_after[i] = landed.get(f"k{i}") == str(i)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    time.sleep(0.1)
    gate.set()
    for t in threads:
        t.join(5)
    assert len(seen_after) == 50 and all(seen_after.values())
    assert 2 <= len(written) <= 5  # the first caller's own write, then the queue in one or a few
    assert sum(len(w) for w in written) == 50


def test_a_later_value_for_the_same_key_wins_within_a_batch():
    written: list[dict] = []
    gate = threading.Event()
    batcher = AnnotationBatcher(lambda _o, a: (gate.wait(2), written.append(dict(a))))
    first = threading.Thread(target=batcher.patch, args=(POD, {"other": "x"}))
    first.start()
    time.sleep(0.05)
    second = threading.Thread(target=batcher.patch, args=(POD, {"k": "set"}))
    second.start()
    time.sleep(0.05)
    third = threading.Thread(target=batcher.patch, args=(POD, {"k": None}))
    third.start()
    time.sleep(0.05)
    gate.set()
    for t in (first, second, third):
        t.join(5)
    assert written == [{"other": "x"}, {"k": None}]


def test_a_failed_write_is_raised_to_every_caller_of_that_batch_and_the_next_batch_still_runs():
    calls = {"n": 0}

    def write(_obj, _annotations):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("apiserver said no")

    batcher = AnnotationBatcher(write)
    with pytest.raises(RuntimeError, match="said no"):
        batcher.patch(POD, {"a": "1"})
    batcher.patch(POD, {"b": "2"})
    assert calls["n"] == 2
