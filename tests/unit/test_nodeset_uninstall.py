"""``sunk-operator end-nodesets`` (sunk/nodeset/uninstall.py), the chart's first uninstall hook, against the
NodeSet reconciler over the same apiserver in memory: the hook deletes, the operator drains, cancels and lets go."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from test_nodeset_reconciler import W, World

from sunk.commands.operator import end_nodesets, end_nodesets_parser
from sunk.commands.operator import main as operator_main
from sunk.kube import client as kc
from sunk.model import names
from sunk.model.slurm import Job, Node
from sunk.nodeset.uninstall import EndConfig, EndNodeSets, NoOperator

pytestmark = pytest.mark.unit


class Clock:
    """Time that passes only in ``sleep``, where the operator and Slurm take their turn."""

    def __init__(self, world: World) -> None:
        self.now = 0.0
        self.world = world
        self.sleeps = 0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.sleeps += 1
        w = self.world
        w.reconcile()
        w.api.finish()
        for job in w.slurm.jobs.values():  # a cancelled job's nodes come back idle (still drained)
            if job.state == "CANCELLED":
                for name in job.node_list:
                    if name in w.slurm.nodes:
                        w.slurm.nodes[name] = Node(name, state="IDLE+DRAIN", reason=w.slurm.nodes[name].reason)


def busy_world(monkeypatch: pytest.MonkeyPatch) -> World:
    w = World(monkeypatch, [W(1), W(2)], [Node("g-3-1", state="ALLOCATED"), Node("g-3-2")])
    w.reconcile()
    w.api.set_ready()
    w.reconcile()
    w.slurm.jobs = {7: Job(7, state="RUNNING", nodes="g-3-1")}
    return w


def test_the_nodesets_are_deleted_their_jobs_cancelled_by_the_operator_and_waited_for(monkeypatch, caplog):
    w = busy_world(monkeypatch)
    clock = Clock(w)
    hook = EndNodeSets(None, EndConfig(namespace="slurm", nodesets=("gpu", "gone-already")),  # type: ignore[arg-type]
                       clock=clock, sleep=clock.sleep)
    with caplog.at_level(logging.INFO, logger="sunk.operator.uninstall"):
        assert hook.run() == []
    assert w.api.one("nodesets", "gpu") is None and w.pods() == {}
    assert w.slurm.jobs[7].state == "CANCELLED"
    assert [e[1] for e in w.recorder.events].count("CancelledJob") == 1
    assert "NodeSet slurm/gone-already is gone already" in caplog.text
    assert "done: gpu, gone-already gone" in caplog.text


def test_without_cancel_jobs_a_running_job_is_waited_for_until_the_timeout_which_names_what_is_left(
        monkeypatch, caplog):
    w = busy_world(monkeypatch)
    clock = Clock(w)
    hook = EndNodeSets(None, EndConfig(namespace="slurm", nodesets=("gpu",), cancel_jobs=False,  # type: ignore[arg-type]
                                       timeout=30), clock=clock, sleep=clock.sleep)
    with caplog.at_level(logging.INFO, logger="sunk.operator.uninstall"):
        assert hook.run() == ["gpu"]
    nodeset = w.api.one("nodesets", "gpu")
    assert nodeset is not None and nodeset["metadata"].get("deletionTimestamp")
    assert names.ANN_ON_DELETE not in (nodeset["metadata"].get("annotations") or {})
    assert w.slurm.jobs[7].state == "RUNNING" and "g-3-1" in w.pods()
    assert "waiting for gpu: 1 slurmd Pods left" in caplog.text  # (said every 15 s)
    assert "NodeSets left after 30s: gpu: 1 slurmd Pods left" in caplog.text


def test_without_cancel_jobs_an_annotation_already_there_stands_and_is_said(monkeypatch, caplog):
    w = busy_world(monkeypatch)
    w.api.objects[("nodesets", "slurm", "gpu")]["metadata"].setdefault("annotations", {})[names.ANN_ON_DELETE] = (
        names.ON_DELETE_CANCEL_JOBS)
    clock = Clock(w)
    hook = EndNodeSets(None, EndConfig(namespace="slurm", nodesets=("gpu",), cancel_jobs=False),  # type: ignore[arg-type]
                       clock=clock, sleep=clock.sleep)
    with caplog.at_level(logging.INFO, logger="sunk.operator.uninstall"):
        assert hook.run() == []
    assert w.slurm.jobs[7].state == "CANCELLED"  # (the NodeSet's own choice, kept)
    warning = next(r for r in caplog.records if r.levelno == logging.WARNING)
    assert "NodeSet slurm/gpu carries sunk.coreweave.com/on-delete: 'cancel-jobs'" in warning.getMessage()
    assert "its jobs are cancelled anyway" in warning.getMessage()
    assert "kubectl annotate nodeset -n slurm gpu sunk.coreweave.com/on-delete-" in warning.getMessage()


def test_without_cancel_jobs_a_nodeset_without_the_annotation_draws_no_warning(monkeypatch, caplog):
    w = busy_world(monkeypatch)
    clock = Clock(w)
    hook = EndNodeSets(None, EndConfig(namespace="slurm", nodesets=("gpu", "gone-already"),  # type: ignore[arg-type]
                                       cancel_jobs=False, timeout=5), clock=clock, sleep=clock.sleep)
    with caplog.at_level(logging.INFO, logger="sunk.operator.uninstall"):
        hook.run()
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "NodeSet slurm/gone-already is gone already" in caplog.text


def operator(w: World, ready: int) -> None:
    w.api.put("deployments", {"metadata": {"name": "sunk-operator", "namespace": "sunk"},
                              "status": {"readyReplicas": ready} if ready else {}})


def test_without_a_ready_operator_nothing_is_deleted(monkeypatch):
    """A NodeSet deleted with no operator to let it go would stay Terminating, and be drained and its jobs
    cancelled whenever an operator came back: the run refuses first, and the release stays as it was."""
    w = busy_world(monkeypatch)
    config = EndConfig(namespace="slurm", nodesets=("gpu",), operator_deployment="sunk-operator",
                       operator_namespace="sunk")
    for ready in (None, 0):
        if ready is not None:
            operator(w, ready)
        with pytest.raises(NoOperator):
            EndNodeSets(None, config).run()  # type: ignore[arg-type]
        nodeset = w.api.one("nodesets", "gpu")
        assert nodeset is not None and not nodeset["metadata"].get("deletionTimestamp")
        assert names.ANN_ON_DELETE not in (nodeset["metadata"].get("annotations") or {})
    operator(w, 1)
    clock = Clock(w)
    assert EndNodeSets(None, config, clock=clock, sleep=clock.sleep).run() == []  # type: ignore[arg-type]


def test_an_apiserver_outage_while_waiting_is_waited_out(monkeypatch):
    w = busy_world(monkeypatch)
    clock = Clock(w)
    real_get = kc.get
    outages = iter([kc.ApiUnavailable(503, "ServiceUnavailable"), kc.ConnectionFailed("connection refused")])

    def flaky_get(api: Any, resource: Any, name: str, namespace: str | None = None, **kw: Any) -> Any:
        failure = next(outages, None)
        if failure is not None:
            raise failure
        return real_get(api, resource, name, namespace, **kw)

    monkeypatch.setattr(kc, "get", flaky_get)
    assert EndNodeSets(None, EndConfig(namespace="slurm", nodesets=("gpu",)),  # type: ignore[arg-type]
                       clock=clock, sleep=clock.sleep).run() == []
    assert w.api.one("nodesets", "gpu") is None


def test_the_command_dispatches_end_nodesets(monkeypatch):
    seen: list[list[str]] = []
    monkeypatch.setattr("sunk.commands.operator.end_nodesets", lambda argv: seen.append(list(argv)) or 0)
    assert operator_main(["end-nodesets", "--nodeset", "gpu"]) == 0
    assert seen == [["--nodeset", "gpu"]]


def test_an_api_error_fails_the_command_with_one_line(monkeypatch, capsys):
    def refused(*_: Any, **__: Any) -> Any:
        raise kc.ApiError(403, "Forbidden", {"message": "nodesets \"gpu\" is forbidden"}, "PATCH", "/x")

    monkeypatch.setattr(kc, "patch", refused)
    monkeypatch.setattr(kc, "load_api_client", lambda *_: None)
    assert end_nodesets(["--namespace", "slurm", "--nodeset", "gpu"]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert "end-nodesets: failed: PATCH /x: 403" in line and "forbidden" in line


@pytest.mark.parametrize("argv", [[], ["--nodeset", "Not_A_Label"], ["--nodeset", "gpu", "--timeout", "-1s"]])
def test_bad_flags_are_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        end_nodesets_parser().parse_args(argv)
    assert exited.value.code == 2
