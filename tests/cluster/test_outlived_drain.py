"""A Pod that outlives its placeholder job, with the scheduler down, on the real dev cluster.

The placeholder runs as a tenant (the Pod's user-id 1001: user ``kube``), so it cannot drain a node,
and nothing it does may decide one. Its node is drained by trusted components only: the job's epilog
(root, before Slurm reuses the node) calls the Syncer's post-hook, which drains the node while the
Pod is still on its Node; with the Syncer unreachable too, the epilog drains by itself. Either
drain is ``k8s: sunk-placeholder: pod NS/NAME uid=UID outlived KillWait after job J``, and a Syncer
lifts it once the Pod (that UID) is gone.

Each test runs a Syncer serving the hook API for node3/node4 (locking_harness.py) with sunk's prolog
and epilog wired in for jobs whose Comment carries the harness's marker (the Pod's
``sunk.coreweave.com/comment`` annotation gives its placeholder that Comment), and a scheduler of
its own, which it kills once the Pod is bound.
"""

from __future__ import annotations

import time
import uuid

import pytest
from kube_testns import create_namespace, purge_namespace
from locking_harness import HookScripts, new_token, running_syncer
from slurmtools import slurm_job, state, wait_for
from test_scheduler import event_reasons, get_pod, gone, placed, pod_manifest, scheduler_process

from sunk.kube import client as kc
from sunk.kube.resources import PODS
from sunk.model import names
from sunk.translate import drains

TENANT_UID = 1001  # the dev cluster's user kube, with a Slurm association
NODE = "node3"
FINALIZER = "sunk.test/hold"  # keeps the Pod after its deletion: it outlives its job


@pytest.fixture
def token(tmp_path):
    value = new_token()
    path = tmp_path / "token"
    path.write_text(value)
    return value, path


@pytest.fixture
def syncer(dev_cluster, kube_api, token, tmp_path):
    with running_syncer(kube_api, dev_cluster, token[1], tmp_path / "syncer", ["--node-permissions-enabled"],
                        f"sunk-syncer-outlived-{uuid.uuid4().hex[:6]}") as proc:
        yield proc


@pytest.fixture
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


def node_state(dev_cluster) -> tuple[bool, str]:
    """(drained, reason) of NODE as slurmctld shows it."""
    out = dev_cluster.slurm("sinfo", "-h", "-N", "-n", NODE, "-o", "%T|%E").stdout.strip().splitlines()[0]
    state_name, _, reason = out.partition("|")
    return state_name.startswith(("drain", "drng", "drained", "draining")), reason


def tenant_pod_outlives_its_job(kube_api, dev_cluster, namespace, scripts, tmp_path, port: int,
                                before_cancel=lambda: None):
    """A tenant's Pod placed on NODE through the prolog; the scheduler killed; its job cancelled. Returns the
    Pod's name, its job and the drain the node must get."""
    name = f"p-{uuid.uuid4().hex[:6]}"
    manifest = pod_manifest(name, annotations={names.ANN_USER_ID: str(TENANT_UID), names.ANN_REQUIRED_NODES: NODE,
                                               names.ANN_COMMENT: scripts.marker})
    manifest["metadata"]["finalizers"] = [FINALIZER]
    ports = {"hooks": port, "metrics": port + 80, "probes": port + 81}
    proc = scheduler_process(dev_cluster, namespace, tmp_path, ports=ports)
    proc.start()  # (not test_scheduler.serving: its end deletes the Pods, which must outlive their job here)
    try:
        uid = kc.create(kube_api, PODS, manifest, namespace)["metadata"]["uid"]
        job_id, _ = placed(kube_api, dev_cluster, namespace, name, timeout=60)
        job = slurm_job(dev_cluster, job_id)
        assert job["user_id"] == TENANT_UID, job.get("user_id")  # the placeholder runs as the tenant
    finally:
        proc.kill()  # the scheduler is gone: nobody deletes the Pod, the placeholder cannot reach its hooks
    before_cancel()
    dev_cluster.slurm("scancel", str(job_id))
    return name, job_id, drains.PlaceholderDrain(namespace, name, job_id, uid)


def release(kube_api, dev_cluster, namespace: str, name: str) -> None:
    try:
        kc.patch(kube_api, PODS, name, {"metadata": {"finalizers": None}}, namespace)
        kc.delete(kube_api, PODS, name, namespace)
    except kc.ApiError as exc:
        if not exc.not_found:
            raise
    wait_for(lambda: gone(kube_api, namespace, name), 60, "the Pod to go")


def test_the_syncer_drains_the_node_of_a_tenants_pod_that_outlived_its_job_with_the_scheduler_down(
        kube_api, dev_cluster, namespace, scripts, tmp_path):
    name = None
    try:
        name, job_id, drain = tenant_pod_outlives_its_job(kube_api, dev_cluster, namespace, scripts, tmp_path,
                                                          18760)
        # KillWait (30 s) for the placeholder, then the epilog's post-hook: the Pod is still on the Node.
        wait_for(lambda: node_state(dev_cluster) == (True, drain.reason()), 75,
                 f"{NODE} drained by the Syncer for the Pod", interval=1)
        assert "PodOutlivedSlurmJob" in wait_for(lambda: event_reasons(kube_api, namespace, name), 10, "an Event")
        assert state(slurm_job(dev_cluster, job_id)) in ("CANCELLED", None)
        assert get_pod(kube_api, namespace, name) is not None
        time.sleep(5)  # the Syncer keeps its own drain while the Pod is there
        assert node_state(dev_cluster) == (True, drain.reason())
        release(kube_api, dev_cluster, namespace, name)
        wait_for(lambda: not node_state(dev_cluster)[0], 60, "the Syncer to lift the drain once the Pod is gone",
                 interval=1)
    finally:
        if name is not None and get_pod(kube_api, namespace, name) is not None:
            release(kube_api, dev_cluster, namespace, name)
        dev_cluster.slurm("scontrol", "update", f"nodename={NODE}", "state=resume", check=False)


def test_the_epilog_drains_by_itself_when_the_syncer_is_down_too(kube_api, dev_cluster, namespace, scripts, syncer,
                                                                 tmp_path):
    name = None
    try:
        name, job_id, drain = tenant_pod_outlives_its_job(kube_api, dev_cluster, namespace, scripts, tmp_path,
                                                          18770, before_cancel=syncer.kill)
        # KillWait, then the epilog's three unanswered post-hooks (about 6 s), then its own scontrol drain.
        wait_for(lambda: node_state(dev_cluster) == (True, drain.reason()), 90,
                 f"{NODE} drained by the epilog", interval=1)
        syncer.start()
        time.sleep(5)  # a Syncer back keeps the drain while the Pod is there
        assert node_state(dev_cluster) == (True, drain.reason())
        release(kube_api, dev_cluster, namespace, name)
        wait_for(lambda: not node_state(dev_cluster)[0], 60, "the Syncer to lift the epilog's drain", interval=1)
    finally:
        if name is not None and get_pod(kube_api, namespace, name) is not None:
            release(kube_api, dev_cluster, namespace, name)
        dev_cluster.slurm("scontrol", "update", f"nodename={NODE}", "state=resume", check=False)
