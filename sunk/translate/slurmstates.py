"""Slurm node and job states named as Slurm's own tools name them (``sinfo %T``, ``squeue %T``).

Why mirror the tools: a node is a base state plus flags (``IDLE+DRAIN``, ``MIXED+COMPLETING``,
``DOWN+NOT_RESPONDING``), and an operator who reads ``slurm_nodes_drain`` next to ``sinfo``
must see the same numbers. Slurm folds each combination into one word by a fixed order
of precedence (``node_state_string``/``job_state_string`` in slurm_protocol_defs.c); the
same order is kept here, so each node and each job is counted exactly once.

Node precedence: INVALID_REG, MAINTENANCE (unless drained, allocated, mixed or down),
REBOOT (unless drained, allocated or mixed), DRAIN (DRAINING while it still runs jobs,
DRAINED otherwise), FAIL (FAILING while it still runs jobs), DOWN, ALLOCATED, COMPLETING, then IDLE (RESERVED while in a
reservation, PLANNED when the backfill plans it), MIXED, FUTURE, ERROR, UNKNOWN.
NOT_RESPONDING is a flag on top of any of these: sinfo marks it with ``*``, and it is
counted on its own (``slurm_nodes_not_responding``).

Job precedence: COMPLETING, STAGE_OUT, CONFIGURING, RESIZING, REQUEUED, REQUEUE_HOLD,
SPECIAL_EXIT, STOPPED, REVOKED, RESV_DEL_HOLD, SIGNALING, then the base state.
"""

from __future__ import annotations

from collections.abc import Set

from sunk.model.slurm import Job

# sinfo's long state names (lower case, as ``sinfo -o %T`` prints them).
NODE_STATE_NAMES = (
    "inval", "maint", "reboot", "draining", "drained", "failing", "fail", "down", "allocated", "completing",
    "reserved", "planned", "idle", "mixed", "future", "error", "unknown",
)

# Which ``slurm_nodes_<bucket>`` counts a node of each name (``None``: only in the total).
NODE_COUNT_BUCKET: dict[str, str | None] = {
    "inval": "err", "maint": "maint", "reboot": None, "draining": "drain", "drained": "drain",
    "failing": "fail", "fail": "fail", "down": "down", "allocated": "alloc", "completing": "comp",
    "reserved": "resv", "planned": "idle", "idle": "idle", "mixed": "mix", "future": None, "error": "err",
    "unknown": None,
}
NODE_COUNT_BUCKETS = ("alloc", "comp", "down", "drain", "err", "fail", "idle", "maint", "mix", "resv")

_BUSY = frozenset({"ALLOCATED", "MIXED"})
_JOB_FLAG_PRECEDENCE = (
    "COMPLETING", "STAGE_OUT", "CONFIGURING", "RESIZING", "REQUEUED", "REQUEUE_HOLD", "SPECIAL_EXIT", "STOPPED",
    "REVOKED", "RESV_DEL_HOLD", "SIGNALING",
)


def node_state_name(state: Set[str]) -> str:
    """The one word sinfo shows for a node's base state and flags (without its ``*``/``~`` marks)."""
    if "INVALID_REG" in state:
        return "inval"
    busy = bool(state & _BUSY) or "COMPLETING" in state
    drain = "DRAIN" in state
    if "MAINTENANCE" in state and not (drain or "DOWN" in state or state & _BUSY):
        return "maint"
    if ("REBOOT_REQUESTED" in state or "REBOOT_ISSUED" in state) and not (drain or state & _BUSY):
        return "reboot"
    if drain:
        return "draining" if busy else "drained"
    if "FAIL" in state:
        return "failing" if busy else "fail"
    if "DOWN" in state:
        return "down"
    if "ALLOCATED" in state:
        return "allocated"
    if "COMPLETING" in state:
        return "completing"
    if "IDLE" in state:
        if "RESERVED" in state:
            return "reserved"
        return "planned" if "PLANNED" in state else "idle"
    if "MIXED" in state:
        return "mixed"
    for base in ("FUTURE", "ERROR"):
        if base in state:
            return base.lower()
    return "unknown"


def node_count_bucket(state: Set[str]) -> str | None:
    """The ``slurm_nodes_*`` count a node belongs to (one at most), by its sinfo name."""
    return NODE_COUNT_BUCKET[node_state_name(state)]


def job_state_name(job: Job) -> str:
    """The one word squeue shows for a job: a transitional flag wins over the base state."""
    if not job.state_flags:
        return job.state
    for flag in _JOB_FLAG_PRECEDENCE:
        if flag in job.state_flags:
            return flag
    return job.state
