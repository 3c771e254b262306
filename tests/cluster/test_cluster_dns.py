"""Cluster DNS on the real kubelet Node (``sunk_dev.dns``): what Slurm on Kubernetes names its hosts by.

A Pod there resolves a Service's name to its ClusterIP, a headless Service's Pod by its hostname and
subdomain (as a StatefulSet's slurmctld-0 is named in slurm.conf), and a name outside the cluster
domain is not answered from it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kube_testns import create_namespace, purge_namespace
from syncer_harness import wait_for

import sunk
from sunk.kube import client as kc
from sunk.kube.resources import PODS, SERVICES
from sunk_dev import dns, images, realnode

pytestmark = [pytest.mark.every_release,
              pytest.mark.skipif(not realnode.enabled(), reason="SUNK_DEV_REAL_NODE=0: no real kubelet Node")]

RESOLVE = """
import socket, sys
for name, want in zip(sys.argv[1::2], sys.argv[2::2]):
    try:
        got = socket.gethostbyname(name)
    except OSError as exc:
        got = f"error: {exc}"
    print(name, got, flush=True)
    if (want == "none") != got.startswith("error") or (want != "none" and got != want):
        sys.exit(f"{name}: {got}, wanted {want}")
"""


@pytest.fixture
def namespace(kube_api):
    name = create_namespace(kube_api)
    yield name
    purge_namespace(kube_api, name)



def phase(api, namespace: str, name: str) -> str:
    return (kc.get(api, PODS, name, namespace).get("status") or {}).get("phase", "")


def pod(name: str, command: list[str], **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"nodeName": realnode.NODE_NAME, "restartPolicy": "Never", "automountServiceAccountToken": False,
                     "enableServiceLinks": False, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": f"{images.SUNK_REPOSITORY}:{sunk.__version__}",
                                     "imagePullPolicy": "Never", "command": command,
                                     "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}}}], **spec}}


def test_a_pod_on_the_real_node_resolves_services_and_a_headless_services_pod(dev_cluster, kube_api, namespace):
    kube_dns = kc.get(kube_api, SERVICES, dns.SERVICE_NAME, dns.SERVICE_NAMESPACE)
    assert kube_dns["spec"]["clusterIP"] == "None"
    # A StatefulSet-style Pod: hostname + subdomain under a headless Service.
    kc.create(kube_api, SERVICES, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ctld"},
                                   "spec": {"clusterIP": "None", "selector": {"app": "ctld-0"},
                                            "ports": [{"port": 6817}]}}, namespace)
    kc.create(kube_api, PODS, pod("ctld-0", ["sleep", "300"], hostname="ctld-0", subdomain="ctld"), namespace)
    wait_for(lambda: phase(kube_api, namespace, "ctld-0") == "Running", 60, "the headless Service's Pod running")
    ctld_ip = wait_for(lambda: (kc.get(kube_api, PODS, "ctld-0", namespace).get("status") or {}).get("podIP"), 30,
                       "its Pod IP")
    web = kc.create(kube_api, SERVICES, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                                         "spec": {"selector": {"app": "nothing"}, "ports": [{"port": 80}]}}, namespace)
    kubernetes = kc.get(kube_api, SERVICES, "kubernetes", "default")["spec"]["clusterIP"]
    checks = [f"web.{namespace}.svc.{dns.CLUSTER_DOMAIN}", web["spec"]["clusterIP"],
              "kubernetes.default.svc", kubernetes,  # (the search path completes it, as slurm.conf's names)
              f"ctld-0.ctld.{namespace}.svc", ctld_ip,
              f"no-such-service.{namespace}.svc.{dns.CLUSTER_DOMAIN}", "none"]
    kc.create(kube_api, PODS, pod("resolve", ["python3", "-c", RESOLVE, *checks]), namespace)
    final = wait_for(lambda: (p := phase(kube_api, namespace, "resolve")) in ("Succeeded", "Failed") and p, 90,
                     "the resolving Pod to finish")
    logs = sorted(Path("/var/log/pods").glob(f"{namespace}_resolve_*/main/*.log"))
    assert final == "Succeeded", logs[-1].read_text() if logs else "(no log)"
