"""Issue 32 items 4 and 6 against the real apiserver: its restart is an outage (one warning line per
retry, no traceback, the waiting keys go as soon as it is back), and a write RBAC refuses is logged
once and counted, not retried in a loop.

sunk-scheduler runs as the chart's ServiceAccount (rbac_harness) for a namespace of its own, with
leader election on (its Lease's renew deadline, 10 s, is longer than the restart takes); a sunk-syncer
(node3/node4, node permissions on: its Node and Pod writes and informers) runs through the restart too,
so "no traceback in any daemon's log" covers both.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from kube_testns import create_namespace, purge_namespace
from locking_harness import new_token, running_syncer
from rbac_harness import apply, apply_manifest, kubeconfig_for, rendered
from slurmtools import wait_for
from test_scheduler import bound, create_pod, end_pods, get_pod, scheduler_process

from sunk.kube import client as kc

LEASE = "sunk-scheduler-kubeerrors"
PORTS = {"hooks": 18400, "metrics": 18480, "probes": 18481}
RBAC = "scheduler-rbac.yaml"
WAKE_WITHIN = 5.0  # issue 32 item 4: every key reconciled within 5 s of the apiserver's return

pytestmark = pytest.mark.timeout(300)


def tolerant(call) -> Any:
    try:
        return call()
    except Exception:
        return None


def without_resource(docs: list[dict[str, Any]], resource: str) -> list[dict[str, Any]]:
    """The Roles and ClusterRoles of ``docs`` with ``resource`` taken out of every rule."""
    out = []
    for doc in docs:
        if doc["kind"] in ("Role", "ClusterRole"):
            rules = [{**r, "resources": [x for x in r.get("resources", []) if x != resource]}
                     for r in doc.get("rules") or []]
            doc = {**doc, "rules": [r for r in rules if r["resources"] or "nonResourceURLs" in r]}
        out.append(doc)
    return out


def terminal_errors(metrics_port: int) -> float:
    text = requests.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("sunk_reconcile_terminal_errors_total{"))


def new_log(log: Path, since: int) -> str:
    with log.open("rb") as f:
        f.seek(since)
        return f.read().decode(errors="replace")


@pytest.fixture(scope="module")
def namespace(kube_api) -> Iterator[str]:
    ns = create_namespace(kube_api)
    yield ns
    purge_namespace(kube_api, ns)


@pytest.fixture(scope="module")
def scheduler(kube_api, dev_cluster, namespace, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kubeerrors")
    docs = apply_manifest(kube_api, RBAC, leases=[LEASE])
    account = next(d["metadata"] for d in docs if d["kind"] == "ServiceAccount")
    kubeconfig = kubeconfig_for(kube_api, dev_cluster, account["namespace"], account["name"], tmp / "kubeconfig")
    proc = scheduler_process(dev_cluster, namespace, tmp, ports=PORTS, extra_args=(
        f"--kubeconfig={kubeconfig}", f"--leader-election-namespace={account['namespace']}",
        f"--leader-election-id={LEASE}"))
    proc.start()
    try:
        yield proc
    finally:
        try:
            apply_manifest(kube_api, RBAC, leases=[LEASE])  # whatever a test took away
            end_pods(kube_api, dev_cluster, namespace)
        finally:
            proc.stop()


@pytest.fixture(scope="module")
def syncer(kube_api, dev_cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kubeerrors-syncer")
    token = tmp / "token"
    token.write_text(new_token())
    with running_syncer(kube_api, dev_cluster, token, tmp, ["--node-permissions-enabled"],
                        f"sunk-syncer-kubeerrors-{uuid.uuid4().hex[:6]}") as proc:
        yield proc


def test_a_kube_apiserver_restart_is_an_outage_without_tracebacks_and_keys_go_on_its_return(
        kube_api, dev_cluster, namespace, scheduler, syncer):
    since = scheduler.log.stat().st_size
    syncer_since = syncer.log.stat().st_size
    before = create_pod(kube_api, namespace)["metadata"]["name"]  # its job starts while the apiserver is down
    dev_cluster.stop_component("kube-apiserver")
    try:
        time.sleep(3)
    finally:
        dev_cluster.start_component("kube-apiserver")
    wait_for(lambda: tolerant(lambda: kc.get_text(kube_api, "/readyz") == "ok"), 60,
             "the apiserver answering again", interval=0.2)
    back = time.monotonic()
    after = create_pod(kube_api, namespace)["metadata"]["name"]
    wait_for(lambda: tolerant(lambda: bound(kube_api, namespace, before)), 60, f"pod {before} bound", interval=0.2)
    waited_before = time.monotonic() - back
    wait_for(lambda: tolerant(lambda: bound(kube_api, namespace, after)), 60, f"pod {after} bound", interval=0.2)
    text = new_log(scheduler.log, since)
    assert "Traceback" not in text, text[-5000:]
    # A Pod whose binding failed for the outage waits for the apiserver's return, not for its grown backoff:
    # its job may take a few seconds to start (the prolog), so the bound is the wake's 5 s plus that.
    assert waited_before < WAKE_WITHIN + 10, (waited_before, text[-3000:])
    assert get_pod(kube_api, namespace, after)["spec"].get("nodeName")
    syncer_text = new_log(syncer.log, syncer_since)
    assert "Traceback" not in syncer_text, syncer_text[-5000:]
    assert syncer.proc is not None and syncer.proc.poll() is None, syncer.tail()  # (still running: no crash)


def test_a_write_rbac_refuses_is_logged_once_and_counted_not_retried_in_a_loop(
        kube_api, dev_cluster, namespace, scheduler):
    for doc in without_resource(rendered(RBAC), "pods/binding"):
        apply(kube_api, doc)
    try:
        since = scheduler.log.stat().st_size
        counted = terminal_errors(PORTS["metrics"])
        pod = create_pod(kube_api, namespace)
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        wait_for(lambda: terminal_errors(PORTS["metrics"]) > counted, 90, "a terminal error counted", interval=0.5)

        def refusals() -> int:
            return sum(1 for line in new_log(scheduler.log, since).splitlines()
                       if uid in line and "403" in line and "not retried" in line)

        settled = refusals()
        assert settled >= 1
        time.sleep(20)  # a loop would log it again within its backoff (5 ms doubling): many times by now
        later = refusals()
        text = new_log(scheduler.log, since)
        # Each change to the Pod or its job enqueues it again (one more line each): a handful, never a loop.
        assert later == settled and later <= 3, text[-5000:]
        assert "Role/ClusterRole" in text and "Traceback" not in text, text[-5000:]
        assert not bound(kube_api, namespace, name)
    finally:
        apply_manifest(kube_api, RBAC, leases=[LEASE])
