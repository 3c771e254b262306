"""The chart's RBAC is enough: sunk-scheduler and sunk-syncer do their work as their own
ServiceAccounts (the extender does in every test of test_extender.py). See rbac_harness.py."""

from __future__ import annotations

import uuid

import pytest
import requests
from kube_testns import create_namespace, purge_namespace
from locking_harness import PLACED_BY, lock_value, new_token, running_syncer
from procs import Process
from rbac_harness import as_service_account, assert_never_forbidden, deployment_args, rendered
from slurmtools import slurm_job, state, wait_for
from syncer_harness import NODES_UNDER_TEST, TEST_LABEL, Cluster, free_port, restore_slurm_node
from test_scheduler import create_pod, placed, scheduler_process, serving

from sunk.kube import client as kc
from sunk.kube.resources import EVENTS, LEASES, NODES, PODS
from sunk.model import names
from sunk.translate import objects
from sunk.translate.lock import tolerates_lock
from sunk_dev.cluster import k8s_node_for

PORTS = {"hooks": 18300, "metrics": 18380, "probes": 18381}
# The Syncer without Node rights, under a fullname of its own: its ServiceAccount, ClusterRole and Lease
# stand beside the chart's sunk-syncer, whose rights the other tests use.
NO_NODE_RIGHTS = {"fullnameOverride": "sunk-nonode",
                  "syncer": {"nodePermissions": {"enabled": False}, "nodeLocking": {"enabled": False}}}


@pytest.fixture(scope="module")
def scheduler_as_its_service_account(kube_api, dev_cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rbac-scheduler")
    account, kubeconfig = as_service_account(kube_api, dev_cluster, "scheduler-rbac.yaml", tmp,
                                             leases=["sunk-scheduler-rbac-test"])
    namespace = create_namespace(kube_api)
    # Cluster scope, as the ClusterRole is bound; the Lease in the chart's namespace, under a
    # name of its own (the demo's scheduler may hold "sunk-scheduler").
    proc = scheduler_process(dev_cluster, namespace, tmp, name="sunk-scheduler-rbac", ports=PORTS, extra_args=(
        f"--kubeconfig={kubeconfig}", f"--leader-election-namespace={account['namespace']}",
        "--leader-election-id=sunk-scheduler-rbac-test"))
    with serving(kube_api, dev_cluster, proc, namespace):  # (start fails unless every informer could list and watch)
        yield namespace, proc


def test_the_scheduler_runs_a_pod_through_slurm_with_only_its_manifest_rbac(kube_api, dev_cluster,
                                                                            scheduler_as_its_service_account):
    namespace, proc = scheduler_as_its_service_account
    pod = create_pod(kube_api, namespace)
    name = pod["metadata"]["name"]
    job_id, _ = placed(kube_api, dev_cluster, namespace, name)  # pods/binding, Events
    kc.delete(kube_api, PODS, name, namespace)
    wait_for(lambda: state(slurm_job(dev_cluster, job_id)) in ("CANCELLED", "COMPLETED", None), 30, "the job to end")
    assert_never_forbidden(proc.log)


@pytest.fixture
def syncer_without_node_rights(kube_api, dev_cluster, tmp_path):
    """The Syncer as the chart renders it with syncer.nodePermissions and syncer.nodeLocking off (state
    sync and metrics only): its rendered flags, as its rendered ServiceAccount, on stand-in slurmd Pods
    for node3/node4 (syncer_harness.py). Not module-scoped, and before the locking Syncer's fixture:
    two Syncers on node3/node4 fight, and a module fixture lives until the module ends."""
    account, kubeconfig = as_service_account(kube_api, dev_cluster, "syncer-rbac.yaml", tmp_path,
                                             values=NO_NODE_RIGHTS)
    namespace = create_namespace(kube_api)
    run_id = uuid.uuid4().hex[:8]
    cluster = Cluster(dev_cluster, kube_api, namespace)
    env = dev_cluster.env()
    hooks, metrics, probes = free_port(), free_port(), free_port()
    args = deployment_args("syncer.yaml", "sunk-nonode-syncer", {
        "--slurm-api-base": env["SLURM_REST_URL"], "--slurm-auth-token-file": env["SLURM_JWT_FILE"],
        "--watch-namespace": namespace, "--slurmd-selector": f"app.kubernetes.io/name=slurmd,{TEST_LABEL}={run_id}",
        "--hooks-api-bind-address": f"127.0.0.1:{hooks}", "--metrics-bind-address": f"127.0.0.1:{metrics}",
        "--health-probe-bind-address": f"127.0.0.1:{probes}"}, docs=rendered("syncer.yaml", NO_NODE_RIGHTS))
    assert "--node-permissions-enabled=false" in args and "--plugins=sunk.metrics.plugin" in args, args
    # (the Lease: the rendered sunk-nonode-syncer, in the namespace its Role is in)
    proc = Process("sunk-syncer-nonode", "sunk.commands.syncer", [*args, f"--kubeconfig={kubeconfig}"],
                   f"http://127.0.0.1:{probes}/readyz", tmp_path, env={"SLURM_JWT": ""})
    for name in NODES_UNDER_TEST:
        restore_slurm_node(cluster, name)
    try:
        for name in NODES_UNDER_TEST:
            cluster.create_pod(name, run_id)
        for name in NODES_UNDER_TEST:
            cluster.wait_pod_ready(name)
        proc.start()  # (start fails unless every informer could list and watch)
        yield cluster, proc, f"http://127.0.0.1:{metrics}/metrics"
    finally:
        proc.stop()
        purge_namespace(kube_api, namespace)
        for name in NODES_UNDER_TEST:
            restore_slurm_node(cluster, name)
        try:
            kc.delete(kube_api, LEASES, "sunk-nonode-syncer", account["namespace"])
        except kc.ApiError as exc:
            if not exc.not_found:
                raise


def test_the_syncer_without_node_rights_syncs_state_with_only_its_manifest_rbac(kube_api,
                                                                               syncer_without_node_rights):
    """What such a Syncer still does: a slurmd Pod not Ready drains its Slurm node and Ready lifts it
    (Events on the Pod); a drain made in Slurm shows on the slurmd Pod (conditions, labels); the Slurm
    metrics. It never tries the Node condition of that drain (nodes/status is not granted): nothing it
    sends is forbidden."""
    cluster, proc, metrics_url = syncer_without_node_rights
    a, b = NODES_UNDER_TEST

    def k8s_drained(name: str) -> bool:
        node = cluster.node(name)
        return node.drained and node.reason.startswith(names.K8S_DRAIN_PREFIX)

    cluster.set_pod_ready(a, False)
    wait_for(lambda: k8s_drained(a), 10, f"k8s: drain of {a} (its Pod not Ready)")
    cluster.set_pod_ready(a, True)
    wait_for(lambda: not cluster.node(a).drained, 10, f"{a} undrained (its Pod Ready)")
    reasons = {e["reason"] for e in kc.list_objects(kube_api, EVENTS, cluster.namespace)
               if e["involvedObject"]["name"] == a}
    assert {"SlurmNodeDrained", "SlurmNodeUndrained"} <= reasons, reasons

    manual = "syncer-test: rbac, checking fans"
    try:
        cluster.drain(b, manual)
        wait_for(lambda: (c := cluster.pod_condition(b, names.COND_SLURM_DRAIN)) and c["status"] == "True"
                 and manual in (c.get("message") or ""), 10, "SlurmDrain=True with the reason on the Pod")
        wait_for(lambda: (cluster.pod(b) or {})["metadata"]["labels"].get(names.LABEL_DRAIN) == "true", 10,
                 "the drain label")
    finally:
        cluster.undrain(b)
    wait_for(lambda: (c := cluster.pod_condition(b, names.COND_SLURM_DRAIN)) and c["status"] == "False", 10,
             "SlurmDrain=False on the Pod")
    wait_for(lambda: "slurm_node_state{" in requests.get(metrics_url, timeout=5).text, 30, "the Slurm metrics")
    # It skipped the Node condition of that drain (the demo's Syncer may write one: no assertion on the
    # Node), said so once at start, and so was never refused anything.
    log = proc.log.read_text(errors="replace")
    assert "--node-permissions-enabled=false: no Node is written" in log, log[-3000:]
    assert_never_forbidden(proc.log)


@pytest.fixture(scope="module")
def syncer_as_its_service_account(kube_api, dev_cluster, tmp_path_factory):
    """The Syncer with node locking and metrics, as the chart's sunk-syncer, on node3/node4 only."""
    tmp = tmp_path_factory.mktemp("rbac-syncer")
    account, kubeconfig = as_service_account(kube_api, dev_cluster, "syncer-rbac.yaml", tmp,
                                             leases=["sunk-syncer-rbac-test"])
    token_file = tmp / "hooks-token"
    token_file.write_text(new_token())
    # (argparse keeps the last --kubeconfig; the Lease goes where the Role allows it; the
    # default plugins: node locking, metrics)
    with running_syncer(kube_api, dev_cluster, token_file, tmp, [
            f"--kubeconfig={kubeconfig}", f"--leader-election-namespace={account['namespace']}",
            "--node-permissions-enabled", "--lock-taint-effect=NoExecute", "--lock-eviction-retry=1s"],
            "sunk-syncer-rbac-test") as proc:
        yield proc


def test_the_syncer_locks_evicts_and_unlocks_with_only_its_manifest_rbac(kube_api, dev_cluster,
                                                                       syncer_as_its_service_account):
    """Every write of a lock: the taint, a toleration for a Pod sunk placed, an eviction, the
    annotation, Events, Pod conditions; then the unlock."""
    proc = syncer_as_its_service_account
    namespace = create_namespace(kube_api)
    job = None
    try:
        for name, annotations in (("web", {}), ("inference", {names.ANN_JOB_ID: "1"})):
            placed = {"schedulerName": PLACED_BY} if annotations else {}  # (as if sunk had placed it)
            kc.create(kube_api, PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": name, "annotations": annotations}, "spec": {
                    "nodeName": k8s_node_for("node3"), **placed, "containers": [{"name": "main", "image": "busybox"}]}},
                namespace)
        job = dev_cluster.slurm("sbatch", "--parsable", "--chdir=/tmp", "-o", "/dev/null", "-w", "node3",
                                "--wrap", "sleep 60").stdout.strip()
        wait_for(lambda: lock_value(kc.get(kube_api, PODS, "node3", "slurm")) == "locked", 40, "node3 locked")
        assert objects.has_taint(kc.get(kube_api, NODES, k8s_node_for("node3")), names.LOCK_KEY, "NoExecute")
        assert tolerates_lock(kc.get(kube_api, PODS, "inference", namespace), "NoExecute")
        # Evicted: terminating, or already gone (the fake kubelet honours a grace period of 0 at once).
        web = next((p for p in kc.list_objects(kube_api, PODS, namespace) if p["metadata"]["name"] == "web"), None)
        assert web is None or web["metadata"].get("deletionTimestamp"), web
        dev_cluster.slurm("scancel", job)
        wait_for(lambda: lock_value(kc.get(kube_api, PODS, "node3", "slurm")) == "false", 40, "node3 unlocked")
        wait_for(lambda: not objects.has_taint(kc.get(kube_api, NODES, k8s_node_for("node3")), names.LOCK_KEY), 10,
                 "taint removal")
    finally:
        if job:
            dev_cluster.slurm("scancel", job, check=False)
        purge_namespace(kube_api, namespace)
    assert_never_forbidden(proc.log)
