"""sunk's own Pod annotations against the real apiserver and a real Syncer: a tenant cannot keep sunk's drain.

The Syncer keeps a placeholder's drain while a Pod sunk placed on the Slurm node (its ``job-id`` and
``slurm-node`` annotations) outlives its job there. A namespace user (impersonated: the namespace's
default ServiceAccount, given the built-in ``edit`` role) who writes those annotations on a Pod of their
own, made with ``spec.nodeName`` to bypass every scheduler, must not be able to keep it:

- with the chart's annotation policy installed (rendered from the chart, applied to the real apiserver),
  such a Pod naming sunk's scheduler is refused at creation, and the annotations cannot be patched in;
- with no admission policy at all, a Pod of another scheduler carrying them is not counted by the
  Syncer (``--scheduler-names``): the drain is lifted while it is still on the Node. (A Pod naming sunk's
  scheduler is guarded by the policy only: the control Pod below shows the Syncer does count those.)
"""

from __future__ import annotations

import time
import uuid

import pytest
from kube_testns import applied_admission_policy, create_namespace, purge_namespace
from locking_harness import new_token, running_syncer
from slurmtools import wait_for
from test_outlived_drain import NODE, node_state

from sunk.kube import client as kc
from sunk.kube.resources import PODS, Resource
from sunk.model import names
from sunk.translate import drains
from sunk_dev import chart

ROLEBINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
GUARDED_SCHEDULER = "sunk-annguard-test"  # the scheduler name the policy (and the Syncer) call sunk's
ENDED_JOB = 999_999_001  # a job id Slurm has never run: "its job holds the node no more"


@pytest.fixture
def namespace(kube_api):
    ns = create_namespace(kube_api)
    yield ns
    purge_namespace(kube_api, ns)


@pytest.fixture
def tenant_api(dev_cluster, kube_api, namespace):
    """An ApiClient acting as the namespace's default ServiceAccount, with the built-in edit role there only."""
    from kubernetes import client, config

    kc.create(kube_api, ROLEBINDINGS, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "tenant-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}]}, namespace)
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(dev_cluster.kubeconfig), client_configuration=cfg)
    api = client.ApiClient(cfg)
    api.set_default_header("Impersonate-User", f"system:serviceaccount:{namespace}:default")
    yield api
    api.close()


@pytest.fixture
def admission(kube_api):
    """The chart's annotation policy and its binding, applied as the chart applies them."""
    docs = chart.render({"scheduler": {"name": GUARDED_SCHEDULER}},
                        extra_args=["--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"])
    with applied_admission_policy(kube_api, docs, "-sunk-annotations"):
        yield


def squatter(name: str, k8s_node: str, scheduler: str, *, forged: bool = True) -> dict:
    """A Pod made straight onto ``k8s_node`` (spec.nodeName: no scheduler binds it), annotated as if sunk had
    placed it on NODE for a job that ended."""
    annotations = {names.ANN_JOB_ID: str(ENDED_JOB), names.ANN_SLURM_NODE: NODE} if forged else {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations},
            "spec": {"schedulerName": scheduler, "nodeName": k8s_node, "terminationGracePeriodSeconds": 1,
                     "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"]}]}}


def refusal(call) -> str:
    """The apiserver's refusal of ``call()`` ('' if it was admitted)."""
    try:
        call()
    except kc.ApiError as exc:
        assert exc.status in (403, 422), exc
        return exc.message
    return ""


def test_a_tenant_cannot_write_sunks_annotations_on_a_pod_of_sunks_scheduler(kube_api, dev_cluster, namespace,
                                                                            tenant_api, admission):
    k8s_node = dev_cluster.k8s_node_for(NODE)

    def create(name: str, scheduler: str = GUARDED_SCHEDULER, api=tenant_api, forged: bool = True):
        return lambda: kc.create(api, PODS, squatter(name, k8s_node, scheduler, forged=forged), namespace)

    # The binding takes effect once the apiserver has compiled the policy: wait for the first refusal.
    message = wait_for(lambda: refusal(create(f"f-{uuid.uuid4().hex[:6]}")), 30, "the policy to take effect")
    assert names.ANN_JOB_ID in message and names.ANN_SLURM_NODE in message
    assert refusal(create("plain", forged=False)) == ""  # the same Pod without them: admitted
    for patch in ({names.ANN_JOB_ID: str(ENDED_JOB)}, {names.ANN_SLURM_NODE: NODE}):  # nor written in later
        assert names.ANN_JOB_ID in refusal(
            lambda p=patch: kc.patch(tenant_api, PODS, "plain", {"metadata": {"annotations": p}}, namespace))
    assert refusal(lambda: kc.patch(tenant_api, PODS, "plain", {"metadata": {"labels": {"a": "b"}}},
                                    namespace)) == ""  # any other update: admitted
    assert refusal(create("other", scheduler="default-scheduler")) == ""  # another scheduler's: not guarded
    assert refusal(create("admin", api=kube_api)) == ""  # a cluster admin (system:masters) is exempt
    # sunk's own writes to a Pod that carries them (an update that leaves them as they are) go through.
    assert refusal(lambda: kc.patch(tenant_api, PODS, "admin", {"metadata": {"labels": {"a": "b"}}},
                                    namespace)) == ""
    assert names.ANN_JOB_ID in refusal(lambda: kc.patch(
        tenant_api, PODS, "admin", {"metadata": {"annotations": {names.ANN_JOB_ID: None}}}, namespace))


def test_without_admission_a_forged_pod_of_another_scheduler_does_not_keep_sunks_drain(
        kube_api, dev_cluster, namespace, tenant_api, tmp_path):
    k8s_node = dev_cluster.k8s_node_for(NODE)
    token = tmp_path / "token"
    token.write_text(new_token())
    # A placeholder drain whose own Pod is long gone (its UID names no Pod): only another Pod that sunk placed
    # on NODE and that outlives its job there may keep it.
    drain = drains.PlaceholderDrain(namespace, "gone", ENDED_JOB, str(uuid.uuid4()))
    control = "placed-by-sunk"
    try:
        dev_cluster.slurm("scontrol", "update", f"nodename={NODE}", "state=drain", f"reason={drain.reason()}")
        kc.create(tenant_api, PODS, squatter("squatter", k8s_node, "default-scheduler"), namespace)
        kc.create(kube_api, PODS, squatter(control, k8s_node, GUARDED_SCHEDULER), namespace)  # sunk's, as it were
        with running_syncer(kube_api, dev_cluster, token, tmp_path / "syncer",
                            ["--node-permissions-enabled", f"--scheduler-names={GUARDED_SCHEDULER}"],
                            f"sunk-syncer-annguard-{uuid.uuid4().hex[:6]}"):
            time.sleep(5)  # the control Pod, of sunk's scheduler, keeps the drain
            assert node_state(dev_cluster) == (True, drain.reason())
            kc.delete(kube_api, PODS, control, namespace)
            wait_for(lambda: not node_state(dev_cluster)[0], 60,
                     "the Syncer to lift the drain, the tenant's forged Pod still on the Node", interval=1)
            assert kc.get(kube_api, PODS, "squatter", namespace)["spec"]["nodeName"] == k8s_node
    finally:
        dev_cluster.slurm("scontrol", "update", f"nodename={NODE}", "state=resume", check=False)
