"""The start gate of an operator that runs its own SlurmCluster (``sunk.nodeset.assembly.SlurmOnceItRuns``)."""

from __future__ import annotations

import threading

from sunk.nodeset.assembly import SlurmOnceItRuns


class Cache:
    def __init__(self) -> None:
        self.synced = threading.Event()

    def has_synced(self) -> bool:
        return self.synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self.synced.wait(timeout)


def cluster(ready: str | None) -> dict:
    conditions = [] if ready is None else [{"type": "SlurmrestdReady", "status": ready}]
    return {"metadata": {"name": "sc"}, "status": {"conditions": conditions}}


def test_a_slurm_that_does_not_run_yet_gates_nothing_one_that_runs_gates_until_its_first_node_list():
    cache = Cache()
    for fresh in (None, cluster(None), cluster("False")):  # (not made yet; made, slurmrestd not Ready)
        gate = SlurmOnceItRuns(cache, lambda fresh=fresh: fresh)  # type: ignore[misc]
        assert gate.has_synced() and gate.wait_for_sync(0.01)
    running = SlurmOnceItRuns(cache, lambda: cluster("True"))  # (a restart, a failover)
    assert not running.has_synced() and not running.wait_for_sync(0.01)
    cache.synced.set()
    assert running.has_synced() and running.wait_for_sync(0.01)
