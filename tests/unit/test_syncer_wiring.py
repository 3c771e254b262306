"""The Syncer's wiring: event -> key mapping, the Node filter, resync, shared fresh reads, plugins, flags."""

from __future__ import annotations

import argparse
import sys
import time
import types

import attrs
import pytest
from syncer_fakes import k8s_node, make_ctx, pod

from sunk.commands import syncer as cli
from sunk.model import names
from sunk.model.slurm import Job, Node
from sunk.slurm.client import Snapshot
from sunk.syncer import plugins, triggers
from sunk.syncer.context import PluginParts, slurm_node_name
from sunk.syncer.plugins import Parts, choose_parts

# ---- keys and triggers ----------------------------------------------------------------------------------


def test_slurm_node_name_is_the_hostname_else_the_pod_name():
    assert slurm_node_name(pod("node3")) == "node3"
    p = pod("slurmd-10-2")
    p["spec"]["hostname"] = "gpu-017"
    assert slurm_node_name(p) == "gpu-017"
    del p["spec"]["hostname"]
    assert slurm_node_name(p) == "slurmd-10-2"


def test_events_from_pods_nodes_and_slurm_become_slurm_node_keys():
    keys: list[str] = []
    ctx, pods, nodes, cache, _, _ = make_ctx(nodes=[Node("node1"), Node("node2")])
    pods.put(pod("node1", node="worker-1"))
    pods.put(pod("node2", node="worker-1"))
    nodes.put(k8s_node("worker-1"))
    triggers.attach(ctx, keys.append)
    assert sorted(set(keys)) == ["node1", "node2"]  # the informers replay what they hold (Pods and the Node)

    keys.clear()
    nodes.put(k8s_node("worker-1", cordoned=True))
    assert keys == ["node1", "node2"]  # every Slurm node on that Node

    keys.clear()
    (handler,) = cache.nodes.handlers
    handler.on_add(Node("node7"))
    handler.on_update(Node("node1"), Node("node1", state="DOWN"))
    handler.on_delete(Node("node2"))
    assert keys == ["node7", "node1", "node2"]

    keys.clear()  # a Pod outside the selector, deleted: its node may be ours to drain now
    ctx.all_pods.put(pod("node3"))  # type: ignore[attr-defined]
    ctx.all_pods.put(pod("web", namespace="default"))  # type: ignore[attr-defined]
    assert keys == []
    ctx.all_pods.remove(pod("web", namespace="default"))  # type: ignore[attr-defined]
    ctx.all_pods.remove(pod("node3"))  # type: ignore[attr-defined]
    assert keys == ["node3"]


def test_a_pod_deleted_or_a_job_leaving_wakes_only_the_nodes_under_sunks_own_drains():
    """What ends a placeholder's or a prolog's drain: no other event would wake the node in time."""
    keys: list[str] = []
    placeholder = "k8s: sunk-placeholder: pod team-a/train-0 outlived KillWait after job 42"
    ctx, pods, _, cache, _, _ = make_ctx(nodes=[
        Node("node1", state="IDLE+DRAIN", reason=placeholder),
        Node("node2", state="IDLE+DRAIN", reason="k8s: sunk-lock: job 43: hook API unreachable"),
        Node("node3", state="IDLE+DRAIN", reason="sunk: pod team-a/train-0 outlived KillWait after job 42"),
        Node("node4", state="IDLE"),
        Node("node5", state="IDLE", reason=placeholder)])  # (a reason left behind, no DRAIN flag)
    for name, k8s in (("node1", "worker-1"), ("node2", "worker-2"), ("node3", "worker-1"), ("node4", "worker-1"),
                      ("node5", "worker-1")):
        pods.put(pod(name, node=k8s))
    triggers.attach(ctx, keys.append)
    (on_job,) = cache.jobs.handlers

    keys.clear()
    ctx.all_pods.remove(pod("train-0", node="worker-1", namespace="team-a"))  # type: ignore[attr-defined]
    assert keys == ["node1"]
    keys.clear()
    placed = pod("web", node="", namespace="team-a")
    placed["metadata"]["annotations"] = {names.ANN_SLURM_NODE: "node2"}
    ctx.all_pods.remove(placed)  # type: ignore[attr-defined]
    assert keys == ["node2"]
    keys.clear()
    ctx.all_pods.remove(pod("web", node="worker-9", namespace="team-a"))  # type: ignore[attr-defined]
    assert keys == []

    for old, new, woken in [
        (Job(id=42, state="RUNNING", nodes="node[1-5]"), Job(id=42, state="COMPLETED", nodes="node[1-5]"),
         ["node1", "node2"]),
        (None, Job(id=43, state="RUNNING", nodes="node2"), ["node2"]),
        (Job(id=44, state="RUNNING", nodes="node4"), None, []),
        (None, Job(id=45, state="PENDING"), []),
    ]:
        keys.clear()
        if old is None:
            on_job.on_add(new)
        elif new is None:
            on_job.on_delete(old)
        else:
            on_job.on_update(old, new)
        assert keys == woken


def test_a_pod_that_finishes_wakes_the_nodes_under_sunks_own_drains_where_it_ran():
    """A gang's member that finished stays (its Job keeps it) but runs nothing: the gang drain of its node
    may be over. Only the transition wakes, and only a node under one of sunk's drains."""
    from sunk.translate.drains import GangPlaceholderDrain

    keys: list[str] = []
    ctx, pods, _, _, _, _ = make_ctx(nodes=[
        Node("node1", state="IDLE+DRAIN", reason=GangPlaceholderDrain("team-a", "job/u1", 42).reason()),
        Node("node2", state="IDLE")])
    for name in ("node1", "node2"):
        pods.put(pod(name, node="worker-1"))
    triggers.attach(ctx, keys.append)
    member = pod("train-0", node="worker-1", namespace="team-a")
    member["status"] = {"phase": "Running"}
    ctx.all_pods.put(member)  # type: ignore[attr-defined]
    keys.clear()
    ctx.all_pods.put({**member, "status": {"phase": "Running", "podIP": "10.0.0.1"}})  # type: ignore[attr-defined]
    assert keys == []
    ctx.all_pods.put({**member, "status": {"phase": "Succeeded"}})  # type: ignore[attr-defined]
    assert keys == ["node1"]
    keys.clear()
    ctx.all_pods.put({**member, "status": {"phase": "Succeeded", "reason": "again"}})  # type: ignore[attr-defined]
    assert keys == []


def test_a_stuck_pods_drain_is_looked_at_again_when_the_pod_goes_or_its_node_changes():
    """The Pod is not a slurmd Pod and its node's slurmd Pod may be gone: the drain reason says which node."""
    from sunk.translate.drains import StuckPodDrain

    reason = StuckPodDrain("team-a", "trainer-0", "uid-t", "worker-3", 12).reason()
    keys: list[str] = []
    ctx, _, nodes, _, _, _ = make_ctx(nodes=[Node("node1", state="IDLE+DRAIN", reason=reason),
                                             Node("node2", state="IDLE+DRAIN", reason="bad GPU")])
    triggers.attach(ctx, keys.append)
    stuck = {"metadata": {"name": "trainer-0", "namespace": "team-a", "uid": "uid-t"}, "spec": {"nodeName": "worker-3"}}
    other = {"metadata": {"name": "web", "namespace": "team-a", "uid": "uid-w"}, "spec": {"nodeName": "worker-3"}}
    ctx.all_pods.put(stuck)  # type: ignore[attr-defined]
    ctx.all_pods.put(other)  # type: ignore[attr-defined]
    keys.clear()
    ctx.all_pods.remove(other)  # type: ignore[attr-defined]
    assert keys == []
    ctx.all_pods.remove(stuck)  # type: ignore[attr-defined]
    assert keys == ["node1"]
    keys.clear()
    worker = k8s_node("worker-3")
    nodes.put(worker)
    ready = k8s_node("worker-3", rv="2")
    ready["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    nodes.put(ready)
    assert keys == ["node1", "node1"]  # (added, then Ready)


def test_node_heartbeats_do_not_wake_anything_but_cordon_and_reason_do():
    old = k8s_node("worker-1")
    old["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": "t1"}]
    beat = k8s_node("worker-1", rv="2")
    beat["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": "t2"}]
    assert triggers.node_view(old) == triggers.node_view(beat)
    assert triggers.node_view(old) != triggers.node_view(k8s_node("worker-1", cordoned=True))
    assert triggers.node_view(k8s_node("w", cordoned=True, reason="a")) != triggers.node_view(
        k8s_node("w", cordoned=True, reason="b"))
    notready = k8s_node("worker-1")
    notready["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    assert triggers.node_view(old) != triggers.node_view(notready)


def test_resync_enqueues_every_node_known_to_either_side():
    keys: list[str] = []
    ctx, pods, _, _, _, _ = make_ctx(nodes=[Node("node1"), Node("node2")])
    pods.put(pod("node3"))
    resync = triggers.resync(ctx, keys.append, 0.05)
    resync.start()
    try:
        deadline = time.monotonic() + 5
        while len(keys) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        resync.stop()
    assert set(keys[:3]) == {"node1", "node2", "node3"}


# ---- plugins and flags ---------------------------------------------------------------------------------------


class _Plugin:
    name = "test-plugin"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--plugin-flag", default="x")

    def install(self, ctx: object, args: argparse.Namespace) -> PluginParts:
        return PluginParts()


@pytest.fixture
def fake_plugin_module(monkeypatch: pytest.MonkeyPatch) -> str:
    module = types.ModuleType("sunk_test_syncer_plugin")
    module.PLUGIN = _Plugin()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module.__name__


def test_missing_plugin_module_is_skipped_but_a_broken_one_is_an_error(monkeypatch: pytest.MonkeyPatch):
    assert plugins.load_plugin("sunk.no_such_plugin_module") is None
    broken = types.ModuleType("sunk_test_broken_plugin")
    monkeypatch.setitem(sys.modules, broken.__name__, broken)
    with pytest.raises(TypeError, match="no PLUGIN"):
        plugins.load_plugin(broken.__name__)
    assert plugins.parse_plugin_list(" a, b:X ,,") == ["a", "b:X"]


NONE = Parts(node_locking=False, slurm_metrics=False)


@pytest.mark.parametrize(("given", "locking", "metrics", "expected"), [
    (None, None, None, Parts(node_locking=True, slurm_metrics=True)),  # no flag: both
    ("", None, None, NONE),  # --plugins= : none
    ("sunk.metrics.plugin", None, None, Parts(node_locking=False, slurm_metrics=True)),  # the chart, locking off
    ("sunk.locking.plugin:PLUGIN, sunk.metrics.plugin", None, None, Parts(node_locking=True, slurm_metrics=True)),
    ("sunk.metrics.plugin,acme.plugin", None, None, Parts(node_locking=False, slurm_metrics=True,
                                                          plugins=("acme.plugin",))),
    (None, False, None, Parts(node_locking=False, slurm_metrics=True)),
    (None, None, False, Parts(node_locking=True, slurm_metrics=False)),
    ("", True, None, Parts(node_locking=True, slurm_metrics=False)),  # an explicit switch wins over the list
    ("sunk.locking.plugin", False, True, Parts(node_locking=False, slurm_metrics=True)),
])
def test_which_parts_run(given: str | None, locking: bool | None, metrics: bool | None, expected: Parts):
    assert choose_parts(given, node_locking=locking, slurm_metrics=metrics) == expected


@pytest.mark.parametrize("flags", [["--node-locking=false"], ["--node-locking", "false"],
                                   ["--plugins=sunk.metrics.plugin"]])
def test_node_locking_off_by_any_of_its_spellings(flags: list[str]):
    startup = cli.parse_args(["--slurm-auth-token=t", *flags])
    assert startup.node_locking is None and startup.slurm_metrics is not None


def test_the_in_tree_parts_take_their_flags_without_a_plugin_list(tmp_path):
    secret = tmp_path / "token"
    secret.write_text("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
    startup = cli.parse_args(["--slurm-auth-token=t", f"--hooks-token-file={secret}", "--lock-workers=7",
                              "--slurm-diag-interval=1m"])
    assert startup.node_locking is not None and startup.node_locking.workers == 7
    assert startup.slurm_metrics is not None and startup.slurm_metrics.diag_interval == 60.0
    assert startup.plugins == []


def test_a_flag_nobody_takes_is_refused(capsys: pytest.CaptureFixture[str], fake_plugin_module: str):
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(["--plugins=", "--slurm-auth-token=t", "--plugin-flag=y"])
    assert exc.value.code == 2 and "unrecognized arguments: --plugin-flag=y" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.parse_args([f"--plugins={fake_plugin_module}", "--slurm-auth-token=t", "--no-such-flag"])
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err


def test_a_plugin_may_not_declare_a_flag_the_syncer_has(capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch):
    class Clashing(_Plugin):
        def add_arguments(self, parser: argparse.ArgumentParser) -> None:
            parser.add_argument("--hooks-token-file", default="/plugin/default")

    module = types.ModuleType("sunk_test_clashing_plugin")
    module.PLUGIN = Clashing()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    with pytest.raises(SystemExit) as exc:
        cli.parse_args([f"--plugins={module.__name__}", "--slurm-auth-token=t"])
    assert exc.value.code == 2 and "--hooks-token-file" in capsys.readouterr().err


def test_flags_defaults_and_plugin_flags(fake_plugin_module: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    startup = cli.parse_args([f"--plugins={fake_plugin_module}", "--slurm-auth-token=t", "--plugin-flag", "y"])
    args, config, daemon = startup.args, startup.config, startup.daemon
    assert [p.name for p in startup.plugins] == ["test-plugin"]
    assert startup.node_locking is None and startup.slurm_metrics is None  # the list names neither
    assert args.plugin_flag == "y" and args.watch_namespace == "slurm"  # the plugin sees every flag
    assert cli.parse_args([f"--plugins={fake_plugin_module}", "--slurm-auth-token=t"]).args.plugin_flag == "x"
    assert (config.watch_namespace, config.slurmd_selector, daemon.slurm.user) == (
        "slurm", "app.kubernetes.io/name=slurmd", "root")
    assert (daemon.metrics_bind_address, daemon.health_bind_address, config.hooks_api_bind_address) == (
        ":8080", ":8081", ":8000")
    assert daemon.leader_election is not None
    assert (daemon.leader_election.lease_name, daemon.leader_election.namespace) == ("sunk-syncer", "slurm")
    assert daemon.slurm.poll_interval == 1.0 and daemon.slurm.backend == "rest" and args.zap_log_level == "info"
    assert daemon.slurm.job_full_list_interval == 300.0
    assert (daemon.workers, config.resync_period, config.hooks_api_threads) == (4, 600.0, 256)
    assert config.slurm_node_poll_interval == 0.25  # nodes faster than jobs: the drain latency's bound


def test_the_node_poll_interval_is_the_node_caches_and_the_job_cache_keeps_the_poll_interval():
    from kubernetes.client import ApiClient

    from sunk.syncer.assembly import assemble

    startup = cli.parse_args(["--plugins=", "--slurm-auth-token=t", "--slurm-poll-interval=2s",
                              "--slurm-node-poll-interval=100ms", "--metrics-bind-address=",
                              "--health-probe-bind-address="])
    assert startup.config.slurm_node_poll_interval == 0.1
    syncer = assemble(startup.config, startup.daemon, api=ApiClient(), slurm=FakeSlurmForAssembly())  # type: ignore[arg-type]
    try:
        assert (syncer.ctx.slurm_nodes.interval, syncer.ctx.slurm_jobs.interval) == (0.1, 2.0)
    finally:
        syncer.ctx.recorder.stop()


def test_flag_values_go_style(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("POD_NAMESPACE", "slurm-a")
    startup = cli.parse_args(["--plugins=", "--slurm-auth-token-file=/t", "--leader-elect=false",
                              "--slurm-poll-interval=500ms", "--resync-period=10m", "--zap-log-level=debug",
                              "--workers=8", "--metrics-bind-address=", "--slurm-job-full-list-interval=10m"])
    config, daemon = startup.config, startup.daemon
    assert startup.plugins == [] and config.watch_namespace == "slurm-a" and daemon.leader_election is None
    assert daemon.slurm.poll_interval == 0.5 and config.resync_period == 600.0 and daemon.workers == 8
    assert daemon.slurm.token_file == "/t" and daemon.metrics_bind_address is None
    assert daemon.slurm.job_full_list_interval == 600.0


def test_flags_need_a_slurm_token(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    monkeypatch.delenv("SLURM_JWT", raising=False)
    with pytest.raises(SystemExit):
        cli.parse_args(["--plugins="])
    assert "--slurm-auth-token" in capsys.readouterr().err


class _MountedPlugin:
    name = "mounted"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--mounted-flag", default="on")

    def install(self, ctx: object, args: argparse.Namespace) -> PluginParts:
        from flask import Blueprint

        from sunk.controller.runtime import Controller

        bp = Blueprint("mounted", __name__)
        bp.add_url_rule("/api/v1/nodes/<node>/pre-hook", "pre", lambda node: node, methods=["POST"])
        self.ctx, self.flag = ctx, args.mounted_flag
        return PluginParts(controllers=(Controller("node-lock", _NoopReconciler()),), blueprint=bp)


class _NoopReconciler:
    def reconcile(self, key: str) -> None:
        return None


def test_assembly_mounts_plugin_blueprints_and_manages_plugin_controllers(monkeypatch: pytest.MonkeyPatch):
    from kubernetes.client import ApiClient

    from sunk.syncer.assembly import assemble
    from sunk.syncer.plugins import installers

    module = types.ModuleType("sunk_test_mounted_plugin")
    module.PLUGIN = _MountedPlugin()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    startup = cli.parse_args([f"--plugins={module.__name__}", "--slurm-auth-token=t", "--metrics-bind-address=",
                              "--health-probe-bind-address="])
    syncer = assemble(startup.config, startup.daemon, api=ApiClient(), slurm=FakeSlurmForAssembly(),  # type: ignore[arg-type]
                      plugins=installers(startup.plugins, startup.args))
    try:
        assert module.PLUGIN.flag == "on"  # type: ignore[attr-defined]  (its flags reach its install)
        assert syncer.ctx.config is startup.config
        assert [c.name for c in syncer.manager.controllers] == ["syncer-slurm", "syncer-kube", "node-lock"]
        rules = {r.rule for r in syncer.app().url_map.iter_rules()}
        assert "/api/v1/nodes/<node>/pre-hook" in rules
        assert module.PLUGIN.ctx is syncer.ctx  # type: ignore[attr-defined]
        keys: list[str] = []
        monkeypatch.setattr(syncer.slurm_side.queue, "add", keys.append)
        monkeypatch.setattr(syncer.kube_side.queue, "add", keys.append)
        syncer.ctx.enqueue_node("node9")
        assert keys == ["node9", "node9"]  # a plugin's nudge wakes both sync controllers
    finally:
        syncer.ctx.recorder.stop()


class FakeSlurmForAssembly:
    def list_nodes(self, **_: object) -> Snapshot:
        return Snapshot(items=(), last_update=0)

    def list_jobs(self, **_: object) -> Snapshot:
        return Snapshot(items=(), last_update=0)


def test_a_nodeslice_wakes_the_slurm_nodes_it_lists_and_listed():
    """--slurm-node-clean-up: an entry added (the mark) or gone (the delete) wakes its node."""
    from syncer_fakes import nodeslice

    keys: list[str] = []
    ctx, _, _, _, _, _ = make_ctx(clean_up=True)
    triggers.attach(ctx, keys.append)
    slices = ctx.nodeslices
    assert slices is not None
    slices.put(nodeslice("gpu-0", "gpu", "g-1", "g-2"))
    assert keys == ["g-1", "g-2"]
    keys.clear()
    slices.put(nodeslice("gpu-0", "gpu", "g-2"))
    assert keys == ["g-1", "g-2"]  # the one that left, and the one that stayed
    keys.clear()
    slices.remove(nodeslice("gpu-0", "gpu", "g-2"))
    assert keys == ["g-2"]
    assert ctx.nodeset_of("g-2") is None
    slices.put(nodeslice("gpu-1", "gpu", "g-2"))
    assert ctx.nodeset_of("g-2") == "gpu" and ctx.nodeset_of("g-1") is None


def test_the_clean_up_flag():
    assert not cli.parse_args(["--slurm-auth-token=t", "--plugins="]).config.slurm_node_clean_up
    for flag in ("--slurm-node-clean-up", "--slurm-node-clean-up=true"):
        assert cli.parse_args(["--slurm-auth-token=t", "--plugins=", flag]).config.slurm_node_clean_up
    assert not cli.parse_args(["--slurm-auth-token=t", "--plugins=", "--slurm-node-clean-up=false"]
                              ).config.slurm_node_clean_up


@pytest.mark.parametrize("clean_up", [False, True])
def test_assembly_watches_nodeslices_only_with_clean_up(clean_up: bool):
    from kubernetes.client import ApiClient

    from sunk.syncer.assembly import assemble

    startup = cli.parse_args(["--plugins=", "--slurm-auth-token=t", "--metrics-bind-address=",
                              "--health-probe-bind-address=", f"--slurm-node-clean-up={str(clean_up).lower()}"])
    syncer = assemble(startup.config, startup.daemon, api=ApiClient(), slurm=FakeSlurmForAssembly())  # type: ignore[arg-type]
    try:
        informers = [getattr(i, "name", "") for i in syncer.manager.informers]
        assert ("nodeslices" in informers) is clean_up and (syncer.ctx.nodeslices is not None) is clean_up
        assert (syncer.slurm_side.reconciler.cleanup is not None) is clean_up  # type: ignore[attr-defined]
    finally:
        syncer.ctx.recorder.stop()


def test_the_scheduler_names_flag():
    """Only Pods of these schedulers can be ones sunk placed (sunk.translate.drains.placed_job)."""
    def names_of(*flags: str) -> frozenset[str]:
        return cli.parse_args(["--slurm-auth-token=t", "--plugins=", *flags]).config.scheduler_names

    assert names_of() == {"sunk-scheduler"}
    assert names_of("--scheduler-names=slurm-sunk, slurm-sunk-extender,") == {"slurm-sunk", "slurm-sunk-extender"}
    assert names_of("--scheduler-names=") == frozenset()


def test_the_facts_name_the_configured_schedulers():
    from sunk.syncer.facts import gather

    ctx, *_ = make_ctx(nodes=[Node("node1", state="IDLE")])
    ctx = attrs.evolve(ctx, config=attrs.evolve(ctx.config, scheduler_names=frozenset({"a", "b"})))
    assert gather(ctx, "node1").scheduler_names == {"a", "b"}
