"""The SlurmCluster reconciler against an apiserver in memory: what it applies and creates, what it
never writes (a bad spec, a key already there), its status, and when it has slurmctld reconfigure."""

from __future__ import annotations

import base64
import copy
import types
from typing import Any

import pytest
from nodeset_fakes import FakeApiServer, Recorder
from slurmcluster_fakes import cluster
from syncer_fakes import FakeInformer

from sunk.kube import client as kc
from sunk.model import names
from sunk.slurmcluster.reconciler import INDEX_CLUSTER, SlurmClusterReconciler, cluster_key

KEY = "slurm/sc"


class ApplyingApiServer(FakeApiServer):
    """FakeApiServer with server-side apply: the object as applied (creating it when absent)."""

    def patch(self, api: Any, resource: Any, name: str, body: Any, namespace: str | None = None, *,
              patch_type: str = "merge", field_manager: str | None = None, force: bool = False,
              **kwargs: Any) -> dict[str, Any]:
        if patch_type != "apply":
            return super().patch(api, resource, name, body, namespace, **kwargs)
        self.calls.append(("apply", resource.plural, name, f"{field_manager} force={force}"))
        self._check("patch", name, resource.path(namespace, name))
        current = self.objects.get((resource.plural, namespace, name))
        new = copy.deepcopy(body)
        if current is not None:
            new["metadata"]["uid"] = current["metadata"]["uid"]
            new["status"] = current.get("status")
        return copy.deepcopy(self.put(resource.plural, new))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class World:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, obj: dict[str, Any] | None = None, *,
                 reconfigure: bool = True):
        self.api = ApplyingApiServer().install(monkeypatch)
        self.api.put("slurmclusters", obj or cluster())
        self.api.put("nodesets", {"metadata": {"name": "gpu", "namespace": "slurm"}})
        self.api.put("nodesets", {"metadata": {"name": "elsewhere", "namespace": "other"}})
        self.reconfigures = 0
        self.fail_reconfigure = False
        self.clock = Clock()
        self.recorder = Recorder()
        self.informers = {"slurmclusters": FakeInformer(), "nodesets": FakeInformer(),
                          "workloads": FakeInformer({INDEX_CLUSTER: cluster_key})}
        self.reconciler = self.new_reconciler(reconfigure)

    def new_reconciler(self, reconfigure: bool = True) -> SlurmClusterReconciler:
        return SlurmClusterReconciler(
            api=None,  # type: ignore[arg-type]
            clusters=self.informers["slurmclusters"], nodesets=self.informers["nodesets"],  # type: ignore[arg-type]
            workloads=self.informers["workloads"], recorder=self.recorder,  # type: ignore[arg-type]
            reconfigure=self._reconfigure if reconfigure else None, random_bytes=lambda n: bytes([7]) * n,
            clock=self.clock)

    def _reconfigure(self) -> None:
        if self.fail_reconfigure:
            raise RuntimeError("slurmrestd: 503")
        self.reconfigures += 1

    def sync(self) -> None:
        self.informers["slurmclusters"].store = {"slurm/" + o["metadata"]["name"]: o
                                                 for o in self.api.of("slurmclusters")}
        self.informers["nodesets"].store = {FakeInformer.key(o): o for o in self.api.of("nodesets")}
        self.informers["workloads"].store = {FakeInformer.key(o): o for p in ("statefulsets", "deployments")
                                             for o in self.api.of(p)}

    def reconcile(self) -> Any:
        self.sync()
        self.api.calls.clear()
        return self.reconciler.reconcile(KEY)

    def status(self) -> dict[str, Any]:
        found = self.api.one("slurmclusters", "sc")
        return (found or {}).get("status") or {}

    def conditions(self) -> dict[str, tuple[str, str]]:
        return {c["type"]: (c["status"], c["reason"]) for c in self.status().get("conditions") or []}

    def become_ready(self) -> None:
        """The controllers: every workload's newest spec rolled out, all its replicas ready."""
        for plural in ("statefulsets", "deployments"):
            for obj in self.api.of(plural):
                obj["metadata"]["generation"] = 1
                obj["status"] = {"observedGeneration": 1, "readyReplicas": obj["spec"]["replicas"]}
                self.api.put(plural, obj)

    def edit(self, **spec: Any) -> None:
        obj = self.api.one("slurmclusters", "sc")
        assert obj is not None
        obj["spec"].update(spec)
        self.api.put("slurmclusters", obj)


def test_the_first_reconcile_makes_the_keys_and_applies_every_object(monkeypatch):
    world = World(monkeypatch)
    assert world.reconcile() is None
    creates = [c for c in world.api.calls if c[0] == "create"]
    assert creates[:4] == [("create", "secrets", "sc-munge-key"), ("create", "secrets", "sc-jwt-key"),
                           ("create", "secrets", "sc-db-password"), ("create", "secrets", "sc-login-host-keys")]
    assert {c[1:] for c in creates[4:]} == {c[1:3] for c in world.api.calls if c[0] == "apply"}  # made, then owned
    applies = [c for c in world.api.calls if c[0] == "apply"]
    assert applies[0] == ("apply", "configmaps", "sc-slurm-config", "sunk-operator force=True")
    assert {(c[1], c[2]) for c in applies} >= {("statefulsets", "sc-slurmctld"), ("deployments", "sc-slurmrestd"),
                                               ("deployments", "sc-login"), ("statefulsets", "sc-slurmdbd"),
                                               ("statefulsets", "sc-mariadb"), ("services", "sc-slurmctld")}
    assert all(c[3] == "sunk-operator force=True" for c in applies)
    munge = world.api.one("secrets", "sc-munge-key")
    assert munge is not None and base64.b64decode(munge["data"]["munge.key"]) == bytes([7]) * 1024
    status = world.status()
    cm = world.api.one("configmaps", "sc-slurm-config")
    assert cm is not None and status["configHash"] == cm["metadata"]["annotations"][names.ANN_CONFIG_HASH]
    assert (status["slurmRelease"], status.get("reconfiguredConfigHash"), status["observedGeneration"]) == (
        "25.11", None, 2)
    assert world.conditions() == {"SpecValid": ("True", "Valid"), "SlurmctldReady": ("False", "NotCreated"),
                                  "SlurmdbdReady": ("False", "NotCreated"), "DatabaseReady": ("False", "NotCreated"),
                                  "SlurmrestdReady": ("False", "NotCreated"), "LoginReady": ("False", "NotCreated"),
                                  "ConfigApplied": ("False", "WaitingForSlurmctld"), "ObjectsOwned": ("True", "Owned")}
    assert world.reconfigures == 0


def test_a_key_already_there_is_never_replaced_and_used_when_it_is_the_operators(monkeypatch):
    world = World(monkeypatch)
    world.api.put("secrets", {"metadata": {"name": "sc-jwt-key", "namespace": "slurm", "labels": {
        names.LABEL_SLURM_CLUSTER: "sc", "app.kubernetes.io/managed-by": "sunk-operator"}},
        "data": {"jwt_hs256.key": "b2xk"}})
    world.reconcile()
    jwt = world.api.one("secrets", "sc-jwt-key")
    assert jwt is not None and jwt["data"] == {"jwt_hs256.key": "b2xk"}
    assert not [e for e in world.recorder.events if "sc-jwt-key" in e[2]]
    assert [e[1] for e in world.recorder.events].count("GeneratedKey") == 3  # (munge, database, ssh host)
    assert world.conditions()["ObjectsOwned"] == ("True", "Owned")


@pytest.mark.parametrize("labels", [{}, {names.LABEL_SLURM_CLUSTER: "sc"},
                                    {"app.kubernetes.io/managed-by": "sunk-operator"}])
def test_a_key_secret_someone_else_made_is_refused_and_nothing_is_applied(monkeypatch, labels):
    world = World(monkeypatch)
    world.api.put("secrets", {"metadata": {"name": "sc-jwt-key", "namespace": "slurm", "labels": labels},
                              "data": {"jwt_hs256.key": "YXR0YWNrZXI="}})
    world.reconcile()
    assert not [c for c in world.api.calls if c[0] == "apply"]
    owned = [c for c in world.status()["conditions"] if c["type"] == "ObjectsOwned"][0]
    assert owned["status"] == "False" and "Secret sc-jwt-key exists and was not made by sunk-operator" in \
        owned["message"]
    world.api.put("secrets", {"metadata": {"name": "sc-jwt-key", "namespace": "slurm", "labels": {
        names.LABEL_SLURM_CLUSTER: "sc", "app.kubernetes.io/managed-by": "sunk-operator"}}, "data": {}})
    world.reconcile()
    assert world.conditions()["ObjectsOwned"] == ("True", "Owned")
    assert [c for c in world.api.calls if c[0] == "apply"]


def foreign(plural: str, kind: str, name: str, **meta: Any) -> dict[str, Any]:
    return {"kind": kind, "apiVersion": "v1", "metadata": {"name": name, "namespace": "slurm", **meta},
            "spec": {"replicas": 1}}


@pytest.mark.parametrize("plural, kind, name, meta", [
    ("deployments", "Deployment", "sc-login", {}),
    ("configmaps", "ConfigMap", "sc-slurm-config", {"labels": {"app": "theirs"}}),
    ("services", "Service", "sc-slurmctld", {"labels": {"app.kubernetes.io/managed-by": "sunk-operator"}}),
    ("statefulsets", "StatefulSet", "sc-slurmctld", {  # in the operator's cache by its label, but another's
        "labels": {names.LABEL_SLURM_CLUSTER: "sc", "app.kubernetes.io/managed-by": "sunk-operator"},
        "ownerReferences": [{"kind": "Other", "name": "x", "uid": "u-1", "controller": True}]}),
])
def test_an_object_of_a_wanted_name_someone_else_made_is_not_taken_over(monkeypatch, plural, kind, name, meta):
    world = World(monkeypatch)
    world.api.put(plural, foreign(plural, kind, name, **meta))
    before = copy.deepcopy(world.api.one(plural, name))
    world.reconcile()
    assert world.api.one(plural, name) == before
    assert not [c for c in world.api.calls if c[0] == "apply"]
    owned = [c for c in world.status()["conditions"] if c["type"] == "ObjectsOwned"][0]
    assert owned["status"] == "False" and f"{kind} {name}" in owned["message"] and "not taken over" in \
        owned["message"]


def test_the_objects_are_checked_once_per_process_not_every_reconcile(monkeypatch):
    world = World(monkeypatch)
    world.reconcile()
    world.reconcile()
    assert not [c for c in world.api.calls if c[0] == "create"]
    assert [c for c in world.api.calls if c[0] == "apply"]


@pytest.mark.parametrize("labels, fine", [({names.LABEL_SLURM_CLUSTER: "sc"}, True), ({}, False),
                                          ({names.LABEL_SLURM_CLUSTER: "other"}, False)])
def test_a_secret_the_spec_names_is_mounted_only_when_labelled_for_this_cluster(monkeypatch, labels, fine):
    world = World(monkeypatch, cluster(keys={"munge": {"existingSecret": "site-munge"}}))
    world.api.put("secrets", {"metadata": {"name": "site-munge", "namespace": "slurm", "labels": labels},
                              "data": {"munge.key": "a2V5"}})
    world.reconcile()
    assert world.conditions()["SpecValid"] == (("True", "Valid") if fine else ("False", "SecretNotLabelled"))
    assert bool([c for c in world.api.calls if c[0] == "apply"]) == fine
    # Refused: no object is even created (a Pod would mount the Secret its owner did not label for this
    # cluster), so no slurmctld runs under the name, which stays open to change.
    assert (world.api.one("statefulsets", "sc-slurmctld") is not None) == fine
    assert world.status().get("clusterName") == ("sc" if fine else None)


def test_a_secret_the_operator_may_not_read_or_that_is_absent_is_refused(monkeypatch):
    world = World(monkeypatch, cluster(slurmdbd={"database": {"external": {
        "host": "db.example.com", "passwordSecret": {"name": "db-admin", "key": "password"}}}}))
    world.reconcile()
    (valid,) = [c for c in world.status()["conditions"] if c["type"] == "SpecValid"]
    assert valid["status"] == "False" and "Secret db-admin does not exist" in valid["message"]

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise kc.ApiError(403, "Forbidden", {}, "GET", "")
    monkeypatch.setattr(kc, "get", forbidden)
    world.reconcile()
    (valid,) = [c for c in world.status()["conditions"] if c["type"] == "SpecValid"]
    assert valid["status"] == "False" and "the operator may not read it" in valid["message"]


def test_a_refused_secret_create_fails_the_reconcile(monkeypatch):
    world = World(monkeypatch)
    world.api.fail[("create", "sc-munge-key")] = 403
    with pytest.raises(kc.ApiError):
        world.reconcile()
    assert world.api.one("configmaps", "sc-slurm-config") is None  # no Pod would start without its key


def test_a_bad_spec_writes_only_its_status_and_leaves_what_runs(monkeypatch):
    world = World(monkeypatch)
    world.reconcile()
    before = {p: world.api.of(p) for p in ("configmaps", "statefulsets", "deployments", "services", "secrets")}
    world.edit(slurmConfig=["ReturnToService=0"], partitions=[{"name": "gpu", "nodeSets": ["elsewhere"]}])
    world.reconcile()
    assert [c[:3] for c in world.api.calls] == [("patch", "slurmclusters", "sc")]
    assert {p: world.api.of(p) for p in before} == before
    (valid,) = [c for c in world.status()["conditions"] if c["type"] == "SpecValid"]
    assert valid["status"] == "False" and "ReturnToService is sunk's to set" in valid["message"]
    assert "names NodeSet 'elsewhere', which does not exist" in valid["message"]


def test_the_applied_cluster_name_is_kept_and_another_is_refused_leaving_what_runs(monkeypatch):
    world = World(monkeypatch)
    world.reconcile()
    assert world.status()["clusterName"] == "sc"
    before = {p: world.api.of(p) for p in ("configmaps", "statefulsets", "deployments", "services", "secrets")}
    world.edit(slurm={"release": "25.11", "clusterName": "renamed"})  # (a CRD without its rule: an old chart's)
    world.reconcile()
    assert [c[:3] for c in world.api.calls] == [("patch", "slurmclusters", "sc")]
    assert {p: world.api.of(p) for p in before} == before
    assert world.conditions()["SpecValid"] == ("False", "ClusterNameChanged")
    assert world.status()["clusterName"] == "sc"
    world.edit(slurm={"release": "25.11"})  # set back (the default is the SlurmCluster's name)
    world.reconcile()
    assert world.conditions()["SpecValid"] == ("True", "Valid")


def test_an_object_someone_else_made_leaves_the_others_created_and_the_name_recorded(monkeypatch):
    world = World(monkeypatch)
    world.api.put("deployments", {"metadata": {"name": "sc-login", "namespace": "slurm", "uid": "theirs"},
                                  "spec": {"replicas": 1}})
    world.reconcile()
    assert world.conditions()["ObjectsOwned"][0] == "False"
    assert world.api.one("statefulsets", "sc-slurmctld") is not None  # (a slurmctld may run under the name)
    assert world.status()["clusterName"] == "sc"


def test_a_name_renamed_while_the_status_was_written_is_not_recorded(monkeypatch):
    """The status write rereads the SlurmCluster on a conflict: a spec renamed meanwhile was never applied."""
    world = World(monkeypatch)
    original = world.api.patch
    renamed: list[bool] = []

    def rename_first(api: Any, resource: Any, name: str, body: Any, namespace: str | None = None,
                     **kwargs: Any) -> dict[str, Any]:
        if kwargs.get("subresource") == "status" and not renamed:
            renamed.append(True)
            world.edit(slurm={"release": "25.11", "clusterName": "renamed"})  # (a new resourceVersion: 409)
        return original(api, resource, name, body, namespace, **kwargs)

    monkeypatch.setattr(kc, "patch", rename_first)
    world.reconcile()
    assert "clusterName" not in world.status(), world.status()
    world.reconcile()  # (the renamed spec, applied now)
    assert world.status()["clusterName"] == "renamed"


def test_a_config_change_is_reconfigured_once_slurmctld_is_ready_and_the_kubelet_had_time(monkeypatch):
    world = World(monkeypatch)
    world.reconcile()
    world.become_ready()
    result = world.reconcile()
    assert world.conditions()["ConfigApplied"] == ("False", "WaitingForKubelet") and world.reconfigures == 0
    assert result is not None and result.requeue_after == 90.0
    world.clock.now += 60
    assert world.reconcile().requeue_after == 30.0  # type: ignore[union-attr]
    world.clock.now += 30
    assert world.reconcile() is None and world.reconfigures == 1
    first = world.status()["configHash"]
    assert world.status()["reconfiguredConfigHash"] == first
    assert world.conditions()["ConfigApplied"] == ("True", "Reconfigured")
    world.clock.now += 1000
    world.reconcile()
    assert world.reconfigures == 1  # nothing changed: no second reconfigure

    world.edit(slurmConfig=["SchedulerParameters=bf_window=120"])
    world.reconcile()
    cm = world.api.one("configmaps", "sc-slurm-config")
    assert cm is not None and "SchedulerParameters=bf_window=120" in cm["data"]["slurm.conf"]
    assert world.status()["configHash"] != first and world.reconfigures == 1
    world.clock.now += 90
    world.reconcile()
    assert world.reconfigures == 2 and world.status()["reconfiguredConfigHash"] == world.status()["configHash"]


def test_a_restarted_operator_waits_for_the_kubelet_again_before_it_reconfigures(monkeypatch):
    world = World(monkeypatch)
    world.reconcile()
    world.become_ready()
    world.reconcile()
    world.reconciler = world.new_reconciler()
    world.clock.now += 10
    world.reconcile()
    world.clock.now += 85
    world.reconcile()
    assert world.reconfigures == 0
    world.clock.now += 5
    world.reconcile()
    assert world.reconfigures == 1


def test_a_failed_reconfigure_is_retried_and_not_recorded(monkeypatch):
    world = World(monkeypatch)
    world.reconcile()
    world.become_ready()
    world.reconcile()
    world.clock.now += 90
    world.fail_reconfigure = True
    with pytest.raises(RuntimeError):
        world.reconcile()
    assert world.status().get("reconfiguredConfigHash") is None
    world.fail_reconfigure = False
    world.reconcile()
    assert world.reconfigures == 1 and world.status()["reconfiguredConfigHash"] == world.status()["configHash"]


def test_without_a_backend_that_reconfigures_the_status_says_so(monkeypatch):
    world = World(monkeypatch, reconfigure=False)
    world.reconcile()
    world.become_ready()
    world.clock.now += 1000
    world.reconcile()
    assert world.conditions()["ConfigApplied"] == ("False", "CannotReconfigure")


def test_ready_workloads_make_ready_conditions(monkeypatch):
    world = World(monkeypatch)
    world.reconcile()
    world.become_ready()
    world.reconcile()
    ready = {k: v for k, v in world.conditions().items() if k != "ConfigApplied"}
    assert set(ready.values()) == {("True", "Valid"), ("True", "Ready"), ("True", "Owned")}


def test_a_deleted_or_deleting_cluster_is_left_to_the_garbage_collector(monkeypatch):
    world = World(monkeypatch)
    obj = world.api.one("slurmclusters", "sc")
    assert obj is not None
    obj["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    assert world.reconcile() is None and world.api.calls == []
    world.api.objects.clear()
    assert world.reconcile() is None and world.api.calls == []


def test_workloads_are_found_by_their_clusters_label():
    assert cluster_key({"metadata": {"namespace": "slurm", "labels": {names.LABEL_SLURM_CLUSTER: "sc"}}}) == [KEY]
    assert cluster_key({"metadata": {"namespace": "slurm", "labels": {}}}) == []


def test_the_status_counts_the_slurm_nodes_by_state_while_the_node_list_is_fresh(monkeypatch):
    from sunk.model.slurm import Node

    world = World(monkeypatch)
    slurm_nodes = types.SimpleNamespace(fresh=True, items=lambda: {
        "gpu-1": Node("gpu-1", "IDLE"), "gpu-2": Node("gpu-2", "MIXED"), "gpu-3": Node("gpu-3", "IDLE+DRAIN")})
    world.reconciler.slurm_nodes = slurm_nodes
    world.reconcile()
    assert world.status()["nodes"] == {"total": 3, "idle": 1, "allocated": 1, "drained": 1, "down": 0, "other": 0}
    slurm_nodes.fresh = False  # (Slurm unreachable: the last count stands, never a count of nothing)
    slurm_nodes.items = dict
    world.reconcile()
    assert world.status()["nodes"]["total"] == 3
