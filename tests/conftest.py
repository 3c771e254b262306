"""Test layout: tests/unit is pure logic; tests/cluster runs against the real dev cluster.

Cluster tests never skip. If the dev cluster cannot come up, the session fails:
a green run must mean the integration was really exercised.

Slurm is the release ``SUNK_DEV_SLURM`` names (24.11 without it; see dev/sunk_dev/release.py):
``tox -e slurm2605`` runs the tests marked ``every_release`` against 26.05. A cluster test
that fails says against which release, in its summary line and a section of its report.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).parent
SLURM_RELEASE = pytest.StashKey[str]()  # "Slurm 26.05.5 (Debian sid)", once the dev cluster is up


def _asked_release() -> str:
    """The Slurm release this session asks for, or why ``SUNK_DEV_SLURM`` names none (the dev cluster
    fixture then fails with that; a unit-test session never needs it)."""
    from sunk_dev import release

    try:
        return release.chosen().describe()
    except ValueError as exc:
        return str(exc)


def pytest_report_header(config):
    from sunk_dev import release

    return f"dev cluster Slurm release: {_asked_release()} (${release.ENV})"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed and item.get_closest_marker("cluster"):
        from sunk_dev import release

        release.tag_failure(report, item.config.stash.get(SLURM_RELEASE, _asked_release()))
    return report


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = Path(str(item.fspath))
        if ROOT / "cluster" in path.parents:
            item.add_marker(pytest.mark.cluster)
        elif ROOT / "unit" in path.parents:
            item.add_marker(pytest.mark.unit)
    # A test of the pyslurm backend's deployment runs where the release has pyslurm (tox -e slurm2511) and is
    # deselected, by name in the summary, on the others: never a skip that reads as a pass.
    if any(item.get_closest_marker("pyslurm_release") for item in items) and not _has_pyslurm():
        dropped = [item for item in items if item.get_closest_marker("pyslurm_release")]
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not item.get_closest_marker("pyslurm_release")]


def _has_pyslurm() -> bool:
    from sunk_dev import release

    try:
        return release.chosen().pyslurm
    except ValueError:
        return True  # the dev cluster fixture fails with why


@pytest.fixture(scope="session")
def dev_cluster(request):
    """The running dev cluster, brought up (idempotently) if it is not, on the Slurm release asked for."""
    from sunk_dev import chroot
    from sunk_dev.cluster import DevCluster

    cluster = DevCluster.for_tests()
    with cluster.claimed("a pytest session"):  # another session on this machine would break this one's tests
        cluster.up()
        request.config.stash[SLURM_RELEASE] = cluster.release.describe(chroot.slurm_version(cluster.root))
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
