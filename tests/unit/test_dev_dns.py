"""The dev cluster's cluster DNS (``sunk_dev.dns``) and the real kubelet's configuration naming it."""

from __future__ import annotations

import json
from pathlib import Path

from sunk_dev import dns, realnode


def test_corefile_answers_the_cluster_domain_from_the_apiserver_and_the_rest_upstream_on_one_address():
    text = dns.corefile("192.0.2.7", Path("/k/admin.kubeconfig"), "10.88.7.0/24")
    zones = [line for line in text.splitlines() if line.endswith("{") and not line.startswith(" ")]
    assert zones == ["cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {", ".:53 {"]
    assert text.count("bind 192.0.2.7") == 2  # (never 0.0.0.0: the host's resolver may hold loopback's 53)
    assert "kubernetes cluster.local in-addr.arpa ip6.arpa {" in text
    assert "kubeconfig /k/admin.kubeconfig" in text
    assert "forward . /etc/resolv.conf" in text
    assert f"ready 127.0.0.1:{dns.READY_PORT}" in text
    assert text.count("allow net 10.88.7.0/24 127.0.0.0/8") == 2 and text.count("block") == 2  # (Pods only)
    assert "pods " not in text  # (no Pod watch: the benchmarks' 100k Pods would all be in CoreDNS's memory)


def test_kube_dns_is_a_headless_service_whose_endpointslice_names_the_host():
    (svc_path, svc), (slice_path, eps) = dns.kube_dns_objects("192.0.2.7")
    assert svc_path == "/api/v1/namespaces/kube-system/services"
    assert svc["spec"]["clusterIP"] == "None" and "selector" not in svc["spec"]
    assert {(p["protocol"], p["port"]) for p in svc["spec"]["ports"]} == {("UDP", 53), ("TCP", 53)}
    assert slice_path == "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices"
    assert eps["metadata"]["labels"]["kubernetes.io/service-name"] == "kube-dns"
    assert eps["endpoints"] == [{"addresses": ["192.0.2.7"], "conditions": {"ready": True}}]


def test_the_kubelet_names_cluster_dns_only_when_given(tmp_path):
    paths = realnode.Paths(tmp_path)
    without = json.loads(realnode.kubelet_config(paths))
    assert "clusterDNS" not in without and "clusterDomain" not in without
    with_dns = json.loads(realnode.kubelet_config(paths, "192.0.2.7"))
    assert with_dns["clusterDNS"] == ["192.0.2.7"] and with_dns["clusterDomain"] == "cluster.local"


def test_write_config_says_when_the_kubelets_configuration_changed(tmp_path):
    paths = realnode.Paths(tmp_path)
    assert realnode.write_config(paths) is True
    assert realnode.write_config(paths) is False
    assert realnode.write_config(paths, cluster_dns="192.0.2.7") is True
    assert realnode.write_config(paths, cluster_dns="192.0.2.7") is False
