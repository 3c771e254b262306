"""The Syncer's Slurm metrics against the real dev cluster, checked against Slurm's own tools.

Known states are made for real (a running GPU job, a held job, a cancelled job, a drained
node, a mixed node), then the real ``sunk-syncer`` (metrics plugin only, no slurmd Pods in
its namespace, so it manages no node) is scraped over HTTP. Node states and counts are
compared with ``sinfo``, job figures with ``scontrol --json``: the table must say what
Slurm says.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from kube_testns import create_namespace, purge_namespace
from prometheus_client.parser import text_string_to_metric_families
from slurmtools import all_jobs, number, slurm_job, state, wait_for
from syncer_harness import SyncerUnderTest

from sunk.metrics.families import SCHEDULER_FAMILIES
from sunk.translate.slurmstates import NODE_COUNT_BUCKET
from sunk_dev import slurmconf

DRAINED = "node4"
LOG_DIR = Path(tempfile.gettempdir()) / "sunk-metrics-tests"
REASON = "metrics-test: drained on purpose"

JOB_LABELS = {"partition", "account", "user", "id", "name", "state"}
JOB_NODE_LABELS = {"partition", "account", "user", "id", "node"}
JOBS_LABELS = {"partition", "account", "user"}
NODE_LABELS = {"node"}
PARTITION_LABELS = {"partition"}
# Every family of the spec's table, with its exact label set.
TABLE: dict[str, set[str]] = {
    "slurm_controller_rpc_count": {"message_type"},
    "slurm_controller_rpc_mean_duration_seconds": {"message_type"},
    "slurm_job_state": JOB_LABELS,
    "slurm_job_cpus_allocated": JOB_NODE_LABELS,
    "slurm_job_gpus_allocated": JOB_NODE_LABELS,
    "slurm_job_uptime_seconds": JOB_NODE_LABELS,
    "slurm_jobs_pending": JOBS_LABELS,
    "slurm_jobs_running": JOBS_LABELS,
    "slurm_node_state": {"node", "partition", "state"},
    **{f"slurm_node_{f}": NODE_LABELS for f in ("cpu_alloc", "cpu_idle", "cpu_total", "mem_alloc", "mem_total",
                                                 "gpu_alloc", "gpu_idle", "gpu_total")},
    **{f"slurm_nodes_{s}": set() for s in ("alloc", "comp", "down", "drain", "err", "fail", "idle", "maint", "mix",
                                            "resv", "total", "not_responding")},
    **{f"slurm_partition_{f}": PARTITION_LABELS for f in ("cpu_alloc", "cpu_idle", "cpu_total", "mem_alloc",
                                                          "mem_total", "gpu_alloc", "gpu_idle", "gpu_total")},
    **{f"slurm_queue_{s}": set() for s in ("canceled", "completed", "completing", "configuring", "failed",
                                            "node_fail", "pending", "pending_dependency", "preempted", "running",
                                            "suspended", "timeout")},
    **{name: set() for name in SCHEDULER_FAMILIES},
}
# Families that may rightly have no series at a given moment (no suspended job here).
MAY_BE_EMPTY = {"slurm_jobs_suspended"}


def scrape(syncer: SyncerUnderTest) -> dict[str, list[Any]]:
    text = requests.get(f"http://127.0.0.1:{syncer.metrics_port}/metrics", timeout=5).text
    out: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def value(table: dict[str, list[Any]], family: str, **labels: str) -> float | None:
    for sample in table.get(family, ()):
        if all(sample.labels.get(k) == v for k, v in labels.items()):
            return float(sample.value)
    return None


def sinfo_states(dev_cluster) -> dict[tuple[str, str], str]:
    """(node, partition) -> sinfo's long state, its marks (``*``, ``~``, ``#``...) removed."""
    out = dev_cluster.slurm("sinfo", "-h", "-N", "-o", "%N %R %T").stdout
    return {(n, p): re.sub(r"[*~#!%$@^-]+$", "", s) for n, p, s in (line.split() for line in out.splitlines() if line)}


def scontrol_nodes(dev_cluster) -> dict[str, dict[str, Any]]:
    out = dev_cluster.slurm("scontrol", "--json", "show", "nodes").stdout
    return {n["name"]: n for n in json.loads(out)["nodes"]}


@pytest.fixture(scope="module")
def made(dev_cluster, kube_api) -> Iterator[dict[str, Any]]:
    """The known Slurm states, made for real, and a syncer serving metrics about them."""
    namespace = create_namespace(kube_api)
    name = f"metrics-{uuid.uuid4().hex[:6]}"
    submitted: list[str] = []

    def sbatch(*flags: str) -> int:
        job = dev_cluster.slurm("sbatch", "--parsable", "--chdir=/tmp", "-o", "/dev/null", f"--job-name={name}",
                                *flags, "--wrap", "sleep 600").stdout.strip()
        submitted.append(job)
        return int(job)

    syncer = SyncerUnderTest(dev_cluster, namespace, name, LOG_DIR, name="metrics-syncer",
                             extra_flags=["--plugins=sunk.metrics.plugin", "--slurm-diag-interval=1s"])
    try:
        dev_cluster.slurm("scontrol", "update", f"nodename={DRAINED}", "state=drain", f"reason={REASON}")
        running = sbatch("-n1", "--gres=gpu:1", "--qos=high", "-x", DRAINED)
        held = sbatch("-n1", "--hold")
        cancelled = sbatch("-n1", "--hold")
        dev_cluster.slurm("scancel", str(cancelled))
        wait_for(lambda: state(slurm_job(dev_cluster, running)) == "RUNNING", 60, "the GPU job to run")
        wait_for(lambda: state(slurm_job(dev_cluster, cancelled)) == "CANCELLED", 30, "the cancel")
        syncer.start()
        yield {"syncer": syncer, "running": running, "held": held, "cancelled": cancelled, "name": name}
    finally:
        syncer.stop()
        if submitted:
            dev_cluster.slurm("scancel", *submitted, check=False)
        dev_cluster.slurm("scontrol", "update", f"nodename={DRAINED}", "state=resume", check=False)
        purge_namespace(kube_api, namespace)


def settled(made, check, what: str) -> None:
    """Scrape until ``check(table)`` holds: the cache lists every 0.5 s, Slurm moves meanwhile."""
    last: list[str] = []

    def attempt() -> bool:
        try:
            check(scrape(made["syncer"]))
        except AssertionError as exc:
            last[:] = [str(exc)]
            return False
        return True

    try:
        wait_for(attempt, 30, what, interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last mismatch: {last[0] if last else None}") from None


def test_every_family_of_the_table_with_its_exact_labels(made):
    def check(table):
        for family, labels in TABLE.items():
            samples = table.get(family, [])
            if family not in MAY_BE_EMPTY:
                assert samples, f"{family} has no series"
            for sample in samples:
                assert set(sample.labels) == labels, f"{family}: {sample.labels}"

    settled(made, check, "every family")


def test_running_job_series_match_what_slurm_allocated(made, dev_cluster):
    job = slurm_job(dev_cluster, made["running"])
    allocation = job["job_resources"]["nodes"]["allocation"][0]
    node, cpus = allocation["name"], allocation["cpus"]["count"]
    labels = {"partition": job["partition"], "account": job["account"], "user": job["user_name"],
              "id": str(made["running"])}

    def check(table):
        assert value(table, "slurm_job_state", **labels, name=made["name"], state="RUNNING") == 1
        assert value(table, "slurm_job_cpus_allocated", **labels, node=node) == cpus
        assert value(table, "slurm_job_gpus_allocated", **labels, node=node) == 1
        uptime = value(table, "slurm_job_uptime_seconds", **labels, node=node)
        assert uptime is not None and 0 <= uptime <= time.time() - number(job, "start_time") + 5

    settled(made, check, "the running job's series")


def test_pending_and_cancelled_jobs_have_their_state_and_no_per_node_series(made, dev_cluster):
    job = slurm_job(dev_cluster, made["held"])
    owner = {"partition": job["partition"], "account": job["account"], "user": job["user_name"]}

    def check(table):
        assert value(table, "slurm_job_state", id=str(made["held"]), state="PENDING") == 1
        assert value(table, "slurm_job_state", id=str(made["cancelled"]), state="CANCELLED") == 1
        for family in ("slurm_job_cpus_allocated", "slurm_job_uptime_seconds"):
            assert value(table, family, id=str(made["held"])) is None
        assert (value(table, "slurm_jobs_pending", **owner) or 0) >= 1
        assert (value(table, "slurm_queue_pending") or 0) >= 1
        assert (value(table, "slurm_queue_canceled") or 0) >= 1

    settled(made, check, "pending and cancelled jobs")


def test_a_suspended_job_is_counted_by_partition_account_and_user(made, dev_cluster):
    """slurm_jobs_suspended, with the seeds' labels (partition, account, user), counts what Slurm shows suspended;
    the fixture has no suspended job, so one is suspended here (``scontrol suspend``) and cancelled after."""
    job_id = int(dev_cluster.slurm("sbatch", "--parsable", "--chdir=/tmp", "-o", "/dev/null",
                                   f"--job-name={made['name']}", "-n1", "-x", DRAINED, "--wrap", "sleep 600").stdout)
    try:
        wait_for(lambda: state(slurm_job(dev_cluster, job_id)) == "RUNNING", 60, "the job to run")
        dev_cluster.slurm("scontrol", "suspend", str(job_id))
        wait_for(lambda: state(slurm_job(dev_cluster, job_id)) == "SUSPENDED", 30, "the job to be suspended")
        job = slurm_job(dev_cluster, job_id)
        owner = {"partition": job["partition"], "account": job["account"], "user": job["user_name"]}

        def check(table):
            samples = table.get("slurm_jobs_suspended", [])
            assert samples and all(set(s.labels) == JOBS_LABELS for s in samples), samples
            suspended = [j for j in all_jobs(dev_cluster) if state(j) == "SUSPENDED"]
            assert value(table, "slurm_jobs_suspended", **owner) == sum(
                1 for j in suspended if (j["partition"], j["account"], j["user_name"]) == tuple(owner.values()))
            assert sum(s.value for s in samples) == len(suspended)
            assert value(table, "slurm_job_state", **owner, id=str(job_id), name=made["name"], state="SUSPENDED") == 1
            assert (value(table, "slurm_queue_suspended") or 0) >= 1

        settled(made, check, "the suspended job counted")
    finally:
        dev_cluster.slurm("scancel", str(job_id), check=False)


def test_node_states_and_counts_agree_with_sinfo(made, dev_cluster):
    def check(table):
        words = sinfo_states(dev_cluster)
        assert words[(DRAINED, "batch")] in ("drained", "draining")
        for (node, partition), word in words.items():
            assert value(table, "slurm_node_state", node=node, partition=partition, state=word) == 1, (node, word)
        per_node = {node: word for (node, _), word in words.items()}
        # sinfo lists no node of no partition: the dev cluster's one such node, static1, never started, is DOWN
        alone = set(scontrol_nodes(dev_cluster)) - set(per_node)
        assert alone == {slurmconf.STATIC_NODE}, alone
        assert value(table, "slurm_node_state", node=slurmconf.STATIC_NODE, partition="", state="down") == 1
        per_node[slurmconf.STATIC_NODE] = "down"
        expected: dict[str, int] = {}
        for word in per_node.values():
            bucket = NODE_COUNT_BUCKET[word]
            if bucket:
                expected[bucket] = expected.get(bucket, 0) + 1
        for bucket in ("alloc", "comp", "down", "drain", "idle", "mix", "resv", "maint"):
            assert value(table, f"slurm_nodes_{bucket}") == expected.get(bucket, 0), bucket
        assert value(table, "slurm_nodes_total") == len(per_node)

    settled(made, check, "node states as sinfo shows them")


def test_node_and_partition_figures_match_scontrol(made, dev_cluster):
    def check(table):
        nodes = scontrol_nodes(dev_cluster)
        for name, node in nodes.items():
            assert value(table, "slurm_node_cpu_total", node=name) == node["cpus"]
            assert value(table, "slurm_node_cpu_alloc", node=name) == node["alloc_cpus"]
            assert value(table, "slurm_node_mem_total", node=name) == node["real_memory"]
            assert value(table, "slurm_node_mem_alloc", node=name) == node["alloc_memory"]
        assert value(table, "slurm_node_cpu_idle", node=DRAINED) == 0  # drained: nothing can start there
        batch = [n for n in nodes.values() if "batch" in (n.get("partitions") or [])]
        assert value(table, "slurm_partition_cpu_total", partition="batch") == sum(n["cpus"] for n in batch)
        assert value(table, "slurm_partition_cpu_alloc", partition="batch") == sum(n["alloc_cpus"] for n in batch)
        assert (value(table, "slurm_partition_gpu_alloc", partition="batch") or 0) >= 1

    settled(made, check, "node figures as scontrol shows them")


def test_scheduler_figures_come_from_diag(made, dev_cluster):
    def check(table):
        assert (value(table, "slurm_scheduler_threads") or 0) >= 1
        assert (value(table, "slurm_scheduler_jobs_submitted") or 0) >= 3  # ours, since the daily reset
        assert (value(table, "slurm_scheduler_cycles_per_minute") or 0) >= 0
        assert value(table, "sunk_slurm_snapshot_fresh", source="diag") == 1
        assert value(table, "sunk_slurm_snapshot_fresh", source="node") == 1
        assert (value(table, "slurm_controller_rpc_count", message_type="REQUEST_STATS_INFO") or 0) >= 1

    settled(made, check, "scheduler figures")


def test_rpc_metrics_are_slurmctlds_statistics_by_message_type(made, dev_cluster):
    """``slurm_controller_rpc_*`` is what sdiag shows (every client's RPCs, by message type), not the Syncer's own
    calls: types the Syncer never sends are there, and a count grows when someone else (here sinfo) calls."""

    def rpcs(table) -> dict[str, float]:
        return {s.labels["message_type"]: float(s.value) for s in table.get("slurm_controller_rpc_count", ())}

    before = wait_for(lambda: rpcs(scrape(made["syncer"])), 30, "the first diag")
    assert all(re.fullmatch(r"[A-Z0-9_]+", t) for t in before), before  # Slurm's names, not type_<id>
    assert {"REQUEST_NODE_INFO", "REQUEST_STATS_INFO"} <= set(before), before
    # sbatch in the fixture: slurmctld counted it; the Syncer itself never submits a batch job.
    assert before.get("REQUEST_SUBMIT_BATCH_JOB", 0) >= 3, before
    own = {s.labels["message_type"] for s in scrape(made["syncer"]).get("sunk_syncer_slurm_requests_total", ())}
    assert "REQUEST_SUBMIT_BATCH_JOB" not in own
    means = {s.labels["message_type"] for s in scrape(made["syncer"])["slurm_controller_rpc_mean_duration_seconds"]}
    assert means == set(before)
    for _ in range(5):
        dev_cluster.slurm("sinfo", "-h")  # REQUEST_PARTITION_INFO and REQUEST_NODE_INFO from outside sunk

    def grew(table):
        after = rpcs(table)
        assert after.get("REQUEST_PARTITION_INFO", 0) >= before.get("REQUEST_PARTITION_INFO", 0) + 5, after
        assert after.get("REQUEST_STATS_INFO", 0) > before.get("REQUEST_STATS_INFO", 0), after  # the diag polls

    settled(made, grew, "slurmctld's RPC counts to grow")


def test_a_scrape_makes_no_slurm_call(dev_cluster, kube_api):
    """With the caches and diag on hour-long intervals, twenty scrapes leave the call counts (this process's
    own calls, ``sunk_syncer_slurm_requests_total``) as they were. (The node poll has its own interval since
    issue 22: left at 250 ms, a poll landing between two scrapes made this fail now and then.)"""
    namespace = create_namespace(kube_api)
    syncer = SyncerUnderTest(dev_cluster, namespace, "metrics-calls", LOG_DIR, name="metrics-calls-syncer",
                             extra_flags=["--plugins=sunk.metrics.plugin", "--slurm-diag-interval=1h",
                                          "--slurm-poll-interval=1h", "--slurm-node-poll-interval=1h"])
    try:
        syncer.start()

        def calls() -> dict[str, float]:
            return {s.labels["message_type"]: s.value for s in scrape(syncer)["sunk_syncer_slurm_requests_total"]}

        before = wait_for(lambda: (c := calls()).get("REQUEST_STATS_INFO") and c, 30, "the first diag")
        assert before.get("REQUEST_NODE_INFO") and before.get("REQUEST_JOB_INFO"), before
        for _ in range(20):
            table = scrape(syncer)
            assert value(table, "slurm_nodes_total")
        assert calls() == before
    finally:
        syncer.stop()
        purge_namespace(kube_api, namespace)
