"""slurmrestd's OpenAPI v0.0.42 wire format, to and from the models. Pure: no I/O.

v0.0.42 is the newest version that Slurm 24.11, 25.05, 25.11 and 26.05 all serve. Shapes
were checked against the OpenAPI document that 24.11.5's slurmrestd serves
(``GET /openapi/v3``) and against its live answers:
- optional numbers come as ``{"set": bool, "infinite": bool, "number": N}``; unset or
  infinite means "no value" here (None);
- ``job_state`` is a list: one base state plus flags (COMPLETING, REQUEUED, ...);
- a node's ``state`` is a list of words (base state and flags);
- times are epoch seconds, ``time_limit`` is minutes, memory is MB;
- a job's per-node allocation is ``job_resources.nodes.allocation``; its GPUs per node are
  in ``gres_detail`` (one entry per allocated node, same order);
- ``GET /jobs/state`` (24.11 and later) answers ``{"jobs": [{"job_id": "123", "state":
  ["RUNNING"]}, ...]}`` plus meta/errors/warnings, and nothing else (no ``last_update``). The
  id is text (``"123"``, ``"124+1"``, ``"107_7"``, a record of an array by its own id:
  models.JobState) and ``state`` the same flag list as a job's ``job_state``. Its one query
  parameter is ``job_id``, a CSV list of ids to filter by (documented in the OpenAPI since
  24.11.4); it takes no ``update_time``.
  The v0.0.42 OpenAPI document names ``v0.0.42_openapi_job_info_resp`` as its answer's
  schema, but the handler dumps ``OPENAPI_JOB_STATE_RESP``, the shape above. Read from a
  v0.0.42 OpenAPI document and Slurm's source (slurmrestd's ``op_handler_job_states``,
  data_parser v0.0.42's ``JOB_STATE_RESP_JOB``), not yet from a live 24.11 answer.
- ``GET /job/{id}`` takes one id, no list; for an array's id (or ``A_T``) it answers every
  record of the array (slurm_load_job). ``/jobs`` has no id filter.
- ``sdiag`` durations are microseconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

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
    job_state_key,
)

VERSION = "v0.0.42"
SHARED_VALUES = frozenset({"none", "oversubscribe", "user", "mcs", "topo"})
JOB_BASE_STATES = frozenset({
    "PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
    "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY",
})

Obj = Mapping[str, Any]


def number(value: Any) -> Optional[Any]:
    """A v0.0.42 ``*_no_val_struct`` (or a plain number) -> the number, or None if unset/infinite."""
    if isinstance(value, Mapping):
        if not value.get("set", False) or value.get("infinite", False):
            return None
        return value.get("number")
    return value


def integer(value: Any, default: int = 0) -> int:
    """A number or no_val struct as an int; unset and infinite give ``default``."""
    n = number(value)
    return default if n is None else int(n)


def _time(value: Any) -> Optional[int]:
    """Epoch seconds; Slurm's 0 means "not yet" / "never"."""
    n = number(value)
    return int(n) if n else None


def _words(value: Any) -> tuple[str, ...]:
    """A v0.0.42 csv_string: a list, though older servers send "a,b"."""
    if not value:
        return ()
    if isinstance(value, str):
        return tuple(w for w in value.split(",") if w)
    return tuple(str(w) for w in value)


def _reason(value: Optional[str]) -> str:
    """Slurm's "None" reason means there is none."""
    return "" if not value or value == "None" else value


def parse_node(d: Obj) -> Node:
    return Node(
        name=d["name"],
        state=_words(d.get("state")),
        reason=d.get("reason") or "",
        reason_time=_time(d.get("reason_changed_at")),
        reason_user=d.get("reason_set_by_user") or "",
        extra=d.get("extra") or "",
        comment=d.get("comment") or "",
        cpus=integer(d.get("cpus")),
        alloc_cpus=integer(d.get("alloc_cpus")),
        real_memory=integer(d.get("real_memory")),
        alloc_memory=integer(d.get("alloc_memory")),
        gres=d.get("gres") or "",
        gres_used=d.get("gres_used") or "",
        partitions=_words(d.get("partitions")),
        features=_words(d.get("features")),
    )


def split_job_state(words: Any) -> tuple[str, frozenset[str]]:
    """``["PENDING", "REQUEUED"]`` -> ("PENDING", {"REQUEUED"})."""
    listed = _words(words)
    known = _SPLIT_STATES.get(listed)
    if known is not None:
        return known
    base = next((w for w in listed if w in JOB_BASE_STATES), listed[0] if listed else "PENDING")
    split = base, frozenset(w for w in listed if w != base)
    if len(_SPLIT_STATES) < 1024:  # a handful of combinations in practice; bounded all the same
        _SPLIT_STATES[listed] = split
    return split


# State lists seen -> their split: a state list of 10,000 jobs repeats a few combinations.
_SPLIT_STATES: dict[tuple[str, ...], tuple[str, frozenset[str]]] = {}


def _allocations(d: Obj) -> tuple[JobAllocation, ...]:
    resources = d.get("job_resources") or {}
    per_node = (resources.get("nodes") or {}).get("allocation") or ()
    gres = d.get("gres_detail") or ()
    out = []
    for i, a in enumerate(per_node):
        index = a.get("index", i)
        out.append(JobAllocation.with_gres_detail(
            a["name"], cpus=integer((a.get("cpus") or {}).get("count")),
            memory=integer((a.get("memory") or {}).get("allocated")),
            detail=gres[index] if index < len(gres) else "",
        ))
    return tuple(out)


def parse_job(d: Obj) -> Job:
    state, flags = split_job_state(d.get("job_state"))
    shared = _words(d.get("shared"))
    return Job(
        id=int(d["job_id"]),
        name=d.get("name") or "",
        state=state,
        state_flags=flags,
        state_reason=_reason(d.get("state_reason")),
        nodes=d.get("nodes") or "",
        batch_host=d.get("batch_host") or "",
        allocations=_allocations(d),
        extra=d.get("extra") or "",
        comment=d.get("comment") or "",
        admin_comment=d.get("admin_comment") or "",
        user_name=d.get("user_name") or "",
        user_id=number(d.get("user_id")),
        group_id=number(d.get("group_id")),
        account=d.get("account") or "",
        partition=d.get("partition") or "",
        qos=d.get("qos") or "",
        priority=integer(d.get("priority")),
        submit_time=_time(d.get("submit_time")),
        start_time=_time(d.get("start_time")),
        end_time=_time(d.get("end_time")),
        time_limit=number(d.get("time_limit")),
        tres_req=d.get("tres_req_str") or "",
        tres_alloc=d.get("tres_alloc_str") or "",
        shared=shared[0] if shared else "",
        working_directory=d.get("current_working_directory") or "",
        array_job_id=integer(d.get("array_job_id")) or None,  # 0: not an array
        array_task_id=number(d.get("array_task_id")),
    )


def parse_job_state(d: Obj) -> JobState:
    """One entry of ``GET /jobs/state``: ``{"job_id": "123", "state": ["RUNNING"]}`` (the id is text: see JobState)."""
    key = str(d["job_id"])
    job_id, array_job_id, array_task_id = job_state_key(key)
    state, flags = split_job_state(d.get("state"))
    return JobState(key=key, state=state, state_flags=flags, job_id=job_id, array_job_id=array_job_id,
                    array_task_id=array_task_id)


def parse_partition(d: Obj) -> Partition:
    nodes = d.get("nodes") or {}
    states = _words((d.get("partition") or {}).get("state"))
    return Partition(
        name=d["name"],
        nodes=hostlist.expand(nodes.get("configured") or ""),
        state=states[0] if states else "UNKNOWN",
        priority_tier=integer((d.get("priority") or {}).get("tier"), 1),
        total_cpus=integer((d.get("cpus") or {}).get("total")),
        total_nodes=integer(nodes.get("total")),
    )


def _seconds(microseconds: Any) -> float:
    return integer(microseconds) / 1e6


def parse_rpc(r: Obj) -> RpcStat:
    """One row of ``rpcs_by_message_type``. The mean is ``total_time / count`` (both plain integers, µs): exact,
    where ``average_time`` is slurmctld's rounded one and may be unset (then it is the fallback)."""
    count = integer(r.get("count"))
    total = number(r.get("total_time"))
    mean = integer(total) / count / 1e6 if total is not None and count > 0 else _seconds(r.get("average_time"))
    name = r.get("message_type")
    return RpcStat(message_type=name if isinstance(name, str) and name else f"type_{integer(r.get('type_id'))}",
                   count=count, mean_seconds=mean)


def parse_stats(d: Obj) -> SchedulerStats:
    rpcs = tuple(parse_rpc(r) for r in d.get("rpcs_by_message_type") or () if isinstance(r, Mapping))
    return SchedulerStats(
        server_thread_count=integer(d.get("server_thread_count")),
        agent_queue_size=integer(d.get("agent_queue_size")),
        dbd_agent_queue_size=integer(d.get("dbd_agent_queue_size")),
        schedule_queue_length=integer(d.get("schedule_queue_length")),
        jobs_submitted=integer(d.get("jobs_submitted")),
        jobs_started=integer(d.get("jobs_started")),
        jobs_completed=integer(d.get("jobs_completed")),
        jobs_canceled=integer(d.get("jobs_canceled")),
        jobs_failed=integer(d.get("jobs_failed")),
        jobs_pending=integer(d.get("jobs_pending")),
        jobs_running=integer(d.get("jobs_running")),
        schedule_cycle_last=_seconds(d.get("schedule_cycle_last")),
        schedule_cycle_mean=_seconds(d.get("schedule_cycle_mean")),
        schedule_cycle_mean_depth=float(integer(d.get("schedule_cycle_mean_depth"))),
        schedule_cycle_per_minute=float(integer(d.get("schedule_cycle_per_minute"))),
        bf_cycle_last=_seconds(d.get("bf_cycle_last")),
        bf_cycle_mean=_seconds(d.get("bf_cycle_mean")),
        bf_depth_mean=float(integer(d.get("bf_depth_mean"))),
        bf_backfilled_jobs=integer(d.get("bf_backfilled_jobs")),
        bf_last_backfilled_jobs=integer(d.get("bf_last_backfilled_jobs")),
        bf_backfilled_het_jobs=integer(d.get("bf_backfilled_het_jobs")),
        rpcs=rpcs,
    )


def _set(n: int) -> dict[str, Any]:
    return {"set": True, "infinite": False, "number": n}


def check_shared(value: Optional[str]) -> Optional[str]:
    if value is not None and value not in SHARED_VALUES:
        raise ValueError(f"shared must be one of {sorted(SHARED_VALUES)}, not {value!r}")
    return value


def job_desc(r: JobRequest) -> dict[str, Any]:
    """The ``job`` object of ``POST /job/submit``. Unset fields are left out, so Slurm's defaults apply."""
    desc: dict[str, Any] = {
        "name": r.name,
        "script": r.script,
        "current_working_directory": r.working_directory,
        "environment": list(r.environment),
        "cpus_per_task": r.cpus_per_task,
    }
    optional_text = {"partition": r.partition, "account": r.account, "qos": r.qos, "reservation": r.reservation,
                     "constraints": r.constraints, "prefer": r.prefer, "comment": r.comment, "extra": r.extra,
                     "admin_comment": r.admin_comment, "tres_per_node": r.tres_per_node}
    desc.update({k: v for k, v in optional_text.items() if v is not None})
    if r.user_id is not None:
        desc["user_id"] = str(r.user_id)
    if r.group_id is not None:
        desc["group_id"] = str(r.group_id)
    if r.node_count != 1:
        # Exactly N nodes and N tasks: Slurm gives each node at least one task, so one each, and
        # cpus_per_task CPUs on every node. (A job of one node leaves all three to Slurm's defaults.)
        desc.update({"minimum_nodes": r.node_count, "maximum_nodes": r.node_count, "tasks": r.node_count})
    if r.priority is not None:
        desc["priority"] = _set(r.priority)
    if r.memory_per_node is not None:
        desc["memory_per_node"] = _set(r.memory_per_node)
    if r.time_limit is not None:
        desc["time_limit"] = _set(r.time_limit)
    if r.excluded_nodes:
        desc["excluded_nodes"] = list(r.excluded_nodes)
    if r.required_nodes:
        desc["required_nodes"] = list(r.required_nodes)
    if check_shared(r.shared) is not None:
        desc["shared"] = [r.shared]
    if r.requeue is not None:
        desc["requeue"] = r.requeue
    return desc


def node_states(state: str) -> list[str]:
    """``"drain"`` or ``"DOWN+DRAIN"`` -> the list v0.0.42 wants."""
    return [w.strip().upper() for w in state.replace("+", ",").split(",") if w.strip()]


def node_update_body(u: NodeUpdate) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if u.state is not None:
        body["state"] = node_states(u.state)
    for key in ("reason", "extra", "comment"):
        value = getattr(u, key)
        if value is not None:
            body[key] = value
    return body


def job_update_body(extra: Optional[str], comment: Optional[str]) -> dict[str, Any]:
    body = {"extra": extra, "comment": comment}
    return {k: v for k, v in body.items() if v is not None}
