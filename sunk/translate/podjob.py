"""A Pod, as the placeholder Slurm job that reserves its place. Pure; shared by both front ends.

Validation only checks that values can be passed to Slurm (integers are integers,
``exclusive`` is a known mode); whether an account or partition *exists* is Slurm's to say
at submission. Every problem is reported at once.

Rules (docs/translation.md has the table):
- CPU: the Pod's effective request, max(sum of containers, largest init container), rounded
  up to whole CPUs. Memory likewise, in MB (MiB) rounded up. ``nvidia.com/gpu`` -> GPUs per node.
- A required node affinity on ``gpu.nvidia.com/class`` or ``gpu.nvidia.com/model`` with
  operator ``In`` (single term) becomes a Slurm feature constraint: one value ``V``, several
  ``[V1|V2]`` (every node of the job has the same one), ANDed with the constraints annotation.
  Other operators and keys are Kubernetes' business and are ignored.
- No user/group annotations: root (0/0). A user-id without a group-id: group = user.
- ``timeout`` is seconds; Slurm's limit is in minutes, so it is rounded up.
- ``exclusive``: none -> whole node, ok -> oversubscribe, user, mcs, topo; legacy "true" is
  whole node, "false" is the partition's default.
- The job's Extra carries the Pod's identity (``PlaceholderIdentity``): the UID lets a
  restarted scheduler find the job instead of submitting a second one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Optional

from attrs import frozen

from sunk import names
from sunk.slurm.models import JobRequest

from .quantity import cpus, megabytes, parse_quantity

Obj = Mapping[str, Any]

EXCLUSIVE_MODES = {"none": "none", "ok": "oversubscribe", "user": "user", "mcs": "mcs", "topo": "topo",
                   "true": "none", "false": None}
INTEGER_ANNOTATIONS = (names.ANN_PRIORITY, names.ANN_USER_ID, names.ANN_GROUP_ID, names.ANN_TIMEOUT)
NODE_LIST_ANNOTATIONS = (names.ANN_EXCLUDED_NODES, names.ANN_REQUIRED_NODES)
GPU_RESOURCE = "nvidia.com/gpu"
GPU_AFFINITY_KEYS = ("gpu.nvidia.com/class", "gpu.nvidia.com/model")
DEFAULT_GRACE_SECONDS = 30
KILL_WAIT_MARGIN = 5
JOB_NAME_MAX = 128
_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-\[\],]*$")
_FEATURE = re.compile(r"^[A-Za-z0-9_.\-]+$")


@frozen
class ValidationError:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@frozen
class PlaceholderIdentity:
    """Which Pod a placeholder job holds a place for; lives in the job's Extra."""

    uid: str
    namespace: str
    name: str
    scheduler: str = ""  # which scheduler owns it: two schedulers never touch each other's jobs
    started: bool = False

    _FORMAT = re.compile(r"^sunk-pod=(\S+) ns=(\S+) name=(\S+)(?: sched=(\S+))?$")

    def encode(self) -> str:
        text = f"sunk-pod={self.uid} ns={self.namespace} name={self.name}"
        return f"{text} sched={self.scheduler}" if self.scheduler else text

    @classmethod
    def parse(cls, extra: str) -> Optional[PlaceholderIdentity]:
        """None for any job that is not a placeholder; ``started`` once the script marked it."""
        text = (extra or "").strip()
        started = text.endswith(names.STARTED_MARKER)
        if started:
            text = text[: -len(names.STARTED_MARKER)]
        match = cls._FORMAT.match(text)
        if not match:
            return None
        uid, namespace, name, scheduler = match.groups()
        return cls(uid=uid, namespace=namespace, name=name, scheduler=scheduler or "", started=started)


def annotations_of(pod: Obj) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def validate_pod(pod: Obj, kill_wait_seconds: float) -> list[ValidationError]:
    problems: list[ValidationError] = []
    annotations = annotations_of(pod)
    for key in INTEGER_ANNOTATIONS:
        if key in annotations and not _is_int(annotations[key]):
            problems.append(ValidationError(key, f"must be an integer, got {annotations[key]!r}"))
    if names.ANN_TIMEOUT in annotations and _is_int(annotations[names.ANN_TIMEOUT]) \
            and int(annotations[names.ANN_TIMEOUT]) <= 0:
        problems.append(ValidationError(names.ANN_TIMEOUT, "must be a positive number of seconds"))
    if names.ANN_EXCLUSIVE in annotations and annotations[names.ANN_EXCLUSIVE].strip().lower() not in EXCLUSIVE_MODES:
        problems.append(ValidationError(
            names.ANN_EXCLUSIVE, f"must be one of none, ok, user, mcs, topo (or true/false), "
                                 f"got {annotations[names.ANN_EXCLUSIVE]!r}"))
    for key in NODE_LIST_ANNOTATIONS:
        if key in annotations:
            nodes = _node_list(annotations[key])
            if not nodes or not all(_NODE_NAME.match(n) for n in nodes):
                problems.append(ValidationError(key, f"must be a comma-separated list of node names, "
                                                     f"got {annotations[key]!r}"))
    try:
        requests = effective_requests(pod)
    except ValueError as exc:
        problems.append(ValidationError("spec.containers[].resources.requests", str(exc)))
    else:
        for resource in ("cpu", "memory"):
            if requests.get(resource, Decimal(0)) <= 0:
                problems.append(ValidationError(f"resources.requests.{resource}",
                                                f"the Pod must request a non-zero amount of {resource}"))
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
    limit = kill_wait_seconds - KILL_WAIT_MARGIN
    if not isinstance(grace, int) or grace >= limit:
        problems.append(ValidationError(
            "spec.terminationGracePeriodSeconds",
            f"must be less than the scheduler's KillWait minus {KILL_WAIT_MARGIN}s ({limit:g}), got {grace}"))
    for feature in gpu_features(pod):
        if not _FEATURE.match(feature):
            problems.append(ValidationError("spec.affinity.nodeAffinity",
                                            f"{feature!r} cannot be a Slurm feature name"))
    return problems


def effective_requests(pod: Obj) -> dict[str, Decimal]:
    """What kube-scheduler would count: max(sum over containers, each init container)."""
    spec = pod.get("spec") or {}

    def requests(container: Obj) -> dict[str, Decimal]:
        raw = ((container.get("resources") or {}).get("requests") or {})
        return {key: parse_quantity(value) for key, value in raw.items()}

    total: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        for key, value in requests(container).items():
            total[key] = total.get(key, Decimal(0)) + value
    for container in spec.get("initContainers") or []:
        for key, value in requests(container).items():
            total[key] = max(total.get(key, Decimal(0)), value)
    return total


def gpu_features(pod: Obj) -> tuple[str, ...]:
    """Values of a single-term ``In`` node affinity on the GPU class/model labels."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or []
    if len(terms) != 1:
        return ()  # ORed terms have no faithful single Slurm constraint: left to Kubernetes
    values: list[str] = []
    for expression in terms[0].get("matchExpressions") or []:
        if expression.get("key") in GPU_AFFINITY_KEYS and expression.get("operator") == "In":
            values.extend(expression.get("values") or [])
    return tuple(dict.fromkeys(values))


def constraint(annotation: Optional[str], features: tuple[str, ...]) -> Optional[str]:
    parts = []
    if annotation:
        parts.append(f"({annotation})" if ("|" in annotation or "&" in annotation) and features else annotation)
    if len(features) == 1:
        parts.append(features[0])
    elif features:
        parts.append("[" + "|".join(features) + "]")
    return "&".join(parts) or None


def job_name(pod: Obj) -> str:
    meta = pod["metadata"]
    return f"k8s:{meta['namespace']}/{meta['name']}"[:JOB_NAME_MAX]


def pod_to_job(pod: Obj, *, script: str, kill_wait_seconds: float, scheduler: str = "") -> JobRequest:
    """The placeholder job for a *valid* Pod (validate_pod first; this raises on garbage)."""
    problems = validate_pod(pod, kill_wait_seconds)
    if problems:
        raise ValueError("; ".join(map(str, problems)))
    meta = pod["metadata"]
    annotations = annotations_of(pod)
    requests = effective_requests(pod)

    def text(key: str) -> Optional[str]:
        value = annotations.get(key, "").strip()
        return value or None

    def integer(key: str) -> Optional[int]:
        value = annotations.get(key)
        return int(value) if value is not None else None

    user_id = integer(names.ANN_USER_ID)
    group_id = integer(names.ANN_GROUP_ID)
    timeout = integer(names.ANN_TIMEOUT)
    exclusive = annotations.get(names.ANN_EXCLUSIVE)
    return JobRequest(
        name=job_name(pod),
        script=script,
        partition=text(names.ANN_PARTITION),
        account=text(names.ANN_ACCOUNT),
        qos=text(names.ANN_QOS),
        reservation=text(names.ANN_RESERVATION),
        priority=integer(names.ANN_PRIORITY),
        user_id=user_id if user_id is not None else 0,
        group_id=group_id if group_id is not None else (user_id if user_id is not None else 0),
        cpus_per_task=cpus(requests["cpu"]),
        memory_per_node=megabytes(requests["memory"]),
        gpus_per_node=int(requests.get(GPU_RESOURCE, Decimal(0))),
        constraints=constraint(text(names.ANN_CONSTRAINTS), gpu_features(pod)),
        prefer=text(names.ANN_PREFER),
        excluded_nodes=_node_list(annotations.get(names.ANN_EXCLUDED_NODES, "")),
        required_nodes=_node_list(annotations.get(names.ANN_REQUIRED_NODES, "")),
        shared=EXCLUSIVE_MODES[exclusive.strip().lower()] if exclusive is not None else None,
        time_limit=-(-timeout // 60) if timeout is not None else None,
        comment=text(names.ANN_COMMENT),
        extra=PlaceholderIdentity(uid=meta["uid"], namespace=meta["namespace"], name=meta["name"],
                                  scheduler=scheduler).encode(),
        working_directory=text(names.ANN_CURRENT_WORKING_DIR) or "/tmp",
        requeue=False,
    )


def _is_int(value: str) -> bool:
    return bool(re.fullmatch(r"[+-]?\d+", (value or "").strip()))


def _node_list(value: str) -> tuple[str, ...]:
    """Comma-separated, but commas inside a hostlist range (node[1,3]) do not split."""
    out, depth, current = [], 0, ""
    for char in value:
        if char == "," and depth == 0:
            out.append(current.strip())
            current = ""
            continue
        depth += {"[": 1, "]": -1}.get(char, 0)
        current += char
    out.append(current.strip())
    return tuple(n for n in out if n)
