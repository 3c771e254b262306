"""The Pod scheduler's reconciler: one Pod UID in, one step towards "Pod bound where Slurm put its job".

Keyed by Pod UID rather than namespace/name: a deleted Pod still has a UID in its
job's Extra, so "Pod gone -> cancel job" needs no tombstones, and a Pod recreated under
the same name is a different Pod with a different job.

A gang's members (sunk/translate/gang.py) are keyed by their gang's owner (``gang:<ns>/<key>``)
instead, so the whole gang is decided in one reconcile (``reconcile_gang``): one job, every member
bound in one pass. A member's UID that reaches the queue anyway is reconciled as its gang, under a
lock per gang, so two workers never decide one gang at once.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional, assert_never

import attrs
from kubernetes.client import ApiClient

from sunk import names
from sunk.controller.runtime import Result
from sunk.kube.events import EventRecorder
from sunk.kube.store import IndexedStore, pod_node_name
from sunk.scripts import shipped_script
from sunk.slurm.client import SlurmClient
from sunk.slurm.errors import AuthenticationFailed, NotFound, OutcomeUnknown, SlurmError, SlurmUnavailable
from sunk.slurm.freshread import FreshRead
from sunk.slurm.models import Job, JobRequest, NodeUpdate
from sunk.translate import placeholder, podjob, slurmd
from sunk.translate.drains import StuckPodDrain, held_by_another
from sunk.translate.gang import (
    IDENTITY_MAX,
    Gang,
    disagreements,
    gang_of,
    is_gang_owner,
    max_members,
    member_order,
)
from sunk.translate.objects import is_deleting, is_terminal
from sunk.translate.stuckpod import drain_for, grace_ends_at, should_drain
from sunk.types import Obj

from . import kubeops
from .binder import Binder
from .config import SchedulerConfig
from .decide import (
    Action,
    Bind,
    BindGang,
    CancelJobs,
    DeleteMembers,
    DeletePod,
    FindJob,
    GangAction,
    GangFacts,
    GangInvalid,
    GangUnschedulable,
    GangWaiting,
    Invalid,
    MemberFacts,
    Nothing,
    PodAction,
    PodFacts,
    ReleaseJob,
    ReleaseStuckMember,
    ReleaseStuckPod,
    Submit,
    SubmitGang,
    Unschedulable,
    Waiting,
    decide,
    decide_gang,
)
from .gangs import Workloads, member_action, workload_keys
from .jobindex import JobIndex
from .metrics import PLACEHOLDER_SUBMISSIONS, STUCK_PODS_RELEASED
from .outage import outage_event
from .tokens import hook_token
from .waiting import WaitCondition, current_condition, wait_condition, waiting_exposition, write_due

log = logging.getLogger(__name__)

PLACEHOLDER_SCRIPT = shipped_script("placeholder.sh")  # (self-contained: Slurm runs it from its spool)

# Safety net only: Slurm cache events, the placeholder's "started" call and Pod watches
# drive every transition.
WAITING_RESYNC = 30.0
# A passing wait (see decide.Waiting) becomes an Event once it has lasted this long.
PASSING_WAIT_GRACE = 10.0
# After a submission's answer was lost, the wait before the Pod's job is looked up in Slurm: a
# connection that broke mid-request may leave the submission a moment more in slurmrestd.
LOST_ANSWER_SETTLE = 2.0
# Gangs are decided under one of these locks (by a hash of the gang's owner): bounded, never cleaned up.
GANG_LOCK_STRIPES = 256
# Gang members' bindings in flight at once, in the whole process (sunk-scheduler's: a toleration patch and a
# Binding each): one pool for every worker, so a burst of gangs never opens more connections than this.
GANG_BIND_CONCURRENCY = 16


def placeholder_settings(config: SchedulerConfig) -> placeholder.Settings:
    """What this scheduler puts in every placeholder job, a Pod's or a gang's."""
    return placeholder.Settings(
        script=PLACEHOLDER_SCRIPT, kill_wait_seconds=config.kill_wait_seconds, scheduler=config.scheduler_name,
        hooks_url=config.hooks_url, hooks_ca_file=config.hooks_ca_file, default_partition=config.default_partition,
        gpu_types=dict(config.gpu_types), policy=config.identity_policy)


class PodIndex:
    """Our Pods by UID and by the Node they are bound to, over the (possibly multi-namespace) Pod informer."""

    def __init__(self, informer: Any):
        self.informer = informer
        informer.add_indexer("uid", lambda pod: [pod["metadata"]["uid"]])
        informer.add_indexer("node", pod_node_name)
        informer.add_indexer("gang", lambda pod: [gang.owner] if (gang := gang_of(pod)) is not None else [])
        informer.add_indexer("workload", workload_keys)

    def by_uid(self, uid: str) -> Obj | None:
        found = self.informer.by_index("uid", uid)
        return found[0] if found else None

    def on_node(self, node: str) -> list[Obj]:
        return list(self.informer.by_index("node", node))

    def in_gang(self, owner: str) -> list[Obj]:
        """Every Pod of the gang (any state), in no particular order."""
        return list(self.informer.by_index("gang", owner))

    def of_workload(self, key: str) -> list[Obj]:
        """The Pods a workload's change concerns (gangs.workload_keys)."""
        return list(self.informer.by_index("workload", key))

    def uids(self) -> set[str]:
        return {pod["metadata"]["uid"] for pod in self.informer.list()}


class SlurmdNodes:
    """Slurm node name <-> Kubernetes Node, read from the slurmd Pods by the one mapping every
    component uses (``sunk.translate.slurmd``: the Pod's hostname, else its name).

    Each lookup reads the informer's indexes (``serving``, ``hosting``), which its store keeps
    as the slurmd Pods come and go: O(the Pods claiming that one node), never a walk of all the
    slurmd Pods (rebuilding the whole map at every reconcile cost 7.4 ms at 5000 nodes).
    """

    SERVING = "slurmd-serving"  # Slurm node -> the slurmd Pods that may serve it
    HOSTING = "slurmd-hosting"  # Kubernetes Node -> the same Pods, by where they run

    def __init__(self, informer: IndexedStore):
        self.informer = informer
        informer.add_indexer(self.SERVING, slurmd.serving)
        informer.add_indexer(self.HOSTING, slurmd.hosting)

    def node_of(self, slurm_node: str) -> str | None:
        """The Kubernetes Node serving ``slurm_node``, if a slurmd Pod serves it."""
        pod = slurmd.chosen(self.informer.by_index(self.SERVING, slurm_node))
        return slurmd.k8s_node_name(pod) if pod is not None else None

    def slurm_node_on(self, k8s_node: str) -> str | None:
        """The Slurm node a slurmd Pod on ``k8s_node`` serves (the newest such Pod's, if several)."""
        for name in sorted({slurmd.slurm_node_name(p) for p in self.informer.by_index(self.HOSTING, k8s_node)}):
            if self.node_of(name) == k8s_node:
                return name
        return None

    def mapping(self) -> SlurmNodeMap:
        """``node_of`` as the read-only Mapping decide() takes: each ``get`` one index lookup."""
        return SlurmNodeMap(self)


class SlurmNodeMap(Mapping[str, str]):
    """Slurm node -> Kubernetes Node, looked up in the slurmd index at each read, never copied.

    Iterating (``len``, ``items``) walks every slurmd Pod: for tests and logs, not for a reconcile.
    """

    def __init__(self, nodes: SlurmdNodes):
        self._nodes = nodes

    def __getitem__(self, slurm_node: str) -> str:
        node = self._nodes.node_of(slurm_node)
        if node is None:
            raise KeyError(slurm_node)
        return node

    def __iter__(self) -> Iterator[str]:
        return iter(slurmd.node_of(self._nodes.informer.list()))

    def __len__(self) -> int:
        return len(slurmd.node_of(self._nodes.informer.list()))


@attrs.define
class PodScheduler:
    """Reconciler: gathers a Pod's facts, asks decide(), carries out the action.

    ``binder`` binds Pods (scheduler/binder.py) and remembers those it bound until the Pod
    watch shows them. ``on_bind``, if set, takes the place of binding where decide() says
    Bind: the extender readies the Pod for kube-scheduler, whose call to its bind verb then
    binds through the same Binder. ``on_submit(pod, job_id)``, if set, is the front end's
    word to the Pod once the job exists.
    """

    api: ApiClient
    slurm: SlurmClient
    config: SchedulerConfig
    jobs: JobIndex
    pods: PodIndex
    slurmd: SlurmdNodes
    recorder: EventRecorder
    binder: Binder = attrs.field(default=attrs.Factory(lambda self: Binder(self.api), takes_self=True))
    on_bind: Callable[[Obj, Bind], None] | None = None
    on_submit: Callable[[Obj, int], None] | None = None
    workloads: Workloads = attrs.field(factory=Workloads)  # what gangs are sized by
    nudge: Callable[[], None] = lambda: None  # ask the Slurm cache to refresh now
    node_ready: Callable[[str], bool] = lambda _node: True  # a Kubernetes Node is Ready (locktaint.NodeHealth)
    clock: Callable[[], float] = time.time  # wall clock: deletionTimestamps are the apiserver's
    # Slurm's jobs as of a list that began after the caller asked; lookups after lost answers share it.
    fresh_jobs: FreshRead[tuple[Job, ...]] = attrs.field(default=attrs.Factory(
        lambda self: FreshRead(lambda: self.slurm.list_jobs().items or ()), takes_self=True))
    _submit_slots: threading.BoundedSemaphore = attrs.field(init=False)
    _last_reported: dict[str, str] = attrs.field(init=False, factory=dict)  # Pod UID -> "reason:message"
    _waiting_since: dict[str, float] = attrs.field(init=False, factory=dict)  # start of a passing wait
    # Pod UID -> when this process last wrote its waiting condition (time.monotonic): the writes' rate limit.
    _condition_written: dict[str, float] = attrs.field(init=False, factory=dict)
    # Pod UID -> Slurm's pending reason for its job ("" for none), while it waits: sunk_pods_waiting.
    _waiting_reason: dict[str, str] = attrs.field(init=False, factory=dict)
    _gang_locks: tuple[threading.Lock, ...] = attrs.field(init=False)
    _binding_pool: ThreadPoolExecutor = attrs.field(init=False)  # its threads start at the first gang

    def __attrs_post_init__(self) -> None:
        self._submit_slots = threading.BoundedSemaphore(self.config.submit_concurrency)
        self._gang_locks = tuple(threading.Lock() for _ in range(GANG_LOCK_STRIPES))
        self._binding_pool = ThreadPoolExecutor(max_workers=GANG_BIND_CONCURRENCY, thread_name_prefix="bind-gang")

    # -- the reconcile loop ---------------------------------------------------------------
    def reconcile(self, key: str) -> Result:
        """One Pod (by UID) or one gang (by its owner, ``gang:<ns>/<key>``)."""
        if is_gang_owner(key):
            return self.reconcile_gang(key)
        pod = self.pods.by_uid(key)
        gang = self.gang_of(pod) if pod is not None else None
        if gang is not None:
            return self.reconcile_gang(gang.owner)
        return self._reconcile_pod(key, pod)

    def _reconcile_pod(self, uid: str, pod: Obj | None) -> Result:
        if pod is not None and pod["spec"].get("nodeName"):
            self.binder.forget(uid)  # the Pod watch shows the binding: no need to assume it any longer
        action = self.placement(pod, uid)
        log.debug("pod %s: %s", uid, action)
        return self._act(uid, pod, action)

    def gang_of(self, pod: Obj) -> Optional[Gang]:
        """The Pod's gang; None for a Pod placed alone, and for one that already has a job of its own
        (placed before its workload ganged, by an older scheduler: it keeps that job)."""
        gang = gang_of(pod)
        if gang is None:
            return None
        own = self.jobs.view(pod["metadata"]["uid"])
        if own.jobs or own.expected_job_id is not None or own.in_doubt:
            return None
        return gang

    def placement(self, pod: Obj | None, uid: str) -> Action:
        """The decision for one Pod, from memory only and with no side effect: the extender's
        verbs call it too, from their HTTP threads. A gang's member gets its share of the gang's."""
        gang = self.gang_of(pod) if pod is not None else None
        if gang is not None:
            return member_action(self.gang_placement(gang.owner)[1], uid)
        known = self.jobs.view(uid)  # one read: see JobIndex
        return decide(
            self.facts(pod) if pod is not None else None,
            known.jobs,
            expected_job_id=known.expected_job_id,
            recorded_job_id=_annotated_job_id(pod),
            refused=known.refused,
            node_of=self.slurmd.mapping(),
            started=known.started,
            in_doubt=known.in_doubt,
            now=self.clock(),
            stuck_margin=self.config.stuck_pod_margin,
        )

    def facts(self, pod: Obj) -> PodFacts:
        """What decide() reads of a Pod; one this process bound counts as bound until the watch shows it."""
        meta, spec = pod["metadata"], pod["spec"]
        assumed = None if spec.get("nodeName") else self.binder.assumed_node(meta["uid"])
        bound_node = spec.get("nodeName") or assumed
        problems = () if bound_node else self.problems(pod)
        deleting = bool(meta.get("deletionTimestamp"))
        finished = str((pod.get("status") or {}).get("phase")) if is_terminal(pod) else ""
        return PodFacts(
            uid=meta["uid"],
            bound_node=bound_node,
            deleting=deleting,
            placed_by_us=names.ANN_JOB_ID in (meta.get("annotations") or {}) or assumed is not None,
            problems=problems,
            grace_ends_at=grace_ends_at(pod) if deleting else None,
            node_lost=bool((deleting or finished) and bound_node and not self.node_ready(bound_node)),
            finished=finished,
        )

    def problems(self, pod: Obj) -> tuple[str, ...]:
        """Why this Pod cannot have a placeholder job: its annotations' form, then its identity policy."""
        return tuple(str(p) for p in (*podjob.validate_pod(pod, self.config.kill_wait_seconds),
                                      *self.config.identity_policy.problems(pod)))

    def _act(self, uid: str, pod: Obj | None, action: Action) -> Result:
        if not isinstance(action, Waiting):
            self._waiting_since.pop(uid, None)  # whatever it waited for is over
            self._waiting_reason.pop(uid, None)
        match action:
            case Nothing(recheck_after=recheck_after):
                if pod is None:
                    self._forget(uid)
                return Result(requeue_after=recheck_after)
            case CancelJobs(job_ids=job_ids, message=message):
                for job_id in job_ids:
                    self._cancel(job_id, message)
                return Result()
            case Submit() | FindJob() | Invalid() | Bind() | Waiting() | Unschedulable() | DeletePod() \
                    | ReleaseStuckPod() | ReleaseJob():
                if pod is None:  # (decide() has only Nothing and CancelJobs for a Pod that is gone)
                    raise RuntimeError(f"pod {uid}: {action!r} for a Pod that is gone")
                return self._act_on_pod(uid, pod, action)
            case _:
                assert_never(action)

    def _act_on_pod(self, uid: str, pod: Obj, action: PodAction) -> Result:
        match action:
            case Waiting():
                return self._wait(uid, pod, action)
            case Invalid(problems=problems):
                message = "; ".join(problems)
                self.report(pod, "Warning", "FailedValidation", message)
                kubeops.mark_unschedulable(self.api, pod, f"sunk: {message}")
                return Result()  # no retry until the Pod changes
            case Unschedulable(message=message):
                self.report(pod, "Warning", "Unschedulable", message)
                kubeops.mark_unschedulable(self.api, pod, message)
                return Result()
            case Submit():
                return self._submit(pod)
            case FindJob():
                return self._find_job(uid, pod)
            case ReleaseStuckPod():
                return self._release_stuck(pod, action)
            case ReleaseJob(job_id=job_id, phase=phase):
                self._cancel(job_id, f"its Pod {phase.lower()}")
                self.report(pod, "Normal", "SlurmJobReleased",
                            f"the Pod {phase.lower()}: Slurm job {job_id} ended, its node is free for the next job")
                return Result()
            case Bind():
                if self.on_bind is not None:
                    self.on_bind(pod, action)  # the front end's own binding step
                else:
                    self._bind_directly(pod, action)
                return Result()
            case DeletePod(reason=reason, message=message):
                self.report(pod, "Warning" if reason != "JobEnded" else "Normal", reason, message)
                log.info("pod %s/%s: deleting it (%s): %s", pod["metadata"]["namespace"], pod["metadata"]["name"],
                         reason, message)
                kubeops.delete_pod(self.api, pod)
                return Result()
            case _:
                assert_never(action)

    # -- actions ------------------------------------------------------------------------------
    def _wait(self, uid: str, pod: Obj, waiting: Waiting) -> Result:
        self._waiting_reason[uid] = waiting.slurm_reason
        if not waiting.passing:
            self._waiting_since.pop(uid, None)
        else:
            # One grace for the whole wait, whichever passing step it is in: a job that goes
            # Priority -> Resources -> Priority in a full cluster is still reported.
            since = self._waiting_since.setdefault(uid, time.monotonic())
            left = since + PASSING_WAIT_GRACE - time.monotonic()
            if left > 0:
                return Result(requeue_after=left)
        # (written at submission; again only if that write was lost: no write when the Pod shows it)
        kubeops.record_job(self.api, pod, {names.ANN_JOB_ID: str(waiting.job_id)})
        return self._show_wait(pod, wait_condition(waiting.job_id, waiting.partition, waiting.reason))

    def _show_wait(self, pod: Obj, condition: WaitCondition) -> Result:
        """PodScheduled=False saying why the Pod waits, and a ``WaitingForSlurm`` Event with each new message
        (scheduler/waiting.py): nothing when the Pod shows it already, at most one write per Pod every
        ``CONDITION_MIN_INTERVAL``; a write held back is made when the requeue comes, with the reason then.

        Pods that bind within the passing grace get neither: their binding sets PodScheduled=True. A restart
        writes nothing the Pod already shows.
        """
        uid = pod["metadata"]["uid"]
        now = time.monotonic()
        due = write_due(current_condition(pod), condition, self._condition_written.get(uid), now)
        if due is None:
            return Result(requeue_after=WAITING_RESYNC)
        if due > 0:
            return Result(requeue_after=due)
        if kubeops.show_waiting(self.api, pod, condition.as_condition()):
            self._condition_written[uid] = now
            self.report(pod, "Normal", condition.reason, condition.message)
        else:  # the Pod already said it (our informer's copy was behind) or is gone: no write, no Event
            self._condition_written.setdefault(uid, now)
        return Result(requeue_after=WAITING_RESYNC)

    def waiting_exposition(self) -> str:
        """``sunk_pods_waiting{reason}`` now (read at scrape time; a copy, the workers write meanwhile)."""
        return waiting_exposition(list(self._waiting_reason.values()))

    def _submit(self, pod: Obj) -> Result:
        meta = pod["metadata"]
        what = f"pod {meta['namespace']}/{meta['name']}"
        return self._submit_request(meta["uid"], self._job_request(pod), [pod], what)

    def _submit_request(self, owner: str, request: JobRequest, pods: Sequence[Obj], what: str) -> Result:
        """Submit a placeholder job for ``owner`` (a Pod's UID, or a gang's owner) on behalf of ``pods``
        (the Pod, or the gang's members): each of them hears of a failure."""
        with self._submit_slots:
            try:
                job_id = self.slurm.submit_job(request)
            except OutcomeUnknown as exc:
                # Slurm may have made the job: never submit again before looking for it (FindJob).
                PLACEHOLDER_SUBMISSIONS.labels("unknown").inc()
                self.jobs.doubt(owner)
                self.nudge()
                log.warning("%s: the answer to its submission was lost; looking for its job in Slurm "
                            "before submitting again: %s", what, exc)
                return Result(requeue_after=LOST_ANSWER_SETTLE)
            except AuthenticationFailed as exc:
                # Slurm refused our token: an outage of ours, never a verdict on the Pod. The client
                # logged it with the token's source; the controller retries with backoff.
                PLACEHOLDER_SUBMISSIONS.labels("auth_failed").inc()
                for pod in pods:
                    self.report(pod, "Warning", *outage_event(exc))
                raise
            except SlurmUnavailable as exc:
                PLACEHOLDER_SUBMISSIONS.labels("unavailable").inc()
                for pod in pods:
                    self.report(pod, "Warning", "SlurmUnavailable", f"cannot reach Slurm, will retry: {exc}")
                raise  # retried with backoff by the controller
            except SlurmError as exc:
                # Slurm answered and said no (unknown account, QOS or partition, a request no
                # node can satisfy...): its answer will not change by asking again.
                PLACEHOLDER_SUBMISSIONS.labels("refused").inc()
                message = f"Slurm refused the placeholder job: {exc}"
                self.jobs.refuse(owner, message)
                self.nudge()  # Slurm may have recorded the job as FAILED: let the cache show it
                for pod in pods:
                    self.report(pod, "Warning", "FailedSubmit", message)
                    kubeops.mark_unschedulable(self.api, pod, message)
                return Result()
        PLACEHOLDER_SUBMISSIONS.labels("submitted").inc()
        self.jobs.expect(owner, job_id)
        self.nudge()
        # The job id on the Pod at once (docs/scheduler.md: what a user sees), and no Event: "Scheduled"
        # (with the binding) or "WaitingForSlurm" (with the waiting condition) follow. 200 Pods at once
        # wrote 200 Events nobody read.
        log.info("%s: submitted placeholder job %d", what, job_id)
        for pod in pods:
            if self.on_submit is not None:
                self.on_submit(pod, job_id)  # (the extender's writes the job id, with the lock toleration)
            else:
                kubeops.record_job(self.api, pod, {names.ANN_JOB_ID: str(job_id)})
        return Result(requeue_after=WAITING_RESYNC)  # the cache's event for the new job comes first

    def _find_job(self, uid: str, pod: Obj) -> Result:
        """Settle a lost submission from a fresh job list: adopt the Pod's job if Slurm made it, else
        submit again. A list that fails leaves the doubt in place (retried with backoff)."""
        meta = pod["metadata"]
        self._settle(uid, f"pod {meta['namespace']}/{meta['name']}")
        return self._act(uid, pod, self.placement(pod, uid))  # decided again: the doubt is settled

    def _settle(self, owner: str, what: str) -> None:
        jobs, requested_at = self.fresh_jobs.read_with_time()
        found = self.jobs.settle(owner, jobs, requested_at)
        if found:
            PLACEHOLDER_SUBMISSIONS.labels("adopted").inc()
            log.info("%s: found job %s in Slurm, made by a submission whose answer was lost; adopted it",
                     what, ",".join(map(str, found)))
        else:
            log.info("%s: no job in Slurm from the submission whose answer was lost; submitting again", what)

    def _job_request(self, pod: Obj) -> JobRequest:
        """The placeholder job for this Pod, with this scheduler's settings and the Pod's hook token."""
        return placeholder.job_request(pod, placeholder_settings(self.config),
                                       hook_token=hook_token(self.config.hook_secret, pod["metadata"]["uid"]))

    # -- gangs ------------------------------------------------------------------------------------
    def reconcile_gang(self, owner: str) -> Result:
        """One step for a whole gang: decided and carried out under the gang's lock."""
        with self._gang_locks[zlib.crc32(owner.encode()) % GANG_LOCK_STRIPES]:
            for pod in self.pods.in_gang(owner):
                if self.gang_of(pod) is None:  # a member with a job of its own keeps it, alone
                    self._reconcile_pod(pod["metadata"]["uid"], pod)
            members, action, gang = self.gang_placement(owner)
            for pod in members:
                if pod["spec"].get("nodeName"):
                    self.binder.forget(pod["metadata"]["uid"])  # the watch shows the binding
            log.debug("gang %s: %s", owner, action)
            return self._act_gang(owner, gang, members, action)

    def gang_placement(self, owner: str) -> tuple[list[Obj], GangAction, Optional[Gang]]:
        """The gang's members (in member order), its decision and its ``Gang``, from memory only, with no
        side effect (the extender's verbs ask it for one member, from their HTTP threads)."""
        members = sorted((p for p in self.pods.in_gang(owner) if self.gang_of(p) is not None), key=member_order)
        gang = gang_of(members[0]) if members else None
        node_of = self.slurmd.mapping()
        facts = self.gang_facts(owner, gang, members)
        known = self.jobs.view(owner)  # one read: see JobIndex
        action = decide_gang(facts, known.jobs, expected_job_id=known.expected_job_id, refused=known.refused,
                             node_of=node_of, started=known.started, in_doubt=known.in_doubt, now=self.clock(),
                             stuck_margin=self.config.stuck_pod_margin)
        return members, action, gang

    def gang_facts(self, owner: str, gang: Optional[Gang], members: Sequence[Obj]) -> GangFacts:
        facts = tuple(self.member_facts(pod) for pod in members)
        if gang is None:
            return GangFacts(owner=owner, describe=owner, members=facts)
        live = [p for p in members if not is_deleting(p) and not is_terminal(p)]
        expected = self.workloads.expected(gang, live)
        waiting = [p for p, f in zip(members, facts, strict=True) if f.live and f.bound_node is None]
        problems: tuple[str, ...] = ()
        if expected.size and expected.size > (most := max_members(gang, self.config.scheduler_name)):
            problems = (f"{gang.describe()}: a gang of {expected.size} members does not fit one Slurm job's identity "
                        f"({IDENTITY_MAX} bytes with a tag of each member): at most {most}",)
        return GangFacts(owner=owner, describe=gang.describe(), members=facts, expected=expected.size,
                         why=expected.why, disagreements=tuple(str(d) for d in disagreements(waiting)),
                         problems=problems)

    def member_facts(self, pod: Obj) -> MemberFacts:
        """What decide_gang() reads of a member; one this process bound counts as bound until the watch shows it."""
        meta, spec = pod["metadata"], pod["spec"]
        annotations = meta.get("annotations") or {}
        assumed = None if spec.get("nodeName") else self.binder.assumed(meta["uid"])
        bound = spec.get("nodeName") or (assumed.node if assumed is not None else None)
        job_id = assumed.job_id if assumed is not None and assumed.job_id is not None else _annotated_job_id(pod)
        slurm_node = ((assumed.slurm_node if assumed is not None else "") or annotations.get(names.ANN_SLURM_NODE)
                      or (self.slurmd.slurm_node_on(bound) if bound else None))
        deleting = is_deleting(pod)
        return MemberFacts(
            uid=meta["uid"], name=f"{meta['namespace']}/{meta['name']}", bound_node=bound,
            slurm_node=slurm_node or None, job_id=job_id, deleting=deleting, terminal=is_terminal(pod),
            placed_by_us=names.ANN_JOB_ID in annotations or assumed is not None,
            problems=() if bound else self.problems(pod),
            grace_ends_at=grace_ends_at(pod) if deleting else None,
            node_lost=bool(deleting and bound and not self.node_ready(bound)))

    def _act_gang(self, owner: str, gang: Optional[Gang], members: list[Obj], action: GangAction) -> Result:
        by_uid = {p["metadata"]["uid"]: p for p in members}
        if not isinstance(action, GangWaiting):
            self._waiting_since.pop(owner, None)  # whatever it waited for is over
        waiting = set(action.members) if isinstance(action, GangWaiting) and action.job_id is not None else set()
        for uid in by_uid.keys() - waiting:
            self._waiting_reason.pop(uid, None)
        match action:
            case Nothing(recheck_after=recheck_after):
                if not members:
                    self._forget_gang(owner)
                return Result(requeue_after=recheck_after)
            case CancelJobs(job_ids=job_ids, message=message):
                for job_id in job_ids:
                    self._cancel(job_id, message)
                return Result()
            case SubmitGang(members=uids):
                if gang is None:  # (decide_gang submits only for members, which have a gang)
                    raise RuntimeError(f"gang {owner}: {action!r} without members")
                return self._submit_gang(owner, gang, [by_uid[uid] for uid in uids])
            case FindJob():
                self._settle(owner, f"gang {owner}")
                members, action, gang = self.gang_placement(owner)  # decided again: the doubt is settled
                return self._act_gang(owner, gang, members, action)
            case BindGang(binds=binds):
                return self._bind_gang(by_uid, binds)
            case GangWaiting():
                return self._wait_gang(owner, [by_uid[uid] for uid in action.members], action)
            case GangInvalid(problems=problems):
                for uid, message in problems:
                    self.report(by_uid[uid], "Warning", "FailedValidation", message)
                    kubeops.mark_unschedulable(self.api, by_uid[uid], f"sunk: {message}")
                return Result()  # no retry until a member changes
            case GangUnschedulable(members=uids, message=message):
                for uid in uids:
                    self.report(by_uid[uid], "Warning", "Unschedulable", message)
                    kubeops.mark_unschedulable(self.api, by_uid[uid], message)
                return Result()
            case ReleaseStuckMember(member=uid, job_id=job_id, slurm_nodes=slurm_nodes, k8s_node=k8s_node):
                # As a single Pod's: its node drained (k8s: sunk-stuck, naming the member), the job cancelled;
                # the job's end then deletes the other members, and the gang is placed again, whole.
                return self._release_stuck(by_uid[uid], ReleaseStuckPod(job_id, slurm_nodes, k8s_node))
            case DeleteMembers(members=uids, reason=reason, message=message):
                for uid in uids:
                    pod = by_uid[uid]
                    self.report(pod, "Warning" if reason != "JobEnded" else "Normal", reason, message)
                    log.info("pod %s/%s: deleting it (%s): %s", pod["metadata"]["namespace"],
                             pod["metadata"]["name"], reason, message)
                    kubeops.delete_pod(self.api, pod)
                return Result()
            case _:
                assert_never(action)

    def _submit_gang(self, owner: str, gang: Gang, members: list[Obj]) -> Result:
        request = placeholder.gang_job_request(gang, members, placeholder_settings(self.config), size=len(members),
                                               hook_token=hook_token(self.config.hook_secret, owner))
        return self._submit_request(owner, request, members, f"{gang.describe()} ({len(members)} members)")

    def _bind_gang(self, by_uid: dict[str, Obj], binds: tuple[tuple[str, Bind], ...]) -> Result:
        """Every member to its node, at once: each binding is a round trip or two (the lock toleration, the
        Binding), and one after the other a gang of 64 took longer than Slurm took to start it. Every
        member is tried (every worker's gangs share ``GANG_BIND_CONCURRENCY`` bindings in flight); the first
        failure is raised then (the reconcile is retried, the bound skipped)."""

        def bind(item: tuple[str, Bind]) -> Optional[Exception]:
            uid, placement = item
            pod = by_uid[uid]  # (decide_gang binds only members it was given)
            try:
                if self.on_bind is not None:
                    self.on_bind(pod, placement)  # the front end's own binding step
                else:
                    self._bind_directly(pod, placement)
            except Exception as exc:
                log.warning("pod %s/%s: binding to %s failed: %s", pod["metadata"]["namespace"],
                            pod["metadata"]["name"], placement.k8s_node, exc)
                return exc
            return None

        failures = [bind(binds[0])] if len(binds) == 1 else list(self._binding_pool.map(bind, binds))
        if failure := next((f for f in failures if f is not None), None):
            raise failure
        return Result()

    def _wait_gang(self, owner: str, pods: list[Obj], waiting: GangWaiting) -> Result:
        """As ``_wait``, with one grace for the gang; a wait for the gang's own members (no job yet) is a
        ``WaitingForGang`` Event, one for Slurm shows on every waiting member as a single Pod's does: the
        gang's job, its partition and Slurm's reason, and the job id recorded."""
        if waiting.job_id is not None:
            for pod in pods:
                self._waiting_reason[pod["metadata"]["uid"]] = waiting.slurm_reason
        if waiting.passing:
            since = self._waiting_since.setdefault(owner, time.monotonic())
            left = since + PASSING_WAIT_GRACE - time.monotonic()
            if left > 0:
                return Result(requeue_after=left)
        else:
            self._waiting_since.pop(owner, None)
        results = []
        for pod in pods:
            if waiting.job_id is None:
                self.report(pod, "Normal", "WaitingForGang", waiting.message)
            else:
                kubeops.record_job(self.api, pod, {names.ANN_JOB_ID: str(waiting.job_id)})
                why = waiting.message.removeprefix(f"Slurm job {waiting.job_id}: ")
                results.append(self._show_wait(pod, wait_condition(waiting.job_id, waiting.partition, why)))
        after = min([WAITING_RESYNC, waiting.recheck_after or WAITING_RESYNC,
                     *(r.requeue_after for r in results if r.requeue_after is not None)])
        return Result(requeue_after=after)

    def gang_holders(self, owner: str, job_id: int) -> list[Obj]:
        """The gang's members that may still run on job ``job_id``'s nodes: bound by it (its job-id
        annotation, or this process's binding) and not finished. What the placeholder waits on as
        its job ends, and the nodes it drains if one outlives KillWait."""
        holders = []
        for pod in self.pods.in_gang(owner):
            meta = pod["metadata"]
            assumed = None if pod["spec"].get("nodeName") else self.binder.assumed(meta["uid"])
            placed_by = assumed.job_id if assumed is not None else _annotated_job_id(pod)
            bound = pod["spec"].get("nodeName") or assumed is not None
            if bound and placed_by == job_id and not is_terminal(pod):
                holders.append(pod)
        return holders

    def _forget_gang(self, owner: str) -> None:
        self._waiting_since.pop(owner, None)
        self.jobs.forget(owner)

    def _bind_directly(self, pod: Obj, bind: Bind) -> None:
        """sunk-scheduler's binding step: bind, and say so once (kube-scheduler says so for the extender)."""
        if self.binder.bind(pod, bind):
            self.report(pod, "Normal", "Scheduled",
                        f"Slurm job {bind.job_id} runs on Slurm node {bind.slurm_node}; bound to Node {bind.k8s_node}")

    def _release_stuck(self, pod: Obj, release: ReleaseStuckPod) -> Result:
        """Let go of the job of a Pod stuck terminating on a NotReady or gone Node: drain its nodes (so
        that Slurm starts nothing where containers may still run), then cancel it. The drain's
        reason (``k8s: sunk-stuck: ...``, sunk.translate.drains) names the Pod, its UID and its Node; the
        Syncer lifts it once no Pod with that UID exists and the Node is Ready."""
        meta = pod["metadata"]
        where = f"{meta['namespace']}/{meta['name']}"
        drain = StuckPodDrain(meta["namespace"], meta["name"], meta["uid"], release.k8s_node, release.job_id)
        for node in release.slurm_nodes:
            self._drain(node, drain)
        self._cancel(release.job_id, f"its Pod {where} is stuck terminating on Node {release.k8s_node}, "
                                     f"which is NotReady or gone")
        STUCK_PODS_RELEASED.inc()
        nodes = ",".join(release.slurm_nodes) or "none"
        self.report(pod, "Warning", "StuckTerminating",
                    f"Node {release.k8s_node} is NotReady or gone and the Pod outlived its grace period: cancelled "
                    f"Slurm job {release.job_id}; Slurm node {nodes} stays drained until the Pod is gone and the "
                    f"Node Ready")
        log.warning("pod %s: stuck terminating on Node %s (NotReady or gone) past its grace period and %.0fs: "
                    "drained %s and cancelled job %d", where, release.k8s_node, self.config.stuck_pod_margin,
                    nodes, release.job_id)
        return Result()

    def stuck_drain_reason(self, pod: Obj, job_id: int) -> str | None:
        """The drain reason for a Pod terminating on a Node that is NotReady or gone, else None: the
        hook API's drain (the Pod outlived KillWait) says the same as ``_release_stuck`` does, so that
        neither replaces the other's with a reason lifted sooner."""
        drain = drain_for(pod, job_id)
        if drain is None or not pod["metadata"].get("deletionTimestamp") or self.node_ready(drain.k8s_node):
            return None
        return drain.reason()

    def _drain(self, node: str, drain: StuckPodDrain) -> None:
        reason = drain.reason()
        try:
            current = self.slurm.get_node(node)  # a fresh read: a person's drain of a moment ago is kept
        except NotFound:
            return
        if held_by_another(current) or not should_drain(current.drained, current.reason, drain):
            if current.reason != reason:
                log.info("slurm node %s: drained already (%r); left as it is", node, current.reason)
            return
        self.slurm.update_node(node, NodeUpdate(state="DRAIN", reason=reason))
        log.info("slurm node %s: drained: %s", node, reason)

    def _cancel(self, job_id: int, why: str) -> None:
        try:
            self.slurm.cancel_job(job_id)
            log.info("cancelled job %d: %s", job_id, why)
        except NotFound:
            pass
        self.nudge()

    def report(self, pod: Obj, type_: str, reason: str, message: str) -> None:
        """One Event per change of situation, not one per reconcile (also the outage notice's way)."""
        uid = pod["metadata"]["uid"]
        if self._last_reported.get(uid) == f"{reason}:{message}":
            return
        self._last_reported[uid] = f"{reason}:{message}"
        self.recorder.event(pod, type_, reason, message)  # type: ignore[arg-type]

    def _forget(self, uid: str) -> None:
        self._last_reported.pop(uid, None)
        self._waiting_since.pop(uid, None)
        self._condition_written.pop(uid, None)
        self._waiting_reason.pop(uid, None)
        self.binder.forget(uid)
        self.jobs.forget(uid)


def _annotated_job_id(pod: Obj | None) -> int | None:
    if pod is None:
        return None
    value = (pod["metadata"].get("annotations") or {}).get(names.ANN_JOB_ID, "")
    # (anybody may write the annotation: "²" is a digit to isdigit() and not to int())
    return int(value) if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 20 else None
