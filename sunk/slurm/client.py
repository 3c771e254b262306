"""The one interface to Slurm. Backends: ``rest`` (slurmrestd) and ``pyslurm``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Generic, Optional, Protocol, TypeVar, runtime_checkable

from attrs import frozen

from sunk.model.slurm import Job, JobRequest, JobState, Node, NodeUpdate, Partition, RpcStat, SchedulerStats

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

    def get_node(self, name: str) -> Node:
        """One node as a full node list shows it (its allocation current): NotFound if Slurm knows none."""
        ...

    def read_node(self, name: str) -> Node:
        """One node by a single-node read (one call, one node's bytes): NotFound if Slurm knows none.

        Current: the state word and its flags (DRAIN, DOWN, COMPLETING, ...), the reason, Extra, Comment.
        Not current: the allocation (allocated CPUs, memory, GRES, and so IDLE against MIXED), which
        slurmctld computes only for a full list (slurm_load_node_single skips
        ``select_g_select_nodeinfo_set_all``): it is as of the last full node list anyone made, so it
        can show a job that has ended since, never hide one that holds the node (a running job's
        node is ALLOCATED in the state word itself). For decisions on drains, DOWN and Extra, not for
        what is free.
        """
        ...

    def update_node(self, name: str, update: NodeUpdate) -> None: ...

    def delete_node(self, name: str) -> None: ...

    def list_jobs(self, *, updated_since: Optional[int] = None) -> Snapshot[Job]: ...

    def get_job(self, job_id: int) -> Job: ...

    def get_job_allocations(self, job_id: int) -> Job:
        """One job with its per-node allocations (each node's GRES indices: ``JobAllocation.gres``), whatever
        this client's job lists carry: NotFound if Slurm knows none. What a DRA claim is filled from."""
        ...

    def list_job_states(self, job_ids: Optional[Iterable[int]] = None) -> tuple[JobState, ...]:
        """Every job's id and state, nothing else (only ``job_ids``' when given): one call.

        Over REST this is ``GET /jobs/state``, about 80 bytes a job where ``list_jobs`` costs
        8 to 18 KB a job. See ``cheap_job_states`` for the backends where it is not cheaper.
        """
        ...

    def read_jobs(self, job_ids: Iterable[int]) -> tuple[Job, ...]:
        """The full records slurmctld shows for each of ``job_ids``: for an array's id, every record
        of the array (its pending remainder and each task that has a record of its own). An id
        slurmctld no longer knows gives nothing. v0.0.42 reads one id per call (``GET /job/{id}``
        takes one id and ``/jobs`` no id filter), so this is one call per id, in order.
        """
        ...

    @property
    def cheap_job_states(self) -> bool:
        """Whether ``list_job_states`` costs much less than ``list_jobs`` (SlurmCache then diffs
        states and reads only the jobs that changed)."""
        ...

    @property
    def read_concurrency(self) -> int:
        """How many ``read_jobs`` calls are worth making at once (SlurmCache reads the jobs that changed that
        many at a time): slurmrestd serves each on a thread of its own; pyslurm holds the GIL through a
        read, so 1."""
        ...

    def submit_job(self, request: JobRequest) -> int: ...

    def update_job(self, job_id: int, *, extra: Optional[str] = None, comment: Optional[str] = None) -> None: ...

    def cancel_job(self, job_id: int, *, signal: Optional[str] = None, array_task_id: Optional[int] = None) -> None:
        """``array_task_id``: that one task of the array ``job_id`` (by the array's id alone Slurm cancels the
        whole array: the last task started keeps that id)."""
        ...

    def list_partitions(self) -> tuple[Partition, ...]: ...

    def diag(self) -> SchedulerStats: ...

    def rpc_stats(self) -> Mapping[str, RpcStat]:
        """This client's own calls, per message type (``sunk_syncer_slurm_requests_total``, ``sunk_scheduler_...``)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Reconfigurable(Protocol):
    """A backend that can have slurmctld reread its configuration files (``scontrol reconfigure``;
    slurmrestd's ``GET /reconfigure/``): what applies a new topology file without a restart.
    Not part of ``SlurmClient``: only the operator needs it (the topology writer, a SlurmCluster's new
    configuration). Both backends have it."""

    def reconfigure(self) -> None: ...
