"""Node locking, as a state machine over the slurmd Pod's ``sunk.coreweave.com/lock`` annotation.

    false ──(a job wants the node)──► pending ──(no blocking Pod left)──► locked
                                        │                               (normal: Slurm batch jobs)
                                        └──(strict, no blocking Pod)──► locked_strict
                                                                        (placeholder jobs)
    any ──(the Slurm node runs no job and none is asked for)──► false

Which Pods block (``pods_to_evict``), among the Pods bound to the Node, the slurmd Pod aside:
- never Pods that tolerate the ``sunk.coreweave.com/lock`` taint, with its effect (DaemonSets
  for logging, monitoring, the device plugin), nor Pods that already finished;
- never Pods placed by the SUNK Pod Scheduler: they are Slurm jobs themselves, and Slurm
  already counted what they hold. Such a Pod carries a job-id annotation, but anybody who
  may edit a Pod can write one, so it counts only when it names a job that Slurm shows on
  the node or that a live lock request names (``Vouched``), or when the Pod was bound less
  than a grace ago (the Slurm cache may not show its job yet);
- **normal**: every other Pod that is still running; once it is terminating it no longer
  blocks (it was asked to go, and Slurm jobs share CPU and memory by cgroups anyway);
- **strict**: the same Pods, but a terminating one blocks until it is gone: a placeholder's
  Pod takes GPUs through the device plugin, and must never start while another Pod still
  holds them.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from sunk.base.times import epoch
from sunk.model import names
from sunk.model.types import Obj

from .identity import NAME_PATTERN, NAMESPACE_MAX, NAMESPACE_PATTERN, POD_NAME_MAX
from .objects import annotations_of, conditions_of, is_deleting, merged_patches, taint_patch, untaint_patch

# What a Pod that must stay through locks carries: every effect, so an operator's change of
# the taint's effect does not turn it into an eviction.
LOCK_TOLERATION: Obj = {"key": names.LOCK_KEY, "operator": "Exists"}

TAINT_EFFECTS = ("NoSchedule", "NoExecute")  # what --lock-taint-effect may choose


class LockState(enum.Enum):
    FALSE = "false"
    PENDING = "pending"
    LOCKED = "locked"
    LOCKED_STRICT = "locked_strict"


def parse_state(value: str | None) -> LockState:
    """The annotation's value; absent or unknown text reads as unlocked (and is rewritten)."""
    try:
        return LockState((value or "false").strip().lower())
    except ValueError:
        return LockState.FALSE


def tolerates_lock(pod: Obj, effect: str | None = None) -> bool:
    """Whether the Pod tolerates the lock taint ``sunk.coreweave.com/lock=true:<effect>``.

    Kubernetes' own matching: a toleration that names an effect covers that effect only.
    ``effect=None`` asks for every effect (the taint's effect is an operator's choice,
    and a Pod given a toleration must keep it when that choice changes).
    """
    for toleration in (pod.get("spec") or {}).get("tolerations") or []:
        covers = toleration.get("effect") or ""
        if covers and covers != effect:
            continue
        key = toleration.get("key") or ""
        operator = toleration.get("operator") or "Equal"
        if key == "" and operator == "Exists":
            return True  # tolerates every taint
        if key == names.LOCK_KEY and (operator == "Exists" or toleration.get("value") == "true"):
            return True
    return False


def holder_of(slurmd_pod: Mapping[str, Any]) -> str:
    """The name a slurmd Pod's lock holds its Node's taint by (``names.ANN_LOCK_HOLDERS``)."""
    meta = slurmd_pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


_HOLDER = re.compile(rf"(?P<namespace>{NAMESPACE_PATTERN})/(?P<name>{NAME_PATTERN})", re.ASCII)


def holder_pod(holder: str) -> tuple[str, str] | None:
    """The (namespace, name) of the Pod a holder names, or None when it can name no Pod (anyone who may edit
    the Node's annotations can write one: it must never become a path of another request)."""
    found = _HOLDER.fullmatch(holder)
    if found is None or len(found["namespace"]) > NAMESPACE_MAX or len(found["name"]) > POD_NAME_MAX:
        return None
    return found["namespace"], found["name"]


def lock_holders(node: Mapping[str, Any]) -> frozenset[str]:
    """Whose locks hold the Node's lock taint (empty: none is named, as on a taint of an older sunk)."""
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(names.ANN_LOCK_HOLDERS) or ""
    return frozenset(h for h in (part.strip() for part in text.split(",")) if h)


def holders_text(holders: frozenset[str]) -> str | None:
    return ",".join(sorted(holders)) or None


def holding_patch(node: Obj, holder: str) -> Obj | None:
    """The annotation patch that adds ``holder`` to the Node's lock holders (None: it is one)."""
    holders = lock_holders(node)
    if holder in holders:
        return None
    return {"metadata": {"annotations": {names.ANN_LOCK_HOLDERS: holders_text(holders | {holder})}}}


def release_holders(node: Mapping[str, Any], drop: Callable[[str], bool]) -> tuple[frozenset[str], bool]:
    """The holders left once those ``drop`` names let go, and whether the taint goes with them: when none is
    left, or when none was named at all (a taint of an older sunk, lifted as it always was). A taint another
    release's slurmd Pod still holds stays."""
    holders = lock_holders(node)
    left = frozenset(h for h in holders if not drop(h))
    return left, not left


def hold_patch(node: Obj, holder: str, effect: str) -> Obj | None:
    """The one patch that puts sunk's lock taint on the Node, held by ``holder`` (None: it is already)."""
    return merged_patches(taint_patch(node, names.LOCK_KEY, "true", effect), holding_patch(node, holder))


def release_patch(node: Obj, drop: Callable[[str], bool]) -> tuple[Obj | None, bool]:
    """The one patch by which the holders ``drop`` names let go (``release_holders``), and whether it lifts the
    taint (None, False: nothing to write)."""
    left, lift = release_holders(node, drop)
    annotation = None if left == lock_holders(node) else {"metadata": {"annotations": {
        names.ANN_LOCK_HOLDERS: holders_text(left)}}}
    untaint = untaint_patch(node, names.LOCK_KEY) if lift else None
    return merged_patches(untaint, annotation), untaint is not None


@attrs.frozen
class Vouched:
    """The job ids a node's own facts name (its Slurm jobs, its live lock requests), at ``now``.

    A job-id annotation is believed only for these, or for a Pod bound within ``grace``
    seconds of ``now``; and, when ``scheduler_names`` is given, only on a Pod of one of those
    schedulers (sunk's: the chart's admission policy keeps anyone else from writing the annotation
    there, while a Pod of another scheduler may carry any job id, say the one its node runs, to stay
    beside another tenant's exclusive job). ``everything()`` believes every annotation (reports,
    tests of other rules).

    ``jobs_unknown``: Slurm shows the node busy but the jobs cache names no job on it yet (the two are
    listed apart). A claim cannot be judged against facts not yet seen, and an eviction is not undone:
    every well-formed one is believed until the jobs are known.
    """

    job_ids: frozenset[int] = frozenset()
    now: float = 0.0
    grace: float = 0.0
    trust_all: bool = False
    scheduler_names: frozenset[str] | None = None
    jobs_unknown: bool = False

    @classmethod
    def everything(cls, scheduler_names: frozenset[str] | None = None) -> Vouched:
        """Every job-id annotation believed (on the Pods of ``scheduler_names`` only, when given)."""
        return cls(trust_all=True, scheduler_names=scheduler_names)

    def placed_by_sunk(self, pod: Obj) -> bool:
        text = annotations_of(pod).get(names.ANN_JOB_ID)
        if text is None:
            return False
        if (self.scheduler_names is not None
                and str((pod.get("spec") or {}).get("schedulerName") or "") not in self.scheduler_names):
            return False
        if self.trust_all:
            return True
        job_id = _job_id(text)
        if job_id is not None and (job_id in self.job_ids or self.jobs_unknown):
            return True
        bound_at = bound_time(pod)
        return bound_at is not None and self.now - bound_at < self.grace

    def believed_until(self, pod: Obj) -> float | None:
        """When a Pod believed only for its recent binding stops being believed (None: not such a Pod).

        Nothing else happens on a node when that time passes, so a lock must look again then."""
        text = annotations_of(pod).get(names.ANN_JOB_ID)
        if (text is None or self.trust_all or self.jobs_unknown or _job_id(text) in self.job_ids
                or not self.placed_by_sunk(pod)):
            return None
        bound_at = bound_time(pod)
        return None if bound_at is None else bound_at + self.grace


def bound_time(pod: Mapping[str, Any]) -> float | None:
    """When the Pod was bound (its PodScheduled=True condition), else created; None if unknown."""
    for condition in conditions_of(pod):
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            stamp = epoch(condition.get("lastTransitionTime"))
            if stamp is not None:
                return stamp
    return epoch((pod.get("metadata") or {}).get("creationTimestamp"))


def _job_id(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() and len(text) < 20 else None


def finished(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def pods_to_evict(pods: Sequence[Obj], *, strict: bool, effect: str, vouched: Vouched) -> list[Obj]:
    """The Pods that keep the lock from being reached (terminating ones too, when strict).

    ``effect`` is the lock taint's: a Pod tolerating it with another effect does not tolerate it.
    """
    blocking = []
    for pod in pods:
        if vouched.placed_by_sunk(pod) or finished(pod):
            continue
        # A toleration counts for Pods that do not claim a job. One that names a job no fact of this
        # node backs may hold the toleration sunk gave it while it was believed (NoExecute locks):
        # that toleration is sunk's, not its own, and keeps nothing once the claim is not believed.
        if tolerates_lock(pod, effect) and names.ANN_JOB_ID not in annotations_of(pod):
            continue
        if is_deleting(pod) and not strict:
            continue
        blocking.append(pod)
    return blocking


def pods_to_tolerate(pods: Sequence[Obj], effect: str, vouched: Vouched) -> list[Obj]:
    """The Pods placed by the SUNK Pod Scheduler that a ``NoExecute`` lock taint would evict.

    They stay through every lock, but with ``NoExecute`` it is Kubernetes' taint manager, not
    the lock, that decides: they must tolerate the taint before it lands. The Pod scheduler
    adds the toleration at binding when the Node's taint is ``NoExecute`` already; Pods bound
    under another effect, before an operator switched to ``NoExecute``, need it now.
    """
    if effect != "NoExecute":
        return []
    return [p for p in pods if vouched.placed_by_sunk(p) and not finished(p) and not tolerates_lock(p, effect)
            and not is_deleting(p)]


def next_state(*, strict: bool, blocking: bool) -> LockState:
    if blocking:
        return LockState.PENDING
    return LockState.LOCKED_STRICT if strict else LockState.LOCKED


def satisfies(state: LockState, *, strict: bool) -> bool:
    """Whether ``state`` is enough for a job: a strict lock serves a normal job too, not the reverse."""
    if strict:
        return state is LockState.LOCKED_STRICT
    return state in (LockState.LOCKED, LockState.LOCKED_STRICT)
