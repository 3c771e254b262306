"""A Pod, as the placeholder Slurm job that reserves its place. Pure; shared by scheduler and extender.

Validation only checks that values can be handed to Slurm: integers are integers in Slurm's
range, ``exclusive`` is a known mode, node lists are lists of node names. Whether an account,
partition or node *exists* is for Slurm to say at submission. Every problem is reported at
once, so a user fixes a Pod in one round. docs/translation.md has the full table.

Rules:
- Resources: the Pod's effective requests as kube-scheduler counts them (``resources.py``).
  CPU rounds up to whole CPUs (``cpus_per_task``); memory to MB, i.e. MiB, rounded up
  (``memory_per_node``); ``nvidia.com/gpu`` becomes GPUs per node and must be whole.
  CPU and memory must be non-zero.
- GPU class/model affinity: in a required node affinity with exactly one
  ``nodeSelectorTerm``, each ``matchExpression`` on ``gpu.nvidia.com/class`` or
  ``gpu.nvidia.com/model`` with operator ``In`` becomes a Slurm feature clause: ``V`` for one
  value, ``(V1|V2)`` for several. Clauses are ANDed after the ``constraints`` annotation;
  the annotation is parenthesised when it has an OR at its top level. Slurm (24.11 tested)
  reads constraints strictly left to right and cannot nest groups, so an annotation whose
  top-level OR sits beside its own groups cannot be combined and is a validation error.
  Square brackets (Slurm's matching OR) are never generated: ``sbatch --test-only`` placed
  ``[B200|H100]`` on a node with neither feature, while ``(B200|H100)`` chose right; a
  placeholder is a one-node job, where the two mean the same. Other operators, other keys,
  several ORed terms and ``spec.nodeSelector`` have no feature form: the kubelet's admission
  checks them, so the Slurm nodes whose Node they rule out are excluded at submission
  (``placement.py``; docs/translation.md).
- User, group and default account: the ``Identity`` the operator's policy gives the Pod
  (``policy.py``: what the Pod asked for, if allowed, else its namespace's default identity;
  a user-id without a group-id asks group = user). Never root by default.
- ``timeout`` is seconds; Slurm's time limit is whole minutes, so it is rounded up.
- ``exclusive``: none -> ``shared=none`` (whole node), ok -> oversubscribe, user, mcs, topo
  as themselves; the legacy booleans: "true" -> none, "false" -> unset (partition default).
- The job's AdminComment carries the Pod's identity (``identity.PlaceholderIdentity``): the UID lets a
  restarted scheduler find the job instead of submitting a second one. The job's Extra is left
  to its user: nothing sunk reads is kept where the job's user can write.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Optional

from attrs import frozen

from sunk.model import names
from sunk.model.slurm import JobRequest, SubmitLimits

from .identity import PlaceholderIdentity
from .keys import PodKey
from .objects import annotations_of
from .quantity import cpus, is_whole, megabytes
from .resources import pod_requests

Obj = Mapping[str, Any]

EXCLUSIVE_MODES: Mapping[str, Optional[str]] = {
    "none": "none", "ok": "oversubscribe", "user": "user", "mcs": "mcs", "topo": "topo",
    "true": "none", "false": None,
}
INTEGER_ANNOTATIONS = (names.ANN_PRIORITY, names.ANN_USER_ID, names.ANN_GROUP_ID, names.ANN_TIMEOUT)
NODE_LIST_ANNOTATIONS = (names.ANN_EXCLUDED_NODES, names.ANN_REQUIRED_NODES)
TABLE_ANNOTATIONS = (
    names.ANN_ACCOUNT, names.ANN_COMMENT, names.ANN_CONSTRAINTS, names.ANN_EXCLUSIVE, names.ANN_EXCLUDED_NODES,
    names.ANN_REQUIRED_NODES, names.ANN_PARTITION, names.ANN_PREFER, names.ANN_PRIORITY, names.ANN_QOS,
    names.ANN_RESERVATION, names.ANN_USER_ID, names.ANN_GROUP_ID, names.ANN_CURRENT_WORKING_DIR, names.ANN_TIMEOUT,
)
# sunk.coreweave.com/gang (sunk/translate/gang.py): opt out, or how a JobSet gangs.
GANG_MODES = ("none", "jobset", "replicated-job", "job")
GPU_RESOURCE = names.GPU_RESOURCE
GPU_AFFINITY_KEYS = ("gpu.nvidia.com/class", "gpu.nvidia.com/model")
DEFAULT_GRACE_SECONDS = 30  # what the apiserver fills in when the Pod does not say
KILL_WAIT_MARGIN = 5
JOB_NAME_MAX = 128
DEFAULT_WORKING_DIRECTORY = "/tmp"
# Slurm keeps 32-bit ids, priorities and minutes, and reserves the top two values
# (NO_VAL 0xfffffffe and INFINITE 0xffffffff) as "unset" and "unlimited".
SLURM_UINT32_MAX = 2**32 - 3

_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)
MAX_INTEGER_CHARS = 30
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]*(?:\[[0-9,\-]+\][A-Za-z0-9._\-]*)*", re.ASCII)
_FEATURE = re.compile(r"[A-Za-z0-9_.\-]+", re.ASCII)


# Bound with claims nobody allocated, a Pod would wait in the kubelet forever while its job held Slurm's node.
RESOURCE_CLAIMS_UNSUPPORTED = (
    "ResourceClaims (Dynamic Resource Allocation) are not allocated by sunk's scheduler without "
    "--dra-device-mapping, and the kubelet starts no Pod whose claims no scheduler allocated; request GPUs as "
    "nvidia.com/gpu, or ask the operator for the mapping (docs/scheduler.md)")


@frozen
class ValidationError:
    """One problem with a Pod: ``field`` names where (an annotation key or a spec path)."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@frozen
class Identity:
    """Who a placeholder job runs as in Slurm, as ``policy.IdentityPolicy`` decides for its Pod."""

    user_id: int
    group_id: int
    account: Optional[str] = None


def _integer(value: object) -> Optional[int]:
    """The annotation as an integer, or None when it is not one (ASCII digits only: int() takes '٣')."""
    text = str(value).strip()
    # (a bound first: int() refuses more than 4300 digits, and nothing here needs 30)
    return int(text) if len(text) <= MAX_INTEGER_CHARS and _INTEGER.fullmatch(text) else None


def _integer_problem(key: str, value: str) -> Optional[str]:
    number = _integer(value)
    if number is None:
        return f"must be an integer, got {value!r}"
    if key == names.ANN_TIMEOUT:
        if number <= 0:
            return f"must be a positive number of seconds, got {value!r}"
        if _minutes(number) > SLURM_UINT32_MAX:
            return f"is longer than Slurm can hold, got {value!r}"
        return None
    if not 0 <= number <= SLURM_UINT32_MAX:
        return f"must be between 0 and {SLURM_UINT32_MAX}, got {value!r}"
    return None


def _minutes(seconds: int) -> int:
    return -(-seconds // 60)


def validate_pod(pod: Obj, kill_wait_seconds: float, *, claims_allowed: bool = False) -> list[ValidationError]:
    """Every reason this Pod cannot become a placeholder job; empty when it can. ``claims_allowed``: the scheduler
    fills ResourceClaims (``--dra-device-mapping``; what a claim may ask is ``dra.claim_plan``'s to judge)."""
    problems: list[ValidationError] = []
    annotations = annotations_of(pod)

    for key in TABLE_ANNOTATIONS:
        if key in annotations and "\x00" in str(annotations[key]):
            problems.append(ValidationError(key, "must not contain a NUL character"))
    for key in INTEGER_ANNOTATIONS:
        if key in annotations and (message := _integer_problem(key, annotations[key])):
            problems.append(ValidationError(key, message))
    if names.ANN_EXCLUSIVE in annotations and annotations[names.ANN_EXCLUSIVE].strip().lower() not in EXCLUSIVE_MODES:
        problems.append(ValidationError(
            names.ANN_EXCLUSIVE,
            f"must be one of none, ok, user, mcs, topo (or the legacy true/false), "
            f"got {annotations[names.ANN_EXCLUSIVE]!r}"))
    for key in NODE_LIST_ANNOTATIONS:
        if key in annotations:
            items = _split_node_list(annotations[key])
            if not items or not all(_NODE_NAME.fullmatch(item) for item in items):
                problems.append(ValidationError(
                    key, f"must be a comma-separated list of Slurm node names, got {annotations[key]!r}"))
    gang = annotations.get(names.ANN_GANG)
    if gang is not None and str(gang).strip().lower() not in GANG_MODES:
        problems.append(ValidationError(names.ANN_GANG, f"must be one of {', '.join(GANG_MODES)}, got {gang!r}"))
    workdir = annotations.get(names.ANN_CURRENT_WORKING_DIR)
    if workdir is not None and workdir.strip() and not workdir.strip().startswith("/"):
        problems.append(ValidationError(names.ANN_CURRENT_WORKING_DIR,
                                        f"must be an absolute path, got {workdir!r}"))

    if (pod.get("spec") or {}).get("resourceClaims") and not claims_allowed:
        problems.append(ValidationError("spec.resourceClaims", RESOURCE_CLAIMS_UNSUPPORTED))
    problems.extend(_resource_problems(pod))
    problems.extend(_grace_problems(pod, kill_wait_seconds))
    try:
        clauses = gpu_clauses(pod)
    except ValueError as exc:
        problems.append(ValidationError("spec.affinity.nodeAffinity", str(exc)))
    else:
        try:
            constraint(_text(annotations, names.ANN_CONSTRAINTS), clauses)
        except ValueError as exc:
            problems.append(ValidationError(names.ANN_CONSTRAINTS, str(exc)))
    return problems


def backend_problems(pod: Obj, limits: SubmitLimits) -> list[ValidationError]:
    """What this Pod asks for that the scheduler's Slurm backend cannot submit (``SubmitLimits``)."""
    annotations = annotations_of(pod)
    problems = []
    if limits.prefer and (_text(annotations, names.ANN_PREFER) or "").strip():
        problems.append(ValidationError(names.ANN_PREFER, f"cannot be submitted by this scheduler: {limits.prefer}"))
    exclusive = annotations.get(names.ANN_EXCLUSIVE)
    mode = EXCLUSIVE_MODES.get(str(exclusive).strip().lower()) if exclusive is not None else None
    if why := limits.shared_refusal(mode):
        problems.append(ValidationError(names.ANN_EXCLUSIVE, f"{exclusive!r} cannot be submitted by this "
                                                             f"scheduler: {why}"))
    return problems


def _resource_problems(pod: Obj) -> list[ValidationError]:
    try:
        requests = pod_requests(pod)
    except ValueError as exc:
        return [ValidationError("spec.containers[].resources", str(exc))]
    problems = []
    for resource in ("cpu", "memory"):
        if requests.get(resource, Decimal(0)) <= 0:
            problems.append(ValidationError(f"resources.requests.{resource}",
                                            f"the Pod must request a non-zero amount of {resource}"))
    if not is_whole(requests.get(GPU_RESOURCE, Decimal(0))):
        problems.append(ValidationError(f"resources.requests.{GPU_RESOURCE}",
                                        f"must be a whole number of GPUs, got {requests[GPU_RESOURCE]}"))
    return problems


def grace_seconds(pod: Obj) -> object:
    """The Pod's grace period as the apiserver would store it (30 when unset)."""
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return DEFAULT_GRACE_SECONDS if grace is None else grace


def _grace_problems(pod: Obj, kill_wait_seconds: float) -> list[ValidationError]:
    grace = grace_seconds(pod)
    limit = kill_wait_seconds - KILL_WAIT_MARGIN
    field = "spec.terminationGracePeriodSeconds"
    if isinstance(grace, bool) or not isinstance(grace, int) or grace < 0:
        return [ValidationError(field, f"must be a non-negative integer, got {grace!r}")]
    if grace >= limit:
        return [ValidationError(field, f"must be less than the scheduler's KillWait minus {KILL_WAIT_MARGIN}s "
                                       f"({limit:g}), got {grace}")]
    return []


def gpu_clauses(pod: Obj) -> tuple[tuple[str, ...], ...]:
    """One tuple of values per ``In`` expression on a GPU class/model key, in the single required term.

    ValueError when a value cannot be a Slurm feature name.
    """
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or []
    if len(terms) != 1:
        return ()  # ORed terms have no faithful one-clause Slurm form: not translated (docs/translation.md)
    clauses: list[tuple[str, ...]] = []
    for expression in terms[0].get("matchExpressions") or []:
        if expression.get("key") not in GPU_AFFINITY_KEYS or expression.get("operator") != "In":
            continue
        values = tuple(dict.fromkeys(str(v) for v in expression.get("values") or []))
        for value in values:
            if not _FEATURE.fullmatch(value):
                raise ValueError(f"{expression.get('key')} value {value!r} cannot be a Slurm feature name")
        if values and values not in clauses:
            clauses.append(values)
    return tuple(clauses)


def gpu_type(clauses: tuple[tuple[str, ...], ...], gpu_types: Mapping[str, str]) -> tuple[
        Optional[str], tuple[tuple[str, ...], ...]]:
    """The Slurm GRES type a GPU class/model affinity names through ``--gpu-types`` (Node label value ->
    GRES type, SUNK's ``gpuTypes``: ``NVIDIA_L4: l4``), and the clauses left to Slurm features.

    A clause whose every value maps to one type names that type, and is then the GRES request's, not a
    feature's: the Pod asks ``gres/gpu:<type>:N`` and Slurm picks a node with that type. Clauses that
    name no type, or several (``In [L4, H100]``: one request cannot OR GRES types), stay features. Two
    clauses naming two different types cannot both hold: both stay features (and Slurm finds no node).
    """
    named: dict[tuple[str, ...], str] = {}
    for clause in clauses:
        types = {gpu_types.get(value) for value in clause}
        if len(types) == 1 and None not in types:
            named[clause] = next(iter(t for t in types if t is not None))
    if len(set(named.values())) != 1:
        return None, clauses
    return next(iter(named.values())), tuple(c for c in clauses if c not in named)


def _top_level_or(text: str) -> bool:
    depth = 0
    for char in text:
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "|" and depth == 0:
            return True
    return False


def constraint(annotation: Optional[str], clauses: tuple[tuple[str, ...], ...]) -> Optional[str]:
    """The job's feature constraint: the annotation, then each GPU clause, ANDed (module docstring)."""
    gpu = ["(" + "|".join(c) + ")" if len(c) > 1 else c[0] for c in clauses]
    if not annotation:
        return "&".join(gpu) or None
    if not gpu:
        return annotation
    if _top_level_or(annotation):
        if any(char in annotation for char in "()[]"):
            raise ValueError(f"{annotation!r} ORs groups at its top level, so it cannot be combined with the GPU "
                             f"class/model affinity ({'&'.join(gpu)}); put the GPU feature into the annotation "
                             f"instead")
        annotation = f"({annotation})"
    return "&".join([annotation, *gpu])


def job_name(pod: Obj) -> str:
    """``k8s:<namespace>/<name>``, cut to 128 characters: for people reading squeue, never for matching."""
    meta = pod["metadata"]
    return f"k8s:{meta['namespace']}/{meta['name']}"[:JOB_NAME_MAX]


def _text(annotations: Mapping[str, str], key: str) -> Optional[str]:
    value = str(annotations.get(key, "")).strip()
    return value or None


def pod_to_job(pod: Obj, *, identity: Identity, script: str, kill_wait_seconds: float, scheduler: str = "",
               gpu_types: Mapping[str, str] = {}, claimed_gpus: Optional[int] = None,
               claimed_type: str = "") -> JobRequest:
    """The placeholder job for a *valid* Pod, run as ``identity`` (the policy's, never read here from the
    Pod); ValueError listing every problem otherwise. ``gpu_types`` (``--gpu-types``) turns a GPU
    class/model affinity into a typed GRES request (``gpu_type``). ``claimed_gpus``: the devices its
    ResourceClaims ask for (``dra.ClaimPlan.gpus``), None when the scheduler fills no claims; ``claimed_type``
    their DeviceClass's GRES type (``dra.ClaimPlan.gres_type``), which a GPU affinity may not contradict."""
    problems = validate_pod(pod, kill_wait_seconds, claims_allowed=claimed_gpus is not None)
    if problems:
        raise ValueError("; ".join(map(str, problems)))
    meta = pod["metadata"]
    annotations = annotations_of(pod)
    requests = pod_requests(pod)

    def integer(key: str) -> Optional[int]:
        return _integer(annotations[key]) if key in annotations else None

    timeout = integer(names.ANN_TIMEOUT)
    exclusive = annotations.get(names.ANN_EXCLUSIVE)
    gpus = int(requests.get(GPU_RESOURCE, Decimal(0))) + (claimed_gpus or 0)
    clauses = gpu_clauses(pod)
    typed, clauses = gpu_type(clauses, gpu_types) if gpus else (None, clauses)
    if claimed_type:
        if typed not in (None, claimed_type) or clauses:
            raise ValueError(f"the GPU type comes from the claims' DeviceClass ({claimed_type}); a GPU class or "
                             "model affinity may not ask for another")
        typed = claimed_type
    return JobRequest(
        name=job_name(pod),
        script=script,
        partition=_text(annotations, names.ANN_PARTITION),
        account=identity.account,
        qos=_text(annotations, names.ANN_QOS),
        reservation=_text(annotations, names.ANN_RESERVATION),
        priority=integer(names.ANN_PRIORITY),
        user_id=identity.user_id,
        group_id=identity.group_id,
        cpus_per_task=cpus(requests["cpu"]),
        memory_per_node=megabytes(requests["memory"]),
        gpus_per_node=gpus,
        gpu_type=typed,
        constraints=constraint(_text(annotations, names.ANN_CONSTRAINTS), clauses),
        prefer=_text(annotations, names.ANN_PREFER),
        excluded_nodes=_split_node_list(annotations.get(names.ANN_EXCLUDED_NODES, "")),
        required_nodes=_split_node_list(annotations.get(names.ANN_REQUIRED_NODES, "")),
        shared=EXCLUSIVE_MODES[exclusive.strip().lower()] if exclusive is not None else None,
        time_limit=_minutes(timeout) if timeout is not None else None,
        comment=_text(annotations, names.ANN_COMMENT),
        admin_comment=PlaceholderIdentity(PodKey(meta["uid"]), meta["namespace"], name=meta["name"],
                                          scheduler=scheduler).encode(),
        working_directory=_text(annotations, names.ANN_CURRENT_WORKING_DIR) or DEFAULT_WORKING_DIRECTORY,
        requeue=False,
    )


def _split_node_list(value: str) -> tuple[str, ...]:
    """Split at commas outside hostlist brackets (``node[1,3],node5``); empty items are kept, as errors."""
    items, depth, current = [], 0, ""
    for char in str(value):
        if char == "," and depth == 0:
            items.append(current.strip())
            current = ""
            continue
        depth += {"[": 1, "]": -1}.get(char, 0)
        current += char
    items.append(current.strip())
    return () if items == [""] else tuple(items)
