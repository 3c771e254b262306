"""Where Slurm 24.11 and 26.05 answer OpenAPI v0.0.42 differently, and what the v0.0.42 layer does about it.

One test per difference; docs/compatibility.md lists them and how each was found (the two releases'
OpenAPI documents, slurm_errno.h, the openapi_slurmctld plugins). The same shapes otherwise: the
REST tests of test_slurm_rest.py run against the 24.11 stand-in, these against both.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_slurm_rest import Clock

from sunk.slurm import JobRequest, NodeUpdate, NotFound, SlurmError, SlurmUnavailable, connect, v0042
from sunk.slurm.errors import UNCERTAIN_CODES, AuthenticationFailed
from sunk.slurm.rest import _error_from
from sunk_dev.fakeslurm import FakeSlurmrestd

RECORDED = Path(__file__).parent / "slurm_v0042"
RELEASES = ["24.11.5", "26.05.5"]


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture(params=RELEASES)
def fake(request, clock):
    server = FakeSlurmrestd(token="tok", clock=clock, release=request.param)
    server.put_partition("batch", "node[1-2]", 2, 64)
    server.put_node("node1")
    server.put_node("node2")
    clock.tick()
    with server:
        yield server


@pytest.fixture
def client(fake):
    c = connect("rest", url=fake.url, token="tok", retries=0)
    yield c
    c.close()


def test_the_release_comes_from_the_answers_meta(client, fake):
    assert client.release() == fake.release


def test_a_node_change_through_update_time_costs_two_calls_on_24_11_and_one_on_26_05(client, fake, clock):
    """24.11's /nodes loads partitions with the request's update_time and fails ("Unable to query
    partitions") when nodes changed and partitions did not: the client lists again in full. 26.05
    loads partitions in full: one call."""
    first = client.list_nodes()
    clock.tick()
    fake.put_node("node3")
    before = fake.calls("GET", "nodes/")
    snap = client.list_nodes(updated_since=first.last_update)
    assert [node.name for node in snap.items] == ["node1", "node2", "node3"]
    assert fake.calls("GET", "nodes/") - before == {"24.11.5": 2, "26.05.5": 1}[fake.release]


def test_unchanged_nodes_are_one_call_on_both(client, fake):
    first = client.list_nodes()
    before = fake.calls("GET", "nodes/")
    assert client.list_nodes(updated_since=first.last_update).items is None
    assert fake.calls("GET", "nodes/") - before == 1


def test_the_fields_26_05_deprecates_are_never_read():
    """26.05 marks ``nodes[].tres_weighted`` ("Ignored") and ``statistics.parts_packed`` deprecated and
    widens ``schedule_cycle_sum`` to int64: a record without the first two parses the same."""
    nodes = json.loads((RECORDED / "nodes.json").read_text())["nodes"]
    assert all("tres_weighted" in n for n in nodes)
    assert [v0042.parse_node(n) for n in nodes] == [
        v0042.parse_node({k: v for k, v in n.items() if k != "tres_weighted"}) for n in nodes]
    stats = {"server_thread_count": 3, "parts_packed": 1, "schedule_cycle_sum": 2**40, "jobs_submitted": 7}
    assert v0042.parse_stats(stats) == v0042.parse_stats({k: v for k, v in stats.items() if k != "parts_packed"})


def test_the_request_fields_26_05_deprecates_are_never_sent():
    """``reason_uid`` of a node update (deprecated in 26.05) is never sent; the script goes in ``job``,
    not the request's top-level ``script`` (deprecated in 24.11, not in 26.05: either way, unused)."""
    body = v0042.node_update_body(NodeUpdate(state="DRAIN", reason="k8s: cordoned", extra="{}"))
    assert set(body) == {"state", "reason", "extra"}
    assert v0042.job_desc(JobRequest(name="j", script="#!/bin/sh\n"))["script"] == "#!/bin/sh\n"


def test_a_submission_puts_the_script_in_job(client, fake):
    client.submit_job(JobRequest(name="j", script="#!/bin/sh\ntrue\n"))
    (submitted,) = fake.state.submitted
    assert submitted.get("script") == "#!/bin/sh\ntrue\n"  # (the fake records the body's "job")


@pytest.mark.parametrize("code, kind", [
    (2017, NotFound), (2018, NotFound),  # ESLURM_INVALID_JOB_ID, ESLURM_INVALID_NODE_NAME
    (2027, SlurmUnavailable),  # ESLURM_IN_STANDBY_MODE (2027 in both releases' slurm_errno.h)
    (2131, SlurmUnavailable),  # ESLURM_IN_STANDBY_USE_BACKUP: a standby slurmctld says to try another
    (2130, SlurmError), (2132, SlurmError),  # ESLURM_PARTITION_ASSOC, ESLURM_BAD_THREAD_PER_CORE
    (2026, SlurmError),  # ESLURM_INVALID_JOB_CREDENTIAL: a refusal, not an outage (was read as standby)
    (2028, SlurmError),  # ESLURM_INVALID_NODE_STATE
    *((c, SlurmUnavailable) for c in (1001, 1002, 1003, 1004, 1800, 1805, 5004)),
    # 26.05 (and 25.11) only: SLURM_COMMUNICATIONS_REJECTED ... _READ_TIMEOUT; 24.11 never sends them
    *((c, SlurmUnavailable) for c in range(1019, 1024)),
    (1007, AuthenticationFailed), (6000, AuthenticationFailed),
    # 26.05 only: ESLURM_AUTH_NOBODY, ESLURM_AUTH_SOCKET_INVALID_PEER, ESLURM_REST_AUTH_FAIL
    (6010, AuthenticationFailed), (6011, AuthenticationFailed), (9008, AuthenticationFailed),
])
def test_every_error_number_sunk_maps_means_the_same_in_both_releases(code, kind):
    error = _error_from("x", [{"error_number": code, "description": "d", "error": "e"}], 200)
    assert type(error) is kind
    assert error.code == code


def test_the_uncertain_codes_are_the_communication_timeouts():
    """Of the outages, those after which a submission may have reached slurmctld (26.05's names)."""
    assert {1022, 1023} <= UNCERTAIN_CODES  # SLURM_COMMUNICATIONS_WRITE_TIMEOUT, _READ_TIMEOUT
    assert not {1019, 1021, 2027, 2131} & UNCERTAIN_CODES  # refused, never connected, standby: nothing was done
