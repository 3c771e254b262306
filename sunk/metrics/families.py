"""The Syncer's Slurm metrics table, rendered from a snapshot: pure, no I/O, no clock.

Why from a snapshot: a scrape must never cost slurmctld a list call (at 10,000 jobs one
job list is tens of MB and seconds of slurmctld time). The Slurm cache lists once per
interval for every reader, ``diag`` is refreshed on its own interval, and a scrape renders
whatever they last saw. Names, labels and units are the spec's (docs/metrics.md).

Counting rules, chosen to agree with Slurm's own tools:
- ``slurm_node_state``'s ``state`` and the ``slurm_nodes_*`` counts use the one word sinfo
  shows (``sunk.translate.slurmstates``), so IDLE+DRAIN counts as drain, not idle, and each
  node is counted once; ``not_responding`` is a flag and counts on its own.
- ``slurm_job_state``'s ``state`` and ``slurm_queue_*`` use the word squeue shows, so a job
  whose epilog still runs is ``completing``, not ``completed``; ``pending_dependency`` is
  the subset of pending jobs held by a dependency.
- ``*_idle`` CPUs and GPUs are those a job could get now: a drained, down or failed node
  has none idle (sinfo's ``%C`` calls them "other"), so idle + alloc may be below total.
- Per-job series (``cpus``/``gpus_allocated``, ``uptime``) exist only for running jobs,
  one per allocated node.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Optional

from attrs import frozen

from sunk.model.slurm import Job, JobAllocation, Node, RpcStat, SchedulerStats
from sunk.translate.drains import is_sunks
from sunk.translate.slurmstates import NODE_COUNT_BUCKETS, job_state_name, node_count_bucket, node_state_name

from .exposition import Family, label_block

JOB_LABELS = ("partition", "account", "user", "id", "name", "state")
JOB_NODE_LABELS = ("partition", "account", "user", "id", "node")
JOBS_LABELS = ("partition", "account", "user")

# slurm_queue_<suffix>: the squeue word it counts.
QUEUE_STATES = {
    "canceled": "CANCELLED", "completed": "COMPLETED", "completing": "COMPLETING", "configuring": "CONFIGURING",
    "failed": "FAILED", "node_fail": "NODE_FAIL", "pending": "PENDING", "preempted": "PREEMPTED",
    "running": "RUNNING", "suspended": "SUSPENDED", "timeout": "TIMEOUT",
}
_QUEUE_HELP = {
    "canceled": "The number of canceled jobs in the Slurm cluster (only those still tracked by slurmctld).",
    "completed": "The number of completed jobs in the Slurm cluster (only those still tracked by slurmctld).",
    "completing": "The number of completing jobs in the Slurm cluster.",
    "configuring": "The number of configuring jobs in the Slurm cluster.",
    "failed": "The number of failed jobs in the Slurm cluster (only those still tracked by slurmctld).",
    "node_fail": "The number of jobs stopped due to node failure (only those still tracked by slurmctld).",
    "pending": "The number of pending jobs in the Slurm scheduler queue.",
    "preempted": "The number of preempted jobs in the Slurm cluster (only those still tracked by slurmctld).",
    "running": "The number of running jobs in the Slurm cluster.",
    "suspended": "The number of suspended jobs in the Slurm cluster.",
    "timeout": "The number of timed out jobs in the Slurm cluster (only those still tracked by slurmctld).",
}
_UNAVAILABLE = frozenset({"drained", "draining", "down", "fail", "failing", "inval", "maint", "reboot", "future",
                          "unknown", "error"})
_TRES_CPU = re.compile(r"(?:^|,)cpu=(\d+)")


@frozen
class SlurmSnapshot:
    """What one scrape renders. ``stats`` is None until the first ``diag`` has worked."""

    nodes: Mapping[str, Node]
    jobs: Mapping[int, Job]
    stats: Optional[SchedulerStats]
    now: float  # epoch seconds, for job uptime


def gauge(name: str, documentation: str, labels: tuple[str, ...] = ()) -> Family:
    return Family(name, documentation, labels)


def single(name: str, documentation: str, value: float) -> Family:
    family = gauge(name, documentation)
    family.add((), value)
    return family


def slurm_families(snapshot: SlurmSnapshot) -> Iterator[Family]:
    """Every family of the table, in the table's order (the scheduler's only once diag has answered)."""
    yield from job_families(snapshot.jobs.values(), snapshot.now)
    yield from node_families(snapshot.nodes.values())
    yield from queue_families(snapshot.jobs.values())
    if snapshot.stats is not None:
        yield from scheduler_families(snapshot.stats)


RPC_LABELS = ("message_type",)


def rpc_families(rpcs: Iterable[RpcStat]) -> Iterator[Family]:
    """``slurm_controller_rpc_*``: slurmctld's own RPC statistics (sdiag's "Remote Procedure Call statistics by
    message type"), every client's calls, not this process's. A message type listed twice (not seen from
    slurmctld, but one duplicate series would fail the whole scrape) is summed, its mean weighted."""
    totals: dict[str, tuple[int, float]] = {}
    for rpc in rpcs:
        count, seconds = totals.get(rpc.message_type, (0, 0.0))
        totals[rpc.message_type] = (count + rpc.count, seconds + rpc.count * rpc.mean_seconds)
    count_family = gauge("slurm_controller_rpc_count", "RPC count per message type.", RPC_LABELS)
    mean_family = gauge("slurm_controller_rpc_mean_duration_seconds", "RPC mean duration per message type.",
                        RPC_LABELS)
    for message_type, (count, seconds) in sorted(totals.items()):
        count_family.add((message_type,), count)
        mean_family.add((message_type,), seconds / count if count else 0.0)
    yield count_family
    yield mean_family


SUNK_DRAIN_AGE = "sunk_slurm_drain_age_seconds"


def sunk_drain_age(nodes: Iterable[Node], now: float) -> Family:
    """``sunk_slurm_drain_age_seconds{node}``: how long each node has been out of service (drained or down) for a
    reason sunk wrote (``k8s:``), from Slurm's reason time. Why: such a drain is lifted by sunk once its cause is
    gone; one that stays for long means a cause sunk cannot clear (or a bug), which an operator must look at. A
    node without a reason time (never seen from slurmctld) has no series: no age is better than a made-up one."""
    family = gauge(SUNK_DRAIN_AGE, "Seconds since Slurm recorded the reason of a node that sunk drained or downed "
                                   "(reason starting k8s:), by node.", ("node",))
    for node in sorted(nodes, key=lambda n: n.name):
        if (node.drained or node.down) and is_sunks(node.reason) and node.reason_time:
            family.add((node.name,), max(0, int(now) - node.reason_time))
    return family


# -- jobs -------------------------------------------------------------------------------------------------
def job_user(job: Job) -> str:
    if job.user_name:
        return job.user_name
    return str(job.user_id) if job.user_id is not None else ""


def per_node(job: Job) -> tuple[JobAllocation, ...]:
    """What the job holds on each node: Slurm's own allocation when listed, else its TRES split evenly."""
    if job.allocations:
        return job.allocations
    nodes = job.node_list
    if not nodes:
        return ()
    found = _TRES_CPU.search(job.tres_alloc)
    cpus, gpus = (int(found.group(1)) if found else 0), job.gpus
    return tuple(JobAllocation(node, cpus=cpus // len(nodes), gpus=gpus // len(nodes)) for node in nodes)


JOB_STATE_HELP = "Current state of the job represented in the state label."
JOB_CPUS_HELP = "The number of CPUs allocated to a job by Slurm node."
JOB_GPUS_HELP = "The number of GPUs allocated to a job by Slurm node."
JOB_UPTIME_HELP = "The number of seconds a job has been running."
# slurm_jobs_<base state, lower case>: jobs of that base state by partition, account and user.
JOBS_COUNTS = (("PENDING", "The number of pending jobs in the Slurm cluster."),
               ("RUNNING", "The number of running jobs in the Slurm cluster."),
               ("SUSPENDED", "The number of suspended jobs in the Slurm cluster."))


def job_families(jobs: Iterable[Job], now: float) -> Iterator[Family]:
    state = gauge("slurm_job_state", JOB_STATE_HELP, JOB_LABELS)
    cpus = gauge("slurm_job_cpus_allocated", JOB_CPUS_HELP, JOB_NODE_LABELS)
    gpus = gauge("slurm_job_gpus_allocated", JOB_GPUS_HELP, JOB_NODE_LABELS)
    uptime = gauge("slurm_job_uptime_seconds", JOB_UPTIME_HELP, JOB_NODE_LABELS)
    counts: dict[str, Counter[tuple[str, str, str]]] = {s: Counter() for s, _ in JOBS_COUNTS}
    for job in jobs:
        user, job_id = job_user(job), str(job.id)
        state.add((job.partition, job.account, user, job_id, job.name, job_state_name(job)), 1)
        if job.state in counts:
            counts[job.state][(job.partition, job.account, user)] += 1
        if job.state != "RUNNING":
            continue
        running_for = max(0, int(now) - job.start_time) if job.start_time else 0  # whole seconds, as Slurm keeps time
        for allocation in per_node(job):
            block = label_block(JOB_NODE_LABELS, (job.partition, job.account, user, job_id, allocation.node))
            cpus.add_block(block, allocation.cpus)
            gpus.add_block(block, allocation.gpus)
            uptime.add_block(block, running_for)
    yield from (state, cpus, gpus, uptime)
    yield from jobs_count_families(counts)


def jobs_count_families(counts: Mapping[str, Mapping[tuple[str, str, str], int]]) -> Iterator[Family]:
    """``slurm_jobs_*`` from the jobs counted per base state and (partition, account, user)."""
    for base, help_text in JOBS_COUNTS:
        family = gauge(f"slurm_jobs_{base.lower()}", help_text, JOBS_LABELS)
        for owner, number in sorted(counts[base].items()):
            family.add(owner, number)
        yield family


# -- nodes and partitions ------------------------------------------------------------------------------------
@frozen
class _Usage:
    cpu_alloc: int
    cpu_idle: int
    cpu_total: int
    mem_alloc: int
    mem_total: int
    gpu_alloc: int
    gpu_idle: int
    gpu_total: int


def node_usage(node: Node) -> _Usage:
    """One node's figures; idle only where a job could start now (module docstring)."""
    available = node_state_name(node.state) not in _UNAVAILABLE and not node.not_responding
    gpu_total, gpu_alloc = node.gpus_total, node.gpus_alloc
    return _Usage(
        cpu_alloc=node.alloc_cpus, cpu_idle=max(0, node.cpus - node.alloc_cpus) if available else 0,
        cpu_total=node.cpus, mem_alloc=node.alloc_memory, mem_total=node.real_memory,
        gpu_alloc=gpu_alloc, gpu_idle=max(0, gpu_total - gpu_alloc) if available else 0, gpu_total=gpu_total,
    )


_NODE_FIGURES = (
    ("cpu_alloc", "The number of CPUs allocated"), ("cpu_idle", "The number of CPUs idle"),
    ("cpu_total", "The total number of CPUs"), ("mem_alloc", "The amount of allocated memory (MB)"),
    ("mem_total", "The total amount of memory (MB)"), ("gpu_alloc", "The number of GPUs allocated"),
    ("gpu_idle", "The number of GPUs idle"), ("gpu_total", "The total number of GPUs"),
)


NODE_STATE_HELP = "Current state of the node represented in the state label."
NODE_STATE_LABELS = ("node", "partition", "state")


def node_families(nodes: Iterable[Node]) -> Iterator[Family]:
    state = gauge("slurm_node_state", NODE_STATE_HELP, NODE_STATE_LABELS)
    per_node_families = {f: gauge(f"slurm_node_{f}", f"{text} per node.", ("node",)) for f, text in _NODE_FIGURES}
    per_partition: dict[str, Counter[str]] = {}
    buckets: Counter[str] = Counter()
    total = not_responding = 0
    for node in sorted(nodes, key=lambda n: n.name):
        name = node_state_name(node.state)
        usage = node_usage(node)
        for partition in node.partitions or ("",):
            state.add((node.name, partition, name), 1)
        block = label_block(("node",), (node.name,))
        for figure, family in per_node_families.items():
            family.add_block(block, getattr(usage, figure))
        for partition in node.partitions:
            sums = per_partition.setdefault(partition, Counter())
            for figure, _ in _NODE_FIGURES:
                sums[figure] += getattr(usage, figure)
        total += 1
        not_responding += node.not_responding
        bucket = node_count_bucket(node.state)
        if bucket is not None:
            buckets[bucket] += 1
    yield state
    yield from per_node_families.values()
    yield from node_count_families(per_partition, buckets, total, not_responding)


def node_count_families(per_partition: Mapping[str, Mapping[str, int]], buckets: Mapping[str, int], total: int,
                        not_responding: int) -> Iterator[Family]:
    """``slurm_partition_*`` from each partition's sums (by figure), then the ``slurm_nodes_*`` counts."""
    for figure, text in _NODE_FIGURES:
        family = gauge(f"slurm_partition_{figure}", f"{text} in a partition.", ("partition",))
        for partition, sums in sorted(per_partition.items()):
            family.add((partition,), sums[figure])
        yield family
    for bucket in NODE_COUNT_BUCKETS:
        yield single(f"slurm_nodes_{bucket}", f"The number of nodes with state {bucket}.", buckets.get(bucket, 0))
    yield single("slurm_nodes_total", "The total number of nodes.", total)
    yield single("slurm_nodes_not_responding", "The number of nodes with state not_responding.", not_responding)


# -- the queue and the scheduler -----------------------------------------------------------------------------
def queue_families(jobs: Iterable[Job]) -> Iterator[Family]:
    counts: Counter[str] = Counter()
    dependency = 0
    for job in jobs:
        counts[job_state_name(job)] += 1
        dependency += job.state == "PENDING" and job.state_reason == "Dependency"
    yield from queue_count_families(counts, dependency)


def queue_count_families(counts: Mapping[str, int], dependency: int) -> Iterator[Family]:
    """``slurm_queue_*`` from the jobs counted per squeue word, and the pending ones held by a dependency."""
    for suffix, word in QUEUE_STATES.items():
        yield single(f"slurm_queue_{suffix}", _QUEUE_HELP[suffix], counts.get(word, 0))
    yield single("slurm_queue_pending_dependency",
                 "The number of pending jobs in the Slurm scheduler queue with unsatisfied dependencies.", dependency)


_SCHEDULER = (
    ("slurm_scheduler_backfill_cycle_last_seconds", "bf_cycle_last", "The duration of the last backfill cycle."),
    ("slurm_scheduler_backfill_cycle_mean_seconds", "bf_cycle_mean", "The mean duration of the backfill cycles."),
    ("slurm_scheduler_backfill_depth_mean", "bf_depth_mean", "The mean depth of the scheduler backfill."),
    ("slurm_scheduler_backfilled_jobs_total", "bf_backfilled_jobs",
     "The number of jobs started due to backfilling since last Slurm start."),
    ("slurm_scheduler_backfilled_jobs_cycle_total", "bf_last_backfilled_jobs",
     "The number of jobs started due to backfilling since last time stats were reset."),
    ("slurm_scheduler_backfilled_jobs_heterogeneous_total", "bf_backfilled_het_jobs",
     "The number of heterogeneous jobs started due to backfilling since last Slurm start."),
    ("slurm_scheduler_cycle_last_seconds", "schedule_cycle_last", "The duration of the last scheduler cycle."),
    ("slurm_scheduler_cycle_mean_seconds", "schedule_cycle_mean", "The mean duration of the scheduler cycles."),
    ("slurm_scheduler_cycles_per_minute", "schedule_cycle_per_minute", "The number of scheduler cycles per minute."),
    ("slurm_scheduler_dbd_queue", "dbd_agent_queue_size", "The number of items in the scheduler dbd agent queue."),
    ("slurm_scheduler_jobs_submitted", "jobs_submitted", "The number of submitted jobs reported by the scheduler."),
    ("slurm_scheduler_jobs_started", "jobs_started", "The number of jobs started by the scheduler."),
    ("slurm_scheduler_jobs_completed", "jobs_completed", "The number of jobs completed by the scheduler."),
    ("slurm_scheduler_jobs_failed", "jobs_failed", "The number of jobs failed by the scheduler."),
    ("slurm_scheduler_jobs_cancelled", "jobs_canceled", "The number of jobs canceled by the scheduler."),
    ("slurm_scheduler_jobs_pending", "jobs_pending", "The number of jobs pending in the scheduler queue."),
    ("slurm_scheduler_jobs_running", "jobs_running", "The number of jobs currently running in the scheduler."),
    ("slurm_scheduler_queue", "agent_queue_size", "The number of items in the scheduler (agent) queue."),
    ("slurm_scheduler_threads", "server_thread_count", "The number of scheduler threads."),
    ("slurm_scheduler_cycle_mean_depth", "schedule_cycle_mean_depth", "The mean depth of the scheduler cycles."),
)
SCHEDULER_FAMILIES = tuple(name for name, _, _ in _SCHEDULER)
RPC_FAMILIES = ("slurm_controller_rpc_count", "slurm_controller_rpc_mean_duration_seconds")


def scheduler_families(stats: SchedulerStats) -> Iterator[Family]:
    """Every family from one ``diag`` answer: the scheduler figures, then slurmctld's RPC statistics."""
    for name, field, help_text in _SCHEDULER:
        yield single(name, help_text, getattr(stats, field))
    yield from rpc_families(stats.rpcs)
