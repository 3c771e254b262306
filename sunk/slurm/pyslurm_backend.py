"""SlurmClient over pyslurm 25.11 (Slurm's C API, authenticated by munge like the CLIs).

``import pyslurm`` happens when the backend is constructed, never at module import, so the
package works where pyslurm is not installed (it builds only against Slurm 25.11 headers).

Where pyslurm 25.11 differs from slurmrestd, and what this backend does about it:
- ``Nodes.load()``/``Jobs.load()`` always ask for everything (update_time 0), so
  ``updated_since`` cannot be honoured: every list returns items, and ``last_update`` is
  the local clock. The cache still emits only real changes, because it diffs.
- ``Job.state`` is one word, and a flag hides the base state (COMPLETING, CONFIGURING,
  REQUEUED, ...); it is mapped to the base state it implies (see ``_FLAG_BASE``).
- TRES come parsed; they are written back as ``type[/name]=count`` text.
- An empty string written (a node's or job's Extra or Comment cleared) reaches Slurm as "no change":
  refused with SlurmError rather than silently not done.
- ``Job.cancel()`` ignores "already done" and "invalid job id": cancelling a job that is
  gone is a success. The REST backend behaves the same.
- A stock pyslurm 25.11.2's ``JobSubmitDescription`` has no ``prefer`` (soft constraints) and no ``topo``
  sharing mode, though Slurm's C API has both (``job_desc_msg_t.prefer``, ``JOB_SHARED_TOPO``); sunk's
  pyslurm wheel (``25.11.2+sunk<hash>``, built with ``dev/sunk_dev/patches/pyslurm-25.11.2-prefer-topo.patch``,
  meant upstream) has both. The client asks the module it loaded what it can take (``submit_limits_of``,
  never by version) and submits what it can; what it cannot is in its ``submit_limits``, and the scheduler
  refuses a Pod asking for it with that reason (an Event and a condition) rather than submitting it
  without; a request carrying one anyway raises SlurmError. Slurm reads ``TOPO`` back either way.
- pyslurm 25.11 wraps no ``slurm_load_job_state``: ``list_job_states`` calls it through ctypes on the
  libslurmfull pyslurm loaded (``jobstate_rpc``), so the job cache lists states and reads only the jobs
  that changed, as over REST (``cheap_job_states``). Without that symbol (a stand-in module) it is a full
  ``Jobs.load()`` reduced to ids and states, and ``cheap_job_states`` is False.
- A record's state and flags are those of the state RPC, read with it (one small RPC for the whole
  list or read): pyslurm's one-word ``Job.state`` hides the base state behind a flag.
- ``Job.load(id)`` keeps only the first record slurm_load_job returns, so ``read_jobs`` reads an
  array's records from ``Jobs.load()``.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import attrs

from sunk.base import fence
from sunk.model import hostlist
from sunk.model.slurm import (
    Job,
    JobAllocation,
    JobRequest,
    JobState,
    Node,
    NodeUpdate,
    Partition,
    RpcStat,
    SchedulerStats,
    SubmitLimits,
    signal_name,
)

from .accounting import WRITES, Rpc, RpcAccounting
from .client import Snapshot
from .errors import (
    AUTH_CODES,
    NOT_FOUND_CODES,
    UNAVAILABLE_CODES,
    UNCERTAIN_CODES,
    AuthenticationFailed,
    NotFound,
    OutcomeUnknown,
    SlurmError,
    SlurmUnavailable,
)
from .jobstate_rpc import JobStateRpc
from .v0042 import JOB_BASE_STATES, check_shared

log = logging.getLogger(__name__)

# pyslurm's one-word job state when a flag wins over the base state.
_FLAG_BASE = {
    "CONFIGURING": "RUNNING", "RESIZING": "RUNNING", "SIGNALING": "RUNNING", "STOPPED": "RUNNING",
    "POWER_UP_NODE": "RUNNING",
    "REQUEUED": "PENDING", "REQUEUE_HOLD": "PENDING", "REQUEUE_FED": "PENDING", "SPECIAL_EXIT": "PENDING",
    "RESV_DEL_HOLD": "PENDING",
    "COMPLETING": "COMPLETED", "STAGE_OUT": "COMPLETED", "REVOKED": "CANCELLED",
    "LAUNCH_FAILED": "FAILED", "RECONFIG_FAIL": "FAILED",
}
# Slurm's job_share_string() -> v0.0.42's ``shared`` words; "OK" means the partition's default.
_SHARE_FROM_SLURM = {"NO": "none", "YES": "oversubscribe", "USER": "user", "MCS": "mcs", "TOPO": "topo", "OK": ""}
_SHARE_TO_PYSLURM = {"none": "exclusive", "oversubscribe": "oversubscribe", "user": "user", "mcs": "mcs",
                     "topo": "topo"}
PATCHED_WHEEL = "dev/sunk_dev/patches/pyslurm-25.11.2-prefer-topo.patch"
_NOT_IN_PYSLURM = ("{pyslurm}'s JobSubmitDescription cannot pass it (Slurm's C API has {field}); "
                   f"use sunk's pyslurm wheel, built with {PATCHED_WHEEL} (docs/compatibility.md), "
                   "or the REST backend")
_TRES_SCALARS = ("cpu", "mem", "energy", "node", "billing", "vmem", "pages")


def gres_text(gres: Any) -> str:
    """pyslurm's GRES dict (``{"gpu:h100": 4}`` or ``{"gpu": {"count": 1, "indexes": "0"}}``) as Slurm's text
    (``gpu:1(IDX:0)``: the indices as the job record's ``gres_detail`` gives them, models.parse_gres_detail)."""
    if not gres:
        return ""
    if isinstance(gres, str):
        return gres
    parts = []
    for name, value in gres.items():
        count = value.get("count", 0) if isinstance(value, Mapping) else getattr(value, "count", value)
        indexes = value.get("indexes") if isinstance(value, Mapping) else getattr(value, "indexes", None)
        if name.endswith(":CNT"):  # (pyslurm's reading of a count-only detail, "gpu(CNT:2)")
            parts.append(f"{name[:-4]}(CNT:{int(count or 0)})")
        else:
            parts.append(f"{name}:{int(count or 0)}" + (f"(IDX:{indexes})" if isinstance(indexes, str) and indexes
                                                         else ""))
    return ",".join(parts)


def tres_text(tres: Any) -> str:
    """pyslurm's TrackableResources as Slurm's ``cpu=1,mem=100M,gres/gpu=1`` text."""
    if not tres:
        return ""
    if isinstance(tres, str):
        return tres
    parts = []
    for kind in _TRES_SCALARS:
        value = getattr(tres, kind, None)
        count = getattr(value, "count", value)
        if count is not None:
            parts.append(f"{kind}={int(count)}M" if kind == "mem" else f"{kind}={int(count)}")
    for name, value in (getattr(tres, "gres", None) or {}).items():
        parts.append(f"gres/{name}={int(getattr(value, 'count', value))}")
    return ",".join(parts)


def _cpu_count(cpu_ids: str | None) -> int:
    """``"0-3,8"`` -> 5."""
    total = 0
    for span in (cpu_ids or "").split(","):
        if not span:
            continue
        lo, _, hi = span.partition("-")
        total += int(hi or lo) - int(lo) + 1
    return total


def node_from_pyslurm(n: Any) -> Node:
    return Node(
        name=n.name,
        state=n.state or "",
        reason=n.reason or "",
        reason_time=n.reason_time or None,
        reason_user=n.reason_user or "",
        extra=n.extra or "",
        comment=n.comment or "",
        cpus=n.total_cpus or 0,
        alloc_cpus=n.allocated_cpus or 0,
        real_memory=n.real_memory or 0,
        alloc_memory=n.allocated_memory or 0,
        gres=gres_text(n.configured_gres),
        gres_used=gres_text(n.allocated_gres),
        partitions=n.partitions or (),
        features=n.available_features or (),
    )


def job_from_pyslurm(j: Any) -> Job:
    word = (j.state or "PENDING").upper()
    state, flags = (word, frozenset()) if word in JOB_BASE_STATES else (_FLAG_BASE.get(word, word), frozenset({word}))
    reason = j.state_reason or ""
    try:
        layout = j.get_resource_layout_per_node() or {}
    except (ValueError, AttributeError):
        layout = {}
    allocations = tuple(
        JobAllocation.with_gres_detail(node, cpus=_cpu_count(a.get("cpu_ids")), memory=int(a.get("memory") or 0),
                                       detail=gres_text(a.get("gres")))
        for node, a in layout.items()
    )
    return Job(
        id=int(j.id),
        name=j.name or "",
        state=state,
        state_flags=flags,
        state_reason="" if reason == "None" else reason,
        nodes=j.allocated_nodes or "",
        allocations=allocations,
        extra=j.extra or "",
        comment=j.comment or "",
        admin_comment=getattr(j, "admin_comment", None) or "",
        user_name=j.user_name or "",
        user_id=j.user_id,
        group_id=j.group_id,
        account=j.account or "",
        partition=j.partition or "",
        qos=j.qos or "",
        priority=j.priority or 0,
        submit_time=j.submit_time or None,
        start_time=j.start_time or None,
        end_time=j.end_time or None,
        time_limit=j.time_limit,
        tres_req=tres_text(j.requested_tres),
        tres_alloc=tres_text(j.allocated_tres),
        shared=_SHARE_FROM_SLURM.get((j.resource_sharing or "OK").upper(), ""),
        working_directory=j.working_directory or "",
        array_job_id=getattr(j, "array_id", None) or None,
        array_task_id=getattr(j, "array_task_id", None),
    )


def job_state_of(job: Job) -> JobState:
    """A full record reduced to what ``/jobs/state`` would say of it (one entry per record)."""
    if job.array_job_id is None:
        return JobState(key=str(job.id), state=job.state, state_flags=job.state_flags, job_id=job.id)
    task = "*" if job.array_task_id is None else str(job.array_task_id)
    return JobState(key=f"{job.id}_{task}", state=job.state, state_flags=job.state_flags, job_id=job.id,
                    array_job_id=job.array_job_id, array_task_id=job.array_task_id)


def refines(record: Job, state: JobState) -> bool:
    """Whether the state RPC's answer is the record's own state made exact, not a later one: the same base state,
    or a record whose state pyslurm gave as a flag (``_FLAG_BASE``) that the RPC names beside its base."""
    if record.state == state.state:
        return True
    return bool(record.state_flags) and record.state_flags <= state.state_flags


def partition_from_pyslurm(p: Any) -> Partition:
    return Partition(name=p.name, nodes=hostlist.expand(p.nodes or ""), state=p.state or "UNKNOWN",
                     priority_tier=p.priority_tier or 1, total_cpus=p.total_cpus or 0,
                     total_nodes=p.total_nodes or 0)


def stats_from_pyslurm(s: Any) -> SchedulerStats:
    def us(value: Any) -> float:
        return (value or 0) / 1e6

    rpcs = tuple(RpcStat(message_type=r.name, count=r.count or 0, mean_seconds=us(r.average_time))
                 for r in (s.rpcs_by_type or {}).values())
    return SchedulerStats(
        server_thread_count=s.server_thread_count or 0,
        agent_queue_size=s.agent_queue_size or 0,
        dbd_agent_queue_size=s.dbd_agent_queue_size or 0,
        schedule_queue_length=s.schedule_queue_length or 0,
        jobs_submitted=s.jobs_submitted or 0,
        jobs_started=s.jobs_started or 0,
        jobs_completed=s.jobs_completed or 0,
        jobs_canceled=s.jobs_canceled or 0,
        jobs_failed=s.jobs_failed or 0,
        jobs_pending=s.jobs_pending or 0,
        jobs_running=s.jobs_running or 0,
        schedule_cycle_last=us(s.schedule_cycle_last),
        schedule_cycle_mean=us(s.schedule_cycle_mean),
        schedule_cycle_mean_depth=float(s.schedule_cycle_mean_depth or 0),
        schedule_cycle_per_minute=float(s.schedule_cycles_per_minute or 0),
        bf_cycle_last=us(s.backfill_cycle_last),
        bf_cycle_mean=us(s.backfill_cycle_mean),
        bf_depth_mean=float(s.backfill_mean_depth or 0),
        bf_backfilled_jobs=s.backfilled_jobs or 0,
        bf_last_backfilled_jobs=s.last_backfilled_jobs or 0,
        bf_backfilled_het_jobs=s.backfilled_het_jobs or 0,
        rpcs=rpcs,
    )


def _takes_prefer(ps: Any) -> bool:
    """Whether this pyslurm's JobSubmitDescription has ``prefer`` (sunk's patch; a stock one refuses the name)."""
    return hasattr(ps.JobSubmitDescription(), "prefer")


def _takes_topo(ps: Any) -> bool:
    """Whether this pyslurm turns ``resource_sharing="topo"`` into JOB_SHARED_TOPO (sunk's patch); a stock one
    raises ValueError, only when the job is submitted, so its converter is asked here."""
    util = getattr(getattr(getattr(ps, "core", None), "job", None), "util", None)
    convert = getattr(util, "shared_type_str_to_int", None)
    if convert is None:
        return False
    try:
        convert("topo")
    except ValueError:
        return False
    return True


def submit_limits_of(ps: Any) -> SubmitLimits:
    """What this pyslurm module cannot put into a submission that Slurm's C API can, each with why: asked of the
    module itself, never of its version (module notes)."""
    version = getattr(ps, "__version__", None)
    name = f"pyslurm {version}" if version else "this pyslurm"
    prefer = "" if _takes_prefer(ps) else _NOT_IN_PYSLURM.format(pyslurm=name, field="job_desc_msg_t.prefer")
    topo = "" if _takes_topo(ps) else _NOT_IN_PYSLURM.format(pyslurm=name, field="JOB_SHARED_TOPO")
    return SubmitLimits(prefer=prefer, shared=(("topo", topo),) if topo else ())


def submit_kwargs(r: JobRequest, limits: SubmitLimits) -> dict[str, Any]:
    """A JobRequest as ``pyslurm.JobSubmitDescription`` keyword arguments; SlurmError for what ``limits`` (this
    pyslurm's) says it cannot pass, never a submission without it."""
    environment = dict(item.split("=", 1) for item in r.environment if "=" in item)
    kw: dict[str, Any] = {"name": r.name, "script": r.script, "working_directory": r.working_directory,
                          "environment": environment, "cpus_per_task": r.cpus_per_task}
    optional = {"partitions": r.partition, "account": r.account, "qos": r.qos, "reservations": r.reservation,
                "priority": r.priority, "user_id": r.user_id, "group_id": r.group_id,
                "memory_per_node": r.memory_per_node, "constraints": r.constraints, "time_limit": r.time_limit,
                "comment": r.comment, "extra": r.extra, "admin_comment": r.admin_comment,
                "is_requeueable": r.requeue,
                "excluded_nodes": list(r.excluded_nodes) or None, "required_nodes": list(r.required_nodes) or None}
    kw.update({k: v for k, v in optional.items() if v is not None})
    if r.node_count != 1:  # a gang's job: exactly N nodes, one task on each (as v0042.job_desc)
        kw.update({"nodes": str(r.node_count), "ntasks": r.node_count})
    if r.gres_per_node:
        kw["gres_per_node"] = ",".join(r.gres_per_node)
    if (shared := check_shared(r.shared)) is not None:
        if why := limits.shared_refusal(shared):
            raise SlurmError(f"submit job {r.name}: {why}")
        kw["resource_sharing"] = _SHARE_TO_PYSLURM[shared]
    if r.prefer:
        if limits.prefer:
            raise SlurmError(f"submit job {r.name}: {limits.prefer}")
        kw["prefer"] = r.prefer
    return kw


def _refuse_empty(what: str, changes: Mapping[str, Any]) -> None:
    """pyslurm 25.11 sends an empty string as no string at all, which Slurm reads as "no change": a write
    clearing a field would silently do nothing. sunk never clears one (the Syncer's Extra always holds
    its keys); anything that tries is told so."""
    if empty := sorted(k for k, v in changes.items() if v == ""):
        raise SlurmError(f"{what}: pyslurm 25.11 cannot write an empty {', '.join(empty)} (it sends no change); "
                         "use the REST backend to clear it")


def take_ids_as_numbers(submission: Any) -> None:
    """pyslurm resolves a job's uid and gid through the client's own user database (``getpwuid``), and a
    daemon's container knows none of the tenants' users: a placeholder for uid 1000 failed with KeyError
    before Slurm saw it. slurmctld checks both ids against its own database; pyslurm gets the numbers as
    they are (a name still resolves as pyslurm would)."""
    for name in ("user_to_uid", "group_to_gid"):
        resolve = getattr(submission, name, None)
        if resolve is None or getattr(resolve, "sunk_numeric", False):
            continue

        def to_id(value: Any, *args: Any, _resolve: Callable[..., Any] = resolve, **kwargs: Any) -> Any:
            if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
                return int(value)
            return _resolve(value, *args, **kwargs)

        to_id.sunk_numeric = True  # type: ignore[attr-defined]
        setattr(submission, name, to_id)


class PyslurmClient:
    """Thread-safe as far as libslurm's RPC calls are; every call is one RPC (or two, see load())."""

    def __init__(self, *, accounting: RpcAccounting | None = None, module: ModuleType | None = None,
                 clock: Callable[[], float] = time.time):
        if os.environ.get("SLURM_JWT") == "":  # libslurm would present an empty token and be refused (1007)
            del os.environ["SLURM_JWT"]
        try:
            self.ps: Any = module or importlib.import_module("pyslurm")
            if (submission := sys.modules.get("pyslurm.core.job.submission")) is not None:  # pyslurm's import made it
                take_ids_as_numbers(submission)
        except ImportError as exc:
            raise SlurmError("the pyslurm backend needs pyslurm 25.11 (pip install 'sunk[pyslurm]'), "
                             f"built against Slurm 25.11: {exc}") from exc
        # What this pyslurm cannot submit (module notes); the scheduler refuses such a Pod, saying why.
        self.submit_limits: SubmitLimits = submit_limits_of(self.ps)
        self.accounting = accounting or RpcAccounting()
        self._clock = clock
        self._states: JobStateRpc | None = None
        if module is None:
            try:
                self._states = JobStateRpc.open()
            except (OSError, AttributeError) as exc:  # no libslurmfull of 25.11's API: full lists (module notes)
                log.warning("pyslurm: no slurm_load_job_state (%s): job states come from full job lists", exc)

    @property
    def cheap_job_states(self) -> bool:
        """Whether ``list_job_states`` is Slurm's state RPC rather than a full list (module notes)."""
        return self._states is not None

    read_concurrency = 1  # pyslurm's Job.load holds the GIL through slurm_load_job: reads at once would queue

    # -- SlurmClient ---------------------------------------------------------------------------
    def ping(self) -> bool:
        try:
            with self._rpc(Rpc.PING, "ping"):
                return bool(self.ps.slurmctld.ping_primary().is_responding)
        except SlurmError as exc:
            log.debug("ping: %s", exc)
            return False

    def release(self) -> str:
        """slurmctld's release, from its configuration (``scontrol show config``'s SLURM_VERSION)."""
        with self._rpc(Rpc.BUILD_INFO, "load slurmctld's configuration"):
            release = self.ps.slurmctld.Config.load().version
        if not release:
            raise SlurmError("slurmctld's configuration names no Slurm release")
        return str(release)

    def list_nodes(self, *, updated_since: int | None = None) -> Snapshot[Node]:
        with self._rpc(Rpc.NODE_INFO, "list nodes"):
            nodes = self.ps.Nodes.load()
        return Snapshot(items=tuple(node_from_pyslurm(n) for n in nodes.values()), last_update=int(self._clock()))

    def get_node(self, name: str) -> Node:
        """From ``Nodes.load()``: ``Node.load()`` is slurm_load_node_single, whose allocation is stale in 24.11."""
        for node in self.list_nodes().items or ():
            if node.name == name:
                return node
        raise NotFound(f"no Slurm node {name!r}")

    def read_node(self, name: str) -> Node:
        """``Node.load(name)`` (slurm_load_node_single): see ``SlurmClient.read_node`` for what is current.
        A name slurmctld does not know raises RPCError "Node 'NAME' does not exist": NotFound (``_error``)."""
        with self._rpc(Rpc.NODE_INFO_SINGLE, f"read node {name}"):
            node = node_from_pyslurm(self.ps.Node.load(name))
        if node.name != name:  # (slurmctld also finds a node by its NodeHostname or NodeAddr: another node's record)
            raise NotFound(f"read node {name}: slurmctld answered with node {node.name}")
        return node

    def update_node(self, name: str, update: NodeUpdate) -> None:
        changes = {k: getattr(update, k) for k in ("state", "reason", "extra", "comment")
                   if getattr(update, k) is not None}
        _refuse_empty(f"update node {name}", changes)
        if changes.get("state", "").upper() == "DRAIN" and not update.reason:
            raise ValueError(f"draining {name} needs a reason")
        if not changes:
            return
        with self._rpc(Rpc.UPDATE_NODE, f"update node {name}"):
            self.ps.Node(name).modify(self.ps.Node(**changes))

    def delete_node(self, name: str) -> None:
        with self._rpc(Rpc.DELETE_NODE, f"delete node {name}"):
            self.ps.Node(name).delete()

    def reconfigure(self) -> None:
        """``scontrol reconfigure`` (``slurm_reconfigure``): slurmctld rereads slurm.conf and the topology file
        (``Reconfigurable``: the operator's topology writer needs it)."""
        with self._rpc(Rpc.RECONFIGURE, "reconfigure slurmctld"):
            self.ps.slurmctld.reconfigure()

    def list_jobs(self, *, updated_since: int | None = None) -> Snapshot[Job]:
        with self._rpc(Rpc.JOB_INFO, "list jobs"):
            jobs = self.ps.Jobs.load()
        return Snapshot(items=self._exact_states([job_from_pyslurm(j) for j in jobs.values()], everything=True),
                        last_update=int(self._clock()))

    def get_job(self, job_id: int) -> Job:
        return self._exact_states([self._read_job(job_id)])[0]

    def get_job_allocations(self, job_id: int) -> Job:
        return self.get_job(job_id)  # (libslurm's job record always carries the per-node layout)

    def _read_job(self, job_id: int) -> Job:
        with self._rpc(Rpc.JOB_INFO_SINGLE, f"get job {job_id}"):
            return job_from_pyslurm(self.ps.Job.load(int(job_id)))

    def list_job_states(self, job_ids: Iterable[int] | None = None) -> tuple[JobState, ...]:
        """Slurm's state RPC (``jobstate_rpc``); without it, a full ``Jobs.load()`` reduced to states."""
        if self._states is not None:
            return self._load_states(job_ids)
        wanted = None if job_ids is None else {int(i) for i in job_ids}
        jobs = self.list_jobs().items or ()
        return tuple(job_state_of(j) for j in jobs
                     if wanted is None or j.id in wanted or (j.array_job_id in wanted))

    def _load_states(self, job_ids: Iterable[int] | None) -> tuple[JobState, ...]:
        assert self._states is not None
        with self._rpc(Rpc.JOB_STATE, "list job states"):
            rc, code, states = self._states.load(job_ids)
            if rc:
                raise self.ps.RPCError(errno=code)
        return states

    def _exact_states(self, jobs: list[Job], *, everything: bool = False) -> tuple[Job, ...]:
        """The records with the state and flags of Slurm's state RPC, read just after them (module notes), where
        the two agree: the same base state, or pyslurm's one word is a flag the RPC names beside the true base.
        A job that moved between the two reads keeps its record whole (a PENDING record never gains RUNNING
        without its nodes); the state list the cache compares it with then shows it changed, and it is read
        again."""
        if self._states is None or not jobs:
            return tuple(jobs)
        ids = None if everything else {j.array_job_id or j.id for j in jobs}
        exact = {s.key: s for s in self._load_states(ids)}
        return tuple(
            attrs.evolve(job, state=state.state, state_flags=state.state_flags)
            if (state := exact.get(job_state_of(job).key)) is not None and refines(job, state) else job
            for job in jobs)

    def read_jobs(self, job_ids: Iterable[int]) -> tuple[Job, ...]:
        found: list[Job] = []
        everything: tuple[Job, ...] | None = None
        single: list[Job] = []
        for job_id in dict.fromkeys(int(i) for i in job_ids):
            try:
                job = self._read_job(job_id)
            except NotFound:
                continue
            if job.array_job_id is None or job.id != job.array_job_id:  # (a task by its own id: that task, as REST)
                single.append(job)
                continue
            if everything is None:  # Job.load() kept one record of the array: read them all (exact already)
                everything = self.list_jobs().items or ()
            found.extend(j for j in everything if j.array_job_id == job.array_job_id)
        return (*self._exact_states(single), *found)

    def submit_job(self, request: JobRequest) -> int:
        kwargs = submit_kwargs(request, self.submit_limits)
        with self._rpc(Rpc.SUBMIT_BATCH_JOB, f"submit job {request.name}", repeatable=False):
            return int(self.ps.JobSubmitDescription(**kwargs).submit())

    def update_job(self, job_id: int, *, extra: str | None = None, comment: str | None = None) -> None:
        changes = {k: v for k, v in (("extra", extra), ("comment", comment)) if v is not None}
        _refuse_empty(f"update job {job_id}", changes)
        if not changes:
            return
        with self._rpc(Rpc.UPDATE_JOB, f"update job {job_id}"):
            self.ps.Job(int(job_id)).modify(self.ps.JobSubmitDescription(**changes))

    def cancel_job(self, job_id: int, *, signal: str | None = None, array_task_id: int | None = None) -> None:
        if array_task_id is not None:  # (pyslurm's cancel takes a number: by the array's id, the whole array)
            raise SlurmError(f"cannot cancel job {job_id}_{array_task_id} alone through pyslurm (its cancel takes a "
                             f"job id only, which names the whole array): scancel {job_id}_{array_task_id}")
        with self._rpc(Rpc.KILL_JOB, f"cancel job {job_id}"):
            job = self.ps.Job(int(job_id))
            if signal is None:
                job.cancel()
            else:
                job.send_signal(signal_name(signal), steps="all")

    def list_partitions(self) -> tuple[Partition, ...]:
        with self._rpc(Rpc.PARTITION_INFO, "list partitions"):
            partitions = self.ps.Partitions.load()
        return tuple(partition_from_pyslurm(p) for p in partitions.values())

    def diag(self) -> SchedulerStats:
        with self._rpc(Rpc.STATS_INFO, "diag"):
            return stats_from_pyslurm(self.ps.slurmctld.Statistics.load())

    def rpc_stats(self) -> Mapping[str, RpcStat]:
        return self.accounting.snapshot()

    def close(self) -> None:
        pass

    # -- errors ----------------------------------------------------------------------------------
    @contextmanager
    def _rpc(self, message_type: str, what: str, *, repeatable: bool = True) -> Iterator[None]:
        """Account the call and turn pyslurm's exceptions into ours.

        A call that is not ``repeatable`` (a submission) whose answer was lost after it reached
        slurmctld raises OutcomeUnknown: it may have taken effect. A write first asks this
        thread's Lease fence (``sunk.base.fence``).
        """
        if message_type in WRITES:
            fence.check(what)
        with self.accounting.measure(message_type):
            try:
                yield
            except SlurmError:
                raise
            except self.ps.RPCError as exc:
                error = self._error(what, exc)
                if not repeatable and isinstance(error, SlurmUnavailable) and error.code in UNCERTAIN_CODES:
                    raise OutcomeUnknown(f"{error.message} (it may or may not have taken effect)",
                                         code=error.code) from exc
                raise error from exc
            except self.ps.PyslurmError as exc:
                raise SlurmError(f"{what}: {exc}") from exc
            except ValueError as exc:  # pyslurm validates arguments (states, signals) before the RPC
                raise SlurmError(f"{what}: {exc}") from exc

    @staticmethod
    def _error(what: str, exc: Any) -> SlurmError:
        code = getattr(exc, "errno", None)
        text = getattr(exc, "msg", None) or str(exc)
        message = f"{what}: {text}"
        if code in NOT_FOUND_CODES or "does not exist" in text:
            return NotFound(message, code=code)
        if code in AUTH_CODES:
            return AuthenticationFailed(message, code=code, token_source="munge")
        if code in UNAVAILABLE_CODES:
            return SlurmUnavailable(message, code=code)
        return SlurmError(message, code=code if code and code > 0 else None)
