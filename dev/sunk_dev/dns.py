"""Cluster DNS for the dev cluster's real kubelet Node: CoreDNS, as every Kubernetes cluster has one.

Slurm on Kubernetes names its hosts by DNS (``SlurmctldHost=<pod>(<pod>.<service>.<ns>.svc)``, the
slurmdbd and MariaDB Services), so Pods on the real Node need cluster DNS. CoreDNS is built from its
Go module like the Kubernetes binaries (``kubebuild.GoCommand``, cached under the dev home) and runs
on the host, not in a Pod: it answers on the host's node IP (which Pods reach through the bridge's
gateway), ``cluster.local`` from the apiserver (its ``kubernetes`` plugin: Services, headless
Services' Pods, and Pods by address), everything else from the host's resolver. The kubelet's
``clusterDNS`` names that address; a ``kube-dns`` Service (headless, its EndpointSlice naming the
address) lets in-cluster tools find it as in any cluster.

A ClusterIP still needs a proxy to reach its Pods, which the dev cluster does not run (only the routes
of ``realnode.service_routes``): clients of a Service name here use a headless Service or a route.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .kubebuild import GoCommand

COREDNS = GoCommand("coredns", "github.com/coredns/coredns", "1.12.1", "github.com/coredns/coredns")
CLUSTER_DOMAIN = "cluster.local"
PORT = 53
HEALTH_PORT = 10354  # CoreDNS's /health (liveness), on loopback
READY_PORT = 10355  # CoreDNS's /ready: 200 once the kubernetes plugin has synced its caches
SERVICE_NAMESPACE = "kube-system"
SERVICE_NAME = "kube-dns"


def corefile(address: str, kubeconfig: Path, clients: str, upstream: str = "/etc/resolv.conf") -> str:
    """CoreDNS's configuration: ``cluster.local`` (and reverse lookups) from the apiserver, the rest from
    ``upstream``, both answered on ``address`` only (never on loopback, where the host's own resolver
    may listen) and only to ``clients`` (the Pods' subnet) and loopback: the host's address may be
    reachable from outside, and an open resolver naming the cluster's Pods is no one else's business."""
    acl = f"""    acl {{
        allow net {clients} 127.0.0.0/8
        block
    }}
"""
    return f"""{CLUSTER_DOMAIN}:{PORT} in-addr.arpa:{PORT} ip6.arpa:{PORT} {{
    bind {address}
{acl}    errors
    health 127.0.0.1:{HEALTH_PORT}
    ready 127.0.0.1:{READY_PORT}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 5
}}
.:{PORT} {{
    bind {address}
{acl}    errors
    forward . {upstream}
    cache 30
}}
"""


def argv(binary: Path, conf: Path) -> list[str]:
    return [str(binary), "-conf", str(conf)]


def kube_dns_objects(address: str) -> Iterable[tuple[str, dict]]:
    """(collection path, object): the ``kube-dns`` Service, headless and without a selector, and the
    EndpointSlice that names the host's address on port 53 (UDP and TCP)."""
    labels = {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}
    ports = [{"name": "dns", "port": PORT, "protocol": "UDP"}, {"name": "dns-tcp", "port": PORT, "protocol": "TCP"}]
    yield (f"/api/v1/namespaces/{SERVICE_NAMESPACE}/services",
           {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": SERVICE_NAME, "namespace": SERVICE_NAMESPACE, "labels": labels},
            "spec": {"clusterIP": "None", "ports": [{**p, "targetPort": PORT} for p in ports]}})
    yield (f"/apis/discovery.k8s.io/v1/namespaces/{SERVICE_NAMESPACE}/endpointslices",
           {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"name": f"{SERVICE_NAME}-host", "namespace": SERVICE_NAMESPACE,
                         "labels": {**labels, "kubernetes.io/service-name": SERVICE_NAME,
                                    "endpointslice.kubernetes.io/managed-by": "sunk-dev"}},
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
            "ports": ports})
