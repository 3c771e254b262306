"""A Pod's effective requests as kube-scheduler counts them, and the quantity grammar behind them."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sunk.translate.quantity import MAX_QUANTITY, is_whole, parse_quantity
from sunk.translate.resources import pod_requests


def container(name, restart=None, **requests):
    out = {"name": name, "resources": {"requests": {k.replace("_", "/"): v for k, v in requests.items()}}}
    if restart:
        out["restartPolicy"] = restart
    return out


def pod(containers=(), init=(), resources=None, overhead=None):
    spec = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    if resources is not None:
        spec["resources"] = resources
    if overhead is not None:
        spec["overhead"] = overhead
    return {"spec": spec}


# -- quantity grammar -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "value"), [
    ("1E", Decimal(10) ** 18), ("1E3", Decimal(1000)), ("1e-3", Decimal("0.001")), ("2Ei", Decimal(2 * 2**60)),
    ("+5", Decimal(5)), ("0", Decimal(0)), ("1.", Decimal(1)), (" 2Gi ", Decimal(2 * 2**30)),
    (Decimal("0.25"), Decimal("0.25")), ("100u", Decimal("0.0001")), ("5n", Decimal("0.000000005")),
])
def test_suffix_and_exponent_are_told_apart(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["-1", "-500m", -3])
def test_negative_requests_are_refused(text):
    with pytest.raises(ValueError, match="cannot be negative"):
        parse_quantity(text)


@pytest.mark.parametrize("text", ["10E", "9223372036854775808", "1e41", "1e-999999"])
def test_magnitudes_the_apiserver_refuses_are_refused(text):
    with pytest.raises(ValueError, match="out of range"):
        parse_quantity(text)


@pytest.mark.parametrize("value", [1.5, True, None, [1], Decimal("NaN")])
def test_non_quantity_types_are_refused(value):
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity(value)


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_every_int64_parses_to_itself(number):
    assert parse_quantity(str(number)) == number <= MAX_QUANTITY


@pytest.mark.parametrize(("value", "whole"), [("4", True), ("4000m", True), ("1500m", False), ("0", True)])
def test_is_whole(value, whole):
    assert is_whole(parse_quantity(value)) is whole


# -- effective requests -----------------------------------------------------------------------------------
def test_app_containers_are_summed():
    assert pod_requests(pod([container("a", cpu="1", memory="1Gi"), container("b", cpu="500m")])) == {
        "cpu": Decimal("1.5"), "memory": Decimal(2**30)}


def test_a_limit_without_a_request_counts_as_the_request():
    c = {"name": "a", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"cpu": "1"}}}
    assert pod_requests(pod([c])) == {"cpu": Decimal(1), "memory": Decimal(2**30)}


def test_a_plain_init_container_counts_alone_at_its_peak():
    requests = pod_requests(pod([container("a", cpu="1")], init=[container("i", cpu="3"), container("j", cpu="2")]))
    assert requests["cpu"] == 3


def test_sidecars_add_to_the_app_and_to_every_later_init_step():
    """kube-scheduler: max(sum(app) + sum(sidecars), max over init steps of sidecars-so-far + step)."""
    init = [container("side", restart="Always", cpu="1"), container("setup", cpu="4"),
            container("side2", restart="Always", cpu="1")]
    requests = pod_requests(pod([container("a", cpu="2")], init=init))
    assert requests["cpu"] == 5  # the setup step: side (1) + setup (4); running: 2 + 1 + 1 = 4


def test_sidecars_can_dominate():
    init = [container("setup", cpu="1"), container("side", restart="Always", cpu="3")]
    assert pod_requests(pod([container("a", cpu="2")], init=init))["cpu"] == 5


def test_pod_level_resources_replace_the_containers_sum_per_resource():
    requests = pod_requests(pod([container("a", cpu="1", memory="1Gi")], resources={"requests": {"cpu": "4"}}))
    assert requests == {"cpu": Decimal(4), "memory": Decimal(2**30)}


def test_overhead_is_added_on_top():
    requests = pod_requests(pod([container("a", cpu="1", memory="1Gi")],
                                overhead={"cpu": "250m", "memory": "128Mi"}))
    assert requests == {"cpu": Decimal("1.25"), "memory": Decimal(2**30 + 128 * 2**20)}


def test_an_empty_pod_requests_nothing():
    assert pod_requests({}) == {} and pod_requests(pod()) == {}


def test_a_malformed_quantity_anywhere_is_a_value_error():
    with pytest.raises(ValueError, match="lots"):
        pod_requests(pod([container("a", cpu="1")], overhead={"cpu": "lots"}))
