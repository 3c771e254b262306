"""The SlurmCluster reconciler against an apiserver in memory: what it applies and creates, what it
never writes (a bad spec, a key already there), its status, and when it has slurmctld reconfigure."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest
from nodeset_fakes import FakeApiServer, Recorder
from slurmcluster_fakes import cluster
from syncer_fakes import FakeInformer

from sunk import names
from sunk.kube import client as kc
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
    assert creates == [("create", "secrets", "sc-munge-key"), ("create", "secrets", "sc-jwt-key"),
                       ("create", "secrets", "sc-db-password")]
    applies = [c for c in world.api.calls if c[0] == "apply"]
    assert applies[0] == ("apply", "configmaps", "sc-slurm-config", "sunk-operator force=True")
    assert {(c[1], c[2]) for c in applies} >= {("statefulsets", "sc-slurmctld"), ("deployments", "sc-slurmrestd"),
                                               ("deployments", "sc-login"), ("statefulsets", "sc-slurmdbd"),
                                               ("statefulsets", "sc-mariadb"), ("services", "sc-login")}
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
                                  "ConfigApplied": ("False", "WaitingForSlurmctld")}
    assert world.reconfigures == 0


def test_a_key_already_there_is_never_replaced(monkeypatch):
    world = World(monkeypatch)
    world.api.put("secrets", {"metadata": {"name": "sc-jwt-key", "namespace": "slurm"},
                              "data": {"jwt_hs256.key": "b2xk"}})
    world.reconcile()
    jwt = world.api.one("secrets", "sc-jwt-key")
    assert jwt is not None and jwt["data"] == {"jwt_hs256.key": "b2xk"}
    assert not [e for e in world.recorder.events if "sc-jwt-key" in e[2]]
    assert [e[1] for e in world.recorder.events].count("GeneratedKey") == 2


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
    assert set(ready.values()) == {("True", "Valid"), ("True", "Ready")}


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
