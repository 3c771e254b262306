"""The Slurm metrics source and the ``diag`` poller behind it.

Why rendered per scrape, not gauges set in a loop: per-job series come and go with the
jobs, and gauges kept by hand leak the series of jobs long gone. Each scrape renders the
current snapshot; the lines of the jobs and nodes that did not change since the last scrape
are reused (``sunk.metrics.incremental``), those of jobs and nodes that are gone are dropped.

Why ``diag`` has its own poller: it is one cheap call, but not a list the cache keeps, and
a scrape must not call Slurm at all. Between two polls the last good answer is served; when
Slurm cannot be reached the error is logged once per outage and ``sunk_slurm_snapshot_fresh``
tells dashboards that the figures are old.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from itertools import chain
from typing import Optional

from sunk.controller.periodic import Periodic
from sunk.model.slurm import Job, Node, SchedulerStats
from sunk.slurm.errors import SlurmError

from .exposition import Family, render
from .families import SlurmSnapshot, slurm_families, sunk_drain_age
from .incremental import IncrementalTable

log = logging.getLogger(__name__)


class DiagPoller:
    """Keeps the last good ``diag`` answer, refreshed every ``interval`` seconds on its own thread."""

    def __init__(self, diag: Callable[[], SchedulerStats], interval: float = 15.0,
                 clock: Callable[[], float] = time.monotonic):
        self._diag = diag
        self.interval = interval
        self._clock = clock
        self._periodic = Periodic("slurm-diag", interval, self.poll, at_start=True)
        self._stats: Optional[SchedulerStats] = None
        self._fetched_at: Optional[float] = None
        self._failing = False

    @property
    def stats(self) -> Optional[SchedulerStats]:
        return self._stats

    @property
    def fresh(self) -> bool:
        """The last poll worked and is at most two intervals old."""
        return (not self._failing and self._fetched_at is not None
                and self._clock() - self._fetched_at <= 2 * self.interval)

    def poll(self) -> None:
        try:
            stats = self._diag()
        except Exception as exc:  # any failure, even an answer we cannot read: the poller must live on
            if not self._failing:
                expected = isinstance(exc, (SlurmError, OSError))
                log.warning("slurm diag failed; serving the last scheduler figures until it answers: %s", exc,
                            exc_info=not expected)
            self._failing = True
            return
        if self._failing:
            log.info("slurm diag answers again")
        self._stats, self._fetched_at, self._failing = stats, self._clock(), False

    def start(self) -> None:
        self._periodic.start()

    def stop(self) -> None:
        self._periodic.stop()


class SlurmMetrics:
    """Renders the Syncer metrics table from memory: cached nodes and jobs, the polled diag.

    ``active`` gates every family here, all cluster-wide (slurmctld's RPC statistics too, from
    ``diag``): only the leader reports them, so two replicas never double every series. This
    process's own calls are ``sunk_syncer_slurm_requests_total`` (``sunk.syncer.metrics``).
    ``render`` keeps the table's lines between scrapes; ``families`` renders everything anew
    (the reference ``render`` must match byte for byte).
    """

    def __init__(
        self,
        *,
        nodes: Callable[[], Mapping[str, Node]],
        jobs: Callable[[], Mapping[int, Job]],
        diag: DiagPoller,
        freshness: Callable[[], Mapping[str, bool]],
        active: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.time,
    ):
        self._nodes, self._jobs, self._diag = nodes, jobs, diag
        self._freshness, self._active, self._clock = freshness, active, clock
        self.table = IncrementalTable()
        self._lock = threading.Lock()  # scrapes may come on several threads; the table is one scrape's at a time

    def _fresh(self) -> Family:
        fresh = Family("sunk_slurm_snapshot_fresh",
                       "1 while the Slurm figures behind these metrics are current, by source.", ("source",))
        for source, ok in sorted({**self._freshness(), "diag": self._diag.fresh}.items()):
            fresh.add((source,), 1 if ok else 0)
        return fresh

    def _head(self, snapshot: SlurmSnapshot) -> list[Family]:
        """What every scrape renders anew before the table: freshness, and sunk's drains' ages (they follow the
        clock, and are few)."""
        return [self._fresh(), sunk_drain_age(snapshot.nodes.values(), snapshot.now)]

    def _snapshot(self) -> SlurmSnapshot:
        return SlurmSnapshot(nodes=self._nodes(), jobs=self._jobs(), stats=self._diag.stats, now=self._clock())

    def families(self) -> Iterator[Family]:
        """Every family rendered anew from the current snapshot."""
        if not self._active():
            return
        snapshot = self._snapshot()
        yield from self._head(snapshot)
        yield from slurm_families(snapshot)

    def pieces(self) -> list[list[bytes]]:
        """The bytes of ``render(self.families())`` as groups of pieces (what /metrics writes), rendering only
        the jobs and nodes that changed since the last scrape."""
        with self._lock:
            if not self._active():
                self.table.clear()  # a standby holds no table; it renders everything when it leads again
                return []
            snapshot = self._snapshot()
            return self.table.pieces(snapshot, before=(render(self._head(snapshot)).encode(),))

    def render(self) -> str:
        """The same text as ``render(self.families())``, whole."""
        return b"".join(chain.from_iterable(self.pieces())).decode()
