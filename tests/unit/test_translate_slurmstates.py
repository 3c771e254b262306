"""Node and job states named as sinfo and squeue name them; every node counted once."""

from __future__ import annotations

import itertools

import pytest

from sunk.model.slurm import Job
from sunk.translate.slurmstates import (
    NODE_COUNT_BUCKET,
    NODE_COUNT_BUCKETS,
    NODE_STATE_NAMES,
    job_state_name,
    node_count_bucket,
    node_state_name,
)

BASES = ("IDLE", "ALLOCATED", "MIXED", "DOWN", "ERROR", "FUTURE", "UNKNOWN")
FLAGS = ("DRAIN", "COMPLETING", "NOT_RESPONDING", "MAINTENANCE", "RESERVED", "FAIL", "REBOOT_REQUESTED",
         "PLANNED", "POWERED_DOWN", "INVALID_REG", "CLOUD", "DYNAMIC_NORM")


@pytest.mark.parametrize(("state", "name"), [
    ({"IDLE"}, "idle"), ({"ALLOCATED"}, "allocated"), ({"MIXED"}, "mixed"), ({"DOWN"}, "down"),
    ({"IDLE", "DRAIN"}, "drained"), ({"MIXED", "DRAIN"}, "draining"), ({"ALLOCATED", "DRAIN"}, "draining"),
    ({"IDLE", "DRAIN", "COMPLETING"}, "draining"), ({"DOWN", "DRAIN"}, "drained"),
    ({"IDLE", "COMPLETING"}, "completing"), ({"ALLOCATED", "COMPLETING"}, "allocated"),
    ({"IDLE", "NOT_RESPONDING"}, "idle"), ({"DOWN", "NOT_RESPONDING"}, "down"),
    ({"IDLE", "MAINTENANCE", "RESERVED"}, "maint"), ({"MIXED", "MAINTENANCE"}, "mixed"),
    ({"IDLE", "RESERVED"}, "reserved"), ({"IDLE", "PLANNED"}, "planned"),
    ({"IDLE", "FAIL"}, "fail"), ({"ALLOCATED", "FAIL"}, "failing"), ({"IDLE", "DRAIN", "FAIL"}, "drained"),
    ({"IDLE", "REBOOT_REQUESTED"}, "reboot"), ({"MIXED", "REBOOT_REQUESTED"}, "mixed"),
    ({"IDLE", "DRAIN", "REBOOT_REQUESTED"}, "drained"), ({"IDLE", "INVALID_REG", "DRAIN"}, "inval"),
    ({"IDLE", "POWERED_DOWN"}, "idle"), ({"FUTURE"}, "future"), ({"ERROR"}, "error"), (set(), "unknown"),
    ({"UNKNOWN"}, "unknown"), ({"IDLE", "CLOUD", "DYNAMIC_NORM"}, "idle"),
])
def test_node_names_follow_sinfo(state, name):
    assert node_state_name(frozenset(state)) == name


def every_state():
    for base in BASES:
        for n in range(3):
            for flags in itertools.combinations(FLAGS, n):
                yield frozenset({base, *flags})


def test_every_combination_has_one_known_name_and_at_most_one_bucket():
    for state in every_state():
        name = node_state_name(state)
        assert name in NODE_STATE_NAMES, state
        bucket = node_count_bucket(state)
        assert bucket is None or bucket in NODE_COUNT_BUCKETS


def test_a_drain_flag_always_counts_as_drain_unless_registration_is_invalid():
    for state in every_state():
        if "DRAIN" in state and "INVALID_REG" not in state:
            assert node_count_bucket(state) == "drain", state


def test_every_bucket_is_reachable():
    assert set(NODE_COUNT_BUCKETS) <= {node_count_bucket(s) for s in every_state()}
    assert set(NODE_COUNT_BUCKET) == set(NODE_STATE_NAMES)


@pytest.mark.parametrize(("state", "flags", "name"), [
    ("RUNNING", (), "RUNNING"), ("PENDING", (), "PENDING"), ("COMPLETED", ("COMPLETING",), "COMPLETING"),
    ("CANCELLED", ("COMPLETING",), "COMPLETING"), ("RUNNING", ("CONFIGURING",), "CONFIGURING"),
    ("PENDING", ("REQUEUED",), "REQUEUED"), ("RUNNING", ("COMPLETING", "SIGNALING"), "COMPLETING"),
    ("PREEMPTED", (), "PREEMPTED"), ("RUNNING", ("STAGE_OUT", "CONFIGURING"), "STAGE_OUT"),
])
def test_job_names_follow_squeue(state, flags, name):
    assert job_state_name(Job(1, state=state, state_flags=flags)) == name
