"""Wiring shared by both front ends (``sunk-scheduler`` and ``sunk-extender``).

Everything here runs inside the gunicorn worker (see sunk/commands/web.py): the informers, the
Slurm cache, the reconciler's workers and the HTTP app share one process's memory.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from typing import Any, Optional

import attrs
from kubernetes.client import ApiClient

from sunk.controller.daemon import DaemonConfig
from sunk.controller.handlers import EnqueueHandler, FuncEnqueuer
from sunk.controller.manager import Manager, Syncable
from sunk.controller.periodic import Periodic
from sunk.controller.runtime import Controller, Result
from sunk.kube.dra import claims_informer, classes_informer, slices_informer
from sunk.kube.events import EventRecorder
from sunk.kube.informer import Informer, MultiNamespaceInformer
from sunk.kube.resources import JOBS, NODES, PODGROUPS
from sunk.model import names
from sunk.model.slurm import Job
from sunk.model.types import Obj
from sunk.slurm.client import SlurmClient
from sunk.slurm.informer import JobInformer, SlurmInformerFactory
from sunk.slurm.readrequests import ReadRequest
from sunk.translate.dra import DeviceMapping
from sunk.translate.gang import gang_of, has_started, owner_of
from sunk.translate.identity import identity_of
from sunk.translate.keys import GangKey, UnitKey, unit_key
from sunk.translate.objects import is_terminal, node_ready, pod_ready
from sunk.translate.podstores import scheduler_slim_pod
from sunk.translate.slurmd import k8s_node_name, placement_view, serving
from sunk.translate.slurmd import node_of as slurm_node_map

from . import kubeops, metrics
from .binder import Binder
from .claims import INDEX_CLAIMS, ClaimAllocator, ClaimsView, claim_keys, pod_ended
from .config import (
    PENDING_REASON_INTERVAL,
    STARTED_CALL_PATIENCE,
    SWEEP_BATCH,
    UNREASONED_PENDING_INTERVAL,
    SchedulerConfig,
)
from .decide import Bind
from .expectations import Doubted
from .gangs import Workloads, key_of_pod_group, keys_of_job
from .hooks import HookPorts, PlaceholderHooks, PodGone, create_hooks_app
from .jobindex import IdentityParser, JobIndex
from .locktaint import LockTaints, NodeHealth, scheduler_slim_node
from .outage import OutageNotice
from .placement import NodePlacement, PartitionNodes
from .reconciler import PodIndex, PodScheduler, SlurmdNodes
from .sweep import RollingSweep

log = logging.getLogger(__name__)


def identity_parser(config: SchedulerConfig) -> IdentityParser:
    """Only this scheduler's jobs, in its scope: a Pod it cannot see is not its to judge. A single Pod's
    job is its Pod's UID's, a gang's its owner's (``gang:<namespace>/<key>``); started is Slurm's word
    (``gang.has_started``), never the placeholder's."""

    def parse(job: Job) -> tuple[str, bool] | None:
        identity = identity_of(job)
        if identity is None or identity.scheduler != config.scheduler_name:
            return None
        if config.namespaces and identity.namespace not in config.namespaces:
            return None
        return str(identity.unit), has_started(job)

    return parse


def slim_job(job: Obj) -> Obj:
    """What a Job's gang is sized by (gang.job_size, its labels for JobSets): a Job's Pod template can be large."""
    meta, spec = job.get("metadata") or {}, job.get("spec") or {}
    return {
        "apiVersion": job.get("apiVersion"), "kind": job.get("kind"),
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "labels", "resourceVersion") if k in meta},
        "spec": {k: spec[k] for k in ("parallelism", "completions", "completionMode", "suspend") if k in spec},
        "status": {k: v for k, v in (job.get("status") or {}).items() if k == "succeeded"},
    }


@attrs.frozen
class PlaceholderReads:
    """What the scheduler asks the Slurm jobs informer to read of its placeholders (``request_reads``), beyond
    their changes of state, which the job state list shows:

    - a placeholder Slurm runs but has not shown started (its prolog, which locks the node, still runs): at
      every refresh. The prolog's end changes the job's reason, not its state; so the Pods bind even when the
      started call was lost, without waiting for the next full job list.
    - a pending placeholder: every ``reason_every`` seconds (sooner, ``unreasoned_every``, while Slurm shows
      no reason yet), to show Slurm's reason on its Pods: a change of the reason alone is no change of state.
      The read makes it an informer change like any other, which requeues the unit through the job index.
      0: the reason is seen at the full job lists only.
    - a placeholder on its way to its started call (submitted by this process, pending, or in its prolog):
      its read may wait ``started_call_patience`` seconds for the hook API's read-back of the call (handed to
      the informer, ``observe``), so that Slurm is read once for it where it was read three times. The
      lister waits only for a start (an end, a requeue is read at once). 0: never waits.
    """

    parse: IdentityParser
    started_call_patience: float = STARTED_CALL_PATIENCE
    reason_every: float = PENDING_REASON_INTERVAL
    unreasoned_every: float = UNREASONED_PENDING_INTERVAL

    def request_for(self, job: Job) -> ReadRequest | None:
        """The request for ``job`` as the informer now holds it; None: none (not ours, started, ended)."""
        if not job.admin_comment:
            return None
        parsed = self.parse(job)
        if parsed is None:
            return None
        wait = max(self.started_call_patience, 0.0) if not parsed[1] else 0.0
        if job.state == "PENDING":
            every = None
            if self.reason_every > 0:
                unreasoned = job.state_reason in ("", "None")
                every = min(self.reason_every, self.unreasoned_every) if unreasoned else self.reason_every
            return ReadRequest(every, wait)
        if job.state == "RUNNING" and not parsed[1]:
            return ReadRequest(0.0, wait)
        return None

    def submitted(self) -> ReadRequest:
        """The request for a job this process just submitted, before any list shows it (``expected``: the
        jobs lister, which reads no job it does not hold unless asked, reads it once listed)."""
        return ReadRequest(wait_up_to=max(self.started_call_patience, 0.0), expected=True)

    def attach(self, jobs: JobInformer) -> Callable[[int], None]:
        """Keep ``jobs``' requests for this scheduler's placeholders as the informer's changes come (a job
        gone drops its own); returns what to call with a submitted job's id."""

        def put(job: Job) -> None:
            request(job.id, self.request_for(job))

        def request(job_id: int, wanted: ReadRequest | None) -> None:
            if wanted is None or wanted.empty:
                jobs.cancel_reads(job_id)
            else:
                jobs.request_reads(job_id, every=wanted.every, wait_up_to=wanted.wait_up_to, expected=wanted.expected)

        jobs.add_handler(on_add=put, on_update=lambda _old, new: put(new),
                         on_delete=lambda job: jobs.cancel_reads(job.id))
        def submitted(job_id: int) -> None:
            if jobs.get(job_id) is None:  # (once listed, its handler has asked for what its record needs)
                request(job_id, self.submitted())

        return submitted


# A submission whose answer was lost may have made a job this long before the doubt, or after it ended (the
# REST client's read timeout is 30 s; slurmctld may record the job after the client gave up): the jobs lister
# reads the jobs first listed from then until then.
LOST_SUBMISSION_LOOKBACK = 120.0


class NewJobReads:
    """When the jobs lister, which holds only this scheduler's placeholders and reads no other job, must read
    every job it has not read yet (``SlurmInformer.read_new_jobs``), so that a placeholder made without a
    job id this process knows is found, and never submitted again:

    - standing by (not leading, from the start): the leader's new placeholders are read as they are listed,
      so a replica that takes over holds them. It goes on ``LOST_SUBMISSION_LOOKBACK`` after it began to
      lead: the old leader's last submission may still be on its way to slurmctld.
    - a submission's answer lost (a doubt): the jobs first listed from ``LOST_SUBMISSION_LOOKBACK`` before
      the doubt, until ``LOST_SUBMISSION_LOOKBACK`` after it was settled or forgotten (a job slurmctld
      records late is then still seen at once, and the scheduler cancels the younger of two).

    Each stops once a whole list requested after its end is held.
    """

    STANDBY = "standby"

    def __init__(self, jobs: JobInformer):
        self._jobs = jobs
        self._lock = threading.Lock()
        self._ends: dict[str, float] = {}  # reason -> when it ends (the lister's clock)
        jobs.read_new_jobs(self.STANDBY, -math.inf)
        jobs.on_listed(self._listed)

    def leading(self) -> None:
        with self._lock:
            self._ends.setdefault(self.STANDBY, self._jobs.clock() + LOST_SUBMISSION_LOOKBACK)

    def doubt(self, key: str, doubt: Doubted | None) -> None:
        reason = f"doubt:{key}"
        with self._lock:
            if doubt is not None:
                self._ends.pop(reason, None)
                self._jobs.read_new_jobs(reason, doubt.since - LOST_SUBMISSION_LOOKBACK)
            else:
                self._ends[reason] = self._jobs.clock() + LOST_SUBMISSION_LOOKBACK

    def _listed(self, requested_at: float) -> None:
        with self._lock:
            for reason, end in list(self._ends.items()):
                if requested_at > end:
                    del self._ends[reason]
                    self._jobs.read_new_jobs(reason, None)

    def runnable(self) -> _Leading:
        """What the Manager starts once this replica leads."""
        return _Leading(self)


@attrs.frozen
class _Leading:
    reads: NewJobReads

    def start(self) -> None:
        self.reads.leading()

    def stop(self) -> None:
        pass


@attrs.define
class Assembly:
    manager: Manager
    scheduler: PodScheduler
    controller: Controller
    gone: PodGone
    parse: IdentityParser
    slurm_jobs: JobInformer

    def hooks_app(self) -> Any:
        return create_hooks_app(self.placeholder_hooks().blueprint())

    def placeholder_hooks(self) -> PlaceholderHooks:
        return PlaceholderHooks(HookPorts(
            secret=self.scheduler.config.hook_secret,
            jobs=ObservedJobs(self.scheduler.jobs, self.parse, self.slurm_jobs, self.controller.queue.add),
            pods=ScheduledPods(self.scheduler),
            slurm=self.scheduler.slurm,
            gone=self.gone,
            ready=self.hooks_ready,
        ))

    def hooks_ready(self) -> bool:
        """The hook API may answer: its Pod cache has synced and the process is not stopping."""
        return bool(self.scheduler.pods.informer.has_synced()) and not self.manager.stopping()


@attrs.frozen
class ObservedJobs:
    """The hook API's jobs (``HookJobs``): the job index, this scheduler's identity parser, and a job a
    placeholder reported started, read from Slurm, handed to the Slurm jobs informer and the index."""

    index: JobIndex
    parse: IdentityParser
    slurm_jobs: JobInformer
    wake: Callable[[str], None]

    def known_owner(self, job_id: int) -> UnitKey | None:
        owner = self.index.uid_of(job_id)  # (an owner the identity parser gave: str() of a key, which reads back)
        return unit_key(owner) if owner is not None else None

    def owner_of(self, job: Job) -> UnitKey | None:
        parsed = self.parse(job)
        return unit_key(parsed[0]) if parsed is not None else None

    def observe(self, job: Job, requested_at: float) -> None:
        # (to the informer's store, and its lister: its own read of the job, then, is one it need not make)
        uid = self.index.upsert(job, requested_at)
        if uid is not None:
            self.wake(uid)


@attrs.frozen
class ScheduledPods:
    """The hook API's Pods (``HookPods``): the scheduler's Pod index and gangs; a deletion says why in an Event."""

    scheduler: PodScheduler

    def by_uid(self, uid: str) -> Obj | None:
        return self.scheduler.pods.by_uid(uid)

    def gang_holders(self, gang: GangKey, job_id: int) -> list[Obj]:
        return self.scheduler.gang_holders(gang, job_id)

    def stuck_reason(self, pod: Obj, job_id: int) -> str | None:
        return self.scheduler.stuck_drain_reason(pod, job_id)

    def delete(self, pod: Obj, why: str) -> None:
        self.scheduler.recorder.event(pod, "Normal", "JobEnding", why)
        kubeops.delete_pod(self.scheduler.api, pod)


def assemble(
    daemon: DaemonConfig,
    config: SchedulerConfig,
    *,
    api: ApiClient,
    slurm: SlurmClient,
    slurm_jobs: JobInformer | None = None,
    on_bind: Callable[[Obj, Bind], None] | None = None,
    on_submit: Callable[[Obj, int], None] | None = None,
) -> Assembly:
    """Build (not start) the scheduler: ``on_bind``/``on_submit`` are the extender's, None for sunk-scheduler."""
    name = daemon.name
    manager = daemon.manager(api)
    # Jobs only: the scheduler reads no Slurm node (a Slurm node's Node comes from its slurmd Pod),
    # and 24.11 answers a node list with every partition even when nothing changed.
    parse = identity_parser(config)
    # Only its own placeholders: another tenant's job is never read (NewJobReads says when a new one is). Its
    # reads one at a time: eight at once shortened its refreshes, which then saw more of a placeholder's
    # passing states and read them (2.64 Slurm calls per Pod against 2.25, 200 Pods, no faster: docs/benchmarks.md).
    slurm_jobs = slurm_jobs or SlurmInformerFactory(
        slurm, interval=daemon.slurm.poll_interval, job_full_every=daemon.slurm.job_full_list_interval,
        keep_job=lambda job: parse(job) is not None, read_workers=1).jobs()
    submitted = PlaceholderReads(parse, config.started_call_patience, config.pending_reason_interval).attach(slurm_jobs)
    new_jobs = NewJobReads(slurm_jobs)
    index = JobIndex(parse, clock=slurm_jobs.clock, jobs=slurm_jobs, on_expect=submitted, on_doubt=new_jobs.doubt)
    # Its own Pods, without what it never reads (containers' images, env and mounts, volumes, the kubelet's
    # container statuses, write records): sunk/translate/podstores.py, issue 37 goal 5.
    pods = MultiNamespaceInformer(api, ("", "v1", "pods"), list(config.namespaces) or None,
                                  field_selector=f"spec.schedulerName={config.scheduler_name}",
                                  transform=scheduler_slim_pod)
    slurmd = Informer(api, ("", "v1", "pods"), config.slurmd_namespace, label_selector=config.slurmd_selector)
    pod_index = PodIndex(pods)
    # What gangs are sized by: Jobs always (a cluster without gangs pays one watch of slim Jobs); PodGroups
    # only when asked (their CRD must exist), and not among the informers the workers wait for.
    jobs = MultiNamespaceInformer(api, JOBS, list(config.namespaces) or None, transform=slim_job)
    pod_groups = MultiNamespaceInformer(api, PODGROUPS, list(config.namespaces) or None) \
        if config.gang_pod_groups else None
    workloads = Workloads(jobs, pod_groups)
    recorder = EventRecorder(api, component=name)
    # Nodes, slim: whether a Pod terminating there may be stuck for good (its Node NotReady or gone),
    # and, for sunk-scheduler, which binds past kube-scheduler's taint filter, the lock taint. A Pod
    # that kube-scheduler binds through the extender has passed that filter.
    nodes = Informer(api, NODES, transform=scheduler_slim_node, name="nodes")
    dra = dra_informers(api, config.dra) if config.dra is not None else None
    binder = Binder(api, must_tolerate_lock=LockTaints(nodes).evicts if on_bind is None else lambda _node: False,
                    claims=ClaimAllocator(api, slurm, dra.view, dra.slices, dra.classes,
                                          ours=lambda uid: pod_index.by_uid(uid) is not None, ended=pod_ended(api))
                    if dra is not None else None)
    slurmd_nodes = SlurmdNodes(slurmd)
    # What a Pod's nodeSelector, required node affinity and untolerated taints rule out, from the Nodes' labels
    # and taints (kube-scheduler's filters, and the kubelet's admission: kube-scheduler never sees these Pods).
    placement = NodePlacement(lambda: ready_slurm_nodes(slurmd.list()), nodes.get, slurmd_nodes.ready_slurm_node_on,
                              partitions=PartitionNodes(lambda: slurm.list_partitions()))
    scheduler = PodScheduler(api=api, slurm=slurm, config=config, jobs=index, pods=pod_index,
                             slurmd=slurmd_nodes, recorder=recorder, on_bind=on_bind, on_submit=on_submit,
                             nudge=slurm_jobs.nudge, binder=binder, node_ready=NodeHealth(nodes).ready,
                             node_placement=placement, workloads=workloads,
                             claims=dra.view if dra is not None else None)
    metrics.register(slurm)
    controller = Controller(name, scheduler, workers=daemon.workers)
    gone = PodGone(pod_index.by_uid)

    attach_pod_feed(pods, controller.queue.add)
    pods.add_handler(on_delete=gone.notify,
                     on_update=lambda old, new: gone.notify() if is_terminal(new) and not is_terminal(old) else None)
    attach_workload_feed(jobs, pod_groups, pod_index, controller.queue.add)
    attach_slurmd_feed(slurmd, index, controller.queue.add)
    attach_job_feed(slurm_jobs, index, controller.queue.add)
    attach_node_feed(nodes, pod_index, controller.queue.add)
    attach_placement_feed(nodes, slurmd, slurmd_nodes, placement, controller.queue.add)
    if dra is not None:
        attach_claim_feed(dra.claims, pod_index, controller.queue.add)

    manager.add_informer(pods)
    manager.add_informer(slurmd)
    manager.add_informer(nodes)
    manager.add_informer(jobs)
    if dra is not None:
        manager.add_informer(dra.claims)
        manager.add_informer(dra.slices)
        manager.add_informer(dra.classes)
    if pod_groups is not None:
        manager.add_runnable(pod_groups)  # (started with the informers, never waited for: see gangs.py)
    # Workers start only once Slurm's jobs are known too: deciding "no job yet" from an
    # empty cache would submit a second job for every Pod after a restart.
    manager.add_informer(slurm_jobs)
    manager.add_controller(controller)
    manager.add_runnable(sweeper(pod_index, index, controller.queue.add, config.resync_seconds, config.sweep_batch),
                         needs_leader=True)
    manager.add_runnable(new_jobs.runnable(), needs_leader=True)
    # Not only the leader's: before Slurm's first list nobody leads, and the Pods must hear why they wait.
    notice = OutageNotice(slurm_jobs, pod_index.unbound, scheduler.report,
                          may_report=lambda: manager.is_leader() or not manager.synced(), wake=controller.queue.add)
    manager.add_runnable(notice.runnable())
    assembly = Assembly(manager=manager, scheduler=scheduler, controller=controller, gone=gone, parse=parse,
                        slurm_jobs=slurm_jobs)
    # Ready means the hook API may answer: it needs Kubernetes (the Pod cache), not Slurm. Tied to
    # Slurm, every replica left its Service when slurmrestd blipped, when the placeholders need
    # the hooks most. Slurm's staleness shows on /metrics and in the log instead.
    kube_informers: list[Syncable] = [pods, slurmd, nodes, jobs,
                                      *((dra.claims, dra.slices, dra.classes) if dra else ())]
    manager.set_readiness({
        "kubernetes-informers": lambda: all(i.has_synced() for i in kube_informers),
        "hook-api": assembly.hooks_ready,
    })
    metrics.watch_slurm_cache(slurm_jobs)
    metrics.watch_waiting(scheduler.waiting_exposition)
    return assembly


@attrs.frozen
class DraInformers:
    """With ``--dra-device-mapping``: every ResourceClaim (a device another claim holds on a node is never given
    again, whoever's it is) and the mapped driver's ResourceSlices, each indexed by Node, and the DeviceClasses
    (their config goes into the allocations)."""

    claims: Informer
    slices: Informer
    classes: Informer
    view: ClaimsView


def dra_informers(api: ApiClient, mapping: DeviceMapping) -> DraInformers:
    claims = claims_informer(api)
    return DraInformers(claims, slices_informer(api, mapping), classes_informer(api),
                        ClaimsView(mapping, claims))


def attach_claim_feed(claims: Any, pods: PodIndex, enqueue: Callable[[str], None]) -> None:
    """A claim made, changed or gone wakes the Pods that name it (found through the Pod index, never a walk)."""
    pods.informer.add_indexer(INDEX_CLAIMS, claim_keys)

    def wake(claim: Obj) -> None:
        meta = claim.get("metadata") or {}
        for pod in pods.informer.by_index(INDEX_CLAIMS, f"{meta.get('namespace', '')}/{meta.get('name', '')}"):
            enqueue(owner_of(pod))

    claims.add_handler(on_add=wake, on_update=lambda _old, new: wake(new), on_delete=wake)


def changed_for_scheduling(old: Obj | None, new: Obj) -> bool:
    """Adds and deletes, and updates that change what the decision reads.

    Most of a Pod's updates are the kubelet's status and this scheduler's own job-id and
    toleration patches; neither changes a decision, and each was a reconcile (four or five
    per Pod, when the workers' queue was the longest wait in a 200-Pod burst).
    """
    return old is None or _scheduling_view(old) != _scheduling_view(new)


def _scheduling_view(pod: Obj) -> tuple[Any, ...]:
    meta, spec = pod["metadata"], pod.get("spec") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != names.ANN_JOB_ID}
    rest_of_spec = {k: v for k, v in spec.items() if k != "tolerations"}
    # A member that finished frees its node of the gang's job (and the last one ends the job): of all the
    # kubelet's status, only that; and the claims made for it from its templates (kube-controller-manager's).
    return (meta.get("deletionTimestamp"), annotations, rest_of_spec, meta.get("labels"), is_terminal(pod),
            (pod.get("status") or {}).get("resourceClaimStatuses"))


def attach_pod_feed(pods: Any, enqueue: Callable[[str], None]) -> None:
    """A Pod's change wakes its unit (its gang's owner when it has one: the whole gang is decided at once, else
    its own UID), only when it changes what the decision reads (``changed_for_scheduling``): the kubelet's
    status and this scheduler's own patches wake nothing. A gang member's UID is reconciled once it is gone,
    so that what was kept for it is forgotten."""
    pods.add_handler(EnqueueHandler(FuncEnqueuer(enqueue), mapper=lambda pod: [owner_of(pod)],
                                    predicate=changed_for_scheduling))
    pods.add_handler(on_delete=lambda pod: enqueue(pod["metadata"]["uid"]) if gang_of(pod) else None)


def attach_slurmd_feed(slurmd: Any, jobs: JobIndex, enqueue: Callable[[str], None]) -> None:
    """A slurmd Pod that appears, moves or goes changes where the Pods Slurm placed on its Slurm node bind
    (or whether they can: a Pod whose node had no slurmd Pod waits for one): look again at those, found
    through the job index (``owners_on``), never a walk of the Pods. Updates that leave what the scheduler
    reads alone (``slurmd.placement_view``: the lock annotations, the running flags, the status, 7 to 9 per
    job) wake nothing."""

    def wake(*slurmd_pods: Obj) -> None:
        # Only a Pod that serves (bound, not being deleted: ``slurmd.serving``) is read; one that does not
        # comes and goes unseen.
        for owner in {owner for pod in slurmd_pods for node in serving(pod) for owner in jobs.owners_on(node)}:
            enqueue(owner)

    def moved(old: Obj, new: Obj) -> None:
        if placement_view(old) != placement_view(new):
            wake(old, new)  # (both: a hostname that changes leaves one Slurm node and serves another)

    slurmd.add_handler(on_add=wake, on_update=moved, on_delete=wake)


def attach_workload_feed(jobs: Any, pod_groups: Any, pods: PodIndex, enqueue: Callable[[str], None]) -> None:
    """A Job or PodGroup that changes (appears, scales, completes one more Pod) resizes the gangs it
    sizes: look again at them. Never a call; the Pods found through the Pod index's workload keys."""

    def wake(keys: list[str]) -> None:
        for owner in {owner_of(pod) for key in keys for pod in pods.of_workload(key)}:
            enqueue(owner)

    def job_resized(old: Obj, new: Obj) -> None:
        if _sizing_view(old) != _sizing_view(new):
            wake(keys_of_job(old) + keys_of_job(new))  # (a relist may show a Job made again as an update)

    def pod_group_resized(old: Obj, new: Obj) -> None:
        if _pod_group_view(old) != _pod_group_view(new):
            wake([key_of_pod_group(new)])

    jobs.add_handler(on_add=lambda job: wake(keys_of_job(job)), on_update=job_resized,
                     on_delete=lambda job: wake(keys_of_job(job)))
    if pod_groups is not None:
        pod_groups.add_handler(on_add=lambda pg: wake([key_of_pod_group(pg)]), on_update=pod_group_resized,
                               on_delete=lambda pg: wake([key_of_pod_group(pg)]))


def _sizing_view(job: Obj) -> Obj:
    """What of a Job sizes its gangs (slim_job's fields): not its status counts of active and ready Pods,
    which the Job controller rewrites as its Pods are made and start (several updates per Job, each a
    reconcile of its gang that decided nothing new)."""
    view = slim_job(job)
    view["metadata"].pop("resourceVersion", None)
    return view


def _pod_group_view(pod_group: Obj) -> tuple[Any, ...]:
    """What of a PodGroup sizes its gang: its spec (minMember) and labels, not the status its controller writes."""
    return pod_group.get("spec"), (pod_group.get("metadata") or {}).get("labels")


def attach_job_feed(jobs: JobInformer, index: JobIndex, enqueue: Callable[[str], None]) -> None:
    """The Slurm jobs informer's changes (its store keeps the later observation of a job) -> the job index's
    expectations -> the affected unit's key; a whole list settles the doubts older than it, and wakes their
    units. Never a Slurm call. An update wakes the unit only when it changes what the scheduler reads of a
    job (``job_placement_view``) or meets an expectation: a pending job's priority, which grows with its age,
    or a new time limit, decides nothing."""

    def put(job: Job) -> None:
        if (uid := index.seen(job)) is not None:
            enqueue(uid)

    def changed(old: Job, new: Job) -> None:
        uid, met = index.seen_meeting(new)
        if uid is not None and (met or job_placement_view(old) != job_placement_view(new)):
            enqueue(uid)

    def gone(job: Job) -> None:
        if (uid := index.gone(job)) is not None:
            enqueue(uid)

    def listed(requested_at: float) -> None:
        for uid in index.listed(requested_at):
            enqueue(uid)

    jobs.add_handler(on_add=put, on_update=changed, on_delete=gone)
    jobs.on_listed(listed)


def job_placement_view(job: Job) -> tuple[Any, ...]:
    """What the scheduler reads of a job (``decide``, its waits, the extender's share, the index's nodes): its
    state (``active``, ``holds_nodes``, ``gang.has_started``: with its flags and reason), where Slurm placed it
    (``node_list``), the partition and reason a waiting Pod shows, and the identity that makes it this
    scheduler's."""
    return (job.state, job.state_flags, job.state_reason, job.nodes, job.batch_host,
            tuple(a.node for a in job.allocations), job.partition, job.admin_comment)


def attach_node_feed(nodes: Any, pods: PodIndex, enqueue: Callable[[str], None]) -> None:
    """A Node turning NotReady, Ready again, or gone: look again at the Pods terminating on it.

    Their decision depends on it (a Pod stuck on a lost Node lets its job go); the deadline itself
    comes back as the reconcile's own requeue, so no timer polls.
    """

    def terminating_on(node: Obj) -> None:
        for pod in pods.on_node(node["metadata"]["name"]):
            if pod["metadata"].get("deletionTimestamp"):
                enqueue(pod["metadata"]["uid"])

    def changed(old: Obj, new: Obj) -> None:
        if node_ready(old) != node_ready(new):
            terminating_on(new)

    nodes.add_handler(on_update=changed, on_delete=terminating_on)


def ready_slurm_nodes(slurmd_pods: list[Obj]) -> dict[str, str]:
    """Slurm node -> Kubernetes Node, through the slurmd Pods that serve and are Ready: those a placeholder may
    exclude by name. (A slurmd not running is often a node Slurm does not know yet, and Slurm refuses a job
    whose exclusion names one.) A walk of the slurmd Pods: once per set of selectors and change, not per Pod."""
    return slurm_node_map(p for p in slurmd_pods if pod_ready(p))


def attach_placement_feed(nodes: Any, slurmd_pods: Any, slurmd_nodes: SlurmdNodes, placement: NodePlacement,
                          enqueue: Callable[[str], None]) -> None:
    """A slurmd Pod that comes, moves, turns Ready or not, or goes, and a Node that hosts one and whose labels
    or blocking taints change (or that appears), change which Slurm nodes a Pod's demand rules out: forget
    the exclusions computed, and wake the units that waited for a Node to admit them if this one does
    (``NodePlacement.changed``). Every Node's taints are kept (``node_changed``: a slurmd Pod may come to a
    tainted Node later). A Node that hosts no slurmd Pod, a Node's heartbeats, sunk's lock taint and a slurmd
    Pod's lock annotations change nothing."""

    def wake(node: Optional[Obj]) -> None:
        for unit in placement.changed(node):
            enqueue(unit)

    def hosting(node: Obj) -> bool:
        return slurmd_nodes.slurm_node_on(node["metadata"]["name"]) is not None

    def added(node: Obj) -> None:
        placement.node_changed(None, node)
        if hosting(node):
            wake(node)

    def updated(old: Obj, new: Obj) -> None:
        taints = placement.node_changed(old, new)
        labels = (old["metadata"].get("labels") or {}) != (new["metadata"].get("labels") or {})
        if (taints or labels) and hosting(new):
            wake(new)

    def deleted(node: Obj) -> None:
        placement.node_changed(node, None)
        if hosting(node):
            wake(None)

    def serves(*pods: Obj) -> None:
        names = [name for pod in pods if serving(pod) and pod_ready(pod) and (name := k8s_node_name(pod))]
        if not names:
            wake(None)
        for name in names:
            wake(nodes.get(name))

    def moved(old: Obj, new: Obj) -> None:
        if placement_view(old) != placement_view(new) or pod_ready(old) != pod_ready(new):
            serves(old, new)

    nodes.add_handler(on_add=added, on_update=updated, on_delete=deleted)
    slurmd_pods.add_handler(on_add=serves, on_update=moved, on_delete=serves)


def sweeper(pods: PodIndex, jobs: JobIndex, enqueue: Callable[[str], None], interval: float,
            batch: int = SWEEP_BATCH) -> Periodic:
    """The periodic level-based safety net (scheduler/sweep.py): every Pod's key and every placeholder job's
    owner, ``batch`` of them every ``interval`` seconds, from memory only."""
    return Periodic("sweeper", interval, sweep_of(pods, jobs, enqueue, batch).tick)


def sweep_of(pods: PodIndex, jobs: JobIndex, enqueue: Callable[[str], None], batch: int) -> RollingSweep[str]:
    """The sweep's cycle: the Pod store's keys (each Pod read at its turn, for its owner: its gang's, or its own
    UID) and the job index's owners (a job whose Pod is gone is an orphan only a sweep finds if its event was lost)."""

    def visit_pod(key: str) -> None:
        if (pod := pods.informer.get(key)) is not None:  # (gone since the snapshot: its delete was an event)
            enqueue(owner_of(pod))

    return RollingSweep(pods.informer.keys, visit_pod, batch, (jobs.uids, enqueue))


__all__ = ["Assembly", "Result", "assemble", "identity_parser"]
