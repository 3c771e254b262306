"""sunk-scheduler under faults, on the real dev cluster (issue 18, items 1, 3, 4 and 6).

Each test runs a scheduler of its own, in a namespace of its own:
- a Slurm token that expires mid-run is an outage until a new one is written into its file;
- a submission whose answer is lost (a proxy forwards it to slurmrestd, then drops the reply)
  makes one job, not two;
- with slurmrestd down, the scheduler stays ready and its hook API answers;
- a Pod stuck terminating on a Node whose kubelet is gone lets its job go, its node drained
  with sunk's stuck-Pod reason naming it (``k8s: sunk-stuck: ...``, sunk/translate/drains.py),
  and a Syncer lifts the drain once the Pod is gone and the Node Ready again.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import jwt
import pytest
import requests
from dropproxy import DropProxy
from kube_testns import create_namespace, purge_namespace
from procs import secret_file
from slurmtools import slurm_job, state, wait_for
from syncer_harness import NODES_UNDER_TEST, Cluster, SyncerUnderTest, restore_slurm_node
from test_scheduler import (
    create_pod,
    event_reasons,
    events_for,
    get_pod,
    gone,
    jobs_for_pod,
    placed,
    scheduler_process,
    serving,
)

from scheduler.tokens import hook_token
from sunk.hooks.auth import read_secret
from sunk.kube import client as kc
from sunk.kube.resources import NODES, PODS
from sunk.model import names
from sunk.translate import drains


def ports(base: int) -> dict[str, int]:
    return {"hooks": base, "metrics": base + 80, "probes": base + 81}


def metric(port: int, name: str, **labels: str) -> float | None:
    """The sum of the samples of ``name`` with ``labels`` on the scheduler's /metrics; None if there are none."""
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    want = [f'{k}="{v}"' for k, v in labels.items()]
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if (line.startswith(name + "{") or line.startswith(name + " ")) and all(w in line for w in want)]
    return sum(values) if values else None


def ready(port: int) -> int:
    return requests.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code


def signed(dev_cluster, lifespan: float) -> str:
    """A token as ``scontrol token`` makes one, valid for ``lifespan`` seconds from now."""
    key = (Path(dev_cluster.root) / "etc/slurm/jwt.key").read_bytes()
    now = int(time.time())
    return jwt.encode({"iat": now, "exp": now + int(lifespan), "sun": "root"}, key, algorithm="HS256")


@pytest.fixture
def namespace(kube_api):
    ns = create_namespace(kube_api)
    yield ns
    purge_namespace(kube_api, ns)


# -- item 3: a token that expires mid-run ------------------------------------------------------------------------
def test_a_token_that_expires_mid_run_is_an_outage_until_a_new_one_is_in_its_file(kube_api, dev_cluster, namespace,
                                                                                   tmp_path):
    token_file = tmp_path / "slurm.jwt"
    token_file.write_text(signed(dev_cluster, lifespan=45))
    port = ports(18300)
    proc = scheduler_process(dev_cluster, namespace, tmp_path, ports=port,
                             extra_args=(f"--slurm-auth-token-file={token_file}",))
    with serving(kube_api, dev_cluster, proc, namespace, purge=False):
        early = create_pod(kube_api, namespace)
        placed(kube_api, dev_cluster, namespace, early["metadata"]["name"])  # the token works

        # (2 s past: Slurm still takes a token in the second it expires)
        wait_for(lambda: (metric(port["metrics"], "sunk_slurm_token_expiry_seconds") or 0) < -2, 60,
                 "the token to expire", interval=1)
        late = create_pod(kube_api, namespace)
        name, uid = late["metadata"]["name"], late["metadata"]["uid"]
        event = wait_for(lambda: [e for e in events_for(kube_api, namespace, name)
                                  if e["reason"] == "SlurmAuthenticationFailed"], 30, "an Event on the waiting Pod")[0]
        assert event["type"] == "Warning" and str(token_file) in event["message"]
        time.sleep(5)  # retried meanwhile, with backoff
        assert "FailedSubmit" not in event_reasons(kube_api, namespace, name), "read as Slurm's verdict on the Pod"
        conditions = get_pod(kube_api, namespace, name)["status"].get("conditions") or []
        assert not [c for c in conditions if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"]
        assert jobs_for_pod(dev_cluster, uid) == []
        assert ready(port["probes"]) == 200  # the hook API still serves
        assert (metric(port["metrics"], "sunk_slurm_auth_failures_total") or 0) >= 1
        assert (metric(port["metrics"], "sunk_scheduler_placeholder_submissions_total", result="auth_failed") or 0) >= 1
        assert f"token file {token_file}" in proc.log.read_text(errors="replace")

        token_file.write_text(signed(dev_cluster, lifespan=3600))  # rotated
        job_id, _ = placed(kube_api, dev_cluster, namespace, name, timeout=60, what="binding after the rotation")
        assert jobs_for_pod(dev_cluster, uid) == [job_id]
        assert (metric(port["metrics"], "sunk_slurm_token_expiry_seconds") or 0) > 3000


def test_a_scheduler_that_signs_its_own_tokens_needs_no_token_file(kube_api, dev_cluster, namespace, tmp_path):
    port = ports(18400)
    key = Path(dev_cluster.root) / "etc/slurm/jwt.key"
    proc = scheduler_process(dev_cluster, namespace, tmp_path, ports=port, extra_args=(
        f"--slurm-jwt-key-file={key}", "--slurm-auth-token-file="))
    with serving(kube_api, dev_cluster, proc, namespace, purge=False):
        pod = create_pod(kube_api, namespace)
        placed(kube_api, dev_cluster, namespace, pod["metadata"]["name"])
        assert 0 < (metric(port["metrics"], "sunk_slurm_token_expiry_seconds") or 0) <= 3600


# -- item 4: a submission whose answer is lost -----------------------------------------------------------------
def test_a_submission_whose_answer_is_lost_makes_one_job(kube_api, dev_cluster, namespace, tmp_path):
    port = ports(18500)
    with DropProxy(dev_cluster.env()["SLURM_REST_URL"], method="POST", path=r".*/job/submit") as proxy:
        proc = scheduler_process(dev_cluster, namespace, tmp_path, ports=port,
                                 extra_args=(f"--slurm-api-base={proxy.url}",))
        with serving(kube_api, dev_cluster, proc, namespace, purge=False):
            pod = create_pod(kube_api, namespace)
            name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
            job_id, _ = placed(kube_api, dev_cluster, namespace, name, timeout=60)
            assert proxy.dropped == 1, "the proxy never dropped the submission's answer"
            time.sleep(3)  # a second submission would have come by now
            assert jobs_for_pod(dev_cluster, uid) == [job_id], "a second job for one Pod"
            # Adopted by the jobs informer showing the job (its next list, or the started call's read-back: no
            # lookup of the scheduler's own); never sent again.
            submissions = "sunk_scheduler_placeholder_submissions_total"
            assert metric(port["metrics"], submissions, result="unknown") == 1
            assert metric(port["metrics"], submissions, result="adopted") == 1
            assert not metric(port["metrics"], submissions, result="submitted"), "submitted a second time"


# -- item 6: the hook API serves while slurmrestd is down ------------------------------------------------------
def test_the_hook_api_keeps_serving_while_slurmrestd_is_down(kube_api, dev_cluster, namespace, tmp_path):
    port = ports(18600)
    proc = scheduler_process(dev_cluster, namespace, tmp_path, ports=port)
    secret = read_secret(secret_file(dev_cluster.run_dir, "test-hook.secret"))
    with serving(kube_api, dev_cluster, proc, namespace, purge=False):
        pod = create_pod(kube_api, namespace)
        uid = pod["metadata"]["uid"]
        job_id, _ = placed(kube_api, dev_cluster, namespace, pod["metadata"]["name"])
        headers = {"Authorization": f"Bearer {hook_token(secret, uid)}", "X-Sunk-Pod-UID": uid}
        dev_cluster.stop_component("slurmrestd")
        try:
            wait_for(lambda: metric(port["metrics"], "sunk_scheduler_slurm_cache_fresh") == 0, 30,
                     "the scheduler to see Slurm stale")
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                assert ready(port["probes"]) == 200, "the scheduler left its Service because Slurm is down"
                answer = requests.get(f"http://127.0.0.1:{port['hooks']}/api/v1/jobs/{job_id}/pod?wait=0",
                                      headers=headers, timeout=5)
                assert answer.status_code == 200 and answer.json()["exists"], answer.text
                time.sleep(1)
        finally:
            dev_cluster.start_component("slurmrestd")
        wait_for(lambda: metric(port["metrics"], "sunk_scheduler_slurm_cache_fresh") == 1, 30, "Slurm fresh again")


# -- item 1: a Pod stuck terminating on a Node whose kubelet is gone ----------------------------------------------
def node_ready(api, name: str) -> str | None:
    node = kc.get(api, NODES, name)
    return next((c["status"] for c in node["status"].get("conditions", []) if c["type"] == "Ready"), None)


def test_a_pod_stuck_on_a_lost_node_lets_its_job_go_and_a_syncer_lifts_the_drain_after(kube_api, dev_cluster,
                                                                                      namespace, tmp_path):
    slurm_node = NODES_UNDER_TEST[0]  # a Syncer of this test's own manages it (syncer_harness.py)
    k8s_node = dev_cluster.k8s_node_for(slurm_node)
    syncer_ns, run_id = create_namespace(kube_api), uuid.uuid4().hex[:8]
    cluster = Cluster(dev_cluster, kube_api, syncer_ns)
    for name in NODES_UNDER_TEST:
        restore_slurm_node(cluster, name)
    syncer = SyncerUnderTest(dev_cluster, syncer_ns, run_id, tmp_path / "syncer")
    try:
        for name in NODES_UNDER_TEST:
            cluster.create_pod(name, run_id)
            cluster.wait_pod_ready(name)
        syncer.start()
        port = ports(18700)
        proc = scheduler_process(dev_cluster, namespace, tmp_path, ports=port, extra_args=("--stuck-pod-margin=5s",))
        with serving(kube_api, dev_cluster, proc, namespace, purge=False):
            pod = create_pod(kube_api, namespace, annotations={names.ANN_REQUIRED_NODES: slurm_node}, grace=5)
            name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
            job_id, node = placed(kube_api, dev_cluster, namespace, name)
            assert node == k8s_node
            dev_cluster.stop_component("kubelet")
            try:
                kc.delete(kube_api, PODS, name, namespace)  # no kubelet will finish it: stuck Terminating
                wait_for(lambda: node_ready(kube_api, k8s_node) == "Unknown", 120, f"{k8s_node} NotReady", interval=1)
                wait_for(lambda: state(slurm_job(dev_cluster, job_id)) in ("CANCELLED", None), 60,
                         "the stuck Pod's job to be let go", interval=1)
                drained = cluster.node(slurm_node)
                # Two writers drain node3 for the same cause at the same moment: the scheduler with the stuck
                # Pod's reason, and the Syncer because the lost kubelet leaves its slurmd Pod not Ready. Slurm
                # keeps one reason, and a Syncer whose fresh read began a few ms before the scheduler's write
                # replaces it (seen in CI): either reason keeps the node out while the Node is NotReady.
                condition = f"k8s: slurmd pod {cluster.namespace}/{slurm_node} is not ready"
                stuck = drains.StuckPodDrain(namespace, name, uid, k8s_node, job_id)
                assert drained.drained and (drains.parse(drained.reason) == stuck
                                            or drained.reason == condition), drained.reason
                assert f"drained {slurm_node}" in proc.log.read_text()  # the scheduler wrote its own
                assert get_pod(kube_api, namespace, name) is not None  # still Terminating
                assert "StuckTerminating" in event_reasons(kube_api, namespace, name)
                # KillWait (30 s) later the placeholder has its node drained too (the scheduler's /drain hook
                # gives a Pod stuck on a lost Node the same stuck-Pod reason, not the placeholder's), and the
                # Syncer still sees its slurmd Pod not Ready: the node stays drained.
                time.sleep(35)
                assert cluster.node(slurm_node).drained, cluster.node(slurm_node).reason
            finally:
                dev_cluster.start_component("kubelet")
            wait_for(lambda: gone(kube_api, namespace, name), 60, "the kubelet, back, to finish the Pod")
            wait_for(lambda: node_ready(kube_api, k8s_node) == "True", 60, f"{k8s_node} Ready")
            wait_for(lambda: not cluster.node(slurm_node).drained, 60, "the Syncer to lift the drain", interval=1)
    finally:
        syncer.stop()
        purge_namespace(kube_api, syncer_ns)
        for name in NODES_UNDER_TEST:
            restore_slurm_node(cluster, name)
