"""Lock requests on the slurmd Pod (encoding, tolerant parsing, expiry), the jobs-by-node index, the waiter, flags."""

from __future__ import annotations

import argparse
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sunk.locking.config import add_flags, config_from
from sunk.locking.jobs import JobsByNode, NodeJob
from sunk.locking.requests import REQUEST_PREFIX, LockRequest, expired, parse_requests, request_key
from sunk.locking.waiter import ObjectWaiter
from sunk.model.slurm import Job, Node
from sunk.translate.identity import is_placeholder


@given(st.integers(min_value=1, max_value=2**32), st.booleans(), st.floats(min_value=0, max_value=4e9))
def test_request_round_trips(job_id, strict, at):
    req = LockRequest(job_id, strict, round(at, 3))
    parsed = parse_requests({req.key: req.value(), "other/annotation": "x"})
    assert parsed.valid == (req,)
    assert parsed.malformed == ()


def test_malformed_requests_are_reported_for_removal_not_trusted():
    annotations = {
        request_key(1): '{"strict": true, "at": 5}',
        f"{REQUEST_PREFIX}abc": '{"strict": true, "at": 5}',
        request_key(2): "not json",
        request_key(3): '{"strict": "yes", "at": 5}',
        request_key(4): '{"strict": false}',
        request_key(5): "[1]",
        request_key(6): '{"strict": false, "at": true}',
    }
    parsed = parse_requests(annotations)
    assert parsed.valid == (LockRequest(1, True, 5.0),)
    assert set(parsed.malformed) == set(annotations) - {request_key(1)}
    assert parse_requests(None).valid == ()


def test_expiry_needs_both_an_inactive_job_and_the_grace_period():
    reqs = [LockRequest(1, False, 100.0), LockRequest(2, True, 100.0), LockRequest(3, False, 195.0)]
    # job 1 is active: kept however old; job 2 is old and inactive: gone; job 3 is young: kept
    assert expired(reqs, active_jobs={1}, now=200.0, grace=60.0) == [request_key(2)]
    assert expired(reqs, active_jobs=set(), now=150.0, grace=60.0) == []


IDENTITY = "sunk-pod=u ns=a name=b"  # a placeholder's, as the scheduler submits it (AdminComment)


def _job(job_id, state="RUNNING", nodes="node1", admin_comment="", flags=(), extra=""):
    return Job(id=job_id, state=state, nodes=nodes, admin_comment=admin_comment, extra=extra,
               state_flags=frozenset(flags))


def test_jobs_by_node_follows_job_events_and_wakes_every_affected_node():
    woken: list[str] = []
    index = JobsByNode(is_placeholder, woken.append)
    index.on_add(_job(7, nodes="node[1-2]", admin_comment=IDENTITY))
    assert index.jobs_on("node1") == {7: NodeJob(7, True)} == index.jobs_on("node2")
    assert woken == ["node1", "node2"]
    woken.clear()
    # it shrinks to node2, then completes (COMPLETING still holds the node), then is gone
    index.on_update(_job(7), _job(7, nodes="node2", admin_comment=IDENTITY))
    assert index.jobs_on("node1") == {} and 7 in index.jobs_on("node2")
    assert woken == ["node1", "node2"]
    index.on_update(_job(7), _job(7, state="COMPLETED", nodes="node2", flags={"COMPLETING"}))
    assert index.jobs_on("node2") == {7: NodeJob(7, False)}
    index.on_update(_job(7), _job(7, state="COMPLETED", nodes="node2"))
    assert index.jobs_on("node2") == {}
    index.on_add(_job(8, state="PENDING", nodes=""))
    index.on_delete(_job(8))
    assert index.jobs_on("node1") == {} and index.jobs_on("node2") == {}
    woken.clear()
    index.node_changed(Node("node4"))
    assert woken == ["node4"]


def test_jobs_by_node_reads_a_placeholder_from_its_admin_comment_never_its_extra():
    """The job's user writes its Extra: an identity copied there must not make the node's lock strict."""
    index = JobsByNode(is_placeholder, lambda _node: None)
    index.on_add(_job(7, extra=IDENTITY))
    index.on_add(_job(8, admin_comment=IDENTITY))
    assert index.jobs_on("node1") == {7: NodeJob(7, False), 8: NodeJob(8, True)}


def test_waiter_wakes_on_notify_and_times_out():
    store: dict[str, dict] = {"ns/p": {"metadata": {"namespace": "ns", "name": "p", "annotations": {}}}}
    waiter = ObjectWaiter(store.get)

    def locked(obj):
        return bool(obj) and obj["metadata"]["annotations"].get("k") == "locked"

    assert waiter.wait("ns/p", locked, 0.05) == (False, store["ns/p"])
    result: list = []
    t = threading.Thread(target=lambda: result.append(waiter.wait("ns/p", locked, 10)))
    t.start()
    new = {"metadata": {"namespace": "ns", "name": "p", "annotations": {"k": "locked"}}}
    store["ns/p"] = new
    waiter.on_update({}, new)
    t.join(5)
    assert result == [(True, new)]


@pytest.mark.parametrize("flag", ["--lock-default-timeout=-1s", "--lock-max-timeout=0", "--lock-eviction-retry=soon",
                                  "--lock-request-grace=0s", "--lock-workers=0",
                                  "--lock-taint-effect=PreferNoSchedule"])
def test_bad_flags_are_argparse_errors(flag):
    parser = argparse.ArgumentParser()
    add_flags(parser)
    with pytest.raises(SystemExit):
        parser.parse_args([flag])


def test_flags_defaults_follow_the_spec_names():
    parser = argparse.ArgumentParser()
    add_flags(parser)
    config = config_from(parser.parse_args(["--lock-default-timeout=1m30s"]))
    assert (config.reboot_condition, config.reboot_reason) == ("PhaseState", "production-powerreset")
    assert config.taint_effect == "NoSchedule"
    assert config.default_timeout == 90.0 and config.clamp_timeout(None) == 90.0
    assert config.clamp_timeout(10_000) == config.max_timeout == 600.0
