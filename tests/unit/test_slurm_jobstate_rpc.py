"""The decoding of Slurm's job-state RPC, as slurmrestd's /jobs/state prints the same records (data_parser
v0.0.42's JOB_STATE flags and JOB_STATE_RESP_JOB_JOB_ID); the RPC itself runs in the contract test on 25.11."""

from __future__ import annotations

import pytest

from sunk.model.slurm import Job, JobState
from sunk.slurm import v0042
from sunk.slurm.jobstate_rpc import BASE_STATES, INFINITE, NO_VAL, STATE_FLAGS, job_state
from sunk.slurm.pyslurm_backend import refines


@pytest.mark.parametrize(("number", "name"), list(enumerate(BASE_STATES)))
def test_every_base_state_by_slurmrestds_name(number, name):
    state = job_state(7, 0, NO_VAL, 0, number)
    assert (state.key, state.state, state.state_flags, state.job_id) == ("7", name, frozenset(), 7)


@pytest.mark.parametrize(("bit", "flag"), sorted(STATE_FLAGS.items()))
def test_every_flag_beside_its_base_state(bit, flag):
    state = job_state(7, 0, NO_VAL, 0, 4 | (1 << bit))  # CANCELLED with the flag
    assert state.state == "CANCELLED" and state.state_flags == {flag}


def test_a_cancelled_job_in_its_epilog_is_cancelled_and_completing_as_rest_says():
    via_c = job_state(7, 0, NO_VAL, 0, 4 | (1 << 15))
    via_rest = v0042.parse_job_state({"job_id": "7", "state": ["CANCELLED", "COMPLETING"]})
    assert via_c == via_rest


def test_several_flags_and_bits_slurmrestd_does_not_name_are_kept_or_ignored_as_it_does():
    state = job_state(7, 0, NO_VAL, 0, 1 | (1 << 14) | (1 << 22) | (1 << 9) | (1 << 24))
    assert state.state == "RUNNING" and state.state_flags == {"CONFIGURING", "SIGNALING"}


def test_an_unknown_base_state_reads_as_pending():
    assert job_state(7, 0, NO_VAL, 0, 200).state == "PENDING"


@pytest.mark.parametrize(("fields", "key"), [
    ((7, 0, NO_VAL, 0), "7"),
    ((124, 0, NO_VAL, 123), "124+1"),  # a heterogeneous job's component: its id, then its offset
    ((123, 0, NO_VAL, 123), "123+0"),
    ((100, 100, 7, 0), "100_7"),
    ((100, 100, NO_VAL, 0), "100_*"),
    ((100, 100, INFINITE, 0), "100_*"),
    ((101, 100, 0, 0), "101_0"),  # a task split off to run, by its own id: slurmrestd's key too (25.11)
])
def test_keys_as_slurmrestd_prints_them_and_parses_back(fields, key):
    state = job_state(*fields, 0)
    assert state.key == key
    assert state.key == v0042.parse_job_state({"job_id": key, "state": ["PENDING"]}).key


def _record(state: str, flags: frozenset[str] = frozenset(), **kw) -> Job:
    return Job(id=7, name="p", state=state, state_flags=flags, **kw)


@pytest.mark.parametrize(("record", "rpc", "taken"), [
    (_record("PENDING"), JobState(key="7", state="PENDING", state_flags=frozenset({"REQUEUED"})), True),
    # pyslurm's one word "COMPLETING" (mapped to COMPLETED): the RPC's CANCELLED with COMPLETING is exact
    (_record("COMPLETED", frozenset({"COMPLETING"})),
     JobState(key="7", state="CANCELLED", state_flags=frozenset({"COMPLETING"})), True),
    # allocated between the record's read and the RPC: never RUNNING on a record with a pending reason, no nodes
    (_record("PENDING", state_reason="Resources"), JobState(key="7", state="RUNNING"), False),
    (_record("RUNNING", frozenset({"CONFIGURING"})), JobState(key="7", state="COMPLETED"), False),
])
def test_the_rpcs_state_is_taken_only_where_it_refines_the_record(record, rpc, taken):
    assert refines(record, rpc) is taken
