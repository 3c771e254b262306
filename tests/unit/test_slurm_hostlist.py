import pytest
from hypothesis import given
from hypothesis import strategies as st

from sunk.model.hostlist import compress, expand


@pytest.mark.parametrize("expr, names", [
    ("", ()),
    (None, ()),
    ("(null)", ()),
    ("node1", ("node1",)),
    ("node[1-3]", ("node1", "node2", "node3")),
    ("node[1-2,5],login", ("node1", "node2", "node5", "login")),
    ("gpu[08-10]", ("gpu08", "gpu09", "gpu10")),
    ("a[1-2],b[3]", ("a1", "a2", "b3")),
    ("rack[1-2]-n[1-2]", ("rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2")),
    (" node1 , node2 ", ("node1", "node2")),
])
def test_expand(expr, names):
    assert expand(expr) == names


@pytest.mark.parametrize("bad", ["node[1-3", "node1-3]", "node[a-b]", "node[3-1]"])
def test_expand_rejects_malformed(bad):
    with pytest.raises(ValueError):
        expand(bad)


@pytest.mark.parametrize("names, expr", [
    (["node1", "node2", "node3", "node5"], "node[1-3,5]"),
    (["node1"], "node1"),
    (["login", "node2", "node1"], "login,node[1-2]"),
    (["gpu08", "gpu09", "gpu10"], "gpu[08-10]"),
])
def test_compress(names, expr):
    assert compress(names) == expr


@given(st.sets(st.integers(min_value=0, max_value=2000), min_size=1, max_size=60))
def test_compress_then_expand_round_trips(numbers):
    names = [f"node{n}" for n in numbers]
    assert sorted(expand(compress(names))) == sorted(names)


@given(st.lists(st.tuples(st.sampled_from(["node", "gpu-", "r1n"]), st.integers(0, 120), st.integers(0, 3)),
                min_size=1, max_size=40))
def test_round_trip_keeps_every_name_with_mixed_padding(specs):
    names = {f"{prefix}{str(number).zfill(width)}" for prefix, number, width in specs}
    assert sorted(expand(compress(names))) == sorted(names)
