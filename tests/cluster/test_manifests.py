"""Every object the chart renders is accepted by a real kube-apiserver (server-side dry run)."""

from __future__ import annotations

import pytest
import yaml

from sunk.kube import client as kube
from sunk_dev import chart

# kind -> (api path prefix, plural, namespaced)
PATHS = {
    "Namespace": ("/api/v1", "namespaces", False),
    "Secret": ("/api/v1", "secrets", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Service": ("/api/v1", "services", True),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "Pod": ("/api/v1", "pods", True),  # the `helm test` hook's (templates/tests)
    "Job": ("/apis/batch/v1", "jobs", True),  # the uninstall hook's (syncer.releaseNodesOnUninstall)
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "PodDisruptionBudget": ("/apis/policy/v1", "poddisruptionbudgets", True),
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", "networkpolicies", True),
    "CustomResourceDefinition": ("/apis/apiextensions.k8s.io/v1", "customresourcedefinitions", False),
}

# Every component, and the Grafana dashboard, and the CRDs (--include-crds). Not the PodMonitor: the
# dev cluster has no Prometheus Operator; nor NodeSets, whose CRD a dry run does not install.
EVERYTHING = {"extender": {"enabled": True}, "operator": {"enabled": True},
              "monitoring": {"dashboard": {"enabled": True}}}
# scheduler.scope.type namespace: Roles and RoleBindings in namespaces the dev cluster has.
NAMESPACE_SCOPE = {"scheduler": {"scope": {"type": "namespace", "namespaces": ["default", "kube-public"]}}}


def _documents():
    helm = chart.helm_binary()
    for label, values, kinds in (("everything", EVERYTHING, None),
                                 ("namespace-scope", NAMESPACE_SCOPE, {"Role", "RoleBinding"})):
        for doc in chart.render(values, helm=helm, extra_args=["--include-crds"]):
            if kinds is None or doc["kind"] in kinds:
                meta = doc["metadata"]
                yield pytest.param(doc, id=f"{label}:{doc['kind']}/{meta.get('namespace', '')}/{meta['name']}")


DOCUMENTS = list(_documents())


def test_every_kind_rendered_has_an_api_path():
    kinds = {doc.values[0]["kind"] for doc in DOCUMENTS}
    assert kinds <= set(PATHS), kinds - set(PATHS)


@pytest.mark.parametrize("doc", DOCUMENTS)
def test_rendered_object_is_accepted_by_the_apiserver(kube_api, doc):
    prefix, plural, namespaced = PATHS[doc["kind"]]
    namespace = doc["metadata"].get("namespace")
    assert bool(namespace) == namespaced, "namespaced objects name their namespace, cluster objects do not"
    path = f"{prefix}/namespaces/{namespace}/{plural}" if namespaced else f"{prefix}/{plural}"
    try:
        kube.request(kube_api, "POST", path, query={"dryRun": "All", "fieldValidation": "Strict"}, body=doc)
    except kube.ApiError as exc:
        assert exc.status == 409, exc  # exists already (e.g. applied by test_rbac.py): the schema was fine


def test_kube_scheduler_configuration_is_well_formed():
    docs = chart.render(EVERYTHING, helm=chart.helm_binary())
    config = yaml.safe_load(chart.find(docs, "ConfigMap", "sunk-kube-scheduler-config")["data"]["config.yaml"])
    assert config["kind"] == "KubeSchedulerConfiguration"
    extender = config["extenders"][0]
    assert {extender[k] for k in ("filterVerb", "prioritizeVerb", "bindVerb", "preemptVerb")} == {
        "filter", "prioritize", "bind", "preempt"}
    assert extender["nodeCacheCapable"] is True
    assert [p["schedulerName"] for p in config["profiles"]] == ["slurm-sunk-extender"]
