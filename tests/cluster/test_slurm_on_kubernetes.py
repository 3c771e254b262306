"""Issue 34's install path end to end: ``helm install`` of the chart with a SlurmCluster on a bare namespace,
every component a Pod of the images this repository builds, on the dev cluster's real kubelets.

One release holds it all: sunk-operator and sunk-scheduler (Pods of ``sunk``), the SlurmCluster and a NodeSet
(``slurmCluster.*`` and ``nodeSets``), and sunk's credential, the cluster's own JWT key, which nobody made
beforehand: the operator's Pod starts without it (``--slurm-jwt-key-wait``), makes it, and the scheduler's Pod
starts once it exists. slurmrestd is reached by its Service's name, as docs/install.md says. Two real Nodes (the
second started for this module) each run one slurmd Pod of the NodeSet. The values, the volumes and the binding
of Pods no scheduler of sunk's places (the dev cluster runs no default scheduler) are ``sunk_dev.slurmonk8s``'s,
what ``sunk-dev up --slurm-on-kubernetes`` and ``make demo`` install; this module's release has a namespace of
its own.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shlex
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from kube_testns import purge_namespace, wait_default_service_account
from syncer_harness import wait_for
from test_chart_install import RELEASE, Release
from test_slurmcluster_pods import (
    CLAIM_UIDS,
    NAME,
    READY_TIMEOUT,
    _finished,
    _slurm_as_slurmuser,
    delete_volumes,
    needs_cluster_dns,  # noqa: F401 (a fixture slurm_images_imported needs)
    slurm_images_imported,  # noqa: F401 (a fixture)
)

import sunk
from sunk.kube import client as kc
from sunk.kube.resources import (
    DEPLOYMENTS,
    EVENTS,
    NAMESPACES,
    NODES,
    NODESETS,
    PODS,
    PVCS,
    SECRETS,
    SERVICES,
    SLURMCLUSTERS,
)
from sunk.model import names
from sunk.model.hostlist import expand
from sunk.slurm.client import SlurmClient
from sunk.slurm.errors import SlurmError
from sunk.translate.gang import has_started
from sunk_dev import realnode, slurmimages, slurmonk8s
from sunk_dev.pool import apply_crds
from sunk_dev.slurmonk8s import COMPONENTS, PVS, bind_unscheduled, pods_by_component, volume, waiting_for

pytestmark = pytest.mark.skipif(not realnode.enabled(), reason="SUNK_DEV_REAL_NODE=0: no real kubelet Node")

OPERATOR_PODS = f"app.kubernetes.io/name=sunk-operator,app.kubernetes.io/instance={RELEASE}"
SCHEDULER_PODS = f"app.kubernetes.io/name=sunk-scheduler,app.kubernetes.io/instance={RELEASE}"
END_NODESETS_PODS = f"app.kubernetes.io/name=sunk-end-nodesets,app.kubernetes.io/instance={RELEASE}"
SYNCER_PODS = f"app.kubernetes.io/name=sunk-syncer,app.kubernetes.io/instance={RELEASE}"


@attrs.frozen
class Installed:
    namespace: str
    release: Release
    slurm: SlurmClient  # the cluster's own slurmrestd, as SlurmUser (the test's client, by its ClusterIP)
    real_nodes: tuple[str, ...]
    user_key: Path  # the private key of LOGIN_USER (slurmCluster.login.users), for ssh


@pytest.fixture(scope="module")
def installed(kube_api, dev_cluster, slurm_images_imported, tmp_path_factory) -> Iterator[Installed]:  # noqa: F811
    tmp = tmp_path_factory.mktemp("slurm-on-kubernetes")
    namespace = f"slurm-on-k8s-{uuid.uuid4().hex[:6]}"
    storage_class = f"sunk-test-{namespace}"
    kc.create(kube_api, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    wait_default_service_account(kube_api, namespace)
    pvs = [volume(f"{namespace}-{claim}", storage_class, tmp / "volumes" / claim, uid, claim, namespace)
           for claim, uid in CLAIM_UIDS.items()]
    for pv in pvs:
        kc.create(kube_api, PVS, pv)
    slurmd_image = slurmimages.slurmd_image_name(sunk.__version__, dev_cluster.release.name)
    release = Release(dev_cluster, namespace, tmp / "release")
    (tmp / "release").mkdir()
    release.values = slurmonk8s.values(slurm_release=dev_cluster.release.name, namespace=namespace, cluster=NAME,
                                       storage_class=storage_class, release=RELEASE)
    user_key = tmp / "alice_ed25519"
    release.values["slurmCluster"].setdefault("login", {})["users"] = [
        {"name": LOGIN_USER, "uid": LOGIN_UID, "authorizedKeys": [_new_ssh_key(user_key) + " alice@test"]}]
    try:
        with dev_cluster.second_real_node([b for b in slurm_images_imported if b.name == slurmd_image]) as second:
            real_nodes = (realnode.NODE_NAME, second.node_name)
            assert not kc.list_objects(kube_api, SECRETS, namespace)  # (nothing made beforehand: no key either)
            apply_crds(kube_api)  # (the release skips them: Helm never deletes a CRD, test_chart_install.py)
            try:
                release.install()
                try:
                    wait_for(lambda: not waiting_for(kube_api, namespace, real_nodes, RELEASE), READY_TIMEOUT + 120,
                             "the release's Pods, the SlurmCluster's and a slurmd Pod per real Node Ready",
                             interval=2)
                except AssertionError:
                    raise AssertionError(f"waiting for {waiting_for(kube_api, namespace, real_nodes, RELEASE)}\n"
                                         f"{_describe(kube_api, dev_cluster, namespace)}") from None
                slurm = _slurm_as_slurmuser(kube_api, namespace, tmp / "jwt.key")
                try:
                    yield Installed(namespace, release, slurm, real_nodes, user_key)
                finally:
                    slurm.close()
            finally:
                _remove(kube_api, release, namespace)
    finally:
        delete_volumes(kube_api, namespace, pvs)


LOGIN_USER, LOGIN_UID = "alice", 5001


def _new_ssh_key(path: Path) -> str:
    """An Ed25519 key written to ``path`` (mode 0600, as ssh wants it); its public line."""
    key = ed25519.Ed25519PrivateKey.generate()
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                       serialization.NoEncryption()))
    path.chmod(0o600)
    return key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


def _remove(api: Any, release: Release, namespace: str) -> None:
    """The release uninstalled (when a test did not) and the namespace purged, whatever the tests left (a NodeSet's
    finalizer too: an uninstall that failed may leave the NodeSets to an operator it deleted)."""
    if release.installed:
        release.helm("uninstall", RELEASE, "--timeout", "1m", check=False)
    purge_namespace(api, namespace, (SLURMCLUSTERS, NODESETS))


def _describe(api: Any, dev_cluster: Any, namespace: str) -> str:
    """What a failed start shows: each Pod's phase, the SlurmCluster's conditions, the operator's log."""
    pods = [(p["metadata"]["name"], (p.get("status") or {}).get("phase"))
            for p in kc.list_objects(api, PODS, namespace)]
    clusters = [c.get("status") for c in kc.list_objects(api, SLURMCLUSTERS, namespace)]
    logs = dev_cluster.kubectl("logs", "-n", namespace, "-l", OPERATOR_PODS, "--tail=40", "--prefix", check=False)
    return f"Pods: {pods}\nSlurmCluster status: {clusters}\noperator log:\n{logs.stdout}{logs.stderr}"


@contextlib.contextmanager
def _binding(api: Any, namespace: str, also: Callable[[], None] = lambda: None) -> Iterator[None]:
    """While the block runs, what kube-scheduler would do for a hook's Pod or a rolled Pod (bind it to the real
    Node), every half second, and ``also``."""
    done = threading.Event()

    def meanwhile() -> None:
        while not done.wait(0.5):
            bind_unscheduled(api, namespace)
            also()

    helper = threading.Thread(target=meanwhile, daemon=True)
    helper.start()
    try:
        yield
    finally:
        done.set()
        helper.join(timeout=30)


def _in_pod(dev_cluster: Any, namespace: str, pod: dict[str, Any], container: str, *argv: str) -> str:
    done = dev_cluster.kubectl("exec", "-n", namespace, pod["metadata"]["name"], "-c", container, "--", *argv,
                               check=False)
    assert done.returncode == 0, f"{argv}: rc {done.returncode}: {done.stdout}{done.stderr}"
    return done.stdout


def test_sunks_components_and_slurms_run_as_pods_of_the_images_built_here(kube_api, installed):
    """The operator that made the SlurmCluster is a Pod of sunk's image, as the scheduler is, and every Slurm
    daemon a Pod of the release's Slurm image; the key the daemons sign with is the one the operator made."""
    namespace = installed.namespace
    operators = kc.list_objects(kube_api, PODS, namespace, label_selector=OPERATOR_PODS)
    schedulers = kc.list_objects(kube_api, PODS, namespace, label_selector=SCHEDULER_PODS)
    assert operators and schedulers
    for pod in (*operators, *schedulers):
        assert pod["spec"]["containers"][0]["image"] == f"sunk:{sunk.__version__}"
    assert all("--slurm-jwt-key-wait" in pod["spec"]["containers"][0]["args"] for pod in operators)
    key = kc.get(kube_api, SECRETS, f"{NAME}-jwt-key", namespace)
    assert not key["metadata"].get("annotations", {}).get("meta.helm.sh/release-name")  # (the operator's, not helm's)
    for component, pods in pods_by_component(kube_api, namespace).items():
        if component in COMPONENTS:
            assert all(c["image"].startswith(f"sunk-{component}:") for p in pods for c in p["spec"]["containers"]), \
                component


def test_the_control_plane_runs_where_the_values_place_it_and_tolerates_sunks_lock(kube_api, installed):
    """Every control-plane Pod (slurmdbd and MariaDB too) carries the placement the chart rendered: the real
    Nodes' label, and sunk's lock toleration first, so a Node the Syncer locks for a job keeps slurmctld."""
    placed = {c: pods for c, pods in pods_by_component(kube_api, installed.namespace).items()
              if c in COMPONENTS}
    assert {"slurmctld", "slurmdbd", "mariadb", "slurmrestd", "login"} <= set(placed), sorted(placed)
    for component, pods in placed.items():
        for pod in pods:
            spec = pod["spec"]
            assert spec["nodeSelector"] == {realnode.NODE_LABEL: "true"}, component
            assert spec["tolerations"][0] == {"key": names.LOCK_KEY, "operator": "Exists"}, component
            assert spec["nodeName"] in installed.real_nodes, component


def test_sbatch_in_the_login_pod_runs_srun_across_the_slurmd_pods_of_two_real_nodes_and_sacct_shows_it(
        kube_api, dev_cluster, installed):
    """In the login Pod (``kubectl exec`` through the apiserver), ``sbatch --wait -N2 --wrap "srun hostname"``
    returns 0 once the job ran a task on each NodeSet slurmd Pod, one per real Node (Slurm's step launch and its
    I/O cross from one Node's Pod network to the other's); the output names both Pods' hostnames, and ``sacct``
    there shows the job and its srun step on both nodes."""
    namespace, slurm = installed.namespace, installed.slurm
    (login,) = pods_by_component(kube_api, namespace)["login"]
    slurmd_pods = kc.list_objects(kube_api, PODS, namespace, label_selector=f"{names.LABEL_NODESET}=gpu")
    node_names = sorted(p["spec"]["hostname"] for p in slurmd_pods)
    assert node_names == sorted(installed.real_nodes)  # (NodeName scheme: each Slurm node its Node's name)
    out = _in_pod(dev_cluster, namespace, login, "login", "sbatch", "--wait", "--parsable", "-N2", "-p", "gpu",
                  "-o", "/tmp/two-nodes-%j.out", "--wrap", "srun hostname")
    job = int(out.strip().split(";")[0])
    ran = slurm.get_job(job)
    assert (ran.state, sorted(expand(ran.nodes))) == ("COMPLETED", node_names), ran
    (batch_pod,) = [p for p in slurmd_pods if p["spec"]["hostname"] == ran.batch_host]
    printed = _in_pod(dev_cluster, namespace, batch_pod, "slurmd", "cat", f"/tmp/two-nodes-{job}.out")
    assert sorted(printed.split()) == node_names

    def steps() -> dict[str, tuple[str, str]]:
        listed = _in_pod(dev_cluster, namespace, login, "login", "sacct", "-j", str(job), "-n", "-P",
                         "-o", "JobID,JobName,NodeList,State")
        return {line.split("|")[0]: (line.split("|")[2], line.split("|")[3]) for line in listed.splitlines()
                if line.count("|") == 3}

    shown = wait_for(lambda: (found := steps()).get(f"{job}.0", ("", ""))[1] == "COMPLETED" and found, 60,
                     f"sacct in the login Pod to show job {job}'s srun step", interval=2)
    assert shown[str(job)][1] == "COMPLETED"
    assert sorted(expand(shown[f"{job}.0"][0])) == node_names


def _ssh(installed: Installed, address: str, known_hosts: Path, *argv: str, user: str = LOGIN_USER,
         key: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``ssh user@address argv`` with the key, checking the host key against ``known_hosts`` only."""
    return subprocess.run(
        ["ssh", "-F", "none", "-i", str(key or installed.user_key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
         "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known_hosts}", "-o", "ConnectTimeout=10",
         "-o", "LogLevel=ERROR", f"{user}@{address}", "--", shlex.join(argv)],  # (the login shell splits it)
        capture_output=True, text=True, timeout=300, check=False)


def test_a_login_user_sshes_into_the_login_service_and_runs_a_job_as_their_own_uid(kube_api, installed, tmp_path):
    """ssh to the login Service (its ClusterIP, port 22) as ``alice`` of ``slurmCluster.login.users``, the host
    checked against the key the operator generated: ``sbatch --wait`` there runs as her uid on a slurmd Pod
    (slurmctld knows her from the same ConfigMap: a uid it cannot resolve fails the launch) and ``sacct`` shows it
    as hers. What she cannot do: log in as root or with another key, read the host key or the munge key, forward
    a connection."""
    namespace = installed.namespace
    service = kc.get(kube_api, SERVICES, f"{NAME}-login", namespace)
    address = service["spec"]["clusterIP"]
    assert service["spec"]["ports"][0]["port"] == 22
    host_key = kc.get(kube_api, SECRETS, f"{NAME}-login-host-keys", namespace)["data"]["ssh_host_ed25519_key.pub"]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"{address} {base64.b64decode(host_key).decode()}")

    # (the Service's endpoints follow the login Pod's readiness: give kube-proxy a moment after the install)
    who = wait_for(lambda: (done := _ssh(installed, address, known_hosts, "id", "-u", "-n")).returncode == 0 and done,
                   60, "ssh to the login Service as alice", interval=2)
    assert who.stdout.strip() == LOGIN_USER
    done = _ssh(installed, address, known_hosts, "sbatch", "--wait", "--parsable", "-N1", "-p", "gpu",
                "--chdir=/tmp", "-o", "/dev/null", "--wrap", "test $(id -u) = 5001")
    assert done.returncode == 0, f"rc {done.returncode}: {done.stdout}{done.stderr}"
    job = int(done.stdout.strip().split(";")[0])
    ran = installed.slurm.get_job(job)
    assert (ran.state, ran.user_id) == ("COMPLETED", LOGIN_UID), ran

    def accounted() -> str:
        listed = _ssh(installed, address, known_hosts, "sacct", "-j", str(job), "-X", "-n", "-P",
                      "-o", "UID,User,State")
        return listed.stdout.strip() if listed.returncode == 0 else ""

    wait_for(lambda: accounted() == f"{LOGIN_UID}|{LOGIN_USER}|COMPLETED", 60, f"sacct to show job {job} as alice's",
             interval=2)

    # what she cannot do
    refused = _ssh(installed, address, known_hosts, "true", user="root")
    assert refused.returncode == 255 and "Permission denied" in refused.stderr, refused
    other = tmp_path / "other_ed25519"
    _new_ssh_key(other)
    refused = _ssh(installed, address, known_hosts, "true", key=other)
    assert refused.returncode == 255 and "Permission denied" in refused.stderr, refused
    secrets = _ssh(installed, address, known_hosts, "sh", "-c",
                   "cat /etc/sunk/ssh-host-keys/ssh_host_ed25519_key /run/sunk-ssh/ssh_host_ed25519_key; "
                   "ls /etc/munge-key /etc/munge 2>&1")
    assert "PRIVATE KEY" not in secrets.stdout and "munge.key" not in secrets.stdout, secrets.stdout
    forwarded = subprocess.run(
        ["ssh", "-F", "none", "-i", str(installed.user_key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
         "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known_hosts}",
         "-W", f"{NAME}-slurmctld-0.{NAME}-slurmctld:6817", f"{LOGIN_USER}@{address}"],
        capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL)
    assert forwarded.returncode != 0 and "prohibited" in forwarded.stderr, forwarded


def test_the_slurm_clusters_status_counts_its_nodes_by_state(kube_api, installed):
    """``status.nodes``: the NodeSet's two slurmd, each counted once (``kubectl get slurmcluster`` prints the
    total), from the operator's node list of that Slurm."""
    def counted() -> dict[str, int]:
        return (kc.get(kube_api, SLURMCLUSTERS, NAME, installed.namespace).get("status") or {}).get("nodes") or {}

    found = wait_for(lambda: (n := counted()).get("total") == 2 and n, 60, "status.nodes to count two nodes",
                     interval=2)
    assert found["down"] == found["drained"] == found["other"] == 0, found
    assert found["idle"] + found["allocated"] == 2, found


def _lock_taints(api: Any, node: str) -> list[dict[str, Any]]:
    return [t for t in kc.get(api, NODES, node)["spec"].get("taints") or [] if t["key"] == names.LOCK_KEY]


def test_a_job_on_the_nodeset_locks_both_nodes_while_it_runs_and_the_control_plane_stays(
        kube_api, dev_cluster, installed):
    """Node locking on a SlurmCluster's NodeSet: the chart's prolog, which the operator mounts into the slurmd Pods,
    asks the release's Syncer (a Pod, by its Service) to lock each Node of a two-node job before it starts, with the
    slurmd Pod's own ServiceAccount token; both Nodes carry the lock taint while the job runs, and the control
    plane, which shares them here, is not evicted (it tolerates the lock: slurmCluster.placement). The epilog lets
    go: once the job ends, no Node keeps the taint."""
    namespace, slurm = installed.namespace, installed.slurm
    for node in installed.real_nodes:
        assert not _lock_taints(kube_api, node), node
    before = {p["metadata"]["uid"] for c, pods in pods_by_component(kube_api, namespace).items() if c in COMPONENTS
              for p in pods}
    (login,) = pods_by_component(kube_api, namespace)["login"]
    out = _in_pod(dev_cluster, namespace, login, "login", "sbatch", "--parsable", "-N2", "-p", "gpu",
                  "-o", "/tmp/locked-%j.out", "--wrap", "srun sleep 20")
    job = int(out.strip().split(";")[0])
    # (RUNNING alone is not enough: with PrologFlags=Alloc Slurm runs the job, reason Prolog, while the prologs
    # still wait for their locks; has_started is what the scheduler binds by)
    wait_for(lambda: has_started(slurm.get_job(job)), 90, f"job {job} running after both prologs' locks", interval=1)
    for node in installed.real_nodes:
        assert _lock_taints(kube_api, node), node  # (the prolog returns only once its Node is locked)
    slurmd_pods = kc.list_objects(kube_api, PODS, namespace, label_selector=f"{names.LABEL_NODESET}=gpu")
    states = {p["metadata"]["name"]: p["metadata"].get("annotations", {}).get(names.LOCK_KEY) for p in slurmd_pods}
    if set(states.values()) != {"locked"}:  # (seen once, not again: what the Syncer did says why)
        said = dev_cluster.kubectl("logs", "-n", namespace, "-l", SYNCER_PODS, "--tail=200", "--prefix", check=False)
        annotations = {p["metadata"]["name"]: p["metadata"].get("annotations") for p in slurmd_pods}
        raise AssertionError(f"job {job} runs; lock states {states}; annotations {annotations}; "
                             f"the job: {slurm.get_job(job)}; Syncer log:\n{said.stdout}{said.stderr}")
    assert wait_for(lambda: _finished(slurm, job), 120, f"job {job} to finish", interval=1) == "COMPLETED"
    wait_for(lambda: not any(_lock_taints(kube_api, n) for n in installed.real_nodes), 60,
             "both Nodes unlocked once the job ended", interval=1)
    after = {p["metadata"]["uid"] for c, pods in pods_by_component(kube_api, namespace).items() if c in COMPONENTS
             for p in pods}
    assert after == before  # (no control-plane Pod evicted or replaced)
    assert not [n for n in slurm.list_nodes().items or () if n.drained], "no node drained"


def test_a_pod_naming_the_releases_scheduler_is_placed_by_that_slurm(kube_api, installed):
    """A Pod naming the release's scheduler (a Pod of sunk's image, on the cluster's slurmrestd by its Service's
    name) becomes a placeholder job of the cluster's Slurm, which runs it on one of the NodeSet's slurmd Pods; the
    Pod is bound to that slurmd Pod's Node, where its real kubelet runs it. Deleted, its job ends."""
    namespace, slurm = installed.namespace, installed.slurm
    pod_name = f"placed-{uuid.uuid4().hex[:6]}"
    kc.create(kube_api, PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod_name}, "spec": {
        "schedulerName": f"{namespace}-{RELEASE}", "terminationGracePeriodSeconds": 5,
        "containers": [{"name": "main", "image": realnode.BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                        "command": ["/bin/sleep", "3600"],
                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}, namespace)

    def running() -> dict[str, Any] | None:
        pod = kc.get(kube_api, PODS, pod_name, namespace)
        return pod if (pod.get("status") or {}).get("phase") == "Running" else None

    pod = wait_for(running, 120, f"Pod {pod_name} Running, placed through the cluster's Slurm", interval=1)
    job_id = int(pod["metadata"]["annotations"][names.ANN_JOB_ID])
    job = slurm.get_job(job_id)
    assert (job.state, job.partition) == ("RUNNING", "gpu")
    (slurmd,) = [p for p in kc.list_objects(kube_api, PODS, namespace, label_selector=f"{names.LABEL_NODESET}=gpu")
                 if p["spec"]["hostname"] == job.nodes]
    assert pod["spec"]["nodeName"] == slurmd["spec"]["nodeName"]
    kc.delete(kube_api, PODS, pod_name, namespace)
    wait_for(lambda: _finished(slurm, job_id), 90, f"Pod {pod_name}'s job {job_id} to end", interval=1)


def test_helm_upgrade_of_a_slurm_conf_value_while_a_job_runs_is_live_and_the_job_finishes(
        kube_api, dev_cluster, installed):
    """Acceptance item 2 of issue 34: ``helm upgrade`` with one more ``slurmCluster.slurmConfig`` line while a job
    runs. The operator rewrites the cluster's ConfigMap and, once the kubelets can have brought it into the Pods,
    has slurmctld reread it: ``scontrol show config`` in the login Pod shows the value, slurmctld's Pod is the same
    one, and the job, still running then, finishes COMPLETED on the node it started on."""
    namespace, slurm, release = installed.namespace, installed.slurm, installed.release
    (login,) = pods_by_component(kube_api, namespace)["login"]
    (ctld,) = pods_by_component(kube_api, namespace)["slurmctld"]

    def batch_start_timeout() -> str:
        shown = _in_pod(dev_cluster, namespace, login, "login", "scontrol", "show", "config")
        return next(line.split("=", 1)[1].strip() for line in shown.splitlines()
                    if line.split("=", 1)[0].strip() == "BatchStartTimeout")

    assert batch_start_timeout() != "17 sec"
    # long enough to outlive the kubelet's ConfigMap sync and the operator's wait for it; ends by itself
    out = _in_pod(dev_cluster, namespace, login, "login", "sbatch", "--parsable", "-N1", "-p", "gpu",
                  "-o", "/tmp/upgrade-%j.out", "--wrap", "sleep 150")
    job = int(out.strip().split(";")[0])
    started = wait_for(lambda: (j := slurm.get_job(job)).state == "RUNNING" and j, 60, f"job {job} RUNNING",
                       interval=1)
    release.values["slurmCluster"]["slurmConfig"] = ["BatchStartTimeout=17"]
    with _binding(kube_api, namespace):  # (a Pod the upgrade rolls)
        release.upgrade()
    wait_for(lambda: batch_start_timeout() == "17 sec", 240, "scontrol show config in the login Pod to show "
             "BatchStartTimeout = 17 sec", interval=3)
    assert slurm.get_job(job).state == "RUNNING", slurm.get_job(job)  # (the reconfigure came while it ran)
    (now,) = pods_by_component(kube_api, namespace)["slurmctld"]
    assert now["metadata"]["uid"] == ctld["metadata"]["uid"]  # (reread in place, not a new Pod)
    assert wait_for(lambda: _finished(slurm, job), 180, f"job {job} to finish", interval=2) == "COMPLETED"
    ended = slurm.get_job(job)
    assert (ended.nodes, ended.start_time) == (started.nodes, started.start_time)  # (not requeued nor moved)


def test_the_keys_the_operator_made_are_kept_for_the_next_install(kube_api, installed):
    """What the operator made once (the munge and JWT keys) is no object of the release: an uninstall keeps it,
    so a new install finds Slurm's state on its claims and the same keys."""
    release_objects = {(d["kind"], d["metadata"]["name"]) for d in installed.release.manifest()}
    for secret in (f"{NAME}-munge-key", f"{NAME}-jwt-key"):
        assert kc.get(kube_api, SECRETS, secret, installed.namespace)
        assert ("Secret", secret) not in release_objects, secret



def _uninstall_without_an_operator_deletes_nothing(kube_api: Any, dev_cluster: Any, installed: Installed,
                                                   job: int) -> None:
    """The operator scaled to zero (at 3 a.m. it may be down): ``helm uninstall`` fails at its first hook, which
    deletes no NodeSet (one deleted then would stay Terminating, drained, its jobs cancelled whenever an operator
    came back) and says why; the job runs on; with the operator back, the release can be uninstalled."""
    namespace = installed.namespace
    (operator,) = kc.list_objects(kube_api, DEPLOYMENTS, namespace, label_selector=OPERATOR_PODS)
    name = operator["metadata"]["name"]
    kc.patch(kube_api, DEPLOYMENTS, name, {"spec": {"replicas": 0}}, namespace)
    try:
        wait_for(lambda: not kc.list_objects(kube_api, PODS, namespace, label_selector=OPERATOR_PODS)
                 and not (kc.get(kube_api, DEPLOYMENTS, name, namespace).get("status") or {}).get("readyReplicas"),
                 90, "no operator Pod", interval=1)
        with _binding(kube_api, namespace):  # (the hook's Pod)
            refused = installed.release.helm("uninstall", RELEASE, "--wait", "--timeout", "2m", check=False)
        assert refused.returncode != 0, refused.stdout
        said = dev_cluster.kubectl("logs", "-n", namespace, "-l", END_NODESETS_PODS, "--tail=20", check=False)
        assert "has no Ready Pod: nothing deleted" in said.stdout, (said.stdout, said.stderr, refused.stderr)
        (nodeset,) = kc.list_objects(kube_api, NODESETS, namespace)
        assert not nodeset["metadata"].get("deletionTimestamp")
        assert names.ANN_ON_DELETE not in (nodeset["metadata"].get("annotations") or {})
        assert installed.slurm.get_job(job).state == "RUNNING"
        status = json.loads(installed.release.helm("status", RELEASE, "-o", "json").stdout)["info"]["status"]
        assert status == "uninstalling", status  # (Helm 3: hidden from `helm list`, refused by `helm upgrade`)
        assert kc.list_objects(kube_api, DEPLOYMENTS, namespace, label_selector=SCHEDULER_PODS)
    finally:
        kc.patch(kube_api, DEPLOYMENTS, name, {"spec": {"replicas": 1}}, namespace)
    with _binding(kube_api, namespace):  # (a Pod of the Deployment again)
        wait_for(lambda: (kc.get(kube_api, DEPLOYMENTS, name, namespace).get("status") or {}).get("readyReplicas"),
                 120, "the operator Ready again", interval=1)


def test_helm_uninstall_while_a_job_runs_cancels_it_and_leaves_no_pod_and_keeps_the_volumes(
        kube_api, dev_cluster, installed):
    """Acceptance item 4 of issue 34. A two-node job runs when ``helm uninstall --wait`` starts. The chart's
    pre-delete hook (``sunk-operator end-nodesets``, a Job of sunk's image with its own ServiceAccount) deletes the
    NodeSet while the operator still runs; the operator drains both nodes, cancels the job (an Event on the
    NodeSet says so), deletes the slurmd Pods once idle and lets the NodeSet go; then Helm deletes the rest. The
    uninstall ends in time, with no Pod left in the namespace, no lock taint on either Node (the job had locked
    both), and the claims (Slurm's
    state and the database) and the operator's keys kept. Before that, an uninstall with the operator down is
    refused by the hook and changes nothing. Last in this module: it ends the release."""
    namespace, slurm = installed.namespace, installed.slurm
    (login,) = pods_by_component(kube_api, namespace)["login"]
    out = _in_pod(dev_cluster, namespace, login, "login", "sbatch", "--parsable", "-N2", "-p", "gpu",
                  "-o", "/tmp/sleep-%j.out", "--wrap", "srun sleep 600")
    job = int(out.strip().split(";")[0])
    states: list[tuple[str, str]] = []

    def running() -> bool:
        record = slurm.get_job(job)
        states.append((record.state, record.state_reason))
        return has_started(record)  # (both prologs have returned: both Nodes locked)

    try:
        wait_for(running, 60, f"job {job} running on both nodes", interval=1)
    except AssertionError:
        nodes = [(n.name, sorted(n.state), n.reason) for n in slurm.list_nodes().items or ()]
        raise AssertionError(f"job {job}: {states[-1]}; nodes: {nodes}") from None
    claims = sorted(p["metadata"]["name"] for p in kc.list_objects(kube_api, PVCS, namespace))
    assert claims
    for node in installed.real_nodes:
        assert _lock_taints(kube_api, node), node  # (locked by the job: the uninstall must take it back)
    _uninstall_without_an_operator_deletes_nothing(kube_api, dev_cluster, installed, job)
    seen: list[str] = []

    def job_state() -> None:
        """The job's states while Slurm answers."""
        try:
            state = slurm.get_job(job).state
        except SlurmError:
            return
        if not seen or seen[-1] != state:
            seen.append(state)

    started = time.monotonic()
    with _binding(kube_api, namespace, job_state):  # (the hook's Pod)
        uninstalled = installed.release.helm("uninstall", RELEASE, "--wait", "--timeout", "4m", check=False)
    took = time.monotonic() - started
    print(f"helm uninstall --wait with a job running took {took:.1f}s", file=sys.stderr)
    assert uninstalled.returncode == 0, f"{uninstalled.stderr}\n{_describe(kube_api, dev_cluster, namespace)}"
    installed.release.installed = False
    assert took < 200, took
    assert "CANCELLED" in seen, seen
    cancelled = [e for e in kc.list_objects(kube_api, EVENTS, namespace)
                 if e.get("reason") == "CancelledJob" and e["involvedObject"].get("name") == "gpu"]
    assert any(f"cancelled job {job} " in e.get("message", "") for e in cancelled), cancelled
    assert not kc.list_objects(kube_api, NODESETS, namespace)
    wait_for(lambda: not kc.list_objects(kube_api, PODS, namespace), 120,
             "every Pod of the namespace gone (the SlurmCluster's are garbage collected after it)", interval=2)
    for node in installed.real_nodes:
        assert not _lock_taints(kube_api, node), node
    assert sorted(p["metadata"]["name"] for p in kc.list_objects(kube_api, PVCS, namespace)) == claims
    for secret in (f"{NAME}-munge-key", f"{NAME}-jwt-key"):
        assert kc.get(kube_api, SECRETS, secret, namespace)
