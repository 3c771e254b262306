"""WaitSlots: bounds per node and in all, one wait per (node, job), a repeated call taking the wait over."""

from __future__ import annotations

import threading

import pytest

from sunk.locking.waitslots import WaitSlots


def test_a_node_holds_at_most_its_bound_of_jobs_and_all_nodes_the_overall_one():
    slots = WaitSlots(overall=5, per_node=2)
    assert slots.take("n1", 1) and slots.take("n1", 2)
    assert slots.take("n1", 3) is None  # per node
    assert slots.take("n2", 1) and slots.take("n2", 2) and slots.take("n3", 1)
    assert slots.take("n4", 1) is None  # overall
    assert (slots.waiting(), slots.waiting("n1"), slots.waiting("n4")) == (5, 2, 0)


def test_a_node_repeating_one_job_in_a_loop_holds_one_wait_and_its_bound_whatever_it_sends():
    """The attack: a compromised node sends the same pre-hook again and again. Each call takes the wait over
    (the older is superseded), none adds a wait: the node still holds one, other nodes keep their room."""
    slots = WaitSlots(overall=8, per_node=1)
    first = slots.take("evil", 7)
    assert first is not None and not first.took_over
    repeats = [slots.take("evil", 7) for _ in range(100)]
    assert all(r is not None and r.took_over for r in repeats)
    assert slots.waiting("evil") == 1 and slots.waiting() == 1
    assert slots.superseded(first) and all(slots.superseded(r) for r in repeats[:-1])
    assert not slots.superseded(repeats[-1])
    assert slots.take("evil", 8) is None  # another job on that node: its bound
    assert slots.take("good", 1) is not None


def test_a_superseded_call_that_waits_its_turn_is_told_at_once():
    slots = WaitSlots(overall=8, per_node=1)
    first = slots.take("n1", 7)
    second = slots.take("n1", 7)
    assert first is not None and second is not None
    outcome: list[bool] = []
    waiting = threading.Thread(target=lambda: outcome.append(slots.wait_turn(second, timeout=30)))
    waiting.start()
    third = slots.take("n1", 7)  # (the thread is woken by this, whether it waits already or not)
    waiting.join()
    assert outcome == [False] and third is not None
    slots.give_back(second)
    assert slots.calls("n1", 7) == 2  # first (still running) and third


def test_the_newest_call_has_its_turn_only_once_every_older_one_gave_its_slot_back():
    slots = WaitSlots(overall=8, per_node=1)
    first = slots.take("n1", 7)
    second = slots.take("n1", 7)
    assert first is not None and second is not None
    assert slots.wait_turn(first, timeout=0) is False  # superseded
    assert slots.wait_turn(second, timeout=0) is False  # the first has not given back yet
    slots.give_back(first)
    assert slots.wait_turn(second, timeout=0) is True
    slots.give_back(second)
    assert (slots.waiting(), slots.calls("n1", 7)) == (0, 0)
    assert slots.take("n1", 8) is not None  # the node's room is back


def test_a_call_alone_on_its_wait_has_its_turn_and_giving_back_twice_is_a_bug():
    slots = WaitSlots(overall=1, per_node=1)
    slot = slots.take("n1", 7)
    assert slot is not None and slots.wait_turn(slot, timeout=0)
    slots.give_back(slot)
    with pytest.raises(RuntimeError):
        slots.give_back(slot)


def test_the_bounds_must_be_positive():
    with pytest.raises(ValueError):
        WaitSlots(overall=0, per_node=1)


@pytest.mark.parametrize("flags, message", [
    (["--lock-max-waiters-per-node=25"], "--lock-max-waiters-per-node=25 lets 8 nodes or fewer hold all "
                                         "--lock-max-waiters=192: at most 1/8 of it (24)"),
    (["--lock-max-waiters=7", "--lock-max-waiters-per-node=1"], "at most 1/8 of it (0, so raise --lock-max-waiters)"),
    (["--hooks-api-threads=200"], "--lock-max-waiters=192 may take too many of the hook API's "
                                  "--hooks-api-threads=200 threads: at most 3/4 of them (150)"),
    (["--lock-max-waiters=256"], "at most 3/4 of them (192)"),
], ids=["per-node-too-large", "overall-too-small-for-any-node", "threads-too-few", "waiters-take-every-thread"])
def test_the_syncer_refuses_bounds_that_let_a_few_nodes_starve_the_others(flags, message, capsys):
    from sunk.commands.syncer import parse_args

    with pytest.raises(SystemExit) as exc:
        parse_args(["--hooks-token-file=/dev/null", *flags])
    assert exc.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("threads, overall, per_node", [(256, 192, 4), (256, 192, 24), (11, 8, 1)],
                         ids=["defaults", "largest-per-node", "smallest"])
def test_bounds_within_the_shares_are_accepted(threads, overall, per_node):
    from sunk.locking.config import LockConfig, check_waiter_bounds

    check_waiter_bounds(LockConfig(token_file=None, max_waiters=overall, max_waiters_per_node=per_node),
                        hooks_api_threads=threads)
