"""The Helm chart (manifests/chart/sunk), rendered by the real helm: every switch, and what it renders.

No cluster: ``helm template`` and ``helm lint`` only (helm is the dev cluster's pinned build,
built into its cache the first time; sunk_dev.chart). What an apiserver makes of the objects
is tests/cluster/test_manifests.py's and test_chart_install.py's; the hardening of every
Pod, budget, Role and NetworkPolicy is test_manifest_hardening.py's.
"""

from __future__ import annotations

import argparse
import base64
import copy
import datetime
import itertools
import json
import re
import socket
import ssl
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

import sunk
from sunk import scripts
from sunk.commands.scheduler import add_common_arguments
from sunk.commands.syncer import build_parser, ensure_config, ensure_secrets_parser, release_config, release_parser
from sunk.commands.web import TLS
from sunk.hooks.auth import weakness
from sunk.scripts import shipped_script
from sunk.slurm.errors import SlurmUnavailable
from sunk.slurm.settings import settings_from
from sunk.syncer.ensuresecrets import EnsureConfig
from sunk.translate import chartsecrets as cs
from sunk.translate.dra import DeviceMapping
from sunk.translate.lock import tolerates_lock
from sunk.translate.policy import parse_policy
from sunk_dev import chart
from sunk_dev.chart import find, flags, merged

ROOT = Path(__file__).resolve().parents[2]
HELM = chart.helm_binary()
NS = chart.NAMESPACE


def render(values: dict[str, Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    return chart.render(values, helm=HELM, **kwargs)


def refusal(values: dict[str, Any], **kwargs: Any) -> str:
    """helm's message when it refuses ``values``."""
    with pytest.raises(chart.RenderError) as caught:
        chart.render(values, helm=HELM, **kwargs)
    return str(caught.value)


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def names(docs: list[dict[str, Any]], kind: str) -> set[str]:
    return {d["metadata"]["name"] for d in of_kind(docs, kind)}


def verbs(role: dict[str, Any], resource: str, group: str = "") -> set[str]:
    return {v for r in role.get("rules") or [] if group in r["apiGroups"] and resource in r["resources"]
            for v in r["verbs"]}


def subjects(binding: dict[str, Any]) -> set[tuple[str, str]]:
    return {(s["namespace"], s["name"]) for s in binding["subjects"]}


# ---- the chart itself --------------------------------------------------------------------------


@pytest.mark.parametrize("values", [{}, {"extender": {"enabled": True}, "operator": {"enabled": True},
                                        "monitoring": {"podMonitor": {"enabled": True},
                                                       "dashboard": {"enabled": True}},
                                        "scheduler": {"scope": {"type": "namespace"}}}],
                         ids=["defaults", "everything"])
def test_helm_lint_passes(values):
    done = chart.lint(values, helm=HELM)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_chart_runs_the_image_of_this_version():
    meta = yaml.safe_load((chart.CHART / "Chart.yaml").read_text())
    assert meta["appVersion"] == sunk.__version__
    deployment = find(render(), "Deployment", "sunk-syncer")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == f"sunk:{sunk.__version__}"


@pytest.mark.parametrize("script", ["prolog.sh", "epilog.sh", "common.sh"])
def test_the_charts_copies_of_the_scripts_are_the_repositorys(script):
    """The chart can only read its own files: its copies must be sunk/scripts' byte for byte."""
    assert (chart.CHART / "files" / script).read_bytes() == (ROOT / "sunk" / "scripts" / script).read_bytes()


@pytest.mark.parametrize("script", ["prolog.sh", "epilog.sh"])
def test_the_shipped_prolog_and_epilog_are_self_contained_as_the_scheduler_and_dev_cluster_ship_them(script):
    """helm inlines the library the scripts source as shipped_script does: nothing is mounted beside them."""
    config_map = find(render(), "ConfigMap", "sunk-slurm-hooks")
    assert config_map["data"][script] == shipped_script(script)
    assert scripts.SOURCE_LINE not in config_map["data"][script]


def test_the_crds_are_the_charts():
    """One copy of the CRDs: the chart's crds/ (Helm installs them before the templates)."""
    ours = {p.name: p.read_bytes() for p in (chart.CHART / "crds").glob("*.yaml")}
    assert set(ours) == {"sunk.coreweave.com_nodesets.yaml", "sunk.coreweave.com_nodeslices.yaml",
                         "sunk.coreweave.com_slurmclusters.yaml"}
    assert not (ROOT / "manifests" / "crds").exists()
    for name, text in ours.items():
        for doc in yaml.safe_load_all(text):
            assert doc["kind"] == "CustomResourceDefinition", name
            assert doc["spec"]["group"] == "sunk.coreweave.com", name


def test_nodesets_from_values_are_of_a_version_the_crd_serves():
    docs = render({"nodeSets": [{"name": "gpu", "spec": {"replicas": 2}}]})
    nodeset = find(docs, "NodeSet", "gpu", NS)
    assert nodeset["spec"] == {"replicas": 2}
    crds = [doc for p in (chart.CHART / "crds").glob("*.yaml") for doc in yaml.safe_load_all(p.read_text())
            if doc and doc["spec"]["names"]["kind"] == "NodeSet"]
    group, version = nodeset["apiVersion"].split("/")
    served = {v["name"] for v in crds[0]["spec"]["versions"] if v.get("served")}
    assert group == crds[0]["spec"]["group"] and version in served, (nodeset["apiVersion"], served)


# ---- every switch combination ------------------------------------------------------------------

SWITCHES = ("scheduler", "extender", "operator", "monitoring", "namespace_scope", "node_permissions")


def switched(on: dict[str, bool]) -> dict[str, Any]:
    return {
        "scheduler": {"enabled": on["scheduler"],
                      "scope": {"type": "namespace" if on["namespace_scope"] else "cluster"}},
        "extender": {"enabled": on["extender"]},
        "operator": {"enabled": on["operator"]},
        "monitoring": {"podMonitor": {"enabled": on["monitoring"]}, "dashboard": {"enabled": on["monitoring"]}},
        # (node locking needs the Node rights, so it is off with them here; every pair of the two
        # is test_the_syncers_rbac_is_what_its_code_calls')
        "syncer": {"nodePermissions": {"enabled": on["node_permissions"]},
                   "nodeLocking": {"enabled": on["node_permissions"]}},
    }


COMBINATIONS = [dict(zip(SWITCHES, bits, strict=True)) for bits in itertools.product((False, True), repeat=6)]


@pytest.mark.parametrize("on", COMBINATIONS, ids=lambda on: ",".join(k for k, v in on.items() if v) or "none")
def test_every_switch_combination_renders_what_it_says(on):
    docs = render(switched(on))
    deployments = names(docs, "Deployment")
    expected = {"sunk-syncer"} | ({"sunk-scheduler"} if on["scheduler"] else set()) \
        | ({"sunk-extender", "sunk-kube-scheduler"} if on["extender"] else set()) \
        | ({"sunk-operator"} if on["operator"] else set())
    assert deployments == expected
    # Every Deployment's ServiceAccount, and every Role a binding names, is rendered.
    for deployment in of_kind(docs, "Deployment"):
        find(docs, "ServiceAccount", deployment["spec"]["template"]["spec"]["serviceAccountName"], NS)
    builtin = {"system:kube-scheduler", "system:volume-scheduler", "extension-apiserver-authentication-reader"}
    for binding in of_kind(docs, "RoleBinding") + of_kind(docs, "ClusterRoleBinding"):
        ref = binding["roleRef"]
        if ref["name"] not in builtin:
            where = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
            find(docs, ref["kind"], ref["name"], where)
        for account in subjects(binding):
            find(docs, "ServiceAccount", account[1], account[0])
    # The schedulers' Pod rules: a ClusterRole, or Roles; never both, never for nobody.
    scheduling = on["scheduler"] or on["extender"]
    pod_roles = [r for r in of_kind(docs, "ClusterRole") + of_kind(docs, "Role") if "pods/binding" in
                 {res for rule in r["rules"] for res in rule["resources"]}]
    if not scheduling:
        assert not pod_roles
    elif on["namespace_scope"]:
        assert {r["kind"] for r in pod_roles} == {"Role"}
    else:
        assert {r["kind"] for r in pod_roles} == {"ClusterRole"}
    syncer_role = find(docs, "ClusterRole", "slurm-sunk-syncer")
    assert ("patch" in verbs(syncer_role, "nodes")) is on["node_permissions"]
    assert bool(verbs(syncer_role, "nodes/status")) is on["node_permissions"]
    assert ({"PodMonitor"} <= {d["kind"] for d in docs}) is on["monitoring"]
    assert ("sunk-grafana-dashboard" in names(docs, "ConfigMap")) is on["monitoring"]
    ensured = ensure_config_of(docs, "sunk-ensure-secrets")
    assert ({"sunk-extender-tls", "sunk-extender-client-tls"} <= set(ensured.names)) is on["extender"]
    # Budgets and policies follow the Deployments.
    assert names(docs, "PodDisruptionBudget") == expected
    assert names(docs, "NetworkPolicy") == expected - {"sunk-kube-scheduler"}


# ---- the scheduler: name and scope -------------------------------------------------------------


def test_the_scheduler_name_defaults_to_namespace_dash_release():
    docs = render(release="slurm", namespace="tenant-slurm-staging")
    assert flags(chart.container_args(docs, "slurm-sunk-scheduler"))["scheduler-name"] == "tenant-slurm-staging-slurm"
    docs = render({"scheduler": {"name": "my-scheduler"}, "extender": {"enabled": True}})
    assert flags(chart.container_args(docs, "sunk-scheduler"))["scheduler-name"] == "my-scheduler"
    assert flags(chart.container_args(docs, "sunk-extender"))["scheduler-name"] == "slurm-sunk-extender"


def test_scope_cluster_is_a_cluster_role_for_both_front_ends():
    docs = render({"extender": {"enabled": True}})
    role = find(docs, "ClusterRole", "slurm-sunk-scheduler")
    assert verbs(role, "pods") == {"get", "list", "watch", "patch", "delete"}
    assert verbs(role, "pods/binding") == {"create"} and verbs(role, "pods/status") == {"patch"}
    assert subjects(find(docs, "ClusterRoleBinding", "slurm-sunk-scheduler")) == {
        (NS, "sunk-scheduler"), (NS, "sunk-extender")}
    assert not [r for r in of_kind(docs, "Role") if verbs(r, "pods/binding")]
    for deployment in ("sunk-scheduler", "sunk-extender"):
        args = flags(chart.container_args(docs, deployment))
        assert args["scope"] == "cluster" and "watch-namespace" not in args


@pytest.mark.parametrize("namespaces", [["team-a", "team-b"], "team-a, team-b", "team-a,team-b,team-a"])
def test_scope_namespace_is_a_role_and_binding_in_each_namespace(namespaces):
    docs = render({"scheduler": {"scope": {"type": "namespace", "namespaces": namespaces}},
                   "extender": {"enabled": True}})
    for namespace in ("team-a", "team-b"):
        role = find(docs, "Role", "sunk-scheduler", namespace)
        assert verbs(role, "pods") == {"get", "list", "watch", "patch", "delete"}
        assert verbs(role, "events") == {"create", "patch"}
        binding = find(docs, "RoleBinding", "sunk-scheduler", namespace)
        assert binding["roleRef"]["name"] == "sunk-scheduler"
        assert subjects(binding) == {(NS, "sunk-scheduler"), (NS, "sunk-extender")}
    assert "slurm-sunk-scheduler" not in names(docs, "ClusterRole")
    # The slurmd Pods (in slurm, not watched): read only.
    slurmd = find(docs, "Role", "sunk-scheduler-slurmd", NS)
    assert [(r["resources"], r["verbs"]) for r in slurmd["rules"]] == [(["pods"], ["list", "watch"])]
    # Nodes stay cluster-wide, for both (their Ready condition: a Pod stuck terminating on a lost Node).
    assert subjects(find(docs, "ClusterRoleBinding", "slurm-sunk-scheduler-nodes")) == {
        (NS, "sunk-scheduler"), (NS, "sunk-extender")}
    for deployment in ("sunk-scheduler", "sunk-extender"):
        args = flags(chart.container_args(docs, deployment))
        assert args["scope"] == "namespace" and args["watch-namespace"] == "team-a,team-b"


def test_scope_namespace_defaults_to_the_release_namespace():
    docs = render({"scheduler": {"scope": {"type": "namespace"}}})
    assert {(r["metadata"]["namespace"], r["metadata"]["name"]) for r in of_kind(docs, "Role")
            if verbs(r, "pods/binding")} == {(NS, "sunk-scheduler")}
    assert "sunk-scheduler-slurmd" not in names(docs, "Role")  # the slurmd Pods are in the watched namespace
    assert flags(chart.container_args(docs, "sunk-scheduler"))["watch-namespace"] == NS


# ---- the syncer --------------------------------------------------------------------------------


# What the Syncer's code calls (docs/permissions.md has the call behind each), by what its parsed
# flags turn on. (resource, verb) pairs of the core API group.
SYNCER_CORE = {  # state sync, always: informers, labels and conditions on slurmd Pods, Events
    ("pods", "list"), ("pods", "watch"), ("pods", "get"), ("pods", "patch"), ("pods/status", "patch"),
    ("nodes", "list"), ("nodes", "watch"), ("events", "create"), ("events", "patch")}
SYNCER_NODE_WRITES = {  # --node-permissions-enabled: kubeside._sync_node (update_with_retry: get after a 409)
    ("nodes/status", "patch"), ("nodes", "get")}
SYNCER_LOCKING = {  # the node-locking plugin: the taint, evictions, the reboot condition
    ("nodes", "patch"), ("nodes", "get"), ("pods/eviction", "create"), ("nodes/status", "patch")}
GOOD_SECRET = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


def granted(role: dict[str, Any]) -> set[tuple[str, str]]:
    return {(resource, verb) for rule in role["rules"] if rule["apiGroups"] == [""]
            for resource in rule["resources"] for verb in rule["verbs"]}


def syncer_startup(args: list[str], tmp_path: Path) -> Any:
    """The real sunk-syncer start-up on rendered args (its root secret read from a file of the test's)."""
    from sunk.commands.syncer import parse_args

    secret = tmp_path / "syncer-token"
    secret.write_text(GOOD_SECRET)
    return parse_args([*args, f"--hooks-token-file={secret}"])


@pytest.mark.parametrize("permissions", [True, False], ids=["node-permissions", "no-node-permissions"])
@pytest.mark.parametrize("locking", [True, False], ids=["node-locking", "no-node-locking"])
def test_the_syncers_rbac_is_what_its_code_calls(locking, permissions, tmp_path, capsys):
    """Every pair of syncer.nodeLocking and syncer.nodePermissions: the ClusterRole grants exactly what
    the Syncer, started with the rendered flags, will call; the one pair that cannot work (a lock is a
    taint) is refused by the chart, and by the Syncer when its flags say so."""
    values = {"syncer": {"nodeLocking": {"enabled": locking}, "nodePermissions": {"enabled": permissions}}}
    if locking and not permissions:
        assert "syncer.nodePermissions.enabled is false, but node locking" in refusal(values)
        args = chart.container_args(render(), "sunk-syncer")
        args = [a.replace("--node-permissions-enabled=true", "--node-permissions-enabled=false") for a in args]
        with pytest.raises(SystemExit) as exc:
            syncer_startup(args, tmp_path)
        assert exc.value.code == 2 and "node locking" in capsys.readouterr().err
        return
    docs = render(values)
    startup = syncer_startup(chart.container_args(docs, "sunk-syncer"), tmp_path)
    assert (startup.node_locking is not None) is locking and startup.slurm_metrics is not None
    assert startup.config.node_permissions is permissions
    calls = SYNCER_CORE | (SYNCER_NODE_WRITES if startup.config.node_permissions else set()) \
        | (SYNCER_LOCKING if startup.node_locking is not None else set())
    assert granted(find(docs, "ClusterRole", "slurm-sunk-syncer")) == calls
    # What Slurm mounts: the prolog, epilog and their hooks.env only where a hook API answers them.
    config_map = find(docs, "ConfigMap", "sunk-slurm-hooks")
    assert set(config_map["data"]) == ({"hooks.env", "prolog.sh", "epilog.sh", "sunk.conf"} if locking
                                       else {"sunk.conf"})
    volumes = {v["name"] for v in find(docs, "Deployment", "sunk-syncer")["spec"]["template"]["spec"]["volumes"]}
    assert "hooks" not in volumes  # the root secret of HMAC node tokens: not under serviceAccountToken (the default)
    hmac = find(render({**values, "hooks": {"nodeAuth": "hmac"}}), "Deployment", "sunk-syncer")
    assert ("hooks" in {v["name"] for v in hmac["spec"]["template"]["spec"]["volumes"]}) is locking


def test_the_reboot_condition_and_reason():
    args = flags(chart.container_args(render(), "sunk-syncer"))
    assert (args["node-reboot-condition"], args["node-reboot-reason"]) == ("PhaseState", "production-powerreset")
    args = flags(chart.container_args(render({"syncer": {"hooksAPI": {
        "nodeRebootCondition": "NeedsReboot", "nodeRebootReason": "sunk"}}}), "sunk-syncer"))
    assert (args["node-reboot-condition"], args["node-reboot-reason"]) == ("NeedsReboot", "sunk")


@pytest.mark.parametrize("clean_up", [False, True], ids=["no-clean-up", "clean-up"])
def test_slurm_node_clean_up_renders_the_flag_and_reads_nodeslices_only_when_on(clean_up, tmp_path):
    """The seeds' value turns the Syncer's clean-up on; NodeSlices are read (list, watch: its informer) in the
    slurmd namespace only then, which is where the Syncer, started with the rendered flags, watches them."""
    docs = render({"syncer": {"config": {"syncer": {"slurmNodeCleanUp": clean_up}}},
                   "slurmd": {"namespace": "slurmd-pods"}})
    startup = syncer_startup(chart.container_args(docs, "sunk-syncer"), tmp_path)
    assert startup.config.slurm_node_clean_up is clean_up
    readers = [r for r in of_kind(docs, "Role") + of_kind(docs, "ClusterRole")
               if verbs(r, "nodeslices", "sunk.coreweave.com")]
    if not clean_up:
        assert not readers
        return
    (role,) = readers
    assert role["kind"] == "Role" and role["metadata"]["namespace"] == startup.config.watch_namespace == "slurmd-pods"
    assert verbs(role, "nodeslices", "sunk.coreweave.com") == {"list", "watch"}
    assert len(role["rules"]) == 1  # nothing else
    binding = find(docs, "RoleBinding", role["metadata"]["name"], "slurmd-pods")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert subjects(binding) == {(NS, "sunk-syncer")}


def test_the_syncer_watches_the_slurmd_namespace_and_elects_in_its_own():
    # (helm merges maps with the defaults: null drops the default label)
    docs = render({"slurmd": {"namespace": "slurmd-pods", "labels": {
        "app.kubernetes.io/name": None, "app": "slurmd", "tier": "compute"}}})
    args = flags(chart.container_args(docs, "sunk-syncer"))
    assert args["watch-namespace"] == "slurmd-pods"
    assert args["slurmd-selector"] == "app=slurmd,tier=compute"
    assert (args["leader-election-id"], args["leader-election-namespace"]) == ("sunk-syncer", NS)
    assert find(docs, "ConfigMap", "sunk-slurm-hooks")["metadata"]["namespace"] == "slurmd-pods"
    policy = find(docs, "NetworkPolicy", "sunk-syncer")
    peer = policy["spec"]["ingress"][0]["from"][0]
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "slurmd-pods"}
    assert peer["podSelector"]["matchLabels"] == {"app": "slurmd", "tier": "compute"}


# ---- the metrics port: Prometheus's Pods, in Prometheus's namespace (networkPolicy.prometheus) --------

EVERY_POLICY = {"extender": {"enabled": True}, "operator": {"enabled": True}}
METRICS_POLICIES = {"sunk-syncer", "sunk-scheduler", "sunk-extender", "sunk-operator"}


def metrics_peers(docs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each NetworkPolicy's ``from`` peers of every rule naming port 8080, by policy name."""
    return {policy["metadata"]["name"]: [peer for rule in policy["spec"]["ingress"]
                                         if 8080 in [p["port"] for p in rule.get("ports") or []]
                                         for peer in rule.get("from") or []]
            for policy in of_kind(docs, "NetworkPolicy")}


def test_the_metrics_port_admits_the_prometheus_pods_of_the_monitoring_namespace_only():
    peers = metrics_peers(render(EVERY_POLICY))
    assert set(peers) == METRICS_POLICIES
    for name, found in peers.items():
        # One peer naming both: a Pod must match the podSelector AND sit in the namespace.
        assert found == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                          "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}], name


@pytest.mark.parametrize(("prometheus", "namespace_labels", "pod_labels"), [
    ({"namespace": "observability"}, {"kubernetes.io/metadata.name": "observability"},
     {"app.kubernetes.io/name": "prometheus"}),
    # (helm merges maps with the defaults: null drops the default label)
    ({"podLabels": {"app.kubernetes.io/name": None, "app": "prometheus", "release": "kps"}},
     {"kubernetes.io/metadata.name": "monitoring"}, {"app": "prometheus", "release": "kps"}),
    ({"namespace": "ignored", "namespaceLabels": {"team": "observability", "tier": "platform"}},
     {"team": "observability", "tier": "platform"}, {"app.kubernetes.io/name": "prometheus"}),
], ids=["namespace", "podLabels", "namespaceLabels"])
def test_the_metrics_peer_follows_network_policy_prometheus(prometheus, namespace_labels, pod_labels):
    peers = metrics_peers(render({**EVERY_POLICY, "networkPolicy": {"prometheus": prometheus}}))
    assert set(peers) == METRICS_POLICIES
    for name, found in peers.items():
        assert found == [{"namespaceSelector": {"matchLabels": namespace_labels},
                          "podSelector": {"matchLabels": pod_labels}}], name


@pytest.mark.parametrize("values", [
    {}, {"networkPolicy": {"prometheus": {"namespace": "observability"}}},
    {"networkPolicy": {"prometheus": {"namespaceLabels": {"team": "observability"}}}},
    {"scheduler": {"scope": {"type": "namespace"}}},
], ids=["defaults", "namespace", "namespaceLabels", "namespace-scope"])
def test_no_metrics_peer_is_a_pod_of_any_namespace(values):
    # A podSelector alone admits the policy's own namespace, and beside `namespaceSelector: {}`
    # every namespace: a tenant's Pod labelled like Prometheus would read every tenant's jobs.
    peers = metrics_peers(render({**EVERY_POLICY, **values}))
    assert set(peers) == METRICS_POLICIES
    for name, found in peers.items():
        assert found, f"{name}: no metrics peer"
        for peer in found:
            assert "ipBlock" not in peer, f"{name}: {peer}"
            assert peer.get("podSelector", {}).get("matchLabels"), f"{name}: every Pod of a namespace: {peer}"
            assert peer.get("namespaceSelector", {}).get("matchLabels"), f"{name}: any namespace: {peer}"
            assert set(peer) == {"namespaceSelector", "podSelector"}, f"{name}: {peer}"


@pytest.mark.parametrize("enabled", [True, False])
def test_the_removed_prometheus_labels_value_fails_and_names_the_new_keys(enabled):
    message = refusal({"networkPolicy": {"enabled": enabled,
                                         "prometheusLabels": {"app.kubernetes.io/name": "prometheus"}}})
    assert "networkPolicy.prometheusLabels is gone" in message
    for key in ("networkPolicy.prometheus.podLabels", "networkPolicy.prometheus.namespace",
                "networkPolicy.prometheus.namespaceLabels"):
        assert key in message


# ---- the uninstall hook (syncer.releaseNodesOnUninstall) ------------------------------------------


HOOK = "sunk-release-nodes"
HOOK_OBJECTS = {("ServiceAccount", HOOK), ("ClusterRole", "slurm-sunk-release-nodes"),
                ("ClusterRoleBinding", "slurm-sunk-release-nodes"), ("Role", HOOK), ("RoleBinding", HOOK),
                ("Role", f"{HOOK}-slurmd"), ("RoleBinding", f"{HOOK}-slurmd"), ("Job", HOOK)}


def hooks(docs: list[dict[str, Any]], component: str = HOOK) -> list[dict[str, Any]]:
    """The objects of one hook (by default the uninstall's, sunk-syncer release-nodes)."""
    return [d for d in docs if "helm.sh/hook" in (d["metadata"].get("annotations") or {})
            and d["metadata"]["labels"]["app.kubernetes.io/name"] == component]


def hook_pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return find(docs, "Job", HOOK)["spec"]["template"]


def hook_args(docs: list[dict[str, Any]]) -> list[str]:
    return list(hook_pod(docs)["spec"]["containers"][0]["args"])


def test_the_uninstall_hook_is_rendered_with_the_syncer_and_its_value_only():
    assert {(d["kind"], d["metadata"]["name"]) for d in hooks(render())} == HOOK_OBJECTS
    unlocked = render({"syncer": {"nodeLocking": {"enabled": False}, "nodePermissions": {"enabled": False}}})
    assert {(d["kind"], d["metadata"]["name"]) for d in hooks(unlocked)} == {
        ("ServiceAccount", HOOK), ("Role", HOOK), ("RoleBinding", HOOK), ("Role", f"{HOOK}-slurmd"),
        ("RoleBinding", f"{HOOK}-slurmd"), ("Job", HOOK)}
    # without node locking: the slurmd Pods only listed (which Slurm nodes are the release's), no Node right
    assert find(unlocked, "Role", f"{HOOK}-slurmd")["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    assert flags(hook_args(unlocked))["release-locks"] == "false"
    assert not hooks(render({"syncer": {"releaseNodesOnUninstall": False}}))
    assert not hooks(render({"syncer": {"enabled": False}}))
    assert "at '/syncer/releaseNodesOnUninstall': got string, want boolean" in refusal(
        {"syncer": {"releaseNodesOnUninstall": "yes"}})


def test_the_hook_runs_before_anything_is_deleted_after_its_rbac_and_goes_once_it_succeeded():
    docs = hooks(render())
    weights = {(d["kind"], d["metadata"]["name"]): int(d["metadata"]["annotations"]["helm.sh/hook-weight"])
               for d in docs}
    for doc in docs:
        annotations = doc["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-delete", doc["metadata"]["name"]
        # a failed Job is replaced by the next try's, a succeeded one deleted with its ServiceAccount and rights
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    assert all(weight < weights[("Job", HOOK)] for key, weight in weights.items() if key != ("Job", HOOK))
    job = find(docs, "Job", HOOK)["spec"]
    assert job["template"]["spec"]["restartPolicy"] == "Never"
    assert 0 <= job["backoffLimit"] <= 2 and job["ttlSecondsAfterFinished"] > 0
    # Bounded, below helm's own --timeout (5m) that waits for it, and above the Syncer's wait in it.
    parsed = release_parser().parse_args(hook_args(docs)[1:])
    assert parsed.timeout < job["activeDeadlineSeconds"] < 300


# ---- the uninstall's end of the NodeSets (operator.endNodeSetsOnUninstall) -----------------------------------


END = "sunk-end-nodesets"
WITH_NODESETS = {"operator": {"enabled": True}, "slurmd": {"namespace": "slurmd-pods"},
                 "nodeSets": [{"name": "gpu", "spec": {}}, {"name": "cpu", "spec": {}}]}


def test_the_nodesets_are_ended_by_a_hook_before_the_syncers_with_rights_to_exactly_them():
    """With the operator and NodeSets: a pre-delete Job that runs `sunk-operator end-nodesets` on each NodeSet
    of the release (cancelling their jobs by default), before the Syncer's release-nodes hook, with a Role that
    may get, patch and delete those NodeSets by name and nothing else; bounded below helm's 5m."""
    from sunk.commands.operator import end_nodesets_parser

    docs = render(WITH_NODESETS)
    ours = hooks(docs, END)
    assert {(d["kind"], d["metadata"]["name"]) for d in ours} == {
        ("ServiceAccount", END), ("Role", END), ("RoleBinding", END), ("Role", f"{END}-operator"),
        ("RoleBinding", f"{END}-operator"), ("Job", END)}
    operator_role = find(ours, "Role", f"{END}-operator")
    assert operator_role["metadata"]["namespace"] == NS
    assert operator_role["rules"] == [{"apiGroups": ["apps"], "resources": ["deployments"],
                                       "resourceNames": ["sunk-operator"], "verbs": ["get"]}]
    role = find(ours, "Role", END)
    assert role["metadata"]["namespace"] == "slurmd-pods"
    assert role["rules"] == [{"apiGroups": ["sunk.coreweave.com"], "resources": ["nodesets"],
                              "resourceNames": ["gpu", "cpu"], "verbs": ["get", "patch", "delete"]}]
    assert subjects(find(ours, "RoleBinding", END)) == {(NS, END)}
    weight = {(d["kind"], d["metadata"]["name"]): int(d["metadata"]["annotations"]["helm.sh/hook-weight"])
              for d in hooks(docs, END) + hooks(docs)}
    assert max(w for (kind, name), w in weight.items() if name == END and kind != "Job") < weight[("Job", END)]
    assert weight[("Job", END)] < min(w for (_, name), w in weight.items() if name == HOOK)  # before the Syncer's
    job = find(ours, "Job", END)["spec"]
    pod = job["template"]["spec"]
    assert pod["serviceAccountName"] == END and pod["containers"][0]["command"] == ["sunk-operator"]
    assert pod["containers"][0]["image"] == find(docs, "Deployment", "sunk-operator")["spec"]["template"]["spec"][
        "containers"][0]["image"]
    assert "volumes" not in pod  # no Slurm credential: the operator cancels, the hook only deletes
    args = pod["containers"][0]["args"]
    assert args[0] == "end-nodesets"
    parsed = end_nodesets_parser().parse_args(args[1:])
    assert (parsed.namespace, parsed.nodeset, parsed.cancel_jobs) == ("slurmd-pods", ["gpu", "cpu"], True)
    assert (parsed.operator_deployment, parsed.operator_namespace) == ("sunk-operator", NS)
    find(docs, "Deployment", parsed.operator_deployment)  # (the one the chart renders)
    assert parsed.timeout < job["activeDeadlineSeconds"] < 300
    assert tolerates_lock({"spec": pod}, "NoSchedule")
    waiting = render({**WITH_NODESETS, "operator": {"enabled": True, "cancelJobsOnUninstall": False}})
    assert end_nodesets_parser().parse_args(hook_args_of(waiting, END)[1:]).cancel_jobs is False
    assert not hooks(render({**WITH_NODESETS, "operator": {"enabled": True, "endNodeSetsOnUninstall": False}}), END)
    assert not hooks(render({**WITH_NODESETS, "operator": {"enabled": False}}), END)
    assert not hooks(render({"operator": {"enabled": True}}), END)  # no NodeSet of the release: nothing to end


def test_the_dev_clusters_slurm_on_kubernetes_values_render_its_slurmcluster_nodeset_and_uninstall_hook():
    """What ``sunk-dev up --slurm-on-kubernetes`` and the cluster test install: helm takes the values whole (the
    schema too), and the release holds the SlurmCluster (its Pods on the real Nodes, through sunk's locks, and the
    chart's prolog and epilog for its slurmd Pods), the NodeSet naming it, one Syncer locking Nodes, and the hooks
    that end the NodeSets and then take back the Syncer's locks."""
    from sunk_dev import realnode, slurmonk8s

    docs = render(slurmonk8s.values(slurm_release="24.11", namespace=NS, cluster="slurm", storage_class="x"))
    spec = find(docs, "SlurmCluster", "slurm")["spec"]
    assert spec["slurm"]["release"] == "24.11" and spec["hooks"] == {"configMap": "sunk-slurm-hooks"}
    assert spec["placement"] == {"nodeSelector": {realnode.NODE_LABEL: "true"},
                                 "tolerations": [{"key": "sunk.coreweave.com/lock", "operator": "Exists"}]}
    assert find(docs, "NodeSet", slurmonk8s.NODESET)["spec"]["slurmCluster"] == "slurm"
    assert find(docs, "Deployment", "sunk-syncer")["spec"]["replicas"] == 1
    assert "prolog.sh" in find(docs, "ConfigMap", "sunk-slurm-hooks", NS)["data"]
    assert hooks(docs, END) and hooks(docs)


def hook_args_of(docs: list[dict[str, Any]], component: str) -> list[str]:
    return list(find(docs, "Job", component)["spec"]["template"]["spec"]["containers"][0]["args"])


@pytest.mark.parametrize("values", [
    {},
    {"slurm": {"api": {"user": "slurm"}, "auth": {"token": "", "existingSecret": "my-jwt",
                                                  "existingSecretKey": "jwt"}},
     "slurmd": {"namespace": "slurmd-pods", "labels": {"app.kubernetes.io/name": None, "app": "slurmd"}},
     "image": {"repository": "registry.example/sunk", "tag": "1.2.3"}, "logLevel": "debug"},
    {"slurm": {"auth": {"token": "", "jwtKey": {"enabled": True, "existingSecret": "slurm-jwt"}}},
     "syncer": {"image": {"tag": "9.9.9"}}, "lockToleration": False},
], ids=["defaults", "secret-of-yours-elsewhere", "jwt-key"])
def test_the_hook_reaches_slurm_and_kubernetes_as_the_syncer_does(values):
    """sunk's image (the Syncer's), the Syncer's Slurm credential and flags, its slurmd Pods, its Deployment
    and its lock toleration, as `sunk-syncer release-nodes` parses the rendered args."""
    docs = render(values)
    syncer = find(docs, "Deployment", "sunk-syncer")["spec"]["template"]
    pod = hook_pod(docs)
    container, syncer_container = pod["spec"]["containers"][0], syncer["spec"]["containers"][0]
    assert container["image"] == syncer_container["image"] and container["command"] == ["sunk-syncer"]
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "slurm-auth")
    assert volume == next(v for v in syncer["spec"]["volumes"] if v["name"] == "slurm-auth")
    mount = next(m for m in container["volumeMounts"] if m["name"] == "slurm-auth")
    assert mount == next(m for m in syncer_container["volumeMounts"] if m["name"] == "slurm-auth")
    args, syncer_args = hook_args(docs), flags(chart.container_args(docs, "sunk-syncer"))
    assert args[0] == "release-nodes"
    for flag in ("slurm-api-base", "slurm-auth-token-file", "slurm-jwt-key-file", "slurm-user", "watch-namespace",
                 "slurmd-selector", "zap-log-level"):
        assert flags(args).get(flag) == syncer_args.get(flag), flag
    parser = release_parser()
    parsed = parser.parse_args(args[1:])
    config = release_config(parsed)
    assert (config.namespace, config.syncer_deployment) == (NS, "sunk-syncer")
    assert not config.all_nodes  # another release's Nodes are its own
    settings = settings_from(parsed, parser)
    assert settings == settings_from(*_parsed_syncer(chart.container_args(docs, "sunk-syncer")))
    for effect in (None, "NoSchedule", "NoExecute"):
        assert tolerates_lock(pod, effect) is tolerates_lock(syncer, effect) is values.get("lockToleration", True)
    assert pod["spec"]["serviceAccountName"] == HOOK != syncer["spec"]["serviceAccountName"]


def _parsed_syncer(args: list[str]) -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    parser = syncer_parser()
    return parser.parse_args(args), parser


def hook_grants(docs: list[dict[str, Any]]) -> set[tuple[str, str, str, str | None, str | None]]:
    """What the hook's ServiceAccount may do: (verb, group, resource, namespace or None for anywhere, name or None
    for any), from every Role and ClusterRole bound to it."""
    out = set()
    for binding in of_kind(docs, "RoleBinding") + of_kind(docs, "ClusterRoleBinding"):
        if (NS, HOOK) not in subjects(binding):
            continue
        ref, where = binding["roleRef"], binding["metadata"].get("namespace")
        role = find(docs, ref["kind"], ref["name"], where if ref["kind"] == "Role" else None)
        for rule in role["rules"]:
            for group, resource, verb in itertools.product(rule["apiGroups"], rule["resources"], rule["verbs"]):
                for name in rule.get("resourceNames") or [None]:
                    out.add((verb, group, resource, where, name))
    return out


def covers(grant: tuple[str, str, str, str | None, str | None], call: tuple[str, str, str, str | None, str | None]
           ) -> bool:
    return grant[:3] == call[:3] and grant[3] in (None, call[3]) and grant[4] in (None, call[4])


@pytest.mark.parametrize("locking", [True, False], ids=["node-locking", "no-node-locking"])
@pytest.mark.parametrize("slurmd_namespace", [NS, "slurmd-pods"])
def test_the_hooks_rbac_is_exactly_what_release_nodes_calls(monkeypatch, slurmd_namespace, locking):
    """Run the release the rendered args ask for against an apiserver in memory that records every request as
    RBAC reads it, through each path (a conflict on a Node's taints, a refused Pod patch, the Syncer scaled
    back): the hook's Roles allow each request, and grant nothing no request needed. Without node locking
    there is no lock to take back, and no Node or slurmd Pod right (syncer.nodePermissions may be off)."""
    from release_fakes import Clock, drained_slurm, uninstalled_release

    from sunk.syncer.release import Release

    docs = render({"slurmd": {"namespace": slurmd_namespace},
                   "syncer": {"nodeLocking": {"enabled": locking}, "nodePermissions": {"enabled": locking}}})
    config = release_config(release_parser().parse_args(hook_args(docs)[1:]))
    assert config.locks is locking
    kube = uninstalled_release(monkeypatch, namespace=config.namespace, slurmd_namespace=config.watch_namespace)
    kube.fail[("patch", "worker-1")] = 409  # the taint list changed since the list: read again (get)
    kube.fail[("patch", "node1")] = 409  # a slurmd Pod patch refused: was it replaced (get)? then a failure ...
    slurm = drained_slurm()
    if not locking:
        slurm.read_error = SlurmUnavailable("down")  # (... or, without locks, an outage: the Syncer scaled back)
    clock = Clock()
    outcome = Release(object(), slurm, config, clock=clock, sleep=clock.sleep).run()  # type: ignore[arg-type]
    assert len(outcome.failures) == 1 and bool(outcome.unlocked and outcome.lifted) is locking
    calls, grants = set(kube.requests), hook_grants(docs)
    assert [(c[0], c[2]) for c in calls if c[2] == "deployments/scale"] == [("patch", "deployments/scale")]
    assert len([c for c in kube.requests if c[2] == "deployments/scale"]) == 2  # to 0, and back
    refused = {call for call in calls if not any(covers(grant, call) for grant in grants)}
    assert not refused, f"the hook's RBAC refuses {refused}"
    unused = {grant for grant in grants if not any(covers(grant, call) for call in calls)}
    assert not unused, f"the hook's RBAC grants {unused}, which release-nodes never sends"


# ---- Slurm: KillWait, endpoint and credential --------------------------------------------------


def test_one_kill_wait_feeds_slurm_conf_and_both_front_ends():
    docs = render({"slurm": {"killWait": 45}, "extender": {"enabled": True}})
    conf = find(docs, "ConfigMap", "sunk-slurm-hooks")["data"]["sunk.conf"]
    assert [line for line in conf.splitlines() if line.startswith("KillWait")] == ["KillWait=45"]
    for deployment in ("sunk-scheduler", "sunk-extender"):
        assert flags(chart.container_args(docs, deployment))["slurm-kill-wait"] == "45s"


def test_gangs_are_sized_by_jobs_always_and_by_podgroups_only_with_gang_pod_groups():
    """Both front ends decide gangs (docs/scheduler.md): they list and watch Jobs (batch), and, with
    scheduler.gangPodGroups, PodGroups (scheduling.x-k8s.io); in a ClusterRole or a Role per namespace."""
    docs = render({"extender": {"enabled": True}})
    role = find(docs, "ClusterRole", "slurm-sunk-scheduler")
    assert verbs(role, "jobs", "batch") == {"list", "watch"}
    assert not verbs(role, "podgroups", "scheduling.x-k8s.io")  # the informer runs only with the flag
    assert subjects(find(docs, "ClusterRoleBinding", "slurm-sunk-scheduler")) == {
        (NS, "sunk-scheduler"), (NS, "sunk-extender")}
    for deployment in ("sunk-scheduler", "sunk-extender"):
        args = flags(chart.container_args(docs, deployment))
        assert "gang-pod-groups" not in args and "gpu-types" not in args
    docs = render({"scheduler": {"gangPodGroups": True}, "extender": {"enabled": True}})
    role = find(docs, "ClusterRole", "slurm-sunk-scheduler")
    assert verbs(role, "podgroups", "scheduling.x-k8s.io") == {"list", "watch"}
    assert verbs(role, "jobs", "batch") == {"list", "watch"}
    for deployment in ("sunk-scheduler", "sunk-extender"):
        assert flags(chart.container_args(docs, deployment))["gang-pod-groups"] == "true"
    docs = render({"scheduler": {"gangPodGroups": True, "scope": {"type": "namespace", "namespaces": "team-a,team-b"}}})
    for namespace in ("team-a", "team-b"):
        role = find(docs, "Role", "sunk-scheduler", namespace)
        assert verbs(role, "jobs", "batch") == {"list", "watch"}
        assert verbs(role, "podgroups", "scheduling.x-k8s.io") == {"list", "watch"}
    assert not [r for r in of_kind(docs, "ClusterRole") if verbs(r, "jobs", "batch")]


def test_gpu_types_render_one_sorted_flag_for_both_front_ends():
    docs = render({"scheduler": {"gpuTypes": {"NVIDIA_L4": "l4", "H100_SXM": "h100", "A100-80GB": "a100"}},
                   "extender": {"enabled": True}})
    for deployment in ("sunk-scheduler", "sunk-extender"):
        args = flags(chart.container_args(docs, deployment))
        assert args["gpu-types"] == "A100-80GB=a100,H100_SXM=h100,NVIDIA_L4=l4"
    parsed, _ = scheduling_parser().parse_known_args(chart.container_args(docs, "sunk-scheduler"))
    assert parsed.gpu_types == (("A100-80GB", "a100"), ("H100_SXM", "h100"), ("NVIDIA_L4", "l4"))


DRA_MAPPING = "driver=gpu.nvidia.com,device-class=gpu.nvidia.com,attribute=index"


def test_a_dra_device_mapping_reaches_the_schedulers_and_the_syncer_with_the_reads_and_writes_they_make(tmp_path):
    """sunk-scheduler and sunk-extender fill claims (patch, or get and update: the finalizer; resourceclaims/status
    update), in the Pods' namespaces; all three read every claim and the driver's slices, cluster-wide, the two
    the DeviceClasses too."""
    from sunk.commands.scheduler import build_parser as scheduler_parser

    docs = render({"scheduler": {"draDeviceMapping": DRA_MAPPING}, "extender": {"enabled": True}})
    parsed = scheduler_parser().parse_args(chart.container_args(docs, "sunk-scheduler"))
    assert parsed.dra_device_mapping == DeviceMapping("gpu.nvidia.com", frozenset({"gpu.nvidia.com"}),
                                                      attribute="index")
    extender_args = chart.container_args(docs, "sunk-extender")
    assert flags(extender_args)["dra-device-mapping"] == DRA_MAPPING
    assert scheduler_parser().parse_known_args(extender_args)[0].dra_device_mapping == parsed.dra_device_mapping
    startup = syncer_startup(chart.container_args(docs, "sunk-syncer"), tmp_path)
    assert startup.config.dra == parsed.dra_device_mapping
    dra_role = find(docs, "ClusterRole", "slurm-sunk-scheduler-dra")
    for role in (dra_role, find(docs, "ClusterRole", "slurm-sunk-syncer")):
        assert verbs(role, "resourceclaims", "resource.k8s.io") >= {"list", "watch"}
        assert verbs(role, "resourceslices", "resource.k8s.io") == {"list", "watch"}
    # (patch: the finalizer; get and update: the same in protobuf, for a claim the apiserver will not patch)
    assert verbs(dra_role, "resourceclaims", "resource.k8s.io") == {"list", "watch", "patch", "get", "update"}
    assert verbs(dra_role, "resourceclaims/status", "resource.k8s.io") == {"update"}
    assert verbs(dra_role, "deviceclasses", "resource.k8s.io") == {"list", "watch"}  # (their config)
    # Bound to the two that fill claims (kube-scheduler, which fills none, gets none of it).
    assert subjects(find(docs, "ClusterRoleBinding", "slurm-sunk-scheduler-dra")) == {(NS, "sunk-scheduler"),
                                                                                      (NS, "sunk-extender")}
    for name in ("slurm-sunk-scheduler", "slurm-sunk-scheduler-nodes"):
        assert not any("resource.k8s.io" in r.get("apiGroups", ()) for r in find(docs, "ClusterRole", name)["rules"])
    docs = render({"scheduler": {"draDeviceMapping": DRA_MAPPING, "scope": {"type": "namespace",
                                                                            "namespaces": "team-a"}}})
    assert verbs(find(docs, "Role", "sunk-scheduler-dra", "team-a"), "resourceclaims/status", "resource.k8s.io") == {
        "update"}
    assert verbs(find(docs, "Role", "sunk-scheduler-dra", "team-a"), "resourceclaims", "resource.k8s.io") == {
        "patch", "get", "update"}
    assert subjects(find(docs, "RoleBinding", "sunk-scheduler-dra", "team-a")) == {(NS, "sunk-scheduler")}
    assert verbs(find(docs, "ClusterRole", "slurm-sunk-scheduler-dra"), "resourceclaims", "resource.k8s.io") == {
        "list", "watch"}  # (written only in the scope's namespaces)
    docs = render({"extender": {"enabled": True}})
    for deployment in ("sunk-syncer", "sunk-scheduler", "sunk-extender"):
        assert "dra-device-mapping" not in flags(chart.container_args(docs, deployment))
    (profile,) = kube_scheduler_config(docs)["profiles"]
    assert "plugins" not in profile
    for role in of_kind(docs, "ClusterRole") + of_kind(docs, "Role"):
        assert not any("resource.k8s.io" in rule.get("apiGroups", ()) for rule in role["rules"]), role["metadata"]


def kube_scheduler_config(docs) -> dict:
    return yaml.safe_load(find(docs, "ConfigMap", "sunk-kube-scheduler-config")["data"]["config.yaml"])


def test_the_extenders_kube_scheduler_leaves_claims_to_the_extender_with_a_dra_mapping():
    """kube-scheduler's DynamicResources plugin would allocate the Pods' claims itself (from devices Slurm may have
    given a job): with a mapping the extender's profile turns it off, and the extender fills them at /bind."""
    (profile,) = kube_scheduler_config(render({"scheduler": {"draDeviceMapping": DRA_MAPPING},
                                               "extender": {"enabled": True}}))["profiles"]
    assert profile["plugins"] == {"multiPoint": {"disabled": [{"name": "DynamicResources"}]}}
    config = kube_scheduler_config(render({"scheduler": {"draDeviceMapping": DRA_MAPPING},
                                           "extender": {"enabled": True}}))
    assert config["extenders"][0]["httpTimeout"] == "15s"  # (the bind verb reads the job and fills the claims)
    config = kube_scheduler_config(render({"extender": {"enabled": True}}))
    assert "plugins" not in config["profiles"][0] and config["extenders"][0]["httpTimeout"] == "5s"


def test_the_claim_policy_keeps_the_mapped_drivers_devices_to_sunk_schedulers():
    """Rendered only with a mapping, the switch on and the API served; it names the mapping's driver and exempts
    only sunk-scheduler's and sunk-extender's ServiceAccounts, as enabled (and system:masters). Its behaviour:
    tests/cluster/test_dra_scheduling.py."""
    vap = ["--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"]
    docs = render({"scheduler": {"draDeviceMapping": DRA_MAPPING}}, extra_args=vap)
    policy = find(docs, "ValidatingAdmissionPolicy", "sunk-slurm-sunk-dra-claims")
    assert policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == ["resourceclaims/status"]
    conditions = {c["name"]: c["expression"] for c in policy["spec"]["matchConditions"]}
    assert '!(request.userInfo.username in ["system:serviceaccount:slurm:sunk-scheduler"])' in \
        conditions["not-sunk-scheduler"]
    both = render({"scheduler": {"draDeviceMapping": DRA_MAPPING}, "extender": {"enabled": True}}, extra_args=vap)
    policy = find(both, "ValidatingAdmissionPolicy", "sunk-slurm-sunk-dra-claims")
    assert ('!(request.userInfo.username in ["system:serviceaccount:slurm:sunk-scheduler",'
            '"system:serviceaccount:slurm:sunk-extender"])') in policy["spec"]["matchConditions"][0]["expression"]
    assert "schedulerName slurm-sunk or slurm-sunk-extender (" in policy["spec"]["validations"][0]["message"]
    assert "r.driver == 'gpu.nvidia.com'" in conditions["allocated-from-the-mapped-driver"]
    assert find(docs, "ValidatingAdmissionPolicyBinding", "sunk-slurm-sunk-dra-claims")["spec"]["validationActions"] \
        == ["Deny"]
    for values, args in (({}, vap), ({"scheduler": {"draDeviceMapping": DRA_MAPPING, "draClaimPolicy": False}}, vap),
                         ({"scheduler": {"draDeviceMapping": DRA_MAPPING}}, [])):
        policies = of_kind(render(values, extra_args=args), "ValidatingAdmissionPolicy")
        assert not [p for p in policies if p["metadata"]["name"].endswith("-sunk-dra-claims")]


def test_gpu_types_reach_the_operator_which_registers_each_nodes_gpus_with_them():
    docs = render({"scheduler": {"gpuTypes": {"NVIDIA_L4": "l4", "A100-80GB": "a100"}}, "operator": {"enabled": True}})
    assert flags(chart.container_args(docs, "sunk-operator"))["gpu-types"] == "A100-80GB=a100,NVIDIA_L4=l4"
    docs = render({"operator": {"enabled": True}})
    assert "gpu-types" not in flags(chart.container_args(docs, "sunk-operator"))


def test_several_replicas_never_wait_for_a_started_call_that_reaches_another():
    """Every replica serves the hook API and only the leader reconciles: with more than one, the leader's Slurm cache
    must not wait for started calls (most reach another replica); with one, it does (the flag's default)."""
    docs = render({"extender": {"enabled": True}})
    for deployment in ("sunk-scheduler", "sunk-extender"):
        args = chart.container_args(docs, deployment)
        assert flags(args)["started-call-patience"] == "0s"
        parsed, _ = scheduling_parser().parse_known_args(args)
        assert parsed.started_call_patience == 0.0
    docs = render({"scheduler": {"replicas": 1}, "extender": {"enabled": True, "replicas": 1}})
    for deployment in ("sunk-scheduler", "sunk-extender"):
        args = chart.container_args(docs, deployment)
        assert "started-call-patience" not in flags(args)
        parsed, _ = scheduling_parser().parse_known_args(args)
        assert parsed.started_call_patience == 3.0


def test_one_stuck_pod_margin_for_both_front_ends_and_their_node_reads():
    docs = render({"extender": {"enabled": True}})
    for deployment in ("sunk-scheduler", "sunk-extender"):
        assert flags(chart.container_args(docs, deployment))["stuck-pod-margin"] == "60s"
    docs = render({"scheduler": {"stuckPodMargin": "2m"}, "extender": {"enabled": True}})
    for deployment in ("sunk-scheduler", "sunk-extender"):
        assert flags(chart.container_args(docs, deployment))["stuck-pod-margin"] == "2m"
    # Both read Nodes (their Ready condition), the extender also without sunk-scheduler.
    docs = render({"scheduler": {"enabled": False}, "extender": {"enabled": True}})
    assert verbs(find(docs, "ClusterRole", "slurm-sunk-scheduler-nodes"), "nodes") == {"list", "watch"}
    assert subjects(find(docs, "ClusterRoleBinding", "slurm-sunk-scheduler-nodes")) == {(NS, "sunk-extender")}


def test_one_job_full_list_interval_for_every_daemon_that_caches_jobs():
    docs = render({"extender": {"enabled": True}, "operator": {"enabled": True}})
    for deployment in ("sunk-syncer", "sunk-scheduler", "sunk-extender"):
        assert flags(chart.container_args(docs, deployment))["slurm-job-full-list-interval"] == "5m"
    assert "slurm-job-full-list-interval" not in flags(chart.container_args(docs, "sunk-operator"))  # nodes only
    docs = render({"slurm": {"jobFullListInterval": "0"}, "extender": {"enabled": True}})
    for deployment in ("sunk-syncer", "sunk-scheduler", "sunk-extender"):
        assert flags(chart.container_args(docs, deployment))["slurm-job-full-list-interval"] == "0"


def test_the_slurm_token_as_a_value_lands_in_a_secret_the_daemons_read():
    docs = render({"slurm": {"api": {"url": "http://rest.example:6820", "user": "slurm"}}})
    secret = find(docs, "Secret", "sunk-slurm-token", NS)
    assert base64.b64decode(secret["data"]["token"]).decode() == chart.MINIMAL["slurm"]["auth"]["token"]
    for deployment in ("sunk-syncer", "sunk-scheduler"):
        args = flags(chart.container_args(docs, deployment))
        assert args["slurm-api-base"] == "http://rest.example:6820" and args["slurm-user"] == "slurm"
        assert args["slurm-auth-token-file"] == "/var/run/sunk/slurm/token"
        volume = next(v for v in find(docs, "Deployment", deployment)["spec"]["template"]["spec"]["volumes"]
                      if v["name"] == "slurm-auth")
        assert volume["secret"]["secretName"] == "sunk-slurm-token"


def test_the_slurm_token_from_a_secret_of_yours():
    docs = render({"slurm": {"auth": {"token": "", "existingSecret": "my-jwt", "existingSecretKey": "jwt"}}})
    assert "sunk-slurm-token" not in names(docs, "Secret")
    volume = next(v for v in find(docs, "Deployment", "sunk-syncer")["spec"]["template"]["spec"]["volumes"]
                  if v["name"] == "slurm-auth")
    assert volume["secret"] == {"secretName": "my-jwt", "items": [{"key": "jwt", "path": "token"}]}


def test_the_slurm_jwt_key():
    docs = render({"slurm": {"auth": {"token": "", "jwtKey": {"enabled": True, "existingSecret": "slurm-jwt"}}}})
    assert "sunk-slurm-token" not in names(docs, "Secret")
    for deployment in ("sunk-syncer", "sunk-scheduler"):
        args = flags(chart.container_args(docs, deployment))
        assert args["slurm-jwt-key-file"] == "/var/run/sunk/slurm/jwt.key" and "slurm-auth-token-file" not in args


@pytest.mark.parametrize(("values", "message"), [
    ({"slurm": {"api": {"url": ""}}}, "slurm.api.url"),
    ({"slurm": {"auth": {"token": ""}}}, "exactly one Slurm credential (0 given)"),
    ({"slurm": {"auth": {"existingSecret": "x"}}}, "exactly one Slurm credential (2 given)"),
    ({"slurm": {"auth": {"token": "", "jwtKey": {"enabled": True}}}}, "slurm.auth.jwtKey.existingSecret"),
])
def test_the_slurm_endpoint_and_one_credential_are_required(values, message):
    assert message in refusal(values)


# ---- secrets -----------------------------------------------------------------------------------


def hook_secrets(docs: list[dict[str, Any]]) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in find(docs, "Secret", "sunk-hooks", NS)["data"].items()}


SECRETS_HOOK = "sunk-secrets"  # the component of the ensure-secrets and drop-secrets hooks
MADE = ("sunk-hooks", "sunk-extender-tls", "sunk-extender-client-tls")


def ensure_config_of(docs: list[dict[str, Any]], job: str) -> EnsureConfig:
    """The Job's flags as sunk-syncer ensure-secrets reads them."""
    args = find(docs, "Job", job, NS)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "ensure-secrets"
    parser = ensure_secrets_parser()
    return ensure_config(parser.parse_args(args[1:]), parser)


def test_no_generated_secret_is_rendered_and_two_renders_are_byte_identical():
    """No lookup, no randAlphaNum or genCA: helm template, Argo CD and Flux render the same every time."""
    for values in ({}, {"extender": {"enabled": True}, "hooks": {"keepOnUninstall": False}}):
        text = chart.render_text(values, helm=HELM)
        assert text == chart.render_text(values, helm=HELM)
        docs = [d for d in yaml.safe_load_all(text) if d]
        assert not set(MADE) & names(docs, "Secret")
    # A call, with its first argument (the hooks.nodeAuth default's lookup of a ConfigMap is no secret's memory).
    called = re.compile(r"\b(lookup\s+\"v1\"\s+\"Secret\"|(randAlphaNum|randAlpha|randAscii|genCA|genSignedCert|"
                        r"genSelfSignedCert|genPrivateKey)\s+[(\"$0-9])")
    templates = [p for p in (ROOT / "manifests/chart/sunk/templates").rglob("*") if p.is_file()]  # (and tests/)
    assert not [p.name for p in templates if called.search(p.read_text())]


def test_the_hook_job_makes_the_hooks_secret_and_the_extenders_pair_the_pods_mount():
    docs = render({"extender": {"enabled": True}})
    config = ensure_config_of(docs, "sunk-ensure-secrets")
    assert config.namespace == NS and not config.repair
    hooks_secret, pair = config.specs
    assert hooks_secret == cs.TokenSecret("sunk-hooks", ("syncer-token", "scheduler-hook-secret"))
    assert pair == cs.TLSPair("sunk-extender-tls", "sunk-extender-client-tls", "sunk-extender", NS,
                              "sunk-kube-scheduler", 3650)
    find(docs, "Service", pair.service, NS)
    # Not Helm's: a next run must not take them for an earlier release's and annotate them.
    assert not cs.helm_owned({"metadata": {"labels": config.labels}})
    assert config.labels["app.kubernetes.io/instance"] == "sunk"
    mounted = {v["secret"]["secretName"] for d in of_kind(docs, "Deployment")
               for v in d["spec"]["template"]["spec"].get("volumes") or [] if "secret" in v}
    assert set(MADE) <= mounted
    # Non-optional volumes: a Pod waits for its Secret rather than start without it.
    assert not [v for d in of_kind(docs, "Deployment") for v in d["spec"]["template"]["spec"].get("volumes") or []
                if v.get("secret", {}).get("secretName") in MADE and v["secret"].get("optional")]
    assert flags(find(docs, "Job", "sunk-ensure-secrets", NS)["spec"]["template"]["spec"]["containers"][0]["args"]
                 )["tls-validity-days"] == "3650"
    days = render({"extender": {"enabled": True, "tls": {"validityDays": 90}}})
    assert ensure_config_of(days, "sunk-ensure-secrets").specs[1].validity_days == 90


def test_the_secrets_hook_runs_before_install_and_upgrade_after_its_rbac_and_goes_once_it_succeeded():
    docs = hooks(render({"extender": {"enabled": True}}), SECRETS_HOOK)
    ensure = [d for d in docs if d["metadata"]["name"] == "sunk-ensure-secrets"]
    assert {d["kind"] for d in ensure} == {"ServiceAccount", "Role", "RoleBinding", "Job"}
    for doc in ensure:
        annotations = doc["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        assert (int(annotations["helm.sh/hook-weight"]) < 0) is (doc["kind"] != "Job")
    job = find(docs, "Job", "sunk-ensure-secrets")["spec"]
    assert job["template"]["spec"]["serviceAccountName"] == "sunk-ensure-secrets"
    # The Syncer waits for its Secret: a stale lock on the only Nodes it may use must not keep the Job off them.
    assert tolerates_lock(job["template"], "NoExecute")
    assert not tolerates_lock(find(hooks(render({"lockToleration": False}), SECRETS_HOOK), "Job",
                                   "sunk-ensure-secrets")["spec"]["template"])
    assert job["activeDeadlineSeconds"] < 300 and job["template"]["spec"]["restartPolicy"] == "Never"
    binding = find(docs, "RoleBinding", "sunk-ensure-secrets")
    assert binding["roleRef"]["name"] == "sunk-ensure-secrets" and subjects(binding) == {(NS, "sunk-ensure-secrets")}


def test_the_secrets_hook_may_create_secrets_and_read_and_annotate_only_its_own():
    role = find(render({"extender": {"enabled": True}}), "Role", "sunk-ensure-secrets", NS)
    assert sorted((tuple(r["verbs"]), tuple(r.get("resourceNames") or ())) for r in role["rules"]) == [
        (("create",), ()), (("get", "patch"), MADE)]
    assert all(r["apiGroups"] == [""] and r["resources"] == ["secrets"] for r in role["rules"])
    without_extender = find(render(), "Role", "sunk-ensure-secrets", NS)
    assert without_extender["rules"][1]["resourceNames"] == ["sunk-hooks"]


@pytest.mark.parametrize("values, ensured", [
    ({}, ("sunk-hooks",)),
    ({"extender": {"enabled": True}}, MADE),
    ({"hooks": {"existingSecret": "mine"}}, ()),
    ({"hooks": {"existingSecret": "mine"}, "extender": {"enabled": True, "tls": {
        "existingSecret": "a", "clientExistingSecret": "b"}}}, ()),
    ({"hooks": {"syncerToken": "a" * 16 + "0123456789abcdef" * 2, "schedulerHookSecret": "b" * 8 + "fedcba98" * 4},
      "extender": {"enabled": True}}, MADE[1:]),
], ids=["defaults", "extender", "hooks-of-yours", "all-of-yours", "hooks-as-values"])
def test_the_hook_job_makes_only_what_the_values_do_not_give(values, ensured):
    docs = render(values)
    if ensured:
        assert ensure_config_of(docs, "sunk-ensure-secrets").names == ensured
    else:
        assert not hooks(docs, SECRETS_HOOK)


@pytest.mark.parametrize("keep, extender, dropped", [
    (True, False, ()),
    (True, True, MADE[1:]),
    (False, False, ("sunk-hooks",)),
    (False, True, MADE),
])
def test_uninstall_deletes_the_extenders_pair_and_the_hooks_secret_unless_kept(keep, extender, dropped):
    docs = render({"hooks": {"keepOnUninstall": keep}, "extender": {"enabled": extender}})
    if not dropped:
        assert "sunk-drop-secrets" not in names(docs, "Job")
        return
    config = ensure_config_of(docs, "sunk-drop-secrets")
    job = find(docs, "Job", "sunk-drop-secrets", NS)
    assert "--delete" in job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-delete"
    assert config.names == dropped
    role = find(docs, "Role", "sunk-drop-secrets", NS)
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": list(dropped),
                              "verbs": ["delete"]}]


def test_given_hook_secrets_are_kept_on_uninstall_unless_told():
    given = {"syncerToken": "a" * 16 + "0123456789abcdef" * 2, "schedulerHookSecret": "b" * 8 + "fedcba98" * 4}
    secret = find(render({"hooks": given}), "Secret", "sunk-hooks", NS)
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    dropped = find(render({"hooks": {**given, "keepOnUninstall": False}}), "Secret", "sunk-hooks", NS)
    assert "annotations" not in dropped["metadata"]


@pytest.mark.parametrize("given", ["syncerToken", "schedulerHookSecret"])
def test_one_hook_secret_without_the_other_is_refused(given):
    message = refusal({"hooks": {given: "c" * 8 + "0123456789abcdef" * 2}})
    assert "hooks: give both syncerToken and schedulerHookSecret, or neither" in message


def test_given_hook_secrets_are_used():
    given = {"syncerToken": "a" * 16 + "0123456789abcdef" * 2, "schedulerHookSecret": "b" * 8 + "fedcba9876543210" * 2}
    secrets = hook_secrets(render({"hooks": given}))
    assert secrets == {"syncer-token": given["syncerToken"].encode(),
                       "scheduler-hook-secret": given["schedulerHookSecret"].encode()}


@pytest.mark.parametrize("secret", ["REPLACE-ME", "changeme", "replace-with-openssl-rand-hex-32-please-thanks",
                                    "0123456789abcdef", "ab" * 20])
def test_weak_hook_secrets_are_refused_as_the_daemons_would(secret):
    why = weakness(secret.encode())
    assert why is not None
    message = refusal({"hooks": {"syncerToken": secret}})
    assert f"hooks.syncerToken {why}" in message, message


def test_an_existing_hook_secret_is_mounted_not_made():
    docs = render({"hooks": {"existingSecret": "my-hooks", "nodeAuth": "hmac"}})
    assert "sunk-hooks" not in names(docs, "Secret")
    for deployment in ("sunk-syncer", "sunk-scheduler"):
        volume = next(v for v in find(docs, "Deployment", deployment)["spec"]["template"]["spec"]["volumes"]
                      if v["name"] == "hooks")
        assert volume["secret"]["secretName"] == "my-hooks"


def test_no_secret_is_empty_or_a_placeholder():
    docs = render({"extender": {"enabled": True}, "operator": {"enabled": True}})
    for secret in of_kind(docs, "Secret"):
        assert secret.get("data") and not secret.get("stringData"), secret["metadata"]["name"]
        for key, value in decoded(secret).items():
            assert value.strip(), f"Secret {secret['metadata']['name']}: {key} is empty"
            assert b"replace" not in value.lower() and b"changeme" not in value.lower(), key


# ---- the extender ------------------------------------------------------------------------------


def decoded(secret: dict[str, Any]) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in secret["data"].items()}


def test_the_extender_certificates_the_hook_job_makes_complete_a_mutual_tls_handshake():
    """The extender's verbs as it serves them (sunk.commands.web.TLS: its certificate, callers' CA required),
    called as kube-scheduler calls them (its client certificate, the CA, the Service's host name)."""
    docs = render({"extender": {"enabled": True}})
    pair = ensure_config_of(docs, "sunk-ensure-secrets").specs[1]
    assert isinstance(pair, cs.TLSPair)
    server, client = cs.new_tls_pair(pair, datetime.datetime.now(datetime.UTC))  # as the hook Job makes them
    config = yaml.safe_load(find(docs, "ConfigMap", "sunk-kube-scheduler-config")["data"]["config.yaml"])
    host = config["extenders"][0]["urlPrefix"].removeprefix("https://").rpartition(":")[0]
    assert host == f"sunk-extender.{NS}.svc"
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for who, data in (("server", server), ("client", client)):
            for key, value in data.items():
                files[who, key] = Path(tmp, f"{who}-{key}")
                files[who, key].write_bytes(value)
        server_context = TLS(str(files["server", "tls.crt"]), str(files["server", "tls.key"]),
                             str(files["server", "ca.crt"])).context()
        client_context = ssl.create_default_context(cafile=str(files["client", "ca.crt"]))
        client_context.load_cert_chain(str(files["client", "tls.crt"]), str(files["client", "tls.key"]))
        left, right = socket.socketpair()
        peer: dict[str, Any] = {}

        def serve() -> None:
            with server_context.wrap_socket(right, server_side=True) as conn:
                peer.update(conn.getpeercert() or {})
                conn.sendall(b"ok")

        thread = threading.Thread(target=serve)
        thread.start()
        with client_context.wrap_socket(left, server_hostname=host) as conn:
            assert conn.recv(2) == b"ok"
        thread.join(10)
    assert dict(x[0] for x in peer["subject"])["commonName"] == "sunk-kube-scheduler"


def test_the_extender_tls_of_your_own():
    docs = render({"extender": {"enabled": True, "tls": {"existingSecret": "a", "clientExistingSecret": "b"}}})
    assert not {"sunk-extender-tls", "sunk-extender-client-tls"} & names(docs, "Secret")
    extender = find(docs, "Deployment", "sunk-extender")["spec"]["template"]["spec"]
    kube_scheduler = find(docs, "Deployment", "sunk-kube-scheduler")["spec"]["template"]["spec"]
    assert {"name": "tls", "secret": {"secretName": "a"}} in extender["volumes"]
    assert {"name": "client-tls", "secret": {"secretName": "b"}} in kube_scheduler["volumes"]
    assert "extender.tls: give both" in refusal({"extender": {"enabled": True, "tls": {"existingSecret": "a"}}})


def test_the_kube_scheduler_runs_the_clusters_version_and_names_the_extenders_profile():
    docs = render({"extender": {"enabled": True}}, extra_args=["--kube-version", "v1.31.2-eks-a737599"])
    container = find(docs, "Deployment", "sunk-kube-scheduler")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.k8s.io/kube-scheduler:v1.31.2"
    config = yaml.safe_load(find(docs, "ConfigMap", "sunk-kube-scheduler-config")["data"]["config.yaml"])
    assert [p["schedulerName"] for p in config["profiles"]] == ["slurm-sunk-extender"]
    assert config["leaderElection"] == {"leaderElect": True, "resourceName": "sunk-kube-scheduler",
                                        "resourceNamespace": NS}


def test_hooks_over_tls():
    docs = render({"extender": {"enabled": True, "hooksTLS": {"enabled": True, "existingSecret": "hooks-tls",
                                                              "caFile": "/etc/ssl/sunk-ca.crt"}}})
    args = flags(chart.container_args(docs, "sunk-extender"))
    assert args["hooks-url"] == f"https://sunk-extender.{NS}.svc:8000"
    assert args["hooks-tls-cert-file"] == "/etc/sunk/hooks-tls/tls.crt"
    assert args["hooks-ca-file"] == "/etc/ssl/sunk-ca.crt"
    assert flags(chart.container_args(docs, "sunk-scheduler"))["hooks-url"] == f"http://sunk-scheduler.{NS}.svc:8000"
    assert "scheduler.hooksTLS.enabled" in refusal({"scheduler": {"hooksTLS": {"enabled": True}}})


# ---- the operator ------------------------------------------------------------------------------


def test_the_operator_switch():
    assert "sunk-operator" not in names(render(), "Deployment")
    docs = render({"operator": {"enabled": True}, "slurmd": {"namespace": "slurmd-pods"}})
    args = flags(chart.container_args(docs, "sunk-operator"))
    assert (args["leader-election-id"], args["leader-election-namespace"]) == ("sunk-operator", NS)
    assert args["watch-namespace"] == "slurmd-pods" and args["slurm-auth-token-file"]
    # Namespaced rights only where the NodeSets, their Pods and NodeSlices are; Nodes read cluster-wide.
    role = find(docs, "Role", "sunk-operator", "slurmd-pods")
    assert verbs(role, "nodesets", "sunk.coreweave.com") == {"get", "list", "watch", "patch"}
    assert verbs(role, "nodesets/status", "sunk.coreweave.com") == {"patch"}
    assert verbs(role, "nodeslices", "sunk.coreweave.com") == {"list", "watch", "create", "patch", "delete"}
    assert verbs(role, "pods") == {"get", "list", "watch", "create", "patch", "delete"}
    assert [r["resources"] for r in find(docs, "ClusterRole", "slurm-sunk-operator")["rules"]] == [["nodes"]]
    assert verbs(find(docs, "ClusterRole", "slurm-sunk-operator"), "nodes") == {"list", "watch"}
    assert not verbs(role, "configmaps") and "topology" not in args  # no topology unless asked


def test_the_operators_topology_renders_its_flags_and_rights_on_its_configmap_only():
    docs = render({"operator": {"enabled": True, "topology": {
        "type": "tree", "treeLabels": ["topology.kubernetes.io/region", "topology.kubernetes.io/zone"]}}})
    argv = chart.container_args(docs, "sunk-operator")
    args = flags(argv)
    assert (args["topology"], args["topology-format"], args["topology-configmap"]) == (
        "tree", "topology.yaml", "sunk-topology")
    assert args["topology-tree-labels"] == "topology.kubernetes.io/region,topology.kubernetes.io/zone"
    from sunk.commands import operator as operator_cli

    config, _, _ = operator_cli.parse_args(argv)
    assert config.topology.tree_labels == ("topology.kubernetes.io/region", "topology.kubernetes.io/zone")
    rules = [r for r in find(docs, "Role", "sunk-operator", NS)["rules"] if "configmaps" in r["resources"]]
    assert {(tuple(r.get("resourceNames") or ()), tuple(r["verbs"])) for r in rules} == {
        (("sunk-topology",), ("get", "patch")), ((), ("create",))}
    assert "topology-allowed-values" not in args and "topology-block-size" not in args  # (defaults: any, derived)


def test_the_topologys_allowed_values_and_block_size_reach_the_operator():
    from sunk.commands import operator as operator_cli

    docs = render({"operator": {"enabled": True, "topology": {
        "type": "block", "allowedValues": ["rack-a", "rack-b"], "blockSize": 18}}})
    config, _, _ = operator_cli.parse_args(chart.container_args(docs, "sunk-operator"))
    assert (config.topology.allowed_values, config.topology.block_size) == (("rack-a", "rack-b"), 18)
    for bad in ({"allowedValues": ["a b"]}, {"blockSize": -1}, {"blockSize": 5000}):
        with pytest.raises(chart.RenderError):
            render({"operator": {"enabled": True, "topology": {"type": "block", **bad}}})


# ---- Slurm on Kubernetes: the SlurmCluster ------------------------------------------------------

SLURM_CLUSTER = {"operator": {"enabled": True}, "nodeSets": [{"name": "gpu", "spec": {"replicas": 2}}],
                 "slurm": {"killWait": 45},
                 "slurmCluster": {"enabled": True, "name": "prod", "slurmctld": {"backup": {"enabled": True}},
                                  "partitions": [{"name": "gpu", "nodeSets": ["gpu"], "default": True,
                                                  "options": {"MaxTime": "INFINITE"}}],
                                  "slurmConfig": ["SchedulerParameters=bf_window=60"]}}


def rules_for(role: dict[str, Any], resource: str, group: str = "") -> set[tuple[str, tuple[str, ...]]]:
    """(verb, resourceNames) of every rule on ``resource``."""
    return {(verb, tuple(r.get("resourceNames") or ())) for r in role.get("rules") or []
            if group in r["apiGroups"] and resource in r["resources"] for verb in r["verbs"]}


def test_the_slurm_cluster_is_off_by_default_and_needs_the_operator():
    docs = render({"operator": {"enabled": True}})
    assert not of_kind(docs, "SlurmCluster")
    assert "slurm-cluster" not in flags(chart.container_args(docs, "sunk-operator"))
    role = find(docs, "Role", "sunk-operator", NS)
    for resource, group in (("statefulsets", "apps"), ("deployments", "apps"), ("services", ""), ("secrets", ""),
                            ("persistentvolumeclaims", ""), ("slurmclusters", "sunk.coreweave.com")):
        assert not verbs(role, resource, group), resource
    assert "slurmCluster.enabled needs operator.enabled" in refusal({"slurmCluster": {"enabled": True}})
    assert "slurmCluster" in refusal({"slurmCluster": {"release": "23.02"}})


def test_the_slurm_cluster_renders_a_spec_the_operator_takes_and_the_operator_its_flag():
    from sunk.commands import operator as operator_cli
    from sunk.translate.slurmcluster.spec import read_spec

    docs = render(SLURM_CLUSTER)
    obj = find(docs, "SlurmCluster", "prod", NS)
    read = read_spec({**obj, "metadata": {**obj["metadata"], "uid": "u"}}, ["gpu"])
    assert read.spec is not None, read.problems
    assert (read.spec.kill_wait, read.spec.release, read.spec.backup) == (45, "25.11", True)  # slurm.killWait
    assert read.spec.image("slurmctld") == f"sunk-slurmctld:{sunk.__version__}-slurm25.11"
    argv = chart.container_args(docs, "sunk-operator")
    assert flags(argv)["slurm-cluster"] == "prod"
    assert operator_cli.parse_args(argv)[0].slurm_cluster == "prod"


def _volume(docs: list[dict[str, Any]], deployment: str, name: str) -> dict[str, Any]:
    spec = find(docs, "Deployment", deployment)["spec"]["template"]["spec"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == name]
    return volume


def test_an_operator_signing_with_its_own_clusters_key_starts_before_that_secret_exists():
    """On a bare cluster the operator makes ``<name>-jwt-key`` itself: its Pod mounts the Secret optional and
    waits for the key (a required mount would hold the Pod, and so the Secret, forever); the daemons it does
    not make wait for their mount as any Pod does."""
    from sunk.commands import operator as operator_cli

    own_key = {"slurm": {**SLURM_CLUSTER["slurm"], "api": {"url": "http://prod-slurmrestd:6820", "user": "slurm"},
                         "auth": {"token": "", "jwtKey": {"enabled": True, "existingSecret": "prod-jwt-key"}}}}
    docs = render({**SLURM_CLUSTER, **own_key})
    argv = chart.container_args(docs, "sunk-operator")
    assert "--slurm-jwt-key-wait" in argv
    assert operator_cli.parse_args(argv)[1].slurm.jwt_key_wait is True
    assert _volume(docs, "sunk-operator", "slurm-auth")["secret"] == {
        "secretName": "prod-jwt-key", "optional": True, "items": [{"key": "jwt_hs256.key", "path": "jwt.key"}]}
    assert "optional" not in _volume(docs, "sunk-scheduler", "slurm-auth")["secret"]
    assert "--slurm-jwt-key-wait" not in chart.container_args(docs, "sunk-scheduler")
    another_key = {"slurm": {**own_key["slurm"], "auth": {"token": "", "jwtKey": {
        "enabled": True, "existingSecret": "someone-elses-key"}}}}
    for values in ({**SLURM_CLUSTER}, {"operator": {"enabled": True}, **own_key},  # a token; no cluster of its own
                   {**SLURM_CLUSTER, **another_key}):  # (a Secret the operator does not make: required, as usual)
        docs = render(values)
        assert "--slurm-jwt-key-wait" not in chart.container_args(docs, "sunk-operator")
        assert "optional" not in _volume(docs, "sunk-operator", "slurm-auth")["secret"]


def test_the_slurm_clusters_default_images_are_all_built_here_and_its_cgroup_mode_is_passed():
    from sunk.translate.slurmcluster.spec import read_spec

    for cgroup, expected in ((None, "v2"), ("v1", "v1"), ("none", "none")):
        values = copy.deepcopy(SLURM_CLUSTER)
        if cgroup:
            values["slurmCluster"]["cgroup"] = cgroup
        obj = find(render(values), "SlurmCluster", "prod", NS)
        read = read_spec({**obj, "metadata": {**obj["metadata"], "uid": "u"}}, ["gpu"])
        assert read.spec is not None and read.spec.cgroup == expected, read.problems
    # MariaDB too: sunk-mariadb of this chart's appVersion and release, no image of a registry nothing here reaches
    assert read.spec.image("mariadb") == f"sunk-mariadb:{sunk.__version__}-slurm25.11"
    assert "slurmCluster" in refusal({**SLURM_CLUSTER, "slurmCluster": {**SLURM_CLUSTER["slurmCluster"],
                                                                        "cgroup": "v3"}})


def test_each_control_plane_component_gets_the_resources_its_values_give_and_none_by_default():
    from sunk.translate.slurmcluster.plan import Facts, decide

    def containers(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
        obj = find(render(values), "SlurmCluster", "prod", NS)
        plan = decide(Facts({**obj, "metadata": {**obj["metadata"], "uid": "u", "generation": 1}}, ["gpu"]))
        assert plan.spec is not None, plan.problems
        return {o["metadata"]["name"]: o["spec"]["template"]["spec"]["containers"][0] for o in plan.objects
                if o["kind"] in ("StatefulSet", "Deployment")}

    assert all("resources" not in c for c in containers(SLURM_CLUSTER).values())
    values = copy.deepcopy(SLURM_CLUSTER)
    sc = values["slurmCluster"]
    sc["slurmctld"]["resources"] = {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}}
    sc["slurmdbd"] = {"resources": {"requests": {"cpu": "500m"}},
                      "database": {"internal": {"resources": {"requests": {"memory": "1Gi"}}}}}
    sc["slurmrestd"] = {"resources": {"requests": {"cpu": 1}}}
    sc["login"] = {"resources": {"limits": {"ephemeral-storage": "10Gi"}}}
    found = containers(values)
    assert found["prod-slurmctld"]["resources"] == {"requests": {"cpu": "2", "memory": "4Gi"},
                                                    "limits": {"memory": "8Gi"}}
    assert found["prod-slurmdbd"]["resources"] == {"requests": {"cpu": "500m"}}
    assert found["prod-mariadb"]["resources"] == {"requests": {"memory": "1Gi"}}
    assert found["prod-slurmrestd"]["resources"] == {"requests": {"cpu": "1"}}
    assert found["prod-login"]["resources"] == {"limits": {"ephemeral-storage": "10Gi"}}
    for bad in ({"requests": {"nvidia.com/gpu": 1}}, {"requests": {"cpu": "two"}}, {"claims": []}):
        refused = copy.deepcopy(SLURM_CLUSTER)
        refused["slurmCluster"]["slurmctld"]["resources"] = bad
        assert "slurmCluster" in refusal(refused), bad


def test_the_control_plane_tolerates_the_lock_first_and_is_placed_where_the_values_say():
    """A Node the Syncer locks evicts every Pod that does not tolerate the lock: slurmctld among them would stop
    every job's scheduling. The lock toleration comes first (lockToleration), then the operator's own."""
    from sunk.translate.slurmcluster.spec import read_spec

    def placement(**values: Any) -> dict[str, Any]:
        merged = copy.deepcopy(SLURM_CLUSTER)
        merged.update({k: v for k, v in values.items() if k != "placement"})
        if "placement" in values:
            merged["slurmCluster"]["placement"] = values["placement"]
        obj = find(render(merged), "SlurmCluster", "prod", NS)
        read = read_spec({**obj, "metadata": {**obj["metadata"], "uid": "u"}}, ["gpu"])
        assert read.spec is not None, read.problems
        return read.spec.placement.pod_fields()

    lock = {"key": "sunk.coreweave.com/lock", "operator": "Exists"}
    assert placement() == placement(placement=None) == {"tolerations": [lock]}  # (null drops the default)
    assert placement(lockToleration=False) == {}
    mine = {"key": "dedicated", "operator": "Equal", "value": "slurm", "effect": "NoSchedule"}
    assert placement(placement={"nodeSelector": {"pool": "control"}, "tolerations": [mine]}) == {
        "nodeSelector": {"pool": "control"}, "tolerations": [lock, mine]}
    assert placement(lockToleration=False, placement={"nodeSelector": {"pool": "control"}}) == {
        "nodeSelector": {"pool": "control"}}
    for bad in ({"affinity": {}}, {"tolerations": [{"key": "dedicated", "efect": "NoSchedule"}]}):
        # (a field the CRD does not know would be pruned unseen: here a toleration of every effect)
        assert "slurmCluster" in refusal({**SLURM_CLUSTER, "slurmCluster": {**SLURM_CLUSTER["slurmCluster"],
                                                                            "placement": bad}}), bad


def test_the_operators_rbac_is_exactly_what_the_slurm_cluster_reconciler_writes():
    """Patch by name on each object the plan applies, create on each kind, create only on Secrets."""
    from sunk.translate.slurmcluster.plan import Facts, decide

    docs = render(SLURM_CLUSTER)
    obj = find(docs, "SlurmCluster", "prod", NS)
    plan = decide(Facts({**obj, "metadata": {**obj["metadata"], "uid": "u"}}, ["gpu"]))
    assert plan.spec is not None, plan.problems
    role = find(docs, "Role", "sunk-operator", NS)
    wanted: dict[tuple[str, str], set[str]] = {}
    for applied in plan.objects:
        group = applied["apiVersion"].rpartition("/")[0]
        wanted.setdefault((group, applied["kind"].lower() + "s"), set()).add(applied["metadata"]["name"])
    assert ("", "persistentvolumeclaims") in wanted  # (the backup's shared state claim)
    watched = {("apps", "statefulsets"), ("apps", "deployments")}
    for (group, resource), object_names in wanted.items():
        rules = rules_for(role, resource, group)
        (patched,) = [set(names_) for verb, names_ in rules if verb == "patch"]
        (read,) = [set(names_) for verb, names_ in rules if verb == "get"]
        assert patched == read == object_names, resource
        assert {rule for rule in rules if rule[0] not in ("patch", "get")} == {("create", ())} | (
            {("list", ()), ("watch", ())} if (group, resource) in watched else set()), resource
    assert rules_for(role, "secrets") == {("create", ()), ("get", ("prod-munge-key", "prod-jwt-key",
                                                                   "prod-db-password", "prod-login-host-keys"))}
    assert {w.name for w in plan.secrets} == {"prod-munge-key", "prod-jwt-key", "prod-db-password",
                                              "prod-login-host-keys"}

    assert verbs(role, "slurmclusters", "sunk.coreweave.com") == {"get", "list", "watch"}
    assert verbs(role, "slurmclusters/status", "sunk.coreweave.com") == {"patch"}
    assert [r["resources"] for r in find(docs, "ClusterRole", "slurm-sunk-operator")["rules"]] == [["nodes"]]


def test_the_operator_may_get_exactly_the_secrets_its_slurm_cluster_mounts():
    """Secrets get by name: the generated keys' and those the values name, for their label check."""
    values = copy.deepcopy(SLURM_CLUSTER)
    values["slurmCluster"] = {**values["slurmCluster"], "keys": {"munge": {"existingSecret": "site-munge"},
                                                                 "jwt": {"existingSecret": "site-jwt"}},
                              "slurmdbd": {"database": {"external": {"host": "db", "passwordSecret": {
                                  "name": "db-pw", "key": "password"}}}}}
    role = find(render(values), "Role", "sunk-operator", NS)
    (read,) = [set(names_) for verb, names_ in rules_for(role, "secrets") if verb == "get"]
    assert read == {"prod-munge-key", "prod-jwt-key", "prod-db-password", "prod-login-host-keys", "site-munge",
                    "site-jwt", "db-pw"}


# ---- placement ---------------------------------------------------------------------------------


LOCK_TOLERANT = {"sunk-syncer", "sunk-scheduler", "sunk-operator"}


@pytest.mark.parametrize("mine", [None, {"key": "dedicated", "operator": "Equal", "value": "sunk",
                                         "effect": "NoSchedule"}])
def test_the_syncer_scheduler_and_operator_tolerate_sunks_lock_taint_and_the_operators_tolerations_stay(mine):
    """A lock left while sunk-syncer was gone (uninstalled, or its Node died) must not keep the one
    component that lifts it (nor the scheduler, which ends the jobs behind a lock, nor the operator, without
    which an uninstall cannot end the NodeSets) from starting on that Node, whatever the lock's effect; the
    extender keeps off locked Nodes."""
    values: dict[str, Any] = {"extender": {"enabled": True}, "operator": {"enabled": True}}
    if mine:
        values["tolerations"] = [mine]
    deployments = [d for d in render(values) if d["kind"] == "Deployment"]
    assert {d["metadata"]["name"] for d in deployments} >= LOCK_TOLERANT | {"sunk-extender", "sunk-operator"}
    for deployment in deployments:
        name, pod = deployment["metadata"]["name"], deployment["spec"]["template"]
        for effect in (None, "NoSchedule", "NoExecute"):
            assert tolerates_lock(pod, effect) is (name in LOCK_TOLERANT), (name, effect)
        if mine:
            assert mine in pod["spec"]["tolerations"], name


def test_lock_toleration_false_leaves_only_the_operators_tolerations():
    deployments = [d for d in render({"lockToleration": False}) if d["kind"] == "Deployment"]
    assert deployments and not any(tolerates_lock(d["spec"]["template"]) for d in deployments)
    assert not any("tolerations" in d["spec"]["template"]["spec"] for d in deployments)


# ---- monitoring --------------------------------------------------------------------------------


def test_the_pod_monitor_labels_every_series_with_the_slurm_cluster():
    docs = render({"slurm": {"clusterName": "tenant-a"}, "monitoring": {"podMonitor": {"enabled": True}}})
    monitor = find(docs, "PodMonitor", "sunk", NS)
    endpoint = monitor["spec"]["podMetricsEndpoints"][0]
    assert endpoint["port"] == "metrics"
    assert {"targetLabel": "slurm_cluster", "replacement": "tenant-a"} in endpoint["relabelings"]
    assert monitor["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/instance": "sunk"}


def test_the_dashboard_config_map_is_the_dashboard():
    docs = render({"monitoring": {"dashboard": {"enabled": True, "namespace": "grafana"}}})
    config_map = find(docs, "ConfigMap", "sunk-grafana-dashboard", "grafana")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["data"]["sunk-dashboard.json"] == (chart.CHART / "files" / "sunk-dashboard.json").read_text()


# ---- the rendered flags are the daemons' -------------------------------------------------------


def known_flags(parser: argparse.ArgumentParser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings}


def syncer_parser() -> argparse.ArgumentParser:
    return build_parser()


def scheduling_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sunk-scheduler", exit_on_error=False)
    add_common_arguments(parser, default_name="sunk-scheduler")
    return parser


EXTENDER_ONLY = {"bind-address", "tls-cert-file", "tls-key-file", "client-ca-file"}  # sunk/commands/extender.py main


@pytest.mark.parametrize("values", [
    {"extender": {"enabled": True}},
    {"extender": {"enabled": True}, "scheduler": {"scope": {"type": "namespace", "namespaces": "a,b"},
                                                  "defaultPartition": "batch", "leaderElection": {"enabled": False},
                                                  "replicas": 1, "gangPodGroups": True,
                                                  "gpuTypes": {"NVIDIA_L4": "l4", "H100_SXM": "h100"}},
     "syncer": {"lockTaintEffect": "NoExecute"},
     "extender_hooks_tls": True},
    {"syncer": {"nodePermissions": {"enabled": False}, "nodeLocking": {"enabled": False}}},
    {"slurm": {"auth": {"token": "", "jwtKey": {"enabled": True, "existingSecret": "k"}}}},
    {"operator": {"enabled": True}},
    {"operator": {"enabled": True}, "extender": {"enabled": True},
     "slurm": {"auth": {"token": "", "jwtKey": {"enabled": True, "existingSecret": "k"}}}},
], ids=["defaults", "every-flag", "syncer-state-sync-only", "jwt-key", "operator", "jwt-key-everywhere"])
def test_the_daemons_accept_every_rendered_flag(values):
    values = dict(values)
    if values.pop("extender_hooks_tls", False):
        values = merged(values, {"extender": {"hooksTLS": {"enabled": True, "existingSecret": "t", "caFile": "/ca"}}})
    docs = render(values)
    parsers = {"sunk-syncer": syncer_parser(), "sunk-scheduler": scheduling_parser(),
               "sunk-extender": scheduling_parser()}
    from sunk.commands.operator import build_parser as operator_parser
    parsers["sunk-operator"] = operator_parser()
    rendered = {name: chart.container_args(docs, name) for name in names(docs, "Deployment")
                if name in parsers or name == "sunk-operator"}
    missing = {f"{name}: {arg.partition('=')[0]}" for name, args in rendered.items() if name in parsers
               for arg in args if arg.partition("=")[0] not in known_flags(parsers[name])
               and not (name == "sunk-extender" and arg.partition("=")[0].removeprefix("--") in EXTENDER_ONLY)}
    assert not missing
    for name, args in rendered.items():
        if name in ("sunk-scheduler", "sunk-extender"):
            parsed, unknown = parsers[name].parse_known_args(args)
            assert {u.removeprefix("--").partition("=")[0] for u in unknown} <= EXTENDER_ONLY
            assert parsed.slurm_kill_wait == 30.0 and parsed.stuck_pod_margin == 60.0
            if "gpuTypes" in values.get("scheduler", {}):
                assert parsed.gpu_types == (("H100_SXM", "h100"), ("NVIDIA_L4", "l4")) and parsed.gang_pod_groups
            assert parsed.slurm_job_full_list_interval == 300.0
        else:
            parsed = parsers[name].parse_args(args)
            if name == "sunk-syncer":
                assert parsed.slurm_job_full_list_interval == 300.0


# ---- what values.schema.json and templates/validate.yaml refuse --------------------------------


@pytest.mark.parametrize(("values", "message"), [
    ({"scheduler": {"scope": {"type": "everywhere"}}},
     "at '/scheduler/scope/type': value must be one of 'cluster', 'namespace'"),
    ({"slurm": {"killWait": "30s"}}, "at '/slurm/killWait': got string, want integer"),
    ({"slurm": {"killWait": 0}}, "at '/slurm/killWait'"),
    ({"slurm": {"jobFullListInterval": "5 minutes"}}, "at '/slurm/jobFullListInterval'"),
    ({"slurm": {"jobFullListInterval": 300}}, "at '/slurm/jobFullListInterval': got number, want string"),
    ({"syncer": {"nodePermissions": {"enabled": "yes"}}},
     "at '/syncer/nodePermissions/enabled': got string, want boolean"),
    ({"syncer": {"nodeLocking": {"enabled": "no"}}}, "at '/syncer/nodeLocking/enabled': got string, want boolean"),
    ({"syncer": {"nodePermissions": {"enabled": False}}},
     "keep syncer.nodePermissions.enabled true, or set syncer.nodeLocking.enabled false too"),
    ({"syncer": {"config": {"syncer": {"slurmNodeCleanup": True}}}},
     "additional properties 'slurmNodeCleanup' not allowed"),
    ({"scheduler": {"replicas": "2"}}, "at '/scheduler/replicas': got string, want integer"),
    ({"scheduler": {"stuckPodMargin": "0s"}}, "at '/scheduler/stuckPodMargin'"),
    ({"scheduler": {"stuckPodMargin": 60}}, "at '/scheduler/stuckPodMargin': got number, want string"),
    ({"scheduler": {"gangPodGroups": "yes"}}, "at '/scheduler/gangPodGroups': got string, want boolean"),
    ({"scheduler": {"gpuTypes": ["NVIDIA_L4=l4"]}}, "at '/scheduler/gpuTypes': got array, want object"),
    # (a space would split the flag; helm names the wrong path for a property name, hence the message only)
    ({"scheduler": {"gpuTypes": {"NVIDIA L4": "l4"}}}, "'NVIDIA L4' does not match pattern"),
    # (a value is one flag: no blank, quote or newline to add another)
    ({"scheduler": {"draDeviceMapping": "driver=d,attribute=index --leader-elect=false"}},
     "/scheduler/draDeviceMapping"),
    ({"scheduler": {"draDeviceMapping": "driver=d\n- --leader-elect=false"}}, "/scheduler/draDeviceMapping"),
    ({"scheduler": {"draDeviceMapping": "colour=blue"}}, "/scheduler/draDeviceMapping"),
    ({"scheduler": {"gpuTypes": {"NVIDIA_L4": "l4,h100"}}}, "/scheduler/gpuTypes/NVIDIA_L4"),
    ({"scheduler": {"gpuTypes": {"NVIDIA_L4": "a=b"}}}, "/scheduler/gpuTypes/NVIDIA_L4"),
    ({"scheduler": {"gpuTypes": {"NVIDIA_L4": 4}}}, "at '/scheduler/gpuTypes/NVIDIA_L4': got number, want string"),
    ({"scheduler": {"scope": {"type": "namespace", "namespaces": ["Team_A"]}}}, "/scheduler/scope/namespaces"),
    ({"syncer": {"lockTaintEffect": "PreferNoSchedule"}}, "at '/syncer/lockTaintEffect'"),
    ({"schedulr": {}}, "additional properties 'schedulr' not allowed"),
    ({"syncer": {"leaderElection": {"enabled": False}}},
     "syncer.replicas is 2 with syncer.leaderElection.enabled false"),
    ({"networkPolicy": {"prometheusLabels": {"app": "prometheus"}}}, "networkPolicy.prometheusLabels is gone"),
    ({"networkPolicy": {"prometheus": {"namespace": ""}}},
     "networkPolicy.prometheus: set namespace (the namespace Prometheus runs in) or namespaceLabels"),
    ({"networkPolicy": {"prometheus": {"namespace": "Monitoring"}}}, "at '/networkPolicy/prometheus/namespace'"),
    ({"networkPolicy": {"prometheus": {"podLabels": {"app.kubernetes.io/name": None}}}},
     "at '/networkPolicy/prometheus/podLabels': minProperties: got 0, want 1"),
    ({"networkPolicy": {"prometheus": {"namespaceLabels": {"team": 1}}}},
     "at '/networkPolicy/prometheus/namespaceLabels/team': got number, want string"),
    ({"networkPolicy": {"prometheus": {"podLabel": {"app": "prometheus"}}}},
     "additional properties 'podLabel' not allowed"),
])
def test_wrong_values_fail_with_a_clear_message(values, message):
    assert message in refusal(values)


# ---- names -------------------------------------------------------------------------------------


def test_cluster_wide_names_carry_the_namespace_so_releases_never_collide():
    one = render(release="slurm", namespace="tenant-a")
    two = render(release="slurm", namespace="tenant-b")
    cluster_wide = {"ClusterRole", "ClusterRoleBinding"}
    names_one = {(d["kind"], d["metadata"]["name"]) for d in one if d["kind"] in cluster_wide}
    names_two = {(d["kind"], d["metadata"]["name"]) for d in two if d["kind"] in cluster_wide}
    assert names_one and not names_one & names_two
    assert "slurm-sunk-syncer" in names(one, "Deployment")


def test_a_changed_hook_secret_rolls_the_front_ends_and_nothing_else_does():
    """The scheduler and the extender read their secret at start: a new one must restart them."""
    def annotations(values: dict[str, Any]) -> dict[str, Any]:
        docs = render(merged({"extender": {"enabled": True}}, values))
        return {name: find(docs, "Deployment", name)["spec"]["template"]["metadata"].get("annotations")
                for name in ("sunk-scheduler", "sunk-extender", "sunk-syncer")}

    before = annotations({})
    assert annotations({}) == before  # generated secrets do not change the templates by themselves
    assert annotations({"hooks": {"keepOnUninstall": False}}) == before
    after = annotations({"hooks": {"existingSecret": "my-hooks"}})
    assert all(after[name] != before[name] for name in before)


# ---- how slurmd hosts prove their node to the Syncer's hook API -------------------------------------------------


def hooks_env(docs: list[dict[str, Any]]) -> dict[str, str]:
    text = find(docs, "ConfigMap", "sunk-slurm-hooks")["data"]["hooks.env"]
    return dict(line.split("=", 1) for line in text.splitlines() if line)


@pytest.mark.parametrize("locking", [True, False])
def test_the_syncer_may_review_tokens_exactly_with_node_locking(locking):
    docs = render({"syncer": {"nodeLocking": {"enabled": locking}}})
    role = find(docs, "ClusterRole", "slurm-sunk-syncer")
    assert verbs(role, "tokenreviews", "authentication.k8s.io") == ({"create"} if locking else set())


def test_a_new_install_names_the_pods_projected_token_with_the_audience_the_syncer_checks(tmp_path):
    from sunk.locking.config import config_from
    from sunk.translate.nodeset import pod as nodeset_pod

    docs = render()
    env = hooks_env(docs)
    assert env["SUNK_HOOKS_NODE_AUTH"] == "serviceAccountToken"
    assert env["SUNK_HOOKS_TOKEN_FILE"] == nodeset_pod.HOOKS_TOKEN_FILE  # where every NodeSet Pod mounts it
    assert env["SUNK_SYNCER_URL"].startswith("http://") and "SUNK_HOOKS_CA" not in env
    startup = syncer_startup(chart.container_args(docs, "sunk-syncer"), tmp_path)
    (source,) = nodeset_pod.hooks_token_volume()["projected"]["sources"]
    assert config_from(startup.args).token_audience == source["serviceAccountToken"]["audience"]


def test_hmac_node_auth_names_the_per_node_secret():
    env = hooks_env(render({"hooks": {"nodeAuth": "hmac"}, "slurmd": {"hooksEnv": {"tokenFile": "/t/%n"}}}))
    assert (env["SUNK_HOOKS_NODE_AUTH"], env["SUNK_HOOKS_TOKEN_FILE"]) == ("hmac", "/t/%n")


@pytest.mark.parametrize(("hooks", "takes_hmac"), [
    ({}, False), ({"nodeAuth": "serviceAccountToken"}, False), ({"acceptHmacTokens": True}, True),
    ({"nodeAuth": "hmac"}, True), ({"nodeAuth": "hmac", "acceptHmacTokens": False}, True)])
def test_the_syncer_takes_hmac_node_tokens_only_under_hmac_or_while_moving_from_it(hooks, takes_hmac, tmp_path):
    """A node token made once (and perhaps copied off a node) opens nothing once every node uses its Pod's token."""
    from sunk.commands.syncer import parse_args
    from sunk.locking.config import config_from

    secret = tmp_path / "syncer-token"
    secret.write_text(GOOD_SECRET)
    args = [a.replace("/var/run/sunk/hooks/syncer-token", str(secret))
            for a in chart.container_args(render({"hooks": hooks}), "sunk-syncer")]
    config = config_from(parse_args(args).args)
    assert (config.token_file == str(secret)) is takes_hmac and (config.token_file is None) is not takes_hmac
    pod = find(render({"hooks": hooks}), "Deployment", "sunk-syncer")["spec"]["template"]["spec"]
    assert ("hooks" in {v["name"] for v in pod["volumes"]}) is takes_hmac  # the root secret mounted only then
    assert config.token_audience == "sunk-syncer"


def test_an_unknown_node_auth_is_refused():
    assert "nodeAuth" in refusal({"hooks": {"nodeAuth": "jwt"}})


def test_syncer_hooks_tls_serves_https_and_tells_the_prolog_its_ca(tmp_path):
    from sunk.commands.syncer import hooks_listener

    docs = render({"syncer": {"hooksTLS": {"enabled": True, "existingSecret": "syncer-tls", "caFile": "/etc/ca.pem"}}})
    env = hooks_env(docs)
    assert env["SUNK_SYNCER_URL"] == "https://sunk-syncer.slurm.svc:8000" and env["SUNK_HOOKS_CA"] == "/etc/ca.pem"
    listener = hooks_listener(syncer_startup(chart.container_args(docs, "sunk-syncer"), tmp_path).config)
    assert listener.tls == TLS("/etc/sunk/hooks-tls/tls.crt", "/etc/sunk/hooks-tls/tls.key")
    pod = find(docs, "Deployment", "sunk-syncer")["spec"]["template"]["spec"]
    assert {"name": "hooks-tls", "secret": {"secretName": "syncer-tls"}} in pod["volumes"]
    assert {"name": "hooks-tls", "mountPath": "/etc/sunk/hooks-tls", "readOnly": True} in \
        pod["containers"][0]["volumeMounts"]
    assert "syncer.hooksTLS.enabled: set" in refusal({"syncer": {"hooksTLS": {"enabled": True}}})


# ---- the identity policy: the ConfigMap the daemons read, and the same rules at admission ----------------
WITH_VAP = ("--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy")


def parse_policy_text(text: str):
    return parse_policy(yaml.safe_load(text))


def identity_policy_docs(values: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    docs = chart.render(values, helm=HELM, extra_args=WITH_VAP)
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-identity-policy"))
    policy = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"
                  and d["metadata"]["name"].endswith("-identity-policy"))
    return config, policy["spec"]["validations"]


@pytest.mark.parametrize("rule", [
    {},  # the chart's default rule alone
    {"identity": {"userId": 1000}, "userIds": ["1000-1999", 2500], "accounts": ["a"], "partitions": [],
     "qos": ["normal"], "reservations": ["r"], "priority": {"min": 0, "max": 10}, "exclusive": ["none"]},
    {"identity": {"userId": 1000, "groupId": 50, "account": "a"}, "groupIds": [50], "priority": {}},
])
def test_the_identity_policy_renders_for_the_daemons_and_at_admission_from_the_same_values(rule):
    values = {"identityPolicy": {"namespaces": {"team-a": rule}} if rule else {}}
    config, validations = identity_policy_docs(values)
    policy = parse_policy_text(config["data"]["policy.json"])
    assert ("team-a" in policy.namespaces) is bool(rule)
    assert policy.default.identity is not None and policy.default.identity.user_id == 65534
    for validation in validations:
        assert validation["expression"] and validation["message"].startswith("sunk: ")
        assert " in null" not in validation["expression"], validation["expression"]
    user_checks = [v for v in validations if "user-id is not a user" in v["message"]]
    assert len(user_checks) == (2 if rule else 1)  # one per rule
    priority = [v["expression"] for v in validations if "priority" in v["message"] and "team-a" in v["expression"]]
    if rule.get("priority") == {}:
        assert priority and "<= 4294967293" in priority[0]  # {}: any priority, as policy.py reads it
    elif rule.get("priority"):
        assert priority and "<= 10" in priority[0]


def test_without_the_admission_api_the_chart_still_ships_the_policy_the_daemons_read():
    docs = chart.render({}, helm=HELM)
    assert not [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")]
    assert [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-identity-policy")]
    args = flags(chart.container_args(docs, "sunk-scheduler"))
    assert args["identity-policy"] == "/etc/sunk/identity-policy/policy.json"


# ---- sunk's own annotations on Pods: written by sunk only (annotationPolicy) ---------------------------------
GUARDED = ["sunk.coreweave.com/job-id", "sunk.coreweave.com/slurm-node"]


def annotation_policy(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The annotation policy and its binding, or None when the chart renders neither."""
    policies = [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")
                and d["metadata"]["name"].endswith("-sunk-annotations")]
    if not policies:
        return None
    policy, binding = (next(d for d in policies if d["kind"] == kind)
                       for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"))
    return policy, binding


@pytest.mark.parametrize(("values", "schedulers", "writers"), [
    ({}, ["slurm-sunk"], ["sunk-scheduler"]),
    ({"extender": {"enabled": True}}, ["slurm-sunk", "slurm-sunk-extender"], ["sunk-scheduler", "sunk-extender"]),
    ({"scheduler": {"enabled": False, "name": "x"}, "extender": {"enabled": True, "schedulerName": "ext"}}, ["ext"],
     ["sunk-extender"]),
])
def test_sunks_annotations_are_refused_at_admission_to_all_but_its_schedulers_accounts(values, schedulers, writers):
    """Pods of sunk's schedulers only (a Pod's schedulerName never changes), any write of the Pod or a subresource,
    a test of the annotations before anything else, every other writer refused, failing closed."""
    docs = render(values, extra_args=WITH_VAP)
    found = annotation_policy(docs)
    assert found is not None
    policy, binding = found
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods", "pods/*"]}]
    conditions = {c["name"]: c["expression"] for c in spec["matchConditions"]}
    assert conditions["pod-of-sunks-schedulers"].endswith(f"object.spec.schedulerName in {json_list(schedulers)}")
    changed = conditions["sunks-annotations-set-or-changed"]
    assert changed.startswith(json_list(GUARDED) + ".exists(k, ")
    assert "request.operation == 'UPDATE'" in changed and "oldObject.metadata.annotations" in changed
    accounts = json_list([f"system:serviceaccount:{NS}:{account}" for account in writers])
    assert conditions["not-sunks-writers"] == (f"!(request.userInfo.username in {accounts}) && "
                                               f"!(has(request.userInfo.groups) && 'system:masters' in "
                                               f"request.userInfo.groups)")
    assert spec["validations"] == [{"expression": "false", "reason": "Forbidden", "message": spec["validations"][0][
        "message"]}] and all(key in spec["validations"][0]["message"] for key in GUARDED)
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    # The accounts are the ones the daemons run as; the names, the ones the Syncer counts as sunk's.
    for writer in writers:
        assert find(docs, "ServiceAccount", writer)
        assert find(docs, "Deployment", writer)["spec"]["template"]["spec"]["serviceAccountName"] == writer
    assert flags(chart.container_args(docs, "sunk-syncer"))["scheduler-names"] == ",".join(schedulers)


def json_list(items: list[str]) -> str:
    """A list as the chart writes it into CEL (helm's toJson)."""
    return "[" + ",".join(f'"{item}"' for item in items) + "]"


@pytest.mark.parametrize(("values", "extra_args"), [
    ({"annotationPolicy": {"admission": False}}, WITH_VAP),  # turned off
    ({}, ()),  # an apiserver without ValidatingAdmissionPolicy (before 1.30)
    ({"scheduler": {"enabled": False}}, WITH_VAP),  # no scheduler of sunk's: no Pod of theirs to guard
])
def test_the_annotation_policy_can_be_turned_off_and_needs_the_admission_api(values, extra_args):
    docs = render(values, extra_args=extra_args)
    assert annotation_policy(docs) is None


def test_without_a_scheduler_the_syncer_counts_no_pod_as_sunks():
    docs = render({"scheduler": {"enabled": False}})
    assert flags(chart.container_args(docs, "sunk-syncer"))["scheduler-names"] == ""


def test_the_annotation_policy_value_is_a_boolean():
    assert "annotationPolicy" in refusal({"annotationPolicy": {"admission": "yes"}})
    assert "annotationPolicy" in refusal({"annotationPolicy": {"webhook": True}})


def test_the_login_users_reach_the_slurm_cluster_and_the_values_schema_refuses_a_bad_one():
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEB alice@laptop"
    values = copy.deepcopy(SLURM_CLUSTER)
    values["slurmCluster"]["login"] = {"users": [{"name": "alice", "uid": 5001, "authorizedKeys": [key]}]}
    obj = find(render(values), "SlurmCluster", "prod", NS)
    assert obj["spec"]["login"]["users"] == [{"name": "alice", "uid": 5001, "authorizedKeys": [key]}]
    values["slurmCluster"]["login"] = {"users": [{"name": "root", "uid": 0}]}
    assert "uid" in refusal(values)
    values["slurmCluster"]["login"] = {"users": [{"name": "alice", "uid": 5001, "shell": "/bin/sh"}]}
    assert "shell" in refusal(values)


def test_the_values_schema_refuses_the_login_users_the_operator_refuses():
    """helm install says it at once, instead of a SlurmCluster applied nowhere (SpecValid False)."""
    from sunk.translate.slurmcluster import users

    schema = json.loads((chart.CHART / "values.schema.json").read_text())
    item = schema["properties"]["slurmCluster"]["properties"]["login"]["properties"]["users"]["items"]
    assert set(item["properties"]["name"]["not"]["enum"]) == users.RESERVED_NAMES
    assert set(item["properties"]["uid"]["not"]["enum"]) == set(item["properties"]["gid"]["not"]["enum"]) == \
        users.RESERVED_IDS
    assert (item["properties"]["uid"]["minimum"], item["properties"]["uid"]["maximum"]) == users.UID_RANGE
    values = copy.deepcopy(SLURM_CLUSTER)
    values["slurmCluster"]["login"] = {"users": [{"name": "slurm", "uid": 5001}]}
    assert "users" in refusal(values)
