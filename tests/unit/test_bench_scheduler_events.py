"""benchmarks/scheduler_events.py at a tiny size: every event runs through the scheduler's own handlers and
reconciler, wakes what the table says it wakes, and calls neither Slurm nor Kubernetes (its figures would
otherwise time a failure, or work a steady cluster never does)."""

from __future__ import annotations

import pytest

from benchmarks import scheduler_events as b
from scheduler.decide import Nothing
from sunk.slurm import connect
from sunk.translate.keys import PodKey
from sunk_dev.fakeslurm import FakeSlurmrestd


@pytest.fixture
def size():
    with FakeSlurmrestd(token="t") as fake:
        slurm = connect("rest", url=fake.url, token="t")
        try:
            yield b.Size(4, 40, slurm)
            assert fake.calls() == 0
        finally:
            slurm.close()


def woken_by(size: b.Size, event: str) -> int:
    before = size.sink.added
    getattr(size, event)()
    return size.sink.added - before


@pytest.mark.parametrize(("event", "keys"), [
    ("lookup", 0), ("slurmd_churn", 0), ("pod_status", 0), ("pod_relabel", 1), ("job_update", 0),
    ("reconcile_bound", 0), ("reconcile_waiting", 0),
])
def test_each_event_wakes_what_it_should(size, event, keys):
    for _ in range(3):
        assert woken_by(size, event) == keys


def test_a_slurmd_pod_made_then_deleted_wakes_the_pods_slurm_placed_on_its_node_twice(size):
    for _ in range(size.nodes):
        keys = woken_by(size, "slurmd_comes_and_goes")
        on_node = size.jobs.owners_on(f"node-{size.round % size.nodes}")
        assert len(on_node) >= 8 and keys == 2 * len(on_node)  # (the running ones; the pending ones are on none)


def test_a_sweep_tick_enqueues_one_batch_of_the_cycle(size):
    assert woken_by(size, "sweep_tick") == 80  # (40 Pods and 40 job owners: smaller than a batch)


def test_the_waiting_pods_show_their_wait_and_the_bound_ones_their_node(size):
    waiting = size.pod_store.get("ns/p-10")
    assert waiting is not None and waiting["status"]["conditions"][0]["reason"] == "WaitingForSlurm"
    assert isinstance(size.scheduler.unit_placement(PodKey("uid-11"))[1], Nothing)


def test_the_benchmark_runs_every_event_and_its_predecessors(capsys):
    assert b.main(["--small", "2:20", "--large", "4:40", "--rounds", "1", "--repeat", "3", "--before"]) == 0
    table = capsys.readouterr().out
    for event in [*b.EVENTS, *(f"{event}_before" for event in b.BEFORE)]:
        assert f"\n{event} " in table
