"""helm install, upgrade and uninstall of the chart on the dev cluster, as an operator runs them.

The release goes into a fresh namespace that enforces Pod Security `restricted`, given only the
Slurm endpoint and token (and where the dev cluster's slurmd Pods are). The dev cluster has no
kube-scheduler for sunk's own Pods and a stand-in kubelet that runs no container, so the
Deployments' Pods are created (Pod Security admitted them) but stay Pending. sunk-syncer and
sunk-scheduler then run as processes with the installed Deployments' flags (``helm get
manifest``), the Secrets the chart rendered, and their ServiceAccounts' tokens; only addresses
and in-Pod paths are this machine's. They schedule a Deployment through Slurm.

The tests of this module run in order: install, schedule, upgrade, uninstall.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_testns import create_namespace, purge_namespace
from locking_harness import SLURMD_SELECTOR, clean_up, free_port, label_slurmd_pods
from procs import Process
from rbac_harness import assert_never_forbidden, deployment_args, kubeconfig_for
from slurmtools import jobs_carrying, slurm_job, state, wait_for
from test_scheduler import deployment_runs_through_slurm_until_deleted, end_pods

from sunk.hooks.auth import weakness
from sunk.kube import client as kc
from sunk.kube.resources import CONFIGMAPS, LEASES, NAMESPACES, NODES, PODS, Resource
from sunk.model import names
from sunk_dev import chart, kubebuild, slurmconf

RELEASE = "sunk"
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
REPLICASETS = Resource("apps", "v1", "replicasets", "ReplicaSet")
SECRETS = Resource("", "v1", "secrets", "Secret")
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False)
CLUSTER_ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding",
                                 namespaced=False)
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
ENFORCE = {"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}
INSTANCE = f"app.kubernetes.io/instance={RELEASE}"


class Release:
    """One release of the chart, installed with the dev cluster's helm."""

    def __init__(self, dev_cluster, namespace: str, tmp: Path):
        self.dev_cluster, self.namespace, self.tmp = dev_cluster, namespace, tmp
        rest = dev_cluster.slurm_rest
        # Only what an operator must say: where slurmrestd is, its token, and where slurmd runs.
        self.values: dict[str, Any] = {"slurm": {"api": {"url": rest.url}, "auth": {"token": rest.token},
                                                 "killWait": slurmconf.KILL_WAIT},
                                       "slurmd": {"namespace": "slurm"}}
        self.installed = False
        self.workloads = ""  # the namespace of the Deployment scheduled through it

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        values = self.tmp / "values.json"
        values.write_text(json.dumps(self.values))
        binary = kubebuild.helm_bin_dir(self.dev_cluster.home) / "helm"
        done = subprocess.run([str(binary), *args, "--namespace", self.namespace],
                              env={**os.environ, **self.dev_cluster.env()},  # (helm wants HOME for its cache)
                              capture_output=True, text=True, timeout=300, check=False)
        assert not check or done.returncode == 0, f"helm {' '.join(args)}: {done.stderr}"
        return done

    def install(self) -> None:
        # (--skip-crds: Helm never deletes a CRD, and the shared dev cluster keeps what a test leaves;
        # test_manifests.py has the apiserver check the CRDs)
        self.helm("install", RELEASE, str(chart.CHART), "-f", str(self.tmp / "values.json"), "--skip-crds")
        self.installed = True

    def upgrade(self, *sets: str) -> None:
        self.helm("upgrade", RELEASE, str(chart.CHART), "-f", str(self.tmp / "values.json"),
                  *[a for s in sets for a in ("--set", s)])

    def uninstall(self) -> None:
        self.helm("uninstall", RELEASE, "--wait")
        self.installed = False

    def manifest(self) -> list[dict[str, Any]]:
        """The objects of the installed revision, as helm applied them."""
        return [d for d in yaml.safe_load_all(self.helm("get", "manifest", RELEASE).stdout) if d]


@pytest.fixture(scope="module")
def release(kube_api, dev_cluster, tmp_path_factory) -> Iterator[Release]:
    name = f"chart-test-{uuid.uuid4().hex[:8]}"
    kc.create(kube_api, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                     "metadata": {"name": name, "labels": ENFORCE}})
    enforced(kube_api, name)
    installed = Release(dev_cluster, name, tmp_path_factory.mktemp("chart-install"))
    # The release's Pods never run here (above), nor would its uninstall hook's Job, and helm uninstall would
    # wait for it: the Syncer's processes lift what it locked and drained. test_chart_pods.py runs the hook.
    installed.values["syncer"] = {"releaseNodesOnUninstall": False}
    # Nor would the install hook's Job that makes the hooks Secret (sunk-syncer ensure-secrets), and helm install
    # would wait for it: the hook secrets as values, which the chart renders itself. test_chart_secrets.py runs it.
    installed.values["hooks"] = {"syncerToken": secrets.token_hex(32), "schedulerHookSecret": secrets.token_hex(32)}
    try:
        yield installed
    finally:
        if installed.installed:
            installed.helm("uninstall", RELEASE, "--wait", check=False)
        delete_if_present(kube_api, SECRETS, "sunk-hooks", name)  # kept by helm.sh/resource-policy
        purge_namespace(kube_api, name)


def enforced(api, namespace: str, timeout: float = 30) -> None:
    """Wait until Pod Security refuses a bare Pod in ``namespace``: it reads namespaces through a
    cache, and a Pod admitted before it sees the labels would prove nothing (test_pod_security.py)."""
    bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pss-probe"},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    deadline = time.monotonic() + timeout
    while True:
        why = ""
        try:
            kc.request(api, "POST", PODS.path(namespace), query={"dryRun": "All"}, body=bare)
        except kc.ApiError as exc:
            # (also a 403 until the namespace's default ServiceAccount exists: not the one awaited)
            if exc.status != 403:
                raise
            if "violates PodSecurity" in exc.message:
                return
            why = exc.message
        assert time.monotonic() < deadline, f"Pod Security never enforced {ENFORCE} in {namespace}: {why}"
        time.sleep(0.5)


def holder(api, lease: str, namespace: str) -> str | None:
    try:
        return (kc.get(api, LEASES, lease, namespace).get("spec") or {}).get("holderIdentity")
    except kc.ApiError as exc:
        if exc.not_found:
            return None
        raise


def delete_if_present(api, resource: Resource, name: str, namespace: str | None = None) -> None:
    try:
        kc.delete(api, resource, name, namespace)
    except kc.ApiError as exc:
        if not exc.not_found:
            raise


def secret_data(api, namespace: str, name: str) -> dict[str, bytes]:
    secret = kc.get(api, SECRETS, name, namespace)
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def replica_sets(api, namespace: str, component: str) -> dict[str, dict[str, Any]]:
    found = kc.list_objects(api, REPLICASETS, namespace, label_selector=f"app.kubernetes.io/name={component}")
    return {rs["metadata"]["labels"]["pod-template-hash"]: rs for rs in found}


# ---- install -----------------------------------------------------------------------------------


def test_install_into_a_namespace_enforcing_pod_security_restricted(kube_api, release):
    release.install()
    namespace = release.namespace
    deployments = {d["metadata"]["name"] for d in kc.list_objects(kube_api, DEPLOYMENTS, namespace)}
    assert deployments == {"sunk-syncer", "sunk-scheduler"}

    # The ReplicaSet controller made every replica: Pod Security `restricted` admitted them (a refused
    # Pod is never created; its ReplicaSet reports FailedCreate instead).
    def created():
        pods = kc.list_objects(kube_api, PODS, namespace, label_selector=INSTANCE)
        return pods if len(pods) == 4 else None

    pods = wait_for(created, 60, "the 4 Pods of sunk-syncer and sunk-scheduler")
    assert {p["metadata"]["labels"]["app.kubernetes.io/name"] for p in pods} == {"sunk-syncer", "sunk-scheduler"}
    # The hook secrets are the values', strong; the token is the one given.
    for key, value in secret_data(kube_api, namespace, "sunk-hooks").items():
        assert weakness(value) is None, f"sunk-hooks/{key}: {weakness(value)}"
    assert secret_data(kube_api, namespace, "sunk-slurm-token")["token"].decode() == release.values["slurm"]["auth"][
        "token"]


# ---- the installed components at work ----------------------------------------------------------


def process(release: Release, kube_api, component: str, module: str, overrides: dict[str, str],
            docs: list[dict[str, Any]]) -> Process:
    """A Deployment of the release as a process: its rendered flags, as its ServiceAccount."""
    namespace = release.namespace
    tmp = release.tmp / component
    tmp.mkdir(exist_ok=True)
    kubeconfig = kubeconfig_for(kube_api, release.dev_cluster, namespace, f"sunk-{component}", tmp / "kubeconfig")
    probes, metrics = free_port(), free_port()
    args = deployment_args(f"{component}.yaml", f"sunk-{component}", {
        **overrides, "--metrics-bind-address": f"127.0.0.1:{metrics}",
        "--health-probe-bind-address": f"127.0.0.1:{probes}"}, docs=docs)
    return Process(f"sunk-{component}", module, [*args, f"--kubeconfig={kubeconfig}"],
                   ready_url=f"http://127.0.0.1:{probes}/readyz", log_dir=tmp, env={"POD_NAMESPACE": namespace})


def secret_file(directory: Path, name: str, value: bytes) -> str:
    path = directory / name
    path.write_bytes(value)
    path.chmod(0o600)
    return str(path)


def test_the_installed_scheduler_and_syncer_schedule_a_deployment_through_slurm(kube_api, dev_cluster, release):
    namespace = release.namespace
    docs = release.manifest()
    files = release.tmp / "secrets"
    files.mkdir(exist_ok=True)
    token = secret_file(files, "token", secret_data(kube_api, namespace, "sunk-slurm-token")["token"])
    hooks = secret_data(kube_api, namespace, "sunk-hooks")
    scheduler_name = chart.flags(chart.container_args(docs, "sunk-scheduler"))["scheduler-name"]
    assert scheduler_name == f"{namespace}-{RELEASE}"  # SUNK's default: <namespace>-<releaseName>
    assert chart.flags(chart.container_args(docs, "sunk-scheduler"))["slurm-kill-wait"] == f"{slurmconf.KILL_WAIT}s"
    hooks_port = free_port()
    scheduler = process(release, kube_api, "scheduler", "sunk.commands.scheduler", {
        "--slurm-auth-token-file": token,
        "--hook-secret-file": secret_file(files, "scheduler-hook-secret", hooks["scheduler-hook-secret"]),
        # (the chart's identity policy, as its ConfigMap mounts it: Pods asking nothing run as its non-root identity)
        "--identity-policy": secret_file(files, "identity-policy.json", kc.get(
            kube_api, CONFIGMAPS, "sunk-identity-policy", namespace)["data"]["policy.json"].encode()),
        "--hooks-api-bind-address": f"127.0.0.1:{hooks_port}", "--hooks-url": f"http://127.0.0.1:{hooks_port}",
    }, docs)
    syncer = process(release, kube_api, "syncer", "sunk.commands.syncer", {
        "--slurm-auth-token-file": token,
        "--hooks-token-file": secret_file(files, "syncer-token", hooks["syncer-token"]),
        "--hooks-api-bind-address": f"127.0.0.1:{free_port()}",
        # (isolation: node3 and node4 only, as every cluster test's Syncer, so that no other test's
        # Node is locked by this one)
        "--slurmd-selector": SLURMD_SELECTOR,
    }, docs)
    workloads = release.workloads = create_namespace(kube_api)
    app = f"inference-{uuid.uuid4().hex[:6]}"
    label_slurmd_pods(kube_api, "true")
    try:
        syncer.start()
        scheduler.start()
        # Each leads on the Lease its Role names, in the release's namespace.
        for lease in ("sunk-syncer", "sunk-scheduler"):
            wait_for(lambda n=lease: holder(kube_api, n, namespace), 30, f"Lease {lease} held")
        kc.create(kube_api, DEPLOYMENTS, {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": app},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": app}}, "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {"schedulerName": scheduler_name, "terminationGracePeriodSeconds": 5, "containers": [
                    {"name": "main", "image": "busybox",
                     "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}}}, workloads)

        deployment_runs_through_slurm_until_deleted(kube_api, dev_cluster, workloads, app, replicas=2, timeout=90)
    finally:
        delete_if_present(kube_api, DEPLOYMENTS, app, workloads)
        try:
            end_pods(kube_api, dev_cluster, workloads)  # while the scheduler runs: no placeholder job left
        finally:
            scheduler.stop()
            syncer.stop()
            label_slurmd_pods(kube_api, None)
            clean_up(kube_api, dev_cluster, "sunk-syncer-chart-test")  # lock annotations, taints on node3/node4
            purge_namespace(kube_api, workloads)
    assert_never_forbidden(scheduler.log)
    assert_never_forbidden(syncer.log)


# ---- upgrade -----------------------------------------------------------------------------------


def test_helm_upgrade_with_a_changed_value_rolls_the_pods_and_keeps_the_secrets(kube_api, release):
    namespace = release.namespace
    hooks = secret_data(kube_api, namespace, "sunk-hooks")
    before = {c: set(replica_sets(kube_api, namespace, c)) for c in ("sunk-scheduler", "sunk-syncer")}
    release.upgrade("scheduler.logLevel=debug")
    deployment = kc.get(kube_api, DEPLOYMENTS, "sunk-scheduler", namespace)
    assert "--zap-log-level=debug" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]

    # The Deployment controller starts a new ReplicaSet for the new template, and its Pods.
    def rolled():
        now = replica_sets(kube_api, namespace, "sunk-scheduler")
        new = set(now) - before["sunk-scheduler"]
        return new and any((now[h].get("status") or {}).get("replicas") for h in new) and new

    wait_for(rolled, 60, "a new ReplicaSet of sunk-scheduler with Pods")
    assert set(replica_sets(kube_api, namespace, "sunk-syncer")) == before["sunk-syncer"], \
        "sunk-syncer rolled, though nothing of its own changed"
    # The hooks Secret is the values' (rendered the same every time): node tokens made from it stay valid.
    assert secret_data(kube_api, namespace, "sunk-hooks") == hooks


# ---- uninstall ---------------------------------------------------------------------------------


def test_helm_uninstall_leaves_nothing_behind(kube_api, dev_cluster, release):
    namespace = release.namespace
    scheduler_name = f"{namespace}-{RELEASE}"
    release.uninstall()
    for resource in (DEPLOYMENTS, SERVICE_ACCOUNTS, ROLES):
        left = [o["metadata"]["name"] for o in kc.list_objects(kube_api, resource, namespace, label_selector=INSTANCE)]
        assert not left, f"{resource.kind}s left: {left}"
    for resource in (CLUSTER_ROLES, CLUSTER_ROLE_BINDINGS):
        left = [o["metadata"]["name"] for o in kc.list_objects(kube_api, resource)
                if o["metadata"]["name"].startswith(f"{namespace}-")]
        assert not left, f"{resource.kind}s left: {left}"
    wait_for(lambda: not kc.list_objects(kube_api, PODS, namespace, label_selector=INSTANCE), 60, "the Pods to go")
    # What is kept on purpose: the hook secrets (a reinstall reuses them; docs/install.md).
    secrets = {s["metadata"]["name"] for s in kc.list_objects(kube_api, SECRETS, namespace, label_selector=INSTANCE)}
    assert secrets == {"sunk-hooks"}
    # Nothing of the release's left in Slurm or on the Nodes: no job, no lock taint, no drain.
    active = [j for j in jobs_carrying(dev_cluster, scheduler_name)
              if state(slurm_job(dev_cluster, j)) in ("PENDING", "RUNNING", "COMPLETING", "SUSPENDED")]
    assert not active, f"jobs of {scheduler_name} left: {active}"
    for node in ("node3", "node4"):
        taints = kc.get(kube_api, NODES, dev_cluster.k8s_node_for(node))["spec"].get("taints") or []
        assert not [t for t in taints if t["key"] == names.LOCK_KEY], f"{node}: lock taint left: {taints}"
    drained = dev_cluster.slurm("sinfo", "-h", "-N", "-t", "drain", "-o", "%N %E").stdout
    assert namespace not in drained and (not release.workloads or release.workloads not in drained), drained
