"""The one interface to Slurm. Backends: ``rest`` (slurmrestd) and ``pyslurm``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Generic, Optional, Protocol, TypeVar, runtime_checkable

from attrs import frozen

from .models import Job, JobRequest, Node, NodeUpdate, Partition, RpcStat, SchedulerStats

T = TypeVar("T")


@frozen
class Snapshot(Generic[T]):
    """A list call's answer. ``items`` is None when nothing changed since ``updated_since``."""

    items: Optional[tuple[T, ...]]
    last_update: int  # Slurm's own clock; pass back as ``updated_since`` next time


@runtime_checkable
class SlurmClient(Protocol):
    def ping(self) -> bool: ...

    def release(self) -> str:
        """The Slurm release this client talks to, e.g. ``24.11.5`` (one call; SlurmError if it cannot tell)."""
        ...

    def list_nodes(self, *, updated_since: Optional[int] = None) -> Snapshot[Node]: ...

    def get_node(self, name: str) -> Node: ...

    def update_node(self, name: str, update: NodeUpdate) -> None: ...

    def delete_node(self, name: str) -> None: ...

    def list_jobs(self, *, updated_since: Optional[int] = None) -> Snapshot[Job]: ...

    def get_job(self, job_id: int) -> Job: ...

    def submit_job(self, request: JobRequest) -> int: ...

    def update_job(self, job_id: int, *, extra: Optional[str] = None, comment: Optional[str] = None) -> None: ...

    def cancel_job(self, job_id: int, *, signal: Optional[str] = None) -> None: ...

    def list_partitions(self) -> tuple[Partition, ...]: ...

    def diag(self) -> SchedulerStats: ...

    def rpc_stats(self) -> Mapping[str, RpcStat]:
        """This client's own calls, per message type (for slurm_controller_rpc_*)."""
        ...

    def close(self) -> None: ...
