"""sunk-syncer release-nodes: the order of its steps, what it writes, its exit codes, with the apiserver and
Slurm in memory (release_fakes)."""

from __future__ import annotations

import json
import logging
from typing import Any

import attrs
import pytest
from release_fakes import (
    LOCK,
    OTHER_TAINT,
    PERSONS,
    PROLOGS,
    STANDING,
    SUNKS,
    Clock,
    Kube,
    Obj,
    Slurm,
    drained_slurm,
    uninstalled_release,
)

from sunk.commands.syncer import main
from sunk.kube import client as kc
from sunk.model import names
from sunk.model.slurm import Node
from sunk.slurm.errors import SlurmUnavailable
from sunk.slurm.settings import SlurmSettings
from sunk.syncer.release import Release, ReleaseConfig


@pytest.fixture
def kube(monkeypatch) -> Kube:
    return uninstalled_release(monkeypatch)


@pytest.fixture
def slurm() -> Slurm:
    return drained_slurm()


CONFIG = ReleaseConfig(namespace="slurm", syncer_deployment="sunk-syncer", watch_namespace="slurm",
                       slurmd_selector="app.kubernetes.io/name=slurmd", timeout=10.0)


def run(kube: Kube, slurm: Slurm, config: ReleaseConfig = CONFIG) -> Any:
    clock = Clock()
    return Release(object(), slurm, config, clock=clock, sleep=clock.sleep).run()  # type: ignore[arg-type]


def annotations(kube: Kube, name: str) -> dict[str, str]:
    return kube.objects[("pods", "slurm", name)]["metadata"].get("annotations") or {}


def taints(kube: Kube, name: str) -> list[dict[str, str]]:
    return kube.objects[("nodes", None, name)]["spec"].get("taints") or []


def test_the_syncer_stops_then_its_locks_and_sunks_drains_go_and_nothing_else(kube, slurm):
    outcome = run(kube, slurm)
    assert outcome.ok, outcome.failures
    # 1. the Syncer first: scaled to 0 through its scale subresource, and waited for.
    first = kube.writes()[0]
    assert first == ("patch", "deployments", "sunk-syncer", "scale")
    assert kube.objects[("deployments", "slurm", "sunk-syncer")]["spec"]["replicas"] == 0
    assert not [k for k in kube.objects if k[0] == "pods" and k[2].startswith("sunk-syncer")]
    # 2. the slurmd Pods' lock annotations, then their Nodes' lock taints (any effect); another tenant's Node's
    #    lock, a Pod that is no slurmd Pod and the annotations and taints of others stay.
    assert annotations(kube, "node1") == {"example.com/mine": "kept"}
    assert annotations(kube, "node2") == {}
    assert annotations(kube, "web") == {names.LOCK_KEY: "not a slurmd Pod: left alone"}
    assert taints(kube, "worker-1") == [OTHER_TAINT] and taints(kube, "worker-3") == []
    assert taints(kube, "other-tenant-1") == [LOCK]
    writes = [(c[1], c[2]) for c in kube.writes()]
    assert writes.index(("pods", "node1")) < writes.index(("nodes", "worker-1"))
    assert outcome.cleared == ["slurm/node1", "slurm/node2"] and outcome.unlocked == ["worker-1", "worker-3"]
    # 3. on this release's Slurm nodes, the drains of sunk's lock lifted (UNDRAIN: node5 stays DOWN); sunk's
    #    drains whose cause outlives it stand (node7: a placeholder's Pod may still run there; node8: a
    #    cordoned Node); a person's and the prolog's unprefixed one stay; node9 is not this release's.
    assert [(c[1], c[2].state) for c in slurm.writes()] == [("node1", "UNDRAIN"), ("node3", "UNDRAIN"),
                                                            ("node5", "UNDRAIN")]
    assert slurm.nodes["node5"].state == {"DOWN"}
    assert (slurm.nodes["node2"].reason, slurm.nodes["node4"].reason) == (PERSONS, PROLOGS)
    assert slurm.nodes["node7"].reason == STANDING and slurm.nodes["node8"].drained and slurm.nodes["node9"].drained
    assert outcome.lifted == ["node1", "node3", "node5"] and outcome.kept == []
    assert outcome.standing == ["node7", "node8"]


def test_all_nodes_also_lifts_the_lock_drains_of_slurm_nodes_without_a_slurmd_pod(kube, slurm):
    outcome = run(kube, slurm, attrs.evolve(CONFIG, all_nodes=True))
    assert outcome.lifted == ["node1", "node3", "node5", "node9"] and outcome.standing == ["node7", "node8"]


def test_slurm_unreachable_releases_nothing_and_scales_the_syncer_back(kube, slurm):
    """Slurm is read before anything is unlocked: an outage fails the run with the locks as they were."""
    slurm.read_error = SlurmUnavailable("slurmrestd: connection refused")
    outcome = run(kube, slurm)
    assert outcome.failures == ["Slurm's nodes could not be listed, so nothing was released: slurmrestd: "
                                "connection refused"]
    assert taints(kube, "worker-1") == [OTHER_TAINT, LOCK] and annotations(kube, "node2") == {names.LOCK_KEY: "false"}
    assert kube.objects[("deployments", "slurm", "sunk-syncer")]["spec"]["replicas"] == 2


def test_running_it_again_is_harmless(kube, slurm):
    assert run(kube, slurm).ok
    kube.calls.clear()
    slurm.calls.clear()
    again = run(kube, slurm)
    assert again.ok and not (again.unlocked or again.cleared or again.lifted)
    assert kube.writes() == [] and slurm.writes() == []  # (a Deployment at 0 is not scaled again)


def test_each_drain_is_decided_again_on_a_fresh_read_so_a_persons_drain_meanwhile_stays(kube, slurm):
    """The decision comes from one list; just before each undrain the node is read alone, by a read that
    began later, and a person who drained node3 by hand in between (or undrained node5) is not overruled."""
    def person(reads: int) -> None:
        if reads == 1:  # after the deciding list, before the first fresh read
            slurm.drain("node3", "replacing a DIMM")
            slurm.nodes["node5"] = Node("node5", state="IDLE")
    slurm.between = person
    outcome = run(kube, slurm)
    assert outcome.ok
    assert [c[1] for c in slurm.writes()] == ["node1"]
    assert slurm.nodes["node3"].reason == "replacing a DIMM"
    assert outcome.kept == ["node3", "node5"]
    reads = [c[:2] for c in slurm.calls if c[0] in ("list", "read")]
    assert reads == [("list", ""), ("read", "node1"), ("read", "node3"), ("read", "node5")]  # each alone


def test_all_nodes_also_unlocks_nodes_no_slurmd_pod_runs_on(kube, slurm):
    outcome = run(kube, slurm, attrs.evolve(CONFIG, all_nodes=True))
    assert outcome.unlocked == ["other-tenant-1", "worker-1", "worker-3"]


def test_without_node_locking_no_node_is_read_nor_slurmd_pod_written(kube, slurm):
    outcome = run(kube, slurm, attrs.evolve(CONFIG, locks=False))
    assert outcome.ok and outcome.lifted == ["node1", "node3", "node5"] and not (outcome.unlocked or outcome.cleared)
    # (the Syncer stopped, its Pods waited for, the slurmd Pods listed: which Slurm nodes are this release's)
    assert {(c[0], c[2]) for c in kube.requests} == {("get", "deployments"), ("patch", "deployments/scale"),
                                                     ("list", "pods")}
    assert taints(kube, "worker-1") == [OTHER_TAINT, LOCK]


def test_without_a_syncer_deployment_the_marks_are_released_and_no_deployment_is_touched(kube, slurm):
    outcome = run(kube, slurm, attrs.evolve(CONFIG, syncer_deployment=None))
    assert outcome.ok and outcome.lifted and outcome.unlocked
    assert not [c for c in kube.calls if c[1] == "deployments"]


def test_a_syncer_that_does_not_go_in_time_releases_nothing_and_is_scaled_back(kube, slurm, caplog):
    kube.pods_stay = True
    with caplog.at_level(logging.INFO, logger="sunk.syncer.release"):
        outcome = run(kube, slurm)
    assert not outcome.ok
    assert outcome.failures == ["the Syncer could not be stopped, so nothing was released: Deployment "
                                "slurm/sunk-syncer: 2 Pod(s) still there after 10s (sunk-syncer-a, sunk-syncer-b)"]
    assert kube.objects[("deployments", "slurm", "sunk-syncer")]["spec"]["replicas"] == 2
    assert [c for c in kube.writes() if c[1] != "deployments"] == [] and slurm.calls == []
    assert "scaled back to 2 replica(s)" in caplog.text


def test_a_missing_syncer_deployment_is_taken_as_gone(kube, slurm, caplog):
    """A second run, after an uninstall that failed later on (the Deployment deleted already), must not
    block every retry: it goes on, with a warning (a wrong name by hand would be seen there)."""
    del kube.objects[("deployments", "slurm", "sunk-syncer")]
    with caplog.at_level(logging.WARNING, logger="sunk.syncer.release"):
        outcome = run(kube, slurm)
    assert outcome.ok and outcome.lifted == ["node1", "node3", "node5"]
    assert "Deployment slurm/sunk-syncer: not found: taken as gone already" in caplog.text


def test_a_forbidden_node_write_goes_on_with_the_rest_then_fails_and_scales_the_syncer_back(kube, slurm):
    kube.fail[("patch", "worker-1")] = 403
    outcome = run(kube, slurm)
    assert outcome.failures == ["Node worker-1: the lock taint could not be removed: PATCH /api/v1/nodes/worker-1: "
                                "403 injected 403"]
    assert outcome.unlocked == ["worker-3"] and outcome.lifted == ["node1", "node3", "node5"]
    assert kube.objects[("deployments", "slurm", "sunk-syncer")]["spec"]["replicas"] == 2


def test_a_conflict_on_a_nodes_taints_is_read_again_and_retried(monkeypatch, kube, slurm):
    """The taint list is written whole, guarded by resourceVersion (kp.remove_taint, as the lock controller):
    a Node changed since the list is read again, and the taint it gained meanwhile kept."""
    listed = kube.list_objects

    def older_nodes(api: Any, resource: Any, namespace: str | None = None, **kw: Any) -> list[Obj]:
        items = listed(api, resource, namespace, **kw)
        if resource.plural == "nodes":  # the kubelet's taint lands right after the list
            node = kube.objects[("nodes", None, "worker-1")]
            node["spec"]["taints"].append({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"})
            kube.put("nodes", node)
        return items
    monkeypatch.setattr(kc, "list_objects", older_nodes)
    outcome = run(kube, slurm)
    assert outcome.ok and "worker-1" in outcome.unlocked
    assert [c for c in kube.writes() if c[2] == "worker-1"] == [("patch", "nodes", "worker-1", "")] * 2  # 409, again
    assert taints(kube, "worker-1") == [OTHER_TAINT, {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]


def test_a_slurmd_pod_whose_annotation_patch_is_refused_is_a_failure_and_the_rest_goes_on(kube, slurm):
    """The annotations are merge-patched carrying the Pod's uid (kp.patch_metadata): a refusal is read again
    (replaced by a newer Pod of that name? then nothing to do), else it fails."""
    kube.fail[("patch", "node1")] = 409
    outcome = run(kube, slurm)
    assert outcome.failures == ["Pod slurm/node1: the lock annotations could not be removed: PATCH "
                                "/api/v1/namespaces/slurm/pods/node1: 409 injected 409"]
    assert outcome.cleared == ["slurm/node2"] and outcome.unlocked == ["worker-1", "worker-3"]
    assert ("get", "", "pods", "slurm", "node1") in kube.requests


def test_an_interrupted_release_scales_the_syncer_back_before_it_ends(kube, slurm):
    """Ctrl-C, or SIGTERM at the Job's deadline (the command turns it into the same): a release still
    installed must not be left without its Syncer, or every prolog would drain its node."""
    def interrupted(reads: int) -> None:
        raise KeyboardInterrupt
    slurm.between = interrupted
    with pytest.raises(KeyboardInterrupt):
        run(kube, slurm)
    assert kube.objects[("deployments", "slurm", "sunk-syncer")]["spec"]["replicas"] == 2


# ---- the command ---------------------------------------------------------------------------------------


ARGS = ["release-nodes", "--slurm-auth-token=t", "--namespace=slurm", "--syncer-deployment=sunk-syncer",
        "--watch-namespace=slurm", "--slurmd-selector=app.kubernetes.io/name=slurmd"]


@pytest.fixture
def connected(monkeypatch, kube, slurm) -> Slurm:
    """The command's clients are the fakes; its Syncer has one replica left to wait for (no sleep)."""
    monkeypatch.setattr(kc, "load_api_client", lambda kubeconfig=None, **_: object())
    monkeypatch.setattr(SlurmSettings, "connect", lambda self, **_: slurm)
    del kube.objects[("pods", "slurm", "sunk-syncer-b")]
    return slurm


def log_lines(capsys) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]


def test_the_command_logs_one_line_per_thing_done_and_a_summary_and_exits_0(connected, kube, capsys):
    assert main(ARGS) == 0
    lines = [entry["msg"] for entry in log_lines(capsys)]
    assert "Deployment slurm/sunk-syncer: scaled from 2 replica(s) to 0, so that nothing locks or drains again" \
        in lines
    assert "Node worker-1: removed the lock taint" in lines
    assert f"Pod slurm/node1: removed {names.LOCK_REQUEST_PREFIX}42, {names.LOCK_KEY}" in lines
    assert f"slurm node node1: lifted the drain {SUNKS!r}" in lines
    assert lines[-1] == ("release-nodes: done: 2 Node(s) unlocked, 2 slurmd Pod(s) cleared, 3 Slurm drain(s) lifted, "
                         "0 left (no longer sunk's), 2 of sunk's left standing for their cause")
    assert f"slurm node node7: left drained, for a cause that outlives sunk (an operator, or a reinstalled Syncer " \
           f"once the cause is gone, lifts it): {STANDING!r}" in lines
    assert connected.closed
    assert main(ARGS) == 0  # and again


def test_the_command_exits_1_with_what_failed(connected, kube, capsys):
    kube.fail[("patch", "worker-3")] = 403
    assert main(ARGS) == 1
    last = log_lines(capsys)[-1]
    assert last["level"] == "error" and last["msg"].startswith("release-nodes: failed (1): Node worker-3: ")


def test_the_command_exits_1_when_interrupted_or_terminated(connected, kube, capsys):
    import signal

    from sunk.commands import syncer as cli

    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        cli._interrupt(signal.SIGTERM, None)

    def terminated(reads: int) -> None:
        cli._interrupt(signal.SIGTERM, None)
    connected.between = terminated
    before = signal.getsignal(signal.SIGTERM)
    assert main(ARGS) == 1
    assert log_lines(capsys)[-1]["msg"].startswith("release-nodes: failed: interrupted")
    assert kube.objects[("deployments", "slurm", "sunk-syncer")]["spec"]["replicas"] == 2
    assert signal.getsignal(signal.SIGTERM) == before and connected.closed


def test_the_command_exits_1_when_kubernetes_cannot_be_reached(monkeypatch, capsys):
    def no_config(kubeconfig=None, **_):
        raise kc.KubeError("no kubeconfig given, not in a cluster, and ~/.kube/config does not exist")
    monkeypatch.setattr(kc, "load_api_client", no_config)
    assert main(ARGS) == 1
    assert log_lines(capsys)[-1]["msg"] == ("release-nodes: failed: cannot reach Kubernetes or Slurm: no kubeconfig "
                                            "given, not in a cluster, and ~/.kube/config does not exist")


@pytest.mark.parametrize(("args", "message"), [
    ([a for a in ARGS if not a.startswith("--slurm-auth-token")], "--slurm-auth-token"),
    ([*ARGS, "--timeout=0s"], "--timeout"),
    ([*ARGS, "--timeout=soon"], "--timeout"),
    ([*ARGS, "--all-nodes=maybe"], "--all-nodes"),
    ([*ARGS, "--unlock-everything"], "unrecognized arguments"),
])
def test_a_usage_error_exits_2_saying_which_flag(monkeypatch, capsys, args, message):
    monkeypatch.delenv("SLURM_JWT", raising=False)
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2 and message in capsys.readouterr().err
