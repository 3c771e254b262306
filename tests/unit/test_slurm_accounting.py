import threading

import pytest

from sunk.slurm.accounting import Rpc, RpcAccounting
from sunk.slurm.errors import NotFound, SlurmUnavailable


class Ticks:
    def __init__(self, step):
        self.t, self.step = 0.0, step

    def __call__(self):
        self.t += self.step
        return self.t


def test_counts_and_mean_per_message_type():
    acc = RpcAccounting(clock=Ticks(0.5))  # every measured call lasts 0.5 s
    with acc.measure(Rpc.JOB_INFO):
        pass
    with acc.measure(Rpc.JOB_INFO):
        pass
    acc.record(Rpc.PING, 2.0)
    stats = acc.snapshot()
    assert list(stats) == [Rpc.JOB_INFO, Rpc.PING]
    assert (stats[Rpc.JOB_INFO].count, stats[Rpc.JOB_INFO].mean_seconds) == (2, pytest.approx(0.5))
    assert (stats[Rpc.PING].count, stats[Rpc.PING].mean_seconds) == (1, 2.0)
    assert acc.total_calls() == 3


def test_failures_count_as_errors_but_not_found_is_an_answer():
    acc = RpcAccounting()
    with pytest.raises(SlurmUnavailable):
        with acc.measure(Rpc.JOB_INFO):
            raise SlurmUnavailable("down")
    with pytest.raises(NotFound):
        with acc.measure(Rpc.JOB_INFO):
            raise NotFound("no job")
    stat = acc.snapshot()[Rpc.JOB_INFO]
    assert (stat.count, stat.errors) == (2, 1)


def test_thread_safe_totals():
    acc = RpcAccounting()

    def work():
        for _ in range(2000):
            acc.record(Rpc.PING, 0.001)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stat = acc.snapshot()[Rpc.PING]
    assert stat.count == 16000 and stat.mean_seconds == pytest.approx(0.001)
