"""Pod Security `restricted` admits the Pod of every Deployment the chart renders (and of its hook Jobs: the
Secrets' install/upgrade and uninstall ones, the uninstall's node release), and refuses one stripped of its
securityContext.

The apiserver's PodSecurity admission judges a Pod at admission, dry runs included, and answers
403 naming each violation: a container that loses a hardened field fails here in the
apiserver's own words. tests/unit/test_manifest_hardening.py checks the fields without a
cluster; this proves they are the ones `restricted` asks for, on a real kube-apiserver.
"""

from __future__ import annotations

import copy
import time
import uuid

import pytest
from kube_testns import purge_namespace, wait_default_service_account

from sunk.kube import client as kc
from sunk.kube.resources import NAMESPACES, PODS
from sunk.model.types import Obj
from sunk_dev import chart

ENFORCE = {"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}


def _deployments() -> dict[str, Obj]:
    """Every object with a Pod template: the Deployments, and the hook Jobs."""
    docs = chart.render({"extender": {"enabled": True}, "operator": {"enabled": True}}, helm=chart.helm_binary())
    return {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] in ("Deployment", "Job")}


DEPLOYMENTS = _deployments()


def pod_from(deployment: Obj, namespace: str, name: str | None = None) -> Obj:
    """The Pod the Deployment's ReplicaSet (or the Job) would create, in ``namespace``."""
    template = copy.deepcopy(deployment["spec"]["template"])
    spec = template["spec"]
    # Its ServiceAccount lives in slurm, not in the test namespace, and Pod Security does not
    # look at it: leave it and its token out, so that nothing but Pod Security can refuse the Pod.
    spec.pop("serviceAccountName", None)
    spec["automountServiceAccountToken"] = False
    metadata = {"name": name or deployment["metadata"]["name"], "namespace": namespace,
                "labels": template["metadata"].get("labels") or {}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def unhardened(pod: Obj) -> Obj:
    """The same Pod without any securityContext, the Pod's or its containers'."""
    bare = copy.deepcopy(pod)
    bare["metadata"]["name"] += "-unhardened"
    bare["spec"].pop("securityContext", None)
    for container in [*bare["spec"].get("initContainers", []), *bare["spec"]["containers"]]:
        container.pop("securityContext", None)
    return bare


def dry_run_create(api, pod: Obj) -> Obj:
    path = PODS.path(pod["metadata"]["namespace"])
    return kc.request(api, "POST", path, query={"dryRun": "All", "fieldValidation": "Strict"}, body=pod)


def refusal(api, pod: Obj) -> kc.ApiError | None:
    try:
        dry_run_create(api, pod)
    except kc.ApiError as exc:
        return exc
    return None


@pytest.fixture(scope="module")
def restricted_namespace(kube_api):
    """A fresh namespace that enforces Pod Security `restricted`, in force before any test uses it."""
    name = f"pss-test-{uuid.uuid4().hex[:8]}"
    kc.request(kube_api, "POST", NAMESPACES.path(), body={
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": ENFORCE}})
    try:
        wait_default_service_account(kube_api, name)  # (before it, every Pod is a 403 of another kind)
        # PodSecurity reads namespaces through a cache: wait until it refuses a bare Pod here, so
        # that a Pod admitted below is admitted by `restricted`, not by a namespace it has yet to see.
        probe = unhardened(pod_from(DEPLOYMENTS["sunk-syncer"], name, name="probe"))
        deadline = time.monotonic() + 15
        while (exc := refusal(kube_api, probe)) is None or exc.status != 403:
            assert time.monotonic() < deadline, f"PodSecurity never enforced {ENFORCE} in {name}: {exc}"
            time.sleep(0.5)
        yield name
    finally:
        purge_namespace(kube_api, name)


def test_every_component_is_checked():
    assert set(DEPLOYMENTS) == {"sunk-syncer", "sunk-scheduler", "sunk-extender", "sunk-kube-scheduler",
                                "sunk-operator", "sunk-release-nodes", "sunk-ensure-secrets", "sunk-drop-secrets"}


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_pod_security_restricted_admits_the_pod_of(kube_api, restricted_namespace, name):
    pod = pod_from(DEPLOYMENTS[name], restricted_namespace)
    try:
        echoed = dry_run_create(kube_api, pod)
    except kc.ApiError as exc:  # 403: the message lists every violation
        pytest.fail(f"{DEPLOYMENTS[name]['kind']} {name}: Pod Security restricted refuses its Pod: {exc}")
    # A dry run answers with the Pod as it would have been stored.
    assert echoed["metadata"]["name"] == name and echoed["metadata"]["namespace"] == restricted_namespace


def test_pod_security_restricted_refuses_a_pod_without_the_security_context(kube_api, restricted_namespace):
    """The negative control: the namespace does enforce, so the test above can fail."""
    pod = unhardened(pod_from(DEPLOYMENTS["sunk-syncer"], restricted_namespace))
    exc = refusal(kube_api, pod)
    assert exc is not None, "a Pod without any securityContext was admitted under restricted"
    assert exc.status == 403, exc
    assert "violates PodSecurity" in exc.message, exc.message
    for field in ("allowPrivilegeEscalation", "capabilities", "runAsNonRoot", "seccompProfile"):
        assert field in exc.message, f"{field} not among the violations: {exc.message}"
