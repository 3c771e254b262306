"""SubmitExpectations: every transition of what the scheduler expects of its jobs informer, per unit."""

from __future__ import annotations

import pytest

from scheduler.expectations import Doubted, Expected, Refused, SubmitExpectations


@pytest.fixture
def clock():
    return [100.0]


@pytest.fixture
def expectations(clock):
    return SubmitExpectations(ttl=60.0, clock=lambda: clock[0])


def test_nothing_is_expected_of_an_unknown_key(expectations):
    assert expectations.get("k") is None and expectations.key_of(7) is None
    assert expectations.observed("k", 7) is None and expectations.listed(1e9) == []


def test_an_expected_job_is_met_when_observed_and_only_by_its_own_id(expectations):
    expectations.expect("k", 7)
    assert expectations.get("k") == Expected(7, 100.0) and expectations.key_of(7) == "k"
    assert expectations.observed("k", 8) is None and expectations.get("k") == Expected(7, 100.0)
    assert expectations.observed("other", 7) is None
    assert expectations.observed("k", 7) == Expected(7, 100.0)
    assert expectations.get("k") is None and expectations.key_of(7) is None


def test_a_later_call_replaces_the_earlier_one_and_its_job_id(expectations):
    expectations.expect("k", 7)
    expectations.expect("k", 8)
    assert expectations.key_of(7) is None and expectations.key_of(8) == "k"
    expectations.refuse("k", "no such QOS")
    assert expectations.get("k") == Refused("no such QOS", 100.0) and expectations.key_of(8) is None
    expectations.doubt("k")
    assert expectations.get("k") == Doubted(100.0)
    expectations.expect("k", 9)
    assert expectations.get("k") == Expected(9, 100.0)


def test_a_refusal_stands_when_slurm_lists_the_job_it_recorded_as_it_refused(expectations):
    expectations.refuse("k", "no")
    assert expectations.observed("k", 7) is None and expectations.get("k") == Refused("no", 100.0)
    assert expectations.listed(1e9) == [] and expectations.get("k") is not None


def test_expectations_and_refusals_expire_after_the_ttl_doubts_do_not(expectations, clock):
    expectations.expect("a", 7)
    expectations.refuse("b", "no")
    expectations.doubt("c")
    clock[0] += 60.0
    assert expectations.get("a") is not None and expectations.get("b") is not None  # (at the ttl: kept)
    clock[0] += 1.0
    assert expectations.get("a") is None and expectations.key_of(7) is None
    assert expectations.get("b") is None
    assert expectations.get("c") == Doubted(100.0)  # only the informer settles a doubt


def test_a_doubt_is_met_by_any_job_of_its_key(expectations):
    expectations.doubt("k")
    assert expectations.observed("k", 42) == Doubted(100.0) and expectations.get("k") is None


def test_a_doubt_is_settled_by_a_list_requested_a_message_timeout_after_it_only(expectations, clock):
    """slurmctld may still make the job after the client gave up on its answer (MessageTimeout, 10 s)."""
    expectations.doubt("old")
    clock[0] = 110.0
    expectations.doubt("new")
    assert expectations.listed(100.0) == []  # requested as the first answer was lost: it may predate the job
    assert expectations.listed(105.0) == []  # the submission may still be in slurmctld's hands
    assert expectations.listed(110.5) == ["old"]
    assert expectations.get("new") == Doubted(110.0)
    assert expectations.listed(120.0) == [] and expectations.listed(121.0) == ["new"]
    assert expectations.get("new") is None


def test_the_doubt_margin_is_the_operators(clock):
    quick = SubmitExpectations(ttl=60.0, clock=lambda: clock[0], doubt_margin=0.0)
    quick.doubt("k")
    assert quick.listed(100.5) == ["k"]


def test_settle_forgets_whatever_was_expected(expectations):
    for key, put in (("a", lambda k: expectations.expect(k, 7)), ("b", lambda k: expectations.refuse(k, "no")),
                     ("c", expectations.doubt)):
        put(key)
        expectations.settle(key)
        assert expectations.get(key) is None
    assert expectations.key_of(7) is None and expectations.listed(1e9) == []
