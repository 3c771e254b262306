"""Slurm node clean-up (sunk.translate.nodecleanup): which nodes are deleted, and which never are."""

from __future__ import annotations

import itertools
import json

import pytest

from sunk.model.slurm import Job, Node
from sunk.translate.nodecleanup import DELETE, NODESET, NONE, WAIT, decide, extra_mark, marked_nodeset

MARKED = json.dumps({"namespace": "slurm", "pod": "g-3-17", NODESET: "gpu", "deleted": True})
STATES = ["IDLE", "IDLE+DRAIN", "DOWN", "DOWN+DRAIN", "ALLOCATED", "MIXED+DRAIN", "IDLE+COMPLETING"]
BUSY = {"ALLOCATED", "MIXED+DRAIN", "IDLE+COMPLETING"}
JOBS = {"none": (), "stale": None, "names it": (Job(5, state="COMPLETED", nodes="g-3-[16-17]"),),
        "elsewhere": (Job(6, state="RUNNING", nodes="g-3-18"),)}


@pytest.mark.parametrize(("state", "listed", "pod_exists", "jobs"),
                         list(itertools.product(STATES, [False, True], [False, True], JOBS)))
def test_a_marked_node(state, listed, pod_exists, jobs):
    action = decide(Node("g-3-17", state=state, extra=MARKED), listed=listed, pod_exists=pod_exists,
                    jobs=JOBS[jobs])
    if listed or pod_exists:
        assert action.action == NONE
    elif state in BUSY or jobs in ("stale", "names it"):
        assert action.action == WAIT
    else:
        assert action.action == DELETE


@pytest.mark.parametrize("extra", ["", "garbage", "[]", '{"namespace":"slurm","pod":"node1"}', '{"nodeset":""}',
                                   '{"nodeset":7}', '{"nodeset":null}'])
@pytest.mark.parametrize("state", STATES)
def test_a_node_never_marked_is_never_deleted(extra, state):
    """The dev cluster's node1..node4 (slurm.conf, in no NodeSlice) and every node a NodeSlice never listed."""
    assert decide(Node("node1", state=state, extra=extra), listed=False, pod_exists=False, jobs=()).action == NONE


def test_the_mark_is_written_only_from_a_listing_entry():
    assert extra_mark("gpu") == {NODESET: "gpu"}
    assert extra_mark(None) == {} and extra_mark("") == {}
    assert marked_nodeset(MARKED) == "gpu" and marked_nodeset("") is None


@pytest.mark.parametrize("deleted", [None, False, "true", 1])
def test_a_marked_node_whose_pods_deletion_is_not_recorded_waits(deleted):
    """The caches may be behind a node re-listed with a new Pod a moment ago; Extra is read fresh."""
    facts = {"namespace": "slurm", "pod": "g-3-17", NODESET: "gpu"}
    if deleted is not None:
        facts["deleted"] = deleted
    action = decide(Node("g-3-17", state="IDLE", extra=json.dumps(facts)), listed=False, pod_exists=False, jobs=())
    assert action.action == WAIT
