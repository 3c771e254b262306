"""Pure parts of sunk.kube.patch: metadata diffs and condition merging (incl. properties)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sunk.kube.patch import cordon_reason, has_taint, is_cordoned, merge_conditions, metadata_diff

NOW = "2030-01-01T00:00:00Z"
THEN = "2020-01-01T00:00:00Z"


def test_metadata_diff_sets_changes_and_removes_only_what_differs():
    current = {"a": "1", "b": "2", "c": "3"}
    assert metadata_diff(current, {"a": "1", "b": "9", "c": None, "d": None, "e": "5"}) == {
        "b": "9",
        "c": None,
        "e": "5",
    }
    assert metadata_diff(current, {"a": "1", "zz": None}) == {}
    assert metadata_diff(None, {"x": "y"}) == {"x": "y"}


def test_merge_conditions_adds_new_type_with_transition_time():
    existing = [{"type": "Ready", "status": "True", "lastTransitionTime": THEN}]
    out = merge_conditions(existing, [{"type": "SlurmDrain", "status": "True", "message": "k8s: x"}], now=NOW)
    assert out == [
        existing[0],
        {"type": "SlurmDrain", "status": "True", "message": "k8s: x", "lastTransitionTime": NOW},
    ]


def test_merge_conditions_unchanged_returns_none():
    existing = [{"type": "SlurmDrain", "status": "True", "reason": "Drain", "message": "m", "lastTransitionTime": THEN}]
    assert (
        merge_conditions(
            existing, [{"type": "SlurmDrain", "status": "True", "reason": "Drain", "message": "m"}], now=NOW
        )
        is None
    )


def test_merge_conditions_message_change_keeps_transition_time_status_change_moves_it():
    existing = [{"type": "SlurmDrain", "status": "True", "message": "a", "lastTransitionTime": THEN}]
    out = merge_conditions(existing, [{"type": "SlurmDrain", "status": "True", "message": "b"}], now=NOW)
    assert out == [{"type": "SlurmDrain", "status": "True", "message": "b", "lastTransitionTime": THEN}]
    out = merge_conditions(existing, [{"type": "SlurmDrain", "status": "False"}], now=NOW)
    assert out == [{"type": "SlurmDrain", "status": "False", "lastTransitionTime": NOW}]


def test_merge_conditions_removes_duplicates_of_managed_types_only():
    existing = [
        {"type": "Ready", "status": "True"},
        {"type": "SlurmDrain", "status": "True", "lastTransitionTime": THEN},
        {"type": "Ready", "status": "True"},  # not ours: left alone
        {"type": "SlurmDrain", "status": "False", "lastTransitionTime": THEN},
    ]
    out = merge_conditions(existing, [{"type": "SlurmDrain", "status": "True"}], now=NOW)
    assert out is not None
    assert [c["type"] for c in out] == ["Ready", "SlurmDrain", "Ready"]
    assert out[1]["lastTransitionTime"] == THEN


def test_merge_conditions_remove():
    existing = [{"type": "Ready", "status": "True"}, {"type": "SlurmRunning", "status": "True"}]
    assert merge_conditions(existing, [], remove=["SlurmRunning"], now=NOW) == [{"type": "Ready", "status": "True"}]
    assert merge_conditions(existing, [], remove=["Absent"], now=NOW) is None


TYPES = st.sampled_from(["Ready", "SlurmDrain", "SlurmRunning", "SlurmNotResponding", "X"])
COND = st.fixed_dictionaries(
    {"type": TYPES, "status": st.sampled_from(["True", "False", "Unknown"])},
    optional={"message": st.sampled_from(["a", "b"]), "lastTransitionTime": st.just(THEN)},
)


@given(
    existing=st.lists(COND, max_size=8),
    wanted=st.lists(COND, max_size=4, unique_by=lambda c: c["type"]),
    remove=st.lists(TYPES, max_size=2),
)
def test_merge_conditions_properties(existing, wanted, remove):
    remove = [r for r in remove if r not in {w["type"] for w in wanted}]
    out = merge_conditions(existing, wanted, remove, now=NOW)
    result = existing if out is None else out
    managed = {w["type"] for w in wanted} | set(remove)
    types = [c["type"] for c in result]
    # every managed type at most once; wanted ones present with the wanted status and message
    for t in managed:
        assert types.count(t) <= 1
    for w in wanted:
        got = next(c for c in result if c["type"] == w["type"])
        assert got["status"] == w["status"] and got.get("message") == w.get("message")
    for t in remove:
        assert t not in types
    # conditions of other types are untouched and in their original order
    assert [c for c in result if c["type"] not in managed] == [c for c in existing if c["type"] not in managed]
    # idempotent: applying again changes nothing
    assert merge_conditions(result, wanted, remove, now="2099-01-01T00:00:00Z") is None


def test_node_predicates():
    node = {
        "metadata": {"name": "n", "annotations": {"node.coreweave.cloud/cordonReason": "bad GPU"}},
        "spec": {"unschedulable": True, "taints": [{"key": "sunk.coreweave.com/lock", "effect": "NoExecute"}]},
    }
    assert is_cordoned(node) and cordon_reason(node) == "bad GPU"
    assert has_taint(node, "sunk.coreweave.com/lock") and has_taint(node, "sunk.coreweave.com/lock", "NoExecute")
    assert not has_taint(node, "sunk.coreweave.com/lock", "NoSchedule")
    bare = {"metadata": {"name": "n"}, "spec": {}}
    assert not is_cordoned(bare) and cordon_reason(bare) is None and not has_taint(bare, "x")
