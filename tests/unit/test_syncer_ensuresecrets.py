"""sunk-syncer ensure-secrets against an in-memory apiserver: create-only, 409 keeps theirs, Helm's Secrets kept."""

from __future__ import annotations

import base64
import copy
import datetime
import logging
from collections.abc import Callable
from typing import Any

import pytest

from sunk.commands import syncer as cli
from sunk.hooks.auth import weakness
from sunk.kube import client as kc
from sunk.syncer.ensuresecrets import Ensure, EnsureConfig, delete
from sunk.translate import chartsecrets as cs

NS = "slurm"
NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
HOOKS = cs.TokenSecret("sunk-hooks", ("syncer-token", "scheduler-hook-secret"))
PAIR = cs.TLSPair("sunk-extender-tls", "sunk-extender-client-tls", "sunk-extender", NS, "sunk-kube-scheduler", 30)
LABELS = {"app.kubernetes.io/instance": "sunk"}
Obj = dict[str, Any]


class Secrets:
    """The apiserver's Secrets of one namespace; ``before[verb]`` runs just before a request of that verb."""

    def __init__(self) -> None:
        self.objects: dict[str, Obj] = {}
        self.calls: list[tuple[str, str]] = []
        self.before: dict[str, Callable[[str], None]] = {}
        self.version = 0

    def put(self, obj: Obj) -> None:
        self.version += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.objects[obj["metadata"]["name"]] = obj

    def _call(self, verb: str, name: str) -> None:
        self.calls.append((verb, name))
        if hook := self.before.pop(verb, None):
            hook(name)

    def get(self, api: Any, resource: Any, name: str, namespace: str | None = None, **_: Any) -> Obj:
        assert resource.plural == "secrets" and namespace == NS
        self._call("get", name)
        if name not in self.objects:
            raise kc.ApiError(404, "Not Found", method="GET", path=name)
        return copy.deepcopy(self.objects[name])

    def create(self, api: Any, resource: Any, obj: Obj, namespace: str | None = None) -> Obj:
        name = obj["metadata"]["name"]
        self._call("create", name)
        if name in self.objects:
            raise kc.ApiError(409, "Conflict", {"message": f'secrets "{name}" already exists'}, "POST", name)
        self.put(obj)
        return copy.deepcopy(self.objects[name])

    def replace(self, api: Any, resource: Any, obj: Obj, **_: Any) -> Obj:
        name = obj["metadata"]["name"]
        self._call("replace", name)
        if self.objects[name]["metadata"]["resourceVersion"] != obj["metadata"].get("resourceVersion"):
            raise kc.ApiError(409, "Conflict", method="PUT", path=name)
        self.put(obj)
        return copy.deepcopy(self.objects[name])

    def patch(self, api: Any, resource: Any, name: str, body: Any, namespace: str | None = None, **_: Any) -> Obj:
        self._call("patch", name)
        assert set(body) == {"metadata"} and set(body["metadata"]) == {"annotations"}, "a patch of metadata only"
        meta = self.objects[name]["metadata"]
        meta["annotations"] = {**(meta.get("annotations") or {}), **body["metadata"]["annotations"]}
        return copy.deepcopy(self.objects[name])

    def delete(self, api: Any, resource: Any, name: str, namespace: str | None = None, **_: Any) -> Obj:
        self._call("delete", name)
        if self.objects.pop(name, None) is None:
            raise kc.ApiError(404, "Not Found", method="DELETE", path=name)
        return {}

    def data(self, name: str) -> dict[str, bytes]:
        return {k: base64.b64decode(v) for k, v in self.objects[name]["data"].items()}

    def writes(self) -> list[tuple[str, str]]:
        return [c for c in self.calls if c[0] != "get"]


@pytest.fixture
def kube(monkeypatch: pytest.MonkeyPatch) -> Secrets:
    fake = Secrets()
    for verb in ("get", "create", "replace", "patch", "delete"):
        monkeypatch.setattr(kc, verb, getattr(fake, verb))
    return fake


def ensure(repair: bool = False, specs: tuple[cs.Spec, ...] = (HOOKS, PAIR)) -> Ensure:
    return Ensure(None, EnsureConfig(NS, specs, LABELS, repair=repair), now=lambda: NOW, sleep=lambda _: None,  # type: ignore[arg-type]
                  weakness=weakness)


def stored(name: str, data: dict[str, bytes], **meta: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS, **meta},
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}


def test_a_first_run_creates_every_secret_with_the_labels_and_a_second_writes_nothing(kube):
    assert ensure().run() == []
    assert kube.writes() == [("create", "sunk-hooks"), ("create", PAIR.server), ("create", PAIR.client)]
    assert all(kube.objects[n]["metadata"]["labels"] == LABELS for n in kube.objects)
    assert cs.tls_problems(PAIR, kube.data(PAIR.server), kube.data(PAIR.client), NOW) == []
    before = copy.deepcopy(kube.objects)
    kube.calls.clear()
    assert ensure().run() == []
    assert kube.writes() == [] and kube.objects == before


def test_a_concurrent_run_that_creates_first_wins_and_its_value_is_kept(kube):
    theirs = {"syncer-token": b"t" * 8 + b"abcdefghijklmnopqrstuvwxyz012345", "scheduler-hook-secret":
              b"s" * 8 + b"abcdefghijklmnopqrstuvwxyz012345"}
    kube.before["create"] = lambda name: kube.put(stored(name, theirs))
    assert ensure(specs=(HOOKS,)).run() == []
    assert kube.data("sunk-hooks") == theirs
    assert kube.writes() == [("create", "sunk-hooks")]  # refused, then read again: nothing more


def test_losing_the_race_for_the_servers_secret_makes_no_client_secret_and_ends_on_the_winners_pair(kube):
    server, client = cs.new_tls_pair(PAIR, NOW)

    def the_other_run_wins(name: str) -> None:
        kube.put(stored(PAIR.server, server))
        kube.before["get"] = lambda _: kube.put(stored(PAIR.client, client))  # it finishes while this one reads

    kube.before["create"] = the_other_run_wins
    assert ensure(specs=(PAIR,)).run() == []
    assert kube.writes() == [("create", PAIR.server)]
    assert kube.data(PAIR.server) == server and kube.data(PAIR.client) == client


def test_an_unusable_secret_fails_the_run_naming_secret_and_key_and_is_never_written(kube, caplog):
    kube.put(stored("sunk-hooks", {"syncer-token": b"abcdefghijklmnopqrstuvwxyz0123456789"}))
    caplog.set_level(logging.WARNING)
    problems = ensure(specs=(HOOKS,)).run()
    assert problems == ["Secret sunk-hooks, key scheduler-hook-secret: is missing"]
    assert kube.writes() == []
    assert [c for c in kube.calls if c[0] == "get"] == [("get", "sunk-hooks")] * 5  # read again: a run half-way?


def test_repair_replaces_the_unusable_data_at_the_version_read_and_keeps_the_good_key(kube):
    good = b"abcdefghijklmnopqrstuvwxyz0123456789"
    kube.put(stored("sunk-hooks", {"syncer-token": good}, labels={"mine": "yes"}))
    assert ensure(repair=True, specs=(HOOKS,)).run() == []
    assert kube.writes() == [("replace", "sunk-hooks")]
    data = kube.data("sunk-hooks")
    assert data["syncer-token"] == good and len(data["scheduler-hook-secret"]) == 64
    assert kube.objects["sunk-hooks"]["metadata"]["labels"] == {"mine": "yes", **LABELS}


def test_a_secret_helm_made_gets_the_keep_annotation_by_a_metadata_patch_and_keeps_its_data(kube):
    helms = {"labels": {"app.kubernetes.io/managed-by": "Helm"},
             "annotations": {"meta.helm.sh/release-name": "sunk", "meta.helm.sh/release-namespace": NS}}
    data = {"syncer-token": b"0123456789ABCDEFGHIJKLMNOPQRSTUV",
            "scheduler-hook-secret": b"abcdefghijklmnopqrstuvwxyz0123456789"}
    kube.put(stored("sunk-hooks", data, **helms))
    assert ensure(specs=(HOOKS,)).run() == []
    assert kube.writes() == [("patch", "sunk-hooks")]
    assert kube.objects["sunk-hooks"]["metadata"]["annotations"][cs.KEEP_ANNOTATION] == cs.KEEP
    assert kube.data("sunk-hooks") == data
    kube.calls.clear()
    assert ensure(specs=(HOOKS,)).run() == [] and kube.writes() == []  # once


def test_delete_removes_the_named_secrets_and_a_missing_one_is_fine(kube):
    kube.put(stored("sunk-hooks", {"k": b"v"}))
    kube.put(stored("someone-else", {"k": b"v"}))
    delete(None, NS, ["sunk-hooks", PAIR.server])  # type: ignore[arg-type]
    assert set(kube.objects) == {"someone-else"}


# ---- the command line --------------------------------------------------------------------------


def parsed(argv: list[str]) -> EnsureConfig:
    parser = cli.ensure_secrets_parser()
    return cli.ensure_config(parser.parse_args(argv), parser)


def test_the_flags_name_the_secrets_keys_and_pair():
    config = parsed(["--namespace=slurm", "--token-secret=sunk-hooks=syncer-token,scheduler-hook-secret",
                     "--tls-secrets=a-tls,a-client-tls", "--tls-service=sunk-extender",
                     "--tls-client-cn=sunk-kube-scheduler", "--tls-validity-days=7", "--label=a=b", "--repair"])
    assert config.specs == (HOOKS, cs.TLSPair("a-tls", "a-client-tls", "sunk-extender", "slurm",
                                               "sunk-kube-scheduler", 7))
    assert config.labels == {"a": "b"} and config.repair
    assert config.names == ("sunk-hooks", "a-tls", "a-client-tls")


@pytest.mark.parametrize("argv", [
    [],
    ["--token-secret=sunk-hooks"],
    ["--token-secret==k"],
    ["--tls-secrets=a,a", "--tls-service=s", "--tls-client-cn=c"],
    ["--tls-secrets=a", "--tls-service=s", "--tls-client-cn=c"],
    ["--tls-secrets=a,b"],
    ["--token-secret=a=k", "--tls-secrets=a,b", "--tls-service=s", "--tls-client-cn=c"],
    ["--token-secret=a=k", "--tls-validity-days=0"],
    ["--token-secret=a=k", "--label=nokey"],
])
def test_incomplete_or_ambiguous_flags_are_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        parsed(argv)
    assert exited.value.code == 2


def test_the_command_exits_1_on_a_problem_and_0_once_repaired(kube, monkeypatch):
    monkeypatch.setattr("sunk.kube.client.load_api_client", lambda _: None)
    monkeypatch.setattr("sunk.syncer.ensuresecrets.time.sleep", lambda _: None)
    kube.put(stored("sunk-hooks", {"syncer-token": b"changeme"}))
    argv = ["ensure-secrets", "--namespace=slurm", "--token-secret=sunk-hooks=syncer-token"]
    assert cli.main(argv) == 1
    assert cli.main([*argv, "--repair"]) == 0
    assert weakness(kube.data("sunk-hooks")["syncer-token"]) is None
