"""Slurm domain values, independent of how they were fetched (REST or pyslurm).

Every class is a frozen attrs value: safe to share between threads, cheap to
compare, so the cache can diff snapshots with ``==``.
"""

from __future__ import annotations

import re
import signal as _signal
from collections.abc import Iterable
from typing import Optional, Union

from attrs import field, frozen

from . import hostlist

# Base node states as Slurm reports them; everything else in ``Node.state`` is a flag.
NODE_BASE_STATES = frozenset(
    {"IDLE", "ALLOCATED", "MIXED", "DOWN", "ERROR", "FUTURE", "UNKNOWN"}
)

# Base job states in which the job is not over yet. COMPLETING, CONFIGURING and
# REQUEUED are flags on top of these, not states of their own.
JOB_ACTIVE_STATES = frozenset({"PENDING", "RUNNING", "SUSPENDED"})
# Base states in which a job holds its nodes (COMPLETING, a flag, holds them too: see Job.holds_nodes).
JOB_HOLDING_STATES = frozenset({"RUNNING", "SUSPENDED"})

_GPU_GRES = re.compile(r"(?:^|,)gpu(?::[^:,()]+)?:(\d+)")


def gpu_count(gres: str) -> int:
    """Sum the GPUs in a GRES string such as ``gpu:h100:4(S:0-1),gpu:a100:2``."""
    return sum(int(n) for n in _GPU_GRES.findall(gres or ""))


_GPU_TRES = re.compile(r"(?:^|,)gres/gpu(:[^=,]+)?=(\d+)")


def tres_gpus(tres: str) -> int:
    """GPUs in a TRES string (``cpu=4,gres/gpu=2,gres/gpu:h100=2``): the untyped total if present."""
    found = _GPU_TRES.findall(tres or "")
    untyped = [int(n) for typ, n in found if not typ]
    return untyped[0] if untyped else sum(int(n) for _typ, n in found)


def signal_name(sig: Union[str, int]) -> str:
    """``15``, ``"TERM"`` or ``"sigterm"`` -> ``"SIGTERM"``; an unknown signal is a ValueError."""
    try:
        if isinstance(sig, int) or str(sig).isdigit():
            return _signal.Signals(int(sig)).name
        name = str(sig).strip().upper()
        return _signal.Signals[name if name.startswith("SIG") else "SIG" + name].name
    except (KeyError, ValueError):
        raise ValueError(f"unknown signal {sig!r}") from None


def _strs(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(items)


def _flags(items: Iterable[str]) -> frozenset[str]:
    return frozenset(items)


def _states(value: str | Iterable[str]) -> frozenset[str]:
    """Accept Slurm's "IDLE+DRAIN" text, or REST's ["IDLE", "DRAIN"] list."""
    words = value.replace("+", ",").split(",") if isinstance(value, str) else value
    return frozenset(w.strip().upper() for w in words if w and w.strip())


@frozen
class Node:
    name: str
    state: frozenset[str] = field(converter=_states, factory=frozenset)
    reason: str = ""
    reason_time: Optional[int] = None
    reason_user: str = ""
    extra: str = ""
    comment: str = ""
    cpus: int = 0
    alloc_cpus: int = 0
    real_memory: int = 0  # MB
    alloc_memory: int = 0  # MB
    gres: str = ""
    gres_used: str = ""
    partitions: tuple[str, ...] = field(converter=_strs, factory=tuple)
    features: tuple[str, ...] = field(converter=_strs, factory=tuple)

    @property
    def base_state(self) -> str:
        base = self.state & NODE_BASE_STATES
        return next(iter(base)) if len(base) == 1 else ("UNKNOWN" if not base else sorted(base)[0])

    @property
    def drained(self) -> bool:
        """DRAIN flag set (Slurm shows DRAINING or DRAINED, both are this)."""
        return "DRAIN" in self.state

    @property
    def down(self) -> bool:
        return "DOWN" in self.state

    @property
    def not_responding(self) -> bool:
        return "NOT_RESPONDING" in self.state

    @property
    def running_jobs(self) -> bool:
        return self.base_state in ("ALLOCATED", "MIXED") or "COMPLETING" in self.state

    @property
    def gpus_total(self) -> int:
        return gpu_count(self.gres)

    @property
    def gpus_alloc(self) -> int:
        return gpu_count(self.gres_used)


@frozen
class GresGrant:
    """One GRES of one job on one node, as Slurm's job record details it (``gres_detail``, ``scontrol show job
    -d``): ``gpu:a100:2(IDX:0,2)``, ``gpu(CNT:2)`` (no device files, so no indices), ``shard:a100:3(1/4,0/4,2/4)``
    (a shared GRES: units taken of each device, in the node's device order)."""

    name: str  # gpu, shard, mps, nic, ...
    type: str = ""  # a100, 1g.10gb, ... ("" untyped)
    count: int = 0
    indices: tuple[int, ...] = ()  # the node's devices of this GRES that Slurm gave the job (IDX); ()
    shares: tuple[tuple[int, int], ...] = ()  # a shared GRES: (device index, units) for each device it takes from


# A node has at most this many devices of one GRES: an index range beyond it is not Slurm's.
MAX_GRES_INDEX = 4096
# Slurm writes a job's IDX list into a 128-byte buffer (gres_stepmgr_job_build_details' bit_fmt): a list this
# long may have been cut short, naming other devices than the job's.
MAX_IDX_TEXT = 126
_GRES_HEAD = re.compile(r"([^:,()\s]+)(?::([^:,()\s]+))?")


def _gres_indices(ranges: str) -> tuple[int, ...]:
    """``0-1,3`` (Slurm's bit_fmt) -> (0, 1, 3); ``N/A`` -> ()."""
    if ranges == "N/A":
        return ()
    if len(ranges) > MAX_IDX_TEXT:
        raise ValueError(f"GRES indices {ranges[:20]!r}... are as long as Slurm's buffer: perhaps cut short")
    out: list[int] = []
    for part in ranges.split(","):
        first, dash, last = part.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"GRES index {part!r} is not N or N-M")
        low, high = int(first), int(last or first)
        if not low <= high < MAX_GRES_INDEX:
            raise ValueError(f"GRES index range {part!r} is not within 0-{MAX_GRES_INDEX - 1}")
        out.extend(range(low, high + 1))
    if len(set(out)) != len(out):
        raise ValueError(f"GRES indices {ranges!r} repeat")
    return tuple(sorted(out))


def parse_gres_entry(entry: str) -> GresGrant:
    """One GRES of a node's ``gres_detail`` (the forms of ``GresGrant``; also ``gpu:2`` with no detail). Anything
    else is a ValueError: indices are what a Pod's devices are chosen by, never guessed."""
    head, paren, body = entry.partition("(")
    if paren and (not entry.endswith(")") or "(" in body[:-1] or ")" in body[:-1]):
        raise ValueError(f"GRES {entry!r}: not one detail in parentheses at its end")
    body = body[:-1] if paren else body
    indices: tuple[int, ...] = ()
    shares: tuple[tuple[int, int], ...] = ()
    if body.startswith("CNT:"):
        name_type, count_text = head, body[4:]
    else:
        name_type, _, count_text = head.rpartition(":")
        if body.startswith("IDX:"):
            indices = _gres_indices(body[4:])
            if not count_text.isdigit() or int(count_text) != len(indices) or not indices:
                # (0 with an index: a no_consume GRES, which Slurm shares between jobs: no device is the job's)
                raise ValueError(f"GRES {entry!r}: its count and its indices differ")
        elif paren:  # a shared GRES: "taken/available" per device
            pairs = [part.partition("/") for part in body.split(",")]
            if not all(a.isdigit() and sep and b.isdigit() for a, sep, b in pairs):
                raise ValueError(f"GRES {entry!r}: detail is neither IDX:, CNT: nor shares")
            shares = tuple((i, int(a)) for i, (a, _, _b) in enumerate(pairs) if int(a))
    head_match = _GRES_HEAD.fullmatch(name_type)
    if not head_match or not count_text.isdigit():
        raise ValueError(f"GRES {entry!r} is not NAME[:TYPE]:COUNT[(DETAIL)] or NAME[:TYPE](CNT:COUNT)")
    return GresGrant(name=head_match[1], type=head_match[2] or "", count=int(count_text), indices=indices,
                     shares=shares)


def parse_gres_detail(text: str) -> tuple[GresGrant, ...]:
    """One node's entry of a job's ``gres_detail``, every GRES of it (``parse_gres_entry``), or a ValueError."""
    return tuple(parse_gres_entry(entry) for entry in hostlist.split_top_level(text or "", "()"))


def _gres_grants(text: str) -> tuple[tuple[GresGrant, ...], bool]:
    """The GRES of a detail that read, and whether any did not (the job's other facts still count). Shared per
    text: 50,000 jobs repeat a few details."""
    if (known := _GRES_PARSED.get(text)) is not None:
        return known
    try:
        entries = hostlist.split_top_level(text or "", "()")
    except ValueError:
        entries, unread = [], True
    else:
        unread = False
    grants = []
    for entry in entries:
        try:
            grants.append(parse_gres_entry(entry))
        except ValueError:
            unread = True
    parsed = (tuple(grants), unread)
    if len(_GRES_PARSED) < 4096:
        _GRES_PARSED[text] = parsed
    return parsed


_GRES_PARSED: dict[str, tuple[tuple[GresGrant, ...], bool]] = {}


@frozen
class JobAllocation:
    """What one job holds on one node."""

    node: str
    cpus: int = 0
    memory: int = 0  # MB
    gpus: int = 0
    gres: tuple[GresGrant, ...] = ()  # which devices (sunk/translate/dra.py); () when Slurm details none
    gres_unread: bool = False  # part of Slurm's detail did not read: ``gres`` may lack a GRES, never guess one

    @classmethod
    def with_gres_detail(cls, node: str, cpus: int, memory: int, detail: str) -> JobAllocation:
        """From one node's ``gres_detail`` entry: its GPU count and its grants, however much of it reads."""
        grants, unread = _gres_grants(detail)
        gpus = gpu_count(detail) if unread or not grants else sum(g.count for g in grants if g.name == "gpu")
        return cls(node=node, cpus=cpus, memory=memory, gpus=gpus, gres=grants, gres_unread=unread)


def _allocations(items: Iterable[JobAllocation]) -> tuple[JobAllocation, ...]:
    return tuple(items)


@frozen
class Job:
    id: int
    name: str = ""
    state: str = "PENDING"  # base state: PENDING, RUNNING, COMPLETED, CANCELLED, ...
    state_flags: frozenset[str] = field(converter=_flags, factory=frozenset)
    state_reason: str = ""
    nodes: str = ""  # hostlist expression as Slurm reports it, e.g. "node[1-2]"
    batch_host: str = ""  # the node the batch script runs on: the first of the allocation
    allocations: tuple[JobAllocation, ...] = field(converter=_allocations, factory=tuple)
    extra: str = ""
    comment: str = ""
    # Written only by Slurm's super users (root, SlurmUser, AdminLevel=Admin): where sunk keeps a
    # placeholder's identity, which the job's own user must not be able to forge.
    admin_comment: str = ""
    user_name: str = ""
    user_id: Optional[int] = None
    group_id: Optional[int] = None
    account: str = ""
    partition: str = ""
    qos: str = ""
    priority: int = 0
    submit_time: Optional[int] = None
    start_time: Optional[int] = None
    end_time: Optional[int] = None
    time_limit: Optional[int] = None  # minutes; None = infinite / unset
    tres_req: str = ""
    tres_alloc: str = ""
    shared: str = ""  # none, oversubscribe, user, mcs, topo ("" = partition default)
    working_directory: str = ""
    # Job arrays: the array's id on the array's every record (its pending "meta" record, whose id is
    # the array's, and each task that has a record of its own); the task's index on a task's record.
    array_job_id: Optional[int] = None
    array_task_id: Optional[int] = None

    @property
    def active(self) -> bool:
        """Pending, running or suspended: the job may still hold or get a node."""
        return self.state in JOB_ACTIVE_STATES

    @property
    def holds_nodes(self) -> bool:
        """Running or suspended, or completing (its nodes are held until the epilog ends)."""
        return self.state in JOB_HOLDING_STATES or "COMPLETING" in self.state_flags

    @property
    def node_list(self) -> tuple[str, ...]:
        """Each allocated node's name, the batch host first: from the allocations (Slurm's own order, which
        starts with it), else the expanded ``nodes`` hostlist, which Slurm sorts by name: the batch host is
        then moved to the front (a gang's leader is bound there)."""
        if self.allocations:
            return tuple(a.node for a in self.allocations)
        nodes = hostlist.expand(self.nodes)
        if self.batch_host in nodes[1:]:
            return (self.batch_host, *(n for n in nodes if n != self.batch_host))
        return nodes

    @property
    def gpus(self) -> int:
        """GPUs allocated (or, while pending, requested), from the TRES strings."""
        return tres_gpus(self.tres_alloc or self.tres_req)


@frozen
class JobState:
    """One job as slurmrestd's ``/jobs/state`` shows it: which job, and its state. Nothing else.

    Slurm names the job by text: ``"123"``; a heterogeneous job's component ``"124+1"`` (its own
    id, then its offset); a record of an array ``"107_1"``: the record's own job id, then its task
    index. A task that started has a record of its own (``"107_1"`` in array 100); the array's own
    record (id 100) holds the tasks still pending, listed one by one with its id (``"100_2"``,
    ``"100_3"``), until the last task starts in it (``"100_3"``). Seen on 24.11's slurmrestd and in
    25.11's source (``job_state.c``, data_parser's ``JOB_STATE_RESP_JOB_JOB_ID``).
    """

    key: str  # Slurm's text for the job
    state: str = "PENDING"  # base state, as Job.state
    state_flags: frozenset[str] = field(converter=_flags, factory=frozenset)
    job_id: Optional[int] = None  # the id of the record the entry speaks for (an array task's own id too)
    # An entry of an array: the array's id where the source says it (the job-state RPC), else the key's first
    # number, which is the array's id only for the array's own record (slurmrestd's text). None: no array.
    array_job_id: Optional[int] = None
    array_task_id: Optional[int] = None  # None for an array entry without a task index ("100_*")

    def same_state(self, job: Job) -> bool:
        """Whether ``job`` (a full record) shows this state."""
        return job.state == self.state and job.state_flags == self.state_flags


def job_state_key(key: str) -> tuple[Optional[int], Optional[int], Optional[int]]:
    """Slurm's job id text -> (job id, array job id, array task id); what the text does not say is None.

    ``"123"`` -> (123, None, None); ``"124+1"`` -> (124, None, None); ``"107_7"`` -> (107, 107, 7) (the
    record's own id; the text says no more of its array: see JobState); ``"100_*"`` or ``"100_[3-9]"`` (a
    range, which 24.11 expands but older dumpers did not) -> (100, 100, None). Anything else raises ValueError.
    """
    text = key.strip()
    if text.isdigit():
        return int(text), None, None
    head, plus, offset = text.partition("+")
    if plus and head.isdigit() and offset.isdigit():
        return int(head), None, None
    array, underscore, task = text.partition("_")
    if underscore and array.isdigit():
        if task.isdigit():
            return int(array), int(array), int(task)
        if task == "*" or (task.startswith("[") and task.endswith("]")):
            return int(array), int(array), None
    raise ValueError(f"not a job id Slurm's job state list gives: {key!r}")


@frozen
class SubmitLimits:
    """What a backend cannot put into a job submission, each with why. A Pod asking for one of them is
    refused with that reason (an Event and a condition), never submitted without it."""

    prefer: str = ""  # why the soft constraints (``--prefer``) cannot be passed; "" when they can
    shared: tuple[tuple[str, str], ...] = ()  # (sharing mode, why it cannot be asked for)

    def shared_refusal(self, mode: Optional[str]) -> str:
        return next((why for name, why in self.shared if name == mode), "")


@frozen
class JobRequest:
    """A batch job to submit: the fields sunk needs, nothing more."""

    name: str
    script: str
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    reservation: Optional[str] = None
    priority: Optional[int] = None
    user_id: Optional[int] = None
    group_id: Optional[int] = None
    cpus_per_task: int = 1
    # Nodes, exactly (a gang's job: one node per Pod, one task per node, so every node gets
    # cpus_per_task CPUs; the other per-node fields apply on each). 1: Slurm's default, left unsaid.
    node_count: int = 1
    memory_per_node: Optional[int] = None  # MB
    gpus_per_node: int = 0
    gpu_type: Optional[str] = None
    shards_per_node: int = 0  # Slurm shards of a GPU (gres/shard): a share several jobs may hold at once
    constraints: Optional[str] = None
    prefer: Optional[str] = None
    excluded_nodes: tuple[str, ...] = field(converter=_strs, factory=tuple)
    required_nodes: tuple[str, ...] = field(converter=_strs, factory=tuple)
    shared: Optional[str] = None  # none, oversubscribe, user, mcs, topo
    time_limit: Optional[int] = None  # minutes
    comment: Optional[str] = None
    extra: Optional[str] = None
    admin_comment: Optional[str] = None  # Slurm refuses it unless the submitter is a super user
    working_directory: str = "/tmp"
    environment: tuple[str, ...] = field(converter=_strs, default=("PATH=/usr/sbin:/usr/bin:/sbin:/bin",))
    requeue: Optional[bool] = None

    @property
    def gres_per_node(self) -> tuple[str, ...]:
        """The GRES each node gives the job, as ``NAME[:TYPE]:COUNT``."""
        kind = f"gpu:{self.gpu_type}" if self.gpu_type else "gpu"
        return ((f"{kind}:{self.gpus_per_node}",) if self.gpus_per_node else ()) + (
            (f"shard:{self.shards_per_node}",) if self.shards_per_node else ())

    @property
    def tres_per_node(self) -> Optional[str]:
        return ",".join(f"gres/{gres}" for gres in self.gres_per_node) or None


@frozen
class NodeUpdate:
    """A change to one node; ``None`` leaves that field alone."""

    state: Optional[str] = None  # DRAIN, RESUME, DOWN, UNDRAIN, ...
    reason: Optional[str] = None
    extra: Optional[str] = None
    comment: Optional[str] = None


@frozen
class Partition:
    name: str
    nodes: tuple[str, ...] = field(converter=_strs, factory=tuple)
    state: str = "UP"
    priority_tier: int = 1
    total_cpus: int = 0
    total_nodes: int = 0


@frozen
class RpcStat:
    """Count and mean duration of one RPC message type."""

    message_type: str
    count: int
    mean_seconds: float
    errors: int = 0  # calls that failed (client-side accounting only)


def _rpcs(items: Iterable[RpcStat]) -> tuple[RpcStat, ...]:
    return tuple(items)


@frozen
class SchedulerStats:
    """The figures ``sdiag`` shows, as far as the metrics table needs them."""

    server_thread_count: int = 0
    agent_queue_size: int = 0
    dbd_agent_queue_size: int = 0
    schedule_queue_length: int = 0
    jobs_submitted: int = 0
    jobs_started: int = 0
    jobs_completed: int = 0
    jobs_canceled: int = 0
    jobs_failed: int = 0
    jobs_pending: int = 0
    jobs_running: int = 0
    schedule_cycle_last: float = 0.0  # seconds
    schedule_cycle_mean: float = 0.0  # seconds
    schedule_cycle_mean_depth: float = 0.0
    schedule_cycle_per_minute: float = 0.0
    bf_cycle_last: float = 0.0  # seconds
    bf_cycle_mean: float = 0.0  # seconds
    bf_depth_mean: float = 0.0
    bf_backfilled_jobs: int = 0
    bf_last_backfilled_jobs: int = 0
    bf_backfilled_het_jobs: int = 0
    rpcs: tuple[RpcStat, ...] = field(converter=_rpcs, factory=tuple)
