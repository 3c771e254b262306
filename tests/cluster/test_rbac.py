"""The manifests' RBAC is enough: sunk-scheduler schedules a Pod as its own ServiceAccount.

test_manifests.py proves each manifest's schema with a dry run; it cannot prove that the
Roles cover every call the component makes. A missing verb leaves a real deployment
never ready (an informer that may not list never syncs) or failing one write in a hundred.
"""

from __future__ import annotations

import pytest
import yaml
from kube_testns import create_namespace
from slurmtools import slurm_job, state, wait_for
from test_manifests import MANIFESTS, PATHS
from test_scheduler import bound, create_pod, job_id_of, scheduler_process, serving

from sunk.dev import kubeconf
from sunk.kube import client as kc
from sunk.kube.resources import PODS

PORTS = {"hooks": 18300, "metrics": 18380, "probes": 18381}


def apply(api, doc: dict) -> None:
    """Create, or replace what is there (kubectl apply's effect for these small objects)."""
    prefix, plural, namespaced = PATHS[doc["kind"]]
    meta = doc["metadata"]
    collection = f"{prefix}/namespaces/{meta['namespace']}/{plural}" if namespaced else f"{prefix}/{plural}"
    try:
        kc.request(api, "POST", collection, body=doc)
    except kc.ApiError as exc:
        if exc.status != 409:
            raise
        current = kc.request(api, "GET", f"{collection}/{meta['name']}")
        replacement = {**doc, "metadata": {**meta, "resourceVersion": current["metadata"]["resourceVersion"]}}
        kc.request(api, "PUT", f"{collection}/{meta['name']}", body=replacement)


def service_account_token(api, namespace: str, name: str) -> str:
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
    answer = kc.request(api, "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", body=request)
    return answer["status"]["token"]


@pytest.fixture(scope="module")
def scheduler_as_its_service_account(kube_api, dev_cluster, tmp_path_factory):
    docs = [d for d in yaml.safe_load_all((MANIFESTS / "scheduler-rbac.yaml").read_text()) if d]
    for doc in docs:
        apply(kube_api, doc)
    account = next(d["metadata"] for d in docs if d["kind"] == "ServiceAccount")
    tmp = tmp_path_factory.mktemp("rbac-scheduler")
    kubeconfig = kubeconf.write_kubeconfig(tmp / "kubeconfig", dev_cluster.kube_dir, account["name"],
                                           service_account_token(kube_api, account["namespace"], account["name"]))
    namespace = create_namespace(kube_api)
    # Cluster scope, as the ClusterRole is bound; the Lease in the manifests' namespace, under a
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
    job_id = job_id_of(kube_api, dev_cluster, namespace, name)
    wait_for(lambda: bound(kube_api, namespace, name), 30, "binding")  # pods/binding, Events
    kc.delete(kube_api, PODS, name, namespace)
    wait_for(lambda: state(slurm_job(dev_cluster, job_id)) in ("CANCELLED", "COMPLETED", None), 30, "the job to end")
    log = proc.log.read_text()
    assert "forbidden" not in log.lower(), log[-3000:]  # a 403's reason, and its message's "is forbidden"
