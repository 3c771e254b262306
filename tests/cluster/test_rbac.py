"""The chart's RBAC is enough: sunk-scheduler and sunk-syncer do their work as their own
ServiceAccounts (the extender does in every test of test_extender.py). See rbac_harness.py."""

from __future__ import annotations

import pytest
from kube_testns import create_namespace, purge_namespace
from locking_harness import lock_value, new_token, running_syncer
from rbac_harness import as_service_account, assert_never_forbidden
from slurmtools import slurm_job, state, wait_for
from test_scheduler import create_pod, placed, scheduler_process, serving

from sunk import names
from sunk.kube import client as kc
from sunk.kube import patch as kp
from sunk.kube.resources import NODES, PODS
from sunk.translate.lock import tolerates_lock

PORTS = {"hooks": 18300, "metrics": 18380, "probes": 18381}


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
            kc.create(kube_api, PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": name, "annotations": annotations}, "spec": {"nodeName": "worker-3", "containers": [
                    {"name": "main", "image": "busybox"}]}}, namespace)
        job = dev_cluster.slurm("sbatch", "--parsable", "--chdir=/tmp", "-o", "/dev/null", "-w", "node3",
                                "--wrap", "sleep 60").stdout.strip()
        wait_for(lambda: lock_value(kc.get(kube_api, PODS, "node3", "slurm")) == "locked", 40, "node3 locked")
        assert kp.has_taint(kc.get(kube_api, NODES, "worker-3"), names.LOCK_KEY, "NoExecute")
        assert tolerates_lock(kc.get(kube_api, PODS, "inference", namespace), "NoExecute")
        # Evicted: terminating, or already gone (the fake kubelet honours a grace period of 0 at once).
        web = next((p for p in kc.list_objects(kube_api, PODS, namespace) if p["metadata"]["name"] == "web"), None)
        assert web is None or web["metadata"].get("deletionTimestamp"), web
        dev_cluster.slurm("scancel", job)
        wait_for(lambda: lock_value(kc.get(kube_api, PODS, "node3", "slurm")) == "false", 40, "node3 unlocked")
        wait_for(lambda: not kp.has_taint(kc.get(kube_api, NODES, "worker-3"), names.LOCK_KEY), 10, "taint removal")
    finally:
        if job:
            dev_cluster.slurm("scancel", job, check=False)
        purge_namespace(kube_api, namespace)
    assert_never_forbidden(proc.log)
