"""Gangs: the Pods of one workload that Slurm places together, as one job with one node per Pod. Pure.

Multi-node training and large inference come as groups of Pods that are useless unless all of them
run; one placeholder job per Pod lets a Job of 8 start 5 and hold their nodes for ever, and two such
Jobs deadlock. A gang is placed whole or not at all: once every member it expects exists, one Slurm
job asks for N nodes, one per member, and the members stay unbound until Slurm starts it.

Who forms a gang, each recognised by the labels its own controller sets on the Pods (a Pod carrying
several is taken by the first that applies, in this order):

============================  ==================================================  ===============================
workload                      recognised by (on the Pod)                          size (members expected)
============================  ==================================================  ===============================
coscheduling PodGroup         label ``scheduling.x-k8s.io/pod-group``             the PodGroup's ``spec.minMember``
LeaderWorkerSet group         labels ``leaderworkerset.sigs.k8s.io/name`` and     annotation
                              ``.../group-index``                                 ``leaderworkerset.sigs.k8s.io/size``
JobSet                        label ``jobset.sigs.k8s.io/jobset-name`` (and       the sum over its child Jobs
                              ``.../restart-attempt``)                            (below)
``batch/v1`` Job              label ``batch.kubernetes.io/controller-uid`` (or    the Job's running set (below)
                              the legacy ``controller-uid``, or its owner
                              reference)
============================  ==================================================  ===============================

- A Job's size is what its controller keeps running: ``parallelism`` (default 1), or, when
  ``completions`` is set, ``min(parallelism, completions - status.succeeded)`` (an indexed Job of 4
  completions and parallelism 4 is a gang of 4; once 3 have succeeded, the one Pod made again for
  the last index is a gang of 1, not a gang of 4 that never fills). A Job of one Pod is a gang of one.
- A JobSet is one gang by default; the annotation ``sunk.coreweave.com/gang`` on its Pods (the
  replicated Job's Pod template) makes it one gang per replicated Job (``replicated-job``) or per child
  Job (``job``, then sized as a Job). Its size comes from its child Jobs (``batch/v1``, so no JobSet
  object is read): the whole JobSet needs every child Job (``jobset.sigs.k8s.io/global-replicas`` of
  them; older JobSet releases do not set that label, and then only ``replicated-job`` can be sized), a
  replicated Job its ``jobset.sigs.k8s.io/replicatedjob-replicas``; the sum of their Jobs' sizes. Each
  restart attempt (``jobset.sigs.k8s.io/restart-attempt``) is a gang of its own.
- ``sunk.coreweave.com/gang: none`` on the Pods opts a workload out: each Pod its own placeholder job.

The gang's key (``Gang.key``, one word) is unique in its namespace and made only of the Pod's own
labels, so every member and every watch event of a member maps to it without reading another object:
``job/<Job UID>``, ``lws/<name>/<group index>``, ``podgroup/<name>``,
``jobset/<name>/<restart attempt>[/<replicated Job>]``. ``Gang.owner`` (``gang:<namespace>/<key>``) is
what the scheduler keys its work queue, its job index and the hook tokens by, where a single Pod's is
its UID (UIDs never start with ``gang:``).

The placeholder job's AdminComment (``identity.PlaceholderIdentity``, a lone Pod's type too) carries the
key, the size and a short tag of each member's UID (``member_tag``).

The job asks for N nodes, one task each, and per node the largest request of any member for each
resource (CPUs, memory, GPUs: ``per_node``), so no member ever gets less than it asked; members that
differ (a LeaderWorkerSet leader without GPUs) get the largest. Every annotation of the seeds'
table, and the GPU class/model affinity, must be the same on every member (``disagreements``); a
gang whose members disagree gets an Event naming the annotation and the Pods, and no job. Members
are ordered (``member_order``: leader first, then by index, then by name) and bound in that order to
the job's nodes in Slurm's order, so the leader lands on the batch host.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Optional

from attrs import frozen

from sunk.model import names
from sunk.model.slurm import Job

from .identity import GANG_KEY_PATTERN, IDENTITY_MAX, MEMBER_TAG_CHARS, PlaceholderIdentity
from .keys import GangKey
from .objects import annotations_of, controller_ref, labels_of
from .podjob import GPU_RESOURCE, TABLE_ANNOTATIONS, gpu_clauses
from .quantity import cpus, megabytes
from .resources import pod_requests

Obj = Mapping[str, Any]

# What the workloads' own controllers set on their Pods (their names, not SUNK's).
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
JOB_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")
JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # label (1.28+) and annotation
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"  # 0: the leader
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"  # annotation
POD_GROUP = "scheduling.x-k8s.io/pod-group"  # label; the PodGroup's spec.minMember is the size
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_REPLICATED_JOB_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
JOBSET_GLOBAL_REPLICAS = "jobset.sigs.k8s.io/global-replicas"
JOBSET_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOBSET_JOB_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
JOBSET_RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"

# Every label and annotation this module reads of a Pod (``gang_of``, ``member_order``, ``expected``): what a
# store transform that keeps only some of them must keep (sunk/translate/podstores.py).
_INDEXES = (LWS_WORKER_INDEX, JOBSET_JOB_GLOBAL_INDEX, JOBSET_JOB_INDEX, JOB_COMPLETION_INDEX)  # label, or annotation
POD_LABELS_READ = (POD_GROUP, LWS_NAME, LWS_GROUP_INDEX, JOBSET_NAME, JOBSET_REPLICATED_JOB, JOBSET_RESTART_ATTEMPT,
                   *JOB_NAME_LABELS, *JOB_UID_LABELS, *_INDEXES)
POD_ANNOTATIONS_READ = (names.ANN_GANG, LWS_SIZE, *_INDEXES)
KIND_JOB = "Job"
KIND_LWS = "LeaderWorkerSet"
KIND_POD_GROUP = "PodGroup"
KIND_JOBSET = "JobSet"

MODE_NONE = "none"
MODE_JOBSET = "jobset"
MODE_REPLICATED_JOB = "replicated-job"
MODE_JOB = "job"

PROLOG_REASON = "Prolog"  # a running job's reason while its prolog runs (PrologFlags=Alloc)
JOB_NAME_MAX = 128
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*", re.ASCII)  # a label value, a name, a UID
_LAST = (1 << 62,)  # sorts after any index


@frozen
class Gang:
    """Which gang a Pod belongs to: its workload (``kind``, ``name``) and the gang's ``key``."""

    kind: str
    namespace: str
    name: str  # the workload's name: the Job, LeaderWorkerSet, PodGroup or JobSet
    key: str  # one word, unique in the namespace (module docstring)
    part: str = ""  # a LeaderWorkerSet's group index; a JobSet's replicated Job (``replicated-job``)
    job_uid: str = ""  # a Job's UID
    restart_attempt: str = ""  # a JobSet's

    @property
    def owner(self) -> str:
        return owner(self.namespace, self.key)

    @property
    def unit(self) -> GangKey:
        """The scheduler's typed key of the gang; its ``str()`` is ``owner``."""
        return GangKey(self.namespace, self.key)

    def describe(self) -> str:
        """For people: ``Job ns/train``, ``LeaderWorkerSet ns/llm group 0``, ``JobSet ns/js replicated Job w``."""
        what = f"{self.kind} {self.namespace}/{self.name}"
        if self.kind == KIND_LWS:
            return f"{what} group {self.part}"
        if self.kind == KIND_JOBSET and self.part:
            return f"{what} replicated Job {self.part}"
        return what

    def job_name(self) -> str:
        """The placeholder job's name, for squeue: ``k8s:<ns>/<kind>/<name>[/<part>]``, cut to 128."""
        tail = f"/{self.part}" if self.part else ""
        return f"k8s:{self.namespace}/{self.kind.lower()}/{self.name}{tail}"[:JOB_NAME_MAX]


def owner(namespace: str, key: str) -> str:
    """The gang's owner string (``gang:<namespace>/<key>``), as queued, signed and stored: ``GangKey``'s."""
    return str(GangKey(namespace, key))


def _mode(pod: Obj) -> str:
    return str(annotations_of(pod).get(names.ANN_GANG, "")).strip().lower()


def _first(labels: Mapping[str, str], keys: Iterable[str]) -> str:
    return next((str(labels[k]) for k in keys if labels.get(k)), "")


def _owner_job(pod: Obj) -> tuple[str, str]:
    """(name, UID) of the Job that controls the Pod, from its owner references; ("", "") if none."""
    ref = controller_ref(pod, "Job", "batch")
    return ("", "") if ref is None else (str(ref.get("name") or ""), str(ref.get("uid") or ""))


def gang_of(pod: Obj) -> Optional[Gang]:
    """The gang a Pod belongs to, from its own labels and annotations; None for a Pod scheduled alone
    (no workload that gangs, or ``sunk.coreweave.com/gang: none``). Values that could not be one word
    of the job's Extra (the apiserver never lets them through) make no gang either."""
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    labels = labels_of(pod)
    mode = _mode(pod)
    if mode == MODE_NONE:
        return None
    gang: Optional[Gang] = None
    if pod_group := str(labels.get(POD_GROUP) or ""):
        gang = Gang(KIND_POD_GROUP, namespace, pod_group, f"podgroup/{pod_group}")
    elif (lws := str(labels.get(LWS_NAME) or "")) and (group := str(labels.get(LWS_GROUP_INDEX) or "")):
        gang = Gang(KIND_LWS, namespace, lws, f"lws/{lws}/{group}", part=group)
    elif (jobset := str(labels.get(JOBSET_NAME) or "")) and mode != MODE_JOB:
        attempt = str(labels.get(JOBSET_RESTART_ATTEMPT) or "0")
        if mode == MODE_REPLICATED_JOB:
            replicated = str(labels.get(JOBSET_REPLICATED_JOB) or "")
            gang = Gang(KIND_JOBSET, namespace, jobset, f"jobset/{jobset}/{attempt}/{replicated}", part=replicated,
                        restart_attempt=attempt)
        else:
            gang = Gang(KIND_JOBSET, namespace, jobset, f"jobset/{jobset}/{attempt}", restart_attempt=attempt)
    else:
        ref_name, ref_uid = _owner_job(pod)
        name = _first(labels, JOB_NAME_LABELS) or ref_name
        uid = _first(labels, JOB_UID_LABELS) or ref_uid
        if name and uid:
            gang = Gang(KIND_JOB, namespace, name, f"job/{uid}", job_uid=uid)
    if gang is None or not namespace:
        return None
    if not all(_WORD.fullmatch(piece) for piece in gang.key.split("/")[1:] + [gang.name, namespace]):
        return None
    if not re.fullmatch(GANG_KEY_PATTERN, gang.key, re.ASCII):  # (the placeholder identity's grammar)
        return None
    return gang


def owner_of(pod: Obj) -> str:
    """What the scheduler keys a Pod's work by: its gang's owner, or, for a Pod alone, its UID."""
    gang = gang_of(pod)
    return gang.owner if gang is not None else str(pod["metadata"]["uid"])


# -- how many members a gang expects -----------------------------------------------------------------
@frozen
class Expected:
    """How many members a gang needs before its job is submitted, or why that is not known (yet)."""

    size: Optional[int]
    why: str = ""


def _int(value: object) -> Optional[int]:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    text = str(value).strip() if value is not None else ""
    return int(text) if text.isascii() and text.isdigit() and len(text) < 10 else None


def job_size(job: Obj) -> int:
    """What a Job's controller keeps running (module docstring); 0 for a suspended Job."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    if spec.get("suspend"):
        return 0
    parallelism = _int(spec.get("parallelism"))
    parallelism = 1 if parallelism is None else parallelism
    completions = _int(spec.get("completions"))
    if completions is None:
        return parallelism
    return max(0, min(parallelism, completions - (_int(status.get("succeeded")) or 0)))


def expected(gang: Gang, pods: Sequence[Obj], *, job: Optional[Obj] = None, pod_group: Optional[Obj] = None,
             child_jobs: Sequence[Obj] = ()) -> Expected:
    """How many members ``gang`` expects. ``pods`` are its members that live; ``job`` is the Job (for a
    Job's gang), ``pod_group`` the PodGroup, ``child_jobs`` the Jobs of the JobSet (any restart attempt)."""
    where = gang.describe()
    if gang.kind == KIND_JOB:
        if job is None:
            return Expected(None, f"waiting for Job {gang.namespace}/{gang.name} to be known")
        return Expected(job_size(job))
    if gang.kind == KIND_POD_GROUP:
        if pod_group is None:
            return Expected(None, f"PodGroup {gang.namespace}/{gang.name} not found (is the scheduler-plugins "
                                  f"PodGroup CRD installed, and the scheduler's --gang-pod-groups on?)")
        size = _int((pod_group.get("spec") or {}).get("minMember"))
        if not size:
            return Expected(None, f"PodGroup {gang.namespace}/{gang.name} has no spec.minMember")
        return Expected(size)
    if gang.kind == KIND_LWS:
        sizes = {str(annotations_of(p).get(LWS_SIZE, "")).strip() for p in pods}
        if len(sizes) > 1:
            return Expected(None, f"{where}: its Pods disagree on {LWS_SIZE} ({', '.join(sorted(sizes))})")
        size = _int(next(iter(sizes))) if sizes else None
        if not size:
            return Expected(None, f"{where}: its Pods carry no {LWS_SIZE} annotation")
        return Expected(size)
    return _jobset_expected(gang, child_jobs)


def _jobset_expected(gang: Gang, child_jobs: Sequence[Obj]) -> Expected:
    where = gang.describe()
    mine = [j for j in child_jobs
            if labels_of(j).get(JOBSET_NAME) == gang.name
            and str(labels_of(j).get(JOBSET_RESTART_ATTEMPT) or "0") == gang.restart_attempt
            and (not gang.part or labels_of(j).get(JOBSET_REPLICATED_JOB) == gang.part)]
    if not mine:
        return Expected(None, f"waiting for the Jobs of {where} to be known")
    if gang.part:
        count = _int(labels_of(mine[0]).get(JOBSET_REPLICATED_JOB_REPLICAS))
        label = JOBSET_REPLICATED_JOB_REPLICAS
    else:
        count = _int(labels_of(mine[0]).get(JOBSET_GLOBAL_REPLICAS))
        label = JOBSET_GLOBAL_REPLICAS
    if count is None:
        return Expected(None, f"{where}: its Jobs do not say how many there are ({label}; older JobSet releases "
                              f"do not set it): annotate its Pods {names.ANN_GANG}: {MODE_REPLICATED_JOB}")
    if len(mine) < count:
        return Expected(None, f"{where}: {len(mine)} of its {count} Jobs exist")
    return Expected(sum(job_size(j) for j in mine))


def missing(gang_description: str, present: int, size: int) -> str:
    """The wait of a gang that has not filled up: ``Job ns/train: 2 of 3 members exist``."""
    return f"{gang_description}: {present} of {size} members exist"


# -- members ---------------------------------------------------------------------------------------
def _index(pod: Obj, key: str) -> tuple[int, ...]:
    value = labels_of(pod).get(key)
    if value is None:
        value = annotations_of(pod).get(key)
    number = _int(value)
    return _LAST if number is None else (number,)


def member_order(pod: Obj) -> tuple[Any, ...]:
    """Leader first (a LeaderWorkerSet's worker 0), then by the JobSet's Job index, the Job's completion
    index, then by name and UID: the same order on every reconcile and after a restart."""
    meta = pod.get("metadata") or {}
    return (_index(pod, LWS_WORKER_INDEX), _index(pod, JOBSET_JOB_GLOBAL_INDEX),
            str(labels_of(pod).get(JOBSET_REPLICATED_JOB) or ""), _index(pod, JOBSET_JOB_INDEX),
            _index(pod, JOB_COMPLETION_INDEX), str(meta.get("name") or ""), str(meta.get("uid") or ""))


def _pod_name(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


@frozen
class Disagreement:
    """Members of one gang that say different things where the one job can say only one."""

    field: str
    says: tuple[tuple[str, tuple[str, ...]], ...]  # (value, "" for none; the Pods that say it)

    def __str__(self) -> str:
        parts = [f"{', '.join(pods)} {'say ' + repr(value) if value else 'say nothing'}"
                 for value, pods in self.says]
        return f"{self.field}: the gang's Pods disagree: {'; '.join(parts)}"


GPU_AFFINITY_FIELD = "spec.affinity.nodeAffinity (gpu.nvidia.com/class, gpu.nvidia.com/model)"


def disagreements(pods: Sequence[Obj]) -> tuple[Disagreement, ...]:
    """Each annotation of the seeds' table, and the GPU class/model affinity, on which members differ."""
    found = []
    for key in (*TABLE_ANNOTATIONS, GPU_AFFINITY_FIELD):
        says: dict[str, list[str]] = {}
        for pod in pods:
            if key == GPU_AFFINITY_FIELD:
                try:
                    value = "&".join("|".join(clause) for clause in gpu_clauses(pod))
                except ValueError as exc:  # (a validation problem of its own, reported with the Pod's)
                    value = f"invalid: {exc}"
            else:
                value = str(annotations_of(pod).get(key, "")).strip()
            says.setdefault(value, []).append(_pod_name(pod))
        if len(says) > 1:
            found.append(Disagreement(key, tuple((value, tuple(p)) for value, p in says.items())))
    return tuple(found)


@frozen
class PerNode:
    """What the job asks on each of its nodes: for each resource, the most any member asked."""

    cpus: int
    memory_mb: int
    gpus: int


def per_node(pods: Sequence[Obj]) -> PerNode:
    """Each resource's largest request over the members, after Slurm's rounding (whole CPUs, MiB): so
    every node has room for whichever member lands there. ValueError for a malformed quantity."""
    shares = []
    for pod in pods:
        requests = pod_requests(pod)
        shares.append((cpus(requests.get("cpu", Decimal(0))), megabytes(requests.get("memory", Decimal(0))),
                       int(requests.get(GPU_RESOURCE, Decimal(0)))))
    if not shares:
        raise ValueError("a gang needs at least one member")
    return PerNode(*(max(share[i] for share in shares) for i in range(3)))


def max_members(gang: Gang, scheduler: str) -> int:
    """The largest gang whose job's identity fits ``IDENTITY_MAX``:
    about 100 members for a Job's gang in a namespace of 10 characters. Asked at every reconcile of a gang
    and the same for all of them: encoding trial identities of ~100 members each time was a tenth of the
    scheduler's CPU in a burst of gangs, so the answer is kept per (key, namespace, scheduler)."""
    return _max_members(gang.key, gang.namespace, scheduler)


@functools.lru_cache(maxsize=4096)
def _max_members(key: str, namespace: str, scheduler: str) -> int:
    def length(size: int) -> int:
        identity = PlaceholderIdentity(GangKey(namespace, key), namespace, size=size,
                                       members=("0" * MEMBER_TAG_CHARS,) * size, scheduler=scheduler)
        return len(identity.text())

    size = max(1, (IDENTITY_MAX - length(1)) // (MEMBER_TAG_CHARS + 1) + 1)
    while size > 1 and length(size) > IDENTITY_MAX:
        size -= 1
    return size if length(size) <= IDENTITY_MAX else 0


def has_started(job: Job) -> bool:
    """The placeholder has started: Slurm runs it and every node's prolog has finished.

    Only slurmctld writes what this reads. With ``PrologFlags=Alloc`` the job's reason is ``Prolog``
    from its allocation until the last node's prolog has reported completion (slurmctld itself relies
    on that to hold back job steps, and the batch script with ``DeferBatch``); sunk's prolog returns
    only once the Syncer has
    strictly locked the node, and stops the job (requeued, held) when it cannot, so a RUNNING job
    past its prolog holds locked nodes. ``CONFIGURING`` (nodes booting, or PrologSlurmctld running)
    comes before that. The placeholder's started call only says "look now": it is no evidence.
    """
    return job.state == "RUNNING" and "CONFIGURING" not in job.state_flags and job.state_reason != PROLOG_REASON
