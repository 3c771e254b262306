"""What a waiting Pod says about its wait: pure, so every case is a table row (tests/unit/test_scheduler_waiting.py).

``kubectl describe pod`` should answer "why is my Pod not running" as it does for kube-scheduler's Pods:
a ``PodScheduled=False`` condition, reason ``WaitingForSlurm``, whose message names the placeholder job,
its partition and Slurm's current pending reason (``Resources``, ``Priority``, ``ReqNodeNotAvail``, ...),
and one ``WaitingForSlurm`` Event per change of that message.

Writes are few: none when the Pod's condition already says it (read from the Pod, so a restarted
scheduler writes nothing new), and at most one per Pod every ``CONDITION_MIN_INTERVAL`` seconds, so a
reason that flaps at every poll of Slurm writes at that pace, never at the poll's. The last reason is
always written in the end: a write held back is due again after the interval.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Optional

from attrs import frozen

from sunk.translate.objects import condition

POD_SCHEDULED = "PodScheduled"
WAITING_FOR_SLURM = "WaitingForSlurm"

# A Pod's condition is written at most this often (seconds): the Events follow its writes.
CONDITION_MIN_INTERVAL = 5.0

# The metric's label for a wait Slurm gave no reason for (or that is sunk's own step: not listed yet, no
# slurmd Pod for the node), and for a reason not in SLURM_REASONS (the label set stays bounded).
NO_REASON = "None"
OTHER_REASON = "Other"

# Slurm's pending reasons (job_state_reason_string, 24.11) that a placeholder may show: the label values of
# sunk_pods_waiting. Anything else Slurm says is counted as "Other" (the condition still shows it).
SLURM_REASONS = frozenset({
    "None", "Priority", "Resources", "Dependency", "DependencyNeverSatisfied", "BeginTime", "Licenses",
    "ReqNodeNotAvail", "PartitionNodeLimit", "PartitionTimeLimit", "PartitionDown", "PartitionInactive",
    "PartitionConfig", "JobHeldAdmin", "JobHeldUser", "Reservation", "ReservationDeleted", "NodeDown",
    "BadConstraints", "Prolog", "BurstBufferResources", "BurstBufferStageIn", "InvalidAccount", "InvalidQOS",
    "QOSNotAllowed", "AccountNotAllowed", "PowerUpNode", "JobArrayTaskLimit", "MaxMemPerLimit",
    "AssociationJobLimit", "AssociationResourceLimit", "AssociationTimeLimit", "QOSJobLimit",
    "QOSResourceLimit", "QOSTimeLimit", "QOSUsageThreshold",
    "QOSMaxJobsPerUserLimit", "QOSMaxJobsPerAccountLimit", "QOSMaxSubmitJobPerUserLimit",
    "QOSMaxCpuPerUserLimit", "QOSMaxCpuPerJobLimit", "QOSMaxCpuPerNode", "QOSMaxNodePerUserLimit",
    "QOSMaxNodePerJobLimit", "QOSMaxMemoryPerUser", "QOSMaxMemoryPerJob", "QOSMaxGRESPerUser",
    "QOSMaxGRESPerJob", "QOSMaxGRESPerNode", "QOSMaxWallDurationPerJobLimit", "QOSMinGRES",
    "QOSGrpCpuLimit", "QOSGrpNodeLimit", "QOSGrpJobsLimit", "QOSGrpMemLimit", "QOSGrpGRES",
    "QOSGrpWallLimit", "QOSGrpSubmitJobsLimit",
    "AssocGrpCpuLimit", "AssocGrpNodeLimit", "AssocGrpJobsLimit", "AssocGrpMemLimit", "AssocGrpGRES",
    "AssocGrpWallLimit", "AssocGrpSubmitJobsLimit", "AssocMaxJobsLimit", "AssocMaxCpuPerJobLimit",
    "AssocMaxNodePerJobLimit", "AssocMaxGRESPerJob", "AssocMaxWallDurationPerJobLimit",
    "AssocMaxSubmitJobLimit",
})

# Longest message written: Slurm's reason is Slurm's, but a partition name is whatever the Pod asked for.
MESSAGE_MAX = 1024
_PRINTABLE = re.compile(r"[^\x20-\x7e]")


@frozen
class WaitCondition:
    """``PodScheduled=False`` as a waiting Pod shows it."""

    reason: str
    message: str

    def as_condition(self) -> dict[str, str]:
        return {"type": POD_SCHEDULED, "status": "False", "reason": self.reason, "message": self.message}


def wait_message(job_id: int, partition: str, why: str) -> str:
    """"Slurm job 42 (partition gpu): ReqNodeNotAvail": the job, where it waits, and why."""
    where = f" (partition {_printable(partition)})" if partition else ""
    return f"Slurm job {job_id}{where}: {_printable(why)}"[:MESSAGE_MAX]


def wait_condition(job_id: int, partition: str, why: str) -> WaitCondition:
    return WaitCondition(WAITING_FOR_SLURM, wait_message(job_id, partition, why))


def metric_reason(slurm_reason: str) -> str:
    """The ``reason`` label of ``sunk_pods_waiting``: Slurm's pending reason when it is one of Slurm's own
    (``SLURM_REASONS``), else ``Other``; ``None`` when Slurm gave none. Bounded whatever Slurm answers."""
    if not slurm_reason:
        return NO_REASON
    return slurm_reason if slurm_reason in SLURM_REASONS else OTHER_REASON


def current_condition(pod: Mapping[str, Any]) -> Optional[WaitCondition]:
    """The Pod's ``PodScheduled`` condition as last written, if it is ``False`` (else None: nothing shown)."""
    cond = condition(pod, POD_SCHEDULED)
    if cond is None or cond.get("status") != "False":
        return None
    return WaitCondition(str(cond.get("reason") or ""), str(cond.get("message") or ""))


def write_due(shown: Optional[WaitCondition], wanted: WaitCondition, last_write: Optional[float], now: float,
              min_interval: float = CONDITION_MIN_INTERVAL) -> Optional[float]:
    """When to write ``wanted`` over what the Pod shows: None (it shows it already: never), 0 (now), or the
    seconds to wait first (this process wrote the Pod's condition less than ``min_interval`` ago).

    ``last_write`` is this process's last write to the Pod (None: none since it started; the Pod's own
    condition then says whether anything is to be written at all)."""
    if shown == wanted:
        return None
    if last_write is None:
        return 0.0
    left = last_write + min_interval - now
    return left if left > 0 else 0.0


def waiting_exposition(slurm_reasons: Iterable[str]) -> str:
    """``sunk_pods_waiting{reason}`` in the text exposition format, from each waiting Pod's Slurm reason.

    Only the reasons some Pod waits for are listed (and ``None``, always, so that the family exists while
    nothing waits)."""
    counts = Counter(metric_reason(reason) for reason in slurm_reasons)
    counts.setdefault(NO_REASON, 0)
    lines = ["# HELP sunk_pods_waiting Pods this scheduler submitted a placeholder job for and that wait for it to "
             "start, by Slurm's pending reason (Other: a reason not in sunk's list; None: Slurm gave none yet).",
             "# TYPE sunk_pods_waiting gauge"]
    lines += [f'sunk_pods_waiting{{reason="{reason}"}} {count}' for reason, count in sorted(counts.items())]
    return "\n".join(lines) + "\n"


def _printable(text: str) -> str:
    return _PRINTABLE.sub("?", text)
