"""The Pod scheduler's reconciler: one unit's key in, one step towards "its Pods bound where Slurm put its job".

A unit is a gang (sunk/translate/gang.py), keyed by its owner (``GangKey``, ``gang:<ns>/<key>``), or a
lone Pod, a gang of one keyed by its UID (``PodKey``) rather than namespace/name: a deleted Pod still has
a UID in its job's identity, so "Pod gone -> cancel job" needs no tombstones, and a Pod recreated under
the same name is a different Pod with a different job. One path for both: facts, ``decide``, ``_act``;
a gang is decided whole in one reconcile (one job, every member bound in one pass). A member's UID that
reaches the queue anyway is reconciled as its gang, under a lock per gang, so two workers never decide
one gang at once. A key's ``str()`` is what is queued, logged, indexed and signed into hook tokens.
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

from sunk.controller.runtime import Result
from sunk.kube.events import EventRecorder
from sunk.kube.store import IndexedStore, pod_node_name
from sunk.model import hostlist, names
from sunk.model.slurm import JobRequest, Node, NodeUpdate, SubmitLimits
from sunk.model.types import Obj
from sunk.scripts import shipped_script
from sunk.slurm.client import SlurmClient
from sunk.slurm.errors import AuthenticationFailed, NotFound, OutcomeUnknown, SlurmError, SlurmUnavailable
from sunk.translate import dra, drains, placeholder, podjob, slurmd
from sunk.translate.drains import DeviceMismatchDrain, StuckPodDrain, SunkDrain, held_by_another
from sunk.translate.gang import Gang, disagreements, gang_of, max_members, member_order
from sunk.translate.identity import IDENTITY_MAX
from sunk.translate.keys import GangKey, PodKey, UnitKey, unit_key
from sunk.translate.objects import is_deleting, is_terminal, pod_ready, scheduling_gates
from sunk.translate.placement import selector_problems
from sunk.translate.stuckpod import drain_for, grace_ends_at, should_drain

from . import kubeops
from .binder import Binder, Binding
from .claims import ClaimsChanged, ClaimsNotReady, ClaimsView, DeviceMismatch
from .config import SchedulerConfig
from .decide import (
    Action,
    Bind,
    BindMembers,
    CancelJobs,
    DeleteMembers,
    FindJob,
    Invalid,
    MemberFacts,
    Nothing,
    ReleaseJob,
    ReleaseStuck,
    Share,
    Submit,
    UnitFacts,
    Unschedulable,
    Waiting,
    decide,
    share,
)
from .gangs import Workloads, workload_keys
from .jobindex import JobIndex
from .metrics import PLACEHOLDER_SUBMISSIONS, STUCK_PODS_RELEASED
from .outage import outage_event
from .placement import NodePlacement
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
# Slurm refused a job whose exclusion names a node it does not know yet (a slurmd Pod Ready, its slurmd still
# registering): asked again after this long.
UNREGISTERED_NODE_RETRY = 5.0
RECHECK_FLOOR = 0.5  # a unit judged to wait in its partitions looks again no sooner (the next list's time)
# A job whose cancel Slurm accepted is not cancelled again for this long: the jobs informer may show it
# active a while yet (in a burst of changes its reads queue up for seconds), and a second cancel is a
# Slurm call for nothing. Past it, a job still shown active is cancelled again.
CANCEL_SETTLE = 60.0
CANCELLED_KEPT = 4096  # past this many, the settled cancels are forgotten
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


UNBOUND = "unbound"  # the one value of PodIndex's "unbound" index


class PodIndex:
    """Our Pods by UID and by the Node they are bound to, over the (possibly multi-namespace) Pod informer."""

    def __init__(self, informer: Any):
        self.informer = informer
        informer.add_indexer("uid", lambda pod: [pod["metadata"]["uid"]])
        informer.add_indexer("node", pod_node_name)
        informer.add_indexer("gang", lambda pod: [gang.owner] if (gang := gang_of(pod)) is not None else [])
        informer.add_indexer("workload", workload_keys)
        informer.add_indexer("unbound", lambda pod: [] if is_deleting(pod) or pod_node_name(pod) else [UNBOUND])

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

    def unbound(self) -> list[Obj]:
        """The Pods not bound and not being deleted: what waits for Slurm, never a walk of every Pod."""
        return list(self.informer.by_index("unbound", UNBOUND))

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

    def ready_slurm_node_on(self, k8s_node: str) -> str | None:
        """``slurm_node_on``, among the Ready slurmd Pods only (a node Slurm knows, most likely): as
        ``placement.ready_slurm_nodes`` maps them, a replacement not yet Ready elsewhere aside."""
        for name in sorted({slurmd.slurm_node_name(p) for p in self.informer.by_index(self.HOSTING, k8s_node)
                            if pod_ready(p)}):
            pod = slurmd.chosen([p for p in self.informer.by_index(self.SERVING, name) if pod_ready(p)])
            if pod is not None and slurmd.k8s_node_name(pod) == k8s_node:
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
    """Reconciler: gathers a unit's facts, asks decide(), carries out the action.

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
    claims: ClaimsView | None = None  # with --dra-device-mapping: the Pods' ResourceClaims (scheduler/claims.py)
    nudge: Callable[[], None] = lambda: None  # ask the Slurm cache to refresh now
    node_ready: Callable[[str], bool] = lambda _node: True  # a Kubernetes Node is Ready (locktaint.NodeHealth)
    # The Slurm nodes a unit's nodeSelector, required node affinity and untolerated taints rule out
    # (scheduler/placement.py); None: not judged (a process with no Node informer: tests).
    node_placement: Optional[NodePlacement] = None
    clock: Callable[[], float] = time.time  # wall clock: deletionTimestamps are the apiserver's
    # What the Slurm backend cannot submit (pyslurm: prefer, exclusive topo): such a Pod is refused, saying why.
    submit_limits: SubmitLimits = attrs.field(default=attrs.Factory(
        lambda self: getattr(self.slurm, "submit_limits", SubmitLimits()), takes_self=True))
    _submit_slots: threading.BoundedSemaphore = attrs.field(init=False)
    _last_reported: dict[str, str] = attrs.field(init=False, factory=dict)  # Pod UID -> "reason:message"
    _waiting_since: dict[str, float] = attrs.field(init=False, factory=dict)  # start of a passing wait
    # Pod UID -> when this process last wrote its waiting condition (time.monotonic): the writes' rate limit.
    _condition_written: dict[str, float] = attrs.field(init=False, factory=dict)
    # Pod UID -> Slurm's pending reason for its job ("" for none), while it waits: sunk_pods_waiting.
    _waiting_reason: dict[str, str] = attrs.field(init=False, factory=dict)
    monotonic: Callable[[], float] = time.monotonic  # for what is timed on this process's own clock
    _gang_locks: tuple[threading.Lock, ...] = attrs.field(init=False)
    _binding_pool: ThreadPoolExecutor = attrs.field(init=False)  # its threads start at the first gang
    # Job id -> when Slurm accepted this process's cancel of it (``monotonic``): see CANCEL_SETTLE.
    _cancelled: dict[int, float] = attrs.field(init=False, factory=dict)
    _cancelled_lock: threading.Lock = attrs.field(init=False, factory=threading.Lock)

    def __attrs_post_init__(self) -> None:
        self._submit_slots = threading.BoundedSemaphore(self.config.submit_concurrency)
        self._gang_locks = tuple(threading.Lock() for _ in range(GANG_LOCK_STRIPES))
        self._binding_pool = ThreadPoolExecutor(max_workers=GANG_BIND_CONCURRENCY, thread_name_prefix="bind-gang")

    # -- the reconcile loop ---------------------------------------------------------------
    def reconcile(self, key: str) -> Result:
        """One unit: a lone Pod (``PodKey``, its UID) or a gang (``GangKey``, ``gang:<ns>/<key>``). A member's
        UID is reconciled as its gang, under the gang's lock, so two workers never decide one gang at once."""
        try:
            unit = unit_key(key)
        except ValueError:
            log.warning("%s: not a Pod's or a gang's key; dropped", key)
            return Result()
        pod = self.pods.by_uid(unit.uid) if isinstance(unit, PodKey) else None
        if pod is not None and (gang := self.gang_of(pod)) is not None:
            unit = gang.unit
        if isinstance(unit, PodKey):
            return self._reconcile(unit, pod)
        with self._gang_locks[zlib.crc32(str(unit).encode()) % GANG_LOCK_STRIPES]:
            for member in self.pods.in_gang(str(unit)):
                if self.gang_of(member) is None:  # a member with a job of its own keeps it, alone
                    self._reconcile(PodKey(member["metadata"]["uid"]), member)
            return self._reconcile(unit)

    def _reconcile(self, unit: UnitKey, pod: Obj | None = None) -> Result:
        members, action, gang = self.unit_placement(unit, pod)
        for member in members:
            if member["spec"].get("nodeName"):
                self.binder.forget(member["metadata"]["uid"])  # the watch shows the binding: no need to assume it
        log.debug("%s: %s", unit, action)
        return self._act(unit, gang, members, action)

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

    def placement(self, pod: Obj | None, uid: str) -> Share:
        """One Pod's part of its unit's decision, from memory only and with no side effect: the extender's
        verbs call it, from their HTTP threads."""
        gang = self.gang_of(pod) if pod is not None else None
        unit: UnitKey = gang.unit if gang is not None else PodKey(uid)
        action = self.unit_placement(unit, pod)[1]
        if isinstance(action, Submit) and self.node_placement is not None:
            # (a unit no Node admits is not submitted: it waits for one, and says so)
            if (why := self.node_placement.why_waiting(str(unit))) is not None:
                return Nothing(why)
        return share(action, uid)

    def unit_placement(self, unit: UnitKey, pod: Obj | None = None) -> tuple[list[Obj], Action, Optional[Gang]]:
        """The unit's Pods (a gang's in member order), its decision and its ``Gang`` (None for a lone Pod), from
        memory only, with no side effect. ``pod``: a lone Pod as the caller has it (else read by its UID)."""
        gang = None
        if isinstance(unit, PodKey):
            found = pod if pod is not None else self.pods.by_uid(unit.uid)
            members = [found] if found is not None else []
            facts = UnitFacts(unit, members=tuple(self.member_facts(p) for p in members))
        else:
            members = sorted((p for p in self.pods.in_gang(str(unit)) if self.gang_of(p) is not None),
                             key=member_order)
            gang = gang_of(members[0]) if members else None
            facts = self.gang_facts(unit, gang, members)
        known = self.jobs.view(str(unit))  # one read: see JobIndex
        action = decide(facts, known.jobs, expected_job_id=known.expected_job_id, refused=known.refused,
                        node_of=self.slurmd.mapping(), started=known.started, in_doubt=known.in_doubt,
                        now=self.clock(), stuck_margin=self.config.stuck_pod_margin)
        return members, action, gang

    def gang_facts(self, unit: GangKey, gang: Optional[Gang], members: Sequence[Obj]) -> UnitFacts:
        facts = tuple(self.member_facts(pod) for pod in members)
        if gang is None:
            return UnitFacts(unit, describe=str(unit), members=facts)
        live = [p for p in members if not is_deleting(p) and not is_terminal(p)]
        expected = self.workloads.expected(gang, live)
        waiting = [p for p, f in zip(members, facts, strict=True) if f.live and f.bound_node is None and not f.gated]
        problems: tuple[str, ...] = ()
        if expected.size and expected.size > (most := max_members(gang, self.config.scheduler_name)):
            problems = (f"{gang.describe()}: a gang of {expected.size} members does not fit one Slurm job's identity "
                        f"({IDENTITY_MAX} bytes with a tag of each member): at most {most}",)
        found = [str(d) for d in disagreements(waiting)]
        if self.claims is not None and (claims := self.claims.gang_disagreement(waiting)):
            found.append(claims)
        return UnitFacts(unit, describe=gang.describe(), members=facts, expected=expected.size,
                         why=expected.why, disagreements=tuple(found), problems=problems)

    def member_facts(self, pod: Obj) -> MemberFacts:
        """What decide() reads of a Pod; one this process bound counts as bound until the watch shows it."""
        meta, spec = pod["metadata"], pod["spec"]
        annotations = meta.get("annotations") or {}
        assumed = None if spec.get("nodeName") else self.binder.assumed(meta["uid"])
        bound = spec.get("nodeName") or (assumed.node if assumed is not None else None)
        job_id = assumed.job_id if assumed is not None and assumed.job_id is not None else _annotated_job_id(pod)
        slurm_node = ((assumed.slurm_node if assumed is not None else "") or annotations.get(names.ANN_SLURM_NODE)
                      or (self.slurmd.slurm_node_on(bound) if bound else None))
        deleting = is_deleting(pod)
        finished = str((pod.get("status") or {}).get("phase")) if is_terminal(pod) else ""
        return MemberFacts(
            uid=meta["uid"], name=f"{meta['namespace']}/{meta['name']}", bound_node=bound,
            slurm_node=slurm_node or None, job_id=job_id, deleting=deleting, finished=finished,
            placed_by_us=names.ANN_JOB_ID in annotations or assumed is not None,
            problems=() if bound else self.problems(pod),
            waiting_for=self.claims.waiting_for(pod) if self.claims is not None and not bound else "",
            gated="" if bound else ", ".join(scheduling_gates(pod)),
            grace_ends_at=grace_ends_at(pod) if deleting else None,
            node_lost=bool((deleting or finished) and bound and not self.node_ready(bound)))

    def problems(self, pod: Obj) -> tuple[str, ...]:
        """Why this Pod cannot have a placeholder job: its annotations' form, then its identity policy."""
        claims = self.claims
        return tuple(str(p) for p in (*podjob.validate_pod(pod, self.config.kill_wait_seconds,
                                                           claims_allowed=claims is not None),
                                      *podjob.backend_problems(pod, self.submit_limits),
                                      *self.config.identity_policy.problems(pod),
                                      *selector_problems(pod),
                                      *(claims.problems(pod) if claims is not None else ())))

    def _act(self, unit: UnitKey, gang: Optional[Gang], members: list[Obj], action: Action) -> Result:
        key = str(unit)
        known = {p["metadata"]["uid"]: p for p in members}

        def pod(uid: str) -> Obj:
            if uid not in known:  # (decide() names only the unit's Pods: an error, not an assert, under -O too)
                raise RuntimeError(f"{unit}: {action!r} for a Pod that is gone")
            return known[uid]

        if not isinstance(action, Waiting):
            self._waiting_since.pop(key, None)  # whatever it waited for is over
        waiting = set(action.members) if isinstance(action, Waiting) and action.job_id is not None else set()
        for uid in {*known, key} - waiting:
            self._waiting_reason.pop(uid, None)
        match action:
            case Nothing(recheck_after=recheck_after):
                if not members:
                    self._forget(key)
                return Result(requeue_after=recheck_after)
            case CancelJobs(job_ids=job_ids, message=message):
                for job_id in job_ids:
                    self._cancel(job_id, message)
                return Result()
            case Submit(members=uids):
                return self._submit(unit, gang, [pod(uid) for uid in uids])
            case FindJob():
                # Settled by the jobs informer's next list (it shows the job, or a list requested after the
                # doubt does not), which wakes the unit: no Slurm call of its own per unit.
                self.nudge()
                return Result(requeue_after=LOST_ANSWER_SETTLE)
            case BindMembers(binds=binds):
                return self._bind([(pod(uid), where) for uid, where in binds])
            case Waiting():
                return self._wait(key, [pod(uid) for uid in action.members], action)
            case Invalid(problems=problems):
                for uid, message in problems:
                    self.report(pod(uid), "Warning", "FailedValidation", message)
                    kubeops.mark_unschedulable(self.api, pod(uid), f"sunk: {message}")
                return Result()  # no retry until a member changes
            case Unschedulable(members=uids, message=message):
                for uid in uids:
                    self.report(pod(uid), "Warning", "Unschedulable", message)
                    kubeops.mark_unschedulable(self.api, pod(uid), message)
                return Result()
            case ReleaseStuck(member=uid):
                # Its node drained (k8s: sunk-stuck, naming the Pod), the job cancelled; a gang's job's end then
                # deletes the other members, and the gang is placed again, whole.
                return self._release_stuck(pod(uid), action)
            case ReleaseJob(member=uid, job_id=job_id, phase=phase):
                self._cancel(job_id, f"its Pod {phase.lower()}")
                self.report(pod(uid), "Normal", "SlurmJobReleased",
                            f"the Pod {phase.lower()}: Slurm job {job_id} ended, its node is free for the next job")
                return Result()
            case DeleteMembers(members=uids, reason=reason, message=message):
                for gone in map(pod, uids):
                    self.report(gone, "Warning" if reason != "JobEnded" else "Normal", reason, message)
                    log.info("pod %s/%s: deleting it (%s): %s", gone["metadata"]["namespace"],
                             gone["metadata"]["name"], reason, message)
                    kubeops.delete_pod(self.api, gone)
                return Result()
            case _:
                assert_never(action)

    # -- actions ------------------------------------------------------------------------------
    def _wait(self, key: str, pods: list[Obj], waiting: Waiting) -> Result:
        """Report why the members wait, with one grace for the unit's whole passing wait (a job that goes
        Priority -> Resources -> Priority in a full cluster is still reported). A wait for a gang's own
        members (no job yet) is a ``WaitingForGang`` Event; one for Slurm shows on every waiting member:
        the job, its partition and Slurm's reason, and the job id recorded."""
        if waiting.job_id is not None:
            for pod in pods:
                self._waiting_reason[pod["metadata"]["uid"]] = waiting.slurm_reason
        if waiting.passing:
            since = self._waiting_since.setdefault(key, time.monotonic())
            left = since + PASSING_WAIT_GRACE - time.monotonic()
            if left > 0:
                return Result(requeue_after=left)
        else:
            self._waiting_since.pop(key, None)
        results = []
        for pod in pods:
            if waiting.job_id is None:
                self.report(pod, "Normal", waiting.event, waiting.reason)
            else:
                # (written at submission; again only if that write was lost: no write when the Pod shows it)
                kubeops.record_job(self.api, pod, {names.ANN_JOB_ID: str(waiting.job_id)})
                results.append(self._show_wait(pod, wait_condition(waiting.job_id, waiting.partition, waiting.reason)))
        after = min([WAITING_RESYNC, waiting.recheck_after or WAITING_RESYNC,
                     *(r.requeue_after for r in results if r.requeue_after is not None)])
        return Result(requeue_after=after)

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

    def _submit(self, unit: UnitKey, gang: Optional[Gang], pods: list[Obj]) -> Result:
        """The unit's placeholder job, with this scheduler's settings and the unit's hook token (signed over
        the key's string: the Pod's UID, or the gang's owner)."""
        token = hook_token(self.config.hook_secret, str(unit))
        if gang is None:  # a lone Pod
            meta = pods[0]["metadata"]
            plan = self.claims.plan(pods[0]) if self.claims is not None else None
            request = placeholder.job_request(pods[0], placeholder_settings(self.config), hook_token=token,
                                              claimed_gpus=plan.gpus if plan is not None else None,
                                              claimed_type=plan.gres_type if plan is not None else "",
                                              claimed_shards=plan.shards if plan is not None else 0)
            return self._submit_request(str(unit), request, pods, f"pod {meta['namespace']}/{meta['name']}")
        request = placeholder.gang_job_request(
            gang, pods, placeholder_settings(self.config), size=len(pods), hook_token=token,
            gpus_per_node=self.claims.gpus_per_node(pods) if self.claims is not None else None,
            claimed_type=self.claims.gres_type(pods) if self.claims is not None else "")
        return self._submit_request(str(unit), request, pods, f"{gang.describe()} ({len(pods)} members)")

    def _submit_request(self, owner: str, request: JobRequest, pods: Sequence[Obj], what: str) -> Result:
        """Submit a placeholder job for ``owner`` (a Pod's UID, or a gang's owner) on behalf of ``pods``
        (the Pod, or the gang's members): each of them hears of a failure. The Slurm nodes whose Node a
        member's nodeSelector, required node affinity or untolerated taints rule out are excluded
        (scheduler/placement.py); too few left, nothing is submitted: the Pods say so, and wait for a Node
        that admits them."""
        original_exclusion = request.excluded_nodes
        if self.node_placement is not None:
            partitions = tuple(p for p in (request.partition or "").split(",") if p)
            exclusion, generation = self.node_placement.exclusion(pods, partitions)
            if exclusion.problem:
                current = self.node_placement.wait(owner, pods, generation, exclusion.problem)
                log.info("%s: not submitted: %s", what, exclusion.problem)
                for pod in pods:
                    self.report(pod, "Warning", "Unschedulable", exclusion.problem)
                    kubeops.mark_unschedulable(self.api, pod, exclusion.problem)
                # Woken by a Node or slurmd Pod that may match (assembly.attach_placement_feed); at once if one
                # changed while this looked; and, judged in partitions, when what they hold may have changed
                # in Slurm (no Kubernetes event says so).
                if not current:
                    return Result(requeue=True)
                if exclusion.partitions:
                    return Result(requeue_after=max(self.node_placement.recheck_in(generation), RECHECK_FLOOR))
                return Result()
            self.node_placement.settle(owner)
            if exclusion.excluded:
                # (as one hostlist expression: 5000 names are 70 KB of a request, and of the job's record)
                request = attrs.evolve(request, excluded_nodes=(*request.excluded_nodes,
                                                                hostlist.compress(exclusion.excluded)))
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
                if request.excluded_nodes != original_exclusion and "invalid node name" in str(exc).lower():
                    # A Slurm node sunk excluded is not Slurm's yet (its slurmd Pod is Ready, its slurmd still
                    # registering): not a verdict on the Pod; asked again shortly.
                    PLACEHOLDER_SUBMISSIONS.labels("unavailable").inc()
                    log.warning("%s: Slurm does not know yet a node its exclusion names, asking again in %gs: %s",
                                what, UNREGISTERED_NODE_RETRY, exc)
                    return Result(requeue_after=UNREGISTERED_NODE_RETRY)
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

    def _bind(self, binds: list[tuple[Obj, Bind]]) -> Result:
        """Every member to its node, at once (a lone Pod's one binding in this thread): each binding is a round
        trip or two (the lock toleration, the Binding), and one after the other a gang of 64 took longer than
        Slurm took to start it. Every member is tried (every worker's gangs
        share ``GANG_BIND_CONCURRENCY`` bindings in flight); the first failure is raised then (the reconcile
        is retried, the bound skipped)."""

        def bind(item: tuple[Obj, Bind]) -> Optional[Exception]:
            pod, placement = item
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

    def gang_holders(self, gang: GangKey, job_id: int) -> list[Obj]:
        """The gang's members that may still run on job ``job_id``'s nodes: bound by it (its job-id
        annotation, or this process's binding) and not finished. What the placeholder waits on as
        its job ends, and the nodes it drains if one outlives KillWait."""
        holders = []
        for pod in self.pods.in_gang(str(gang)):
            meta = pod["metadata"]
            assumed = None if pod["spec"].get("nodeName") else self.binder.assumed(meta["uid"])
            placed_by = assumed.job_id if assumed is not None else _annotated_job_id(pod)
            bound = pod["spec"].get("nodeName") or assumed is not None
            if bound and placed_by == job_id and not is_terminal(pod):
                holders.append(pod)
        return holders

    def _bind_directly(self, pod: Obj, bind: Bind) -> None:
        """sunk-scheduler's binding step: bind, and say so once (kube-scheduler says so for the extender)."""
        if self.bind_placed(pod, bind) is Binding.BOUND:
            self.report(pod, "Normal", "Scheduled",
                        f"Slurm job {bind.job_id} runs on Slurm node {bind.slurm_node}; bound to Node {bind.k8s_node}")

    def bind_placed(self, pod: Obj, bind: Bind) -> Binding:
        """Bind the Pod where Slurm placed its job (the Binder: its ResourceClaims filled first), for both front
        ends. Claims that are not ready raise ``ClaimsNotReady`` after an Event (the caller retries); claims that
        can never be filled as placed end the job (``Binding.REFUSED``, the Pod's Events say why)."""
        try:
            bound = self.binder.bind(pod, bind)
        except ClaimsNotReady as exc:
            self.report(pod, "Normal", "WaitingForResourceClaims", f"not bound yet: {exc}")
            raise
        except DeviceMismatch as exc:
            self._devices_disagree(pod, bind, exc.mismatch)
            return Binding.REFUSED
        except ClaimsChanged as exc:
            self._cancel(bind.job_id, f"its Pod's ResourceClaims changed: {exc}")
            self.report(pod, "Warning", "ResourceClaimsChanged", f"not bound: {exc}; Slurm job {bind.job_id} cancelled")
            return Binding.REFUSED
        return Binding.BOUND if bound else Binding.ALREADY

    def _release_stuck(self, pod: Obj, release: ReleaseStuck) -> Result:
        """Let go of the job of a Pod stuck terminating on a NotReady or gone Node: drain its nodes (so
        that Slurm starts nothing where containers may still run), then cancel it. The drain's
        reason (``k8s: sunk-stuck: ...``, sunk.translate.drains) names the Pod, its UID and its Node; the
        Syncer lifts it once no Pod with that UID exists and the Node is Ready."""
        meta = pod["metadata"]
        where = f"{meta['namespace']}/{meta['name']}"
        drain = StuckPodDrain(meta["namespace"], meta["name"], meta["uid"], release.k8s_node, release.job_id)
        for node in release.slurm_nodes:
            self._drain(node, drain, lambda current: should_drain(current.drained, current.reason, drain))
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

    def _devices_disagree(self, pod: Obj, bind: Bind, mismatch: dra.Mismatch) -> None:
        """Slurm's GRES and the DRA driver disagree on the Node (``dra.Mismatch``): the Pod is not bound, its
        Slurm node drained (``k8s: sunk-dra: ...``, so that Slurm gives those devices to no job or Pod until
        they agree; the Syncer lifts it then) and its job cancelled (the Pod goes with it, and its owner
        makes it again, placed elsewhere)."""
        meta = pod["metadata"]
        drain = DeviceMismatchDrain(bind.k8s_node, mismatch.detail)
        self._drain(bind.slurm_node, drain, lambda current: not current.drained or drains.parse(current.reason) is None)
        self._cancel(bind.job_id, f"Slurm's GRES and the DRA driver's devices disagree on Node {bind.k8s_node}")
        self.report(pod, "Warning", "DeviceMismatch",
                    f"not bound: {mismatch.message}; Slurm node {bind.slurm_node} drained and job {bind.job_id} "
                    f"cancelled")
        log.warning("pod %s/%s: not bound to %s: %s; drained %s and cancelled job %d", meta["namespace"],
                    meta["name"], bind.k8s_node, mismatch.message, bind.slurm_node, bind.job_id)

    def stuck_drain_reason(self, pod: Obj, job_id: int) -> str | None:
        """The drain reason for a Pod terminating on a Node that is NotReady or gone, else None: the
        hook API's drain (the Pod outlived KillWait) says the same as ``_release_stuck`` does, so that
        neither replaces the other's with a reason lifted sooner."""
        drain = drain_for(pod, job_id)
        if drain is None or not pod["metadata"].get("deletionTimestamp") or self.node_ready(drain.k8s_node):
            return None
        return drain.reason()

    def _drain(self, node: str, drain: SunkDrain, replaces: Callable[[Node], bool]) -> None:
        """Drain ``node`` with ``drain``'s reason, unless someone else's drain holds it or ``replaces`` says the
        drain there must stay (Slurm keeps one reason per node)."""
        reason = drain.reason()
        try:
            current = self.slurm.read_node(node)  # fresh, the node alone: a drain of a moment ago is kept
        except NotFound:
            return
        if held_by_another(current) or not replaces(current):
            if current.reason != reason:
                log.info("slurm node %s: drained already (%r); left as it is", node, current.reason)
            return
        self.slurm.update_node(node, NodeUpdate(state="DRAIN", reason=reason))
        log.info("slurm node %s: drained: %s", node, reason)

    def _cancel(self, job_id: int, why: str) -> None:
        now = self.monotonic()
        with self._cancelled_lock:
            accepted = self._cancelled.get(job_id)
            if accepted is not None and now - accepted < CANCEL_SETTLE:
                log.debug("job %d: cancelled %.1fs ago, not again (%s)", job_id, now - accepted, why)
                return
        try:
            self.slurm.cancel_job(job_id)
            log.info("cancelled job %d: %s", job_id, why)
        except NotFound:
            pass  # gone already: as good as cancelled
        with self._cancelled_lock:
            self._cancelled[job_id] = now
            if len(self._cancelled) > CANCELLED_KEPT:  # forget the settled ones, now and then
                self._cancelled = {j: t for j, t in self._cancelled.items() if now - t < CANCEL_SETTLE}
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
        if self.node_placement is not None:
            self.node_placement.settle(uid)
        self._waiting_since.pop(uid, None)
        self._condition_written.pop(uid, None)
        self._waiting_reason.pop(uid, None)
        self.binder.forget(uid)
        self.jobs.forget(uid)


def _describe(unit: UnitKey, members: Sequence[Obj]) -> str:
    """A unit for the log: ``pod <ns>/<name>``, or ``gang <owner>``."""
    if isinstance(unit, PodKey) and members:
        return f"pod {members[0]['metadata']['namespace']}/{members[0]['metadata']['name']}"
    return f"{'pod' if isinstance(unit, PodKey) else 'gang'} {unit}"


def _annotated_job_id(pod: Obj | None) -> int | None:
    if pod is None:
        return None
    value = (pod["metadata"].get("annotations") or {}).get(names.ANN_JOB_ID, "")
    # (anybody may write the annotation: "²" is a digit to isdigit() and not to int())
    return int(value) if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 20 else None
