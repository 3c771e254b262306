"""The real kube-scheduler, configured with sunk-extender, places Pods where Slurm put their jobs."""

from __future__ import annotations

import subprocess
import textwrap
import time

import pytest
import requests
from kube_testns import create_namespace, delete_jobs, purge_namespace
from procs import Process, secret_file
from rbac_harness import apply_manifest, assert_never_forbidden, deployment_args, kubeconfig_for
from slurmtools import slurm_job, started_placeholder, state, wait_for
from test_gangs import all_bound, assert_one_member_per_node, gang_jobs, idle_batch_nodes, pod_spec
from test_scheduler import bound, end_pods, event_reasons, gone, job_id_of, placed, pod_manifest, serving

from sunk.kube import client as kc
from sunk.kube.resources import JOBS, PODS
from sunk.model import names
from sunk.translate import gang as g
from sunk.translate.lock import tolerates_lock
from sunk_dev import slurmconf
from sunk_dev.tls import issue, make_ca

PROFILE = "sunk-extender-test"
PORTS = {"verbs": 18888, "hooks": 18200, "metrics": 18280, "probes": 18281}


@pytest.fixture(scope="module")
def namespace(kube_api):
    ns = create_namespace(kube_api)
    yield ns
    purge_namespace(kube_api, ns)


LEASE = "sunk-extender-test"


@pytest.fixture(scope="module")
def service_accounts(kube_api):
    """The extender's RBAC as deployed (it binds the scheduler's ClusterRole): the extender and its
    kube-scheduler run as their own ServiceAccounts in every test here."""
    apply_manifest(kube_api, "scheduler-rbac.yaml")
    return {d["metadata"]["name"]: d["metadata"] for d in apply_manifest(kube_api, "extender-rbac.yaml",
                                                                          leases=[LEASE])
            if d["kind"] == "ServiceAccount"}


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    """What the Secrets sunk-extender-tls and sunk-extender-client-tls hold: a CA, the extender's
    serving certificate, and kube-scheduler's client certificate."""
    tmp = tmp_path_factory.mktemp("extender-tls")
    ca = make_ca(tmp)
    return {"server": issue(ca, tmp, "sunk-extender"), "client": issue(ca, tmp, "sunk-kube-scheduler", client=True)}


@pytest.fixture(scope="module")
def extender(kube_api, dev_cluster, namespace, service_accounts, certificates, tmp_path_factory):
    """sunk-extender with the flags the chart renders: mutual TLS on the verbs port, plain
    HTTP on the hook port that placeholder jobs call; only addresses and paths are this machine's."""
    tmp = tmp_path_factory.mktemp("extender")
    env = dev_cluster.env()
    account = service_accounts["sunk-extender"]
    kubeconfig = kubeconfig_for(kube_api, dev_cluster, account["namespace"], account["name"], tmp / "kubeconfig")
    server = certificates["server"]
    args = deployment_args("extender.yaml", "sunk-extender", {
        "--scheduler-name": PROFILE,
        "--bind-address": f"127.0.0.1:{PORTS['verbs']}",
        "--tls-cert-file": str(server.cert), "--tls-key-file": str(server.key), "--client-ca-file": str(server.ca),
        "--slurm-api-base": env["SLURM_REST_URL"], "--slurm-auth-token-file": env["SLURM_JWT_FILE"],
        "--slurm-kill-wait": f"{slurmconf.KILL_WAIT}s",
        "--hooks-api-bind-address": f"127.0.0.1:{PORTS['hooks']}", "--hooks-url": f"http://127.0.0.1:{PORTS['hooks']}",
        "--hook-secret-file": str(secret_file(dev_cluster.run_dir, "test-hook.secret")),
        "--identity-policy": str(dev_cluster.identity_policy_file()),
        "--metrics-bind-address": f"127.0.0.1:{PORTS['metrics']}",
        "--health-probe-bind-address": f"127.0.0.1:{PORTS['probes']}",
    })
    proc = Process(
        "sunk-extender", "sunk.commands.extender",
        # (the Lease where its Role allows, under a name of its own: the demo's may hold the shipped one)
        [*args, f"--kubeconfig={kubeconfig}", f"--leader-election-namespace={account['namespace']}",
         f"--leader-election-id={LEASE}", "--zap-log-level=debug"],
        ready_url=f"http://127.0.0.1:{PORTS['probes']}/readyz", log_dir=tmp,
    )
    with serving(kube_api, dev_cluster, proc, namespace, purge=False):  # (the namespace fixture purges)
        yield proc
    assert_never_forbidden(proc.log)


@pytest.fixture(scope="module")
def kube_scheduler(kube_api, dev_cluster, extender, service_accounts, certificates, tmp_path_factory):
    """The stock kube-scheduler binary built by sunk-dev, with the extender wired in as
    the chart wires it: https, presenting its client certificate."""
    tmp = tmp_path_factory.mktemp("kube-scheduler")
    account = service_accounts["sunk-kube-scheduler"]
    kubeconfig = kubeconfig_for(kube_api, dev_cluster, account["namespace"], account["name"], tmp / "kubeconfig")
    client = certificates["client"]
    config = tmp / "config.yaml"
    config.write_text(textwrap.dedent(f"""\
        apiVersion: kubescheduler.config.k8s.io/v1
        kind: KubeSchedulerConfiguration
        clientConnection:
          kubeconfig: {kubeconfig}
        leaderElection:
          leaderElect: false
        podInitialBackoffSeconds: 1
        podMaxBackoffSeconds: 1
        profiles:
          - schedulerName: {PROFILE}
        extenders:
          - urlPrefix: https://127.0.0.1:{PORTS['verbs']}
            filterVerb: filter
            prioritizeVerb: prioritize
            preemptVerb: preempt
            bindVerb: bind
            weight: 1
            nodeCacheCapable: true
            httpTimeout: 5s
            enableHTTPS: true
            tlsConfig:
              certFile: {client.cert}
              keyFile: {client.key}
              caFile: {client.ca}
        """))
    log = open(tmp / "kube-scheduler.log", "wb")
    proc = subprocess.Popen([str(dev_cluster.kube_scheduler_binary), f"--config={config}", "--secure-port=0",
                             "--v=2"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    time.sleep(2)
    assert proc.poll() is None, (tmp / "kube-scheduler.log").read_text()[-3000:]
    yield tmp / "kube-scheduler.log"
    proc.terminate()
    proc.wait(20)
    log.close()
    assert_never_forbidden(tmp / "kube-scheduler.log")


def test_the_verbs_need_the_client_certificate_and_the_hooks_answer_plain_http(extender, certificates):
    """As deployed: a caller without kube-scheduler's certificate gets no verb, and the hook port
    answers plain HTTP (JSON) without serving the verbs."""
    with pytest.raises(requests.exceptions.RequestException):
        requests.post(f"https://127.0.0.1:{PORTS['verbs']}/filter", json={}, timeout=5,
                      verify=str(certificates["server"].ca))
    hooks = requests.get(f"http://127.0.0.1:{PORTS['hooks']}/api/v1/jobs/1/pod", timeout=5)
    assert hooks.status_code == 401 and "error" in hooks.json()
    assert requests.post(f"http://127.0.0.1:{PORTS['hooks']}/filter", json={}, timeout=5).status_code == 404


def _create(api, namespace, **kwargs):
    manifest = pod_manifest(f"x-{time.monotonic_ns() % 10**8}", **kwargs)
    manifest["spec"]["schedulerName"] = PROFILE
    return kc.create(api, PODS, manifest, namespace)


def test_kube_scheduler_binds_the_pod_to_the_node_slurm_chose(kube_api, dev_cluster, namespace, kube_scheduler):
    pod = _create(kube_api, namespace, cpu="2", memory="1Gi")
    name = pod["metadata"]["name"]
    job_id, node = placed(kube_api, dev_cluster, namespace, name, timeout=40, what="kube-scheduler to bind the Pod")
    job = slurm_job(dev_cluster, job_id)
    assert state(job) == "RUNNING" and started_placeholder(job, pod["metadata"]["uid"])
    assert node == dev_cluster.k8s_node_for(job["nodes"])
    # The binding was made by kube-scheduler through the extender's bind verb.
    assert f"{namespace}/{name}" in kube_scheduler.read_text() or "Scheduled" in event_reasons(kube_api, namespace,
                                                                                                 name)


def test_kube_scheduler_binds_onto_the_locked_node(kube_api, dev_cluster, namespace, kube_scheduler, lock_taint):
    """The strict lock taints the Node before the job starts: the Pod must tolerate it by the time
    kube-scheduler filters again, or its taint filter drops the one Node Slurm allows."""
    slurm_node, k8s_node = lock_taint("NoSchedule")
    pod = _create(kube_api, namespace, annotations={names.ANN_REQUIRED_NODES: slurm_node})
    name = pod["metadata"]["name"]
    job_id, node = placed(kube_api, dev_cluster, namespace, name, timeout=40, what="kube-scheduler to bind the Pod")
    assert node == k8s_node
    now = kc.get(kube_api, PODS, name, namespace)
    assert tolerates_lock(now) and now["metadata"]["annotations"][names.ANN_JOB_ID] == str(job_id)
    kc.delete(kube_api, PODS, name, namespace)
    wait_for(lambda: state(slurm_job(dev_cluster, job_id)) in ("CANCELLED", "COMPLETED", None), 30, "the job to end")


def test_pod_waits_with_a_reason_while_slurm_has_not_allocated(kube_api, dev_cluster, namespace, kube_scheduler,
                                                                busy_node):
    pod = _create(kube_api, namespace, annotations={names.ANN_REQUIRED_NODES: busy_node})  # pending in Slurm
    name = pod["metadata"]["name"]
    job_id = job_id_of(kube_api, dev_cluster, namespace, name)

    def failed_scheduling():
        pod_now = kc.get(kube_api, PODS, name, namespace)
        conditions = pod_now.get("status", {}).get("conditions", [])
        return next((c["message"] for c in conditions if c["type"] == "PodScheduled" and c["status"] == "False"),
                    None)

    # The first message may predate the submission; the extender's patch brings the Pod back.
    wait_for(lambda: f"waiting for Slurm allocation of job {job_id}" in (failed_scheduling() or ""), 30,
             "kube-scheduler to report the Pod waiting for its job")
    kc.delete(kube_api, PODS, name, namespace)
    wait_for(lambda: state(slurm_job(dev_cluster, job_id)) == "CANCELLED", 30, "the job to be cancelled")


def test_deleting_the_pod_cancels_the_job_and_scancel_deletes_the_pod(kube_api, dev_cluster, namespace,
                                                                       kube_scheduler):
    first = _create(kube_api, namespace)
    second = _create(kube_api, namespace)
    jobs = {}
    for pod in (first, second):
        name = pod["metadata"]["name"]
        jobs[name] = job_id_of(kube_api, dev_cluster, namespace, name)
        wait_for(lambda name=name: bound(kube_api, namespace, name), 40, "binding")
    kc.delete(kube_api, PODS, first["metadata"]["name"], namespace)
    wait_for(lambda: state(slurm_job(dev_cluster, jobs[first["metadata"]["name"]])) == "CANCELLED", 30,
             "the first job to be cancelled")
    second_job = jobs[second["metadata"]["name"]]
    node = slurm_job(dev_cluster, second_job)["nodes"]
    cancelled_at = time.monotonic()
    dev_cluster.slurm("scancel", str(second_job))
    wait_for(lambda: gone(kube_api, namespace, second["metadata"]["name"]), 30, "the second Pod to be deleted")
    # The placeholder reached the hook API as --hooks-url says (plain HTTP beside the TLS verbs): it
    # asked for the deletion, saw the Pod go and ended well before KillWait, draining nothing.
    wait_for(lambda: state(slurm_job(dev_cluster, second_job)) == "CANCELLED"
             and "COMPLETING" not in slurm_job(dev_cluster, second_job)["job_state"], 40, "the job to finish")
    assert time.monotonic() - cancelled_at < slurmconf.KILL_WAIT - 5
    assert "DRAIN" not in dev_cluster.slurm("sinfo", "-h", "-n", node, "-o", "%T").stdout.upper()


def test_kube_scheduler_binds_a_jobs_gang_each_member_to_its_own_node_of_one_slurm_job(kube_api, dev_cluster,
                                                                                     namespace, kube_scheduler):
    """Issue 21's gangs through the extender: the real Job controller makes 3 Pods for kube-scheduler; the
    extender makes them one Slurm job of 3 nodes and passes each member on its own allocated node only,
    so kube-scheduler binds them to 3 distinct Nodes of that one job, the leader on the batch host; once the Job
    is deleted the job ends."""
    end_pods(kube_api, dev_cluster, namespace)  # the earlier tests' Pods hold CPUs of their nodes
    wait_for(lambda: idle_batch_nodes(dev_cluster) == 4, 60, "the four batch nodes to be idle", interval=1)
    spec = {"parallelism": 3, "completions": 3, "completionMode": "Indexed", "backoffLimit": 0,
            "template": {"spec": {**pod_spec(), "schedulerName": PROFILE}}}
    job = kc.create(kube_api, JOBS, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "gang"},
                                     "spec": spec}, namespace)
    uid = job["metadata"]["uid"]
    try:
        pods = wait_for(lambda: all_bound(kube_api, namespace, "batch.kubernetes.io/job-name=gang", 3), 60,
                        "kube-scheduler to bind the 3 members")
        (job_id,) = gang_jobs(dev_cluster, f"job/{uid}")
        slurm = assert_one_member_per_node(dev_cluster, pods, job_id)
        assert state(slurm) == "RUNNING" and started_placeholder(slurm, g.owner(namespace, f"job/{uid}"))
        leader = next(p for p in pods if p["metadata"]["labels"][g.JOB_COMPLETION_INDEX] == "0")
        assert leader["spec"]["nodeName"] == dev_cluster.k8s_node_for(slurm["batch_host"])  # on the batch host
        for pod in pods:  # bound by kube-scheduler through the bind verb (its Events are sent asynchronously)
            wait_for(lambda pod=pod: "Scheduled" in event_reasons(kube_api, namespace, pod["metadata"]["name"]), 20,
                     "kube-scheduler's Scheduled Event")
    finally:
        delete_jobs(kube_api, namespace)
    wait_for(lambda: state(slurm_job(dev_cluster, job_id)) in ("CANCELLED", "COMPLETED", None), 60,
             "the gang's job to end once its Job is gone")
    end_pods(kube_api, dev_cluster, namespace)
