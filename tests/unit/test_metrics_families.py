"""The Slurm metrics table from a snapshot: names, labels, values, and what a scrape costs."""

from __future__ import annotations

import argparse
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sunk.metrics.collector import DiagPoller, SlurmMetrics
from sunk.metrics.config import add_flags
from sunk.metrics.exposition import Family, escape_label, format_value, render
from sunk.metrics.families import (
    QUEUE_STATES,
    RPC_FAMILIES,
    SCHEDULER_FAMILIES,
    SlurmSnapshot,
    rpc_families,
    slurm_families,
    sunk_drain_age,
)
from sunk.model.slurm import Job, JobAllocation, Node, RpcStat, SchedulerStats
from sunk.slurm.errors import SlurmUnavailable

NOW = 1_000_000.0
NODES = {
    "n1": Node("n1", state="MIXED", cpus=64, alloc_cpus=8, real_memory=1000, alloc_memory=300, gres="gpu:h100:4",
               gres_used="gpu:h100:1(IDX:0)", partitions=("gpu", "all")),
    "n2": Node("n2", state="IDLE+DRAIN", cpus=64, real_memory=1000, gres="gpu:h100:4", gres_used="gpu:h100:0",
               partitions=("gpu",)),
    "n3": Node("n3", state="DOWN+NOT_RESPONDING", cpus=32, real_memory=500, partitions=("all",)),
    "n4": Node("n4", state="IDLE", cpus=32, real_memory=500),
}
JOBS = {
    1: Job(1, name="train", state="RUNNING", nodes="n1", user_name="alice", account="ml", partition="gpu",
           start_time=int(NOW) - 90, allocations=(JobAllocation("n1", cpus=8, memory=300, gpus=1),)),
    2: Job(2, name="wait", state="PENDING", user_name="alice", account="ml", partition="gpu"),
    3: Job(3, name="dep", state="PENDING", state_reason="Dependency", user_name="bob", account="ml",
           partition="gpu"),
    4: Job(4, name="done", state="CANCELLED", user_name="bob", partition="all"),
    5: Job(5, name="closing", state="COMPLETED", state_flags=("COMPLETING",), user_id=1001, partition="all"),
    6: Job(6, name="multi", state="RUNNING", nodes="n[1,3]", user_name="carol", partition="all",
           start_time=int(NOW) - 10, tres_alloc="cpu=8,mem=1G,node=2,gres/gpu=2"),
}
STATS = SchedulerStats(server_thread_count=3, agent_queue_size=2, dbd_agent_queue_size=1, jobs_submitted=10,
                       jobs_started=7, jobs_completed=5, jobs_canceled=2, jobs_failed=1, jobs_pending=2,
                       jobs_running=2, schedule_cycle_last=0.0015, schedule_cycle_mean=0.0025,
                       schedule_cycle_mean_depth=4, schedule_cycle_per_minute=6, bf_cycle_last=0.5,
                       bf_cycle_mean=0.25, bf_depth_mean=3, bf_backfilled_jobs=9, bf_last_backfilled_jobs=1,
                       bf_backfilled_het_jobs=0,
                       rpcs=(RpcStat("REQUEST_NODE_INFO", 40, 0.0002), RpcStat("REQUEST_JOB_INFO", 7, 0.001)))


def samples(families):
    """name -> {frozenset(labels.items()): value}, read back through prometheus_client's own parser."""
    out: dict[str, dict[frozenset, float]] = {}
    for family in text_string_to_metric_families(render(families)):
        out.setdefault(family.name, {})
        for s in family.samples:
            out[family.name][frozenset(s.labels.items())] = s.value
    return out


def one(table, family, **labels):
    return table[family][frozenset(labels.items())]


@pytest.fixture(scope="module")
def table():
    return samples(slurm_families(SlurmSnapshot(nodes=NODES, jobs=JOBS, stats=STATS, now=NOW)))


def test_job_state_has_one_series_per_job_with_squeue_words(table):
    assert len(table["slurm_job_state"]) == len(JOBS)
    assert one(table, "slurm_job_state", partition="gpu", account="ml", user="alice", id="1", name="train",
               state="RUNNING") == 1
    assert one(table, "slurm_job_state", partition="all", account="", user="1001", id="5", name="closing",
               state="COMPLETING") == 1


def test_per_job_series_only_for_running_jobs_one_per_node(table):
    labels = dict(partition="gpu", account="ml", user="alice", id="1", node="n1")
    assert one(table, "slurm_job_cpus_allocated", **labels) == 8
    assert one(table, "slurm_job_gpus_allocated", **labels) == 1
    assert one(table, "slurm_job_uptime_seconds", **labels) == 90
    assert {dict(k)["id"] for k in table["slurm_job_uptime_seconds"]} == {"1", "6"}


def test_without_listed_allocations_a_multi_node_job_splits_its_tres_evenly(table):
    for node in ("n1", "n3"):
        labels = dict(partition="all", account="", user="carol", id="6", node=node)
        assert one(table, "slurm_job_cpus_allocated", **labels) == 4
        assert one(table, "slurm_job_gpus_allocated", **labels) == 1


def test_jobs_counts_by_partition_account_user(table):
    assert one(table, "slurm_jobs_pending", partition="gpu", account="ml", user="alice") == 1
    assert one(table, "slurm_jobs_pending", partition="gpu", account="ml", user="bob") == 1
    assert sum(table["slurm_jobs_running"].values()) == 2
    assert table["slurm_jobs_suspended"] == {}


def test_node_state_per_partition_with_sinfo_words(table):
    assert one(table, "slurm_node_state", node="n1", partition="gpu", state="mixed") == 1
    assert one(table, "slurm_node_state", node="n1", partition="all", state="mixed") == 1
    assert one(table, "slurm_node_state", node="n2", partition="gpu", state="drained") == 1
    assert one(table, "slurm_node_state", node="n4", partition="", state="idle") == 1


def test_node_figures_idle_only_where_a_job_could_start(table):
    assert one(table, "slurm_node_cpu_alloc", node="n1") == 8
    assert one(table, "slurm_node_cpu_idle", node="n1") == 56
    assert one(table, "slurm_node_cpu_idle", node="n2") == 0  # drained: "other", not idle
    assert one(table, "slurm_node_cpu_idle", node="n3") == 0  # down
    assert one(table, "slurm_node_cpu_total", node="n2") == 64
    assert (one(table, "slurm_node_mem_alloc", node="n1"), one(table, "slurm_node_mem_total", node="n1")) == \
        (300, 1000)
    assert (one(table, "slurm_node_gpu_alloc", node="n1"), one(table, "slurm_node_gpu_idle", node="n1"),
            one(table, "slurm_node_gpu_total", node="n1")) == (1, 3, 4)


def test_partition_figures_sum_their_nodes(table):
    assert one(table, "slurm_partition_cpu_total", partition="gpu") == 128
    assert one(table, "slurm_partition_cpu_alloc", partition="gpu") == 8
    assert one(table, "slurm_partition_cpu_idle", partition="gpu") == 56
    assert one(table, "slurm_partition_gpu_total", partition="gpu") == 8
    assert one(table, "slurm_partition_gpu_idle", partition="gpu") == 3
    assert one(table, "slurm_partition_mem_total", partition="all") == 1500


def test_nodes_counts_each_node_once_and_not_responding_on_its_own(table):
    counts = {name[len("slurm_nodes_"):]: next(iter(v.values())) for name, v in table.items()
              if name.startswith("slurm_nodes_")}
    assert counts == {"alloc": 0, "comp": 0, "down": 1, "drain": 1, "err": 0, "fail": 0, "idle": 1, "maint": 0,
                      "mix": 1, "resv": 0, "total": 4, "not_responding": 1}


def test_queue_counts(table):
    counts = {name[len("slurm_queue_"):]: next(iter(v.values())) for name, v in table.items()
              if name.startswith("slurm_queue_")}
    assert set(counts) == set(QUEUE_STATES) | {"pending_dependency"}
    assert (counts["pending"], counts["pending_dependency"], counts["running"], counts["canceled"],
            counts["completing"], counts["completed"]) == (2, 1, 2, 1, 1, 0)


def test_scheduler_figures_from_diag(table):
    values = {name: next(iter(table[name].values())) for name in SCHEDULER_FAMILIES}
    assert values["slurm_scheduler_threads"] == 3
    assert values["slurm_scheduler_queue"] == 2
    assert values["slurm_scheduler_dbd_queue"] == 1
    assert values["slurm_scheduler_cycle_last_seconds"] == 0.0015
    assert values["slurm_scheduler_backfill_cycle_last_seconds"] == 0.5
    assert values["slurm_scheduler_backfilled_jobs_total"] == 9
    assert values["slurm_scheduler_jobs_cancelled"] == 2


def test_slurmctld_rpc_statistics_by_message_type_from_diag(table):
    """slurmctld's counts of every client's RPCs (sdiag), not this process's calls."""
    assert table["slurm_controller_rpc_count"] == {
        frozenset({("message_type", "REQUEST_JOB_INFO")}): 7, frozenset({("message_type", "REQUEST_NODE_INFO")}): 40}
    assert one(table, "slurm_controller_rpc_mean_duration_seconds", message_type="REQUEST_NODE_INFO") == 0.0002


def test_a_message_type_listed_twice_is_one_series_with_the_weighted_mean():
    """One duplicate series would fail the whole scrape in Prometheus."""
    text = render(rpc_families([RpcStat("REQUEST_PING", 1, 0.004), RpcStat("REQUEST_PING", 3, 0.0),
                                RpcStat("REQUEST_NEVER", 0, 0.0)]))
    table = {f.name: {s.labels["message_type"]: s.value for s in f.samples}
             for f in text_string_to_metric_families(text)}
    assert table["slurm_controller_rpc_count"] == {"REQUEST_PING": 4, "REQUEST_NEVER": 0}
    assert table["slurm_controller_rpc_mean_duration_seconds"] == {"REQUEST_PING": 0.001, "REQUEST_NEVER": 0}


def test_a_message_type_slurm_did_not_name_is_an_escaped_label_value():
    text = render(rpc_families([RpcStat('REQ"}\n', 2, 0.1)]))
    family = next(text_string_to_metric_families(text))
    assert [(s.labels, s.value) for s in family.samples] == [({"message_type": 'REQ"}\n'}, 2)]


def test_no_scheduler_families_before_the_first_diag():
    names = samples(slurm_families(SlurmSnapshot(nodes={}, jobs={}, stats=None, now=NOW)))
    assert not (set(SCHEDULER_FAMILIES) | set(RPC_FAMILIES)) & set(names)
    assert "slurm_nodes_total" in names


# -- the collector --------------------------------------------------------------------------------------------
def collector(active=True):
    diag = DiagPoller(lambda: STATS, interval=10)
    diag.poll()
    return SlurmMetrics(nodes=lambda: NODES, jobs=lambda: JOBS, diag=diag,
                          freshness=lambda: {"node": True, "job": False}, active=lambda: active,
                          clock=lambda: NOW)


def test_exposition_renders_and_reports_freshness():
    text = collector().render()
    assert 'slurm_controller_rpc_count{message_type="REQUEST_NODE_INFO"} 40\n' in text
    assert 'sunk_slurm_snapshot_fresh{source="job"} 0\n' in text
    assert 'sunk_slurm_snapshot_fresh{source="diag"} 1\n' in text
    assert "\nslurm_nodes_total 4\n" in text
    assert "# TYPE slurm_job_state gauge\n" in text


def test_the_age_of_sunks_drains_only():
    nodes = [Node("a", state="IDLE+DRAIN", reason="k8s: sunk-stuck: pod ns/p uid=u stuck terminating",
                  reason_time=int(NOW) - 600),
             Node("b", state="DOWN", reason="k8s: NodeNotReady", reason_time=int(NOW) - 30),
             Node("c", state="IDLE+DRAIN", reason="nhc: bad GPU", reason_time=int(NOW) - 900),  # an operator's
             Node("d", state="IDLE", reason="k8s: lifted since", reason_time=int(NOW) - 900),  # back in service
             Node("e", state="IDLE+DRAIN", reason="k8s: no reason time"),
             Node("f", state="IDLE+DRAIN", reason=" k8s: not at the start", reason_time=int(NOW) - 5),
             Node("g", state="IDLE+DRAIN", reason="k8s: clock skew", reason_time=int(NOW) + 50)]
    table = samples([sunk_drain_age(nodes, NOW)])
    assert table["sunk_slurm_drain_age_seconds"] == {
        frozenset({("node", "a")}): 600, frozenset({("node", "b")}): 30, frozenset({("node", "g")}): 0}


def test_the_collector_serves_drain_ages_on_every_scrape_as_the_clock_moves():
    clock = [NOW]
    nodes = {"a": Node("a", state="IDLE+DRAIN", reason="k8s: x", reason_time=int(NOW) - 60)}
    diag = DiagPoller(lambda: STATS, interval=10)
    metrics = SlurmMetrics(nodes=lambda: nodes, jobs=dict, diag=diag, freshness=dict, clock=lambda: clock[0])
    assert 'sunk_slurm_drain_age_seconds{node="a"} 60\n' in metrics.render()
    clock[0] += 120
    assert 'sunk_slurm_drain_age_seconds{node="a"} 180\n' in metrics.render()
    assert metrics.render() == render(metrics.families())


def test_a_standby_reports_nothing_not_even_slurmctlds_rpc_statistics():
    """They are cluster-wide: two replicas would double every series."""
    standby = collector(active=False)
    assert list(standby.families()) == [] and standby.render() == ""


def test_diag_failure_keeps_the_last_figures_and_turns_stale(caplog):
    answers = [STATS]

    def diag():
        if not answers:
            raise SlurmUnavailable("slurmrestd is down")
        return answers.pop()

    poller = DiagPoller(diag, interval=10)
    poller.poll()
    assert poller.fresh and poller.stats == STATS
    poller.poll()
    poller.poll()
    assert not poller.fresh and poller.stats == STATS
    assert sum("slurm diag failed" in r.message for r in caplog.records) == 1  # once per outage


# -- the text exposition ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ['plain', 'quo"te', "back\\slash", "new\nline", 'all"\\\n', "ünï", ""])
def test_label_values_round_trip_through_the_parser(text):
    family = Family("x_total_things", "help with \\ and\nnewline", ("a", "b"))
    family.add((text, "2"), 1.5)
    parsed = list(text_string_to_metric_families(render([family])))
    assert parsed[0].samples[0].labels == {"a": text, "b": "2"} and parsed[0].samples[0].value == 1.5
    assert escape_label("ok") == "ok"


@pytest.mark.parametrize(("value", "text"), [(3, "3"), (3.0, "3"), (0.25, "0.25"), (float("nan"), "NaN"),
                                             (float("inf"), "+Inf"), (-float("inf"), "-Inf"), (1e20, "1e+20")])
def test_values(value, text):
    assert format_value(value) == text


def test_a_family_without_rows_still_has_help_and_type():
    assert render([Family("empty", "nothing yet", ("a",))]) == "# HELP empty nothing yet\n# TYPE empty gauge\n"


def test_an_unreadable_diag_answer_does_not_end_the_poller():
    answers: list[object] = [KeyError("statistics")]

    def diag():
        if answers:
            raise answers.pop()  # type: ignore[misc]
        return STATS

    poller = DiagPoller(diag, interval=0.01)
    poller.start()
    try:
        deadline = time.monotonic() + 5
        while not poller.fresh and time.monotonic() < deadline:
            time.sleep(0.01)
        assert poller.fresh and poller.stats == STATS  # it polled again after the bad answer
    finally:
        poller.stop()


@pytest.mark.parametrize("value", ["0s", "0", "-1s", "soon"])
def test_the_diag_interval_flag_refuses_zero_negative_and_garbage(value, capsys):
    parser = argparse.ArgumentParser()
    add_flags(parser)
    with pytest.raises(SystemExit):
        parser.parse_args([f"--slurm-diag-interval={value}"])
    assert "--slurm-diag-interval" in capsys.readouterr().err
    assert parser.parse_args(["--slurm-diag-interval=30s"]).slurm_diag_interval == 30
