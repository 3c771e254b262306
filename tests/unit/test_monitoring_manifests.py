"""The Grafana dashboard and the alerts only query metrics the code really exports (a renamed metric breaks them
here)."""

from __future__ import annotations

import json
import re
import types

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

import scheduler.metrics  # noqa: F401  (registers the scheduler's metrics)
import sunk.controller.metrics
import sunk.controller.slurmauth
import sunk.hooks.metrics
import sunk.syncer.metrics
from scheduler.waiting import waiting_exposition
from sunk.metrics.collector import DiagPoller, SlurmMetrics
from sunk.model.slurm import Job, Node, RpcStat, SchedulerStats
from sunk.slurm.auth import AuthStatus
from sunk_dev import chart

DASHBOARD = chart.CHART / "files" / "sunk-dashboard.json"  # the chart's ConfigMap (test_chart.py)


def exported_names() -> set[str]:
    diag = DiagPoller(lambda: SchedulerStats(rpcs=(RpcStat("REQUEST_PING", 1, 0.1),)), interval=15)
    diag.poll()
    table = SlurmMetrics(nodes=lambda: {"n": Node("n", state="IDLE", partitions=("p",)),
                                        "d": Node("d", state="IDLE+DRAIN", reason="k8s: x", reason_time=1)},
                         jobs=lambda: {1: Job(1, state="RUNNING", nodes="n")}, diag=diag,
                         freshness=lambda: {"node": True})
    names = {family.name for family in text_string_to_metric_families(table.render())}
    names |= {family.name for family in text_string_to_metric_families(waiting_exposition(["Resources"]))}
    rpc = {"REQUEST_PING": RpcStat("REQUEST_PING", 1, 0.1)}
    # A REST client's token status: without one (pyslurm, or no client yet) the token families are absent.
    sunk.controller.slurmauth.watch(types.SimpleNamespace(auth_status=lambda: AuthStatus("token", 2e9, 0, False)))
    try:
        collected = [*REGISTRY.collect(), *sunk.syncer.metrics.SlurmRequests(lambda: rpc).collect()]
    finally:
        sunk.controller.slurmauth.watch(None)
    for family in collected:
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
        if family.type == "counter":
            names.add(family.name + "_total")  # a labelled counter without children has no sample yet
    for histogram in ("sunk_scheduler_pod_bind_latency_seconds", "sunk_hooks_request_duration_seconds"):
        names.add(histogram + "_bucket")  # no observation yet in this process: no bucket samples
    return names


def test_every_dashboard_query_names_an_exported_metric():
    dashboard = json.loads(DASHBOARD.read_text())
    queried = {name for panel in dashboard["panels"] for target in panel["targets"]
               for name in re.findall(r"([a-z_][a-z0-9_]*)\{", target["expr"])}
    assert queried, "the dashboard queries something"
    assert queried <= exported_names(), queried - exported_names()


def test_the_pod_monitor_scrapes_every_component_that_serves_metrics():
    docs = chart.render({"extender": {"enabled": True}, "operator": {"enabled": True},
                         "monitoring": {"podMonitor": {"enabled": True}}},
                        helm=chart.helm_binary())
    monitor = chart.find(docs, "PodMonitor", "sunk")
    scraped = set(monitor["spec"]["selector"]["matchExpressions"][0]["values"])
    serving = {d["metadata"]["name"] for d in docs if d["kind"] == "Deployment"
               and any(p["name"] == "metrics" for p in d["spec"]["template"]["spec"]["containers"][0].get("ports", []))}
    assert scraped == serving
    assert monitor["spec"]["podMetricsEndpoints"][0]["relabelings"][0]["targetLabel"] == "slurm_cluster"


# Metrics another change adds; a rule may name one only while it is not exported yet (issue 32: the scheduler's
# gauge of Pods waiting by Slurm pending reason). Once it is, the check below holds for it like for any other.
ALERTS = {"SunkNoLeader", "SunkSlurmUnreachable", "SunkDrainStuck", "SunkTokenExpiring", "SunkPodsWaitingTooLong"}
WITH_OPERATOR = ("--api-versions", "monitoring.coreos.com/v1")


def rules(values, extra_args=WITH_OPERATOR):
    docs = chart.render(values, helm=chart.helm_binary(), extra_args=extra_args)
    return {rule["alert"]: rule for group in chart.find(docs, "PrometheusRule", "sunk")["spec"]["groups"]
            for rule in group["rules"]}


@pytest.fixture(scope="module")
def alerts():
    return rules({"monitoring": {"prometheusRule": {"enabled": True}}})


def test_the_rules_render_only_when_enabled_and_the_prometheus_operator_api_is_served():
    helm = chart.helm_binary()
    enabled = {"monitoring": {"prometheusRule": {"enabled": True}}}
    assert not [d for d in chart.render(enabled, helm=helm) if d["kind"] == "PrometheusRule"]  # no Operator
    assert not [d for d in chart.render({}, helm=helm, extra_args=WITH_OPERATOR) if d["kind"] == "PrometheusRule"]


def test_every_alert_queries_exported_metrics_of_this_release_only(alerts):
    assert set(alerts) == ALERTS
    exported = exported_names()
    for name, rule in alerts.items():
        queried = set(re.findall(r"([a-z_][a-z0-9_]*)\{", rule["expr"]))
        assert queried, name
        assert queried <= exported, (name, queried - exported)
        selectors = re.findall(r"\{([^}]*)\}", rule["expr"])
        assert selectors and all(s == 'namespace="slurm",slurm_cluster="slurm"' for s in selectors), (name, selectors)


def test_every_alert_has_a_severity_and_says_what_to_do(alerts):
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert rule["annotations"]["summary"] and len(rule["annotations"]["description"]) > 80, name


def test_the_thresholds_come_from_values(alerts):
    assert alerts["SunkDrainStuck"]["expr"].endswith("> 3600")  # 60 minutes by default
    tuned = rules({"monitoring": {"prometheusRule": {
        "enabled": True, "noLeaderFor": "2m", "slurmUnreachableFor": "90s", "drainStuckMinutes": 15,
        "tokenExpiresWithinSeconds": 3600, "podsWaitingFor": "1h", "labels": {"release": "kube-prom"}}}})
    waits = (tuned["SunkNoLeader"]["for"], tuned["SunkSlurmUnreachable"]["for"], tuned["SunkPodsWaitingTooLong"]["for"])
    assert waits == ("2m", "90s", "1h")
    assert tuned["SunkDrainStuck"]["expr"].endswith("> 900")
    assert tuned["SunkTokenExpiring"]["expr"].endswith("< 3600")


@pytest.mark.parametrize("bad", [{"noLeaderFor": "5 minutes"}, {"drainStuckMinutes": 0},
                                 {"tokenExpiresWithinSeconds": "1d"}, {"severity": "page"}])
def test_the_schema_refuses_thresholds_prometheus_would_not_take(bad):
    with pytest.raises(chart.RenderError):
        chart.render({"monitoring": {"prometheusRule": {"enabled": True, **bad}}}, helm=chart.helm_binary())
