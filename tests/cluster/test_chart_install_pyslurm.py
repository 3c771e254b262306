"""The chart with ``slurm.backend: pyslurm`` on the dev cluster running Slurm 25.11 (``SUNK_DEV_SLURM=25.11``):
the Syncer's and scheduler's Pods run sunk's pyslurm image (``sunk:<version>-slurm25.11``, built and
imported by sunk-dev up) with a munged sidecar holding the dev cluster's munge key, read the dev
cluster's slurm.conf from a ConfigMap (its SlurmctldHost the host as Pods see it, the bridge's address),
and place a Pod through Slurm's C API; deleting it cancels its job.

As test_chart_pods.py: a stock kube-scheduler binds the release's Pods to the real Node, the namespace
enforces Pod Security ``restricted``. Each component runs as its own Slurm user (``slurm.pyslurm.users``,
issue 36): the scheduler as SlurmUser's uid (``slurmUserId``), which is what lets it submit placeholder jobs
for other users over munge, the Syncer as ``sunk-syncer``, which the fixture makes known to slurmctld (the
chroot's /etc/passwd) with ``AdminLevel=Admin`` in slurmdbd, as docs/install.md says.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kube_testns import purge_namespace
from slurmtools import jobs_carrying, slurm_job, wait_for
from test_chart_install import DEPLOYMENTS, ENFORCE, RELEASE, Release, enforced
from test_chart_pods import default_scheduler, describe, pods_of, ready  # noqa: F401 (a fixture)

import sunk
from sunk.kube import client as kc
from sunk.kube.resources import CONFIGMAPS, NAMESPACES, PODS, Resource
from sunk.model import names
from sunk_dev import images, realnode

pytestmark = pytest.mark.pyslurm_release  # tox -e slurm2511 (tests/conftest.py deselects it elsewhere)

SECRETS = Resource("", "v1", "secrets", "Secret")
IMAGE = f"sunk:{sunk.__version__}-slurm25.11"


def pod_slurm_conf(conf: str) -> str:
    """The dev cluster's slurm.conf as a Pod reads it: slurmctld at the bridge's address, the image's
    plugins and munge socket (libslurm's defaults), no Include of a file only the host has."""
    kept = [line for line in conf.splitlines()
            if not line.startswith(("SlurmctldHost=", "PluginDir=", "AuthInfo=", "Include "))]
    return "\n".join([f"SlurmctldHost=localhost({realnode.POD_GATEWAY})", *kept]) + "\n"


def uid_of(passwd: str, user: str) -> int:
    return next(int(line.split(":")[2]) for line in passwd.splitlines() if line.split(":")[0] == user)


SYNCER_USER, SYNCER_UID = "sunk-syncer", 64201  # the chart's default slurm.pyslurm.users.syncer


@pytest.fixture(scope="module")
def syncer_user(dev_cluster) -> Iterator[None]:
    """The Syncer's Slurm user as docs/install.md asks: known by name and uid on slurmctld's host, and an
    Admin in slurmdbd (node updates take AdminLevel=Admin). Taken back afterwards."""
    passwd = dev_cluster.root / "etc/passwd"
    before = passwd.read_text()
    added = not any(line.split(":")[0] == SYNCER_USER for line in before.splitlines())
    if added:
        passwd.write_text(before + f"{SYNCER_USER}:x:{SYNCER_UID}:{SYNCER_UID}::/nonexistent:/usr/sbin/nologin\n")
    dev_cluster.slurm("sacctmgr", "-i", "add", "user", SYNCER_USER, "account=root", "adminlevel=Admin", check=False)
    try:
        yield
    finally:
        dev_cluster.slurm("sacctmgr", "-i", "delete", "user", f"name={SYNCER_USER}", check=False)
        if added:
            passwd.write_text(before)


@pytest.fixture(scope="module")
def pyslurm_release(kube_api, dev_cluster, default_scheduler, syncer_user,  # noqa: F811
                    tmp_path_factory) -> Iterator[Release]:
    assert dev_cluster.release.pyslurm, f"the dev cluster runs Slurm {dev_cluster.release.name}; pyslurm needs 25.11"
    name = f"chart-pyslurm-{uuid.uuid4().hex[:8]}"
    kc.create(kube_api, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                     "metadata": {"name": name, "labels": ENFORCE}})
    enforced(kube_api, name)
    root = dev_cluster.root
    kc.create(kube_api, CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "slurm-conf"},
                                     "data": {"slurm.conf": pod_slurm_conf(
                                         (root / "etc/slurm/slurm.conf").read_text())}}, name)
    key = base64.b64encode((root / "etc/munge/munge.key").read_bytes()).decode()
    kc.create(kube_api, SECRETS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "munge-key"},
                                  "data": {"munge.key": key}}, name)
    release = Release(dev_cluster, name, tmp_path_factory.mktemp("chart-pyslurm"))
    release.values["slurm"].update({"backend": "pyslurm", "pyslurm": {
        "configMap": "slurm-conf", "mungeKeySecret": "munge-key",
        "slurmUserId": uid_of((root / "etc/passwd").read_text(), "slurm")}})
    release.values.update({"nodeSelector": {realnode.NODE_LABEL: "true"}, "logLevel": "info",
                           "syncer": {"replicas": 1}, "scheduler": {"replicas": 1}})
    try:
        yield release
    finally:
        if release.installed:
            release.helm("uninstall", RELEASE, "--wait", check=False)
        for job in dev_cluster.slurm("squeue", "-h", "-o", "%i", check=False).stdout.split():
            if f"ns={name} " in slurm_job(dev_cluster, int(job)).get("admin_comment", ""):
                dev_cluster.slurm("scancel", job, check=False)
        purge_namespace(kube_api, name)


def test_the_pyslurm_release_runs_its_image_with_munged_ready(kube_api, pyslurm_release):
    pyslurm_release.install()
    namespace = pyslurm_release.namespace

    def running() -> list[dict[str, Any]] | None:
        pods = pods_of(kube_api, namespace)
        return pods if len(pods) == 2 and all(ready(p) for p in pods) else None

    try:
        pods = wait_for(running, 180, "the Syncer's and scheduler's pyslurm Pods Ready", interval=1)
    except AssertionError:
        raise AssertionError(describe(kube_api, namespace)) from None
    assert {p["spec"]["containers"][0]["image"] for p in pods} == {IMAGE}
    assert {"--slurm-backend=pyslurm"} <= {a for p in pods for a in p["spec"]["containers"][0]["args"]}
    built = pyslurm_release.dev_cluster.built_images[f"{images.SUNK_REPOSITORY}:{sunk.__version__}-slurm25.11"]
    assert {s["imageID"] for p in pods for s in p["status"]["containerStatuses"]} == {built}
    assert all(s["name"] == "munged" and s.get("started") for p in pods for s in p["status"]["initContainerStatuses"])


def test_each_component_runs_as_its_own_slurm_user_and_the_syncer_is_an_admin_not_slurmuser(kube_api, pyslurm_release):
    """Issue 36: the Syncer no longer holds SlurmUser's munge credential; the scheduler still must (it submits
    for other users, which the next test proves)."""
    dev = pyslurm_release.dev_cluster
    slurm_uid = uid_of((dev.root / "etc/passwd").read_text(), "slurm")
    by_component = {p["metadata"]["labels"]["app.kubernetes.io/name"]:
                    {c["securityContext"]["runAsUser"]
                     for c in [*p["spec"]["containers"], *p["spec"]["initContainers"]]}
                    for p in pods_of(kube_api, pyslurm_release.namespace)}
    assert by_component == {"sunk-syncer": {SYNCER_UID}, "sunk-scheduler": {slurm_uid}}
    shown = dev.slurm("sacctmgr", "-n", "-P", "show", "user", SYNCER_USER, "format=user,adminlevel").stdout.split()
    assert shown == [f"{SYNCER_USER}|Administrator"]


def test_a_pod_is_placed_through_pyslurm_and_its_job_cancelled_when_it_goes(kube_api, pyslurm_release):
    namespace = pyslurm_release.namespace
    web = f"web-{uuid.uuid4().hex[:6]}"
    kc.create(kube_api, DEPLOYMENTS, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": web},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": web}},
                 "template": {"metadata": {"labels": {"app": web}},
                              "spec": {"schedulerName": f"{namespace}-{RELEASE}", "terminationGracePeriodSeconds": 5,
                                       "securityContext": {"runAsNonRoot": True, "runAsUser": 65532,
                                                           "seccompProfile": {"type": "RuntimeDefault"}},
                                       "nodeSelector": {"sunk.dev/fake-kubelet": "true"},
                                       "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                                       "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                                                       "securityContext": {"allowPrivilegeEscalation": False,
                                                                           "capabilities": {"drop": ["ALL"]}}}]}}},
    }, namespace)

    def bound() -> dict[str, Any] | None:
        pods = [p for p in kc.list_objects(kube_api, PODS, namespace, label_selector=f"app={web}")
                if p["spec"].get("nodeName")]
        return pods[0] if pods else None

    try:
        pod = wait_for(bound, 60, "the Pod bound where Slurm placed its job (through pyslurm)", interval=0.5)
    except AssertionError:
        raise AssertionError(describe(kube_api, namespace)) from None
    assert (pod["metadata"].get("annotations") or {}).get(names.ANN_JOB_ID)
    dev = pyslurm_release.dev_cluster
    assert jobs_carrying(dev, web)
    kc.delete(kube_api, DEPLOYMENTS, web, namespace)

    def active_jobs() -> list[str]:
        out = dev.slurm("squeue", "-h", "-t", "PD,R,CG,S", "-o", "%i", check=False).stdout.split()
        return [j for j in out if f"ns={namespace} " in slurm_job(dev, int(j)).get("admin_comment", "")]

    wait_for(lambda: not active_jobs(), 90, "the deleted Pod's job ended", interval=1)
