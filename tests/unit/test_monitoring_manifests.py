"""The Grafana dashboard only queries metrics the code really exports (a renamed metric breaks it here)."""

from __future__ import annotations

import json
import re

from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

import scheduler.metrics  # noqa: F401  (registers the scheduler's metrics)
import sunk.controller.metrics
import sunk.hooks.metrics
import sunk.syncer.metrics
from sunk.dev import chart
from sunk.metrics.collector import DiagPoller, SlurmMetrics
from sunk.slurm.models import Job, Node, RpcStat, SchedulerStats

DASHBOARD = chart.CHART / "files" / "sunk-dashboard.json"  # the chart's ConfigMap (test_chart.py)


def exported_names() -> set[str]:
    diag = DiagPoller(lambda: SchedulerStats(rpcs=(RpcStat("REQUEST_PING", 1, 0.1),)), interval=15)
    diag.poll()
    table = SlurmMetrics(nodes=lambda: {"n": Node("n", state="IDLE", partitions=("p",))},
                         jobs=lambda: {1: Job(1, state="RUNNING", nodes="n")}, diag=diag,
                         freshness=lambda: {"node": True})
    names = {family.name for family in text_string_to_metric_families(table.render())}
    rpc = {"REQUEST_PING": RpcStat("REQUEST_PING", 1, 0.1)}
    for family in [*REGISTRY.collect(), *sunk.syncer.metrics.SlurmRequests(lambda: rpc).collect()]:
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
