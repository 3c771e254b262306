"""The chart installed for real: sunk's components run as Pods, from sunk's own image, on the real Node.

test_chart_install.py runs the installed Deployments' flags as processes (most of the dev
cluster's Nodes run no container). Here the release's Pods really run: the image is the one
sunk-dev builds from a Debian root and the project's wheel (``sunk_dev.images``), imported into
the real Node's containerd; a stock kube-scheduler (the default scheduler, as every cluster
has) binds the release's Pods, and ``nodeSelector`` keeps them on the real Node. In-cluster
clients reach the apiserver as the ``kubernetes`` Service and slurmrestd at the bridge's address
(``sunk_dev.realnode.service_routes``). The namespace enforces Pod Security ``restricted``.

In order: install (every Pod Running and Ready as its ServiceAccount), a Deployment scheduled
through Slurm by the Pod scheduler, ``helm test`` (passing, then failing naming the Syncer while it
is scaled to 0), ``helm upgrade`` with a changed value rolls the Pods,
``helm uninstall`` leaves no job, lock taint or drain behind (its hook Job, ``sunk-syncer
release-nodes``, runs as a Pod too), and a person's drain where it was.
"""

from __future__ import annotations

import re
import subprocess
import textwrap
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kube_testns import purge_namespace
from locking_harness import lock_value
from serviceproxy import ServiceProxy
from slurmtools import all_nodes, jobs_carrying, slurm_job, wait_for
from test_chart_install import DEPLOYMENTS, ENFORCE, INSTANCE, RELEASE, Release, enforced, replica_sets

import sunk
from sunk.kube import client as kc
from sunk.kube import patch as kp
from sunk.kube.resources import EVENTS, NAMESPACES, NODES, PODS, SERVICES
from sunk.locking.requests import LockRequest
from sunk.model import names
from sunk.translate import drains, leftovers
from sunk_dev import images, kubeconf, realnode, slurmconf

POD_SLURM_URL = f"http://{realnode.POD_GATEWAY}:6820"


def pods_of(api, namespace: str) -> list[dict[str, Any]]:
    return kc.list_objects(api, PODS, namespace, label_selector=INSTANCE)


def ready(pod: dict[str, Any]) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return not pod["metadata"].get("deletionTimestamp") and any(
        c["type"] == "Ready" and c["status"] == "True" for c in conds)


@pytest.fixture(scope="module")
def default_scheduler(dev_cluster, tmp_path_factory) -> Iterator[None]:
    """kube-scheduler as the default scheduler for this module (the dev cluster runs none)."""
    tmp = tmp_path_factory.mktemp("default-scheduler")
    config = tmp / "config.yaml"
    config.write_text(textwrap.dedent(f"""\
        apiVersion: kubescheduler.config.k8s.io/v1
        kind: KubeSchedulerConfiguration
        clientConnection:
          kubeconfig: {dev_cluster.kubeconfig}
        leaderElection:
          leaderElect: false
        podInitialBackoffSeconds: 1
        podMaxBackoffSeconds: 2
        """))
    with (tmp / "kube-scheduler.log").open("wb") as log:
        proc = subprocess.Popen([str(dev_cluster.kube_scheduler_binary), f"--config={config}", "--secure-port=0",
                                 "--v=2"],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    time.sleep(1)
    assert proc.poll() is None, (tmp / "kube-scheduler.log").read_text()[-3000:]
    try:
        yield
    finally:
        proc.terminate()
        proc.wait(20)


@pytest.fixture(scope="module")
def pod_release(kube_api, dev_cluster, default_scheduler, tmp_path_factory) -> Iterator[Release]:
    name = f"chart-pods-{uuid.uuid4().hex[:8]}"
    kc.create(kube_api, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                     "metadata": {"name": name, "labels": ENFORCE}})
    enforced(kube_api, name)
    release = Release(dev_cluster, name, tmp_path_factory.mktemp("chart-pods"))
    # The chart's default image (sunk:<appVersion>, docker.io/library/sunk as containerd names it) is the
    # one sunk-dev built and imported: no image value at all.
    release.values.update({
        "nodeSelector": {realnode.NODE_LABEL: "true"},
        "logLevel": "info",
    })
    release.values["slurm"]["api"]["url"] = POD_SLURM_URL
    for component in ("syncer", "scheduler"):
        release.values[component] = {"replicas": 1}
    try:
        yield release
    finally:
        if release.installed:
            release.helm("uninstall", RELEASE, "--wait", check=False)
        # (a test that failed with the scheduler Pod gone leaves its Pods' jobs: cancel them)
        dev = release.dev_cluster
        for job in dev.slurm("squeue", "-h", "-o", "%i", check=False).stdout.split():
            if f"ns={name} " in slurm_job(dev, int(job)).get("admin_comment", ""):
                dev.slurm("scancel", job, check=False)
        purge_namespace(kube_api, name)
        # (a test that failed before the release's Syncer lifted the lock planted on the real Node: every
        # later test that needs a Pod there would fail too)
        kp.remove_taint(kube_api, kc.get(kube_api, NODES, realnode.NODE_NAME), names.LOCK_KEY)


def lock_taint(api, node: str) -> list[dict[str, Any]]:
    return [t for t in kc.get(api, NODES, node)["spec"].get("taints") or [] if t["key"] == names.LOCK_KEY]


def test_the_release_runs_as_pods_of_sunks_image_on_the_real_node(kube_api, pod_release):
    """... even when a Syncer that went away left the real Node locked (no job runs on realnode1): the
    release's Pods tolerate sunk's lock, start there, and the new Syncer lifts it."""
    kp.ensure_taint(kube_api, kc.get(kube_api, NODES, realnode.NODE_NAME), names.LOCK_KEY, "true", "NoSchedule")
    pod_release.install()
    namespace = pod_release.namespace

    def running() -> list[dict[str, Any]] | None:
        pods = pods_of(kube_api, namespace)
        crashed = [p for p in pods for s in (p.get("status") or {}).get("containerStatuses") or []
                   if s.get("restartCount", 0) >= 2]
        assert not crashed, describe(kube_api, namespace)  # (a crash loop: its output, at once)
        return pods if len(pods) == 2 and all(ready(p) for p in pods) else None

    try:
        pods = wait_for(running, 180, "sunk-syncer's and sunk-scheduler's Pods Ready on the real Node", interval=1)
    except AssertionError:
        raise AssertionError(describe(kube_api, namespace)) from None
    assert {p["spec"]["nodeName"] for p in pods} == {realnode.NODE_NAME}
    assert {p["spec"]["containers"][0]["image"] for p in pods} == {f"sunk:{sunk.__version__}"}
    # ... and that name is the image sunk-dev built from this tree and imported (not some older build).
    built = pod_release.dev_cluster.built_images[f"{images.SUNK_REPOSITORY}:{sunk.__version__}"]
    assert {s["imageID"] for p in pods for s in p["status"]["containerStatuses"]} == {built}
    try:
        wait_for(lambda: not lock_taint(kube_api, realnode.NODE_NAME), 60,
                 "the release's Syncer to lift the stale lock")
    except AssertionError as exc:  # (what the Syncer saw: its log, and Slurm's view of the node)
        dev = pod_release.dev_cluster
        slurm = dev.slurm("scontrol", "show", "node", realnode.SLURM_NODE, check=False).stdout
        jobs = dev.slurm("squeue", "-h", "-w", realnode.SLURM_NODE, check=False).stdout
        raise AssertionError(f"{exc}\n{describe(kube_api, namespace, log_lines=60)}\n{slurm}\njobs: {jobs!r}") from None


def test_a_deployment_is_scheduled_through_slurm_by_the_scheduler_pod(kube_api, pod_release):
    namespace = pod_release.namespace
    scheduler_name = f"{namespace}-{RELEASE}"
    web = f"web-{uuid.uuid4().hex[:6]}"
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": web},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": web}},
                 "template": {"metadata": {"labels": {"app": web}},
                              "spec": {"schedulerName": scheduler_name, "terminationGracePeriodSeconds": 5,
                                       "securityContext": {"runAsNonRoot": True, "runAsUser": 65532,
                                                           "seccompProfile": {"type": "RuntimeDefault"}},
                                       "nodeSelector": {"sunk.dev/fake-kubelet": "true"},
                                       "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                                       "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                                                       "securityContext": {"allowPrivilegeEscalation": False,
                                                                           "capabilities": {"drop": ["ALL"]}}}]}}},
    }
    kc.create(kube_api, DEPLOYMENTS, deployment, namespace)

    def bound() -> list[dict[str, Any]] | None:
        pods = kc.list_objects(kube_api, PODS, namespace, label_selector=f"app={web}")
        placed = [p for p in pods if p["spec"].get("nodeName")]
        return placed if len(placed) == 2 else None

    pods = wait_for(bound, 60, "both replicas bound through Slurm", interval=0.5)
    for pod in pods:
        assert (pod["metadata"].get("annotations") or {}).get(names.ANN_JOB_ID), pod["metadata"]
    assert len(jobs_carrying(pod_release.dev_cluster, web)) >= 2
    # Deleted as a person would: the garbage collector deletes the ReplicaSet and its Pods, and the
    # scheduler Pod cancels each Pod's job.
    kc.delete(kube_api, DEPLOYMENTS, web, namespace)
    dev = pod_release.dev_cluster

    def active_jobs() -> list[str]:
        out = dev.slurm("squeue", "-h", "-t", "PD,R,CG,S", "-o", "%i", check=False).stdout.split()
        return [j for j in out if f"ns={namespace} " in slurm_job(dev, int(j)).get("admin_comment", "")]

    wait_for(lambda: not active_jobs(), 90, "every job of the deleted Deployment ended", interval=1)
    # ... and the Syncer Pod unlocks their Nodes and lifts what it drained, while the release runs
    # (the dev cluster's Slurm nodes cannot reach the release's hook APIs, Services without a
    # kube-proxy: each placeholder waits KillWait for its Pod and drains "k8s: sunk-placeholder").
    try:
        wait_for(lambda: not sunk_marks(kube_api, dev), 90, "no lock taint and no k8s: drain left", interval=1)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{slurm_view(dev)}\n{describe(kube_api, namespace)}") from None


@contextmanager
def kube_proxy(api, namespace: str, services: tuple[str, ...], port: int = 8081) -> Iterator[None]:
    """What kube-proxy would do for ``port`` of these Services, which the dev cluster has not: their cluster
    IP led (realnode's DNAT, beside its two routes) to a proxy on the host that passes each connection to a
    Ready Pod the Service selects, and closes it at once when there is none (a Service without endpoints)."""

    def endpoints(selector: dict[str, str]) -> list[tuple[str, int]]:
        pods = kc.list_objects(api, PODS, namespace, label_selector=",".join(f"{k}={v}" for k, v in selector.items()))
        return [(p["status"]["podIP"], port) for p in pods if ready(p) and (p.get("status") or {}).get("podIP")]

    base = realnode.service_routes(kubeconf.APISERVER_PORT, slurmconf.SLURMRESTD_PORT)
    routes, proxies = [], []
    try:
        for name in services:
            service = kc.get(api, SERVICES, name, namespace)
            selector = service["spec"]["selector"]
            proxy = ServiceProxy(lambda selector=selector: endpoints(selector)).__enter__()
            proxies.append(proxy)
            routes.append(realnode.ServiceRoute(service["spec"]["clusterIP"], port, proxy.port, f"helm test {name}"))
        realnode.install_service_routes(base + tuple(routes))
        yield
    finally:
        realnode.install_service_routes(base)
        for proxy in proxies:
            proxy.__exit__(None, None, None)


def helm_test(release: Release) -> tuple[subprocess.CompletedProcess[str], str]:
    """``helm test`` of the release, and its Pod's output (from the kubelet's log file: ``helm test --logs``
    reads it through the apiserver, which the dev cluster's apiserver cannot ask the kubelet for)."""
    done = release.helm("test", RELEASE, "--timeout", "3m", check=False)
    # (the newest: a replaced run's directory may linger a moment)
    logs = sorted(Path("/var/log/pods").glob(f"{release.namespace}_sunk-helm-test_*/helm-test/*.log"),
                  key=lambda path: path.stat().st_mtime)
    output = logs[-1].read_text(errors="replace") if logs else "(no log file of the test Pod)"
    return done, output


def test_helm_test_passes_and_fails_naming_the_component_that_does_not_answer(kube_api, pod_release):
    """``helm test``: its Pod GETs /healthz of the Syncer and the scheduler through their Services; with the
    Syncer scaled to 0 it fails naming the Syncer (and not the scheduler); the Syncer scaled back after."""
    namespace = pod_release.namespace
    with kube_proxy(kube_api, namespace, ("sunk-syncer", "sunk-scheduler")):
        done, output = helm_test(pod_release)
        assert done.returncode == 0, f"{done.stdout}{done.stderr}\n{output}\n{describe(kube_api, namespace)}"
        assert re.search(r"Phase:\s+Succeeded", done.stdout), done.stdout
        try:
            kc.patch(kube_api, DEPLOYMENTS, "sunk-syncer", {"spec": {"replicas": 0}}, namespace, subresource="scale")
            wait_for(lambda: not [p for p in pods_of(kube_api, namespace)
                                  if p["metadata"]["labels"].get("app.kubernetes.io/name") == "sunk-syncer"],
                     60, "the Syncer's Pod gone", interval=1)
            done, output = helm_test(pod_release)
            assert done.returncode != 0, f"{done.stdout}{done.stderr}\n{output}"
            assert "sunk-helm-test" in done.stderr + done.stdout, done.stderr
            verdict = [line for line in output.splitlines() if "helm test failed: " in line]
            assert verdict and "syncer (" in verdict[-1] and "scheduler" not in verdict[-1], output
        finally:
            kc.patch(kube_api, DEPLOYMENTS, "sunk-syncer", {"spec": {"replicas": 1}}, namespace, subresource="scale")
            wait_for(lambda: len([p for p in pods_of(kube_api, namespace) if ready(p)]) == 2, 120,
                     "the Syncer's Pod back and Ready", interval=1)
        # Passing again: the failed run's Pod replaced, and this one deleted once it passed (none is left for
        # the upgrade to count, nor for `helm uninstall`, which deletes no hook's object).
        done, output = helm_test(pod_release)
        assert done.returncode == 0, f"{done.stdout}{done.stderr}\n{output}"
        wait_for(lambda: not [p for p in pods_of(kube_api, namespace) if p["metadata"]["name"].endswith("helm-test")],
                 30, "the passed test's Pod deleted", interval=1)


def test_helm_upgrade_with_a_changed_value_rolls_the_pods(kube_api, pod_release):
    namespace = pod_release.namespace
    before = set(replica_sets(kube_api, namespace, "sunk-scheduler"))
    pod_release.values["logLevel"] = "debug"
    pod_release.upgrade()

    def rolled() -> bool:
        pods = [p for p in pods_of(kube_api, namespace) if not p["metadata"].get("deletionTimestamp")]
        hashes = {p["metadata"]["labels"].get("pod-template-hash") for p in pods
                  if p["metadata"]["labels"].get("app.kubernetes.io/name") == "sunk-scheduler"}
        return len(pods) == 2 and all(ready(p) for p in pods) and bool(hashes) and not hashes & before

    wait_for(rolled, 180, "the Pods rolled to the new template and Ready", interval=1)
    args = [a for p in pods_of(kube_api, namespace) for a in p["spec"]["containers"][0].get("args") or []]
    assert "--zap-log-level=debug" in args


PERSONS_DRAIN = "test_chart_pods: a person's drain"


def test_helm_uninstall_leaves_no_job_taint_or_drain(kube_api, pod_release):
    """... not even what the release's Syncer keeps while it runs: the uninstall hook (sunk-syncer
    release-nodes) stops it, then takes back the lock it holds for a pre-hook's request and a drain of its
    lock whose cause holds (a Pod still on the Node). A drain of sunk's whose cause outlives sunk (a Pod
    stuck on a Node that is gone: containers may still run there) stands; a person's drain stays."""
    namespace, dev = pod_release.namespace, pod_release.dev_cluster
    ours, standing, persons = idle_stand_in_nodes(dev, 3)
    worker = dev.k8s_node_for(ours)
    lock_drain = drains.LockTimeoutDrain(999_999_002, 30, worker, (f"slurm/{ours}",)).reason()
    stuck = drains.StuckPodDrain(namespace, "gone", "0f0f0f0f-0000-4000-8000-000000000001", "gone-node", 1).reason()
    try:
        ask_for_a_lock(kube_api, ours)
        wait_for(lambda: lock_taint(kube_api, worker), 30, f"the release's Syncer to lock {worker}")
        dev.slurm("scontrol", "update", f"nodename={ours}", "state=drain", f"reason={lock_drain}")
        dev.slurm("scontrol", "update", f"nodename={standing}", "state=drain", f"reason={stuck}")
        dev.slurm("scontrol", "update", f"nodename={persons}", "state=drain", f"reason={PERSONS_DRAIN}")
        time.sleep(3)  # a dozen node polls: the Syncer keeps all three (their causes hold; not sunk's)
        assert drain_reason(dev, ours) == lock_drain and drain_reason(dev, standing) == stuck
        assert lock_taint(kube_api, worker)

        pod_release.uninstall()
        wait_for(lambda: not pods_of(kube_api, namespace), 60, "the release's Pods gone", interval=1)
        assert not kc.list_objects(kube_api, DEPLOYMENTS, namespace)
        left = [mark for mark in sunk_marks(kube_api, dev) if not mark.startswith(f"{standing}|")]
        assert not left, f"{left}\n{slurm_view(dev)}"
        slurmd = kc.get(kube_api, PODS, ours, "slurm")
        assert lock_value(slurmd) is None and not leftovers.lock_annotations(slurmd), slurmd["metadata"]
        assert drain_reason(dev, standing) == stuck, slurm_view(dev)
        assert drain_reason(dev, persons) == PERSONS_DRAIN, slurm_view(dev)
    finally:
        for node in (persons, standing, ours):
            # (ours: should the uninstall have failed, what it was to take back, which later tests must not meet)
            dev.slurm("scontrol", "update", f"nodename={node}", "state=resume", check=False)
        # 24.11 marks a node it resumes from a drain NOT_RESPONDING until its slurmd answers a ping (about a
        # second): the next module's first test must find every slurmd healthy.
        wait_for(lambda: not [n for n in (persons, standing, ours) if "NOT_RESPONDING" in all_nodes(dev)[n]["state"]],
                 30, "the resumed nodes' slurmd to answer", interval=0.5)
        slurmd = kc.get(kube_api, PODS, ours, "slurm")
        kp.set_annotations(kube_api, slurmd, dict.fromkeys(leftovers.lock_annotations(slurmd)))
        kp.remove_taint(kube_api, kc.get(kube_api, NODES, worker), names.LOCK_KEY)


def idle_stand_in_nodes(dev, count: int) -> list[str]:
    """``count`` idle Slurm nodes of the stand-in kubelets (not realnode1, whose Node runs the release's Pods
    and the demo's), the highest-numbered first (other tests fill from node1)."""
    idle = [name for name, node in all_nodes(dev).items()
            if name.startswith("node") and set(node["state"]) - {"DYNAMIC_NORM"} == {"IDLE"}]
    chosen = sorted(idle, key=lambda name: int(name.removeprefix("node")), reverse=True)[:count]
    assert len(chosen) == count, f"{count} idle nodes wanted: {slurm_view(dev)}"
    return chosen


def ask_for_a_lock(api, slurm_node: str) -> None:
    """A pre-hook's lock request on the node's slurmd Pod, as the hook API writes it (sunk/locking/requests.py),
    for a job Slurm does not show; made 10 minutes ahead, so that the Syncer keeps the lock however long the
    uninstall takes to begin."""
    request = LockRequest(job_id=999_999_001, strict=False, at=time.time() + 600)
    kp.set_annotations(api, kc.get(api, PODS, slurm_node, "slurm"), {request.key: request.value()})


def drain_reason(dev, slurm_node: str) -> str | None:
    """The node's drain reason; None when it is not drained."""
    node = all_nodes(dev)[slurm_node]
    return node.get("reason") if "DRAIN" in node["state"] else None


def sunk_marks(api, dev) -> list[str]:
    """What sunk may leave on the machines: lock taints on Nodes, ``k8s:`` drains on Slurm nodes."""
    marks = [f"{n['metadata']['name']}: lock taint" for n in kc.list_objects(api, NODES)
             if any(t["key"] == names.LOCK_KEY for t in (n.get("spec") or {}).get("taints") or [])]
    out = dev.slurm("sinfo", "-h", "-N", "-o", "%N|%E", check=False).stdout
    return marks + [line for line in out.splitlines() if "|k8s:" in line]


def slurm_view(dev) -> str:
    """Slurm's jobs and its nodes that are not idle, for a failure's message."""
    jobs = dev.slurm("squeue", "-h", "-o", "%i %T %N %j %k", check=False).stdout
    nodes = dev.slurm("sinfo", "-h", "-N", "-o", "%N %T %E", check=False).stdout
    return f"squeue:\n{jobs}sinfo:\n{nodes}"


def describe(api, namespace: str, log_lines: int = 15) -> str:
    """What a Pod that is not Ready says of itself: its containers' states and their output's last lines
    (the real kubelet's log files; ``kubectl logs`` would need the apiserver to reach the kubelet)."""
    lines = [f"{e['involvedObject']['name']}: {e.get('reason')}: {e.get('message')}"
             for e in kc.list_objects(api, EVENTS, namespace) if e.get("type") == "Warning"]
    node = kc.get(api, NODES, realnode.NODE_NAME)
    lines.append(f"{realnode.NODE_NAME}: taints {node['spec'].get('taints')}, conditions "
                 f"{[(c['type'], c['status']) for c in node['status'].get('conditions') or []]}")
    for pod in kc.list_objects(api, PODS, namespace):
        meta = pod["metadata"]
        states = [(s["name"], s.get("restartCount"), s.get("state"), s.get("lastState"))
                  for s in (pod.get("status") or {}).get("containerStatuses") or []]
        lines.append(f"{meta['name']} on {pod['spec'].get('nodeName')}: {states}")
        for log in sorted(Path("/var/log/pods").glob(f"{namespace}_{meta['name']}_{meta['uid']}/*/*.log")):
            lines += [f"  {line[:400]}" for line in log.read_text(errors="replace").splitlines()[-log_lines:]]
    return "\n".join(lines)
