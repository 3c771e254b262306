"""The operator's Slurm identity policy: who a Pod's job may run as, and what else a Pod may ask Slurm for."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sunk.model import names
from sunk.translate.podjob import Identity
from sunk.translate.policy import BUILTIN, IdentityPolicy, IdRange, NamespaceRule, parse_policy

MAX_ID = 2**32 - 3


def pod(namespace="team-a", **annotations):
    return {"metadata": {"name": "p", "namespace": namespace, "uid": "u", "annotations": annotations},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}


def ann(**short):
    """Annotations by their short name: user_id="5" -> sunk.coreweave.com/user-id: "5"."""
    return {f"{names.DOMAIN}/{key.replace('_', '-')}": value for key, value in short.items()}


POLICY = parse_policy({
    "default": {"identity": {"userId": 65534, "groupId": 65534}},
    "namespaces": {
        "team-a": {
            "identity": {"userId": 1000, "groupId": 1000, "account": "team-a"},
            "userIds": ["1000-1999", 2500],
            "accounts": ["team-a", "shared"],
            "partitions": ["batch"],
            "qos": ["normal"],
            "reservations": [],
            "priority": {"min": 0, "max": 100},
            "exclusive": ["none", "user"],
        },
        "ops": {"identity": {"userId": 0, "groupId": 0}},
    },
})


def fields(policy, p):
    return [problem.field for problem in policy.problems(p)]


# -- without a policy the operator wrote -------------------------------------------------------------------
def test_without_a_written_policy_root_is_refused_and_there_is_no_default_identity():
    problems = BUILTIN.problems(pod(**ann(user_id="0")))
    assert [p.field for p in problems] == [names.ANN_USER_ID]
    assert "user 0 (root) is not allowed" in problems[0].message
    assert "the cluster operator has written none" in problems[0].message
    assert fields(BUILTIN, pod(**ann(user_id="1001", group_id="0"))) == [names.ANN_GROUP_ID]
    nothing = BUILTIN.problems(pod())
    assert [p.field for p in nothing] == [names.ANN_USER_ID] and "no default Slurm identity" in nothing[0].message
    assert BUILTIN.identity(pod(**ann(user_id="1001"))) == Identity(1001, 1001)


def test_without_a_written_policy_no_pod_sets_a_priority():
    assert fields(BUILTIN, pod(**ann(user_id="1001", priority="5"))) == [names.ANN_PRIORITY]


# -- identity -----------------------------------------------------------------------------------------------
def test_a_pod_that_asks_nothing_runs_as_its_namespaces_identity():
    assert POLICY.identity(pod("team-a")) == Identity(1000, 1000, "team-a")
    assert POLICY.identity(pod("elsewhere")) == Identity(65534, 65534)


@pytest.mark.parametrize(("user", "allowed"), [
    ("1000", True), ("1999", True), ("1500", True), ("2500", True), (" 1200 ", True),
    ("999", False), ("2000", False), ("2499", False), ("0", False), ("65534", False)])
def test_a_user_id_is_allowed_only_inside_the_namespaces_ranges(user, allowed):
    p = pod("team-a", **ann(user_id=user))
    assert (POLICY.problems(p) == []) is allowed
    if allowed:
        assert POLICY.identity(p) == Identity(int(user), int(user), "team-a")  # group = user


def test_a_namespaces_rule_replaces_the_default_rule():
    assert fields(POLICY, pod("elsewhere", **ann(user_id="1500"))) == [names.ANN_USER_ID]
    assert POLICY.problems(pod("elsewhere", **ann(user_id="65534"))) == []  # its own identity's


def test_root_is_allowed_where_the_operator_wrote_it():
    assert POLICY.identity(pod("ops")) == Identity(0, 0)
    assert POLICY.problems(pod("ops", **ann(user_id="0"))) == []


def test_the_group_defaults_to_the_user_and_is_checked_against_the_group_ranges():
    rule = IdentityPolicy(default=NamespaceRule(user_ids=(IdRange(1000, 1999),), group_ids=(IdRange(50, 60),)))
    problems = rule.problems(pod(**ann(user_id="1500")))
    assert [p.field for p in problems] == [names.ANN_USER_ID] and "annotate" in problems[0].message
    assert rule.identity(pod(**ann(user_id="1500", group_id="55"))) == Identity(1500, 55)
    assert [p.field for p in rule.problems(pod(**ann(user_id="1500", group_id="61")))] == [names.ANN_GROUP_ID]


def test_a_group_alone_keeps_the_identitys_user():
    assert POLICY.identity(pod("team-a", **ann(group_id="1200"))) == Identity(1000, 1200, "team-a")
    assert fields(POLICY, pod("team-a", **ann(group_id="0"))) == [names.ANN_GROUP_ID]


def test_malformed_ids_are_left_to_validation():
    """podjob.validate_pod says what is wrong with the form; the policy neither repeats it nor decides."""
    assert POLICY.problems(pod("team-a", **ann(user_id="root"))) == []
    with pytest.raises(ValueError):
        POLICY.identity(pod("team-a", **ann(user_id="root")))


# -- the rest ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("annotations", "refused"), [
    (ann(account="shared"), []), (ann(account="team-a"), []), (ann(account="other"), [names.ANN_ACCOUNT]),
    (ann(partition="batch"), []), (ann(partition="gpu"), [names.ANN_PARTITION]),
    (ann(qos="normal"), []), (ann(qos="high"), [names.ANN_QOS]),
    (ann(reservation="maint"), [names.ANN_RESERVATION]),  # an empty list allows none
    (ann(priority="0"), []), (ann(priority="100"), []), (ann(priority="101"), [names.ANN_PRIORITY]),
    (ann(exclusive="none"), []), (ann(exclusive="TRUE"), []), (ann(exclusive="false"), []),
    (ann(exclusive="user"), []), (ann(exclusive="ok"), [names.ANN_EXCLUSIVE]),
    (ann(exclusive="topo"), [names.ANN_EXCLUSIVE]),
    (ann(account="x", partition="y", qos="z", user_id="5"),
     [names.ANN_USER_ID, names.ANN_ACCOUNT, names.ANN_PARTITION, names.ANN_QOS]),
])
def test_lists_the_operator_wrote_bound_what_a_pod_asks(annotations, refused):
    assert fields(POLICY, pod("team-a", **annotations)) == refused


def test_without_lists_slurm_decides():
    p = pod("elsewhere", **ann(account="any", partition="any", qos="any", reservation="any", exclusive="topo"))
    assert POLICY.identity(p) == Identity(65534, 65534, "any")


def test_a_refusal_names_the_rule_and_what_is_allowed():
    [problem] = POLICY.problems(pod("team-a", **ann(user_id="7")))
    assert "namespace team-a's rule" in problem.message and "1000-1999, 2500" in problem.message


@given(st.integers(min_value=0, max_value=MAX_ID))
def test_ranges_hold_exactly_their_ids(user):
    p = pod("team-a", **ann(user_id=str(user)))
    assert (POLICY.problems(p) == []) is (1000 <= user <= 1999 or user == 2500)


@given(st.dictionaries(st.sampled_from([f"{names.DOMAIN}/{k}" for k in (
    "user-id", "group-id", "account", "partition", "qos", "reservation", "priority", "exclusive")]),
    st.text(max_size=12)), st.sampled_from(["team-a", "ops", "elsewhere"]))
def test_any_annotations_give_problems_or_an_identity_never_an_exception(annotations, namespace):
    p = pod(namespace, **annotations)
    problems = POLICY.problems(p)
    try:
        identity = POLICY.identity(p)
    except ValueError:
        return
    assert problems == [] and isinstance(identity, Identity)


# -- the file ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("data", "message"), [
    ({"defualt": {}}, "unknown key"),
    ({"default": {"userIDs": [1]}}, "unknown key"),
    ({"default": {"userIds": ["5-1"]}}, "not a range"),
    ({"default": {"userIds": ["-1"]}}, "want an id"),
    ({"default": {"userIds": [True]}}, "want an id"),
    ({"default": {"userIds": "1000"}}, "want a list"),
    ({"default": {"userIds": [str(2**32)]}}, "not a range"),
    ({"default": {"identity": {"groupId": 5}}}, "userId is required"),
    ({"default": {"identity": {"userId": "1-5"}}}, "one user"),
    ({"default": {"identity": {"userId": 5, "account": "a b"}}}, "one account"),
    ({"default": {"exclusive": ["true"]}}, "want none, ok"),
    ({"default": {"priority": 5}}, "want min and max"),
    ({"default": {"priority": {"min": 5, "max": 1}}}, "not a range"),
    ({"default": {"accounts": [""]}}, "list of names"),
    ({"namespaces": ["a"]}, "mapping of namespace"),
    ({"namespaces": {False: {}}}, "not a namespace name"),  # YAML's `no:` unquoted
    ([], "want a mapping"),
])
def test_a_bad_policy_file_names_its_fault(data, message):
    with pytest.raises(ValueError, match=message):
        parse_policy(data)


def test_an_empty_file_is_a_written_policy_that_allows_nothing_but_its_identity():
    policy = parse_policy(None)
    assert policy.written and fields(policy, pod(**ann(user_id="1001"))) == [names.ANN_USER_ID]
    assert parse_policy({"default": {"identity": {"userId": 7}}}).identity(pod()) == Identity(7, 7)
