"""Gang scheduling (issue 21) against real Slurm, a real apiserver and the real Job controller.

The dev cluster's batch partition has four stand-in nodes (node1..4, each on a stand-in Node) of 64 CPUs
each. Members ask for 40 CPUs, so two members never fit one node, and two gangs of three cannot
both run (3 + 3 > 4): what the gangs here ask for, and what Slurm must refuse, is unambiguous.

Jobs are made by the real Job controller. The real LeaderWorkerSet and JobSet controllers
(dev/sunk_dev/workloads.py: built from their Go modules, their webhooks served) make the gangs of the
tests named "real"; the other LWS and JobSet tests label Pods (and, for a JobSet, batch/v1 Jobs)
as those controllers label them (sunk/translate/gang.py names each label), for the cases a
controller never makes (a group whose members disagree, one that never fills up). The
coscheduling PodGroup CRD (scheduler-plugins') is created by this module when absent, and removed
after; PodGroups need no controller of their own for sunk (it reads only spec.minMember).
"""

from __future__ import annotations

import calendar
import time

import pytest
from kube_testns import create_namespace, delete_jobs, purge_namespace
from procs import Process
from rbac_harness import as_service_account, assert_never_forbidden
from slurmtools import jobs_carrying, number, slurm_job, started_placeholder, state, wait_for
from test_scheduler import SCHEDULER, end_pods, event_reasons, events_for, get_pod, scheduler_process

from sunk.kube import client as kc
from sunk.kube.resources import JOBS, NODES, PODGROUPS, PODS, Resource
from sunk.model import hostlist, names
from sunk.translate import gang as g
from sunk_dev import workloads

PORTS = {"hooks": 18300, "metrics": 18380, "probes": 18381}
LEADERWORKERSETS = Resource("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet")
JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")
CPU = "40"  # of 64 per node: one member per node, whatever Slurm's packing
# -- fixtures ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def podgroup_crd(kube_api):
    """scheduler-plugins' PodGroup CRD, made here unless the cluster has it (then left as it is)."""
    with workloads.podgroup_crd(kube_api):
        yield


@pytest.fixture
def workload_controllers(kube_api, dev_cluster):
    """The real LeaderWorkerSet and JobSet controllers, serving their webhooks (built on first use), for
    one test: their Pod webhooks would judge the Pods other tests label as those controllers do."""
    with workloads.running(kube_api, dev_cluster.home, dev_cluster.run_dir / "workloads", dev_cluster.kubeconfig):
        yield


@pytest.fixture(scope="module")
def namespace(kube_api, dev_cluster):
    workloads.clean_up(kube_api, dev_cluster.run_dir / "workloads")  # what a run killed mid-test left
    ns = create_namespace(kube_api)
    yield ns
    purge_namespace(kube_api, ns, workloads=(LEADERWORKERSETS, JOBSETS))


@pytest.fixture(scope="module")
def scheduler(kube_api, dev_cluster, namespace, podgroup_crd, tmp_path_factory):
    """sunk-scheduler as deployed with scheduler.gangPodGroups (the chart's ServiceAccount and RBAC: Jobs and
    PodGroups are read as it), watching PodGroups; a 403 fails the module. The chart grants PodGroups only
    with that value, so the RBAC is rendered with it, as the flag is passed."""
    tmp = tmp_path_factory.mktemp("gangs")
    lease = "sunk-scheduler-gangs"
    account, kubeconfig = as_service_account(kube_api, dev_cluster, "scheduler-rbac.yaml", tmp, leases=[lease],
                                             values={"scheduler": {"gangPodGroups": True}})
    proc: Process = scheduler_process(dev_cluster, namespace, tmp, name="sunk-scheduler-gangs", ports=PORTS,
                                      extra_args=(f"--kubeconfig={kubeconfig}", "--gang-pod-groups=true",
                                                  f"--leader-election-namespace={account['namespace']}",
                                                  f"--leader-election-id={lease}"))
    proc.start()
    try:
        yield proc
    finally:
        try:
            finish(kube_api, dev_cluster, namespace)
        finally:
            proc.stop()
    assert_never_forbidden(proc.log)


@pytest.fixture(autouse=True)
def one_test_at_a_time(kube_api, dev_cluster, namespace, scheduler):
    """Each test starts on four idle nodes and leaves them so: its Jobs, Pods and gang jobs end."""
    wait_for(lambda: idle_batch_nodes(dev_cluster) == 4, 120, "the four batch nodes to be idle", interval=1)
    yield
    finish(kube_api, dev_cluster, namespace)


def finish(api, dev_cluster, namespace: str) -> None:
    """Jobs first (else their controller makes the Pods again), then every Pod, then their Slurm jobs end."""
    delete_jobs(api, namespace)
    end_pods(api, dev_cluster, namespace)


def idle_batch_nodes(dev_cluster) -> int:
    out = dev_cluster.slurm("sinfo", "-h", "-N", "-p", "batch", "-o", "%N %T").stdout.split("\n")
    return sum(1 for line in out if line.endswith(" idle"))


# -- helpers -------------------------------------------------------------------------------------------------
def pod_spec(cpu: str = CPU, grace: int = 5, restart: str = "Never") -> dict:
    return {"schedulerName": SCHEDULER, "terminationGracePeriodSeconds": grace, "restartPolicy": restart,
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"],
                            "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}


def create_batch_job(api, namespace: str, name: str, *, parallelism: int = 3, indexed: bool = True,
                     labels: dict | None = None, annotations: dict | None = None, backoff: int = 6,
                     job_labels: dict | None = None) -> dict:
    spec = {"parallelism": parallelism, "completions": parallelism, "backoffLimit": backoff,
            "template": {"metadata": {"labels": labels or {}, "annotations": annotations or {}}, "spec": pod_spec()}}
    if indexed:
        spec["completionMode"] = "Indexed"
    return kc.create(api, JOBS, {"apiVersion": "batch/v1", "kind": "Job",
                                 "metadata": {"name": name, "labels": job_labels or {}}, "spec": spec}, namespace)


def bare_pod(api, namespace: str, name: str, *, labels: dict, annotations: dict | None = None) -> dict:
    return kc.create(api, PODS, {"apiVersion": "v1", "kind": "Pod",
                                 "metadata": {"name": name, "labels": labels, "annotations": annotations or {}},
                                 "spec": pod_spec()}, namespace)


def pods_with(api, namespace: str, selector: str) -> list[dict]:
    return [p for p in kc.list_objects(api, PODS, namespace, label_selector=selector)
            if not p["metadata"].get("deletionTimestamp")]


def all_bound(api, namespace: str, selector: str, count: int):
    pods = pods_with(api, namespace, selector)
    return pods if len(pods) == count and all(p["spec"].get("nodeName") for p in pods) else None


def gang_jobs(dev_cluster, key: str) -> list[int]:
    """The placeholder jobs of the gang with this key (its Extra's ``sunk-gang=<key> ``), any state."""
    return jobs_carrying(dev_cluster, f"sunk-gang={key} ")


def the_gang_job(dev_cluster, key: str, timeout: float = 30) -> int:
    ids = wait_for(lambda: gang_jobs(dev_cluster, key), timeout, f"the placeholder job of gang {key}")
    assert len(ids) == 1, f"gang {key} has {len(ids)} placeholder jobs: {ids}"
    return ids[0]


def scheduled_at(pod: dict) -> float:
    """When the apiserver bound the Pod: its PodScheduled condition, which a binding sets (seconds)."""
    (condition,) = [c for c in pod["status"].get("conditions") or () if c["type"] == "PodScheduled"]
    assert condition["status"] == "True", condition
    return float(calendar.timegm(time.strptime(condition["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ")))


def assert_one_member_per_node(dev_cluster, pods: list[dict], job_id: int) -> dict:
    job = slurm_job(dev_cluster, job_id)
    nodes = hostlist.expand(job["nodes"])
    assert len(nodes) == len(pods), job["nodes"]
    bound = sorted(p["spec"]["nodeName"] for p in pods)
    assert bound == sorted(dev_cluster.k8s_node_for(n) for n in nodes) and len(set(bound)) == len(pods)
    for pod in pods:
        annotations = pod["metadata"]["annotations"]
        assert annotations[names.ANN_JOB_ID] == str(job_id)
        assert dev_cluster.k8s_node_for(annotations[names.ANN_SLURM_NODE]) == pod["spec"]["nodeName"]
    return job


def job_uid(api, namespace: str, name: str) -> str:
    return kc.get(api, JOBS, name, namespace)["metadata"]["uid"]


def busy(dev_cluster, nodes: str, count: int) -> str:
    """A batch job holding ``nodes`` whole."""
    job = dev_cluster.slurm("sbatch", "--parsable", "--chdir=/tmp", "-N", str(count), "-w", nodes, "--exclusive",
                            "--qos=high", "--wrap", "sleep 600").stdout.strip()
    wait_for(lambda: state(slurm_job(dev_cluster, int(job))) == "RUNNING", 30, f"the job holding {nodes} to run")
    return job


# -- a Job --------------------------------------------------------------------------------------------------
def test_a_job_of_three_pods_is_one_slurm_job_of_three_nodes(kube_api, dev_cluster, namespace):
    create_batch_job(kube_api, namespace, "train")
    uid = job_uid(kube_api, namespace, "train")
    pods = wait_for(lambda: all_bound(kube_api, namespace, "batch.kubernetes.io/job-name=train", 3), 60,
                    "the 3 members bound")
    job_id = the_gang_job(dev_cluster, f"job/{uid}")
    job = assert_one_member_per_node(dev_cluster, pods, job_id)
    assert state(job) == "RUNNING" and started_placeholder(job, g.owner(namespace, f"job/{uid}"))
    assert number(job, "node_count") == 3 and number(job, "cpus_per_task") == int(CPU)
    assert job["name"] == f"k8s:{namespace}/job/train"
    leader = next(p for p in pods if p["metadata"]["labels"][g.JOB_COMPLETION_INDEX] == "0")
    assert leader["spec"]["nodeName"] == dev_cluster.k8s_node_for(job["batch_host"])  # the leader on the batch host
    for pod in pods:
        assert "Scheduled" in event_reasons(kube_api, namespace, pod["metadata"]["name"])


def test_with_two_free_nodes_a_gang_of_three_waits_whole_then_binds_whole_within_a_second(kube_api, dev_cluster,
                                                                                        namespace):
    """The issue's acceptance: nothing bound while Slurm cannot give 3 nodes; all 3 at once when it can."""
    blocker = busy(dev_cluster, "node[1-2]", 2)
    try:
        create_batch_job(kube_api, namespace, "wide")
        uid = job_uid(kube_api, namespace, "wide")
        job_id = the_gang_job(dev_cluster, f"job/{uid}")
        pending = slurm_job(dev_cluster, job_id)
        assert state(pending) == "PENDING" and number(pending, "node_count") == 3
        time.sleep(5)
        members = pods_with(kube_api, namespace, "batch.kubernetes.io/job-name=wide")
        assert len(members) == 3 and not any(p["spec"].get("nodeName") for p in members), "a member was bound early"
        assert gang_jobs(dev_cluster, f"job/{uid}") == [job_id]
        # A member of a gang waiting on Slurm hears why, once the wait lasts.
        wait_for(lambda: "WaitingForSlurm" in event_reasons(kube_api, namespace, members[0]["metadata"]["name"]), 20,
                 "a WaitingForSlurm Event")
    finally:
        dev_cluster.slurm("scancel", blocker)
    pods = wait_for(lambda: all_bound(kube_api, namespace, "batch.kubernetes.io/job-name=wide", 3), 60,
                    "the 3 members bound")
    job = assert_one_member_per_node(dev_cluster, pods, job_id)
    times = [scheduled_at(p) for p in pods]
    assert max(times) - min(times) <= 1, times  # one pass, not one binding per job list
    assert min(times) - number(job, "start_time") <= 5, (times, number(job, "start_time"))  # (the prolog included)


def test_two_gangs_that_together_exceed_the_cluster_never_deadlock(kube_api, dev_cluster, namespace):
    """6 members of 40 CPUs on 4 nodes of 64: one gang runs whole, the other waits whole, then runs."""
    create_batch_job(kube_api, namespace, "first")
    create_batch_job(kube_api, namespace, "second")
    selectors = {name: f"batch.kubernetes.io/job-name={name}" for name in ("first", "second")}

    def one_runs():
        for name, selector in selectors.items():
            if all_bound(kube_api, namespace, selector, 3):
                return name
        return None

    running = wait_for(one_runs, 90, "one gang bound whole")
    waiting = "second" if running == "first" else "first"
    for _ in range(5):  # and it stays so: the other never holds a node
        time.sleep(1)
        assert not any(p["spec"].get("nodeName") for p in pods_with(kube_api, namespace, selectors[waiting]))
    (waiting_job,) = gang_jobs(dev_cluster, f"job/{job_uid(kube_api, namespace, waiting)}")
    assert state(slurm_job(dev_cluster, waiting_job)) == "PENDING"
    kc.request(kube_api, "DELETE", JOBS.path(namespace, running),
               body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"})
    pods = wait_for(lambda: all_bound(kube_api, namespace, selectors[waiting], 3), 120, f"gang {waiting} bound whole")
    assert_one_member_per_node(dev_cluster, pods, waiting_job)


def test_deleting_the_job_cancels_the_gangs_job(kube_api, dev_cluster, namespace):
    create_batch_job(kube_api, namespace, "gone")
    uid = job_uid(kube_api, namespace, "gone")
    wait_for(lambda: all_bound(kube_api, namespace, "batch.kubernetes.io/job-name=gone", 3), 60, "bound")
    job_id = the_gang_job(dev_cluster, f"job/{uid}")
    kc.request(kube_api, "DELETE", JOBS.path(namespace, "gone"),
               body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"})
    wait_for(lambda: state(slurm_job(dev_cluster, job_id)) in ("CANCELLED", "COMPLETED", None)
             and "COMPLETING" not in (slurm_job(dev_cluster, job_id).get("job_state") or ()), 90,
             "the gang's job to end once its members are gone")
    assert not pods_with(kube_api, namespace, "batch.kubernetes.io/job-name=gone")


def test_scancel_of_the_gangs_job_deletes_every_member_naming_the_job(kube_api, dev_cluster, namespace):
    create_batch_job(kube_api, namespace, "cancelled", backoff=0)
    uid = job_uid(kube_api, namespace, "cancelled")
    pods = wait_for(lambda: all_bound(kube_api, namespace, "batch.kubernetes.io/job-name=cancelled", 3), 60, "bound")
    job_id = the_gang_job(dev_cluster, f"job/{uid}")
    dev_cluster.slurm("scancel", str(job_id))
    for pod in pods:
        name = pod["metadata"]["name"]
        wait_for(lambda n=name: get_pod(kube_api, namespace, n) is None
                 or get_pod(kube_api, namespace, n)["metadata"].get("deletionTimestamp"), 30, f"{name} deleted")
        reasons = wait_for(lambda n=name: event_reasons(kube_api, namespace, n) & {"JobEnding", "JobCancelled"}, 10,
                           f"an Event on {name} saying why")
        assert reasons
    messages = [e["message"] for p in pods for e in events_for(kube_api, namespace, p["metadata"]["name"])
                if e["reason"] in ("JobEnding", "JobCancelled")]
    assert all(str(job_id) in m for m in messages), messages
    # The placeholder returned once every member was gone: no node drained.
    wait_for(lambda: state(slurm_job(dev_cluster, job_id)) == "CANCELLED"
             and "COMPLETING" not in slurm_job(dev_cluster, job_id)["job_state"], 60, "the job to finish")
    for node in hostlist.expand(slurm_job(dev_cluster, job_id)["nodes"]):
        assert "DRAIN" not in dev_cluster.slurm("scontrol", "-o", "show", "node", node).stdout


def test_a_member_replaced_while_the_job_runs_takes_the_freed_node(kube_api, dev_cluster, namespace):
    create_batch_job(kube_api, namespace, "mended")
    uid = job_uid(kube_api, namespace, "mended")
    selector = "batch.kubernetes.io/job-name=mended"
    pods = wait_for(lambda: all_bound(kube_api, namespace, selector, 3), 60, "bound")
    job_id = the_gang_job(dev_cluster, f"job/{uid}")
    victim = next(p for p in pods if p["metadata"]["labels"][g.JOB_COMPLETION_INDEX] == "1")
    freed = victim["spec"]["nodeName"]
    kc.delete(kube_api, PODS, victim["metadata"]["name"], namespace)

    def replaced():
        now = all_bound(kube_api, namespace, selector, 3)
        return now if now and victim["metadata"]["uid"] not in {p["metadata"]["uid"] for p in now} else None

    pods = wait_for(replaced, 60, "the replacement bound")
    replacement = next(p for p in pods if p["metadata"]["labels"][g.JOB_COMPLETION_INDEX] == "1")
    assert replacement["spec"]["nodeName"] == freed
    assert replacement["metadata"]["annotations"][names.ANN_JOB_ID] == str(job_id)
    assert gang_jobs(dev_cluster, f"job/{uid}") == [job_id] and state(slurm_job(dev_cluster, job_id)) == "RUNNING"


def test_a_batch_job_of_higher_qos_preempts_the_whole_gang(kube_api, dev_cluster, namespace):
    create_batch_job(kube_api, namespace, "low", backoff=0,
                     annotations={names.ANN_QOS: "normal", names.ANN_EXCLUSIVE: "none",
                                  names.ANN_REQUIRED_NODES: "node[1-3]"})
    uid = job_uid(kube_api, namespace, "low")
    pods = wait_for(lambda: all_bound(kube_api, namespace, "batch.kubernetes.io/job-name=low", 3), 60, "bound")
    job_id = the_gang_job(dev_cluster, f"job/{uid}")
    high = dev_cluster.slurm("sbatch", "--parsable", "--chdir=/tmp", "-w", "node2", "--exclusive", "--qos=high",
                             "--wrap", "sleep 300").stdout.strip()
    try:
        for pod in pods:
            name = pod["metadata"]["name"]
            wait_for(lambda n=name: get_pod(kube_api, namespace, n) is None
                     or get_pod(kube_api, namespace, n)["metadata"].get("deletionTimestamp"), 60,
                     f"{name}, a member of the preempted gang, deleted")
        assert state(slurm_job(dev_cluster, job_id)) == "PREEMPTED"
        wait_for(lambda: state(slurm_job(dev_cluster, int(high))) == "RUNNING", 60, "the batch job to run")
    finally:
        dev_cluster.slurm("scancel", high)


def test_members_that_disagree_get_an_event_naming_the_annotation_and_no_job(kube_api, dev_cluster, namespace):
    labels = {g.LWS_NAME: "split", g.LWS_GROUP_INDEX: "0"}
    bare_pod(kube_api, namespace, "split-0", labels={**labels, g.LWS_WORKER_INDEX: "0"},
             annotations={g.LWS_SIZE: "2", names.ANN_QOS: "high"})
    bare_pod(kube_api, namespace, "split-0-1", labels={**labels, g.LWS_WORKER_INDEX: "1"},
             annotations={g.LWS_SIZE: "2"})
    for name in ("split-0", "split-0-1"):
        event = wait_for(lambda n=name: [e for e in events_for(kube_api, namespace, n)
                                         if e["reason"] == "FailedValidation"], 30, f"FailedValidation on {name}")[0]
        assert names.ANN_QOS in event["message"] and "split-0-1" in event["message"]
    time.sleep(2)
    assert gang_jobs(dev_cluster, "lws/split/0") == []


# -- LeaderWorkerSet groups, PodGroups, JobSets: labelled as their controllers label them -----------------------
def test_a_leaderworkerset_group_is_one_job_with_the_leader_on_the_batch_host(kube_api, dev_cluster, namespace):
    for group in (0, 1):
        for worker in (0, 1):
            name = f"llm-{group}" if worker == 0 else f"llm-{group}-{worker}"
            bare_pod(kube_api, namespace, name,
                     labels={g.LWS_NAME: "llm", g.LWS_GROUP_INDEX: str(group), g.LWS_WORKER_INDEX: str(worker)},
                     annotations={g.LWS_SIZE: "2"})
    for group in (0, 1):
        selector = f"{g.LWS_NAME}=llm,{g.LWS_GROUP_INDEX}={group}"
        pods = wait_for(lambda s=selector: all_bound(kube_api, namespace, s, 2), 60, f"group {group} bound")
        job_id = the_gang_job(dev_cluster, f"lws/llm/{group}")
        job = assert_one_member_per_node(dev_cluster, pods, job_id)
        leader = next(p for p in pods if p["metadata"]["labels"][g.LWS_WORKER_INDEX] == "0")
        assert leader["spec"]["nodeName"] == dev_cluster.k8s_node_for(job["batch_host"])


def test_a_group_that_never_fills_up_says_how_many_members_exist(kube_api, dev_cluster, namespace):
    bare_pod(kube_api, namespace, "lonely-0", labels={g.LWS_NAME: "lonely", g.LWS_GROUP_INDEX: "0",
                                                      g.LWS_WORKER_INDEX: "0"}, annotations={g.LWS_SIZE: "3"})
    event = wait_for(lambda: [e for e in events_for(kube_api, namespace, "lonely-0")
                              if e["reason"] == "WaitingForGang"], 30, "a WaitingForGang Event")[0]
    assert event["message"] == f"LeaderWorkerSet {namespace}/lonely group 0: 1 of 3 members exist"
    assert gang_jobs(dev_cluster, "lws/lonely/0") == [] and not get_pod(kube_api, namespace, "lonely-0")["spec"].get(
        "nodeName")


def test_a_podgroup_is_one_job_of_min_member_nodes_once_min_member_pods_exist(kube_api, dev_cluster, namespace):
    kc.create(kube_api, PODGROUPS, {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                                    "metadata": {"name": "pg"}, "spec": {"minMember": 3}}, namespace)
    for i in range(2):
        bare_pod(kube_api, namespace, f"pg-{i}", labels={g.POD_GROUP: "pg"})
    event = wait_for(lambda: [e for e in events_for(kube_api, namespace, "pg-0") if e["reason"] == "WaitingForGang"],
                     30, "a WaitingForGang Event")[0]
    assert event["message"] == f"PodGroup {namespace}/pg: 2 of 3 members exist"
    assert gang_jobs(dev_cluster, "podgroup/pg") == []
    bare_pod(kube_api, namespace, "pg-2", labels={g.POD_GROUP: "pg"})
    pods = wait_for(lambda: all_bound(kube_api, namespace, f"{g.POD_GROUP}=pg", 3), 60, "the PodGroup bound")
    assert_one_member_per_node(dev_cluster, pods, the_gang_job(dev_cluster, "podgroup/pg"))


def test_a_jobset_is_one_gang_across_its_child_jobs(kube_api, dev_cluster, namespace):
    """Two child Jobs of one replicated Job, labelled (Jobs and Pods) as the JobSet controller labels them."""
    for index in (0, 1):
        labels = {g.JOBSET_NAME: "js", g.JOBSET_REPLICATED_JOB: "workers", g.JOBSET_REPLICATED_JOB_REPLICAS: "2",
                  g.JOBSET_GLOBAL_REPLICAS: "2", g.JOBSET_JOB_INDEX: str(index), g.JOBSET_JOB_GLOBAL_INDEX: str(index),
                  g.JOBSET_RESTART_ATTEMPT: "0"}
        create_batch_job(kube_api, namespace, f"js-workers-{index}", parallelism=1, labels=labels, job_labels=labels)
    pods = wait_for(lambda: all_bound(kube_api, namespace, f"{g.JOBSET_NAME}=js", 2), 60, "the JobSet bound whole")
    job_id = the_gang_job(dev_cluster, "jobset/js/0")
    job = assert_one_member_per_node(dev_cluster, pods, job_id)
    first = next(p for p in pods if p["metadata"]["labels"][g.JOBSET_JOB_INDEX] == "0")
    assert first["spec"]["nodeName"] == dev_cluster.k8s_node_for(job["batch_host"])
    for pod in pods:  # (not a gang per child Job: one job for both)
        assert not gang_jobs(dev_cluster, f"job/{pod['metadata']['labels']['batch.kubernetes.io/controller-uid']}")


def delete_workload(api, resource: Resource, name: str, namespace: str, timeout: float = 60) -> None:
    """Delete a workload in the foreground (gone only once its StatefulSets or Jobs are), so that nothing
    makes its Pods again while the module's clean-up deletes them."""
    try:
        kc.request(api, "DELETE", resource.path(namespace, name),
                   body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"})
    except kc.ApiError as exc:
        if not exc.not_found:
            raise

    def gone() -> bool:
        try:
            kc.get(api, resource, name, namespace)
        except kc.ApiError as exc:
            if exc.not_found:
                return True
            raise
        return False

    wait_for(gone, timeout, f"{resource.kind} {namespace}/{name} deleted")


def test_a_real_leaderworkerset_is_one_gang_per_group(kube_api, dev_cluster, namespace, workload_controllers):
    """The LWS controller makes a leader StatefulSet and, per group, a worker StatefulSet;
    kube-controller-manager makes their Pods; its webhook labels and annotates them (size)."""
    kc.create(kube_api, LEADERWORKERSETS, {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "real"},
        "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2, "workerTemplate": {
            "spec": pod_spec(restart="Always")}}}}, namespace)
    try:
        for group in (0, 1):
            selector = f"{g.LWS_NAME}=real,{g.LWS_GROUP_INDEX}={group}"
            pods = wait_for(lambda s=selector: all_bound(kube_api, namespace, s, 2), 90, f"group {group} bound")
            job = assert_one_member_per_node(dev_cluster, pods, the_gang_job(dev_cluster, f"lws/real/{group}"))
            leader = next(p for p in pods if p["metadata"]["labels"][g.LWS_WORKER_INDEX] == "0")
            assert leader["spec"]["nodeName"] == dev_cluster.k8s_node_for(job["batch_host"])
            assert {p["metadata"]["ownerReferences"][0]["kind"] for p in pods} == {"StatefulSet"}
            # A worker's index label is written by the LWS Pod webhook alone: the apiserver called it.
            assert {p["metadata"]["labels"][g.LWS_WORKER_INDEX] for p in pods} == {"0", "1"}
    finally:
        delete_workload(kube_api, LEADERWORKERSETS, "real", namespace)


def test_a_real_jobset_is_one_gang_across_its_replicated_jobs(kube_api, dev_cluster, namespace, workload_controllers):
    """The JobSet controller makes one batch/v1 Job per replica of each replicated Job, labelled
    with the JobSet's global replica count: one gang of all three Pods, the first Job's on the batch host."""
    job_spec = {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": {"spec": pod_spec()}}
    kc.create(kube_api, JOBSETS, {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "real"},
        "spec": {"replicatedJobs": [{"name": "driver", "replicas": 1, "template": {"spec": job_spec}},
                                    {"name": "workers", "replicas": 2, "template": {"spec": job_spec}}]}}, namespace)
    try:
        pods = wait_for(lambda: all_bound(kube_api, namespace, f"{g.JOBSET_NAME}=real", 3), 90, "the JobSet bound")
        job = assert_one_member_per_node(dev_cluster, pods, the_gang_job(dev_cluster, "jobset/real/0"))
        driver = next(p for p in pods if p["metadata"]["labels"][g.JOBSET_REPLICATED_JOB] == "driver")
        assert driver["spec"]["nodeName"] == dev_cluster.k8s_node_for(job["batch_host"])
        assert {p["metadata"]["labels"][g.JOBSET_GLOBAL_REPLICAS] for p in pods} == {"3"}
    finally:
        delete_workload(kube_api, JOBSETS, "real", namespace)


def test_a_job_opted_out_is_scheduled_pod_by_pod(kube_api, dev_cluster, namespace):
    create_batch_job(kube_api, namespace, "alone", parallelism=2, annotations={names.ANN_GANG: "none"})
    uid = job_uid(kube_api, namespace, "alone")
    pods = wait_for(lambda: all_bound(kube_api, namespace, "batch.kubernetes.io/job-name=alone", 2), 60, "bound")
    assert gang_jobs(dev_cluster, f"job/{uid}") == []
    jobs = {p["metadata"]["annotations"][names.ANN_JOB_ID] for p in pods}
    assert len(jobs) == 2  # one placeholder job per Pod, as before gangs
    for pod in pods:
        assert jobs_carrying(dev_cluster, f"sunk-pod={pod['metadata']['uid']}")


def test_a_scheduler_restarted_mid_gang_submits_no_second_job(kube_api, dev_cluster, namespace, scheduler):
    blocker = busy(dev_cluster, "node[1-2]", 2)
    try:
        create_batch_job(kube_api, namespace, "restarted")
        uid = job_uid(kube_api, namespace, "restarted")
        job_id = the_gang_job(dev_cluster, f"job/{uid}")
        scheduler.kill()
        scheduler.start()
        time.sleep(3)
        assert gang_jobs(dev_cluster, f"job/{uid}") == [job_id]
    finally:
        dev_cluster.slurm("scancel", blocker)
    pods = wait_for(lambda: all_bound(kube_api, namespace, "batch.kubernetes.io/job-name=restarted", 3), 90,
                    "bound after the restart")
    assert_one_member_per_node(dev_cluster, pods, job_id)


# -- typed GPUs (--gpu-types) ---------------------------------------------------------------------------------
def typed_gres(dev_cluster) -> dict[str, str]:
    """Slurm node -> its GPU type, from slurmctld (``Gres=gpu:<type>:<n>``); empty when untyped."""
    types = {}
    for line in dev_cluster.slurm("scontrol", "-o", "show", "node").stdout.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        parts = fields.get("Gres", "").split(":")
        if len(parts) >= 3 and parts[0] == "gpu" and not parts[1].isdigit():
            types[fields["NodeName"]] = parts[1]
    return types


def test_a_pod_with_gpu_class_affinity_lands_only_on_a_node_of_that_gpu_type(kube_api, dev_cluster, namespace,
                                                                             scheduler, tmp_path_factory):
    """Needs two GPU types on different nodes (typed gres.conf lines, Gres=gpu:<type>:N in slurm.conf); the dev
    cluster's sunk-dev declares them or this test says what is missing. The Nodes of one type are labelled
    gpu.nvidia.com/class for it meanwhile, as a GPU cloud labels its Nodes (the kubelet admits the Pods only
    there, and the scheduler excludes the others)."""
    types = typed_gres(dev_cluster)
    if len(set(types.values())) < 2:
        pytest.skip(f"the dev cluster declares no two GPU types on different nodes (Gres: {types or 'untyped'})")
    gres_type = sorted(set(types.values()))[0]
    label_value = f"TYPE_{gres_type.upper()}"
    proc = scheduler_process(dev_cluster, namespace, tmp_path_factory.mktemp("gpu-types"), name="sunk-scheduler-gpus",
                             ports={"hooks": 18400, "metrics": 18480, "probes": 18481},
                             extra_args=(f"--gpu-types={label_value}={gres_type}",
                                         "--leader-election-id=sunk-scheduler-gpus"))
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu.nvidia.com/class", "operator": "In", "values": [label_value]}]}]}}}
    scheduler_name = SCHEDULER  # (scheduler_process's: the module's own scheduler is stopped meanwhile)
    typed_nodes = [dev_cluster.k8s_node_for(n) for n, t in types.items() if t == gres_type]
    classes = {name: kc.get(kube_api, NODES, name)["metadata"]["labels"].get("gpu.nvidia.com/class")
               for name in typed_nodes}
    for name in typed_nodes:
        kc.patch(kube_api, NODES, name, {"metadata": {"labels": {"gpu.nvidia.com/class": label_value}}})
    scheduler.stop()
    proc.start()
    try:
        for i in range(2):
            spec = {**pod_spec(cpu="1"), "schedulerName": scheduler_name, "affinity": affinity}
            spec["containers"][0]["resources"] = {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
                                                  "limits": {"nvidia.com/gpu": "1"}}
            kc.create(kube_api, PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"typed-{i}",
                                       "annotations": {names.ANN_GANG: "none"}}, "spec": spec}, namespace)
        for i in range(2):
            node = wait_for(lambda n=f"typed-{i}": (get_pod(kube_api, namespace, n) or {}).get("spec", {}).get(
                "nodeName"), 60, f"typed-{i} bound")
            slurm_node = get_pod(kube_api, namespace, f"typed-{i}")["metadata"]["annotations"][names.ANN_SLURM_NODE]
            assert types[slurm_node] == gres_type and node == dev_cluster.k8s_node_for(slurm_node)
            job = slurm_job(dev_cluster, int(get_pod(kube_api, namespace, f"typed-{i}")["metadata"]["annotations"][
                names.ANN_JOB_ID]))
            assert job["tres_per_node"] == f"gres/gpu:{gres_type}:1"
    finally:
        try:
            end_pods(kube_api, dev_cluster, namespace)
        finally:
            proc.stop()
            scheduler.start()
            for name, value in classes.items():
                kc.patch(kube_api, NODES, name, {"metadata": {"labels": {"gpu.nvidia.com/class": value}}})
