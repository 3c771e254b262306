"""Nodes proving who they are with their slurmd Pod's ServiceAccount token, against a real apiserver.

The dev cluster's slurmd Pods are hand-made and mount no projected token, so the test mints one
as the kubelet would (TokenRequest for the Pod's ServiceAccount, bound to the Pod, audience
sunk-syncer) and writes it where hooks.env's SUNK_HOOKS_TOKEN_FILE points. A real job then runs
through the real prolog against the real sunk-syncer, which checks the token with TokenReview.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import requests
from locking_harness import HookScripts, new_token, running_syncer
from slurmtools import slurm_job, state, wait_for
from test_locking_flows import node_field, slurmd_lock, unlocked

from sunk.kube import client as kc
from sunk.kube.resources import PODS
from sunk.translate.podtoken import DEFAULT_AUDIENCE


def mint(api, pod_name: str, audience: str = DEFAULT_AUDIENCE) -> str:
    """A token bound to slurmd Pod ``pod_name`` (what a projected serviceAccountToken volume holds)."""
    pod = kc.get(api, PODS, pod_name, "slurm")
    account = pod["spec"].get("serviceAccountName") or "default"
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"audiences": [audience], "expirationSeconds": 600,
                     "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod_name,
                                        "uid": pod["metadata"]["uid"]}}}
    answer = kc.request(api, "POST", f"/api/v1/namespaces/slurm/serviceaccounts/{account}/token", body=body)
    return str(answer["status"]["token"])


@pytest.fixture(scope="module")
def syncer(dev_cluster, kube_api, tmp_path_factory):
    secret = tmp_path_factory.mktemp("hooks") / "token"
    secret.write_text(new_token())
    lease = f"sunk-syncer-podtoken-{uuid.uuid4().hex[:6]}"
    with running_syncer(kube_api, dev_cluster, secret, tmp_path_factory.mktemp("syncer"),
                        ["--node-permissions-enabled", f"--hooks-token-audience={DEFAULT_AUDIENCE}"], lease) as proc:
        yield proc


@pytest.fixture(scope="module")
def scripts(dev_cluster, syncer):
    hooks = HookScripts(dev_cluster, syncer.url, new_token())  # (its HMAC tokens are replaced below)
    hooks.install(lock_timeout=30)
    try:
        yield hooks
    finally:
        hooks.remove()


def give_token(scripts: HookScripts, node: str, token: str) -> None:
    """Where the node's hooks.env token file points; replaced atomically, as the kubelet does."""
    path = scripts.dir / "tokens" / node
    staged = path.with_suffix(".new")
    staged.write_text(token)
    staged.chmod(0o400)
    staged.replace(path)


def run_locked_job(dev_cluster, kube_api, scripts: HookScripts, node: str) -> None:
    """One job through the prolog: it runs while the node is locked, and the node stays in service."""
    unlocked(kube_api, dev_cluster, node)
    marker = f"/tmp/podtoken-{uuid.uuid4().hex[:8]}"
    job = scripts.sbatch(node, f"touch {marker}; sleep 2")
    seen: list[str | None] = []
    wait_for(lambda: seen.append(slurmd_lock(kube_api, node)) or seen[-1] == "locked", 40, f"{node} locked")
    wait_for(lambda: state(slurm_job(dev_cluster, job)) in ("COMPLETED", None), 60, "the job to end")
    ran = Path(dev_cluster.root) / marker.lstrip("/")
    assert ran.exists(), "the job's script never ran"
    ran.unlink()
    assert "DRAIN" not in node_field(dev_cluster, node, "State"), node_field(dev_cluster, node, "Reason")
    wait_for(lambda: slurmd_lock(kube_api, node) == "false", 30, "unlock after the epilog")


def test_a_pod_token_locks_its_node_and_a_rotation_drains_nothing(dev_cluster, kube_api, scripts):
    give_token(scripts, "node3", mint(kube_api, "node3"))
    run_locked_job(dev_cluster, kube_api, scripts, "node3")
    give_token(scripts, "node3", mint(kube_api, "node3"))  # the kubelet's rotation: a new token, same Pod
    run_locked_job(dev_cluster, kube_api, scripts, "node3")


def test_another_nodes_pod_token_is_forbidden(kube_api, dev_cluster, syncer):
    unlocked(kube_api, dev_cluster, "node3")
    other = mint(kube_api, "node4")
    for path in ("pre-hook", "post-hook", "reboot"):
        resp = requests.post(f"{syncer.url}/api/v1/nodes/node3/{path}", json={"job_id": 1}, timeout=10,
                             headers={"Authorization": f"Bearer {other}"})
        assert resp.status_code == 403, resp.text
        assert "slurmd Pod of Slurm node node4" in resp.json()["error"]
    assert slurmd_lock(kube_api, "node3") in (None, "false")


def test_a_token_for_another_audience_is_refused(kube_api, syncer):
    resp = requests.post(f"{syncer.url}/api/v1/nodes/node3/post-hook", json={"job_id": 1}, timeout=10,
                         headers={"Authorization": f"Bearer {mint(kube_api, 'node3', audience='not-sunk')}"})
    assert resp.status_code == 401 and "audience" in resp.json()["error"], resp.text
