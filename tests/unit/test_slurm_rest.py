"""The REST backend against an in-process slurmrestd stand-in (sunk_dev.fakeslurm)."""

import json
import os
import time

import jwt
import pytest
import requests

from sunk.base import fence
from sunk.base.fence import Fenced, LeaseFence
from sunk.slurm import JobRequest, NodeUpdate, NotFound, OutcomeUnknown, SlurmError, SlurmUnavailable, connect
from sunk.slurm.errors import AuthenticationFailed
from sunk_dev.fakeslurm import FakeSlurmrestd, Fault, n


class Clock:
    def __init__(self, t=1_800_000_000.0):
        self.t = t

    def __call__(self):
        return self.t

    def tick(self, seconds=5):
        self.t += seconds


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def fake(clock):
    server = FakeSlurmrestd(token="tok", clock=clock)
    server.put_partition("batch", "node[1-2]", 2, 64)
    server.put_node("node1")
    server.put_node("node2")
    clock.tick()
    with server:
        yield server


@pytest.fixture
def sleeps():
    return []


@pytest.fixture
def client(fake, sleeps):
    c = connect("rest", url=fake.url, token="tok", retries=2, backoff=0.01, sleep=sleeps.append,
                read_timeout=2.0)
    yield c
    c.close()


def request(name="j", **kw):
    return JobRequest(name=name, script="#!/bin/sh\nsleep 1\n", **kw)


# -- reading ---------------------------------------------------------------------------------------------


def test_ping(client):
    assert client.ping() is True


def test_release_is_slurmrestds_from_one_ping(client, fake):
    calls = fake.calls("GET", "ping/")
    assert client.release() == "24.11.5"
    assert fake.calls("GET", "ping/") == calls + 1


def test_list_nodes_then_nothing_changed_is_one_304(client, fake):
    first = client.list_nodes()
    assert [node.name for node in first.items] == ["node1", "node2"]
    assert first.last_update == fake.now()
    calls = fake.calls("GET", "nodes/")
    again = client.list_nodes(updated_since=first.last_update)
    assert again.items is None and again.last_update == first.last_update
    assert fake.calls("GET", "nodes/") == calls + 1


def test_changed_nodes_work_around_the_24_11_partition_bug(client, fake, clock):
    first = client.list_nodes()
    clock.tick()
    fake.put_node("node3")  # nodes changed, partitions did not: 24.11 answers 500
    before = fake.calls("GET", "nodes/")
    snap = client.list_nodes(updated_since=first.last_update)
    assert [node.name for node in snap.items] == ["node1", "node2", "node3"]
    assert fake.calls("GET", "nodes/") == before + 2  # the failed delta, then the full list
    assert client.rpc_stats()["REQUEST_NODE_INFO"].count == 3


def test_changed_nodes_need_one_call_without_the_bug(clock):
    with FakeSlurmrestd(token="tok", clock=clock, partition_bug=False) as fake:
        fake.put_node("node1")
        client = connect("rest", url=fake.url, token="tok")
        first = client.list_nodes()
        clock.tick()
        fake.put_node("node2")
        snap = client.list_nodes(updated_since=first.last_update)
        assert len(snap.items) == 2 and fake.calls("GET", "nodes/") == 2


def test_a_change_in_the_same_second_as_the_last_list_is_not_missed(client, fake):
    first = client.list_nodes()
    fake.put_node("node9")  # same second as first.last_update
    assert client.list_nodes(updated_since=first.last_update).items is not None


def test_list_jobs_unchanged_and_changed(client, fake, clock):
    fake.put_job(5, state=("RUNNING",), nodes="node1", allocation=[("node1", 2, 100)])
    clock.tick()
    first = client.list_jobs()
    assert [j.id for j in first.items] == [5] and first.items[0].allocations[0].cpus == 2
    clock.tick()
    assert client.list_jobs(updated_since=first.last_update).items is None
    fake.put_job(6)
    snap = client.list_jobs(updated_since=first.last_update)
    assert [j.id for j in snap.items] == [5, 6] and snap.last_update == fake.now()


def test_server_time_is_slurmctlds_clock_and_an_update_time_that_sees_later_changes(client, fake, clock):
    """``server_time`` is /diag's req_time (slurmctld's clock, not ours); "no change since it" holds until a
    job changes, in the same second included."""
    fake.put_job(5)
    clock.tick()
    stamp = client.server_time()
    assert stamp == fake.now() and fake.state.requests[-1][:2] == ("GET", "diag/")
    assert client.rpc_stats()["REQUEST_STATS_INFO"].count == 1
    clock.tick()
    assert client.list_jobs(updated_since=stamp).items is None
    fake.put_job(6)  # (not the same second as the stamp: the rule below is what makes that one safe too)
    assert [j.id for j in client.list_jobs(updated_since=stamp).items] == [5, 6]
    same_second = client.server_time()
    fake.put_job(7)  # in the second of the stamp
    assert [j.id for j in client.list_jobs(updated_since=same_second).items] == [5, 6, 7]


def test_server_time_without_req_time_is_an_error(client, fake):
    fake.add_fault(Fault("GET", r"diag/", status=200, body={"statistics": {"server_thread_count": 1}}))
    with pytest.raises(SlurmError, match="req_time"):
        client.server_time()


def test_job_list_without_allocations_asks_without_detail(fake):
    fake.put_job(5, state=("RUNNING",), nodes="node1", allocation=[("node1", 2, 100)])
    client = connect("rest", url=fake.url, token="tok", with_allocations=False)
    job = client.list_jobs().items[0]
    assert job.allocations == () and job.node_list == ("node1",)
    assert fake.state.requests[-1][2] == "flags=ALL"


def test_job_states_are_ids_and_states_only(client, fake):
    fake.put_job(5, state=("RUNNING",), nodes="node1", allocation=[("node1", 2, 100)], extra="e")
    fake.put_job(6, state=("COMPLETED", "COMPLETING"))
    fake.put_job(100, array_job_id=100, array_task_string="3-4")  # a pending array's remaining tasks
    fake.put_job(101, array_job_id=100, array_task_id=1, state=("RUNNING",))  # a task with a record of its own
    states = client.list_job_states()
    assert [(s.key, s.job_id, s.array_job_id, s.array_task_id, s.state, s.state_flags) for s in states] == [
        ("5", 5, None, None, "RUNNING", frozenset()),
        ("6", 6, None, None, "COMPLETED", frozenset({"COMPLETING"})),
        ("100_3", 100, 100, 3, "PENDING", frozenset()),
        ("100_4", 100, 100, 4, "PENDING", frozenset()),
        ("101_1", 101, 101, 1, "RUNNING", frozenset()),  # a task by its own id (its array is its record's to say)
    ]
    assert fake.state.requests[-1] == ("GET", "jobs/state/", "")
    assert client.rpc_stats()["REQUEST_JOB_STATE"].count == 1


def test_job_states_of_some_jobs_ask_slurm_to_filter(client, fake):
    fake.put_job(5)
    fake.put_job(6)
    assert [s.job_id for s in client.list_job_states([6, 6])] == [6]
    assert fake.state.requests[-1] == ("GET", "jobs/state/", "job_id=6")
    requests_before = len(fake.state.requests)
    assert client.list_job_states([]) == ()  # nothing asked: no call
    assert len(fake.state.requests) == requests_before


def test_the_job_state_answer_is_small(fake, client):
    for job_id in range(1, 1001):
        fake.put_job(job_id, state=("RUNNING",), nodes="node1", allocation=[("node1", 2, 100)])
    client.list_job_states()
    client.list_jobs()
    per_state = fake.bytes_sent("GET", "jobs/state/") / 1000
    per_record = fake.bytes_sent("GET", "jobs/") / 1000
    assert 60 < per_state < 120  # slurmrestd pretty-prints: measured 81 bytes a job on 25.11
    assert per_record > 50 * per_state


def test_read_jobs_reads_each_id_once_with_the_lists_flags(fake, client):
    fake.put_job(5, state=("RUNNING",), nodes="node1", allocation=[("node1", 2, 100)])
    fake.put_job(6, extra="x")
    before = fake.calls("GET", r"job/\d+")
    jobs = client.read_jobs([6, 5, 6, 999])  # 999: unknown (purged), so nothing
    assert [(j.id, j.extra) for j in jobs] == [(6, "x"), (5, "")] and jobs[1].allocations
    assert fake.calls("GET", r"job/\d+") - before == 3
    assert client.rpc_stats()["REQUEST_JOB_INFO_SINGLE"].count == 3
    lean = connect("rest", url=fake.url, token="tok", with_allocations=False)
    (job,) = lean.read_jobs([5])  # as lean.list_jobs() shows it, so the two compare equal
    assert job == lean.list_jobs().items[0] and job.allocations == ()
    assert fake.state.requests[-2] == ("GET", "job/5", "flags=ALL")


def test_get_job_reads_with_the_lists_flags_too(fake, client):
    """The scheduler's hook reads one job (get_job) as its cache reads them: without allocations, no DETAIL."""
    fake.put_job(5, state=("RUNNING",), nodes="node1", allocation=[("node1", 2, 100)])
    assert client.get_job(5).allocations and fake.state.requests[-1] == ("GET", "job/5", "")
    lean = connect("rest", url=fake.url, token="tok", with_allocations=False)
    job = lean.get_job(5)
    assert job.allocations == () and job.node_list == ("node1",) and job == lean.list_jobs().items[0]
    assert fake.state.requests[-2] == ("GET", "job/5", "flags=ALL")


def test_a_job_with_allocations_is_read_with_detail_even_by_a_lean_client(fake):
    """What a DRA claim is filled from: each node's GRES indices, read by the scheduler whose lists are lean."""
    fake.put_job(5, state=("RUNNING",), nodes="node1", allocation=[("node1", 2, 100)],
                 gres_detail=("gpu:h100:2(IDX:1,3)",))
    lean = connect("rest", url=fake.url, token="tok", with_allocations=False)
    (allocation,) = lean.get_job_allocations(5).allocations
    assert [(g.name, g.type, g.indices) for g in allocation.gres] == [("gpu", "h100", (1, 3))]
    assert fake.state.requests[-1] == ("GET", "job/5", "")
    with pytest.raises(NotFound):
        lean.get_job_allocations(6)


def test_settings_connect_with_or_without_allocations(fake):
    """What SlurmSettings.job_allocations asks slurmrestd for: the placement daemons' lean reads, the Syncer's full."""
    from sunk.slurm.settings import SlurmSettings

    fake.put_job(5, state=("RUNNING",), nodes="node1", allocation=[("node1", 2, 100)])
    assert SlurmSettings(url=fake.url, token="tok", job_allocations=False).connect().get_job(5).allocations == ()
    assert fake.state.requests[-1] == ("GET", "job/5", "flags=ALL")
    assert SlurmSettings(url=fake.url, token="tok").connect().get_job(5).allocations  # the Syncer's metrics read them
    assert fake.state.requests[-1] == ("GET", "job/5", "")


def test_read_jobs_of_an_array_gives_every_record_of_the_array(fake, client):
    fake.put_job(100, array_job_id=100, array_task_string="2-5")
    fake.put_job(101, array_job_id=100, array_task_id=1, state=("RUNNING",))
    fake.put_job(7)
    assert sorted((j.id, j.array_task_id) for j in client.read_jobs([100])) == [(100, None), (101, 1)]


def test_get_node_and_job(client, fake):
    fake.put_job(8, name="x", extra="e", comment="c")
    assert client.get_node("node2").name == "node2"
    assert fake.state.requests[-1][:2] == ("GET", "nodes/")  # 24.11's single-node answer is stale
    job = client.get_job(8)
    assert (job.id, job.name, job.extra, job.comment) == (8, "x", "e", "c")


def test_read_node_is_one_single_node_read(client, fake):
    fake.put_node("node2", state=("IDLE", "DRAIN"), reason="bad DIMM", extra='{"a": 1}')
    node = client.read_node("node2")
    assert (node.name, node.drained, node.reason, node.extra) == ("node2", True, "bad DIMM", '{"a": 1}')
    assert fake.state.requests[-1][:2] == ("GET", "node/node2")  # one node's bytes, not the list's
    stats = client.rpc_stats()
    assert stats["REQUEST_NODE_INFO_SINGLE"].count == 1 and "REQUEST_NODE_INFO" not in stats


def test_read_node_of_an_unknown_name_is_not_found_and_no_error(client, fake):
    with pytest.raises(NotFound, match="Failure to query node nosuch"):  # slurmrestd: HTTP 200, error number 0
        client.read_node("nosuch")
    stats = client.rpc_stats()["REQUEST_NODE_INFO_SINGLE"]
    assert (stats.count, stats.errors) == (1, 0)  # an answer, not a failure


def test_read_node_that_slurmctld_failed_to_answer_is_not_not_found(client, fake):
    """The same description with the failure's errno (slurmctld unreachable from slurmrestd) is an outage."""
    fake.add_fault(Fault("GET", r"node/node1", status=200, body={"errors": [
        {"description": "Failure to query node node1", "error_number": 1001,
         "error": "Unable to contact slurm controller (connect failure)", "source": "_dump_nodes"}]}))
    with pytest.raises(SlurmUnavailable) as err:
        client.read_node("node1")
    assert not isinstance(err.value, NotFound)


def test_a_failed_full_list_is_not_not_found(client, fake):
    fake.add_fault(Fault("GET", r"nodes/", status=200, body={"errors": [
        {"description": "Failure to query nodes", "error_number": 0, "error": "No error", "source": "_dump_nodes"}]}))
    with pytest.raises(SlurmError) as err:
        client.list_nodes()
    assert not isinstance(err.value, NotFound)


def test_read_node_quotes_the_name(client, fake):
    with pytest.raises(NotFound):
        client.read_node("a/b")
    assert fake.state.requests[-1][:2] == ("GET", "node/a%2Fb")


def test_unknown_node_and_job_are_not_found(client):
    with pytest.raises(NotFound):
        client.get_node("nosuch")
    with pytest.raises(NotFound) as job_err:
        client.get_job(999)
    assert job_err.value.code == 2017 and job_err.value.http_status == 404
    with pytest.raises(NotFound):
        client.update_job(999, comment="x")
    with pytest.raises(NotFound) as upd:
        client.update_node("nosuch", NodeUpdate(comment="x"))
    assert upd.value.code == 2018
    with pytest.raises(NotFound):
        client.delete_node("nosuch")


def test_partitions_and_diag(client):
    (batch,) = client.list_partitions()
    assert batch.name == "batch" and batch.nodes == ("node1", "node2") and batch.total_cpus == 64
    stats = client.diag()
    assert stats.server_thread_count == 1 and stats.schedule_cycle_last == pytest.approx(0.0015)


# -- writing ----------------------------------------------------------------------------------------------


def test_submit_sends_the_request_and_returns_the_id(client, fake):
    job_id = client.submit_job(request("train", extra="uid=1", comment="c", shared="none", time_limit=5,
                                       gpus_per_node=2))
    assert job_id == 1
    (desc,) = fake.state.submitted
    assert desc["name"] == "train" and desc["shared"] == ["none"] and desc["tres_per_node"] == "gres/gpu:2"
    assert desc["time_limit"] == n(5)
    assert client.get_job(job_id).extra == "uid=1"


def test_submit_sends_admin_comment_and_the_job_shows_it(client, fake):
    """The scheduler's identity of a placeholder travels in AdminComment and comes back there, not in Extra."""
    job_id = client.submit_job(request(admin_comment="sunk-pod=u ns=a name=b"))
    (desc,) = fake.state.submitted
    assert desc["admin_comment"] == "sunk-pod=u ns=a name=b" and "extra" not in desc
    job = client.get_job(job_id)
    assert (job.admin_comment, job.extra) == ("sunk-pod=u ns=a name=b", "")
    client.submit_job(request())
    assert "admin_comment" not in fake.state.submitted[-1]


def test_submit_refused_by_slurm(client):
    with pytest.raises(SlurmError) as err:
        client.submit_job(request(partition="nope"))
    assert err.value.code == 2000 and "Invalid partition name" in str(err.value)
    assert not isinstance(err.value, (NotFound, SlurmUnavailable))


def test_update_job(client, fake):
    fake.put_job(3)
    client.update_job(3, extra="e2", comment="c2")
    job = client.get_job(3)
    assert (job.extra, job.comment) == ("e2", "c2")


def test_drain_with_reason_then_resume(client):
    client.update_node("node1", NodeUpdate(state="DRAIN", reason="sunk: test", extra='{"k": 1}'))
    node = client.get_node("node1")
    assert node.drained and node.reason == "sunk: test" and node.extra == '{"k": 1}' and node.reason_time
    client.update_node("node1", NodeUpdate(state="RESUME"))
    assert not client.get_node("node1").drained


def test_drain_without_reason_is_refused_before_sending(client, fake):
    before = len(fake.state.requests)
    with pytest.raises(ValueError, match="needs a reason"):
        client.update_node("node1", NodeUpdate(state="DRAIN"))
    assert len(fake.state.requests) == before


def test_invalid_state_is_a_clear_error(client):
    with pytest.raises(SlurmError) as err:
        client.update_node("node1", NodeUpdate(state="BOGUS"))
    assert err.value.code == 2028
    assert 'Unknown flag "BOGUS"' in str(err.value) and "Invalid node state specified" in str(err.value)


def test_errors_in_an_http_200_answer_raise(client, fake):
    fake.add_fault(Fault("POST", r"node/node1", status=200, body={"errors": [
        {"description": "Failure to update node node1", "error_number": 2072, "error": "Invalid generic resource",
         "source": "_update_node"}]}))
    with pytest.raises(SlurmError) as err:
        client.update_node("node1", NodeUpdate(state="DRAIN", reason="r"))
    assert err.value.code == 2072 and err.value.http_status == 200


def test_cancel_is_idempotent_and_signals_reach_unknown_jobs_as_not_found(client, fake):
    fake.put_job(4, state=("RUNNING",))
    client.cancel_job(4)
    assert client.get_job(4).state == "CANCELLED"
    client.cancel_job(4)  # 2021 already done
    client.cancel_job(999)  # 2017 gone: a cancel of nothing is done
    fake.add_fault(Fault("DELETE", r"job/2000000000", status=404, body={"errors": [
        {"description": "Invalid JobID=2000000000 rejected", "error_number": 2017,
         "error": "Invalid job id specified", "source": "_op_handler_job"}]}))
    client.cancel_job(2000000000)  # rejected outright (beyond MaxJobId): nothing to cancel either
    with pytest.raises(NotFound):
        client.cancel_job(999, signal="TERM")


def test_signal_is_sent_by_name(client, fake):
    fake.put_job(4, state=("RUNNING",))
    client.cancel_job(4, signal=15)
    assert fake.state.requests[-1] == ("DELETE", "job/4", "signal=SIGTERM")
    with pytest.raises(ValueError):
        client.cancel_job(4, signal="NOPE")


def test_cancel_failure_in_status_raises(client, fake):
    fake.add_fault(Fault("DELETE", r"job/4", status=200, body={"status": [
        {"error": {"string": "Access/permission denied", "code": 2002, "message": "Access/permission denied"},
         "step_id": "4", "job_id": n(4)}]}))
    with pytest.raises(SlurmError) as err:
        client.cancel_job(4)
    assert err.value.code == 2002


def test_delete_node(client, fake):
    client.delete_node("node2")
    assert "node2" not in fake.state.nodes


def test_reconfigure_is_get_reconfigure_and_a_fenced_write(client, fake):
    from sunk.slurm.client import Reconfigurable

    assert isinstance(client, Reconfigurable)
    client.reconfigure()
    assert fake.state.reconfigures == 1
    with fence.fenced(LeaseFence(10.0)), pytest.raises(Fenced):  # never renewed: not held
        client.reconfigure()
    assert fake.state.reconfigures == 1


# -- transport --------------------------------------------------------------------------------------------


def test_connections_are_kept_alive(client, fake):
    for _ in range(5):
        client.list_nodes()
        client.ping()
    assert len(fake.state.peers) == 1


def test_stopped_slurmrestd_is_unavailable_after_retries_then_recovers(client, fake, sleeps):
    client.ping()
    fake.stop()
    with pytest.raises(SlurmUnavailable) as err:
        client.list_nodes()
    assert "cannot reach slurmrestd" in str(err.value)
    assert len(sleeps) == 2  # retries=2, with backoff
    assert client.ping() is False
    fake.start()  # same port
    assert [node.name for node in client.list_nodes().items] == ["node1", "node2"]


def test_refused_submit_is_retried_because_it_was_never_sent(client, fake, sleeps):
    fake.stop()
    with pytest.raises(SlurmUnavailable) as err:
        client.submit_job(request())
    assert len(sleeps) == 2 and "may or may not" not in str(err.value)


def test_submit_is_not_retried_once_sent(client, fake, sleeps):
    client.ping()
    fake.add_fault(Fault("POST", r"job/submit", drop=True))
    with pytest.raises(SlurmUnavailable, match="may or may not have taken effect"):
        client.submit_job(request())
    assert fake.calls("POST", "job/submit") == 1 and sleeps == []


def test_refused_submit_is_not_an_unknown_outcome(client, fake):
    fake.stop()
    with pytest.raises(SlurmUnavailable) as err:
        client.submit_job(request())
    assert not isinstance(err.value, OutcomeUnknown)


def test_a_submission_whose_answer_is_lost_made_its_job_and_says_the_outcome_is_unknown(client, fake, sleeps):
    """slurmctld made the job; the connection closed before the answer came back."""
    client.ping()
    fake.add_fault(Fault("POST", r"job/submit", lose_answer=True))
    with pytest.raises(OutcomeUnknown, match="may or may not have taken effect"):
        client.submit_job(request(extra="uid=1"))
    assert [j.extra for j in client.list_jobs().items] == ["uid=1"] and sleeps == []


def test_a_submission_that_times_out_is_an_unknown_outcome(fake, sleeps):
    client = connect("rest", url=fake.url, token="tok", read_timeout=0.2, sleep=sleeps.append)
    fake.add_fault(Fault("POST", r"job/submit", delay=0.6))
    with pytest.raises(OutcomeUnknown, match="did not answer"):
        client.submit_job(request())
    assert sleeps == []


@pytest.mark.parametrize(("status", "body"), [
    (500, {"errors": [{"description": "Batch job submission failed", "error_number": 5004,
                       "error": "Socket timed out on send/recv operation", "source": "slurm_submit_batch_job()"}]}),
    (504, None),
], ids=["slurmctld-timed-out-behind-slurmrestd", "proxy-gateway-timeout"])
def test_a_submission_answered_with_a_timeout_behind_slurmrestd_is_an_unknown_outcome(client, fake, status, body):
    fake.add_fault(Fault("POST", r"job/submit", status=status, body=body))
    with pytest.raises(OutcomeUnknown):
        client.submit_job(request())


def test_the_same_timeout_on_a_read_is_only_unavailable(client, fake):
    fake.add_fault(Fault("GET", r"jobs/", status=504))
    with pytest.raises(SlurmUnavailable) as err:
        client.list_jobs()
    assert not isinstance(err.value, OutcomeUnknown)


def test_reads_are_retried_when_the_answer_is_lost(client, fake, sleeps):
    fake.add_fault(Fault("GET", r"nodes/", drop=True))
    assert len(client.list_nodes().items) == 2
    assert fake.calls("GET", "nodes/") == 2 and len(sleeps) == 1


def test_resume_is_not_retried_but_drain_is(client, fake, sleeps):
    fake.add_fault(Fault("POST", r"node/node1", drop=True))
    with pytest.raises(SlurmUnavailable):
        client.update_node("node1", NodeUpdate(state="RESUME"))
    assert fake.calls("POST", "node/node1") == 1
    fake.add_fault(Fault("POST", r"node/node1", drop=True))
    client.update_node("node1", NodeUpdate(state="DRAIN", reason="r"))
    assert fake.calls("POST", "node/node1") == 3 and client.get_node("node1").drained


def test_read_timeout_is_unavailable_and_not_retried(fake, sleeps):
    client = connect("rest", url=fake.url, token="tok", read_timeout=0.2, sleep=sleeps.append)
    fake.add_fault(Fault("GET", r"jobs/", delay=0.6))
    with pytest.raises(SlurmUnavailable, match="did not answer"):
        client.list_jobs()
    assert sleeps == []


def test_proxy_errors_without_json_are_unavailable(client, fake):
    fake.add_fault(Fault("GET", r"jobs/", status=503))
    with pytest.raises(SlurmUnavailable) as err:
        client.list_jobs()
    assert err.value.http_status == 503


def test_slurmctld_unreachable_behind_slurmrestd_is_unavailable(client, fake):
    fake.add_fault(Fault("GET", r"jobs/", status=500, body={"errors": [
        {"description": "Unable to query jobs", "error_number": 1001,
         "error": "Unable to contact slurm controller (connect failure)", "source": "slurm_load_jobs()"}]}))
    with pytest.raises(SlurmUnavailable) as err:
        client.list_jobs()
    assert err.value.code == 1001


def test_a_refused_token_is_an_outage_that_names_its_source(fake):
    client = connect("rest", url=fake.url, token="wrong")
    with pytest.raises(SlurmUnavailable) as err:
        client.list_nodes()
    assert isinstance(err.value, AuthenticationFailed) and err.value.http_status == 401
    assert err.value.token_source == "the fixed token given at start" and "token from" in str(err.value)
    assert client.auth_status().failures == 1 and client.auth_status().failing


@pytest.mark.parametrize("code", [1007, 6001], ids=["protocol-authentication-error", "auth-expired"])
def test_slurmctld_refusing_the_token_is_an_outage_even_for_a_submission(client, fake, code):
    """slurmrestd passes the JWT on; slurmctld refuses an expired or wrongly signed one."""
    refusal = {"errors": [{"description": "Batch job submission failed", "error_number": code,
                           "error": "Protocol authentication error", "source": "slurm_submit_batch_job()"}]}
    fake.add_fault(Fault("POST", r"job/submit", status=500, body=refusal))
    with pytest.raises(AuthenticationFailed) as err:
        client.submit_job(request())
    assert err.value.code == code and not isinstance(err.value, OutcomeUnknown)  # refused: no job was made


def test_a_rotated_token_file_is_read_again_after_a_refusal(fake, tmp_path, caplog):
    """Rotation that the file's stat does not show (same inode, size and mtime) is still picked up."""
    path = tmp_path / "jwt"
    path.write_text("old")
    client = connect("rest", url=fake.url, token_file=path)
    fake.token = "old"
    assert client.ping()
    stat = path.stat()
    fake.token = "new"  # rotated in Slurm; the file follows
    with pytest.raises(AuthenticationFailed, match=f"token file {path}"):
        client.list_jobs()
    path.write_text("new")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with caplog.at_level("INFO", logger="sunk.slurm.rest"):
        assert client.list_jobs().items == ()
    assert not client.auth_status().failing and client.auth_status().failures == 1
    assert any("accepts the token" in r.getMessage() for r in caplog.records)


def test_the_token_expiry_is_known_to_the_client(fake):
    token = jwt.encode({"iat": 1000, "exp": 2_000_000_000, "sun": "root"}, b"k" * 32, algorithm="HS256")
    fake.token = token
    client = connect("rest", url=fake.url, token=token)
    assert client.ping()
    assert client.auth_status().expires_at == 2_000_000_000


def test_token_file_is_reread_when_it_changes(fake, tmp_path):
    path = tmp_path / "jwt"
    path.write_text("tok\n")
    client = connect("rest", url=fake.url, token_file=path)
    client.ping()
    fake.token = "rotated"
    path.write_text("rotated\n")
    os.utime(path, (time.time() + 5, time.time() + 5))  # a new mtime even on coarse clocks
    assert len(client.list_nodes().items) == 2


def test_signed_tokens_carry_the_user(fake):
    key = b"k" * 32
    client = connect("rest", url=fake.url, jwt_key=key, user="slurm")
    token = client.tokens.token()
    fake.token = token
    assert client.ping()
    claims = jwt.decode(token, key, algorithms=["HS256"])
    assert claims["sun"] == "slurm" and claims["exp"] > claims["iat"]
    assert fake.state.requests[-1][0] == "GET"


def test_rpc_accounting_per_message_type(client, fake):
    client.list_nodes()
    client.list_jobs()
    client.list_jobs()
    with pytest.raises(NotFound):
        client.get_job(12345)
    fake.stop()
    with pytest.raises(SlurmUnavailable):
        client.list_jobs()
    stats = client.rpc_stats()
    assert stats["REQUEST_NODE_INFO"].count == 1
    assert (stats["REQUEST_JOB_INFO"].count, stats["REQUEST_JOB_INFO"].errors) == (3, 1)
    assert (stats["REQUEST_JOB_INFO_SINGLE"].count, stats["REQUEST_JOB_INFO_SINGLE"].errors) == (1, 0)
    assert all(s.mean_seconds > 0 for s in stats.values())


def test_connect_validates_its_arguments():
    with pytest.raises(ValueError, match="url"):
        connect("rest", token="t")
    with pytest.raises(ValueError, match="exactly one"):
        connect("rest", url="http://x", token="t", token_file="/f")
    with pytest.raises(ValueError, match="unknown Slurm backend"):
        connect("slurmdb")


def test_recorded_answer_shapes_parse_through_the_client(fake):
    """The stand-in's items have the same keys as slurmrestd 24.11.5's recorded ones."""
    from pathlib import Path

    recorded = json.loads((Path(__file__).parent / "slurm_v0042" / "job_running_gpu.json").read_text())["jobs"][0]
    fake.put_job(16, state=("RUNNING",), nodes="node1", allocation=[("node1", 1, 1000)])
    assert set(fake.state.jobs[16]) == set(recorded)
    recorded_node = json.loads((Path(__file__).parent / "slurm_v0042" / "nodes.json").read_text())["nodes"][0]
    assert set(fake.state.nodes["node1"]) == set(recorded_node)


def test_proxy_settings_are_read_once_at_construction(monkeypatch):
    """Per-call environment scans cost CPU; the proxy and its exemptions still apply."""
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "")
    proxied = connect("rest", url="http://slurmrestd.example:6820", token="tok")
    monkeypatch.setenv("NO_PROXY", "slurmrestd.example")
    exempt = connect("rest", url="http://slurmrestd.example:6820", token="tok")
    try:
        assert proxied.session.trust_env is False
        assert proxied.session.proxies.get("http") == "http://proxy.example:3128"
        assert "http" not in exempt.session.proxies
    finally:
        proxied.close()
        exempt.close()


def test_a_ca_bundle_from_the_environment_still_applies(monkeypatch, tmp_path):
    bundle = tmp_path / "ca.pem"
    bundle.write_text("")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(bundle))
    c = connect("rest", url="https://slurmrestd.example:6820", token="tok")
    try:
        assert c.session.verify == str(bundle)
    finally:
        c.close()
    monkeypatch.delenv("REQUESTS_CA_BUNDLE")
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    c = connect("rest", url="https://slurmrestd.example:6820", token="tok")
    try:
        assert c.session.verify is True
    finally:
        c.close()


def test_calls_go_through_without_rereading_the_environment(client, fake, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # set after construction: not used
    assert client.ping()


def test_a_job_field_that_is_not_utf8_does_not_fail_the_list():
    """slurmrestd passes a job's Extra through as its user wrote it; one such job made every job
    list fail, and the Syncer and scheduler never became ready (found on the real 24.11)."""
    from sunk.slurm.rest import RestClient

    resp = requests.Response()
    resp.status_code = 200
    resp._content = b'{"jobs": [{"job_id": 7, "extra": "\xff\xfe\xc3 user bytes"}], "errors": []}'
    body = RestClient._check(resp, "list jobs")
    assert body["jobs"][0]["job_id"] == 7 and body["jobs"][0]["extra"].endswith(" user bytes")


# -- the Lease fence (issue 32 item 6) ----------------------------------------------------------------


def test_a_fenced_thread_whose_lease_is_gone_sends_no_slurm_write_but_still_reads(client, fake):
    writes = [
        lambda: client.submit_job(request()),
        lambda: client.update_job(4, comment="c"),
        lambda: client.cancel_job(4),
        lambda: client.update_node("node1", NodeUpdate(comment="x")),
        lambda: client.delete_node("node1"),
    ]
    with fence.fenced(LeaseFence(10.0)):  # never renewed: not held
        for write in writes:
            with pytest.raises(Fenced):
                write()
        assert {n.name for n in client.list_nodes().items} == {"node1", "node2"}
    assert set(client.accounting.snapshot()) == {"REQUEST_NODE_INFO"}  # not one write went out
    assert client.list_jobs().items == ()
