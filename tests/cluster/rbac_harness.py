"""Running sunk's components as the chart's ServiceAccounts, with their RBAC applied for real.

test_manifests.py proves each rendered object's schema with a dry run; it cannot prove that the
Roles cover every call a component makes. A missing verb leaves a real deployment never
ready (an informer that may not list never syncs) or failing one write in a hundred.

The objects are the chart's (manifests/chart/sunk), rendered by ``helm template`` as release
``sunk`` in namespace ``slurm`` with both front ends on (and ``values`` over that, where a test
names some): ``template`` names one file of the chart's templates/ (``scheduler-rbac.yaml``,
``extender.yaml``, ...).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
from procs import Process
from syncer_harness import free_port
from test_manifests import PATHS

from sunk.kube import client as kc
from sunk_dev import chart, kubeconf
from sunk_dev.pool import create_or_replace

# As deployed with both front ends (the extender binds the scheduler's Pod rules too).
VALUES = {"extender": {"enabled": True}}


@functools.cache
def _rendered(template: str, values: str = "{}") -> tuple[dict[str, Any], ...]:
    return tuple(chart.render(chart.merged(VALUES, json.loads(values)), helm=chart.helm_binary(),
                              extra_args=["--show-only", f"templates/{template}"]))


def rendered(template: str, values: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The objects of the chart's ``templates/<template>``, as ``helm template`` renders them (with ``values``
    over the harness's: a switch the test turns on, e.g. ``scheduler.gangPodGroups`` and its RBAC)."""
    return [dict(doc) for doc in _rendered(template, json.dumps(values or {}, sort_keys=True))]


def apply(api, doc: dict[str, Any]) -> None:
    """Create, or replace what is there (kubectl apply's effect for these small objects)."""
    prefix, plural, namespaced = PATHS[doc["kind"]]
    meta = doc["metadata"]
    collection = f"{prefix}/namespaces/{meta['namespace']}/{plural}" if namespaced else f"{prefix}/{plural}"
    create_or_replace(api, collection, doc)


def apply_manifest(api, template: str, *, leases: Sequence[str] = (),
                   values: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Apply the chart's ``templates/<template>`` as rendered (with ``values``), but for ``leases``: Lease names
    the tests' processes use (beside the demo's daemons, which hold the rendered names) added to each Lease
    rule's names."""
    docs = rendered(template, values)
    for doc in docs:
        apply(api, with_leases(doc, leases))
    return docs


def with_leases(doc: dict[str, Any], leases: Sequence[str]) -> dict[str, Any]:
    if doc["kind"] != "Role" or not leases:
        return doc
    rules = [{**rule, "resourceNames": [*rule["resourceNames"], *leases]}
             if "leases" in rule.get("resources", ()) and rule.get("resourceNames") else rule
             for rule in doc.get("rules") or []]
    return {**doc, "rules": rules}


def deployment_args(template: str, deployment: str, overrides: Mapping[str, str],
                    docs: Sequence[dict[str, Any]] | None = None) -> list[str]:
    """The container args of a Deployment of the chart's ``templates/<template>`` (or of ``docs``), as
    rendered, but with the values of ``overrides``' flags (in-cluster addresses and paths) replaced.
    Overriding a flag the chart does not pass fails: the test would no longer run what an operator deploys."""
    args = chart.container_args(list(docs) if docs is not None else rendered(template), deployment)
    shipped = {a.partition("=")[0] for a in args}
    missing = set(overrides) - shipped
    assert not missing, f"{template} no longer passes {sorted(missing)} to {deployment}"
    return [f"{flag}={overrides[flag]}" if flag in overrides else arg
            for arg in args for flag in [arg.partition("=")[0]]]


def service_account_token(api, namespace: str, name: str) -> str:
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
    answer = kc.request(api, "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", body=request)
    return answer["status"]["token"]


def kubeconfig_for(api, dev_cluster, namespace: str, name: str, path: Path) -> Path:
    """A kubeconfig that authenticates as ServiceAccount ``namespace/name`` (a TokenRequest token)."""
    return kubeconf.write_kubeconfig(path, dev_cluster.kube_dir, name, service_account_token(api, namespace, name))


def as_service_account(api, dev_cluster, template: str, tmp: Path, leases: Sequence[str] = (),
                       values: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], Path]:
    """Apply the chart's ``templates/<template>`` (rendered with ``values``); its (first) ServiceAccount's
    metadata, and a kubeconfig as it."""
    docs = apply_manifest(api, template, leases=leases, values=values)
    account = next(d["metadata"] for d in docs if d["kind"] == "ServiceAccount")
    return account, kubeconfig_for(api, dev_cluster, account["namespace"], account["name"], tmp / "kubeconfig")


def assert_never_forbidden(log: Path) -> None:
    text = log.read_text(errors="replace")
    assert "forbidden" not in text.lower(), text[-3000:]  # a 403's reason, and its message's "is forbidden"


@attrs.frozen
class DeployedOperator:
    process: Process  # not started
    account: dict[str, Any]  # its ServiceAccount (name, namespace): its Lease has that name
    args: list[str]  # the chart's flags for the values, then the test's


def operator_as_deployed(api, dev_cluster, tmp: Path, namespace: str, values: Mapping[str, Any],
                         extra: Sequence[str] = ()) -> DeployedOperator:
    """sunk-operator as the chart runs it for ``values``: its flags, its ServiceAccount's RBAC (a kubeconfig of
    that account's token) and the dev cluster's slurmrestd, watching ``namespace``; ``extra`` flags after."""
    account, kubeconfig = as_service_account(api, dev_cluster, "operator-rbac.yaml", tmp, values=values)
    env = dev_cluster.env()
    probes, metrics = free_port(), free_port()
    args = deployment_args("operator.yaml", "sunk-operator", {
        "--slurm-api-base": env["SLURM_REST_URL"], "--slurm-auth-token-file": env["SLURM_JWT_FILE"],
        "--watch-namespace": namespace, "--metrics-bind-address": f"127.0.0.1:{metrics}",
        "--health-probe-bind-address": f"127.0.0.1:{probes}"}, docs=rendered("operator.yaml", values))
    args = [*args, *extra]
    process = Process("sunk-operator", "sunk.commands.operator", [*args, f"--kubeconfig={kubeconfig}"],
                      f"http://127.0.0.1:{probes}/readyz", tmp, env={"SLURM_JWT": ""})
    return DeployedOperator(process, account, args)
