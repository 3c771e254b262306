"""The SlurmCluster CRD: structural (what the apiserver demands), with a status subresource, and both a
spec the tests plan from and the status the reconciler writes valid against it; what it refuses itself."""

from __future__ import annotations

import pytest
from slurmcluster_fakes import cluster
from test_nodeset_crds import crd, schema_of, structural_problems, validate

from sunk.translate.slurmcluster.plan import Facts, decide
from sunk.translate.slurmcluster.spec import RELEASES


def test_the_crd_is_structural_with_a_status_subresource():
    doc = crd("slurmclusters")
    assert doc["metadata"]["name"] == "slurmclusters.sunk.coreweave.com" and doc["spec"]["scope"] == "Namespaced"
    (version,) = doc["spec"]["versions"]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    assert list(structural_problems(schema_of(doc), "root")) == []
    assert version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["slurm"]["properties"][
        "release"]["enum"] == list(RELEASES)


def test_a_full_spec_and_the_status_the_reconciler_writes_are_valid():
    obj = cluster(slurmctld={"backup": {"enabled": True}, "stateVolume": {"size": "5Gi", "storageClassName": "nfs"},
                             "resources": {"requests": {"cpu": 2, "memory": "4Gi"}, "limits": {"memory": "8Gi"}}},
                  slurmdbd={"database": {"external": {"host": "db", "port": 3306, "user": "u", "database": "d",
                                                      "passwordSecret": {"name": "s", "key": "k"}}}},
                  slurmrestd={"replicas": 2}, login={"replicas": 1, "service": {"type": "NodePort"}},
                  keys={"munge": {"existingSecret": "m"}, "jwt": {"existingSecret": "j"}}, killWait=30,
                  maxNodeCount=10, slurmConfig=["SchedulerType=sched/backfill"],
                  partitions=[{"name": "gpu", "nodeSets": ["gpu"], "default": True,
                               "options": {"MaxTime": "INFINITE", "PriorityTier": 2}}])
    plan = decide(Facts(obj, ["gpu"]))
    assert plan.spec is not None and plan.config is not None, plan.problems
    obj["status"] = {"slurmRelease": "25.11", "clusterName": "sc", "configHash": plan.config.hash,
                     "reconfiguredConfigHash": "x", "observedGeneration": 2,
                     "conditions": [{**c, "lastTransitionTime": "2030-01-01T00:00:00Z"} for c in plan.conditions]}
    assert list(validate(obj, schema_of(crd("slurmclusters")))) == []


@pytest.mark.parametrize("change, fragment", [
    ({"slurm": {"release": "23.02"}}, "23.02"),
    ({"slurmConfig": "A=1"}, "not a"),
    ({"killWait": 0}, "killWait"),
    ({"login": {"service": {"type": "ExternalName"}}}, "ExternalName"),
    ({"typo": 1}, "unknown field"),
    ({"login": {"resources": {"requests": {"cpu": "two"}}}}, "'two' does not match"),
])
def test_the_schema_refuses_what_it_can(change, fragment):
    obj = cluster(**change)
    found = list(validate(obj, schema_of(crd("slurmclusters"))))
    assert any(fragment in f for f in found), found


def test_the_schema_takes_a_placement_and_refuses_a_toleration_operator_kubernetes_has_not():
    placement = {"nodeSelector": {"a": "b"}, "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute",
                                                              "tolerationSeconds": 5}]}
    assert list(validate(cluster(placement=placement), schema_of(crd("slurmclusters")))) == []
    found = list(validate(cluster(placement={"tolerations": [{"key": "k", "operator": "In"}]}),
                          schema_of(crd("slurmclusters"))))
    assert any("In" in f for f in found), found


def test_a_tolerations_unknown_field_reaches_the_operator_which_refuses_it():
    """Pruned, ``{key, efect}`` would become a toleration of every effect of that key, unseen."""
    doc = crd("slurmclusters")
    tolerations = schema_of(doc)["properties"]["spec"]["properties"]["placement"]["properties"]["tolerations"]
    assert tolerations["items"]["x-kubernetes-preserve-unknown-fields"] is True
    plan = decide(Facts(cluster(placement={"tolerations": [{"key": "k", "efect": "NoSchedule"}]}), ["gpu"]))
    assert plan.spec is None and any("unknown field efect" in p for p in plan.problems), plan.problems
