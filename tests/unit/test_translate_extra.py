"""Extra JSON merge: properties that must hold for any input."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sunk.translate.extra import canonical, merge_extra, parse_object

keys = st.text(min_size=1, max_size=8)
values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
                      max_leaves=8)
objects = st.dictionaries(keys, values, max_size=6)


@given(objects, objects)
def test_syncer_keys_win_and_user_keys_survive(user, syncer):
    result = merge_extra(json.dumps(user), syncer)
    merged = json.loads(result.text)
    assert all(merged[k] == v for k, v in syncer.items())
    assert all(merged[k] == v for k, v in user.items() if k not in syncer)
    assert set(merged) == set(user) | set(syncer)
    assert not result.replaced_invalid


@given(objects, objects)
def test_merge_is_idempotent(user, syncer):
    once = merge_extra(json.dumps(user), syncer)
    twice = merge_extra(once.text, syncer)
    assert twice.text == once.text and twice.changed is False


@given(st.text(max_size=40), objects)
def test_output_is_always_a_json_object(garbage, syncer):
    result = merge_extra(garbage, syncer)
    assert isinstance(json.loads(result.text), dict)
    assert result.changed == (result.text != garbage)


@given(st.one_of(st.text(max_size=20).filter(lambda t: t.strip() and not _is_object(t)),
                 st.lists(st.integers()).map(json.dumps), st.integers().map(json.dumps)), objects)
def test_anything_but_a_json_object_is_replaced_and_flagged(garbage, syncer):
    result = merge_extra(garbage, syncer)
    assert result.replaced_invalid
    assert json.loads(result.text) == syncer


def _is_object(text):
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def test_empty_extra_is_not_invalid():
    result = merge_extra("", {"pod": "node1"})
    assert result.text == '{"pod":"node1"}' and result.changed and not result.replaced_invalid


def test_output_is_canonical_so_unchanged_means_no_write():
    assert merge_extra('{"b":1,"a":2}', {}).text == '{"a":2,"b":1}'
    assert merge_extra(canonical({"a": 2, "b": 1}), {}).changed is False


@pytest.mark.parametrize("text", ['{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}', '{"a": 1e999}', '[1]',
                                  '"x"', "null", "{", '{"a":1} trailing'])
def test_json_that_only_python_reads_is_invalid(text):
    """Other tools (jq, Go, slurm's own JSON parser) refuse NaN and overflowing floats."""
    assert parse_object(text) is None
    result = merge_extra(text, {"pod": "p"})
    assert result.replaced_invalid and json.loads(result.text) == {"pod": "p"}


def test_blank_extra_is_empty_not_invalid():
    result = merge_extra("   ", {"pod": "p"})
    assert not result.replaced_invalid and result.text == '{"pod":"p"}'


def test_non_ascii_is_kept_and_a_lone_surrogate_stays_escaped():
    assert merge_extra("", {"note": "größe"}).text == '{"note":"größe"}'
    text = merge_extra('{"u": "\\ud800"}', {}).text
    text.encode("utf-8")  # always storable
    assert json.loads(text) == {"u": "\ud800"}
    assert merge_extra(text, {}).changed is False  # and stable
