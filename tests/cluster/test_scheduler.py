"""sunk-scheduler against real Slurm and a real apiserver: every flow of issue 6."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest
import requests
from dropproxy import DropProxy
from kube_testns import create_namespace, purge_namespace
from procs import Process, secret_file
from rbac_harness import as_service_account, assert_never_forbidden
from slurmtools import (
    all_nodes,
    idle_node,
    jobs_carrying,
    number,
    slurm_job,
    started_placeholder,
    state,
    topo_exclusive,
    wait_for,
)
from syncer_harness import free_port

from scheduler.config import PENDING_REASON_INTERVAL
from sunk.kube import client as kc
from sunk.kube.resources import EVENTS, NODES, PODS, Resource
from sunk.model import hostlist, names
from sunk.slurm.v0042 import parse_job
from sunk.translate.lock import tolerates_lock
from sunk_dev import slurmconf
from sunk_dev.cluster import k8s_node_for

SCHEDULER = "sunk-scheduler-test"
TOO_MANY_CPUS = str(slurmconf.NODE_CPUS + 1)
PORTS = {"hooks": 18100, "metrics": 18180, "probes": 18181}
LEASE = "sunk-scheduler-test"  # the module's scheduler's; the chart's Role names every Lease its account may hold
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")


@pytest.fixture(scope="module")
def namespace(kube_api):
    ns = create_namespace(kube_api)
    yield ns
    purge_namespace(kube_api, ns)


def scheduler_process(dev_cluster, namespace, tmp_dir, name="sunk-scheduler", ports=PORTS,
                      extra_args=()) -> Process:
    env = dev_cluster.env()
    return Process(
        name, "sunk.commands.scheduler",
        [
            f"--scheduler-name={SCHEDULER}", "--scope=namespace", f"--watch-namespace={namespace}",
            f"--kubeconfig={env['KUBECONFIG']}", *dev_cluster.slurm_flags(), "--slurm-kill-wait=30s",
            f"--hooks-api-bind-address=127.0.0.1:{ports['hooks']}",
            f"--hooks-url=http://127.0.0.1:{ports['hooks']}",
            # Stable across runs, like the Secret in production: jobs outlive scheduler processes.
            f"--hook-secret-file={secret_file(dev_cluster.run_dir, 'test-hook.secret')}",
            f"--identity-policy={dev_cluster.identity_policy_file()}",
            f"--metrics-bind-address=127.0.0.1:{ports['metrics']}",
            f"--health-probe-bind-address=127.0.0.1:{ports['probes']}",
            f"--leader-election-namespace={namespace}", "--zap-log-level=debug", *extra_args,
        ],
        ready_url=f"http://127.0.0.1:{ports['probes']}/readyz",
        log_dir=tmp_dir,
    )


@contextmanager
def serving(kube_api, dev_cluster, proc: Process, namespaces: str | Sequence[str], *,
            purge: bool = True) -> Iterator[Process]:
    """Run a scheduler (or extender) for ``namespaces`` (one, or several); at the end their Pods go, and
    their jobs end, while it still runs; then it stops and, if ``purge``, the namespaces go."""
    spaces = (namespaces,) if isinstance(namespaces, str) else tuple(namespaces)
    proc.start()
    try:
        yield proc
    finally:
        try:
            for namespace in spaces:
                end_pods(kube_api, dev_cluster, namespace)
        finally:
            proc.stop()
            if purge:
                for namespace in spaces:
                    purge_namespace(kube_api, namespace)


@pytest.fixture(scope="module")
def scheduler(kube_api, dev_cluster, namespace, tmp_path_factory):
    """sunk-scheduler as deployed: the chart's ServiceAccount and RBAC. Every path that writes in
    this module (bindings, Events, PodScheduled=False for an invalid or refused Pod, deleting a Pod
    whose job ended or was preempted, the job-id annotation) runs as it, and a 403 fails the module."""
    tmp = tmp_path_factory.mktemp("scheduler")
    lease = LEASE
    account, kubeconfig = as_service_account(kube_api, dev_cluster, "scheduler-rbac.yaml", tmp, leases=[lease])
    proc = scheduler_process(dev_cluster, namespace, tmp, extra_args=(
        f"--kubeconfig={kubeconfig}", f"--leader-election-namespace={account['namespace']}",
        f"--leader-election-id={lease}"))
    with serving(kube_api, dev_cluster, proc, namespace, purge=False):  # (the namespace fixture purges)
        yield proc
    assert_never_forbidden(proc.log)


def end_pods(api, dev_cluster, namespace: str, timeout: float = 90) -> None:
    """Delete every Pod while the scheduler still runs, and wait for their jobs to end.

    Stopping the scheduler first would leave running placeholder jobs behind.
    """
    for pod in kc.list_objects(api, PODS, namespace):
        try:  # (a controller or the scheduler may delete a Pod between the list and these calls)
            if pod["metadata"].get("finalizers"):
                kc.patch(api, PODS, pod["metadata"]["name"], {"metadata": {"finalizers": None}}, namespace)
            kc.delete(api, PODS, pod["metadata"]["name"], namespace)
        except kc.ApiError as exc:
            if not exc.not_found:
                raise

    def active_jobs():
        out = dev_cluster.slurm("squeue", "-h", "-t", "PD,R,CG,S", "-o", "%i", check=False).stdout.split()
        return [j for j in out if f"ns={namespace} " in slurm_job(dev_cluster, int(j)).get("admin_comment", "")]

    deadline = time.monotonic() + timeout
    while (left := active_jobs()) and time.monotonic() < deadline:
        time.sleep(1)
    # A job outliving its Pod this long is a leak, and it would hold its node through later modules.
    assert not left, f"placeholder jobs of {namespace} still active {timeout:.0f}s after their Pods' deletion: {left}"


def pod_manifest(name, *, annotations=None, cpu="1", memory="1Gi", gpus=0, grace=5, **spec):
    resources = {"requests": {"cpu": cpu, "memory": memory}} if cpu or memory else {}
    if resources and not cpu:
        del resources["requests"]["cpu"]
    if resources and not memory:
        del resources["requests"]["memory"]
    if gpus:
        resources.setdefault("requests", {})["nvidia.com/gpu"] = str(gpus)
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"schedulerName": SCHEDULER, "terminationGracePeriodSeconds": grace,
                 "containers": [{"name": "main", "image": "busybox", "resources": resources}], **spec},
    }


def create_pod(api, namespace, name=None, **kwargs):
    name = name or f"p-{uuid.uuid4().hex[:6]}"
    return kc.create(api, PODS, pod_manifest(name, **kwargs), namespace)


def get_pod(api, namespace, name):
    try:
        return kc.get(api, PODS, name, namespace)
    except kc.ApiError as exc:
        if exc.not_found:
            return None
        raise


def job_id_of(api, dev_cluster, namespace, name, timeout=30) -> int:
    """The Pod's placeholder job, found the way the scheduler finds it: the Pod's UID in the job.

    Not the job-id annotation: that is the scheduler's word for it, written just after the submission.
    """
    uid = get_pod(api, namespace, name)["metadata"]["uid"]
    ids = wait_for(lambda: jobs_for_pod(dev_cluster, uid), timeout, f"a placeholder job for {name}")
    assert len(ids) == 1, f"{name} has {len(ids)} placeholder jobs: {ids}"
    return ids[0]


def events_for(api, namespace, name) -> list[dict]:
    return [e for e in kc.list_objects(api, EVENTS, namespace) if e["involvedObject"]["name"] == name]


def event_reasons(api, namespace, name) -> set[str]:
    return {e["reason"] for e in events_for(api, namespace, name)}


def placed(api, dev_cluster, namespace, name, timeout: float = 30, what: str = "binding") -> tuple[int, str]:
    """The Pod's placeholder job, and the Node the Pod is bound to once it is."""
    job_id = job_id_of(api, dev_cluster, namespace, name)
    return job_id, wait_for(lambda: bound(api, namespace, name), timeout, what)


def bound(api, namespace, name) -> str | None:
    pod = get_pod(api, namespace, name)
    return pod and pod["spec"].get("nodeName")


def gone(api, namespace, name) -> bool:
    return get_pod(api, namespace, name) is None


def deployment_runs_through_slurm_until_deleted(api, dev_cluster, namespace: str, app: str, *, replicas: int,
                                                timeout: float = 60) -> None:
    """Deployment ``app``'s replicas are bound where their RUNNING jobs are; deleting the Deployment (garbage
    collection, no sunk code special-cased) ends every job and every replica."""

    def bound_pods():
        pods = kc.list_objects(api, PODS, namespace, label_selector=f"app={app}")
        return pods if len(pods) == replicas and all(p["spec"].get("nodeName") for p in pods) else None

    pods = wait_for(bound_pods, timeout, f"all {replicas} replicas bound through Slurm")
    jobs = [int(wait_for(lambda p=p: (get_pod(api, namespace, p["metadata"]["name"])["metadata"].get(
        "annotations") or {}).get(names.ANN_JOB_ID), 10, "the job-id")) for p in pods]
    for pod, job_id in zip(pods, jobs, strict=True):
        job = slurm_job(dev_cluster, job_id)
        assert state(job) == "RUNNING" and pod["spec"]["nodeName"] == dev_cluster.k8s_node_for(job["nodes"])
    kc.request(api, "DELETE", DEPLOYMENTS.path(namespace, app),
               body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"})
    for job_id in jobs:
        wait_for(lambda j=job_id: state(slurm_job(dev_cluster, j)) in ("CANCELLED", "COMPLETED", None), 60,
                 f"job {job_id} to end after the Deployment's deletion")
    wait_for(lambda: not kc.list_objects(api, PODS, namespace, label_selector=f"app={app}"), 60,
             "the replicas to be gone")


def jobs_for_pod(dev_cluster, uid: str) -> list[int]:
    return jobs_carrying(dev_cluster, uid)


def test_a_gated_pod_gets_no_job_until_its_last_gate_is_removed(kube_api, dev_cluster, namespace, scheduler):
    """``spec.schedulingGates`` (Kueue's admission, any controller's): kube-scheduler leaves such a Pod alone and
    the apiserver refuses its binding. No placeholder job while a gate is left, no Event, the apiserver's own
    SchedulingGated condition kept; once the last gate goes it is placed through Slurm as any Pod."""
    pod = create_pod(kube_api, namespace, schedulingGates=[{"name": "example.com/admission"},
                                                           {"name": "example.com/quota"}])
    name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]

    def held() -> None:
        time.sleep(3)  # give a wrong implementation the time to submit anyway
        assert jobs_for_pod(dev_cluster, uid) == []
        now = get_pod(kube_api, namespace, name)
        (cond,) = [c for c in now["status"].get("conditions", []) if c["type"] == "PodScheduled"]
        assert cond["status"] == "False" and cond["reason"] == "SchedulingGated", cond
        assert not now["spec"].get("nodeName") and events_for(kube_api, namespace, name) == []

    held()
    kc.patch(kube_api, PODS, name, {"spec": {"schedulingGates": [{"name": "example.com/quota"}]}}, namespace)
    held()
    kc.patch(kube_api, PODS, name, {"spec": {"schedulingGates": None}}, namespace)
    job_id, node = placed(kube_api, dev_cluster, namespace, name)
    assert node == dev_cluster.k8s_node_for(slurm_job(dev_cluster, job_id)["nodes"])


def test_a_pods_node_selector_keeps_slurm_off_the_nodes_it_rules_out(kube_api, dev_cluster, namespace, scheduler):
    """kube-scheduler never sees the Pod, but the kubelet's admission checks its nodeSelector and required node
    affinity: the Slurm nodes whose Node does not match are excluded from the placeholder, so the Pod lands only
    where it is admitted. None matching: no job, the Pod says why (kube-scheduler's PodScheduled=False,
    Unschedulable), and a Node labelled to match later is where it goes."""
    target = dev_cluster.k8s_node_for("node2")
    pod = create_pod(kube_api, namespace, nodeSelector={"kubernetes.io/hostname": target})
    job_id, node = placed(kube_api, dev_cluster, namespace, pod["metadata"]["name"])
    assert node == target and slurm_job(dev_cluster, job_id)["nodes"] == "node2"

    label = f"sunk.test/pool-{namespace}"
    nowhere = create_pod(kube_api, namespace, affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": label, "operator": "In", "values": ["here"]}]}]}}})
    name, uid = nowhere["metadata"]["name"], nowhere["metadata"]["uid"]

    def unschedulable():
        conditions = (get_pod(kube_api, namespace, name).get("status") or {}).get("conditions") or []
        return [c for c in conditions if c["type"] == "PodScheduled" and c["status"] == "False"
                and c.get("reason") == "Unschedulable" and "do not match" in c.get("message", "")]

    wait_for(unschedulable, 30, "PodScheduled=False, Unschedulable")
    assert "Unschedulable" in event_reasons(kube_api, namespace, name)
    assert not bound(kube_api, namespace, name) and jobs_for_pod(dev_cluster, uid) == []
    later = dev_cluster.k8s_node_for("node3")
    kc.patch(kube_api, NODES, later, {"metadata": {"labels": {label: "here"}}})
    try:
        later_job, node = placed(kube_api, dev_cluster, namespace, name)
        assert node == later and slurm_job(dev_cluster, later_job)["nodes"] == "node3"
    finally:
        kc.patch(kube_api, NODES, later, {"metadata": {"labels": {label: None}}})
        for done in (pod, nowhere):
            kc.delete(kube_api, PODS, done["metadata"]["name"], namespace)
    for ending in (job_id, later_job):
        wait_for(lambda j=ending: ended(dev_cluster, j), 30, f"job {ending} to end")


def set_taint(api, node: str, taint: dict | None, key: str) -> None:
    """Put ``taint`` on the Node (None: take ``key``'s off), keeping its other taints (sunk's lock among them)."""
    def write():
        current = kc.get(api, NODES, node)
        kept = [t for t in current["spec"].get("taints") or [] if t["key"] != key]
        kc.patch(api, NODES, node, {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                                    "spec": {"taints": kept + ([taint] if taint else [])}})
        return True

    wait_for(lambda: _retried(write), 10, f"the taint {key} written on {node}")


# The exclusion is fixed at submission, from the scheduler's Node informer (docs/translation.md): a Pod created
# the moment its Nodes are tainted may be submitted before the Node watch brings the taints (seen in CI: 60 ms
# apart under load). The tests that taint and then create wait this long first.
NODE_WATCH_LAG = 2.0


def _retried(write):
    try:
        return write()
    except kc.ApiError as exc:
        if exc.status == 409:
            return False
        raise


def test_a_pod_keeps_off_the_nodes_whose_noschedule_taint_it_does_not_tolerate(kube_api, dev_cluster, namespace,
                                                                            scheduler):
    """kube-scheduler's filter would keep it off them (and the kubelet's admission rejects it where a NoExecute
    one is): the Slurm nodes on those Nodes are excluded from its placeholder; a Pod that tolerates the taint
    is not kept off."""
    key = f"sunk.test/maintenance-{namespace}"
    tainted = [dev_cluster.k8s_node_for(n) for n in ("node1", "node2", "node3")]
    for node in tainted:
        set_taint(kube_api, node, {"key": key, "value": "x", "effect": "NoSchedule"}, key)
    time.sleep(NODE_WATCH_LAG)
    try:
        pod = create_pod(kube_api, namespace)
        job_id, node = placed(kube_api, dev_cluster, namespace, pod["metadata"]["name"])
        assert node == dev_cluster.k8s_node_for("node4") and slurm_job(dev_cluster, job_id)["nodes"] == "node4"
        tolerant = create_pod(kube_api, namespace, tolerations=[{"key": key, "operator": "Exists"}])
        tolerant_job, _ = placed(kube_api, dev_cluster, namespace, tolerant["metadata"]["name"])
        assert slurm_job(dev_cluster, tolerant_job).get("excluded_nodes", "") in ("", None), \
            slurm_job(dev_cluster, tolerant_job).get("excluded_nodes")
    finally:
        for node in tainted:
            set_taint(kube_api, node, None, key)
    for done in (pod, tolerant):
        kc.delete(kube_api, PODS, done["metadata"]["name"], namespace)
    for ending in (job_id, tolerant_job):
        wait_for(lambda j=ending: ended(dev_cluster, j), 30, f"job {ending} to end")


def test_a_pod_whose_partition_has_every_node_tainted_against_it_waits_though_another_partition_has_one(
        kube_api, dev_cluster, namespace, scheduler):
    """realnode1 (partition real) is left, but Slurm runs a job of partition batch there only: submitted with
    batch's every node excluded, Slurm failed it for good (BadConstraints). It waits, no job, and lands on the
    Node whose taint is lifted."""
    if not dev_cluster.real_node:
        pytest.skip("the dev cluster runs without its real Node (SUNK_DEV_REAL_NODE=0): one partition only")
    key = f"sunk.test/maintenance-{namespace}"
    tainted = [dev_cluster.k8s_node_for(n) for n in dev_cluster.layout.node_names]
    for node in tainted:
        set_taint(kube_api, node, {"key": key, "value": "x", "effect": "NoSchedule"}, key)
    time.sleep(NODE_WATCH_LAG)
    try:
        pod = create_pod(kube_api, namespace, annotations={names.ANN_PARTITION: "batch"})
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]

        def unschedulable():
            conditions = (get_pod(kube_api, namespace, name) or {}).get("status", {}).get("conditions") or []
            return [c for c in conditions if c["type"] == "PodScheduled" and c["status"] == "False"
                    and c.get("reason") == "Unschedulable" and "of partition batch are available" in c["message"]]

        (condition,) = wait_for(unschedulable, 30, "PodScheduled=False, Unschedulable, in partition batch")
        assert condition["message"].startswith(f"0/{len(tainted)} Slurm nodes of partition batch"), condition
        assert not bound(kube_api, namespace, name) and jobs_for_pod(dev_cluster, uid) == []
        set_taint(kube_api, tainted[1], None, key)
        job_id, node = placed(kube_api, dev_cluster, namespace, name)
        assert node == tainted[1] and slurm_job(dev_cluster, job_id)["nodes"] == dev_cluster.layout.node_names[1]
    finally:
        for node in tainted:
            set_taint(kube_api, node, None, key)
    kc.delete(kube_api, PODS, name, namespace)
    wait_for(lambda: ended(dev_cluster, job_id), 30, f"job {job_id} to end")


# -- validation: one test per rule, each checked through the Event --------------------------------
@pytest.mark.parametrize(("annotations", "spec", "needle"), [
    ({names.ANN_PRIORITY: "high"}, {}, "priority"),
    ({names.ANN_EXCLUSIVE: "sometimes"}, {}, "exclusive"),
    ({names.ANN_TIMEOUT: "1h"}, {}, "timeout"),
    ({}, {"cpu": None}, "cpu"),
    ({}, {"memory": None}, "memory"),
    ({}, {"grace": 30}, "terminationGracePeriodSeconds"),
    # The seeds type user-id and group-id as integers: a user or group *name* is refused, not looked up.
    ({names.ANN_USER_ID: "kube"}, {}, f"{names.ANN_USER_ID}: must be an integer"),
    ({names.ANN_GROUP_ID: "kube"}, {}, f"{names.ANN_GROUP_ID}: must be an integer"),
    # (the kubelet would never start it: its claims are allocated by no scheduler; issue 38)
    ({}, {"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "gpu-template"}]},
     "spec.resourceClaims: ResourceClaims (Dynamic Resource Allocation) are not allocated"),
], ids=["priority-not-integer", "exclusive-unknown", "timeout-not-integer", "no-cpu", "no-memory", "grace-too-long",
        "user-id-not-integer", "group-id-not-integer", "resource-claims"])
def test_invalid_pod_gets_an_event_and_no_job(kube_api, dev_cluster, namespace, scheduler, annotations, spec, needle):
    pod = create_pod(kube_api, namespace, annotations=annotations, **spec)
    name = pod["metadata"]["name"]

    def failed_event():
        return [e for e in events_for(kube_api, namespace, name) if e["reason"] == "FailedValidation"]

    event = wait_for(failed_event, 20, "a FailedValidation event")[0]
    assert needle in event["message"]
    assert event["type"] == "Warning"
    time.sleep(2)  # give a wrong implementation the time to submit anyway
    assert jobs_for_pod(dev_cluster, pod["metadata"]["uid"]) == []
    conditions = get_pod(kube_api, namespace, name)["status"].get("conditions", [])
    assert any(c["type"] == "PodScheduled" and c["reason"] == "Unschedulable" and needle in c["message"]
               for c in conditions)
    assert names.ANN_JOB_ID not in (get_pod(kube_api, namespace, name)["metadata"].get("annotations") or {})


def test_an_invalid_pod_fixed_by_its_owner_is_scheduled(kube_api, dev_cluster, namespace, scheduler):
    """No retries while the Pod stays as it is; its owner's fix (an annotation update) is one."""
    pod = create_pod(kube_api, namespace, annotations={names.ANN_PRIORITY: "high"})
    name = pod["metadata"]["name"]
    wait_for(lambda: "FailedValidation" in event_reasons(kube_api, namespace, name), 20, "a FailedValidation event")
    kc.patch(kube_api, PODS, name, {"metadata": {"annotations": {names.ANN_PRIORITY: "100"}}}, namespace)
    job_id, _ = placed(kube_api, dev_cluster, namespace, name)
    assert jobs_for_pod(dev_cluster, pod["metadata"]["uid"]) == [job_id]


# -- schedule, bind, and both unschedule flows -------------------------------------------------------
@pytest.mark.every_release
def test_pod_is_bound_to_the_node_slurm_chose(kube_api, dev_cluster, namespace, scheduler):
    pod = create_pod(kube_api, namespace, cpu="2", memory="2Gi")
    name = pod["metadata"]["name"]
    job_id, node = placed(kube_api, dev_cluster, namespace, name)
    job = slurm_job(dev_cluster, job_id)
    assert state(job) == "RUNNING"
    assert started_placeholder(job, pod["metadata"]["uid"])
    assert node == dev_cluster.k8s_node_for(job["nodes"])
    annotations = get_pod(kube_api, namespace, name)["metadata"]["annotations"]
    assert annotations[names.ANN_SLURM_NODE] == job["nodes"]
    assert "Scheduled" in wait_for(lambda: event_reasons(kube_api, namespace, name), 10, "events")
    assert number(job, "cpus") == 2 and number(job, "memory_per_node") == 2048


@pytest.mark.parametrize("effect", ["NoExecute", "NoSchedule"])
def test_a_pod_tolerates_the_lock_only_where_the_lock_would_evict_it(kube_api, dev_cluster, namespace, scheduler,
                                                                     lock_taint, effect):
    """Binding skips the taint filter and the kubelet admits past NoSchedule: only NoExecute needs the write."""
    slurm_node, k8s_node = lock_taint(effect)
    pod = create_pod(kube_api, namespace, annotations={names.ANN_REQUIRED_NODES: slurm_node})
    name = pod["metadata"]["name"]
    job_id, node = placed(kube_api, dev_cluster, namespace, name)
    assert node == k8s_node
    now = get_pod(kube_api, namespace, name)
    assert tolerates_lock(now) is (effect == "NoExecute")
    assert now["metadata"]["annotations"][names.ANN_JOB_ID] == str(job_id)
    kc.delete(kube_api, PODS, name, namespace)
    wait_for(lambda: state(slurm_job(dev_cluster, job_id)) in ("CANCELLED", "COMPLETED", None), 30, "the job to end")


@pytest.mark.every_release
def test_deleting_a_running_pod_cancels_its_job(kube_api, dev_cluster, namespace, scheduler):
    pod = create_pod(kube_api, namespace)
    name = pod["metadata"]["name"]
    job_id, _ = placed(kube_api, dev_cluster, namespace, name)
    kc.delete(kube_api, PODS, name, namespace)
    wait_for(lambda: state(slurm_job(dev_cluster, job_id)) in ("CANCELLED", "COMPLETED", None), 30,
             "the job to end")


def test_slurm_refusing_the_job_is_an_event_not_a_retry_loop(kube_api, dev_cluster, namespace, scheduler):
    pod = create_pod(kube_api, namespace, cpu=TOO_MANY_CPUS)  # more CPUs than any node has
    name = pod["metadata"]["name"]
    event = wait_for(lambda: [e for e in events_for(kube_api, namespace, name) if e["reason"] == "FailedSubmit"],
                     20, "a FailedSubmit event")[0]
    assert "Slurm refused the placeholder job" in event["message"]
    time.sleep(3)
    event = [e for e in events_for(kube_api, namespace, name) if e["reason"] == "FailedSubmit"][0]
    assert event.get("count", 1) == 1  # said once, not retried in a loop
    # Slurm records such a job as FAILED at once; the Pod stays, marked as kube-scheduler would.
    current = get_pod(kube_api, namespace, name)
    assert current is not None, "a Pod Slurm cannot run must not be deleted (its owner would recreate it)"
    scheduled = [c for c in current["status"].get("conditions", []) if c["type"] == "PodScheduled"]
    assert scheduled and scheduled[0]["status"] == "False" and scheduled[0]["reason"] == "Unschedulable"
    assert len([j for j in jobs_for_pod(dev_cluster, pod["metadata"]["uid"])]) <= 1  # never resubmitted


def test_deleting_a_pending_pod_cancels_its_pending_job(kube_api, dev_cluster, namespace, scheduler, busy_node):
    pod = create_pod(kube_api, namespace, annotations={names.ANN_REQUIRED_NODES: busy_node})
    name = pod["metadata"]["name"]
    job_id = job_id_of(kube_api, dev_cluster, namespace, name)
    assert state(slurm_job(dev_cluster, job_id)) == "PENDING"
    # A lasting reason (a limit, a hold, ReqNodeNotAvail) is reported at once; Priority, Resources
    # or no reason yet, after a grace of 10 s.
    assert "WaitingForSlurm" in wait_for(lambda: event_reasons(kube_api, namespace, name), 20, "events")
    # A Pod reported waiting shows its job id (a Pod that binds at once gets it from its binding).
    assert wait_for(lambda: (get_pod(kube_api, namespace, name)["metadata"].get("annotations") or {}).get(
        names.ANN_JOB_ID), 10, "the job-id annotation") == str(job_id)
    kc.delete(kube_api, PODS, name, namespace)
    wait_for(lambda: state(slurm_job(dev_cluster, job_id)) == "CANCELLED", 30, "the job to be cancelled")


@pytest.mark.every_release
def test_scancel_deletes_the_pod_with_an_event(kube_api, dev_cluster, namespace, scheduler):
    pod = create_pod(kube_api, namespace)
    name = pod["metadata"]["name"]
    job_id, _ = placed(kube_api, dev_cluster, namespace, name)
    cancelled_at = time.monotonic()
    dev_cluster.slurm("scancel", str(job_id))
    wait_for(lambda: gone(kube_api, namespace, name), 30, "the Pod to be deleted")
    reasons = wait_for(lambda: event_reasons(kube_api, namespace, name) & {"JobEnding", "JobCancelled"}, 10,
                       "an Event saying why")
    assert reasons
    # The placeholder returned as soon as the Pod was gone: the job ends well before KillWait (30 s).
    wait_for(lambda: state(slurm_job(dev_cluster, job_id)) == "CANCELLED"
             and "COMPLETING" not in slurm_job(dev_cluster, job_id)["job_state"], 40, "the job to finish")
    assert time.monotonic() - cancelled_at < 20


def test_a_pod_that_outlives_killwait_drains_the_node(kube_api, dev_cluster, namespace, scheduler):
    # A finalizer keeps the Pod object after the kubelet is done: it "outlives" KillWait.
    finalizer = "sunk.test/hold"
    manifest = pod_manifest(f"p-{uuid.uuid4().hex[:6]}")
    manifest["metadata"]["finalizers"] = [finalizer]
    pod = kc.create(kube_api, PODS, manifest, namespace)
    name = pod["metadata"]["name"]
    job_id, _ = placed(kube_api, dev_cluster, namespace, name)
    slurm_node = slurm_job(dev_cluster, job_id)["nodes"]
    try:
        dev_cluster.slurm("scancel", str(job_id))

        def drained():
            out = dev_cluster.slurm("scontrol", "-o", "show", "node", slurm_node).stdout
            return "DRAIN" in out and "outlived KillWait" in out and out

        out = wait_for(drained, 45, "the node to be drained", interval=1)
        assert f"job {job_id}" in out
    finally:
        kc.patch(kube_api, PODS, name, {"metadata": {"finalizers": None}}, namespace)
        dev_cluster.slurm("scontrol", "update", f"nodename={slurm_node}", "state=resume", check=False)


def test_time_limit_ends_the_pod(kube_api, dev_cluster, namespace, scheduler):
    pod = create_pod(kube_api, namespace, annotations={names.ANN_TIMEOUT: "60"})
    name = pod["metadata"]["name"]
    job_id = job_id_of(kube_api, dev_cluster, namespace, name)
    assert number(slurm_job(dev_cluster, job_id), "time_limit") == 1
    wait_for(lambda: bound(kube_api, namespace, name), 30, "binding")
    wait_for(lambda: gone(kube_api, namespace, name), 150, "the Pod to end at the time limit", interval=1)
    assert state(slurm_job(dev_cluster, job_id)) in ("TIMEOUT", None)


def test_scheduler_restart_mid_flow_submits_no_second_job(kube_api, dev_cluster, namespace, scheduler, busy_node):
    pod = create_pod(kube_api, namespace, annotations={names.ANN_REQUIRED_NODES: busy_node})  # stays pending
    name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    job_id = job_id_of(kube_api, dev_cluster, namespace, name)
    scheduler.kill()
    kc.patch(kube_api, PODS, name, {"metadata": {"labels": {"touched": "yes"}}}, namespace)
    scheduler.start()
    time.sleep(3)
    assert jobs_for_pod(dev_cluster, uid) == [job_id]
    kc.delete(kube_api, PODS, name, namespace)
    wait_for(lambda: state(slurm_job(dev_cluster, job_id)) == "CANCELLED", 30, "the job to be cancelled")


def test_an_annotation_made_invalid_while_the_job_waits_changes_nothing(kube_api, dev_cluster, namespace, scheduler):
    """Issue 32: annotations are read once, at submission. A Pod edited into an invalid one while its job waits
    keeps that job, and is bound where Slurm runs it (it used to be judged invalid and stranded its job)."""
    node = idle_node(dev_cluster)
    blocker = dev_cluster.slurm("sbatch", "--parsable", "--chdir=/tmp", "-w", node, "--exclusive", "--qos=high",
                                "--wrap", "sleep 600").stdout.strip()
    try:
        wait_for(lambda: state(slurm_job(dev_cluster, int(blocker))) == "RUNNING", 30, "the blocking job to run")
        pod = create_pod(kube_api, namespace, annotations={names.ANN_REQUIRED_NODES: node})
        name = pod["metadata"]["name"]
        job_id = job_id_of(kube_api, dev_cluster, namespace, name)
        kc.patch(kube_api, PODS, name, {"metadata": {"annotations": {names.ANN_PRIORITY: "not a number"}}},
                 namespace)
        time.sleep(2)
        assert state(slurm_job(dev_cluster, job_id)) == "PENDING" and not bound(kube_api, namespace, name)
        dev_cluster.slurm("scancel", blocker)
        job_id_bound, k8s_node = placed(kube_api, dev_cluster, namespace, name, timeout=60)
        assert job_id_bound == job_id and k8s_node == dev_cluster.k8s_node_for(node)
        assert "FailedValidation" not in event_reasons(kube_api, namespace, name)
    finally:
        dev_cluster.slurm("scancel", blocker, check=False)


def test_orphans_made_while_the_scheduler_was_down_are_cleaned_up(kube_api, dev_cluster, namespace, scheduler):
    """A crash, then: a Pod deleted (its job must go) and a job cancelled (its Pod must go)."""
    deleted, cancelled = create_pod(kube_api, namespace), create_pod(kube_api, namespace)
    deleted_name, cancelled_name = deleted["metadata"]["name"], cancelled["metadata"]["name"]
    orphan_job = job_id_of(kube_api, dev_cluster, namespace, deleted_name)
    cancelled_job = job_id_of(kube_api, dev_cluster, namespace, cancelled_name)
    for name in (deleted_name, cancelled_name):
        wait_for(lambda name=name: bound(kube_api, namespace, name), 30, f"{name} to be bound")
    slurm_node = slurm_job(dev_cluster, cancelled_job)["nodes"]
    scheduler.kill()
    try:
        kc.delete(kube_api, PODS, deleted_name, namespace)
        wait_for(lambda: gone(kube_api, namespace, deleted_name), 30, "the Pod to be deleted while no one watches")
        dev_cluster.slurm("scancel", str(cancelled_job))
    finally:
        scheduler.start()
    # The old lease must expire (15 s) before the new process cancels anything.
    wait_for(lambda: state(slurm_job(dev_cluster, orphan_job)) == "CANCELLED", 60, "the orphan job to be cancelled")
    wait_for(lambda: gone(kube_api, namespace, cancelled_name), 30, "the orphan Pod to be deleted")
    # Its placeholder was waiting for the Pod to go: it must end cleanly, without draining the node.
    wait_for(lambda: state(slurm_job(dev_cluster, cancelled_job)) == "CANCELLED"
             and "COMPLETING" not in slurm_job(dev_cluster, cancelled_job)["job_state"], 40, "the job to finish")
    node = dev_cluster.slurm("scontrol", "-o", "show", "node", slurm_node).stdout
    assert "DRAIN" not in node, node


@pytest.fixture(scope="module")
def slow_listing_scheduler(kube_api, dev_cluster, tmp_path_factory):
    """Its Slurm cache lists jobs only every 5 minutes: whatever binds sooner came another way."""
    namespace = create_namespace(kube_api)
    proc = scheduler_process(dev_cluster, namespace, tmp_path_factory.mktemp("slow-scheduler"),
                             ports={"hooks": 18200, "metrics": 18280, "probes": 18281},
                             extra_args=("--slurm-poll-interval=5m",))
    with serving(kube_api, dev_cluster, proc, namespace):
        yield namespace, proc


def slurm_calls(metrics_url: str, message_type: str) -> float:
    """A scheduler's own calls to Slurm of one type so far (its ``sunk_scheduler_slurm_requests_total``)."""
    text = requests.get(metrics_url, timeout=5).text
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("sunk_scheduler_slurm_requests_total{") and f'message_type="{message_type}"' in line)


def test_the_placeholder_started_call_binds_without_waiting_for_a_job_list(kube_api, dev_cluster,
                                                                           slow_listing_scheduler):
    """And its read of the job is the only one: the Slurm cache's state list after the submission found the new
    job, and waited for the started call's record (SlurmCache.observe) instead of reading it too."""
    namespace, _ = slow_listing_scheduler
    reads_before = slurm_calls("http://127.0.0.1:18280/metrics", "REQUEST_JOB_INFO_SINGLE")
    pod = create_pod(kube_api, namespace)
    name = pod["metadata"]["name"]
    job_id, node = placed(kube_api, dev_cluster, namespace, name, what="binding well before the next job list")
    job = slurm_job(dev_cluster, job_id)
    assert started_placeholder(job, pod["metadata"]["uid"]) and node == dev_cluster.k8s_node_for(job["nodes"])
    assert slurm_calls("http://127.0.0.1:18280/metrics", "REQUEST_JOB_INFO_SINGLE") - reads_before == 1
    text = requests.get("http://127.0.0.1:18280/metrics", timeout=5).text
    started_calls = [line for line in text.splitlines()
                     if line.startswith("sunk_hooks_request_duration_seconds_count")
                     and "/started" in line and 'code="200"' in line]
    assert started_calls and float(started_calls[0].split()[-1]) >= 1
    # Free the node now, not at module teardown: a later test needs node2 for a user-exclusive job.
    kc.delete(kube_api, PODS, name, namespace)
    wait_for(lambda: state(slurm_job(dev_cluster, job_id)) in ("CANCELLED", "COMPLETED", None), 30,
             "the job to end")


@pytest.fixture(scope="module")
def lost_started_calls(kube_api, dev_cluster, tmp_path_factory):
    """sunk-scheduler as deployed (the chart's ServiceAccount and RBAC) behind a hook URL that loses every
    placeholder's started call on the way (the other calls pass)."""
    namespace = create_namespace(kube_api)
    tmp = tmp_path_factory.mktemp("lost-started")
    ports = {"hooks": free_port(), "metrics": free_port(), "probes": free_port()}
    lease = "sunk-scheduler-lost-started"
    # (the module's Lease too: the Role is the one the module's scheduler runs as, applied again)
    account, kubeconfig = as_service_account(kube_api, dev_cluster, "scheduler-rbac.yaml", tmp, leases=[LEASE, lease])
    with DropProxy(f"http://127.0.0.1:{ports['hooks']}", method="POST", path=r"/api/v1/jobs/\d+/started",
                   times=1_000, forward=False) as proxy:
        proc = scheduler_process(dev_cluster, namespace, tmp, name="sunk-scheduler-lost-started", ports=ports,
                                 extra_args=(f"--kubeconfig={kubeconfig}",
                                             f"--leader-election-namespace={account['namespace']}",
                                             f"--leader-election-id={lease}", f"--hooks-url={proxy.url}"))
        with serving(kube_api, dev_cluster, proc, namespace):
            yield namespace, proxy
        assert_never_forbidden(proc.log)


def test_a_lost_started_call_binds_at_the_slurm_caches_own_read(kube_api, dev_cluster, lost_started_calls):
    """The cache waits STARTED_CALL_PATIENCE for the call's record, then reads the job itself (and again, as
    long as it runs unmarked), so the Pod binds seconds late, not at the next full job list (5 minutes)."""
    namespace, proxy = lost_started_calls
    pod = create_pod(kube_api, namespace)
    name = pod["metadata"]["name"]
    job_id, node = placed(kube_api, dev_cluster, namespace, name, timeout=60, what="binding without the started call")
    job = slurm_job(dev_cluster, job_id)
    assert started_placeholder(job, pod["metadata"]["uid"]) and node == dev_cluster.k8s_node_for(job["nodes"])
    assert proxy.dropped >= 1
    kc.delete(kube_api, PODS, name, namespace)  # (its job's end still reaches the hook API: only "started" is lost)
    wait_for(lambda: state(slurm_job(dev_cluster, job_id)) in ("CANCELLED", "COMPLETED", None), 60,
             "the job to end")


# -- translation: every annotation, as Slurm reports the job ---------------------------------------
@pytest.fixture
def reservation(dev_cluster):
    """(name, node): a reservation on an idle stand-in node. The annotated job is user-exclusive, and the Pods
    earlier tests leave running until the module's end (as another user) land where Slurm spreads them."""
    name = f"sunk-test-{uuid.uuid4().hex[:6]}"
    node = idle_node(dev_cluster)
    dev_cluster.slurm("scontrol", "create", "reservation", f"reservationname={name}", f"nodes={node}",
                      "users=root,kube", "starttime=now", "duration=60", "flags=ignore_jobs")
    yield name, node
    # Slurm keeps a reservation that still has jobs: end them (their Pods go too), then delete it.
    dev_cluster.slurm("scancel", f"--reservation={name}", check=False)
    wait_for(lambda: dev_cluster.slurm("scontrol", "delete", f"reservationname={name}", check=False).returncode == 0,
             60, f"reservation {name} to be deleted", interval=1)


def test_every_annotation_reaches_the_slurm_job(kube_api, dev_cluster, namespace, scheduler, reservation):
    reserved, node = reservation
    others = [n for n in dev_cluster.layout.node_names if n != node][:2]
    annotations = {
        names.ANN_ACCOUNT: "root",
        names.ANN_COMMENT: "A Kubernetes job",
        names.ANN_CONSTRAINTS: "FAKE_GPU",
        names.ANN_EXCLUSIVE: "user",
        names.ANN_EXCLUDED_NODES: ",".join(others),
        names.ANN_REQUIRED_NODES: node,
        names.ANN_PARTITION: "batch",
        names.ANN_PRIORITY: "4242",
        names.ANN_QOS: "high",
        names.ANN_RESERVATION: reserved,
        names.ANN_USER_ID: "1001",
        names.ANN_CURRENT_WORKING_DIR: "/tmp",
        names.ANN_TIMEOUT: "150",
    }
    pod = create_pod(kube_api, namespace, annotations=annotations, cpu="1500m", memory="1500Mi", gpus=1)
    job = slurm_job(dev_cluster, job_id_of(kube_api, dev_cluster, namespace, pod["metadata"]["name"]))
    assert job["account"] == "root"
    assert job["comment"] == "A Kubernetes job"
    assert job["features"] == "FAKE_GPU"
    assert job["shared"] == ["user"]
    assert job["excluded_nodes"] == hostlist.compress(others)
    assert job["required_nodes"] == node
    assert job["partition"] == "batch"
    assert number(job, "priority") == 4242
    assert job["qos"] == "high"
    assert job["resv_name"] == reserved
    assert (job["user_id"], job["user_name"]) == (1001, "kube")
    assert job["group_id"] == 1001  # user-id without group-id: group = user
    assert job["current_working_directory"] == "/tmp"
    assert number(job, "time_limit") == 3  # 150 s, rounded up to whole minutes
    assert number(job, "cpus") == 2  # 1500m rounded up
    assert number(job, "memory_per_node") == 1500
    assert job["tres_per_node"] == "gres/gpu:1"
    wait_for(lambda: bound(kube_api, namespace, pod["metadata"]["name"]) == k8s_node_for(node), 30,
             f"binding to {node}'s Node")


@pytest.mark.every_release
def test_prefer_and_exclusive_topo_reach_the_job(kube_api, dev_cluster, namespace, scheduler, busy_node):
    """On every backend, pyslurm included (the dev cluster's is sunk's patched wheel, which passes both).
    Checked while pending: once scheduled, Slurm 24.11 moves a met preference into features."""
    pod = create_pod(kube_api, namespace, annotations={names.ANN_PREFER: "FAKE_GPU", names.ANN_EXCLUSIVE: "topo",
                                                       names.ANN_REQUIRED_NODES: busy_node})
    job_id = job_id_of(kube_api, dev_cluster, namespace, pod["metadata"]["name"])
    job = slurm_job(dev_cluster, job_id)
    assert state(job) == "PENDING" and job["prefer"] == "FAKE_GPU" and topo_exclusive(dev_cluster, job_id)
    kc.delete(kube_api, PODS, pod["metadata"]["name"], namespace)


def test_a_pod_asking_no_user_runs_as_its_policys_identity(kube_api, dev_cluster, namespace, scheduler):
    """The dev cluster's operator made root the default (DEV_IDENTITY_POLICY): the policy's word, not the Pod's.
    test_identity_policy.py has the chart's own default, a non-root identity."""
    pod = create_pod(kube_api, namespace)
    job = slurm_job(dev_cluster, job_id_of(kube_api, dev_cluster, namespace, pod["metadata"]["name"]))
    assert (job["user_id"], job["group_id"]) == (0, 0)
    kc.delete(kube_api, PODS, pod["metadata"]["name"], namespace)


def ended(dev_cluster, job_id: int) -> bool:
    return state(slurm_job(dev_cluster, job_id)) in ("CANCELLED", "COMPLETED", None)


def test_an_explicit_group_id_is_the_group_slurm_runs_the_job_as(kube_api, dev_cluster, namespace, scheduler):
    """The seeds' group-id, asked alone: the group is the one asked for, not the user's (root, the dev policy's
    default user) nor the policy's default group (0); and Slurm runs the job so (its placeholder starts)."""
    pod = create_pod(kube_api, namespace, annotations={names.ANN_GROUP_ID: "1001"})
    name = pod["metadata"]["name"]
    job_id, _ = placed(kube_api, dev_cluster, namespace, name)
    job = slurm_job(dev_cluster, job_id)
    assert (job["user_id"], job["group_id"]) == (0, 1001)
    assert started_placeholder(job, pod["metadata"]["uid"])
    kc.delete(kube_api, PODS, name, namespace)
    wait_for(lambda: ended(dev_cluster, job_id), 30, "the job to end")


def test_the_legacy_exclusive_true_takes_the_whole_node(kube_api, dev_cluster, namespace, scheduler):
    """Before SUNK v5.7.0 exclusive was a boolean; "true" still means no sharing (Slurm's shared=none, sbatch
    --exclusive): the job holds every CPU of its node though its Pod asks for one, so no other job fits there."""
    pod = create_pod(kube_api, namespace, annotations={names.ANN_EXCLUSIVE: "true"}, cpu="1")
    name = pod["metadata"]["name"]
    job_id, k8s_node = placed(kube_api, dev_cluster, namespace, name, timeout=60)
    job = slurm_job(dev_cluster, job_id)
    assert parse_job(job).shared == "none"
    assert k8s_node == dev_cluster.k8s_node_for(job["nodes"])
    node = all_nodes(dev_cluster)[job["nodes"]]
    assert number(job, "cpus") == node["cpus"] == node["alloc_cpus"], (number(job, "cpus"), node["alloc_cpus"])
    kc.delete(kube_api, PODS, name, namespace)
    wait_for(lambda: ended(dev_cluster, job_id), 30, "the job to end")


def test_gpu_class_affinity_becomes_a_constraint(kube_api, dev_cluster, namespace, scheduler):
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu.nvidia.com/class", "operator": "In", "values": ["FAKE_GPU"]}]}]}}}
    pod = create_pod(kube_api, namespace, gpus=1, affinity=affinity)
    name = pod["metadata"]["name"]
    job = slurm_job(dev_cluster, job_id_of(kube_api, dev_cluster, namespace, name))
    assert "FAKE_GPU" in job["features"]
    wait_for(lambda: bound(kube_api, namespace, name), 30, "binding")
    kc.delete(kube_api, PODS, name, namespace)


def test_gpu_model_affinity_becomes_a_constraint(kube_api, dev_cluster, namespace, scheduler):
    """The seeds' example pins gpu.nvidia.com/model (H100_NVLINK_80GB on CoreWeave's Nodes); the dev cluster's
    GPU nodes carry the feature FAKE_GPU, so the model affinity names that."""
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu.nvidia.com/model", "operator": "In", "values": ["FAKE_GPU"]}]}]}}}
    pod = create_pod(kube_api, namespace, gpus=1, affinity=affinity)
    name = pod["metadata"]["name"]
    job_id = job_id_of(kube_api, dev_cluster, namespace, name)
    job = slurm_job(dev_cluster, job_id)
    assert job["features"] == "FAKE_GPU" and job["tres_per_node"] == "gres/gpu:1"
    k8s_node = wait_for(lambda: bound(kube_api, namespace, name), 30, "binding")
    assert k8s_node == dev_cluster.k8s_node_for(slurm_job(dev_cluster, job_id)["nodes"])
    kc.delete(kube_api, PODS, name, namespace)
    wait_for(lambda: ended(dev_cluster, job_id), 30, "the job to end")


# -- scope: the namespaces a scheduler watches (the seeds' scheduler.scope) ----------------------------------------
SCOPED_SCHEDULER = "sunk-scheduler-scope-test"  # its own name: the module's scheduler never sees these Pods


@pytest.fixture
def three_namespaces(kube_api):
    made = tuple(create_namespace(kube_api) for _ in range(3))
    yield made
    for namespace in made:
        purge_namespace(kube_api, namespace)


@contextmanager
def scoped_scheduler(kube_api, dev_cluster, tmp_dir, *, own: str, watch: str,
                     namespaces: tuple[str, ...]) -> Iterator[Process]:
    """A scheduler deployed in ``own`` (POD_NAMESPACE, as the chart's Deployment sets it) with
    ``--watch-namespace=<watch>`` ("" for the flag left blank); at the end the Pods of ``namespaces`` go
    while it still runs, then it stops."""
    ports = {"hooks": free_port(), "metrics": free_port(), "probes": free_port()}
    proc = scheduler_process(dev_cluster, own, tmp_dir, name="sunk-scheduler-scope", ports=ports, extra_args=(
        f"--scheduler-name={SCOPED_SCHEDULER}", f"--watch-namespace={watch}",
        f"--leader-election-id={SCOPED_SCHEDULER}"))
    proc.env["POD_NAMESPACE"] = own
    with serving(kube_api, dev_cluster, proc, namespaces, purge=False):  # (three_namespaces purges)
        yield proc


def not_scheduled(api, dev_cluster, namespace: str, pod: dict) -> None:
    """No job and no binding: the Pod is not the scheduler's (the caller waited for one of its own to bind)."""
    time.sleep(2)  # give a wrong implementation the time to submit anyway
    assert jobs_for_pod(dev_cluster, pod["metadata"]["uid"]) == []
    assert not bound(api, namespace, pod["metadata"]["name"])


def test_a_scheduler_given_no_namespace_schedules_its_own_namespace_only(kube_api, dev_cluster, three_namespaces,
                                                                         tmp_path):
    own, other, _ = three_namespaces
    with scoped_scheduler(kube_api, dev_cluster, tmp_path, own=own, watch="", namespaces=(own, other)):
        elsewhere = create_pod(kube_api, other, schedulerName=SCOPED_SCHEDULER)
        mine = create_pod(kube_api, own, schedulerName=SCOPED_SCHEDULER)
        job_id, k8s_node = placed(kube_api, dev_cluster, own, mine["metadata"]["name"])
        assert k8s_node == dev_cluster.k8s_node_for(slurm_job(dev_cluster, job_id)["nodes"])
        not_scheduled(kube_api, dev_cluster, other, elsewhere)


def test_a_scheduler_schedules_every_namespace_it_is_given_and_no_other(kube_api, dev_cluster, three_namespaces,
                                                                        tmp_path):
    """The list replaces the default: the scheduler's own namespace, not in it, is not watched."""
    first, second, own = three_namespaces
    with scoped_scheduler(kube_api, dev_cluster, tmp_path, own=own, watch=f"{first},{second}",
                          namespaces=three_namespaces):
        at_home = create_pod(kube_api, own, schedulerName=SCOPED_SCHEDULER)
        pods = {namespace: create_pod(kube_api, namespace, schedulerName=SCOPED_SCHEDULER)
                for namespace in (first, second)}
        for namespace, pod in pods.items():
            job_id, k8s_node = placed(kube_api, dev_cluster, namespace, pod["metadata"]["name"])
            assert k8s_node == dev_cluster.k8s_node_for(slurm_job(dev_cluster, job_id)["nodes"])
        not_scheduled(kube_api, dev_cluster, own, at_home)


# -- preemption, both directions (QOS high preempts normal) -----------------------------------------
def test_a_high_qos_batch_job_preempts_a_pod(kube_api, dev_cluster, namespace, scheduler):
    node = idle_node(dev_cluster)
    pod = create_pod(kube_api, namespace, annotations={names.ANN_REQUIRED_NODES: node,
                                                       names.ANN_EXCLUSIVE: "none", names.ANN_QOS: "normal"})
    name = pod["metadata"]["name"]
    job_id, _ = placed(kube_api, dev_cluster, namespace, name)
    high = dev_cluster.slurm("sbatch", "--parsable", "--chdir=/tmp", "-w", node, "--exclusive", "--qos=high",
                             "--wrap", "sleep 300").stdout.strip()
    try:
        wait_for(lambda: gone(kube_api, namespace, name), 40, "the preempted Pod to be deleted")
        assert "Preempted" in event_reasons(kube_api, namespace, name) or \
            "JobEnding" in event_reasons(kube_api, namespace, name)
        assert state(slurm_job(dev_cluster, job_id)) == "PREEMPTED"
        wait_for(lambda: state(slurm_job(dev_cluster, int(high))) == "RUNNING", 40, "the batch job to run")
    finally:
        dev_cluster.slurm("scancel", high)


def test_a_high_qos_pod_preempts_a_batch_job(kube_api, dev_cluster, namespace, scheduler):
    node = idle_node(dev_cluster)
    low = dev_cluster.slurm("sbatch", "--parsable", "--chdir=/tmp", "-w", node, "--exclusive", "--qos=normal",
                            "--wrap", "sleep 600").stdout.strip()
    try:
        wait_for(lambda: state(slurm_job(dev_cluster, int(low))) == "RUNNING", 30, "the batch job to run")
        pod = create_pod(kube_api, namespace, annotations={names.ANN_REQUIRED_NODES: node,
                                                           names.ANN_EXCLUSIVE: "none", names.ANN_QOS: "high"})
        name = pod["metadata"]["name"]
        assert wait_for(lambda: bound(kube_api, namespace, name), 60, "binding") == dev_cluster.k8s_node_for(node)
        assert state(slurm_job(dev_cluster, int(low))) in ("PENDING", "REQUEUED", "PREEMPTED")
        kc.delete(kube_api, PODS, name, namespace)
    finally:
        dev_cluster.slurm("scancel", low)


# -- workloads: a Deployment's Pods, made by the real kube-controller-manager -------------------------


def test_a_deployment_is_scheduled_through_slurm_and_deleting_it_cancels_every_job(kube_api, dev_cluster, namespace,
                                                                                   scheduler):
    """Inference arrives as Deployments: the ReplicaSet controller makes the Pods, Slurm places them,
    and deleting the Deployment (garbage collection, no sunk code special-cased) ends every job."""
    app = f"inference-{uuid.uuid4().hex[:6]}"
    template = pod_manifest(app)
    template["metadata"] = {"labels": {"app": app}}
    kc.create(kube_api, DEPLOYMENTS, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": app},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": app}}, "template": template}}, namespace)

    deployment_runs_through_slurm_until_deleted(kube_api, dev_cluster, namespace, app, replicas=2)


# -- what a waiting Pod shows (issue 32 item 3; docs/scheduler.md "What a user sees") --------------------------
def pod_scheduled(pod: dict | None) -> dict | None:
    """The Pod's PodScheduled condition: what ``kubectl describe pod`` shows under Conditions."""
    return next((c for c in ((pod or {}).get("status") or {}).get("conditions") or []
                 if c.get("type") == "PodScheduled"), None)


def waiting_metric(reason: str) -> float:
    text = requests.get(f"http://127.0.0.1:{PORTS['metrics']}/metrics", timeout=5).text
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith(f'sunk_pods_waiting{{reason="{reason}"}}'))


def test_a_pod_waiting_on_a_drained_node_shows_slurms_reason_and_follows_it(kube_api, dev_cluster, namespace,
                                                                            scheduler):
    node = idle_node(dev_cluster)
    dev_cluster.slurm("scontrol", "update", f"nodename={node}", "state=drain", "reason=sunk-test: pod waits")
    try:
        created = time.monotonic()
        name = create_pod(kube_api, namespace, annotations={names.ANN_REQUIRED_NODES: node})["metadata"]["name"]
        job_id = job_id_of(kube_api, dev_cluster, namespace, name, timeout=5)

        def shows_slurms_reason():
            job = slurm_job(dev_cluster, job_id)
            reason, condition = job.get("state_reason"), pod_scheduled(get_pod(kube_api, namespace, name))
            if state(job) != "PENDING" or not reason or reason == "None" or condition is None:
                return None
            message = condition.get("message", "")
            return condition if (condition["status"] == "False" and condition.get("reason") == "WaitingForSlurm"
                                 and message.endswith(f": {reason}") and f"Slurm job {job_id}" in message
                                 and f"partition {job['partition']}" in message) else None

        # Within 5 s of the Pod's creation: the job, its partition and Slurm's reason, whatever 24.11 names it.
        condition = wait_for(shows_slurms_reason, max(0.1, created + 5 - time.monotonic()),
                             "PodScheduled=False/WaitingForSlurm naming Slurm's reason", interval=0.2)
        first = condition["message"]
        pod = get_pod(kube_api, namespace, name)
        assert pod["metadata"]["annotations"][names.ANN_JOB_ID] == str(job_id)  # named from the submission
        assert pod["spec"].get("nodeName") is None
        assert waiting_metric(first.rsplit(": ", 1)[1]) >= 1 or waiting_metric("Other") >= 1

        # Slurm's reason changes (held, still PENDING: no state change): the condition follows, one Event each.
        dev_cluster.slurm("scontrol", "hold", str(job_id))
        held = wait_for(lambda: (r := slurm_job(dev_cluster, job_id).get("state_reason")) not in (None, "", "None")
                        and f": {r}" not in first and r, 10, "Slurm's reason to change")
        condition = wait_for(shows_slurms_reason, 30, f"the condition to name {held}", interval=0.5)
        assert condition["message"] != first

        def both_events() -> list[str] | None:  # (the recorder sends Events from its own thread, after the patch)
            found = [e["message"] for e in events_for(kube_api, namespace, name) if e["reason"] == "WaitingForSlurm"]
            return found if first in found and condition["message"] in found else None

        messages = wait_for(both_events, 10, "a WaitingForSlurm Event for each message", interval=0.2)
        waits = [e for e in events_for(kube_api, namespace, name) if e["reason"] == "WaitingForSlurm"]
        assert len(messages) == len(set(messages)) and all((e.get("count") or 1) == 1 for e in waits)  # not per poll

        # Released and undrained: Slurm runs it, and the binding sets PodScheduled=True.
        dev_cluster.slurm("scontrol", "release", str(job_id))
        dev_cluster.slurm("scontrol", "update", f"nodename={node}", "state=resume")
        wait_for(lambda: bound(kube_api, namespace, name), 60, "the binding")
        assert wait_for(lambda: (c := pod_scheduled(get_pod(kube_api, namespace, name))) and c["status"] == "True",
                        10, "PodScheduled=True")
    finally:
        dev_cluster.slurm("scontrol", "update", f"nodename={node}", "state=resume", check=False)


def test_a_pending_jobs_priority_and_comment_change_nothing_and_its_start_still_binds(kube_api, dev_cluster,
                                                                                      namespace, scheduler):
    """The job feed's predicate (issue 37 goal 4): a change of what the scheduler does not read of a job (its
    priority, which real Slurm moves as the job ages; its comment) goes into the job index and wakes nothing; what
    it reads (the reason, then the start) still reaches the Pod."""
    node = idle_node(dev_cluster)
    dev_cluster.slurm("scontrol", "update", f"nodename={node}", "state=drain", "reason=sunk-test: priority only")
    try:
        name = create_pod(kube_api, namespace, annotations={names.ANN_REQUIRED_NODES: node})["metadata"]["name"]
        job_id = job_id_of(kube_api, dev_cluster, namespace, name, timeout=5)
        wait_for(lambda: (c := pod_scheduled(get_pod(kube_api, namespace, name))) and c.get("message", "").startswith(
            f"Slurm job {job_id}") and c.get("reason") == "WaitingForSlurm", 30, "the Pod to show its wait")
        shown = pod_scheduled(get_pod(kube_api, namespace, name))
        dev_cluster.slurm("scontrol", "update", f"jobid={job_id}", "priority=4242", "comment=sunk-test")
        wait_for(lambda: number(slurm_job(dev_cluster, job_id), "priority") == 4242, 10, "Slurm's new priority")
        time.sleep(PENDING_REASON_INTERVAL + 2)  # (the scheduler rereads a pending placeholder this often)
        pod = get_pod(kube_api, namespace, name)
        assert pod["spec"].get("nodeName") is None and pod_scheduled(pod) == shown
        dev_cluster.slurm("scontrol", "update", f"nodename={node}", "state=resume")
        wait_for(lambda: bound(kube_api, namespace, name), 60, "the binding once Slurm starts the job")
    finally:
        dev_cluster.slurm("scontrol", "update", f"nodename={node}", "state=resume", check=False)


# -- a slurmd Pod's change wakes the Pods Slurm placed on its node, and only those (issue 37 goal 4) ----------
SLURMD_TEST_LABEL = "sunk.dev/scheduler-slurmd-test"


def test_a_pod_waiting_for_its_nodes_slurmd_pod_binds_once_one_appears(kube_api, dev_cluster, tmp_path_factory):
    """What the walk of every unbound Pod at each slurmd event was for, now a lookup of the Pods whose jobs
    Slurm placed on that node (JobIndex.owners_on): a scheduler that sees no slurmd Pod (its selector matches
    none) leaves the Pod waiting with the reason; a slurmd Pod appearing for that node (the label added) binds it."""
    run_id = uuid.uuid4().hex[:8]
    namespace = create_namespace(kube_api)
    tmp = tmp_path_factory.mktemp("slurmd-wake")
    ports = {"hooks": free_port(), "metrics": free_port(), "probes": free_port()}
    proc = scheduler_process(dev_cluster, namespace, tmp, name="sunk-scheduler-slurmd-wake", ports=ports, extra_args=(
        f"--slurmd-selector=app.kubernetes.io/name=slurmd,{SLURMD_TEST_LABEL}={run_id}",
        f"--leader-election-id=sunk-scheduler-slurmd-wake-{run_id}"))
    node = idle_node(dev_cluster, states=("idle", "mixed"))  # (earlier tests' jobs may still hold every node a while)
    slurmd = next(p for p in kc.list_objects(kube_api, PODS, "slurm", label_selector="app.kubernetes.io/name=slurmd")
                  if ((p.get("spec") or {}).get("hostname") or p["metadata"]["name"]) == node)

    def label(value: str | None) -> None:
        kc.patch(kube_api, PODS, slurmd["metadata"]["name"], {"metadata": {"labels": {SLURMD_TEST_LABEL: value}}},
                 "slurm")

    with serving(kube_api, dev_cluster, proc, namespace):
        try:
            name = create_pod(kube_api, namespace, annotations={names.ANN_REQUIRED_NODES: node})["metadata"]["name"]
            wanted = f"no slurmd Pod found for Slurm node {node}"
            wait_for(lambda: wanted in ((pod_scheduled(get_pod(kube_api, namespace, name)) or {}).get("message") or ""),
                     60, f"PodScheduled naming {wanted!r}", interval=0.5)
            assert bound(kube_api, namespace, name) is None
            label(run_id)  # the scheduler's slurmd informer sees it appear: an add, for Slurm node `node`
            assert wait_for(lambda: bound(kube_api, namespace, name), 20, "the binding") == \
                dev_cluster.k8s_node_for(node)
        finally:
            label(None)
