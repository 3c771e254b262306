"""benchmarks/gangs.py's pure helpers: options, node checks, the summary's maths, the Job it creates.

The benchmark itself needs the dev cluster (the lead runs it); nothing here does.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchmarks import gangs as b
from benchmarks.scheduler import (
    SUBMITTED,
    percentile,
    queue_figures,
    ratios,
    slurm_waits,
    submissions,
    submitted_jobs,
)
from sunk.translate import gang as g


def rows(count: int, cpus: int = 64, state: str = "idle") -> list[tuple[str, int, str]]:
    return [(f"node{i}", cpus, state) for i in range(1, count + 1)]


# -- options ---------------------------------------------------------------------------------------------
def test_the_issues_options_are_valid():
    assert b.check_args(50, 4, 3, 16) is None
    assert b.check_args(50, 4, 1, 4) is None


@pytest.mark.parametrize(("gangs", "size", "rounds", "nodes", "says"), [
    (0, 4, 3, 16, "--gangs"),
    (50, 4, 0, 16, "--rounds"),
    (50, 1, 3, 16, "--size must be at least 2"),
    (50, 8, 3, 4, "--nodes 4 is fewer than a gang's 8 nodes"),
])
def test_bad_options_are_named(gangs, size, rounds, nodes, says):
    assert says in b.check_args(gangs, size, rounds, nodes)


def test_main_refuses_bad_options_before_touching_the_cluster(capsys):
    with pytest.raises(SystemExit) as exc:
        b.main(["--size", "1"])
    assert exc.value.code == 2 and "--size must be at least 2" in capsys.readouterr().err


# -- nodes -------------------------------------------------------------------------------------------------
def test_sinfo_rows():
    text = "node1 64 idle\nnode2 64 drained\nnode3 64 down*\n\ngarbage\n"
    assert b.parse_sinfo(text) == [("node1", 64, "idle"), ("node2", 64, "drained"), ("node3", 64, "down*")]


@pytest.mark.parametrize(("gangs", "size", "cpus", "needed"), [
    (50, 4, 64, 4),  # 50 members per node fit 64 CPUs: every gang spans the same 4 nodes
    (50, 4, 10, 20),  # 200 members, 10 a node
    (3, 4, 64, 4),  # never fewer nodes than a gang's size
    (100, 4, 64, 7),  # a node hosts at most 64 of the 100 gangs: 400 / 64, rounded up
])
def test_nodes_needed(gangs, size, cpus, needed):
    assert b.nodes_needed(gangs, size, cpus) == needed


def test_the_issues_figure_runs_on_sixteen_idle_nodes():
    assert b.capacity_problem(rows(16), 50, 4, 16) is None
    assert b.capacity_problem(rows(4), 50, 4, 4) is None  # --nodes 4: a smaller run, where the gangs just fit


def test_fewer_nodes_than_a_gang_cannot_run_and_says_how_to_get_more():
    problem = b.capacity_problem(rows(3), 50, 4, 4)
    assert "a gang of 4 needs 4 Slurm nodes" in problem and "has 3 usable" in problem
    assert "`sunk-dev down`" in problem and "SUNK_DEV_NODES=4" in problem


def test_the_default_four_nodes_are_not_the_issues_figure():
    problem = b.capacity_problem(rows(4), 50, 4, 16)
    assert "issue 21's figure is 16" in problem and "has 4" in problem
    assert "SUNK_DEV_NODES=16" in problem and "--nodes 4" in problem


def test_drained_and_unresponsive_nodes_do_not_count_and_are_named():
    nodes = rows(14) + [("node15", 64, "drained"), ("node16", 64, "idle*")]
    problem = b.capacity_problem(nodes, 50, 4, 16)
    assert "has 14" in problem and "node15 (drained)" in problem and "node16 (idle*)" in problem


def test_gangs_that_cannot_all_run_at_once_are_refused():
    """Every job holds its nodes until the round ends: a gang left queued would never start."""
    problem = b.capacity_problem(rows(4, cpus=32), 50, 4, 4)
    assert "hold 200 CPUs at once" in problem and "hold 128" in problem and "SUNK_DEV_NODES=7" in problem


# -- what the Pod path creates ------------------------------------------------------------------------------
def test_the_job_is_one_gang_of_its_size_with_the_scheduler_benchmarks_pod():
    job = b.gang_job("g-0007", 4)
    spec = job["spec"]
    assert job["apiVersion"] == "batch/v1" and job["metadata"]["name"] == "g-0007"
    assert g.job_size(job) == 4 and spec["completionMode"] == "Indexed"
    template = spec["template"]["spec"]
    assert template["restartPolicy"] == "Never" and template["schedulerName"] == "sunk-bench"
    assert template["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "256Mi"}


def test_a_pod_belongs_to_the_job_its_controller_labels_it_with():
    member = {"metadata": {"name": "g-0007-2-x7k2p", "labels": {"batch.kubernetes.io/job-name": "g-0007"}}}
    assert b.job_name_of(member) == "g-0007"
    assert b.job_name_of({"metadata": {"name": "other"}}) is None
    workload = b.gangs_of(4)
    assert (workload.noun, workload.size, workload.unit_of(member)) == ("gang", 4, "g-0007")


def test_a_podgroup_gang_is_its_pod_group_and_members_made_by_the_client(monkeypatch):
    made = []
    monkeypatch.setattr(b.kc, "create", lambda _api, resource, obj, namespace: made.append((resource.kind, obj,
                                                                                             namespace)))
    workload = b.pod_groups_of(3)
    assert (workload.noun, workload.size, workload.scheduler_flags) == ("gang", 3, ("--gang-pod-groups=true",))
    workload.create(object(), "ns", "p-0001")
    assert [(kind, obj["metadata"]["name"]) for kind, obj, _ns in made] == [
        ("PodGroup", "p-0001"), ("Pod", "p-0001-0"), ("Pod", "p-0001-1"), ("Pod", "p-0001-2")]
    assert made[0][1]["spec"] == {"minMember": 3}
    for _kind, obj, namespace in made[1:]:
        assert namespace == "ns" and workload.unit_of(obj) == "p-0001"
        assert obj["metadata"]["labels"] == {g.POD_GROUP: "p-0001"} and obj["spec"]["schedulerName"] == "sunk-bench"
    assert workload.unit_of({"metadata": {"name": "other"}}) is None
    assert b.WORKLOADS["job"](4).scheduler_flags == ()


def test_submissions_are_read_for_pods_and_gangs(tmp_path):
    log = tmp_path / "sunk-scheduler.log"
    log.write_text(
        '{"ts": "2026-11-24T10:00:01.250Z", "msg": "pod ns/b-0001: submitted placeholder job 12"}\n'
        '{"ts": "2026-11-24T10:00:02.500Z", "msg": "Job ns/g-0003 (4 members): submitted placeholder job 13"}\n'
        "not json\n"
        '{"ts": "2026-11-24T10:00:03.000Z", "msg": "Job ns/g-0004: waiting"}\n')
    at = submissions(log)
    assert set(at) == {"b-0001", "g-0003"}
    assert at["g-0003"] - at["b-0001"] == pytest.approx(1.25)
    assert SUBMITTED.match("Job ns/g-0003 (4 members): submitted placeholder job 13").group(1) == "g-0003"
    assert SUBMITTED.match("PodGroup ns/p-0003 (4 members): submitted placeholder job 14").group(1) == "p-0003"


def test_submitted_jobs_name_each_units_last_job(tmp_path):
    log = tmp_path / "sunk-scheduler.log"
    log.write_text(
        '{"ts": "2026-11-24T10:00:01.250Z", "msg": "pod ns/b-0001: submitted placeholder job 12"}\n'
        '{"ts": "2026-11-24T10:00:02.500Z", "msg": "PodGroup ns/p-0003 (4 members): submitted placeholder job 13"}\n'
        '{"ts": "2026-11-24T10:00:04.000Z", "msg": "PodGroup ns/p-0003 (4 members): submitted placeholder job 15"}\n')
    assert submitted_jobs(log) == {"b-0001": 12, "p-0003": 15}


CTLD_LOG = """\
[2026-11-25T04:23:19.920] _slurm_rpc_submit_batch_job: JobId=155 InitPrio=1000 usec=846
[2026-11-25T04:23:20.547] _slurm_rpc_submit_batch_job: JobId=156 InitPrio=1000 usec=400
[2026-11-25T04:23:20.600] _slurm_rpc_submit_batch_job: JobId=157 InitPrio=1000 usec=400
[2026-11-25T04:23:20.700] _slurm_rpc_submit_batch_job: JobId=158 InitPrio=1000 usec=400
[2026-11-25T04:23:22.007] sched: Allocate JobId=155 NodeList=node[1-4] #CPUs=4 Partition=batch
[2026-11-25T04:23:22.008] sched: Allocate JobId=99 NodeList=node[1-4] #CPUs=4 Partition=batch
[2026-11-25T04:23:25.500] sched/backfill: _start_job: Started JobId=156 in batch on node[1-4]
[2026-11-25T04:23:25.600] _update_job: setting extra to x: started for JobId=155
[2026-11-25T04:23:26.000] sched: Allocate JobId=157 NodeList=node[1-4] #CPUs=4 Partition=batch
"""


def test_slurm_waits_time_each_submitted_job_to_its_allocation_by_either_scheduler():
    waits, backfilled = slurm_waits(CTLD_LOG)
    assert set(waits) == {155, 156, 157}  # 158 never allocated, 99 not submitted in this stretch
    assert waits[155] == pytest.approx(2.087) and waits[156] == pytest.approx(4.953)
    assert waits[157] == pytest.approx(5.4) and backfilled == {156}


def test_queue_figures_take_slurms_wait_out_of_each_units_time():
    waits, backfilled = slurm_waits(CTLD_LOG)
    figures = queue_figures({155: 3.0, 156: 6.0, 200: 1.0}, waits, backfilled)
    assert figures["slurm_queue_p50_s"] == pytest.approx(2.087) and figures["slurm_queue_p99_s"] == pytest.approx(4.953)
    assert figures["outside_queue_p50_s"] == pytest.approx(0.913)  # 3.0 - 2.087 and 6.0 - 4.953 (nearest rank)
    assert figures["outside_queue_p99_s"] == pytest.approx(1.047)
    assert figures["started_by_backfill"] == 1
    assert queue_figures({200: 1.0}, waits, backfilled) == {}  # no job of the path in the log: no figure


# -- the maths -----------------------------------------------------------------------------------------------
def test_percentile_is_the_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 51.0  # round(0.5 * 99) = 50 (even rounding), the 51st value
    assert percentile(values, 99) == 99.0 and percentile([3.0], 99) == 3.0
    assert percentile([5.0, 1.0, 3.0], 50) == 3.0


def round_of(raw_p50: float, pod_p50: float, raw_total: float, pod_total: float, calls: dict) -> dict:
    pod = {"p50_s": pod_p50, "p99_s": pod_p50 * 2, "total_s": pod_total, "slurm_calls": calls,
           "slurm_calls_per_gang": sum(calls.values()) / 50, "create_to_all_pods_p50_s": 0.5,
           "all_pods_to_bind_p50_s": pod_p50 - 0.5, "create_to_submit_p50_s": 0.7, "submit_to_bind_p50_s": 1.0,
           "machine_cpu_s": 10.0, "scheduler_cpu_s": 1.5}
    raw = {"p50_s": raw_p50, "p99_s": raw_p50 * 2, "total_s": raw_total, "machine_cpu_s": 8.0}
    return {"raw": raw, "pod_path": pod, **ratios(pod, raw)}


def test_the_summary_is_the_ratio_of_the_rounds_medians():
    rounds = [round_of(2.0, 2.2, 5.0, 6.0, {"SUBMIT": 50, "LIST": 10}),
              round_of(4.0, 4.0, 9.0, 9.0, {"SUBMIT": 50, "LIST": 40}),
              round_of(3.0, 3.6, 6.0, 7.5, {"SUBMIT": 50, "LIST": 20})]
    summary = b.summarize(rounds, 50)
    assert summary["raw_gang_p50_median_s"] == 3.0 and summary["pod_gang_p50_median_s"] == 3.6
    assert summary["ratio_of_medians"] == pytest.approx(1.2)  # not the median of the ratios (1.1)
    assert summary["p50_ratios"] == [1.1, 1.0, 1.2]
    assert summary["pod_gang_p99_median_s"] == 7.2 and summary["raw_gang_p99_median_s"] == 6.0
    assert summary["total_ratio_of_medians"] == pytest.approx(7.5 / 6.0)
    assert summary["slurm_calls_per_gang"] == pytest.approx(1.8)  # the busiest round's
    assert summary["slurm_calls_per_gang_by_type"] == {"LIST": 0.8, "SUBMIT": 1.0}
    assert summary["scheduler_cpu_median_s"] == 1.5 and "baseline" not in summary


def test_the_summary_takes_slurms_queue_out_of_each_path_when_slurmctlds_log_was_read():
    rounds = [round_of(2.0, 2.2, 5.0, 6.0, {"SUBMIT": 50}), round_of(4.0, 4.0, 9.0, 9.0, {"SUBMIT": 50}),
              round_of(3.0, 3.6, 6.0, 7.5, {"SUBMIT": 50})]
    assert "outside_queue_ratio_of_medians" not in b.summarize(rounds, 50)  # no log: no figure, no failure
    for r, (raw_queue, pod_queue) in zip(rounds, ((0.5, 0.4), (2.5, 0.5), (1.0, 1.5)), strict=True):
        r["raw"] |= {"slurm_queue_p50_s": raw_queue, "outside_queue_p50_s": r["raw"]["p50_s"] - raw_queue,
                     "started_by_backfill": 0}
        r["pod_path"] |= {"slurm_queue_p50_s": pod_queue, "outside_queue_p50_s": r["pod_path"]["p50_s"] - pod_queue,
                          "started_by_backfill": 2}
    summary = b.summarize(rounds, 50)
    assert summary["raw_slurm_queue_p50_median_s"] == 1.0 and summary["pod_slurm_queue_p50_median_s"] == 0.5
    # outside the queue: raw 1.5, 1.5, 2.0 (median 1.5); Pod path 1.8, 3.5, 2.1 (median 2.1)
    assert summary["outside_queue_ratio_of_medians"] == pytest.approx(2.1 / 1.5)
    assert summary["slurm_queue_p50s"] == [[0.5, 0.4], [2.5, 0.5], [1.0, 1.5]]
    assert summary["started_by_backfill"] == [[0, 2]] * 3


def test_the_summary_compares_a_baseline_with_the_same_raw_path():
    rounds = [round_of(2.0, 2.2, 5.0, 6.0, {"SUBMIT": 50}), round_of(4.0, 4.4, 9.0, 9.0, {"SUBMIT": 50})]
    for r, base_p50 in zip(rounds, (3.0, 5.0), strict=True):
        base = {**r["pod_path"], "p50_s": base_p50, "slurm_calls_per_gang": 1.5}
        r["baseline"] = {**base, **ratios(base, r["raw"])}
    baseline = b.summarize(rounds, 50)["baseline"]
    assert baseline["ratio_of_medians"] == pytest.approx(4.0 / 3.0)
    assert baseline["p50_ratios"] == [1.5, 1.25] and baseline["slurm_calls_per_gang"] == 1.5


def test_each_round_starts_both_paths_at_one_phase_of_slurms_tick_and_the_rounds_cover_the_second(monkeypatch):
    from benchmarks import scheduler as bench

    assert [bench.round_phase(n, 4) for n in range(4)] == [0.0, 0.25, 0.5, 0.75]
    slept = []
    for now, phase in ((100.30, 0.25), (100.10, 0.25), (100.25, 0.25), (100.90, 0.0)):
        monkeypatch.setattr(bench, "time", SimpleNamespace(time=lambda now=now: now, sleep=slept.append))
        bench.start_at_phase(phase)
    bench.start_at_phase(None)  # no phase: at once
    assert slept == pytest.approx([0.95, 0.15, 0.0, 0.10])


def test_the_slurmctld_log_is_read_from_the_mark_from_its_start_if_begun_anew_and_never_fails(tmp_path):
    from benchmarks import scheduler as bench

    root = tmp_path / "chroot"
    log_file = root / "var/log/slurm/slurmctld.log"
    ctld = bench.SlurmctldLog(SimpleNamespace(root=root))
    ctld.mark()  # no log yet
    assert ctld.since_mark() == ""
    log_file.parent.mkdir(parents=True)
    log_file.write_text("[2026-11-25T04:23:19.920] old\n")
    ctld.mark()
    with log_file.open("a") as log:
        log.write("[2026-11-25T04:23:20.000] new\n")
    assert ctld.since_mark() == "[2026-11-25T04:23:20.000] new\n"
    log_file.write_text("[x] restarted\n")  # shorter than the mark: a new log
    assert ctld.since_mark() == "[x] restarted\n"
    assert bench.utc_seconds("2026-11-25T04:23:20.5Z") - bench.utc_seconds("2026-11-25T04:23:19.920") == (
        pytest.approx(0.58))
