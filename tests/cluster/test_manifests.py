"""Every manifest an operator applies is accepted by a real kube-apiserver (server-side dry run)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sunk.kube import client as kube

MANIFESTS = Path(__file__).parents[2] / "manifests"

# kind -> (api path prefix, plural, namespaced)
PATHS = {
    "Namespace": ("/api/v1", "namespaces", False),
    "Secret": ("/api/v1", "secrets", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Service": ("/api/v1", "services", True),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "PodDisruptionBudget": ("/apis/policy/v1", "poddisruptionbudgets", True),
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", "networkpolicies", True),
    "CustomResourceDefinition": ("/apis/apiextensions.k8s.io/v1", "customresourcedefinitions", False),
}


def _documents():
    listed = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())["resources"]
    for name in listed:
        for doc in yaml.safe_load_all((MANIFESTS / name).read_text()):
            if doc:
                yield pytest.param(doc, id=f"{name}:{doc['kind']}/{doc['metadata']['name']}")


def test_every_kind_shipped_has_an_api_path():
    kinds = {doc.values[0]["kind"] for doc in _documents()}
    assert kinds <= set(PATHS), kinds - set(PATHS)


def test_kustomization_lists_every_manifest():
    listed = set(yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())["resources"])
    present = {p.name for p in MANIFESTS.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


@pytest.mark.parametrize("doc", list(_documents()))
def test_manifest_is_accepted_by_the_apiserver(kube_api, doc):
    prefix, plural, namespaced = PATHS[doc["kind"]]
    namespace = doc["metadata"].get("namespace")
    assert bool(namespace) == namespaced, "namespaced objects name their namespace, cluster objects do not"
    path = f"{prefix}/namespaces/{namespace}/{plural}" if namespaced else f"{prefix}/{plural}"
    try:
        kube.request(kube_api, "POST", path, query={"dryRun": "All", "fieldValidation": "Strict"}, body=doc)
    except kube.ApiError as exc:
        assert exc.status == 409, exc  # exists already (the dev cluster's slurm namespace): the schema was fine


def test_kube_scheduler_configuration_is_well_formed():
    docs = {d["metadata"]["name"]: d for d in yaml.safe_load_all((MANIFESTS / "extender.yaml").read_text())}
    config = yaml.safe_load(docs["sunk-kube-scheduler-config"]["data"]["config.yaml"])
    assert config["kind"] == "KubeSchedulerConfiguration"
    extender = config["extenders"][0]
    assert {extender[k] for k in ("filterVerb", "prioritizeVerb", "bindVerb", "preemptVerb")} == {
        "filter", "prioritize", "bind", "preempt"}
    assert extender["nodeCacheCapable"] is True
    assert [p["schedulerName"] for p in config["profiles"]] == ["slurm-sunk-extender"]
