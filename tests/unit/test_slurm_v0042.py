"""v0.0.42 JSON -> models and back, on answers shaped like slurmrestd 24.11.5's."""

import json
from pathlib import Path

import pytest

from sunk.model.slurm import GresGrant, JobAllocation, JobRequest, NodeUpdate
from sunk.slurm import v0042
from sunk_dev.fakeslurm import INFINITE, UNSET, job_json, n, node_json, partition_json


def test_number_handles_no_val_structs_and_plain_numbers():
    assert v0042.number(n(5)) == 5
    assert v0042.number(UNSET) is None
    assert v0042.number(INFINITE) is None
    assert v0042.number(7) == 7
    assert v0042.integer(UNSET, default=3) == 3


def test_node_mapping():
    d = node_json("node7", state=("MIXED", "DRAIN"), cpus=64, alloc_cpus=3, alloc_memory=2048,
                  gres="gpu:h100:4(S:0-1)", gres_used="gpu:h100:1(IDX:0)", reason="k8s: cordoned",
                  reason_time=1700000000, reason_user="root", extra='{"a": 1}', comment="c",
                  partitions=("batch", "gpu"), features=("A", "B"))
    node = v0042.parse_node(d)
    assert node.name == "node7"
    assert node.state == {"MIXED", "DRAIN"} and node.base_state == "MIXED" and node.drained
    assert (node.cpus, node.alloc_cpus, node.real_memory, node.alloc_memory) == (64, 3, 131072, 2048)
    assert (node.gpus_total, node.gpus_alloc) == (4, 1)
    assert (node.reason, node.reason_time, node.reason_user) == ("k8s: cordoned", 1700000000, "root")
    assert (node.extra, node.comment) == ('{"a": 1}', "c")
    assert node.partitions == ("batch", "gpu") and node.features == ("A", "B")


def test_node_without_reason_has_no_reason_time():
    assert v0042.parse_node(node_json("node1")).reason_time is None


def test_without_allocations_the_batch_host_leads_the_node_list():
    """Read without DETAIL (the scheduler's lean reads), a job's nodes come as a hostlist Slurm sorts by name; its
    batch host (where a gang's leader is bound) is the allocation's first node, whatever its name."""
    d = job_json(43, state=("RUNNING",), nodes="node[1-3]")
    d["batch_host"] = "node3"
    job = v0042.parse_job(d)
    assert job.allocations == () and job.batch_host == "node3"
    assert job.node_list == ("node3", "node1", "node2")
    d["batch_host"] = "node1"
    assert v0042.parse_job(d).node_list == ("node1", "node2", "node3")
    d["batch_host"] = ""  # pending: no batch host yet
    assert v0042.parse_job({**d, "nodes": ""}).node_list == ()


def test_running_job_mapping_with_allocation_and_gpus_per_node():
    d = job_json(42, name="train", state=("RUNNING",), nodes="node[1-2]",
                 allocation=[("node1", 4, 8000), ("node2", 2, 4000)], gres_detail=("gpu:2(IDX:0-1)", "gpu:1(IDX:0)"),
                 extra="uid=abc", comment="hello", user="alice", user_id=1001, account="acct", partition="batch",
                 qos="high", priority=4242, submit_time=100, start_time=110, end_time=710, time_limit=10,
                 tres_req="cpu=6,mem=12000M,node=2,billing=6,gres/gpu=3",
                 tres_alloc="cpu=6,mem=12000M,node=2,billing=6,gres/gpu=3", shared=("user",))
    job = v0042.parse_job(d)
    assert (job.id, job.name, job.state, job.state_flags) == (42, "train", "RUNNING", frozenset())
    assert job.state_reason == ""  # Slurm's "None"
    assert job.nodes == "node[1-2]" and job.node_list == ("node1", "node2")
    assert job.allocations == (
        JobAllocation("node1", cpus=4, memory=8000, gpus=2, gres=(GresGrant("gpu", "", 2, (0, 1)),)),
        JobAllocation("node2", cpus=2, memory=4000, gpus=1, gres=(GresGrant("gpu", "", 1, (0,)),)))
    assert (job.extra, job.comment, job.user_name, job.user_id, job.group_id) == ("uid=abc", "hello", "alice", 1001,
                                                                                   1001)
    assert (job.account, job.partition, job.qos, job.priority) == ("acct", "batch", "high", 4242)
    assert (job.submit_time, job.start_time, job.end_time, job.time_limit) == (100, 110, 710, 10)
    assert job.gpus == 3 and job.shared == "user" and job.working_directory == "/tmp"
    assert job.active


def test_a_jobs_admin_comment_is_read_apart_from_its_extra():
    """Identity is read from AdminComment alone: Extra, its user's to write, must not bleed into it."""
    d = job_json(5, extra="sunk-pod=forged ns=a name=b", admin_comment="sunk-pod=u ns=a name=b sched=s")
    job = v0042.parse_job(d)
    assert (job.admin_comment, job.extra) == ("sunk-pod=u ns=a name=b sched=s", "sunk-pod=forged ns=a name=b")
    assert v0042.parse_job({**d, "admin_comment": None}).admin_comment == ""
    assert v0042.parse_job({k: v for k, v in d.items() if k != "admin_comment"}).admin_comment == ""


def test_pending_job_flags_infinite_limit_and_no_allocation():
    job = v0042.parse_job(job_json(7, state=("PENDING", "REQUEUED"), state_reason="JobHeldUser", time_limit=None))
    assert job.state == "PENDING" and job.state_flags == {"REQUEUED"}
    assert job.state_reason == "JobHeldUser"
    assert job.time_limit is None and job.allocations == () and job.node_list == ()
    assert job.start_time is None and job.end_time is None


def test_job_state_base_is_found_even_if_a_flag_comes_first():
    assert v0042.split_job_state(["COMPLETING", "CANCELLED"]) == ("CANCELLED", frozenset({"COMPLETING"}))
    assert v0042.split_job_state([]) == ("PENDING", frozenset())


def test_partition_mapping_expands_nodes():
    p = v0042.parse_partition(partition_json("batch", "node[1-3]", 3, 96, tier=5))
    assert (p.name, p.nodes, p.state, p.priority_tier, p.total_cpus, p.total_nodes) == (
        "batch", ("node1", "node2", "node3"), "UP", 5, 96, 3)


def test_stats_are_converted_from_microseconds():
    stats = v0042.parse_stats({
        "server_thread_count": 3, "agent_queue_size": 1, "dbd_agent_queue_size": 2, "schedule_queue_length": 9,
        "jobs_submitted": 10, "jobs_started": 8, "jobs_completed": 5, "jobs_canceled": 1, "jobs_failed": 1,
        "jobs_pending": 2, "jobs_running": 3, "schedule_cycle_last": 1500, "schedule_cycle_mean": 2000,
        "schedule_cycle_mean_depth": 4, "schedule_cycle_per_minute": 6, "bf_cycle_last": 250000,
        "bf_cycle_mean": 500000, "bf_depth_mean": 7, "bf_backfilled_jobs": 11, "bf_last_backfilled_jobs": 12,
        "bf_backfilled_het_jobs": 13,
        "rpcs_by_message_type": [{"type_id": 2003, "message_type": "REQUEST_JOB_INFO", "count": 5,
                                  "average_time": n(250)}],
    })
    assert stats.schedule_cycle_last == pytest.approx(0.0015)
    assert stats.bf_cycle_mean == pytest.approx(0.5)
    assert (stats.server_thread_count, stats.jobs_running, stats.bf_backfilled_het_jobs) == (3, 3, 13)
    assert stats.rpcs[0].message_type == "REQUEST_JOB_INFO" and stats.rpcs[0].count == 5
    assert stats.rpcs[0].mean_seconds == pytest.approx(0.00025)


def test_job_desc_sets_only_what_was_asked():
    desc = v0042.job_desc(JobRequest(name="j", script="#!/bin/sh\ntrue\n"))
    assert desc == {"name": "j", "script": "#!/bin/sh\ntrue\n", "current_working_directory": "/tmp",
                    "environment": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"], "cpus_per_task": 1}


def test_job_desc_sends_admin_comment_only_when_set():
    """A placeholder's identity goes to AdminComment (only a super user may submit one): never to Extra."""
    identity = "sunk-pod=u ns=a name=b sched=s"
    desc = v0042.job_desc(JobRequest(name="j", script="s", admin_comment=identity))
    assert desc["admin_comment"] == identity and "extra" not in desc and "comment" not in desc
    assert "admin_comment" not in v0042.job_desc(JobRequest(name="j", script="s"))  # None: left to Slurm


def test_a_gangs_job_asks_for_exactly_n_nodes_with_one_task_each():
    desc = v0042.job_desc(JobRequest(name="j", script="s", node_count=3, cpus_per_task=40))
    assert (desc["minimum_nodes"], desc["maximum_nodes"], desc["tasks"], desc["cpus_per_task"]) == (3, 3, 3, 40)
    one = v0042.job_desc(JobRequest(name="j", script="s"))
    assert not {"minimum_nodes", "maximum_nodes", "tasks"} & set(one)  # a single Pod's job: as before


def test_job_desc_full():
    desc = v0042.job_desc(JobRequest(
        name="j", script="s", partition="batch", account="a", qos="high", reservation="r", priority=5, user_id=1001,
        group_id=1001, cpus_per_task=2, memory_per_node=100, gpus_per_node=2, gpu_type="h100", constraints="X",
        prefer="Y", excluded_nodes=("node3",), required_nodes=("node1",), shared="none", time_limit=30,
        comment="c", extra="e", admin_comment="a", requeue=False))
    assert (desc["comment"], desc["extra"], desc["admin_comment"]) == ("c", "e", "a")
    assert desc["tres_per_node"] == "gres/gpu:h100:2"
    assert desc["shared"] == ["none"]
    assert desc["priority"] == n(5) and desc["memory_per_node"] == n(100) and desc["time_limit"] == n(30)
    assert desc["excluded_nodes"] == ["node3"] and desc["required_nodes"] == ["node1"]
    assert (desc["user_id"], desc["group_id"]) == ("1001", "1001")
    assert desc["requeue"] is False and desc["prefer"] == "Y" and desc["constraints"] == "X"


@pytest.mark.parametrize("shared", ["none", "oversubscribe", "user", "mcs", "topo"])
def test_every_v0042_shared_value_is_accepted(shared):
    assert v0042.job_desc(JobRequest(name="j", script="s", shared=shared))["shared"] == [shared]


def test_unknown_shared_value_is_refused_before_any_call():
    with pytest.raises(ValueError, match="shared must be one of"):
        v0042.job_desc(JobRequest(name="j", script="s", shared="exclusive"))


def test_node_update_body():
    assert v0042.node_update_body(NodeUpdate(state="drain", reason="why")) == {"state": ["DRAIN"], "reason": "why"}
    assert v0042.node_update_body(NodeUpdate(state="DOWN+DRAIN")) == {"state": ["DOWN", "DRAIN"]}
    assert v0042.node_update_body(NodeUpdate(extra="", comment="c")) == {"extra": "", "comment": "c"}
    assert v0042.node_update_body(NodeUpdate()) == {}


# Answers recorded from slurmrestd 24.11.5 (the sunk-dev cluster), "meta" removed.
RECORDED = Path(__file__).parent / "slurm_v0042"


def recorded(name):
    return json.loads((RECORDED / name).read_text())


def test_recorded_running_job_with_a_gpu():
    job = v0042.parse_job(recorded("job_running_gpu.json")["jobs"][0])
    assert (job.id, job.name, job.state, job.nodes) == (16, "probe-1", "RUNNING", "node1")
    # (the device index as live 24.11 wrote it: what a Pod's DRA devices are chosen by)
    gpu0 = (GresGrant("gpu", "", 1, (0,)),)
    assert job.allocations == (JobAllocation("node1", cpus=1, memory=1000, gpus=1, gres=gpu0),)
    assert (job.extra, job.comment, job.shared, job.time_limit) == ("x=1", "c1", "user", 10)
    assert job.admin_comment == ""  # (slurmctld's answer: an empty AdminComment, not a placeholder)
    assert job.tres_req == "cpu=1,mem=1000M,node=1,billing=1,gres/gpu=1" and job.gpus == 1
    assert job.start_time and job.end_time == job.start_time + 600


def test_recorded_held_job():
    job = v0042.parse_job(recorded("job_pending_held.json")["jobs"][0])
    assert (job.state, job.state_reason, job.time_limit, job.allocations, job.priority) == (
        "PENDING", "JobHeldUser", None, (), 0)


def test_recorded_nodes():
    body = recorded("nodes.json")
    nodes = [v0042.parse_node(d) for d in body["nodes"]]
    assert [n.name for n in nodes] == ["node1", "node2", "node3", "node4"]
    assert all(n.gpus_total == 2 and n.features == ("FAKE_GPU",) and n.partitions == ("batch",) for n in nodes)
    assert v0042.integer(body["last_update"]) > 0


# -- GET /jobs/state -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("key, ids", [
    ("123", (123, None, None)),
    ("124+1", (124, None, None)),  # a heterogeneous job's component: its own id, then its offset
    ("107_7", (107, 107, 7)),  # a record of an array: its own id (a started task's, or the array's own) and task
    ("100_*", (100, 100, None)),
    ("100_[3-9]", (100, 100, None)),
])
def test_job_state_ids(key, ids):
    state = v0042.parse_job_state({"job_id": key, "state": ["RUNNING", "COMPLETING"]})
    assert (state.job_id, state.array_job_id, state.array_task_id) == ids
    assert (state.key, state.state, state.state_flags) == (key, "RUNNING", frozenset({"COMPLETING"}))


@pytest.mark.parametrize("key", ["", "x", "12a", "1_2_3", "+1", "_4"])
def test_job_state_ids_slurm_never_gives_are_refused(key):
    with pytest.raises(ValueError):
        v0042.parse_job_state({"job_id": key, "state": ["PENDING"]})


def test_a_job_state_compares_with_a_record_by_state_and_flags():
    state = v0042.parse_job_state({"job_id": "7", "state": ["PENDING", "REQUEUED"]})
    assert state.same_state(v0042.parse_job(job_json(7, state=("PENDING", "REQUEUED"))))
    assert not state.same_state(v0042.parse_job(job_json(7, state=("PENDING",))))
    assert not state.same_state(v0042.parse_job(job_json(7, state=("RUNNING",))))


def test_array_fields_of_a_record():
    plain = v0042.parse_job(job_json(5))  # 24.11: array_job_id {"number": 0}, array_task_id unset
    assert (plain.array_job_id, plain.array_task_id) == (None, None)
    pending = v0042.parse_job(job_json(100, array_job_id=100, array_task_string="3-9"))
    assert (pending.array_job_id, pending.array_task_id) == (100, None)
    task = v0042.parse_job(job_json(102, array_job_id=100, array_task_id=2, state=("RUNNING",)))
    assert (task.id, task.array_job_id, task.array_task_id) == (102, 100, 2)


def test_recorded_plain_jobs_are_not_arrays():
    for name in ("job_pending_held.json", "job_running_gpu.json"):
        (job,) = [v0042.parse_job(j) for j in json.loads((RECORDED / name).read_text())["jobs"]]
        assert (job.array_job_id, job.array_task_id) == (None, None)


def test_diag_rpc_statistics_by_message_type():
    """``diag.json`` is not recorded: it is shaped as data_parser v0.0.42 dumps STATS_MSG_RPC_TYPE (every field of
    Slurm's parsers.c, µs as slurmctld counts them), with a made-up cluster's figures."""
    stats = v0042.parse_stats(recorded("diag.json")["statistics"])
    rpcs = {r.message_type: r for r in stats.rpcs}
    assert set(rpcs) == {"REQUEST_PARTITION_INFO", "REQUEST_NODE_INFO", "REQUEST_JOB_INFO",
                         "REQUEST_SUBMIT_BATCH_JOB", "REQUEST_STATS_INFO", "REQUEST_PING"}
    assert rpcs["REQUEST_NODE_INFO"].count == 14392
    assert rpcs["REQUEST_NODE_INFO"].mean_seconds == pytest.approx(3253012 / 14392 / 1e6)  # total / count, exact
    assert (rpcs["REQUEST_PING"].count, rpcs["REQUEST_PING"].mean_seconds) == (0, 0.0)
    assert (stats.server_thread_count, stats.jobs_submitted) == (3, 57)


def test_an_rpc_row_without_total_time_falls_back_to_average_time_and_one_without_a_name_is_its_type_id():
    row = v0042.parse_rpc({"type_id": 2003, "count": 4, "average_time": n(250)})
    assert (row.message_type, row.count, row.mean_seconds) == ("type_2003", 4, pytest.approx(0.00025))
    assert v0042.parse_rpc({"message_type": "REQUEST_PING", "count": 0, "total_time": 0}).mean_seconds == 0.0
    stats = v0042.parse_stats({"rpcs_by_message_type": [None, "x", {"message_type": "REQUEST_PING", "count": 1}]})
    assert [r.message_type for r in stats.rpcs] == ["REQUEST_PING"]  # rows that are not objects are skipped
