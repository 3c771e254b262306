"""Per-job read requests (``sunk/slurm/readrequests.py``): what waits, and the table's bounds."""

from __future__ import annotations

import pytest

from sunk.model.slurm import Job, JobState
from sunk.slurm.readrequests import ReadRequest, ReadRequests

NEW = None
PENDING, RUNNING = Job(id=5), Job(id=5, state="RUNNING")


@pytest.mark.parametrize("held, listed, waits", [
    (NEW, "PENDING", True),  # a new job on its way to its start
    (NEW, "RUNNING", True),
    (NEW, "COMPLETED", False),
    (PENDING, "RUNNING", True),  # its start
    (RUNNING, "RUNNING", True),  # its prolog's end (a read at every refresh)
    (PENDING, "PENDING", False),  # a flag, or its reason: no started call comes while it is pending
    (RUNNING, "PENDING", False),  # requeued
    (RUNNING, "COMPLETED", False),  # an end
    (PENDING, "CANCELLED", False),
    (Job(id=5, state="COMPLETED"), "RUNNING", False),  # from an end state: nothing it waits for
])
def test_a_read_waits_only_for_a_start(held, listed, waits):
    request = ReadRequest(wait_up_to=3.0)
    assert request.patience(held, JobState("5", listed, job_id=5)) == (3.0 if waits else 0.0)
    assert ReadRequest(every=1.0).patience(held, JobState("5", listed, job_id=5)) == 0.0  # none asked for


def test_a_periodic_read_is_due_every_so_many_seconds():
    assert ReadRequest(every=10.0).due(now=20.0, last_read=10.0)
    assert not ReadRequest(every=10.0).due(now=19.0, last_read=10.0)
    assert ReadRequest(every=0.0).due(now=10.0, last_read=10.0)  # at every refresh
    assert not ReadRequest(wait_up_to=3.0).due(now=1e9, last_read=0.0)  # only when its state changes


def test_an_empty_request_cancels_and_a_new_one_replaces():
    table = ReadRequests()
    table.request(5, ReadRequest(every=1.0), at=0.0)
    table.request(5, ReadRequest(wait_up_to=2.0), at=1.0)
    assert table.get(5) == ReadRequest(wait_up_to=2.0)
    table.request(5, ReadRequest(), at=2.0)
    assert table.get(5) is None and len(table) == 0
    table.request(6, ReadRequest(every=1.0), at=3.0)
    table.request(6, None, at=4.0)
    assert table.get(6) is None


def test_past_its_limit_the_oldest_request_goes():
    table = ReadRequests(limit=2)
    table.request(1, ReadRequest(every=1.0), at=0.0)
    table.request(2, ReadRequest(every=1.0), at=1.0)
    table.request(1, ReadRequest(every=2.0), at=2.0)  # renewed: now the newest
    table.request(3, ReadRequest(every=1.0), at=3.0)
    assert dict(table.snapshot()) == {1: ReadRequest(every=2.0), 3: ReadRequest(every=1.0)}
    with pytest.raises(ValueError):
        ReadRequests(limit=0)


def test_jobs_gone_and_jobs_a_full_list_does_not_show_drop_out():
    table = ReadRequests()
    for job_id, at in ((1, 0.0), (2, 0.0), (3, 0.0), (4, 10.0)):
        table.request(job_id, ReadRequest(every=1.0), at=at)
    table.forget([1])
    table.keep_only(listed={2}, requested_at=5.0)  # 3: asked for before the list, not in it; 4: after it
    assert set(table.snapshot()) == {2, 4}
