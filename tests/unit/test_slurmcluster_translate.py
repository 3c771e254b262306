"""A SlurmCluster, pure: its spec's checks (every problem), the slurm.conf lines sunk needs and that no
author's line can override, the other files, the objects it wants, the key Secrets and the status."""

from __future__ import annotations

import base64
import copy
import hashlib
from typing import Any

import pytest
from slurmcluster_fakes import IMAGES, cluster

from sunk.model import names
from sunk.translate.slurmcluster import desired, paths
from sunk.translate.slurmcluster.lines import OWNED, check_line
from sunk.translate.slurmcluster.plan import Facts, decide, workload_condition
from sunk.translate.slurmcluster.slurmconf import render
from sunk.translate.slurmcluster.spec import RELEASES, read_spec


def problems(obj: dict[str, Any], nodesets: tuple[str, ...] = ("gpu", "cpu")) -> list[str]:
    read = read_spec(obj, nodesets)
    assert (read.spec is None) == bool(read.problems)
    return list(read.problems)


def conf(obj: dict[str, Any] | None = None, name: str = "slurm.conf") -> str:
    read = read_spec(obj or cluster(), ("gpu", "cpu"))
    assert read.spec is not None, read.problems
    return render(read.spec).data[name]


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


# ---- slurm.conf: what sunk needs -----------------------------------------------------------------------


@pytest.mark.parametrize("line", [
    "ReturnToService=2", "PrologFlags=Alloc", "Prolog=/etc/slurm/prolog.d/*", "Epilog=/etc/slurm/epilog.d/*",
    "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory", "KillWait=30", "AuthType=auth/munge",
    "AuthAltTypes=auth/jwt", "AuthAltParameters=jwt_key=/var/run/sunk/jwt/jwt_hs256.key", "GresTypes=gpu",
    "MaxNodeCount=1024", "TreeWidth=65533", "ClusterName=sc",
    "SlurmctldHost=sc-slurmctld-0(sc-slurmctld-0.sc-slurmctld.slurm.svc)",
    "AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=sc-slurmdbd",
    "NodeSet=ns-gpu Feature=nodeset-gpu", "PartitionName=gpu Nodes=ns-gpu Default=YES",
])
def test_slurm_conf_carries_what_sunk_needs(line):
    assert line in lines(conf(cluster(hooks={"configMap": "sunk-slurm-hooks"})))


def test_without_the_hooks_configmap_no_prolog_or_epilog_names_files_no_pod_has():
    """Node locking off: the chart makes no hooks ConfigMap, nothing is mounted at /etc/slurm/prolog.d, and a
    Prolog naming it would fail every job and drain its node (found by a job on a NodeSet's real slurmd)."""
    found = lines(conf(cluster()))
    assert "PrologFlags=Alloc" in found
    assert not [line for line in found if line.startswith(("Prolog=", "Epilog="))]


def test_no_node_is_configured_statically_each_registers_with_slurmd_z():
    assert not [line for line in lines(conf()) if line.lower().startswith("nodename=")]


def test_every_key_is_written_once():
    keys = [line.split("=", 1)[0] for line in lines(conf(cluster(slurmConfig=["SchedulerType=sched/backfill"])))
            if not line.startswith(("NodeSet=", "PartitionName="))]
    assert len(keys) == len(set(keys))


def test_the_authors_values_are_written():
    text = conf(cluster(killWait=90, maxNodeCount=64, gresTypes=["gpu", "shard"], slurm={
        "release": "24.11", "clusterName": "prod"}, slurmConfig=["SchedulerParameters=bf_window=60,bf_interval=30",
                                                                "  # a comment", ""]))
    assert {"KillWait=90", "MaxNodeCount=64", "GresTypes=gpu,shard", "ClusterName=prod",
            "SchedulerParameters=bf_window=60,bf_interval=30"} <= set(lines(text))
    assert text.index("TreeWidth=") < text.index("SchedulerParameters=") < text.index("PartitionName=")


def test_a_backup_controller_is_a_second_slurmctld_host_sharing_one_volume():
    text = conf(cluster(slurmctld={"backup": {"enabled": True}}))
    hosts = [line for line in lines(text) if line.startswith("SlurmctldHost=")]
    assert hosts == ["SlurmctldHost=sc-slurmctld-0(sc-slurmctld-0.sc-slurmctld.slurm.svc)",
                     "SlurmctldHost=sc-slurmctld-1(sc-slurmctld-1.sc-slurmctld.slurm.svc)"]


def test_without_slurmdbd_there_is_no_accounting_nor_slurmdbd_conf():
    obj = cluster(slurmdbd={"enabled": False})
    read = read_spec(obj, ("gpu",))
    assert read.spec is not None
    files = render(read.spec).data
    assert "slurmdbd.conf" not in files and "AccountingStorage" not in files["slurm.conf"]


def test_partition_options_and_several_nodesets():
    text = conf(cluster(partitions=[{"name": "batch", "nodeSets": ["cpu", "gpu"], "options": {
        "MaxTime": "1-00:00:00", "OverSubscribe": "NO", "PriorityTier": 2}}]))
    assert "PartitionName=batch Nodes=ns-cpu,ns-gpu Default=NO MaxTime=1-00:00:00 OverSubscribe=NO PriorityTier=2" \
        in lines(text)
    assert {"NodeSet=ns-cpu Feature=nodeset-cpu", "NodeSet=ns-gpu Feature=nodeset-gpu"} <= set(lines(text))


def test_cgroup_and_gres_conf():
    assert lines(conf(name="cgroup.conf")) == ["CgroupPlugin=cgroup/v2", "IgnoreSystemd=yes", "ConstrainCores=yes",
                                               "ConstrainRAMSpace=yes", "ConstrainDevices=yes"]
    assert lines(conf(name="gres.conf")) == ["AutoDetect=nvml"]
    assert lines(conf(cluster(gresTypes=[]), name="gres.conf")) == []


def test_slurmdbd_conf_names_the_internal_or_the_external_database_and_never_a_password():
    internal = lines(conf(name="slurmdbd.conf"))
    assert {"DbdHost=sc-slurmdbd-0", "StorageHost=sc-mariadb", "StoragePort=3306", "StorageUser=slurm",
            "StorageLoc=slurm_acct_db", "AuthAltTypes=auth/jwt"} <= set(internal)
    external = lines(conf(cluster(slurmdbd={"database": {"external": {
        "host": "db.example.com", "port": 3307, "user": "acct", "database": "acct",
        "passwordSecret": {"name": "db", "key": "pw"}}}}), name="slurmdbd.conf"))
    assert {"StorageHost=db.example.com", "StoragePort=3307", "StorageUser=acct", "StorageLoc=acct"} <= set(external)
    assert not [line for line in internal + external if line.lower().startswith("storagepass")]


def test_the_hash_follows_the_files():
    assert render(read_spec(cluster(), ("gpu",)).spec).hash == render(read_spec(cluster(), ("gpu",)).spec).hash
    other = read_spec(cluster(slurmConfig=["SchedulerType=sched/builtin"]), ("gpu",)).spec
    assert render(other).hash != render(read_spec(cluster(), ("gpu",)).spec).hash


def test_the_hash_of_the_files_is_the_one_the_configmaps_of_earlier_operators_carry():
    """(A new hash would reconfigure every running cluster once at the operator's upgrade, for nothing.)"""
    files = render(read_spec(cluster(), ("gpu",)).spec).files
    digest = hashlib.sha256()
    for name, text in files:
        digest.update(f"{len(name)}:{name}{len(text)}:{text}".encode())
    assert render(read_spec(cluster(), ("gpu",)).spec).hash == digest.hexdigest()[:16]


def test_slurmctlds_state_is_a_directory_of_the_volume_per_cluster_name_in_slurms_lower_case():
    assert "StateSaveLocation=/var/spool/slurmctld/sc" in lines(conf())
    named = cluster(slurm={"release": "25.11", "clusterName": "Prod_A"})
    assert "StateSaveLocation=/var/spool/slurmctld/prod_a" in lines(conf(named))
    assert "ClusterName=Prod_A" in lines(conf(named))


@pytest.mark.parametrize("applied, spec_name, refused", [
    (None, "other", False),  # nothing applied yet: the first name is taken
    ("sc", None, False),  # the default, the SlurmCluster's name
    ("sc", "SC", False),  # Slurm reads it in lower case: the same cluster
    ("sc", "other", True),
    ("prod", None, True),  # a name set before, dropped: the default is another name
])
def test_the_cluster_name_is_fixed_once_applied(applied, spec_name, refused):
    slurm: dict[str, Any] = {"release": "25.11"}
    if spec_name is not None:
        slurm["clusterName"] = spec_name
    obj = cluster(slurm=slurm)
    if applied is not None:
        obj["status"] = {"clusterName": applied}
    plan = decide(Facts(obj, ["gpu"]))
    if not refused:
        assert plan.spec is not None and plan.objects, plan.problems
        return
    assert plan.spec is None and not plan.objects and not plan.secrets and plan.config is None
    (valid,) = plan.conditions
    assert (valid["type"], valid["status"], valid["reason"]) == ("SpecValid", "False", "ClusterNameChanged")
    assert f"({applied!r}, status.clusterName)" in valid["message"] and "fixed once applied" in valid["message"]


# ---- the author's lines: refused when they would override sunk's, or inject -----------------------------


@pytest.mark.parametrize("key", sorted(OWNED))
def test_a_line_overriding_a_key_sunk_sets_is_refused_whatever_its_case(key):
    found = problems(cluster(slurmConfig=[f"{key.upper()}=0"]))
    assert len(found) == 1 and "is sunk's to set" in found[0] and found[0].startswith("spec.slurmConfig[0]")


@pytest.mark.parametrize("line, why", [
    ("SchedulerType=sched/backfill ReturnToService=0", "without blanks"),
    ("SchedulerType=sched/backfill\nReturnToService=0", "line break"),
    ("SchedulerType=sched/backfill\rReturnToService=0", "line break"),
    ("SchedulerType=x\0", "line break or NUL"),
    ("SchedulerType=sched/backfill \\", "without blanks"),
    ("SchedulerType=sched/backfill\\", "without blanks"),
    ("SchedulerType=\"a b\"", "without blanks"),
    ("SchedulerType='x'", "without blanks"),
    ("SchedulerType=x#ReturnToService=0", "without blanks"),
    ("SchedulerType=", "without blanks"),
    ("SchedulerType=ü", "printable ASCII"),
    ("just words", "not Key=Value"),
    ("=value", "not a slurm.conf key"),
    ("1Key=value", "not a slurm.conf key"),
    ("Sched-Type=x", "not a slurm.conf key"),
    (7, "must be a string"),
])
def test_a_line_that_is_not_one_plain_key_value_is_refused(line, why):
    pair, problem = check_line(line)
    assert pair is None and problem is not None and why in problem


def test_a_key_set_twice_is_refused():
    found = problems(cluster(slurmConfig=["SchedulerType=sched/backfill", "schedulertype=sched/builtin"]))
    assert found == ["spec.slurmConfig[1]: schedulertype is set twice (first at [0])"]


def test_a_partition_option_sunk_sets_or_of_the_wrong_shape_is_refused():
    found = problems(cluster(partitions=[{"name": "gpu", "nodeSets": ["gpu"], "options": {
        "Nodes": "ALL", "Default": "YES", "MaxTime": "1 ReturnToService=0", "Hidden": True}}]))
    assert len(found) == 4, found
    assert sum("is sunk's to set" in p for p in found) == 2


# ---- every other problem of the spec ---------------------------------------------------------------------


@pytest.mark.parametrize("change, expected", [
    ({"slurm": {"release": "23.02"}}, "spec.slurm.release '23.02' is not a Slurm release sunk supports"),
    ({"slurm": {}}, "spec.slurm.release '' is not a Slurm release"),
    ({"slurm": "25.11"}, "spec.slurm must be an object"),
    ({"slurm": {"release": "25.11", "clusterName": "a b"}}, "spec.slurm.clusterName 'a b' is not a Slurm cluster"),
    ({"images": {**IMAGES, "slurmctld": ""}}, "spec.images.slurmctld is required"),
    ({"images": {**IMAGES, "login": "x; rm -rf /"}}, "spec.images.login 'x; rm -rf /' is not an image reference"),
    ({"partitions": [{"name": "gpu", "nodeSets": ["nope"]}]},
     "names NodeSet 'nope', which does not exist in the SlurmCluster's namespace"),
    ({"partitions": [{"name": "gpu", "nodeSets": []}]}, "nodeSets is empty"),
    ({"partitions": [{"nodeSets": ["gpu"]}]}, "spec.partitions[0].name is required"),
    ({"partitions": [{"name": "a b", "nodeSets": ["gpu"]}]}, "is not a Slurm partition name"),
    ({"partitions": [{"name": "p", "nodeSets": ["gpu"]}, {"name": "p", "nodeSets": ["cpu"]}]}, "is named twice"),
    ({"partitions": [{"name": "p", "nodeSets": ["gpu"], "default": True},
                     {"name": "q", "nodeSets": ["cpu"], "default": True}]}, "more than one partition is the default"),
    ({"partitions": ["gpu"]}, "spec.partitions[0] must be an object"),
    ({"partitions": "gpu"}, "spec.partitions must be a list"),
    ({"gresTypes": ["GPU"]}, "spec.gresTypes: 'GPU' is not a GRES name"),
    ({"killWait": 0}, "spec.killWait must be a whole number from 1 to 65533"),
    ({"killWait": True}, "spec.killWait must be a whole number"),
    ({"maxNodeCount": 10**6}, "spec.maxNodeCount must be a whole number from 1 to 65536"),
    ({"slurmrestd": {"replicas": 0}}, "spec.slurmrestd.replicas must be a whole number from 1 to 16"),
    ({"login": {"replicas": -1}}, "spec.login.replicas must be a whole number from 0 to 16"),
    ({"login": {"service": {"type": "ExternalName"}}}, "spec.login.service.type 'ExternalName' is not one of"),
    ({"slurmctld": {"stateVolume": {"size": "lots"}}}, "spec.slurmctld.stateVolume.size 'lots' is not a size"),
    ({"slurmctld": {"stateVolume": {"storageClassName": "Fast_SSD"}}}, "is not a StorageClass name"),
    ({"slurmctld": {"backup": {"enabled": "yes"}}}, "spec.slurmctld.backup.enabled must be true or false"),
    ({"keys": {"munge": {"existingSecret": "../etc"}}}, "spec.keys.munge.existingSecret '../etc' is not a Secret"),
    ({"slurmdbd": {"database": {"external": {"host": "db"}}}},
     "spec.slurmdbd.database.external.passwordSecret.name is required"),
    ({"slurmdbd": {"database": {"external": {"passwordSecret": {"name": "db"}}}}},
     "spec.slurmdbd.database.external.host is required"),
    ({"slurmConfig": "SchedulerType=sched/backfill"}, "spec.slurmConfig must be a list"),
    ({"slurmConfig": ["A=1"] * 300}, "spec.slurmConfig has 300 lines; at most 256"),
])
def test_each_problem_is_said(change, expected):
    found = problems(cluster(**change))
    assert any(expected in p for p in found), found


def test_a_spec_that_is_not_an_object_and_a_bad_name():
    obj = cluster()
    obj["spec"] = ["x"]
    obj["metadata"]["name"] = "Not_A_Name"
    found = problems(obj)
    assert "spec must be an object" in found and any("metadata.name 'Not_A_Name'" in p for p in found)
    assert any("at most 40" in p for p in problems({**cluster(), "metadata": {"name": "a" * 41, "namespace": "s"}}))


def test_images_are_needed_only_for_what_runs():
    no_db = {k: v for k, v in IMAGES.items() if k not in ("slurmdbd", "mariadb")}
    assert problems(cluster(images=no_db, slurmdbd={"enabled": False})) == []
    external = {"external": {"host": "db", "passwordSecret": {"name": "db"}}}
    assert problems(cluster(images={k: v for k, v in IMAGES.items() if k != "mariadb"},
                            slurmdbd={"database": external})) == []


def test_a_bad_spec_plans_no_object_and_says_why():
    plan = decide(Facts(cluster(slurmConfig=["ReturnToService=0"]), ["gpu"]))
    assert plan.spec is None and not plan.objects and not plan.secrets and plan.config is None
    (valid,) = plan.conditions
    assert valid["type"] == "SpecValid" and valid["status"] == "False" and "ReturnToService" in valid["message"]


# ---- the objects -----------------------------------------------------------------------------------------


def objects(obj: dict[str, Any] | None = None) -> dict[tuple[str, str], dict[str, Any]]:
    plan = decide(Facts(obj or cluster(), ["gpu", "cpu"]))
    assert plan.spec is not None, plan.problems
    return {(o["kind"], o["metadata"]["name"]): dict(o) for o in plan.objects}


def test_every_object_is_owned_labelled_and_in_the_clusters_namespace():
    found = objects()
    assert set(found) == {("ConfigMap", "sc-slurm-config"), ("Service", "sc-slurmctld"),
                          ("StatefulSet", "sc-slurmctld"), ("Service", "sc-mariadb"), ("StatefulSet", "sc-mariadb"),
                          ("Service", "sc-slurmdbd"), ("StatefulSet", "sc-slurmdbd"), ("Service", "sc-slurmrestd"),
                          ("Deployment", "sc-slurmrestd"), ("Deployment", "sc-login"), ("Service", "sc-login"),
                          ("ConfigMap", "sc-login-users")}
    for obj in found.values():
        meta = obj["metadata"]
        assert meta["namespace"] == "slurm" and meta["labels"][names.LABEL_SLURM_CLUSTER] == "sc"
        assert meta["ownerReferences"] == [{"apiVersion": "sunk.coreweave.com/v1alpha1", "kind": "SlurmCluster",
                                            "name": "sc", "uid": "uid-sc", "controller": True}]


def test_the_configmap_holds_the_files_and_their_hash():
    plan = decide(Facts(cluster(), ["gpu"]))
    cm = next(o for o in plan.objects if o["kind"] == "ConfigMap")
    assert plan.config is not None and cm["data"] == plan.config.data
    assert set(cm["data"]) == {"slurm.conf", "cgroup.conf", "gres.conf", "slurmdbd.conf"}
    assert cm["metadata"]["annotations"] == {names.ANN_CONFIG_HASH: plan.config.hash}


def mounts(workload: dict[str, Any]) -> dict[str, str]:
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return {m["mountPath"]: m["name"] for m in container["volumeMounts"]}


@pytest.mark.parametrize("resources, fragment", [
    ("2Gi", "must be an object with requests and limits"),
    ({"claims": [{"name": "x"}]}, "'claims' is not requests or limits"),
    ({"requests": ["cpu"]}, "requests must be an object of quantities"),
    ({"requests": {"nvidia.com/gpu": 1}}, "'nvidia.com/gpu' is not one of cpu, memory, ephemeral-storage"),
    ({"requests": {"cpu": "two"}}, "requests.cpu: not a Kubernetes quantity: 'two'"),
    ({"requests": {"memory": -1}}, "cannot be negative"),
    ({"requests": {"cpu": True}}, "requests.cpu: not a Kubernetes quantity"),
    ({"requests": {"memory": " 2Gi"}}, "requests.memory: not a Kubernetes quantity: ' 2Gi'"),
    ({"requests": {"memory": "4Gi"}, "limits": {"memory": "2Gi"}},
     "requests.memory 4Gi is more than limits.memory 2Gi"),
])
def test_resources_the_apiserver_would_refuse_are_a_spec_problem(resources, fragment):
    for where, spec in (("spec.slurmctld.resources", {"slurmctld": {"resources": resources}}),
                        ("spec.slurmdbd.database.internal.resources",
                         {"slurmdbd": {"database": {"internal": {"resources": resources}}}})):
        found = problems(cluster(**spec))
        assert any(p.startswith(where) and fragment in p for p in found), found


def test_resources_are_each_components_own():
    plan = decide(Facts(cluster(slurmctld={"resources": {"requests": {"cpu": 2, "memory": "4Gi"},
                                                         "limits": {"cpu": "4", "memory": "4Gi"}}},
                                login={"resources": {"requests": {"memory": "256Mi"}}}), ["gpu"]))
    assert plan.spec is not None, plan.problems
    found = {(o["kind"], o["metadata"]["name"]): o["spec"]["template"]["spec"] for o in plan.objects
             if o["kind"] in ("StatefulSet", "Deployment")}
    ctld = found[("StatefulSet", "sc-slurmctld")]
    assert ctld["containers"][0]["resources"] == {"requests": {"cpu": "2", "memory": "4Gi"},
                                                  "limits": {"cpu": "4", "memory": "4Gi"}}
    assert "resources" not in ctld["initContainers"][0]  # (munged: the daemon's resources are the daemon's)
    assert found[("Deployment", "sc-login")]["containers"][0]["resources"] == {"requests": {"memory": "256Mi"}}
    for key in (("StatefulSet", "sc-slurmdbd"), ("StatefulSet", "sc-mariadb"), ("Deployment", "sc-slurmrestd")):
        assert "resources" not in found[key]["containers"][0], key


def slurmdbd_conf_hash(obj: dict[str, Any]) -> str:
    template = objects(obj)[("StatefulSet", "sc-slurmdbd")]["spec"]["template"]
    return template["metadata"]["annotations"][names.ANN_SLURMDBD_CONF_HASH]


def test_slurmdbd_rolls_when_its_file_changes_and_only_then():
    """slurmdbd reads slurmdbd.conf at start only: its Pod template carries the file's hash."""
    base = slurmdbd_conf_hash(cluster())
    assert base == slurmdbd_conf_hash(cluster(slurmConfig=["SchedulerParameters=bf_window=120"]))  # slurm.conf only
    external = cluster(slurmdbd={"database": {"external": {"host": "db.example.com", "port": 3307, "user": "acct",
                                                           "database": "acct",
                                                           "passwordSecret": {"name": "db", "key": "pw"}}}})
    assert slurmdbd_conf_hash(external) != base


def test_slurmctld_keeps_its_state_on_a_claim_the_uninstall_keeps_and_mounts_the_config_whole():
    sts = objects()[("StatefulSet", "sc-slurmctld")]
    spec = sts["spec"]
    assert spec["replicas"] == 1 and spec["serviceName"] == "sc-slurmctld"
    # (OrderedReady would never replace a Pod that is not Ready by a mended template)
    assert {o["spec"]["podManagementPolicy"] for o in objects().values() if o["kind"] == "StatefulSet"} == {"Parallel"}
    assert spec["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    (claim,) = spec["volumeClaimTemplates"]
    assert claim == {"metadata": {"name": "state"}, "spec": {"accessModes": ["ReadWriteOnce"],
                                                             "resources": {"requests": {"storage": "10Gi"}}}}
    assert mounts(sts) == {"/etc/slurm": "slurm-config", "/run/munge": "sunk-munge-socket",
                           "/var/run/sunk/jwt": "jwt-key", "/var/spool/slurmctld": "state",
                           "/run/slurmctld": "slurmctld-run", "/var/lib/extrausers": "login-users"}
    (container,) = spec["template"]["spec"]["containers"]
    assert not any("subPath" in m for m in container["volumeMounts"])
    assert spec["template"]["spec"]["automountServiceAccountToken"] is False
    assert spec["selector"]["matchLabels"] == {names.LABEL_SLURM_CLUSTER: "sc", "app.kubernetes.io/instance": "sc",
                                               "app.kubernetes.io/component": "slurmctld"}
    assert objects()[("Service", "sc-slurmctld")]["spec"]["clusterIP"] == "None"
    # Every StatefulSet's governing Service is headless: its clients reach the Pod, with no proxy between.
    for name in ("sc-slurmdbd", "sc-mariadb"):
        assert objects()[("Service", name)]["spec"]["clusterIP"] == "None", name
    assert objects()[("Service", "sc-slurmrestd")]["spec"].get("clusterIP") != "None"


def test_a_backup_controller_shares_one_read_write_many_claim():
    found = objects(cluster(slurmctld={"backup": {"enabled": True},
                                       "stateVolume": {"size": "50Gi", "storageClassName": "nfs"}}))
    sts = found[("StatefulSet", "sc-slurmctld")]
    assert sts["spec"]["replicas"] == 2 and "volumeClaimTemplates" not in sts["spec"]
    pvc = found[("PersistentVolumeClaim", "sc-slurmctld-state")]
    assert "ownerReferences" not in pvc["metadata"]  # (kept when the SlurmCluster goes, as the StatefulSets' claims)
    assert pvc["metadata"]["labels"][names.LABEL_SLURM_CLUSTER] == "sc"
    assert pvc["spec"] == {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "50Gi"}},
                           "storageClassName": "nfs"}
    state = [v for v in sts["spec"]["template"]["spec"]["volumes"] if v["name"] == "state"]
    assert state == [{"name": "state", "persistentVolumeClaim": {"claimName": "sc-slurmctld-state"}}]


def test_each_pod_mounts_only_the_keys_it_uses():
    found = objects()
    assert set(mounts(found[("Deployment", "sc-slurmrestd")])) == {"/etc/slurm", "/run/munge"}  # no JWT key
    assert set(mounts(found[("Deployment", "sc-login")])) == {  # the munge key is munged's
        "/etc/slurm", "/run/munge", "/var/lib/extrausers", "/etc/sunk/ssh-host-keys"}
    # slurmdbd: the socket of its munged, the JWT key, and its own slurmdbd.conf (with the password), not the
    # password's Secret, which only the init container writing that file mounts
    assert set(mounts(found[("StatefulSet", "sc-slurmdbd")])) == {"/etc/slurm", "/run/munge", "/var/run/sunk/jwt",
                                                                  "/etc/slurm-dbd", "/run/slurmdbd"}
    assert set(mounts(found[("StatefulSet", "sc-slurmctld")])) == {"/etc/slurm", "/run/munge", "/var/run/sunk/jwt",
                                                                   "/var/spool/slurmctld", "/run/slurmctld",
                                                                   "/var/lib/extrausers"}


def test_the_login_pod_is_ready_when_sshd_accepts_and_speaks_munge_through_its_sidecar():
    pod = objects()[("Deployment", "sc-login")]["spec"]["template"]["spec"]
    (login,) = pod["containers"]
    assert login["readinessProbe"]["tcpSocket"] == {"port": 22}  # (sshd accepts: reachable while slurmctld is not)
    assert {"name": "SLURM_CONF", "value": "/etc/slurm/slurm.conf"} in login["env"]
    (munged,) = pod["initContainers"]
    assert munged["name"] == "munged" and munged["restartPolicy"] == "Always" and munged["image"] == IMAGES["login"]
    key = next(v for v in pod["volumes"] if v["name"] == "sunk-munge-key")
    assert key["secret"]["secretName"] == "sc-munge-key"
    assert pod["securityContext"] == {"fsGroup": 65532}  # munged runs as the image's user and reads the key


def test_the_login_pods_munged_runs_restricted_as_the_login_user_and_reads_the_key_by_its_group():
    pod = objects()[("Deployment", "sc-login")]["spec"]["template"]["spec"]
    restricted = {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532, "allowPrivilegeEscalation": False,
                  "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
    (munged,) = pod["initContainers"]
    assert munged["securityContext"] == restricted
    # munged as that non-root user reads the key through the group: the Pod's fsGroup is its group, and the
    # key's mode (0400, widened to 0440 for the fsGroup by the kubelet) lets the group read
    assert pod["securityContext"]["fsGroup"] == munged["securityContext"]["runAsGroup"]
    key = next(v for v in pod["volumes"] if v["name"] == "sunk-munge-key")
    assert key["secret"]["defaultMode"] & 0o400
    assert "--force" in munged["command"]  # (munged refuses a group-readable key without it)


def test_the_database_password_reaches_mariadb_and_slurmdbd_from_one_secret_as_a_file():
    found = objects()
    password = {"name": "db-password", "secret": {"secretName": "sc-db-password", "defaultMode": 0o400,
                                                  "items": [{"key": "password", "path": "password"}]}}
    maria_pod = found[("StatefulSet", "sc-mariadb")]["spec"]["template"]["spec"]
    (maria,) = maria_pod["containers"]
    env = {e["name"]: e for e in maria["env"]}
    assert env["MARIADB_PASSWORD_FILE"] == {"name": "MARIADB_PASSWORD_FILE", "value": "/var/run/sunk/db/password"}
    assert not [e for e in maria["env"] if "valueFrom" in e]  # no password in the environment
    assert password in maria_pod["volumes"] and mounts(found[("StatefulSet", "sc-mariadb")])[
        "/var/run/sunk/db"] == "db-password"
    dbd = found[("StatefulSet", "sc-slurmdbd")]["spec"]["template"]["spec"]
    assert password in dbd["volumes"]
    writer = next(c for c in dbd["initContainers"] if c["name"] == "slurmdbd-conf")
    assert {"name": "db-password", "mountPath": "/var/run/sunk/db", "readOnly": True} in writer["volumeMounts"]


def test_an_external_database_runs_no_mariadb_and_its_secret_is_the_authors():
    found = objects(cluster(images={k: v for k, v in IMAGES.items() if k != "mariadb"},
                            slurmdbd={"database": {"external": {"host": "db", "passwordSecret": {
                                "name": "theirs", "key": "pw"}}}}))
    assert ("StatefulSet", "sc-mariadb") not in found
    volumes = found[("StatefulSet", "sc-slurmdbd")]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "db-password", "secret": {"secretName": "theirs", "defaultMode": 0o400,
                                              "items": [{"key": "pw", "path": "password"}]}} in volumes


def test_replicas_images_and_the_login_service():
    found = objects(cluster(slurmrestd={"replicas": 3}, login={"replicas": 2, "service": {"type": "LoadBalancer"}}))
    assert found[("Deployment", "sc-slurmrestd")]["spec"]["replicas"] == 3
    assert found[("Deployment", "sc-login")]["spec"]["replicas"] == 2
    assert found[("Service", "sc-login")]["spec"]["type"] == "LoadBalancer"
    for kind, name in found:
        for container in (found[(kind, name)].get("spec", {}).get("template", {}).get("spec", {})
                          .get("containers", [])):
            assert container["image"] == IMAGES[name.removeprefix("sc-")]


# ---- the key Secrets ---------------------------------------------------------------------------------------


def test_keys_are_wanted_only_when_not_brought():
    def wanted(obj: dict[str, Any]) -> set[str]:
        return {w.name for w in decide(Facts(obj, ["gpu"])).secrets}

    assert wanted(cluster()) == {"sc-munge-key", "sc-jwt-key", "sc-db-password", "sc-login-host-keys"}
    assert wanted(cluster(keys={"munge": {"existingSecret": "m"}, "jwt": {"existingSecret": "j"}})) == {
        "sc-db-password", "sc-login-host-keys"}
    assert wanted(cluster(slurmdbd={"enabled": False}, images={
        k: v for k, v in IMAGES.items() if k not in ("slurmdbd", "mariadb")})) == {"sc-munge-key", "sc-jwt-key",
                                                                                  "sc-login-host-keys"}
    brought = objects(cluster(keys={"munge": {"existingSecret": "m"}}))
    for name in ("sc-slurmctld", "sc-slurmdbd"):
        assert {"name": "sunk-munge-key", "secret": {"secretName": "m", "defaultMode": 0o400, "items": [
            {"key": "munge.key", "path": "munge.key"}]}} in brought[("StatefulSet", name)]["spec"]["template"][
            "spec"]["volumes"]


def test_a_secret_holds_the_callers_random_bytes_and_has_no_owner():
    spec = read_spec(cluster(), ("gpu",)).spec
    assert spec is not None
    munge = desired.WantedSecret("sc-munge-key", "munge.key", 1024)
    secret = desired.secret_object(spec, munge, bytes(range(256)) * 4)
    assert base64.b64decode(secret["data"]["munge.key"]) == bytes(range(256)) * 4
    assert "ownerReferences" not in secret["metadata"] and secret["metadata"]["namespace"] == "slurm"
    with pytest.raises(ValueError):
        desired.secret_object(spec, munge, b"short")


def test_a_password_is_letters_and_digits_without_bias():
    spec = read_spec(cluster(), ("gpu",)).spec
    assert spec is not None
    wanted = desired.WantedSecret("sc-db-password", "password", 32, text=True)
    assert desired.material_size(wanted) == 64
    material = bytes([255, 248] * 16 + list(range(62, 94)))  # bytes past the last full round are skipped
    value = base64.b64decode(desired.secret_object(spec, wanted, material)["data"]["password"]).decode()
    assert value == desired.ALNUM[:32]
    with pytest.raises(ValueError):
        desired.secret_object(spec, wanted, bytes([250] * 64))


# ---- status ------------------------------------------------------------------------------------------------


def workload(ready: int, *, generation: int = 1, observed: int | None = 1) -> dict[str, Any]:
    status: dict[str, Any] = {"readyReplicas": ready}
    if observed is not None:
        status["observedGeneration"] = observed
    return {"metadata": {"generation": generation}, "status": status}


@pytest.mark.parametrize("obj, want, expected", [
    (None, 1, ("False", "NotCreated")),
    (workload(1), 1, ("True", "Ready")),
    (workload(2), 2, ("True", "Ready")),
    (workload(1), 2, ("False", "NotReady")),
    (workload(1, generation=2, observed=1), 1, ("False", "Progressing")),
    (workload(1, observed=None), 1, ("False", "Progressing")),
    ({"metadata": {}, "status": {}}, 1, ("False", "NotReady")),
])
def test_a_workload_is_ready_when_its_newest_spec_has_enough_ready_replicas(obj, want, expected):
    cond = workload_condition("X", obj, want)
    assert (cond["status"], cond["reason"]) == expected


def test_one_condition_per_component():
    workloads = {"sc-slurmctld": workload(1), "sc-slurmdbd": workload(0), "sc-mariadb": workload(1),
                 "sc-slurmrestd": workload(1), "sc-login": workload(1)}
    conditions = {c["type"]: (c["status"], c["reason"]) for c in decide(Facts(cluster(), ["gpu"], workloads))
                  .conditions}
    assert conditions == {"SpecValid": ("True", "Valid"), "SlurmctldReady": ("True", "Ready"),
                          "SlurmdbdReady": ("False", "NotReady"), "DatabaseReady": ("True", "Ready"),
                          "SlurmrestdReady": ("True", "Ready"), "LoginReady": ("True", "Ready")}
    off = cluster(slurmdbd={"enabled": False}, login={"replicas": 0})
    conditions = {c["type"]: c["reason"] for c in decide(Facts(off, ["gpu"], workloads)).conditions}
    assert (conditions["SlurmdbdReady"], conditions["DatabaseReady"], conditions["LoginReady"]) == (
        "Disabled", "Disabled", "ScaledToZero")


def test_the_plan_never_changes_the_cluster_it_read():
    obj = cluster(slurmConfig=["SchedulerType=sched/backfill"])
    before = copy.deepcopy(obj)
    decide(Facts(obj, ["gpu"]))
    assert obj == before and paths.name(read_spec(obj, ("gpu",)).spec, "login") == "sc-login"  # type: ignore[arg-type]


def test_every_release_sunk_supports_is_taken():
    for release in RELEASES:
        assert problems(cluster(slurm={"release": release})) == []
