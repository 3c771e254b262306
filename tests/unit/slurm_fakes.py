"""The in-process slurmrestd stand-in with clocks in the test's hands: Slurm's (seconds since the epoch, what
``update_time`` compares) and the cache's (monotonic, what its reads are stamped with)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sunk_dev.fakeslurm import FakeSlurmrestd


class Clock:
    def __init__(self, t: float):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def tick(self, seconds: float = 2.0) -> None:
        self.t += seconds


@pytest.fixture
def slurm_clock() -> Clock:
    return Clock(1_800_000_000.0)


@pytest.fixture
def clock() -> Clock:
    return Clock(100.0)


@pytest.fixture
def fake(slurm_clock: Clock) -> Iterator[FakeSlurmrestd]:
    server = FakeSlurmrestd(token="t", clock=slurm_clock)
    server.put_partition("batch", "node[1-2]", 2, 64)
    with server:
        yield server
