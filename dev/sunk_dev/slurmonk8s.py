"""Slurm on Kubernetes on the dev cluster (issue 34): the chart with a SlurmCluster, installed as an operator would
on a bare namespace, every component a Pod of the images this repository builds, on the two real kubelet Nodes.

``sunk-dev up --slurm-on-kubernetes`` keeps one up (release ``sunk`` in namespace ``slurm-on-k8s``); ``up`` without
it takes it down (uninstalled, the second real Node stopped: every other test sees one real Node); ``make demo`` runs
a job across it; tests/cluster/test_slurm_on_kubernetes.py installs one of its own with the same values.

The dev cluster runs no kube-scheduler. What kube-scheduler would write for the chart's Pods and the
SlurmCluster's (a Binding to a Node), ``bind_unscheduled`` writes, to the first real Node, while ``bring_up``
waits; the NodeSet's slurmd Pods the operator places itself, and Pods naming the release's scheduler are its.
Claims are bound to hostPath volumes of a StorageClass name of this namespace's, their directories made the
image users' first (fsGroup does not reach a hostPath volume), as an operator with hostPath volumes must.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

import sunk
from sunk.kube import client as kc
from sunk.kube.resources import NAMESPACES, PODS, Resource
from sunk.model import names
from sunk.translate.slurmcluster import paths

from . import chart, kubebuild, pool, realnode, slurmimages

if TYPE_CHECKING:
    from .cluster import DevCluster

NAMESPACE = "slurm-on-k8s"
RELEASE = "sunk"
CLUSTER = "slurm"  # the SlurmCluster's name
NODESET = "gpu"
PVS = Resource("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False)
COMPONENTS = ("slurmctld", "mariadb", "slurmdbd", "slurmrestd", "login")
OPERATOR_PODS = "app.kubernetes.io/name=sunk-operator"
SCHEDULER_PODS = "app.kubernetes.io/name=sunk-scheduler"
SYNCER_PODS = "app.kubernetes.io/name=sunk-syncer"
READY_TIMEOUT = 360  # first starts: MariaDB's datadir, slurmdbd's schema, the images' first run


def claim_uids(cluster: str) -> dict[str, int]:
    """Each StatefulSet claim (template-workload-0) and the uid its directory belongs to."""
    return {f"state-{cluster}-slurmctld-0": paths.SLURM_UID, f"data-{cluster}-mariadb-0": paths.MARIADB_UID}


def volume(name: str, storage_class: str, directory: Path, uid: int, claim: str, namespace: str) -> dict[str, Any]:
    """A hostPath volume reserved for ``claim`` (claimRef: no other claim takes it), its directory made ``uid``'s."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chown(directory, uid, uid)
    directory.chmod(0o770)
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                     "claimRef": {"namespace": namespace, "name": claim},
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": storage_class,
                     "hostPath": {"path": str(directory), "type": "Directory"}}}


def values(*, slurm_release: str, namespace: str, cluster: str, storage_class: str, release: str = RELEASE,
           hooks: dict[str, str] | None = None) -> dict[str, Any]:
    """The chart's values: the operator with a SlurmCluster, a NodeSet of one slurmd Pod per real Node (named
    after its Node: both have the host's address), the scheduler, and the cluster's own JWT key as sunk's
    credential (made by the operator once its Pod runs); slurmrestd by its Service's name (docs/install.md)."""
    volume_values = {"size": "10Gi", "storageClassName": storage_class}
    slurmd_image = slurmimages.slurmd_image_name(sunk.__version__, slurm_release)
    # privileged, as slurmd Pods are (slurmstepd sets each task's CPU affinity and changes to the job's user)
    template = {"metadata": {"labels": {"app.kubernetes.io/name": "slurmd"}},
                "spec": {"containers": [{"name": "slurmd", "image": slurmd_image, "imagePullPolicy": "Never",
                                         "securityContext": {"privileged": True}}]}}
    return {
        "operator": {"enabled": True},
        # cgroup none: cgroup/v2 for a containerised slurmd is unproven here
        "slurmCluster": {"enabled": True, "name": cluster, "release": slurm_release, "cgroup": "none",
                         "gresTypes": ["gpu", "nic"], "slurmctld": {"stateVolume": volume_values},
                         "slurmdbd": {"database": {"internal": {"volume": volume_values}}},
                         "partitions": [{"name": NODESET, "nodeSets": [NODESET], "default": True}],
                         # (the lock toleration comes first, from lockToleration)
                         "placement": {"nodeSelector": {realnode.NODE_LABEL: "true"}}},
        "nodeSets": [{"name": NODESET, "spec": {"slurmCluster": cluster,
                                                "nodeSelector": {realnode.NODE_LABEL: "true"},
                                                "naming": {"scheme": "NodeName"}, "slurm": {"gres": "nic:1"},
                                                "template": template}}],
        "slurm": {"api": {"url": f"http://{cluster}-slurmrestd:{paths.SLURMRESTD_PORT}", "user": "slurm"},
                  "auth": {"token": "", "jwtKey": {"enabled": True, "existingSecret": f"{cluster}-jwt-key"}}},
        "slurmd": {"namespace": namespace},
        "nodeSelector": {realnode.NODE_LABEL: "true"},
        "logLevel": "info",
        # One Syncer, node locking on (the chart's prolog and epilog in the slurmd Pods, through its hook API):
        # here the control plane shares both Nodes with slurmd, and stays through a lock by tolerating it
        # (slurmCluster.placement, lockToleration); a cluster keeps it on Nodes of no NodeSet.
        "syncer": {"replicas": 1},
        "scheduler": {"replicas": 1},
        "hooks": hooks or {"syncerToken": secrets.token_hex(32), "schedulerHookSecret": secrets.token_hex(32)},
    }


def ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def pods_by_component(api: Any, namespace: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for pod in kc.list_objects(api, PODS, namespace):
        out.setdefault(pod["metadata"].get("labels", {}).get("app.kubernetes.io/component", ""), []).append(pod)
    return out


def bind_unscheduled(api: Any, namespace: str) -> int:
    """Bind every Pod of the namespace no scheduler placed to the first real Node: kube-scheduler's one write.
    Pods that name another scheduler are that scheduler's."""
    bound = 0
    for pod in kc.list_objects(api, PODS, namespace):
        meta = pod["metadata"]
        if (pod["spec"].get("nodeName") or meta.get("deletionTimestamp")
                or pod["spec"].get("schedulerName", "default-scheduler") != "default-scheduler"):
            continue
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": meta["name"], "namespace": namespace, "uid": meta["uid"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": realnode.NODE_NAME}}
        try:
            kc.request(api, "POST", PODS.path(namespace, meta["name"], "binding"), body=body)
            bound += 1
        except kc.ApiError as exc:
            if not (exc.not_found or exc.status == 409):
                raise
    return bound


def waiting_for(api: Any, namespace: str, real_nodes: tuple[str, ...], release: str = RELEASE) -> list[str]:
    """What is not up yet: each SlurmCluster component, the operator, scheduler and Syncer Pods, one slurmd Pod per
    Node."""
    bind_unscheduled(api, namespace)
    found = pods_by_component(api, namespace)
    waiting = [c for c in COMPONENTS if not found.get(c) or not all(ready(p) for p in found[c])]
    for what, selector in (("operator", OPERATOR_PODS), ("scheduler", SCHEDULER_PODS), ("syncer", SYNCER_PODS)):
        pods = kc.list_objects(api, PODS, namespace, label_selector=f"{selector},app.kubernetes.io/instance={release}")
        if not pods or not all(ready(p) for p in pods):  # (the operator: two replicas, one leading)
            waiting.append(what)
    slurmd = kc.list_objects(api, PODS, namespace, label_selector=f"{names.LABEL_NODESET}={NODESET}")
    if sorted(p["spec"].get("nodeName") for p in slurmd if ready(p)) != sorted(real_nodes):
        waiting.append("slurmd Pods")
    return waiting


@attrs.frozen
class Deployed:
    namespace: str
    release: str
    cluster: str
    real_nodes: tuple[str, ...]

    def login_pod(self, api: Any) -> str:
        (login,) = pods_by_component(api, self.namespace)["login"]
        return str(login["metadata"]["name"])


def helm(cluster: DevCluster, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    binary = kubebuild.helm_bin_dir(cluster.home) / "helm"
    return subprocess.run([str(binary), *args], env={**os.environ, **cluster.env()}, capture_output=True, text=True,
                          timeout=timeout, check=False)


def state_dir(cluster: DevCluster) -> Path:
    return cluster.home / "slurm-on-kubernetes"


def bring_up(cluster: DevCluster, say: Callable[[str], None]) -> Deployed:
    """Install (or upgrade to this checkout's chart) the release, and wait until every Pod is Ready."""
    api = kc.load_api_client(str(cluster.kubeconfig))
    state = state_dir(cluster)
    state.mkdir(exist_ok=True)
    built = slurmimages.build_slurm_images(cluster.home / "images", state / "images", cluster.root, cluster.release,
                                           sunk.__version__, lambda line: None)
    second = cluster.start_second_real_node([b for b in built if "slurmd" in b.name])
    cluster.import_images(built)
    pool.apply_crds(api)
    deadline = time.monotonic() + 180
    while True:  # (a namespace still going, from a take_down just before, takes no new objects)
        try:
            kc.create(api, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
            break
        except kc.ApiError as exc:
            if not exc.conflict:
                raise
        try:
            if not kc.get(api, NAMESPACES, NAMESPACE)["metadata"].get("deletionTimestamp"):
                break
        except kc.ApiError as exc:
            if not exc.not_found:
                raise
            continue  # (gone since: create it)
        if time.monotonic() > deadline:
            raise RuntimeError(f"namespace {NAMESPACE} is still being deleted after 180 s")
        time.sleep(1)
    storage_class = f"sunk-dev-{NAMESPACE}"
    for claim, uid in claim_uids(CLUSTER).items():
        try:
            kc.create(api, PVS, volume(f"{NAMESPACE}-{claim}", storage_class, state / "volumes" / claim, uid, claim,
                                       NAMESPACE))
        except kc.ApiError as exc:
            if not exc.conflict:
                raise
    saved = state / "values.json"  # (the hook secrets made once: an upgrade keeps them)
    hooks = json.loads(saved.read_text())["hooks"] if saved.exists() else None
    saved.write_text(json.dumps(values(slurm_release=cluster.release.name, namespace=NAMESPACE, cluster=CLUSTER,
                                       storage_class=storage_class, hooks=hooks), indent=1))
    done = helm(cluster, "upgrade", "--install", RELEASE, str(chart.CHART), "--namespace", NAMESPACE, "-f",
                str(saved), "--skip-crds")
    if done.returncode != 0:
        raise RuntimeError(f"helm upgrade --install {RELEASE}: {done.stderr.strip()}")
    deployed = Deployed(NAMESPACE, RELEASE, CLUSTER, (realnode.NODE_NAME, second.node_name))
    deadline = time.monotonic() + READY_TIMEOUT
    while waiting := waiting_for(api, NAMESPACE, deployed.real_nodes):
        if time.monotonic() > deadline:
            raise RuntimeError(f"Slurm on Kubernetes: not Ready after {READY_TIMEOUT} s: {', '.join(waiting)} (kubectl "
                               f"-n {NAMESPACE} get pods; the operator's log: kubectl -n {NAMESPACE} logs -l "
                               f"{OPERATOR_PODS})")
        time.sleep(2)
    say(f"  slurm-on-k8s     ready: release {RELEASE} in namespace {NAMESPACE}, slurmd Pods on "
        f"{', '.join(deployed.real_nodes)}")
    return deployed


def installed(cluster: DevCluster) -> bool:
    api = kc.load_api_client(str(cluster.kubeconfig))
    try:
        kc.get(api, NAMESPACES, NAMESPACE)
        return True
    except kc.ApiError as exc:
        if exc.not_found:
            return False
        raise


def take_down(cluster: DevCluster, say: Callable[[str], None]) -> None:
    """The second real Node stopped first (its Pods force-deleted: a kubelet that is gone confirms nothing), then
    the release uninstalled (its hooks' Pods bound meanwhile); the namespace, the claims, the volumes and their
    directories go (the next bring_up starts afresh: new keys would not open the old database)."""
    api = kc.load_api_client(str(cluster.kubeconfig))
    cluster.stop_second_real_node()
    uninstall = subprocess.Popen([str(kubebuild.helm_bin_dir(cluster.home) / "helm"), "uninstall", RELEASE,
                                  "--namespace", NAMESPACE, "--wait", "--timeout", "5m"],
                                 env={**os.environ, **cluster.env()}, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
    while uninstall.poll() is None:
        bind_unscheduled(api, NAMESPACE)  # (the uninstall hook's Pod)
        time.sleep(0.5)
    _, err = uninstall.communicate()
    if uninstall.returncode != 0 and "not found" not in err:
        say(f"  slurm-on-k8s     helm uninstall: {err.strip()}")
    try:
        kc.delete(api, NAMESPACES, NAMESPACE)
    except kc.ApiError as exc:
        if not exc.not_found:
            raise
    for claim in claim_uids(CLUSTER):
        try:
            kc.delete(api, PVS, f"{NAMESPACE}-{claim}")
        except kc.ApiError as exc:
            if not exc.not_found:
                raise
    shutil.rmtree(state_dir(cluster) / "volumes", ignore_errors=True)
    say("  slurm-on-k8s     uninstalled (not asked for; `up --slurm-on-kubernetes` brings it up)")
