"""The chart's Secrets made once by its hook Job (sunk-syncer ensure-secrets, as a Pod of sunk's image) and kept.

As test_chart_pods.py: the hook Job's Pod really runs, on the real Node (kube-scheduler as the
default scheduler binds it, ``nodeSelector`` keeps it there), in a namespace enforcing Pod
Security ``restricted``. The Deployments' Pods are not waited for.

In order, one release:

1. install with the hooks Secret given as values (the chart renders it: Helm's object, with
   ``keepOnUninstall: false`` no keep annotation): a release of a chart that rendered its own
   Secret, as every release before ensure-secrets did. The extender's pair is made by the Job.
2. ``helm upgrade`` without those values: the chart stops rendering ``sunk-hooks``, and Helm
   deletes what the old release had and the new one lacks, unless the live object says keep. The
   pre-upgrade Job stamps it: the Secret stays, byte for byte.
3. another ``helm upgrade``: every Secret byte-identical.
4. ``helm uninstall`` with ``keepOnUninstall: false``: the post-delete Job deletes all three.
"""

from __future__ import annotations

import base64
import datetime
import secrets
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kube_testns import purge_namespace
from slurmtools import wait_for
from test_chart_install import ENFORCE, RELEASE, SECRETS, Release, enforced
from test_chart_pods import POD_SLURM_URL, default_scheduler, describe  # noqa: F401 (a fixture)

from sunk.hooks.auth import weakness
from sunk.kube import client as kc
from sunk.kube.resources import NAMESPACES, Resource
from sunk.translate import chartsecrets as cs
from sunk_dev import realnode

JOBS = Resource("batch", "v1", "jobs", "Job")
HOOKS = "sunk-hooks"
SERVER, CLIENT = "sunk-extender-tls", "sunk-extender-client-tls"
GIVEN = {"syncerToken": secrets.token_hex(32), "schedulerHookSecret": secrets.token_hex(32)}


@pytest.fixture(scope="module")
def secrets_release(kube_api, dev_cluster, default_scheduler, tmp_path_factory) -> Iterator[Release]:  # noqa: F811
    name = f"chart-secrets-{uuid.uuid4().hex[:8]}"
    kc.create(kube_api, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                     "metadata": {"name": name, "labels": ENFORCE}})
    enforced(kube_api, name)
    release = Release(dev_cluster, name, tmp_path_factory.mktemp("chart-secrets"))
    release.values.update({
        "nodeSelector": {realnode.NODE_LABEL: "true"},  # the hook Jobs' Pods run on the real Node
        "hooks": {**GIVEN, "keepOnUninstall": False},
        "extender": {"enabled": True},
        "syncer": {"releaseNodesOnUninstall": False},  # (the Syncer's Pods are not waited for: nothing to release)
    })
    release.values["slurm"]["api"]["url"] = POD_SLURM_URL
    try:
        yield release
    finally:
        if release.installed:
            release.helm("uninstall", RELEASE, "--wait", check=False)
        purge_namespace(kube_api, name)


def secret(api, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return kc.get(api, SECRETS, name, namespace)
    except kc.ApiError as exc:
        if exc.not_found:
            return None
        raise


def data(obj: dict[str, Any]) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in obj["data"].items()}


def all_data(api, namespace: str) -> dict[str, dict[str, bytes]]:
    found = {name: secret(api, namespace, name) for name in (HOOKS, SERVER, CLIENT)}
    missing = [name for name, obj in found.items() if obj is None]
    assert not missing, f"Secrets missing: {missing}"
    return {name: data(obj) for name, obj in found.items() if obj is not None}


def test_install_runs_the_hook_job_which_makes_the_extenders_pair(kube_api, secrets_release):
    namespace = secrets_release.namespace
    try:
        secrets_release.install()  # helm waits for the pre-install Job
    except AssertionError:
        raise AssertionError(describe(kube_api, namespace)) from None
    hooks = secret(kube_api, namespace, HOOKS)
    assert hooks is not None and cs.helm_owned(hooks)
    assert cs.needs_keep(hooks), "keepOnUninstall false: the chart's own Secret carries no keep annotation"
    assert data(hooks) == {"syncer-token": GIVEN["syncerToken"].encode(),
                           "scheduler-hook-secret": GIVEN["schedulerHookSecret"].encode()}
    pair = {name: secret(kube_api, namespace, name) for name in (SERVER, CLIENT)}
    for name, obj in pair.items():
        assert obj is not None, name
        assert not cs.helm_owned(obj), f"{name} carries Helm's ownership"
        assert obj["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
    spec = cs.TLSPair(SERVER, CLIENT, "sunk-extender", namespace, "sunk-kube-scheduler", 3650)
    assert cs.tls_problems(spec, data(pair[SERVER]), data(pair[CLIENT]),  # type: ignore[index]
                           datetime.datetime.now(datetime.UTC)) == []
    # hook-succeeded: the Job went with its ServiceAccount and rights.
    wait_for(lambda: not [j for j in kc.list_objects(kube_api, JOBS, namespace)
                          if j["metadata"]["name"] == "sunk-ensure-secrets"], 60, "the succeeded hook Job to go")


def test_an_upgrade_that_stops_rendering_the_helm_made_secret_keeps_it_and_its_value(kube_api, secrets_release):
    namespace = secrets_release.namespace
    before = all_data(kube_api, namespace)
    del secrets_release.values["hooks"]["syncerToken"], secrets_release.values["hooks"]["schedulerHookSecret"]
    secrets_release.upgrade()
    assert HOOKS not in {d["metadata"]["name"] for d in secrets_release.manifest() if d["kind"] == "Secret"}
    hooks = secret(kube_api, namespace, HOOKS)
    assert hooks is not None, "helm upgrade deleted the Secret the old release rendered"
    assert hooks["metadata"]["annotations"][cs.KEEP_ANNOTATION] == cs.KEEP
    assert all_data(kube_api, namespace) == before
    assert all(weakness(v) is None for v in before[HOOKS].values())


def test_a_further_upgrade_rotates_nothing(kube_api, secrets_release):
    namespace = secrets_release.namespace
    before = {name: secret(kube_api, namespace, name) for name in (HOOKS, SERVER, CLIENT)}
    secrets_release.values["logLevel"] = "debug"
    secrets_release.upgrade()
    after = {name: secret(kube_api, namespace, name) for name in (HOOKS, SERVER, CLIENT)}
    for name, old in before.items():
        new = after[name]
        assert old is not None and new is not None, name
        assert new["data"] == old["data"], f"{name} rotated"
        # not even written: the Job wrote no byte of theirs
        assert new["metadata"]["resourceVersion"] == old["metadata"]["resourceVersion"], name


def test_uninstall_without_keep_deletes_the_made_secrets(kube_api, secrets_release):
    namespace = secrets_release.namespace
    secrets_release.uninstall()  # helm waits for the post-delete Job
    left = [name for name in (HOOKS, SERVER, CLIENT) if secret(kube_api, namespace, name) is not None]
    assert not left, f"left after uninstall with hooks.keepOnUninstall false: {left}"
