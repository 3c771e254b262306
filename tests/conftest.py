"""Test layout: tests/unit is pure logic; tests/cluster runs against the real dev cluster.

Cluster tests never skip. If the dev cluster cannot come up, the session fails:
a green run must mean the integration was really exercised.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = Path(str(item.fspath))
        if ROOT / "cluster" in path.parents:
            item.add_marker(pytest.mark.cluster)
        elif ROOT / "unit" in path.parents:
            item.add_marker(pytest.mark.unit)


@pytest.fixture(scope="session")
def dev_cluster():
    """The running dev cluster, brought up (idempotently) if it is not."""
    from sunk.dev.cluster import DevCluster

    cluster = DevCluster.for_tests()
    with cluster.claimed("a pytest session"):  # another session on this machine would break this one's tests
        cluster.up()
        yield cluster


@pytest.fixture(scope="session")
def slurm_rest(dev_cluster):
    """(url, token, user) for slurmrestd."""
    return dev_cluster.slurm_rest


@pytest.fixture(scope="session")
def kube_api(dev_cluster):
    """A kubernetes ApiClient with cluster-admin rights on the dev kube-apiserver."""
    from kubernetes import client, config

    cfg = client.Configuration()
    config.load_kube_config(config_file=str(dev_cluster.kubeconfig), client_configuration=cfg)
    api = client.ApiClient(cfg)
    yield api
    api.close()
