"""Per-message-type call counts and durations of this process's client (``sunk_syncer_slurm_requests_total``,
``sunk_scheduler_slurm_requests_total``).

Named after Slurm's own RPC message types (what ``sdiag`` lists, and ``slurm_controller_rpc_*``
reports from it), so a daemon's own calls and slurmctld's view of all traffic line up in one dashboard.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from enum import StrEnum

from sunk.model.slurm import RpcStat

from .errors import NotFound


class Rpc(StrEnum):
    """Slurm's RPC message types, as ``sdiag`` names them: what each call of a client counts as."""

    PING = "REQUEST_PING"
    BUILD_INFO = "REQUEST_BUILD_INFO"
    NODE_INFO = "REQUEST_NODE_INFO"
    NODE_INFO_SINGLE = "REQUEST_NODE_INFO_SINGLE"  # slurm_load_node_single: one node
    UPDATE_NODE = "REQUEST_UPDATE_NODE"
    DELETE_NODE = "REQUEST_DELETE_NODE"
    JOB_INFO = "REQUEST_JOB_INFO"
    JOB_INFO_SINGLE = "REQUEST_JOB_INFO_SINGLE"
    JOB_STATE = "REQUEST_JOB_STATE"  # slurm_load_job_state: ids and states only
    SUBMIT_BATCH_JOB = "REQUEST_SUBMIT_BATCH_JOB"
    UPDATE_JOB = "REQUEST_UPDATE_JOB"
    KILL_JOB = "REQUEST_KILL_JOB"
    PARTITION_INFO = "REQUEST_PARTITION_INFO"
    STATS_INFO = "REQUEST_STATS_INFO"
    RECONFIGURE = "REQUEST_RECONFIGURE"  # scontrol reconfigure: slurmctld rereads its files


# The calls that change Slurm: both backends ask the Lease fence (sunk.base.fence) before sending one.
WRITES = frozenset({Rpc.UPDATE_NODE, Rpc.DELETE_NODE, Rpc.SUBMIT_BATCH_JOB, Rpc.UPDATE_JOB, Rpc.KILL_JOB,
                    Rpc.RECONFIGURE})


class RpcAccounting:
    """Thread-safe totals. A failed call counts too (and as an error): it cost a round trip.

    NotFound is an answer, not a failure, so it is not an error here.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self._clock = clock
        self._lock = threading.Lock()
        self._count: dict[str, int] = {}
        self._errors: dict[str, int] = {}
        self._seconds: dict[str, float] = {}

    def record(self, message_type: str, seconds: float, *, error: bool = False) -> None:
        with self._lock:
            self._count[message_type] = self._count.get(message_type, 0) + 1
            self._seconds[message_type] = self._seconds.get(message_type, 0.0) + seconds
            if error:
                self._errors[message_type] = self._errors.get(message_type, 0) + 1

    @contextmanager
    def measure(self, message_type: str) -> Iterator[None]:
        started = self._clock()
        try:
            yield
        except NotFound:
            self.record(message_type, self._clock() - started)  # an answer, not a failure
            raise
        except BaseException:
            self.record(message_type, self._clock() - started, error=True)
            raise
        self.record(message_type, self._clock() - started)

    def snapshot(self) -> Mapping[str, RpcStat]:
        with self._lock:
            return {
                name: RpcStat(message_type=name, count=count, mean_seconds=self._seconds[name] / count,
                              errors=self._errors.get(name, 0))
                for name, count in sorted(self._count.items())
            }

    def total_calls(self) -> int:
        with self._lock:
            return sum(self._count.values())
