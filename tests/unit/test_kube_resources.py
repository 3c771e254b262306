"""REST addressing: a LabelSelector as the labelSelector query of a list."""

from __future__ import annotations

import pytest

from sunk.kube.resources import DEPLOYMENTS, label_selector, resource_for


def test_match_labels_sorted_then_each_expression_in_the_apiservers_syntax():
    selector = {"matchLabels": {"app.kubernetes.io/name": "sunk-syncer", "app.kubernetes.io/instance": "sunk"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]},
                                     {"key": "zone", "operator": "NotIn", "values": ["x"]},
                                     {"key": "ready", "operator": "Exists"},
                                     {"key": "legacy", "operator": "DoesNotExist"}]}
    assert label_selector(selector) == ("app.kubernetes.io/instance=sunk,app.kubernetes.io/name=sunk-syncer,"
                                        "tier in (a,b),zone notin (x),ready,!legacy")


@pytest.mark.parametrize("selector", [{}, {"matchLabels": {}}, {"matchExpressions": []}])
def test_an_empty_selector_is_refused_not_read_as_everything(selector):
    with pytest.raises(ValueError, match="empty"):
        label_selector(selector)


def test_an_unknown_operator_is_refused():
    with pytest.raises(ValueError, match="Gt"):
        label_selector({"matchExpressions": [{"key": "n", "operator": "Gt", "values": ["1"]}]})


def test_deployments_are_known():
    assert resource_for({"apiVersion": "apps/v1", "kind": "Deployment"}) is DEPLOYMENTS
    path = DEPLOYMENTS.path("slurm", "sunk-syncer", "scale")
    assert path == "/apis/apps/v1/namespaces/slurm/deployments/sunk-syncer/scale"
