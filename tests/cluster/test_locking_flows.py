"""Node locking end to end: real Slurm running the prolog/epilog, a real apiserver enforcing
evictions and PodDisruptionBudgets, and the locking plugin serving the hook API.

Only node3/node4 (and their Kubernetes Nodes) are used; see locking_harness.
"""

from __future__ import annotations

import os
import re
import resource
import socket
import time
import uuid

import pytest
import requests
from hostile_clients import Flood
from kube_testns import create_namespace, purge_namespace
from locking_harness import (
    K8S_NODE3,
    K8S_NODE4,
    LABEL,
    PLACED_BY,
    HookScripts,
    SyncerProcess,
    admin_hold,
    lock_value,
    new_token,
    running_syncer,
)
from slurmtools import slurm_job, state, wait_for

from sunk.hooks.auth import node_token
from sunk.kube import client as kc
from sunk.kube import patch as kp
from sunk.kube.informer import FuncHandler, Informer
from sunk.kube.resources import EVENTS, NODES, PDBS, PODS
from sunk.locking.requests import REQUEST_PREFIX
from sunk.model import names
from sunk.slurm.v0042 import parse_job
from sunk.translate import drains, objects
from sunk.translate.gang import has_started
from sunk.translate.identity import PlaceholderIdentity, member_tag
from sunk.translate.keys import GangKey, PodKey
from sunk.translate.lock import tolerates_lock

TERMINATION_DELAY = "sunk.dev/termination-delay-seconds"
GRACE = 5  # --lock-request-grace: how long a lock request outlives a job Slurm does not show


def node_auth(token: tuple[str, object], node: str) -> dict[str, str]:
    """What node ``node``'s prolog presents: its own token, derived from the Syncer's secret."""
    return {"Authorization": f"Bearer {node_token(token[0].encode(), node)}"}


@pytest.fixture(scope="module")
def token(tmp_path_factory):
    value = new_token()
    path = tmp_path_factory.mktemp("hooks") / "token"
    path.write_text(value)
    return value, path


@pytest.fixture(scope="module")
def lease():
    return f"sunk-syncer-locktest-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def syncer(dev_cluster, kube_api, token, lease, tmp_path_factory):
    """The real sunk-syncer, with node permissions, leading its own Lease."""
    with running_syncer(kube_api, dev_cluster, token[1], tmp_path_factory.mktemp("syncer"),
                        ["--node-permissions-enabled", "--lock-eviction-retry=1s", f"--lock-request-grace={GRACE}s"],
                        lease) as proc:
        yield proc


@pytest.fixture(scope="module")
def scripts(dev_cluster, syncer, token):
    hooks = HookScripts(dev_cluster, syncer.url, token[0])
    hooks.install(lock_timeout=30)
    try:
        yield hooks
    finally:
        hooks.remove()


@pytest.fixture
def namespace(kube_api):
    ns = create_namespace(kube_api)
    yield ns
    purge_namespace(kube_api, ns)


class History:
    """Every value the lock annotation of one slurmd Pod took, and when Pods disappeared."""

    def __init__(self, kube_api, slurm_node: str, namespace: str):
        self.values: list[tuple[float, str | None]] = []
        self.evicted: dict[str, float] = {}  # when the Pod got its deletionTimestamp
        self.deleted: dict[str, float] = {}  # when it was gone
        self._pods = Informer(kube_api, PODS, "slurm", field_selector=f"metadata.name={slurm_node}")
        self._pods.add_handler(FuncHandler(add=self._seen, update=lambda _old, new: self._seen(new)))
        self._ns = Informer(kube_api, PODS, namespace)
        self._ns.add_handler(FuncHandler(update=self._terminating,
                                         delete=lambda p: self.deleted.setdefault(p["metadata"]["name"], time.time())))

    def _terminating(self, _old, new) -> None:
        if new["metadata"].get("deletionTimestamp"):
            self.evicted.setdefault(new["metadata"]["name"], time.time())

    def _seen(self, pod) -> None:
        value = lock_value(pod)
        if not self.values or self.values[-1][1] != value:
            self.values.append((time.time(), value))

    def __enter__(self) -> History:
        for informer in (self._pods, self._ns):
            informer.start()
            assert informer.wait_for_sync(10)
        return self

    def __exit__(self, *_exc) -> None:
        self._pods.stop()
        self._ns.stop()

    def sequence(self) -> list[str | None]:
        return [value for _, value in self.values]

    def first(self, value: str) -> float:
        return next(t for t, v in self.values if v == value)


def make_pod(api, namespace, name, node, *, tolerate=False, labels=None, delay=0, annotations=None):
    meta_annotations = {TERMINATION_DELAY: str(delay), **(annotations or {})} if delay else dict(annotations or {})
    spec = {"nodeName": node, "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}]}
    if tolerate:
        spec["tolerations"] = [{"key": names.LOCK_KEY, "operator": "Exists"}]
    if names.ANN_JOB_ID in (annotations or {}):  # (as if sunk had placed it: only then is the annotation sunk's)
        spec["schedulerName"] = PLACED_BY
    body = {"apiVersion": "v1", "kind": "Pod", "spec": spec,
            "metadata": {"name": name, "labels": labels or {}, "annotations": meta_annotations}}
    kc.create(api, PODS, body, namespace)
    return wait_for(lambda: _running(api, namespace, name), 20, f"{name} Running")


def _running(api, namespace, name):
    pod = get_pod(api, namespace, name)
    return pod if pod and (pod.get("status") or {}).get("phase") == "Running" else None


def get_pod(api, namespace, name):
    try:
        return kc.get(api, PODS, name, namespace)
    except kc.ApiError as exc:
        if exc.not_found:
            return None
        raise


def slurmd_lock(api, node: str) -> str | None:
    return lock_value(kc.get(api, PODS, node, "slurm"))


def budget(api, namespace: str, app: str, **spec) -> None:
    """A PodDisruptionBudget named ``app`` over the Pods labelled ``app=<app>``, so that their eviction is refused."""
    kc.create(api, PDBS, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": app},
                          "spec": {**spec, "selector": {"matchLabels": {"app": app}}}}, namespace)


def unlocked(api, dev_cluster, node: str) -> None:
    """Start from an unlocked node (another test's job may just have left it)."""
    try:
        wait_for(lambda: slurmd_lock(api, node) in (None, "false"), 60, f"{node} unlocked")
    except AssertionError as exc:
        jobs = dev_cluster.slurm("squeue", "-h", "-w", node, "-o", "%i %T %j %k", check=False).stdout.strip()
        raise AssertionError(f"{exc}; lock={slurmd_lock(api, node)!r}; jobs on {node}: {jobs or 'none'}") from None


def lock_taint(api, k8s_node: str) -> bool:
    return objects.has_taint(kc.get(api, NODES, k8s_node), names.LOCK_KEY)


def node_field(dev_cluster, node: str, field: str) -> str:
    out = dev_cluster.slurm("scontrol", "show", "node", node).stdout
    for line in out.splitlines():
        line = line.strip()
        if line.startswith(f"{field}="):
            return line.partition("=")[2]
        for token in line.split():
            key, _, value = token.partition("=")
            if key == field:
                return value
    return ""


def event_reasons(api, namespace, name) -> set[str]:
    return {e["reason"] for e in kc.list_objects(api, EVENTS, namespace) if e["involvedObject"]["name"] == name}


def chroot_file(dev_cluster, inner: str):
    return dev_cluster.root / inner.lstrip("/")


# ---- acceptance: lock before the job, tolerating Pods stay, unlock after ---------------------------------


@pytest.mark.every_release
def test_job_starts_only_after_non_tolerating_pods_are_evicted(dev_cluster, kube_api, scripts, namespace):
    """Normal lock (a Slurm batch job): evicted Pods may still be terminating when the job starts."""
    make_pod(kube_api, namespace, "web", K8S_NODE3, delay=3)
    make_pod(kube_api, namespace, "logger", K8S_NODE3, tolerate=True)
    marker = f"/tmp/locktest-{uuid.uuid4().hex[:8]}.start"
    unlocked(kube_api, dev_cluster, "node3")
    with History(kube_api, "node3", namespace) as history:
        job = scripts.sbatch("node3", f"date +%s.%N > {marker}; sleep 3")
        # While the job's script runs (RUNNING alone includes the prolog), the Node is tainted and locked.
        wait_for(lambda: chroot_file(dev_cluster, marker).exists(), 40, "the job's script to start")
        assert lock_taint(kube_api, K8S_NODE3)
        assert slurmd_lock(kube_api, "node3") == "locked"
        wait_for(lambda: state(slurm_job(dev_cluster, job)) in ("COMPLETED", None), 40, "the job to end")
        # After it ended (epilog), the node is unlocked.
        wait_for(lambda: slurmd_lock(kube_api, "node3") == "false", 20, "unlock")
        wait_for(lambda: not lock_taint(kube_api, K8S_NODE3), 10, "taint removal")
        wait_for(lambda: "web" in history.deleted, 10, "the evicted Pod to be gone")
    started = float(chroot_file(dev_cluster, marker).read_text())
    chroot_file(dev_cluster, marker).unlink()

    seq = history.sequence()
    # `pending` may be skipped: a normal lock is not held up by a Pod that is already terminating,
    # so a reconcile that runs after the eviction (say, after a write conflict) goes straight to locked.
    assert "locked" in seq and seq[-1] == "false" and set(seq) <= {None, "false", "pending", "locked"}, seq
    assert seq.index("locked") < len(seq) - 1, seq
    if "pending" in seq:
        assert seq.index("pending") < seq.index("locked"), seq
        # (two watches see the same change at about the same time: allow them 0.1 s of skew)
        assert history.first("pending") - 0.1 < history.evicted["web"], (history.values, history.evicted)
    assert history.evicted["web"] < history.first("locked") + 0.1, (history.values, history.evicted)
    assert history.evicted["web"] < started and history.first("locked") <= started
    logger = get_pod(kube_api, namespace, "logger")
    assert logger is not None and not logger["metadata"].get("deletionTimestamp"), "a tolerating Pod was evicted"
    assert "Evicted" in wait_for(lambda: event_reasons(kube_api, namespace, "web"), 10, "eviction event")


def test_a_job_extra_its_user_wrote_never_drains_the_node(dev_cluster, kube_api, scripts):
    """Not UTF-8, and as long as Slurm takes (the hook API once answered 400 to such an Extra, and
    the prolog drained the node): the job runs under the sunk prolog and epilog, and the node stays
    in service. (Slurm 24.11's sbatch refuses an Extra over 1024 bytes: "parameter too long".)"""
    unlocked(kube_api, dev_cluster, "node3")
    extra = os.fsdecode((b"\xff\xfe\xc3 a user's own bytes " + b"x" * 1024)[:1024])
    job = scripts.sbatch("node3", "true", f"--extra={extra}")
    wait_for(lambda: state(slurm_job(dev_cluster, job)) in ("COMPLETED", None), 60, "the job to run and end")
    assert "DRAIN" not in node_field(dev_cluster, "node3", "State"), node_field(dev_cluster, "node3", "Reason")
    wait_for(lambda: slurmd_lock(kube_api, "node3") == "false", 20, "unlock")


def test_a_placeholders_identity_in_a_jobs_extra_takes_the_normal_lock(dev_cluster, kube_api, scripts, namespace):
    """Extra is the job's user's: a job whose Extra reads as a placeholder's identity (copied from a real one)
    is an ordinary job to the lock service and the Syncer. It takes the normal lock, never the strict one that
    only a placeholder (its identity in AdminComment, which only Slurm's super users write) may ask for."""
    unlocked(kube_api, dev_cluster, "node3")
    identity = PlaceholderIdentity(PodKey(str(uuid.uuid4())), namespace, name="placeholder").encode()
    with History(kube_api, "node3", namespace) as history:
        job = scripts.sbatch("node3", "sleep 3", f"--extra={identity}")
        wait_for(lambda: state(slurm_job(dev_cluster, job)) in ("COMPLETED", None), 60, "the job to run and end")
        wait_for(lambda: slurmd_lock(kube_api, "node3") == "false", 20, "unlock")
    seq = history.sequence()
    assert "locked" in seq and "locked_strict" not in seq, seq


def test_placeholder_job_waits_until_evicted_pods_are_gone(dev_cluster, kube_api, scripts, namespace):
    """Strict lock (the job's AdminComment names a Pod): the job starts only once evicted Pods are gone;
    a Pod placed by the SUNK Pod Scheduler for a job of the node stays, and a job-id annotation
    written by hand for a job the node does not run keeps nothing."""
    unlocked(kube_api, dev_cluster, "node3")
    make_pod(kube_api, namespace, "squatter", K8S_NODE3, annotations={names.ANN_JOB_ID: "1"})
    time.sleep(GRACE)  # older than the grace a fresh binding gets
    make_pod(kube_api, namespace, "web", K8S_NODE3, delay=3)
    marker = f"/tmp/locktest-{uuid.uuid4().hex[:8]}.start"
    identity = PlaceholderIdentity(PodKey(str(uuid.uuid4())), namespace, name="placeholder").encode()
    unlocked(kube_api, dev_cluster, "node3")
    with History(kube_api, "node3", namespace) as history:
        submitted = time.time()
        job = scripts.sbatch("node3", f"date +%s.%N > {marker}", admin_comment=identity)
        make_pod(kube_api, namespace, "slurm-job-pod", K8S_NODE3, annotations={names.ANN_JOB_ID: str(job)})
        seen: list[tuple[str, str, bool]] = []  # (state, reason, has_started) while the prolog holds the job

        def script_started() -> bool:
            record = parse_job(slurm_job(dev_cluster, job))
            seen.append((record.state, record.state_reason, has_started(record)))
            return chroot_file(dev_cluster, marker).exists()

        wait_for(script_started, 40, "the job's script to start")
        # (checked while its job runs: once the job ended, its Pod is no longer vouched for; the
        # scheduler deletes a placeholder's Pod with its job anyway)
        kept = get_pod(kube_api, namespace, "slurm-job-pod")
        wait_for(lambda: state(slurm_job(dev_cluster, job)) in ("COMPLETED", None), 40, "the job to end")
        wait_for(lambda: slurmd_lock(kube_api, "node3") == "false", 20, "unlock")
    started = float(chroot_file(dev_cluster, marker).read_text())
    chroot_file(dev_cluster, marker).unlink()

    seq = history.sequence()
    assert "pending" in seq and "locked_strict" in seq and "locked" not in seq, seq
    assert history.evicted["web"] < history.deleted["web"] < started
    assert history.deleted["web"] < history.first("locked_strict") + 0.1
    assert started - submitted > 2.5, "the job did not wait for the evicted Pod's 3 s termination"
    assert kept is not None and not kept["metadata"].get("deletionTimestamp"), "a SUNK-scheduled Pod was evicted"
    assert "slurm-job-pod" not in history.evicted or history.evicted["slurm-job-pod"] > started
    assert "squatter" in history.evicted, "a hand-written job-id kept a Pod on a node Slurm needed"
    # What the scheduler binds by (gang.has_started): Slurm runs the job during its prolog, with reason Prolog,
    # and shows it started only once the prolog, so the strict lock, is done.
    assert ("RUNNING", "Prolog", False) in seen, seen


def test_a_gangs_placeholder_locks_every_node_of_its_allocation_strictly(dev_cluster, kube_api, scripts, namespace):
    """A gang's job (its AdminComment names a gang, sunk/translate/gang.py) holds two nodes: the prolog runs on both
    (PrologFlags=Alloc), each is locked strictly, and the batch script starts only once both are."""
    for node in ("node3", "node4"):
        unlocked(kube_api, dev_cluster, node)
        wait_for(lambda n=node: dev_cluster.slurm("sinfo", "-h", "-n", n, "-o", "%T").stdout.strip() == "idle", 120,
                 f"{node} to be idle", interval=1)
    identity = PlaceholderIdentity(GangKey(namespace, f"job/{uuid.uuid4()}"), namespace, size=2,
                            members=(member_tag("a"), member_tag("b"))).encode()
    marker = f"/tmp/locktest-{uuid.uuid4().hex[:8]}.start"
    seen: dict[str, set] = {"node3": set(), "node4": set()}
    out = dev_cluster.slurm("sbatch", "--parsable", "-N", "2", "-w", "node[3-4]", "--exclusive", "-o", "/dev/null",
                            f"--comment={scripts.marker}", "--hold", "--wrap", f"date +%s.%N > {marker}; sleep 5")
    job = int(out.stdout.strip().split(";")[0])
    admin_hold(dev_cluster, job, identity)

    def both_strict():
        for node in seen:
            seen[node].add(slurmd_lock(kube_api, node))
        return all("locked_strict" in values for values in seen.values())

    wait_for(both_strict, 40, "both nodes locked strictly")
    wait_for(lambda: chroot_file(dev_cluster, marker).exists(), 40, "the batch script to start")
    assert all("locked" not in values for values in seen.values()), seen  # strict, never the plain lock
    wait_for(lambda: state(slurm_job(dev_cluster, job)) in ("COMPLETED", None), 60, "the job to end")
    for node in ("node3", "node4"):
        wait_for(lambda n=node: slurmd_lock(kube_api, n) == "false", 20, f"{node} unlocked")
    chroot_file(dev_cluster, marker).unlink()


def test_prehook_on_an_already_locked_node_answers_at_once(dev_cluster, kube_api, scripts, syncer, token):
    job = scripts.sbatch("node3", "sleep 30")
    try:
        # Its prolog over (so its own pre-hook has answered): a second live call for the same job and node would
        # take that wait over, and the prolog's retry would take this one's back.
        wait_for(lambda: (found := slurm_job(dev_cluster, job)) and has_started(parse_job(found)), 40,
                 "the job to run past its prolog")
        started = time.monotonic()
        # (the job's own id again: a pre-hook counts only for a job Slurm shows holding the node)
        resp = requests.post(f"{syncer.url}/api/v1/nodes/node3/pre-hook", json={"job_id": job, "timeout": 5},
                             headers=node_auth(token, "node3"), timeout=10)
        assert resp.status_code == 200, resp.text
        assert resp.json()["state"] == "locked" and resp.json()["level"] == "normal"
        assert time.monotonic() - started < 2
    finally:
        dev_cluster.slurm("scancel", str(job))
    wait_for(lambda: slurmd_lock(kube_api, "node3") == "false", 30, "unlock after scancel")


def test_a_strict_lock_holds_past_2000_hostile_connections_to_the_hook_api(dev_cluster, kube_api, scripts, syncer,
                                                                          namespace):
    """Issue 31 item 3: 1000 idle connections and 1000 that sent one byte of a request, held open to the Syncer's
    hook API (any Slurm user on a node can open them), do not stop a placeholder's strict lock: the real prolog's
    pre-hook evicts, locks and answers, the job runs and ends, the node unlocks, nothing is drained."""
    port = int(syncer.url.rsplit(":", 1)[1])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 2000 + 1024)), hard))
    held: list[socket.socket] = []
    unlocked(kube_api, dev_cluster, "node3")
    make_pod(kube_api, namespace, "web-hostile", K8S_NODE3)
    try:
        for n in range(2000):  # from 40 addresses of 127/8, 50 each: under the per-peer cap, so all are held
            sock = socket.create_connection(("127.0.0.1", port), timeout=30,
                                            source_address=(f"127.0.1.{n // 50 + 1}", 0))
            if n % 2:
                sock.sendall(b"P")
            held.append(sock)
        identity = PlaceholderIdentity(PodKey(str(uuid.uuid4())), namespace, name="placeholder").encode()
        with History(kube_api, "node3", namespace) as history:
            job = scripts.sbatch("node3", "true", admin_comment=identity)
            wait_for(lambda: state(slurm_job(dev_cluster, job)) in ("COMPLETED", None), 60, "the job to run and end")
            wait_for(lambda: slurmd_lock(kube_api, "node3") == "false", 30, "unlock")
        assert "locked_strict" in history.sequence(), history.sequence()
        assert "web-hostile" in history.evicted
        assert "DRAIN" not in node_field(dev_cluster, "node3", "State"), node_field(dev_cluster, "node3", "Reason")
    finally:
        for sock in held:
            sock.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_strict_lock_holds_while_one_host_floods_the_hook_api_past_its_cap(dev_cluster, kube_api, scripts, syncer,
                                                                            namespace):
    """Issue 31 item 3 (per-peer cap): one host opening connections to the Syncer's hook API without end (any Slurm
    user on a node can), far past its per-peer cap, makes the server close only its own; the real prolog's
    pre-hook (another peer) still evicts, locks and answers, the job runs and ends, the node unlocks, no drain."""
    port = int(syncer.url.rsplit(":", 1)[1])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 2000 + 1024)), hard))
    unlocked(kube_api, dev_cluster, "node3")
    make_pod(kube_api, namespace, "web-flood", K8S_NODE3)
    try:
        with Flood(port, held=2000, source="127.0.2.1", per_second=500.0) as flood:
            wait_for(lambda: flood.opened > 1000, 60, "the flood past its cap")
            identity = PlaceholderIdentity(PodKey(str(uuid.uuid4())), namespace, name="placeholder").encode()
            with History(kube_api, "node3", namespace) as history:
                job = scripts.sbatch("node3", "true", admin_comment=identity)
                wait_for(lambda: state(slurm_job(dev_cluster, job)) in ("COMPLETED", None), 60,
                         "the job to run and end")
                wait_for(lambda: slurmd_lock(kube_api, "node3") == "false", 30, "unlock")
        assert flood.closed_by_server > 0  # (its own oldest, for its newer ones: the cap in the real daemon)
        assert "locked_strict" in history.sequence(), history.sequence()
        assert "web-flood" in history.evicted
        assert "DRAIN" not in node_field(dev_cluster, "node3", "State"), node_field(dev_cluster, "node3", "Reason")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# ---- acceptance: a PodDisruptionBudget blocks the lock: the job does not run, the node drains ---------


def test_blocked_eviction_fails_the_prolog_and_drains_the_node(dev_cluster, kube_api, scripts, namespace):
    make_pod(kube_api, namespace, "guarded", K8S_NODE4, labels={"app": "guarded"})
    budget(kube_api, namespace, "guarded", minAvailable=1)
    marker = f"/tmp/locktest-{uuid.uuid4().hex[:8]}.ran"
    scripts.set_timeout(8)
    job = None
    try:
        unlocked(kube_api, dev_cluster, "node4")
        with History(kube_api, "node4", namespace) as history:
            job = scripts.sbatch("node4", f"touch {marker}")
            reason = wait_for(lambda: "sunk-lock" in (r := node_field(dev_cluster, "node4", "Reason")) and r, 40,
                              "node4 drained by the prolog")
            assert "DRAIN" in node_field(dev_cluster, "node4", "State")
            assert f"job {job}" in reason and "lock timeout after 8s" in reason and "guarded" in reason, reason
            # The job did not run; the prolog requeued it held, as Slurm does after a failed prolog (but
            # without Slurm's 'Prolog error' drain); the lock is released since nothing runs on node4.
            wait_for(lambda: state(slurm_job(dev_cluster, job)) == "PENDING", 20, "the job to be requeued")
            assert slurm_job(dev_cluster, job)["state_description"] == "job requeued in held state"
            assert not chroot_file(dev_cluster, marker).exists()
            wait_for(lambda: slurmd_lock(kube_api, "node4") == "false", 30, "unlock after the failed prolog")
            wait_for(lambda: not lock_taint(kube_api, K8S_NODE4), 10, "taint removal")
        assert "pending" in history.sequence() and "locked" not in history.sequence(), history.sequence()
        assert get_pod(kube_api, namespace, "guarded") is not None
        assert "EvictionBlocked" in event_reasons(kube_api, namespace, "guarded")
        # sunk's own drain (issue 18): it names the Pod, stays while the Pod does, and goes with it.
        drain = drains.parse(slurm_reason(reason))
        assert isinstance(drain, drains.LockTimeoutDrain), reason
        assert (drain.job_id, drain.k8s_node, drain.pods) == (job, K8S_NODE4, (f"{namespace}/guarded",)), reason
        time.sleep(3)
        assert "DRAIN" in node_field(dev_cluster, "node4", "State"), "lifted while the guarded Pod is still there"
        kc.delete(kube_api, PODS, "guarded", namespace, grace_period_seconds=0)  # (a deletion: no budget asked)
        wait_for(lambda: get_pod(kube_api, namespace, "guarded") is None, 30, "the guarded Pod to be gone")
        wait_for(lambda: "DRAIN" not in node_field(dev_cluster, "node4", "State"), 15,
                 "node4 undrained by the Syncer once the Pod that blocked the lock is gone")
    finally:
        scripts.set_timeout(30)
        if job is not None:
            dev_cluster.slurm("scancel", str(job), check=False)
        kc.delete(kube_api, PDBS, "guarded", namespace)
        dev_cluster.slurm("scontrol", "update", "nodename=node4", "state=resume", check=False)


def test_an_operators_drain_survives_a_failed_prolog_and_the_syncer(dev_cluster, kube_api, scripts, namespace):
    """An operator drains the node ("hardware: fan") while the prolog waits for a lock it will not get. Slurm keeps
    one reason per node: the prolog used to write its own ``k8s:`` one over it, which the Syncer then lifted,
    returning a faulty node to service. Now the prolog stops the job and leaves the operator's reason."""
    make_pod(kube_api, namespace, "guarded", K8S_NODE4, labels={"app": "guarded-fan"})
    budget(kube_api, namespace, "guarded-fan", minAvailable=1)
    scripts.set_timeout(8)
    job = None
    try:
        unlocked(kube_api, dev_cluster, "node4")
        job = scripts.sbatch("node4", "true")
        wait_for(lambda: state(slurm_job(dev_cluster, job)) == "RUNNING", 20, "the prolog to start")
        dev_cluster.slurm("scontrol", "update", "nodename=node4", "state=drain", "reason=hardware: fan")
        wait_for(lambda: state(slurm_job(dev_cluster, job)) == "PENDING", 40, "the job requeued by the prolog")
        assert slurm_job(dev_cluster, job)["state_description"] == "job requeued in held state"
        time.sleep(5)  # the Syncer's turn: it lifts only the drains it can read as sunk's
        assert node_field(dev_cluster, "node4", "Reason").startswith("hardware: fan"), \
            node_field(dev_cluster, "node4", "Reason")
        assert "DRAIN" in node_field(dev_cluster, "node4", "State")
    finally:
        scripts.set_timeout(30)
        if job is not None:
            dev_cluster.slurm("scancel", str(job), check=False)
        kc.delete(kube_api, PDBS, "guarded-fan", namespace)
        kc.delete(kube_api, PODS, "guarded", namespace, grace_period_seconds=0)
        dev_cluster.slurm("scontrol", "update", "nodename=node4", "state=resume", check=False)


def test_a_lock_timeout_with_more_blocking_pods_than_a_reason_names_is_lifted_once_they_are_gone(
        dev_cluster, kube_api, scripts, namespace):
    """The CI run of 2026-11-28: five Pods did not fit in the reason, and node4 stayed drained for good."""
    blockers = [f"a-pod-name-long-enough-that-six-cannot-be-named-{i}" for i in range(6)]
    for name in blockers:
        make_pod(kube_api, namespace, name, K8S_NODE4, labels={"app": "guarded"})
    budget(kube_api, namespace, "guarded", maxUnavailable=0)
    scripts.set_timeout(8)
    job = None
    try:
        unlocked(kube_api, dev_cluster, "node4")
        job = scripts.sbatch("node4", "true")
        shown = wait_for(lambda: "sunk-lock" in (r := node_field(dev_cluster, "node4", "Reason")) and r, 40,
                         "node4 drained by the prolog")
        drain = drains.parse(slurm_reason(shown))
        assert isinstance(drain, drains.LockTimeoutDrain), shown
        assert (drain.job_id, drain.k8s_node, drain.pods, drain.count) == (job, K8S_NODE4, (), 6), shown
        wait_for(lambda: slurmd_lock(kube_api, "node4") == "false", 30, "unlock after the failed prolog")
        # A Pod that comes once the lock is given up is not what refused the job: it does not keep the drain.
        time.sleep(1.1)  # (bound in a later second than the last of the six)
        make_pod(kube_api, namespace, "came-after", K8S_NODE4)
        for name in blockers[:-1]:
            kc.delete(kube_api, PODS, name, namespace, grace_period_seconds=0)
        time.sleep(3)
        assert "DRAIN" in node_field(dev_cluster, "node4", "State"), "lifted while a Pod that blocked is still there"
        kc.delete(kube_api, PODS, blockers[-1], namespace, grace_period_seconds=0)
        wait_for(lambda: "DRAIN" not in node_field(dev_cluster, "node4", "State"), 30,
                 "node4 undrained by the Syncer once the Pods that blocked the lock are gone")
        assert get_pod(kube_api, namespace, "came-after") is not None
    finally:
        scripts.set_timeout(30)
        if job is not None:
            dev_cluster.slurm("scancel", str(job), check=False)
        kc.delete(kube_api, PDBS, "guarded", namespace)
        dev_cluster.slurm("scontrol", "update", "nodename=node4", "state=resume", check=False)


def slurm_reason(shown: str) -> str:
    """The reason itself: scontrol shows it followed by " [user@time]"."""
    return re.sub(r" \[[^\]]*\]$", "", shown)


def test_a_prolog_drain_after_a_hook_api_outage_is_lifted_once_the_syncer_is_back(dev_cluster, kube_api, scripts,
                                                                                   syncer):
    """Issue 18: with the Syncer down, the prolog fails closed and drains; that drain used to stay for
    ever. Once the Syncer is back and its lock agrees with Slurm (the refused job is requeued, held, and
    nothing holds the node), it is lifted within seconds."""
    scripts.set_timeout(6)
    job = None
    try:
        unlocked(kube_api, dev_cluster, "node4")
        syncer.stop()
        try:
            job = scripts.sbatch("node4", "true")
            shown = wait_for(lambda: "sunk-lock" in (r := node_field(dev_cluster, "node4", "Reason")) and r, 40,
                             "node4 drained by the prolog")
            drain = drains.parse(slurm_reason(shown))
            assert isinstance(drain, drains.HookUnreachableDrain) and drain.job_id == job, shown
            wait_for(lambda: state(slurm_job(dev_cluster, job)) == "PENDING", 20, "the job to be requeued")
        finally:
            syncer.start()
        back = time.monotonic()
        wait_for(lambda: "DRAIN" not in node_field(dev_cluster, "node4", "State"), 30,
                 "node4 undrained by the Syncer once it is back", interval=0.5)
        print(f"outage drain lifted {time.monotonic() - back:.1f}s after the Syncer was ready")
        assert slurmd_lock(kube_api, "node4") in (None, "false") and not lock_taint(kube_api, K8S_NODE4)
    finally:
        scripts.set_timeout(30)
        if job is not None:
            dev_cluster.slurm("scancel", str(job), check=False)
        dev_cluster.slurm("scontrol", "update", "nodename=node4", "state=resume", check=False)


# ---- the hook API itself ------------------------------------------------------------------------------


def lock_taints(api, k8s_node: str) -> list[str]:
    return [t["effect"] for t in (kc.get(api, NODES, k8s_node)["spec"].get("taints") or [])
            if t["key"] == names.LOCK_KEY]


def test_switching_the_taint_effect_to_noexecute_keeps_the_pods_sunk_placed(dev_cluster, kube_api, syncer, token,
                                                                          lease, namespace, tmp_path):
    """Bound under a NoSchedule lock, a SUNK-placed Pod has no toleration; an operator then restarts
    the Syncer with NoExecute. The Pod must tolerate the taint before it lands (Kubernetes' taint
    manager would evict it), the old taint must not stay beside the new one, and unlock removes it.

    The Pod names the job that holds node4: a Pod naming another job is kept only for
    --lock-request-grace after its binding (5 s here), so on a loaded machine, where the lock takes
    longer to show, the first Syncer could evict it before the switch."""
    unlocked(kube_api, dev_cluster, "node4")
    job = dev_cluster.slurm("sbatch", "--parsable", "--chdir=/tmp", "-o", "/dev/null", "-w", "node4",
                            "--wrap", "sleep 120").stdout.strip()
    inference = make_pod(kube_api, namespace, "inference", K8S_NODE4, annotations={names.ANN_JOB_ID: job})
    assert not tolerates_lock(inference)  # (only the default not-ready/unreachable ones)
    switched = SyncerProcess(dev_cluster, token[1], tmp_path, ["--node-permissions-enabled",
                                                               "--lock-taint-effect=NoExecute"], lease=lease)
    try:
        wait_for(lambda: lock_taints(kube_api, K8S_NODE4) == ["NoSchedule"], 40, "the NoSchedule lock")
        syncer.stop()
        switched.start()
        wait_for(lambda: lock_taints(kube_api, K8S_NODE4) == ["NoExecute"], 40, "the NoExecute lock alone")
        pod = get_pod(kube_api, namespace, "inference")
        assert pod is not None and not pod["metadata"].get("deletionTimestamp")
        assert tolerates_lock(pod, "NoExecute"), pod["spec"].get("tolerations")
        dev_cluster.slurm("scancel", job)
        wait_for(lambda: lock_taints(kube_api, K8S_NODE4) == [], 40, "the lock taint to go at unlock")
    finally:
        dev_cluster.slurm("scancel", job, check=False)
        switched.stop()
        syncer.start()


def test_a_request_whose_job_ended_without_a_post_hook_unlocks_when_it_expires(dev_cluster, kube_api, syncer,
                                                                               token):
    """A pre-hook, then no post-hook (the epilog never ran): once the job is gone, the lock goes when
    the request expires, on an idle node where nothing else happens."""
    unlocked(kube_api, dev_cluster, "node4")
    job = int(dev_cluster.slurm("sbatch", "--parsable", "--chdir=/tmp", "-o", "/dev/null", "-w", "node4",
                                "--wrap", "sleep 60").stdout.strip())
    try:
        wait_for(lambda: state(slurm_job(dev_cluster, job)) == "RUNNING", 40, "the job to run")
        resp = requests.post(f"{syncer.url}/api/v1/nodes/node4/pre-hook", json={"job_id": job, "timeout": 10},
                             headers=node_auth(token, "node4"), timeout=15)
        assert resp.status_code == 200, resp.text
        requested_at = time.monotonic()
    finally:
        dev_cluster.slurm("scancel", str(job))
    wait_for(lambda: state(slurm_job(dev_cluster, job)) in ("CANCELLED", None)
             and "COMPLETING" not in (slurm_job(dev_cluster, job) or {}).get("job_state", []), 40, "the job to end")
    assert slurmd_lock(kube_api, "node4") in ("locked", "pending"), "the request must hold the lock until it expires"
    wait_for(lambda: slurmd_lock(kube_api, "node4") == "false", GRACE + 15, "unlock after the request expired")
    assert time.monotonic() - requested_at > GRACE - 1, "unlocked before the request's grace"
    wait_for(lambda: lock_taints(kube_api, K8S_NODE4) == [], 10, "the lock taint to go")


def test_a_pre_hook_for_a_job_that_does_not_hold_the_node_locks_nothing(dev_cluster, kube_api, syncer, token):
    """Measured before: a pre-hook naming a job id Slurm never had answered 200, set the lock
    annotation and tainted the Node. A token holder must not be able to lock a Node at will."""
    unlocked(kube_api, dev_cluster, "node4")
    elsewhere = int(dev_cluster.slurm("sbatch", "--parsable", "--chdir=/tmp", "-o", "/dev/null", "-w", "node3",
                                      "--wrap", "sleep 60").stdout.strip())
    try:
        wait_for(lambda: state(slurm_job(dev_cluster, elsewhere)) == "RUNNING", 40, "the job to run on node3")
        for job_id, status in ((999998, 403), (elsewhere, 403)):
            resp = requests.post(f"{syncer.url}/api/v1/nodes/node4/pre-hook", json={"job_id": job_id, "timeout": 5},
                                 headers=node_auth(token, "node4"), timeout=15)
            assert resp.status_code == status and resp.json()["error"], resp.text
        time.sleep(2)
        pod = kc.get(kube_api, PODS, "node4", "slurm")
        assert not [k for k in pod["metadata"].get("annotations") or {} if k.startswith(REQUEST_PREFIX)]
        assert slurmd_lock(kube_api, "node4") in (None, "false") and lock_taints(kube_api, K8S_NODE4) == []
    finally:
        dev_cluster.slurm("scancel", str(elsewhere))
        unlocked(kube_api, dev_cluster, "node3")


def test_calls_without_the_nodes_own_token_get_401(kube_api, dev_cluster, syncer, token):
    """Not the secret itself, not another node's token: a leaked node token opens that node only."""
    unlocked(kube_api, dev_cluster, "node3")
    for path in ("pre-hook", "post-hook", "reboot"):
        resp = requests.post(f"{syncer.url}/api/v1/nodes/node3/{path}", json={"job_id": 1}, timeout=5)
        assert resp.status_code == 401 and "token" in resp.json()["error"]
        for headers in ({"Authorization": "Bearer not-the-token"}, {"Authorization": f"Bearer {token[0]}"},
                        node_auth(token, "node4")):
            resp = requests.post(f"{syncer.url}/api/v1/nodes/node3/{path}", json={"job_id": 1}, timeout=5,
                                 headers=headers)
            assert resp.status_code == 401, (headers, resp.text)
    assert slurmd_lock(kube_api, "node3") in (None, "false")


def test_unknown_nodes_and_bad_bodies_get_json_4xx(syncer, token):
    resp = requests.post(f"{syncer.url}/api/v1/nodes/node1/pre-hook", json={"job_id": 1},
                         headers=node_auth(token, "node1"), timeout=5)
    assert resp.status_code == 404 and "node1" in resp.json()["error"]  # not a node this syncer manages
    resp = requests.post(f"{syncer.url}/api/v1/nodes/nosuchnode/post-hook", json={"job_id": 1},
                         headers=node_auth(token, "nosuchnode"), timeout=5)
    assert resp.status_code == 404
    resp = requests.post(f"{syncer.url}/api/v1/nodes/node3/pre-hook", data="job=1", headers=node_auth(token, "node3"),
                         timeout=5)
    assert resp.status_code == 400 and resp.json()["error"]


def test_reboot_sets_the_node_condition(kube_api, syncer, token):
    auth = node_auth(token, "node4")
    try:
        resp = requests.post(f"{syncer.url}/api/v1/nodes/node4/reboot", json={"message": "test reboot"},
                             headers=auth, timeout=10)
        assert resp.status_code == 200, resp.text
        assert resp.json()["k8s_node"] == K8S_NODE4
        cond = objects.get_condition(kc.get(kube_api, NODES, K8S_NODE4), names.DEFAULT_REBOOT_CONDITION)
        assert cond is not None
        assert (cond["status"], cond["reason"], cond["message"]) == ("True", "production-powerreset", "test reboot")
    finally:
        _remove_node_condition(kube_api, K8S_NODE4, names.DEFAULT_REBOOT_CONDITION)


def test_reboot_sets_the_condition_and_reason_it_is_configured_with(kube_api, dev_cluster, syncer, token, lease,
                                                                    tmp_path):
    """.syncer.hooksAPI.nodeRebootCondition / nodeRebootReason (--node-reboot-condition / --node-reboot-reason):
    the Node gets that condition, with that reason, and not the default PhaseState. Served by a second replica
    (the module's Lease: it never leads, so it syncs nothing), since the hook API answers on every replica."""
    condition, reason = "NeedsReboot", "sunk-test-powercycle"
    replica = SyncerProcess(dev_cluster, token[1], tmp_path, ["--node-permissions-enabled",
                                                              f"--node-reboot-condition={condition}",
                                                              f"--node-reboot-reason={reason}"], lease=lease)
    _remove_node_condition(kube_api, K8S_NODE4, names.DEFAULT_REBOOT_CONDITION)
    try:
        replica.start()

        def reboot() -> list[requests.Response] | None:  # (503 until the replica's caches are synced)
            answer = requests.post(f"{replica.url}/api/v1/nodes/node4/reboot", json={},
                                   headers=node_auth(token, "node4"), timeout=10)
            return None if answer.status_code == 503 else [answer]

        resp = wait_for(reboot, 30, "the replica's hook API to answer")[0]
        assert resp.status_code == 200, resp.text
        assert resp.json()["k8s_node"] == K8S_NODE4 and resp.json()["condition"]["type"] == condition
        node = kc.get(kube_api, NODES, K8S_NODE4)
        cond = objects.get_condition(node, condition)
        assert cond is not None
        assert (cond["status"], cond["reason"]) == ("True", reason)
        assert "node4" in cond["message"]  # no message asked: the default one names the Slurm node
        assert objects.get_condition(node, names.DEFAULT_REBOOT_CONDITION) is None
    finally:
        replica.stop()
        _remove_node_condition(kube_api, K8S_NODE4, condition)


def _remove_node_condition(api, node: str, ctype: str) -> None:
    def mutate(current):
        conds = (current.get("status") or {}).get("conditions") or []
        kept = [c for c in conds if c.get("type") != ctype]
        return None if len(kept) == len(conds) else {"status": {"conditions": kept}}

    kp.update_with_retry(api, kc.get(api, NODES, node), mutate, resource=NODES, subresource="status")


def node4_locked_for(job: int, dev_cluster, kube_api, syncer, token) -> None:
    """The job running on node4, its pre-hook answered, its Node locked."""
    wait_for(lambda: state(slurm_job(dev_cluster, job)) == "RUNNING", 40, "the job to run")
    resp = requests.post(f"{syncer.url}/api/v1/nodes/node4/pre-hook", json={"job_id": job, "timeout": 20},
                         headers=node_auth(token, "node4"), timeout=30)
    assert resp.status_code == 200, resp.text
    wait_for(lambda: lock_taints(kube_api, K8S_NODE4), 10, "node4's Node locked")


def delete_node4s_pod(kube_api, dev_cluster) -> None:
    """node4's slurmd Pod deleted, and kept gone (its NodeSet's operator stopped: it would make it again at once)
    until ``node4_back``: a Pod that went, as when its NodeSet is scaled down."""
    dev_cluster.stop_component("sunk-operator")
    kc.delete(kube_api, PODS, "node4", "slurm", grace_period_seconds=0)


def node4_back(kube_api, dev_cluster) -> None:
    """node4's slurmd Pod made again by its NodeSet after a test deleted it, labelled for this module's Syncer,
    which then lifts the drain it made while the Pod was missing: the next test finds node4 as the module found
    it."""
    try:
        wait_for(lambda: not [p for p in kc.list_objects(kube_api, PODS, "slurm", field_selector="metadata.name=node4")
                              if not p["metadata"].get("deletionTimestamp")], 30, "node4's Pod gone")
    finally:
        dev_cluster.start_component("sunk-operator")  # (never left stopped: every later test needs its Pods)

    def running() -> dict | None:
        pods = kc.list_objects(kube_api, PODS, "slurm", field_selector="metadata.name=node4")
        return next((p for p in pods if (p.get("status") or {}).get("phase") == "Running"), None)

    pod = wait_for(running, 60, "node4's slurmd Pod made again by its NodeSet and Running")
    kp.set_labels(kube_api, pod, {LABEL: "true"})
    wait_for(lambda: "DRAIN" not in node_field(dev_cluster, "node4", "State"), 30, "node4 undrained by the Syncer")
    unlocked(kube_api, dev_cluster, "node4")


def test_a_lock_whose_slurmd_pod_went_while_the_syncer_was_down_goes_when_it_starts(dev_cluster, kube_api, syncer,
                                                                                     token):
    """The Syncer down (a crash, a rollout) when a locked Node's slurmd Pod is deleted: it never sees the
    deletion, yet once back it finds the Node's hold naming a Pod that is nowhere, and lifts the lock (before, the
    taint stayed until an uninstall's release-nodes or a person)."""
    unlocked(kube_api, dev_cluster, "node4")
    job = int(dev_cluster.slurm("sbatch", "--parsable", "--chdir=/tmp", "-o", "/dev/null", "-w", "node4",
                                "--wrap", "sleep 120").stdout.strip())
    try:
        node4_locked_for(job, dev_cluster, kube_api, syncer, token)
        syncer.stop()
        delete_node4s_pod(kube_api, dev_cluster)
        wait_for(lambda: not kc.list_objects(kube_api, PODS, "slurm", field_selector="metadata.name=node4"), 30,
                 "node4's Pod gone while no Syncer runs")
        assert lock_taints(kube_api, K8S_NODE4)  # (nobody else lifts it)
        syncer.start()
        wait_for(lambda: lock_taints(kube_api, K8S_NODE4) == [], 30, "the lock to go once the Syncer is back")
        node = kc.get(kube_api, NODES, K8S_NODE4)
        assert names.ANN_LOCK_HOLDERS not in (node["metadata"].get("annotations") or {})
    finally:
        syncer.start()
        dev_cluster.slurm("scancel", str(job), check=False)
        node4_back(kube_api, dev_cluster)


def test_a_locked_nodes_lock_goes_with_its_slurmd_pod(dev_cluster, kube_api, syncer, token):
    """A slurmd Pod deleted while its Node is locked (a NodeSet scaled down): nothing maps that Node to a
    Slurm node any more, yet its lock taint must not keep Kubernetes Pods off it."""
    unlocked(kube_api, dev_cluster, "node4")
    job = int(dev_cluster.slurm("sbatch", "--parsable", "--chdir=/tmp", "-o", "/dev/null", "-w", "node4",
                                "--wrap", "sleep 120").stdout.strip())
    try:
        node4_locked_for(job, dev_cluster, kube_api, syncer, token)
        delete_node4s_pod(kube_api, dev_cluster)
        wait_for(lambda: lock_taints(kube_api, K8S_NODE4) == [], 20, "the lock to go with the slurmd Pod")
        wait_for(lambda: [e for e in kc.list_objects(kube_api, EVENTS, "default")
                          if e["involvedObject"].get("name") == K8S_NODE4 and e.get("reason") == "Unlocked"
                          and "no slurmd Pod" in e.get("message", "")], 10, "an Event on the Node saying why")
    finally:
        dev_cluster.slurm("scancel", str(job), check=False)
        node4_back(kube_api, dev_cluster)
