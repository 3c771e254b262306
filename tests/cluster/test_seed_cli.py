"""sunk-scheduler started with the argument list SUNK's docs show (sunk-schedule-pods-with-slurm), against real
Slurm and a real apiserver: it schedules a Pod, and its placeholders' hook calls work (issue 32, item 5).

Adapted only where the seed must name this cluster: slurmrestd's address (still without a scheme, as the seed
writes it), the watched namespace, and the three listen addresses (the seed's :8000 is the dev Syncer's port
on this host). The Pod's own namespace and the Slurm token's variable come through the environment, as the
kubelet gives them to the seed's container (POD_NAMESPACE, SLURM_TOKEN); no --hook-secret-file, no --hooks-url,
no --kubeconfig ($KUBECONFIG), no --leader-election-namespace, as in the seed.
"""

from __future__ import annotations

import time
import uuid

import pytest
from kube_testns import create_namespace, purge_namespace
from procs import Process
from slurmtools import slurm_job, started_placeholder, state, wait_for
from syncer_harness import free_port
from test_scheduler import event_reasons, gone, placed, pod_manifest, serving

from sunk.kube import client as kc
from sunk.kube.resources import PODS
from sunk.model import names

# As the seed shows them (the Pod spec's args, before the kubelet expands $(SLURM_TOKEN)).
SEED_ARGS = [
    "--health-probe-bind-address=:8081",
    "--metrics-bind-address=:8080",
    "--hooks-api-bind-address=:8000",
    "--zap-log-level=debug",
    "--components",
    "scheduler",
    "--slurm-auth-token=$(SLURM_TOKEN)",
    "--slurm-api-base=slurm-controller:6817",
    "--slurm-kill-wait=30s",
    "--watch-namespace=slurm-staging",
    "--scheduler-name=tenant-slurm-staging-slurm-scheduler",
]
SCHEDULER_NAME = "tenant-slurm-staging-slurm-scheduler"


def adapted(args: list[str], replacements: dict[str, str]) -> list[str]:
    """The seed's list with the values of ``replacements``' flags replaced, everything else as it is."""
    out = []
    for arg in args:
        flag, sep, _ = arg.partition("=")
        out.append(f"{flag}={replacements[flag]}" if sep and flag in replacements else arg)
    assert len(out) == len(args) and sum(a != b for a, b in zip(out, args, strict=True)) == len(replacements)
    return out


@pytest.fixture(scope="module")
def namespace(kube_api):
    ns = create_namespace(kube_api)
    yield ns
    purge_namespace(kube_api, ns)


@pytest.fixture(scope="module")
def seed_scheduler(kube_api, dev_cluster, namespace, tmp_path_factory):
    env = dev_cluster.env()
    ports = {"hooks": free_port(), "metrics": free_port(), "probes": free_port()}
    args = adapted(SEED_ARGS, {
        "--slurm-api-base": env["SLURM_REST_URL"].removeprefix("http://"),  # scheme-less, as the seed's
        "--watch-namespace": namespace,
        "--health-probe-bind-address": f"127.0.0.1:{ports['probes']}",
        "--metrics-bind-address": f"127.0.0.1:{ports['metrics']}",
        "--hooks-api-bind-address": f"127.0.0.1:{ports['hooks']}",
    })
    assert "://" not in args[SEED_ARGS.index("--slurm-api-base=slurm-controller:6817")]
    token = dev_cluster.jwt_file.read_text().strip()
    proc = Process("seed-scheduler", "sunk.commands.scheduler", args,
                   ready_url=f"http://127.0.0.1:{ports['probes']}/readyz", log_dir=tmp_path_factory.mktemp("seed"),
                   env={"KUBECONFIG": env["KUBECONFIG"], "POD_NAMESPACE": namespace, "SLURM_TOKEN": token,
                        "SLURM_JWT": ""})
    with serving(kube_api, dev_cluster, proc, namespace, purge=False):
        yield proc
    log = proc.log.read_text(errors="replace")
    assert token not in log


def create_seed_pod(api, namespace: str) -> dict:
    # The seed gives no --identity-policy: sunk's built-in policy has no default identity and refuses root, so
    # the Pod names its Slurm user (the dev cluster's tenant, kube).
    manifest = pod_manifest(f"seed-{uuid.uuid4().hex[:6]}", annotations={names.ANN_USER_ID: "1001"})
    manifest["spec"]["schedulerName"] = SCHEDULER_NAME
    return kc.create(api, PODS, manifest, namespace)


def test_the_seeds_command_line_schedules_a_pod(kube_api, dev_cluster, namespace, seed_scheduler):
    pod = create_seed_pod(kube_api, namespace)
    job_id, node = placed(kube_api, dev_cluster, namespace, pod["metadata"]["name"], timeout=60)
    job = slurm_job(dev_cluster, job_id)
    assert state(job) == "RUNNING" and started_placeholder(job, pod["metadata"]["uid"])
    assert node == dev_cluster.k8s_node_for(job["nodes"])
    log = seed_scheduler.log.read_text(errors="replace")
    assert "no --hook-secret-file" in log  # the seed gives none: the warning says what a made key costs
    assert "command line" not in log  # the token came from $(SLURM_TOKEN), not written on the command line


def test_the_placeholders_hook_calls_work_with_the_key_made_at_start(kube_api, dev_cluster, namespace,
                                                                   seed_scheduler):
    """scancel: the placeholder asks for the Pod's deletion and sees it go through the hook API, with tokens
    signed by the key this process made, so the job ends well before KillWait (30 s) and no node is drained."""
    pod = create_seed_pod(kube_api, namespace)
    name = pod["metadata"]["name"]
    job_id, _ = placed(kube_api, dev_cluster, namespace, name, timeout=60)
    cancelled_at = time.monotonic()
    dev_cluster.slurm("scancel", str(job_id))
    wait_for(lambda: gone(kube_api, namespace, name), 30, "the Pod to be deleted")
    assert wait_for(lambda: event_reasons(kube_api, namespace, name) & {"JobEnding", "JobCancelled"}, 10,
                    "an Event saying why")
    wait_for(lambda: state(slurm_job(dev_cluster, job_id)) == "CANCELLED"
             and "COMPLETING" not in slurm_job(dev_cluster, job_id)["job_state"], 40, "the job to finish")
    assert time.monotonic() - cancelled_at < 20
    assert ": 401 " not in seed_scheduler.log.read_text(errors="replace")  # (the hook API logs each refusal)
