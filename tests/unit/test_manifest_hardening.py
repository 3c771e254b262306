"""The deployment is hardened: Pod security, budgets and spreading, least-privilege RBAC, no
placeholder secret, and NetworkPolicies that admit what must connect and nothing else.

Reads the Helm chart as `helm template` renders it with every component on (sunk_dev.chart;
tests/unit/test_chart.py checks each switch, tests/cluster that the apiserver accepts the
objects and that Pod Security `restricted` admits every Pod).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from sunk.hooks.auth import weakness
from sunk.model.types import Obj
from sunk_dev import chart

USER = 65532  # the sunk image's User (sunk_dev.images.NONROOT_UID)
NS = chart.NAMESPACE
# Every component, in the chart's default (cluster) scope.
EVERYTHING = {"extender": {"enabled": True}, "operator": {"enabled": True}}

DOCS: list[Obj] = chart.render(EVERYTHING, helm=chart.helm_binary())


def _name(doc: Obj) -> str:
    meta = doc["metadata"]
    return f"{doc['kind']} {meta.get('namespace') + '/' if meta.get('namespace') else ''}{meta['name']}"


def of_kind(kind: str) -> list[Obj]:
    return [doc for doc in DOCS if doc["kind"] == kind]


def one(kind: str, name: str) -> Obj:
    found = [doc for doc in of_kind(kind) if doc["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} rendered"
    return found[0]


DEPLOYMENTS = of_kind("Deployment")
EXPECTED_DEPLOYMENTS = {"sunk-syncer", "sunk-scheduler", "sunk-extender", "sunk-kube-scheduler", "sunk-operator"}
# Every object with a Pod template: the Deployments, and the hooks' Jobs (sunk-syncer release-nodes, ensure-secrets).
WORKLOADS = DEPLOYMENTS + of_kind("Job")


def containers() -> Iterator[Any]:
    for deployment in WORKLOADS:
        spec = deployment["spec"]["template"]["spec"]
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            yield pytest.param(deployment, container, id=f"{deployment['metadata']['name']}/{container['name']}")


def test_every_component_is_shipped():
    assert {d["metadata"]["name"] for d in DEPLOYMENTS} == EXPECTED_DEPLOYMENTS
    assert {d["metadata"]["name"] for d in of_kind("Job")} == {"sunk-release-nodes", "sunk-ensure-secrets",
                                                                "sunk-drop-secrets"}


# ---- Pod security ------------------------------------------------------------------------------


def effective(deployment: Obj, container: Obj, field: str) -> Any:
    """A securityContext field as the kubelet applies it: the container's, else the Pod's."""
    own = container.get("securityContext") or {}
    if field in own:
        return own[field]
    return (deployment["spec"]["template"]["spec"].get("securityContext") or {}).get(field)


@pytest.mark.parametrize(("deployment", "container"), list(containers()))
def test_every_container_is_hardened(deployment, container):
    where = f"{_name(deployment)}, container {container['name']}"
    context = container.get("securityContext") or {}
    assert effective(deployment, container, "runAsNonRoot") is True, f"{where}: runAsNonRoot"
    assert effective(deployment, container, "runAsUser") == USER, f"{where}: runAsUser {USER}"
    assert effective(deployment, container, "runAsGroup") == USER, f"{where}: runAsGroup {USER}"
    assert (effective(deployment, container, "seccompProfile") or {}).get("type") == "RuntimeDefault", \
        f"{where}: seccompProfile RuntimeDefault"
    # Pod Security has no Pod-level form of these three: they must be on the container.
    assert context.get("allowPrivilegeEscalation") is False, f"{where}: allowPrivilegeEscalation false"
    assert context.get("readOnlyRootFilesystem") is True, f"{where}: readOnlyRootFilesystem"
    capabilities = context.get("capabilities") or {}
    assert capabilities.get("drop") == ["ALL"], f"{where}: capabilities.drop [ALL]"
    assert not capabilities.get("add"), f"{where}: adds capabilities {capabilities.get('add')}"
    assert not context.get("privileged"), f"{where}: privileged"


@pytest.mark.parametrize(("deployment", "container"), list(containers()))
def test_every_container_has_a_writable_tmp(deployment, container):
    where = f"{_name(deployment)}, container {container['name']}"
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"].get("volumes", [])}
    mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
    assert "/tmp" in mounts, f"{where}: nothing mounted at /tmp (the root filesystem is read-only)"
    volume = volumes.get(mounts["/tmp"]["name"])
    assert volume is not None and "emptyDir" in volume, f"{where}: /tmp is not an emptyDir"
    assert not mounts["/tmp"].get("readOnly"), f"{where}: /tmp mounted read-only"


@pytest.mark.parametrize(("deployment", "container"), list(containers()))
def test_every_container_has_requests_and_limits(deployment, container):
    where = f"{_name(deployment)}, container {container['name']}"
    resources = container.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    assert {"cpu", "memory"} <= set(requests), f"{where}: requests {requests} lack cpu or memory"
    assert "memory" in limits, f"{where}: no memory limit"


@pytest.mark.parametrize("deployment", WORKLOADS, ids=lambda d: d["metadata"]["name"])
def test_every_pod_runs_as_its_own_service_account_with_a_token(deployment):
    spec = deployment["spec"]["template"]["spec"]
    account = spec.get("serviceAccountName")
    assert account and account != "default", f"{_name(deployment)}: no ServiceAccount of its own"
    one("ServiceAccount", account)
    # Every one of them talks to the apiserver.
    assert spec.get("automountServiceAccountToken", True) is True, f"{_name(deployment)}: no API token mounted"
    assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC"), \
        f"{_name(deployment)}: shares a host namespace"


# ---- availability ------------------------------------------------------------------------------


def selects(selector: Obj, labels: dict[str, str]) -> bool:
    """matchLabels and the In/NotIn/Exists/DoesNotExist expressions, as the apiserver reads them."""
    if not selector:
        return False  # an empty selector would select everything: never what is meant here
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if (op == "In" and labels.get(key) not in values) or (op == "NotIn" and labels.get(key) in values) \
                or (op == "Exists" and key not in labels) or (op == "DoesNotExist" and key in labels):
            return False
    return True


REPLICATED = [d for d in DEPLOYMENTS if d["spec"].get("replicas", 1) > 1]


def test_every_sunk_deployment_is_replicated():
    assert {d["metadata"]["name"] for d in REPLICATED} == EXPECTED_DEPLOYMENTS


@pytest.mark.parametrize("deployment", REPLICATED, ids=lambda d: d["metadata"]["name"])
def test_every_replicated_deployment_has_a_budget(deployment):
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    budgets = [p for p in of_kind("PodDisruptionBudget")
               if p["metadata"]["namespace"] == deployment["metadata"]["namespace"]
               and selects(p["spec"].get("selector") or {}, labels)]
    assert len(budgets) == 1, f"{_name(deployment)}: {len(budgets)} PodDisruptionBudgets select its Pods"
    budget = budgets[0]
    assert budget["apiVersion"] == "policy/v1", f"{_name(budget)}: apiVersion"
    assert budget["spec"].get("minAvailable") == 1, f"{_name(budget)}: minAvailable 1"
    assert deployment["spec"]["replicas"] > budget["spec"]["minAvailable"], \
        f"{_name(budget)}: leaves no replica of {_name(deployment)} to evict"


@pytest.mark.parametrize("deployment", REPLICATED, ids=lambda d: d["metadata"]["name"])
def test_every_replicated_deployment_spreads_over_machines(deployment):
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    anti = ((deployment["spec"]["template"]["spec"].get("affinity") or {}).get("podAntiAffinity") or {})
    terms = [t["podAffinityTerm"] for t in anti.get("preferredDuringSchedulingIgnoredDuringExecution") or []]
    assert any(t["topologyKey"] == "kubernetes.io/hostname" and selects(t.get("labelSelector") or {}, labels)
               for t in terms), f"{_name(deployment)}: no preferred podAntiAffinity on kubernetes.io/hostname"


# ---- RBAC --------------------------------------------------------------------------------------


ROLES = of_kind("Role") + of_kind("ClusterRole")


def rules() -> Iterator[Any]:
    for role in ROLES:
        for i, rule in enumerate(role.get("rules") or []):
            yield pytest.param(role, rule, id=f"{role['kind']}/{role['metadata']['name']}#{i}")


@pytest.mark.parametrize(("role", "rule"), list(rules()))
def test_no_rule_grants_everything(role, rule):
    for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
        assert "*" not in (rule.get(field) or []), f"{_name(role)}: {field} '*' in {rule}"
    assert "escalate" not in rule["verbs"] and "bind" not in rule["verbs"] and "impersonate" not in rule["verbs"], \
        f"{_name(role)}: {rule['verbs']}"


@pytest.mark.parametrize(("role", "rule"), list(rules()))
def test_lease_rules_name_their_lease(role, rule):
    if "leases" not in rule["resources"]:
        return
    assert role["kind"] == "Role", f"{_name(role)}: Lease rights cluster-wide"
    if "create" in rule["verbs"]:
        # RBAC cannot match create by name (the object has none yet): such a rule never applies.
        assert rule["verbs"] == ["create"] and not rule.get("resourceNames"), \
            f"{_name(role)}: create goes in a rule of its own, without resourceNames: {rule}"
    else:
        assert rule.get("resourceNames"), f"{_name(role)}: {rule['verbs']} on leases without resourceNames"
        assert not {"list", "watch", "deletecollection"} & set(rule["verbs"]), \
            f"{_name(role)}: {rule['verbs']} on leases (leader election reads one Lease by name)"


def granted(subject: tuple[str, str]) -> list[tuple[Obj, Obj]]:
    """(binding, role) for every rendered Role/ClusterRole bound to ServiceAccount (namespace, name)."""
    out = []
    for binding in of_kind("RoleBinding") + of_kind("ClusterRoleBinding"):
        if not any(s["kind"] == "ServiceAccount" and (s["namespace"], s["name"]) == subject
                   for s in binding["subjects"]):
            continue
        ref = binding["roleRef"]
        out.extend((binding, role) for role in ROLES
                   if role["kind"] == ref["kind"] and role["metadata"]["name"] == ref["name"]
                   and (ref["kind"] == "ClusterRole"
                        or role["metadata"]["namespace"] == binding["metadata"]["namespace"]))
    return out


def allowed(subject: tuple[str, str], verb: str, resource: str, *, group: str = "", name: str | None = None,
            namespace: str | None = None) -> bool:
    for binding, role in granted(subject):
        if namespace and binding["kind"] == "RoleBinding" and binding["metadata"]["namespace"] != namespace:
            continue
        for rule in role.get("rules") or []:
            names = rule.get("resourceNames")
            if (group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]
                    and (not names or (name is not None and name in names))):
                return True
    return False


def test_every_binding_names_a_role_that_exists():
    builtin = {"system:kube-scheduler", "system:volume-scheduler", "extension-apiserver-authentication-reader"}
    for binding in of_kind("RoleBinding") + of_kind("ClusterRoleBinding"):
        ref = binding["roleRef"]
        if ref["name"] in builtin:
            continue
        role = one(ref["kind"], ref["name"])
        if ref["kind"] == "Role":
            assert role["metadata"]["namespace"] == binding["metadata"]["namespace"], \
                f"{_name(binding)}: its Role {ref['name']} is in another namespace"


def lease_of(deployment: Obj) -> tuple[str, str]:
    """(namespace, name) of the Lease the component elects on, as its code defaults it."""
    namespace = deployment["metadata"]["namespace"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    command = container["command"]
    if command[0] == "kube-scheduler":
        config_map = one("ConfigMap", "sunk-kube-scheduler-config")
        election = yaml.safe_load(config_map["data"]["config.yaml"])["leaderElection"]
        return election["resourceNamespace"], election["resourceName"]
    flags = dict(a.removeprefix("--").split("=", 1) for a in container.get("args", []) if "=" in a)
    # --leader-election-id defaults to the program's name; the namespace to the slurmd Pods'
    # (sunk-syncer) or the Pod's own (sunk-scheduler, sunk-extender).
    default_namespace = flags.get("watch-namespace", namespace) if command[0] == "sunk-syncer" else namespace
    return flags.get("leader-election-namespace", default_namespace), flags.get("leader-election-id", command[0])


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=lambda d: d["metadata"]["name"])
def test_each_component_may_hold_its_own_lease_and_no_other(deployment):
    account = (deployment["metadata"]["namespace"], deployment["spec"]["template"]["spec"]["serviceAccountName"])
    namespace, lease = lease_of(deployment)
    group = "coordination.k8s.io"
    for verb in ("get", "update"):
        assert allowed(account, verb, "leases", group=group, name=lease, namespace=namespace), \
            f"{_name(deployment)}: may not {verb} its Lease {namespace}/{lease}"
    assert allowed(account, "create", "leases", group=group, namespace=namespace), \
        f"{_name(deployment)}: may not create its Lease in {namespace}"
    for other in {lease_of(d)[1] for d in DEPLOYMENTS} - {lease}:
        if deployment["metadata"]["name"] == "sunk-kube-scheduler" and other == "kube-scheduler":
            continue
        assert not allowed(account, "update", "leases", group=group, name=other, namespace=namespace), \
            f"{_name(deployment)}: may take the Lease {other} of another component"


def test_the_scheduler_role_lets_it_report_unschedulable_pods():
    # scheduler/kubeops.py mark_unschedulable: PATCH pods/status (PodScheduled=False).
    role = one("ClusterRole", f"{NS}-sunk-scheduler")
    assert any("" in r["apiGroups"] and "pods/status" in r["resources"] and "patch" in r["verbs"]
               for r in role["rules"]), f"{_name(role)}: no patch on pods/status"
    for account in ((NS, "sunk-scheduler"), (NS, "sunk-extender")):
        assert allowed(account, "patch", "pods/status"), f"ServiceAccount {account}: no patch on pods/status"
        assert allowed(account, "create", "pods/binding"), f"ServiceAccount {account}: no pods/binding"


def test_both_front_ends_read_nodes_for_their_readiness():
    # scheduler/assembly.py: one Node informer for both (a Pod stuck terminating on a NotReady or
    # gone Node lets its job go), and, for sunk-scheduler, the lock taint.
    for account in ((NS, "sunk-scheduler"), (NS, "sunk-extender")):
        for verb in ("list", "watch"):
            assert allowed(account, verb, "nodes"), f"ServiceAccount {account}: may not {verb} nodes"
        assert not allowed(account, "patch", "nodes"), f"ServiceAccount {account}: may patch nodes"


def test_the_syncer_role_covers_each_feature():
    account = (NS, "sunk-syncer")
    for verb, resource in (("patch", "nodes"), ("patch", "nodes/status"), ("patch", "pods/status"),
                           ("create", "pods/eviction"), ("patch", "pods"), ("list", "pods"), ("watch", "nodes"),
                           ("create", "events"), ("patch", "events")):
        assert allowed(account, verb, resource), f"ServiceAccount sunk-syncer: may not {verb} {resource}"


def test_the_uninstall_hook_may_stop_the_syncer_and_nothing_else():
    """sunk-syncer release-nodes scales the Syncer's Deployment to 0: by name, nothing else of apps; it
    reads and patches Nodes and the slurmd Pods, and writes nothing else."""
    account = (NS, "sunk-release-nodes")
    assert allowed(account, "patch", "deployments/scale", group="apps", name="sunk-syncer", namespace=NS)
    assert allowed(account, "get", "deployments", group="apps", name="sunk-syncer", namespace=NS)
    for other in ("sunk-scheduler", "sunk-extender", "sunk-operator", "sunk-kube-scheduler"):
        assert not allowed(account, "patch", "deployments/scale", group="apps", name=other, namespace=NS), other
    for verb, resource, group in (("delete", "deployments", "apps"), ("patch", "deployments", "apps"),
                                  ("update", "deployments/scale", "apps"), ("delete", "pods", ""),
                                  ("create", "pods/eviction", ""), ("patch", "nodes/status", ""),
                                  ("watch", "nodes", ""), ("create", "events", "")):
        assert not allowed(account, verb, resource, group=group), f"sunk-release-nodes may {verb} {resource}"
    assert not allowed(account, "patch", "pods", namespace="default"), "sunk-release-nodes patches Pods anywhere"


@pytest.mark.parametrize("role", ROLES, ids=lambda r: f"{r['kind']}/{r['metadata']['name']}")
def test_no_verb_the_code_never_sends(role):
    # Every write to Pods and Nodes is a patch (sunk/kube/patch.py, scheduler/kubeops.py); events
    # are core/v1 Events, created and patched (sunk/kube/events.py).
    for rule in role.get("rules") or []:
        for resource in rule["resources"]:
            if resource in ("pods", "pods/status", "nodes", "nodes/status", "events"):
                assert "update" not in rule["verbs"], f"{_name(role)}: update on {resource} (only patch is sent)"
        assert "events.k8s.io" not in rule["apiGroups"], f"{_name(role)}: events.k8s.io (the code writes core Events)"
        assert not {"deletecollection", "escalate", "bind"} & set(rule["verbs"]), f"{_name(role)}: {rule['verbs']}"


# ---- secrets and hooks -------------------------------------------------------------------------


def test_no_weak_or_placeholder_secret_is_shipped():
    """The hook secrets are generated (or refused when weak: test_chart.py); nothing waits to be filled in."""
    secrets = of_kind("Secret")
    assert secrets, "no Secret rendered"
    for secret in secrets:
        assert not secret.get("stringData"), f"{_name(secret)}: stringData"
        for key, value in (secret.get("data") or {}).items():
            raw = base64.b64decode(value)
            assert raw.strip(), f"{_name(secret)}: {key} is empty"
            if secret["metadata"]["name"] == "sunk-hooks":
                assert weakness(raw) is None, f"{_name(secret)}: {key} {weakness(raw)}"


def test_slurmd_hosts_hold_their_node_token_not_the_root_secret():
    env = dict(line.split("=", 1) for line in
               one("ConfigMap", "sunk-slurm-hooks")["data"]["hooks.env"].splitlines() if "=" in line)
    syncer = one("Deployment", "sunk-syncer")["spec"]["template"]["spec"]["containers"][0]
    root = next(a.split("=", 1)[1] for a in syncer["args"] if a.startswith("--hooks-token-file="))
    # the slurmd Pod's own projected ServiceAccount token (a new install's default, hooks.nodeAuth)
    assert env["SUNK_HOOKS_TOKEN_FILE"] == "/var/run/secrets/sunk/hooks-token/token"
    assert env["SUNK_HOOKS_TOKEN_FILE"] != root


@pytest.mark.parametrize("name", ["sunk-scheduler", "sunk-extender"])
def test_the_hook_url_speaks_what_the_hook_listener_serves(name):
    container = one("Deployment", name)["spec"]["template"]["spec"]["containers"][0]
    flags = dict(a.removeprefix("--").split("=", 1) for a in container["args"] if "=" in a)
    tls = bool(flags.get("hooks-tls-cert-file"))
    assert flags["hooks-url"].startswith("https://" if tls else "http://"), f"{name}: --hooks-url {flags['hooks-url']}"
    assert flags["hooks-url"].endswith(":" + flags["hooks-api-bind-address"].rpartition(":")[2])
    if name == "sunk-extender":  # kube-scheduler's verbs: mutual TLS
        assert flags.get("tls-cert-file") and flags.get("tls-key-file") and flags.get("client-ca-file")


# ---- NetworkPolicy -----------------------------------------------------------------------------

SLURMD = {"app.kubernetes.io/name": "slurmd"}
SLURMCTLD = {"app.kubernetes.io/component": "slurmctld"}
PROMETHEUS = {"app.kubernetes.io/name": "prometheus"}
KUBE_SCHEDULER = {"app.kubernetes.io/name": "sunk-kube-scheduler", "app.kubernetes.io/instance": chart.RELEASE}


def admitted(policies: list[Obj], port: int, labels: dict[str, str], namespace: str) -> bool:
    """Whether a Pod with ``labels`` in ``namespace`` (labelled kubernetes.io/metadata.name) may connect."""
    ns_labels = {"kubernetes.io/metadata.name": namespace}
    for policy in policies:
        for rule in policy["spec"].get("ingress") or []:
            if rule.get("ports") and port not in [p["port"] for p in rule["ports"]]:
                continue
            for peer in rule.get("from") or []:
                if "ipBlock" in peer:
                    continue
                if "namespaceSelector" in peer:
                    ns_ok = peer["namespaceSelector"] == {} or selects(peer["namespaceSelector"], ns_labels)
                else:
                    ns_ok = namespace == policy["metadata"]["namespace"]
                pod_ok = "podSelector" not in peer or peer["podSelector"] == {} or selects(peer["podSelector"], labels)
                if ns_ok and pod_ok:
                    return True
    return False


@pytest.mark.parametrize("name", ["sunk-syncer", "sunk-scheduler", "sunk-extender"])
def test_network_policies_admit_only_who_must_connect(name):
    deployment = one("Deployment", name)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    policies = [p for p in of_kind("NetworkPolicy") if selects(p["spec"]["podSelector"], labels)]
    assert policies, f"{_name(deployment)}: no NetworkPolicy selects its Pods"
    for policy in policies:
        assert policy["spec"].get("policyTypes") == ["Ingress"], f"{_name(policy)}: policyTypes"
        for rule in policy["spec"].get("ingress") or []:
            assert rule.get("from") and rule.get("ports"), f"{_name(policy)}: a rule open to all sources or ports"
    assert admitted(policies, 8000, SLURMD, "slurm"), f"{name}: slurmd Pods cannot reach the hooks"
    assert admitted(policies, 8000, SLURMCTLD, "slurm"), f"{name}: slurmctld Pods cannot reach the hooks"
    assert not admitted(policies, 8000, SLURMD, "default"), f"{name}: slurmd-labelled Pods of any namespace get in"
    assert not admitted(policies, 8000, PROMETHEUS, "monitoring"), f"{name}: the hooks are open to Prometheus"
    assert admitted(policies, 8080, PROMETHEUS, "monitoring"), f"{name}: Prometheus cannot scrape"
    assert not admitted(policies, 8080, PROMETHEUS, "slurm"), f"{name}: metrics open to a Prometheus-labelled Pod"
    assert not admitted(policies, 8080, PROMETHEUS, "tenant-a"), f"{name}: a tenant's Prometheus-labelled Pod scrapes"
    assert not admitted(policies, 8080, {"app": "other"}, "monitoring"), f"{name}: metrics open to any monitoring Pod"
    assert not admitted(policies, 8080, {"app": "other"}, "slurm"), f"{name}: metrics open to any Pod"
    assert not admitted(policies, 8888, {"app": "other"}, "slurm"), f"{name}: 8888 open to any Pod"
    if name == "sunk-extender":
        assert admitted(policies, 8888, KUBE_SCHEDULER, "slurm"), "kube-scheduler cannot reach the extender"
        assert not admitted(policies, 8888, SLURMD, "slurm"), "slurmd Pods can reach the extender verbs"
        other_release = {**KUBE_SCHEDULER, "app.kubernetes.io/instance": "other"}
        assert not admitted(policies, 8888, other_release, "slurm"), "another release's kube-scheduler gets in"
    ports = {p["containerPort"] for p in deployment["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert ports - {8081} <= {8000, 8080, 8888}, f"{name}: a port no policy was written for: {ports}"


def test_the_operator_admits_only_prometheus_in_its_namespace():
    policy = one("NetworkPolicy", "sunk-operator")
    pod_labels = one("Deployment", "sunk-operator")["spec"]["template"]["metadata"]["labels"]
    assert selects(policy["spec"]["podSelector"], pod_labels)
    assert admitted([policy], 8080, PROMETHEUS, "monitoring"), "Prometheus cannot scrape the operator"
    for labels, namespace in ((PROMETHEUS, "tenant-a"), (PROMETHEUS, NS), ({"app": "other"}, "monitoring")):
        assert not admitted([policy], 8080, labels, namespace), f"operator metrics open to {labels} in {namespace}"


def test_every_object_names_its_namespace_and_stays_in_the_release_namespace():
    cluster_wide = {"ClusterRole", "ClusterRoleBinding"}
    for doc in DOCS:
        namespace = doc["metadata"].get("namespace")
        assert bool(namespace) == (doc["kind"] not in cluster_wide), _name(doc)
        if namespace and namespace != NS:
            # The one exception: kube-scheduler reads the authentication ConfigMap in kube-system.
            assert (doc["kind"], namespace) == ("RoleBinding", "kube-system"), _name(doc)
            assert doc["roleRef"]["name"] == "extension-apiserver-authentication-reader", _name(doc)


def test_the_operator_role_covers_each_feature_and_no_more():
    account = (NS, "sunk-operator")
    group = "sunk.coreweave.com"
    for verb, resource, api_group in (
            ("list", "nodes", ""), ("watch", "nodes", ""),
            ("create", "pods", ""), ("patch", "pods", ""), ("delete", "pods", ""), ("watch", "pods", ""),
            ("get", "pods", ""),  # after a refused uid-guarded patch: was the Pod replaced? (kp.patch_object)
            ("get", "nodesets", group), ("patch", "nodesets", group), ("patch", "nodesets/status", group),
            ("create", "nodeslices", group), ("patch", "nodeslices", group), ("delete", "nodeslices", group),
            ("create", "events", ""), ("patch", "events", "")):
        assert allowed(account, verb, resource, group=api_group, namespace=NS), \
            f"ServiceAccount sunk-operator: may not {verb} {resource}"
    for verb, resource in (("patch", "nodes"), ("create", "pods/eviction"), ("update", "nodesets")):
        assert not allowed(account, verb, resource, group=group if "nodesets" in resource else ""), \
            f"ServiceAccount sunk-operator: may {verb} {resource}, which no code of it sends"
    assert not allowed(account, "create", "pods", namespace="default"), "sunk-operator may create Pods anywhere"
