"""A SlurmCluster's Pods running: the chart's SlurmCluster (as test_slurmcluster.py sets it up), from the
Slurm images this repository builds (``sunk_dev.slurmimages``, imported into the real Node's containerd),
its Pods bound to the real Node, each of its claims bound to a hostPath PersistentVolume of the test's
own StorageClass name. Every Pod becomes Ready: slurmctld (as SlurmUser, its state on a fresh volume, munged
beside it), MariaDB (sunk-mariadb initialising an empty datadir), slurmdbd (its own slurmdbd.conf with the
password), slurmrestd, and login, whose readiness is ``scontrol ping`` through its munged: slurmctld answers
a munge-authenticated client (the probe is the proof; test_slurm_on_kubernetes.py also runs sbatch and sacct in it).

Needs cluster DNS (slurm.conf names slurmctld by its Pod's name under the headless Service; slurmdbd and
MariaDB by their headless Services), so it skips while kube-system has no ``kube-dns`` Service. Every
Service a Slurm daemon calls is headless; sunk's clients reach slurmrestd's Service through kube-proxy (a
release's Pods by its name, the test's own clients on the host by its ClusterIP). hostPath volumes are not
chowned for fsGroup, so the test makes each directory its image user's first, as an operator with hostPath
or local volumes must.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import functools
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import requests
from kube_testns import purge_namespace, wait_default_service_account
from procs import Process
from rbac_harness import DeployedOperator, operator_as_deployed, rendered
from syncer_harness import wait_for

import sunk
from sunk.kube import client as kc
from sunk.kube.resources import LEASES, NAMESPACES, NODESETS, PODS, PVCS, SECRETS, SERVICES, SLURMCLUSTERS
from sunk.model import names
from sunk.model.slurm import JobRequest
from sunk.slurm import connect
from sunk.slurm.client import SlurmClient
from sunk.slurm.errors import SlurmError
from sunk.slurm.rest import RestClient
from sunk.translate.slurmcluster import paths
from sunk_dev import images, realnode, slurmimages
from sunk_dev.pool import apply_crds
from sunk_dev.slurmonk8s import (
    COMPONENTS,
    PVS,
    bind_unscheduled,
    claim_uids,
    pods_by_component,
    ready,
    volume,
)

NAME = "sc"
# Each StatefulSet claim and the uid its directory belongs to, each volume reserved for its claim.
CLAIM_UIDS = claim_uids(NAME)
# First starts (MariaDB's datadir, slurmdbd's schema); under pytest-timeout's 300 s, so a failure names who.
READY_TIMEOUT = 240


def _kube_dns(api: Any) -> bool:
    try:
        kc.get(api, SERVICES, "kube-dns", "kube-system")
        return True
    except kc.ApiError as exc:
        if exc.not_found:
            return False
        raise


pytestmark = pytest.mark.skipif(not realnode.enabled(), reason="SUNK_DEV_REAL_NODE=0: no real kubelet Node")


@pytest.fixture(scope="module")
def needs_cluster_dns(kube_api) -> None:
    if not _kube_dns(kube_api):
        pytest.skip("needs cluster DNS: no kube-dns Service in kube-system (slurm.conf names slurmctld, slurmdbd "
                    "and MariaDB by their Services' DNS names)")


@pytest.fixture(scope="module")
def slurm_images_imported(dev_cluster, needs_cluster_dns, tmp_path_factory) -> list[images.Built]:
    """The running release's six Slurm images, built as ``make images`` builds them, in the real Node's containerd."""
    out = tmp_path_factory.mktemp("slurmcluster-images")
    built = slurmimages.build_slurm_images(dev_cluster.home / "images", out, dev_cluster.root, dev_cluster.release,
                                           sunk.__version__, lambda line: print(line, file=sys.stderr))
    images.import_missing(functools.partial(realnode.ctr, dev_cluster.real_paths), built)
    return built


@pytest.fixture(scope="module")
def running_cluster(kube_api, dev_cluster, slurm_images_imported, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("slurmcluster-pods")
    apply_crds(kube_api)
    namespace = f"slurmcluster-pods-{uuid.uuid4().hex[:6]}"
    storage_class = f"sunk-test-{namespace}"
    kc.create(kube_api, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    wait_default_service_account(kube_api, namespace)
    claim_size = {"size": "10Gi", "storageClassName": storage_class}
    # No node locking: the prolog would call a Syncer's hook API, and none runs here (no hooks ConfigMap either).
    values = {"operator": {"enabled": True}, "slurmd": {"namespace": namespace},
              "syncer": {"nodeLocking": {"enabled": False}},
              # cgroup none: cgroup/v2 for a containerised slurmd is unproven here (the NodeSet test runs it privileged)
              "slurmCluster": {"enabled": True, "name": NAME, "release": dev_cluster.release.name, "cgroup": "none",
                               "gresTypes": ["gpu", "nic"],
                               "slurmctld": {"stateVolume": claim_size},
                               "slurmdbd": {"database": {"internal": {"volume": claim_size}}},
                               "partitions": [{"name": "gpu", "nodeSets": ["gpu"], "default": True}]}}
    pvs = [volume(f"{namespace}-{claim}", storage_class, tmp / "volumes" / claim, uid, claim, namespace)
           for claim, uid in CLAIM_UIDS.items()]
    for pv in pvs:
        kc.create(kube_api, PVS, pv)
    kc.create(kube_api, NODESETS, {"apiVersion": names.NODESET_API_VERSION, "kind": "NodeSet", "metadata": {
        "name": "gpu", "namespace": namespace}, "spec": {"nodeSelector": {"sunk.dev/none": namespace}, "template": {
            "spec": {"containers": [{"name": "slurmd", "image": "sunk-dev/slurmd:v1"}]}}}}, namespace)
    (obj,) = [d for d in rendered("slurmcluster.yaml", values) if d["kind"] == "SlurmCluster"]
    kc.create(kube_api, SLURMCLUSTERS, obj, namespace)
    deployed = operator_as_deployed(kube_api, dev_cluster, tmp, namespace, values)
    account, operator = deployed.account, deployed.process
    try:
        operator.start()
        yield RunningCluster(namespace, deployed, obj, tmp / "volumes")
    finally:
        operator.stop()
        purge_namespace(kube_api, namespace, (SLURMCLUSTERS, NODESETS))
        delete_volumes(kube_api, namespace, pvs)
        try:
            kc.delete(kube_api, LEASES, account["name"], account["namespace"])
        except kc.ApiError as exc:
            if not exc.not_found:
                raise


def delete_volumes(api: Any, namespace: str, pvs: list[dict[str, Any]]) -> None:
    """The claims of the namespace and the test's volumes, whatever state they are in."""
    for pvc in kc.list_objects(api, PVCS, namespace):
        kc.delete(api, PVCS, pvc["metadata"]["name"], namespace)
    for pv in pvs:
        try:
            kc.delete(api, PVS, pv["metadata"]["name"])
        except kc.ApiError as exc:
            if not exc.not_found:
                raise


@attrs.frozen
class RunningCluster:
    namespace: str
    operator: DeployedOperator  # started; a test may stop it
    cluster: dict[str, Any]  # the SlurmCluster as created
    volumes: Path  # the hostPath directory of each claim, by the claim's name


def _not_ready(api: Any, namespace: str) -> list[str]:
    bind_unscheduled(api, namespace)
    found = pods_by_component(api, namespace)
    waiting = [c for c in COMPONENTS if not found.get(c) or not all(ready(p) for p in found[c])]
    return waiting


def test_every_pod_of_the_slurm_cluster_becomes_ready_on_the_real_node(kube_api, running_cluster):
    namespace = running_cluster.namespace

    def all_ready() -> bool:
        return not _not_ready(kube_api, namespace)

    try:
        wait_for(all_ready, READY_TIMEOUT, "every SlurmCluster Pod Ready", interval=2)
    except AssertionError:
        states = {p["metadata"]["name"]: [(s["name"], s.get("state"), s.get("restartCount"))
                                          for s in [*(p.get("status") or {}).get("initContainerStatuses", []),
                                                    *(p.get("status") or {}).get("containerStatuses", [])]]
                  for p in kc.list_objects(kube_api, PODS, namespace)}
        raise AssertionError(f"not Ready: {_not_ready(kube_api, namespace)}; "
                             f"containers: {states}; see /var/log/pods/{namespace}_*") from None
    found = pods_by_component(kube_api, namespace)
    for component in COMPONENTS:
        for pod in found[component]:
            assert pod["spec"]["nodeName"] == realnode.NODE_NAME
    # MariaDB waits for nothing: its first start (an empty datadir) must succeed as it is. (The daemons may
    # restart while what they reach is not up yet: slurmdbd before MariaDB, slurmctld before its DNS record.)
    (maria,) = found["mariadb"]
    assert [s["restartCount"] for s in maria["status"]["containerStatuses"]] == [0]


def test_the_login_pods_scontrol_ping_reaches_slurmctld_through_munge(kube_api, dev_cluster, running_cluster):
    """In the login Pod, ``scontrol ping`` reaches slurmctld through its munged sidecar and cluster DNS (the Pod's
    readiness is its sshd's port: a login node stays reachable while slurmctld restarts)."""
    namespace = running_cluster.namespace
    wait_for(lambda: not _not_ready(kube_api, namespace), READY_TIMEOUT, "every SlurmCluster Pod Ready", interval=2)
    (login,) = pods_by_component(kube_api, namespace)["login"]
    assert login["spec"]["containers"][0]["readinessProbe"]["tcpSocket"] == {"port": 22}
    assert ready(login)
    done = dev_cluster.kubectl("exec", "-n", namespace, login["metadata"]["name"], "-c", "login", "--",
                               "scontrol", "ping", check=False)
    assert done.returncode == 0 and "is UP" in done.stdout, done.stdout + done.stderr


def _container_log(namespace: str, pod: str, container: str) -> str:
    """What the real kubelet keeps of a container's output (every start of it)."""
    return "".join(f.read_text(errors="replace")
                   for f in sorted(Path("/var/log/pods").glob(f"{namespace}_{pod}_*/{container}/*.log")))


def test_slurmctld_writes_its_pid_file_into_its_own_directory_as_slurmuser(kube_api, running_cluster):
    """slurmctld runs as SlurmUser, which cannot write /run: SlurmctldPidFile is in an emptyDir of its Pod, so
    its start logs no "Unable to open pidfile" (it did at every start before)."""
    namespace = running_cluster.namespace
    wait_for(lambda: not _not_ready(kube_api, namespace), READY_TIMEOUT, "every SlurmCluster Pod Ready", interval=2)
    (ctld,) = pods_by_component(kube_api, namespace)["slurmctld"]
    name = ctld["metadata"]["name"]
    log = wait_for(lambda: (text := _container_log(namespace, name, "slurmctld")) and "started on cluster" in text
                   and text, 60, "slurmctld's start in its container log")
    assert "pidfile" not in log.lower(), log[-4000:]


def _slurmrestd_url(api: Any, namespace: str) -> str:
    """The SlurmCluster's slurmrestd Service at its ClusterIP, for the test's own clients on the host (whose
    resolver knows no cluster name; kube-proxy leads the address to the Pod)."""
    service = kc.get(api, SERVICES, f"{NAME}-slurmrestd", namespace)
    return f"http://{service['spec']['clusterIP']}:{paths.SLURMRESTD_PORT}"



def _cluster_jwt_key(api: Any, namespace: str, key_file: Path) -> Path:
    secret = kc.get(api, SECRETS, f"{NAME}-jwt-key", namespace)
    key_file.write_bytes(base64.b64decode(secret["data"][paths.JWT_KEY]))
    key_file.chmod(0o600)
    return key_file


def _slurm_as_slurmuser(api: Any, namespace: str, key_file: Path) -> SlurmClient:
    """sunk's REST client on the SlurmCluster's slurmrestd, with tokens signed by the cluster's own JWT key
    for SlurmUser."""
    return connect("rest", url=_slurmrestd_url(api, namespace), user="slurm",
                   jwt_key_file=str(_cluster_jwt_key(api, namespace, key_file)))


def test_the_slurmctld_pod_deleted_with_a_job_queued_comes_back_from_its_volume_with_the_queue(
        kube_api, running_cluster, tmp_path):
    """Issue 34's acceptance: slurmctld's state is on its PersistentVolumeClaim, so a new Pod of its
    StatefulSet (same claim, same name) starts from the saved state and still has the queued job."""
    namespace = running_cluster.namespace
    wait_for(lambda: not _not_ready(kube_api, namespace), READY_TIMEOUT, "every SlurmCluster Pod Ready", interval=2)
    slurm = _slurm_as_slurmuser(kube_api, namespace, tmp_path / "jwt.key")
    try:
        job = slurm.submit_job(JobRequest(name="queued", script="#!/bin/sh\ntrue\n", partition="gpu", priority=0))
        assert slurm.get_job(job).state == "PENDING"
        (ctld,) = pods_by_component(kube_api, namespace)["slurmctld"]
        kc.delete(kube_api, PODS, ctld["metadata"]["name"], namespace)

        def restarted() -> bool:
            pods = pods_by_component(kube_api, namespace).get("slurmctld") or []
            return any(p["metadata"]["uid"] != ctld["metadata"]["uid"] for p in pods) and not _not_ready(
                kube_api, namespace)

        wait_for(restarted, READY_TIMEOUT, "a new slurmctld Pod Ready", interval=2)

        def queued() -> str | None:
            try:
                return slurm.get_job(job).state
            except SlurmError:
                return None  # (slurmrestd reaches the new slurmctld once its name resolves again)

        assert wait_for(queued, 60, f"job {job} through the new slurmctld") == "PENDING"
    finally:
        slurm.close()


def _operator_through_cluster(api: Any, deployed: DeployedOperator, namespace: str, tmp_path: Path) -> Process:
    """The operator as the chart runs it, but on the cluster's own Slurm: ``slurm.api.url`` at its slurmrestd,
    tokens signed with its JWT key (``_slurm_as_slurmuser`` wrote it to ``tmp_path / "jwt.key"``)."""
    dev_slurm = ("--slurm-api-base", "--slurm-auth-token-file")  # (the dev cluster's slurmrestd and token)
    return Process("sunk-operator-cluster-rest", deployed.process.module, [
        *(a for a in deployed.process.args if not a.startswith(dev_slurm)),
        f"--slurm-api-base={_slurmrestd_url(api, namespace)}",
        f"--slurm-jwt-key-file={tmp_path / 'jwt.key'}", "--slurm-user=slurm"],
        deployed.process.ready_url, tmp_path, env={"SLURM_JWT": ""})


def _nodeset_pods(api: Any, namespace: str) -> list[dict[str, Any]]:
    return kc.list_objects(api, PODS, namespace, label_selector=f"{names.LABEL_NODESET}=gpu")


def _accounted(slurm: SlurmClient, job_id: int) -> list[dict[str, Any]]:
    """slurmdbd's records of ``job_id``, through the cluster's slurmrestd (``sacct``'s source)."""
    assert isinstance(slurm, RestClient)
    url = slurm.base.replace("/slurm/", "/slurmdb/") + f"job/{job_id}"
    resp = requests.get(url, headers={"X-SLURM-USER-NAME": slurm.user, "X-SLURM-USER-TOKEN": slurm.tokens.token()},
                        timeout=30)
    return list(resp.json().get("jobs") or []) if resp.status_code == 200 else []


@attrs.frozen
class SlurmdOnRealNode:
    slurm: SlurmClient  # the cluster's own slurmrestd, as SlurmUser
    node_name: str  # the Slurm node the NodeSet's Pod registered
    pod: dict[str, Any]


@contextlib.contextmanager
def _slurmd_on_the_real_node(api: Any, dev_cluster: Any, running: RunningCluster,
                             tmp_path: Path) -> Iterator[SlurmdOnRealNode]:
    """NodeSet ``gpu`` moved onto the real Node, one slurmd Pod of the shipped sunk-slurmd image with no command of
    its own, its Slurm node IDLE; the operator meanwhile on the cluster's own Slurm (the module's reads the dev
    cluster's, and scaling the NodeSet in drains in the cluster's own). Scaled to 0 replicas on the way out."""
    namespace = running.namespace
    wait_for(lambda: not _not_ready(api, namespace), READY_TIMEOUT, "every SlurmCluster Pod Ready", interval=2)
    slurm = _slurm_as_slurmuser(api, namespace, tmp_path / "jwt.key")
    image = slurmimages.slurmd_image_name(sunk.__version__, dev_cluster.release.name)
    # privileged, as slurmd Pods are (slurmstepd sets each task's CPU affinity and changes to the job's user)
    # (the label the chart's --slurmd-selector names, for the scheduler of test_a_pod_is_placed_...)
    template = {"metadata": {"labels": {"app.kubernetes.io/name": "slurmd"}},
                "spec": {"containers": [{"name": "slurmd", "image": image, "imagePullPolicy": "Never",
                                         "securityContext": {"privileged": True}}]}}

    def place(selector: dict[str, str | None]) -> None:
        kc.request(api, "PATCH", NODESETS.path(namespace, "gpu"), content_type="application/merge-patch+json",
                   body={"spec": {"nodeSelector": selector, "template": template, "slurm": {"gres": "nic:1"},
                                  "naming": {"scheme": "IPv4Octets", "prefix": "gpu"}, "slurmCluster": NAME,
                                  "replicas": None}})

    running.operator.process.stop()
    through_cluster = _operator_through_cluster(api, running.operator, namespace, tmp_path)
    through_cluster.start()
    place({"kubernetes.io/hostname": realnode.NODE_NAME, "sunk.dev/none": None})
    try:
        def slurmd_pod() -> dict[str, Any] | None:
            pods = _nodeset_pods(api, namespace)
            return pods[0] if len(pods) == 1 and ready(pods[0]) else None

        try:
            pod = wait_for(slurmd_pod, 120, "the NodeSet's slurmd Pod Ready on the real Node", interval=2)
        except AssertionError:
            status = kc.get(api, NODESETS, "gpu", namespace).get("status")
            states = [(p["metadata"]["name"], p.get("status")) for p in _nodeset_pods(api, namespace)]
            raise AssertionError(f"no Ready slurmd Pod; NodeSet status {status}; Pods {states}") from None
        node_name = pod["spec"]["hostname"]

        def registered() -> bool:
            node = next((n for n in slurm.list_nodes().items or () if n.name == node_name), None)
            # (nic:1 comes with its gres.conf line: slurmd reads the entrypoint's directory of links, -f)
            return (node is not None and "nodeset-gpu" in node.features and "nic:1" in node.gres
                    and node.base_state == "IDLE")

        wait_for(registered, 90, f"Slurm node {node_name} IDLE with feature nodeset-gpu", interval=2)
        yield SlurmdOnRealNode(slurm, node_name, pod)
    finally:
        try:  # (replicas 0 scales in: a selector matching no Node freezes the NodeSet instead)
            kc.request(api, "PATCH", NODESETS.path(namespace, "gpu"), body={"spec": {"replicas": 0}},
                       content_type="application/merge-patch+json")
            wait_for(lambda: not _nodeset_pods(api, namespace), 120, "the NodeSet's slurmd Pod gone", interval=2)
            place({"kubernetes.io/hostname": None, "sunk.dev/none": namespace})
        finally:
            through_cluster.stop()
            running.operator.process.start()
            slurm.close()


def _finished(slurm: SlurmClient, job_id: int) -> str | None:
    state = slurm.get_job(job_id).state
    return state if state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING") else None


def test_a_nodeset_of_the_cluster_runs_the_shipped_slurmd_and_a_batch_job_completes_and_is_accounted(
        kube_api, dev_cluster, running_cluster, tmp_path):
    """Issues 34 (NodeSets of the cluster) and 35 (the slurmd image's entrypoint): NodeSet ``gpu`` moved onto
    the real Node gets one slurmd Pod of the shipped sunk-slurmd image with no command of its own. The operator
    lends it the cluster's configuration and munged; the image's entrypoint registers the Slurm node under the
    operator's name with the NodeSet's feature, which partition ``gpu`` selects, and a GRES (``nic:1``) whose
    gres.conf line reaches slurmd through the entrypoint's own configuration directory. A batch job submitted through
    the cluster's slurmrestd runs on it to COMPLETED, and slurmdbd has its record. (One node: the dev cluster
    has one real kubelet.) Scaled to 0 replicas, the Pod goes."""
    with _slurmd_on_the_real_node(kube_api, dev_cluster, running_cluster, tmp_path) as on_node:
        slurm, node_name = on_node.slurm, on_node.node_name
        assert on_node.pod["spec"]["nodeName"] == realnode.NODE_NAME
        (container,) = [c for c in on_node.pod["spec"]["containers"] if c["name"] == "slurmd"]
        assert "command" not in container and "args" not in container  # the image's entrypoint
        job = slurm.submit_job(JobRequest(name="nodeset-batch", script="#!/bin/sh\nhostname\n", partition="gpu"))
        assert wait_for(lambda: _finished(slurm, job), 90, f"job {job} to finish on {node_name}",
                        interval=1) == "COMPLETED"
        assert slurm.get_job(job).nodes == node_name
        records = wait_for(lambda: _accounted(slurm, job), 60, f"slurmdbd's record of job {job}", interval=2)
        assert [r["job_id"] for r in records] == [job]
        assert "COMPLETED" in records[0]["state"]["current"]


def test_a_slurm_conf_value_changed_while_a_job_runs_is_live_and_the_job_finishes(
        kube_api, dev_cluster, running_cluster, tmp_path):
    """What `helm upgrade` of a slurm.conf value does while a job runs (issue 34): the SlurmCluster's spec
    changes (here a partition's PriorityTier), the operator rewrites the ConfigMap and, once the kubelet can
    have brought the file into the Pods, has slurmctld reread it through the cluster's own slurmrestd.
    slurmctld then shows the new value without a restart of its Pod, and the job running meanwhile on the
    NodeSet's slurmd (which rereads too) finishes COMPLETED, on the same node, never requeued."""
    namespace = running_cluster.namespace
    with _slurmd_on_the_real_node(kube_api, dev_cluster, running_cluster, tmp_path) as on_node:
        slurm, node_name = on_node.slurm, on_node.node_name
        (ctld,) = pods_by_component(kube_api, namespace)["slurmctld"]
        (gpu,) = [p for p in slurm.list_partitions() if p.name == "gpu"]
        assert gpu.priority_tier != 7
        # long enough to outlive the kubelet's ConfigMap sync and the operator's wait for it; ends by itself
        job = slurm.submit_job(JobRequest(name="reconfigure-survivor", partition="gpu",
                                          script="#!/bin/sh\nsleep 130\necho survived\n"))
        started = wait_for(lambda: slurm.get_job(job).state == "RUNNING" and slurm.get_job(job), 60,
                           f"job {job} RUNNING on {node_name}", interval=1)
        partitions = [{"name": "gpu", "nodeSets": ["gpu"], "default": True, "options": {"PriorityTier": 7}}]
        kc.request(kube_api, "PATCH", SLURMCLUSTERS.path(namespace, NAME), body={"spec": {"partitions": partitions}},
                   content_type="application/merge-patch+json")

        def tier() -> int:
            return next(p.priority_tier for p in slurm.list_partitions() if p.name == "gpu")

        wait_for(lambda: tier() == 7, 240, "slurmctld to show PriorityTier=7 for partition gpu", interval=3)
        (now,) = pods_by_component(kube_api, namespace)["slurmctld"]
        assert now["metadata"]["uid"] == ctld["metadata"]["uid"]  # (reread in place, not a new Pod)
        assert slurm.get_job(job).state == "RUNNING", slurm.get_job(job)  # (the reconfigure came while it ran)
        assert wait_for(lambda: _finished(slurm, job), 180, f"job {job} to finish on {node_name}",
                        interval=2) == "COMPLETED"
        ended = slurm.get_job(job)
        assert (ended.nodes, ended.start_time) == (node_name, started.start_time)  # (not requeued nor moved)
        (pod,) = _nodeset_pods(kube_api, namespace)
        assert pod["metadata"]["uid"] == on_node.pod["metadata"]["uid"]
        assert all(s.get("restartCount", 0) == 0 for s in pod["status"].get("containerStatuses") or ())


def test_a_slurmdbd_that_cannot_start_is_replaced_once_its_template_is_mended(kube_api, running_cluster):
    """slurmdbd given an image that cannot be pulled never becomes Ready; the image set back, the StatefulSet
    controller replaces that Pod by one of the mended template, which becomes Ready. (Under the default
    OrderedReady it waits for the broken Pod to become Ready before it updates anything, forever: the
    SlurmCluster's StatefulSets are Parallel.)"""
    namespace = running_cluster.namespace
    wait_for(lambda: not _not_ready(kube_api, namespace), READY_TIMEOUT, "every SlurmCluster Pod Ready", interval=2)
    good = kc.get(kube_api, SLURMCLUSTERS, NAME, namespace)["spec"]["images"]["slurmdbd"]

    def set_image(image: str) -> None:
        kc.request(kube_api, "PATCH", SLURMCLUSTERS.path(namespace, NAME),
                   body={"spec": {"images": {"slurmdbd": image}}}, content_type="application/merge-patch+json")

    def slurmdbd_pods() -> list[dict[str, Any]]:
        bind_unscheduled(kube_api, namespace)
        return pods_by_component(kube_api, namespace).get("slurmdbd") or []

    def runs(image: str) -> bool:
        return any(not p["metadata"].get("deletionTimestamp") and p["spec"]["containers"][0]["image"] == image
                   for p in slurmdbd_pods())

    broken = "sunk-slurmdbd:no-such-tag-here"
    set_image(broken)
    try:
        wait_for(lambda: runs(broken), 120, "a slurmdbd Pod of the image that cannot be pulled", interval=2)
        assert not any(ready(p) for p in slurmdbd_pods() if p["spec"]["containers"][0]["image"] == broken)
    finally:
        set_image(good)
    wait_for(lambda: runs(good) and all(ready(p) for p in slurmdbd_pods()), READY_TIMEOUT,
             "the broken slurmdbd Pod replaced by a Ready one of the mended template", interval=2)


def test_deleting_the_slurmcluster_leaves_no_pod_and_keeps_its_volumes_and_keys(kube_api, running_cluster):
    """What `helm uninstall` does to the SlurmCluster (last in this module): every Pod it made goes with it
    (owner references), its state and database claims and its generated munge and JWT keys stay, so a
    new install finds Slurm's state and the same keys."""
    namespace = running_cluster.namespace
    wait_for(lambda: not _not_ready(kube_api, namespace), READY_TIMEOUT, "every SlurmCluster Pod Ready", interval=2)
    kc.delete(kube_api, SLURMCLUSTERS, NAME, namespace)
    wait_for(lambda: not kc.list_objects(kube_api, PODS, namespace), 120, "every SlurmCluster Pod gone", interval=2)
    claims = {c["metadata"]["name"]: c for c in kc.list_objects(kube_api, PVCS, namespace)}
    assert set(CLAIM_UIDS) <= set(claims), sorted(claims)
    assert all(not c["metadata"].get("deletionTimestamp") for c in claims.values())
    for secret in (f"{NAME}-munge-key", f"{NAME}-jwt-key"):
        assert not kc.get(kube_api, SECRETS, secret, namespace)["metadata"].get("deletionTimestamp"), secret


def test_the_cluster_made_again_on_its_kept_claim_under_a_new_name_starts_on_a_state_of_its_own(
        kube_api, running_cluster):
    """After the uninstall above (last in this module): the SlurmCluster made again with another ClusterName
    finds the kept state claim. slurmctld would refuse to start on the state of another ClusterName (a crash
    loop); its StateSaveLocation is a directory per ClusterName, so it starts on a directory of its own, and the
    first name's state stays on the claim."""
    namespace = running_cluster.namespace
    assert not kc.list_objects(kube_api, SLURMCLUSTERS, namespace), "the test above deletes it"
    obj = copy.deepcopy(running_cluster.cluster)
    obj["spec"]["slurm"]["clusterName"] = "Renamed"
    kc.create(kube_api, SLURMCLUSTERS, obj, namespace)

    def slurmctld_ready() -> bool:
        bind_unscheduled(kube_api, namespace)
        found = pods_by_component(kube_api, namespace).get("slurmctld") or []
        return bool(found) and all(ready(p) for p in found)

    wait_for(slurmctld_ready, READY_TIMEOUT, "slurmctld Ready under the new ClusterName", interval=2)
    state = running_cluster.volumes / f"state-{NAME}-slurmctld-0"
    renamed = state / "renamed" / "clustername"  # (Slurm's lower case; written once slurmdbd gave the cluster an id)
    wait_for(lambda: renamed.exists() and renamed.read_text().startswith("renamed|"), READY_TIMEOUT,
             f"{renamed} written by slurmctld")
    assert (state / NAME / "clustername").read_text().startswith(f"{NAME}|")  # the first name's state, kept
    assert slurmctld_ready()
