"""sunk.translate.keys: typed unit keys whose str() is today's queued, logged and signed string."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sunk.translate import gang as g
from sunk.translate.keys import GangKey, PodKey, is_gang, unit_key


def test_a_pod_key_is_its_uid():
    assert str(PodKey("0b7c-uid")) == "0b7c-uid"
    assert unit_key("0b7c-uid") == PodKey("0b7c-uid")


def test_a_gang_key_is_its_owner_string():
    key = GangKey("team-a", "lws/llm/2")
    assert str(key) == "gang:team-a/lws/llm/2" == g.owner("team-a", "lws/llm/2")
    assert unit_key("gang:team-a/lws/llm/2") == key  # the namespace ends at the first slash


@pytest.mark.parametrize("text", ["gang:", "gang:no-slash", "u-1", ""])
def test_what_is_not_a_gang_key_does_not_parse_as_one(text):
    with pytest.raises(ValueError):
        GangKey.parse(text)


def test_a_malformed_gang_string_is_no_pod_key_either():
    assert is_gang("gang:no-slash")
    with pytest.raises(ValueError):
        unit_key("gang:no-slash")


words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-./", min_size=0, max_size=20)


@given(namespace=words.filter(lambda s: "/" not in s), key=words)
def test_a_gang_key_reads_back_from_its_string(namespace, key):
    assert unit_key(str(GangKey(namespace, key))) == GangKey(namespace, key)


@given(uid=words.filter(lambda s: not s.startswith("gang:")))
def test_a_pod_key_reads_back_from_its_string(uid):
    assert unit_key(str(PodKey(uid))) == PodKey(uid)


def test_a_gangs_typed_key_is_its_owner_string_as_queued_and_signed_before_keys_were_typed():
    from sunk.translate.gang import Gang

    gang = Gang("Job", "team", "train", "job/u-1", job_uid="u-1")
    assert gang.unit == GangKey("team", "job/u-1")
    assert str(gang.unit) == gang.owner == "gang:team/job/u-1"
