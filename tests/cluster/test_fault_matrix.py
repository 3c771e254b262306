"""The fault matrix of issue 18: one fault at a time, mid-flow, under a light but real load; then,
from Slurm and Kubernetes themselves, the cluster must be as it should be (invariants.py), and how
long that took is measured (docs/reliability.md).

The load, on node3/node4 only (and their Nodes; never node1/node2, never the real
kubelet Node's partition): in waves every ``WAVE_PERIOD`` s, ``WAVE_PODS`` Pods through
sunk-scheduler (40 at most per fault, the oldest deleted beyond ``LIVE_PODS``), one batch job
(``sbatch --wrap 'sleep 10' -p batch -w nodeN``, alternating), and one plain Pod bound straight to
the other node, which the next lock there must evict. Placeholders and batch jobs run sunk's
prolog and epilog (locking_harness.HookScripts: only the jobs carrying its marker), so every job
locks its node through a Syncer with node locking (running_syncer), strictly for placeholders.
sunk-scheduler and sunk-syncer run as the chart's ServiceAccounts (rbac_harness); the scheduler's
replicas are reached by placeholder jobs through one port, as through their Service
(serviceproxy.py).

Each fault: the load starts, and once it is mid-flow (Pods already deleted, Pods bound, a batch job
running) the fault is injected and held; its end (the restart issued) stops the load, and the invariants are polled
until they hold for ``STABLE`` s, at most ``SETTLE`` s: that time is the recovery time. Then the
Pods and jobs go, and the nodes must be left unlocked and undrained for the next fault.

Time on the dev cluster: about 11-12 minutes (estimate: 10 faults of 40-120 s each, most of it the
fault durations the issue fixes; see docs/reliability.md). The durations are the constants below.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from invariants import JobHistory, Scope, check, placeholder_jobs, read_world, slurmd_pod
from kube_testns import create_namespace, purge_namespace
from locking_harness import NODES_UNDER_TEST, HookScripts, free_port, new_token, running_syncer
from procs import Process
from rbac_harness import apply_manifest, as_service_account
from serviceproxy import ServiceProxy
from slurmtools import all_jobs, wait_for
from test_extender import PROFILE, certificates, extender, kube_scheduler, service_accounts  # noqa: F401 (fixtures)
from test_scheduler import SCHEDULER, end_pods, pod_manifest, scheduler_process
from test_scheduler_faults import node_ready

from sunk.kube import client as kc
from sunk.kube.resources import EVENTS, LEASES, PODS
from sunk.model import names

# ---- the matrix's settings ---------------------------------------------------------------------------------------
NODES = NODES_UNDER_TEST  # node3, node4: the locking Syncer's (the others run no sunk prolog here)
RESTART_AFTER = 5.0  # kill -9, then the restart: as a Deployment would
SLURMRESTD_DOWN = 40.0
ETCD_DOWN = 10.0
HOOK_API_DOWN = 60.0
NOT_READY_WITHIN = 100.0  # kube-controller-manager's 40 s grace after the last Lease renewal, and its period
STUCK_MARGIN = 10  # the scheduler's --stuck-pod-margin (the chart's default is 60 s: 50 s more per run)
GRACE = 5  # the load's Pods' terminationGracePeriodSeconds (pod_manifest's default)
LOCK_TIMEOUT = 45  # the prolog's budget: more than a Syncer restart takes (5 s + start + 15 s Lease), less than
#                    the hook API outage, which must make the prolog give up and drain (sunk's own drain)
SETTLE = 90.0  # at most this long from the fault's end for every invariant to hold
STABLE = 3.0  # ... and to keep holding this long (the recovery time is when they first held)
POLL = 1.0
HISTORY_EVERY = 10.0  # how often every job is read for JobHistory: well within MinJobAge (60 s), and cheap
WAVE_PERIOD = 5.0
WAVE_PODS = 4
LIVE_PODS = 10
MAX_PODS = 40
BATCH_SECONDS = 10
SCHEDULER_LEASE = "sunk-scheduler-matrix"
SYNCER_LEASE = "sunk-syncer-matrix"
COMPONENTS = ("etcd", "kube-apiserver", "slurmctld", "slurmrestd", "kubelet")  # the dev cluster's, that faults stop
RESULTS_FILE = "fault-matrix.jsonl"  # in the dev cluster's run/logs/: one line per fault run

pytestmark = pytest.mark.timeout(480)  # the kubelet row alone may take 100 + 45 + 60 + 93 s in the worst case


def tolerant(predicate: Callable[[], Any]) -> Callable[[], Any]:
    """For wait_for: an error (a component still coming back) reads as "not yet", not as the test's failure."""
    def call() -> Any:
        try:
            return predicate()
        except Exception:
            return None
    return call


def alive(proc: Process | None) -> bool:
    return proc is not None and proc.proc is not None and proc.proc.poll() is None


def log_size(proc: Process) -> int:
    try:
        return proc.log.stat().st_size
    except OSError:
        return 0


# ---- the scheduler's replicas ------------------------------------------------------------------------------------
class SchedulerPool:
    """sunk-scheduler as its Deployment runs it: the chart's ServiceAccount, one Lease, one hook URL for every
    replica (the proxy), and the Deployment's restarts done by the faults themselves."""

    def __init__(self, api, dev_cluster, namespace: str, tmp: Path, kubeconfig: Path, lease_namespace: str):
        self.api, self.dev, self.namespace, self.tmp = api, dev_cluster, namespace, tmp
        self.kubeconfig, self.lease_namespace = kubeconfig, lease_namespace
        self.replicas: list[Process] = []
        self.hooks_port: dict[str, int] = {}
        self.since: dict[str, int] = {}  # where each replica's log starts for its current process
        self.killed: list[Process] = []
        self.proxy = ServiceProxy(lambda: [self.hooks_port[r.name] for r in self.running()])

    def running(self) -> list[Process]:
        return [r for r in self.replicas if alive(r)]

    def start(self, replica: Process) -> Process:
        if not alive(replica):
            self.since[replica.name] = log_size(replica)
            replica.start()
        return replica

    def new_replica(self) -> Process:
        ports = {"hooks": free_port(), "metrics": free_port(), "probes": free_port()}
        name = f"sunk-scheduler-{len(self.replicas)}"
        replica = scheduler_process(self.dev, self.namespace, self.tmp, name=name, ports=ports, extra_args=(
            f"--kubeconfig={self.kubeconfig}", f"--leader-election-namespace={self.lease_namespace}",
            f"--leader-election-id={SCHEDULER_LEASE}", f"--hooks-url={self.proxy.url}",
            f"--stuck-pod-margin={STUCK_MARGIN}s"))
        self.hooks_port[name] = ports["hooks"]
        self.replicas.append(replica)
        return replica

    def ensure_one(self) -> None:
        if not self.running():
            self.start(self.replicas[0] if self.replicas else self.new_replica())

    def add_standby(self) -> Process:
        idle = next((r for r in self.replicas if not alive(r)), None)
        return self.start(idle or self.new_replica())

    def kill_all(self) -> None:
        self.killed = self.running()
        for replica in self.killed:
            replica.kill()

    def kill_leader(self) -> None:
        leader = wait_for(tolerant(self.leader), 30, "a scheduler replica leading")
        self.killed = [leader]
        leader.kill()

    def restart_killed(self) -> None:
        for replica in self.killed:
            self.start(replica)

    def leader(self) -> Process | None:
        """The running replica whose current process holds the Lease."""
        holder = lease_holder(self.api, SCHEDULER_LEASE, self.lease_namespace)
        return next((r for r in self.running() if acquired_by(r, holder, self.since.get(r.name, 0))), None)

    def scale_to_one(self) -> None:
        keep = self.leader() or (self.running() or [None])[0]
        for replica in self.running():
            if replica is not keep:
                replica.stop()

    def logs(self) -> str:
        return ", ".join(str(r.log) for r in self.replicas)


def acquired_by(proc: Process, holder: str, since: int) -> bool:
    """Whether ``holder`` (a Lease's holderIdentity, unique per process) is the process ``proc`` runs now: its
    elector logs "leader election: <identity> acquired ..." (sunk/kube/leader.py)."""
    if not holder:
        return False
    with open(proc.log, "rb") as log:
        log.seek(since)
        return f"leader election: {holder} acquired".encode() in log.read()


def lease_holder(api, name: str, namespace: str) -> str:
    try:
        return kc.get(api, LEASES, name, namespace)["spec"].get("holderIdentity") or ""
    except kc.ApiError as exc:
        if exc.not_found:
            return ""
        raise


# ---- the load ----------------------------------------------------------------------------------------------------
class Load:
    """Pods through the scheduler(s) in waves, batch jobs on the same nodes, and plain Pods the locks evict.

    Every client call may fail while a fault lasts (apiserver, etcd, slurmctld down): it is counted and the
    next wave goes on, as real clients retry. Nothing new is started once ``stop`` is called.
    """

    def __init__(self, matrix: Matrix, tag: str, schedulers: tuple[str, ...]):
        self.m, self.tag, self.schedulers = matrix, tag, schedulers
        self.created = 0
        self.batch: list[int] = []
        self.bystanders = 0
        self.evictable: deque[str] = deque()
        self.live: deque[tuple[str, str]] = deque()  # (name, uid), oldest first
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"load-{tag}", daemon=True)

    def start(self) -> Load:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float = 90) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def mid_flow(self) -> bool:
        """Deletions begun, Pods of every scheduler bound and a batch job running: the fault lands while Pods come
        and go and both kinds of job run."""
        if self.created <= LIVE_PODS:
            return False
        pods = kc.list_objects(self.m.api, PODS, self.m.namespace)
        bound = {p["spec"].get("schedulerName") for p in pods
                 if p["spec"].get("nodeName") and p["metadata"]["name"].startswith(self.tag)}
        running = self.m.dev.slurm("squeue", "-h", "-n", self.m.batch_name, "-t", "R", "-o", "%i", check=False)
        return set(self.schedulers) <= bound and bool(running.stdout.split())

    def _run(self) -> None:
        wave = 0
        while not self._stop.is_set():
            self._wave(wave)
            wave += 1
            self._stop.wait(WAVE_PERIOD)

    def _step(self, what: str, call: Callable[[], Any]) -> Any:
        if self._stop.is_set():
            return None
        try:
            return call()
        except Exception as exc:
            self.errors.append(f"{what}: {type(exc).__name__}: {str(exc)[:200]}")
            return None

    def _wave(self, wave: int) -> None:
        for _ in range(WAVE_PODS):
            if self.created >= MAX_PODS:
                break
            scheduler = self.schedulers[self.created % len(self.schedulers)]
            name = f"{self.tag}-{self.created:02d}"
            pod = self._step(f"create {name}", lambda n=name, s=scheduler: kc.create(self.m.api, PODS, pod_manifest(
                n, annotations=self.m.pod_annotations, schedulerName=s), self.m.namespace))
            self.created += 1
            if pod:
                self.live.append((name, pod["metadata"]["uid"]))
        while len(self.live) > LIVE_PODS and not self._stop.is_set():
            name, uid = self.live.popleft()
            self._step(f"delete {name}", lambda n=name, u=uid: self._delete(n, u))
        node = NODES[wave % len(NODES)]
        job = self._step(f"sbatch on {node}", lambda: self.m.dev.slurm(
            # (--mem: without it a job gets the whole node's memory under CR_Core_Memory, and never shares it)
            "sbatch", "--parsable", "--chdir=/tmp", "-o", "/dev/null", "-p", "batch", "-w", node, "-n1", "--mem=256M",
            "-J", self.m.batch_name, f"--comment={self.m.scripts.marker}", "--wrap", f"sleep {BATCH_SECONDS}",
            timeout=20).stdout.strip())
        if job:
            self.batch.append(int(job.split(";")[0]))
        # A plain Pod on the other node: whichever lock comes next there must evict it.
        other = self.m.dev.k8s_node_for(NODES[(wave + 1) % len(NODES)])
        name = f"{self.tag}-by-{self.bystanders:02d}"
        self.bystanders += 1
        if self._step(f"create {name}", lambda: kc.create(self.m.api, PODS, pod_manifest(
                name, cpu="100m", memory="64Mi", schedulerName="default-scheduler", nodeName=other),
                self.m.namespace)):
            self.evictable.append(name)
        while len(self.evictable) > 2 and not self._stop.is_set():
            old = self.evictable.popleft()
            self._step(f"delete {old}", lambda n=old: self._delete(n))

    def _delete(self, name: str, uid: str | None = None) -> None:
        try:
            kc.delete(self.m.api, PODS, name, self.m.namespace, uid=uid)
        except kc.ApiError as exc:
            if not exc.not_found and exc.status != 409:  # gone already (its job ended, or evicted)
                raise

    def summary(self) -> str:
        errors = f", {len(self.errors)} client errors (first: {self.errors[0]})" if self.errors else ""
        return f"{self.created} Pods, {self.bystanders} evictable Pods, {len(self.batch)} batch jobs{errors}"


# ---- the rig: every process of the matrix, the load, the invariants ----------------------------------------------
class Matrix:
    def __init__(self, dev_cluster, api, namespace: str, syncer: Process, syncer_lease_namespace: str,
                 scripts: HookScripts, schedulers: SchedulerPool):
        self.dev, self.api, self.namespace = dev_cluster, api, namespace
        self.syncer, self.syncer_lease_namespace = syncer, syncer_lease_namespace
        self.scripts, self.schedulers = scripts, schedulers
        self.syncer_since = 0
        self.extender: Process | None = None
        self.batch_name = f"fault-matrix-{scripts.marker}"
        excluded = ",".join(n for n in dev_cluster.slurm_nodes if n not in NODES)
        self.pod_annotations = {names.ANN_COMMENT: scripts.marker, names.ANN_EXCLUDED_NODES: excluded}
        self.scope = Scope(namespace=namespace, schedulers=frozenset({SCHEDULER}), slurm_nodes=NODES,
                           k8s_node_of={n: dev_cluster.k8s_node_for(n) for n in dev_cluster.slurmd_nodes})
        self.history = JobHistory(namespace, self.scope.schedulers)
        self.load: Load | None = None
        self.during: list[str] = []  # what a fault's own check found while it lasted
        self.fault_began = 0.0
        self.results: list[dict[str, Any]] = []
        self._watching = threading.Event()
        self._monitor = threading.Thread(target=self._watch_jobs, name="job-history", daemon=True)

    # -- every job ever seen, so that a second job for a Pod is caught even after Slurm purged one --
    def _watch_jobs(self) -> None:
        while not self._watching.wait(HISTORY_EVERY):
            try:
                self.history.record(all_jobs(self.dev, timeout=10))
            except Exception:
                pass  # slurmctld down: the jobs it holds are still there when it is back

    def start_monitor(self) -> None:
        self._monitor.start()

    def stop_monitor(self) -> None:
        self._watching.set()
        self._monitor.join(15)

    # -- processes --
    def start_syncer(self) -> None:
        if not alive(self.syncer):
            self.syncer_since = log_size(self.syncer)
            self.syncer.start()

    def syncer_leads(self) -> bool:
        holder = lease_holder(self.api, SYNCER_LEASE, self.syncer_lease_namespace)
        return alive(self.syncer) and acquired_by(self.syncer, holder, self.syncer_since)

    def start_extender(self) -> None:
        if self.extender is not None and not alive(self.extender):
            self.extender.start()

    def use_extender(self, request) -> None:
        """test_extender's sunk-extender and kube-scheduler, as deployed; their Pods join the load."""
        request.getfixturevalue("kube_scheduler")
        self.extender = request.getfixturevalue("extender")
        # test_extender's fixture applied the scheduler's RBAC as rendered: our Lease's name goes back in.
        apply_manifest(self.api, "scheduler-rbac.yaml", leases=[SCHEDULER_LEASE])
        self.scope = dataclasses.replace(self.scope, schedulers=self.scope.schedulers | {PROFILE})

    def everything_running(self) -> None:
        for component in COMPONENTS:
            self.dev.start_component(component)  # (waits for it to be healthy; at once when it is)
        self.start_syncer()
        self.schedulers.ensure_one()
        self.start_extender()

    # -- before and after each fault --
    def prepare(self) -> None:
        self.everything_running()
        self.during = []
        left = self._settle_clean(60)
        assert not left, f"the cluster was not left clean by the fault before: {left}"

    def wait_for_leaders(self) -> None:
        """A fault starts from a led cluster: a scheduler replica and the Syncer hold their Leases."""
        wait_for(tolerant(self.schedulers.leader), 60, "a scheduler replica to lead", interval=0.5)
        wait_for(tolerant(self.syncer_leads), 60, "the Syncer to lead", interval=0.5)

    def start_load(self, tag: str) -> Load:
        self.load = Load(self, tag, tuple(sorted(self.scope.schedulers))).start()
        return self.load

    def restore(self) -> None:
        """Every Pod and job of the load gone, and node3/node4 unlocked and undrained: whatever the test did."""
        if self.load is not None:
            self.load.join()
        self.everything_running()
        problems = []
        self.finish_missed_deletions()
        try:
            end_pods(self.api, self.dev, self.namespace, timeout=90)  # (placeholders end with their Pods)
        except AssertionError as exc:
            problems.append(str(exc))
        self.dev.slurm("scancel", "-n", self.batch_name, check=False)
        left = self._settle_clean(60)
        if left:
            problems.append(f"left behind after the fault: {left}")
            for node in NODES:  # the next fault starts from clean nodes whatever happened here
                self.dev.slurm("scontrol", "update", f"nodename={node}", "state=resume", check=False)
        try:
            self.schedulers.scale_to_one()
        except Exception as exc:
            problems.append(f"could not scale the scheduler back to one replica: {exc}")
        self.load = None
        assert not problems, "; ".join(problems)

    def finish_missed_deletions(self) -> None:
        """Finish what the stand-in kubelet missed: a Pod whose deletion it could not complete while the apiserver
        or etcd was down stays terminating until its watch next relists (up to 5 minutes; dev/sunk_dev/kubelet.py),
        and its job rightly waits for it. Done as that relist would (grace 0, the Pod's UID); said on stdout."""
        fake = {self.dev.k8s_node_for(n) for n in self.dev.slurm_nodes}
        now = time.time()
        for pod in kc.list_objects(self.api, PODS, self.namespace):
            meta = pod["metadata"]
            since = meta.get("deletionTimestamp")
            if since and pod["spec"].get("nodeName") in fake and \
                    now - datetime.fromisoformat(since.replace("Z", "+00:00")).timestamp() > GRACE + 30:
                print(f"the stand-in kubelet missed {meta['name']} (terminating since {since}): finished for it")
                try:
                    kc.delete(self.api, PODS, meta["name"], self.namespace, grace_period_seconds=0, uid=meta["uid"])
                except kc.ApiError as exc:
                    if not exc.not_found and exc.status != 409:
                        raise

    def unbound(self) -> list[str]:
        """The load's Pods that wait, each with its last Event: none should wait for long once the fault is over
        (a Pod whose job Slurm held after a failed launch waits for ever, which no invariant calls wrong)."""
        pods = [p for p in kc.list_objects(self.api, PODS, self.namespace)
                if p["spec"].get("schedulerName") in self.scope.schedulers and not p["spec"].get("nodeName")
                and not p["metadata"].get("deletionTimestamp")]
        if not pods:
            return []
        events = kc.list_objects(self.api, EVENTS, self.namespace)
        out = []
        for pod in pods:
            own = sorted((e for e in events if (e.get("involvedObject") or {}).get("uid") == pod["metadata"]["uid"]),
                         key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
            last = f"{own[-1].get('reason')}: {own[-1].get('message')}" if own else "no Event"
            out.append(f"{pod['metadata']['name']} ({last})")
        return out

    def _settle_clean(self, timeout: float) -> list[str]:
        try:
            wait_for(tolerant(lambda: not self.dirty()), timeout,
                     "node3/node4 unlocked, undrained, with no job of ours", interval=0.5)
            return []
        except AssertionError:
            return tolerant(self.dirty)() or ["Slurm or Kubernetes unreadable"]

    def dirty(self) -> list[str]:
        world = read_world(self.dev, self.api, self.namespace)
        out = []
        for job in world.jobs:
            if job.get("name") == self.batch_name and ("PENDING" in job["job_state"] or "RUNNING" in job["job_state"]
                                                       or "COMPLETING" in job["job_state"]):
                out.append(f"batch job {job['job_id']} {'+'.join(job['job_state'])}")
        for uid, jobs in placeholder_jobs(world.jobs, self.namespace).items():
            out += [f"placeholder job {j['job_id']} of uid {uid} {'+'.join(j['job_state'])}" for j in jobs
                    if {"PENDING", "RUNNING", "COMPLETING", "SUSPENDED"} & set(j["job_state"])]
        for node in NODES:
            state = world.nodes[node].get("state") or []
            if "DRAIN" in state:
                out.append(f"{node} drained: {world.nodes[node].get('reason')!r}")
            pod = slurmd_pod(world, self.scope, node)
            lock = ((pod or {}).get("metadata", {}).get("annotations") or {}).get(names.LOCK_KEY) or "false"
            taints = world.k8s_nodes[self.dev.k8s_node_for(node)]["spec"].get("taints") or []
            if lock != "false" or any(t.get("key") == names.LOCK_KEY for t in taints):
                out.append(f"{node} lock {lock!r}, taints {[t.get('key') for t in taints]}")
        return out

    # -- after the fault --
    def recover(self, since: float) -> tuple[float | None, list[str]]:
        """Seconds from ``since`` until every invariant held (and went on holding for STABLE s), or None and what
        was still wrong SETTLE s later."""
        held: float | None = None
        while True:
            left = check(self.dev, self.api, self.scope, self.history)
            now = time.monotonic()
            if left:
                held = None
                if now - since > SETTLE:
                    return None, left
            else:
                held = held if held is not None else now
                if now - held >= STABLE:
                    return held - since, []
            time.sleep(POLL)

    def stuck_pods(self) -> dict[str, list[str]]:
        """The load's Pods terminating on node3/node4's Nodes, each with its jobs that still run."""
        nodes = {self.dev.k8s_node_for(n) for n in NODES}
        running = {uid: [str(j["job_id"]) for j in jobs if "RUNNING" in j["job_state"]]
                   for uid, jobs in placeholder_jobs(all_jobs(self.dev), self.namespace).items()}
        return {f"{p['metadata']['name']}": running.get(p["metadata"]["uid"], [])
                for p in kc.list_objects(self.api, PODS, self.namespace)
                if p["metadata"].get("deletionTimestamp") and p["spec"].get("nodeName") in nodes
                and p["spec"].get("schedulerName") in self.scope.schedulers}

    def record(self, result: dict[str, Any]) -> None:
        self.results.append(result)
        path = self.dev.run_dir / "logs" / RESULTS_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as out:
            out.write(json.dumps({"at": time.strftime("%Y-%m-%dT%H:%M:%S"), **result}) + "\n")

    def logs(self) -> str:
        more = f", extender {self.extender.log}" if self.extender is not None else ""
        return f"logs: scheduler {self.schedulers.logs()}, syncer {self.syncer.log}{more}"


# ---- fixtures ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def namespace(kube_api):
    ns = create_namespace(kube_api)
    yield ns
    purge_namespace(kube_api, ns)


@pytest.fixture(scope="module")
def syncer(kube_api, dev_cluster, tmp_path_factory):
    """sunk-syncer with node locking on node3/node4, as the chart's ServiceAccount (as test_rbac runs it)."""
    tmp = tmp_path_factory.mktemp("matrix-syncer")
    account, kubeconfig = as_service_account(kube_api, dev_cluster, "syncer-rbac.yaml", tmp, leases=[SYNCER_LEASE])
    token_file = tmp / "hooks-token"
    token_file.write_text(new_token())
    with running_syncer(kube_api, dev_cluster, token_file, tmp, [
            f"--kubeconfig={kubeconfig}", f"--leader-election-namespace={account['namespace']}"],
            SYNCER_LEASE) as proc:
        yield proc, token_file.read_text(), account["namespace"]


@pytest.fixture(scope="module")
def scripts(dev_cluster, syncer):
    proc, token, _ = syncer
    hooks = HookScripts(dev_cluster, proc.url, token)
    hooks.install(lock_timeout=LOCK_TIMEOUT)
    try:
        yield hooks
    finally:
        hooks.remove()


@pytest.fixture(scope="module")
def schedulers(kube_api, dev_cluster, namespace, scripts, tmp_path_factory):
    """(After ``scripts``: torn down before them, so the placeholders' epilogs still reach the Syncer.)"""
    tmp = tmp_path_factory.mktemp("matrix-scheduler")
    account, kubeconfig = as_service_account(kube_api, dev_cluster, "scheduler-rbac.yaml", tmp,
                                             leases=[SCHEDULER_LEASE])
    pool = SchedulerPool(kube_api, dev_cluster, namespace, tmp, kubeconfig, account["namespace"])
    with pool.proxy:
        pool.start(pool.new_replica())
        try:
            yield pool
        finally:
            try:
                pool.ensure_one()
                end_pods(kube_api, dev_cluster, namespace)
            finally:
                for replica in pool.replicas:
                    replica.stop()


@pytest.fixture(scope="module")
def matrix(dev_cluster, kube_api, namespace, syncer, scripts, schedulers, request):
    rig = Matrix(dev_cluster, kube_api, namespace, syncer[0], syncer[2], scripts, schedulers)
    rig.start_monitor()
    try:
        yield rig
    finally:
        rig.stop_monitor()
        report(request.config, rig.results)


@pytest.fixture
def rig(matrix):
    try:
        matrix.prepare()
        yield matrix
    finally:
        matrix.restore()


def report(config, results: list[dict[str, Any]]) -> None:
    """The matrix as a table at the end of the run, -s or not (and in run/logs/fault-matrix.jsonl)."""
    lines = ["", "fault matrix (recovery: from the fault's end until every invariant held):"]
    for r in results:
        recovered = f"{r['recovery_seconds']:.1f} s" if r["recovery_seconds"] is not None else "NOT RECOVERED"
        lines.append(f"  {r['fault']:<24} fault {r['fault_seconds']:6.1f} s   restore {r['restore_seconds']:5.1f} s"
                     f"   recovery {recovered}")
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    for line in lines:
        if terminal is not None:
            terminal.write_line(line)
        else:
            print(line)


# ---- the faults --------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Fault:
    name: str
    how: str
    down: Callable[[Matrix], None]
    up: Callable[[Matrix], None]
    hold: Callable[[Matrix, Load], None] = lambda m, load: None
    prepare: Callable[[Matrix], None] = lambda m: None
    after: Callable[[Matrix], None] = lambda m: None
    extender: bool = False


def held_for(seconds: float) -> Callable[[Matrix, Load], None]:
    """Until ``seconds`` after the fault began (a stop by SIGTERM may take a while: gunicorn lets requests finish)."""
    return lambda m, load: time.sleep(max(0.0, m.fault_began + seconds - time.monotonic()))


def stop(component: str) -> Callable[[Matrix], None]:
    return lambda m: m.dev.stop_component(component)


def start(component: str) -> Callable[[Matrix], None]:
    return lambda m: m.dev.start_component(component)


def a_replica_leads(m: Matrix) -> None:
    assert wait_for(tolerant(m.schedulers.leader), 30, "a live replica holding the Lease", interval=0.5)


def two_replicas(m: Matrix) -> None:
    m.schedulers.add_standby()
    assert len(m.schedulers.running()) == 2, m.schedulers.running()


def kill_extender(m: Matrix) -> None:
    assert m.extender is not None, "the extender row runs without an extender"
    m.extender.kill()


def kubelet_hold(m: Matrix, load: Load) -> None:
    """Until the Nodes are NotReady, then until every Pod stuck terminating there has let its job go (its grace
    period and --stuck-pod-margin after its deletion: issue 18, item 1)."""
    nodes = [m.dev.k8s_node_for(n) for n in NODES]
    wait_for(tolerant(lambda: all(node_ready(m.api, n) != "True" for n in nodes)), NOT_READY_WITHIN,
             f"{nodes} NotReady", interval=1)
    load.stop()  # no Pod deleted from here on: the release below has a known deadline
    stuck = tolerant(m.stuck_pods)()
    if not stuck:
        m.during.append("no Pod of the load was stuck terminating on a NotReady Node: the fault tested nothing")
        return
    try:
        wait_for(tolerant(lambda: not any(m.stuck_pods().values())), GRACE + STUCK_MARGIN + 30,
                 "every Pod stuck terminating on a NotReady Node to let its job go", interval=1)
    except AssertionError as exc:
        m.during.append(f"{exc}; stuck Pods and their running jobs: {tolerant(m.stuck_pods)()}")


FAULTS = (
    Fault("scheduler-kill", f"kill -9 sunk-scheduler (its one replica), restart after {RESTART_AFTER:.0f} s",
          down=lambda m: m.schedulers.kill_all(), hold=held_for(RESTART_AFTER),
          up=lambda m: m.schedulers.restart_killed()),
    Fault("syncer-kill", f"kill -9 sunk-syncer, restart after {RESTART_AFTER:.0f} s",
          down=lambda m: m.syncer.kill(), hold=held_for(RESTART_AFTER), up=lambda m: m.start_syncer()),
    Fault("leader-loss", "two sunk-scheduler replicas: kill -9 the leader, its replacement starts "
                         f"{RESTART_AFTER:.0f} s later; the other takes over",
          prepare=two_replicas,
          down=lambda m: m.schedulers.kill_leader(), hold=held_for(RESTART_AFTER),
          up=lambda m: m.schedulers.restart_killed(), after=a_replica_leads),
    Fault("slurmctld-restart", "stop slurmctld and start it again (by PID)",
          down=stop("slurmctld"), up=start("slurmctld")),
    Fault("slurmrestd-down", f"stop slurmrestd, start it {SLURMRESTD_DOWN:.0f} s later",
          down=stop("slurmrestd"), hold=held_for(SLURMRESTD_DOWN), up=start("slurmrestd")),
    Fault("kube-apiserver-restart", "stop kube-apiserver and start it again (by PID)",
          down=stop("kube-apiserver"), up=start("kube-apiserver")),
    Fault("etcd-down", f"stop etcd, start it {ETCD_DOWN:.0f} s later",
          down=stop("etcd"), hold=held_for(ETCD_DOWN), up=start("etcd")),
    Fault("kubelet-gone", "stop the stand-in kubelet until its Nodes are NotReady and the Pods stuck terminating "
                          "there have let their jobs go, then start it",
          down=stop("kubelet"), hold=kubelet_hold, up=start("kubelet")),
    Fault("hook-api-down", f"stop sunk-syncer (it serves the hook API the prolog calls), start it "
                           f"{HOOK_API_DOWN:.0f} s later",
          down=lambda m: m.syncer.stop(), hold=held_for(HOOK_API_DOWN), up=lambda m: m.start_syncer()),
    # Last: its fixtures (test_extender's) start kube-scheduler and sunk-extender for the rest of the module.
    Fault("extender-kill", f"kill -9 sunk-extender (its Pods beside the scheduler's), restart after "
                           f"{RESTART_AFTER:.0f} s",
          down=kill_extender, hold=held_for(RESTART_AFTER),
          up=lambda m: m.start_extender(), extender=True),
)


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_the_cluster_recovers_from(fault: Fault, rig: Matrix, request):
    if fault.extender:
        rig.use_extender(request)
    fault.prepare(rig)
    rig.wait_for_leaders()
    load = rig.start_load(fault.name)
    wait_for(tolerant(load.mid_flow), 60, f"the load mid-flow (Pods deleted, Pods of "
             f"{sorted(rig.scope.schedulers)} bound, a batch job running)", interval=0.5)
    began = rig.fault_began = time.monotonic()
    try:
        fault.down(rig)
        fault.hold(rig, load)
    finally:
        ended = time.monotonic()
        load.stop()
        fault.up(rig)
    restored = time.monotonic()
    recovery, left = rig.recover(since=ended)
    waiting = tolerant(rig.unbound)() or []
    rig.record({"fault": fault.name, "how": fault.how, "fault_seconds": round(ended - began, 1),
                "restore_seconds": round(restored - ended, 1),
                "recovery_seconds": None if recovery is None else round(recovery, 1),
                "load": load.summary(), "during": rig.during, "left": left, "waiting": waiting})
    print(f"{fault.name}: recovered in {'-' if recovery is None else f'{recovery:.1f}'} s after the fault ended "
          f"(fault {ended - began:.1f} s, restart {restored - ended:.1f} s; load: {load.summary()})")
    if waiting:
        print(f"{fault.name}: Pods still waiting after the recovery: {waiting}")
    assert not rig.during, f"while the fault lasted: {rig.during}; {rig.logs()}"
    assert recovery is not None, (f"{fault.name}: {len(left)} invariant(s) still broken {SETTLE:.0f} s after the "
                                  f"fault ended:\n  " + "\n  ".join(left) + f"\n{rig.logs()}")
    fault.after(rig)
