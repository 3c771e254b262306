"""SlurmCluster on the real apiserver and controller-manager: sunk-operator as the chart deploys it
(``slurmCluster.enabled``), as the chart's ServiceAccount with its rendered RBAC, applies what the
chart's SlurmCluster wants by server-side apply, makes its keys once, refuses a bad line in the
status without touching what runs, and takes a changed line into the ConfigMap.

No Slurm Pod becomes ready here (the images are issue 34 item 1's): this proves the apiserver takes
every object as the operator writes it, the CRD takes the status, and the Role is enough (never a
403 in the operator's log). The Slurm side (a reconfigure of a live slurmctld, a job across a
restart) waits for the images.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

import pytest
from kube_testns import purge_namespace, wait_default_service_account
from rbac_harness import assert_never_forbidden, operator_as_deployed, rendered
from syncer_harness import never, wait_for

from sunk.kube import client as kc
from sunk.kube.resources import (
    CONFIGMAPS,
    DEPLOYMENTS,
    LEASES,
    NAMESPACES,
    NODES,
    NODESETS,
    PODS,
    SECRETS,
    SERVICES,
    SLURMCLUSTERS,
    STATEFULSETS,
)
from sunk.model import names
from sunk_dev.pool import apply_crds

NAME = "sc"


class Cluster:
    def __init__(self, api: Any, namespace: str):
        self.api, self.namespace = api, namespace

    def get(self) -> dict[str, Any]:
        return kc.get(self.api, SLURMCLUSTERS, NAME, self.namespace)

    def condition(self, ctype: str) -> dict[str, Any]:
        return next((c for c in (self.get().get("status") or {}).get("conditions") or []
                     if c.get("type") == ctype), {})

    def edit(self, **spec: Any) -> None:
        kc.patch(self.api, SLURMCLUSTERS, NAME, {"spec": spec}, self.namespace)

    def configmap(self) -> dict[str, Any] | None:
        try:
            return kc.get(self.api, CONFIGMAPS, f"{NAME}-slurm-config", self.namespace)
        except kc.ApiError as exc:
            if exc.not_found:
                return None
            raise

    def secret(self, name: str) -> dict[str, Any]:
        return kc.get(self.api, SECRETS, name, self.namespace)


@pytest.fixture(scope="module")
def slurm_cluster(kube_api, dev_cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("slurmcluster")
    apply_crds(kube_api)
    namespace = f"slurmcluster-{uuid.uuid4().hex[:6]}"
    kc.create(kube_api, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    wait_default_service_account(kube_api, namespace)
    values = {"operator": {"enabled": True}, "slurmd": {"namespace": namespace},
              "slurmCluster": {"enabled": True, "name": NAME,
                               "slurmctld": {"resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                                           "limits": {"memory": "1Gi"}}},
                               "partitions": [{"name": "gpu", "nodeSets": ["gpu"], "default": True}]}}
    # A NodeSet the partition names, selecting no Node (no slurmd Pod is made).
    kc.create(kube_api, NODESETS, {"apiVersion": names.NODESET_API_VERSION, "kind": "NodeSet", "metadata": {
        "name": "gpu", "namespace": namespace}, "spec": {"nodeSelector": {"sunk.dev/none": namespace}, "template": {
            "spec": {"containers": [{"name": "slurmd", "image": "sunk-dev/slurmd:v1"}]}}}}, namespace)
    (obj,) = [d for d in rendered("slurmcluster.yaml", values) if d["kind"] == "SlurmCluster"]
    assert obj["metadata"]["namespace"] == namespace
    kc.create(kube_api, SLURMCLUSTERS, obj, namespace)
    deployed = operator_as_deployed(kube_api, dev_cluster, tmp, namespace, values)
    assert f"--slurm-cluster={NAME}" in deployed.args, deployed.args
    account, operator = deployed.account, deployed.process
    try:
        operator.start()
        yield Cluster(kube_api, namespace)
    finally:
        operator.stop()
        purge_namespace(kube_api, namespace, (SLURMCLUSTERS, NODESETS))
        try:
            kc.delete(kube_api, LEASES, account["name"], account["namespace"])
        except kc.ApiError as exc:
            if not exc.not_found:
                raise
        assert_never_forbidden(operator.log)


def test_the_operator_applies_every_object_owned_by_the_cluster_and_makes_its_keys(slurm_cluster):
    c = slurm_cluster
    wait_for(lambda: c.condition("SpecValid").get("status") == "True" and c.get()["status"].get("configHash"),
             60, "the SlurmCluster's SpecValid=True and its configHash")
    uid = c.get()["metadata"]["uid"]
    cm = c.configmap()
    assert cm is not None and "ReturnToService=2" in cm["data"]["slurm.conf"]
    assert "PartitionName=gpu Nodes=ns-gpu Default=YES" in cm["data"]["slurm.conf"]
    assert cm["metadata"]["annotations"][names.ANN_CONFIG_HASH] == c.get()["status"]["configHash"]
    for resource, name in ((STATEFULSETS, "sc-slurmctld"), (STATEFULSETS, "sc-slurmdbd"), (STATEFULSETS, "sc-mariadb"),
                           (DEPLOYMENTS, "sc-slurmrestd"), (DEPLOYMENTS, "sc-login"), (SERVICES, "sc-slurmctld"),
                           (CONFIGMAPS, "sc-slurm-config"), (SERVICES, "sc-login"), (CONFIGMAPS, "sc-login-users")):
        obj = kc.get(c.api, resource, name, c.namespace)
        assert [o["uid"] for o in obj["metadata"]["ownerReferences"]] == [uid], name
        assert "sunk-operator" in {m.get("manager") for m in obj["metadata"].get("managedFields") or []}, name
    for name, key, size in (("sc-munge-key", "munge.key", 1024), ("sc-jwt-key", "jwt_hs256.key", 64),
                            ("sc-db-password", "password", 32)):
        secret = c.secret(name)
        assert len(base64.b64decode(secret["data"][key])) == size and not secret["metadata"].get("ownerReferences")
    host_key = c.secret("sc-login-host-keys")  # (the login Pods' sshd: generated once, kept)
    assert base64.b64decode(host_key["data"]["ssh_host_ed25519_key"]).startswith(b"-----BEGIN OPENSSH PRIVATE KEY")
    assert base64.b64decode(host_key["data"]["ssh_host_ed25519_key.pub"]).startswith(b"ssh-ed25519 ")
    assert not host_key["metadata"].get("ownerReferences")
    assert c.condition("SlurmctldReady").get("status") == "False"  # (no image: never ready here)
    ctld = kc.get(c.api, STATEFULSETS, "sc-slurmctld", c.namespace)["spec"]
    assert ctld["podManagementPolicy"] == "Parallel"
    assert ctld["template"]["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "100m", "memory": "64Mi"},
                                                                      "limits": {"memory": "1Gi"}}
    service = kc.get(c.api, SERVICES, "sc-login", c.namespace)
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(22, 22)]
    login = kc.get(c.api, DEPLOYMENTS, "sc-login", c.namespace)["spec"]["template"]["spec"]
    assert login["containers"][0]["readinessProbe"]["tcpSocket"]["port"] == 22
    assert [i["name"] for i in login["initContainers"]] == ["munged"]
    sshd, munged = login["containers"][0]["securityContext"], login["initContainers"][0]["securityContext"]
    # as the apiserver keeps them: sshd root with its few capabilities, munged restricted
    assert (sshd["runAsUser"], sshd["allowPrivilegeEscalation"], sshd["capabilities"]["drop"]) == (0, False, ["ALL"])
    assert munged["runAsNonRoot"] is True and munged["allowPrivilegeEscalation"] is False
    assert munged["capabilities"] == {"drop": ["ALL"]} and munged["seccompProfile"] == {"type": "RuntimeDefault"}
    assert login["securityContext"]["fsGroup"] == munged["runAsGroup"]


def test_a_bad_line_is_refused_in_the_status_and_what_runs_is_left_alone(slurm_cluster):
    c = slurm_cluster
    wait_for(lambda: c.configmap(), 60, "the ConfigMap")
    munge = c.secret("sc-munge-key")["data"]
    before = c.configmap()["metadata"]["resourceVersion"]  # type: ignore[index]
    c.edit(slurmConfig=["ReturnToService=0"])
    wait_for(lambda: c.condition("SpecValid").get("status") == "False", 30, "SpecValid=False")
    assert "ReturnToService is sunk's to set" in c.condition("SpecValid")["message"]
    never(lambda: c.configmap()["metadata"]["resourceVersion"] != before, 3, "the ConfigMap rewritten")  # type: ignore[index]
    c.edit(slurmConfig=["Foo=bar", "HealthCheckProgram=/tmp/x", "MaxJobCount=abc"])  # unknown, root program, type
    wait_for(lambda: "Foo is not a slurm.conf key sunk allows" in c.condition("SpecValid").get("message", ""), 30,
             "the unknown key refused")
    message = c.condition("SpecValid")["message"]
    assert "HealthCheckProgram names a program slurmd runs as root" in message and "MaxJobCount: the value" in message
    never(lambda: c.configmap()["metadata"]["resourceVersion"] != before, 3, "the ConfigMap rewritten")  # type: ignore[index]
    c.edit(slurmConfig=["SchedulerParameters=bf_window=120"])
    wait_for(lambda: "SchedulerParameters=bf_window=120" in c.configmap()["data"]["slurm.conf"],  # type: ignore[index]
             30, "the new line in slurm.conf")
    # (the operator applies the objects, then writes the status)
    wait_for(lambda: c.condition("SpecValid").get("status") == "True", 30, "SpecValid=True")
    assert c.secret("sc-munge-key")["data"] == munge  # a reconcile never replaces a key


def test_the_cluster_name_is_fixed_once_the_cluster_exists(slurm_cluster):
    """slurmctld keeps its state under its ClusterName and would crash-loop under another: the CRD's rule
    refuses the edit at the apiserver (the operator refuses it too, for a CRD without the rule: unit tests)."""
    c = slurm_cluster
    wait_for(lambda: (c.get().get("status") or {}).get("clusterName") == NAME, 60, "status.clusterName")
    ctld = kc.get(c.api, STATEFULSETS, f"{NAME}-slurmctld", c.namespace)["metadata"]["resourceVersion"]
    with pytest.raises(kc.ApiError) as refused:
        c.edit(slurm={"clusterName": "other"})
    assert refused.value.status == 422 and "is fixed once the operator applied it" in str(refused.value)
    c.edit(slurm={"clusterName": NAME.upper()})  # the default, the SlurmCluster's name, as Slurm reads it
    c.edit(slurm={"clusterName": None})
    assert "clusterName" not in c.get()["spec"]["slurm"]
    with pytest.raises(kc.ApiError) as refused:  # (a name Slurm cannot take, at any time)
        c.edit(slurm={"clusterName": "prod.a"})
    assert refused.value.status == 422 and "spec.slurm.clusterName" in str(refused.value)
    assert kc.get(c.api, STATEFULSETS, f"{NAME}-slurmctld", c.namespace)["metadata"]["resourceVersion"] == ctld


def test_a_nodeset_naming_the_cluster_gets_its_configuration_munge_key_and_hooks_mounted(slurm_cluster):
    """The slurmd Pod as the operator writes it and the apiserver takes it (a Node object with no kubelet:
    the Pod never starts, which this does not need)."""
    c = slurm_cluster
    wait_for(lambda: c.condition("SpecValid").get("status") == "True", 60, "the SlurmCluster's SpecValid=True")
    node = f"nsm-{c.namespace}"[:63]
    kc.create(c.api, NODES, {"apiVersion": "v1", "kind": "Node",
                             "metadata": {"name": node, "labels": {"sunk.dev/none": c.namespace}}})
    try:
        kc.patch(c.api, NODESETS, "gpu", {"spec": {"slurmCluster": NAME, "naming": {"scheme": "NodeName"}}},
                 c.namespace)

        def pod() -> dict[str, Any] | None:
            pods = kc.list_objects(c.api, PODS, c.namespace, label_selector=f"{names.LABEL_NODESET}=gpu")
            return pods[0] if pods else None

        wait_for(pod, 60, "the NodeSet's slurmd Pod")
        spec = pod()["spec"]  # type: ignore[index]
        volumes = {v["name"]: v for v in spec["volumes"]}
        sources = volumes["sunk-slurm-config"]["projected"]["sources"]
        assert sources[0] == {"configMap": {"name": "sc-slurm-config"}}
        assert {i["path"] for i in sources[1]["configMap"]["items"]} == {"prolog.d/50-sunk.sh", "epilog.d/50-sunk.sh"}
        assert volumes["sunk-munge-key"]["secret"]["secretName"] == "sc-munge-key"
        assert volumes["sunk-hooks-env"]["configMap"]["name"].endswith("-slurm-hooks")
        (slurmd,) = spec["containers"]
        assert {m["mountPath"] for m in slurmd["volumeMounts"]} >= {"/etc/slurm", "/run/munge", "/etc/sunk"}
        assert {"name": "SLURM_CONF", "value": "/etc/slurm/slurm.conf"} in slurmd["env"]
        assert [(i["name"], i.get("restartPolicy")) for i in spec["initContainers"]] == [("munged", "Always")]
        # munged runs the SlurmCluster's slurmd image, never the template's
        assert spec["initContainers"][0]["image"] == c.get()["spec"]["images"]["slurmd"] != slurmd["image"]
        env = {e["name"]: e.get("value") for e in slurmd["env"]}
        assert "nodeset-gpu" in env["SUNK_SLURM_FEATURES"].split(",")

        def cluster_found() -> dict[str, Any] | None:  # (the status is written after the Pods, not with them)
            conditions = (kc.get(c.api, NODESETS, "gpu", c.namespace).get("status") or {}).get("conditions") or []
            return next((x for x in conditions if x["type"] == "ClusterFound"), None)

        wait_for(lambda: (cluster_found() or {}).get("status") == "True", 30, "the NodeSet's ClusterFound=True")

        # A template container mounting the operator's munge key volume is refused, and the Pod is left alone.
        uid = pod()["metadata"]["uid"]  # type: ignore[index]
        thief = {"name": "thief", "image": "sunk-dev/slurmd:v1",
                 "volumeMounts": [{"name": "sunk-munge-key", "mountPath": "/stolen", "readOnly": True}]}
        kc.patch(c.api, NODESETS, "gpu", {"spec": {"template": {"spec": {"containers": [
            {"name": "slurmd", "image": "sunk-dev/slurmd:v1"}, thief]}}}}, c.namespace)

        def spec_valid() -> dict[str, Any]:
            return next((x for x in kc.get(c.api, NODESETS, "gpu", c.namespace).get("status", {}).get(
                "conditions") or [] if x["type"] == "SpecValid"), {})

        wait_for(lambda: spec_valid().get("status") == "False", 60, "the NodeSet's SpecValid=False")
        assert "containers[1].volumeMounts[0].name" in spec_valid()["message"]
        assert pod()["metadata"]["uid"] == uid and not pod()["metadata"].get("deletionTimestamp")  # type: ignore[index]
    finally:
        kc.patch(c.api, NODESETS, "gpu", {"spec": {"nodeSelector": {"sunk.dev/none": "nothing"}, "template": {
            "spec": {"containers": [{"name": "slurmd", "image": "sunk-dev/slurmd:v1"}]}}}}, c.namespace)
        kc.delete(c.api, NODES, node)


def test_deleting_the_cluster_takes_its_objects_and_keeps_its_keys(slurm_cluster):
    c = slurm_cluster
    wait_for(lambda: c.configmap(), 60, "the ConfigMap")
    kc.delete(c.api, SLURMCLUSTERS, NAME, c.namespace)
    wait_for(lambda: c.configmap() is None, 60, "the garbage collector deleting the ConfigMap")
    assert c.secret("sc-munge-key")["data"]  # no owner: it outlives the SlurmCluster, as the volumes do
