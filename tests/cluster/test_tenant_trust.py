"""A tenant against sunk, tried as a tenant would: a Slurm user of the dev cluster who is not root (``kube``,
uid 1001) with a slurmrestd token of their own, against sunk-scheduler as the chart runs it (its ServiceAccount
and RBAC). What they can write (their jobs' Extra, Comment and name) must never speak for a placeholder."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import jwt
import pytest
import requests
from kube_testns import create_namespace, purge_namespace
from rbac_harness import as_service_account, assert_never_forbidden
from slurmtools import slurm_job, state, wait_for
from test_gangs import busy, create_batch_job, finish, gang_jobs, job_uid, pods_with
from test_scheduler import SCHEDULER, get_pod, placed, pod_manifest, scheduler_process, serving

from sunk.kube import client as kc
from sunk.kube.resources import PODS
from sunk.model import names

TENANT, TENANT_UID = "kube", 1001  # made by sunk-dev in the Slurm chroot, with a Slurm association
PORTS = {"hooks": 18900, "metrics": 18980, "probes": 18981}
LEASE = "sunk-scheduler-tenant"
FULL_LIST = 2.0  # seconds: the attack used to take effect at the scheduler's next full job list


@pytest.fixture(scope="module")
def namespace(kube_api):
    ns = create_namespace(kube_api)
    yield ns
    purge_namespace(kube_api, ns)


@pytest.fixture(scope="module")
def scheduler(kube_api, dev_cluster, namespace, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tenant")
    account, kubeconfig = as_service_account(kube_api, dev_cluster, "scheduler-rbac.yaml", tmp, leases=[LEASE])
    proc = scheduler_process(dev_cluster, namespace, tmp, name="sunk-scheduler-tenant", ports=PORTS, extra_args=(
        f"--kubeconfig={kubeconfig}", f"--leader-election-namespace={account['namespace']}",
        f"--leader-election-id={LEASE}", f"--slurm-job-full-list-interval={FULL_LIST:g}s"))
    with serving(kube_api, dev_cluster, proc, namespace, purge=False):
        yield proc
    assert_never_forbidden(proc.log)


class Tenant:
    """slurmrestd as the tenant: a token signed for ``kube`` (as ``scontrol token`` would give them)."""

    def __init__(self, dev_cluster):
        key = (Path(dev_cluster.root) / "etc/slurm/jwt.key").read_bytes()
        now = int(time.time())
        token = jwt.encode({"iat": now, "exp": now + 3600, "sun": TENANT}, key, algorithm="HS256")
        self.url = f"{dev_cluster.env()['SLURM_REST_URL']}/slurm/v0.0.42"
        self.headers = {"X-SLURM-USER-NAME": TENANT, "X-SLURM-USER-TOKEN": token}

    def submit(self, **fields) -> requests.Response:
        job = {"name": f"tenant-{uuid.uuid4().hex[:6]}", "script": "#!/bin/bash\nsleep 600\n",
               "current_working_directory": "/tmp", "environment": ["PATH=/usr/bin:/bin"], **fields}
        return requests.post(f"{self.url}/job/submit", json={"job": job}, headers=self.headers, timeout=30)

    def submitted(self, **fields) -> int:
        answer = self.submit(**fields)
        assert answer.ok and not answer.json().get("errors"), answer.text[:500]
        return int(answer.json()["job_id"])

    def update(self, job_id: int, **fields) -> requests.Response:
        return requests.post(f"{self.url}/job/{job_id}", json=fields, headers=self.headers, timeout=30)

    def cancel(self, job_id: int) -> None:
        requests.delete(f"{self.url}/job/{job_id}", headers=self.headers, timeout=30)


@pytest.fixture
def tenant(dev_cluster):
    return Tenant(dev_cluster)


def untouched(kube_api, namespace: str, name: str) -> bool:
    pod = get_pod(kube_api, namespace, name)
    return pod is not None and not pod["metadata"].get("deletionTimestamp")


def test_a_tenant_cannot_write_an_admin_comment(tenant):
    """What the placeholder's identity rests on: slurmctld lets no one but its super users write AdminComment,
    neither at submission nor in an update of the tenant's own job."""
    refused = tenant.submit(admin_comment="sunk-pod=forged ns=x name=y")
    assert not refused.ok or refused.json().get("errors"), refused.text[:300]
    job_id = tenant.submitted(hold=True)
    try:
        answer = tenant.update(job_id, admin_comment="sunk-pod=forged ns=x name=y")
        assert not answer.ok or answer.json().get("errors"), answer.text[:300]
        assert tenant.update(job_id, extra="anything").ok  # (its Extra is the tenant's to write)
    finally:
        tenant.cancel(job_id)


def test_a_placeholders_identity_copied_onto_an_older_held_job_changes_nothing(kube_api, dev_cluster, namespace,
                                                                                scheduler, tenant):
    """The attack of issue 31: the tenant holds a job of their own, then copies a running placeholder's identity
    into its Extra and Comment. The scheduler used to keep the older job at its next full job list, cancel the
    real placeholder as a duplicate and delete the Pod."""
    held = tenant.submitted(hold=True)
    try:
        name = f"victim-{uuid.uuid4().hex[:6]}"
        kc.create(kube_api, PODS, pod_manifest(name), namespace)
        job_id, node = placed(kube_api, dev_cluster, namespace, name)
        identity = slurm_job(dev_cluster, job_id)["admin_comment"]
        assert identity.startswith("sunk-pod="), identity
        assert tenant.update(held, extra=identity, comment=identity).ok
        assert slurm_job(dev_cluster, held)["extra"] == identity  # (the forgery landed)
        time.sleep(4 * FULL_LIST + 2)  # several full job lists, each of which used to take the bait
        assert untouched(kube_api, namespace, name), "the victim's Pod was deleted"
        assert get_pod(kube_api, namespace, name)["spec"]["nodeName"] == node
        assert state(slurm_job(dev_cluster, job_id)) == "RUNNING", "the real placeholder was cancelled"
        assert state(slurm_job(dev_cluster, held)) == "PENDING", "the tenant's job was taken for a placeholder"
        assert "duplicate" not in scheduler.log.read_text()
    finally:
        tenant.cancel(held)


def test_a_gangs_identity_in_a_job_submitted_and_cancelled_deletes_no_member(kube_api, dev_cluster, namespace,
                                                                              scheduler, tenant):
    """A gang waits in Slurm (one of its nodes is busy); the tenant submits a job whose Extra is the gang's
    identity and cancels it. An ended job of the gang used to delete every member it was submitted for."""
    blocker = busy(dev_cluster, "node1", 1)
    forged = None
    try:
        create_batch_job(kube_api, namespace, "victims",
                         annotations={names.ANN_REQUIRED_NODES: "node[1-3]"})
        key = f"job/{job_uid(kube_api, namespace, 'victims')}"
        (gang_job,) = wait_for(lambda: gang_jobs(dev_cluster, key), 60, "the gang's placeholder job")
        assert state(slurm_job(dev_cluster, gang_job)) == "PENDING"
        identity = slurm_job(dev_cluster, gang_job)["admin_comment"]
        assert identity.startswith(f"sunk-gang={key} "), identity
        forged = tenant.submitted(extra=identity, comment=identity, hold=True)
        tenant.cancel(forged)
        wait_for(lambda: state(slurm_job(dev_cluster, forged)) == "CANCELLED", 20, "the forged job to end")
        time.sleep(4 * FULL_LIST + 2)
        members = pods_with(kube_api, namespace, "batch.kubernetes.io/job-name=victims")
        assert len(members) == 3 and all(not p["metadata"].get("deletionTimestamp") for p in members), \
            [p["metadata"]["name"] for p in members]
        assert state(slurm_job(dev_cluster, gang_job)) == "PENDING"
        dev_cluster.slurm("scancel", blocker)  # and the gang, untouched, still runs once it can
        wait_for(lambda: all(p["spec"].get("nodeName") for p in
                             pods_with(kube_api, namespace, "batch.kubernetes.io/job-name=victims")), 60,
                 "the gang to be bound")
    finally:
        dev_cluster.slurm("scancel", blocker, check=False)
        if forged is not None:
            tenant.cancel(forged)
        finish(kube_api, dev_cluster, namespace)  # (the Job first: its controller would make the Pods again)


def test_a_tenant_rewriting_their_own_placeholders_extra_changes_nothing(kube_api, dev_cluster, namespace,
                                                                          scheduler, tenant):
    """The Pod runs as the tenant (user-id 1001), so its placeholder is the tenant's job: its Extra is theirs to
    rewrite, with another Pod's identity or anything else, and sunk reads none of it."""
    name = f"own-{uuid.uuid4().hex[:6]}"
    kc.create(kube_api, PODS, pod_manifest(name, annotations={names.ANN_USER_ID: str(TENANT_UID)}),
              namespace)
    job_id, node = placed(kube_api, dev_cluster, namespace, name)
    job = slurm_job(dev_cluster, job_id)
    assert job["user_id"] == TENANT_UID
    other = f"sunk-pod={uuid.uuid4()} ns={namespace} name=someone-else sched={SCHEDULER}"
    assert tenant.update(job_id, extra=other, comment="x").ok
    time.sleep(4 * FULL_LIST + 2)
    assert untouched(kube_api, namespace, name) and get_pod(kube_api, namespace, name)["spec"]["nodeName"] == node
    assert state(slurm_job(dev_cluster, job_id)) == "RUNNING"
    assert slurm_job(dev_cluster, job_id)["admin_comment"] == job["admin_comment"]
